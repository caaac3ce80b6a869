// ForkPeer: runs a piece of a gtest test in a forked child process, so that a test can have real
// remote peers (that it may SIGKILL), and so that a crash or hang in code under test becomes a
// test failure instead of taking the test binary down.
//
// In the child: a Watchdog is armed (options.watchdog), the channels named in close_in_child are
// closed, the body runs, and the child _exits with 0 when the current gtest test has no failure,
// 1 when an EXPECT/ASSERT failed in the child (gtest prints the failure from the child, so it
// appears in the log), 2 when the body threw, kWatchdogExitCode when the watchdog fired. The child
// never returns into gtest and never runs atexit handlers.
//
// Rules: fork before anything that starts threads or opens the code under test (dlopen) in the
// parent. Use from the gtest main thread only. The destructor SIGKILLs and reaps a child that is
// still running, so a failing ASSERT in the parent cannot leak processes.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "tests/common/channel.h"

namespace pact::test {

struct ChildOutcome {
  enum class Kind { kRunning, kExited, kSignaled, kTimedOut };
  Kind kind = Kind::kRunning;
  int code = 0;    // exit status when kExited
  int signal = 0;  // terminating signal when kSignaled (kTimedOut: we sent SIGKILL)
  bool ok() const { return kind == Kind::kExited && code == 0; }
  bool killedBy(int sig) const { return kind == Kind::kSignaled && signal == sig; }
  std::string describe() const;
};

struct ForkOptions {
  std::chrono::milliseconds watchdog{60000};
  std::vector<Channel*> close_in_child;  // ends that belong to other processes
};

class ForkPeer {
 public:
  static ForkPeer start(std::string name, std::function<void()> body, ForkOptions options = {});
  ForkPeer(ForkPeer&& other) noexcept;
  ForkPeer& operator=(ForkPeer&&) = delete;
  ForkPeer(const ForkPeer&) = delete;
  ForkPeer& operator=(const ForkPeer&) = delete;
  ~ForkPeer();

  pid_t pid() const { return pid_; }
  int pidfd() const { return pidfd_; }  // readable once the child has ended
  const std::string& name() const { return name_; }
  bool finished() const { return outcome_.kind != ChildOutcome::Kind::kRunning; }
  const ChildOutcome& outcome() const { return outcome_; }

  // Sends sig (default: a real SIGKILL). Does not reap; call wait() afterwards.
  void kill(int sig = 9);
  // Waits for the child to end; after timeout it is SIGKILLed, reaped and reported as kTimedOut.
  const ChildOutcome& wait(std::chrono::milliseconds timeout);
  // Reaps the child if it has ended (non-blocking). True when finished.
  bool poll();

 private:
  ForkPeer(std::string name, pid_t pid, int pidfd)
      : name_(std::move(name)), pid_(pid), pidfd_(pidfd) {}
  void reap(bool timed_out);

  std::string name_;
  pid_t pid_ = -1;
  int pidfd_ = -1;
  ChildOutcome outcome_;
};

// Waits for all peers within timeout. As soon as one ends unsuccessfully (failure, crash,
// watchdog), the remaining ones get `grace` to end on their own and are then SIGKILLed, so a
// failing child does not make its partner wait for its own watchdog.
void waitAll(std::initializer_list<ForkPeer*> peers, std::chrono::milliseconds timeout,
             std::chrono::milliseconds grace = std::chrono::milliseconds(3000));

}  // namespace pact::test
