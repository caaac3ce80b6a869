// Lanes: which pieces go to UCX at once and which wait for room (laneCap), per channel kind. The
// post callback only records; no UCX endpoint is needed for the steering decisions.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace pact::transport
