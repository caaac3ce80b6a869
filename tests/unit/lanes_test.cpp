// Lanes: which pieces go to UCX at once and which wait for room (laneCap), per channel kind. The
// post callback only records; no UCX endpoint is needed for the steering decisions.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "transport/lanes.h"

namespace pact::transport {
namespace {

constexpr size_t kKiB = 1024, kMiB = kKiB * kKiB;

struct Rig {
  explicit Rig(bool ordered, int lanes, size_t chunk = 512 * kKiB) {
    ChannelConfig cfg;
    cfg.ordered = ordered;
    cfg.lanes = lanes;
    cfg.chunk = chunk;
    l.configure(cfg);
    for (int i = 0; i < lanes; ++i) l.add(SharedEndpoint::own(ucx::Endpoint{}), 0);
    pieces.resize(64);
  }
  void send(size_t n, size_t size) {
    for (size_t i = 0; i < n; ++i) {
      LanePiece* p = &pieces[next++];
      p->size = size;
      l.dispatch(p, [this](LanePiece* q, ucx::Endpoint&) { posted.push_back(q); });
    }
  }
  void complete(LanePiece* p) {
    l.completed(*p);
    l.pump([this](LanePiece* q, ucx::Endpoint&) { posted.push_back(q); });
  }
  Lanes l;
  std::vector<LanePiece> pieces;
  std::vector<LanePiece*> posted;
  size_t next = 0;
};

TEST(Lanes, AnOrderedLaneTakesEveryWholeMessageAtOnce) {
  Rig r(true, 1);
  r.send(8, 16 * kMiB);  // a window of 16 MiB messages: far over the cap, all posted
  EXPECT_EQ(r.posted.size(), 8u);
  EXPECT_TRUE(r.l.idle());
}

TEST(Lanes, OneUnorderedLaneHoldsPiecesBeyondTheCapUntilEarlierOnesComplete) {
  Rig r(false, 1);  // 512 KiB pieces: cap max(8 x 512 KiB, 2 MiB) = 4 MiB in flight
  r.send(16, 512 * kKiB);
  ASSERT_EQ(r.posted.size(), 8u);
  EXPECT_FALSE(r.l.idle());
  r.complete(r.posted[0]);
  EXPECT_EQ(r.posted.size(), 9u);  // one out, the next one in
  while (r.posted.size() < 16) r.complete(r.posted[r.posted.size() - 8]);
  EXPECT_TRUE(r.l.idle());
}

TEST(Lanes, AnIdleLaneTakesAPieceOfAnySize) {
  Rig r(false, 1);  // cap 4 MiB
  r.send(2, 64 * kMiB);
  EXPECT_EQ(r.posted.size(), 1u);  // the first over the cap still goes; the second waits
  r.complete(r.posted[0]);
  EXPECT_EQ(r.posted.size(), 2u);
}

TEST(Lanes, TwoUnorderedLanesEachTakeUpToTheCap) {
  Rig r(false, 2);
  r.send(20, 512 * kKiB);
  ASSERT_EQ(r.posted.size(), 16u);
  size_t onLane[2] = {};
  for (LanePiece* p : r.posted) ++onLane[p->lane];
  EXPECT_EQ(onLane[0], 8u);
  EXPECT_EQ(onLane[1], 8u);
}


// ---- class priority (transport/priority.h) ---------------------------------------------------

// Two classes to one peer share a gate: bulk (priority 0, unordered 64 KiB pieces) and latency
// (priority 1, ordered). Every piece handed to "UCX" is logged in order, with its class. The gate
// lingers not at all here (the next test looks at the linger with explicit times).
struct PriorityRig {
  PriorityRig()
      : gate(std::make_shared<PeerGate>(std::chrono::nanoseconds(0))), bulk(false, 1, 64 * kKiB), latency(true, 1) {
    bulk.l.setGate(gate, 0);
    latency.l.setGate(gate, 1);
  }
  void post(Rig& r, size_t n, size_t size, char cls) {
    for (size_t i = 0; i < n; ++i) {
      LanePiece* p = &r.pieces[r.next++];
      p->size = size;
      r.l.dispatch(p, [&, cls](LanePiece* q, ucx::Endpoint&) { r.posted.push_back(q), log.push_back(cls); });
    }
  }
  // A piece of r completes; both sets are pumped, as the owners' progress does.
  void complete(Rig& r, LanePiece* p) {
    r.l.completed(*p);
    pump();
  }
  void pump() {
    bulk.l.pump([&](LanePiece* q, ucx::Endpoint&) { bulk.posted.push_back(q), log.push_back('b'); });
    latency.l.pump([&](LanePiece* q, ucx::Endpoint&) { latency.posted.push_back(q), log.push_back('L'); });
  }
  std::shared_ptr<PeerGate> gate;
  Rig bulk, latency;
  std::string log;
};

TEST(Priority, AHigherClassGoesFirstAndTheBulkClassHandsUcxNothingNewMeanwhile) {
  PriorityRig r;
  r.post(r.bulk, 48, 64 * kKiB, 'b');  // a 3 MiB message: 32 pieces fill the lane's 2 MiB cap
  ASSERT_EQ(r.bulk.posted.size(), 32u);
  r.post(r.latency, 2, 256 * kKiB, 'L');  // the latency class goes at once, bulk is not pumped
  EXPECT_EQ(r.latency.posted.size(), 2u);
  EXPECT_EQ(r.log.substr(32), "LL");
  EXPECT_GT(r.gate->work(1), 0);
  // Bulk pieces complete one by one while the latency class is busy: none of the 16 waiting
  // bulk pieces goes out, not even when bulk has nothing in flight any more.
  for (int i = 0; i < 32; ++i) r.complete(r.bulk, r.bulk.posted[static_cast<size_t>(i)]);
  EXPECT_EQ(r.bulk.posted.size(), 32u) << "bulk took new pieces while a higher class was busy";
  EXPECT_EQ(r.bulk.l.holds(), 1u);
  // The latency class finishes: bulk fills its cap again at once (this gate does not linger).
  r.complete(r.latency, r.latency.posted[0]);
  EXPECT_EQ(r.bulk.posted.size(), 32u);
  r.complete(r.latency, r.latency.posted[1]);
  EXPECT_EQ(r.gate->work(1), 0);
  EXPECT_EQ(r.bulk.posted.size(), 48u);
  EXPECT_EQ(r.log, std::string(32, 'b') + "LL" + std::string(16, 'b'));
}

// A higher class busy longer than the pause bound (a send waiting for a receiver that has not
// posted, or one message after another) stops the bulk class no more: it sends one piece at a
// time, one per trickle interval (none here; the interval itself is PeerGate's, 10 ms).
TEST(Priority, AfterThePauseBoundTheBulkClassSendsOnePieceAtATime) {
  auto gate = std::make_shared<PeerGate>(std::chrono::nanoseconds(0), std::chrono::nanoseconds(0),
                                         std::chrono::nanoseconds(0));
  Rig bulk(false, 1, 64 * kKiB), latency(true, 1);
  bulk.l.setGate(gate, 0);
  latency.l.setGate(gate, 1);
  latency.send(1, 256 * kKiB);
  bulk.send(4, 64 * kKiB);
  EXPECT_EQ(bulk.posted.size(), 1u) << "one piece, then it holds";
  bulk.complete(bulk.posted[0]);
  EXPECT_EQ(bulk.posted.size(), 2u);
  latency.complete(latency.posted[0]);
  bulk.complete(bulk.posted[1]);
  EXPECT_EQ(bulk.posted.size(), 4u);
}

TEST(Priority, AnOrderedBulkClassQueuesBehindAHigherOneAndKeepsItsOrder) {
  PriorityRig r;
  r.bulk.l.setGate(nullptr, 0);
  Rig ordered(true, 1);
  ordered.l.setGate(r.gate, 0);
  auto postOrdered = [&](size_t n) {
    for (size_t i = 0; i < n; ++i) {
      LanePiece* p = &ordered.pieces[ordered.next++];
      p->size = kMiB;
      ordered.l.dispatch(p, [&](LanePiece* q, ucx::Endpoint&) { ordered.posted.push_back(q); });
    }
  };
  postOrdered(1);                 // nothing higher is busy: posted at once
  r.post(r.latency, 1, 4 * kKiB, 'L');
  postOrdered(3);                 // queued: one in flight already, a higher class busy
  EXPECT_EQ(ordered.posted.size(), 1u);
  EXPECT_EQ(ordered.l.holds(), 1u);  // it stood back once
  r.complete(r.latency, r.latency.posted[0]);
  ordered.l.pump([&](LanePiece* q, ucx::Endpoint&) { ordered.posted.push_back(q); });
  ASSERT_EQ(ordered.posted.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(ordered.posted[i], &ordered.pieces[i]) << "posting order";
}

// A latency class that sends message after message: between two of them the bulk class stays
// restrained for the gate's linger, so it does not refill its lanes in front of the next one.
TEST(Priority, TheBulkClassStaysRestrainedForTheLingerAfterAHigherClassGoesIdle) {
  PeerGate gate(std::chrono::milliseconds(5));
  EXPECT_FALSE(gate.higherBusy(0)) << "never busy: no linger";
  gate.add(2, 4096);
  EXPECT_TRUE(gate.higherBusy(0));
  EXPECT_TRUE(gate.higherBusy(1));
  EXPECT_FALSE(gate.higherBusy(2));
  const int64_t idleAt = PeerGate::nowNs();
  gate.add(2, -4096);
  EXPECT_TRUE(gate.higherBusy(0, idleAt + 4'000'000)) << "within the linger";
  EXPECT_FALSE(gate.higherBusy(0, idleAt + 6'000'000)) << "past the linger";
  EXPECT_FALSE(gate.higherBusy(2, idleAt)) << "a level never waits for itself";
}

TEST(Priority, WorkLeavesTheGateWithTheLanes) {
  auto gate = std::make_shared<PeerGate>(std::chrono::nanoseconds(0));
  {
    Rig high(true, 1);
    high.l.setGate(gate, 3);
    high.send(2, kMiB);
    EXPECT_EQ(gate->work(3), static_cast<int64_t>(2 * kMiB));
    EXPECT_TRUE(gate->higherBusy(0));
    EXPECT_FALSE(gate->higherBusy(3));
    high.complete(high.posted[0]);
    EXPECT_EQ(gate->work(3), static_cast<int64_t>(kMiB));
  }  // a closed comm's pieces complete without it: its work is taken off when it goes
  EXPECT_EQ(gate->work(3), 0);
  EXPECT_FALSE(gate->higherBusy(0));
  EXPECT_EQ(PeerGate::forPeer(42), PeerGate::forPeer(42));
  EXPECT_NE(PeerGate::forPeer(42), PeerGate::forPeer(43));
}
}  // namespace
}  // namespace pact::transport
