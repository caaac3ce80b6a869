// The transfer state machine of the engine (ARCHITECTURE.md section 5), shared by senders and
// receivers. One table holds every legal transition; anything else is refused, so an illegal
// transition cannot happen by construction.
//
//   ALLOCATED -> ADVERTISED -> POSTED -> IN_FLIGHT -> REMOTE_DONE -> VERIFIED -> COMMITTED -> RELEASED
//   TIMEOUT / RETRYABLE_ERROR / VERIFY_FAILED -> RETRYING -> POSTED  (within deadline and retries)
//   EPOCH_MISMATCH / FATAL_ERROR / DEADLINE / REJECTED -> ABORTED -> RELEASED
#pragma once

#include <cstdint>
#include <optional>

namespace pact::engine {

enum class State : uint8_t {
  kAllocated,
  kAdvertised,
  kPosted,
  kInFlight,
  kRemoteDone,
  kVerified,
  kCommitted,
  kReleased,
  kRetrying,
  kAborted,
};
inline constexpr int kStateCount = 10;

enum class Event : uint8_t {
  kAdvertise,       // receiver granted credit and published destination descriptors
  kPost,            // sender queued the transfer
  kSend,            // bytes are on the wire
  kRemoteDone,      // the receiver established that every byte is in its memory
  kVerified,        // epoch, generation and checksum match
  kCommit,          // the commit hook made the block table visible
  kRelease,         // resources returned
  kTimeout,         // a step took too long, retry allowed
  kRetryableError,  // transport error, retry allowed
  kVerifyFailed,    // checksum mismatch, retry allowed
  kRetry,           // retry starts
  kEpochMismatch,   // the receiver is on another epoch
  kFatalError,      // unrecoverable (peer dead, bad descriptor)
  kDeadline,        // the transfer's deadline passed
  kRejected,        // the commit hook refused the block table
  kEager,           // the bytes came with the offer: they stand for the advertisement
};
inline constexpr int kEventCount = 16;

const char* stateName(State s);
const char* eventName(Event e);
// The next state, or nullopt when the event is illegal in that state.
std::optional<State> next(State s, Event e);
// Terminal states accept only kRelease (ABORTED, COMMITTED) or nothing (RELEASED).
bool isFinal(State s);

}  // namespace pact::engine
