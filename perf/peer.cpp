#include "peer.h"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <errno.h>  // program_invocation_short_name

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace pact::perf {
namespace {

int g_rank = 0;
int g_fd = -1;
pid_t g_child = -1;
unsigned g_watch_seconds = 0;
const char* volatile g_phase = "startup";

void onAlarm(int) {
  // Only async-signal-safe calls here.
  char buf[256];
  int n = std::snprintf(buf, sizeof(buf),
                        "%s[rank %d]: watchdog: step \"%s\" did not finish within %u s\n",
                        program_invocation_short_name, g_rank, g_phase, g_watch_seconds);
  if (n > 0) (void)!write(STDERR_FILENO, buf, static_cast<size_t>(n));
  _exit(2);
}

}  // namespace

const char* resultName(int rc) {
  switch (rc) {
    case 0: return "ncclSuccess";
    case 1: return "ncclUnhandledCudaError";
    case 2: return "ncclSystemError";
    case 3: return "ncclInternalError";
    case 4: return "ncclInvalidArgument";
    case 5: return "ncclInvalidUsage";
    case 6: return "ncclRemoteError";
    case 7: return "ncclInProgress";
    case 8: return "ncclTimeout";
    default: return "ncclResult(?)";
  }
}

void die(const std::string& msg) {
  std::fflush(stdout);
  std::fprintf(stderr, "%s[rank %d]: %s\n", program_invocation_short_name, g_rank, msg.c_str());
  std::fflush(stderr);
  if (g_child > 0) kill(g_child, SIGKILL);
  _exit(1);
}

void check(int rc, const char* what) {
  if (rc == 0) return;
  die(std::string(what) + " failed: " + resultName(rc) + " (" + std::to_string(rc) + ")");
}

int forkPeer() {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    die(std::string("socketpair: ") + std::strerror(errno));
  }
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) die(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    g_rank = 1;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);  // parent already gone
    close(sv[0]);
    g_fd = sv[1];
  } else {
    g_rank = 0;
    g_child = pid;
    close(sv[1]);
    g_fd = sv[0];
  }
  struct sigaction sa {};
  sa.sa_handler = onAlarm;
  sigaction(SIGALRM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return g_rank;
}

bool reapPeer() {
  if (g_child <= 0) return true;
  int status = 0;
  while (waitpid(g_child, &status, 0) < 0) {
    if (errno != EINTR) return false;
  }
  g_child = -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status) == 0;
  if (WIFSIGNALED(status)) {
    std::fprintf(stderr, "pact-perf: peer killed by signal %d\n", WTERMSIG(status));
  }
  return false;
}

int myRank() {
  return g_rank;
}

void ctlSend(const void* data, size_t len) {
  const char* p = static_cast<const char*>(data);
  while (len > 0) {
    ssize_t n = send(g_fd, p, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) die(std::string("control channel send: ") + std::strerror(errno));
    p += n;
    len -= static_cast<size_t>(n);
  }
}

void ctlRecv(void* data, size_t len) {
  char* p = static_cast<char*>(data);
  while (len > 0) {
    ssize_t n = recv(g_fd, p, len, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) die("peer process exited (control channel closed)");
    if (n < 0) die(std::string("control channel recv: ") + std::strerror(errno));
    p += n;
    len -= static_cast<size_t>(n);
  }
}

void barrier() {
  char token = 'b';
  ctlSend(&token, 1);
  ctlRecv(&token, 1);
  if (token != 'b') die("control channel out of step");
}

bool ctlReadable(int timeout_ms) {
  pollfd p{g_fd, POLLIN, 0};
  for (;;) {
    const int n = ::poll(&p, 1, timeout_ms);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) die(std::string("control channel poll: ") + std::strerror(errno));
    return n > 0;
  }
}

void watchdog(unsigned seconds, const char* phase) {
  g_phase = phase;
  g_watch_seconds = seconds;
  alarm(seconds);
}

double now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace pact::perf
