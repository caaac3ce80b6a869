// Plugin and comm lifetimes.
// Case 11: open/init/use/finalize/dlclose, then the same again in the same process.
//          Also (v11+): two init contexts alive at once, as two NCCL communicators have.
// Case 9:  closeRecv / closeSend with requests still in flight return in bounded time, and the
//          plugin stays usable afterwards.
#include <cstring>
#include <vector>

#include "tests/abi/harness.h"

namespace pact::abi_test {
namespace {

constexpr auto kCloseBound = std::chrono::milliseconds(10000);

class Lifecycle : public ::testing::TestWithParam<int> {};

TEST_P(Lifecycle, ReloadTwiceInOneProcess) {
  const int version = GetParam();
  runInChild("reload", [version] {
    for (int round = 0; round < 2; ++round) {
      SCOPED_TRACE("round " + std::to_string(round));
      auto plugin = openPlugin(version);
      ASSERT_TRUE(plugin);
      loader::Properties props;
      ASSERT_EQ(plugin->getProperties(0, &props), loader::kSuccess);
      void* sc = nullptr;
      void* rc = nullptr;
      ASSERT_NO_FATAL_FAILURE(connectLoopback(*plugin, 0, false, &sc, &rc));
      EXPECT_NO_FATAL_FAILURE(transferInOneThread(*plugin, sc, rc, (1 << 20) + 5, 10 + round));
      EXPECT_EQ(plugin->closeSend(sc), loader::kSuccess);
      EXPECT_EQ(plugin->closeRecv(rc), loader::kSuccess);
      plugin.reset();  // finalize (v11+) and dlclose
    }
  });
}

// Init contexts exist from v11 on: instantiated for those versions only (no skips).
class InitContexts : public ::testing::TestWithParam<int> {};

TEST_P(InitContexts, TwoContextsCoexist) {
  const int version = GetParam();
  runInChild("two-contexts", [version] {
    auto first = openPlugin(version);
    auto second = openPlugin(version);  // same library, a second init() and ctx
    ASSERT_TRUE(first && second);
    void* sc[2] = {};
    void* rc[2] = {};
    ASSERT_NO_FATAL_FAILURE(connectLoopback(*first, 0, false, &sc[0], &rc[0]));
    ASSERT_NO_FATAL_FAILURE(connectLoopback(*second, 0, false, &sc[1], &rc[1]));
    EXPECT_NO_FATAL_FAILURE(transferInOneThread(*first, sc[0], rc[0], 70000, 20));
    EXPECT_NO_FATAL_FAILURE(transferInOneThread(*second, sc[1], rc[1], 70000, 21));
    EXPECT_EQ(first->closeSend(sc[0]), loader::kSuccess);
    EXPECT_EQ(first->closeRecv(rc[0]), loader::kSuccess);
    first.reset();  // finalize(ctx 1) must leave ctx 2 working
    EXPECT_NO_FATAL_FAILURE(transferInOneThread(*second, sc[1], rc[1], 3000000, 22));
    EXPECT_EQ(second->closeSend(sc[1]), loader::kSuccess);
    EXPECT_EQ(second->closeRecv(rc[1]), loader::kSuccess);
  });
}

// After closing comms with requests in flight, a fresh connection in the same process works.
void expectStillUsable(NetPlugin& plugin) {
  void* sc = nullptr;
  void* rc = nullptr;
  ASSERT_NO_FATAL_FAILURE(connectLoopback(plugin, 0, false, &sc, &rc));
  EXPECT_NO_FATAL_FAILURE(transferInOneThread(plugin, sc, rc, 100000, 30));
  EXPECT_EQ(plugin.closeSend(sc), loader::kSuccess);
  EXPECT_EQ(plugin.closeRecv(rc), loader::kSuccess);
}

TEST_P(Lifecycle, CloseRecvWithPendingReceives) {
  constexpr int kPending = 4;
  constexpr size_t kSize = 1 << 20;
  PeerPair pair(
      GetParam(),
      [&](PeerIo& io) {
        auto plugin = openPlugin(io.version);
        ASSERT_TRUE(plugin);
        void* comm = nullptr;
        ASSERT_NO_FATAL_FAILURE(acceptPeer(*plugin, *io.peer, &comm));
        ASSERT_NO_FATAL_FAILURE(barrier(*io.peer));  // the sender's connect has finished too
        HostBuffer buf(kSize * kPending);  // outlives the close: requests still point at it
        {
          MemReg mr(*plugin, comm, buf.data(), buf.size());
          ASSERT_TRUE(mr.ok());
          Deadline deadline(kOpTimeout);
          for (int i = 0; i < kPending; ++i) {
            void* data = buf.data() + kSize * i;
            size_t cap = kSize;
            int tag = kTag;
            void* mh = mr.handle();
            void* req = nullptr;
            ASSERT_NO_FATAL_FAILURE(
                postRecv(*plugin, comm, 1, &data, &cap, &tag, &mh, deadline, &req));
            int done = 1;
            int sizes[loader::kMaxRecvs] = {};
            EXPECT_EQ(plugin->test(req, &done, sizes), loader::kSuccess);
            EXPECT_EQ(done, 0) << "a receive completed although nothing was sent";
          }
          // NCCL deregisters before closing; the requests are abandoned.
        }
        Deadline close(kCloseBound);
        EXPECT_EQ(plugin->closeRecv(comm), loader::kSuccess) << "closeRecv with receives in flight";
        EXPECT_LT(close.elapsed(), kCloseBound);
        notifyDone(*io.peer);
        expectStillUsable(*plugin);
      },
      [&](PeerIo& io) {
        auto plugin = openPlugin(io.version);
        ASSERT_TRUE(plugin);
        void* comm = nullptr;
        ASSERT_NO_FATAL_FAILURE(connectPeer(*plugin, *io.peer, &comm));
        ASSERT_NO_FATAL_FAILURE(barrier(*io.peer));
        awaitDone(*io.peer);  // the receiver has closed
        Deadline close(kCloseBound);
        EXPECT_EQ(plugin->closeSend(comm), loader::kSuccess) << "closeSend after the peer closed";
        EXPECT_LT(close.elapsed(), kCloseBound);
        expectStillUsable(*plugin);
      });
  pair.expectSuccess();
}

TEST_P(Lifecycle, CloseSendWithPendingSends) {
  constexpr int kPending = 4;
  constexpr size_t kSize = 16 << 20;  // too large to complete without the receiver
  PeerPair pair(
      GetParam(),
      [&](PeerIo& io) {
        auto plugin = openPlugin(io.version);
        ASSERT_TRUE(plugin);
        void* comm = nullptr;
        ASSERT_NO_FATAL_FAILURE(acceptPeer(*plugin, *io.peer, &comm));
        ASSERT_NO_FATAL_FAILURE(barrier(*io.peer));
        awaitDone(*io.peer);  // the sender has closed with its sends unmatched
        Deadline close(kCloseBound);
        EXPECT_EQ(plugin->closeRecv(comm), loader::kSuccess) << "closeRecv with unmatched arrivals";
        EXPECT_LT(close.elapsed(), kCloseBound);
        expectStillUsable(*plugin);
      },
      [&](PeerIo& io) {
        auto plugin = openPlugin(io.version);
        ASSERT_TRUE(plugin);
        void* comm = nullptr;
        ASSERT_NO_FATAL_FAILURE(connectPeer(*plugin, *io.peer, &comm));
        ASSERT_NO_FATAL_FAILURE(barrier(*io.peer));
        HostBuffer buf(kSize * kPending);  // outlives the close: requests still point at it
        std::memset(buf.data(), 0x3c, buf.size());
        {
          MemReg mr(*plugin, comm, buf.data(), buf.size());
          ASSERT_TRUE(mr.ok());
          Deadline deadline(kOpTimeout);
          for (int i = 0; i < kPending; ++i) {
            void* req = nullptr;
            ASSERT_NO_FATAL_FAILURE(postSend(*plugin, comm, buf.data() + kSize * i, kSize, kTag,
                                             mr.handle(), deadline, &req));
            int done = 0;
            int size = 0;
            EXPECT_EQ(plugin->test(req, &done, &size), loader::kSuccess);
          }
        }
        Deadline close(kCloseBound);
        EXPECT_EQ(plugin->closeSend(comm), loader::kSuccess) << "closeSend with sends in flight";
        EXPECT_LT(close.elapsed(), kCloseBound);
        notifyDone(*io.peer);
        expectStillUsable(*plugin);
      });
  pair.expectSuccess();
}

INSTANTIATE_TEST_SUITE_P(Versions, Lifecycle,
                         ::testing::Range(loader::kOldestVersion, loader::kNewestVersion + 1),
                         versionName);
INSTANTIATE_TEST_SUITE_P(Versions, InitContexts, ::testing::Range(11, loader::kNewestVersion + 1), versionName);

}  // namespace
}  // namespace pact::abi_test
