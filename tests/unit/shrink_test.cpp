// shrinkIfSparse: a container gives its room back only once it holds at most 1/64 of it, so
// what the shrink allocates is small, and a small container keeps its room.
#include <gtest/gtest.h>

#include <cstdint>
#include <unordered_set>
#include <vector>

#include "common/shrink.h"

namespace pact {
namespace {

TEST(ShrinkIfSparse, VectorShrinksOnlyAtOneSixtyFourthOfItsRoom) {
  std::vector<uint64_t> v(64 * 1024);
  const size_t room = v.capacity();
  v.resize(room / kShrinkRatio + 1);
  shrinkIfSparse(v);
  EXPECT_EQ(v.capacity(), room) << "one element above 1/64 of the room: no shrink";
  v.pop_back();
  shrinkIfSparse(v);
  EXPECT_EQ(v.capacity(), v.size()) << "at 1/64 of the room the spare room goes back";
}

TEST(ShrinkIfSparse, HashTableShrinksOnlyAtOneSixtyFourthOfItsBuckets) {
  std::unordered_set<uint64_t> s;
  for (uint64_t i = 0; i < 100000; ++i) s.insert(i);
  const size_t buckets = s.bucket_count();
  const size_t keep = buckets / kShrinkRatio;
  for (uint64_t i = keep + 1; i < 100000; ++i) s.erase(i);
  ASSERT_EQ(s.size(), keep + 1);
  shrinkIfSparse(s);
  EXPECT_EQ(s.bucket_count(), buckets) << "above 1/64 of the buckets: no rehash";
  s.erase(keep);
  shrinkIfSparse(s);
  EXPECT_LT(s.bucket_count(), buckets / 16) << "at 1/64: rehashed down to the survivors";
  for (uint64_t i = 0; i < keep; ++i) EXPECT_EQ(s.count(i), 1u) << "a survivor was lost: " << i;
}

TEST(ShrinkIfSparse, SmallContainersKeepTheirRoom) {
  std::vector<uint64_t> v(kShrinkFloor);
  v.clear();
  shrinkIfSparse(v);
  EXPECT_EQ(v.capacity(), kShrinkFloor);
}

}  // namespace
}  // namespace pact
