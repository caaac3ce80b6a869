// Restart of a rank (what NCCL does after a peer process dies and is relaunched: it rebuilds its
// communicators with new listen handles). Three forked processes: the survivor S (alive the whole
// test), child #1 (the rank that dies) and child #2 (the same rank restarted, a new fork).
//
// Phase 1, both tests: S and child #1 hold a comm pair in each direction (like NCCL's ring), child
// #1 streams 8 MiB messages to S and the gtest parent SIGKILLs it mid-stream. S's test() must
// fail with ncclRemoteError/ncclSystemError within 10 s of the kill, then deregMr, closeRecv and
// closeSend of both dead comms must return success within 10 s.
// Phase 2:
// - KilledPeerComesBackAndTheNewCommWorks: child #2 (same PACT_EPOCH) connects to a new listen of
//   S in both directions; 0 B, 4 KiB and 1 MiB go each way byte-exact (pattern + poisoned guard).
// - RestartedPeerOnANewEpochIsRefused: child #2 comes back on PACT_EPOCH=1 while S is on 0; at
//   least one side refuses (an error) within 10 s, and neither side ever gets a comm.
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <tuple>

#include "tests/abi/harness.h"
#include "tests/common/scoped_env.h"

namespace pact::abi_test {
namespace {

constexpr auto kObserveWindow = std::chrono::milliseconds(10500);  // refusal watch (> bound)
constexpr auto kSurvivorWatchdog = std::chrono::milliseconds(75000);
constexpr size_t kStreamSize = 8 << 20;
constexpr size_t kSizes[] = {0, 4096, 1 << 20};

bool isPeerError(int rc) { return rc == loader::kRemoteError || rc == loader::kSystemError; }

// One comm in each direction: the accepting side accepts first, the other connects first.
void connectBoth(NetPlugin& plugin, Channel& ch, bool acceptFirst, void** send, void** recv) {
  if (acceptFirst) {
    ASSERT_NO_FATAL_FAILURE(acceptPeer(plugin, ch, recv));
    ASSERT_NO_FATAL_FAILURE(connectPeer(plugin, ch, send));
  } else {
    ASSERT_NO_FATAL_FAILURE(connectPeer(plugin, ch, send));
    ASSERT_NO_FATAL_FAILURE(acceptPeer(plugin, ch, recv));
  }
}

// S's side of phase 1: receive until child #1's death is reported, check the bound, close.
void survivePeerDeath(NetPlugin& plugin, Channel& peer, Channel& parent) {
  void* send = nullptr;
  void* recv = nullptr;
  ASSERT_NO_FATAL_FAILURE(connectBoth(plugin, peer, true, &send, &recv));
  HostBuffer buf(kStreamSize);
  auto mr = std::make_unique<MemReg>(plugin, recv, buf.data(), buf.size());
  ASSERT_TRUE(mr->ok());
  ASSERT_NO_FATAL_FAILURE(
      recvOne(plugin, recv, buf.data(), kStreamSize, mr->handle(), kStreamSize));
  const char ready = 'R';
  ASSERT_TRUE(parent.send(&ready, 1));
  // The parent writes 'K' just before the SIGKILL: the clock starts no later than the kill, and
  // an error seen while no note is readable happened before the kill.
  std::optional<Deadline> sinceKill;
  auto killed = [&] {
    char note = 0;
    if (!sinceKill && parent.readable() && parent.recv(&note, 1, kOpTimeout)) {
      sinceKill.emplace(kDetectBound);
    }
    return sinceKill.has_value();
  };
  Deadline overall(kOpTimeout * 2);
  void* req = nullptr;
  int rc = loader::kSuccess;
  while (rc == loader::kSuccess) {
    if (req == nullptr) {
      void* data = buf.data();
      size_t cap = kStreamSize;
      int tag = kTag;
      void* mh = mr->handle();
      rc = plugin.irecv(recv, 1, &data, &cap, &tag, &mh, &req);
    } else {
      int done = 0, sizes[loader::kMaxRecvs];
      rc = plugin.test(req, &done, sizes);
      if (rc == loader::kSuccess && done != 0) req = nullptr;
    }
    ASSERT_FALSE(killed() && sinceKill->expired()) << "no error within 10 s of the SIGKILL";
    ASSERT_FALSE(overall.expired()) << "the parent never killed child #1";
  }
  ASSERT_TRUE(killed()) << "the plugin returned " << rc << " before the peer was killed";
  const long long detectMs = sinceKill->elapsed().count();
  EXPECT_TRUE(isPeerError(rc)) << "error after peer death was " << rc;
  EXPECT_LT(detectMs, kDetectBound.count());
  Deadline close(kDetectBound);
  mr.reset();  // deregMr on the dead comm EXPECTs success
  EXPECT_EQ(plugin.closeRecv(recv), loader::kSuccess) << "closeRecv of the dead comm";
  EXPECT_EQ(plugin.closeSend(send), loader::kSuccess) << "closeSend of the dead comm";
  EXPECT_LT(close.elapsed(), kDetectBound) << "close after peer death";
  std::printf("[   INFO   ] peer death reported with rc %d after %lld ms; closed in %lld ms\n", rc,
              detectMs, static_cast<long long>(close.elapsed().count()));
  const char closed = 'C';
  ASSERT_TRUE(parent.send(&closed, 1));
}

// Child #1: streams to S until SIGKILLed.
void doomedPeer(int version, Channel& peer) {
  auto plugin = openPlugin(version);
  ASSERT_TRUE(plugin);
  void* send = nullptr;
  void* recv = nullptr;
  ASSERT_NO_FATAL_FAILURE(connectBoth(*plugin, peer, false, &send, &recv));
  HostBuffer buf(kStreamSize);
  MemReg mr(*plugin, send, buf.data(), buf.size());
  ASSERT_TRUE(mr.ok());
  for (;;) {
    ASSERT_NO_FATAL_FAILURE(sendOne(*plugin, send, buf.data(), kStreamSize, mr.handle()));
  }
}

// Phase 2 of the first test, run by both S and child #2: the new comms carry kSizes both ways.
// S receives first, then sends; seeds differ per direction and size.
void exchangeByteExact(NetPlugin& plugin, Channel& peer, bool isSurvivor) {
  void* send = nullptr;
  void* recv = nullptr;
  ASSERT_NO_FATAL_FAILURE(connectBoth(plugin, peer, isSurvivor, &send, &recv));
  constexpr size_t kMax = 1 << 20;
  HostBuffer src(kMax), dst(kMax + kGuard);
  {
    MemReg smr(plugin, send, src.data(), src.size());
    MemReg rmr(plugin, recv, dst.data(), dst.size());
    ASSERT_TRUE(smr.ok() && rmr.ok());
    for (int round = 0; round < 2; ++round) {
      const bool receiving = (round == 0) == isSurvivor;
      for (size_t size : kSizes) {
        const uint64_t seed = size + (receiving == isSurvivor ? 1000 : 2000);
        SCOPED_TRACE((receiving ? "recv " : "send ") + std::to_string(size) + " bytes");
        if (receiving) {
          std::memset(dst.data(), kPoison, dst.size());
          ASSERT_NO_FATAL_FAILURE(recvOne(plugin, recv, dst.data(), size, rmr.handle(), size));
          EXPECT_TRUE(matchesPattern(dst.data(), size, seed));
          EXPECT_TRUE(isPoison(dst.data() + size, kGuard)) << "bytes after the message";
        } else {
          fillPattern(src.data(), size, seed);
          ASSERT_NO_FATAL_FAILURE(sendOne(plugin, send, src.data(), size, smr.handle()));
        }
      }
    }
    ASSERT_NO_FATAL_FAILURE(barrier(peer));  // nothing is in flight any more
  }
  EXPECT_EQ(plugin.closeRecv(recv), loader::kSuccess) << "closeRecv of the new comm";
  EXPECT_EQ(plugin.closeSend(send), loader::kSuccess) << "closeSend of the new comm";
}

// Phase 2 of the second test: one connect or accept attempt, observed for kObserveWindow.
struct SideResult {
  int rc = 0;            // last connect/accept result
  bool gotComm = false;  // a comm was returned
  long long elapsedMs = 0;
};

void expectRefusal(NetPlugin& plugin, Channel& peer, Channel& parent, bool isSurvivor) {
  char handle[loader::kHandleSize] = {};
  void* lc = nullptr;
  if (isSurvivor) {
    ASSERT_EQ(plugin.listen(0, handle, &lc), loader::kSuccess);
    ASSERT_TRUE(peer.send(handle, sizeof handle));
  } else {
    ASSERT_TRUE(peer.recv(handle, sizeof handle, kOpTimeout));
  }
  SideResult r;
  Deadline window(kObserveWindow);
  void* comm = nullptr;
  while (comm == nullptr && r.rc == loader::kSuccess && !window.expired()) {
    r.rc = isSurvivor ? plugin.accept(lc, &comm) : plugin.connect(0, handle, &comm);
  }
  r.elapsedMs = window.elapsed().count();
  r.gotComm = comm != nullptr;
  ASSERT_TRUE(parent.sendValue(r));
  notifyDone(peer);  // neither side closes before the other has finished watching
  awaitDone(peer);
  if (comm != nullptr) {
    EXPECT_EQ(isSurvivor ? plugin.closeRecv(comm) : plugin.closeSend(comm), loader::kSuccess);
  }
  if (lc != nullptr) {
    EXPECT_EQ(plugin.closeListen(lc), loader::kSuccess);
  }
}

std::string describe(const char* side, const SideResult& r) {
  const std::string what = r.gotComm                  ? "got a comm"
                           : r.rc == loader::kSuccess ? "still pending"
                                                      : "returned " + std::to_string(r.rc);
  return std::string(side) + ": " + what + " after " + std::to_string(r.elapsedMs) + " ms";
}

enum class Phase2 { kSameEpoch, kNewEpoch };

// The three processes and their channels; the parent's side of the scenario.
class Restart : public ::testing::TestWithParam<int> {
 protected:
  // Runs phase 1 (kills child #1) and forks child #2; returns once both S and child #2 run.
  void start(Phase2 phase2) {
    const int version = GetParam();
    Channel s1, c1, s2, c2, toS, sParent, to2, c2Parent;
    std::tie(s1, c1) = Channel::pair();  // S <-> child #1
    std::tie(s2, c2) = Channel::pair();  // S <-> child #2
    std::tie(toS, sParent) = Channel::pair();
    std::tie(to2, c2Parent) = Channel::pair();
    survivor_.emplace(ForkPeer::start(
        "survivor",
        [&, version, phase2] {
          auto plugin = openPlugin(version);
          ASSERT_TRUE(plugin);
          ASSERT_NO_FATAL_FAILURE(survivePeerDeath(*plugin, s1, sParent));
          if (phase2 == Phase2::kSameEpoch) {
            exchangeByteExact(*plugin, s2, true);
          } else {
            expectRefusal(*plugin, s2, sParent, true);
          }
        },
        {kSurvivorWatchdog, {&c1, &c2, &toS, &to2, &c2Parent}}));
    ForkPeer first = ForkPeer::start(
        "child#1", [&, version] { doomedPeer(version, c1); },
        {kChildWatchdog, {&s1, &s2, &c2, &toS, &sParent, &to2, &c2Parent}});
    s1.close(), c1.close(), s2.close(), sParent.close();
    char note = 0;
    ASSERT_TRUE(toS.recv(&note, 1, kOpTimeout * 2)) << "survivor did not get ready";
    const char killing = 'K';
    ASSERT_TRUE(toS.send(&killing, 1)) << "survivor already gone";
    first.kill(SIGKILL);
    EXPECT_TRUE(first.wait(kOpTimeout).killedBy(SIGKILL))
        << "child #1 " << first.outcome().describe();
    ASSERT_TRUE(toS.recv(&note, 1, kOpTimeout * 2)) << "survivor did not close the dead comms";
    // The restarted rank: a new process, after the survivor has dealt with the death.
    restarted_.emplace(ForkPeer::start(
        "child#2",
        [&, version, phase2] {
          std::optional<test::ScopedEnv> env;  // otherwise S's (inherited) epoch
          if (phase2 == Phase2::kNewEpoch) env.emplace("PACT_EPOCH", "1");
          auto plugin = openPlugin(version);
          ASSERT_TRUE(plugin);
          if (phase2 == Phase2::kSameEpoch) {
            exchangeByteExact(*plugin, c2, false);
          } else {
            expectRefusal(*plugin, c2, c2Parent, false);
          }
        },
        {kChildWatchdog, {&toS, &to2}}));
    c2.close(), c2Parent.close();
    toSurvivor_ = std::move(toS);
    toRestarted_ = std::move(to2);
  }
  void expectBothSucceed() {
    test::waitAll({&*survivor_, &*restarted_}, kPairTimeout);
    EXPECT_TRUE(survivor_->outcome().ok()) << "survivor " << survivor_->outcome().describe();
    EXPECT_TRUE(restarted_->outcome().ok()) << "child #2 " << restarted_->outcome().describe();
  }

  std::optional<ForkPeer> survivor_, restarted_;
  Channel toSurvivor_, toRestarted_;
};

TEST_P(Restart, KilledPeerComesBackAndTheNewCommWorks) {
  ASSERT_NO_FATAL_FAILURE(start(Phase2::kSameEpoch));
  expectBothSucceed();
}

TEST_P(Restart, RestartedPeerOnANewEpochIsRefused) {
  ASSERT_NO_FATAL_FAILURE(start(Phase2::kNewEpoch));
  SideResult acc, con;
  const auto budget = kObserveWindow + kOpTimeout;
  EXPECT_TRUE(toSurvivor_.recvValue(&acc, budget)) << "no report from the survivor";
  EXPECT_TRUE(toRestarted_.recvValue(&con, budget)) << "no report from child #2";
  expectBothSucceed();
  const std::string report = describe("survivor accept (epoch 0)", acc) + "; " +
                             describe("child #2 connect (epoch 1)", con);
  std::printf("[   INFO   ] restart on a new epoch: %s\n", report.c_str());
  EXPECT_FALSE(acc.gotComm) << report;
  EXPECT_FALSE(con.gotComm) << report;
  EXPECT_TRUE((acc.rc != loader::kSuccess && acc.elapsedMs < kDetectBound.count()) ||
              (con.rc != loader::kSuccess && con.elapsedMs < kDetectBound.count()))
      << "no side refused within 10 s: " << report;
}

INSTANTIATE_TEST_SUITE_P(Versions, Restart,
                         ::testing::Range(loader::kOldestVersion, loader::kNewestVersion + 1),
                         versionName);

}  // namespace
}  // namespace pact::abi_test
