// Plugin opening, request and connection helpers, and the two-process runner (see harness.h).
#include "tests/abi/harness.h"

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <utility>

namespace pact::abi_test {

namespace {

// The harness's own PACT_* variables, read once per process and then removed from the
// environment: the plugin warns about PACT_* names it does not know.
struct HarnessEnv {
  std::string pluginPath;
  bool verbose = false;
  HarnessEnv() {
    if (const char* p = std::getenv("PACT_PLUGIN_PATH")) pluginPath = p;
    const char* v = std::getenv("PACT_TEST_VERBOSE");
    verbose = v != nullptr && std::strcmp(v, "1") == 0;
    ::unsetenv("PACT_PLUGIN_PATH");
    ::unsetenv("PACT_TEST_VERBOSE");
  }
};

const HarnessEnv& harnessEnv() {
  static const HarnessEnv env;  // first use is in a forked child, never in the gtest parent
  return env;
}

}  // namespace

const std::string& pluginPath() { return harnessEnv().pluginPath; }

std::unique_ptr<NetPlugin> openPlugin(int version, int trafficClass, NetPlugin::ProfilerCallback profiler) {
  const std::string& path = harnessEnv().pluginPath;
  if (path.empty()) {
    ADD_FAILURE() << "PACT_PLUGIN_PATH is not set; run the suite with `meson test --suite abi`";
    return nullptr;
  }
  std::string error;
  auto plugin = NetPlugin::open(path, version, &error);
  if (!plugin) {
    ADD_FAILURE() << "NetPlugin::open(" << path << ", v" << version << ") failed: " << error;
    return nullptr;
  }
  EXPECT_EQ(plugin->version(), version);
  const bool quiet = !harnessEnv().verbose;
  plugin->setProfiler(profiler);
  int rc = plugin->init(trafficClass, quiet);
  if (rc != loader::kSuccess) {
    ADD_FAILURE() << "init (v" << version << ") returned " << rc;
    return nullptr;
  }
  int ndev = -1;
  rc = plugin->devices(&ndev);
  if (rc != loader::kSuccess || ndev < 1) {
    ADD_FAILURE() << "devices (v" << version << ") returned " << rc << " with ndev " << ndev;
    return nullptr;
  }
  return plugin;
}

// ---- requests -------------------------------------------------------------------------------

Completion waitRequest(NetPlugin& plugin, void* request, const Deadline& deadline) {
  Completion c;
  int done = 0;
  for (;;) {
    c.rc = plugin.test(request, &done, c.sizes);
    if (c.rc != loader::kSuccess) return c;
    if (done != 0) {
      c.done = true;
      return c;
    }
    if (deadline.expired()) {
      c.rc = kTimedOut;
      return c;
    }
  }
}

Completion expectComplete(NetPlugin& plugin, void* request, const Deadline& deadline,
                          const std::string& what) {
  Completion c = waitRequest(plugin, request, deadline);
  if (c.rc == kTimedOut) {
    ADD_FAILURE() << what << ": test() did not report done within the deadline ("
                  << deadline.elapsed().count() << " ms)";
  } else {
    EXPECT_EQ(c.rc, loader::kSuccess) << what << ": test() failed";
  }
  return c;
}

void postSend(NetPlugin& plugin, void* comm, void* data, size_t size, int tag, void* mhandle,
              const Deadline& deadline, void** request) {
  for (;;) {
    *request = nullptr;
    int rc = plugin.isend(comm, data, size, tag, mhandle, request);
    ASSERT_EQ(rc, loader::kSuccess) << "isend(" << size << " bytes, tag " << tag << ")";
    if (*request != nullptr) return;
    ASSERT_FALSE(deadline.expired()) << "isend(" << size << " bytes) kept returning a NULL request";
  }
}

void postRecv(NetPlugin& plugin, void* comm, int n, void** data, size_t* sizes, int* tags,
              void** mhandles, const Deadline& deadline, void** request) {
  for (;;) {
    *request = nullptr;
    int rc = plugin.irecv(comm, n, data, sizes, tags, mhandles, request);
    ASSERT_EQ(rc, loader::kSuccess) << "irecv(n=" << n << ", first capacity " << sizes[0] << ")";
    if (*request != nullptr) return;
    ASSERT_FALSE(deadline.expired()) << "irecv(n=" << n << ") kept returning a NULL request";
  }
}

void sendOne(NetPlugin& plugin, void* comm, void* data, size_t size, void* mhandle) {
  Deadline deadline(kOpTimeout);
  void* request = nullptr;
  ASSERT_NO_FATAL_FAILURE(postSend(plugin, comm, data, size, kTag, mhandle, deadline, &request));
  expectComplete(plugin, request, deadline, "isend of " + std::to_string(size) + " bytes");
}

void recvOne(NetPlugin& plugin, void* comm, void* data, size_t capacity, void* mhandle,
             size_t expected_size) {
  Deadline deadline(kOpTimeout);
  void* request = nullptr;
  size_t cap = capacity;
  int tag = kTag;
  ASSERT_NO_FATAL_FAILURE(
      postRecv(plugin, comm, 1, &data, &cap, &tag, &mhandle, deadline, &request));
  Completion c = expectComplete(plugin, request, deadline,
                                "irecv of " + std::to_string(expected_size) + " bytes");
  if (c.done) {
    EXPECT_EQ(c.sizes[0], static_cast<int>(expected_size))
        << "received size reported by test() (capacity " << capacity << ")";
  }
}

void transferInOneThread(NetPlugin& plugin, void* sendComm, void* recvComm, size_t size,
                         uint64_t seed) {
  HostBuffer src(size), dst(size + kGuard);
  fillPattern(src.data(), size, seed);
  std::memset(dst.data(), kPoison, dst.size());
  MemReg smr(plugin, sendComm, src.data(), src.size());
  MemReg rmr(plugin, recvComm, dst.data(), dst.size());
  ASSERT_TRUE(smr.ok() && rmr.ok());
  Deadline deadline(kOpTimeout);
  void* rreq = nullptr;
  void* sreq = nullptr;
  void* rdata = dst.data();
  size_t cap = size;
  int tag = kTag;
  void* rmh = rmr.handle();
  ASSERT_NO_FATAL_FAILURE(postRecv(plugin, recvComm, 1, &rdata, &cap, &tag, &rmh, deadline, &rreq));
  ASSERT_NO_FATAL_FAILURE(
      postSend(plugin, sendComm, src.data(), size, kTag, smr.handle(), deadline, &sreq));
  Completion sc, rc;
  rc.rc = sc.rc = loader::kSuccess;
  int done = 0;
  while ((!sc.done || !rc.done) && !deadline.expired()) {
    if (!sc.done) {
      ASSERT_EQ(sc.rc = plugin.test(sreq, &done, sc.sizes), loader::kSuccess) << "test(send)";
      sc.done = done != 0;
    }
    if (!rc.done) {
      ASSERT_EQ(rc.rc = plugin.test(rreq, &done, rc.sizes), loader::kSuccess) << "test(recv)";
      rc.done = done != 0;
    }
  }
  ASSERT_TRUE(sc.done && rc.done) << "one-thread transfer of " << size << " bytes not done after "
                                  << deadline.elapsed().count() << " ms (send done " << sc.done
                                  << ", recv done " << rc.done << ")";
  EXPECT_EQ(rc.sizes[0], static_cast<int>(size)) << "received size";
  EXPECT_TRUE(matchesPattern(dst.data(), size, seed));
  EXPECT_TRUE(isPoison(dst.data() + size, kGuard)) << "bytes after the message";
}

// ---- connections ----------------------------------------------------------------------------

void acceptPeer(NetPlugin& plugin, Channel& ch, void** recvComm, int dev) {
  *recvComm = nullptr;
  char handle[loader::kHandleSize] = {};
  void* listenComm = nullptr;
  ASSERT_EQ(plugin.listen(dev, handle, &listenComm), loader::kSuccess)
      << "listen(dev " << dev << ")";
  ASSERT_NE(listenComm, nullptr) << "listen succeeded without a listenComm";
  ASSERT_TRUE(ch.send(handle, sizeof handle)) << "could not pass the listen handle to the peer";
  Deadline deadline(kOpTimeout);
  void* comm = nullptr;
  int rc = loader::kSuccess;
  while (comm == nullptr && !deadline.expired()) {
    rc = plugin.accept(listenComm, &comm);
    if (rc != loader::kSuccess) break;
  }
  EXPECT_EQ(plugin.closeListen(listenComm), loader::kSuccess) << "closeListen";
  ASSERT_EQ(rc, loader::kSuccess) << "accept";
  ASSERT_NE(comm, nullptr) << "accept gave no recvComm within " << kOpTimeout.count() << " ms";
  *recvComm = comm;
}

void connectPeer(NetPlugin& plugin, Channel& ch, void** sendComm, int dev) {
  *sendComm = nullptr;
  char handle[loader::kHandleSize];
  ASSERT_TRUE(ch.recv(handle, sizeof handle, kOpTimeout)) << "no listen handle from the peer";
  Deadline deadline(kOpTimeout);
  void* comm = nullptr;
  int rc = loader::kSuccess;
  while (comm == nullptr && !deadline.expired()) {
    rc = plugin.connect(dev, handle, &comm);
    if (rc != loader::kSuccess) break;
  }
  ASSERT_EQ(rc, loader::kSuccess) << "connect";
  ASSERT_NE(comm, nullptr) << "connect gave no sendComm within " << kOpTimeout.count() << " ms";
  *sendComm = comm;
}

void connectLoopback(NetPlugin& plugin, int dev, bool nullDevHandlePtr, void** sendComm,
                     void** recvComm) {
  *sendComm = *recvComm = nullptr;
  char handle[loader::kHandleSize] = {};
  void* listenComm = nullptr;
  ASSERT_EQ(plugin.listen(dev, handle, &listenComm), loader::kSuccess)
      << "listen(dev " << dev << ")";
  ASSERT_NE(listenComm, nullptr) << "listen succeeded without a listenComm";
  Deadline deadline(kOpTimeout);
  void* sc = nullptr;
  void* rc = nullptr;
  int connect_rc = loader::kSuccess, accept_rc = loader::kSuccess;
  long rounds = 0;
  while ((sc == nullptr || rc == nullptr) && !deadline.expired()) {
    if (sc == nullptr) connect_rc = plugin.connect(dev, handle, &sc, nullDevHandlePtr);
    if (rc == nullptr) accept_rc = plugin.accept(listenComm, &rc, nullDevHandlePtr);
    if (connect_rc != loader::kSuccess || accept_rc != loader::kSuccess) break;
    ++rounds;
  }
  EXPECT_EQ(plugin.closeListen(listenComm), loader::kSuccess) << "closeListen";
  EXPECT_EQ(connect_rc, loader::kSuccess) << "connect (single thread)";
  EXPECT_EQ(accept_rc, loader::kSuccess) << "accept (single thread)";
  if (sc != nullptr && rc == nullptr) {
    EXPECT_EQ(plugin.closeSend(sc), loader::kSuccess);
  }
  if (rc != nullptr && sc == nullptr) {
    EXPECT_EQ(plugin.closeRecv(rc), loader::kSuccess);
  }
  ASSERT_TRUE(sc != nullptr && rc != nullptr)
      << "single-thread connect/accept did not finish after " << rounds << " rounds ("
      << deadline.elapsed().count() << " ms): sendComm " << sc << ", recvComm " << rc;
  *sendComm = sc;
  *recvComm = rc;
}

void notifyDone(Channel& ch) {
  const char done = 'D';
  EXPECT_TRUE(ch.send(&done, 1)) << "peer gone before the end-of-test note";
}

void awaitDone(Channel& ch) {
  char done = 0;
  // No assertion: when the receiver failed it says so itself; the sender then just closes.
  if (ch.recv(&done, 1, kOpTimeout) && done != 'D') ADD_FAILURE() << "bad end-of-test note";
}

void barrier(Channel& ch) {
  const char note = 'B';
  ASSERT_TRUE(ch.send(&note, 1)) << "barrier: peer gone";
  char got = 0;
  ASSERT_TRUE(ch.recv(&got, 1, kOpTimeout)) << "barrier: peer did not arrive";
  ASSERT_EQ(got, 'B') << "barrier: unexpected note";
}

// ---- processes ------------------------------------------------------------------------------

PeerPair::PeerPair(int version, PeerBody a, PeerBody b, std::chrono::milliseconds watchdog)
    : version_(version) {
  auto [pa, pb] = Channel::pair();
  auto [ca, xa] = Channel::pair();
  auto [cb, xb] = Channel::pair();
  peer_a_ = std::move(pa), peer_b_ = std::move(pb);
  control_a_ = std::move(ca), child_a_ = std::move(xa);
  control_b_ = std::move(cb), child_b_ = std::move(xb);
  const std::string v = "v" + std::to_string(version);
  a_.emplace(ForkPeer::start("A(" + v + ")",
                             [this, body = std::move(a)] {
                               PeerIo io{version_, &peer_a_, &child_a_};
                               body(io);
                             },
                             {watchdog, {&peer_b_, &control_a_, &control_b_, &child_b_}}));
  b_.emplace(ForkPeer::start("B(" + v + ")",
                             [this, body = std::move(b)] {
                               PeerIo io{version_, &peer_b_, &child_b_};
                               body(io);
                             },
                             {watchdog, {&peer_a_, &control_a_, &child_a_, &control_b_}}));
  peer_a_.close();
  peer_b_.close();
  child_a_.close();
  child_b_.close();
}

void PeerPair::wait(std::chrono::milliseconds timeout) { test::waitAll({&*a_, &*b_}, timeout); }

void PeerPair::expectSuccess(std::chrono::milliseconds timeout) {
  wait(timeout);
  EXPECT_TRUE(a_->outcome().ok()) << "peer " << a_->name() << " " << a_->outcome().describe();
  EXPECT_TRUE(b_->outcome().ok()) << "peer " << b_->name() << " " << b_->outcome().describe();
}

MetricsSnapshot::MetricsSnapshot(NetPlugin& plugin) {
  const std::string path = "/tmp/pact-abi-metrics-" + std::to_string(::getpid()) + ".prom";
  auto write = reinterpret_cast<int (*)(const char*)>(plugin.symbol("pact_plugin_metrics_write"));
  EXPECT_TRUE(write != nullptr && write(path.c_str()) == 0) << "pact_plugin_metrics_write";
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] != '#') lines_.push_back(line);
  std::remove(path.c_str());
}

uint64_t MetricsSnapshot::total(const std::string& family, const std::string& filter) const {
  uint64_t sum = 0;
  for (const std::string& l : lines_)
    if (l.rfind(family + "{", 0) == 0 && l.find(filter) != std::string::npos)
      sum += std::strtoull(l.c_str() + l.rfind(' ') + 1, nullptr, 10);
  return sum;
}

void killBWhenBothReady(PeerPair& pair) {
  char note = 0;
  ASSERT_TRUE(pair.controlA().recv(&note, 1, kOpTimeout * 2)) << "survivor did not get ready";
  ASSERT_TRUE(pair.controlB().recv(&note, 1, kOpTimeout * 2)) << "victim did not get ready";
  const char killing = 'K';
  ASSERT_TRUE(pair.controlA().send(&killing, 1)) << "survivor already gone";
  pair.b().kill(SIGKILL);
  const auto& killed = pair.b().wait(kOpTimeout);
  EXPECT_TRUE(killed.killedBy(SIGKILL)) << "victim " << killed.describe();
  pair.wait();
  EXPECT_TRUE(pair.a().outcome().ok()) << "survivor " << pair.a().outcome().describe();
}

void runInChild(const std::string& name, const std::function<void()>& body,
                std::chrono::milliseconds timeout) {
  ForkPeer child = ForkPeer::start(name, body, {kChildWatchdog, {}});
  const auto& outcome = child.wait(timeout);
  EXPECT_TRUE(outcome.ok()) << "child " << name << " " << outcome.describe();
}

void runConnectedPair(int version, const std::function<void(NetPlugin&, void*, PeerIo&)>& recvSide,
                      const std::function<void(NetPlugin&, void*, PeerIo&)>& sendSide) {
  PeerPair pair(
      version,
      [&](PeerIo& io) {
        auto plugin = openPlugin(io.version);
        ASSERT_TRUE(plugin);
        void* comm = nullptr;
        ASSERT_NO_FATAL_FAILURE(acceptPeer(*plugin, *io.peer, &comm));
        recvSide(*plugin, comm, io);
        notifyDone(*io.peer);
        EXPECT_EQ(plugin->closeRecv(comm), loader::kSuccess) << "closeRecv";
      },
      [&](PeerIo& io) {
        auto plugin = openPlugin(io.version);
        ASSERT_TRUE(plugin);
        void* comm = nullptr;
        ASSERT_NO_FATAL_FAILURE(connectPeer(*plugin, *io.peer, &comm));
        sendSide(*plugin, comm, io);
        awaitDone(*io.peer);
        EXPECT_EQ(plugin->closeSend(comm), loader::kSuccess) << "closeSend";
      });
  pair.expectSuccess();
}

pact_comm_stats_t statsOf(NetPlugin& plugin, void* comm) {
  pact_comm_stats_t s{};
  if (auto fn = ext<pact_comm_stats_fn>(plugin, "pact_comm_stats")) {
    EXPECT_EQ(fn(comm, &s), 0);
  }
  return s;
}

}  // namespace pact::abi_test
