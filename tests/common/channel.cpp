#include "tests/common/channel.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

namespace pact::test {

Channel::~Channel() { close(); }

Channel& Channel::operator=(Channel&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

std::pair<Channel, Channel> Channel::pair() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    std::perror("pact test: socketpair");
    std::abort();
  }
  return {Channel(fds[0]), Channel(fds[1])};
}

void Channel::close() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

bool Channel::send(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::send(fd_, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool Channel::readable(std::chrono::milliseconds timeout) {
  pollfd pfd{fd_, POLLIN, 0};
  for (;;) {
    int r = ::poll(&pfd, 1, static_cast<int>(timeout.count()));
    if (r < 0 && errno == EINTR) continue;
    return r > 0;
  }
}

bool Channel::recv(void* data, size_t n, std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  char* p = static_cast<char*>(data);
  while (n > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() < 0) left = std::chrono::milliseconds(0);
    if (!readable(left)) return false;
    ssize_t r = ::recv(fd_, p, n, 0);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r <= 0) return false;  // EOF: the peer is gone
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

}  // namespace pact::test
