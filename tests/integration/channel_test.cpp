// Ordered vs unordered channels, proven rather than assumed: the sender's lane 0 is slowed by the
// transport's delay hook (PACT_FAULT delay=lane0:DUR), and the receiver observes what completes
// first. Real UCX and real sockets over loopback, in a forked child that opens the plugin (the
// configuration is read once per library load, so each case runs in its own process).
#include <gtest/gtest.h>

#include <cstring>

#include "pact/nccl_ext.h"
#include "tests/abi/harness.h"
#include "tests/common/scoped_env.h"

namespace pact::abi_test {
namespace {

constexpr auto kDelay = std::chrono::milliseconds(600);

struct Pair {
  std::unique_ptr<NetPlugin> plugin;
  void* sc = nullptr;
  void* rc = nullptr;
};

pact_comm_stats_t stats(Pair& p, void* comm) {
  pact_comm_stats_t s{};
  auto fn = reinterpret_cast<pact_comm_stats_fn>(p.plugin->symbol("pact_comm_stats"));
  EXPECT_TRUE(fn && fn(comm, &s) == 0) << "pact_comm_stats";
  return s;
}

void open(Pair* p, int version = loader::kNewestVersion, int trafficClass = -1) {
  p->plugin = openPlugin(version, trafficClass);
  ASSERT_TRUE(p->plugin);
  ASSERT_NO_FATAL_FAILURE(connectLoopback(*p->plugin, 0, false, &p->sc, &p->rc));
}

// The class profile of every comm, with lane 0 slowed by kDelay, then a loopback pair.
void openDelayed(Pair* p, test::ScopedEnv* env, const std::string& profile) {
  env->set("PACT_TC_DEFAULT", profile)
      .set("PACT_FAULT", "delay=lane0:" + std::to_string(kDelay.count()) + "ms");
  ASSERT_NO_FATAL_FAILURE(open(p));
}

void close(Pair* p) {
  EXPECT_EQ(p->plugin->closeSend(p->sc), loader::kSuccess);
  EXPECT_EQ(p->plugin->closeRecv(p->rc), loader::kSuccess);
}

// Posts receive then send of `size` bytes (pattern `seed`) on the loopback pair.
void post(Pair& p, HostBuffer& src, HostBuffer& dst, size_t size, uint64_t seed, void** sreq,
          void** rreq) {
  Deadline d(kOpTimeout);
  fillPattern(src.data(), size, seed);
  std::memset(dst.data(), kPoison, dst.size());
  void* dptr = dst.data();
  size_t cap = dst.size();
  int tag = kTag;
  ASSERT_NO_FATAL_FAILURE(postRecv(*p.plugin, p.rc, 1, &dptr, &cap, &tag, nullptr, d, rreq));
  ASSERT_NO_FATAL_FAILURE(postSend(*p.plugin, p.sc, src.data(), size, kTag, nullptr, d, sreq));
}

bool testOnce(Pair& p, void* req, int* size = nullptr) {
  int done = 0;
  int sizes[loader::kMaxRecvs] = {};
  EXPECT_EQ(p.plugin->test(req, &done, sizes), loader::kSuccess);
  if (done && size) *size = sizes[0];
  return done != 0;
}

// Tests `second` until done (testing `first` along the way); returns whether `first` was still
// pending once `second` had been reported done (one more test of `first` right after).
bool secondFinishedFirst(Pair& p, void* first, bool* firstDone, void* second, int* secondSize) {
  Deadline d(kOpTimeout);
  while (!testOnce(p, second, secondSize)) {
    if (!*firstDone) *firstDone = testOnce(p, first);
    if (d.expired()) {
      ADD_FAILURE() << "second message never completed";
      return false;
    }
  }
  if (!*firstDone) *firstDone = testOnce(p, first);
  return !*firstDone;
}

void drainSends(Pair& p, std::initializer_list<void*> reqs) {
  for (void* r : reqs) expectComplete(*p.plugin, r, Deadline(kOpTimeout), "send");
}

TEST(Channel, UnorderedPiecesAndMessagesOvertakeTheDelayedLane) {
  runInChild("unordered", [] {
    test::ScopedEnv env;
    Pair p;
    ASSERT_NO_FATAL_FAILURE(openDelayed(&p, &env, "unordered,lanes=2,chunk=4K"));
    // One 256 KiB message = 64 pieces over both lanes: lane 1's pieces land first.
    {
      HostBuffer src(256 << 10), dst(256 << 10);
      void *s = nullptr, *r = nullptr;
      ASSERT_NO_FATAL_FAILURE(post(p, src, dst, 256 << 10, 7, &s, &r));
      Completion c = expectComplete(*p.plugin, r, Deadline(kOpTimeout), "256 KiB receive");
      EXPECT_EQ(c.sizes[0], 256 << 10);
      EXPECT_TRUE(matchesPattern(dst.data(), 256 << 10, 7));
      drainSends(p, {s});
      auto rs = stats(p, p.rc), ss = stats(p, p.sc);
      EXPECT_EQ(rs.unordered, 1);
      EXPECT_EQ(ss.lanes, 2);
      EXPECT_GT(rs.pieces_out_of_order, 0u) << "pieces landed in order although lane 0 was delayed";
      EXPECT_GT(ss.lane_pieces[0], 0u);
      EXPECT_GT(ss.lane_pieces[1], 0u);
      EXPECT_EQ(ss.lane_pieces[0] + ss.lane_pieces[1], 64u);
    }
    close(&p);
  });
}

TEST(Channel, UnorderedMessagesOvertakeTheDelayedLane) {
  runInChild("unordered-rr", [] {
    test::ScopedEnv env;
    // Round-robin makes the lanes deterministic (adaptive steering would, rightly, avoid lane 0
    // once it has measured it).
    Pair p;
    ASSERT_NO_FATAL_FAILURE(openDelayed(&p, &env, "unordered,lanes=2,chunk=4K,steer=roundrobin"));
    // Two one-piece messages: the first rides the delayed lane 0, the second overtakes it on lane 1.
    {
      HostBuffer s0(4096), d0(8192), s1(4096), d1(8192);
      void *sr0, *rr0, *sr1, *rr1;
      ASSERT_NO_FATAL_FAILURE(post(p, s0, d0, 4096, 1, &sr0, &rr0));
      ASSERT_NO_FATAL_FAILURE(post(p, s1, d1, 3000, 2, &sr1, &rr1));
      bool firstDone = false;
      int size1 = -1;
      EXPECT_TRUE(secondFinishedFirst(p, rr0, &firstDone, rr1, &size1))
          << "an unordered class completed message k+1 only after message k";
      EXPECT_EQ(size1, 3000);
      int size0 = -1;
      Deadline d(kOpTimeout);
      while (!firstDone && !d.expired()) firstDone = testOnce(p, rr0, &size0);
      EXPECT_TRUE(firstDone);
      EXPECT_TRUE(matchesPattern(d0.data(), 4096, 1));
      EXPECT_TRUE(matchesPattern(d1.data(), 3000, 2));
      EXPECT_TRUE(isPoison(d1.data() + 3000, 8192 - 3000));
      drainSends(p, {sr0, sr1});
      EXPECT_GE(stats(p, p.rc).messages_out_of_order, 1u);
    }
    close(&p);
  });
}

TEST(Channel, OrderedNeverCompletesMessageKPlusOneBeforeK) {
  runInChild("ordered", [] {
    test::ScopedEnv env;
    Pair p;
    ASSERT_NO_FATAL_FAILURE(openDelayed(&p, &env, "ordered,lanes=2"));
    // A rendezvous-sized message then an eager one: UCX may finish the small one first; the
    // ordered channel must not report it before the large one.
    HostBuffer s0(4 << 20), d0(4 << 20), s1(64), d1(64);
    for (int round = 0; round < 3; ++round) {
      void *sr0, *rr0, *sr1, *rr1;
      ASSERT_NO_FATAL_FAILURE(post(p, s0, d0, 4 << 20, 10 + round, &sr0, &rr0));
      ASSERT_NO_FATAL_FAILURE(post(p, s1, d1, 64, 20 + round, &sr1, &rr1));
      bool firstDone = false;
      int size1 = -1;
      EXPECT_FALSE(secondFinishedFirst(p, rr0, &firstDone, rr1, &size1))
          << "ordered class reported message k+1 before message k (round " << round << ")";
      EXPECT_EQ(size1, 64);
      EXPECT_TRUE(matchesPattern(d0.data(), 4 << 20, 10 + round));
      EXPECT_TRUE(matchesPattern(d1.data(), 64, 20 + round));
      drainSends(p, {sr0, sr1});
    }
    auto rs = stats(p, p.rc);
    EXPECT_EQ(rs.unordered, 0);
    EXPECT_EQ(rs.messages_out_of_order, 0u);
    EXPECT_EQ(stats(p, p.sc).lanes, 1) << "an ordered class uses one lane";
    close(&p);
  });
}

// NCCL's trafficClass picks the class: through init's config (v11, v12) or connect's (v10);
// v8/v9 carry none and -1 means DEFAULT.
class TrafficClass : public ::testing::TestWithParam<int> {};

TEST_P(TrafficClass, TheCommsChannelFollowsTheClassNcclPassed) {
  const int version = GetParam();
  runInChild("class-v" + std::to_string(version), [version] {
    test::ScopedEnv env;
    env.set("PACT_TC_DEFAULT", "ordered").set("PACT_TC_5", "unordered,lanes=3,chunk=8K");
    for (int tc : {5, -1}) {
      SCOPED_TRACE("trafficClass " + std::to_string(tc));
      Pair p;
      ASSERT_NO_FATAL_FAILURE(open(&p, version, tc));
      HostBuffer src(64 << 10), dst(64 << 10);
      void *s = nullptr, *r = nullptr;
      ASSERT_NO_FATAL_FAILURE(post(p, src, dst, 64 << 10, 3, &s, &r));
      Completion c = expectComplete(*p.plugin, r, Deadline(kOpTimeout), "64 KiB receive");
      EXPECT_EQ(c.sizes[0], 64 << 10);
      EXPECT_TRUE(matchesPattern(dst.data(), 64 << 10, 3));
      drainSends(p, {s});
      const bool classed = tc == 5 && version >= 10;
      auto ss = stats(p, p.sc), rs = stats(p, p.rc);
      EXPECT_EQ(ss.unordered, classed ? 1 : 0);
      EXPECT_EQ(rs.unordered, classed ? 1 : 0) << "the receiver follows the sender's channel";
      EXPECT_EQ(ss.lanes, classed ? 3 : 1);
      EXPECT_EQ(rs.pieces, classed ? 8u : 1u) << "64 KiB in 8 KiB pieces, or one piece";
      close(&p);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Versions, TrafficClass, ::testing::Values(8, 9, 10, 11, 12), versionName);

// A class that must not fall back (no RDMA here) fails plugin init, so NCCL moves on to another
// plugin instead of running on a service nobody asked for; a malformed class fails it too.
TEST(TrafficClassInit, FallbackFailAndMalformedProfilesFailInit) {
  for (const char* profile : {"rc,fallback=fail", "ud,fallback=fail", "lanes=0"}) {
    runInChild(std::string("init ") + profile, [profile] {
      test::ScopedEnv env("PACT_TC_DEFAULT", std::string(profile));
      std::string error;
      auto plugin = NetPlugin::open(pluginPath(), loader::kNewestVersion, &error);
      ASSERT_TRUE(plugin) << error;
      EXPECT_NE(plugin->init(-1, true), loader::kSuccess) << "init accepted PACT_TC_DEFAULT=" << profile;
    });
  }
}

}  // namespace
}  // namespace pact::abi_test
