// The request slab every comm of a device context draws from (reuse, growth, orphans), the
// receive tag spaces (recycling with a generation), and the lanes' allocation-free queue.
#include <gtest/gtest.h>

#include <set>

#include "net/request.h"
#include "net/tags.h"
#include "transport/ring.h"

namespace pact::net {
namespace {

constexpr size_t kUcxRequest = 200;  // what UCX needs before each handle (not a cache-line multiple)

// Every part's UCX request memory lies inside its request, cache-line aligned, with the bytes UCX
// needs before each handle and no two parts' blocks overlapping.
TEST(RequestSlab, EachPartHasItsOwnUcxRequestMemory) {
  RequestSlab slab(kUcxRequest);
  Request* r = slab.acquire(nullptr, false, 2, 5);
  const auto lo = reinterpret_cast<uintptr_t>(r->ucxMem.data());
  const auto hi = lo + r->ucxMem.size();
  uintptr_t previous = 0;
  for (const Part& p : r->parts) {
    const auto h = reinterpret_cast<uintptr_t>(r->ucxHandle(&p));
    EXPECT_EQ(h % Request::kUcxAlign, 0u);
    EXPECT_GE(h - kUcxRequest, lo);
    EXPECT_LE(h, hi);
    if (previous != 0) {
      EXPECT_GE(h - kUcxRequest, previous);
    }
    previous = h;
  }
  slab.release(r);
}

TEST(RequestSlab, GrowsInsteadOfRefusing) {
  RequestSlab slab(kUcxRequest);
  std::set<Request*> got;
  for (int i = 0; i < 100; ++i) {
    Request* r = slab.acquire(nullptr, true, 1, 1);
    ASSERT_NE(r, nullptr);
    EXPECT_TRUE(r->inUse);
    EXPECT_EQ(r->slab, &slab);
    got.insert(r);
  }
  EXPECT_EQ(got.size(), 100u);
  EXPECT_EQ(slab.used(), 100u);
  EXPECT_GE(slab.capacity(), 100u);
  for (Request* r : got) slab.release(r);
  EXPECT_EQ(slab.used(), 0u);
  const size_t capacity = slab.capacity();
  for (int i = 0; i < 100; ++i) slab.acquire(nullptr, true, 1, 1);
  EXPECT_EQ(slab.capacity(), capacity) << "given-back requests are reused before the slab grows";
}

TEST(RequestSlab, TrimGivesTheMemoryBackOnlyWhenNothingIsTaken) {
  RequestSlab slab(kUcxRequest);
  Request* r = slab.acquire(nullptr, true, 1, 1);
  slab.trim();
  EXPECT_GT(slab.capacity(), 0u) << "a taken request keeps its chunk";
  slab.release(r);
  slab.trim();
  EXPECT_EQ(slab.capacity(), 0u);
  EXPECT_NE(slab.acquire(nullptr, true, 1, 1), nullptr) << "and it grows again";
}

TEST(RequestSlab, ResetsWhatARequestUses) {
  RequestSlab slab(kUcxRequest);
  Request* r = slab.acquire(nullptr, false, 2, 2);
  r->parts[0].size = 77;
  r->parts[0].status = Status::kRemoteError;
  r->pending = 2;
  slab.release(r);
  Request* again = slab.acquire(nullptr, false, 3, 5);
  EXPECT_EQ(again, r);
  EXPECT_FALSE(again->isSend);
  EXPECT_EQ(again->nbuffers, 3);
  EXPECT_EQ(again->parts.size(), 5u);
  EXPECT_EQ(again->parts[4].owner, again);
  EXPECT_EQ(again->parts[0].size, 0u);
  EXPECT_EQ(again->parts[0].status, Status::kOk);
  EXPECT_EQ(again->lastPiece[2], -1);
  EXPECT_TRUE(again->done());
}

TEST(RequestSlab, PostingOrderIsRecorded) {
  RequestSlab slab(kUcxRequest);
  Request* a = slab.acquire(nullptr, true, 1, 1);
  Request* b = slab.acquire(nullptr, true, 1, 1);
  EXPECT_LT(a->postIndex, b->postIndex);
  slab.release(a);
  Request* c = slab.acquire(nullptr, true, 1, 1);
  EXPECT_LT(b->postIndex, c->postIndex);
}

TEST(RequestSlab, CountsWhatUcxStillHolds) {
  RequestSlab slab(kUcxRequest);
  auto* owner = reinterpret_cast<Comm*>(0x1);  // never dereferenced
  Request* live = slab.acquire(owner, true, 1, 1);
  Request* orphan = slab.acquire(owner, true, 1, 1);
  live->pending = 1;
  orphan->pending = 1;
  orphan->comm = nullptr;  // its comm closed while UCX holds a part
  EXPECT_EQ(slab.stillHeld(), 2u);
  EXPECT_EQ(slab.orphaned(), 1u);
  int visited = 0;
  slab.forEachInUse([&](Request&) { ++visited; });
  EXPECT_EQ(visited, 2);
  orphan->pending = 0;
  slab.release(orphan);
  EXPECT_EQ(slab.orphaned(), 0u);
}

TEST(RequestSlab, InFlightBoundsFollowNccl) {
  EXPECT_EQ(kRecvInFlight, 32u);  // NCCL_NET_MAX_REQUESTS
  EXPECT_EQ(kSendInFlight, 32u * kMaxBuffers);
}

TEST(TagSpaces, AGivenBackIndexComesRoundAfterEveryOtherWithTheNextGeneration) {
  TagSpaces spaces(4);
  const uint32_t a = *spaces.take();
  EXPECT_EQ(tag::indexOf(a), 1u);
  EXPECT_EQ(tag::generationOf(a), 0u);
  spaces.give(a);
  for (uint32_t i = 2; i <= 4; ++i) {
    const uint32_t s = *spaces.take();
    EXPECT_EQ(tag::indexOf(s), i) << "round-robin: the given-back index waits its turn";
    EXPECT_EQ(tag::generationOf(s), 0u);
    spaces.give(s);
  }
  const uint32_t b = *spaces.take();
  EXPECT_EQ(tag::indexOf(b), 1u);
  EXPECT_EQ(tag::generationOf(b), 1u) << "the cursor wrapped: the next lap's generation";
  EXPECT_NE(a, b);
  EXPECT_EQ(spaces.recycled(), 4u);
}

TEST(TagSpaces, LiveIndicesAreSkippedAndNeverTwiceLive) {
  TagSpaces spaces(6);
  std::vector<uint32_t> live;
  for (int i = 0; i < 5; ++i) live.push_back(*spaces.take());
  spaces.give(live[3]);
  spaces.give(live[1]);
  EXPECT_EQ(tag::indexOf(*spaces.take()), 6u);
  EXPECT_EQ(tag::indexOf(*spaces.take()), tag::indexOf(live[1])) << "the next free one after the wrap";
  EXPECT_EQ(tag::indexOf(*spaces.take()), tag::indexOf(live[3]));
  EXPECT_EQ(spaces.live(), 6u);
  EXPECT_EQ(spaces.take().status(), Status::kNoResource);
  spaces.give(live[0]);
  spaces.give(live[0]);  // twice: the second is ignored
  EXPECT_EQ(spaces.live(), 5u);
  spaces.give(tag::kMaxIndex);  // never taken: ignored
  EXPECT_EQ(spaces.live(), 5u);
}

TEST(TagSpaces, AnIndexAndGenerationRecurOnlyAfterEveryGenerationsLap) {
  TagSpaces spaces(3);
  std::set<uint64_t> tags;
  const uint32_t laps = 1u << tag::kGenerationBits;
  uint32_t first = 0;
  for (uint32_t i = 0; i < 3 * laps; ++i) {
    const uint32_t s = *spaces.take();
    if (i == 0) first = s;
    EXPECT_EQ(tag::generationOf(s), i / 3);
    tags.insert(tag::make(s, 7, 0, 0, false));
    spaces.give(s);
  }
  EXPECT_EQ(tags.size(), size_t{3} * laps) << "every take of the 32 laps tags differently";
  EXPECT_EQ(*spaces.take(), first) << "and the 33rd lap wraps the generation";
}

TEST(TagSpaces, ExhaustionIsAnError) {
  TagSpaces spaces;
  EXPECT_EQ(spaces.capacity(), tag::kMaxIndex);
  for (uint32_t i = 0; i < tag::kMaxIndex; ++i) ASSERT_TRUE(spaces.take().ok());
  auto more = spaces.take();
  EXPECT_EQ(more.status(), Status::kNoResource);
  EXPECT_NE(more.error().message.find("receive tag spaces"), std::string::npos);
  spaces.give(77);
  EXPECT_EQ(tag::indexOf(*spaces.take()), 77u) << "the one free index, found in one lap";
}

TEST(Ring, FifoAcrossWrapAndGrowth) {
  transport::Ring<int> q;
  EXPECT_TRUE(q.empty());
  int next = 0, expect = 0;
  // Interleaved pushes and pops wrap the array; bursts make it grow with elements in the middle.
  for (int round = 0; round < 50; ++round) {
    for (int i = 0; i < round % 23 + 1; ++i) q.push_back(next++);
    for (int i = 0; i < round % 7 + 1 && !q.empty(); ++i) {
      EXPECT_EQ(q.front(), expect++);
      q.pop_front();
    }
  }
  std::vector<int> rest;
  q.forEach([&](int v) { rest.push_back(v); });
  ASSERT_EQ(rest.size(), q.size());
  for (int v : rest) EXPECT_EQ(v, expect++);
  EXPECT_EQ(expect, next);
  q.clear();
  EXPECT_TRUE(q.empty());
}

}  // namespace
}  // namespace pact::net
