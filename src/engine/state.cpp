#include "engine/state.h"

#include <array>

namespace pact::engine {

namespace {

using S = State;
using E = Event;
constexpr auto kNone = static_cast<uint8_t>(0xff);

struct Table {
  std::array<std::array<uint8_t, kEventCount>, kStateCount> to{};
  constexpr Table() {
    for (auto& row : to) row.fill(kNone);
    add(S::kAllocated, E::kAdvertise, S::kAdvertised);
    add(S::kAllocated, E::kEager, S::kAdvertised);
    add(S::kAdvertised, E::kPost, S::kPosted);
    add(S::kPosted, E::kSend, S::kInFlight);
    add(S::kInFlight, E::kRemoteDone, S::kRemoteDone);
    add(S::kRemoteDone, E::kVerified, S::kVerified);
    add(S::kVerified, E::kCommit, S::kCommitted);
    add(S::kCommitted, E::kRelease, S::kReleased);
    // Retries: only while the transfer is being moved, and back to POSTED.
    for (S s : {S::kPosted, S::kInFlight, S::kRemoteDone}) {
      add(s, E::kTimeout, S::kRetrying);
      add(s, E::kRetryableError, S::kRetrying);
    }
    add(S::kRemoteDone, E::kVerifyFailed, S::kRetrying);
    add(S::kRetrying, E::kRetry, S::kPosted);
    // Aborts: from every live state before the commit.
    for (S s : {S::kAllocated, S::kAdvertised, S::kPosted, S::kInFlight, S::kRemoteDone,
                S::kVerified, S::kRetrying}) {
      add(s, E::kEpochMismatch, S::kAborted);
      add(s, E::kFatalError, S::kAborted);
      add(s, E::kDeadline, S::kAborted);
    }
    add(S::kVerified, E::kRejected, S::kAborted);
    add(S::kAborted, E::kRelease, S::kReleased);
  }
  constexpr void add(S from, E e, S to_) {
    to[static_cast<size_t>(from)][static_cast<size_t>(e)] = static_cast<uint8_t>(to_);
  }
};

constexpr Table kTable{};

}  // namespace

std::optional<State> next(State s, Event e) {
  uint8_t n = kTable.to[static_cast<size_t>(s)][static_cast<size_t>(e)];
  if (n == kNone) return std::nullopt;
  return static_cast<State>(n);
}

bool isFinal(State s) { return s == State::kReleased; }

const char* stateName(State s) {
  switch (s) {
    case State::kAllocated: return "ALLOCATED";
    case State::kAdvertised: return "ADVERTISED";
    case State::kPosted: return "POSTED";
    case State::kInFlight: return "IN_FLIGHT";
    case State::kRemoteDone: return "REMOTE_DONE";
    case State::kVerified: return "VERIFIED";
    case State::kCommitted: return "COMMITTED";
    case State::kReleased: return "RELEASED";
    case State::kRetrying: return "RETRYING";
    case State::kAborted: return "ABORTED";
  }
  return "?";
}

const char* eventName(Event e) {
  switch (e) {
    case Event::kAdvertise: return "advertise";
    case Event::kPost: return "post";
    case Event::kSend: return "send";
    case Event::kRemoteDone: return "remote_done";
    case Event::kVerified: return "verified";
    case Event::kCommit: return "commit";
    case Event::kRelease: return "release";
    case Event::kTimeout: return "timeout";
    case Event::kRetryableError: return "retryable_error";
    case Event::kVerifyFailed: return "verify_failed";
    case Event::kRetry: return "retry";
    case Event::kEpochMismatch: return "epoch_mismatch";
    case Event::kFatalError: return "fatal_error";
    case Event::kDeadline: return "deadline";
    case Event::kRejected: return "rejected";
    case Event::kEager: return "eager";
  }
  return "?";
}

}  // namespace pact::engine
