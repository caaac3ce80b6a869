// The protocol's bookkeeping both sides share: creation, the one place a transfer changes
// state, settling and freeing, timers, queries, the peer table, teardown.
#include "engine/protocol.h"

#include <algorithm>
#include <atomic>
#include <random>

#include "common/log.h"

namespace pact::engine {

Protocol::Protocol(const ProtocolConfig& config, Link& link)
    : config_(config), link_(link), epoch_(config.epoch),
      credits_(config.creditBudget == 0 ? kUnlimited : config.creditBudget),
      committed_(config.exactlyOnceWindow, &pool_), generations_(config.exactlyOnceWindow, &pool_),
      counters_(telemetry::kEngineCatalog, "engine " + config.name, {{"engine", config.name}}), trace_(config.traceEvents),
      fault_(config.fault) {
  creditSet_ = config.creditBudget != 0;
  syncCredit();
  for (size_t r = 0; r < std::max<size_t>(config.routes.size(), 1); ++r)
    classes_.push_back(&telemetry::classCounters(
        "engine", r < config.routeNames.size() ? config.routeNames[r] : r == 0 ? "DEFAULT" : std::to_string(r)));
  if (fault_.active()) {
    static uint64_t protocols = 0;  // each engine of a process draws its own sequence
    dice_ = FaultDice(fault_.seed, ++protocols);
  }
}

uint64_t Protocol::freshNonceBase() {
  // Random high bits (two engines, or an engine and its restarted self, never share them in
  // practice), a count of the process's engines in the middle, the transfer id added below.
  static std::atomic<uint64_t> engines{0};
  std::random_device rd;
  const uint64_t high = (static_cast<uint64_t>(rd()) << 32 | rd()) & ~((uint64_t{1} << 48) - 1);
  return high | (engines.fetch_add(1) & 0xffff) << 32;
}

Protocol::PeerView* Protocol::peer(uint64_t id) {
  auto it = peers_.find(id);
  return it == peers_.end() || it->second.lost ? nullptr : &it->second;
}

void Protocol::peerReady(uint64_t id, const std::string& name) {
  peers_[id].name = name;
  link_.sendControl(id, CreditUpdate{credits_.grantFor(id)});  // the new peer's credit share
}

void Protocol::markGroupChunk(uint64_t xfer, uint64_t source) {
  Transfer& x = *xfers_.at(xfer);
  x.groupChunk = true;
  if (x.role != Role::kReceiver) return;
  x.source = source;
  if (auto it = peers_.find(source); it != peers_.end() && it->second.lost)
    receiverAbort(x, Event::kFatalError, Status::kRemoteError, Reason::kPeerLost);
}

void Protocol::peerLost(uint64_t id, Status status) {
  // Its transfers, and the group chunks still expected from it (not yet offered: peer is 0).
  const auto fromLost = [&](const Transfer& x) { return x.peer == id || (x.peer == 0 && x.source == id); };
  forEachLive(fromLost, [&](Transfer& x) {
    if (x.role == Role::kReceiver) {
      receiverAbort(x, Event::kFatalError, status, Reason::kPeerLost);
    } else {
      settle(x, Event::kFatalError, status);
    }
  });
  std::erase_if(offers_, [&](auto& kv) { return kv.second.peer == id; });
  if (auto it = peers_.find(id); it != peers_.end()) it->second.lost = true;  // its credit view stays readable
}

int Protocol::abandonSends(uint64_t peer) {
  std::vector<uint64_t> ids;
  int n = 0;
  for (auto& [id, x] : xfers_) {
    if (x->peer != peer || x->role != Role::kSender || x->pendingOps == 0) continue;
    n += x->pendingOps;
    x->abandonedOps += x->pendingOps;
    x->pendingOps = 0;
    ids.push_back(id);
  }
  for (uint64_t id : ids)
    if (auto it = xfers_.find(id); it != xfers_.end()) maybeFinish(*it->second);
  return n;
}

void Protocol::setRailFailover(uint64_t id, std::chrono::microseconds grace) {
  peers_[id].failoverGrace = grace;
}

void Protocol::railOut(uint64_t id) {
  forEachLive([&](const Transfer& x) { return x.peer == id; }, [&](Transfer& x) {
    if (x.role == Role::kSender && !x.eager && x.state == State::kAllocated) {
      link_.sendControl(id, Offer{x.key, x.bytes, remainingUs(x.deadline), kOfferRepeat, Verify::kNone, 0, x.nonce});
    } else if (x.role == Role::kReceiver && x.advertised && !x.doneSeen && x.landedBytes == 0) {
      sendAdvertise(x);  // the sender takes it only while it still waits for one
    }
  });
}

Status Protocol::peerCredit(uint64_t id, uint64_t* budget, uint64_t* inUse) const {
  auto it = peers_.find(id);
  if (it == peers_.end()) return fail(Status::kNotFound, "peer " + std::to_string(id) + ": unknown");
  *budget = it->second.creditBudget;
  *inUse = it->second.creditInUse;
  return Status::kOk;
}

void Protocol::onControl(uint64_t from, const Control& m) {
  if (peer(from) == nullptr) return;  // from a connection already lost
  std::visit(
      [&](const auto& msg) {
        using T = std::decay_t<decltype(msg)>;
        if constexpr (std::is_same_v<T, Offer>) onOffer(from, msg);
        else if constexpr (std::is_same_v<T, Done>) onDone(from, msg);
        else if constexpr (std::is_same_v<T, Advertise>) onAdvertise(from, msg);
        else if constexpr (std::is_same_v<T, Verdict>) onVerdict(from, msg);
        else if constexpr (std::is_same_v<T, EpochChange>) onEpochChange(from, msg);
        else if constexpr (std::is_same_v<T, Cancel>) onCancel(from, msg);
        else if constexpr (std::is_same_v<T, CreditUpdate>) {
          peers_[from].creditBudget = msg.budgetBytes;
          peers_[from].creditKnown = true;
        }
        else PACT_WARN("engine %s: unexpected handshake message from %s", config_.name.c_str(),
                       peers_[from].name.c_str());
      },
      m);
}

void Protocol::releaseEager(Transfer& x, PeerView& p) {
  if (!x.eagerHeld) return;
  p.eagerInFlight -= std::min(p.eagerInFlight, x.bytes);
  x.eagerHeld = false;
}

void Protocol::onEager(uint64_t from, const Offer& m, const uint8_t* data, size_t length) {
  if (peer(from) == nullptr) return;
  if (data != nullptr && length != m.bytes) {
    PACT_WARN("engine %s: eager offer %s from %s carries %zu bytes, says %lu: bytes dropped",
              config_.name.c_str(), keyText(m.key).c_str(), peers_[from].name.c_str(), length,
              static_cast<unsigned long>(m.bytes));
    data = nullptr;  // the offer stands; the bytes come again as pieces
  }
  onOffer(from, m, data);
}

void Protocol::abortAll() {
  forEachLive([](const Transfer&) { return true; }, [&](Transfer& x) {
    if (x.role == Role::kReceiver) {
      receiverAbort(x, Event::kFatalError, Status::kRemoteError, Reason::kShutdown);
    } else {
      senderWithdraw(x, Status::kRemoteError, false);
    }
  });
}

bool Protocol::busy() const {
  return std::any_of(xfers_.begin(), xfers_.end(), [](auto& kv) { return kv.second->pendingOps > 0; });
}

Status Protocol::query(uint64_t xfer, XferInfo* info) const {
  const Transfer* x = find(xfer);
  if (x == nullptr)
    return fail(Status::kNotFound, "transfer " + std::to_string(xfer) + ": unknown or released");
  *info = {x->state, x->result, x->final(), x->retries, x->key, x->peer, x->bytes};
  return Status::kOk;
}

void Protocol::syncCredit() {
  counters_.set(telemetry::kStagedBytes, credits_.staged());
  counters_.set(telemetry::kPeakStagedBytes, credits_.peak());
  counters_.set(telemetry::kCreditBudget, credits_.total());
}

int Protocol::fireTimers() {
  return timers_.popDue(now(), [&](const Timers<TimerKind>::Timer& timer) {
    if (timer.kind == TimerKind::kOffer)
      return std::erase_if(offers_, [&](const auto& kv) { return kv.second.id == timer.id; }) > 0;
    auto it = xfers_.find(timer.id);
    if (it == xfers_.end() || !it->second->live()) return false;
    Transfer& x = *it->second;
    // A grace or resend timer of an earlier attempt: that attempt is over.
    if (timer.kind != TimerKind::kDeadline && timer.attempt != x.attempt) return false;
    if (timer.kind == TimerKind::kDeadline) {
      if (x.role == Role::kReceiver) {
        receiverAbort(x, Event::kDeadline, Status::kDeadline, Reason::kDeadline);
      } else {
        settle(x, Event::kDeadline, Status::kDeadline);
      }
    } else if (timer.kind == TimerKind::kMissing) {
      checkMissing(x);
    } else if (x.role == Role::kSender && x.eager && x.state == State::kAllocated) {
      repeatOffer(x);  // no verdict and no advertisement for the eager offer yet
    } else if (x.role == Role::kSender && x.piecesPosted && x.pendingOps == 0) {
      sendDone(x);  // the receiver's verdict did not come: say Done again
    }
    return true;
  });
}

std::string Protocol::keyText(const TransferKey& k) {
  return "(request " + std::to_string(k.requestId) + ", transfer " + std::to_string(k.transferId) +
         ", epoch " + std::to_string(k.modelEpoch) + ", generation " + std::to_string(k.generation) + ")";
}

Transfer& Protocol::newTransfer(Role role, const TransferKey& key, std::span<const BlockRef> blocks,
                              size_t route, uint64_t peer, uint64_t deadlineUs) {
  const Profile& profile = config_.routes[route];
  std::unique_ptr<Transfer> x;
  if (spare_.empty()) {
    x = std::make_unique<Transfer>();
  } else {
    x = std::move(spare_.back());
    spare_.pop_back();
    x->reset();
  }
  x->id = nextId_++;
  x->nonce = role == Role::kSender ? nonceBase_ + x->id : 0;
  x->role = role;
  x->key = key;
  x->created = now();
  x->peer = peer;
  x->verify = profile.verify;
  x->retriesLeft = profile.retries;
  x->route = route;
  for (const BlockRef& b : blocks) {
    x->blocks.push_back({b.mr, b.mr->addr + b.offset, b.offset, b.length, b.mr->type});
    x->bytes += b.length;
    ++b.mr->users;
  }
  const auto budget = deadlineUs != 0 ? std::chrono::microseconds(deadlineUs) : profile.timeout;
  if (budget.count() > 0) x->deadline = x->created + budget;
  Transfer& ref = *x;
  xfers_.emplace(ref.id, std::move(x));
  counters_.add(telemetry::kOpenTransfers);
  addTimer(ref.deadline, ref.id, TimerKind::kDeadline);
  trace_.record({telemetry::monotonicNs(), key, peer, static_cast<uint8_t>(role),
                 static_cast<uint8_t>(State::kAllocated), 0xff});
  return ref;
}

// The one place a transfer changes state: through the transition table, recorded in the trace.
bool Protocol::step(Transfer& x, Event e) {
  auto to = next(x.state, e);
  if (!to) {
    PACT_DEBUG("engine %s: %s %s ignores %s", config_.name.c_str(), keyText(x.key).c_str(),
               stateName(x.state), eventName(e));
    return false;
  }
  x.state = *to;
  trace_.record({telemetry::monotonicNs(), x.key, x.peer, static_cast<uint8_t>(x.role),
                 static_cast<uint8_t>(*to), static_cast<uint8_t>(e)});
  return true;
}

namespace {
// The class scope's kind of an aborted transfer's result.
telemetry::ErrorKind errorKindOf(Status s) {
  using K = telemetry::ErrorKind;
  switch (s) {
    case Status::kRemoteError:  // the peer is gone, or a piece could not reach it
    case Status::kPeerStale: return K::kPeerLost;
    case Status::kDeadline:
    case Status::kTimeout: return K::kDeadline;
    case Status::kChecksum:
    case Status::kIncomplete: return K::kRetries;
    case Status::kRejected:
    case Status::kEpochMismatch:
    case Status::kStale:
    case Status::kDuplicate:
    case Status::kRefused: return K::kRefused;
    case Status::kOutOfRange:
    case Status::kTruncated: return K::kOutOfRange;
    case Status::kCanceled: return K::kCanceled;
    default: return K::kOther;
  }
}
}  // namespace

// Ends the transfer: COMMITTED (e == kCommit) or ABORTED with result. Gives back the sender's
// credit view; the receiver's credit goes back in releaseCredit.
void Protocol::settle(Transfer& x, Event e, Status result) {
  if (!x.live()) return;
  if (!step(x, e)) {
    // e.g. a deadline in a state the table has no edge for: every live state can abort fatally.
    if (!step(x, Event::kFatalError)) return;
  }
  x.settled = true;
  x.result = result;
  telemetry::CounterSet& cls = classOf(x.route);
  if (result == Status::kOk) {
    counters_.add(telemetry::kCommitted);
    const bool sent = x.role == Role::kSender;
    cls.addShared(sent ? telemetry::kClassMessagesSent : telemetry::kClassMessagesReceived);
    cls.addShared(sent ? telemetry::kClassBytesSent : telemetry::kClassBytesReceived, x.bytes);
  } else {
    counters_.add(telemetry::kAborted);
    cls.addShared(telemetry::classError(errorKindOf(result)));
  }
  if (x.role == Role::kSender) {
    sending_.erase({x.peer, x.key});
    PeerView* p = peer(x.peer);
    if (p != nullptr && x.creditHeld) p->creditInUse -= std::min(p->creditInUse, x.bytes);
    if (p != nullptr) releaseEager(x, *p);
    x.creditHeld = false;
  } else {
    receiving_.erase(x.key);
    waitingCredit_.remove(x.id);
    releaseCredit(x);
  }
  maybeFinish(x);
}

// Frees the transfer once the application released it and nothing touches its blocks.
void Protocol::maybeFinish(Transfer& x) {
  if (!x.final() || !x.userReleased) return;
  step(x, Event::kRelease);
  for (Extent& b : x.blocks) --b.mr->users;
  timers_.cancel(x.deadline, x.id, TimerKind::kDeadline);
  timers_.cancel(x.resendDoneAt, x.id, TimerKind::kResendDone);
  counters_.sub(telemetry::kOpenTransfers);
  auto it = xfers_.find(x.id);
  if (spare_.size() < kSpareTransfers) spare_.push_back(std::move(it->second));
  xfers_.erase(it);
}

void Protocol::opDone(uint64_t xferId) {
  auto it = xfers_.find(xferId);
  if (it == xfers_.end()) return;
  Transfer& x = *it->second;
  if (x.abandonedOps > 0) {  // one of those given up ended after all
    --x.abandonedOps;
    return;
  }
  --x.pendingOps;
  if (x.pendingOps == 0) maybeFinish(x);
}

void Protocol::forEachLive(FunctionRef<bool(const Transfer&)> pred, FunctionRef<void(Transfer&)> fn) {
  std::vector<uint64_t> ids = std::move(liveIds_);  // fn may come back here: each call its own list
  ids.clear();
  for (auto& [id, x] : xfers_) {
    if (x->live() && pred(*x)) ids.push_back(id);
  }
  for (uint64_t id : ids) {
    auto it = xfers_.find(id);
    if (it != xfers_.end() && it->second->live()) fn(*it->second);
  }
  liveIds_ = std::move(ids);
}

const Transfer* Protocol::find(uint64_t xfer) const {
  auto it = xfers_.find(xfer);
  return it == xfers_.end() ? nullptr : it->second.get();
}

void Protocol::rememberCanceled(const TransferKey& k) {
  if (!canceled_.insert(k).second) return;
  canceledOrder_.push_back(k);
  if (canceledOrder_.size() > (1u << 12)) {
    canceled_.erase(canceledOrder_.front());
    canceledOrder_.pop_front();
  }
}

// A released transfer stays queryable until it is final (then the engine frees it): so the
// application can wait for an aborted transfer's blocks to be free again.
Status Protocol::release(uint64_t xfer) {
  auto it = xfers_.find(xfer);
  if (it == xfers_.end() || it->second->userReleased)
    return fail(Status::kNotFound, "transfer " + std::to_string(xfer) + ": unknown or released");
  Transfer& x = *it->second;
  x.userReleased = true;
  if (!x.live()) {
    maybeFinish(x);
  } else if (x.role == Role::kReceiver) {  // settling frees it once nothing touches its blocks
    if (!x.matched) rememberCanceled(x.key);
    receiverAbort(x, Event::kFatalError, Status::kCanceled, Reason::kCanceled);
  } else {
    senderWithdraw(x, Status::kCanceled, true);
  }
  return find(xfer) == nullptr ? Status::kOk : Status::kInProgress;
}

}  // namespace pact::engine
