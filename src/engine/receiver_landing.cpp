// The receiver's side of a transfer, from its bytes on: land range-checked pieces (copied, or
// fetched through the link), wait for stragglers after Done, verify, commit once, or ask the
// sender for another attempt.
#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "engine/receiver.h"
#include "transport/memory_copy.h"

namespace pact::engine {

namespace {

// How long a receiver waits for missing pieces after the sender's Done (docs/engine.md).
constexpr auto kStragglerGrace = std::chrono::milliseconds(20);

}  // namespace

PieceVerdict Receiver::onPiece(uint64_t from, const PieceHeader& h, const void* data, size_t length,
                               bool rendezvous, void* descriptor) {
  // Dropping a piece: kDone also for a rendezvous (UCX then discards it and the sender's send
  // completes normally: duplicates and late pieces are not the sender's failure).
  const PieceVerdict drop = PieceVerdict::kDone;
  Transfer* x = openReceiver(h.key);
  if (from == 0 || x == nullptr || !x->advertised || x->peer != from ||
      x->key.modelEpoch != h.key.modelEpoch) {
    // Not (or no longer) open here: revoked, committed, or never advertised.
    if (committed_.contains(h.key)) {
      counters().add(telemetry::kDuplicatesDropped);
    } else {
      counters().add(telemetry::kStaleRejected);
    }
    return drop;
  }
  if (h.attempt != x->attempt) {
    counters().add(telemetry::kStaleRejected);  // a piece of an earlier attempt
    return drop;
  }
  if (h.block >= x->blocks.size() || h.offset > x->blocks[h.block].length ||
      length > x->blocks[h.block].length - h.offset || length == 0) {
    counters().add(telemetry::kOutOfRange);
    PACT_WARN("engine %s: %s piece block %u offset %lu length %zu outside the advertised blocks",
              config().name.c_str(), keyText(x->key).c_str(), h.block,
              static_cast<unsigned long>(h.offset), length);
    abort(*x, Event::kFatalError, Status::kOutOfRange, Reason::kOutOfRange);
    return PieceVerdict::kRefuse;
  }
  if (!x->noteLanded(h.block, h.offset)) {
    counters().add(telemetry::kDuplicatesDropped);  // the same piece twice
    return drop;
  }
  if (x->state == State::kPosted) table_.step(*x, Event::kSend);
  const Extent& block = x->blocks[h.block];
  uint8_t* dst = block.addr + h.offset;
  if (!rendezvous) {
    if (!copyIn(*x, block, dst, data, length)) return drop;
    landed(*x, dst, length);
    return PieceVerdict::kDone;
  }
  ++x->pendingOps;
  link_.fetch(descriptor, dst, length, x->id, x->attempt, block.type);
  return PieceVerdict::kDone;
}

Transfer* Receiver::endOp(uint64_t xferId, uint32_t attempt) {
  table_.opDone(xferId);
  Transfer* x = table_.find(xferId);
  return x != nullptr && x->live() && x->attempt == attempt ? x : nullptr;
}

void Receiver::pieceLost(uint64_t xferId, uint32_t attempt, uint8_t* dst) {
  Transfer* found = endOp(xferId, attempt);
  if (found == nullptr) return;
  Transfer& x = *found;
  for (uint32_t b = 0; b < x.blocks.size(); ++b)
    if (dst >= x.blocks[b].addr && dst < x.blocks[b].addr + x.blocks[b].length)
      x.forgetLanded(b, static_cast<uint64_t>(dst - x.blocks[b].addr));
  tryComplete(x);  // Done may have come: the grace for missing pieces starts
}

// A fetched piece: the operation is over first, so completing the transfer sees none pending.
void Receiver::pieceFetched(uint64_t xferId, uint32_t attempt, uint8_t* dst, uint64_t length,
                            bool ok) {
  Transfer* found = endOp(xferId, attempt);
  if (found == nullptr) return;
  Transfer& x = *found;
  if (!ok) {
    abort(x, Event::kFatalError, Status::kRemoteError, Reason::kPeerLost);
    return;
  }
  landed(x, dst, length);
}

// Bytes in UCX's host buffer (an eager piece or eager offer) into block b at dst: a GPU block
// through the driver's copy. False (x aborted) when the driver fails.
bool Receiver::copyIn(Transfer& x, const Extent& b, uint8_t* dst, const void* src, size_t n) {
  if (b.type == MemoryType::kHost) {
    std::memcpy(dst, src, n);
    return true;
  }
  if (transport::copyIn(config().cudaDriver, dst, src, n, b.type) == Status::kOk) return true;
  PACT_WARN("engine %s: %s: the CUDA driver could not copy received bytes into a GPU block",
            config().name.c_str(), keyText(x.key).c_str());
  abort(x, Event::kFatalError, Status::kInternal, Reason::kIncomplete);
  return false;
}

void Receiver::landed(Transfer& x, uint8_t* dst, uint64_t length) {
  maybeCorrupt(x, dst, length);
  x.landedBytes += length;
  counters().add(telemetry::kBytesReceived, length);
  tryComplete(x);
}

void Receiver::maybeCorrupt(Transfer& x, uint8_t* dst, uint64_t length) {
  if (inject(fault().corrupt, x.route)) {
    uint8_t* at = dst + table_.dice().next() % length;
    // A GPU block is never touched by the CPU: the flip goes through the driver's copies.
    const Extent* b = &x.blocks.front();
    for (const Extent& e : x.blocks)
      if (at >= e.addr && at < e.addr + e.length) b = &e;
    uint8_t v = 0;
    if (b->type == MemoryType::kHost) {
      *at ^= 0x10;
    } else if (transport::readStaged(config().cudaDriver, at, 1, b->type, std::span(&v, 1),
                                     [&](const uint8_t* p, size_t) { v = *p; }) == Status::kOk) {
      v ^= 0x10;
      ignore(transport::copyIn(config().cudaDriver, at, &v, 1, b->type));
    }
  }
}

// Asks the sender for attempt + 1 when the retry budget and the deadline allow.
bool Receiver::retryAttempt(Transfer& x, Event why, Reason reason) {
  if (x.retriesLeft <= 0 || now() >= x.deadline) return false;
  --x.retriesLeft;
  ++x.retries;
  counters().add(telemetry::kRetried);
  table_.classOf(x.route).addShared(telemetry::kClassRetransmits);
  table_.step(x, why);
  table_.step(x, Event::kRetry);
  x.landed.clear();
  x.landedBytes = 0;
  x.doneSeen = false;
  x.missingArmed = false;
  if (x.eagerLanded) {
    // The eager bytes failed: the sender has not been advertised yet, so the advertisement
    // (credit still held) asks for them again, as pieces of the same attempt.
    x.eagerLanded = false;
    sendAdvertise(x);
    return true;
  }
  ++x.attempt;
  sendVerdict(x.peer, x.key, x.nonce, Outcome::kRetry, reason, x.attempt);
  return true;
}

void Receiver::checkMissing(Transfer& x) {
  if (!x.live() || !x.doneSeen || x.pendingOps != 0 || x.landedBytes == x.bytes) return;
  if (const PeerView* p = table_.peer(x.peer);
      p != nullptr && p->failoverGrace.count() != 0 && x.landedBytes != x.landedAtArm && now() < x.deadline) {
    x.landedAtArm = x.landedBytes;  // still arriving (sent again over another rail): wait on
    table_.addTimer(now() + p->failoverGrace, x.id, TimerKind::kMissing, x.attempt);
    return;
  }
  PACT_INFO("engine %s: %s attempt %u: %lu of %lu bytes arrived", config().name.c_str(),
            keyText(x.key).c_str(), x.attempt, static_cast<unsigned long>(x.landedBytes),
            static_cast<unsigned long>(x.bytes));
  if (x.state == State::kPosted) table_.step(x, Event::kSend);
  if (!retryAttempt(x, Event::kTimeout, Reason::kIncomplete))
    abort(x, Event::kFatalError, Status::kIncomplete, Reason::kIncomplete);
}

void Receiver::onDone(uint64_t from, const Done& m) {
  Transfer* x = openReceiver(m.key);
  if (x == nullptr || x->peer != from || x->nonce != m.nonce) {
    if (const uint64_t* committedBy = committed_.nonceOf(m.key); committedBy != nullptr && *committedBy == m.nonce) {
      counters().add(telemetry::kDuplicatesDropped);  // our verdict was lost: say it again
      sendVerdict(from, m.key, m.nonce, Outcome::kCommitted, Reason::kDuplicate);
    }
    return;
  }
  if (m.attempt != x->attempt) return;
  x->doneSeen = true;
  x->done = m;
  tryComplete(*x);
}

// REMOTE_DONE once every byte of this attempt is in and the sender said Done; then verify and
// commit (or retry / abort).
void Receiver::tryComplete(Transfer& x) {
  if (!x.live() || !x.doneSeen || x.pendingOps != 0) return;
  if (x.landedBytes != x.bytes) {
    // The sender finished the attempt but bytes are missing: give stragglers 20 ms (once per
    // attempt, however often Done is repeated).
    if (!x.missingArmed) {
      x.missingArmed = true;
      x.landedAtArm = x.landedBytes;
      const PeerView* p = table_.peer(x.peer);
      const auto grace = p != nullptr ? std::max<std::chrono::microseconds>(kStragglerGrace, p->failoverGrace)
                                      : kStragglerGrace;
      table_.addTimer(now() + grace, x.id, TimerKind::kMissing, x.attempt);
    }
    return;
  }
  if (x.state != State::kInFlight) return;
  table_.step(x, Event::kRemoteDone);
  if (x.done.bytes != x.bytes) {
    abort(x, Event::kFatalError, Status::kInvalidArgument, Reason::kSizeMismatch);
    return;
  }
  if (x.key.modelEpoch != epoch_) {
    abort(x, Event::kEpochMismatch, Status::kEpochMismatch, Reason::kEpochMismatch);
    return;
  }
  if (x.verify != Verify::kNone) {
    auto digest = table_.digest(x);
    if (!digest.ok()) {
      abort(x, Event::kFatalError, digest.status(), Reason::kChecksum);
      return;
    }
    if (x.done.checksumKind != x.verify || *digest != x.done.checksum) {
      counters().add(telemetry::kChecksumFailures);
      PACT_INFO("engine %s: %s checksum mismatch (attempt %u)", config().name.c_str(),
                keyText(x.key).c_str(), x.attempt);
      if (!retryAttempt(x, Event::kVerifyFailed, Reason::kChecksum))
        abort(x, Event::kFatalError, Status::kChecksum, Reason::kChecksum);
      return;
    }
  }
  table_.step(x, Event::kVerified);
  const uint64_t id = x.id;
  std::vector<BlockRef>& table = commitTable_;
  table.clear();
  for (const Extent& b : x.blocks) table.push_back({b.mr, b.offset, b.length});
  const bool refused = inject(fault().reject, x.route);
  const bool accepted = !refused && (x.groupChunk || !hook_ || hook_(id, x.key, x.peer, table));
  if (!accepted) {
    if (x.matched) sendVerdict(x.peer, x.key, x.nonce, Outcome::kAborted, Reason::kRejected);
    table_.settle(x, Event::kRejected, Status::kRejected);
    return;
  }
  committed_.insert(x.key, x.nonce);
  sendVerdict(x.peer, x.key, x.nonce, Outcome::kCommitted, Reason::kNone);
  table_.settle(x, Event::kCommit, Status::kOk);
}

}  // namespace pact::engine
