// pact::test::Channel: one end of a connected AF_UNIX stream socketpair, used to exchange small
// fixed-size messages (connection handles, counts, "ready" notes) between a test's processes.
//
// Ownership: a Channel owns its fd and closes it on destruction; move-only.
// Blocking: every receive takes a timeout and fails (returns false) on timeout, on EOF (the peer
// process exited or closed its end) or on a short read, so a dead peer never stalls a test.
// Fork rules: a pair made before fork() exists in every process that forks after it. A process
// that is not meant to hold an end must close() it, otherwise EOF is never seen (ForkPeer's
// close_in_child option does that for children).
#pragma once

#include <chrono>
#include <cstddef>
#include <type_traits>
#include <utility>

namespace pact::test {

class Channel {
 public:
  Channel() = default;
  explicit Channel(int fd) : fd_(fd) {}
  ~Channel();
  Channel(Channel&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Channel& operator=(Channel&& other) noexcept;
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  // Two connected ends (SOCK_CLOEXEC). Aborts the test binary on failure (resource exhaustion).
  static std::pair<Channel, Channel> pair();

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  void close();

  // Writes all n bytes; false on error (EPIPE when the peer is gone; SIGPIPE is not raised).
  bool send(const void* data, size_t n);
  // Reads exactly n bytes within timeout; false on timeout, EOF or error.
  bool recv(void* data, size_t n, std::chrono::milliseconds timeout);
  // True when at least one byte (or EOF) can be read within timeout (0 = just look).
  bool readable(std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

  template <class T>
  bool sendValue(const T& value) {
    static_assert(std::is_trivially_copyable_v<T>);
    return send(&value, sizeof(T));
  }
  template <class T>
  bool recvValue(T* value, std::chrono::milliseconds timeout) {
    static_assert(std::is_trivially_copyable_v<T>);
    return recv(value, sizeof(T), timeout);
  }

 private:
  int fd_ = -1;
};

}  // namespace pact::test
