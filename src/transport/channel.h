// What a comm's traffic class asks of its channel, and the UCX tag layout both sides share.
//
// Ordered (reliable-ordered): one lane, each message one piece; a receive is reported complete
// only after every earlier receive on the comm. Unordered (reliable-unordered): each message is
// cut into `chunk`-sized pieces spread over `lanes` endpoints; pieces and messages complete in
// any order; a message completes when all its pieces have landed. Matching of sends to receives
// stays in posting order for both (NCCL requires it).
//
// UCX tag: [receiver tag space:16][NCCL tag:20][per-tag sequence:10][piece:17][last:1].
// Receives ignore the `last` bit, and learn from the sender's tag which piece was the last one.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/clock.h"
#include "common/fault.h"

namespace pact::transport {

enum class Steering : uint8_t { kAdaptive, kRoundRobin };

struct ChannelConfig {
  bool ordered = true;
  int lanes = 1;
  // Receive side: the rails a piece may arrive on (min of the sender's lanes and both sides'
  // rails); each piece is posted on every one of them and the copies that stay empty are cancelled.
  int rails = 1;
  size_t chunk = size_t{512} << 10;
  Steering steering = Steering::kAdaptive;
  // The class's `retries`: how often a piece whose delivery attempt was lost is sent again.
  int retries = 0;
  // PACT_FAULT (docs/reliability.md). delay=laneN:DUR holds the pieces of lane N back. The
  // piece faults become what the reliable transport under the plugin would show: a lost or
  // corrupted attempt is sent again after a backoff (as RC and TCP retransmit) until `retries`
  // is spent, then the comm fails on both sides; a duplicate is discarded below tag matching
  // (as sequence numbers do); a refused piece and a lost goodbye are seen by both sides.
  FaultSpec fault;
};

// First wait before an injected lost attempt is sent again; doubled for each further attempt.
inline constexpr std::chrono::milliseconds kRetransmitBackoff{2};

namespace tag {
inline constexpr uint32_t kSpaces = 1u << 16;
inline constexpr uint32_t kTagBits = 20;
inline constexpr uint32_t kSeqMask = (1u << 10) - 1;
inline constexpr uint32_t kMaxPieces = 1u << 17;
inline constexpr uint64_t kRecvMask = ~uint64_t{1};  // receives accept either `last` value

inline uint64_t make(uint32_t space, int nccltag, uint32_t seq, uint32_t piece, bool last) {
  return (static_cast<uint64_t>(space & 0xFFFFu) << 48) |
         (static_cast<uint64_t>(static_cast<uint32_t>(nccltag) & 0xFFFFFu) << 28) |
         (static_cast<uint64_t>(seq & kSeqMask) << 18) |
         (static_cast<uint64_t>(piece & (kMaxPieces - 1)) << 1) | (last ? 1u : 0u);
}
inline bool isLast(uint64_t t) { return (t & 1u) != 0; }
}  // namespace tag

// Pieces a message of `size` bytes is cut into (at least one: a zero-byte message is one piece).
inline size_t piecesFor(size_t size, size_t chunk) {
  return size == 0 ? 1 : (size + chunk - 1) / chunk;
}

}  // namespace pact::transport
