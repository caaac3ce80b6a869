// The engine facade: lifecycle, progress (the workers, the sockets, the timers, the sleep), the
// application's calls (checked, then handed to the protocol), memory registration.
#include "engine/engine.h"
#include "engine/peer.h"
#include "engine/trace_file.h"
#include "telemetry/timeline.h"

#include <arpa/inet.h>
#include <poll.h>
#include <sched.h>
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



Engine::Engine(const EngineConfig& config, const Params& params)
    : config_(config), params_(params), driver_(&cuda::Driver::instance(params.cuda_driver)) {}

Result<std::unique_ptr<Engine>> Engine::create(const EngineConfig& config, const Params& params) {
  std::unique_ptr<Engine> e(new Engine(config, params));
  if (e->config_.name.empty()) e->config_.name = "pact-" + std::to_string(::getpid());
  if (e->config_.name.size() > kMaxName)
    return Error{Status::kInvalidArgument, "name: longer than " + std::to_string(kMaxName) + " bytes"};
  if (auto r = e->init(); !r) return r.error();
  return e;
}

Result<void> Engine::init() {
  if (params_.fault.active()) {
    PACT_WARN("engine %s: injecting faults: %s", config_.name.c_str(), params_.fault.describe().c_str());
    armKillAfter(params_.fault);
  }
  if (auto r = openContexts(); !r) return r;
  ProtocolConfig pc;
  pc.name = config_.name;
  pc.epoch = config_.modelEpoch;
  pc.creditBudget = config_.creditBudget;
  for (const Route& r : routes_) {
    pc.routes.push_back(r.profile);
    pc.routeNames.push_back(r.name);
  }
  pc.traceEvents = params_.trace_events;
  pc.exactlyOnceWindow = config_.exactlyOnceWindow;
  pc.fault = params_.fault;
  pc.cudaDriver = driver_;
  Link& link = *this;  // (a private base: converted here, inside the class)
  proto_ = std::make_unique<Protocol>(pc, link);
  wakeFd_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wakeFd_.valid()) return Error{Status::kSystemError, std::string("eventfd: ") + std::strerror(errno)};
  transport::Sessions::Config sc;
  sc.epoch = config_.modelEpoch;
  sc.key = params_.auth_key;
  sc.peerTimeout = params_.peer_timeout;
  sc.face = "engine " + config_.name;
  sc.checkEpoch = false;  // the protocol judges epochs per transfer; setEpoch changes it live
  sessions_ = std::make_unique<transport::Sessions>(sc);
  if (!config_.listenIp.empty()) {
    auto ip = transport::resolveListenIp(config_.listenIp);  // an interface or host name too
    if (!ip.ok()) return Error{ip.status(), "engine " + config_.name + ": " + ip.error().message};
    auto h = sessions_->listen(*ip, config_.listenPort, true);
    if (!h.ok())
      return Error{h.status(), "listen on " + *ip + ":" + std::to_string(config_.listenPort) + ": " +
                                   h.error().message};
    listenHandle_ = *h;
    listening_ = true;
    if (transport::isWildcard(*ip)) publishRoutable();
  }
  // A caller that meets a progress round polls for the lock as long as the engine would spin
  // anyway, at most kLockSpin (engine_mutex.h); PACT_PROGRESS_SPIN=0 sleeps at once.
  mu_.setSpin(std::min<std::chrono::microseconds>(params_.progress_spin, kLockSpin));
  if (config_.progressThread) thread_ = std::thread([this] { runProgressThread(); });
  return {};
}

// Bound to the wildcard: what address() and the metadata publish is the engine's first device's
// address instead (a device pact takes is never loopback unless named).
void Engine::publishRoutable() {
  const std::string ip = fabric_->deviceCount() > 0 ? fabric_->deviceInfo(0).ipAddress : std::string();
  if (ip.empty() || inet_pton(listenHandle_.family, ip.c_str(), listenHandle_.addr) != 1) {
    PACT_WARN("engine %s: listening on %s, but no routable address of this host to publish in its place",
              config_.name.c_str(), transport::formatAddress(listenHandle_).c_str());
    return;
  }
  PACT_INFO("engine %s: listening on every address; publishing %s", config_.name.c_str(),
            transport::formatAddress(listenHandle_).c_str());
}

Engine::~Engine() { shutdown(); }

// PACT_TRACE_FILE: this engine's trace ring, as spans, joins the process's file (engine lock).
void Engine::writeTrace() {
  std::vector<telemetry::TraceEvent> events, chunk(4096);
  uint64_t cursor = 0;
  while (const size_t n = proto_->traceRead(&cursor, chunk.data(), chunk.size()))
    events.insert(events.end(), chunk.begin(), chunk.begin() + static_cast<std::ptrdiff_t>(n));
  // About two full rings of spans (an event is a begin and an end) in the file at most.
  collectTrace(config_.name, events, 4 * static_cast<size_t>(params_.trace_events));
  std::string error;
  if (!telemetry::writeTimeline(params_.trace_file, &error)) PACT_WARN("PACT_TRACE_FILE=%s", error.c_str());
}

void Engine::shutdown() {
  {
    std::unique_lock lock(mu_);
    stop_ = true;
  }
  waitersDone_.notify_all();
  wake();
  if (thread_.joinable()) thread_.join();
  std::unique_lock lock(mu_);
  if (!proto_) return;  // creation failed before the protocol existed
  // Abort what is open and tell the peers; then drain while they are still connected: a sender
  // told of the abort stops, and UCX still completes the rendezvous it had under way (a Bye
  // first would make the peer force-close its endpoints, and those receives would never end:
  // a 2 s stall, then a leaked worker).
  proto_->abortAll();
  const auto limit = now() + std::chrono::seconds(2);
  while (proto_->busy() && now() < limit) progressWorkers();
  if (!params_.trace_file.empty()) writeTrace();
  // Goodbyes: each peer sees "the peer closed".
  for (auto& [id, p] : peers_)
    if (p->phase == Peer::Phase::kReady) peerLost(*p, "this engine closed");
  // Forced: a peer that no longer progresses would hold a flushing close for its timeout.
  for (auto& [id, p] : peers_) closePeerEndpoints(*p);
  if (!registrations_.empty())
    PACT_WARN("engine %s destroyed with %zu registrations still open (released now)",
              config_.name.c_str(), registrations_.size());
  registrations_.clear();
  if (proto_->busy()) {
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

// Nothing happened: while the engine is busy (PACT_PROGRESS_SPIN) the caller polls again at once;
// else it sleeps, on the event fds or, with a progress thread, until that thread sees an event.
void Engine::progress(int timeoutMs) {
  std::unique_lock lock(mu_);
  stamp(lastAppPoll_);
  if (progressLocked() > 0 || timeoutMs <= 0) return;
  if (spinning()) {
    yieldLocked(lock);
  } else if (config_.progressThread) {
    cv_.wait_for(lock, std::chrono::milliseconds(timeoutMs));
  } else {
    sleepLocked(lock, timeoutMs);
  }
}

int Engine::progressLocked() {
  int events = 0;
  for (int i = 0; i < 64; ++i) {
    const unsigned n = progressWorkers();
    if (n == 0) break;
    events += static_cast<int>(n);
  }
  if (prober_) checkRails();
  pumpLanes();
  // The sessions only carry handshakes and liveness: look at them every PACT_LIVENESS_INTERVAL
  // (every call while a handshake is under way), not on every spin of a busy progress loop.
  const TimePoint t = now();
  if (handshaking_ > 0 || t - lastSessionCheck_ >= params_.liveness_interval) {
    lastSessionCheck_ = t;
    events += pollPeers();
  }
  events += fireTimers();
  if (events > 0) {
    stamp(lastActivity_);
    cv_.notify_all();
  }
  return events;
}

void Engine::wake() {
  stamp(lastActivity_);  // the application started something: poll for its answer
  const uint64_t one = 1;
  ssize_t n = ::write(wakeFd_.get(), &one, sizeof one);
  (void)n;
}

// Sleeps until the worker, a socket or wake() has something, or the next timer, at most timeoutMs.
void Engine::sleepLocked(EngineLock& lock, int timeoutMs) {
  if (!armWorkers()) return;  // busy: events are pending already
  thread_local std::vector<pollfd> fds;  // keeps its capacity: no allocation per sleep
  fds.assign(1, pollfd{wakeFd_.get(), POLLIN, 0});
  for (const Context& c : contexts_)
    for (int fd : c.eventFds) fds.push_back({fd, POLLIN, 0});
  fds.push_back({sessions_->fd(), POLLIN, 0});  // every session and the listener
  int wait = timeoutMs;
  const TimePoint next = std::min(timers_.next(), proto_->nextTimer());
  if (next != TimePoint::max()) {
    auto until = std::chrono::duration_cast<std::chrono::milliseconds>(next - now());
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
  EngineLock lock(mu_);
  while (!stop_) {
    if (mu_.contended()) {  // an application call waits for the lock: it goes first
      yieldLocked(lock);
      continue;
    }
    if (pollingWaiters_ > 0) {
      waitersDone_.wait(lock, [this] { return pollingWaiters_ == 0 || stop_; });
      continue;
    }
    if (within(lastAppPoll_, kAppPollGrace)) {  // the application calls pact_progress in a loop
      waitersDone_.wait_for(lock, kAppPollGrace);
      continue;
    }
    if (progressLocked() > 0) continue;
    if (spinning()) {
      yieldLocked(lock);
    } else {
      sleepLocked(lock, 100);
    }
  }
}

void Engine::stamp(std::atomic<int64_t>& at) {
  at.store(now().time_since_epoch().count(), std::memory_order_relaxed);
}

bool Engine::within(const std::atomic<int64_t>& at, std::chrono::microseconds window) {
  return now().time_since_epoch().count() - at.load(std::memory_order_relaxed) <
         std::chrono::duration_cast<Clock::duration>(window).count();
}

bool Engine::spinning() const {
  return params_.progress_spin.count() > 0 && within(lastActivity_, params_.progress_spin);
}

// Lets the other threads in (the application's calls, the other engines' progress) between two
// polls of a spin; a thread blocked on the lock gets it before this one takes it back (a bounded
// wait: it may be descheduled).
void Engine::yieldLocked(EngineLock& lock) {
  lock.unlock();
  sched_yield();
  for (int i = 0; i < 64 && mu_.contended(); ++i) sched_yield();
  lock.lock();
}

// While the engine is busy (PACT_PROGRESS_SPIN) a waiter progresses it itself, so the event it
// waits for is seen on its own thread, without a hand-over through the condition variable.
bool Engine::waitFor(EngineLock& lock, int timeoutMs, FunctionRef<bool()> pred) {
  const auto limit = now() + std::chrono::milliseconds(std::max(timeoutMs, 0));
  // While this wait polls, the progress thread stands aside (a third polling thread on two
  // cores took the core the peer's progress needed).
  bool polling = false;
  auto stopPolling = [&] {
    if (!polling) return;
    polling = false;
    if (--pollingWaiters_ == 0) waitersDone_.notify_all();
  };
  while (!pred()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(limit - now());
    if (left.count() <= 0) break;
    if (spinning()) {
      if (!polling) ++pollingWaiters_, polling = true;
      if (progressLocked() == 0) yieldLocked(lock);
      continue;
    }
    stopPolling();
    if (config_.progressThread) {
      cv_.wait_for(lock, std::min(left, std::chrono::milliseconds(100)));
    } else if (progressLocked() == 0) {
      sleepLocked(lock, static_cast<int>(std::min<int64_t>(left.count(), 10)));
    }
  }
  stopPolling();
  return pred();
}

int Engine::fireTimers() {
  int fired = timers_.popDue(now(), [&](const Timers<TimerKind>::Timer& timer) {
    auto it = peers_.find(timer.id);
    if (it == peers_.end() || it->second->phase != Peer::Phase::kHandshake) return false;
    peerLost(*it->second, "no handshake from the peer within PACT_PEER_TIMEOUT");
    return true;
  });
  return fired + proto_->fireTimers();
}

// ---- the application's calls --------------------------------------------------------------------

Result<uint64_t> Engine::checkBlocks(std::span<const BlockRef> blocks) {
  if (blocks.empty() || blocks.size() > kMaxBlocks)
    return Error{Status::kInvalidArgument, "blocks: count " + std::to_string(blocks.size()) +
                                               " outside 1.." + std::to_string(kMaxBlocks)};
  uint64_t total = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const BlockRef& b = blocks[i];
    const std::string field = "blocks[" + std::to_string(i) + "]";
    const bool known = std::any_of(registrations_.begin(), registrations_.end(),
                                   [&](const auto& r) { return r.get() == b.mr; });
    if (!known) return Error{Status::kNotFound, field + ": unknown registration"};
    if (b.length == 0) return Error{Status::kInvalidArgument, field + ": length 0"};
    if (b.offset > b.mr->length || b.length > b.mr->length - b.offset)
      return Error{Status::kOutOfRange, field + ": offset " + std::to_string(b.offset) + " + length " +
                                            std::to_string(b.length) + " exceeds the registration (" +
                                            std::to_string(b.mr->length) + " bytes)"};
    total += b.length;
  }
  return total;
}

Result<uint64_t> Engine::expect(const TransferKey& key, std::span<const BlockRef> blocks,
                                uint64_t deadlineUs, const char* trafficClass) {
  std::lock_guard lock(mu_);
  auto r = expectLocked(key, blocks, deadlineUs, trafficClass);
  wake();
  return r;
}

Result<uint64_t> Engine::expectLocked(const TransferKey& key, std::span<const BlockRef> blocks,
                                      uint64_t deadlineUs, const char* trafficClass) {
  if (auto bytes = checkBlocks(blocks); !bytes)
    return Error{bytes.status(), "expect: " + bytes.error().message};
  auto route = classRoute("expect", trafficClass);
  if (!route) return route.error();
  return proto_->expect(key, blocks, deadlineUs, *route);
}

Result<void> Engine::startStep(std::span<const StepChunk> recv, std::span<const StepChunk> send,
                               uint64_t deadlineUs, std::vector<uint64_t>* ids,
                               std::vector<std::string>* unsent, size_t* failedAt) {
  std::lock_guard lock(mu_);
  ids->clear();
  unsent->assign(send.size(), std::string());
  const auto undo = [&](const Error& e, size_t at) {
    for (uint64_t id : *ids)
      if (id != 0) proto_->release(id).ignore();
    ids->clear();
    *failedAt = at;
    return e;
  };
  for (size_t i = 0; i < recv.size(); ++i) {
    auto id = expectLocked(recv[i].key, std::span(&recv[i].block, 1), deadlineUs, "A2A");
    if (!id) return undo(id.error(), i);
    auto p = peers_.find(recv[i].peer);
    proto_->markGroupChunk(*id, p == peers_.end() ? 0 : p->second->id);
    ids->push_back(*id);
  }
  for (size_t i = 0; i < send.size(); ++i) {
    auto id = sendLocked(send[i].peer, send[i].key, std::span(&send[i].block, 1), deadlineUs, "A2A");
    if (id.status() == Status::kRemoteError) {  // the rank is gone; the others still get their chunks
      (*unsent)[i] = id.error().message;
      ids->push_back(0);
      continue;
    }
    if (!id) return undo(id.error(), recv.size() + i);
    ids->push_back(*id);
  }
  wake();
  return {};
}

Result<void> Engine::finishStep(std::span<const uint64_t> ids, int timeoutMs, std::vector<Status>* results) {
  EngineLock lock(mu_);
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
  // Done when every transfer is final, or as soon as one failed: the step has failed then, and
  // the rest are released unjudged (kInProgress) rather than waited for to their deadlines.
  const bool done = waitFor(lock, timeoutMs, [&] {
    bool all = true;
    for (uint64_t id : ids) {
      const Transfer* x = id == 0 ? nullptr : proto_->find(id);
      if (x == nullptr) continue;
      if (x->settled && x->result != Status::kOk) return true;
      all = all && x->final();
    }
    return all;
  });
  if (!done)
    return Error{Status::kTimeout, "not final after " + std::to_string(timeoutMs) + " ms"};
  results->clear();
  for (uint64_t id : ids) {
    const Transfer* x = id == 0 ? nullptr : proto_->find(id);
    results->push_back(x == nullptr ? Status::kOk : x->settled ? x->result : Status::kInProgress);
    if (id != 0) proto_->release(id).ignore();
  }
  // An aborted chunk is gone only once no UCX operation touches its block (a rendezvous receive
  // in flight still lands): the step's buffers are the application's again only then.
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
  const bool quiet = waitFor(lock, static_cast<int>(std::max<int64_t>(left.count(), 0)), [&] {
    return std::all_of(ids.begin(), ids.end(), [&](uint64_t id) { return id == 0 || proto_->find(id) == nullptr; });
  });
  if (!quiet)
    return Error{Status::kBusy, "failed, and a UCX operation still touches a chunk's block after " +
                                    std::to_string(timeoutMs) + " ms (do not reuse the step's buffers)"};
  return {};
}

void Engine::releaseStep(std::span<const uint64_t> ids) {
  std::lock_guard lock(mu_);
  for (uint64_t id : ids)
    if (id != 0) proto_->release(id).ignore();
}

Result<uint64_t> Engine::send(uint64_t peer, const TransferKey& key, std::span<const BlockRef> blocks,
                              uint64_t deadlineUs, const char* trafficClass) {
  std::lock_guard lock(mu_);
  auto r = sendLocked(peer, key, blocks, deadlineUs, trafficClass);
  wake();
  return r;
}

Result<uint64_t> Engine::sendLocked(uint64_t peer, const TransferKey& key,
                                    std::span<const BlockRef> blocks, uint64_t deadlineUs,
                                    const char* trafficClass) {
  if (peerByToken(peer) == nullptr) {
    auto it = peers_.find(peer);
    if (it == peers_.end()) return Error{Status::kNotFound, "send: unknown peer " + std::to_string(peer)};
    return Error{Status::kRemoteError, "send: peer " + it->second->name + " lost: " + it->second->lostReason};
  }
  if (auto bytes = checkBlocks(blocks); !bytes)
    return Error{bytes.status(), "send: " + bytes.error().message};
  auto route = classRoute("send", trafficClass);
  if (!route) return route.error();
  return proto_->send(peer, key, blocks, deadlineUs, *route);
}

Result<void> Engine::setEpoch(uint64_t epoch) {
  std::lock_guard lock(mu_);
  if (epoch != proto_->epoch())
    PACT_INFO("engine %s: model epoch %lu -> %lu", config_.name.c_str(),
              static_cast<unsigned long>(proto_->epoch()), static_cast<unsigned long>(epoch));
  auto r = proto_->setEpoch(epoch);
  wake();
  return r;
}

void Engine::setCommitHook(CommitHook hook) {
  std::lock_guard lock(mu_);
  proto_->setCommitHook(std::move(hook));
}

Result<void> Engine::setCredit(uint64_t peer, uint64_t budget) {
  std::lock_guard lock(mu_);
  auto r = proto_->setCredit(peer, budget);
  wake();
  return r;
}

Result<XferInfo> Engine::query(uint64_t xfer) {
  std::lock_guard lock(mu_);
  return proto_->query(xfer);
}

Result<void> Engine::wait(uint64_t xfer, int timeoutMs, XferInfo* info) {
  std::unique_lock lock(mu_);
  const Transfer* x = proto_->find(xfer);
  if (x == nullptr)
    return Error{Status::kNotFound, "transfer " + std::to_string(xfer) + ": unknown or released"};
  *info = {x->state, x->result, x->final(), x->retries, x->key, x->peer, x->bytes};
  // Progress may free a released transfer once final: look it up again each time.
  const bool done = waitFor(lock, timeoutMs, [&] {
    x = proto_->find(xfer);
    if (x != nullptr) *info = {x->state, x->result, x->final(), x->retries, x->key, x->peer, x->bytes};
    return x == nullptr || x->final();
  });
  if (x == nullptr) {  // released and now freed: it was final
    info->state = State::kReleased;
    info->final = true;
  }
  if (!done)
    return Error{Status::kTimeout, "transfer " + Protocol::keyText(info->key) + " still " +
                                       stateName(info->state) + " after " + std::to_string(timeoutMs) +
                                       " ms"};
  return {};
}

Result<bool> Engine::release(uint64_t xfer) {
  std::lock_guard lock(mu_);
  return proto_->release(xfer);
}

// ---- memory ------------------------------------------------------------------------------------

Result<Registration*> Engine::registerMemory(const MemorySpec& spec) {
  if (spec.addr == nullptr || spec.length == 0)
    return Error{Status::kInvalidArgument, "mem_register: NULL address or length 0"};
  std::lock_guard lock(mu_);
  auto r = std::make_unique<Registration>();
  r->addr = static_cast<uint8_t*>(spec.addr);
  r->length = spec.length;
  r->type = spec.type;
  for (Context& c : contexts_) {
    auto regions = c.dev->registerOnRails({spec.addr, spec.length, spec.type, spec.device},
                                          spec.dmabufFd, spec.dmabufOffset);
    if (!regions.ok()) return Error{regions.status(), "mem_register: " + regions.error().message};
    r->regions.insert(r->regions.end(), regions->begin(), regions->end());
  }
  Registration* out = r.get();
  registrations_.push_back(std::move(r));
  proto_->countRegistrations(registrations_.size());
  return out;
}

Result<void> Engine::deregister(Registration* mr) {
  if (mr == nullptr) return {};
  std::lock_guard lock(mu_);
  auto it = std::find_if(registrations_.begin(), registrations_.end(),
                         [&](const auto& r) { return r.get() == mr; });
  if (it == registrations_.end()) return Error{Status::kNotFound, "mem_deregister: unknown registration"};
  if (mr->users > 0)
    return Error{Status::kBusy, "mem_deregister: " + std::to_string(mr->users) +
                                    " unreleased transfers use the registration"};
  registrations_.erase(it);
  proto_->countRegistrations(registrations_.size());
  return {};
}

std::vector<uint64_t> Engine::stats() {
  std::lock_guard lock(mu_);
  return proto_->counters().values();
}

size_t Engine::traceRead(uint64_t* cursor, telemetry::TraceEvent* out, size_t max) {
  std::lock_guard lock(mu_);
  return proto_->traceRead(cursor, out, max);
}

}  // namespace pact::engine
