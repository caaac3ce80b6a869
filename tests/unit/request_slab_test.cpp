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

TEST(TagSpaces, ReuseComesBackWithTheNextGeneration) {
  TagSpaces spaces;
  const uint32_t a = *spaces.take();
  EXPECT_EQ(tag::indexOf(a), 1u);
  EXPECT_EQ(tag::generationOf(a), 0u);
  spaces.give(a);
  const uint32_t b = *spaces.take();
  EXPECT_EQ(tag::indexOf(b), 1u) << "a given-back index is reused before a new one is minted";
  EXPECT_EQ(tag::generationOf(b), 1u);
  EXPECT_NE(a, b);
  EXPECT_EQ(spaces.recycled(), 1u);
}

TEST(TagSpaces, OldestGivenBackFirstAndNeverTwiceLive) {
  TagSpaces spaces;
  std::vector<uint32_t> live;
  for (int i = 0; i < 5; ++i) live.push_back(*spaces.take());
  spaces.give(live[3]);
  spaces.give(live[1]);
  EXPECT_EQ(tag::indexOf(*spaces.take()), tag::indexOf(live[3]));
  EXPECT_EQ(tag::indexOf(*spaces.take()), tag::indexOf(live[1]));
  EXPECT_EQ(tag::indexOf(*spaces.take()), 6u);
  EXPECT_EQ(spaces.live(), 6u);
}

TEST(TagSpaces, GenerationsCycleAndTheTagCarriesThem) {
  TagSpaces spaces;
  std::set<uint64_t> tags;
  for (uint32_t g = 0; g < (1u << tag::kGenerationBits); ++g) {
    const uint32_t s = *spaces.take();
    EXPECT_EQ(tag::generationOf(s), g);
    tags.insert(tag::make(s, 7, 0, 0, false));
    spaces.give(s);
  }
  EXPECT_EQ(tags.size(), size_t{1} << tag::kGenerationBits) << "each generation tags differently";
  EXPECT_EQ(tag::generationOf(*spaces.take()), 0u) << "and the generation wraps";
}

TEST(TagSpaces, ExhaustionIsAnError) {
  TagSpaces spaces;
  for (uint32_t i = 0; i < tag::kMaxIndex; ++i) ASSERT_TRUE(spaces.take().ok());
  auto more = spaces.take();
  EXPECT_EQ(more.status(), Status::kNoResource);
  EXPECT_NE(more.error().message.find("receive tag spaces"), std::string::npos);
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
