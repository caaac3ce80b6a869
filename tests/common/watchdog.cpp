#include "tests/common/watchdog.h"

#include <unistd.h>

#include <cstdio>

namespace pact::test {

Watchdog::Watchdog(std::string what, std::chrono::milliseconds limit)
    : what_(std::move(what)), limit_(limit), thread_([this] { run(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    disarmed_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Watchdog::run() {
  std::unique_lock<std::mutex> lock(mu_);
  if (cv_.wait_for(lock, limit_, [this] { return disarmed_; })) return;
  // Expired. Write with one unbuffered call so the line survives _exit.
  char line[512];
  int n = std::snprintf(line, sizeof line, "watchdog: %s still running after %lld ms (pid %d)\n",
                        what_.c_str(), static_cast<long long>(limit_.count()),
                        static_cast<int>(::getpid()));
  if (n > 0) {
    ssize_t ignored = ::write(STDERR_FILENO, line, static_cast<size_t>(n));
    (void)ignored;
  }
  _exit(kWatchdogExitCode);
}

}  // namespace pact::test
