// netns suite, rail failover: a comm over a virtual device of two rails (pa0+pa1 in pactA fused by
// makeVDevice, pb0+pb1 in pactB; ci/netns.sh up --pairs 2) loses a rail in the middle of an
// NCCL-like stream of 4 MiB messages (kWindow in flight, each in its own slot, every message
// checked byte-exact in its own receive), through `ci/netns.sh link IDX down` (a cut: carrier
// off, routes gone) or `ci/netns.sh blackhole IDX on` (packets vanish, links stay up).
//
// The faults come from the gtest process: the receiver (A, pactA) tells it through the control
// channel how many messages it has checked at the points the test names, and the parent strikes
// then, mid-stream; the stream goes on. Just before each fault the parent sends the sender (B) a
// note, so that B times the plugin's reaction (pact_comm_rails, sampled while B waits for its
// sends) from the fault. A fault that lasts (a rail down for 2 s) is the one wait the parent
// measures itself, cut short when the stream ends first.
//
// PACT_RAIL_TIMEOUT is set to 100ms on both sides (the default, set so that the bounds here stay
// true if the default moves).
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "pact/nccl_ext.h"
#include "tests/abi/harness.h"
#include "tests/common/scoped_env.h"
#include "tests/netns/netns_peer.h"
#include "tests/netns/netns_util.h"

namespace pact::netns_test {
namespace {

using namespace abi_test;  // NOLINT: the harness's NetPlugin, PeerPair, buffers, helpers
using test::ScopedEnv;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kRailTimeout(100);
// Close + finalize of a peer after a fault: the graceful close is bounded at 500 ms (see
// CloseWhilePeerDeviceIdle); a dead rail must not add UCX's or TCP's own long timeouts.
constexpr milliseconds kTeardownBound(3000);
constexpr const char* kRailTimeoutValue = "100ms";  // PACT_RAIL_TIMEOUT of both peers
constexpr const char* kUnordered = "unordered,lanes=2";
constexpr const char* kOrdered = "";  // the default class: ordered, one lane (on rail 0)
// PACT_PEER_TIMEOUT of both peers: the session's keepalive would give the peer up after about 3 s
// of silence on rail 0 (control_socket.h), so every rail-0 outage longer than that tests that the
// session holds its keepalive while the rails say the peer lives (Sessions::holdLiveness).
constexpr const char* kPeerTimeoutValue = "2s";

size_t fullMessage(int) { return kMaxMessage; }
// A stream of `messages` messages of 4 MiB. Its budget is about 5x what it takes here at 1 Gbit/s
// per rail (64 messages: 2.3 s) and well under the suite's default: a failover that stalls the
// stream fails in seconds, so that several failing cases still fit the meson timeout and report.
StreamSpec stream(int messages) {
  return {messages, fullMessage, milliseconds(10000) + messages * milliseconds(60)};
}

struct Rails {
  int rc = -100;  // pact_comm_rails' result; -100: not called (not exported)
  pact_comm_rails_t r{};
};

Rails railsOf(pact_comm_rails_fn fn, void* comm) {
  Rails out;
  out.r.struct_size = sizeof out.r;
  if (fn != nullptr) out.rc = fn(comm, &out.r);
  return out;
}

std::string describe(const pact_comm_rails_t& r) {
  char buf[360];
  std::snprintf(buf, sizeof buf,
                "rails %d, up %d [%d %d], watched %d, failovers %" PRIu64 ", recoveries %" PRIu64
                ", pieces resent %" PRIu64 " (%" PRIu64 " B), rail bytes %" PRIu64 " / %" PRIu64
                ", down %" PRIu64 " / %" PRIu64 " ms, stranded receives %" PRIu64,
                r.rails, r.rails_up, r.rail_up[0], r.rail_up[1], r.watched, r.failovers,
                r.recoveries, r.pieces_resent, r.bytes_resent, r.rail_bytes[0], r.rail_bytes[1],
                r.rail_down_us[0] / 1000, r.rail_down_us[1] / 1000, r.stranded_receives);
  return buf;
}

// Enters the side's namespace with both of its links fused into one virtual device (as NCCL fuses
// NICs) on traffic class `tc` (empty: the default); the device in *vdev.
std::unique_ptr<NetPlugin> openOnRails(bool isA, const std::string& tc, ScopedEnv* env, int* vdev) {
  Side side = isA ? sideA("pa0,pa1") : sideB("pb0,pb1");
  side.pinUcx = false;  // each rail pins its own UCX context
  side.tc = tc;
  side.peerTimeout = kPeerTimeoutValue;
  env->set("PACT_RAIL_TIMEOUT", kRailTimeoutValue);
  auto plugin = openIn(side, env);
  if (!plugin) return nullptr;
  EXPECT_TRUE(plugin->hasMakeVDevice());
  const std::string p = isA ? "pa" : "pb";
  const int members[2] = {findDevice(*plugin, p + "0"), findDevice(*plugin, p + "1")};
  if (!plugin->hasMakeVDevice() || members[0] < 0 || members[1] < 0) return nullptr;
  EXPECT_EQ(plugin->makeVDevice(vdev, 2, members), loader::kSuccess);
  return *vdev >= 0 ? std::move(plugin) : nullptr;
}

// ---- the sender's view of the faults ----------------------------------------------------------

struct SenderReport {
  int railsRc = -100;
  pact_comm_rails_t rails{};          // after the stream
  uint64_t failoversBeforeFault = 0;  // rails taken out before the first fault: must be none
  long long detectMs = -1;            // first down note -> failovers >= 1 seen
  long long recoverMs = -1;           // first up note -> recoveries >= 1 seen
  uint64_t rail1AtRecovery = 0;       // rail_bytes[1] when recoveries >= 1 was first seen
  int notes = 0;                      // fault notes read
  bool repaired = false;              // an up note among them
  uint64_t faultsInjected = 0;        // pact_faults_injected() after the stream (PACT_FAULT)
};

// Reads the parent's fault notes and samples pact_comm_rails (every 2 ms at most) while the
// sender waits for its sends: the plugin's reaction timed from the fault, at that resolution.
class RailWatch {
 public:
  RailWatch(NetPlugin& plugin, void* comm, Channel& parent, SenderReport* report)
      : fn_(ext<pact_comm_rails_fn>(plugin, "pact_comm_rails")),
        comm_(comm),
        parent_(parent),
        report_(report) {}

  void poll() {
    readNotes();
    const auto now = Clock::now();
    if (now - lastSample_ < milliseconds(2)) return;
    lastSample_ = now;
    const Rails s = railsOf(fn_, comm_);
    if (s.rc != 0) return;
    if (!downAt_) {
      report_->failoversBeforeFault = s.r.failovers;
    } else if (report_->detectMs < 0 && s.r.failovers >= 1) {
      report_->detectMs = msSince(*downAt_);
    }
    if (upAt_ && report_->recoverMs < 0 && s.r.recoveries >= 1) {
      report_->recoverMs = msSince(*upAt_);
      report_->rail1AtRecovery = s.r.rail_bytes[1];
    }
  }

  // The state after the stream.
  void finish() {
    poll();
    const Rails s = railsOf(fn_, comm_);
    report_->railsRc = s.rc;
    report_->rails = s.r;
  }

 private:
  void readNotes() {
    while (!parentGone_ && parent_.readable()) {
      char note = 0;
      if (!parent_.recvValue(&note, kOpTimeout)) {
        parentGone_ = true;  // EOF: the parent died; the watchdogs end the rest
        return;
      }
      ++report_->notes;
      if (note == kNoteDown && !downAt_) downAt_ = Clock::now();
      if (note == kNoteUp && !upAt_) {
        upAt_ = Clock::now();
        report_->repaired = true;
      }
    }
  }

  pact_comm_rails_fn fn_;
  void* comm_;
  Channel& parent_;
  SenderReport* report_;
  Clock::time_point lastSample_{};
  std::optional<Clock::time_point> downAt_, upAt_;
  bool parentGone_ = false;
};

// ---- a stream with faults ---------------------------------------------------------------------

struct ReceiverReport {
  StreamReport stream;
  int railsRc = -100;
  pact_comm_rails_t rails{};
};

// Sent by each peer after its report: how long closing the comm and finalizing the plugin took
// (a rail that vanished must not hold either up).
struct Teardown {
  int closeRc = -100;
  long long closeMs = -1;
  long long finalizeMs = -1;
};

// Peer side: closes the comm (send or receive), then finalizes the plugin, timing both.
Teardown tearDown(std::unique_ptr<NetPlugin>& plugin, void* comm, bool recv) {
  Teardown t;
  Deadline close(kStreamBudget);
  t.closeRc = recv ? plugin->closeRecv(comm) : plugin->closeSend(comm);
  t.closeMs = close.elapsed().count();
  Deadline finalize(kStreamBudget);
  plugin.reset();
  t.finalizeMs = finalize.elapsed().count();
  return t;
}

struct Outcome {
  ReceiverReport recv;
  SenderReport send;
  Teardown recvDown, sendDown;
  bool gotRecv = false, gotSend = false;
};


// A (pactA) receives `messages` 4 MiB messages, B (pactB) sends them, over the two-rail device on
// class `tc`. A notes the parent at each count in `reportAt`; `faults` (the parent) strikes then.
// senderFault: B's PACT_FAULT (empty: none).
Outcome runWithFaults(const std::string& tc, const StreamSpec& spec, const std::vector<int>& reportAt,
                      const std::function<void(PeerPair&, ReceiverNotes&)>& faults,
                      const std::string& senderFault = {}) {
  PeerPair pair(
      kVersion,
      [&](PeerIo& io) {
        ScopedEnv env;
        int vdev = -1;
        auto plugin = openOnRails(true, tc, &env, &vdev);
        ASSERT_TRUE(plugin);
        void* comm = nullptr;
        ASSERT_NO_FATAL_FAILURE(acceptPeer(*plugin, *io.peer, &comm, vdev));
        ReceiverReport r;
        const auto received = [&](int n) {
          if (std::find(reportAt.begin(), reportAt.end(), n) != reportAt.end()) {
            EXPECT_TRUE(io.parent->sendValue(n));
          }
        };
        ASSERT_NO_FATAL_FAILURE(
            receiveStream(*plugin, comm, *io.peer, "", &r.stream, spec, received));
        const Rails s = railsOf(ext<pact_comm_rails_fn>(*plugin, "pact_comm_rails"), comm);
        r.railsRc = s.rc;
        r.rails = s.r;
        EXPECT_TRUE(io.parent->sendValue(kEnd));
        EXPECT_TRUE(io.parent->sendValue(r));
        notifyDone(*io.peer);
        EXPECT_TRUE(io.parent->sendValue(tearDown(plugin, comm, true)));
      },
      [&](PeerIo& io) {
        ScopedEnv env;
        if (!senderFault.empty()) env.set("PACT_FAULT", senderFault);
        int vdev = -1;
        auto plugin = openOnRails(false, tc, &env, &vdev);
        ASSERT_TRUE(plugin);
        void* comm = nullptr;
        ASSERT_NO_FATAL_FAILURE(connectPeer(*plugin, *io.peer, &comm, vdev));
        SenderReport r;
        RailWatch watch(*plugin, comm, *io.parent, &r);
        ASSERT_NO_FATAL_FAILURE(sendStream(*plugin, comm, *io.peer, spec, [&] { watch.poll(); }));
        watch.finish();
        if (auto faults = ext<pact_faults_injected_fn>(*plugin, "pact_faults_injected")) r.faultsInjected = faults();
        EXPECT_TRUE(io.parent->sendValue(r));
        awaitDone(*io.peer);
        EXPECT_TRUE(io.parent->sendValue(tearDown(plugin, comm, false)));
      },
      kStreamWatchdog);
  ReceiverNotes notes(pair.controlA());
  faults(pair, notes);
  Outcome out;
  out.gotRecv =
      notes.report(&out.recv) && pair.controlA().recvValue(&out.recvDown, kStreamPairTimeout);
  out.gotSend = pair.controlB().recvValue(&out.send, kStreamPairTimeout) &&
                pair.controlB().recvValue(&out.sendDown, kStreamPairTimeout);
  pair.expectSuccess(kStreamPairTimeout);
  return out;
}

// The checks every completed faulty stream passes: each message arrived once, byte-exact, in its
// own receive (receiveStream asserted that in A), and the sender saw no failover before the fault.
void expectCompleted(const Outcome& o, const StreamSpec& spec, const char* what) {
  ASSERT_TRUE(o.gotRecv && o.gotSend) << "a peer did not report";
  const double mbit = o.recv.stream.seconds > 0 ? static_cast<double>(o.recv.stream.bytes) * 8 /
                                                      o.recv.stream.seconds / 1e6
                                                : 0;
  std::printf(
      "[   INFO   ] %s: %d x %zu KiB in %.3f s (%.0f Mbit/s), longest wait for a message "
      "%lld ms; failover seen by the sender %lld ms after the fault",
      what, spec.messages, spec.size(0) >> 10, o.recv.stream.seconds, mbit, o.recv.stream.maxGapMs, o.send.detectMs);
  if (o.send.repaired) std::printf(", recovery %lld ms after the first repair", o.send.recoverMs);
  std::printf(" (-1: not seen)\n");
  std::printf("[   INFO   ]   send comm: %s\n", describe(o.send.rails).c_str());
  std::printf("[   INFO   ]   recv comm: %s\n", describe(o.recv.rails).c_str());
  std::printf(
      "[   INFO   ]   closeRecv %lld ms, closeSend %lld ms; finalize %lld ms (A), %lld ms "
      "(B)\n",
      o.recvDown.closeMs, o.sendDown.closeMs, o.recvDown.finalizeMs, o.sendDown.finalizeMs);
  EXPECT_EQ(o.recvDown.closeRc, loader::kSuccess) << "closeRecv";
  EXPECT_EQ(o.sendDown.closeRc, loader::kSuccess) << "closeSend";
  for (const Teardown* t : {&o.recvDown, &o.sendDown}) {
    const char* who = t == &o.recvDown ? "receiver (A)" : "sender (B)";
    EXPECT_LT(t->closeMs + t->finalizeMs, kTeardownBound.count())
        << who << ": close and finalize after the fault";
  }
  EXPECT_EQ(o.recv.stream.bytes, streamBytes(spec)) << "incomplete stream";
  ASSERT_EQ(o.send.railsRc, 0) << "pact_comm_rails(send comm)";
  EXPECT_EQ(o.recv.railsRc, 0) << "pact_comm_rails(recv comm)";
  EXPECT_EQ(o.send.rails.rails, 2) << "the comm does not use both rails";
  EXPECT_EQ(o.send.rails.watched, 1) << "the rails are not probed";
  EXPECT_EQ(o.send.failoversBeforeFault, 0u) << "a rail was taken out before any fault";
}

// The default fault point: a quarter into a 64-message stream (256 MiB), well after the start
// and with most of the stream still to go over the remaining rail.
constexpr int kStreamMessages = 64;
constexpr int kFaultAt = 16;
constexpr const char* kRate = "1gbit";

// The stream of `messages` with one lasting fault (`ci/netns.sh ARGS...`) a quarter in.
Outcome runWithOneFault(const std::string& tc, const std::vector<std::string>& args, int messages = kStreamMessages) {
  const int at = messages * kFaultAt / kStreamMessages;
  return runWithFaults(tc, stream(messages), {at}, [&](PeerPair& pair, ReceiverNotes& notes) {
    if (notes.await(at)) fault(pair, args);
  });
}
// 1 GiB: the first case's stream, as issue #31 names it (the others keep to 256 MiB for CI's time).
constexpr int kGiBMessages = 256;

// What the plugin says of failover with the UCX it was built against: available, with no reason
// against it (every UCX pact builds with; both of CI's run this file's failover cases).
TEST(NetnsFailoverAvailability, AvailableWithThisUcx) {
  runInChild("pact_rail_failover_available", [] {
    std::string error;
    auto plugin = NetPlugin::open(pluginPath(), kVersion, &error);
    ASSERT_TRUE(plugin) << error;
    auto available = reinterpret_cast<pact_rail_failover_available_fn>(plugin->symbol("pact_rail_failover_available"));
    ASSERT_NE(available, nullptr);
    char why[256] = "stale";
    EXPECT_EQ(available(why, sizeof why), 1) << why;
    EXPECT_STREQ(why, "");
  });
}

// ---- 1. link down on rail 1, both classes -------------------------------------------------------

class NetnsFailoverClass : public NetnsFailover, public ::testing::WithParamInterface<bool> {
 protected:
  const char* tc() const { return GetParam() ? kUnordered : kOrdered; }
};

// Rail 1 is cut (link down) a quarter into a 1 GiB stream and stays down: the stream completes,
// every message once and byte-exact, with no error; the sender took rail 1 out (failovers >= 1) and it is
// still out at the end (rails_up 1, rail_up [1 0]). The ordered class's lane is on rail 0, so it
// only has to notice; the unordered class's lane on rail 1 moves to rail 0 and re-sends what it
// had in flight (pieces_resent, printed; zero is possible when nothing was in flight).
TEST_P(NetnsFailoverClass, LinkDownOnRail1MidStream) {
  ASSERT_NO_FATAL_FAILURE(up({"--pairs", "2", "--rate", kRate}));
  const Outcome o = runWithOneFault(tc(), {"link", "1", "down"}, kGiBMessages);
  ASSERT_NO_FATAL_FAILURE(expectCompleted(o, stream(kGiBMessages), "link 1 down, 1 GiB"));
  const pact_comm_rails_t& r = o.send.rails;
  EXPECT_GE(r.failovers, 1u);
  // pieces_resent is printed above, not judged: zero is right when nothing was in flight.
  EXPECT_EQ(r.rails_up, 1);
  EXPECT_EQ(r.rail_up[0], 1);
  EXPECT_EQ(r.rail_up[1], 0);
  EXPECT_GE(o.send.detectMs, 0) << "the sender never saw the failover during the stream";
}

INSTANTIATE_TEST_SUITE_P(Classes, NetnsFailoverClass, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "Unordered" : "Ordered");
                         });

// Small messages (at most transport::kLazyAckMax) complete before their acknowledgement, from a
// copy the sender keeps (net/kept.h): rail 1 is cut under a stream of 32 KiB messages (unordered,
// one piece each, alternating rails) and every message still arrives once, byte-exact; the copies
// of those not acknowledged went again.
size_t smallMessage(int) { return size_t{32} << 10; }
TEST_F(NetnsFailover, LinkDownOnRail1SmallMessages) {
  ASSERT_NO_FATAL_FAILURE(up({"--pairs", "2", "--rate", kRate}));
  const StreamSpec spec{4096, smallMessage, milliseconds(30000)};
  const Outcome o = runWithFaults(kUnordered, spec, {1024}, [&](PeerPair& pair, ReceiverNotes& notes) {
    if (notes.await(1024)) fault(pair, {"link", "1", "down"});
  });
  ASSERT_NO_FATAL_FAILURE(expectCompleted(o, spec, "link 1 down, 32 KiB messages"));
  EXPECT_GE(o.send.rails.failovers, 1u);
  EXPECT_GE(o.send.rails.pieces_resent, 1u) << "nothing was sent again: were the copies kept?";
}

// ---- 2. black hole on rail 1 --------------------------------------------------------------------

// Rail 1 turns into a black hole (every packet dropped, links up, no carrier loss, no error from
// any socket: only the probes going unanswered tell) a quarter into an unordered stream: the
// stream completes byte-exact and the sender took rail 1 out.
TEST_F(NetnsFailover, BlackHoleOnRail1MidStream) {
  ASSERT_NO_FATAL_FAILURE(up({"--pairs", "2", "--rate", kRate}));
  const Outcome o = runWithOneFault(kUnordered, {"blackhole", "1", "on"});
  ASSERT_NO_FATAL_FAILURE(expectCompleted(o, stream(kStreamMessages), "black hole on rail 1"));
  EXPECT_GE(o.send.rails.failovers, 1u);
  EXPECT_EQ(o.send.rails.rail_up[1], 0) << "rail 1 taken back while still a black hole";
}

// ---- 3. rail 0 down, ordered and sealed ---------------------------------------------------------

// Rail 0, where the first lane starts, is cut a quarter into the stream: its lane moves to rail 1
// and the stream completes, in order where the class is ordered, byte-exact. The ordered default
// class (its one lane on rail 0), and two sealed classes (checks and a deadline: each message's
// seal goes on lane 0 after its last piece, and the receiver judges it before the message is
// reported), whose lane 0 moves with the seals of the messages not acknowledged yet.
struct Rail0Case {
  const char* name;
  const char* tc;
};
class NetnsRail0Down : public NetnsFailover, public ::testing::WithParamInterface<Rail0Case> {};

TEST_P(NetnsRail0Down, LaneMovesAndTheStreamCompletes) {
  ASSERT_NO_FATAL_FAILURE(up({"--pairs", "2", "--rate", kRate}));
  const Outcome o = runWithOneFault(GetParam().tc, {"link", "0", "down"});
  ASSERT_NO_FATAL_FAILURE(
      expectCompleted(o, stream(kStreamMessages), (std::string("link 0 down, ") + GetParam().name).c_str()));
  EXPECT_GE(o.send.rails.failovers, 1u);
  EXPECT_EQ(o.send.rails.rail_up[0], 0);
  EXPECT_EQ(o.send.rails.rail_up[1], 1);
}

INSTANTIATE_TEST_SUITE_P(Classes, NetnsRail0Down,
                         ::testing::Values(Rail0Case{"Ordered", kOrdered},
                                           Rail0Case{"SealedUnordered", "unordered,lanes=2,verify=crc32c,timeout=10s"},
                                           Rail0Case{"SealedOrdered", "verify=crc32c,timeout=10s"}),
                         [](const ::testing::TestParamInfo<Rail0Case>& info) { return std::string(info.param.name); });

// Rail 0, where the session's control connection lives, is cut for 5 s, longer than the session's
// keepalive bound (about 3 s with PACT_PEER_TIMEOUT=2s), then set up again: the session holds its
// keepalive while the rails say the peer lives, so the stream completes with no error and rail 0
// is taken back. Before the hold, the session gave the peer up after about 3 s and both comms
// failed (`peer lost`).
TEST_F(NetnsFailover, Rail0DownLongerThanPeerTimeout) {
  constexpr int kMessages = 240;  // one rail at 1 Gbit/s: about 7 s, longer than the cut
  constexpr milliseconds kDown(5000);
  ASSERT_NO_FATAL_FAILURE(up({"--pairs", "2", "--rate", kRate}));
  bool outlasted = false;
  const Outcome o = runWithFaults(kOrdered, stream(kMessages), {kFaultAt}, linkOutage(kFaultAt, "0", kDown, &outlasted));
  ASSERT_NO_FATAL_FAILURE(expectCompleted(o, stream(kMessages), "link 0 down for 5 s"));
  EXPECT_TRUE(outlasted) << "the stream ended while rail 0 was down: too short to outlast the keepalive";
  EXPECT_GE(o.send.rails.failovers, 1u);
  EXPECT_EQ(o.send.rails.rail_up[0], 1) << "rail 0 not taken back";
}

// ---- 4. rail 1 down, then back ------------------------------------------------------------------

// Rail 1 is cut for 2 s, then set up again: the sender takes it back (recoveries >= 1; probes
// back off to at most 1 s while it is down, then a hold-down of PACT_RAIL_TIMEOUT) and rail 1
// carries bytes again after that (rail_bytes[1] grew after recovery was first seen).
//
// Stream length: at most 2 x 1 Gbit/s before the cut, 1 Gbit/s for the 2 s of it and up to ~1.2 s
// after (probe back-off + hold-down): about 16 + 60 + 36 messages at the rate limit, so 160 leave
// about 48 messages to the recovered rail even on a machine that reaches the limits; a slower one
// only stretches the time and leaves more.
TEST_F(NetnsFailover, Rail1DownThenUpIsTakenBack) {
  constexpr int kMessages = 160;
  constexpr milliseconds kDown(2000);
  ASSERT_NO_FATAL_FAILURE(up({"--pairs", "2", "--rate", kRate}));
  bool outlasted = false;
  const Outcome o =
      runWithFaults(kUnordered, stream(kMessages), {kFaultAt}, linkOutage(kFaultAt, "1", kDown, &outlasted));
  ASSERT_NO_FATAL_FAILURE(expectCompleted(o, stream(kMessages), "link 1 down for 2 s"));
  EXPECT_TRUE(outlasted) << "the stream ended while rail 1 was down: too short to test recovery";
  const pact_comm_rails_t& r = o.send.rails;
  EXPECT_GE(r.failovers, 1u);
  EXPECT_GE(r.recoveries, 1u);
  EXPECT_EQ(r.rails_up, 2) << "rail 1 not taken back";
  ASSERT_GE(o.send.recoverMs, 0) << "the sender never saw the recovery during the stream";
  std::printf("[   INFO   ]   rail 1 bytes: %" PRIu64 " when taken back, %" PRIu64 " at the end\n",
              o.send.rail1AtRecovery, r.rail_bytes[1]);
  EXPECT_GT(r.rail_bytes[1], o.send.rail1AtRecovery) << "rail 1 carried nothing after recovery";
}

// ---- 5. a flapping rail -------------------------------------------------------------------------

// Rail 1 goes down for 1.5 s and up for 1.5 s, three times, during a longer unordered stream (the
// hold-down doubles on each flap): the stream completes byte-exact. 9 s of flapping at up to
// 2 x 500 Mbit/s is at most 270 messages; 320 outlast it (500 Mbit/s rails keep the stream's
// length, and so the test's time, close to the schedule).
TEST_F(NetnsFailover, FlappingRail1) {
  constexpr int kMessages = 320;
  constexpr int kFlaps = 3;
  constexpr milliseconds kPhase(1500);
  ASSERT_NO_FATAL_FAILURE(up({"--pairs", "2", "--rate", "500mbit"}));
  int phases = 0;  // down and up phases lived through by the stream
  const Outcome o =
      runWithFaults(kUnordered, stream(kMessages), {kFaultAt}, [&](PeerPair& pair, ReceiverNotes& notes) {
        if (!notes.await(kFaultAt)) return;
        for (int f = 0; f < kFlaps; ++f) {
          if (!fault(pair, {"link", "1", "down"})) return;
          const bool downOutlasted = holdFault(pair, kPhase);
          if (!fault(pair, {"link", "1", "up"})) return;
          if (!downOutlasted) return;
          ++phases;
          if (!holdFault(pair, kPhase)) return;
          ++phases;
        }
      });
  ASSERT_NO_FATAL_FAILURE(expectCompleted(o, stream(kMessages), "rail 1 flapping"));
  std::printf("[   INFO   ]   the stream lived through %d of %d phases\n", phases, 2 * kFlaps);
  EXPECT_EQ(phases, 2 * kFlaps) << "the stream ended before the flapping did";
  EXPECT_GE(o.send.rails.failovers, 1u);
}

// ---- 6. every rail down -------------------------------------------------------------------------

// Each side streams 4 MiB messages (kWindow in flight) until the comm fails. Rail 1 is cut a
// quarter in (the stream goes on over rail 0), then, once the receiver has checked 16 more
// messages, the parent notes both peers and cuts rail 0: both comms must fail, on every pending
// request, within 2 x PACT_RAIL_TIMEOUT + 1.5 s of that note; pact_comm_contract says the peer is
// gone (PACT_COMM_PEER) and close succeeds.
constexpr milliseconds kAllDownBound = kRailTimeout * 2 + milliseconds(1500);
constexpr milliseconds kDrainBound = kAllDownBound + milliseconds(2000);
// The whole stream of a side: 32 messages and two faults take about 2 s here.
constexpr milliseconds kDeathBudget(20000);

struct DeathReport {
  uint64_t messages = 0;       // completed (and, received, checked) before the failure
  uint64_t corrupt = 0;        // received messages that did not match
  int firstRc = -100;          // the first error of test(), isend or irecv (-1: isend or irecv
                               // kept answering NULL)
  long long msAfterNote = -1;  // since the parent's note (sent just before rail 0 went down)
  bool beforeNote = false;     // the error came before the note: a live rail was left
  int pending = 0;             // other requests in flight at the first error
  int endedOk = 0, endedError = 0, hung = 0;  // how they ended (hung: not within kDrainBound)
  long long drainMs = -1;
  int contractRc = -100, contractError = -1;
  char reason[sizeof(pact_comm_contract_t::reason)] = {};
  int closeRc = -100;
  long long closeMs = -1;
};

// test() on one request until done or an error, within `deadline`: 1 done, -1 error, 0 neither.
int endOf(NetPlugin& plugin, void* req, const Deadline& deadline) {
  const Completion c = waitRequest(plugin, req, deadline);
  if (c.rc == kTimedOut) return 0;
  return c.rc == loader::kSuccess ? 1 : -1;
}

void streamUntilFailure(PeerIo& io, bool isA, const std::vector<int>& reportAt) {
  ScopedEnv env;
  int vdev = -1;
  auto plugin = openOnRails(isA, kUnordered, &env, &vdev);
  ASSERT_TRUE(plugin);
  void* comm = nullptr;
  if (isA) {
    ASSERT_NO_FATAL_FAILURE(acceptPeer(*plugin, *io.peer, &comm, vdev));
  } else {
    ASSERT_NO_FATAL_FAILURE(connectPeer(*plugin, *io.peer, &comm, vdev));
  }
  DeathReport report;
  {
    Slots slots(*plugin, comm, isA ? kMaxMessage + kGuard : kMaxMessage);
    ASSERT_TRUE(slots.ok());
    std::deque<std::pair<int, void*>> inflight;  // message index, request; oldest first
    const Deadline overall(kDeathBudget);
    std::optional<Clock::time_point> noteAt;
    const auto readNote = [&] {
      if (!noteAt && io.parent->readable()) {
        char note = 0;
        EXPECT_TRUE(io.parent->recvValue(&note, kOpTimeout));
        noteAt = Clock::now();
      }
    };
    // Past this, every rail has been down for longer than any bound here: stop waiting.
    const auto tooLate = [&] { return noteAt && msSince(*noteAt) > kDrainBound.count(); };
    // One isend/irecv of message i (retried while it answers NULL): its rc, kTimedOut when it
    // still answers NULL at the end of the stream's budget or too long after the fault.
    const auto post = [&](int i) {
      HostBuffer& b = *slots.bufs[static_cast<size_t>(i % kWindow)];
      void* mh = slots.regs[static_cast<size_t>(i % kWindow)]->handle();
      if (isA) {
        std::memset(b.data(), kPoison, b.size());
      } else {
        fillPattern(b.data(), kMaxMessage, messageSeed(i));
      }
      for (;;) {
        void* req = nullptr;
        int rc;
        if (isA) {
          void* data = b.data();
          size_t cap = kMaxMessage;
          int tag = kTag;
          rc = plugin->irecv(comm, 1, &data, &cap, &tag, &mh, &req);
        } else {
          rc = plugin->isend(comm, b.data(), kMaxMessage, kTag, mh, &req);
        }
        if (rc != loader::kSuccess) return rc;
        if (req != nullptr) {
          inflight.emplace_back(i, req);
          return rc;
        }
        readNote();
        if (overall.expired() || tooLate()) return static_cast<int>(kTimedOut);
      }
    };
    int next = 0;
    int rc = loader::kSuccess;
    if (isA) {
      for (; next < kWindow && rc == loader::kSuccess; ++next) rc = post(next);
    }
    ASSERT_NO_FATAL_FAILURE(barrier(*io.peer));
    if (!isA) {
      for (; next < kWindow && rc == loader::kSuccess; ++next) rc = post(next);
    }
    while (rc == loader::kSuccess) {
      readNote();
      ASSERT_FALSE(overall.expired()) << "no failure within " << kDeathBudget.count() << " ms ("
                                      << report.messages << " messages)";
      ASSERT_FALSE(tooLate()) << "no error " << kDrainBound.count()
                              << " ms after every rail went down";
      int done = 0;
      int sizes[loader::kMaxRecvs];
      const auto [i, req] = inflight.front();
      rc = plugin->test(req, &done, sizes);
      if (rc != loader::kSuccess) {
        inflight.pop_front();  // failed: test() is not called on it again
        break;
      }
      if (done == 0) continue;
      inflight.pop_front();
      ++report.messages;
      if (isA) {
        const char* got = slots.bufs[static_cast<size_t>(i % kWindow)]->data();
        const bool ok = sizes[0] == static_cast<int>(kMaxMessage) &&
                        matchesPattern(got, kMaxMessage, messageSeed(i));
        EXPECT_TRUE(ok) << "message " << i << " (size " << sizes[0] << ")";
        report.corrupt += ok ? 0 : 1;
        if (std::find(reportAt.begin(), reportAt.end(), static_cast<int>(report.messages)) !=
            reportAt.end()) {
          EXPECT_TRUE(io.parent->sendValue(static_cast<int>(report.messages)));
        }
      }
      rc = post(next++);
    }
    readNote();  // the note is readable from the fault on: an error without it came before
    report.firstRc = rc;
    report.beforeNote = !noteAt;
    report.msAfterNote = noteAt ? msSince(*noteAt) : -1;
    report.pending = static_cast<int>(inflight.size());
    // Every other request must end too (NCCL tests each one it posted).
    const Deadline drain(kDrainBound);
    for (const auto& [i, req] : inflight) {
      const int end = endOf(*plugin, req, drain);
      report.endedOk += end == 1;
      report.endedError += end == -1;
      report.hung += end == 0;
    }
    report.drainMs = drain.elapsed().count();
    pact_comm_contract_t c{};
    c.struct_size = sizeof c;
    if (auto fn = ext<pact_comm_contract_fn>(*plugin, "pact_comm_contract")) {
      report.contractRc = fn(comm, &c);
    }
    report.contractError = c.error;
    std::memcpy(report.reason, c.reason, sizeof report.reason);
    report.reason[sizeof report.reason - 1] = 0;
  }  // slots deregistered
  const Deadline close(kDrainBound);
  report.closeRc = isA ? plugin->closeRecv(comm) : plugin->closeSend(comm);
  report.closeMs = close.elapsed().count();
  if (isA) {
    EXPECT_TRUE(io.parent->sendValue(kEnd));
  }
  EXPECT_TRUE(io.parent->sendValue(report));
}

void expectFailed(const DeathReport& r, const char* who) {
  std::printf("[   INFO   ] %s: %" PRIu64
              " messages, then rc %d %lld ms after every rail went "
              "down; %d other requests: %d done, %d failed, %d hung (%lld ms); contract error %d "
              "(\"%s\"); close rc %d in %lld ms\n",
              who, r.messages, r.firstRc, r.msAfterNote, r.pending, r.endedOk, r.endedError, r.hung,
              r.drainMs, r.contractError, r.reason, r.closeRc, r.closeMs);
  EXPECT_EQ(r.corrupt, 0u) << who;
  EXPECT_FALSE(r.beforeNote) << who << " failed (rc " << r.firstRc << ") while rail 0 was up";
  EXPECT_TRUE(r.firstRc == loader::kRemoteError || r.firstRc == loader::kSystemError)
      << who << ": error " << r.firstRc << ", expected ncclRemoteError(6) or ncclSystemError(2)";
  EXPECT_GE(r.msAfterNote, 0) << who;
  EXPECT_LT(r.msAfterNote, kAllDownBound.count()) << who << " failed too late";
  EXPECT_EQ(r.hung, 0) << who << ": requests that never ended";
  EXPECT_EQ(r.contractRc, 0) << who << ": pact_comm_contract";
  EXPECT_EQ(r.contractError, PACT_COMM_PEER) << who << ": " << r.reason;
  EXPECT_EQ(r.closeRc, loader::kSuccess) << who << ": close after the failure";
  EXPECT_LT(r.closeMs, kTeardownBound.count()) << who << ": close after the failure";
}

TEST_F(NetnsFailover, AllRailsDownFailsBothSides) {
  constexpr int kSecondFaultAt = kFaultAt + 16;
  ASSERT_NO_FATAL_FAILURE(up({"--pairs", "2", "--rate", kRate}));
  const std::vector<int> reportAt{kFaultAt, kSecondFaultAt};
  PeerPair pair(
      kVersion, [&](PeerIo& io) { streamUntilFailure(io, true, reportAt); },
      [&](PeerIo& io) { streamUntilFailure(io, false, reportAt); }, kStreamWatchdog);
  ReceiverNotes notes(pair.controlA());
  bool struck = false;
  if (notes.await(kFaultAt) && script({"link", "1", "down"}) && notes.await(kSecondFaultAt)) {
    // The note first: an error a peer sees before the note is readable came before the fault.
    EXPECT_TRUE(pair.controlA().sendValue(kNoteDown));
    EXPECT_TRUE(pair.controlB().sendValue(kNoteDown));
    struck = script({"link", "0", "down"});
  }
  DeathReport a, b;
  const bool gotA = notes.report(&a);
  const bool gotB = pair.controlB().recvValue(&b, kStreamPairTimeout);
  pair.expectSuccess(kStreamPairTimeout);
  ASSERT_TRUE(struck) << "the faults did not happen";
  ASSERT_TRUE(gotA && gotB) << "a peer did not report";
  expectFailed(a, "receiver");
  expectFailed(b, "sender");
}

// ---- 7. a lane failing at every point of a message's life ---------------------------------------

// The sender's lane L fails (PACT_FAULT lane_fail=laneL:K: the TCP connections of the lane's rail
// to the peer are shut, as a connection reset, once the comm has posted K data pieces) at every K
// from before the first piece to after the last: before a message's first piece, between its
// pieces, after its last piece and before it completed (its seal, where the class has one, still
// to go or on its way), with one and with two messages in flight. Every message arrives once, in
// its own receive, byte-exact (in order: receive i holds message i), every send completes without
// an error, and the fault struck: the rail had connections to shut (pact_faults_injected counts
// only then). The sender's failover shows in its counters (printed). Real UCX over the two netns
// rails: the failure is exact in the order of the comm's posts, and UCX fails the endpoints over
// the shut connections on both sides, as with a real reset. No link is touched, so the rail comes
// back after a timeout (the probes still answer): the recovery is part of every case.
struct LaneFailCase {
  std::string name;
  const char* tc;
  int messages;
  int lane;
  int after;   // data pieces posted before lane `lane` fails
  int window;  // messages in flight
};

size_t quarterMiB(int) { return size_t{256} << 10; }

std::vector<LaneFailCase> laneFailCases() {
  struct Class {
    const char* name;
    const char* tc;
    int messages, lanes, pieces;  // pieces per 256 KiB message
  };
  const Class classes[] = {
      {"Ordered", "", 3, 1, 1},  // one lane on rail 0, one piece per message
      {"Unordered", "unordered,lanes=2,chunk=64K", 2, 2, 4},
      {"SealedOrdered", "verify=crc32c,timeout=10s", 3, 1, 1},
  };
  std::vector<LaneFailCase> out;
  for (const Class& c : classes)
    for (int window = 1; window <= 2; ++window)
      for (int lane = 0; lane < c.lanes; ++lane)
        for (int k = 0; k <= c.messages * c.pieces; ++k)
          out.push_back({std::string(c.name) + "Window" + std::to_string(window) + "Lane" + std::to_string(lane) +
                             "After" + std::to_string(k),
                         c.tc, c.messages, lane, k, window});
  return out;
}

class NetnsLaneFail : public NetnsFailover, public ::testing::WithParamInterface<LaneFailCase> {};

TEST_P(NetnsLaneFail, EveryMessageOnceInOrder) {
  const LaneFailCase& c = GetParam();
  ASSERT_NO_FATAL_FAILURE(up({"--pairs", "2"}));
  const StreamSpec spec{c.messages, quarterMiB, milliseconds(10000), c.window};
  const std::string fault = "lane_fail=lane" + std::to_string(c.lane) + ":" + std::to_string(c.after);
  const Outcome o = runWithFaults(
      c.tc, spec, {},
      [](PeerPair& pair, ReceiverNotes&) { pair.controlB().sendValue(kNoteDown); },  // armed from the start
      fault);
  ASSERT_NO_FATAL_FAILURE(expectCompleted(o, spec, fault.c_str()));
  EXPECT_EQ(o.send.faultsInjected, 1u) << "the lane never failed (no connection on its rail to shut)";
}

INSTANTIATE_TEST_SUITE_P(Points, NetnsLaneFail, ::testing::ValuesIn(laneFailCases()),
                         [](const ::testing::TestParamInfo<LaneFailCase>& info) { return info.param.name; });

}  // namespace
}  // namespace pact::netns_test
