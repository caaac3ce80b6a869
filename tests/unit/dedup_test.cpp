// DedupSet and GenerationTracker: duplicates, identity fields, FIFO eviction at capacity, and
// generation staleness.
#include <gtest/gtest.h>

#include <cstdint>

#include "engine/dedup.h"

namespace pact::engine {
namespace {

TEST(DedupSet, InsertTwiceIsRefused) {
  DedupSet set(8);
  EXPECT_FALSE(set.contains(1, 2, 3));
  EXPECT_TRUE(set.insert(1, 2, 3));
  EXPECT_TRUE(set.contains(1, 2, 3));
  EXPECT_FALSE(set.insert(1, 2, 3));
  EXPECT_EQ(set.size(), 1u);
}

TEST(DedupSet, EveryFieldIsPartOfTheIdentity) {
  DedupSet set(8);
  EXPECT_TRUE(set.insert(1, 2, 3));
  EXPECT_TRUE(set.insert(2, 2, 3));
  EXPECT_TRUE(set.insert(1, 3, 3));
  EXPECT_TRUE(set.insert(1, 2, 4));
  EXPECT_TRUE(set.insert(2, 1, 3));  // swapped ids are another transfer
  EXPECT_EQ(set.size(), 5u);
  EXPECT_FALSE(set.contains(3, 2, 1));
  EXPECT_TRUE(set.insert(UINT64_MAX, UINT64_MAX, UINT32_MAX));
  EXPECT_TRUE(set.contains(UINT64_MAX, UINT64_MAX, UINT32_MAX));
}

TEST(DedupSet, EvictsTheOldestAtCapacity) {
  DedupSet set(3);
  EXPECT_EQ(set.capacity(), 3u);
  EXPECT_TRUE(set.insert(1, 0, 0));
  EXPECT_TRUE(set.insert(2, 0, 0));
  EXPECT_TRUE(set.insert(3, 0, 0));
  EXPECT_FALSE(set.insert(1, 0, 0));  // a duplicate does not refresh its age
  EXPECT_EQ(set.size(), 3u);
  EXPECT_TRUE(set.insert(4, 0, 0));  // forgets 1
  EXPECT_EQ(set.size(), 3u);
  EXPECT_FALSE(set.contains(1, 0, 0));
  EXPECT_TRUE(set.contains(2, 0, 0));
  EXPECT_TRUE(set.contains(3, 0, 0));
  EXPECT_TRUE(set.contains(4, 0, 0));
  EXPECT_TRUE(set.insert(5, 0, 0));  // forgets 2
  EXPECT_FALSE(set.contains(2, 0, 0));
  EXPECT_TRUE(set.insert(1, 0, 0));  // forgotten, so new again; forgets 3
  EXPECT_FALSE(set.contains(3, 0, 0));
  EXPECT_TRUE(set.contains(4, 0, 0));
  EXPECT_TRUE(set.contains(5, 0, 0));
  EXPECT_TRUE(set.contains(1, 0, 0));
  EXPECT_EQ(set.size(), 3u);
}

TEST(DedupSet, LongRunKeepsExactlyTheNewest) {
  const size_t cap = 100;
  DedupSet set(cap);
  for (uint64_t i = 0; i < 1000; ++i) ASSERT_TRUE(set.insert(i, i + 1, 0));
  EXPECT_EQ(set.size(), cap);
  for (uint64_t i = 0; i < 1000; ++i) EXPECT_EQ(set.contains(i, i + 1, 0), i >= 900) << i;
}

TEST(DedupSet, CapacityZeroIsOne) {
  DedupSet set(0);
  EXPECT_EQ(set.capacity(), 1u);
  EXPECT_TRUE(set.insert(1, 1, 1));
  EXPECT_FALSE(set.insert(1, 1, 1));
  EXPECT_TRUE(set.insert(2, 2, 2));
  EXPECT_FALSE(set.contains(1, 1, 1));
  EXPECT_EQ(set.size(), 1u);
}

TEST(GenerationTracker, LowerThanHighestIsStale) {
  GenerationTracker gen(8);
  EXPECT_FALSE(gen.isStale(1, 1, 0));  // unknown transfer
  gen.note(1, 1, 3);
  EXPECT_TRUE(gen.isStale(1, 1, 0));
  EXPECT_TRUE(gen.isStale(1, 1, 2));
  EXPECT_FALSE(gen.isStale(1, 1, 3));  // equal is current, not stale
  EXPECT_FALSE(gen.isStale(1, 1, 4));
  gen.note(1, 1, 1);  // lower note keeps the max
  EXPECT_TRUE(gen.isStale(1, 1, 2));
  gen.note(1, 1, 5);
  EXPECT_TRUE(gen.isStale(1, 1, 4));
  EXPECT_FALSE(gen.isStale(1, 1, UINT32_MAX));
  EXPECT_EQ(gen.size(), 1u);
}

TEST(GenerationTracker, TransfersAreIndependent) {
  GenerationTracker gen(8);
  gen.note(1, 1, 9);
  gen.note(1, 2, 2);
  gen.note(2, 1, 4);
  EXPECT_TRUE(gen.isStale(1, 1, 8));
  EXPECT_FALSE(gen.isStale(1, 2, 8));
  EXPECT_TRUE(gen.isStale(1, 2, 1));
  EXPECT_TRUE(gen.isStale(2, 1, 3));
  EXPECT_FALSE(gen.isStale(2, 2, 0));
  EXPECT_EQ(gen.size(), 3u);
}

TEST(GenerationTracker, EvictsTheFirstNotedAtCapacity) {
  GenerationTracker gen(2);
  EXPECT_EQ(gen.capacity(), 2u);
  gen.note(1, 0, 5);
  gen.note(2, 0, 5);
  gen.note(1, 0, 7);  // raising a known transfer does not make it younger
  EXPECT_EQ(gen.size(), 2u);
  gen.note(3, 0, 5);  // forgets (1, 0)
  EXPECT_EQ(gen.size(), 2u);
  EXPECT_FALSE(gen.isStale(1, 0, 0));  // forgotten: no longer judged stale
  EXPECT_TRUE(gen.isStale(2, 0, 4));
  EXPECT_TRUE(gen.isStale(3, 0, 4));
  gen.note(1, 0, 2);  // known again from scratch; forgets (2, 0)
  EXPECT_FALSE(gen.isStale(2, 0, 4));
  EXPECT_TRUE(gen.isStale(1, 0, 1));
  EXPECT_FALSE(gen.isStale(1, 0, 2));
  EXPECT_TRUE(gen.isStale(3, 0, 4));
}

TEST(GenerationTracker, LongRunKeepsExactlyTheNewest) {
  GenerationTracker gen(64);
  for (uint64_t i = 0; i < 640; ++i) gen.note(i, 0, 10);
  EXPECT_EQ(gen.size(), 64u);
  for (uint64_t i = 0; i < 640; ++i) EXPECT_EQ(gen.isStale(i, 0, 9), i >= 576) << i;
}

}  // namespace
}  // namespace pact::engine
