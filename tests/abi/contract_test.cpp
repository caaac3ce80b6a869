// The class contract on NCCL comms (docs/plugin.md, "The class contract"), through the plugin ABI
// (v12) as NCCL drives it, between two processes over the suite's UCX transport (tcp, sm):
// timeout on a stalled message and not on a late sender, verify repairing real corruption (and
// failing when the retries are spent; without verify the corruption reaches the buffer), a
// duplicated piece completing its message once, epoch fencing and the commit hook, credits per
// class and peer, a higher class not held behind a bulk one, and keys NCCL comms cannot honour
// refused at init. Faults are real: PACT_FAULT stall holds pieces, corrupt flips a bit of a copy
// on the wire, dup sends a piece twice. Every wait is bounded; nothing sleeps.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "pact/nccl_ext.h"
#include "tests/abi/harness.h"
#include "tests/common/scoped_env.h"

namespace pact::abi_test {
namespace {

constexpr int kVersion = 12;
using Env = std::map<std::string, std::string>;
using test::ScopedEnv;

int64_t nowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}


pact_comm_contract_t contractOf(NetPlugin& plugin, void* comm) {
  pact_comm_contract_t c{};
  c.struct_size = sizeof c;
  EXPECT_EQ(ext<pact_comm_contract_fn>(plugin, "pact_comm_contract")(comm, &c), 0);
  return c;
}

// A comm pair between two children with their own environment: A receives, B sends. `before`
// (may be empty) runs in each child after the plugin is open and before the comm connects.
using Body = std::function<void(NetPlugin&, void* comm, PeerIo&)>;
using Setup = std::function<void(NetPlugin&)>;
// One side of the pair: its environment, the plugin, setup, the comm (the receiver accepts, the
// sender connects), the body, the close.
void runSide(PeerIo& io, bool receiver, const Env& env, const Body& body, const Setup& setup) {
  const ScopedEnv scoped(env);
  auto plugin = openPlugin(io.version);
  ASSERT_TRUE(plugin);
  if (setup) setup(*plugin);
  void* comm = nullptr;
  if (receiver)
    ASSERT_NO_FATAL_FAILURE(acceptPeer(*plugin, *io.peer, &comm));
  else
    ASSERT_NO_FATAL_FAILURE(connectPeer(*plugin, *io.peer, &comm));
  body(*plugin, comm, io);
  EXPECT_EQ(receiver ? plugin->closeRecv(comm) : plugin->closeSend(comm), loader::kSuccess) << "close";
}

void runPair(const Env& recvEnv, const Env& sendEnv, const Body& recvSide, const Body& sendSide,
             const Setup& recvSetup = {}, const Setup& sendSetup = {}) {
  PeerPair pair(
      kVersion, [&](PeerIo& io) { runSide(io, true, recvEnv, recvSide, recvSetup); },
      [&](PeerIo& io) { runSide(io, false, sendEnv, sendSide, sendSetup); });
  pair.expectSuccess();
}

// One receive of up to `size` bytes into data, registered as mh: the request (null after a
// failure, reported by postRecv).
void* postOne(NetPlugin& plugin, void* comm, void* data, size_t size, void* mh) {
  void* req = nullptr;
  size_t cap = size;
  int tag = kTag;
  postRecv(plugin, comm, 1, &data, &cap, &tag, &mh, Deadline(kOpTimeout), &req);
  return req;
}

// test() until the request fails (the comm's error is sticky) or the deadline; ASSERTs it failed
// with ncclRemoteError and never reported done first. Returns the steady clock of the failure.
int64_t expectFails(NetPlugin& plugin, void* req, const char* what) {
  Deadline deadline(kOpTimeout);
  Completion c = waitRequest(plugin, req, deadline);
  EXPECT_FALSE(c.done) << what << " was reported done";
  EXPECT_EQ(c.rc, loader::kRemoteError) << what;
  return nowUs();
}

// The class profile of both sides, ordered or unordered (two lanes of 64 KiB pieces).
std::string withOrder(bool unordered, const std::string& keys) {
  return (unordered ? "unordered,lanes=2,chunk=64K," : "ordered,") + keys;
}

class Contract : public ::testing::TestWithParam<bool> {};  // param: unordered

std::string orderName(const ::testing::TestParamInfo<bool>& info) {
  return info.param ? "unordered" : "ordered";
}

// ---- timeout -----------------------------------------------------------------------------------

// Every piece held by the sender (PACT_FAULT stall=1): the seal lands, the pieces never do. The
// receive fails within timeout plus a small bound of the send, naming the class, the bytes and
// what it waited for; the sender's comm fails too (the receiver's abort).
TEST_P(Contract, TimeoutFailsAStalledMessageWithinTheBound) {
  constexpr auto kTimeout = std::chrono::milliseconds(200);
  constexpr int64_t kBoundUs = 300'000;  // the liveness look (1 ms) plus scheduling on 2 cores
  const Env cls{{"PACT_TC_DEFAULT", withOrder(GetParam(), "timeout=200ms")}};
  Env faulty = cls;
  faulty["PACT_FAULT"] = "stall=1";
  runPair(
      cls, faulty,
      [&](NetPlugin& plugin, void* comm, PeerIo& io) {
        HostBuffer buf(1 << 20);
        MemReg mr(plugin, comm, buf.data(), buf.size());
        void* req = nullptr;
        void* data = buf.data();
        size_t cap = buf.size();
        int tag = kTag;
        void* mh = mr.handle();
        ASSERT_NO_FATAL_FAILURE(postRecv(plugin, comm, 1, &data, &cap, &tag, &mh, Deadline(kOpTimeout), &req));
        ASSERT_TRUE(io.peer->sendValue(1));  // posted: send now
        int64_t sentAt = 0;
        ASSERT_TRUE(io.peer->recvValue(&sentAt, kOpTimeout));
        const int64_t failedAt = expectFails(plugin, req, "the stalled receive");
        EXPECT_GE(failedAt - sentAt, std::chrono::microseconds(kTimeout).count()) << "failed before the timeout";
        EXPECT_LE(failedAt - sentAt, std::chrono::microseconds(kTimeout).count() + kBoundUs);
        const auto c = contractOf(plugin, comm);
        EXPECT_EQ(c.error, PACT_COMM_DEADLINE);
        const std::string why = c.reason;
        for (const char* part : {"class DEFAULT", "message 0 of tag 1 stalled", "0 of 1048576 bytes",
                                 "timeout=200ms", "waiting for piece 0"})
          EXPECT_NE(why.find(part), std::string::npos) << "'" << part << "' not in: " << why;
        std::printf("[   INFO   ] failed %lld us after the send: %s\n",
                    static_cast<long long>(failedAt - sentAt), c.reason);
      },
      [&](NetPlugin& plugin, void* comm, PeerIo& io) {
        HostBuffer buf(1 << 20);
        fillPattern(buf.data(), buf.size(), 1);
        MemReg mr(plugin, comm, buf.data(), buf.size());
        int go = 0;
        ASSERT_TRUE(io.peer->recvValue(&go, kOpTimeout));
        const int64_t sentAt = nowUs();
        void* req = nullptr;
        ASSERT_NO_FATAL_FAILURE(postSend(plugin, comm, buf.data(), buf.size(), kTag, mr.handle(), Deadline(kOpTimeout), &req));
        ASSERT_TRUE(io.peer->sendValue(sentAt));
        expectFails(plugin, req, "the stalled send");
        const auto c = contractOf(plugin, comm);
        EXPECT_EQ(c.error, PACT_COMM_PEER);
        EXPECT_NE(std::string(c.reason).find("stalled"), std::string::npos) << c.reason;
      });
}

// A slow rank is not a stall: a receive posted long before its sender sends (four timeouts)
// completes; the clock starts when the message's first part lands.
TEST_P(Contract, AReceiveWaitingForALateSenderDoesNotFail) {
  const Env cls{{"PACT_TC_DEFAULT", withOrder(GetParam(), "timeout=100ms")}};
  constexpr size_t kSize = 300 << 10;
  runPair(
      cls, cls,
      [&](NetPlugin& plugin, void* comm, PeerIo& io) {
        HostBuffer buf(kSize);
        MemReg mr(plugin, comm, buf.data(), buf.size());
        void* req = postOne(plugin, comm, buf.data(), kSize, mr.handle());
        ASSERT_NE(req, nullptr);
        // The sender waits while this side tests for four timeouts.
        Deadline slow(std::chrono::milliseconds(400));
        while (!slow.expired()) {
          int done = 0, size = 0;
          ASSERT_EQ(plugin.test(req, &done, &size), loader::kSuccess) << "failed while the sender was late";
          ASSERT_EQ(done, 0);
        }
        ASSERT_TRUE(io.peer->sendValue(1));
        Completion c = expectComplete(plugin, req, Deadline(kOpTimeout), "the late message");
        EXPECT_EQ(c.sizes[0], static_cast<int>(kSize));
        EXPECT_TRUE(matchesPattern(buf.data(), kSize, 2));
        EXPECT_EQ(contractOf(plugin, comm).timeout_us, 100000u);
        notifyDone(*io.peer);
      },
      [&](NetPlugin& plugin, void* comm, PeerIo& io) {
        HostBuffer buf(kSize);
        fillPattern(buf.data(), kSize, 2);
        MemReg mr(plugin, comm, buf.data(), buf.size());
        int go = 0;
        ASSERT_TRUE(io.peer->recvValue(&go, kOpTimeout));
        ASSERT_NO_FATAL_FAILURE(sendOne(plugin, comm, buf.data(), kSize, mr.handle()));
        awaitDone(*io.peer);
      });
}

// ---- verify ------------------------------------------------------------------------------------

// A window of messages, each in its own buffer (NCCL's step slots): the sender's posts and the
// receiver's checks. exact: every completed receive must match its pattern.
struct Window {
  static constexpr int kSlots = 4;
  static size_t sizeOf(int i) {
    static constexpr size_t kSizes[] = {4096, (100 << 10) + 3, (1 << 20) + 7, 3 << 20};
    return kSizes[i % 4];
  }
  static constexpr size_t kCapacity = 3 << 20;
  // Runs `messages` through comm; returns how many receives were not byte-exact (receiver).
  static int run(NetPlugin& plugin, void* comm, bool send, int messages, uint64_t seed) {
    std::vector<std::unique_ptr<HostBuffer>> bufs;
    std::vector<std::unique_ptr<MemReg>> regs;
    for (int s = 0; s < kSlots; ++s) {
      bufs.push_back(std::make_unique<HostBuffer>(kCapacity));
      regs.push_back(std::make_unique<MemReg>(plugin, comm, bufs.back()->data(), kCapacity));
    }
    std::deque<std::pair<int, void*>> inFlight;
    Deadline deadline(kOpTimeout * 2);
    int posted = 0, inexact = 0;
    while (posted < messages || !inFlight.empty()) {
      while (posted < messages && inFlight.size() < kSlots) {
        const size_t slot = static_cast<size_t>(posted % kSlots);
        const size_t n = sizeOf(posted);
        void* req = nullptr;
        if (send) {
          fillPattern(bufs[slot]->data(), n, seed + static_cast<uint64_t>(posted));
          postSend(plugin, comm, bufs[slot]->data(), n, kTag, regs[slot]->handle(), deadline, &req);
        } else {
          std::memset(bufs[slot]->data(), kPoison, kCapacity);
          void* data = bufs[slot]->data();
          size_t cap = kCapacity;
          int tag = kTag;
          void* mh = regs[slot]->handle();
          postRecv(plugin, comm, 1, &data, &cap, &tag, &mh, deadline, &req);
        }
        if (req == nullptr) return -1;
        inFlight.emplace_back(posted++, req);
      }
      auto [i, req] = inFlight.front();
      inFlight.pop_front();
      Completion c = expectComplete(plugin, req, deadline, "message " + std::to_string(i));
      if (!c.done) return -1;
      if (!send) {
        const size_t n = sizeOf(i);
        const char* at = bufs[static_cast<size_t>(i % kSlots)]->data();
        if (c.sizes[0] != static_cast<int>(n) || !matchesPattern(at, n, seed + static_cast<uint64_t>(i)) ||
            !isPoison(at + n, kCapacity - n))
          ++inexact;
      }
    }
    return inexact;
  }
};

// PACT_FAULT corrupt flips a bit in a copy of a piece as it is sent: the receiver's checks find
// it, the piece is sent again, and every message completes byte-exact.
TEST_P(Contract, VerifyRepairsRealCorruption) {
  constexpr int kMessages = 48;
  const Env cls{{"PACT_TC_DEFAULT", withOrder(GetParam(), "verify=crc32c,retries=6")}};
  Env faulty = cls;
  faulty["PACT_FAULT"] = "corrupt=0.15,seed=3";
  runPair(
      cls, faulty,
      [&](NetPlugin& plugin, void* comm, PeerIo& io) {
        EXPECT_EQ(Window::run(plugin, comm, false, kMessages, 100), 0) << "a message was not byte-exact";
        const auto c = contractOf(plugin, comm);
        EXPECT_EQ(c.verify, 1);
        EXPECT_EQ(c.sealed, 1);
        EXPECT_EQ(c.error, PACT_COMM_OK) << c.reason;
        EXPECT_GT(c.checksum_mismatches, 0u) << "the corruption was never seen";
        std::printf("[   INFO   ] %llu piece(s) failed their check and were sent again\n",
                    static_cast<unsigned long long>(c.checksum_mismatches));
        notifyDone(*io.peer);
      },
      [&](NetPlugin& plugin, void* comm, PeerIo& io) {
        EXPECT_EQ(Window::run(plugin, comm, true, kMessages, 100), 0);
        const auto c = contractOf(plugin, comm);
        EXPECT_GT(c.retransmits, 0u);
        EXPECT_EQ(c.error, PACT_COMM_OK) << c.reason;
        awaitDone(*io.peer);
      });
}

// Every attempt corrupted: after the class's retries the receiver fails the comm naming the class,
// the message and its sizes; the sender's comm fails with the receiver's reason.
TEST_P(Contract, VerifyWithItsRetriesSpentFailsTheCommNamingTheClass) {
  const Env cls{{"PACT_TC_DEFAULT", withOrder(GetParam(), "verify=xxh3,retries=2")}};
  Env faulty = cls;
  faulty["PACT_FAULT"] = "corrupt=1";
  constexpr size_t kSize = 64 << 10;
  runPair(
      cls, faulty,
      [&](NetPlugin& plugin, void* comm, PeerIo&) {
        HostBuffer buf(kSize);
        MemReg mr(plugin, comm, buf.data(), buf.size());
        void* req = postOne(plugin, comm, buf.data(), kSize, mr.handle());
        ASSERT_NE(req, nullptr);
        expectFails(plugin, req, "the corrupted receive");
        const auto c = contractOf(plugin, comm);
        EXPECT_EQ(c.error, PACT_COMM_CHECKSUM);
        const std::string why = c.reason;
        for (const char* part : {"class DEFAULT", "message 0 of tag 1 (65536 bytes in 1 piece)", "xxh3",
                                 "on each of 3 attempts (retries=2)"})
          EXPECT_NE(why.find(part), std::string::npos) << "'" << part << "' not in: " << why;
        EXPECT_EQ(c.checksum_mismatches, 3u);
      },
      [&](NetPlugin& plugin, void* comm, PeerIo&) {
        HostBuffer buf(kSize);
        fillPattern(buf.data(), kSize, 4);
        MemReg mr(plugin, comm, buf.data(), buf.size());
        void* req = nullptr;
        ASSERT_NO_FATAL_FAILURE(postSend(plugin, comm, buf.data(), kSize, kTag, mr.handle(), Deadline(kOpTimeout), &req));
        expectFails(plugin, req, "the send whose pieces never checked out");
        const auto c = contractOf(plugin, comm);
        EXPECT_EQ(c.error, PACT_COMM_PEER);
        EXPECT_NE(std::string(c.reason).find("retries=2"), std::string::npos) << c.reason;
        EXPECT_TRUE(matchesPattern(buf.data(), kSize, 4)) << "the fault touched the application's buffer";
      });
}

// The control: without verify the corrupted copy is what lands, one bit off (the fault is real).
TEST_P(Contract, WithoutVerifyTheCorruptionReachesTheBuffer) {
  const Env cls{{"PACT_TC_DEFAULT", withOrder(GetParam(), "verify=none")}};
  Env faulty = cls;
  faulty["PACT_FAULT"] = "corrupt=1";
  constexpr size_t kSize = 64 << 10;
  runPair(
      cls, faulty,
      [&](NetPlugin& plugin, void* comm, PeerIo& io) {
        HostBuffer buf(kSize), want(kSize);
        fillPattern(want.data(), kSize, 5);
        MemReg mr(plugin, comm, buf.data(), buf.size());
        ASSERT_NO_FATAL_FAILURE(recvOne(plugin, comm, buf.data(), kSize, mr.handle(), kSize));
        int differing = 0;
        for (size_t i = 0; i < kSize; ++i) differing += buf.data()[i] != want.data()[i] ? 1 : 0;
        EXPECT_EQ(differing, GetParam() ? 1 : 1) << "one flipped bit per corrupted piece";
        notifyDone(*io.peer);
      },
      [&](NetPlugin& plugin, void* comm, PeerIo& io) {
        HostBuffer buf(kSize);
        fillPattern(buf.data(), kSize, 5);
        MemReg mr(plugin, comm, buf.data(), buf.size());
        ASSERT_NO_FATAL_FAILURE(sendOne(plugin, comm, buf.data(), kSize, mr.handle()));
        awaitDone(*io.peer);
      });
}

// ---- duplicates --------------------------------------------------------------------------------

// PACT_FAULT dup sends pieces twice, for real. Over more than two laps of the 512 sequence
// numbers of a tag, every message completes once, with its own size and bytes: the copies are
// drained before a later message could match one. The sender stays at most kAhead messages
// ahead of the receiver, as NCCL's 8-deep pipeline keeps it (an eager send completes without its
// receiver: nothing else would hold it back; net/tags.h says how far ahead a sender may be).
TEST_P(Contract, DuplicatedPiecesCompleteEachMessageOnce) {
  constexpr int kMessages = 1200;
  constexpr size_t kSize = 8 << 10;
  const Env cls{{"PACT_TC_DEFAULT", GetParam() ? "unordered,lanes=2,chunk=4K" : "ordered"}};
  Env faulty = cls;
  faulty["PACT_FAULT"] = "dup=0.3,seed=5";
  constexpr int kSlots = 8, kAhead = 128, kReport = 32;
  runPair(
      cls, faulty,
      [&](NetPlugin& plugin, void* comm, PeerIo& io) {
        HostBuffer buf(kSize * kSlots);
        MemReg mr(plugin, comm, buf.data(), buf.size());
        std::deque<std::pair<int, void*>> inFlight;
        Deadline deadline(kOpTimeout * 2);
        int inexact = 0;
        for (int posted = 0, done = 0; done < kMessages;) {
          while (posted < kMessages && inFlight.size() < kSlots) {
            char* at = buf.data() + kSize * static_cast<size_t>(posted % kSlots);
            std::memset(at, kPoison, kSize);
            void* data = at;
            size_t cap = kSize;
            int tag = kTag;
            void* mh = mr.handle();
            void* req = nullptr;
            ASSERT_NO_FATAL_FAILURE(postRecv(plugin, comm, 1, &data, &cap, &tag, &mh, deadline, &req));
            inFlight.emplace_back(posted++, req);
          }
          auto [i, req] = inFlight.front();
          inFlight.pop_front();
          Completion c = expectComplete(plugin, req, deadline, "message " + std::to_string(i));
          ASSERT_TRUE(c.done);
          const char* at = buf.data() + kSize * static_cast<size_t>(i % kSlots);
          if (c.sizes[0] != static_cast<int>(kSize) || !matchesPattern(at, kSize, 7000 + static_cast<uint64_t>(i))) {
            if (++inexact <= 3) ADD_FAILURE() << "message " << i << ": size " << c.sizes[0] << " or bytes wrong";
          }
          if (++done % kReport == 0 || done == kMessages) {
            ASSERT_TRUE(io.peer->sendValue(done));
          }
        }
        EXPECT_EQ(inexact, 0);
        const auto s = statsOf(plugin, comm);
        EXPECT_GT(s.duplicates_filtered, 0u) << "no copy was drained";
        // Every counter by name: the same figures, and the payload bytes received.
        const auto counters = ext<pact_comm_counters_fn>(plugin, "pact_comm_counters");
        const int n = counters(comm, nullptr, nullptr, 0);
        ASSERT_GT(n, 0);
        std::vector<const char*> names(static_cast<size_t>(n));
        std::vector<uint64_t> values(names.size());
        EXPECT_EQ(counters(comm, names.data(), values.data(), names.size()), n);
        std::map<std::string, uint64_t> byName;
        for (size_t i = 0; i < names.size(); ++i) byName[names[i]] = values[i];
        EXPECT_EQ(byName["bytes"], uint64_t{kSize} * kMessages);
        EXPECT_EQ(byName["messages"], s.messages);
        EXPECT_EQ(byName["duplicates_filtered"], s.duplicates_filtered);
        EXPECT_EQ(counters(nullptr, nullptr, nullptr, 0), -1);
        std::printf("[   INFO   ] %d messages, %llu duplicate copies drained\n", kMessages,
                    static_cast<unsigned long long>(s.duplicates_filtered));
        notifyDone(*io.peer);
      },
      [&](NetPlugin& plugin, void* comm, PeerIo& io) {
        HostBuffer buf(kSize * kSlots);
        MemReg mr(plugin, comm, buf.data(), buf.size());
        std::deque<void*> inFlight;
        Deadline deadline(kOpTimeout * 2);
        int received = 0;  // what the receiver reported done
        for (int posted = 0; posted < kMessages || !inFlight.empty();) {
          while (posted - received > kAhead) ASSERT_TRUE(io.peer->recvValue(&received, kOpTimeout));
          while (posted < kMessages && inFlight.size() < kSlots && posted - received <= kAhead) {
            char* at = buf.data() + kSize * static_cast<size_t>(posted % kSlots);
            fillPattern(at, kSize, 7000 + static_cast<uint64_t>(posted));
            void* req = nullptr;
            ASSERT_NO_FATAL_FAILURE(postSend(plugin, comm, at, kSize, kTag, mr.handle(), deadline, &req));
            inFlight.push_back(req);
            ++posted;
          }
          if (inFlight.empty()) continue;
          expectComplete(plugin, inFlight.front(), deadline, "send");
          inFlight.pop_front();
        }
        while (received < kMessages) ASSERT_TRUE(io.peer->recvValue(&received, kOpTimeout));
        EXPECT_GT(statsOf(plugin, comm).faults_injected, 0u);
        awaitDone(*io.peer);
      });
}

// ---- epoch fencing and the commit hook ---------------------------------------------------------

int setEpoch(NetPlugin& plugin, uint64_t e) { return ext<pact_nccl_set_epoch_fn>(plugin, "pact_nccl_set_epoch")(e); }

// Both sides fence from the start; they move from epoch 1 to 2 together (a weights update at run
// time), then the receiver moves to 3 and the sender does not: that message is never reported
// done, with a distinct error naming both epochs.
TEST_P(Contract, AMessageOfAnotherEpochIsNeverReportedDone) {
  const Env cls{{"PACT_TC_DEFAULT", withOrder(GetParam(), "verify=none")}};
  constexpr size_t kSize = 200 << 10;
  runPair(
      cls, cls,
      [&](NetPlugin& plugin, void* comm, PeerIo& io) {
        HostBuffer buf(kSize);
        MemReg mr(plugin, comm, buf.data(), buf.size());
        EXPECT_EQ(contractOf(plugin, comm).sealed, 1) << "a fencing receiver asks for seals";
        for (int m = 0; m < 6; ++m) {
          if (m == 3) {
            setEpoch(plugin, 2);
            barrier(*io.peer);
          }
          ASSERT_NO_FATAL_FAILURE(recvOne(plugin, comm, buf.data(), kSize, mr.handle(), kSize));
          EXPECT_TRUE(matchesPattern(buf.data(), kSize, static_cast<uint64_t>(m)));
        }
        setEpoch(plugin, 3);
        barrier(*io.peer);
        void* req = postOne(plugin, comm, buf.data(), kSize, mr.handle());
        ASSERT_NE(req, nullptr);
        expectFails(plugin, req, "the message of epoch 2 at a receiver of epoch 3");
        const auto c = contractOf(plugin, comm);
        EXPECT_EQ(c.error, PACT_COMM_EPOCH);
        EXPECT_NE(std::string(c.reason).find("is of model epoch 2; this receiver is at epoch 3"), std::string::npos)
            << c.reason;
      },
      [&](NetPlugin& plugin, void* comm, PeerIo& io) {
        HostBuffer buf(kSize);
        MemReg mr(plugin, comm, buf.data(), buf.size());
        for (int m = 0; m < 6; ++m) {
          if (m == 3) {
            setEpoch(plugin, 2);
            barrier(*io.peer);
          }
          fillPattern(buf.data(), kSize, static_cast<uint64_t>(m));
          ASSERT_NO_FATAL_FAILURE(sendOne(plugin, comm, buf.data(), kSize, mr.handle()));
        }
        barrier(*io.peer);
        void* req = nullptr;
        ASSERT_NO_FATAL_FAILURE(postSend(plugin, comm, buf.data(), kSize, kTag, mr.handle(), Deadline(kOpTimeout), &req));
        // The send itself may complete locally (the bytes left); the comm then fails by the
        // receiver's abort, seen on the next call.
        Deadline deadline(kOpTimeout);
        int rc = loader::kSuccess;
        while (rc == loader::kSuccess && !deadline.expired()) {
          int done = 0;
          rc = plugin.test(req, &done, nullptr);
          if (done != 0) {
            void* next = nullptr;
            rc = plugin.isend(comm, buf.data(), 1, kTag, mr.handle(), &next);
            req = next != nullptr ? next : req;
          }
        }
        EXPECT_EQ(rc, loader::kRemoteError);
        EXPECT_EQ(contractOf(plugin, comm).error, PACT_COMM_PEER);
      },
      [](NetPlugin& plugin) { setEpoch(plugin, 1); }, [](NetPlugin& plugin) { setEpoch(plugin, 1); });
}

// Fencing turned on after a comm was connected: that comm's messages carry no epoch, so none is
// reported done any more (fail closed).
TEST_P(Contract, FencingAfterTheCommConnectedFailsClosed) {
  const Env cls{{"PACT_TC_DEFAULT", withOrder(GetParam(), "verify=none")}};
  constexpr size_t kSize = 4096;
  runPair(
      cls, cls,
      [&](NetPlugin& plugin, void* comm, PeerIo& io) {
        HostBuffer buf(kSize);
        MemReg mr(plugin, comm, buf.data(), buf.size());
        ASSERT_NO_FATAL_FAILURE(recvOne(plugin, comm, buf.data(), kSize, mr.handle(), kSize));
        EXPECT_EQ(contractOf(plugin, comm).sealed, 0);
        setEpoch(plugin, 9);
        barrier(*io.peer);
        void* req = postOne(plugin, comm, buf.data(), kSize, mr.handle());
        ASSERT_NE(req, nullptr);
        expectFails(plugin, req, "a receive of a comm connected before fencing");
        const auto c = contractOf(plugin, comm);
        EXPECT_EQ(c.error, PACT_COMM_EPOCH);
        EXPECT_NE(std::string(c.reason).find("connected before it began"), std::string::npos) << c.reason;
      },
      [&](NetPlugin& plugin, void* comm, PeerIo& io) {
        HostBuffer buf(kSize);
        MemReg mr(plugin, comm, buf.data(), buf.size());
        ASSERT_NO_FATAL_FAILURE(sendOne(plugin, comm, buf.data(), kSize, mr.handle()));
        barrier(*io.peer);
        void* req = nullptr;
        ASSERT_NO_FATAL_FAILURE(postSend(plugin, comm, buf.data(), kSize, kTag, mr.handle(), Deadline(kOpTimeout), &req));
        waitRequest(plugin, req, Deadline(kOpTimeout));  // done or failed: either way the receiver refuses it
      });
}

// What the hook saw, in the receiving child.
struct HookLog {
  std::atomic<int> calls{0};
  std::atomic<int> vetoFrom{1 << 30};  // the call from which it vetoes
  std::vector<pact_nccl_message_t> seen;
};
int hookFn(void* user, const pact_nccl_message_t* m) {
  auto* log = static_cast<HookLog*>(user);
  const int n = log->calls++;
  log->seen.push_back(*m);
  return n >= log->vetoFrom ? 7 : 0;
}

// The hook sees each message once, after its checks, with its class, size, epoch and check; its
// veto fails the comm naming the value.
TEST_P(Contract, TheCommitHookSeesEachMessageOnceAndMayVeto) {
  constexpr int kMessages = 12;
  constexpr size_t kSize = 96 << 10;
  const Env cls{{"PACT_TC_DEFAULT", withOrder(GetParam(), "verify=crc32c")}};
  static HookLog log;  // the receiving child's (forked)
  runPair(
      cls, cls,
      [&](NetPlugin& plugin, void* comm, PeerIo& io) {
        HostBuffer buf(kSize);
        MemReg mr(plugin, comm, buf.data(), buf.size());
        log.vetoFrom = kMessages;
        for (int m = 0; m < kMessages; ++m) {
          ASSERT_NO_FATAL_FAILURE(recvOne(plugin, comm, buf.data(), kSize, mr.handle(), kSize));
          EXPECT_EQ(log.calls.load(), m + 1) << "once per message, before test() reported it";
        }
        ASSERT_EQ(log.seen.size(), static_cast<size_t>(kMessages));
        for (const auto& s : log.seen) {
          EXPECT_EQ(s.comm, comm);
          EXPECT_STREQ(s.traffic_class, "DEFAULT");
          EXPECT_EQ(s.bytes, kSize);
          EXPECT_EQ(s.epoch, 4u);
          EXPECT_EQ(s.verify, 1);
          EXPECT_EQ(s.tag, static_cast<uint32_t>(kTag));
        }
        // Messages 0 and 1 carry the same bytes, message 2 others: the check follows the bytes.
        EXPECT_EQ(log.seen[0].checksum, log.seen[1].checksum);
        EXPECT_NE(log.seen[0].checksum, log.seen[2].checksum);
        void* req = postOne(plugin, comm, buf.data(), kSize, mr.handle());
        ASSERT_NE(req, nullptr);
        expectFails(plugin, req, "the vetoed message");
        const auto c = contractOf(plugin, comm);
        EXPECT_EQ(c.error, PACT_COMM_VETOED);
        EXPECT_NE(std::string(c.reason).find("the commit hook vetoed it (returned 7)"), std::string::npos) << c.reason;
        EXPECT_EQ(log.calls.load(), kMessages + 1);
        notifyDone(*io.peer);
      },
      [&](NetPlugin& plugin, void* comm, PeerIo& io) {
        HostBuffer buf(kSize);
        MemReg mr(plugin, comm, buf.data(), buf.size());
        for (int m = 0; m < kMessages; ++m) {
          fillPattern(buf.data(), kSize, m == 1 ? 0 : static_cast<uint64_t>(m));
          ASSERT_NO_FATAL_FAILURE(sendOne(plugin, comm, buf.data(), kSize, mr.handle()));
        }
        void* req = nullptr;
        ASSERT_NO_FATAL_FAILURE(postSend(plugin, comm, buf.data(), kSize, kTag, mr.handle(), Deadline(kOpTimeout), &req));
        expectFails(plugin, req, "the send the receiver's hook vetoed");  // verify: done only at the verdict
        EXPECT_EQ(contractOf(plugin, comm).error, PACT_COMM_PEER);
        awaitDone(*io.peer);
      },
      [](NetPlugin& plugin) {
        setEpoch(plugin, 4);
        ext<pact_nccl_set_commit_hook_fn>(plugin, "pact_nccl_set_commit_hook")(hookFn, &log);
      },
      [](NetPlugin& plugin) { setEpoch(plugin, 4); });
}

INSTANTIATE_TEST_SUITE_P(Order, Contract, ::testing::Bool(), orderName);

// ---- credits -----------------------------------------------------------------------------------

// Two send comms of one class to one peer share its budget: a burst on both never has more than
// the budget in flight (sampled after every call), isend answers NULL beyond it and every message
// arrives; a message larger than the whole budget still goes, alone.
TEST(ContractCredits, ABurstNeverExceedsTheClassBudgetToThePeer) {
  constexpr uint64_t kBudget = 256 << 10;
  constexpr size_t kSize = 64 << 10, kBig = 1 << 20;
  constexpr int kMessages = 32;  // per comm: every receive posted at once (NCCL's most per comm)
  constexpr int kSlots = 16;
  const Env cls{{"PACT_TC_DEFAULT", "unordered,chunk=64K,credits=256K"}};
  PeerPair pair(
      kVersion,
      [&](PeerIo& io) {
        const ScopedEnv scoped(cls);
        auto plugin = openPlugin(io.version);
        ASSERT_TRUE(plugin);
        void* comms[2] = {};
        for (auto*& c : comms) ASSERT_NO_FATAL_FAILURE(acceptPeer(*plugin, *io.peer, &c));
        {
          HostBuffer buf(2 * kMessages * kSize);
          MemReg mr0(*plugin, comms[0], buf.data(), buf.size());
          Deadline deadline(kOpTimeout * 2);
          // Every receive of both comms posted up front, each in its own slot (as NCCL's step
          // slots): whatever the sender has in flight can land.
          std::vector<void*> reqs[2];
          for (int c = 0; c < 2; ++c)
            for (int m = 0; m < kMessages; ++m) {
              void* data = buf.data() + (static_cast<size_t>(c) * kMessages + static_cast<size_t>(m)) * kSize;
              size_t cap = kSize;
              int tag = kTag;
              void* mh = mr0.handle();
              void* req = nullptr;
              ASSERT_NO_FATAL_FAILURE(postRecv(*plugin, comms[c], 1, &data, &cap, &tag, &mh, deadline, &req));
              reqs[c].push_back(req);
            }
          for (int c = 0; c < 2; ++c)
            for (void* req : reqs[c]) {
              Completion r = expectComplete(*plugin, req, deadline, "receive");
              ASSERT_TRUE(r.done);
              EXPECT_EQ(r.sizes[0], static_cast<int>(kSize));
            }
          ASSERT_NO_FATAL_FAILURE(recvOne(*plugin, comms[0], buf.data(), kBig, mr0.handle(), kBig));
          EXPECT_TRUE(matchesPattern(buf.data(), kBig, 99));
        }
        notifyDone(*io.peer);
        for (void* c : comms) EXPECT_EQ(plugin->closeRecv(c), loader::kSuccess);
      },
      [&](PeerIo& io) {
        const ScopedEnv scoped(cls);
        auto plugin = openPlugin(io.version);
        ASSERT_TRUE(plugin);
        void* comms[2] = {};
        for (auto*& c : comms) ASSERT_NO_FATAL_FAILURE(connectPeer(*plugin, *io.peer, &c));
        {
          HostBuffer buf(kBig);
          fillPattern(buf.data(), kBig, 99);
          MemReg mr0(*plugin, comms[0], buf.data(), buf.size());
          MemReg mr1(*plugin, comms[1], buf.data(), buf.size());
          void* mhs[2] = {mr0.handle(), mr1.handle()};
          Deadline deadline(kOpTimeout * 2);
          std::deque<void*> q[2];
          int sent[2] = {0, 0};
          uint64_t nulls = 0, most = 0;
          auto sample = [&] {
            const auto c = contractOf(*plugin, comms[0]);
            EXPECT_EQ(c.credit_budget, kBudget);
            most = std::max(most, c.credit_in_flight);
            EXPECT_LE(c.credit_in_flight, kBudget) << "more than the budget in flight";
          };
          while (sent[0] < kMessages || sent[1] < kMessages || !q[0].empty() || !q[1].empty()) {
            ASSERT_FALSE(deadline.expired()) << "sent " << sent[0] << "/" << sent[1] << " queued " << q[0].size()
                                             << "/" << q[1].size() << " in flight "
                                             << contractOf(*plugin, comms[0]).credit_in_flight;
            for (int c = 0; c < 2; ++c) {
              while (sent[c] < kMessages && q[c].size() < kSlots) {
                void* req = nullptr;
                ASSERT_EQ(plugin->isend(comms[c], buf.data(), kSize, kTag, mhs[c], &req), loader::kSuccess);
                sample();
                if (req == nullptr) {
                  ++nulls;  // NCCL's "try again later": tried again below
                  break;
                }
                q[c].push_back(req);
                ++sent[c];
              }
              if (!q[c].empty()) {
                int done = 0;
                ASSERT_EQ(plugin->test(q[c].front(), &done, nullptr), loader::kSuccess);
                sample();
                if (done != 0) q[c].pop_front();
              }
            }
          }
          EXPECT_GT(nulls, 0u) << "the budget never held a send back";
          EXPECT_GT(most, 0u);
          for (void* c : comms) {
            EXPECT_LE(contractOf(*plugin, c).credit_peak, kBudget);
          }
          EXPECT_GT(contractOf(*plugin, comms[0]).credit_refusals + contractOf(*plugin, comms[1]).credit_refusals, 0u);
          std::printf("[   INFO   ] %llu NULL requests, at most %llu bytes in flight (budget %llu)\n",
                      static_cast<unsigned long long>(nulls), static_cast<unsigned long long>(most),
                      static_cast<unsigned long long>(kBudget));
          // Larger than the whole budget: goes once nothing else of the class is in flight.
          ASSERT_NO_FATAL_FAILURE(sendOne(*plugin, comms[0], buf.data(), kBig, mr0.handle()));
          EXPECT_EQ(contractOf(*plugin, comms[0]).credit_peak, kBig);
          awaitDone(*io.peer);
        }
        for (void* c : comms) EXPECT_EQ(plugin->closeSend(c), loader::kSuccess);
      });
  pair.expectSuccess();
}

// ---- priority ----------------------------------------------------------------------------------

// A latency class (class 2, priority 1, ordered) and a bulk class (class 1, priority 0, unordered
// 256 KiB pieces) to the same peer. Each round the receiver posts the bulk receives but does not
// progress them until the sender has its lanes full (at least two pieces in flight, stuck in the
// sockets or waiting on the rendezvous, whatever the machine's load); then the sender posts a 1 MiB
// latency message, and the receiver holds that receive back 20 ms while draining the bulk, so the
// latency class has work to the peer all that time. The gate's rule, asserted from what the bulk
// comm hands to UCX: while the latency message is not through, a bulk piece is bound only when the
// comm has none in flight, at most one per trickle period (PeerGate::kTrickle); so once down to one
// piece in flight the comm stays there (sampled after every call), while the sender keeps testing
// the bulk sends (as NCCL's proxy does) and their pieces complete.
TEST(ContractPriority, ABulkClassKeepsOnePieceInFlightWhileAHigherClassHasWork) {
  const Env env{{"PACT_TC_1", "unordered,chunk=256K,priority=0"}, {"PACT_TC_2", "priority=1"}};
  constexpr size_t kBulk = 4 << 20, kLatency = 1 << 20, kPiece = 256 << 10;
  constexpr int kBulkMessages = 8, kRounds = 3;
  constexpr int64_t kTrickleUs = 10'000;  // transport::PeerGate::kTrickle
  PeerPair pair(
      kVersion,
      [&](PeerIo& io) {
        const ScopedEnv scoped(env);
        auto bulkPlugin = openPlugin(io.version, 1), latPlugin = openPlugin(io.version, 2);
        ASSERT_TRUE(bulkPlugin && latPlugin);
        void *bulk = nullptr, *lat = nullptr;
        ASSERT_NO_FATAL_FAILURE(acceptPeer(*bulkPlugin, *io.peer, &bulk));
        ASSERT_NO_FATAL_FAILURE(acceptPeer(*latPlugin, *io.peer, &lat));
        {
          HostBuffer big(kBulk * kBulkMessages), small(kLatency);
          MemReg mb(*bulkPlugin, bulk, big.data(), big.size()), ml(*latPlugin, lat, small.data(), small.size());
          Deadline deadline(kOpTimeout * 2);
          for (int round = 0; round < kRounds; ++round) {
            std::deque<void*> reqs;
            for (int m = 0; m < kBulkMessages; ++m) {
              void* data = big.data() + kBulk * static_cast<size_t>(m);
              size_t cap = kBulk;
              int tag = kTag;
              void* mh = mb.handle();
              void* req = nullptr;
              ASSERT_NO_FATAL_FAILURE(postRecv(*bulkPlugin, bulk, 1, &data, &cap, &tag, &mh, deadline, &req));
              reqs.push_back(req);
            }
            auto testBulk = [&] {
              int done = 0;
              if (reqs.empty()) return;
              ASSERT_EQ(bulkPlugin->test(reqs.front(), &done, nullptr), loader::kSuccess);
              if (done != 0) reqs.pop_front();
            };
            // Nothing is progressed until the sender's lanes are full and the latency message is posted.
            int note = 0;
            ASSERT_TRUE(io.peer->recvValue(&note, kOpTimeout));
            for (Deadline hold(std::chrono::milliseconds(20)); !hold.expired();) testBulk();
            void* lreq = nullptr;
            void* data = small.data();
            size_t cap = kLatency;
            int tag = kTag;
            void* mh = ml.handle();
            ASSERT_NO_FATAL_FAILURE(postRecv(*latPlugin, lat, 1, &data, &cap, &tag, &mh, deadline, &lreq));
            for (int done = 0; done == 0;) {
              ASSERT_FALSE(deadline.expired());
              ASSERT_EQ(latPlugin->test(lreq, &done, nullptr), loader::kSuccess);
              testBulk();
            }
            while (!reqs.empty()) {
              expectComplete(*bulkPlugin, reqs.front(), deadline, "bulk receive");
              reqs.pop_front();
            }
          }
        }
        notifyDone(*io.peer);
        EXPECT_EQ(bulkPlugin->closeRecv(bulk), loader::kSuccess);
        EXPECT_EQ(latPlugin->closeRecv(lat), loader::kSuccess);
      },
      [&](PeerIo& io) {
        const ScopedEnv scoped(env);
        auto bulkPlugin = openPlugin(io.version, 1), latPlugin = openPlugin(io.version, 2);
        ASSERT_TRUE(bulkPlugin && latPlugin);
        void *bulk = nullptr, *lat = nullptr;
        ASSERT_NO_FATAL_FAILURE(connectPeer(*bulkPlugin, *io.peer, &bulk));
        ASSERT_NO_FATAL_FAILURE(connectPeer(*latPlugin, *io.peer, &lat));
        auto piecesBound = [&] {
          const pact_comm_stats_t s = statsOf(*bulkPlugin, bulk);
          uint64_t n = 0;
          for (int i = 0; i < s.lanes; ++i) n += s.lane_pieces[i];
          return n;
        };
        {
          HostBuffer big(kBulk), small(kLatency);
          MemReg mb(*bulkPlugin, bulk, big.data(), big.size()), ml(*latPlugin, lat, small.data(), small.size());
          Deadline deadline(kOpTimeout * 2);
          uint64_t worst = 0, before = 0, boundWhileBusy = 0;
          for (int round = 0; round < kRounds; ++round) {
            std::deque<void*> reqs;
            for (int m = 0; m < kBulkMessages; ++m) {
              void* req = nullptr;
              ASSERT_NO_FATAL_FAILURE(postSend(*bulkPlugin, bulk, big.data(), kBulk, kTag, mb.handle(), deadline, &req));
              reqs.push_back(req);
            }
            auto testBulk = [&] {
              int done = 0;
              if (reqs.empty()) return;
              ASSERT_EQ(bulkPlugin->test(reqs.front(), &done, nullptr), loader::kSuccess);
              if (done != 0) reqs.pop_front();
            };
            // The bulk stream fills its lanes first (the receiver progresses nothing yet).
            while (contractOf(*bulkPlugin, bulk).bytes_in_flight < 2 * kPiece) {
              ASSERT_FALSE(deadline.expired()) << "the bulk stream never filled its lanes";
              ASSERT_FALSE(reqs.empty()) << "the bulk sends completed without the receiver";
              testBulk();
            }
            before = std::max<uint64_t>(before, contractOf(*bulkPlugin, bulk).bytes_in_flight);
            void* lreq = nullptr;
            ASSERT_NO_FATAL_FAILURE(postSend(*latPlugin, lat, small.data(), kLatency, kTag, ml.handle(), deadline, &lreq));
            const uint64_t boundBefore = piecesBound();
            const int64_t postedAt = nowUs();
            ASSERT_TRUE(io.peer->sendValue(1));
            bool drained = false;
            for (int done = 0; done == 0;) {
              ASSERT_FALSE(deadline.expired());
              ASSERT_EQ(latPlugin->test(lreq, &done, nullptr), loader::kSuccess);
              if (done != 0) break;
              testBulk();
              const uint64_t inFlight = contractOf(*bulkPlugin, bulk).bytes_in_flight;
              drained = drained || inFlight <= kPiece;
              if (drained) worst = std::max(worst, inFlight);
            }
            const uint64_t bound = piecesBound() - boundBefore;
            const int64_t busyUs = nowUs() - postedAt;
            EXPECT_LE(bound, static_cast<uint64_t>(1 + busyUs / kTrickleUs))
                << "the bulk comm handed UCX " << bound << " pieces in the " << busyUs
                << " us the latency message had work (round " << round << ")";
            boundWhileBusy = std::max(boundWhileBusy, bound);
            while (!reqs.empty()) {
              expectComplete(*bulkPlugin, reqs.front(), deadline, "bulk send");
              reqs.pop_front();
            }
          }
          EXPECT_LE(worst, kPiece) << "bulk bytes in flight rose again while the latency message had work";
          EXPECT_GT(contractOf(*bulkPlugin, bulk).priority_holds, 0u);
          EXPECT_EQ(contractOf(*latPlugin, lat).priority, 1);
          std::printf("[   INFO   ] bulk in flight: %llu bytes before, at most %llu once down to a piece; "
                      "at most %llu pieces bound while the latency message had work\n",
                      static_cast<unsigned long long>(before), static_cast<unsigned long long>(worst),
                      static_cast<unsigned long long>(boundWhileBusy));
        }
        awaitDone(*io.peer);
        EXPECT_EQ(bulkPlugin->closeSend(bulk), loader::kSuccess);
        EXPECT_EQ(latPlugin->closeSend(lat), loader::kSuccess);
      });
  pair.expectSuccess();
}

// ---- no silent keys ------------------------------------------------------------------------------

// A key NCCL comms cannot honour fails init with the one line, in a class of their own and in
// PACT_TC_DEFAULT alike.
TEST(ContractKeys, AKeyNcclCommsCannotHonourFailsInit) {
  for (const auto& [var, value] : std::vector<std::pair<std::string, std::string>>{
           {"PACT_TC_3", "unordered,eager=64K"}, {"PACT_TC_DEFAULT", "eager=64K"}}) {
    runInChild("init with " + var, [&, var = var, value = value] {
      const ScopedEnv scoped(var, value);
      std::string error;
      auto plugin = NetPlugin::open(pluginPath(), kVersion, &error);
      ASSERT_TRUE(plugin) << error;
      EXPECT_EQ(plugin->init(-1, true), loader::kInvalidArgument);
      const std::string warning = NetPlugin::takeLastWarning();
      EXPECT_NE(warning.find("invalid " + var + "='" + value + "': 'eager=64K': not on NCCL comms: eager applies to engine transfers only"),
                std::string::npos)
          << warning;
    });
  }
}

// NCCL's net API v8 and v9 pass no traffic class: a PACT_TC_<n> the user set would do nothing,
// and init says so once, naming the variable and what classes need; v10 and later pass the class
// and say nothing of it. PACT_TC_DEFAULT alone is never mentioned (it applies to every comm).
TEST(ContractKeys, NumberedClassesOnAnAbiWithoutClassesAreNamedAtInit) {
  for (int version : {8, 9, 10, 12}) {
    runInChild("init v" + std::to_string(version), [version] {
      const ScopedEnv scoped({{"PACT_TC_2", "unordered,lanes=2"}, {"PACT_TC_DEFAULT", "chunk=256K"}});
      std::string error;
      auto plugin = NetPlugin::open(pluginPath(), version, &error);
      ASSERT_TRUE(plugin) << error;
      (void)NetPlugin::takeLastWarning();
      ASSERT_EQ(plugin->init(-1, true), loader::kSuccess);
      const std::string warning = NetPlugin::takeLastWarning();
      if (version < 10)
        EXPECT_NE(warning.find("PACT_TC_2 set, but this NCCL uses net API v8 or v9, which passes no traffic class: "
                               "every comm is of class DEFAULT"),
                  std::string::npos)
            << "v" << version << ": " << warning;
      else
        EXPECT_EQ(warning.find("passes no traffic class"), std::string::npos) << "v" << version << ": " << warning;
      EXPECT_EQ(warning.find("PACT_TC_DEFAULT set"), std::string::npos) << warning;
      EXPECT_EQ(plugin->finalize(), loader::kSuccess);
    });
  }
}

}  // namespace
}  // namespace pact::abi_test
