// The class contract's pieces that need no UCX: the NCCL face's send credits, the receiver's
// decision of a comm's contract, the drain blocks of the tag layout and the message check.
#include <gtest/gtest.h>

#include "common/checksum.h"
#include "net/contract.h"
#include "net/credits.h"
#include "net/tags.h"

namespace pact::net {
namespace {

constexpr uint64_t kKiB = 1024;

TEST(SendCredits, AdmitsWithinTheBudgetAndBeyondItNothing) {
  SendCredits c(256 * kKiB);
  int a = 0, b = 0;
  EXPECT_TRUE(c.tryTake(&a, 128 * kKiB));
  EXPECT_TRUE(c.tryTake(&b, 128 * kKiB));
  EXPECT_FALSE(c.tryTake(&a, 1));  // full: a waits
  EXPECT_EQ(c.inFlight(), 256 * kKiB);
  c.give(64 * kKiB);
  EXPECT_FALSE(c.tryTake(&b, 64 * kKiB)) << "b went before the waiter a";
  EXPECT_TRUE(c.tryTake(&a, 64 * kKiB));  // a's turn
  EXPECT_EQ(c.peak(), 256 * kKiB);
  EXPECT_EQ(c.refusals(), 2u);
}

TEST(SendCredits, AMessageLargerThanTheBudgetGoesAlone) {
  SendCredits c(256 * kKiB);
  int big = 0, small = 0;
  EXPECT_TRUE(c.tryTake(&small, 64 * kKiB));
  EXPECT_FALSE(c.tryTake(&big, kKiB * kKiB));      // waits for the class to drain
  EXPECT_FALSE(c.tryTake(&small, 64 * kKiB));      // nobody overtakes the waiter
  c.give(64 * kKiB);
  EXPECT_TRUE(c.tryTake(&big, kKiB * kKiB));       // nothing else in flight: it goes
  EXPECT_EQ(c.peak(), kKiB * kKiB);
  EXPECT_FALSE(c.tryTake(&small, 64 * kKiB));
  c.give(kKiB * kKiB);
  EXPECT_TRUE(c.tryTake(&small, 64 * kKiB));
}

TEST(SendCredits, AClosedWaiterHoldsNobodyUp) {
  SendCredits c(64 * kKiB);
  int gone = 0, other = 0;
  EXPECT_TRUE(c.tryTake(&other, 64 * kKiB));
  EXPECT_FALSE(c.tryTake(&gone, 64 * kKiB));
  c.give(64 * kKiB);
  c.forget(&gone);
  EXPECT_TRUE(c.tryTake(&other, 64 * kKiB));
}

// A budget never deadlocks: a waiter that stops asking stops holding the others up, and bytes that
// do not move for kStuck let a message go over the budget (an overdraft).
TEST(SendCredits, AWaiterThatStopsAskingAndStuckBytesHoldNobodyForEver) {
  const TimePoint t0 = now();
  SendCredits c(128 * kKiB);
  int a = 0, b = 0;
  EXPECT_TRUE(c.tryTake(&a, 128 * kKiB, t0));
  EXPECT_FALSE(c.tryTake(&b, 64 * kKiB, t0));  // b waits
  c.give(64 * kKiB);
  EXPECT_FALSE(c.tryTake(&a, 64 * kKiB, t0 + std::chrono::microseconds(500))) << "b is still asking";
  EXPECT_TRUE(c.tryTake(&a, 64 * kKiB, t0 + std::chrono::milliseconds(2))) << "b stopped asking 2 ms ago";
  // Full, and nothing completes: after kStuck the next message goes over the budget.
  const TimePoint later = now() + SendCredits::kStuck + std::chrono::milliseconds(1);
  EXPECT_FALSE(c.tryTake(&b, 64 * kKiB, now()));
  EXPECT_TRUE(c.tryTake(&b, 64 * kKiB, later));
  EXPECT_EQ(c.overdrafts(), 1u);
  EXPECT_EQ(c.inFlight(), 192 * kKiB);
}

TEST(CreditBook, OneBudgetPerClassAndPeerWhileHeld) {
  CreditBook book;
  auto a = book.budgetFor("1", 7, 1024);
  EXPECT_EQ(book.budgetFor("1", 7, 1024), a);
  EXPECT_NE(book.budgetFor("2", 7, 1024), a);
  EXPECT_NE(book.budgetFor("1", 8, 1024), a);
}

TEST(Contract, TheReceiverTakesTheStrongerOfBothClasses) {
  Profile mine;
  mine.verify = Verify::kXxh3;
  mine.timeout = std::chrono::milliseconds(300);
  mine.retries = 1;
  wire::Contract c = decideContract(wire::Contract{1, 3, 200000, 0}, mine, false);
  EXPECT_EQ(c.verify, 1u) << "the sender's kind when it asks one";
  EXPECT_EQ(c.retries, 3u);
  EXPECT_EQ(c.timeoutUs, 200000u) << "the shorter timeout";
  EXPECT_EQ(c.sealed, 1u);
  c = decideContract(wire::Contract{}, mine, false);
  EXPECT_EQ(c.verify, 2u) << "the receiver's when the sender asks none";
  EXPECT_EQ(c.timeoutUs, 300000u);
  c = decideContract(wire::Contract{}, Profile{}, false);
  EXPECT_EQ(c.sealed, 0u) << "nothing asked: no seals, the data path as it always was";
  c = decideContract(wire::Contract{}, Profile{}, true);
  EXPECT_EQ(c.sealed, 1u) << "a fencing receiver needs its senders' epochs";
  EXPECT_EQ(c.verify, 0u);
}

TEST(Contract, TheMessageCheckIsThePiecesOwnOrADigestOverThem) {
  std::vector<uint8_t> seal;
  wire::encodeSealHeader(1, false, 0, 10, 1, &seal);
  wire::setCheck(&seal, 0, 0xabcdef);
  EXPECT_EQ(messageCheck(*wire::decodeSeal(seal, 8)), 0xabcdefu);
  wire::encodeSealHeader(1, false, 0, 10, 2, &seal);
  wire::setCheck(&seal, 0, 1);
  wire::setCheck(&seal, 1, 2);
  Digest d(Verify::kCrc32c);
  d.update(seal.data() + wire::kSealHeader, 16);
  EXPECT_EQ(messageCheck(*wire::decodeSeal(seal, 8)), d.value());
  wire::encodeSealHeader(0, false, 0, 10, 2, &seal);
  EXPECT_EQ(messageCheck(*wire::decodeSeal(seal, 8)), 0u);
  EXPECT_EQ(messageName(1, 17, 3 << 20, 6), "message 17 of tag 1 (3145728 bytes in 6 pieces)");
}

// A drain block covers 64 sequence numbers of one tag of one tag space, every piece and the seal.
TEST(Tags, ADrainBlockMatchesItsSequenceNumbersAndNothingElse) {
  const uint32_t space = 0x12345;
  const uint64_t probe = tag::blockTag(space, 3, 5), mask = tag::blockMask();
  auto matches = [&](uint64_t t) { return (t & mask) == (probe & mask); };
  for (uint32_t seq : {320u, 350u, 383u})
    for (uint32_t piece : {0u, 7u, tag::kSealPiece})
      EXPECT_TRUE(matches(tag::make(space, 3, seq, piece, piece == 7))) << seq << " " << piece;
  EXPECT_FALSE(matches(tag::make(space, 3, 319, 0, false)));
  EXPECT_FALSE(matches(tag::make(space, 3, 384, 0, false)));
  EXPECT_FALSE(matches(tag::make(space, 4, 330, 0, false)));
  EXPECT_FALSE(matches(tag::make(space + 1, 3, 330, 0, false)));
}

// A tag space's probe (what a closing receive comm drops) covers all of its messages, whatever
// their tag, sequence number or piece, and no other space's, whatever its generation.
TEST(Tags, ATagSpaceMatchesAllOfItsMessagesAndNoOther) {
  const uint32_t space = 0x12345;
  const uint64_t probe = tag::spaceTag(space), mask = tag::spaceMask();
  auto matches = [&](uint64_t t) { return (t & mask) == (probe & mask); };
  for (int t : {0, 3, (1 << tag::kTagBits) - 1})
    for (uint32_t seq : {0u, 511u})
      for (uint32_t piece : {0u, tag::kSealPiece})
        EXPECT_TRUE(matches(tag::make(space, t, seq, piece, true))) << t << " " << seq << " " << piece;
  EXPECT_FALSE(matches(tag::make(space + 1, 3, 0, 0, false)));
  EXPECT_FALSE(matches(tag::make(space ^ (1u << tag::kIndexBits), 3, 0, 0, false)));  // another generation
}

}  // namespace
}  // namespace pact::net
