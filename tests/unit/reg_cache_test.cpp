// The registration cache over a real UCX context: reuse when covered, new maps otherwise,
// release on last reference, unsupported memory types refused with a reason.
#include <gtest/gtest.h>

#include <vector>

#include "ucx/reg_cache.h"

namespace pact::ucx {
namespace {

class RegCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = Context::create("", "unit");
    ASSERT_TRUE(c.ok()) << c.error().message;
    ctx_ = std::move(c.value());
    cache_ = std::make_unique<RegCache>(ctx_, cuda::Driver::instance("libpact-no-such-driver.so"));
  }
  Context ctx_;
  std::unique_ptr<RegCache> cache_;
};

TEST_F(RegCacheTest, RepeatedAndContainedRangesReuseOneRegion) {
  std::vector<char> buf(1 << 20);
  auto a = cache_->acquire({buf.data(), buf.size()});
  ASSERT_TRUE(a.ok()) << a.error().message;
  auto b = cache_->acquire({buf.data(), buf.size()});
  auto c = cache_->acquire({buf.data() + 4096, 8192});
  ASSERT_TRUE(b.ok() && c.ok());
  EXPECT_EQ(a->get(), b->get());
  EXPECT_EQ(a->get(), c->get());
  auto s = cache_->stats();
  EXPECT_EQ(s.live, 1u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.hits, 2u);
  EXPECT_TRUE((*a)->covers(reinterpret_cast<uintptr_t>(buf.data()), buf.size(), MemoryType::kHost));
}

TEST_F(RegCacheTest, OverlappingButUncoveredRangeGetsItsOwnRegion) {
  std::vector<char> buf(4 << 20);
  auto a = cache_->acquire({buf.data(), 2 << 20});
  auto b = cache_->acquire({buf.data() + (1 << 20), 2 << 20});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->get(), b->get());
  EXPECT_EQ(cache_->stats().live, 2u);
}

TEST_F(RegCacheTest, LastReleaseUnmaps) {
  std::vector<char> buf(64 << 10);
  {
    auto a = cache_->acquire({buf.data(), buf.size()});
    auto b = cache_->acquire({buf.data(), 100});
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(cache_->stats().live, 1u);
  }
  EXPECT_EQ(cache_->stats().live, 0u);
  auto again = cache_->acquire({buf.data(), buf.size()});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(cache_->stats().misses, 2u);
}

TEST_F(RegCacheTest, ZeroLengthAndRefusals) {
  std::vector<char> buf(4096);
  EXPECT_TRUE(cache_->acquire({buf.data(), 0}).ok());
  auto null = cache_->acquire({nullptr, 16});
  ASSERT_FALSE(null.ok());
  EXPECT_EQ(null.status(), Status::kInvalidArgument);
  auto gpu = cache_->acquire({buf.data(), 16, MemoryType::kCuda});  // no driver behind this cache
  ASSERT_FALSE(gpu.ok());
  EXPECT_EQ(gpu.status(), Status::kUnsupported);
  EXPECT_NE(gpu.error().message.find("CUDA driver"), std::string::npos) << gpu.error().message;
}

}  // namespace
}  // namespace pact::ucx
