// The receiver's side of a transfer: expect, match with the sender's offer, grant credit and
// advertise, land range-checked pieces, verify, commit once, and epoch changes.
#include <algorithm>
#include <cstring>

#include "common/checksum.h"
#include "common/log.h"
#include "engine/protocol.h"

namespace pact::engine {

namespace {

// How long a receiver waits for missing pieces after the sender's Done (docs/engine.md).
constexpr auto kStragglerGrace = std::chrono::milliseconds(20);

}  // namespace

Transfer* Protocol::openReceiver(const TransferKey& key) {
  auto it = receiving_.find(key);
  if (it == receiving_.end()) return nullptr;
  auto x = xfers_.find(it->second);
  return x == xfers_.end() ? nullptr : x->second.get();
}

Status Protocol::setEpoch(uint64_t epoch) {
  if (epoch == epoch_) return Status::kOk;
  PACT_INFO("engine %s: model epoch %lu -> %lu", config_.name.c_str(),
            static_cast<unsigned long>(epoch_), static_cast<unsigned long>(epoch));
  epoch_ = epoch;
  // Abort (and so revoke: out of receiving_, later pieces find nothing) every open transfer of
  // another epoch, and tell each sender.
  forEachLive(
      [&](const Transfer& x) { return x.role == Role::kReceiver && x.key.modelEpoch != epoch; },
      [&](Transfer& x) {
        receiverAbort(x, Event::kEpochMismatch, Status::kEpochMismatch, Reason::kEpochMismatch);
      });
  for (auto it = offers_.begin(); it != offers_.end();) {
    if (it->second.offer.key.modelEpoch != epoch) {
      counters_.add(telemetry::kStaleRejected);
      sendVerdict(it->second.peer, it->second.offer.key, it->second.offer.nonce, Outcome::kAborted, Reason::kEpochMismatch);
      it = offers_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& [id, p] : peers_) link_.sendControl(id, EpochChange{epoch});
  return Status::kOk;
}

Status Protocol::setCredit(uint64_t to, uint64_t budget) {
  if (to != 0 && peer(to) == nullptr)
    return fail(Status::kNotFound, "set_credit: unknown peer " + std::to_string(to));
  creditSet_ = true;
  if (to == 0) {
    credits_.setTotal(budget);
    syncCredit();
    for (auto& [id, p] : peers_) link_.sendControl(id, CreditUpdate{credits_.grantFor(id)});
  } else {
    credits_.setShare(to, budget);
    link_.sendControl(to, CreditUpdate{credits_.grantFor(to)});  // share or the total
  }
  advertiseWaiting();
  return Status::kOk;
}

Status Protocol::expect(const TransferKey& key, std::span<const BlockRef> blocks, uint64_t deadlineUs,
                      size_t route, uint64_t* xfer) {
  if (key.modelEpoch != epoch_)
    return fail(Status::kEpochMismatch, "expect " + keyText(key) + ": the receiver is on epoch " +
                                          std::to_string(epoch_));
  if (committed_.contains(key) || openReceiver(key))
    return fail(Status::kDuplicate, "expect " + keyText(key) + ": already committed or open");
  if (generations_.isStale(key))
    return fail(Status::kStale, "expect " + keyText(key) + ": a newer generation was expected already");
  Transfer& x = newTransfer(Role::kReceiver, key, blocks, route, 0, deadlineUs);
  generations_.note(key);
  if (canceled_.erase(key) != 0)  // expected anew
    std::erase_if(canceledOrder_, [&](const TransferKey& c) { return c.sameTransfer(key); });
  receiving_[key] = x.id;
  *xfer = x.id;
  auto offer = offers_.find(key);
  if (offer != offers_.end()) {
    const PendingOffer pending = offer->second;
    offers_.erase(offer);
    if (peer(pending.peer) != nullptr) {
      if (pending.offer.bytes != x.bytes) {
        sendVerdict(pending.peer, key, pending.offer.nonce, Outcome::kAborted, Reason::kSizeMismatch);
        x.peer = pending.peer;
        settle(x, Event::kFatalError, Status::kInvalidArgument);
      } else {
        match(x, pending.peer, pending.offer);
      }
    }
  }
  return Status::kOk;
}

void Protocol::onOffer(uint64_t from, const Offer& m, const uint8_t* data) {
  const TransferKey& k = m.key;
  if (k.modelEpoch != epoch_) {
    counters_.add(telemetry::kStaleRejected);
    sendVerdict(from, k, m.nonce, Outcome::kAborted, Reason::kEpochMismatch);
    return;
  }
  // A newer generation is expected already: stale, even if this one once committed.
  if (generations_.isStale(k)) {
    counters_.add(telemetry::kStaleRejected);
    sendVerdict(from, k, m.nonce, Outcome::kAborted, Reason::kStale);
    return;
  }
  const bool repeat = (m.flags & kOfferRepeat) != 0;
  if (const uint64_t* committedBy = committed_.nonceOf(k)) {
    // A copy of the committing send's offer (a wire duplicate, a repeat after a lost verdict):
    // its verdict again. Another send of the key: refused as a duplicate.
    counters_.add(telemetry::kDuplicatesDropped);
    if (*committedBy == m.nonce) {
      sendVerdict(from, k, m.nonce, Outcome::kCommitted, Reason::kDuplicate);
    } else {
      sendVerdict(from, k, m.nonce, Outcome::kAborted, Reason::kDuplicate);
    }
    return;
  }
  Transfer* x = openReceiver(k);
  if (x == nullptr && canceled_.count(k) != 0) {
    sendVerdict(from, k, m.nonce, Outcome::kAborted, Reason::kCanceled);  // released before the offer came
    return;
  }
  if (x == nullptr) {
    // The same sender again (a repeated eager offer, or a copy): it still waits for the expect.
    // (A sender never has two sends of one key open to one receiver.)
    auto pending = offers_.find(k);
    if (pending != offers_.end() && pending->second.peer == from) return;
    if (pending != offers_.end() || offers_.size() >= (1u << 16)) {
      counters_.add(telemetry::kDuplicatesDropped);
      sendVerdict(from, k, m.nonce, Outcome::kAborted, Reason::kDuplicate);
      return;
    }
    // Waits for the application's expect, at most until the sender's deadline (an eager
    // offer's bytes are not kept: they come as pieces once it is advertised).
    const uint64_t id = nextId_++;
    offers_[k] = PendingOffer{from, m, id};
    if (m.deadlineUs != 0) addTimer(now() + std::chrono::microseconds(m.deadlineUs), id, TimerKind::kOffer);
    return;
  }
  if (x->matched) {
    if (repeat && x->peer == from) return;  // it waits for credit, or its bytes are moving
    counters_.add(telemetry::kDuplicatesDropped);  // a second offer of an open transfer
    if (x->peer != from) sendVerdict(from, k, m.nonce, Outcome::kAborted, Reason::kDuplicate);
    return;
  }
  if (m.bytes != x->bytes) {
    sendVerdict(from, k, m.nonce, Outcome::kAborted, Reason::kSizeMismatch);
    x->peer = from;
    settle(*x, Event::kFatalError, Status::kInvalidArgument);
    return;
  }
  if (data != nullptr) {
    matchEager(*x, from, m, data);
  } else {
    match(*x, from, m);
  }
}

void Protocol::bindPeer(Transfer& x, uint64_t from, const Offer& offer) {
  x.matched = true;
  x.peer = from;
  x.nonce = offer.nonce;
  x.matchedAt = now();
  if (offer.deadlineUs != 0) {
    advanceDeadline(x, x.matchedAt + std::chrono::microseconds(offer.deadlineUs));
  }
}

// The bytes land only where an Advertise would have been sent at once (the credit fits: first
// fit, as advertiseWaiting). Then they are checked and committed as if every piece and the Done
// had come; a failed check asks for them as pieces.
void Protocol::matchEager(Transfer& x, uint64_t from, const Offer& m, const uint8_t* data) {
  bindPeer(x, from, m);
  if (!credits_.fits(from, x.bytes) || !classCreditFits(x)) {
    match(x, from, m);  // advertised when credit comes; the bytes come as pieces
    return;
  }
  takeCredit(x);
  step(x, Event::kEager);
  step(x, Event::kPost);
  step(x, Event::kSend);
  for (const Extent& b : x.blocks) {
    if (!copyIn(x, b, b.addr, data, b.length)) return;
    data += b.length;
  }
  maybeCorrupt(x, x.blocks.front().addr, x.blocks.front().length);
  x.eagerLanded = true;
  x.landedBytes = x.bytes;
  counters_.add(telemetry::kBytesReceived, x.bytes);
  x.doneSeen = true;
  x.done = Done{x.key, x.attempt, m.bytes, m.checksumKind, m.checksum, m.nonce};
  tryComplete(x);
}

void Protocol::match(Transfer& x, uint64_t from, const Offer& offer) {
  if (!x.matched) bindPeer(x, from, offer);
  // Larger than the budget its sender is held to: it waits until the application raises the
  // budget (a decode worker grants credit as pages free up), or until its deadline. Said once,
  // so that a wait without a deadline is never silent.
  const uint64_t limit = std::min(credits_.grantFor(from), credits_.total());
  if (limit != kUnlimited && x.bytes > limit)
    PACT_INFO("engine %s: %s (%lu bytes) waits for credit: the budget is %lu bytes%s",
              config_.name.c_str(), keyText(x.key).c_str(), static_cast<unsigned long>(x.bytes),
              static_cast<unsigned long>(limit),
              x.deadline == TimePoint::max() ? " and the transfer has no deadline" : "");
  waitingCredit_.push_back(x.id);
  advertiseWaiting();
}

// Grants credit to every matched transfer that fits the budgets, oldest first (first fit: a
// large transfer does not hold back smaller ones behind it).
void Protocol::advertiseWaiting() {
  for (auto it = waitingCredit_.begin(); it != waitingCredit_.end();) {
    auto xi = xfers_.find(*it);
    if (xi == xfers_.end() || !xi->second->live()) {
      it = waitingCredit_.erase(it);
      continue;
    }
    Transfer& x = *xi->second;
    if (peer(x.peer) == nullptr) {
      ++it;
      continue;
    }
    if (!credits_.fits(x.peer, x.bytes) || !classCreditFits(x)) {
      ++it;
      continue;
    }
    it = waitingCredit_.erase(it);
    advertise(x);
  }
}

// The class's `credits` bound what one sender has staged in that class, when the application
// set no budget of its own. A transfer larger than the whole budget goes alone (it could never
// fit otherwise).
bool Protocol::classCreditFits(const Transfer& x) const {
  const uint64_t budget = config_.routes[x.route].credits;
  if (creditSet_ || budget == 0) return true;
  auto staged = classStaged_.find({x.peer, x.route});
  const uint64_t in = staged == classStaged_.end() ? 0 : staged->second;
  return in == 0 || in + x.bytes <= budget;
}

void Protocol::takeCredit(Transfer& x) {
  x.advertised = true;
  credits_.take(x.peer, x.bytes);
  classStaged_[{x.peer, x.route}] += x.bytes;
  counters_.add(telemetry::kCreditStallNs, static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(now() - x.matchedAt).count()));
  syncCredit();
}

void Protocol::advertise(Transfer& x) {
  takeCredit(x);
  step(x, Event::kAdvertise);
  sendAdvertise(x);
  step(x, Event::kPost);  // the destination is posted: pieces may land from now on
}

void Protocol::sendAdvertise(Transfer& x) {
  // Room for the pieces once: blocks cut at 64 KiB on average (it grows if they are smaller).
  x.landed.reserve(std::min<size_t>(x.blocks.size() + x.bytes / (64 << 10), 1 << 16));
  if (!std::holds_alternative<Advertise>(advertiseOut_)) advertiseOut_ = Advertise{};
  Advertise& m = std::get<Advertise>(advertiseOut_);  // kept: its vectors keep their capacity
  m.rkey.clear();
  m.blocks.clear();
  m.key = x.key;
  m.deadlineUs = remainingUs(x.deadline);
  m.creditBytes = x.bytes;
  m.regionLength = x.bytes;  // a virtual region: the blocks one after another
  uint64_t off = 0;
  for (const Extent& b : x.blocks) {
    m.blocks.push_back({off, b.length});
    off += b.length;
  }
  link_.sendControl(x.peer, advertiseOut_);
}

void Protocol::releaseCredit(Transfer& x) {
  if (!x.advertised) return;
  x.advertised = false;
  credits_.give(x.peer, x.bytes);
  syncCredit();
  auto staged = classStaged_.find({x.peer, x.route});
  if (staged != classStaged_.end() && (staged->second -= std::min(staged->second, x.bytes)) == 0)
    classStaged_.erase(staged);
  advertiseWaiting();
}

void Protocol::sendVerdict(uint64_t to, const TransferKey& key, uint64_t nonce, Outcome o, Reason r,
                           uint32_t attempt) {
  if (o == Outcome::kCommitted && inject(fault_.loseRemoteDone, kNoRoute)) return;
  if (peer(to) != nullptr) link_.sendControl(to, Verdict{key, o, r, attempt, nonce});
}

void Protocol::receiverAbort(Transfer& x, Event e, Status result, Reason r) {
  if (!x.live()) return;
  if (x.matched) sendVerdict(x.peer, x.key, x.nonce, Outcome::kAborted, r);
  settle(x, e, result);
}

// ---- pieces ------------------------------------------------------------------------------------

PieceVerdict Protocol::onPiece(uint64_t from, const PieceHeader& h, const void* data, size_t length,
                               bool rendezvous, void* descriptor) {
  // Dropping a piece: kDone also for a rendezvous (UCX then discards it and the sender's send
  // completes normally: duplicates and late pieces are not the sender's failure).
  const PieceVerdict drop = PieceVerdict::kDone;
  Transfer* x = openReceiver(h.key);
  if (from == 0 || x == nullptr || !x->advertised || x->peer != from ||
      x->key.modelEpoch != h.key.modelEpoch) {
    // Not (or no longer) open here: revoked, committed, or never advertised.
    if (committed_.contains(h.key)) {
      counters_.add(telemetry::kDuplicatesDropped);
    } else {
      counters_.add(telemetry::kStaleRejected);
    }
    return drop;
  }
  if (h.attempt != x->attempt) {
    counters_.add(telemetry::kStaleRejected);  // a piece of an earlier attempt
    return drop;
  }
  if (h.block >= x->blocks.size() || h.offset > x->blocks[h.block].length ||
      length > x->blocks[h.block].length - h.offset || length == 0) {
    counters_.add(telemetry::kOutOfRange);
    PACT_WARN("engine %s: %s piece block %u offset %lu length %zu outside the advertised blocks",
              config_.name.c_str(), keyText(x->key).c_str(), h.block,
              static_cast<unsigned long>(h.offset), length);
    receiverAbort(*x, Event::kFatalError, Status::kOutOfRange, Reason::kOutOfRange);
    return PieceVerdict::kRefuse;
  }
  if (!x->noteLanded(h.block, h.offset)) {
    counters_.add(telemetry::kDuplicatesDropped);  // the same piece twice
    return drop;
  }
  if (x->state == State::kPosted) step(*x, Event::kSend);
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

void Protocol::pieceLost(uint64_t xferId, uint32_t attempt, uint8_t* dst) {
  opDone(xferId);
  auto it = xfers_.find(xferId);
  if (it == xfers_.end()) return;
  Transfer& x = *it->second;
  if (!x.live() || x.attempt != attempt) return;
  for (uint32_t b = 0; b < x.blocks.size(); ++b)
    if (dst >= x.blocks[b].addr && dst < x.blocks[b].addr + x.blocks[b].length)
      x.forgetLanded(b, static_cast<uint64_t>(dst - x.blocks[b].addr));
  tryComplete(x);  // Done may have come: the grace for missing pieces starts
}

// A fetched piece: the operation is over first, so completing the transfer sees none pending.
void Protocol::pieceFetched(uint64_t xferId, uint32_t attempt, uint8_t* dst, uint64_t length,
                            bool ok) {
  opDone(xferId);
  auto it = xfers_.find(xferId);
  if (it == xfers_.end()) return;
  Transfer& x = *it->second;
  if (!x.live() || x.attempt != attempt) return;
  if (!ok) {
    receiverAbort(x, Event::kFatalError, Status::kRemoteError, Reason::kPeerLost);
    return;
  }
  landed(x, dst, length);
}

// Bytes in UCX's host buffer (an eager piece or eager offer) into block b at dst: a GPU block
// through the driver's copy. False (x aborted) when the driver fails.
bool Protocol::copyIn(Transfer& x, const Extent& b, uint8_t* dst, const void* src, size_t n) {
  if (b.type == MemoryType::kHost) {
    std::memcpy(dst, src, n);
    return true;
  }
  if (transport::copyIn(config_.cudaDriver, dst, src, n, b.type) == Status::kOk) return true;
  PACT_WARN("engine %s: %s: the CUDA driver could not copy received bytes into a GPU block",
            config_.name.c_str(), keyText(x.key).c_str());
  receiverAbort(x, Event::kFatalError, Status::kInternal, Reason::kIncomplete);
  return false;
}

void Protocol::landed(Transfer& x, uint8_t* dst, uint64_t length) {
  maybeCorrupt(x, dst, length);
  x.landedBytes += length;
  counters_.add(telemetry::kBytesReceived, length);
  tryComplete(x);
}

void Protocol::maybeCorrupt(Transfer& x, uint8_t* dst, uint64_t length) {
  if (inject(fault_.corrupt, x.route)) {
    uint8_t* at = dst + dice_.next() % length;
    // A GPU block is never touched by the CPU: the flip goes through the driver's copies.
    const Extent* b = &x.blocks.front();
    for (const Extent& e : x.blocks)
      if (at >= e.addr && at < e.addr + e.length) b = &e;
    uint8_t v = 0;
    if (b->type == MemoryType::kHost) {
      *at ^= 0x10;
    } else if (transport::readStaged(config_.cudaDriver, at, 1, b->type, std::span(&v, 1),
                                     [&](const uint8_t* p, size_t) { v = *p; }) == Status::kOk) {
      v ^= 0x10;
      ignore(transport::copyIn(config_.cudaDriver, at, &v, 1, b->type));
    }
  }
}

// Asks the sender for attempt + 1 when the retry budget and the deadline allow.
bool Protocol::retryAttempt(Transfer& x, Event why, Reason reason) {
  if (x.retriesLeft <= 0 || now() >= x.deadline) return false;
  --x.retriesLeft;
  ++x.retries;
  counters_.add(telemetry::kRetried);
  classOf(x.route).addShared(telemetry::kClassRetransmits);
  step(x, why);
  step(x, Event::kRetry);
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

void Protocol::checkMissing(Transfer& x) {
  if (!x.live() || !x.doneSeen || x.pendingOps != 0 || x.landedBytes == x.bytes) return;
  if (const PeerView* p = peer(x.peer);
      p != nullptr && p->failoverGrace.count() != 0 && x.landedBytes != x.landedAtArm && now() < x.deadline) {
    x.landedAtArm = x.landedBytes;  // still arriving (sent again over another rail): wait on
    addTimer(now() + p->failoverGrace, x.id, TimerKind::kMissing, x.attempt);
    return;
  }
  PACT_INFO("engine %s: %s attempt %u: %lu of %lu bytes arrived", config_.name.c_str(),
            keyText(x.key).c_str(), x.attempt, static_cast<unsigned long>(x.landedBytes),
            static_cast<unsigned long>(x.bytes));
  if (x.state == State::kPosted) step(x, Event::kSend);
  if (!retryAttempt(x, Event::kTimeout, Reason::kIncomplete))
    receiverAbort(x, Event::kFatalError, Status::kIncomplete, Reason::kIncomplete);
}

void Protocol::onCancel(uint64_t from, const Cancel& m) {
  offers_.erase(m.key);  // an offer still waiting for its expect
  Transfer* x = openReceiver(m.key);
  const uint64_t* committedBy = committed_.nonceOf(m.key);
  if (x != nullptr && x->peer == from && x->nonce == m.nonce && x->live()) {
    PACT_INFO("engine %s: %s %s by the sender %s", config_.name.c_str(), keyText(x->key).c_str(),
              m.closing ? "aborted (peer lost): its engine destroyed" : "canceled", peers_[from].name.c_str());
    settle(*x, Event::kFatalError, m.closing ? Status::kRemoteError : Status::kCanceled);
  } else if (m.answer && committedBy != nullptr && *committedBy == m.nonce) {
    sendVerdict(from, m.key, m.nonce, Outcome::kCommitted, Reason::kDuplicate);  // this send committed before
    return;
  }
  if (m.answer) sendVerdict(from, m.key, m.nonce, Outcome::kAborted, Reason::kCanceled);
}

void Protocol::onDone(uint64_t from, const Done& m) {
  Transfer* x = openReceiver(m.key);
  if (x == nullptr || x->peer != from || x->nonce != m.nonce) {
    if (const uint64_t* committedBy = committed_.nonceOf(m.key); committedBy != nullptr && *committedBy == m.nonce) {
      counters_.add(telemetry::kDuplicatesDropped);  // our verdict was lost: say it again
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
void Protocol::tryComplete(Transfer& x) {
  if (!x.live() || !x.doneSeen || x.pendingOps != 0) return;
  if (x.landedBytes != x.bytes) {
    // The sender finished the attempt but bytes are missing: give stragglers 20 ms (once per
    // attempt, however often Done is repeated).
    if (!x.missingArmed) {
      x.missingArmed = true;
      x.landedAtArm = x.landedBytes;
      const PeerView* p = peer(x.peer);
      addTimer(now() + (p != nullptr ? std::max<std::chrono::microseconds>(kStragglerGrace, p->failoverGrace)
                                     : kStragglerGrace),
               x.id, TimerKind::kMissing, x.attempt);
    }
    return;
  }
  if (x.state != State::kInFlight) return;
  step(x, Event::kRemoteDone);
  if (x.done.bytes != x.bytes) {
    receiverAbort(x, Event::kFatalError, Status::kInvalidArgument, Reason::kSizeMismatch);
    return;
  }
  if (x.key.modelEpoch != epoch_) {
    receiverAbort(x, Event::kEpochMismatch, Status::kEpochMismatch, Reason::kEpochMismatch);
    return;
  }
  if (x.verify != Verify::kNone) {
    auto digest = digestBlocks(x);
    if (!digest.ok()) {
      receiverAbort(x, Event::kFatalError, digest.status(), Reason::kChecksum);
      return;
    }
    if (x.done.checksumKind != x.verify || *digest != x.done.checksum) {
      counters_.add(telemetry::kChecksumFailures);
      PACT_INFO("engine %s: %s checksum mismatch (attempt %u)", config_.name.c_str(),
                keyText(x.key).c_str(), x.attempt);
      if (!retryAttempt(x, Event::kVerifyFailed, Reason::kChecksum))
        receiverAbort(x, Event::kFatalError, Status::kChecksum, Reason::kChecksum);
      return;
    }
  }
  step(x, Event::kVerified);
  const uint64_t id = x.id;
  std::vector<BlockRef>& table = commitTable_;
  table.clear();
  for (const Extent& b : x.blocks) table.push_back({b.mr, b.offset, b.length});
  const bool refused = inject(fault_.reject, x.route);
  const bool accepted = !refused && (x.groupChunk || !hook_ || hook_(id, x.key, x.peer, table));
  if (!accepted) {
    if (x.matched) sendVerdict(x.peer, x.key, x.nonce, Outcome::kAborted, Reason::kRejected);
    settle(x, Event::kRejected, Status::kRejected);
    return;
  }
  committed_.insert(x.key, x.nonce);
  sendVerdict(x.peer, x.key, x.nonce, Outcome::kCommitted, Reason::kNone);
  settle(x, Event::kCommit, Status::kOk);
}

}  // namespace pact::engine
