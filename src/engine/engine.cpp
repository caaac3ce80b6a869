// The engine facade: lifecycle, the wiring of its peer table, routes and protocol, progress (the
// workers, the sockets, the timers, the sleep), the application's calls (checked, then handed to
// the protocol), memory registration.
#include "engine/engine.h"
#include "engine/trace_file.h"
#include "telemetry/timeline.h"

#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "common/log.h"
#include "transport/control_socket.h"

namespace pact::engine {

namespace {
EngineConfig named(EngineConfig c) {
  if (c.name.empty()) c.name = "pact-" + std::to_string(::getpid());
  return c;
}
}  // namespace

Engine::Engine(const EngineConfig& config, const Params& params)
    : config_(named(config)),
      params_(params),
      driver_(&cuda::Driver::instance(params.cuda_driver)),
      routes_(config_.name, params_, *driver_, peers_, *this),
      peers_(config_.name, params_, *this) {}

Result<std::unique_ptr<Engine>> Engine::create(const EngineConfig& config, const Params& params) {
  std::unique_ptr<Engine> e(new Engine(config, params));
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
  if (auto r = routes_.open(); !r) return r;
  ProtocolConfig pc;
  pc.name = config_.name;
  pc.epoch = config_.modelEpoch;
  pc.creditBudget = config_.creditBudget;
  for (const Routes::Route& r : routes_.list()) {
    pc.routes.push_back(r.profile);
    pc.routeNames.push_back(r.name);
  }
  pc.traceEvents = params_.trace_events;
  pc.exactlyOnceWindow = config_.exactlyOnceWindow;
  pc.fault = params_.fault;
  pc.cudaDriver = driver_;
  proto_ = std::make_unique<Protocol>(pc, routes_.link());
  routes_.attach(*proto_);
  wakeFd_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wakeFd_.valid()) return Error{Status::kSystemError, std::string("eventfd: ") + std::strerror(errno)};
  peers_.open(config_.modelEpoch);
  if (!config_.listenIp.empty())
    if (auto r = peers_.listen(config_.listenIp, config_.listenPort, routes_.routableIp()); !r) return r;
  // A caller that meets a progress round polls for the lock as long as the engine would spin
  // anyway, at most kLockSpin (engine_mutex.h); PACT_PROGRESS_SPIN=0 sleeps at once.
  mu_.setSpin(std::min<std::chrono::microseconds>(params_.progress_spin, kLockSpin));
  if (config_.progressThread) thread_ = std::thread([this] { runProgressThread(); });
  return {};
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
  while (proto_->busy() && now() < limit) routes_.progressWorkers();
  if (!params_.trace_file.empty()) writeTrace();
  // Goodbyes: each peer sees "the peer closed".
  peers_.loseAll("this engine closed");
  // Forced: a peer that no longer progresses would hold a flushing close for its timeout.
  peers_.forEach([this](Peer& p) { routes_.closePeerEndpoints(p); });
  if (!registrations_.empty())
    PACT_WARN("engine %s destroyed with %zu registrations still open (released now)",
              config_.name.c_str(), registrations_.size());
  registrations_.clear();
  if (proto_->busy()) {
    // A receive still writes into (or a send reads from) application memory: UCX would assert
    // on destroying the worker; leaking it is the lesser harm (see ucx/worker.h).
    PACT_WARN("engine %s: UCX operations still pending at shutdown; leaking the workers",
              config_.name.c_str());
    routes_.abandonWorkers();
  }
  peers_.clear();
  routes_.detach();  // the protocol and the peer table go before the routes (engine.h)
}

// ---- the wiring: what the peer table tells ---------------------------------------------------

std::vector<uint8_t> Engine::hello(const Peer& p) { return routes_.hello(p, proto_->epoch()); }

Result<void> Engine::greeted(Peer& p) { return routes_.connect(p); }

Result<bool> Engine::wired(Peer& p) { return routes_.wired(p); }

void Engine::ready(Peer& p) {
  proto_->peerReady(p.id, p.name);
  routes_.watchRails(p, p.probes);
}

void Engine::lost(Peer& p, Status transfers) {
  proto_->peerLost(p.id, transfers);
  routes_.closePeerEndpoints(p);
  if (int n = proto_->abandonSends(p.id); n > 0)
    PACT_INFO("engine %s: %d send(s) to %s still inside UCX after the close, given up",
              config_.name.c_str(), n, p.name.c_str());
  cv_.notify_all();
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
    const unsigned n = routes_.progressWorkers();
    if (n == 0) break;
    events += static_cast<int>(n);
  }
  routes_.checkRails();
  routes_.pumpLanes();
  events += peers_.poll(now());  // handshakes and liveness
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
  if (!routes_.armWorkers()) return;  // busy: events are pending already
  // On the stack: a thread's first sleep may come after the engine is warm (a vector grown here
  // was an allocation inside engine-alloc's window, 1 run in 25), and several threads may sleep
  // at once, each on its own set.
  std::array<pollfd, kMaxContexts * kMaxRails + 2> fds;
  size_t n = 0;
  fds[n++] = pollfd{wakeFd_.get(), POLLIN, 0};
  routes_.forEachEventFd([&](int fd) {
    if (n + 1 < fds.size()) fds[n++] = pollfd{fd, POLLIN, 0};  // (contexts and rails are bounded)
  });
  fds[n++] = pollfd{peers_.fd(), POLLIN, 0};  // every session and the listener
  int wait = timeoutMs;
  const TimePoint next = std::min(peers_.nextTimer(), proto_->nextTimer());
  if (next != TimePoint::max()) {
    auto until = std::chrono::duration_cast<std::chrono::milliseconds>(next - now());
    wait = std::clamp(static_cast<int>(until.count()) + 1, 0, timeoutMs);
  }
  lock.unlock();
  ::poll(fds.data(), n, wait);
  uint64_t drained = 0;
  const ssize_t got = ::read(wakeFd_.get(), &drained, sizeof drained);
  (void)got;
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
  const int fired = peers_.fireTimers(now());
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
  auto route = routes_.classRoute("expect", trafficClass);
  if (!route) return route.error();
  return proto_->expect(key, blocks, deadlineUs, *route);
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
  if (peers_.byToken(peer) == nullptr) {
    const Peer* p = peers_.find(peer);
    if (p == nullptr) return Error{Status::kNotFound, "send: unknown peer " + std::to_string(peer)};
    return Error{Status::kRemoteError, "send: peer " + p->name + " lost: " + p->lostReason};
  }
  if (auto bytes = checkBlocks(blocks); !bytes)
    return Error{bytes.status(), "send: " + bytes.error().message};
  auto route = routes_.classRoute("send", trafficClass);
  if (!route) return route.error();
  return proto_->send(peer, key, blocks, deadlineUs, *route);
}

Result<void> Engine::setEpoch(uint64_t epoch) {
  std::lock_guard lock(mu_);
  auto r = proto_->setEpoch(epoch);  // (the receiver logs the change)
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
    return Error{Status::kTimeout, "transfer " + keyText(info->key) + " still " +
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
  if (auto regions = routes_.registerMemory(spec, *r); !regions)
    return Error{regions.status(), "mem_register: " + regions.error().message};
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

std::vector<ClassRouteInfo> Engine::routes() const { return routes_.info(); }

std::vector<transport::LaneStats> Engine::laneStats(uint64_t peer, const std::string& cls) {
  std::lock_guard lock(mu_);
  return routes_.laneStats(peers_.find(peer), cls);
}

size_t Engine::traceRead(uint64_t* cursor, telemetry::TraceEvent* out, size_t max) {
  std::lock_guard lock(mu_);
  return proto_->traceRead(cursor, out, max);
}

}  // namespace pact::engine
