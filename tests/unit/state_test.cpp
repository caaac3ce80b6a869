// The engine's transition table, checked exhaustively: every (state, event) pair is either in the
// list of legal transitions below (with its target) or refused.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <utility>

#include "engine/state.h"

namespace pact::engine {
namespace {

using S = State;
using E = Event;

const std::map<std::pair<S, E>, S>& legal() {
  static const std::map<std::pair<S, E>, S> m = [] {
    std::map<std::pair<S, E>, S> t = {
        {{S::kAllocated, E::kAdvertise}, S::kAdvertised},
        {{S::kAllocated, E::kEager}, S::kAdvertised},
        {{S::kAdvertised, E::kPost}, S::kPosted},
        {{S::kPosted, E::kSend}, S::kInFlight},
        {{S::kInFlight, E::kRemoteDone}, S::kRemoteDone},
        {{S::kRemoteDone, E::kVerified}, S::kVerified},
        {{S::kVerified, E::kCommit}, S::kCommitted},
        {{S::kCommitted, E::kRelease}, S::kReleased},
        {{S::kPosted, E::kTimeout}, S::kRetrying},
        {{S::kInFlight, E::kTimeout}, S::kRetrying},
        {{S::kRemoteDone, E::kTimeout}, S::kRetrying},
        {{S::kPosted, E::kRetryableError}, S::kRetrying},
        {{S::kInFlight, E::kRetryableError}, S::kRetrying},
        {{S::kRemoteDone, E::kRetryableError}, S::kRetrying},
        {{S::kRemoteDone, E::kVerifyFailed}, S::kRetrying},
        {{S::kRetrying, E::kRetry}, S::kPosted},
        {{S::kVerified, E::kRejected}, S::kAborted},
        {{S::kAborted, E::kRelease}, S::kReleased},
    };
    for (S s : {S::kAllocated, S::kAdvertised, S::kPosted, S::kInFlight, S::kRemoteDone,
                S::kVerified, S::kRetrying})
      for (E e : {E::kEpochMismatch, E::kFatalError, E::kDeadline}) t[{s, e}] = S::kAborted;
    return t;
  }();
  return m;
}

TEST(StateMachine, EveryPairIsLegalExactlyAsListedOrRefused) {
  int legalCount = 0;
  for (int s = 0; s < kStateCount; ++s) {
    for (int e = 0; e < kEventCount; ++e) {
      auto st = static_cast<S>(s);
      auto ev = static_cast<E>(e);
      auto got = next(st, ev);
      auto it = legal().find({st, ev});
      if (it == legal().end()) {
        EXPECT_FALSE(got.has_value()) << stateName(st) << " --" << eventName(ev) << "--> "
                                      << stateName(*got) << " must be refused";
      } else {
        ++legalCount;
        ASSERT_TRUE(got.has_value()) << stateName(st) << " --" << eventName(ev) << "--> refused";
        EXPECT_EQ(*got, it->second) << stateName(st) << " --" << eventName(ev);
      }
    }
  }
  EXPECT_EQ(legalCount, static_cast<int>(legal().size()));
}

TEST(StateMachine, NothingLeavesReleasedAndCommittedOnlyReleases) {
  for (int e = 0; e < kEventCount; ++e) {
    EXPECT_FALSE(next(S::kReleased, static_cast<E>(e)).has_value());
    if (static_cast<E>(e) != E::kRelease) {
      EXPECT_FALSE(next(S::kCommitted, static_cast<E>(e)).has_value())
          << "a committed transfer cannot be aborted or retried: " << eventName(static_cast<E>(e));
    }
  }
  EXPECT_TRUE(isFinal(S::kReleased));
  EXPECT_FALSE(isFinal(S::kAborted));
}

TEST(StateMachine, HappyPathAndRetryPath) {
  S s = S::kAllocated;
  for (E e : {E::kAdvertise, E::kPost, E::kSend, E::kRemoteDone, E::kVerifyFailed, E::kRetry,
              E::kSend, E::kRemoteDone, E::kVerified, E::kCommit, E::kRelease}) {
    auto n = next(s, e);
    ASSERT_TRUE(n.has_value()) << stateName(s) << " --" << eventName(e);
    s = *n;
  }
  EXPECT_EQ(s, S::kReleased);
}

TEST(StateMachine, NamesAreDistinct) {
  std::set<std::string> states, events;
  for (int s = 0; s < kStateCount; ++s) states.insert(stateName(static_cast<S>(s)));
  for (int e = 0; e < kEventCount; ++e) events.insert(eventName(static_cast<E>(e)));
  EXPECT_EQ(states.size(), static_cast<size_t>(kStateCount));
  EXPECT_EQ(events.size(), static_cast<size_t>(kEventCount));
}

}  // namespace
}  // namespace pact::engine
