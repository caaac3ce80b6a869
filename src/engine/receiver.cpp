// The receiver's side of a transfer, up to its bytes: expect, match with the sender's offer,
// grant credit and advertise, epoch changes, cancels, aborts. Landing, verify and commit:
// receiver_landing.cpp.
#include "engine/receiver.h"

#include <algorithm>

#include "common/log.h"

namespace pact::engine {

Receiver::Receiver(TransferTable& table, Link& link)
    : table_(table), link_(link), epoch_(table.config().epoch),
      credits_(table.config().creditBudget == 0 ? kUnlimited : table.config().creditBudget),
      classStaged_(table.pool()), offers_(table.pool()), receiving_(table.pool()),
      waitingCredit_(table.pool()),
      committed_(table.config().exactlyOnceWindow, table.pool()),
      generations_(table.config().exactlyOnceWindow, table.pool()),
      canceled_(table.pool()), canceledOrder_(table.pool()) {
  creditSet_ = table.config().creditBudget != 0;
  syncCredit();
}

Transfer* Receiver::openReceiver(const TransferKey& key) {
  auto it = receiving_.find(key);
  if (it == receiving_.end()) return nullptr;
  return table_.find(it->second);
}

void Receiver::peerReady(uint64_t id) {
  link_.sendControl(id, CreditUpdate{credits_.grantFor(id)});  // the new peer's credit share
}

void Receiver::peerLost(uint64_t id) {
  std::erase_if(offers_, [&](auto& kv) { return kv.second.peer == id; });
}

void Receiver::railOut(Transfer& x) {
  if (x.advertised && !x.doneSeen && x.landedBytes == 0) {
    sendAdvertise(x);  // the sender takes it only while it still waits for one
  }
}

bool Receiver::expireOffer(uint64_t id) {
  return std::erase_if(offers_, [&](const auto& kv) { return kv.second.id == id; }) > 0;
}

Result<void> Receiver::setEpoch(uint64_t epoch) {
  if (epoch == epoch_) return {};
  PACT_INFO("engine %s: model epoch %lu -> %lu", config().name.c_str(),
            static_cast<unsigned long>(epoch_), static_cast<unsigned long>(epoch));
  epoch_ = epoch;
  // Abort (and so revoke: out of receiving_, later pieces find nothing) every open transfer of
  // another epoch, and tell each sender.
  table_.forEachLive(
      [&](const Transfer& x) { return x.role == Role::kReceiver && x.key.modelEpoch != epoch; },
      [&](Transfer& x) {
        abort(x, Event::kEpochMismatch, Status::kEpochMismatch, Reason::kEpochMismatch);
      });
  for (auto it = offers_.begin(); it != offers_.end();) {
    if (it->second.offer.key.modelEpoch != epoch) {
      counters().add(telemetry::kStaleRejected);
      sendVerdict(it->second.peer, it->second.offer.key, it->second.offer.nonce, Outcome::kAborted, Reason::kEpochMismatch);
      it = offers_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& [id, p] : table_.peers()) link_.sendControl(id, EpochChange{epoch});
  return {};
}

Result<void> Receiver::setCredit(uint64_t to, uint64_t budget) {
  if (to != 0 && table_.peer(to) == nullptr)
    return Error{Status::kNotFound, "set_credit: unknown peer " + std::to_string(to)};
  creditSet_ = true;
  if (to == 0) {
    credits_.setTotal(budget);
    syncCredit();
    for (auto& [id, p] : table_.peers()) link_.sendControl(id, CreditUpdate{credits_.grantFor(id)});
  } else {
    credits_.setShare(to, budget);
    link_.sendControl(to, CreditUpdate{credits_.grantFor(to)});  // share or the total
  }
  advertiseWaiting();
  return {};
}

Result<uint64_t> Receiver::expect(const TransferKey& key, std::span<const BlockRef> blocks,
                                  uint64_t deadlineUs, size_t route) {
  if (key.modelEpoch != epoch_)
    return Error{Status::kEpochMismatch,
                 "expect " + keyText(key) + ": the receiver is on epoch " + std::to_string(epoch_)};
  if (committed_.contains(key) || openReceiver(key))
    return Error{Status::kDuplicate, "expect " + keyText(key) + ": already committed or open"};
  if (generations_.isStale(key))
    return Error{Status::kStale, "expect " + keyText(key) + ": a newer generation was expected already"};
  Transfer& x = table_.newTransfer(Role::kReceiver, key, blocks, route, 0, deadlineUs);
  generations_.note(key);
  if (canceled_.erase(key) != 0)  // expected anew
    std::erase_if(canceledOrder_, [&](const TransferKey& c) { return c.sameTransfer(key); });
  receiving_[key] = x.id;
  const uint64_t id = x.id;
  auto offer = offers_.find(key);
  if (offer != offers_.end()) {
    const PendingOffer pending = offer->second;
    offers_.erase(offer);
    if (table_.peer(pending.peer) != nullptr) {
      if (pending.offer.bytes != x.bytes) {
        sendVerdict(pending.peer, key, pending.offer.nonce, Outcome::kAborted, Reason::kSizeMismatch);
        x.peer = pending.peer;
        table_.settle(x, Event::kFatalError, Status::kInvalidArgument);
      } else {
        match(x, pending.peer, pending.offer);
      }
    }
  }
  return id;
}

void Receiver::onOffer(uint64_t from, const Offer& m, const uint8_t* data) {
  const TransferKey& k = m.key;
  if (k.modelEpoch != epoch_) {
    counters().add(telemetry::kStaleRejected);
    sendVerdict(from, k, m.nonce, Outcome::kAborted, Reason::kEpochMismatch);
    return;
  }
  // A newer generation is expected already: stale, even if this one once committed.
  if (generations_.isStale(k)) {
    counters().add(telemetry::kStaleRejected);
    sendVerdict(from, k, m.nonce, Outcome::kAborted, Reason::kStale);
    return;
  }
  const bool repeat = (m.flags & kOfferRepeat) != 0;
  if (const uint64_t* committedBy = committed_.nonceOf(k)) {
    // A copy of the committing send's offer (a wire duplicate, a repeat after a lost verdict):
    // its verdict again. Another send of the key: refused as a duplicate.
    counters().add(telemetry::kDuplicatesDropped);
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
      counters().add(telemetry::kDuplicatesDropped);
      sendVerdict(from, k, m.nonce, Outcome::kAborted, Reason::kDuplicate);
      return;
    }
    // Waits for the application's expect, at most until the sender's deadline (an eager
    // offer's bytes are not kept: they come as pieces once it is advertised).
    const uint64_t id = table_.takeId();
    offers_[k] = PendingOffer{from, m, id};
    if (m.deadlineUs != 0)
      table_.addTimer(now() + std::chrono::microseconds(m.deadlineUs), id, TimerKind::kOffer);
    return;
  }
  if (x->matched) {
    if (repeat && x->peer == from) return;  // it waits for credit, or its bytes are moving
    counters().add(telemetry::kDuplicatesDropped);  // a second offer of an open transfer
    if (x->peer != from) sendVerdict(from, k, m.nonce, Outcome::kAborted, Reason::kDuplicate);
    return;
  }
  if (m.bytes != x->bytes) {
    sendVerdict(from, k, m.nonce, Outcome::kAborted, Reason::kSizeMismatch);
    x->peer = from;
    table_.settle(*x, Event::kFatalError, Status::kInvalidArgument);
    return;
  }
  if (data != nullptr) {
    matchEager(*x, from, m, data);
  } else {
    match(*x, from, m);
  }
}

void Receiver::bindPeer(Transfer& x, uint64_t from, const Offer& offer) {
  x.matched = true;
  x.peer = from;
  x.nonce = offer.nonce;
  x.matchedAt = now();
  if (offer.deadlineUs != 0) {
    table_.advanceDeadline(x, x.matchedAt + std::chrono::microseconds(offer.deadlineUs));
  }
}

// The bytes land only where an Advertise would have been sent at once (the credit fits: first
// fit, as advertiseWaiting). Then they are checked and committed as if every piece and the Done
// had come; a failed check asks for them as pieces.
void Receiver::matchEager(Transfer& x, uint64_t from, const Offer& m, const uint8_t* data) {
  bindPeer(x, from, m);
  if (!credits_.fits(from, x.bytes) || !classCreditFits(x)) {
    match(x, from, m);  // advertised when credit comes; the bytes come as pieces
    return;
  }
  takeCredit(x);
  table_.step(x, Event::kEager);
  table_.step(x, Event::kPost);
  table_.step(x, Event::kSend);
  for (const Extent& b : x.blocks) {
    if (!copyIn(x, b, b.addr, data, b.length)) return;
    data += b.length;
  }
  maybeCorrupt(x, x.blocks.front().addr, x.blocks.front().length);
  x.eagerLanded = true;
  x.landedBytes = x.bytes;
  counters().add(telemetry::kBytesReceived, x.bytes);
  x.doneSeen = true;
  x.done = Done{x.key, x.attempt, m.bytes, m.checksumKind, m.checksum, m.nonce};
  tryComplete(x);
}

void Receiver::match(Transfer& x, uint64_t from, const Offer& offer) {
  if (!x.matched) bindPeer(x, from, offer);
  // Larger than the budget its sender is held to: it waits until the application raises the
  // budget (a decode worker grants credit as pages free up), or until its deadline. Said once,
  // so that a wait without a deadline is never silent.
  const uint64_t limit = std::min(credits_.grantFor(from), credits_.total());
  if (limit != kUnlimited && x.bytes > limit)
    PACT_INFO("engine %s: %s (%lu bytes) waits for credit: the budget is %lu bytes%s",
              config().name.c_str(), keyText(x.key).c_str(), static_cast<unsigned long>(x.bytes),
              static_cast<unsigned long>(limit),
              x.deadline == TimePoint::max() ? " and the transfer has no deadline" : "");
  waitingCredit_.push_back(x.id);
  advertiseWaiting();
}

// Grants credit to every matched transfer that fits the budgets, oldest first (first fit: a
// large transfer does not hold back smaller ones behind it).
void Receiver::advertiseWaiting() {
  for (auto it = waitingCredit_.begin(); it != waitingCredit_.end();) {
    Transfer* xi = table_.find(*it);
    if (xi == nullptr || !xi->live()) {
      it = waitingCredit_.erase(it);
      continue;
    }
    Transfer& x = *xi;
    if (table_.peer(x.peer) == nullptr) {
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
bool Receiver::classCreditFits(const Transfer& x) const {
  const uint64_t budget = config().routes[x.route].credits;
  if (creditSet_ || budget == 0) return true;
  auto staged = classStaged_.find({x.peer, x.route});
  const uint64_t in = staged == classStaged_.end() ? 0 : staged->second;
  return in == 0 || in + x.bytes <= budget;
}

void Receiver::takeCredit(Transfer& x) {
  x.advertised = true;
  credits_.take(x.peer, x.bytes);
  classStaged_[{x.peer, x.route}] += x.bytes;
  counters().add(telemetry::kCreditStallNs, static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(now() - x.matchedAt).count()));
  syncCredit();
}

void Receiver::advertise(Transfer& x) {
  takeCredit(x);
  table_.step(x, Event::kAdvertise);
  sendAdvertise(x);
  table_.step(x, Event::kPost);  // the destination is posted: pieces may land from now on
}

void Receiver::sendAdvertise(Transfer& x) {
  // Room for the pieces once: blocks cut at 64 KiB on average (it grows if they are smaller).
  x.landed.reserve(std::min<size_t>(x.blocks.size() + x.bytes / (64 << 10), 1 << 16));
  if (!std::holds_alternative<Advertise>(advertiseOut_)) advertiseOut_ = Advertise{};
  Advertise& m = std::get<Advertise>(advertiseOut_);  // kept: its vectors keep their capacity
  m.rkey.clear();
  m.blocks.clear();
  m.key = x.key;
  m.deadlineUs = table_.remainingUs(x.deadline);
  m.creditBytes = x.bytes;
  m.regionLength = x.bytes;  // a virtual region: the blocks one after another
  uint64_t off = 0;
  for (const Extent& b : x.blocks) {
    m.blocks.push_back({off, b.length});
    off += b.length;
  }
  link_.sendControl(x.peer, advertiseOut_);
}

void Receiver::releaseCredit(Transfer& x) {
  if (!x.advertised) return;
  x.advertised = false;
  credits_.give(x.peer, x.bytes);
  syncCredit();
  auto staged = classStaged_.find({x.peer, x.route});
  if (staged != classStaged_.end() && (staged->second -= std::min(staged->second, x.bytes)) == 0)
    classStaged_.erase(staged);
  advertiseWaiting();
}

void Receiver::syncCredit() {
  counters().set(telemetry::kStagedBytes, credits_.staged());
  counters().set(telemetry::kPeakStagedBytes, credits_.peak());
  counters().set(telemetry::kCreditBudget, credits_.total());
}

// The receiver's part of settling: the key is no longer open here (later pieces find nothing),
// and its credit goes back (which may advertise transfers waiting for it).
void Receiver::settled(Transfer& x) {
  receiving_.erase(x.key);
  waitingCredit_.remove(x.id);
  releaseCredit(x);
}

void Receiver::sendVerdict(uint64_t to, const TransferKey& key, uint64_t nonce, Outcome o, Reason r,
                           uint32_t attempt) {
  if (o == Outcome::kCommitted && inject(fault().loseRemoteDone, TransferTable::kNoRoute)) return;
  if (table_.peer(to) != nullptr) link_.sendControl(to, Verdict{key, o, r, attempt, nonce});
}

void Receiver::abort(Transfer& x, Event e, Status result, Reason r) {
  if (!x.live()) return;
  if (x.matched) sendVerdict(x.peer, x.key, x.nonce, Outcome::kAborted, r);
  table_.settle(x, e, result);
}

// Settling frees the transfer once nothing touches its blocks.
void Receiver::release(Transfer& x) {
  if (!x.matched) rememberCanceled(x.key);
  abort(x, Event::kFatalError, Status::kCanceled, Reason::kCanceled);
}

void Receiver::rememberCanceled(const TransferKey& k) {
  if (!canceled_.insert(k).second) return;
  canceledOrder_.push_back(k);
  if (canceledOrder_.size() > (1u << 12)) {
    canceled_.erase(canceledOrder_.front());
    canceledOrder_.pop_front();
  }
}

void Receiver::onCancel(uint64_t from, const Cancel& m) {
  offers_.erase(m.key);  // an offer still waiting for its expect
  Transfer* x = openReceiver(m.key);
  const uint64_t* committedBy = committed_.nonceOf(m.key);
  if (x != nullptr && x->peer == from && x->nonce == m.nonce && x->live()) {
    PACT_INFO("engine %s: %s %s by the sender %s", config().name.c_str(), keyText(x->key).c_str(),
              m.closing ? "aborted (peer lost): its engine destroyed" : "canceled",
              table_.view(from).name.c_str());
    table_.settle(*x, Event::kFatalError, m.closing ? Status::kRemoteError : Status::kCanceled);
  } else if (m.answer && committedBy != nullptr && *committedBy == m.nonce) {
    sendVerdict(from, m.key, m.nonce, Outcome::kCommitted, Reason::kDuplicate);  // this send committed before
    return;
  }
  if (m.answer) sendVerdict(from, m.key, m.nonce, Outcome::kAborted, Reason::kCanceled);
}

}  // namespace pact::engine
