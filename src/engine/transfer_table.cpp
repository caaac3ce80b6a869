// The transfer table: creation, the one place a transfer changes state, settling and freeing,
// operations, queries, the peer table, checksums.
#include "engine/transfer_table.h"

#include "common/checksum.h"
#include "common/log.h"
#include "transport/memory_copy.h"

namespace pact::engine {

TransferTable::TransferTable(const ProtocolConfig& config)
    : config_(config),
      counters_(telemetry::kEngineCatalog, "engine " + config.name, {{"engine", config.name}}), trace_(config.traceEvents),
      fault_(config.fault) {
  for (size_t r = 0; r < std::max<size_t>(config.routes.size(), 1); ++r)
    classes_.push_back(&telemetry::classCounters(
        "engine", r < config.routeNames.size() ? config.routeNames[r] : r == 0 ? "DEFAULT" : std::to_string(r)));
  if (fault_.active()) {
    static uint64_t protocols = 0;  // each engine of a process draws its own sequence
    dice_ = FaultDice(fault_.seed, ++protocols);
  }
}

std::string keyText(const TransferKey& k) {
  return "(request " + std::to_string(k.requestId) + ", transfer " + std::to_string(k.transferId) +
         ", epoch " + std::to_string(k.modelEpoch) + ", generation " + std::to_string(k.generation) + ")";
}

TransferTable::PeerView* TransferTable::peer(uint64_t id) {
  auto it = peers_.find(id);
  return it == peers_.end() || it->second.lost ? nullptr : &it->second;
}

const TransferTable::PeerView* TransferTable::known(uint64_t id) const {
  auto it = peers_.find(id);
  return it == peers_.end() ? nullptr : &it->second;
}

void TransferTable::markLost(uint64_t id) {
  if (auto it = peers_.find(id); it != peers_.end()) it->second.lost = true;
}

Transfer& TransferTable::newTransfer(Role role, const TransferKey& key, std::span<const BlockRef> blocks,
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
bool TransferTable::step(Transfer& x, Event e) {
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

// Ends the transfer: COMMITTED (e == kCommit) or ABORTED with result. The side of its role then
// gives back what it held: the sender's credit view (Sender::settled), the receiver's credit
// (Receiver::settled, through releaseCredit).
void TransferTable::settle(Transfer& x, Event e, Status result) {
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
  (x.role == Role::kSender ? sender_ : receiver_)->settled(x);
  maybeFinish(x);
}

// Frees the transfer once the application released it and nothing touches its blocks.
void TransferTable::maybeFinish(Transfer& x) {
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

void TransferTable::opDone(uint64_t xferId) {
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

void TransferTable::forEachLive(FunctionRef<bool(const Transfer&)> pred, FunctionRef<void(Transfer&)> fn) {
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

const Transfer* TransferTable::find(uint64_t xfer) const {
  auto it = xfers_.find(xfer);
  return it == xfers_.end() ? nullptr : it->second.get();
}

Transfer* TransferTable::find(uint64_t xfer) {
  auto it = xfers_.find(xfer);
  return it == xfers_.end() ? nullptr : it->second.get();
}

bool TransferTable::busy() const {
  return std::any_of(xfers_.begin(), xfers_.end(), [](auto& kv) { return kv.second->pendingOps > 0; });
}

int TransferTable::abandonSends(uint64_t peer) {
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

Result<XferInfo> TransferTable::query(uint64_t xfer) const {
  const Transfer* x = find(xfer);
  if (x == nullptr)
    return Error{Status::kNotFound, "transfer " + std::to_string(xfer) + ": unknown or released"};
  return XferInfo{x->state, x->result, x->final(), x->retries, x->key, x->peer, x->bytes};
}

Result<uint64_t> TransferTable::digest(const Transfer& x) {
  Digest digest(x.verify);
  for (const Extent& b : x.blocks) {
    if (b.type != MemoryType::kHost && staging_.empty()) staging_.resize(kVerifyStagingBytes);
    Status s = transport::readStaged(config_.cudaDriver, b.addr, b.length, b.type, staging_,
                                     [&](const uint8_t* p, size_t n) { digest.update(p, n); });
    if (s != Status::kOk)
      return Error{s, "reading a GPU block for its checksum through the CUDA driver failed"};
  }
  return digest.value();
}

}  // namespace pact::engine
