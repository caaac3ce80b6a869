// The commit protocol over the in-memory link (mem_link.h), exhaustively: a 3-piece transfer
// from B to A, and for every message of a clean run (each control frame and each piece) every
// single fault (drop, duplicate, reorder, delay), over eager and rendezvous landing of pieces
// and as one eager offer (the bytes with the offer, docs/engine.md "Eager transfers"); then an
// epoch switch at the receiver, and a release by either application, after every message. Each
// run must end with both transfers final and nothing open, and either committed once and
// byte-exact on both sides, or a specific error on both: never a partial, stale or duplicated
// commit.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "tests/integration/engine_util.h"
#include "tests/unit/mem_link.h"

namespace pact::engine::test {
namespace {

constexpr uint64_t kChunk = 4 << 10;
constexpr uint64_t kBytes = 3 * kChunk;  // three pieces
constexpr uint64_t kEpoch = 5;

struct Result {
  Status rx = Status::kInProgress, tx = Status::kInProgress;
  bool rxFinal = false, txFinal = false;
  int commits = 0;        // commit hook calls
  bool exact = false;     // the receiver's bytes are the sender's
  size_t open = 0;        // transfers left in either protocol after release
  std::string log;
};

// How the transfer's bytes travel: as pieces copied on arrival or fetched (rendezvous), or
// with an eager offer.
enum class Mode { kEagerPieces, kRendezvousPieces, kEagerOffer };

// An eager offer needs the receiver's credit grant first: those two messages are delivered
// before the transfer starts, so the faults and steps of the tests begin after them.
size_t firstMessage(Mode m) { return m == Mode::kEagerOffer ? 2 : 0; }

struct Exchange {
  MemNet net;
  std::unique_ptr<Protocol> a, b;  // a receives, b sends
  Registration srcMr, dstMr;
  std::vector<uint8_t> src = std::vector<uint8_t>(kBytes), dst = std::vector<uint8_t>(kBytes);
  uint64_t rx = 0, tx = 0;
  int commits = 0;

  explicit Exchange(Mode mode, int retries = 2, const char* senderFault = nullptr,  // NOLINT
                    const char* receiverFault = nullptr, Order order = Order::kUnordered) {
    Profile p;
    p.order = order;  // unordered: cut at the chunk, three pieces (ordered: one)
    p.chunk = kChunk;
    p.eager = mode == Mode::kEagerOffer ? kBytes : 0;
    p.retries = retries;
    p.verify = Verify::kCrc32c;
    p.timeout = std::chrono::seconds(2);
    ProtocolConfig ca{"A", kEpoch, 0, {p}, 1024, {}, &virtualNow};
    ProtocolConfig cb{"B", kEpoch, 0, {p}, 1024, {}, &virtualNow};
    if (senderFault != nullptr) cb.fault = *FaultParser::parse(senderFault);
    if (receiverFault != nullptr) ca.fault = *FaultParser::parse(receiverFault);
    a = std::make_unique<Protocol>(ca, net.link(0));
    b = std::make_unique<Protocol>(cb, net.link(1));
    net.attach(a.get(), b.get());
    net.setRendezvous(mode == Mode::kRendezvousPieces);
    a->setCommitHook([this](uint64_t, const TransferKey&, uint64_t, std::span<const BlockRef>) {
      ++commits;
      return true;
    });
    srcMr.addr = src.data();
    srcMr.length = kBytes;
    dstMr.addr = dst.data();
    dstMr.length = kBytes;
    pact::test::fillPattern(src.data(), kBytes, 77);
    a->peerReady(MemNet::kPeerOfA, "B");
    b->peerReady(MemNet::kPeerOfB, "A");
    if (mode == Mode::kEagerOffer) net.run();  // the credit grants
  }
  static constexpr TransferKey kKey{1, 2, kEpoch, 0};
  void start() {
    expectIt();
    sendIt();
  }
  void expectIt() {
    const BlockRef to{&dstMr, 0, kBytes};
    auto id = a->expect(kKey, std::span(&to, 1), 0, 0);
    ASSERT_TRUE(id.ok()) << id.error().message;
    rx = *id;
  }
  void sendIt() {
    const BlockRef from{&srcMr, 0, kBytes};
    auto id = b->send(MemNet::kPeerOfB, kKey, std::span(&from, 1), 0, 0);
    ASSERT_TRUE(id.ok()) << id.error().message;
    tx = *id;
  }
  std::string log() const {
    std::string out;
    for (const auto& l : net.log()) out += l + "\n";
    return out;
  }
  Result finish() {
    net.run();
    Result r;
    if (auto i = a->query(rx); i.ok()) r.rx = i->result, r.rxFinal = i->final;
    if (auto i = b->query(tx); i.ok()) r.tx = i->result, r.txFinal = i->final;
    r.commits = commits;
    r.exact = pact::test::firstMismatch(dst.data(), kBytes, 77) == -1;
    a->release(rx).ignore();
    b->release(tx).ignore();
    net.run();
    r.open = a->openTransfers() + b->openTransfers();
    for (const auto& l : net.log()) r.log += l + "\n";
    return r;
  }
};

// The invariants every run must keep, whatever happened to it.
void expectSound(const Result& r, const std::string& what, const std::set<Status>& allowedFailures) {
  SCOPED_TRACE(what + "\n" + r.log);
  EXPECT_TRUE(r.rxFinal) << "receiver not final";
  EXPECT_TRUE(r.txFinal) << "sender not final";
  EXPECT_EQ(r.open, 0u) << "a transfer stayed open";
  EXPECT_LE(r.commits, 1) << "committed twice";
  if (r.rx == Status::kOk) {
    EXPECT_EQ(r.commits, 1);
    EXPECT_TRUE(r.exact) << "committed bytes differ";
    EXPECT_EQ(r.tx, Status::kOk) << "receiver committed, sender says " << statusName(r.tx);
  } else {
    EXPECT_EQ(r.commits, 0) << "the hook ran for a transfer that did not commit";
    EXPECT_TRUE(allowedFailures.count(r.rx)) << "receiver: " << statusName(r.rx);
    EXPECT_NE(r.tx, Status::kOk) << "sender committed, receiver says " << statusName(r.rx);
    EXPECT_TRUE(allowedFailures.count(r.tx)) << "sender: " << statusName(r.tx);
  }
}

XferInfo infoOf(const Protocol& p, uint64_t id) {
  auto i = p.query(id);
  EXPECT_TRUE(i.ok());
  return i.ok() ? *i : XferInfo{};
}

// Messages of a clean run (2 credit grants, offer, advertise, 3 pieces, done, verdict).
// With an eager offer: 2 credit grants, the eager offer, the verdict.
size_t cleanRunMessages(Mode mode) {
  Exchange run(mode);
  run.start();
  const Result r = run.finish();
  EXPECT_EQ(r.rx, Status::kOk);
  EXPECT_EQ(r.tx, Status::kOk);
  EXPECT_EQ(r.commits, 1);
  EXPECT_TRUE(r.exact);
  return run.net.sent();
}

// Every trace event of the sender names its receiver, ALLOCATED included (it carried 0).
TEST(ProtocolTrace, TheSendersEventsNameItsPeerFromTheFirst) {
  Exchange run(Mode::kEagerPieces);
  run.start();
  run.net.run();
  uint64_t cursor = 0;
  telemetry::TraceEvent events[32];
  const size_t n = run.b->traceRead(&cursor, events, 32);
  ASSERT_GT(n, 3u);
  EXPECT_EQ(events[0].state, static_cast<uint8_t>(State::kAllocated));
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(events[i].peer, MemNet::kPeerOfB) << "event " << i;
}

class ProtocolFaults : public ::testing::TestWithParam<Mode> {};

const char* modeName(Mode m) {
  switch (m) {
    case Mode::kEagerPieces: return "eager pieces";
    case Mode::kRendezvousPieces: return "rendezvous pieces";
    case Mode::kEagerOffer: return "eager offer";
  }
  return "?";
}

TEST_P(ProtocolFaults, EverySingleFaultOfEveryMessageEndsCommittedOnceOrInASpecificError) {
  const Mode mode = GetParam();
  const size_t messages = cleanRunMessages(mode);
  ASSERT_EQ(messages, mode == Mode::kEagerOffer ? 4u : 9u)
      << "the clean run's shape changed: update this test";
  int committed = 0, failed = 0;
  for (size_t seq = firstMessage(mode); seq < messages; ++seq) {
    for (Fault f : {Fault::kDrop, Fault::kDuplicate, Fault::kReorder, Fault::kDelay}) {
      Exchange run(mode);
      run.net.setFault(seq, f);
      run.start();
      const Result r = run.finish();
      // A lost offer or advertisement leaves nothing to retry: the deadline ends both sides.
      expectSound(r, std::string(faultName(f)) + " of message " + std::to_string(seq),
                  {Status::kDeadline});
      (r.rx == Status::kOk ? committed : failed) += 1;
    }
  }
  // Duplicates, reorders, delays and the loss of a piece, a Done or a verdict are all repaired
  // (and with an eager offer the loss of the offer or of its bytes: the sender says it again).
  const size_t tried = messages - firstMessage(mode);
  EXPECT_GE(committed, static_cast<int>(4 * tried) - (mode == Mode::kEagerOffer ? 0 : 2));
  std::printf("[   INFO   ] %s: %zu messages x 4 faults: %d committed, %d ended DEADLINE\n",
              modeName(mode), tried, committed, failed);
}

// Exactly-once tells the sender the truth: every frame of a clean run duplicated (the copy at
// once, or 50 ms late, after the verdict it caused), alone and all together, each with every loss
// of the first three verdicts. Every run commits once, byte-exact, and the sender says PACT_OK:
// a copy of the send's own offer or Done is never taken for a second send of the key.
TEST_P(ProtocolFaults, DuplicatedFramesAndLostVerdictsNeverMisleadTheSender) {
  const Mode mode = GetParam();
  const size_t messages = cleanRunMessages(mode);
  int runs = 0;
  for (uint32_t lost = 0; lost < 8; ++lost) {
    for (Fault f : {Fault::kDuplicate, Fault::kDuplicateLate}) {
      for (size_t seq = firstMessage(mode); seq <= messages; ++seq) {  // seq == messages: every frame
        Exchange run(mode);
        if (seq == messages) {
          for (size_t s = firstMessage(mode); s < 64; ++s) run.net.setFault(s, f);
        } else {
          run.net.setFault(seq, f);
        }
        run.net.loseVerdicts(lost);
        run.start();
        const Result r = run.finish();
        const std::string what = std::string(faultName(f)) + " of " +
                                 (seq == messages ? std::string("every message") : "message " + std::to_string(seq)) +
                                 ", verdicts lost: mask " + std::to_string(lost);
        expectSound(r, what, {});
        EXPECT_EQ(r.rx, Status::kOk) << what << "\n" << r.log;
        EXPECT_EQ(r.tx, Status::kOk) << what << ": the sender was told " << statusName(r.tx) << "\n" << r.log;
        ++runs;
      }
    }
  }
  std::printf("[   INFO   ] %s: %d runs of duplicated frames and lost verdicts, each committed once and told so\n",
              modeName(mode), runs);
}

// A genuine second pact_send of a committed key is still refused as a duplicate, whatever
// happens to its frames (each duplicated, its verdicts lost), and commits nothing; never OK.
TEST_P(ProtocolFaults, ASecondSendOfACommittedKeyIsRefusedWhateverItsFramesMeet) {
  const Mode mode = GetParam();
  for (uint32_t lost = 0; lost < 4; ++lost) {
    for (Fault f : {Fault::kNone, Fault::kDuplicate, Fault::kDuplicateLate}) {
      Exchange run(mode);
      run.start();
      const Result first = run.finish();
      ASSERT_EQ(first.rx, Status::kOk) << first.log;
      ASSERT_EQ(first.tx, Status::kOk) << first.log;
      const size_t from = run.net.sent();
      for (size_t s = from; s < from + 32; ++s) run.net.setFault(s, f);
      run.net.loseVerdicts(lost << 1);  // the first run had one verdict; lose the second send's
      run.sendIt();
      run.net.run();
      const XferInfo again = infoOf(*run.b, run.tx);
      const std::string what = std::string(faultName(f)) + ", verdicts lost: mask " + std::to_string(lost);
      EXPECT_TRUE(again.final) << what << "\n" << run.log();
      // A plain offer is not repeated (an eager one is, until answered): with its verdict lost it
      // ends at its deadline, as after a lost offer.
      const bool mayTimeOut = mode != Mode::kEagerOffer && lost != 0;
      EXPECT_TRUE(again.result == Status::kDuplicate || (mayTimeOut && again.result == Status::kDeadline))
          << what << ": " << statusName(again.result) << "\n" << run.log();
      EXPECT_EQ(run.commits, 1) << what;
    }
  }
}

// Rail failover (engine/failover.cpp; MemNet::setRailOut) at every message of a clean run: the
// rail dies as that message is due, with everything then in flight (before the first piece,
// between pieces, after the last piece before its Done, with the verdict); the link sends again
// the pieces of live attempts and each side repeats its own control messages. Ordered (one
// piece) and unordered (three), pieces copied or fetched, or an eager offer: every run commits
// once, byte-exact, on both sides, and uses no retry (there are none to use).
TEST_P(ProtocolFaults, ARailLostAtEveryStepIsFailedOverAndCommitsOnce) {
  const Mode mode = GetParam();
  for (Order order : {Order::kUnordered, Order::kOrdered}) {
    size_t messages = 0;
    {
      Exchange clean(mode, 0, nullptr, nullptr, order);
      clean.start();
      ASSERT_EQ(clean.finish().rx, Status::kOk);
      messages = clean.net.sent();
    }
    for (size_t seq = firstMessage(mode); seq < messages; ++seq) {
      Exchange run(mode, 0, nullptr, nullptr, order);
      run.a->setRailFailover(MemNet::kPeerOfA, std::chrono::milliseconds(400));
      run.b->setRailFailover(MemNet::kPeerOfB, std::chrono::milliseconds(400));
      run.net.setRailOut(seq);
      run.start();
      const Result r = run.finish();
      const std::string what = std::string(order == Order::kOrdered ? "ordered" : "unordered") +
                               ", rail lost at message " + std::to_string(seq);
      expectSound(r, what, {});
      EXPECT_EQ(r.rx, Status::kOk) << what << "\n" << r.log;
    }
  }
}

// The same with two transfers in flight at once (a second key into a second block): wherever the
// rail is lost, both commit once, byte-exact, and neither uses a retry.
TEST_P(ProtocolFaults, ARailLostAtEveryStepWithTwoInFlightCommitsBothOnce) {
  const Mode mode = GetParam();
  constexpr TransferKey kSecond{1, 3, kEpoch, 0};
  for (Order order : {Order::kUnordered, Order::kOrdered}) {
    for (size_t seq = firstMessage(mode);; ++seq) {
      Exchange run(mode, 0, nullptr, nullptr, order);
      run.a->setRailFailover(MemNet::kPeerOfA, std::chrono::milliseconds(400));
      run.b->setRailFailover(MemNet::kPeerOfB, std::chrono::milliseconds(400));
      run.net.setRailOut(seq);
      std::vector<uint8_t> src2(kBytes), dst2(kBytes);
      pact::test::fillPattern(src2.data(), kBytes, 78);
      Registration srcMr2, dstMr2;
      srcMr2.addr = src2.data();
      srcMr2.length = kBytes;
      dstMr2.addr = dst2.data();
      dstMr2.length = kBytes;
      const BlockRef to{&dstMr2, 0, kBytes}, from{&srcMr2, 0, kBytes};
      run.start();
      auto rx2 = run.a->expect(kSecond, std::span(&to, 1), 0, 0);
      ASSERT_TRUE(rx2.ok()) << rx2.error().message;
      auto tx2 = run.b->send(MemNet::kPeerOfB, kSecond, std::span(&from, 1), 0, 0);
      ASSERT_TRUE(tx2.ok()) << tx2.error().message;
      run.net.run();
      auto i2r = run.a->query(*rx2);
      auto t2r = run.b->query(*tx2);
      ASSERT_TRUE(i2r.ok() && t2r.ok());
      const XferInfo i2 = *i2r, t2 = *t2r;
      const std::string what = std::string(order == Order::kOrdered ? "ordered" : "unordered") +
                               ", two in flight, rail lost at message " + std::to_string(seq);
      EXPECT_TRUE(i2.final && i2.result == Status::kOk) << what << ": second transfer " << statusName(i2.result);
      EXPECT_TRUE(t2.final && t2.result == Status::kOk) << what << ": second send " << statusName(t2.result);
      EXPECT_EQ(pact::test::firstMismatch(dst2.data(), kBytes, 78), -1) << what << ": second block differs";
      run.a->release(*rx2).ignore();
      run.b->release(*tx2).ignore();
      const size_t sent = run.net.sent();
      Result r = run.finish();
      EXPECT_EQ(r.commits, 2) << what << ": commits of both transfers";
      --r.commits;  // the first transfer's alone, for the invariants
      expectSound(r, what, {});
      EXPECT_EQ(r.rx, Status::kOk) << what;
      if (seq >= sent) break;  // past the last message of the run: every point was tried
    }
  }
}

TEST_P(ProtocolFaults, AnEpochSwitchAtEveryStepNeverCommitsAStaleTransfer) {
  const Mode mode = GetParam();
  const size_t messages = cleanRunMessages(mode);
  for (size_t at = 0; at <= messages; ++at) {
    if (at != 0 && at <= firstMessage(mode)) continue;
    Exchange run(mode);
    int commitsAtSwitch = -1;
    run.net.afterEach = [&](size_t seq) {
      if (seq + 1 == at && commitsAtSwitch < 0) {
        commitsAtSwitch = run.commits;
        ASSERT_TRUE(run.a->setEpoch(kEpoch + 1).ok());
      }
    };
    if (at == 0) {
      ASSERT_TRUE(run.a->setEpoch(kEpoch + 1).ok());  // before anything: expect refuses
      const TransferKey key{1, 2, kEpoch, 0};
      const BlockRef to{&run.dstMr, 0, kBytes};
      EXPECT_EQ(run.a->expect(key, std::span(&to, 1), 0, 0).status(), Status::kEpochMismatch);
      continue;
    }
    run.start();
    const Result r = run.finish();
    const std::string what = "epoch switch after message " + std::to_string(at - 1);
    expectSound(r, what, {Status::kEpochMismatch});
    // Committed only if it had committed before the switch.
    EXPECT_EQ(r.rx == Status::kOk, commitsAtSwitch == 1) << what << "\n" << r.log;
  }
}

TEST_P(ProtocolFaults, AReleaseByEitherSideAtEveryStepReachesTheOtherSide) {
  const Mode mode = GetParam();
  const size_t messages = cleanRunMessages(mode);
  for (int side = 0; side < 2; ++side) {
    for (size_t at = firstMessage(mode); at < messages; ++at) {
      Exchange run(mode);
      bool done = false;
      int commitsAtRelease = -1;
      run.net.afterEach = [&](size_t seq) {
        if (seq != at || done) return;
        done = true;
        commitsAtRelease = run.commits;
        if (side == 0) run.a->release(run.rx).ignore();
        else run.b->release(run.tx).ignore();
      };
      run.start();
      run.net.run();
      const std::string what = std::string(side == 0 ? "receiver" : "sender") +
                               " releases after message " + std::to_string(at);
      SCOPED_TRACE(what);
      Protocol& survivor = side == 0 ? *run.b : *run.a;
      const uint64_t otherId = side == 0 ? run.tx : run.rx;
      auto found = survivor.query(otherId);
      ASSERT_TRUE(found.ok());
      const XferInfo other = *found;
      EXPECT_TRUE(other.final) << "the other side was not told";
      EXPECT_LE(run.commits, 1);
      if (other.result == Status::kOk) {
        EXPECT_TRUE(pact::test::firstMismatch(run.dst.data(), kBytes, 77) == -1);
        // A receiver's release cannot commit; a sender's only once its Done had left.
        EXPECT_TRUE(side == 1 || commitsAtRelease == 1);
      } else {
        EXPECT_EQ(other.result, Status::kCanceled) << statusName(other.result);
        EXPECT_EQ(run.commits, commitsAtRelease < 0 ? 0 : commitsAtRelease);
      }
      survivor.release(otherId).ignore();
      run.net.run();
      EXPECT_EQ(run.a->openTransfers() + run.b->openTransfers(), 0u);
    }
  }
}

// Every piece of every attempt lost (PACT_FAULT drop=1 at the sender): the receiver waits the
// 20 ms straggler grace once per attempt, however often the sender repeats its Done, then asks
// for the next attempt; after `retries` attempts it gives up (INCOMPLETE on both sides).
TEST(ProtocolPacing, EachRetryWaitsTheStragglerGraceOnce) {
  constexpr int kRetries = 30;  // past 200 ms: the sender repeats its Done meanwhile
  telemetry::CounterSet& cls = telemetry::classCounters("engine", "DEFAULT");  // both protocols' route 0
  const auto before = cls.values();
  Exchange run(Mode::kEagerPieces, kRetries, "drop=1,seed=1");
  run.net.setLatency(std::chrono::microseconds(700));  // so the repeats fall between attempts
  std::vector<TimePoint> verdicts;  // when the receiver's verdicts (retry, then abort) arrived
  run.net.afterEach = [&](size_t seq) {
    if (run.net.log()[seq].find("A->B verdict") != std::string::npos) verdicts.push_back(virtualNow());
  };
  const TimePoint t0 = virtualNow();
  run.start();
  const Result r = run.finish();
  EXPECT_EQ(r.rx, Status::kIncomplete) << statusName(r.rx);
  EXPECT_EQ(r.tx, Status::kIncomplete) << statusName(r.tx);
  EXPECT_EQ(r.commits, 0);
  EXPECT_EQ(r.open, 0u);
  EXPECT_EQ(run.a->counters().get(telemetry::kRetried), static_cast<uint64_t>(kRetries));
  // The class counts them too: the attempts, the dropped pieces, both ends' error of kind retries.
  auto delta = [&](size_t i) { return cls.get(i) - before[i]; };
  EXPECT_EQ(delta(telemetry::kClassRetransmits), 2u * kRetries) << "each end counts each attempt";
  EXPECT_GE(delta(telemetry::kClassFaultsInjected), static_cast<uint64_t>(kRetries));
  EXPECT_EQ(delta(telemetry::classError(telemetry::ErrorKind::kRetries)), 2u);
  EXPECT_EQ(delta(telemetry::kClassMessagesSent) + delta(telemetry::kClassMessagesReceived), 0u);
  ASSERT_EQ(verdicts.size(), static_cast<size_t>(kRetries + 1)) << r.log;
  // One grace per attempt: no timer of an earlier attempt cuts one short.
  TimePoint previous = t0;
  for (TimePoint t : verdicts) {
    EXPECT_GE(t - previous, std::chrono::milliseconds(20)) << r.log;
    previous = t;
  }
}

// ---- eager offers: the paths a clean run does not take ----

// Offered before the receiver expects it: the bytes are not kept; the expect advertises and they
// come again as pieces.
TEST(ProtocolEager, AnOfferBeforeTheExpectComesAgainAsPieces) {
  Exchange run(Mode::kEagerOffer);
  run.sendIt();
  run.net.run(std::chrono::milliseconds(1));
  EXPECT_EQ(run.a->counters().get(telemetry::kBytesReceived), 0u);
  run.expectIt();
  const Result r = run.finish();
  EXPECT_EQ(r.rx, Status::kOk);
  EXPECT_EQ(r.tx, Status::kOk);
  EXPECT_TRUE(r.exact);
  EXPECT_EQ(r.commits, 1);
  EXPECT_NE(r.log.find("A->B advertise"), std::string::npos) << r.log;
  EXPECT_NE(r.log.find("B->A piece"), std::string::npos) << r.log;
}

// The receiver took back the sender's credit after the offer left: the bytes arriving unasked
// do not land; the transfer waits for credit and then moves as pieces.
TEST(ProtocolEager, WithoutCreditTheBytesDoNotLandAndComeAsPiecesWhenGranted) {
  Exchange run(Mode::kEagerOffer);
  run.expectIt();
  run.sendIt();
  ASSERT_TRUE(run.a->setCredit(MemNet::kPeerOfA, 0).ok());
  run.net.run(std::chrono::milliseconds(1));
  EXPECT_FALSE(infoOf(*run.a, run.rx).final);
  EXPECT_EQ(run.a->counters().get(telemetry::kBytesReceived), 0u);
  EXPECT_EQ(run.a->counters().get(telemetry::kStagedBytes), 0u);
  ASSERT_TRUE(run.a->setCredit(MemNet::kPeerOfA, kUnlimited).ok());
  const Result r = run.finish();
  EXPECT_EQ(r.rx, Status::kOk);
  EXPECT_EQ(r.tx, Status::kOk);
  EXPECT_TRUE(r.exact);
  EXPECT_EQ(r.commits, 1);
}

// Eager bytes that fail their checksum are asked for again by the advertisement (a retry), then
// as pieces; with every landing corrupted the retries run out: CHECKSUM on both sides.
TEST(ProtocolEager, CorruptEagerBytesAreAskedForAgainAsPieces) {
  Exchange run(Mode::kEagerOffer, 2, nullptr, "corrupt=1,seed=3");
  run.start();
  const Result r = run.finish();
  EXPECT_EQ(r.rx, Status::kChecksum) << statusName(r.rx) << "\n" << r.log;
  EXPECT_EQ(r.tx, Status::kChecksum) << statusName(r.tx);
  EXPECT_EQ(r.commits, 0);
  EXPECT_EQ(r.open, 0u);
  EXPECT_EQ(run.a->counters().get(telemetry::kRetried), 2u);
  const size_t eager = r.log.find("B->A eager offer"), advertise = r.log.find("A->B advertise");
  ASSERT_NE(advertise, std::string::npos) << r.log;
  EXPECT_LT(eager, advertise) << r.log;
}

// A second send of a committed key, offered eagerly, is refused as a duplicate (not taken for
// the first one's repeated offer) and commits nothing.
TEST(ProtocolEager, ASecondSendOfACommittedKeyIsADuplicate) {
  Exchange run(Mode::kEagerOffer);
  run.start();
  Result r = run.finish();
  ASSERT_EQ(r.rx, Status::kOk);
  ASSERT_EQ(r.tx, Status::kOk);
  run.sendIt();
  run.net.run();
  const XferInfo again = infoOf(*run.b, run.tx);
  EXPECT_TRUE(again.final);
  EXPECT_EQ(again.result, Status::kDuplicate) << statusName(again.result) << "\n" << run.log();
  EXPECT_EQ(run.commits, 1);
}

// A sender that releases an eager transfer the receiver has not expected yet cannot know
// whether it committed: its Cancel is answered, both end CANCELED and nothing stays open.
TEST(ProtocolEager, AReleaseBeforeTheExpectIsAnsweredAndEndsCanceled) {
  Exchange run(Mode::kEagerOffer);
  run.sendIt();
  run.net.run(std::chrono::milliseconds(1));
  auto gone = run.b->release(run.tx);
  ASSERT_TRUE(gone.ok());
  EXPECT_FALSE(*gone);  // it waits for the answer
  run.net.run();
  EXPECT_EQ(run.b->openTransfers(), 0u) << run.log();
  run.expectIt();  // the offer is gone: the expect waits (ends at its deadline or release)
  run.net.run(std::chrono::milliseconds(1));
  EXPECT_FALSE(infoOf(*run.a, run.rx).final);
  EXPECT_EQ(run.commits, 0);
  EXPECT_NE(run.log().find("B->A cancel"), std::string::npos) << run.log();
}

// A piece that lies outside what the receiver advertised is refused before a byte moves: the
// transfer aborts with out-of-range on both sides, and the receiver counts it (out_of_range,
// aborted), for eager pieces and rendezvous ones alike.
TEST(ProtocolRange, APieceOutsideTheAdvertisedBlocksIsRefusedAndCounted) {
  for (Mode mode : {Mode::kEagerPieces, Mode::kRendezvousPieces}) {
    Exchange run(mode);
    const uint64_t abortedBefore = run.a->counters().get(telemetry::kAborted);
    // Two credit grants, the offer, the advertisement, then the pieces: the first is message 4.
    run.net.setFault(4, Fault::kOutOfRange);
    run.start();
    const Result r = run.finish();
    SCOPED_TRACE(r.log);
    ASSERT_NE(r.log.find("#4 B->A piece"), std::string::npos) << "message 4 is not a piece";
    EXPECT_EQ(r.commits, 0) << "a transfer with a piece out of range committed";
    EXPECT_EQ(r.rx, Status::kOutOfRange) << statusName(r.rx);
    EXPECT_NE(r.tx, Status::kOk);
    EXPECT_EQ(run.a->counters().get(telemetry::kOutOfRange), 1u);
    EXPECT_GT(run.a->counters().get(telemetry::kAborted), abortedBefore);
    EXPECT_EQ(r.open, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Landing, ProtocolFaults,
                         ::testing::Values(Mode::kEagerPieces, Mode::kRendezvousPieces,
                                           Mode::kEagerOffer),
                         [](const auto& info) {
                           switch (info.param) {
                             case Mode::kEagerPieces: return "Eager";
                             case Mode::kRendezvousPieces: return "Rendezvous";
                             case Mode::kEagerOffer: return "EagerOffer";
                           }
                           return "?";
                         });

}  // namespace
}  // namespace pact::engine::test
