// The transfer engine end to end, through the C API, between processes over real UCX on
// loopback: happy path, checksum mismatch, duplicate delivery, epoch switch with revocation,
// deadlines, a peer killed mid-transfer, credits under a burst, an all-to-all step with a stale
// chunk. Every child asserts; the test fails on any failure, crash or hang (watchdogs).
#include <gtest/gtest.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "tests/common/scoped_env.h"
#include "tests/common/temp_file.h"
#include "tests/integration/engine_util.h"

namespace pact::test {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

pact_key_t key(uint64_t request, uint64_t epoch = 0, uint32_t generation = 0) {
  return pact_key_t{request, 1, epoch, generation};
}

// Sender side of a simple transfer: pattern(request) over lengths at offset, sent to the peer.
pact_xfer_t sendPattern(Side& s, const pact_key_t& k, const std::vector<uint64_t>& lengths,
                        uint64_t offset, uint64_t deadlineUs = 0, const char* cls = nullptr) {
  uint64_t total = 0;
  for (uint64_t n : lengths) total += n;
  fillPattern(s.memory.data() + offset, total, k.request_id);
  auto blocks = s.blocks(lengths, offset);
  pact_xfer_t x = 0;
  const pact_status_t st =
      pact_send(s.engine, s.peer, &k, blocks.data(), blocks.size(), deadlineUs, cls, &x);
  EXPECT_EQ(st, PACT_OK) << pact_last_error();
  s.xfers.push_back(x);
  return x;
}

pact_xfer_t expectInto(Side& r, const pact_key_t& k, const std::vector<uint64_t>& lengths,
                       uint64_t offset, uint64_t deadlineUs = 0, const char* cls = nullptr) {
  auto blocks = r.blocks(lengths, offset);
  pact_xfer_t x = 0;
  const pact_status_t st =
      pact_expect(r.engine, &k, blocks.data(), blocks.size(), deadlineUs, cls, &x);
  EXPECT_EQ(st, PACT_OK) << pact_last_error();
  r.xfers.push_back(x);
  return x;
}

// ---- happy path --------------------------------------------------------------------------------

TEST(Engine, HappyPathCommitsByteExactOnceWithATrace) {
  // Mixed sizes (eager and rendezvous pieces); sender and receiver cut the bytes differently.
  const std::vector<uint64_t> recvLayout = {4096, 1 << 20, 300000, 7};
  const std::vector<uint64_t> sendLayout = {700000, 4096 + (1 << 20) + 300000 + 7 - 700000};
  constexpr int kTransfers = 20;
  runPair(
      {},
      [&](Side& r) {
        CheckingHook& hook = r.checkCommits();
        std::vector<pact_xfer_t> xs;
        for (int i = 0; i < kTransfers; ++i)
          xs.push_back(expectInto(r, key(100 + i), recvLayout, static_cast<uint64_t>(i) * (1500000)));
        for (pact_xfer_t x : xs) {
          pact_xfer_info_t info = r.waitFinal(x);
          EXPECT_EQ(info.state, PACT_STATE_COMMITTED);
          EXPECT_EQ(info.result, PACT_OK);
          EXPECT_EQ(info.peer, r.peer);
          PACT_OK_OR_FAIL(pact_xfer_release(r.engine, x));
        }
        EXPECT_EQ(hook.calls, kTransfers);
        EXPECT_EQ(hook.bad, 0);
        const pact_stats_t s = r.stats();
        EXPECT_EQ(s.committed, static_cast<uint64_t>(kTransfers));
        EXPECT_EQ(s.aborted, 0u);
        EXPECT_EQ(s.open_transfers, 0u);
        EXPECT_EQ(s.staged_bytes, 0u);
        // The trace has every step of the first transfer, in order, with monotonic times.
        std::vector<pact_event_t> ev(4096);
        uint64_t cursor = 0;
        ev.resize(pact_trace_read(r.engine, ev.data(), ev.size(), &cursor));
        std::vector<int> states;
        uint64_t last = 0;
        for (const auto& e : ev) {
          if (e.key.request_id != 100) continue;
          states.push_back(e.state);
          EXPECT_GE(e.time_ns, last);
          last = e.time_ns;
        }
        EXPECT_EQ(states, (std::vector<int>{PACT_STATE_ALLOCATED, PACT_STATE_ADVERTISED,
                                            PACT_STATE_POSTED, PACT_STATE_IN_FLIGHT,
                                            PACT_STATE_REMOTE_DONE, PACT_STATE_VERIFIED,
                                            PACT_STATE_COMMITTED, PACT_STATE_RELEASED}));
        r.note(1);
      },
      [&](Side& s) {
        std::vector<pact_xfer_t> xs;
        for (int i = 0; i < kTransfers; ++i)
          xs.push_back(sendPattern(s, key(100 + i), sendLayout, static_cast<uint64_t>(i) * 1500000));
        for (pact_xfer_t x : xs) {
          pact_xfer_info_t info = s.waitFinal(x);
          EXPECT_EQ(info.state, PACT_STATE_COMMITTED);
          EXPECT_EQ(info.result, PACT_OK);
          PACT_OK_OR_FAIL(pact_xfer_release(s.engine, x));
        }
        EXPECT_TRUE(s.await(1));
        EXPECT_EQ(s.stats().committed, static_cast<uint64_t>(kTransfers));
      });
}

// Transfers within the class's `eager` size (and 64 source blocks) go in one message with their
// offer and commit on it (the trace's ADVERTISED comes from event 15, eager, on both sides);
// more blocks, more bytes or a class with eager=0 move as advertised pieces. All byte-exact.
TEST(Engine, SmallTransfersCommitOnTheirEagerOffer) {
  struct Case {
    uint64_t request;
    std::vector<uint64_t> send, recv;
    const char* cls;
    bool eager;
  };
  const std::vector<Case> cases = {
      {1, std::vector<uint64_t>(64, 4096), {100000, 100000, 62144}, "KV", true},
      {2, std::vector<uint64_t>(65, 1024), {66560}, "KV", false},     // past 64 source blocks
      {3, {16384}, {8192, 8192}, "CKPT", false},                      // PACT_TC_CKPT=eager=0
      {4, {300000}, {300000}, "KV", false},                           // past eager=256K
  };
  auto advertisedBy = [](pact_engine_t e, uint64_t request) {
    std::vector<pact_event_t> ev(4096);
    uint64_t cursor = 0;
    ev.resize(pact_trace_read(e, ev.data(), ev.size(), &cursor));
    for (const auto& x : ev)
      if (x.key.request_id == request && x.state == PACT_STATE_ADVERTISED) return static_cast<int>(x.event);
    return -1;
  };
  PairOptions o;
  o.receiverEnv = o.senderEnv = {{"PACT_TC_CKPT", "eager=0"}};
  runPair(
      o,
      [&](Side& r) {
        CheckingHook& hook = r.checkCommits();
        std::vector<pact_xfer_t> xs;
        for (const Case& c : cases)
          xs.push_back(expectInto(r, key(c.request), c.recv, c.request << 20, 0, c.cls));
        r.note(1);  // expected before the offers come: the eager ones land on arrival
        for (size_t i = 0; i < cases.size(); ++i) {
          EXPECT_EQ(r.waitFinal(xs[i]).result, PACT_OK) << "request " << cases[i].request;
          EXPECT_EQ(advertisedBy(r.engine, cases[i].request), cases[i].eager ? 15 : 0)
              << "request " << cases[i].request;
        }
        EXPECT_EQ(hook.calls, static_cast<int>(cases.size()));
        EXPECT_EQ(hook.bad, 0);
        EXPECT_EQ(r.stats().staged_bytes, 0u);
        r.note(2);
      },
      [&](Side& s) {
        ASSERT_TRUE(s.await(1));
        // (runPair waited for the receiver's credit grant: eager offers wait for one.)
        std::vector<pact_xfer_t> xs;
        for (const Case& c : cases)
          xs.push_back(sendPattern(s, key(c.request), c.send, c.request << 20, 0, c.cls));
        for (size_t i = 0; i < cases.size(); ++i) {
          EXPECT_EQ(s.waitFinal(xs[i]).result, PACT_OK) << "request " << cases[i].request;
          EXPECT_EQ(advertisedBy(s.engine, cases[i].request), cases[i].eager ? 15 : 0)
              << "request " << cases[i].request;
        }
        uint64_t budget = 0, inUse = 1;
        EXPECT_EQ(pact_peer_credit(s.engine, s.peer, &budget, &inUse), PACT_OK);
        EXPECT_EQ(inUse, 0u);  // the eager bytes' credit came back
        EXPECT_TRUE(s.await(2));
      });
}

TEST(Engine, CallerDrivenProgressWorksWithoutAThread) {
  PairOptions o;
  o.progressThread = false;
  runPair(
      o,
      [&](Side& r) {
        CheckingHook& hook = r.checkCommits();
        pact_xfer_t x = expectInto(r, key(7), {65536, 3 << 20}, 0);
        EXPECT_EQ(r.waitFinal(x).result, PACT_OK);
        EXPECT_EQ(hook.calls, 1);
        EXPECT_EQ(hook.bad, 0);
        r.note(1);
      },
      [&](Side& s) {
        pact_xfer_t x = sendPattern(s, key(7), {65536 + (3 << 20)}, 0);
        EXPECT_EQ(s.waitFinal(x).result, PACT_OK);
        EXPECT_TRUE(s.await(1));
      });
}

// ---- progress ----------------------------------------------------------------------------------

double processCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// An idle engine's progress thread sleeps on the worker's event fd: connected, with a transfer
// waiting for an offer, it uses (far) less CPU than a spinning thread would in the same time.
TEST(Engine, AnIdleProgressThreadSleeps) {
  runPair(
      {},
      [&](Side& r) {
        expectInto(r, key(900), {4096}, 0);  // waits for an offer that comes later
        const double cpu0 = processCpuSeconds();
        const auto wall0 = steady_clock::now();
        std::this_thread::sleep_for(milliseconds(500));
        const double cpu = processCpuSeconds() - cpu0;
        const double wall = std::chrono::duration<double>(steady_clock::now() - wall0).count();
        EXPECT_LT(cpu, 0.2 * wall) << "cpu " << cpu << " s in " << wall << " s";
        r.note(1);
        EXPECT_EQ(r.waitFinal(r.xfers.back()).result, PACT_OK);  // and it still wakes up
      },
      [&](Side& s) {
        EXPECT_TRUE(s.await(1));
        EXPECT_EQ(s.waitFinal(sendPattern(s, key(900), {4096}, 0)).result, PACT_OK);
      });
}

// Releasing an open transfer aborts it; the id stays queryable until the transfer is final, so the
// application can tell when the blocks are free again; the receiver hears of it.
TEST(Engine, ReleasingAnOpenTransferAbortsItAndWaitSaysWhenItIsFinal) {
  PairOptions o;
  o.senderEnv = {{"PACT_FAULT", "drop=1"}};  // the pieces never arrive: the transfer stays open
  runPair(
      o,
      [&](Side& r) {
        pact_xfer_t x = expectInto(r, key(950), {1 << 20}, 0);
        const pact_xfer_info_t info = r.waitFinal(x, 10000);
        EXPECT_EQ(info.state, PACT_STATE_ABORTED);
        EXPECT_NE(info.result, PACT_OK);
        r.note(1);
      },
      [&](Side& s) {
        pact_xfer_t x = sendPattern(s, key(950), {1 << 20}, 0);
        pact_xfer_info_t info{};
        const auto limit = steady_clock::now() + milliseconds(10000);
        do {
          PACT_OK_OR_FAIL(pact_xfer_query(s.engine, x, &info));
        } while (info.state != PACT_STATE_IN_FLIGHT && steady_clock::now() < limit);
        ASSERT_EQ(info.state, PACT_STATE_IN_FLIGHT);
        const pact_status_t released = pact_xfer_release(s.engine, x);
        ASSERT_TRUE(released == PACT_OK || released == PACT_IN_PROGRESS) << pact_last_error();
        EXPECT_EQ(pact_xfer_release(s.engine, x), PACT_ERR_NOT_FOUND);  // once only
        if (released == PACT_IN_PROGRESS) {
          PACT_OK_OR_FAIL(pact_xfer_wait(s.engine, x, 10000, &info));
          EXPECT_TRUE(info.final);
        } else {
          EXPECT_EQ(pact_xfer_query(s.engine, x, &info), PACT_ERR_NOT_FOUND);  // gone: free
        }
        EXPECT_EQ(pact_mem_deregister(s.engine, s.mr), PACT_OK);  // nothing uses the blocks now
        s.mr = nullptr;
        EXPECT_TRUE(s.await(1));
      });
}

// ---- bad input at the API ------------------------------------------------------------------------

TEST(Engine, BadArgumentsAreRefusedWithAMessage) {
  runPair(
      {},
      [&](Side& r) {
        pact_key_t k = key(1);
        pact_block_t outside{r.mr, r.memory.size() - 10, 100};
        pact_xfer_t x = 0;
        EXPECT_EQ(pact_expect(r.engine, &k, &outside, 1, 0, nullptr, &x), PACT_ERR_OUT_OF_RANGE);
        EXPECT_NE(std::string(pact_last_error()).find("blocks[0]: offset"), std::string::npos)
            << pact_last_error();
        pact_block_t zero{r.mr, 0, 0};
        EXPECT_EQ(pact_expect(r.engine, &k, &zero, 1, 0, nullptr, &x), PACT_ERR_INVALID_ARG);
        pact_block_t unknown{reinterpret_cast<pact_mr_t>(&k), 0, 10};
        EXPECT_EQ(pact_expect(r.engine, &k, &unknown, 1, 0, nullptr, &x), PACT_ERR_NOT_FOUND);
        pact_key_t other = key(1, 5);
        pact_block_t ok{r.mr, 0, 10};
        EXPECT_EQ(pact_expect(r.engine, &other, &ok, 1, 0, nullptr, &x), PACT_ERR_EPOCH_MISMATCH);
        // A misspelt class is an error, not silently DEFAULT; names are case-insensitive.
        EXPECT_EQ(pact_expect(r.engine, &k, &ok, 1, 0, "KVV", &x), PACT_ERR_INVALID_ARG);
        EXPECT_NE(std::string(pact_last_error()).find("traffic class 'KVV': expected one of DEFAULT, KV"),
                  std::string::npos) << pact_last_error();
        EXPECT_EQ(pact_send(r.engine, r.peer, &k, &ok, 1, 0, "bogus", &x), PACT_ERR_INVALID_ARG);
        EXPECT_EQ(pact_peer_disconnect(r.engine, 999, "gone"), PACT_ERR_NOT_FOUND);
        EXPECT_STREQ(pact_status_string(PACT_ERR_PEER_STALE), "PACT_ERR_PEER_STALE");
        ASSERT_EQ(pact_expect(r.engine, &k, &ok, 1, 0, nullptr, &x), PACT_OK);
        pact_xfer_t y = 0;
        EXPECT_EQ(pact_expect(r.engine, &k, &ok, 1, 0, nullptr, &y), PACT_ERR_DUPLICATE);
        // A registration in use cannot go; the transfer's release frees it.
        EXPECT_EQ(pact_mem_deregister(r.engine, r.mr), PACT_ERR_BUSY);
        PACT_OK_OR_FAIL(pact_xfer_release(r.engine, x));
        EXPECT_EQ(pact_xfer_query(r.engine, x, nullptr), PACT_ERR_INVALID_ARG);
        pact_xfer_info_t info;
        EXPECT_EQ(pact_xfer_query(r.engine, x, &info), PACT_ERR_NOT_FOUND);
        EXPECT_EQ(pact_connect(r.engine, "127.0.0.1", 100, &r.peer), PACT_ERR_INVALID_ARG);
        EXPECT_NE(std::string(pact_last_error()).find("expected ip:port"), std::string::npos);
        // Nothing listens on port 1: refused, not a lost peer.
        pact_peer_t none = 0;
        EXPECT_EQ(pact_connect(r.engine, "127.0.0.1:1", 2000, &none), PACT_ERR_REFUSED);
        EXPECT_NE(std::string(pact_last_error()).find("nothing listens"), std::string::npos)
            << pact_last_error();
        // A group checks its peers when it is created, not at its first step.
        const pact_peer_t peers[2] = {r.peer, 999};
        pact_group_t g = nullptr;
        EXPECT_EQ(pact_group_create(r.engine, 1, peers, 2, 0, &g), PACT_ERR_NOT_FOUND);
        EXPECT_NE(std::string(pact_last_error()).find("peers[1]"), std::string::npos)
            << pact_last_error();
        EXPECT_EQ(g, nullptr);
        r.note(1);
      },
      [&](Side& s) { EXPECT_TRUE(s.await(1)); });
}

// ---- authentication ----------------------------------------------------------------------------

TEST(EngineAuth, PeersWithTheSameKeyConnectAndTransfer) {
  const TempFile keyFile("correct horse battery staple\n");
  PairOptions o;
  o.receiverEnv = o.senderEnv = {{"PACT_AUTH_KEY_FILE", keyFile.path()}};
  runPair(
      o,
      [&](Side& r) {
        EXPECT_EQ(r.waitFinal(expectInto(r, key(1), {1 << 20}, 0)).result, PACT_OK);
        r.note(1);
      },
      [&](Side& s) {
        EXPECT_EQ(s.waitFinal(sendPattern(s, key(1), {1 << 20}, 0)).result, PACT_OK);
        EXPECT_TRUE(s.await(1));
      });
}

TEST(EngineAuth, AnotherKeyOrNoKeyIsRefusedPromptly) {
  const TempFile keyA("the first shared secret"), keyB("another shared secret!!");
  const std::string& a = keyA.path();
  const std::string& b = keyB.path();
  const auto never = [](Side&) { ADD_FAILURE() << "a refused pair ran its body"; };
  PairOptions o;
  o.expectRefused = true;
  o.receiverEnv = {{"PACT_AUTH_KEY_FILE", a}};
  o.senderEnv = {{"PACT_AUTH_KEY_FILE", b}};
  o.refusal = "authentication";
  runPair(o, never, never);
  o.senderEnv = {};  // the sender has no key
  runPair(o, never, never);
  o.receiverEnv = {};
  o.senderEnv = {{"PACT_AUTH_KEY_FILE", a}};  // only the sender has one
  runPair(o, never, never);
}

// ---- checksums ---------------------------------------------------------------------------------

TEST(Engine, ChecksumMismatchNeverCommits) {
  PairOptions o;
  o.receiverEnv = {{"PACT_FAULT", "corrupt=1,seed=3"}, {"PACT_TC_KV", "verify=crc32c,retries=2"}};
  o.senderEnv = {{"PACT_TC_KV", "verify=crc32c,retries=2"}};
  runPair(
      o,
      [&](Side& r) {
        CheckingHook& hook = r.checkCommits();
        pact_xfer_t x = expectInto(r, key(9), {100000, 2 << 20}, 0, 0, "KV");
        pact_xfer_info_t info = r.waitFinal(x);
        EXPECT_EQ(info.state, PACT_STATE_ABORTED);
        EXPECT_EQ(info.result, PACT_ERR_CHECKSUM);
        EXPECT_EQ(info.retries, 2u);
        EXPECT_EQ(hook.calls, 0);
        const pact_stats_t st = r.stats();
        EXPECT_EQ(st.checksum_failures, 3u);
        EXPECT_EQ(st.retried, 2u);
        EXPECT_EQ(st.committed, 0u);
        r.note(1);
      },
      [&](Side& s) {
        pact_xfer_t x = sendPattern(s, key(9), {100000 + (2 << 20)}, 0, 0, "KV");
        pact_xfer_info_t info = s.waitFinal(x);
        EXPECT_EQ(info.result, PACT_ERR_CHECKSUM);
        EXPECT_EQ(info.retries, 2u);
        EXPECT_TRUE(s.await(1));
      });
}

TEST(Engine, CorruptedAttemptsAreRetriedUntilTheDataIsRight) {
  PairOptions o;
  o.receiverEnv = {{"PACT_FAULT", "corrupt=0.3,seed=11"}, {"PACT_TC_KV", "verify=xxh3,retries=40"}};
  o.senderEnv = {{"PACT_TC_KV", "verify=xxh3,retries=40"}};
  constexpr int kTransfers = 30;
  runPair(
      o,
      [&](Side& r) {
        CheckingHook& hook = r.checkCommits();
        std::vector<pact_xfer_t> xs;
        for (int i = 0; i < kTransfers; ++i)
          xs.push_back(expectInto(r, key(i + 1), {8192, 8192}, static_cast<uint64_t>(i) * 16384, 0, "KV"));
        for (pact_xfer_t x : xs) EXPECT_EQ(r.waitFinal(x).result, PACT_OK);
        EXPECT_EQ(hook.calls, kTransfers);
        EXPECT_EQ(hook.bad, 0);  // nothing corrupt reached the hook
        EXPECT_GT(r.stats().checksum_failures, 0u);
        EXPECT_EQ(r.stats().retried, r.stats().checksum_failures);
        r.note(1);
      },
      [&](Side& s) {
        for (int i = 0; i < kTransfers; ++i) {
          pact_xfer_t x = sendPattern(s, key(i + 1), {16384}, static_cast<uint64_t>(i) * 16384, 0, "KV");
          EXPECT_EQ(s.waitFinal(x).result, PACT_OK);
        }
        EXPECT_TRUE(s.await(1));
      });
}

// ---- exactly once ------------------------------------------------------------------------------

TEST(Engine, DuplicateDeliveryCommitsOnce) {
  PairOptions o;
  o.senderEnv = {{"PACT_FAULT", "dup=1,lose_remote_done=0.5,seed=5"}};
  runPair(
      o,
      [&](Side& r) {
        CheckingHook& hook = r.checkCommits();
        for (int i = 0; i < 10; ++i) {
          pact_xfer_t x = expectInto(r, key(50 + i), {4096, 1 << 20}, static_cast<uint64_t>(i) << 21);
          EXPECT_EQ(r.waitFinal(x).result, PACT_OK);
        }
        EXPECT_EQ(hook.calls, 10);
        EXPECT_EQ(hook.bad, 0);
        EXPECT_GT(r.stats().duplicates_dropped, 0u);
        r.note(1);
        // The sender sends key 50 again: refused as a duplicate, never committed twice.
        EXPECT_TRUE(r.await(2));
        EXPECT_EQ(hook.calls, 10);
        pact_key_t again = key(50);
        pact_block_t b{r.mr, 0, 4096};
        pact_xfer_t y = 0;
        EXPECT_EQ(pact_expect(r.engine, &again, &b, 1, 0, nullptr, &y), PACT_ERR_DUPLICATE);
        r.note(3);
      },
      [&](Side& s) {
        for (int i = 0; i < 10; ++i) {
          pact_xfer_t x = sendPattern(s, key(50 + i), {4096 + (1 << 20)}, static_cast<uint64_t>(i) << 21);
          EXPECT_EQ(s.waitFinal(x).result, PACT_OK);
        }
        EXPECT_TRUE(s.await(1));
        pact_xfer_t x = sendPattern(s, key(50), {4096 + (1 << 20)}, 0);
        EXPECT_EQ(s.waitFinal(x).result, PACT_ERR_DUPLICATE);
        s.note(2);
        EXPECT_TRUE(s.await(3));
      });
}

// Every eager offer duplicated on the wire and half the receiver's verdicts lost: each of 16 keys
// commits once, and every sender transfer ends PACT_OK (a copy of its own offer is not taken for
// a second send; docs/engine.md "Exactly once"). Three seeds.
TEST(Engine, DuplicatedOffersAndLostVerdictsTellTheSenderTheTruth) {
  for (const char* seed : {"1", "2", "3"}) {
    SCOPED_TRACE(std::string("seed ") + seed);
    PairOptions o;
    o.senderEnv = {{"PACT_FAULT", std::string("dup=1,seed=") + seed}};
    o.receiverEnv = {{"PACT_FAULT", std::string("lose_remote_done=0.5,seed=") + seed}};
    runPair(
        o,
        [&](Side& r) {
          CheckingHook& hook = r.checkCommits();
          std::vector<pact_xfer_t> xs;
          for (int i = 0; i < 16; ++i) xs.push_back(expectInto(r, key(200 + i), {4096}, static_cast<uint64_t>(i) * 4096));
          for (pact_xfer_t x : xs) EXPECT_EQ(r.waitFinal(x).result, PACT_OK);
          EXPECT_EQ(hook.calls, 16);
          EXPECT_EQ(hook.bad, 0);
          r.note(1);
          EXPECT_TRUE(r.await(2));
        },
        [&](Side& s) {
          std::vector<pact_xfer_t> xs;
          for (int i = 0; i < 16; ++i) xs.push_back(sendPattern(s, key(200 + i), {4096}, static_cast<uint64_t>(i) * 4096));
          for (size_t i = 0; i < xs.size(); ++i) {
            const pact_xfer_info_t info = s.waitFinal(xs[i]);
            EXPECT_EQ(info.result, PACT_OK) << "key " << 200 + i << " committed at the receiver, the sender was told "
                                            << pact_status_string(info.result);
          }
          EXPECT_TRUE(s.await(1));
          s.note(2);
        });
  }
}

// ---- epochs ------------------------------------------------------------------------------------

// The receiver stops progressing once it advertised, lets the sender put every piece on the wire,
// then switches epochs before it looks at them: the transfer aborts, the sender hears
// EPOCH_MISMATCH, and not one late byte lands in the (poisoned) buffer.
TEST(Engine, EpochSwitchMidTransferAbortsRevokesAndTellsTheSender) {
  PairOptions o;
  o.progressThread = false;
  // 64 KiB pieces (66 of them): far more than the receiver's last progress call before the
  // switch can land, so late pieces are certain (with the ordered class's 3 pieces of up to
  // 4 MiB, all of them sometimes landed first under load, and there was nothing late to count).
  o.receiverEnv = o.senderEnv = {{"PACT_TC_DEFAULT", "unordered,chunk=64K"}};
  const std::vector<uint64_t> layout = {16384, 16384, 4 << 20};
  runPair(
      o,
      [&](Side& r) {
        CheckingHook& hook = r.checkCommits();
        pact_xfer_t x = expectInto(r, key(77), layout, 0);
        pact_xfer_info_t info{};
        const auto limit = steady_clock::now() + milliseconds(10000);
        do {
          PACT_OK_OR_FAIL(pact_progress(r.engine, 1));
          PACT_OK_OR_FAIL(pact_xfer_query(r.engine, x, &info));
        } while (info.state == PACT_STATE_ALLOCATED && steady_clock::now() < limit);
        ASSERT_TRUE(info.state == PACT_STATE_POSTED || info.state == PACT_STATE_IN_FLIGHT)
            << info.state;
        r.note(1);                // advertised; no more progress here until the pieces are out
        ASSERT_TRUE(r.await(2));  // the sender's pieces are on their way
        PACT_OK_OR_FAIL(pact_set_epoch(r.engine, 1));
        info = r.waitFinal(x);
        EXPECT_EQ(info.state, PACT_STATE_ABORTED);
        EXPECT_EQ(info.result, PACT_ERR_EPOCH_MISMATCH);
        std::fill(r.memory.begin(), r.memory.begin() + (5 << 20), 0xAB);
        // Keep progressing until the sender has heard; late pieces must not land.
        r.note(3);
        EXPECT_TRUE(r.awaitProgressing(4));
        for (int i = 0; i < 50; ++i) PACT_OK_OR_FAIL(pact_progress(r.engine, 1));
        EXPECT_TRUE(std::all_of(r.memory.begin(), r.memory.begin() + (5 << 20),
                                [](uint8_t b) { return b == 0xAB; }));
        EXPECT_EQ(hook.calls, 0);
        EXPECT_GT(r.stats().stale_rejected, 0u);
        // The old epoch is refused from now on.
        pact_key_t old = key(78, 0);
        pact_block_t b{r.mr, 0, 10};
        pact_xfer_t y = 0;
        EXPECT_EQ(pact_expect(r.engine, &old, &b, 1, 0, nullptr, &y), PACT_ERR_EPOCH_MISMATCH);
        PACT_OK_OR_FAIL(pact_xfer_release(r.engine, x));
      },
      [&](Side& s) {
        pact_xfer_t x = sendPattern(s, key(77), layout, 0);
        ASSERT_TRUE(s.awaitProgressing(1));
        pact_xfer_info_t info{};
        const auto limit = steady_clock::now() + milliseconds(10000);
        do {  // wait until the pieces are posted (the rendezvous one waits for the receiver)
          PACT_OK_OR_FAIL(pact_progress(s.engine, 1));
          PACT_OK_OR_FAIL(pact_xfer_query(s.engine, x, &info));
        } while (info.state != PACT_STATE_IN_FLIGHT && steady_clock::now() < limit);
        EXPECT_EQ(info.state, PACT_STATE_IN_FLIGHT);
        s.note(2);
        ASSERT_TRUE(s.awaitProgressing(3));
        info = s.waitFinal(x, 10000);
        EXPECT_EQ(info.state, PACT_STATE_ABORTED);
        EXPECT_EQ(info.result, PACT_ERR_EPOCH_MISMATCH);
        s.note(4);
      });
}

// ---- deadlines ---------------------------------------------------------------------------------

TEST(Engine, DeadlinesEndTransfersWithinABound) {
  runPair(
      {},
      [&](Side& r) {
        // Nobody sends this one.
        const auto t0 = steady_clock::now();
        pact_xfer_t x = expectInto(r, key(300), {4096}, 0, 200000);
        pact_xfer_info_t info = r.waitFinal(x, 5000);
        const auto took = std::chrono::duration_cast<milliseconds>(steady_clock::now() - t0);
        EXPECT_EQ(info.result, PACT_ERR_DEADLINE);
        EXPECT_EQ(info.state, PACT_STATE_ABORTED);
        EXPECT_GE(took.count(), 190);
        EXPECT_LE(took.count(), 200 + 300);
        r.note(1);
        EXPECT_TRUE(r.await(2));
      },
      [&](Side& s) {
        // Nobody expects this one.
        const auto t0 = steady_clock::now();
        pact_xfer_t x = sendPattern(s, key(301), {4096}, 0, 150000);
        pact_xfer_info_t info = s.waitFinal(x, 5000);
        const auto took = std::chrono::duration_cast<milliseconds>(steady_clock::now() - t0);
        EXPECT_EQ(info.result, PACT_ERR_DEADLINE);
        EXPECT_LE(took.count(), 150 + 300);
        EXPECT_TRUE(s.await(1));
        s.note(2);
      });
}

// ---- peer death --------------------------------------------------------------------------------

// The sender drops every piece (so the transfer stays in flight) and is SIGKILLed: the receiver's
// transfer ends PEER_LOST within its deadline plus a small bound, and the receiver keeps working.
TEST(Engine, SenderKilledMidTransferAbortsTheReceiversTransfer) {
  PairOptions o;
  o.senderEnv = {{"PACT_FAULT", "drop=1"}};
  runPair(
      o,
      [&](Side& r) {
        pact_xfer_t x = expectInto(r, key(400), {1 << 20}, 0, 30000000);
        pact_xfer_info_t info{};
        const auto limit = steady_clock::now() + milliseconds(10000);
        do {
          std::this_thread::yield();
          PACT_OK_OR_FAIL(pact_xfer_query(r.engine, x, &info));
        } while (info.state == PACT_STATE_ALLOCATED && steady_clock::now() < limit);
        ASSERT_TRUE(r.parent->sendValue(uint32_t{1}));  // kill the sender now
        const auto t0 = steady_clock::now();
        info = r.waitFinal(x, 10000);
        const auto took = std::chrono::duration_cast<milliseconds>(steady_clock::now() - t0);
        EXPECT_EQ(info.state, PACT_STATE_ABORTED);
        EXPECT_EQ(info.result, PACT_ERR_PEER_LOST);
        EXPECT_LE(took.count(), 2000);
        std::printf("[   INFO   ] SIGKILLed sender: receiver's transfer PEER_LOST after %lld ms\n",
                    static_cast<long long>(took.count()));
        pact_key_t k = key(401);
        pact_block_t b{r.mr, 0, 10};
        pact_xfer_t y = 0;
        EXPECT_EQ(pact_send(r.engine, r.peer, &k, &b, 1, 0, nullptr, &y), PACT_ERR_PEER_LOST);
      },
      [&](Side& s) {
        sendPattern(s, key(400), {1 << 20}, 0);
        std::this_thread::sleep_for(std::chrono::seconds(60));  // killed long before
      },
      [&](Children& c) { killOnNote(c.toReceiver, c.sender, c.receiver); });
}

// Rank restart: the sender is SIGKILLed mid-transfer and a new process of the same name comes
// back on a new model epoch. The old transfer fails cleanly (PEER_LOST), the receiver moves to the
// new epoch, and the new connection's transfer commits byte-exact.
TEST(Engine, AKilledSenderRestartsOnANewEpochAndItsNewTransferCommits) {
  auto [pr, cr] = Channel::pair();
  auto [p1, c1] = Channel::pair();
  auto [p2, c2] = Channel::pair();
  ForkPeer receiver = ForkPeer::start(
      "receiver",
      [&] {
        Side r;
        r.engine = makeEngine("receiver", "127.0.0.1");
        ASSERT_NE(r.engine, nullptr);
        Address a{};
        PACT_OK_OR_FAIL(pact_engine_address(r.engine, a.text, sizeof a.text));
        ASSERT_TRUE(cr.sendValue(a));
        r.memory.assign(4 << 20, 0);
        PACT_OK_OR_FAIL(pact_mem_register(r.engine, r.memory.data(), r.memory.size(), &r.mr));
        CheckingHook& hook = r.checkCommits();
        pact_xfer_t old = expectInto(r, key(1, 0), {1 << 20}, 0);
        pact_xfer_info_t info{};
        do {
          PACT_OK_OR_FAIL(pact_xfer_query(r.engine, old, &info));
        } while (info.state == PACT_STATE_ALLOCATED);
        ASSERT_TRUE(cr.sendValue(uint32_t{1}));  // in flight: kill the sender
        info = r.waitFinal(old, 10000);
        EXPECT_EQ(info.result, PACT_ERR_PEER_LOST);
        PACT_OK_OR_FAIL(pact_set_epoch(r.engine, 1));
        ASSERT_TRUE(cr.sendValue(uint32_t{2}));  // ready for the restarted sender
        pact_xfer_t fresh = expectInto(r, key(2, 1), {1 << 20}, 1 << 20);
        EXPECT_EQ(r.waitFinal(fresh, 20000).result, PACT_OK);
        EXPECT_EQ(hook.calls, 1);
        EXPECT_EQ(hook.bad, 0);
        uint32_t bye = 0;
        EXPECT_TRUE(cr.recvValue(&bye, milliseconds(20000)));
      },
      {milliseconds(60000), {&pr, &p1, &c1, &p2, &c2}});
  const auto senderBody = [](Channel& parent, uint64_t epoch, const char* fault) {
    ScopedEnv env;
    if (fault != nullptr) env.set("PACT_FAULT", fault);
    Side s;
    s.engine = makeEngine("sender", nullptr);
    ASSERT_NE(s.engine, nullptr);
    Address a{};
    ASSERT_TRUE(parent.recvValue(&a, milliseconds(20000)));
    PACT_OK_OR_FAIL(pact_connect(s.engine, a.text, 20000, &s.peer));
    s.memory.assign(2 << 20, 0);
    PACT_OK_OR_FAIL(pact_mem_register(s.engine, s.memory.data(), s.memory.size(), &s.mr));
    pact_xfer_t x = sendPattern(s, key(epoch + 1, epoch), {1 << 20}, 0);
    EXPECT_EQ(s.waitFinal(x, 20000).result, PACT_OK);
    ASSERT_TRUE(parent.sendValue(uint32_t{3}));
    uint32_t bye = 0;
    EXPECT_TRUE(parent.recvValue(&bye, milliseconds(20000)));
  };
  cr.close();
  Address a{};
  ASSERT_TRUE(pr.recvValue(&a, milliseconds(20000)));
  ForkPeer first = ForkPeer::start("sender#1", [&] { senderBody(c1, 0, "drop=1"); },
                                   {milliseconds(60000), {&pr, &p1, &p2, &c2}});
  c1.close();
  ASSERT_TRUE(p1.sendValue(a));
  uint32_t note = 0;
  ASSERT_TRUE(pr.recvValue(&note, milliseconds(20000)));
  first.kill(SIGKILL);
  first.wait(milliseconds(5000));
  EXPECT_TRUE(first.outcome().killedBy(SIGKILL)) << first.outcome().describe();
  ASSERT_TRUE(pr.recvValue(&note, milliseconds(20000)));
  ForkPeer second = ForkPeer::start("sender#2", [&] { senderBody(c2, 1, nullptr); },
                                    {milliseconds(60000), {&pr, &p1, &p2}});
  c2.close();
  ASSERT_TRUE(p2.sendValue(a));
  ASSERT_TRUE(p2.recvValue(&note, milliseconds(30000)));
  pr.sendValue(uint32_t{9});
  p2.sendValue(uint32_t{9});
  waitAll({&receiver, &second}, milliseconds(20000));
  EXPECT_TRUE(receiver.outcome().ok()) << receiver.outcome().describe();
  EXPECT_TRUE(second.outcome().ok()) << second.outcome().describe();
}

TEST(Engine, ReceiverKilledMidTransferAbortsTheSendersTransfer) {
  runPair(
      {},
      [&](Side& r) {
        expectInto(r, key(500), {1 << 20}, 0);  // never progressed to completion: killed
        r.note(1);
        std::this_thread::sleep_for(std::chrono::seconds(60));
      },
      [&](Side& s) {
        pact_xfer_t x = sendPattern(s, key(500), {1 << 20}, 0);
        ASSERT_TRUE(s.await(1));
        ASSERT_TRUE(s.parent->sendValue(uint32_t{1}));
        const pact_xfer_info_t info = s.waitFinal(x, 10000);
        // Committed if it was fast enough, else lost with the peer: never a hang.
        EXPECT_TRUE(info.result == PACT_OK || info.result == PACT_ERR_PEER_LOST)
            << pact_status_string(info.result);
      },
      [&](Children& c) { killOnNote(c.toSender, c.receiver, c.sender); });
}

// ---- credits -----------------------------------------------------------------------------------

TEST(Engine, CreditBudgetIsNeverExceededUnderABurst) {
  PairOptions o;
  o.creditBudget = 1 << 20;
  constexpr int kTransfers = 40;
  constexpr uint64_t kSize = 256 << 10;
  runPair(
      o,
      [&](Side& r) {
        CheckingHook& hook = r.checkCommits();
        std::vector<pact_xfer_t> xs;
        for (int i = 0; i < kTransfers; ++i)
          xs.push_back(expectInto(r, key(600 + i), {kSize}, static_cast<uint64_t>(i) * kSize));
        for (pact_xfer_t x : xs) EXPECT_EQ(r.waitFinal(x).result, PACT_OK);
        const pact_stats_t st = r.stats();
        EXPECT_EQ(hook.calls, kTransfers);
        EXPECT_EQ(hook.bad, 0);
        EXPECT_LE(st.peak_staged_bytes, uint64_t{1} << 20);
        EXPECT_GT(st.peak_staged_bytes, 0u);
        EXPECT_GT(st.credit_stall_ns, 0u);  // the burst had to wait for credit
        EXPECT_EQ(st.staged_bytes, 0u);
        EXPECT_EQ(st.credit_budget, uint64_t{1} << 20) << "the budget the engine was given";
        EXPECT_GE(st.bytes_received, kTransfers * kSize);
        r.note(1);
      },
      [&](Side& s) {
        std::vector<pact_xfer_t> xs;
        for (int i = 0; i < kTransfers; ++i)
          xs.push_back(sendPattern(s, key(600 + i), {kSize}, static_cast<uint64_t>(i) * kSize));
        // Sample the sender's view while the burst drains: never above the granted budget.
        uint64_t peak = 0, budget = 0, inUse = 0;
        pact_xfer_info_t info{};
        do {
          PACT_OK_OR_FAIL(pact_peer_credit(s.engine, s.peer, &budget, &inUse));
          peak = std::max(peak, inUse);
          PACT_OK_OR_FAIL(pact_xfer_query(s.engine, xs.back(), &info));
        } while (!info.final);
        EXPECT_EQ(budget, uint64_t{1} << 20);
        EXPECT_LE(peak, budget);
        for (pact_xfer_t x : xs) EXPECT_EQ(s.waitFinal(x).result, PACT_OK);
        EXPECT_TRUE(s.await(1));
      });
}

// ---- all-to-all --------------------------------------------------------------------------------

// Three ranks in three processes, every rank connected to every rank (itself included). Two
// steps commit with byte-exact chunks; during step 2 rank 0 injects a chunk of step 1 for rank 1,
// which rank 1 rejects as stale (counted) while step 2 still commits.
TEST(Engine, AllToAllStepsCommitAndAStaleChunkIsRejected) {
  constexpr int kRanks = 3;
  constexpr uint64_t kChunk = 300000;  // eager and rendezvous sizes mixed by UCX's thresholds
  constexpr uint64_t kGroup = 42;
  std::vector<std::pair<Channel, Channel>> links;
  for (int r = 0; r < kRanks; ++r) links.push_back(Channel::pair());
  const auto seedOf = [](uint32_t gen, uint32_t src, uint32_t dst) {
    return uint64_t{gen} << 16 | src << 8 | dst;
  };
  std::vector<ForkPeer> ranks;
  for (uint32_t me = 0; me < kRanks; ++me) {
    std::vector<Channel*> others;
    for (int r = 0; r < kRanks; ++r) {
      others.push_back(&links[r].first);
      if (r != static_cast<int>(me)) others.push_back(&links[r].second);
    }
    ranks.push_back(ForkPeer::start(
        "rank" + std::to_string(me),
        [&, me] {
          Channel& parent = links[me].second;
          const Rank rank = connectRank("rank" + std::to_string(me), parent, kRanks);
          ASSERT_EQ(rank.peers.size(), size_t{kRanks});
          pact_engine_t e = rank.engine;
          std::vector<pact_peer_t> peers = rank.peers;
          std::vector<uint8_t> sendBuf(kRanks * kChunk), recvBuf(kRanks * kChunk);
          pact_mr_t smr = nullptr, rmr = nullptr;
          PACT_OK_OR_FAIL(pact_mem_register(e, sendBuf.data(), sendBuf.size(), &smr));
          PACT_OK_OR_FAIL(pact_mem_register(e, recvBuf.data(), recvBuf.size(), &rmr));
          pact_group_t g = nullptr;
          PACT_OK_OR_FAIL(pact_group_create(e, kGroup, peers.data(), kRanks, me, &g));
          std::vector<pact_block_t> sendBlocks, recvBlocks;
          for (uint64_t r = 0; r < kRanks; ++r) {
            sendBlocks.push_back({smr, r * kChunk, kChunk});
            recvBlocks.push_back({rmr, r * kChunk, kChunk});
          }
          for (uint32_t gen = 1; gen <= 2; ++gen) {
            for (uint32_t r = 0; r < kRanks; ++r)
              fillPattern(sendBuf.data() + r * kChunk, kChunk, seedOf(gen, me, r));
            std::fill(recvBuf.begin(), recvBuf.end(), 0);
            PACT_OK_OR_FAIL(pact_group_step(g, 0, gen, sendBlocks.data(), recvBlocks.data(), 10000000));
            if (gen == 2) {
              // Barrier: every rank expects step 2 before rank 0 sends its stale chunk.
              ASSERT_TRUE(parent.sendValue(uint32_t{1}));
              uint32_t go = 0;
              ASSERT_TRUE(parent.recvValue(&go, milliseconds(20000)));
              if (me == 0) {
                pact_key_t stale{kGroup, uint64_t{0} << 32 | 1, 0, 1};
                pact_block_t b{smr, 0, kChunk};
                pact_xfer_t x = 0;
                PACT_OK_OR_FAIL(pact_send(e, peers[1], &stale, &b, 1, 5000000, nullptr, &x));
                pact_xfer_info_t info{};
                PACT_OK_OR_FAIL(pact_xfer_wait(e, x, 10000, &info));
                EXPECT_EQ(info.result, PACT_ERR_STALE);
                PACT_OK_OR_FAIL(pact_xfer_release(e, x));
              }
            }
            PACT_OK_OR_FAIL(pact_group_wait(g, 20000));
            for (uint32_t r = 0; r < kRanks; ++r)
              EXPECT_EQ(firstMismatch(recvBuf.data() + r * kChunk, kChunk, seedOf(gen, r, me)), -1)
                  << "step " << gen << " chunk from rank " << r;
          }
          pact_group_destroy(g);
          // Everyone is done before anyone's engine goes (peers would see the others leave), and
          // rank 0 has its stale verdict, so rank 1 has counted the stale chunk.
          ASSERT_TRUE(parent.sendValue(uint32_t{2}));
          uint32_t bye = 0;
          ASSERT_TRUE(parent.recvValue(&bye, milliseconds(20000)));
          pact_stats_t st{};
          PACT_OK_OR_FAIL(pact_stats(e, &st));
          if (me == 1) {
            EXPECT_GE(st.stale_rejected, 1u);
          }
          EXPECT_EQ(st.open_transfers, 0u);
          PACT_OK_OR_FAIL(pact_mem_deregister(e, smr));
          PACT_OK_OR_FAIL(pact_mem_deregister(e, rmr));
          pact_engine_destroy(e);
        },
        {milliseconds(60000), others}));
  }
  for (auto& l : links) l.second.close();
  // Parent: relay the addresses, then two barriers.
  std::vector<Address> addrs(kRanks);
  for (int r = 0; r < kRanks; ++r) ASSERT_TRUE(links[r].first.recvValue(&addrs[r], milliseconds(20000)));
  for (int r = 0; r < kRanks; ++r)
    for (int k = 0; k < kRanks; ++k) ASSERT_TRUE(links[r].first.sendValue(addrs[k]));
  for (uint32_t round = 1; round <= 2; ++round) {
    for (int r = 0; r < kRanks; ++r) {
      uint32_t v = 0;
      ASSERT_TRUE(links[r].first.recvValue(&v, milliseconds(30000))) << "rank " << r << " round " << round;
      EXPECT_EQ(v, round);
    }
    for (int r = 0; r < kRanks; ++r) ASSERT_TRUE(links[r].first.sendValue(round));
  }
  for (auto& rank : ranks) {
    rank.wait(milliseconds(30000));
    EXPECT_TRUE(rank.outcome().ok()) << rank.name() << " " << rank.outcome().describe();
  }
}

}  // namespace
}  // namespace pact::test
