// The fixed request pool: capacity, NULL on exhaustion, reuse, ownership checks.
#include <gtest/gtest.h>

#include <set>

#include "net/request.h"

namespace pact::net {
namespace {

TEST(RequestPool, HandsOutCapacityThenNull) {
  RequestPool pool(4);
  std::set<Request*> got;
  for (int i = 0; i < 4; ++i) {
    Request* r = pool.acquire(nullptr, true, 1, 1);
    ASSERT_NE(r, nullptr);
    EXPECT_TRUE(pool.owns(r));
    EXPECT_TRUE(r->inUse);
    got.insert(r);
  }
  EXPECT_EQ(got.size(), 4u);
  EXPECT_EQ(pool.used(), 4u);
  EXPECT_EQ(pool.acquire(nullptr, true, 1, 1), nullptr);  // back-pressure, not an error
  pool.release(*got.begin());
  Request* again = pool.acquire(nullptr, false, 3, 5);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again, *got.begin());
  EXPECT_FALSE(again->isSend);
  EXPECT_EQ(again->nbuffers, 3);
  EXPECT_EQ(again->parts.size(), 5u);
  EXPECT_EQ(again->parts[4].owner, again);
  EXPECT_EQ(again->lastPiece[0], -1);
  EXPECT_EQ(again->pending, 0);
}

TEST(RequestPool, ResetsPartsOnReuse) {
  RequestPool pool(1);
  Request* r = pool.acquire(nullptr, false, 2, 2);
  r->parts[0].size = 77;
  r->parts[0].status = Status::kRemoteError;
  r->pending = 2;
  pool.release(r);
  r = pool.acquire(nullptr, false, 2, 2);
  EXPECT_EQ(r->parts[0].size, 0u);
  EXPECT_EQ(r->parts[0].status, Status::kOk);
  EXPECT_TRUE(r->done());
}

TEST(RequestPool, PostingOrderIsRecorded) {
  RequestPool pool(4);
  Request* a = pool.acquire(nullptr, true, 1, 1);
  Request* b = pool.acquire(nullptr, true, 1, 1);
  EXPECT_LT(a->postIndex, b->postIndex);
  pool.release(a);
  Request* c = pool.acquire(nullptr, true, 1, 1);
  EXPECT_LT(b->postIndex, c->postIndex);
}

TEST(RequestPool, ForEachInUseVisitsOnlyLiveOnes) {
  RequestPool pool(8);
  Request* a = pool.acquire(nullptr, true, 1, 1);
  Request* b = pool.acquire(nullptr, true, 1, 1);
  pool.release(a);
  int n = 0;
  pool.forEachInUse([&](Request& r) {
    EXPECT_EQ(&r, b);
    ++n;
  });
  EXPECT_EQ(n, 1);
  Request outside;
  EXPECT_FALSE(pool.owns(&outside));
}

TEST(RequestPool, SizesFollowNcclLimits) {
  EXPECT_EQ(kRecvPoolSize, 32u);  // NCCL_NET_MAX_REQUESTS
  EXPECT_EQ(kSendPoolSize, 32u * kMaxBuffers);
}

}  // namespace
}  // namespace pact::net
