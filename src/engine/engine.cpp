// Engine lifecycle, progress, timers, memory and the transfer bookkeeping both sides share.
#include "engine/engine.h"
#include "engine/peer.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "transport/service.h"
#include "transport/wire.h"
#include "ucx/devices.h"
#include "ucx/ucx_status.h"

namespace pact::engine {

namespace {

thread_local std::string tlsError;

constexpr size_t kTraceDefault = 1 << 16;

}  // namespace

Code fromStatus(Status s) {
  switch (s) {
    case Status::kOk: return Code::kOk;
    case Status::kInvalidArgument: return Code::kInvalidArg;
    case Status::kNoMemory: return Code::kNoMemory;
    case Status::kRemoteError: return Code::kPeerLost;
    case Status::kSystemError: return Code::kSystem;
    case Status::kTimeout: return Code::kTimedOut;
    case Status::kRefused: return Code::kRefused;
    case Status::kUnsupported: return Code::kInvalidArg;  // the configuration asks what the host lacks
    default: return Code::kInternal;
  }
}

const std::string& lastError() { return tlsError; }

Code fail(Code c, std::string msg) {
  tlsError = std::move(msg);
  return c;
}

const char* codeName(Code c) {
  switch (c) {
    case Code::kOk: return "PACT_OK";
    case Code::kInProgress: return "PACT_IN_PROGRESS";
    case Code::kInvalidArg: return "PACT_ERR_INVALID_ARG";
    case Code::kNoMemory: return "PACT_ERR_NO_MEMORY";
    case Code::kNotFound: return "PACT_ERR_NOT_FOUND";
    case Code::kTimedOut: return "PACT_ERR_TIMED_OUT";
    case Code::kEpochMismatch: return "PACT_ERR_EPOCH_MISMATCH";
    case Code::kPeerLost: return "PACT_ERR_PEER_LOST";
    case Code::kRefused: return "PACT_ERR_REFUSED";
    case Code::kChecksum: return "PACT_ERR_CHECKSUM";
    case Code::kRejected: return "PACT_ERR_REJECTED";
    case Code::kDeadline: return "PACT_ERR_DEADLINE";
    case Code::kDuplicate: return "PACT_ERR_DUPLICATE";
    case Code::kOutOfRange: return "PACT_ERR_OUT_OF_RANGE";
    case Code::kStale: return "PACT_ERR_STALE";
    case Code::kBusy: return "PACT_ERR_BUSY";
    case Code::kSystem: return "PACT_ERR_SYSTEM";
    case Code::kInternal: return "PACT_ERR_INTERNAL";
    case Code::kIncomplete: return "PACT_ERR_INCOMPLETE";
    case Code::kCanceled: return "PACT_ERR_CANCELED";
  }
  return "PACT_ERR_UNKNOWN";
}

Engine::Engine(const EngineConfig& config, const Params& params)
    : config_(config), params_(params), epoch_(config.modelEpoch),
      credits_(config.creditBudget == 0 ? kUnlimited : config.creditBudget),
      trace_(kTraceDefault) {
  creditSet_ = config.creditBudget != 0;
}

Code Engine::create(const EngineConfig& config, const Params& params, std::unique_ptr<Engine>* out) {
  std::unique_ptr<Engine> e(new Engine(config, params));
  if (e->config_.name.empty()) e->config_.name = "pact-" + std::to_string(::getpid());
  if (e->config_.name.size() > kMaxName)
    return fail(Code::kInvalidArg, "name: longer than " + std::to_string(kMaxName) + " bytes");
  if (Code c = e->init(); c != Code::kOk) return c;
  *out = std::move(e);
  return Code::kOk;
}

Code Engine::init() {
  trace_ = telemetry::TraceRing(params_.trace_events);
  fault_ = params_.fault;
  if (fault_.active()) {
    static uint64_t engines = 0;  // each engine of a process draws its own sequence
    dice_ = FaultDice(fault_.seed, ++engines);
    PACT_WARN("engine %s: injecting faults: %s", config_.name.c_str(), fault_.describe().c_str());
    armKillAfter(fault_);
  }
  if (Code c = openContexts(); c != Code::kOk) return c;
  wakeFd_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wakeFd_.valid()) return fail(Code::kSystem, std::string("eventfd: ") + std::strerror(errno));
  if (!config_.listenIp.empty()) {
    auto l = transport::listenOn(config_.listenIp, config_.listenPort);
    if (!l.ok()) return fail(fromStatus(l.status()), "listen on " + config_.listenIp + ":" +
                                                         std::to_string(config_.listenPort) +
                                                         ": " + l.error().message);
    listener_ = std::move(*l);
    listening_ = true;
  }
  if (config_.progressThread) thread_ = std::thread([this] { runProgressThread(); });
  return Code::kOk;
}

Engine::~Engine() { shutdown(); }

void Engine::shutdown() {
  {
    std::unique_lock lock(mu_);
    stop_ = true;
  }
  wake();
  if (thread_.joinable()) thread_.join();
  std::unique_lock lock(mu_);
  // Abort what is open, tell the peers, and wait (bounded) until no UCX operation touches
  // application memory.
  forEachLive([](const Transfer&) { return true; }, [&](Transfer& x) {
    if (x.role == Role::kReceiver) {
      receiverAbort(x, Event::kFatalError, Code::kPeerLost, Reason::kShutdown);
    } else {
      senderWithdraw(x, Code::kPeerLost, false);
    }
  });
  // Drain while the peers are still connected: a sender told of the abort stops, and UCX still
  // completes the rendezvous it had under way (a Bye first would make the peer force-close its
  // endpoints, and those receives would never end: a 2 s stall, then a leaked worker).
  const auto limit = now() + std::chrono::seconds(2);
  auto busy = [&] {
    return std::any_of(xfers_.begin(), xfers_.end(), [](auto& kv) { return kv.second->pendingOps > 0; });
  };
  while (busy() && now() < limit) progressWorkers();
  for (auto& [id, p] : peers_) {
    if (p->phase == Peer::Phase::kReady) ignore(p->socket.send(wire::encodeBye()));
  }
  // Forced: a peer that no longer progresses would hold a flushing close for its timeout.
  for (auto& [id, p] : peers_) closePeerEndpoints(*p);
  if (!registrations_.empty())
    PACT_WARN("engine %s destroyed with %zu registrations still open (released now)",
              config_.name.c_str(), registrations_.size());
  registrations_.clear();
  if (busy()) {
    // A receive still writes into (or a send reads from) application memory: UCX would assert
    // on destroying the worker; leaking it is the lesser harm (see ucx/worker.h).
    PACT_WARN("engine %s: UCX operations still pending at shutdown; leaking the workers",
              config_.name.c_str());
    for (Context& c : contexts_)
      for (size_t i = 0; i < c.dev->rails(); ++i) {
        c.dev->rail(i).worker.abandon();
        c.dev->rail(i).context.abandon();
      }
  }
  peers_.clear();
}

// ---- progress ----------------------------------------------------------------------------------

Code Engine::progress(int timeoutMs) {
  std::unique_lock lock(mu_);
  if (progressLocked() == 0 && timeoutMs > 0 && !config_.progressThread)
    sleepLocked(lock, timeoutMs);
  return Code::kOk;
}

int Engine::progressLocked() {
  int events = 0;
  for (int i = 0; i < 64; ++i) {
    const unsigned n = progressWorkers();
    if (n == 0) break;
    events += static_cast<int>(n);
  }
  pumpLanes();
  // The sockets only carry handshakes and liveness: look at them every PACT_LIVENESS_INTERVAL
  // (every call while a handshake is under way), not on every spin of a busy progress loop.
  const TimePoint t = now();
  if (handshaking_ > 0 || t - lastSocketCheck_ >= params_.liveness_interval) {
    lastSocketCheck_ = t;
    events += acceptConnections();
    events += pollPeers();
  }
  events += fireTimers();
  if (events > 0) cv_.notify_all();
  return events;
}

void Engine::wake() {
  const uint64_t one = 1;
  ssize_t n = ::write(wakeFd_.get(), &one, sizeof one);
  (void)n;
}

// Sleeps until the worker, a socket or wake() has something, or the next timer, at most timeoutMs.
void Engine::sleepLocked(std::unique_lock<std::mutex>& lock, int timeoutMs) {
  if (!armWorkers()) return;  // busy: events are pending already
  std::vector<pollfd> fds{{wakeFd_.get(), POLLIN, 0}};
  for (const Context& c : contexts_)
    for (int fd : c.eventFds) fds.push_back({fd, POLLIN, 0});
  if (listening_) fds.push_back({listener_.fd.get(), POLLIN, 0});
  for (auto& [id, p] : peers_) {
    if (p->phase == Peer::Phase::kLost) continue;
    short ev = POLLIN;
    if (p->phase == Peer::Phase::kHandshake) ev |= POLLOUT;
    fds.push_back({p->socket.fd(), ev, 0});
  }
  int wait = timeoutMs;
  if (!timers_.empty()) {
    auto until = std::chrono::duration_cast<std::chrono::milliseconds>(timers_.begin()->first - now());
    wait = std::clamp(static_cast<int>(until.count()) + 1, 0, timeoutMs);
  }
  lock.unlock();
  ::poll(fds.data(), fds.size(), wait);
  uint64_t drained = 0;
  ssize_t n = ::read(wakeFd_.get(), &drained, sizeof drained);
  (void)n;
  lock.lock();
}

void Engine::runProgressThread() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    if (progressLocked() == 0) sleepLocked(lock, 100);
  }
}

bool Engine::waitFor(std::unique_lock<std::mutex>& lock, int timeoutMs,
                     const std::function<bool()>& pred) {
  const auto limit = now() + std::chrono::milliseconds(std::max(timeoutMs, 0));
  while (!pred()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(limit - now());
    if (left.count() <= 0) return pred();
    if (config_.progressThread) {
      cv_.wait_for(lock, std::min(left, std::chrono::milliseconds(100)));
    } else if (progressLocked() == 0) {
      sleepLocked(lock, static_cast<int>(std::min<int64_t>(left.count(), 10)));
    }
  }
  return true;
}

void Engine::addTimer(TimePoint at, uint64_t id, TimerKind kind, uint32_t attempt) {
  if (at == TimePoint::max()) return;
  timers_.emplace(at, Timer{id, kind, attempt});
  if (config_.progressThread) wake();
}

int Engine::fireTimers() {
  int fired = 0;
  const TimePoint t = now();
  while (!timers_.empty() && timers_.begin()->first <= t) {
    const Timer timer = timers_.begin()->second;
    timers_.erase(timers_.begin());
    if (timer.kind == TimerKind::kOffer) {
      fired += static_cast<int>(std::erase_if(offers_, [&](const auto& kv) { return kv.second.id == timer.id; }));
      continue;
    }
    if (timer.kind == TimerKind::kHandshake) {
      auto it = peers_.find(timer.id);
      if (it != peers_.end() && it->second->phase == Peer::Phase::kHandshake) {
        peerLost(*it->second, "no handshake from the peer within PACT_PEER_TIMEOUT");
        ++fired;
      }
      continue;
    }
    auto it = xfers_.find(timer.id);
    if (it == xfers_.end() || !it->second->live()) continue;
    Transfer& x = *it->second;
    // A grace or resend timer of an earlier attempt: that attempt is over.
    if (timer.kind != TimerKind::kDeadline && timer.attempt != x.attempt) continue;
    ++fired;
    if (timer.kind == TimerKind::kDeadline) {
      if (x.role == Role::kReceiver) {
        receiverAbort(x, Event::kDeadline, Code::kDeadline, Reason::kDeadline);
      } else {
        settle(x, Event::kDeadline, Code::kDeadline);
      }
    } else if (timer.kind == TimerKind::kMissing) {
      checkMissing(x);
    } else if (x.role == Role::kSender && x.piecesPosted && x.pendingOps == 0) {
      sendDone(x);  // the receiver's verdict did not come: say Done again
    }
  }
  return fired;
}

// ---- transfers ---------------------------------------------------------------------------------

std::string Engine::keyText(const TransferKey& k) {
  return "(request " + std::to_string(k.requestId) + ", transfer " + std::to_string(k.transferId) +
         ", epoch " + std::to_string(k.modelEpoch) + ", generation " + std::to_string(k.generation) + ")";
}

Code Engine::checkBlocks(std::span<const BlockRef> blocks, uint64_t* bytes) {
  if (blocks.empty() || blocks.size() > kMaxBlocks)
    return fail(Code::kInvalidArg, "blocks: count " + std::to_string(blocks.size()) + " outside 1.." +
                                       std::to_string(kMaxBlocks));
  uint64_t total = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const BlockRef& b = blocks[i];
    const std::string field = "blocks[" + std::to_string(i) + "]";
    const bool known = std::any_of(registrations_.begin(), registrations_.end(),
                                   [&](const auto& r) { return r.get() == b.mr; });
    if (!known) return fail(Code::kNotFound, field + ": unknown registration");
    if (b.length == 0) return fail(Code::kInvalidArg, field + ": length 0");
    if (b.offset > b.mr->length || b.length > b.mr->length - b.offset)
      return fail(Code::kOutOfRange, field + ": offset " + std::to_string(b.offset) + " + length " +
                                         std::to_string(b.length) + " exceeds the registration (" +
                                         std::to_string(b.mr->length) + " bytes)");
    total += b.length;
  }
  *bytes = total;
  return Code::kOk;
}

Transfer& Engine::newTransfer(Role role, const TransferKey& key, std::span<const BlockRef> blocks,
                              size_t route, uint64_t peer, uint64_t deadlineUs) {
  const Profile& profile = routes_[route].profile;
  auto x = std::make_unique<Transfer>();
  x->id = nextId_++;
  x->role = role;
  x->key = key;
  x->created = now();
  x->peer = peer;
  x->verify = profile.verify;
  x->retriesLeft = profile.retries;
  x->route = route;
  for (const BlockRef& b : blocks) {
    x->blocks.push_back({b.mr, b.mr->addr + b.offset, b.offset, b.length});
    x->bytes += b.length;
    ++b.mr->users;
  }
  const auto budget = deadlineUs != 0 ? std::chrono::microseconds(deadlineUs) : profile.timeout;
  if (budget.count() > 0) x->deadline = x->created + budget;
  Transfer& ref = *x;
  xfers_.emplace(ref.id, std::move(x));
  ++stats_.openTransfers;
  addTimer(ref.deadline, ref.id, TimerKind::kDeadline);
  trace_.record({telemetry::monotonicNs(), key.requestId, key.transferId, key.modelEpoch,
                 key.generation, peer, static_cast<uint8_t>(role), static_cast<uint8_t>(State::kAllocated),
                 0xff});
  return ref;
}

// The one place a transfer changes state: through the transition table, recorded in the trace.
bool Engine::step(Transfer& x, Event e) {
  auto to = next(x.state, e);
  if (!to) {
    PACT_DEBUG("engine %s: %s %s ignores %s", config_.name.c_str(), keyText(x.key).c_str(),
               stateName(x.state), eventName(e));
    return false;
  }
  x.state = *to;
  trace_.record({telemetry::monotonicNs(), x.key.requestId, x.key.transferId, x.key.modelEpoch,
                 x.key.generation, x.peer, static_cast<uint8_t>(x.role), static_cast<uint8_t>(*to),
                 static_cast<uint8_t>(e)});
  return true;
}

// Ends the transfer: COMMITTED (e == kCommit) or ABORTED with result. Gives back the sender's
// credit view; the receiver's credit goes back in releaseCredit.
void Engine::settle(Transfer& x, Event e, Code result) {
  if (!x.live()) return;
  if (!step(x, e)) {
    // e.g. a deadline in a state the table has no edge for: every live state can abort fatally.
    if (!step(x, Event::kFatalError)) return;
  }
  x.settled = true;
  x.result = result;
  if (result == Code::kOk) {
    ++stats_.committed;
  } else {
    ++stats_.aborted;
  }
  if (x.role == Role::kSender) {
    sending_.erase({x.peer, x.key.requestId, x.key.transferId, x.key.generation});
    auto it = peers_.find(x.peer);
    if (it != peers_.end() && x.state != State::kAllocated && x.remoteBlocks.size() > 0)
      it->second->creditInUse -= std::min(it->second->creditInUse, x.bytes);
  } else {
    receiving_.erase({x.key.requestId, x.key.transferId, x.key.generation});
    waitingCredit_.remove(x.id);
    releaseCredit(x);
  }
  cv_.notify_all();
  maybeFinish(x);
}

// Frees the transfer once the application released it and nothing touches its blocks.
void Engine::maybeFinish(Transfer& x) {
  if (!x.final() || !x.userReleased) return;
  step(x, Event::kRelease);
  for (Extent& b : x.blocks) --b.mr->users;
  --stats_.openTransfers;
  xfers_.erase(x.id);
}

void Engine::opDone(uint64_t xferId) {
  auto it = xfers_.find(xferId);
  if (it == xfers_.end()) return;
  Transfer& x = *it->second;
  --x.pendingOps;
  if (x.pendingOps == 0) {
    cv_.notify_all();
    maybeFinish(x);
  }
}

void Engine::forEachLive(const std::function<bool(const Transfer&)>& pred,
                         const std::function<void(Transfer&)>& fn) {
  std::vector<uint64_t> ids;
  for (auto& [id, x] : xfers_) {
    if (x->live() && pred(*x)) ids.push_back(id);
  }
  for (uint64_t id : ids) {
    auto it = xfers_.find(id);
    if (it != xfers_.end() && it->second->live()) fn(*it->second);
  }
}

const Transfer* Engine::find(uint64_t xfer) const {
  auto it = xfers_.find(xfer);
  return it == xfers_.end() ? nullptr : it->second.get();
}

// A released transfer stays queryable until it is final (then the engine frees it): so the
// application can wait for an aborted transfer's blocks to be free again.
Code Engine::query(uint64_t xfer, XferInfo* info) {
  std::lock_guard lock(mu_);
  const Transfer* x = find(xfer);
  if (x == nullptr)
    return fail(Code::kNotFound, "transfer " + std::to_string(xfer) + ": unknown or released");
  *info = {x->state, x->result, x->final(), x->retries, x->key, x->peer, x->bytes};
  return Code::kOk;
}

Code Engine::wait(uint64_t xfer, int timeoutMs, XferInfo* info) {
  std::unique_lock lock(mu_);
  const Transfer* x = find(xfer);
  if (x == nullptr)
    return fail(Code::kNotFound, "transfer " + std::to_string(xfer) + ": unknown or released");
  *info = {x->state, x->result, x->final(), x->retries, x->key, x->peer, x->bytes};
  // Progress may free a released transfer once final: look it up again each time.
  const bool done = waitFor(lock, timeoutMs, [&] {
    x = find(xfer);
    if (x != nullptr) *info = {x->state, x->result, x->final(), x->retries, x->key, x->peer, x->bytes};
    return x == nullptr || x->final();
  });
  if (x == nullptr) {  // released and now freed: it was final
    info->state = State::kReleased;
    info->final = true;
  }
  if (!done)
    return fail(Code::kTimedOut, "transfer " + keyText(info->key) + " still " +
                                     stateName(info->state) + " after " + std::to_string(timeoutMs) +
                                     " ms");
  return Code::kOk;
}

void Engine::rememberCanceled(const TransferKey& k) {
  const auto key = std::make_tuple(k.requestId, k.transferId, k.generation);
  if (!canceled_.insert(key).second) return;
  canceledOrder_.push_back(key);
  if (canceledOrder_.size() > (1u << 12)) {
    canceled_.erase(canceledOrder_.front());
    canceledOrder_.pop_front();
  }
}

Code Engine::release(uint64_t xfer) {
  std::lock_guard lock(mu_);
  return releaseLocked(xfer);
}

Code Engine::releaseLocked(uint64_t xfer) {
  auto it = xfers_.find(xfer);
  if (it == xfers_.end() || it->second->userReleased)
    return fail(Code::kNotFound, "transfer " + std::to_string(xfer) + ": unknown or released");
  Transfer& x = *it->second;
  x.userReleased = true;
  if (!x.live()) {
    maybeFinish(x);
  } else if (x.role == Role::kReceiver) {  // settling frees it once nothing touches its blocks
    if (!x.matched) rememberCanceled(x.key);
    receiverAbort(x, Event::kFatalError, Code::kCanceled, Reason::kCanceled);
  } else {
    senderWithdraw(x, Code::kCanceled, true);
  }
  return find(xfer) == nullptr ? Code::kOk : Code::kInProgress;
}

// ---- memory ------------------------------------------------------------------------------------

Code Engine::registerMemory(void* addr, size_t length, Registration** out) {
  if (addr == nullptr || length == 0)
    return fail(Code::kInvalidArg, "mem_register: NULL address or length 0");
  std::lock_guard lock(mu_);
  auto r = std::make_unique<Registration>();
  r->addr = static_cast<uint8_t*>(addr);
  r->length = length;
  for (Context& c : contexts_) {
    for (size_t i = 0; i < c.dev->rails(); ++i) {
      auto region = c.dev->rail(i).cache->acquire({addr, length, ucx::MemoryType::kHost, -1, 0});
      if (!region.ok()) return fail(fromStatus(region.status()), "mem_register: " + region.error().message);
      r->regions.push_back(std::move(region.value()));
    }
  }
  *out = r.get();
  registrations_.push_back(std::move(r));
  return Code::kOk;
}

Code Engine::deregister(Registration* mr) {
  if (mr == nullptr) return Code::kOk;
  std::lock_guard lock(mu_);
  auto it = std::find_if(registrations_.begin(), registrations_.end(),
                         [&](const auto& r) { return r.get() == mr; });
  if (it == registrations_.end()) return fail(Code::kNotFound, "mem_deregister: unknown registration");
  if (mr->users > 0)
    return fail(Code::kBusy, "mem_deregister: " + std::to_string(mr->users) +
                                 " unreleased transfers use the registration");
  registrations_.erase(it);
  return Code::kOk;
}

Stats Engine::stats() {
  std::lock_guard lock(mu_);
  Stats s = stats_;
  s.openRegistrations = registrations_.size();
  s.stagedBytes = credits_.staged();
  s.peakStagedBytes = credits_.peak();
  s.creditBudget = credits_.total();
  return s;
}

size_t Engine::traceRead(uint64_t* cursor, telemetry::TraceEvent* out, size_t max) {
  std::lock_guard lock(mu_);
  return trace_.read(cursor, out, max);
}

}  // namespace pact::engine
