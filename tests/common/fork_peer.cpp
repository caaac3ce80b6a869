#include "tests/common/fork_peer.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>

#include "tests/common/watchdog.h"

namespace pact::test {

std::string ChildOutcome::describe() const {
  switch (kind) {
    case Kind::kRunning:
      return "still running";
    case Kind::kExited:
      if (code == kWatchdogExitCode) return "exited by its watchdog (hang)";
      return "exited with code " + std::to_string(code);
    case Kind::kSignaled:
      return std::string("killed by signal ") + std::to_string(signal) + " (" +
             ::strsignal(signal) + ")";
    case Kind::kTimedOut:
      return "did not end in time and was SIGKILLed";
  }
  return "?";
}

namespace {

[[noreturn]] void runChild(const std::string& name, const std::function<void()>& body,
                           const ForkOptions& options) {
  for (Channel* c : options.close_in_child) c->close();
  int code = 0;
  {
    Watchdog watchdog("child '" + name + "'", options.watchdog);
    try {
      body();
      code = ::testing::Test::HasFailure() ? 1 : 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child '%s': exception: %s\n", name.c_str(), e.what());
      code = 2;
    } catch (...) {
      std::fprintf(stderr, "child '%s': unknown exception\n", name.c_str());
      code = 2;
    }
  }
  if (code != 0) std::fprintf(stderr, "child '%s' (pid %d) failed\n", name.c_str(), ::getpid());
  std::fflush(nullptr);
  _exit(code);
}

}  // namespace

ForkPeer ForkPeer::start(std::string name, std::function<void()> body, ForkOptions options) {
  std::fflush(nullptr);  // or buffered parent output would be printed again by the child
  pid_t pid = ::fork();
  if (pid < 0) {
    std::perror("pact test: fork");
    std::abort();
  }
  if (pid == 0) runChild(name, body, options);
  // Raw syscall: glibc 2.36's <sys/pidfd.h> lacks C linkage for C++ callers.
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) {
    std::perror("pact test: pidfd_open");
    ::kill(pid, SIGKILL);
    std::abort();
  }
  return ForkPeer(std::move(name), pid, pidfd);
}

ForkPeer::ForkPeer(ForkPeer&& other) noexcept
    : name_(std::move(other.name_)),
      pid_(std::exchange(other.pid_, -1)),
      pidfd_(std::exchange(other.pidfd_, -1)),
      outcome_(other.outcome_) {}

ForkPeer::~ForkPeer() {
  if (pid_ > 0 && !finished()) {
    ::kill(pid_, SIGKILL);
    reap(true);
  }
  if (pidfd_ >= 0) ::close(pidfd_);
}

void ForkPeer::kill(int sig) {
  if (pid_ > 0 && !finished()) ::kill(pid_, sig);
}

void ForkPeer::reap(bool timed_out) {
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &status, 0);
  } while (r < 0 && errno == EINTR);
  if (timed_out) {
    outcome_.kind = ChildOutcome::Kind::kTimedOut;
    outcome_.signal = SIGKILL;
  } else if (r == pid_ && WIFEXITED(status)) {
    outcome_.kind = ChildOutcome::Kind::kExited;
    outcome_.code = WEXITSTATUS(status);
  } else if (r == pid_ && WIFSIGNALED(status)) {
    outcome_.kind = ChildOutcome::Kind::kSignaled;
    outcome_.signal = WTERMSIG(status);
  } else {
    outcome_.kind = ChildOutcome::Kind::kExited;
    outcome_.code = 255;
  }
}

bool ForkPeer::poll() {
  if (finished()) return true;
  pollfd pfd{pidfd_, POLLIN, 0};
  if (::poll(&pfd, 1, 0) > 0) reap(false);
  return finished();
}

const ChildOutcome& ForkPeer::wait(std::chrono::milliseconds timeout) {
  if (finished()) return outcome_;
  Deadline deadline(timeout);
  pollfd pfd{pidfd_, POLLIN, 0};
  for (;;) {
    int r = ::poll(&pfd, 1, static_cast<int>(deadline.remaining().count()));
    if (r > 0) {
      reap(false);
      return outcome_;
    }
    if (r < 0 && errno == EINTR) continue;
    if (deadline.expired()) break;
  }
  std::fprintf(stderr, "pact test: child '%s' (pid %d) did not end within %lld ms, killing it\n",
               name_.c_str(), static_cast<int>(pid_), static_cast<long long>(timeout.count()));
  ::kill(pid_, SIGKILL);
  reap(true);
  return outcome_;
}

void waitAll(std::initializer_list<ForkPeer*> peers, std::chrono::milliseconds timeout,
             std::chrono::milliseconds grace) {
  Deadline overall(timeout);
  std::optional<Deadline> after_failure;
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<ForkPeer*> running;
    for (ForkPeer* p : peers) {
      if (p->poll()) {
        if (!p->outcome().ok() && !after_failure) after_failure.emplace(grace);
        continue;
      }
      running.push_back(p);
    }
    if (running.empty()) return;
    auto left = overall.remaining();
    if (after_failure) left = std::min(left, after_failure->remaining());
    if (left.count() == 0) {
      for (ForkPeer* p : running) p->wait(std::chrono::milliseconds(0));
      return;
    }
    for (ForkPeer* p : running) fds.push_back({p->pidfd(), POLLIN, 0});
    int r = ::poll(fds.data(), fds.size(), static_cast<int>(left.count()));
    if (r < 0 && errno != EINTR) return;
  }
}

}  // namespace pact::test
