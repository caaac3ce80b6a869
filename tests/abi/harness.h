// Shared helpers of the `abi` suite: a small fake NCCL host driving the built plugin through
// pact::loader::NetPlugin, in forked processes.
//
// Process model: the gtest process never dlopens the plugin. Every test forks its peers with
// PeerPair (two children, "recv" = A and "send" = B by convention) or ForkPeer (one child); each
// child opens PACT_PLUGIN_PATH itself, exchanges listen handles over a socketpair, and reports
// through gtest EXPECT/ASSERT (see tests/common/fork_peer.h for exit codes).
//
// All helpers that can fail use gtest assertions and are meant to be called inside
// ASSERT_NO_FATAL_FAILURE(...). Every loop is bounded by a Deadline; nothing sleeps.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pact/nccl_ext.h"
#include "plugin/loader/net_plugin.h"
#include "tests/common/channel.h"
#include "tests/common/fork_peer.h"
#include "tests/common/watchdog.h"

namespace pact::abi_test {

using loader::NetPlugin;
using test::Channel;
using test::Deadline;
using test::ForkPeer;
using namespace std::chrono_literals;

// Bytes past a receive buffer that must stay as poisoned (a receive never writes past its size).
inline constexpr size_t kGuard = 4096;
// How long a survivor may take to see its peer's death (an error from test()), and to close.
inline constexpr auto kDetectBound = std::chrono::milliseconds(10000);

// The plugin's own control API (include/pact/nccl_ext.h), looked up in the loaded plugin (a
// failure, and nullptr, when it is not exported).
template <typename F>
F ext(NetPlugin& plugin, const char* name) {
  auto f = reinterpret_cast<F>(plugin.symbol(name));
  EXPECT_NE(f, nullptr) << name << " is not exported";
  return f;
}
// pact_comm_stats of comm (zeros, and a failure, when the call fails).
pact_comm_stats_t statsOf(NetPlugin& plugin, void* comm);

inline constexpr std::chrono::milliseconds kOpTimeout = 20s;      // one handshake or transfer
inline constexpr std::chrono::milliseconds kChildWatchdog = 45s;  // whole child body
inline constexpr std::chrono::milliseconds kPairTimeout = 60s;    // parent waiting for children
inline constexpr int kTag = 1;                                    // the sender's "rank"
inline constexpr unsigned char kPoison = 0xA5;
inline constexpr int kTimedOut = -1;  // Completion::rc when the deadline passed

// gtest parameter name for versions: "v8".."v12".
std::string versionName(const ::testing::TestParamInfo<int>& info);

// Opens PACT_PLUGIN_PATH at exactly `version`, calls init() and checks devices() >= 1.
// Returns nullptr after ADD_FAILURE on any error. Plugin logs go to stderr when
// PACT_TEST_VERBOSE=1.
// The plugin under test (PACT_PLUGIN_PATH, read once).
const std::string& pluginPath();
// trafficClass goes to init (v11/v12 config) and to connect (v10 config); profiler (v10+, may be
// null) is the profiler callback init gets.
std::unique_ptr<NetPlugin> openPlugin(int version, int trafficClass = -1,
                                      NetPlugin::ProfilerCallback profiler = nullptr);

// Owning page-aligned host buffer.
class HostBuffer {
 public:
  explicit HostBuffer(size_t size);
  ~HostBuffer();
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
};

// regMr(NCCL_PTR_HOST) in the constructor (EXPECTs success), deregMr in the destructor (EXPECTs
// success). The comm must outlive it.
class MemReg {
 public:
  MemReg(NetPlugin& plugin, void* comm, void* data, size_t size);
  ~MemReg();
  MemReg(const MemReg&) = delete;
  MemReg& operator=(const MemReg&) = delete;
  void* handle() const { return mhandle_; }
  bool ok() const { return ok_; }

 private:
  NetPlugin& plugin_;
  void* comm_;
  void* mhandle_ = nullptr;
  bool ok_ = false;
};

// Deterministic per-(seed, offset) byte pattern; different seeds give different contents.
void fillPattern(void* dst, size_t n, uint64_t seed);
::testing::AssertionResult matchesPattern(const void* p, size_t n, uint64_t seed);
::testing::AssertionResult isPoison(const void* p, size_t n);  // every byte == kPoison

// ---- requests -------------------------------------------------------------------------------
struct Completion {
  int rc = kTimedOut;  // last test() result, or kTimedOut
  bool done = false;
  int sizes[loader::kMaxRecvs];
  Completion() {
    for (int& s : sizes) s = -1;  // so that an unwritten size is visible
  }
};

// Calls test() until done, an error, or the deadline.
Completion waitRequest(NetPlugin& plugin, void* request, const Deadline& deadline);
// Like waitRequest, and EXPECTs rc == 0 and done; `what` names the request in messages.
Completion expectComplete(NetPlugin& plugin, void* request, const Deadline& deadline,
                          const std::string& what);
// isend until it returns a request (NULL means "retry"); ASSERTs rc == 0 and no timeout.
void postSend(NetPlugin& plugin, void* comm, void* data, size_t size, int tag, void* mhandle,
              const Deadline& deadline, void** request);
// irecv of n buffers until it returns a request; ASSERTs as postSend.
void postRecv(NetPlugin& plugin, void* comm, int n, void** data, size_t* sizes, int* tags,
              void** mhandles, const Deadline& deadline, void** request);
// One-buffer send/recv, posted and completed; EXPECTs the received size.
void sendOne(NetPlugin& plugin, void* comm, void* data, size_t size, void* mhandle);
void recvOne(NetPlugin& plugin, void* comm, void* data, size_t capacity, void* mhandle,
             size_t expected_size);

// In one thread: register buffers on both comms, post irecv and isend of `size` bytes, test both
// alternately until done, verify size, contents and the guard after the message.
void transferInOneThread(NetPlugin& plugin, void* sendComm, void* recvComm, size_t size,
                         uint64_t seed);

// ---- metrics ----------------------------------------------------------------------------------
// The plugin's metrics now: pact_plugin_metrics_write into a file of this process, read back
// (what the exposition says, as a scraper would see it).
class MetricsSnapshot {
 public:
  explicit MetricsSnapshot(NetPlugin& plugin);
  // The sum of family's samples ("pact_device_closes_abandoned_total") whose line holds filter.
  uint64_t total(const std::string& family, const std::string& filter = "") const;

 private:
  std::vector<std::string> lines_;
};

// ---- connections ----------------------------------------------------------------------------
// Receiver side: listen(dev), send the handle over ch, accept until the comm exists, closeListen.
void acceptPeer(NetPlugin& plugin, Channel& ch, void** recvComm, int dev = 0);
// Sender side: receive the handle from ch, connect until the comm exists.
void connectPeer(NetPlugin& plugin, Channel& ch, void** sendComm, int dev = 0);
// One thread, like NCCL's GDR probe: listen, then alternate connect and accept until both exist.
void connectLoopback(NetPlugin& plugin, int dev, bool nullDevHandlePtr, void** sendComm,
                     void** recvComm);

// End-of-test rendezvous so that a sender does not close while its data is still in flight:
// the receiver calls notifyDone after verifying everything; the sender waits for it.
void notifyDone(Channel& ch);
void awaitDone(Channel& ch);
// Both processes call it; returns when both have reached it (ASSERTs on timeout or EOF).
void barrier(Channel& ch);

// ---- two-process runner ---------------------------------------------------------------------
struct PeerIo {
  int version;
  Channel* peer;    // to the other child
  Channel* parent;  // to the gtest process (PeerPair::control)
};
using PeerBody = std::function<void(PeerIo&)>;

// Forks A then B, each running its body with its own channels. The parent may talk to them
// with control(), kill them with a()/b(), and must call wait().
class PeerPair {
 public:
  PeerPair(int version, PeerBody a, PeerBody b,
           std::chrono::milliseconds watchdog = kChildWatchdog);
  ForkPeer& a() { return *a_; }
  ForkPeer& b() { return *b_; }
  Channel& controlA() { return control_a_; }
  Channel& controlB() { return control_b_; }
  void wait(std::chrono::milliseconds timeout = kPairTimeout);
  // wait() and EXPECT that both children succeeded.
  void expectSuccess(std::chrono::milliseconds timeout = kPairTimeout);

 private:
  int version_;
  Channel peer_a_, peer_b_, control_a_, child_a_, control_b_, child_b_;
  std::optional<ForkPeer> a_, b_;
};

// The kill of a peer-death test: waits for A's and B's ready note, tells A (the survivor) that B
// is being killed (BEFORE the kill, so an error A sees with no note readable is from before it),
// SIGKILLs B and EXPECTs it died of that, waits for A and EXPECTs it succeeded.
void killBWhenBothReady(PeerPair& pair);

// Forks one child running body(plugin-less) and EXPECTs that it succeeds.
void runInChild(const std::string& name, const std::function<void()>& body,
                std::chrono::milliseconds timeout = kPairTimeout);
// Both sides open the plugin, connect (A accepts, B connects), run their part, close and exit.
void runConnectedPair(int version,
                      const std::function<void(NetPlugin&, void* recvComm, PeerIo&)>& recvSide,
                      const std::function<void(NetPlugin&, void* sendComm, PeerIo&)>& sendSide);

}  // namespace pact::abi_test
