// netns suite, rail failover on the engine's face: KV transfers (as a prefill engine pushes
// blocks to a decode engine) over two rails (PACT_NET_DEVICES=pa0,pa1 in pactA and pb0,pb1 in
// pactB: the engine fuses them, a rail each), each rail 1 Gbit/s. B sends kTransfers transfers of
// 4 MiB, kInFlight at a time; A expects them all and checks each committed block byte-exact. A
// notes the parent when a count of transfers has committed; the parent strikes a fault then
// (`ci/netns.sh link IDX down`, `blackhole IDX on`), mid-stream. B samples its counters
// (pact_stats: rail_failovers) while it waits, timing the failover from the parent's note.
//
// PACT_RAIL_TIMEOUT is 100ms on both sides (the default, set so the bounds stay if it moves).
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "pact/pact.h"
#include "tests/abi/harness.h"
#include "tests/common/scoped_env.h"
#include "tests/netns/netns_peer.h"
#include "tests/netns/netns_util.h"

namespace pact::netns_test {
namespace {

using namespace abi_test;  // NOLINT: PeerPair, Deadline, patterns
using test::ScopedEnv;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int kTransfers = 64;          // 256 MiB
constexpr int kGiBStream = 256;         // 1 GiB (the first case, as issue #31 names it)
constexpr int kLongStream = 160;        // 640 MiB
constexpr int kFlappingStream = 512;    // 2 GiB
constexpr uint64_t kSize = 4u << 20;
constexpr int kInFlight = 8;
constexpr int kSlots = 2 * kInFlight;   // the receiver's expects ahead
constexpr int kFaultAt = 16;            // a quarter in
constexpr int kWaitMs = 40000;          // one transfer's wait (a hang fails, not stalls)
constexpr const char* kUnorderedKv = "unordered,lanes=2,chunk=256K";
// Both rails down: each side sees every transfer end within the detection bound and a margin
// (not TCP's timeout).
constexpr milliseconds kAllDownBound(2000);

struct Report {
  int committed = 0;
  int failed = 0;
  int bad = 0;                 // committed, but the bytes differ (receiver)
  int firstError = 0;          // the first failed transfer's result
  int withdrawn = 0;           // receiver, after a failure: expects no offer ever matched (released)
  long long maxGapMs = 0;      // longest wait for one transfer
  double seconds = 0;
  long long detectMs = -1;     // sender: note -> rail_failovers >= 1
  long long failedMsAfterNote = -1;  // the first failure, after the (last) down note
  uint64_t failoversBeforeFault = 0;
  pact_stats_t stats{};
};

pact_engine_t engineIn(bool isA, const std::optional<std::string>& kv, ScopedEnv* env,
                       const std::string& traceFile = "") {
  EXPECT_EQ(::prctl(PR_SET_PDEATHSIG, SIGKILL), 0);
  enterNamespace(isA ? "pactA" : "pactB", isA ? "pa0" : "pb0");
  env->set("UCX_TLS", "tcp");
  env->set("PACT_NET_DEVICES", isA ? "pa0,pa1" : "pb0,pb1");
  env->set("UCX_NET_DEVICES", std::nullopt);  // each rail pins its own
  env->set("PACT_RAIL_TIMEOUT", "100ms");
  // The session's keepalive would give the peer up after about 3 s of silence on rail 0, where
  // its connection lives: rail-0 outages longer than that test Sessions::holdLiveness.
  env->set("PACT_PEER_TIMEOUT", "2s");
  env->set("PACT_TC_KV", kv);
  if (!traceFile.empty()) env->set("PACT_TRACE_FILE", traceFile);
  return makeEngine(isA ? "netns-rx" : "netns-tx", isA ? "10.77.0.1" : nullptr);
}

// Reads the parent's notes (fault down/up) without waiting.
struct Notes {
  test::Channel& parent;
  std::optional<Clock::time_point> downAt;  // the last down note
  void read() {
    while (parent.readable()) {
      char note = 0;
      if (!parent.recvValue(&note, kOpTimeout)) return;
      if (note == kNoteDown) downAt = Clock::now();
    }
  }
};

// Waits for x to end (at most kWaitMs), reading the notes every 2 ms (so a failure is timed from
// the note to within that) and calling sample() between tries.
pact_xfer_info_t waitFor(pact_engine_t e, pact_xfer_t x, Notes& notes, const std::function<void()>& sample = {},
                         milliseconds bound = milliseconds(kWaitMs)) {
  pact_xfer_info_t info{};
  Deadline wait{bound};
  pact_status_t rc = PACT_ERR_TIMED_OUT;
  while (rc == PACT_ERR_TIMED_OUT && !wait.expired()) {
    rc = pact_xfer_wait(e, x, 2, &info);
    notes.read();
    if (sample) sample();
  }
  if (bound.count() == kWaitMs) {
    EXPECT_EQ(rc, PACT_OK) << "a transfer never ended";
  }
  if (rc != PACT_OK) info.result = PACT_ERR_TIMED_OUT;
  return info;
}

void noteResult(Report* r, const pact_xfer_info_t& info, const std::optional<Clock::time_point>& downAt) {
  if (info.result == PACT_OK) {
    ++r->committed;
    return;
  }
  if (r->failed++ == 0) {
    r->firstError = info.result;
    r->failedMsAfterNote = downAt ? msSince(*downAt) : -1;
  }
}

// A: expects the transfers kSlots ahead (transfer i into slot i % kSlots: the sender has at most
// kInFlight out, so each offer finds its expect), waits for them in order, checks each committed one.
void receive(PeerIo& io, const std::optional<std::string>& kv, int n, const std::vector<int>& reportAt) {
  ScopedEnv env;
  pact_engine_t e = engineIn(true, kv, &env);
  ASSERT_NE(e, nullptr) << pact_last_error();
  char addr[128];
  ASSERT_EQ(pact_engine_address(e, addr, sizeof addr), PACT_OK);
  ASSERT_TRUE(io.peer->send(addr, sizeof addr));
  std::vector<uint8_t> mem(kSlots * kSize);
  pact_mr_t mr = nullptr;
  ASSERT_EQ(pact_mem_register(e, mem.data(), mem.size(), &mr), PACT_OK);
  std::vector<pact_xfer_t> xs(static_cast<size_t>(n), 0);
  const auto expect = [&](int i) {
    if (i >= n) return;
    pact_key_t k{static_cast<uint64_t>(i) + 1, 0, 0, 0};
    pact_block_t b{mr, static_cast<uint64_t>(i % kSlots) * kSize, kSize};
    EXPECT_EQ(pact_expect(e, &k, &b, 1, 0, "KV", &xs[static_cast<size_t>(i)]), PACT_OK) << pact_last_error();
  };
  for (int i = 0; i < kSlots; ++i) expect(i);
  Report r;
  Notes notes{*io.parent, {}};
  const auto start = Clock::now();
  auto last = start;
  std::optional<Deadline> drain;  // from the first failure
  for (int i = 0; i < n; ++i) {
    const pact_xfer_t x = xs[static_cast<size_t>(i)];
    // Once the peer is lost, an expect its offer never reached belongs to no peer: it waits for
    // another sender (or its deadline), so the application withdraws it (released below).
    if (r.failed > 0 && !drain) drain.emplace(kAllDownBound);
    const pact_xfer_info_t info =
        waitFor(e, x, notes, {}, drain ? std::max(drain->remaining(), milliseconds(1)) : milliseconds(kWaitMs));
    if (info.result == PACT_ERR_TIMED_OUT && r.failed > 0) {
      ++r.withdrawn;
    } else {
      noteResult(&r, info, notes.downAt);
      if (info.result == PACT_OK &&
          !matchesPattern(mem.data() + static_cast<size_t>(i % kSlots) * kSize, kSize, static_cast<uint64_t>(i) + 1))
        ++r.bad;
      r.maxGapMs = std::max<long long>(r.maxGapMs, msSince(last));
      last = Clock::now();
    }
    EXPECT_EQ(pact_xfer_release(e, x), PACT_OK);
    expect(i + kSlots);
    if (std::find(reportAt.begin(), reportAt.end(), i + 1) != reportAt.end()) {
      EXPECT_TRUE(io.parent->sendValue(i + 1));
    }
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_EQ(pact_stats(e, &r.stats), PACT_OK);
  EXPECT_TRUE(io.parent->sendValue(kEnd));
  EXPECT_TRUE(io.parent->sendValue(r));
  notifyDone(*io.peer);
  EXPECT_EQ(pact_mem_deregister(e, mr), PACT_OK);
  pact_engine_destroy(e);
}

// B: sends every transfer, kInFlight at a time, sampling its counters while it waits.
void send(PeerIo& io, const std::optional<std::string>& kv, int n, const std::string& traceFile) {
  ScopedEnv env;
  pact_engine_t e = engineIn(false, kv, &env, traceFile);
  ASSERT_NE(e, nullptr) << pact_last_error();
  char addr[128];
  ASSERT_TRUE(io.peer->recv(addr, sizeof addr, kOpTimeout));
  pact_peer_t peer = 0;
  ASSERT_EQ(pact_connect(e, addr, 20000, &peer), PACT_OK) << pact_last_error();
  std::vector<uint8_t> mem(kInFlight * kSize);  // transfer i from slot i % kInFlight
  pact_mr_t mr = nullptr;
  ASSERT_EQ(pact_mem_register(e, mem.data(), mem.size(), &mr), PACT_OK);
  const auto post = [&](int i) {
    uint8_t* slot = mem.data() + static_cast<size_t>(i % kInFlight) * kSize;
    fillPattern(slot, kSize, static_cast<uint64_t>(i) + 1);  // the slot's last transfer has ended
    pact_key_t k{static_cast<uint64_t>(i) + 1, 0, 0, 0};
    pact_block_t b{mr, static_cast<uint64_t>(i % kInFlight) * kSize, kSize};
    pact_xfer_t x = 0;
    const pact_status_t rc = pact_send(e, peer, &k, &b, 1, 0, "KV", &x);
    return rc == PACT_OK ? x : 0;  // refused once the peer is lost: counted as failed
  };
  Report r;
  Notes notes{*io.parent, {}};
  std::vector<pact_xfer_t> xs;
  for (int i = 0; i < std::min(kInFlight, n); ++i) xs.push_back(post(i));
  for (int i = 0; i < n; ++i) {
    const pact_xfer_t x = xs[static_cast<size_t>(i)];
    pact_xfer_info_t info{};
    if (x == 0) {
      info.result = PACT_ERR_PEER_LOST;
    } else {
      info = waitFor(e, x, notes, [&] {
        pact_stats_t s{};
        if (pact_stats(e, &s) != PACT_OK) return;
        if (!notes.downAt)
          r.failoversBeforeFault = s.rail_failovers;
        else if (r.detectMs < 0 && s.rail_failovers > r.failoversBeforeFault)
          r.detectMs = msSince(*notes.downAt);
      });
      EXPECT_EQ(pact_xfer_release(e, x), PACT_OK);
    }
    noteResult(&r, info, notes.downAt);
    if (i + kInFlight < n) xs.push_back(post(i + kInFlight));
  }
  EXPECT_EQ(pact_stats(e, &r.stats), PACT_OK);
  EXPECT_TRUE(io.parent->sendValue(r));
  awaitDone(*io.peer);
  EXPECT_EQ(pact_mem_deregister(e, mr), PACT_OK);
  pact_engine_destroy(e);
}

struct Outcome {
  int transfers = 0;
  Report rx, tx;
  bool got = false;
};

Outcome run(const std::optional<std::string>& kv, const std::vector<int>& reportAt,
            const std::function<void(PeerPair&, ReceiverNotes&)>& faults, int n = kTransfers,
            const std::string& senderTrace = "") {
  PeerPair pair(
      kVersion, [&](PeerIo& io) { receive(io, kv, n, reportAt); }, [&](PeerIo& io) { send(io, kv, n, senderTrace); },
      kStreamWatchdog);
  ReceiverNotes notes(pair.controlA());
  faults(pair, notes);
  Outcome o;
  o.transfers = n;
  o.got = notes.report(&o.rx) && pair.controlB().recvValue(&o.tx, kStreamPairTimeout);
  pair.expectSuccess(kStreamPairTimeout);
  return o;
}

std::string describe(const pact_stats_t& s) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "rail failovers %" PRIu64 ", recoveries %" PRIu64 ", pieces sent again %" PRIu64
                " (%" PRIu64 " B), retried %" PRIu64 ", duplicates dropped %" PRIu64,
                s.rail_failovers, s.rail_recoveries, s.rail_resent_pieces, s.rail_resent_bytes, s.retried,
                s.duplicates_dropped);
  return buf;
}

// Every transfer committed once, byte-exact, no error; the sender took a rail out after the fault
// (and none before).
void expectCommitted(const Outcome& o, const char* what) {
  ASSERT_TRUE(o.got) << "a peer did not report";
  std::printf("[   INFO   ] engine, %s: %d x 4 MiB committed in %.3f s (%.0f Mbit/s), longest wait for a "
              "transfer %lld ms; failover seen by the sender %lld ms after the fault\n",
              what, o.rx.committed, o.rx.seconds,
              o.rx.seconds > 0 ? o.rx.committed * kSize * 8 / o.rx.seconds / 1e6 : 0, o.rx.maxGapMs, o.tx.detectMs);
  std::printf("[   INFO   ]   sender: %s\n[   INFO   ]   receiver: %s\n", describe(o.tx.stats).c_str(),
              describe(o.rx.stats).c_str());
  EXPECT_EQ(o.rx.committed, o.transfers) << "receiver, first error " << o.rx.firstError;
  EXPECT_EQ(o.tx.committed, o.transfers) << "sender, first error " << o.tx.firstError;
  EXPECT_EQ(o.rx.bad, 0) << "committed transfers whose bytes differ";
  EXPECT_EQ(o.rx.stats.committed, static_cast<uint64_t>(o.transfers)) << "a transfer committed twice";
  EXPECT_EQ(o.tx.failoversBeforeFault, 0u) << "a rail was taken out before any fault";
  EXPECT_GE(o.tx.stats.rail_failovers, 1u) << "the sender never took the rail out";
  EXPECT_GE(o.tx.detectMs, 0) << "the sender never saw the failover during the stream";
}

// The engine fails over with every UCX pact builds with (its pieces are sent again by its own
// protocol): these tests never skip.
using NetnsEngineFailover = Netns;

// The stream of n transfers with one lasting fault (`ci/netns.sh ARGS...`) a quarter in.
Outcome runWithOneFault(const std::optional<std::string>& kv, const std::vector<std::string>& args,
                        int n = kTransfers) {
  const int at = n * kFaultAt / kTransfers;
  return run(kv, {at}, [&](PeerPair& pair, ReceiverNotes& notes) {
    if (notes.await(at)) fault(pair, args);
  }, n);
}

// Rail 1 is cut a quarter into an unordered KV stream of 1 GiB (a lane per rail) and stays down:
// every transfer commits once, byte-exact; the lane on rail 1 moved to rail 0 and what it had
// sent and not yet seen committed went again.
TEST_F(NetnsEngineFailover, EngineLinkDownOnRail1) {
  ASSERT_NO_FATAL_FAILURE(up({"--pairs", "2", "--rate", "1gbit"}));
  ASSERT_NO_FATAL_FAILURE(
      expectCommitted(runWithOneFault(kUnorderedKv, {"link", "1", "down"}, kGiBStream), "link 1 down, 1 GiB"));
}

// Rail 1 turns into a black hole (no error anywhere; only the probes tell).
TEST_F(NetnsEngineFailover, EngineBlackHoleOnRail1) {
  ASSERT_NO_FATAL_FAILURE(up({"--pairs", "2", "--rate", "1gbit"}));
  const Outcome o = runWithOneFault(kUnorderedKv, {"blackhole", "1", "on"});
  ASSERT_NO_FATAL_FAILURE(expectCommitted(o, "black hole on rail 1"));
  EXPECT_LT(o.tx.detectMs, 1000) << "the black hole was seen too late";
}

// Rail 0 goes down under an ordered KV class: its one lane and the control lane ride rail 0, so
// both move to rail 1 (the control messages the rail swallowed are repeated).
TEST_F(NetnsEngineFailover, EngineRail0DownOrdered) {
  ASSERT_NO_FATAL_FAILURE(up({"--pairs", "2", "--rate", "1gbit"}));
  ASSERT_NO_FATAL_FAILURE(expectCommitted(runWithOneFault(std::nullopt, {"link", "0", "down"}), "rail 0 down, ordered"));
}

// Rail 0, where the session's connection lives, down for 5 s (longer than the session's keepalive
// bound with PACT_PEER_TIMEOUT=2s), then up: every transfer commits once and no peer is lost (960
// MiB, about 7 s on one rail: it outlasts the outage).
TEST_F(NetnsEngineFailover, EngineRail0DownLongerThanPeerTimeout) {
  ASSERT_NO_FATAL_FAILURE(up({"--pairs", "2", "--rate", "1gbit"}));
  bool outlasted = false;
  const Outcome o =
      run(std::nullopt, {kFaultAt}, linkOutage(kFaultAt, "0", milliseconds(5000), &outlasted), kLongStream * 3 / 2);
  ASSERT_NO_FATAL_FAILURE(expectCommitted(o, "rail 0 down 5 s, then up"));
  EXPECT_TRUE(outlasted) << "the stream ended while rail 0 was down: too short to outlast the keepalive";
}

// Rail 1 down for 2 s, then up: the stream completes and the rail is taken back (a stream of
// 640 MiB, about 5 s: it outlasts the outage). The sender's PACT_TRACE_FILE shows the outage as a
// span "rail 1 out" of at least the 2 s on the rails' track (and the instant it began).
TEST_F(NetnsEngineFailover, EngineRail1DownThenUp) {
  ASSERT_NO_FATAL_FAILURE(up({"--pairs", "2", "--rate", "1gbit"}));
  const std::string trace =
      (std::filesystem::temp_directory_path() / ("pact-rail-trace-" + std::to_string(::getpid()) + ".json")).string();
  bool outlasted = false;
  const Outcome o = run(kUnorderedKv, {kFaultAt}, linkOutage(kFaultAt, "1", milliseconds(2000), &outlasted), kLongStream, trace);
  ASSERT_NO_FATAL_FAILURE(expectCommitted(o, "rail 1 down 2 s, then up"));
  std::ifstream in(trace);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(trace.c_str());
  EXPECT_NE(text.find("\"name\":\"rail 1 out\",\"cat\":\"rail failover\""), std::string::npos) << "no rail span in the trace";
  EXPECT_NE(text.find("\"ph\":\"i\""), std::string::npos) << "no instant at the failover";
  if (outlasted) {
    EXPECT_GE(o.tx.stats.rail_recoveries, 1u) << "rail 1 was not taken back";
    EXPECT_GE(o.tx.stats.rail_down_us, 2000000u) << "rail_down_us is shorter than the outage";
    std::smatch m;
    ASSERT_TRUE(std::regex_search(text, m, std::regex("\"name\":\"rail 1 out\"[^}]*\"ph\":\"X\",\"ts\":[0-9.]+,\"dur\":([0-9.]+)")))
        << "no span from the failover to the recovery";
    EXPECT_GE(std::stod(m[1].str()), 2000e3) << "the span is shorter than the outage (us)";
  }
}

// Rail 1 flaps: down 1.5 s, up 1.5 s, three times, under a stream of 2 GiB (about 12 s): every
// transfer commits once, byte-exact; the rail is taken out while down each time and carries
// traffic again at the end (failovers and recoveries seen; a flap inside the hold-down is not
// taken back early).
TEST_F(NetnsEngineFailover, EngineFlappingRail1) {
  ASSERT_NO_FATAL_FAILURE(up({"--pairs", "2", "--rate", "1gbit"}));
  constexpr auto kPhase = milliseconds(1500);
  int flaps = 0;
  const Outcome o = run(kUnorderedKv, {kFaultAt}, [&](PeerPair& pair, ReceiverNotes& notes) {
    if (!notes.await(kFaultAt)) return;
    for (; flaps < 3; ++flaps) {
      if (!fault(pair, {"link", "1", "down"})) return;
      const bool downOutlasted = holdFault(pair, kPhase);
      if (!fault(pair, {"link", "1", "up"}) || !downOutlasted) return;
      if (!holdFault(pair, kPhase)) return;
    }
  }, kFlappingStream);
  ASSERT_NO_FATAL_FAILURE(expectCommitted(o, "rail 1 flapping"));
  ASSERT_EQ(flaps, 3) << "the stream ended before the three flaps";
  EXPECT_GE(o.tx.stats.rail_failovers, 3u);
  EXPECT_GE(o.tx.stats.rail_recoveries, 2u);
}

// Both rails go down (rail 1 a quarter in, rail 0 a quarter later): every transfer ends on both
// sides (none hangs), failed once the last rail is out, within the bound.
TEST_F(NetnsEngineFailover, EngineAllRailsDownFailsBothSides) {
  ASSERT_NO_FATAL_FAILURE(up({"--pairs", "2", "--rate", "1gbit"}));
  constexpr int kSecond = kFaultAt + 16;
  bool struck = false;
  const Outcome o = run(kUnorderedKv, {kFaultAt, kSecond}, [&](PeerPair& pair, ReceiverNotes& notes) {
    if (!notes.await(kFaultAt) || !script({"link", "1", "down"}) || !notes.await(kSecond)) return;
    EXPECT_TRUE(pair.controlA().sendValue(kNoteDown));
    EXPECT_TRUE(pair.controlB().sendValue(kNoteDown));
    struck = script({"link", "0", "down"});
  });
  ASSERT_TRUE(struck) << "the faults did not happen";
  ASSERT_TRUE(o.got) << "a peer did not report";
  for (const Report* r : {&o.rx, &o.tx}) {
    const char* who = r == &o.rx ? "receiver" : "sender";
    std::printf("[   INFO   ] engine, both rails down: %s: %d committed, %d failed (first %d, %lld ms after "
                "rail 0 went), %d expects withdrawn\n", who, r->committed, r->failed, r->firstError,
                r->failedMsAfterNote, r->withdrawn);
    EXPECT_EQ(r->committed + r->failed + r->withdrawn, kTransfers) << who;
    EXPECT_GT(r->failed, 0) << who << ": nothing failed with every rail down";
    EXPECT_GE(r->committed, kSecond) << who;
    EXPECT_GE(r->failedMsAfterNote, 0) << who << " failed before rail 0 went down";
    EXPECT_LT(r->failedMsAfterNote, kAllDownBound.count()) << who << " failed too late";
  }
}

}  // namespace
}  // namespace pact::netns_test
