// Engine lifecycle, progress, peers and the transfer bookkeeping both sides share.
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

Code fromStatus(Status s) {
  switch (s) {
    case Status::kOk: return Code::kOk;
    case Status::kInvalidArgument: return Code::kInvalidArg;
    case Status::kNoMemory: return Code::kNoMemory;
    case Status::kRemoteError: return Code::kPeerLost;
    case Status::kSystemError: return Code::kSystem;
    case Status::kTimeout: return Code::kTimedOut;
    case Status::kRefused: return Code::kRefused;
    default: return Code::kInternal;
  }
}

}  // namespace

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
  }
  return "PACT_ERR_UNKNOWN";
}

Engine::Engine(const EngineConfig& config)
    : config_(config), epoch_(config.modelEpoch),
      credits_(config.creditBudget == 0 ? kUnlimited : config.creditBudget),
      trace_(kTraceDefault) {
}

Code Engine::create(const EngineConfig& config, std::unique_ptr<Engine>* out) {
  const auto& params = Params::global();
  if (!params.ok()) return fail(Code::kInvalidArg, params.error().message);
  std::unique_ptr<Engine> e(new Engine(config));
  if (e->config_.name.empty()) e->config_.name = "pact-" + std::to_string(::getpid());
  if (e->config_.name.size() > kMaxName)
    return fail(Code::kInvalidArg, "name: longer than " + std::to_string(kMaxName) + " bytes");
  if (Code c = e->init(); c != Code::kOk) return c;
  *out = std::move(e);
  return Code::kOk;
}

Code Engine::init() {
  const Params& params = Params::global().value();
  trace_ = telemetry::TraceRing(params.trace_events);
  fault_ = params.fault;
  if (fault_.active()) {
    static uint64_t engines = 0;  // each engine of a process draws its own sequence
    dice_ = FaultDice(fault_.seed, ++engines);
    PACT_WARN("engine %s: injecting faults: %s", config_.name.c_str(), fault_.describe().c_str());
    armKillAfter(fault_);
  }
  // UCX sees the devices of PACT_NET_DEVICES (plus shared memory), with the DEFAULT class's
  // service settings.
  auto devices = ucx::discoverDevices(params.net_devices);
  if (!devices.ok()) return fail(fromStatus(devices.status()), devices.error().message);
  std::string netDevices;
  ucx::Context::Settings settings;
  for (const auto& d : *devices) netDevices += (netDevices.empty() ? "" : ",") + d.ucxDevices();
  if (!devices->empty()) {
    auto service = transport::serviceFor(params.classes.defaultProfile(), devices->front(), "DEFAULT");
    if (!service.ok()) return fail(fromStatus(service.status()), service.error().message);
    if (!service->fallbackWarning.empty()) PACT_WARN("%s", service->fallbackWarning.c_str());
    settings = service->ucxSettings;
  }
  auto ctx = ucx::Context::create(netDevices, "pact-engine", settings,
                                  UCP_FEATURE_AM | UCP_FEATURE_WAKEUP);
  if (!ctx.ok()) return fail(fromStatus(ctx.status()), ctx.error().message);
  context_ = std::move(*ctx);
  auto worker = ucx::Worker::create(context_);
  if (!worker.ok()) return fail(fromStatus(worker.status()), worker.error().message);
  worker_ = std::move(*worker);
  if (ucs_status_t st = ucp_worker_get_efd(worker_.get(), &workerFd_); st != UCS_OK)
    return fail(Code::kInternal, ucx::error("worker_get_efd", st).message);
  for (auto [id, cb] : {std::pair{kAmControl, &Engine::onControlAm}, {kAmPiece, &Engine::onPieceAm}}) {
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    hp.id = id;
    hp.cb = cb;
    hp.arg = this;
    hp.flags = UCP_AM_FLAG_WHOLE_MSG;
    if (ucs_status_t st = ucp_worker_set_am_recv_handler(worker_.get(), &hp); st != UCS_OK)
      return fail(Code::kInternal, ucx::error("worker_set_am_recv_handler", st).message);
  }
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
      settle(x, Event::kFatalError, Code::kPeerLost);
    }
  });
  for (auto& [id, p] : peers_) {
    if (p->phase == Peer::Phase::kReady) ignore(p->socket.send(wire::encodeBye()));
  }
  const auto limit = now() + std::chrono::seconds(2);
  auto busy = [&] {
    return std::any_of(xfers_.begin(), xfers_.end(), [](auto& kv) { return kv.second->pendingOps > 0; });
  };
  while (busy() && now() < limit) worker_.progress();
  // Forced: a peer that no longer progresses would hold a flushing close for its timeout.
  for (auto& [id, p] : peers_) p->ep.close(true);
  if (!registrations_.empty())
    PACT_WARN("engine %s destroyed with %zu registrations still open (released now)",
              config_.name.c_str(), registrations_.size());
  registrations_.clear();
  if (busy()) {
    // A receive still writes into (or a send reads from) application memory: UCX would assert
    // on destroying the worker; leaking it is the lesser harm (see ucx/worker.h).
    PACT_WARN("engine %s: UCX operations still pending at shutdown; leaking the worker",
              config_.name.c_str());
    worker_.abandon();
    context_.abandon();
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
    const unsigned n = worker_.progress();
    if (n == 0) break;
    events += static_cast<int>(n);
  }
  // The sockets only carry handshakes and liveness: look at them every PACT_LIVENESS_INTERVAL
  // (every call while a handshake is under way), not on every spin of a busy progress loop.
  const TimePoint t = now();
  const bool handshaking = std::any_of(peers_.begin(), peers_.end(), [](const auto& kv) {
    return kv.second->phase == Peer::Phase::kHandshake;
  });
  if (handshaking || t - lastSocketCheck_ >= Params::global()->liveness_interval) {
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
  if (ucp_worker_arm(worker_.get()) != UCS_OK) return;  // busy: events are pending already
  std::vector<pollfd> fds{{workerFd_, POLLIN, 0}, {wakeFd_.get(), POLLIN, 0}};
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

void Engine::addTimer(TimePoint at, uint64_t id, TimerKind kind) {
  if (at == TimePoint::max()) return;
  timers_.emplace(at, Timer{id, kind});
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

// ---- peers -------------------------------------------------------------------------------------

Code Engine::address(std::string* out) {
  std::lock_guard lock(mu_);
  if (!listening_) return fail(Code::kNotFound, "engine " + config_.name + " does not listen");
  *out = transport::formatAddress(listener_.addr);
  return Code::kOk;
}

Code Engine::startPeer(transport::ControlSocket socket, bool outbound, uint64_t* id) {
  auto p = std::make_unique<Peer>();
  p->id = nextId_++;
  p->outbound = outbound;
  p->socket = std::move(socket);
  transport::enableKeepalive(p->socket.fd(), Params::global()->peer_timeout);
  const auth::Key& key = Params::global()->auth_key;
  p->nonce = auth::freshNonce();
  Hello hello{config_.name, p->id, epoch_, worker_.address(), key.enabled() ? uint8_t{1} : uint8_t{0},
              p->nonce};
  if (p->socket.send(wire::encodeEngine(encode(Control(hello)))) == Status::kRemoteError)
    return fail(Code::kPeerLost, "connection refused or reset before the handshake");
  addTimer(now() + Params::global()->peer_timeout, p->id, TimerKind::kHandshake);
  *id = p->id;
  peers_.emplace(p->id, std::move(p));
  return Code::kOk;
}

Code Engine::connect(const std::string& address, int timeoutMs, uint64_t* peer) {
  auto handle = transport::parseAddress(address);
  if (!handle.ok()) return fail(Code::kInvalidArg, handle.error().message);
  std::unique_lock lock(mu_);
  auto socket = transport::ControlSocket::connectTo(*handle);
  if (!socket.ok()) return fail(fromStatus(socket.status()), socket.error().message);
  uint64_t id = 0;
  if (Code c = startPeer(std::move(*socket), true, &id); c != Code::kOk) return c;
  Peer& p = *peers_.at(id);
  if (!waitFor(lock, timeoutMs, [&] { return p.phase != Peer::Phase::kHandshake; })) {
    peerLost(p, "handshake timed out");
    return fail(Code::kTimedOut, "connect " + address + ": no handshake within " +
                                     std::to_string(timeoutMs) + " ms");
  }
  if (p.phase == Peer::Phase::kLost)
    return fail(p.refused ? Code::kRefused : Code::kPeerLost, "connect " + address + ": " + p.lostReason);
  *peer = id;
  return Code::kOk;
}

Code Engine::waitPeer(const std::string& name, int timeoutMs, uint64_t* peer) {
  std::unique_lock lock(mu_);
  uint64_t found = 0;
  waitFor(lock, timeoutMs, [&] {
    for (auto& [id, p] : peers_) {
      if (p->phase == Peer::Phase::kReady && p->name == name) {
        found = id;
        return true;
      }
    }
    return false;
  });
  if (found == 0)
    return fail(Code::kTimedOut, "no peer named '" + name + "' within " + std::to_string(timeoutMs) + " ms");
  *peer = found;
  return Code::kOk;
}

Code Engine::peerCredit(uint64_t peer, uint64_t* budget, uint64_t* inUse) {
  std::lock_guard lock(mu_);
  auto it = peers_.find(peer);
  if (it == peers_.end()) return fail(Code::kNotFound, "peer " + std::to_string(peer) + ": unknown");
  *budget = it->second->creditBudget;
  *inUse = it->second->creditInUse;
  return Code::kOk;
}

int Engine::acceptConnections() {
  if (!listening_) return 0;
  int n = 0;
  for (;;) {
    auto fd = transport::acceptOne(listener_.fd.get());
    if (!fd.ok()) {
      PACT_WARN("engine %s: accept: %s", config_.name.c_str(), fd.error().message.c_str());
      return n;
    }
    if (!fd->valid()) return n;
    uint64_t id = 0;
    if (startPeer(transport::ControlSocket(std::move(*fd)), false, &id) == Code::kOk) ++n;
  }
}

int Engine::pollPeers() {
  int n = 0;
  for (auto it = peers_.begin(); it != peers_.end();) {
    Peer& p = *it->second;
    if (p.phase == Peer::Phase::kLost) {
      ++it;
      continue;
    }
    if (p.socket.flush() == Status::kRemoteError) {
      peerLost(p, "control connection reset");
      ++it;
      ++n;
      continue;
    }
    for (;;) {
      auto frame = p.socket.poll();
      if (!frame.ok()) {
        peerLost(p, frame.error().message);
        ++n;
        break;
      }
      if (!frame->has_value()) break;
      ++n;
      const transport::Frame& f = **frame;
      if (f.header.type == wire::FrameType::kBye) {
        peerLost(p, "the peer closed");
        break;
      }
      if (f.header.type == wire::FrameType::kRefuse) {
        auto r = wire::decodeRefuse(f.body);
        p.refused = true;
        peerLost(p, r.ok() ? std::string("refused by the peer: ") + wire::fieldName(r->field) +
                                 " differs (remote " + std::to_string(r->expected) + ", local " +
                                 std::to_string(r->got) + ")"
                           : "refused by the peer: " + r.error().message);
        break;
      }
      if (f.header.type != wire::FrameType::kEngine || p.phase != Peer::Phase::kHandshake) {
        peerLost(p, "unexpected frame on the control connection");
        break;
      }
      auto m = decode(f.body);
      if (!m.ok()) {
        peerLost(p, "handshake: " + m.error().message);
        break;
      }
      if (const auto* proof = std::get_if<Proof>(&*m)) {
        if (onProof(p, *proof) != Code::kOk) break;
        continue;
      }
      if (!std::holds_alternative<Hello>(*m)) {
        peerLost(p, "handshake: expected hello");
        break;
      }
      if (onHello(p, std::get<Hello>(*m)) != Code::kOk) break;
    }
    ++it;
  }
  return n;
}

namespace {
constexpr std::string_view kProofLabel = "pact-engine-proof-v1";
}  // namespace

// Refuses the handshake on the control socket, so the peer reports a refusal too.
void Engine::refuse(Peer& p, wire::Field field, uint64_t ours, uint64_t theirs, const std::string& why) {
  ignore(p.socket.send(wire::encode(wire::Refuse{field, ours, theirs})));
  p.refused = true;
  peerLost(p, "refused: " + why);
}

Code Engine::onHello(Peer& p, const Hello& hello) {
  p.name = hello.name;
  p.remoteToken = hello.token;
  p.peerWorker = hello.workerAddress;
  p.peerNonce = hello.nonce;
  const auth::Key& key = Params::global()->auth_key;
  const uint8_t ours = key.enabled() ? 1 : 0;
  if (hello.auth != ours) {
    refuse(p, wire::Field::kAuth, ours, hello.auth,
           std::string("authentication: PACT_AUTH_KEY_FILE is set on ") +
               (ours ? "this side only" : "the peer only"));
    return Code::kRefused;
  }
  if (!key.enabled()) return connectEndpoint(p);
  // Prove we know the key (over the peer's challenge); the endpoint waits for the peer's proof.
  sendHandshake(p, Proof{auth::mac(key.secret, kProofLabel, p.peerNonce, p.nonce)});
  return Code::kOk;
}

Code Engine::onProof(Peer& p, const Proof& proof) {
  const auth::Key& key = Params::global()->auth_key;
  if (!key.enabled() || p.peerWorker.empty()) {
    peerLost(p, "handshake: unexpected proof");
    return Code::kRefused;
  }
  if (!auth::verify(key.secret, kProofLabel, p.nonce, p.peerNonce, proof.mac)) {
    refuse(p, wire::Field::kAuth, 1, 0, "authentication: the peer's proof does not verify (another key)");
    return Code::kRefused;
  }
  return connectEndpoint(p);
}

void Engine::sendHandshake(Peer& p, const Control& m) {
  ignore(p.socket.send(wire::encodeEngine(encode(m))));
}

Code Engine::connectEndpoint(Peer& p) {
  auto ep = ucx::Endpoint::create(worker_.get(), p.peerWorker, &Engine::onEndpointError,
                                  &p, &peerFailure_);
  if (!ep.ok()) {
    peerLost(p, ep.error().message);
    return Code::kPeerLost;
  }
  p.ep = std::move(*ep);
  p.phase = Peer::Phase::kReady;
  PACT_INFO("engine %s: peer %s ready (%s)", config_.name.c_str(), p.name.c_str(),
            p.outbound ? "connected" : "accepted");
  // Tell the new peer its credit share.
  sendControl(p, CreditUpdate{credits_.grantFor(p.id)});
  return Code::kOk;
}

void Engine::peerLost(Peer& p, const std::string& why) {
  if (p.phase == Peer::Phase::kLost) return;
  PACT_INFO("engine %s: peer %s lost: %s", config_.name.c_str(), p.name.c_str(), why.c_str());
  p.phase = Peer::Phase::kLost;
  p.lostReason = why;
  ignore(p.socket.flush());  // a refusal on its way goes out; then the peer sees the close
  p.socket = transport::ControlSocket();
  forEachLive([&](const Transfer& x) { return x.peer == p.id; }, [&](Transfer& x) {
    if (x.role == Role::kReceiver) {
      receiverAbort(x, Event::kFatalError, Code::kPeerLost, Reason::kPeerLost);
    } else {
      settle(x, Event::kFatalError, Code::kPeerLost);
    }
  });
  std::erase_if(offers_, [&](auto& kv) { return kv.second.peer == p.id; });
  // Forced close fails whatever UCX still has in flight with the peer, so no receive keeps
  // writing into application memory.
  p.ep.close(true);
  cv_.notify_all();
}

void Engine::onEndpointError(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* p = static_cast<Peer*>(arg);
  // Runs inside ucp_worker_progress with the engine lock held; the socket check reports it too,
  // this only marks the reason.
  if (p->lostReason.empty()) p->lostReason = std::string("ucx: ") + ucs_status_string(status);
}

Engine::Peer* Engine::peerByToken(uint64_t token) {
  auto it = peers_.find(token);
  return it == peers_.end() || it->second->phase != Peer::Phase::kReady ? nullptr : it->second.get();
}


void Engine::sendControl(Peer& p, const Control& m) {
  if (p.phase != Peer::Phase::kReady) return;
  auto* buf = new std::vector<uint8_t>(encode(m));
  ucp_request_param_t rp{};
  rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  rp.flags = UCP_AM_SEND_FLAG_EAGER;
  rp.cb.send = [](void* req, ucs_status_t, void* user) {
    delete static_cast<std::vector<uint8_t>*>(user);
    ucp_request_free(req);
  };
  rp.user_data = buf;
  void* req = ucp_am_send_nbx(p.ep.get(), kAmControl, &p.remoteToken, sizeof p.remoteToken,
                              buf->data(), buf->size(), &rp);
  if (req == nullptr || UCS_PTR_IS_ERR(req)) {
    if (UCS_PTR_IS_ERR(req))
      PACT_WARN("engine %s: control message to %s failed: %s", config_.name.c_str(),
                p.name.c_str(), ucs_status_string(UCS_PTR_STATUS(req)));
    delete buf;
  }
}

ucs_status_t Engine::onControlAm(void* arg, const void* header, size_t headerLength, void* data,
                                 size_t length, const ucp_am_recv_param_t* param) {
  auto* e = static_cast<Engine*>(arg);
  uint64_t token = 0;
  if (headerLength != sizeof token || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
    PACT_WARN("engine %s: malformed control message dropped", e->config_.name.c_str());
    return UCS_OK;
  }
  std::memcpy(&token, header, sizeof token);
  Peer* p = e->peerByToken(token);
  if (p == nullptr) return UCS_OK;  // from a connection already closed
  auto m = decode(std::span(static_cast<const uint8_t*>(data), length));
  if (!m.ok()) {
    PACT_WARN("engine %s: control message from %s refused: %s", e->config_.name.c_str(),
              p->name.c_str(), m.error().message.c_str());
    return UCS_OK;
  }
  e->dispatch(*p, *m);
  return UCS_OK;
}

void Engine::dispatch(Peer& p, const Control& m) {
  std::visit(
      [&](const auto& msg) {
        using T = std::decay_t<decltype(msg)>;
        if constexpr (std::is_same_v<T, Offer>) onOffer(p, msg);
        else if constexpr (std::is_same_v<T, Done>) onDone(p, msg);
        else if constexpr (std::is_same_v<T, Advertise>) onAdvertise(p, msg);
        else if constexpr (std::is_same_v<T, Verdict>) onVerdict(p, msg);
        else if constexpr (std::is_same_v<T, EpochChange>) onEpochChange(p, msg);
        else if constexpr (std::is_same_v<T, CreditUpdate>) p.creditBudget = msg.budgetBytes;
        else PACT_WARN("engine %s: unexpected hello from %s", config_.name.c_str(), p.name.c_str());
      },
      m);
  cv_.notify_all();
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
                              const Profile& profile, uint64_t deadlineUs) {
  auto x = std::make_unique<Transfer>();
  x->id = nextId_++;
  x->role = role;
  x->key = key;
  x->created = now();
  x->verify = profile.verify;
  x->retriesLeft = profile.retries;
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
                 key.generation, 0, static_cast<uint8_t>(role), static_cast<uint8_t>(State::kAllocated),
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
    receiverAbort(x, Event::kFatalError, Code::kInternal, Reason::kShutdown);
  } else {
    settle(x, Event::kFatalError, Code::kInternal);
  }
  return find(xfer) == nullptr ? Code::kOk : Code::kInProgress;
}

// ---- memory ------------------------------------------------------------------------------------

Code Engine::registerMemory(void* addr, size_t length, Registration** out) {
  if (addr == nullptr || length == 0)
    return fail(Code::kInvalidArg, "mem_register: NULL address or length 0");
  std::lock_guard lock(mu_);
  auto map = ucx::MemMap::map(context_.get(), addr, length, UCS_MEMORY_TYPE_HOST);
  if (!map.ok()) return fail(fromStatus(map.status()), map.error().message);
  auto r = std::make_unique<Registration>();
  r->addr = static_cast<uint8_t*>(addr);
  r->length = length;
  r->map = std::move(*map);
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
