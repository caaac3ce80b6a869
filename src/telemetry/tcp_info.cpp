#include "telemetry/tcp_info.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <mutex>
#include <set>

#include "telemetry/exposition.h"
#include "telemetry/shared.h"

namespace pact::telemetry {
namespace {

struct Conn {
  std::string device, local, remote;
  tcp_info info{};
};

std::string addrText(const sockaddr_storage& a) {
  char ip[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (a.ss_family == AF_INET) {
    const auto* s = reinterpret_cast<const sockaddr_in*>(&a);
    inet_ntop(AF_INET, &s->sin_addr, ip, sizeof ip);
    port = ntohs(s->sin_port);
    return std::string(ip) + ":" + std::to_string(port);
  }
  const auto* s = reinterpret_cast<const sockaddr_in6*>(&a);
  inet_ntop(AF_INET6, &s->sin6_addr, ip, sizeof ip);
  port = ntohs(s->sin6_port);
  return "[" + std::string(ip) + "]:" + std::to_string(port);
}

// The interface holding each local address ("10.77.0.1" -> "pa0"), for the devices named.
std::map<std::string, std::string> addressOwners(const std::set<std::string>& devices) {
  std::map<std::string, std::string> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || devices.count(i->ifa_name) == 0) continue;
    char ip[INET6_ADDRSTRLEN] = "";
    if (i->ifa_addr->sa_family == AF_INET)
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, ip, sizeof ip);
    else if (i->ifa_addr->sa_family == AF_INET6)
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr, ip, sizeof ip);
    if (ip[0] != '\0') out[ip] = i->ifa_name;
  }
  freeifaddrs(list);
  return out;
}

std::string ipOf(const sockaddr_storage& a) {
  char ip[INET6_ADDRSTRLEN] = "";
  if (a.ss_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&a)->sin_addr, ip, sizeof ip);
  else
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&a)->sin6_addr, ip, sizeof ip);
  return ip;
}

// Every connected TCP socket of the process on one of the devices, by socket inode.
std::map<unsigned long, Conn> connections(const std::set<std::string>& devices) {
  std::map<unsigned long, Conn> out;
  const auto owners = addressOwners(devices);
  if (owners.empty()) return out;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return out;
  const int self = dirfd(d);
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const int fd = std::atoi(e->d_name);
    if (fd == self) continue;
    char target[64] = "";
    const std::string link = std::string("/proc/self/fd/") + e->d_name;
    const ssize_t n = readlink(link.c_str(), target, sizeof target - 1);
    unsigned long inode = 0;
    if (n <= 0 || std::sscanf(target, "socket:[%lu]", &inode) != 1) continue;
    int type = 0, proto = 0;
    socklen_t len = sizeof type;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) continue;
    len = sizeof proto;
    if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &len) != 0 || proto != IPPROTO_TCP) continue;
    sockaddr_storage local{}, remote{};
    socklen_t ll = sizeof local, rl = sizeof remote;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0) continue;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&remote), &rl) != 0) continue;  // listening, unconnected
    auto owner = owners.find(ipOf(local));
    if (owner == owners.end()) continue;
    Conn c{owner->second, addrText(local), addrText(remote), {}};
    len = sizeof c.info;
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &c.info, &len) != 0) continue;
    out.emplace(inode, std::move(c));
  }
  closedir(d);
  return out;
}

// What connections no longer open had retransmitted, per device, and the last look at the open
// ones: the process's (shared.h), never destroyed, as the last metrics file is written at exit,
// after static destructors ran.
using Seen = TcpSeen;
Seen& seen() { return shared().tcp; }

}  // namespace

std::string tcpText(const std::vector<std::string>& devices) {
  const std::set<std::string> names(devices.begin(), devices.end());
  const auto now = connections(names);
  Seen& st = seen();
  std::lock_guard lock(st.mu);
  // A connection of these devices seen last time and gone now has closed: what it retransmitted
  // stays in its device's total.
  for (auto it = st.open.begin(); it != st.open.end();) {
    if (names.count(it->second.first) != 0 && now.count(it->first) == 0) {
      st.closedRetransmits[it->second.first] += it->second.second;
      it = st.open.erase(it);
    } else {
      ++it;
    }
  }
  std::map<std::string, uint64_t> total = st.closedRetransmits, open;
  for (const auto& [inode, c] : now) {
    st.open[inode] = {c.device, c.info.tcpi_total_retrans};
    ++open[c.device];
  }
  // Every device seen so far keeps its total, also once it is gone (the last metrics file is
  // written after the devices closed): the closed connections' and the last look at the others.
  for (const auto& [inode, seenConn] : st.open) total[seenConn.first] += seenConn.second;
  for (const std::string& d : names)
    if (total.count(d) != 0) (void)open[d];  // read now, none open: 0
  std::string out;
  auto family = [&](const char* name, const char* type, const char* help) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  };
  if (!total.empty()) {
    family("pact_tcp_retransmits_total", "counter",
           "segments TCP retransmitted on the device's connections of this process (TCP_INFO tcpi_total_retrans), closed ones included");
    for (const auto& [d, v] : total)
      out += "pact_tcp_retransmits_total{device=\"" + escapeLabelValue(d) + "\"} " + std::to_string(v) + "\n";
    family("pact_tcp_connections", "gauge", "TCP connections of this process open on the device now");
    for (const auto& [d, v] : open)
      out += "pact_tcp_connections{device=\"" + escapeLabelValue(d) + "\"} " + std::to_string(v) + "\n";
  }
  struct PerConn {
    const char* name;
    const char* help;
    uint64_t (*value)(const tcp_info&);
  };
  const PerConn perConn[] = {
      {"pact_tcp_conn_retransmits", "the connection's retransmitted segments so far (tcpi_total_retrans)",
       [](const tcp_info& i) { return static_cast<uint64_t>(i.tcpi_total_retrans); }},
      {"pact_tcp_conn_rtt_us", "the connection's smoothed round-trip time (tcpi_rtt)",
       [](const tcp_info& i) { return static_cast<uint64_t>(i.tcpi_rtt); }},
      {"pact_tcp_conn_rttvar_us", "the connection's round-trip time variation (tcpi_rttvar)",
       [](const tcp_info& i) { return static_cast<uint64_t>(i.tcpi_rttvar); }},
      {"pact_tcp_conn_cwnd_segments", "the connection's congestion window (tcpi_snd_cwnd)",
       [](const tcp_info& i) { return static_cast<uint64_t>(i.tcpi_snd_cwnd); }},
      {"pact_tcp_conn_unacked_segments", "segments sent and not yet acknowledged (tcpi_unacked)",
       [](const tcp_info& i) { return static_cast<uint64_t>(i.tcpi_unacked); }},
  };
  if (!now.empty())
    for (const PerConn& f : perConn) {
      family(f.name, "gauge", f.help);
      for (const auto& [inode, c] : now)
        out += std::string(f.name) + "{device=\"" + escapeLabelValue(c.device) + "\",local=\"" +
               escapeLabelValue(c.local) + "\",remote=\"" + escapeLabelValue(c.remote) + "\"} " +
               std::to_string(f.value(c.info)) + "\n";
    }
  return out;
}

}  // namespace pact::telemetry
