#include "coll_boot.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace pact::perf::coll {
namespace {

int g_rank = 0;
// Rank 0 of a forked job: its ranks' pids (reap() and fatal() wait for them) and the store's
// descriptors (fatal() closes them).
std::vector<pid_t> g_children;
std::vector<int> g_storeFds;

// A forked job's rank 0 that fails: closes the store (the other ranks see the job end), waits up
// to 5 s for them, then kills what is left, so the launcher never returns before its ranks.
void abandonRanks() {
  for (int fd : g_storeFds) close(fd);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!g_children.empty()) {
    std::erase_if(g_children, [](pid_t pid) { return waitpid(pid, nullptr, WNOHANG) != 0; });
    if (g_children.empty()) break;
    if (std::chrono::steady_clock::now() > until) {
      for (pid_t pid : g_children) kill(pid, SIGKILL), (void)waitpid(pid, nullptr, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // a bounded wait for their exits
  }
}

// The integer in variable `name`, or `fallback` when unset; a malformed value is fatal.
long envInt(const char* name, long fallback, long lo, long hi) {
  const char* v = std::getenv(name);
  if (v == nullptr) return fallback;
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v, &end, 10);
  if (*v == '\0' || *end != '\0' || errno != 0 || x < lo || x > hi)
    fatal(std::string(name) + "=" + v + " is not an integer in [" + std::to_string(lo) + ", " +
          std::to_string(hi) + "]");
  return x;
}

void sendAll(int fd, const void* p, size_t n) {
  auto* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t k = ::send(fd, c, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) fatal(std::string("the job's store: send failed: ") + std::strerror(errno) +
                      " (a rank left the job)");
    c += k;
    n -= static_cast<size_t>(k);
  }
}

void recvAll(int fd, void* p, size_t n) {
  auto* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t k = ::recv(fd, c, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k == 0) fatal("the job's store: a rank left the job (connection closed)");
    if (k < 0) fatal(std::string("the job's store: recv failed: ") + std::strerror(errno));
    c += k;
    n -= static_cast<size_t>(k);
  }
}

void sendBlob(int fd, const std::string& s) {
  const uint32_t n = static_cast<uint32_t>(s.size());
  sendAll(fd, &n, sizeof n);
  sendAll(fd, s.data(), s.size());
}

std::string recvBlob(int fd) {
  uint32_t n = 0;
  recvAll(fd, &n, sizeof n);
  if (n > (64u << 20)) fatal("the job's store: a message of " + std::to_string(n) + " bytes");
  std::string s(n, '\0');
  recvAll(fd, s.data(), n);
  return s;
}

sockaddr_in resolve(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr)
    fatal("cannot resolve the store's address " + host);
  sockaddr_in a = *reinterpret_cast<sockaddr_in*>(res->ai_addr);
  freeaddrinfo(res);
  a.sin_port = htons(static_cast<uint16_t>(port));
  return a;
}

void noDelay(int fd) {
  int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace

void fatal(const std::string& msg) {
  std::fflush(stdout);
  std::fprintf(stderr, "pact-perf coll[rank %d]: %s\n", g_rank, msg.c_str());
  std::fflush(stderr);
  abandonRanks();
  _exit(1);
}

Launch detectLaunch(int np) {
  Launch l;
  if (np > 0) {
    l.how = "fork";
    l.size = np;
    l.addr = "127.0.0.1";
    return l;
  }
  struct Source {
    const char* how;
    const char* rank;
    const char* size;
    const char* job;
  };
  constexpr Source kSources[] = {
      {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_MCA_ess_base_jobid"},
      {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_JOB_ID"},
      {"torchrun", "RANK", "WORLD_SIZE", nullptr},
  };
  for (const Source& s : kSources) {
    if (std::getenv(s.rank) == nullptr) continue;
    l.how = s.how;
    l.size = static_cast<int>(envInt(s.size, -1, 1, 1 << 16));
    if (l.size < 0) fatal(std::string(s.rank) + " is set but " + s.size + " is not");
    l.rank = static_cast<int>(envInt(s.rank, 0, 0, l.size - 1));
    const char* addr = std::getenv("MASTER_ADDR");
    l.addr = addr != nullptr ? addr : "127.0.0.1";
    const long job = s.job != nullptr ? envInt(s.job, 0, 0, (1L << 62)) : 0;
    l.port = static_cast<int>(envInt("MASTER_PORT", 29500 + job % 1000, 1, 65535));
    g_rank = l.rank;
    return l;
  }
  l.how = "single";
  return l;
}

Job Job::start(Launch l, double timeout_s) {
  Job j(std::move(l));
  if (j.l_.size == 1) return j;
  if (j.l_.rank == 0) {
    j.listen_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    (void)setsockopt(j.listen_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a = resolve(j.l_.addr, j.l_.port);
    if (bind(j.listen_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(j.listen_, 1024) != 0)
      fatal("the job's store cannot listen on " + j.l_.addr + ":" + std::to_string(j.l_.port) +
            ": " + std::strerror(errno));
    socklen_t len = sizeof a;
    getsockname(j.listen_, reinterpret_cast<sockaddr*>(&a), &len);
    j.l_.port = ntohs(a.sin_port);
    if (j.l_.how == "fork") {
      for (int r = 1; r < j.l_.size; ++r) {
        const pid_t pid = fork();
        if (pid < 0) fatal(std::string("fork failed: ") + std::strerror(errno));
        if (pid == 0) {
          (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
          close(j.listen_);
          j.listen_ = -1;
          g_children.clear();
          j.l_.rank = r;
          g_rank = r;
          break;
        }
        g_children.push_back(pid);
      }
      if (!g_children.empty()) g_storeFds.push_back(j.listen_);
    }
  }
  if (j.l_.rank == 0) {
    j.peers_.assign(static_cast<size_t>(j.l_.size), -1);
    for (int n = 1; n < j.l_.size; ++n) {
      pollfd p{j.listen_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(timeout_s * 1000)) != 1)
        fatal("only " + std::to_string(n - 1) + " of " + std::to_string(j.l_.size - 1) +
              " ranks joined the store within " + std::to_string(timeout_s) + " s");
      const int fd = accept4(j.listen_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) fatal(std::string("the store's accept failed: ") + std::strerror(errno));
      noDelay(fd);
      int32_t r = -1;
      recvAll(fd, &r, sizeof r);
      if (r <= 0 || r >= j.l_.size || j.peers_[static_cast<size_t>(r)] != -1)
        fatal("a rank joined the store as rank " + std::to_string(r) + " (ranks 1.." +
              std::to_string(j.l_.size - 1) + ", each once)");
      j.peers_[static_cast<size_t>(r)] = fd;
      if (!g_children.empty()) g_storeFds.push_back(fd);
    }
    return j;
  }
  const sockaddr_in a = resolve(j.l_.addr, j.l_.port);
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    j.server_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (connect(j.server_, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0) break;
    close(j.server_);
    if (std::chrono::steady_clock::now() > until)
      fatal("cannot reach the job's store at " + j.l_.addr + ":" + std::to_string(j.l_.port) +
            " within " + std::to_string(timeout_s) + " s (is rank 0 running? MASTER_ADDR/PORT)");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // rank 0 is not up yet
  }
  noDelay(j.server_);
  const int32_t r = j.l_.rank;
  sendAll(j.server_, &r, sizeof r);
  return j;
}

Job::Job(Job&& o) noexcept
    : l_(std::move(o.l_)), listen_(o.listen_), peers_(std::move(o.peers_)), server_(o.server_) {
  o.listen_ = o.server_ = -1;
  o.peers_.clear();
}

Job::~Job() {
  for (int fd : peers_)
    if (fd >= 0) close(fd);
  if (server_ >= 0) close(server_);
  if (listen_ >= 0) close(listen_);
}

std::vector<std::string> Job::allgather(const std::string& mine) {
  std::vector<std::string> all(static_cast<size_t>(l_.size));
  if (l_.size == 1) {
    all[0] = mine;
    return all;
  }
  if (l_.rank != 0) {
    sendBlob(server_, mine);
    for (auto& s : all) s = recvBlob(server_);
    return all;
  }
  all[0] = mine;
  for (int r = 1; r < l_.size; ++r) all[static_cast<size_t>(r)] = recvBlob(peers_[static_cast<size_t>(r)]);
  std::string packed;
  for (const auto& s : all) {
    const uint32_t n = static_cast<uint32_t>(s.size());
    packed.append(reinterpret_cast<const char*>(&n), sizeof n).append(s);
  }
  for (int r = 1; r < l_.size; ++r) sendAll(peers_[static_cast<size_t>(r)], packed.data(), packed.size());
  return all;
}

bool Job::alive() {
  std::vector<pollfd> fds;
  if (server_ >= 0) fds.push_back({server_, POLLIN, 0});
  for (int fd : peers_)
    if (fd >= 0) fds.push_back({fd, POLLIN, 0});
  if (fds.empty() || poll(fds.data(), fds.size(), 0) <= 0) return true;
  for (const pollfd& p : fds) {
    if (p.revents == 0) continue;
    if ((p.revents & (POLLERR | POLLHUP)) != 0) return false;
    // Readable: a faster rank's next store message (fine), or the end of a closed connection.
    char c;
    if (recv(p.fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0) return false;
  }
  return true;
}

bool Job::reap() {
  bool ok = true;
  for (pid_t pid : g_children) {
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    ok = ok && WIFEXITED(st) && WEXITSTATUS(st) == 0;
  }
  g_children.clear();
  return ok;
}

}  // namespace pact::perf::coll
