// One transfer as the engine keeps it, on either side. Plain data; the protocol's transfer table
// (transfer_table.h) owns every Transfer and changes its state only through TransferTable::step(),
// which consults the one transition table (state.h) and records the event in the trace.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "transport/profile.h"
#include "engine/control.h"
#include "engine/state.h"
#include "common/memory_type.h"

namespace pact::engine {


struct Registration;

// A contiguous piece of registered memory a transfer reads from or writes into.
struct Extent {
  Registration* mr = nullptr;
  uint8_t* addr = nullptr;
  uint64_t offset = 0;  // into mr (what the application passed)
  uint64_t length = 0;
  MemoryType type = MemoryType::kHost;  // mr's
};

enum class Role : uint8_t { kReceiver = 0, kSender = 1 };

struct Transfer {
  uint64_t id = 0;
  Role role = Role::kReceiver;
  TransferKey key;
  State state = State::kAllocated;
  Status result = Status::kInProgress;
  uint64_t peer = 0;              // the other side; receiver: 0 until an offer matched
  std::vector<Extent> blocks;     // local memory, in order
  uint64_t bytes = 0;             // sum of blocks' lengths
  Verify verify = Verify::kNone;
  size_t route = 0;               // the engine class (Routes::list()) it runs on
  int retriesLeft = 0;
  uint32_t retries = 0;
  uint32_t attempt = 0;           // pieces and Done of another attempt are ignored
  uint64_t nonce = 0;             // the send's (control.h); receiver: of the offer it matched
  TimePoint deadline = TimePoint::max();
  TimePoint created;
  int pendingOps = 0;             // UCX operations that still read or write blocks
  int abandonedOps = 0;           // sends to a lost peer UCX will never end (Protocol::abandonSends)
  bool userReleased = false;      // the application gave the id back
  bool settled = false;           // final state reached and reported (COMMITTED or ABORTED)
  bool groupChunk = false;        // part of an all-to-all step: the group commits, not the hook
  uint64_t source = 0;            // receiver of a group chunk: the peer it comes from (its loss ends it)

  // Receiver.
  bool matched = false;           // an offer for the key arrived (peer is set)
  TimePoint matchedAt;            // start of the wait for credit
  bool advertised = false;        // credit is held (staged bytes)
  // (block, offset) of the pieces in, this attempt, sorted: a duplicate is found by binary
  // search, and the vector keeps its capacity across attempts (no allocation per piece).
  std::vector<std::pair<uint32_t, uint64_t>> landed;
  // Notes a piece; false when it is in already (a duplicate).
  // A piece whose fetch failed with its rail (rail failover): a copy sent again is taken.
  void forgetLanded(uint32_t block, uint64_t offset) {
    auto it = std::lower_bound(landed.begin(), landed.end(), std::pair<uint32_t, uint64_t>{block, offset});
    if (it != landed.end() && *it == std::pair<uint32_t, uint64_t>{block, offset}) landed.erase(it);
  }
  bool noteLanded(uint32_t block, uint64_t offset) {
    const std::pair<uint32_t, uint64_t> at{block, offset};
    auto it = std::lower_bound(landed.begin(), landed.end(), at);
    if (it != landed.end() && *it == at) return false;
    landed.insert(it, at);
    return true;
  }
  uint64_t landedBytes = 0;
  bool doneSeen = false;
  bool missingArmed = false;      // the grace timer for missing pieces runs (this attempt)
  uint64_t landedAtArm = 0;       // landedBytes when it was armed (rail failover: still moving?)
  Done done;                      // the sender's last Done of this attempt

  bool eagerLanded = false;       // this attempt's bytes are the eager offer's (docs/engine.md)

  // Sender.
  bool eager = false;             // offered eagerly: repeats the offer, not Done, until advertised
  std::vector<uint64_t> remoteBlocks;  // the receiver's block lengths (from Advertise)
  bool creditHeld = false;        // counted in the peer's creditInUse
  bool eagerHeld = false;         // counted in the peer's eagerInFlight
  bool piecesPosted = false;
  bool stalled = false;           // PACT_FAULT stall held a piece of this attempt: no Done goes
  bool doneSent = false;          // this attempt's Done left: a release can no longer un-commit
  TimePoint doneSentAt;
  TimePoint resendDoneAt = TimePoint::max();  // the armed kResendDone timer (disarmed when freed)

  // Back to a fresh transfer for reuse, keeping what the vectors hold (no allocation next time).
  void reset() {
    auto b = std::move(blocks);
    auto l = std::move(landed);
    auto r = std::move(remoteBlocks);
    *this = Transfer{};
    b.clear();
    l.clear();
    r.clear();
    blocks = std::move(b);
    landed = std::move(l);
    remoteBlocks = std::move(r);
  }

  bool live() const { return !settled; }
  // Final for the application: settled and nothing touches the blocks any more.
  bool final() const { return settled && pendingOps == 0; }
};

}  // namespace pact::engine
