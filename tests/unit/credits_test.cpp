// Receiver credit accounting: staged bytes never exceed the total or a sender's share.
#include "engine/credits.h"

#include <gtest/gtest.h>

namespace pact::engine {
namespace {

TEST(Credits, UnlimitedAndZero) {
  CreditLedger c(kUnlimited);
  EXPECT_TRUE(c.fits(1, UINT64_MAX));
  c.take(1, 1 << 30);
  EXPECT_TRUE(c.fits(2, 1 << 30));
  EXPECT_EQ(c.grantFor(1), kUnlimited);
  CreditLedger none(0);  // grants nothing
  EXPECT_FALSE(none.fits(1, 1));
  EXPECT_TRUE(none.fits(1, 0));
}

TEST(Credits, TotalBudgetBoundsStagedBytes) {
  CreditLedger c(1000);
  EXPECT_FALSE(c.fits(1, 1001));
  ASSERT_TRUE(c.fits(1, 600));
  c.take(1, 600);
  EXPECT_TRUE(c.fits(2, 400));
  EXPECT_FALSE(c.fits(2, 401));
  c.take(2, 400);
  EXPECT_EQ(c.staged(), 1000u);
  EXPECT_FALSE(c.fits(3, 1));
  c.give(1, 600);
  EXPECT_EQ(c.staged(), 400u);
  EXPECT_EQ(c.staged(1), 0u);
  EXPECT_EQ(c.staged(2), 400u);
  EXPECT_EQ(c.peak(), 1000u);
  EXPECT_TRUE(c.fits(3, 600));
}

TEST(Credits, PerSenderShareBoundsThatSender) {
  CreditLedger c(1000);
  c.setShare(7, 300);
  EXPECT_EQ(c.grantFor(7), 300u);
  EXPECT_EQ(c.grantFor(8), 1000u);
  EXPECT_FALSE(c.fits(7, 301));
  c.take(7, 300);
  EXPECT_FALSE(c.fits(7, 1));
  EXPECT_TRUE(c.fits(8, 700));
  c.setShare(7, kUnlimited);  // no per-sender limit any more: only the total
  EXPECT_TRUE(c.fits(7, 700));
}

TEST(Credits, LoweringTheBudgetNeverTakesBackWhatIsStaged) {
  CreditLedger c(1000);
  c.take(1, 800);
  c.setTotal(500);
  EXPECT_EQ(c.staged(), 800u);
  EXPECT_FALSE(c.fits(1, 1));  // staged is above the new budget: nothing more fits
  c.give(1, 800);
  EXPECT_TRUE(c.fits(1, 500));
  EXPECT_FALSE(c.fits(1, 501));
}

TEST(Credits, GivingBackMoreThanStagedClampsAtZero) {
  CreditLedger c(100);
  c.take(1, 50);
  c.give(1, 80);
  c.give(9, 10);  // unknown sender
  EXPECT_EQ(c.staged(), 0u);
  EXPECT_EQ(c.staged(1), 0u);
  c.forget(1);
  EXPECT_EQ(c.staged(1), 0u);
}

}  // namespace
}  // namespace pact::engine
