#include "transport/control_socket.h"
#include "ucx/devices.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace pact::transport {

namespace {

Error sysError(const char* what) {
  return Error{Status::kSystemError, std::string(what) + ": " + std::strerror(errno)};
}

void setNoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace

namespace {
int keepaliveSeconds(std::chrono::microseconds peerTimeout) {
  return std::max(3, static_cast<int>(peerTimeout.count() / 1000000));
}
}  // namespace

void enableKeepalive(int fd, std::chrono::microseconds peerTimeout, bool userTimeout) {
  // A link that dies closes nothing: TCP keepalive turns silence into a socket error within
  // about peerTimeout (idle half of it, then three probes over the other half).
  const int total = keepaliveSeconds(peerTimeout);
  int on = 1, idle = std::max(1, total / 2), intvl = std::max(1, (total - idle) / 3), cnt = 3;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
  if (userTimeout) setUserTimeout(fd, peerTimeout);
}

void setUserTimeout(int fd, std::chrono::microseconds peerTimeout) {
  unsigned userTimeoutMs = static_cast<unsigned>(keepaliveSeconds(peerTimeout)) * 1000u;
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &userTimeoutMs, sizeof userTimeoutMs);
}

void disableKeepalive(int fd) {
  int off = 0;
  auto userTimeoutMs = static_cast<unsigned>(kHeldUserTimeout.count());
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &off, sizeof off);
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &userTimeoutMs, sizeof userTimeoutMs);
}

void graceUserTimeout(int fd, std::chrono::milliseconds grace) {
  tcp_info info{};
  socklen_t len = sizeof info;
  // The user timeout runs from the oldest unacknowledged data; the last acknowledgement is no later.
  const uint64_t since = ::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) == 0 ? info.tcpi_last_ack_recv : 0;
  auto userTimeoutMs = static_cast<unsigned>(std::min<uint64_t>(since + static_cast<uint64_t>(grace.count()),
                                                                static_cast<uint64_t>(kHeldUserTimeout.count())));
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &userTimeoutMs, sizeof userTimeoutMs);
}

bool heardRecently(int fd, std::chrono::milliseconds within) {
  tcp_info info{};
  socklen_t len = sizeof info;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return true;  // nothing to wait for
  return info.tcpi_unacked == 0 && info.tcpi_last_ack_recv < static_cast<uint32_t>(within.count());
}

socklen_t toSockaddr(const wire::ListenHandle& h, sockaddr_storage* out) {
  *out = sockaddr_storage{};
  if (h.family == AF_INET) {
    auto* s = reinterpret_cast<sockaddr_in*>(out);
    s->sin_family = AF_INET;
    s->sin_port = htons(h.port);
    std::memcpy(&s->sin_addr, h.addr, 4);
    return sizeof(sockaddr_in);
  }
  auto* s = reinterpret_cast<sockaddr_in6*>(out);
  s->sin6_family = AF_INET6;
  s->sin6_port = htons(h.port);
  std::memcpy(&s->sin6_addr, h.addr, 16);
  return sizeof(sockaddr_in6);
}

void fillAddress(const sockaddr_storage& addr, wire::ListenHandle* h) {
  h->family = addr.ss_family;
  if (addr.ss_family == AF_INET) {
    const auto* s = reinterpret_cast<const sockaddr_in*>(&addr);
    h->port = ntohs(s->sin_port);
    std::memcpy(h->addr, &s->sin_addr, 4);
  } else {
    const auto* s = reinterpret_cast<const sockaddr_in6*>(&addr);
    h->port = ntohs(s->sin6_port);
    std::memcpy(h->addr, &s->sin6_addr, 16);
  }
}

Result<ControlSocket> ControlSocket::connectTo(const wire::ListenHandle& h) {
  sockaddr_storage ss;
  const socklen_t len = toSockaddr(h, &ss);
  ScopedFd fd(::socket(h.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return sysError("socket");
  setNoDelay(fd.get());
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0 && errno != EINPROGRESS)
    return sysError("connect");
  return ControlSocket(std::move(fd));
}

Status ControlSocket::flush() {
  while (!out_.empty()) {
    ssize_t n = ::send(fd_.get(), out_.data(), out_.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINPROGRESS || errno == ENOTCONN)
        return Status::kInProgress;
      return errno == ECONNREFUSED ? Status::kRefused : Status::kRemoteError;  // nothing listens
    }
    out_.erase(out_.begin(), out_.begin() + n);
  }
  return Status::kOk;
}

Result<std::optional<Frame>> ControlSocket::poll() {
  uint8_t buf[4096];
  for (;;) {
    // Stop reading once a whole frame is buffered: the rest stays for the next call.
    if (in_.size() >= wire::kHeaderSize) {
      auto hdr = wire::decodeHeader(std::span(in_).first(wire::kHeaderSize));
      if (!hdr.ok()) return hdr.error();
      if (in_.size() >= wire::kHeaderSize + hdr->length) {
        Frame f{*hdr, std::vector<uint8_t>(in_.begin() + wire::kHeaderSize,
                                           in_.begin() + static_cast<long>(wire::kHeaderSize + hdr->length))};
        in_.erase(in_.begin(), in_.begin() + static_cast<long>(wire::kHeaderSize + hdr->length));
        return std::optional<Frame>(std::move(f));
      }
    }
    ssize_t n = ::recv(fd_.get(), buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0) return Error{Status::kRemoteError, "control connection closed by the peer"};
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOTCONN) return std::optional<Frame>();
      if (errno == EINTR) continue;
      return Error{Status::kRemoteError, std::string("control connection: ") + std::strerror(errno)};
    }
    in_.insert(in_.end(), buf, buf + n);
  }
}

Result<std::string> resolveListenIp(const std::string& spec) {
  in6_addr probe{};
  if (inet_pton(AF_INET, spec.c_str(), &probe) == 1 || inet_pton(AF_INET6, spec.c_str(), &probe) == 1) return spec;
  if (spec.empty()) return Error{Status::kInvalidArgument, "listen: an empty address"};
  const auto interfaces = ucx::interfaceAddresses();
  if (auto it = interfaces.find(spec); it != interfaces.end()) return it->second;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(spec.c_str(), nullptr, &hints, &res) == 0) {
    const addrinfo* pick = nullptr;  // the first IPv4 address, else the first IPv6 one
    for (const addrinfo* r = res; r != nullptr && (pick == nullptr || pick->ai_family != AF_INET); r = r->ai_next)
      if (r->ai_family == AF_INET || (r->ai_family == AF_INET6 && pick == nullptr)) pick = r;
    char text[NI_MAXHOST] = {};
    const bool found = pick != nullptr && ::getnameinfo(pick->ai_addr, pick->ai_addrlen, text, sizeof text, nullptr, 0,
                                                        NI_NUMERICHOST) == 0;
    ::freeaddrinfo(res);
    if (found) return std::string(text);
  }
  return Error{Status::kInvalidArgument, "listen '" + spec +
                                             "': not an IP address, an interface of this host with an address, "
                                             "or a host name it resolves"};
}

bool isWildcard(const std::string& ip) { return ip == "0.0.0.0" || ip == "::"; }

Result<Listener> listenOn(const std::string& ip, uint16_t port) {
  Listener l;
  auto* sin = reinterpret_cast<sockaddr_in*>(&l.addr);
  auto* sin6 = reinterpret_cast<sockaddr_in6*>(&l.addr);
  socklen_t len;
  if (inet_pton(AF_INET, ip.c_str(), &sin->sin_addr) == 1) {
    sin->sin_family = AF_INET;
    len = sizeof(sockaddr_in);
  } else if (inet_pton(AF_INET6, ip.c_str(), &sin6->sin6_addr) == 1) {
    sin6->sin6_family = AF_INET6;
    len = sizeof(sockaddr_in6);
  } else {
    return Error{Status::kInvalidArgument, "not an IP address: '" + ip + "'"};
  }
  sin->sin_port = htons(port);  // the port sits at the same offset in sockaddr_in and _in6
  l.fd.reset(::socket(l.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!l.fd.valid()) return sysError("socket");
  if (::bind(l.fd.get(), reinterpret_cast<sockaddr*>(&l.addr), len) != 0) return sysError("bind");
  if (::listen(l.fd.get(), 1024) != 0) return sysError("listen");
  if (::getsockname(l.fd.get(), reinterpret_cast<sockaddr*>(&l.addr), &len) != 0)
    return sysError("getsockname");
  return l;
}

std::string formatAddress(const sockaddr_storage& addr) {
  char ip[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET6) {
    const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &sin6->sin6_addr, ip, sizeof(ip));
    return "[" + std::string(ip) + "]:" + std::to_string(ntohs(sin6->sin6_port));
  }
  const auto* sin = reinterpret_cast<const sockaddr_in*>(&addr);
  inet_ntop(AF_INET, &sin->sin_addr, ip, sizeof(ip));
  return std::string(ip) + ":" + std::to_string(ntohs(sin->sin_port));
}

std::string formatAddress(const wire::ListenHandle& h) {
  sockaddr_storage ss;
  (void)toSockaddr(h, &ss);
  return formatAddress(ss);
}

std::string hostOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  std::string host = colon == std::string::npos ? address : address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return host;
}

Result<wire::ListenHandle> parseAddress(const std::string& text) {
  const auto bad = [&](const char* why) {
    return Error{Status::kInvalidArgument,
                 "address '" + text + "': " + why + " (expected ip:port or [ip6]:port)"};
  };
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) return bad("no port");
  const std::string host = hostOf(text);
  const std::string portText = text.substr(colon + 1);
  char* end = nullptr;
  const unsigned long port = std::strtoul(portText.c_str(), &end, 10);
  if (portText.empty() || *end != 0 || port == 0 || port > 65535) return bad("bad port");
  wire::ListenHandle h;
  h.port = static_cast<uint16_t>(port);
  if (inet_pton(AF_INET, host.c_str(), h.addr) == 1) {
    h.family = AF_INET;
  } else if (inet_pton(AF_INET6, host.c_str(), h.addr) == 1) {
    h.family = AF_INET6;
  } else {
    return bad("not an IP address");
  }
  return h;
}

Result<ScopedFd> acceptOne(int listenFd) {
  int fd = ::accept4(listenFd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED)
      return ScopedFd();
    return sysError("accept");
  }
  setNoDelay(fd);
  return ScopedFd(fd);
}

}  // namespace pact::transport
