// Time limits for tests.
//
// Deadline: a steady-clock point; cheap to copy, used to bound every polling loop.
// Watchdog: a timer thread that ends the whole process when a test body hangs. On expiry it
// prints "watchdog: <what> still running after N ms" to stderr and calls _exit(kWatchdogExitCode)
// (no destructors, no atexit: the hung code may hold any lock). Destroying the Watchdog disarms
// it and joins the thread. Meant for forked children (ForkPeer arms one in every child); in the
// gtest parent process prefer ForkPeer::wait timeouts.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace pact::test {

inline constexpr int kWatchdogExitCode = 86;

class Deadline {
 public:
  using Clock = std::chrono::steady_clock;
  explicit Deadline(std::chrono::milliseconds budget)
      : start_(Clock::now()), end_(start_ + budget) {}
  bool expired() const { return Clock::now() >= end_; }
  std::chrono::milliseconds remaining() const {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end_ - Clock::now());
    return left.count() > 0 ? left : std::chrono::milliseconds(0);
  }
  std::chrono::milliseconds elapsed() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start_);
  }

 private:
  Clock::time_point start_, end_;
};

class Watchdog {
 public:
  Watchdog(std::string what, std::chrono::milliseconds limit);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  void run();

  std::string what_;
  std::chrono::milliseconds limit_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool disarmed_ = false;
  std::thread thread_;
};

}  // namespace pact::test
