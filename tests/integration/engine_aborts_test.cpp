// Every abort by either application reaches the other side at once, with a status that says
// what happened (docs/engine.md, "Aborts"): a receiver's release is PACT_ERR_CANCELED at the
// sender whatever the stage (before the offer, waiting for credit, bytes moving); a sender's
// release before its Done left is PACT_ERR_CANCELED at the receiver, which never commits it; a
// release after the Done left cannot un-commit. The connection carries new transfers afterwards.
// An engine destroyed mid-transfer is PACT_ERR_PEER_LOST on the other side.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include "telemetry/counters.h"
#include "tests/integration/engine_pair.h"

namespace pact::engine {
namespace {

using test::fillPattern;
using test::firstMismatch;
using test::released;
using test::succeeded;
using test::take;
using test::Pair;

constexpr auto kBound = std::chrono::milliseconds(2000);  // "at once", with CI's noise

TransferKey keyOf(uint64_t request) { return TransferKey{request, 7, 0, 0}; }

// Waits for a final state; the elapsed time in *ms.
XferInfo waitFinal(Engine& e, uint64_t id, int64_t* ms = nullptr) {
  const auto t0 = std::chrono::steady_clock::now();
  XferInfo info;
  EXPECT_TRUE(succeeded(e.wait(id, 20000, &info)));
  if (ms != nullptr)
    *ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  return info;
}

// Spins (without sleeping) until pred() or 20 s.
template <typename Pred>
bool spinUntil(Pred pred) {
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!pred())
    if (std::chrono::steady_clock::now() > limit) return false;
  return true;
}

uint64_t sendWhole(Pair& p, uint64_t request, uint64_t bytes) {
  fillPattern(p.src.data(), bytes, request);
  const BlockRef from{p.srcMr, 0, bytes};
  uint64_t id = 0;
  EXPECT_TRUE(take(p.tx->send(p.peer, keyOf(request), std::span(&from, 1), 0, "KV"), &id));
  return id;
}

uint64_t expectWhole(Pair& p, uint64_t request, uint64_t bytes) {
  const BlockRef to{p.dstMr, 0, bytes};
  uint64_t id = 0;
  EXPECT_TRUE(take(p.rx->expect(keyOf(request), std::span(&to, 1), 0, "KV"), &id));
  return id;
}

// The pair still moves a transfer byte-exact after an abort.
void expectStillWorks(Pair& p, uint64_t request) {
  EXPECT_EQ(p.move("KV", request, 0, 1 << 20), std::make_pair(Status::kOk, Status::kOk));
}

TEST(EngineAborts, ReceiverReleaseBeforeTheOfferIsCanceledAtTheSender) {
  Pair p({}, {}, 1 << 20);
  ASSERT_TRUE(p.rx && p.tx);
  const uint64_t rx = expectWhole(p, 1, 1 << 20);
  EXPECT_EQ(released(p.rx->release(rx)), Status::kOk);
  const uint64_t tx = sendWhole(p, 1, 1 << 20);  // no deadline: only the receiver can end it
  int64_t ms = 0;
  EXPECT_EQ(waitFinal(*p.tx, tx, &ms).result, Status::kCanceled);
  EXPECT_LT(ms, kBound.count());
  p.tx->release(tx).ignore();
  expectStillWorks(p, 2);
}

// The class counters ("engine class KV", shared by the process's engines) see the same: the
// canceled transfers as errors of kind canceled, the working transfer after them as one message
// each way with its bytes.
TEST(EngineAborts, TheClassCountsTheCanceledTransfersByKindAndTheNextOneByBytes) {
  using namespace telemetry;
  CounterSet& kv = classCounters("engine", "KV");
  const auto before = kv.values();
  const uint64_t defaultSent = classCounters("engine", "DEFAULT").get(kClassMessagesSent);
  auto delta = [&](size_t i) { return kv.get(i) - before[i]; };
  Pair p({}, {}, 1 << 20);
  ASSERT_TRUE(p.rx && p.tx);
  const uint64_t rx = expectWhole(p, 1, 1 << 20);
  EXPECT_EQ(released(p.rx->release(rx)), Status::kOk);
  const uint64_t tx = sendWhole(p, 1, 1 << 20);
  EXPECT_EQ(waitFinal(*p.tx, tx).result, Status::kCanceled);
  p.tx->release(tx).ignore();
  EXPECT_GE(delta(classError(ErrorKind::kCanceled)), 1u) << "the sender's transfer, canceled by the receiver";
  const uint64_t canceled = delta(classError(ErrorKind::kCanceled));
  expectStillWorks(p, 2);
  EXPECT_EQ(delta(kClassMessagesSent), 1u);
  EXPECT_EQ(delta(kClassMessagesReceived), 1u);
  EXPECT_EQ(delta(kClassBytesSent), 1u << 20);
  EXPECT_EQ(delta(kClassBytesReceived), 1u << 20);
  EXPECT_EQ(delta(classError(ErrorKind::kCanceled)), canceled) << "the working transfer is no error";
  for (size_t k = 0; k < kErrorKinds; ++k) {
    if (k != static_cast<size_t>(ErrorKind::kCanceled)) {
      EXPECT_EQ(delta(kClassErrors + k), 0u) << errorKindName(static_cast<ErrorKind>(k));
    }
  }
  EXPECT_EQ(classCounters("engine", "DEFAULT").get(kClassMessagesSent), defaultSent) << "KV traffic counted on DEFAULT";
}

// A transfer matched but waiting for credit (the receiver grants nothing); one side releases it:
// the other side's transfer ends CANCELED at once, and the pair works on afterwards.
void releaseWhileWaitingForCredit(bool receiverReleases) {
  Pair p({}, {}, 1 << 20);
  ASSERT_TRUE(p.rx && p.tx);
  ASSERT_TRUE(succeeded(p.rx->setCredit(0, 0)));  // grants nothing: the offer waits for credit
  const uint64_t rx = expectWhole(p, 1, 1 << 20);
  const uint64_t tx = sendWhole(p, 1, 1 << 20);
  ASSERT_TRUE(spinUntil([&] {  // the offer matched: the receiver knows its peer
    XferInfo i;
    return take(p.rx->query(rx), &i) && i.peer != 0;
  }));
  Engine& releaser = receiverReleases ? *p.rx : *p.tx;
  Engine& other = receiverReleases ? *p.tx : *p.rx;
  EXPECT_EQ(released(releaser.release(receiverReleases ? rx : tx)), Status::kOk);
  int64_t ms = 0;
  EXPECT_EQ(waitFinal(other, receiverReleases ? tx : rx, &ms).result, Status::kCanceled);
  EXPECT_LT(ms, kBound.count());
  other.release(receiverReleases ? tx : rx).ignore();
  ASSERT_TRUE(succeeded(p.rx->setCredit(0, kUnlimited)));
  expectStillWorks(p, 2);
}

TEST(EngineAborts, ReceiverReleaseWhileWaitingForCreditIsCanceledAtTheSender) {
  releaseWhileWaitingForCredit(true);
}

// A transfer of this size from p.tx to p.rx (request 1), returned once its first bytes landed:
// {receiver's id, sender's id}, or {0, 0} (a failure recorded) when none landed.
constexpr uint64_t kMoving = 256ull << 20;
std::pair<uint64_t, uint64_t> startMoving(Pair& p) {
  const uint64_t rx = expectWhole(p, 1, kMoving);
  const uint64_t tx = sendWhole(p, 1, kMoving);
  if (!spinUntil([&] { return p.rx->stats()[telemetry::kBytesReceived] > 0; })) {
    ADD_FAILURE() << "no byte landed within 20 s";
    return {0, 0};
  }
  return {rx, tx};
}

TEST(EngineAborts, ReceiverReleaseWhileBytesMoveIsCanceledAtTheSenderNotPeerLost) {
  Pair p({}, {}, kMoving);
  ASSERT_TRUE(p.rx && p.tx);
  const auto [rx, tx] = startMoving(p);
  ASSERT_NE(rx, 0u);
  const Status gone = released(p.rx->release(rx));
  EXPECT_TRUE(gone == Status::kOk || gone == Status::kInProgress);
  int64_t ms = 0;
  const XferInfo sent = waitFinal(*p.tx, tx, &ms);
  // The receiver may have had every byte before the release was seen: then it committed first.
  EXPECT_TRUE(sent.result == Status::kCanceled || sent.result == Status::kOk) << statusName(sent.result);
  EXPECT_NE(sent.result, Status::kRemoteError);
  EXPECT_LT(ms, kBound.count());
  p.tx->release(tx).ignore();
  expectStillWorks(p, 2);
}

TEST(EngineAborts, SenderReleaseBeforeItsDoneIsCanceledAtTheReceiver) {
  releaseWhileWaitingForCredit(false);  // before an advertisement, so before any Done
}

// pact_engine_destroy keeps pact.h's promise: the other side's transfer ends PACT_ERR_PEER_LOST
// (kRemoteError), at once, never CANCELED (no application released it). Either side destroyed
// while 256 MiB move; the one that goes on still carries nothing open. When the sender's Done
// had left before the destroy (UCX 1.22 moves the 256 MiB over shared memory in a few ms), the
// receiver commits on it, byte-exact, as after a release: a destroy cannot un-commit.
void destroyMidTransfer(bool sender) {
  Pair p({}, {}, kMoving);
  ASSERT_TRUE(p.rx && p.tx);
  const auto [rx, tx] = startMoving(p);
  ASSERT_NE(rx, 0u);
  std::unique_ptr<Engine>& gone = sender ? p.tx : p.rx;
  std::unique_ptr<Engine>& left = sender ? p.rx : p.tx;
  gone.reset();
  int64_t ms = 0;
  const XferInfo info = waitFinal(*left, sender ? rx : tx, &ms);
  EXPECT_TRUE(info.result == Status::kRemoteError || info.result == Status::kOk)
      << (sender ? "receiver" : "sender") << " saw " << statusName(info.result);
  std::printf("[   INFO   ] the %s saw %s after %lld ms\n", sender ? "receiver" : "sender", statusName(info.result),
              static_cast<long long>(ms));
  if (info.result == Status::kOk && sender) {
    EXPECT_EQ(firstMismatch(p.dst.data(), kMoving, 1), -1);
  }
  EXPECT_LT(ms, kBound.count());
  left->release(sender ? rx : tx).ignore();
  EXPECT_EQ(left->stats()[telemetry::kOpenTransfers], 0u);
}

TEST(EngineAborts, ASenderDestroyedMidTransferIsPeerLostAtTheReceiver) { destroyMidTransfer(true); }

TEST(EngineAborts, AReceiverDestroyedMidTransferIsPeerLostAtTheSender) { destroyMidTransfer(false); }

// The race of a sender's release with its own transfer, at 40 points from "just sent" to "long
// done": the receiver either commits byte-exact (the Done had left: the release cannot un-commit
// it, and the sender's release waits for the verdict) or ends CANCELED; never anything else,
// never open; nothing is left open on either side.
TEST(EngineAborts, SenderReleaseRacingItsTransferNeverHalfCommits) {
  constexpr uint64_t kBytes = 8ull << 20;
  constexpr int kRounds = 40;
  Pair p({}, {}, kBytes);
  ASSERT_TRUE(p.rx && p.tx);
  int committed = 0, canceled = 0;
  for (int i = 0; i < kRounds; ++i) {
    const uint64_t request = 100 + static_cast<uint64_t>(i);
    std::memset(p.dst.data(), 0, kBytes);
    const uint64_t sentBefore = p.tx->stats()[telemetry::kBytesSent];
    const uint64_t rx = expectWhole(p, request, kBytes);
    const uint64_t tx = sendWhole(p, request, kBytes);
    // Race point i: after i/(kRounds-2) of the bytes were handed to UCX (the last round: after
    // the transfer is final).
    const uint64_t at = kBytes * static_cast<uint64_t>(i) / (kRounds - 2);
    if (i == kRounds - 1) {
      XferInfo done;
      ASSERT_TRUE(succeeded(p.tx->wait(tx, 20000, &done)));
    } else {
      ASSERT_TRUE(spinUntil([&] { return p.tx->stats()[telemetry::kBytesSent] - sentBefore >= std::min(at, kBytes); }));
    }
    const Status gone = released(p.tx->release(tx));
    ASSERT_TRUE(gone == Status::kOk || gone == Status::kInProgress) << statusName(gone);
    const XferInfo got = waitFinal(*p.rx, rx);
    ASSERT_TRUE(got.final);
    if (got.result == Status::kOk) {
      ++committed;
      EXPECT_EQ(firstMismatch(p.dst.data(), kBytes, request), -1) << "round " << i;
    } else {
      ++canceled;
      EXPECT_EQ(got.result, Status::kCanceled) << "round " << i << ": " << statusName(got.result);
    }
    p.rx->release(rx).ignore();
    ASSERT_TRUE(spinUntil([&] { return p.tx->stats()[telemetry::kOpenTransfers] == 0 && p.rx->stats()[telemetry::kOpenTransfers] == 0; }))
        << "round " << i << ": a transfer stayed open";
  }
  std::printf("[   INFO   ] %d rounds: %d committed, %d canceled\n", kRounds, committed, canceled);
  EXPECT_GT(committed, 0);
  EXPECT_GT(canceled, 0);
}

}  // namespace
}  // namespace pact::engine
