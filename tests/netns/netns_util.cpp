// Script runner and namespace entry of the netns suite (see netns_util.h).
#include "tests/netns/netns_util.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <regex>

#include "perf/netns.h"
#include "tests/common/watchdog.h"

namespace pact::netns_test {

using test::Deadline;

const std::string& scriptPath() {
  static const std::string path = [] {
    std::string p;
    if (const char* s = std::getenv("PACT_NETNS_SCRIPT")) p = s;
    ::unsetenv("PACT_NETNS_SCRIPT");
    return p;
  }();
  return path;
}

ScriptResult runScript(const std::vector<std::string>& args, std::chrono::milliseconds timeout) {
  ScriptResult result;
  const std::string& script = scriptPath();
  if (script.empty()) {
    result.output = "PACT_NETNS_SCRIPT is not set (run the suite with `meson test --suite netns`)";
    return result;
  }
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    result.output = std::string("pipe2: ") + std::strerror(errno);
    return result;
  }
  std::vector<std::string> argvStore{script};
  argvStore.insert(argvStore.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argvStore) argv.push_back(a.data());
  argv.push_back(nullptr);

  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) {
    result.output = std::string("fork: ") + std::strerror(errno);
    ::close(fds[0]);
    ::close(fds[1]);
    return result;
  }
  if (pid == 0) {
    ::setpgid(0, 0);  // its own group, so that a timeout kills ip/tc/nft children too
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::execv(script.c_str(), argv.data());
    std::fprintf(stderr, "execv %s: %s\n", script.c_str(), std::strerror(errno));
    _exit(127);
  }
  ::setpgid(pid, pid);  // also here: no race with the child's own call
  ::close(fds[1]);
  Deadline deadline(timeout);
  char buf[4096];
  for (;;) {
    pollfd pfd{fds[0], POLLIN, 0};
    int r = ::poll(&pfd, 1, static_cast<int>(deadline.remaining().count()));
    if (r < 0 && errno == EINTR) continue;
    if (r == 0 || deadline.expired()) {
      result.timedOut = true;
      break;
    }
    ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: the script and everything it started closed the pipe
    result.output.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  if (result.timedOut) ::kill(-pid, SIGKILL);
  // After EOF the script has exited or is about to; a timed-out one was just SIGKILLed.
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid, &status, 0);
  } while (r < 0 && errno == EINTR);
  if (!result.timedOut && r == pid && WIFEXITED(status)) result.exitCode = WEXITSTATUS(status);
  return result;
}

namespace {

struct CheckState {
  std::optional<std::string> unavailable;
  std::string failure;
};

const CheckState& checkState() {
  static const CheckState state = [] {
    CheckState s;
    if (scriptPath().empty()) {
      s.failure = "PACT_NETNS_SCRIPT is not set (run the suite with `meson test --suite netns`)";
      return s;
    }
    ScriptResult r = runScript({"check"});
    if (r.exitCode == 0) return s;
    if (r.exitCode == 77) {
      std::string why = r.output;
      while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
      s.unavailable = why;
    } else {
      s.failure = "`" + scriptPath() + " check` " +
                  (r.timedOut ? std::string("timed out")
                              : "exited with " + std::to_string(r.exitCode)) +
                  ": " + r.output;
    }
    return s;
  }();
  return state;
}

}  // namespace

const std::optional<std::string>& unavailableReason() { return checkState().unavailable; }
const std::string& checkFailure() { return checkState().failure; }

void enterNamespace(const std::string& ns, const std::string& expectLink) {
  const std::string error = netns::enterNamespace(ns, expectLink);
  ASSERT_TRUE(error.empty()) << error;
}

uint64_t linkCounter(const std::string& dev, const std::string& counter) {
  const std::string path = "/sys/class/net/" + dev + "/statistics/" + counter;
  std::ifstream in(path);
  uint64_t v = 0;
  if (!(in >> v)) {
    ADD_FAILURE() << "cannot read " << path;
    return 0;
  }
  return v;
}

long long lossDrops(const std::string& side) {
  ScriptResult r = runScript({"run", side, "nft", "list", "table", "inet", "pact_loss"});
  if (r.exitCode != 0) {
    ADD_FAILURE() << "nft list table inet pact_loss in " << side << ": " << r.output;
    return -1;
  }
  static const std::regex packets("packets ([0-9]+)");
  long long sum = 0;
  bool any = false;
  for (std::sregex_iterator it(r.output.begin(), r.output.end(), packets), end; it != end; ++it) {
    sum += std::stoll((*it)[1].str());
    any = true;
  }
  if (!any) {
    ADD_FAILURE() << "no counter in the loss table of " << side << ": " << r.output;
    return -1;
  }
  return sum;
}

void expectFastRailFavoured(const std::function<std::array<uint64_t, 2>()>& run) {
  std::string seen;
  for (int attempt = 1; attempt <= 3; ++attempt) {
    const std::array<uint64_t, 2> rx = run();
    if (::testing::Test::HasFailure()) return;
    if (rx[1] >= 2 * rx[0]) return;
    seen += " [" + std::to_string(rx[1]) + " vs " + std::to_string(rx[0]) + "]";
  }
  ADD_FAILURE() << "pa1 (1 Gbit/s) vs pa0 (100 Mbit/s) bytes, three runs:" << seen;
}

}  // namespace pact::netns_test
