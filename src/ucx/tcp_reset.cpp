#include "ucx/tcp_reset.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

namespace pact::ucx {

namespace {

std::string linkOf(int fd) {
  char buf[64];
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = ::readlink(path.c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// The numeric address of a socket's end (local or peer); empty when not an IP socket.
std::string addressOf(int fd, bool peer) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  const int rc = peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len)
                      : ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  if (rc != 0) return {};
  char text[INET6_ADDRSTRLEN] = "";
  if (ss.ss_family == AF_INET)
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&ss)->sin_addr, text, sizeof text);
  else if (ss.ss_family == AF_INET6)
    ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr, text, sizeof text);
  return text;
}

bool isTcp(int fd, bool* listening) {
  int type = 0, accepting = 0;
  socklen_t len = sizeof type;
  if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) return false;
  len = sizeof accepting;
  *listening = ::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) == 0 && accepting != 0;
  return true;
}

// The fds an epoll set watches ("tfd:" lines of its fdinfo).
std::vector<int> watchedBy(int epfd) {
  std::vector<int> out;
  std::ifstream in("/proc/self/fdinfo/" + std::to_string(epfd));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("tfd:", 0) != 0) continue;
    std::istringstream fields(line.substr(4));
    int fd = -1;
    if (fields >> fd) out.push_back(fd);
  }
  return out;
}

// Never destroyed: a plugin's sessions may be destroyed by its own static destructors at exit,
// after a function-local static here would be gone.
std::mutex& notUcxMu() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::vector<int>& notUcx() {
  static auto* fds = new std::vector<int>;
  return *fds;
}

}  // namespace

void markNotUcx(int epollFd, bool on) {
  std::lock_guard lock(notUcxMu());
  if (on)
    notUcx().push_back(epollFd);
  else
    std::erase(notUcx(), epollFd);
}

int resetTcpConnections(const std::string& localIp, const std::string& peerIp) {
  std::vector<int> skip;
  {
    std::lock_guard lock(notUcxMu());
    skip = notUcx();
  }
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  std::vector<int> epolls;
  while (const dirent* e = ::readdir(dir)) {
    const int fd = std::atoi(e->d_name);
    if (e->d_name[0] == '.' || fd == ::dirfd(dir)) continue;
    if (std::find(skip.begin(), skip.end(), fd) == skip.end() && linkOf(fd) == "anon_inode:[eventpoll]")
      epolls.push_back(fd);
  }
  ::closedir(dir);
  int reset = 0;
  for (int ep : epolls) {
    // UCX's: the set holds a TCP listener on the rail's address (its tcp interfaces listen there)
    // and, in it or in the epoll sets nested in it (one per interface), the connections.
    std::vector<int> fds = watchedBy(ep);
    bool ucxOnRail = false;
    for (int fd : fds) {
      bool listening = false;
      ucxOnRail = ucxOnRail || (isTcp(fd, &listening) && listening && addressOf(fd, false) == localIp);
    }
    if (!ucxOnRail) continue;
    for (size_t i = 0, n = fds.size(); i < n; ++i)
      if (std::find(epolls.begin(), epolls.end(), fds[i]) != epolls.end())
        for (int inner : watchedBy(fds[i])) fds.push_back(inner);
    for (int fd : fds) {
      bool listening = false;
      if (isTcp(fd, &listening) && !listening && addressOf(fd, false) == localIp && addressOf(fd, true) == peerIp &&
          ::shutdown(fd, SHUT_RDWR) == 0)
        ++reset;
    }
  }
  return reset;
}

}  // namespace pact::ucx
