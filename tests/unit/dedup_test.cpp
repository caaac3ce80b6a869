// DedupSet and GenerationTracker: duplicates, identity fields, FIFO eviction at capacity, and
// generation staleness.
#include <gtest/gtest.h>

#include <cstdint>

#include "engine/dedup.h"

namespace pact::engine {
namespace {

// (request, transfer, generation), on an epoch of its own: the tables look at the identity only.
TransferKey key(uint64_t request, uint64_t transfer, uint32_t generation) {
  return TransferKey{request, transfer, 9, generation};
}

TEST(DedupSet, InsertTwiceIsRefused) {
  DedupSet set(8);
  EXPECT_FALSE(set.contains(key(1, 2, 3)));
  EXPECT_TRUE(set.insert(key(1, 2, 3)));
  EXPECT_TRUE(set.contains(key(1, 2, 3)));
  EXPECT_FALSE(set.insert(key(1, 2, 3)));
  EXPECT_EQ(set.size(), 1u);
}

TEST(DedupSet, EveryFieldIsPartOfTheIdentity) {
  DedupSet set(8);
  EXPECT_TRUE(set.insert(key(1, 2, 3)));
  EXPECT_TRUE(set.insert(key(2, 2, 3)));
  EXPECT_TRUE(set.insert(key(1, 3, 3)));
  EXPECT_TRUE(set.insert(key(1, 2, 4)));
  EXPECT_TRUE(set.insert(key(2, 1, 3)));  // swapped ids are another transfer
  EXPECT_EQ(set.size(), 5u);
  EXPECT_FALSE(set.contains(key(3, 2, 1)));
  EXPECT_TRUE(set.insert(key(UINT64_MAX, UINT64_MAX, UINT32_MAX)));
  EXPECT_TRUE(set.contains(key(UINT64_MAX, UINT64_MAX, UINT32_MAX)));
}

TEST(DedupSet, TheEpochIsNotPartOfTheIdentity) {
  DedupSet set(8);
  EXPECT_TRUE(set.insert(TransferKey{1, 2, 7, 3}));
  EXPECT_TRUE(set.contains(TransferKey{1, 2, 8, 3}));
  EXPECT_FALSE(set.insert(TransferKey{1, 2, 0, 3}));
  GenerationTracker gen(8);
  gen.note(TransferKey{1, 2, 7, 5});
  EXPECT_TRUE(gen.isStale(TransferKey{1, 2, 8, 4}));
}

TEST(DedupSet, EvictsTheOldestAtCapacity) {
  DedupSet set(3);
  EXPECT_EQ(set.capacity(), 3u);
  EXPECT_TRUE(set.insert(key(1, 0, 0)));
  EXPECT_TRUE(set.insert(key(2, 0, 0)));
  EXPECT_TRUE(set.insert(key(3, 0, 0)));
  EXPECT_FALSE(set.insert(key(1, 0, 0)));  // a duplicate does not refresh its age
  EXPECT_EQ(set.size(), 3u);
  EXPECT_TRUE(set.insert(key(4, 0, 0)));  // forgets 1
  EXPECT_EQ(set.size(), 3u);
  EXPECT_FALSE(set.contains(key(1, 0, 0)));
  EXPECT_TRUE(set.contains(key(2, 0, 0)));
  EXPECT_TRUE(set.contains(key(3, 0, 0)));
  EXPECT_TRUE(set.contains(key(4, 0, 0)));
  EXPECT_TRUE(set.insert(key(5, 0, 0)));  // forgets 2
  EXPECT_FALSE(set.contains(key(2, 0, 0)));
  EXPECT_TRUE(set.insert(key(1, 0, 0)));  // forgotten, so new again; forgets 3
  EXPECT_FALSE(set.contains(key(3, 0, 0)));
  EXPECT_TRUE(set.contains(key(4, 0, 0)));
  EXPECT_TRUE(set.contains(key(5, 0, 0)));
  EXPECT_TRUE(set.contains(key(1, 0, 0)));
  EXPECT_EQ(set.size(), 3u);
}

TEST(DedupSet, LongRunKeepsExactlyTheNewest) {
  const size_t cap = 100;
  DedupSet set(cap);
  for (uint64_t i = 0; i < 1000; ++i) ASSERT_TRUE(set.insert(key(i, i + 1, 0)));
  EXPECT_EQ(set.size(), cap);
  for (uint64_t i = 0; i < 1000; ++i) EXPECT_EQ(set.contains(key(i, i + 1, 0)), i >= 900) << i;
}

TEST(DedupSet, CapacityZeroIsOne) {
  DedupSet set(0);
  EXPECT_EQ(set.capacity(), 1u);
  EXPECT_TRUE(set.insert(key(1, 1, 1)));
  EXPECT_FALSE(set.insert(key(1, 1, 1)));
  EXPECT_TRUE(set.insert(key(2, 2, 2)));
  EXPECT_FALSE(set.contains(key(1, 1, 1)));
  EXPECT_EQ(set.size(), 1u);
}

TEST(GenerationTracker, LowerThanHighestIsStale) {
  GenerationTracker gen(8);
  EXPECT_FALSE(gen.isStale(key(1, 1, 0)));  // unknown transfer
  gen.note(key(1, 1, 3));
  EXPECT_TRUE(gen.isStale(key(1, 1, 0)));
  EXPECT_TRUE(gen.isStale(key(1, 1, 2)));
  EXPECT_FALSE(gen.isStale(key(1, 1, 3)));  // equal is current, not stale
  EXPECT_FALSE(gen.isStale(key(1, 1, 4)));
  gen.note(key(1, 1, 1));  // lower note keeps the max
  EXPECT_TRUE(gen.isStale(key(1, 1, 2)));
  gen.note(key(1, 1, 5));
  EXPECT_TRUE(gen.isStale(key(1, 1, 4)));
  EXPECT_FALSE(gen.isStale(key(1, 1, UINT32_MAX)));
  EXPECT_EQ(gen.size(), 1u);
}

TEST(GenerationTracker, TransfersAreIndependent) {
  GenerationTracker gen(8);
  gen.note(key(1, 1, 9));
  gen.note(key(1, 2, 2));
  gen.note(key(2, 1, 4));
  EXPECT_TRUE(gen.isStale(key(1, 1, 8)));
  EXPECT_FALSE(gen.isStale(key(1, 2, 8)));
  EXPECT_TRUE(gen.isStale(key(1, 2, 1)));
  EXPECT_TRUE(gen.isStale(key(2, 1, 3)));
  EXPECT_FALSE(gen.isStale(key(2, 2, 0)));
  EXPECT_EQ(gen.size(), 3u);
}

TEST(GenerationTracker, EvictsTheFirstNotedAtCapacity) {
  GenerationTracker gen(2);
  EXPECT_EQ(gen.capacity(), 2u);
  gen.note(key(1, 0, 5));
  gen.note(key(2, 0, 5));
  gen.note(key(1, 0, 7));  // raising a known transfer does not make it younger
  EXPECT_EQ(gen.size(), 2u);
  gen.note(key(3, 0, 5));  // forgets (1, 0)
  EXPECT_EQ(gen.size(), 2u);
  EXPECT_FALSE(gen.isStale(key(1, 0, 0)));  // forgotten: no longer judged stale
  EXPECT_TRUE(gen.isStale(key(2, 0, 4)));
  EXPECT_TRUE(gen.isStale(key(3, 0, 4)));
  gen.note(key(1, 0, 2));  // known again from scratch; forgets (2, 0)
  EXPECT_FALSE(gen.isStale(key(2, 0, 4)));
  EXPECT_TRUE(gen.isStale(key(1, 0, 1)));
  EXPECT_FALSE(gen.isStale(key(1, 0, 2)));
  EXPECT_TRUE(gen.isStale(key(3, 0, 4)));
}

TEST(GenerationTracker, LongRunKeepsExactlyTheNewest) {
  GenerationTracker gen(64);
  for (uint64_t i = 0; i < 640; ++i) gen.note(key(i, 0, 10));
  EXPECT_EQ(gen.size(), 64u);
  for (uint64_t i = 0; i < 640; ++i) EXPECT_EQ(gen.isStale(key(i, 0, 9)), i >= 576) << i;
}

}  // namespace
}  // namespace pact::engine
