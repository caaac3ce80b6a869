// What a traffic class asks of its channel (both faces: NCCL comms and engine transfers).
//
// Ordered (reliable-ordered): one lane, each message one piece; a receive is reported complete
// only after every earlier receive on the comm. Unordered (reliable-unordered): each message is
// cut into `chunk`-sized pieces spread over `lanes` endpoints; pieces and messages complete in
// any order; a message completes when all its pieces have landed. Matching of sends to receives
// stays in posting order for both (NCCL requires it).
//
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/clock.h"
#include "common/fault.h"
#include "transport/profile.h"

namespace pact::transport {

enum class Steering : uint8_t { kAdaptive, kRoundRobin };

struct ChannelConfig {
  // The traffic class's name ("DEFAULT", NCCL's "3", an engine class's "KV"): its counters.
  std::string className = "DEFAULT";
  bool ordered = true;
  int lanes = 1;
  // Receive side: the rails a piece may arrive on (min of the sender's lanes and both sides'
  // rails); each piece is posted on every one of them and the copies that stay empty are cancelled.
  int rails = 1;
  size_t chunk = size_t{512} << 10;
  Steering steering = Steering::kAdaptive;
  // The class's `retries`: how often a piece whose check failed (verify) or whose delivery
  // attempt was lost (PACT_FAULT drop) is sent again.
  int retries = 0;
  // The class contract on NCCL comms (docs/plugin.md, "The class contract"). The receiver decides
  // verify, timeout and retries from both sides' classes at accept; the sender adopts them.
  Verify verify = Verify::kNone;  // a receive is done only when every piece's check matched
  std::chrono::microseconds timeout{0};  // receive: from its first landed part to complete
  bool sealed = false;   // messages carry seals (verify, timeout, or a fencing receiver)
  uint64_t credits = 0;  // send: the class's budget in flight per peer process (0: none)
  int priority = 0;      // send: the class's priority to its peer (transport/priority.h)
  // PACT_FAULT (docs/reliability.md). delay=laneN:DUR holds the pieces of lane N back. The
  // piece faults become what the reliable transport under the plugin would show: a lost or
  // corrupted attempt is sent again after a backoff (as RC and TCP retransmit) until `retries`
  // is spent, then the comm fails on both sides; a duplicate is discarded below tag matching
  // (as sequence numbers do); a refused piece and a lost goodbye are seen by both sides.
  FaultSpec fault;
};

// First wait before an injected lost attempt is sent again; doubled for each further attempt.
inline constexpr std::chrono::milliseconds kRetransmitBackoff{2};



// Pieces a message of `size` bytes is cut into (at least one: a zero-byte message is one piece).
inline size_t piecesFor(size_t size, size_t chunk) {
  return size == 0 ? 1 : (size + chunk - 1) / chunk;
}

}  // namespace pact::transport
