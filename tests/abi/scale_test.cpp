// Many comms between two processes, as an all-to-all job opens them: per-peer connection state,
// tag-space and listen-id recycling, and peer death at scale.
//
// - A message that a closed comm left unreceived (it sits in the receiver's UCX queue with the old
//   comm's tag space) never lands in a new comm that reuses the space: the generation in the tag.
// - 200,000 comm pairs opened and closed in sequence (in batches) in one pair of processes, then
//   traffic on fresh comms: tag spaces and listen ids come back; nothing runs out.
// - A peer holding 1,000 comms with the survivor is SIGKILLed: every one of them fails on the
//   survivor within the bound, while the survivor's other comms keep working.
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "pact/nccl_ext.h"
#include "tests/abi/harness.h"
#include "tests/common/scoped_env.h"

namespace pact::abi_test {
namespace {

using Handle = std::array<char, loader::kHandleSize>;

// Listens n times on dev 0, sends the handles over ch in one piece, accepts until every comm
// exists (listen comms closed after their accept).
void acceptMany(NetPlugin& plugin, Channel& ch, int n, std::vector<void*>* comms) {
  std::vector<Handle> handles(static_cast<size_t>(n));
  std::vector<void*> listens(static_cast<size_t>(n), nullptr);
  for (int i = 0; i < n; ++i)
    ASSERT_EQ(plugin.listen(0, handles[static_cast<size_t>(i)].data(), &listens[static_cast<size_t>(i)]),
              loader::kSuccess) << "listen " << i;
  ASSERT_TRUE(ch.send(handles.data(), handles.size() * sizeof(Handle))) << "handles";
  comms->assign(static_cast<size_t>(n), nullptr);
  Deadline deadline(kOpTimeout);
  for (int left = n; left > 0;) {
    ASSERT_FALSE(deadline.expired()) << left << " of " << n << " accepts pending";
    for (size_t i = 0; i < listens.size(); ++i) {
      if ((*comms)[i] != nullptr) continue;
      ASSERT_EQ(plugin.accept(listens[i], &(*comms)[i]), loader::kSuccess) << "accept " << i;
      if ((*comms)[i] == nullptr) continue;
      --left;
      ASSERT_EQ(plugin.closeListen(listens[i]), loader::kSuccess);
    }
  }
}

// Receives n handles over ch and connects until every comm exists.
void connectMany(NetPlugin& plugin, Channel& ch, int n, std::vector<void*>* comms) {
  std::vector<Handle> handles(static_cast<size_t>(n));
  ASSERT_TRUE(ch.recv(handles.data(), handles.size() * sizeof(Handle), kOpTimeout)) << "handles";
  comms->assign(static_cast<size_t>(n), nullptr);
  Deadline deadline(kOpTimeout);
  for (int left = n; left > 0;) {
    ASSERT_FALSE(deadline.expired()) << left << " of " << n << " connects pending";
    for (size_t i = 0; i < handles.size(); ++i) {
      if ((*comms)[i] != nullptr) continue;
      ASSERT_EQ(plugin.connect(0, handles[i].data(), &(*comms)[i]), loader::kSuccess) << "connect " << i;
      if ((*comms)[i] != nullptr) --left;
    }
  }
}

void closeAll(NetPlugin& plugin, std::vector<void*>& comms, bool receiver) {
  for (void* c : comms)
    ASSERT_EQ(receiver ? plugin.closeRecv(c) : plugin.closeSend(c), loader::kSuccess);
  comms.clear();
}

// One small message each way on every comm (sends on `sends`, receives on `recvs`), all in
// flight at once: completes every endpoint's wire-up before the test goes on (UCX 1.13 aborts a
// survivor whose peer dies while a wire-up message to it is still pending: wireup_ep.c:241).
void exchangeOne(NetPlugin& plugin, const std::vector<void*>& sends, const std::vector<void*>& recvs) {
  static char out[8], in[8];
  std::vector<void*> pending;
  Deadline deadline(kOpTimeout);
  for (void* c : recvs) {
    void* data = in;
    size_t cap = sizeof in;
    int tag = kTag;
    void* mh = nullptr;
    void* req = nullptr;
    ASSERT_NO_FATAL_FAILURE(postRecv(plugin, c, 1, &data, &cap, &tag, &mh, deadline, &req));
    pending.push_back(req);
  }
  for (void* c : sends) {
    void* req = nullptr;
    ASSERT_NO_FATAL_FAILURE(postSend(plugin, c, out, sizeof out, kTag, nullptr, deadline, &req));
    pending.push_back(req);
  }
  for (void* req : pending) expectComplete(plugin, req, deadline, "warm-up message");
}

void expectNothingHeld(NetPlugin& plugin, const char* who) {
  auto fn = reinterpret_cast<pact_plugin_resources_fn>(plugin.symbol("pact_plugin_resources"));
  pact_plugin_resources_t r{-1, -1, -1};
  ASSERT_TRUE(fn != nullptr && fn(&r) == 0) << "pact_plugin_resources";
  EXPECT_EQ(r.comms, 0) << who << ": comms left open";
  EXPECT_EQ(r.registrations, 0) << who << ": registrations left";
  EXPECT_EQ(r.orphaned_requests, 0) << who << ": requests UCX still holds";
}

constexpr size_t kSmall = 64;

// ---- a late message and a reused tag space ---------------------------------------------------

// A accepts comm 2 (with PACT_TAG_SPACES as small as the test's comms need, the round-robin hands
// it comm 1's index, the next generation), receives one message and
// checks it is comm 2's (pattern 2); B connects comm 2 and sends it.
void receiveOnComm2(NetPlugin& plugin, PeerIo& io) {
  void* comm = nullptr;
  ASSERT_NO_FATAL_FAILURE(acceptPeer(plugin, *io.peer, &comm));
  HostBuffer buf(kSmall);
  std::memset(buf.data(), kPoison, kSmall);
  {
    MemReg mr(plugin, comm, buf.data(), kSmall);
    ASSERT_NO_FATAL_FAILURE(recvOne(plugin, comm, buf.data(), kSmall, mr.handle(), kSmall));
  }
  EXPECT_TRUE(matchesPattern(buf.data(), kSmall, 2)) << "comm 2 received comm 1's message";
  notifyDone(*io.peer);
  ASSERT_EQ(plugin.closeRecv(comm), loader::kSuccess);
}

void sendOnComm2(NetPlugin& plugin, PeerIo& io) {
  void* comm = nullptr;
  ASSERT_NO_FATAL_FAILURE(connectPeer(plugin, *io.peer, &comm));
  HostBuffer buf(kSmall);
  fillPattern(buf.data(), kSmall, 2);
  {
    MemReg mr(plugin, comm, buf.data(), kSmall);
    ASSERT_NO_FATAL_FAILURE(sendOne(plugin, comm, buf.data(), kSmall, mr.handle()));
  }
  awaitDone(*io.peer);
  ASSERT_EQ(plugin.closeSend(comm), loader::kSuccess);
}

// A (receiver) accepts comm 1 and closes it without posting a receive, so B's message on it
// stays in A's UCX unexpected queue. Both close comm 1; its tag space goes back to the pool.
// Comm 2 then takes that space (the next generation) and carries another message with the same
// NCCL tag and sequence number: A's receive must get comm 2's bytes, never the old message.
// (A late message of a closed comm that arrives after the reuse is the same case: it finds no
// receive of its generation.)
TEST(Scale, ReusedTagSpaceNeverMatchesAClosedCommsMessage) {
  PeerPair pair(
      loader::kNewestVersion,
      [](PeerIo& io) {
        // Two indices (comm 1 and the loopback comm): comm 2 gets comm 1's, the next generation.
        test::ScopedEnv spaces("PACT_TAG_SPACES", "2");
        auto plugin = openPlugin(io.version);
        ASSERT_TRUE(plugin);
        void* first = nullptr;
        ASSERT_NO_FATAL_FAILURE(acceptPeer(*plugin, *io.peer, &first));
        // B's send completes only while this side's worker progresses (UCX's wire-up): keep a
        // comm of this process with itself busy until B says it is done.
        void* selfSend = nullptr;
        void* selfRecv = nullptr;
        ASSERT_NO_FATAL_FAILURE(connectLoopback(*plugin, 0, false, &selfSend, &selfRecv));
        Deadline sent(kOpTimeout);
        while (!io.peer->readable() && !sent.expired())
          ASSERT_NO_FATAL_FAILURE(transferInOneThread(*plugin, selfSend, selfRecv, kSmall, 5));
        ASSERT_NO_FATAL_FAILURE(barrier(*io.peer));  // B's message on comm 1 is out
        ASSERT_EQ(plugin->closeRecv(first), loader::kSuccess);
        ASSERT_NO_FATAL_FAILURE(barrier(*io.peer));
        ASSERT_NO_FATAL_FAILURE(receiveOnComm2(*plugin, io));  // B closed comm 1 before
        ASSERT_EQ(plugin->closeSend(selfSend), loader::kSuccess);
        ASSERT_EQ(plugin->closeRecv(selfRecv), loader::kSuccess);
      },
      [](PeerIo& io) {
        auto plugin = openPlugin(io.version);
        ASSERT_TRUE(plugin);
        HostBuffer buf(kSmall);
        void* first = nullptr;
        ASSERT_NO_FATAL_FAILURE(connectPeer(*plugin, *io.peer, &first));
        fillPattern(buf.data(), kSmall, 1);
        {
          MemReg mr(*plugin, first, buf.data(), kSmall);
          // Eager: complete here although A never receives it.
          ASSERT_NO_FATAL_FAILURE(sendOne(*plugin, first, buf.data(), kSmall, mr.handle()));
        }
        ASSERT_NO_FATAL_FAILURE(barrier(*io.peer));
        ASSERT_NO_FATAL_FAILURE(barrier(*io.peer));  // A closed comm 1
        ASSERT_EQ(plugin->closeSend(first), loader::kSuccess);
        ASSERT_NO_FATAL_FAILURE(sendOnComm2(*plugin, io));
      });
  pair.expectSuccess();
}

// The same with a message that is still on its way: B's lane 0 holds every piece for 300 ms
// (PACT_FAULT delay), B closes comm 1 with its message held, and the message goes out after the
// close, as a packet already on the wire would, over the endpoint comm 2 then shares. A's
// receive on comm 2 (the reused index) is posted before the old message arrives; it must still
// get comm 2's bytes.
TEST(Scale, ADelayedMessageOfAClosedCommNeverLandsInANewOne) {
  PeerPair pair(
      loader::kNewestVersion,
      [](PeerIo& io) {
        test::ScopedEnv spaces("PACT_TAG_SPACES", "1");  // comm 2 gets comm 1's index
        auto plugin = openPlugin(io.version);
        ASSERT_TRUE(plugin);
        void* first = nullptr;
        ASSERT_NO_FATAL_FAILURE(acceptPeer(*plugin, *io.peer, &first));
        ASSERT_NO_FATAL_FAILURE(barrier(*io.peer));  // B closed comm 1 with its message held
        ASSERT_EQ(plugin->closeRecv(first), loader::kSuccess);
        ASSERT_NO_FATAL_FAILURE(barrier(*io.peer));
        ASSERT_NO_FATAL_FAILURE(receiveOnComm2(*plugin, io));
      },
      [](PeerIo& io) {
        test::ScopedEnv env("PACT_FAULT", "delay=lane0:300ms");
        auto plugin = openPlugin(io.version);
        ASSERT_TRUE(plugin);
        HostBuffer first(kSmall);
        void* comm = nullptr;
        ASSERT_NO_FATAL_FAILURE(connectPeer(*plugin, *io.peer, &comm));
        fillPattern(first.data(), kSmall, 1);
        void* req = nullptr;
        Deadline deadline(kOpTimeout);
        ASSERT_NO_FATAL_FAILURE(postSend(*plugin, comm, first.data(), kSmall, kTag, nullptr, deadline, &req));
        int done = 1;
        ASSERT_EQ(plugin->test(req, &done, nullptr), loader::kSuccess);
        ASSERT_EQ(done, 0) << "the lane delay did not hold the message";
        ASSERT_EQ(plugin->closeSend(comm), loader::kSuccess);  // its message still held
        ASSERT_NO_FATAL_FAILURE(barrier(*io.peer));
        ASSERT_NO_FATAL_FAILURE(barrier(*io.peer));  // A closed comm 1
        ASSERT_NO_FATAL_FAILURE(sendOnComm2(*plugin, io));
      });
  pair.expectSuccess();
}

// ---- 200,000 comm pairs in sequence ------------------------------------------------------------

constexpr int kPairs = 200000;
constexpr int kBatch = 2000;
constexpr int kFresh = 16;

// One side of the sequence: kPairs comms opened and closed in batches, then kFresh comms that
// each carry one message (receiver: accepts and receives; sender: connects and sends).
void openCloseThenTraffic(PeerIo& io, bool receiver) {
  auto plugin = openPlugin(io.version);
  ASSERT_TRUE(plugin);
  auto open = [&](int n, std::vector<void*>* comms) {
    if (receiver)
      acceptMany(*plugin, *io.peer, n, comms);
    else
      connectMany(*plugin, *io.peer, n, comms);
  };
  std::vector<void*> comms;
  for (int done = 0; done < kPairs; done += kBatch) {
    ASSERT_NO_FATAL_FAILURE(open(kBatch, &comms)) << "after " << done;
    ASSERT_NO_FATAL_FAILURE(closeAll(*plugin, comms, receiver));
    ASSERT_NO_FATAL_FAILURE(barrier(*io.peer));
  }
  ASSERT_NO_FATAL_FAILURE(open(kFresh, &comms));
  HostBuffer buf(kSmall);
  for (int i = 0; i < kFresh; ++i) {
    void* c = comms[static_cast<size_t>(i)];
    const auto seed = static_cast<uint64_t>(i);
    MemReg mr(*plugin, c, buf.data(), kSmall);
    if (receiver) {
      ASSERT_NO_FATAL_FAILURE(recvOne(*plugin, c, buf.data(), kSmall, mr.handle(), kSmall));
      EXPECT_TRUE(matchesPattern(buf.data(), kSmall, seed)) << "comm " << i;
    } else {
      fillPattern(buf.data(), kSmall, seed);
      ASSERT_NO_FATAL_FAILURE(sendOne(*plugin, c, buf.data(), kSmall, mr.handle()));
    }
  }
  if (receiver)
    notifyDone(*io.peer);
  else
    awaitDone(*io.peer);
  ASSERT_NO_FATAL_FAILURE(closeAll(*plugin, comms, receiver));
  expectNothingHeld(*plugin, receiver ? "receiver" : "sender");
}

TEST(Scale, TwoHundredThousandCommPairsInSequenceThenTrafficOnFreshComms) {
  PeerPair pair(
      loader::kNewestVersion, [](PeerIo& io) { openCloseThenTraffic(io, true); },
      // A hang detector, not a speed bound: under the sanitizers the sequence takes 110-140 s on
      // a 2-core machine (CI), against 10-20 s in the plain builds.
      [](PeerIo& io) { openCloseThenTraffic(io, false); }, std::chrono::seconds(300));
  pair.expectSuccess(std::chrono::seconds(330));
}

// ---- peer death with 1,000 comms ----------------------------------------------------------------

constexpr int kEach = 500;  // comms in each direction between the survivor and the victim
// Rendezvous with both UCX builds, so it never completes without the receiver: UCX 1.22 over tcp
// sends up to about 267 KiB as a multi-fragment eager message that completes once copied.
constexpr size_t kPending = 1 << 20;

TEST(ScalePeerFailure, AThousandCommsFailTogetherAndTheOthersKeepWorking) {
  PeerPair pair(
      loader::kNewestVersion,
      [](PeerIo& io) {  // the survivor
        auto plugin = openPlugin(io.version);
        ASSERT_TRUE(plugin);
        std::vector<void*> sends, recvs;
        ASSERT_NO_FATAL_FAILURE(connectMany(*plugin, *io.peer, kEach, &sends));
        ASSERT_NO_FATAL_FAILURE(acceptMany(*plugin, *io.peer, kEach, &recvs));
        ASSERT_NO_FATAL_FAILURE(exchangeOne(*plugin, sends, recvs));
        void* selfSend = nullptr;
        void* selfRecv = nullptr;  // a comm to another peer (this process) that must keep working
        ASSERT_NO_FATAL_FAILURE(connectLoopback(*plugin, 0, false, &selfSend, &selfRecv));
        HostBuffer buf(kPending);
        std::vector<void*> regs;
        std::vector<void*> pending;
        Deadline post(kOpTimeout);
        for (void* c : sends) {
          void* mh = nullptr;
          ASSERT_EQ(plugin->regMr(c, buf.data(), buf.size(), loader::kPtrHost, &mh), loader::kSuccess);
          regs.push_back(mh);
          void* req = nullptr;
          ASSERT_NO_FATAL_FAILURE(postSend(*plugin, c, buf.data(), kPending, kTag, mh, post, &req));
          pending.push_back(req);
        }
        for (void* c : recvs) {
          void* mh = nullptr;
          ASSERT_EQ(plugin->regMr(c, buf.data(), buf.size(), loader::kPtrHost, &mh), loader::kSuccess);
          regs.push_back(mh);
          void* data = buf.data();
          size_t cap = kPending;
          int tag = kTag;
          void* req = nullptr;
          ASSERT_NO_FATAL_FAILURE(postRecv(*plugin, c, 1, &data, &cap, &tag, &mh, post, &req));
          pending.push_back(req);
        }
        const char ready = 'R';
        ASSERT_TRUE(io.parent->send(&ready, 1));
        char note = 0;
        ASSERT_TRUE(io.parent->recv(&note, 1, kOpTimeout)) << "no kill note";  // sent before the kill
        Deadline bound(kDetectBound);
        size_t failed = 0;
        std::vector<bool> seen(pending.size(), false);
        int sizes[loader::kMaxRecvs];
        while (failed < pending.size() && !bound.expired()) {
          for (size_t i = 0; i < pending.size(); ++i) {
            if (seen[i]) continue;
            int done = 0;
            const int rc = plugin->test(pending[i], &done, sizes);
            ASSERT_FALSE(rc == loader::kSuccess && done) << "request " << i << " to the dead peer completed";
            if (rc == loader::kSuccess) continue;
            EXPECT_TRUE(rc == loader::kRemoteError || rc == loader::kSystemError) << "rc " << rc;
            seen[i] = true;
            ++failed;
          }
        }
        const long long ms = bound.elapsed().count();
        std::printf("[   INFO   ] %zu of %zu requests to the killed peer failed, the last %lld ms after the kill\n",
                    failed, pending.size(), ms);
        EXPECT_EQ(failed, pending.size()) << "not every comm to the dead peer failed within "
                                          << kDetectBound.count() << " ms";
        // The comm to the other peer still works.
        ASSERT_NO_FATAL_FAILURE(transferInOneThread(*plugin, selfSend, selfRecv, 1 << 20, 77));
        for (size_t i = 0; i < regs.size(); ++i)
          EXPECT_EQ(plugin->deregMr(i < sends.size() ? sends[i] : recvs[i - sends.size()], regs[i]),
                    loader::kSuccess);
        closeAll(*plugin, sends, false);
        closeAll(*plugin, recvs, true);
        EXPECT_EQ(plugin->closeSend(selfSend), loader::kSuccess);
        EXPECT_EQ(plugin->closeRecv(selfRecv), loader::kSuccess);
      },
      [](PeerIo& io) {  // the victim: its side of the 1,000 comms, then silence
        auto plugin = openPlugin(io.version);
        ASSERT_TRUE(plugin);
        std::vector<void*> recvs, sends;
        ASSERT_NO_FATAL_FAILURE(acceptMany(*plugin, *io.peer, kEach, &recvs));
        ASSERT_NO_FATAL_FAILURE(connectMany(*plugin, *io.peer, kEach, &sends));
        ASSERT_NO_FATAL_FAILURE(exchangeOne(*plugin, sends, recvs));
        const char ready = 'R';
        ASSERT_TRUE(io.parent->send(&ready, 1));
        char never = 0;
        io.parent->recv(&never, 1, kChildWatchdog);  // SIGKILLed while waiting here
        ADD_FAILURE() << "victim was not killed";
      });
  killBWhenBothReady(pair);
}

}  // namespace
}  // namespace pact::abi_test
