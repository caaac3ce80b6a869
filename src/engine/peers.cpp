// Engine connections: listen/connect, the handshake on the control socket (names, tokens, UCX
// addresses, PACT_AUTH_KEY_FILE proofs), liveness, and the control messages on UCX active
// messages handed to the protocol.
#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "engine/engine.h"
#include "engine/peer.h"
#include "transport/wire.h"
#include "ucx/ucx_status.h"

namespace pact::engine {


Status Engine::address(std::string* out) {
  std::lock_guard lock(mu_);
  if (!listening_) return fail(Status::kNotFound, "engine " + config_.name + " does not listen");
  *out = transport::formatAddress(listener_.addr);
  return Status::kOk;
}

Status Engine::startPeer(transport::ControlSocket socket, bool outbound, uint64_t* id) {
  auto p = std::make_unique<Peer>();
  p->id = nextId_++;
  p->outbound = outbound;
  p->socket = std::move(socket);
  transport::enableKeepalive(p->socket.fd(), params_.peer_timeout);
  const auth::Key& key = params_.auth_key;
  p->nonce = auth::freshNonce();
  transport::DeviceCtx& ctrl = *contexts_[routes_[ctrlRoute_].context].dev;
  Hello hello{config_.name, p->id, proto_->epoch(), ctrl.worker(0).address(),
              key.enabled() ? uint8_t{1} : uint8_t{0}, p->nonce, {}};
  for (const Context& c : contexts_) hello.contexts.push_back({c.dev->serviceKey(), c.dev->addresses()});
  if (Status s = p->socket.send(wire::encodeEngine(encode(Control(hello)))); isError(s))
    return fail(s, s == Status::kRefused ? "connection refused: nothing listens at that address"
                                         : "connection reset before the handshake");
  timers_.add(now() + params_.peer_timeout, p->id, TimerKind::kHandshake);
  *id = p->id;
  peers_.emplace(p->id, std::move(p));
  ++handshaking_;
  return Status::kOk;
}

Status Engine::connect(const std::string& address, int timeoutMs, uint64_t* peer) {
  auto handle = transport::parseAddress(address);
  if (!handle.ok()) return fail(Status::kInvalidArgument, handle.error().message);
  std::unique_lock lock(mu_);
  auto socket = transport::ControlSocket::connectTo(*handle);
  if (!socket.ok()) return fail(socket.status(), socket.error().message);
  uint64_t id = 0;
  if (Status c = startPeer(std::move(*socket), true, &id); c != Status::kOk) return c;
  Peer& p = *peers_.at(id);
  if (!waitFor(lock, timeoutMs, [&] { return p.phase != Peer::Phase::kHandshake; })) {
    peerLost(p, "handshake timed out");
    return fail(Status::kTimeout, "connect " + address + ": no handshake within " +
                                     std::to_string(timeoutMs) + " ms");
  }
  if (p.phase == Peer::Phase::kLost)
    return fail(p.refused ? Status::kRefused : Status::kRemoteError, "connect " + address + ": " + p.lostReason);
  *peer = id;
  return Status::kOk;
}

Status Engine::waitPeer(const std::string& name, int timeoutMs, uint64_t* peer) {
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
    return fail(Status::kTimeout, "no peer named '" + name + "' within " + std::to_string(timeoutMs) + " ms");
  *peer = found;
  return Status::kOk;
}

Status Engine::checkPeer(uint64_t peer) {
  std::lock_guard lock(mu_);
  auto it = peers_.find(peer);
  if (it == peers_.end()) return fail(Status::kNotFound, "peer " + std::to_string(peer) + ": unknown");
  if (it->second->phase != Peer::Phase::kReady)
    return fail(Status::kRemoteError, "peer " + it->second->name + ": " +
                                     (it->second->lostReason.empty() ? "not connected" : it->second->lostReason));
  return Status::kOk;
}

Status Engine::peerCredit(uint64_t peer, uint64_t* budget, uint64_t* inUse) {
  std::lock_guard lock(mu_);
  if (peers_.count(peer) == 0) return fail(Status::kNotFound, "peer " + std::to_string(peer) + ": unknown");
  return proto_->peerCredit(peer, budget, inUse);
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
    if (startPeer(transport::ControlSocket(std::move(*fd)), false, &id) == Status::kOk) ++n;
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
    if (Status s = p.socket.flush(); isError(s)) {
      p.refused = s == Status::kRefused;
      peerLost(p, p.refused ? "connection refused: nothing listens at that address"
                            : "control connection reset");
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
        if (onProof(p, *proof) != Status::kOk) break;
        continue;
      }
      if (!std::holds_alternative<Hello>(*m)) {
        peerLost(p, "handshake: expected hello");
        break;
      }
      if (onHello(p, std::get<Hello>(*m)) != Status::kOk) break;
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

Status Engine::onHello(Peer& p, const Hello& hello) {
  p.name = hello.name;
  p.remoteToken = hello.token;
  p.peerWorker = hello.workerAddress;
  p.contexts = hello.contexts;
  p.peerNonce = hello.nonce;
  const auth::Key& key = params_.auth_key;
  const uint8_t ours = key.enabled() ? 1 : 0;
  if (hello.auth != ours) {
    refuse(p, wire::Field::kAuth, ours, hello.auth,
           std::string("authentication: PACT_AUTH_KEY_FILE is set on ") +
               (ours ? "this side only" : "the peer only"));
    return Status::kRefused;
  }
  if (!key.enabled()) return connectEndpoint(p);
  // Prove we know the key (over the peer's challenge); the endpoint waits for the peer's proof.
  sendHandshake(p, Proof{auth::mac(key.secret, kProofLabel, p.peerNonce, p.nonce)});
  return Status::kOk;
}

Status Engine::onProof(Peer& p, const Proof& proof) {
  const auth::Key& key = params_.auth_key;
  if (!key.enabled() || p.peerWorker.empty()) {
    peerLost(p, "handshake: unexpected proof");
    return Status::kRefused;
  }
  if (!auth::verify(key.secret, kProofLabel, p.nonce, p.peerNonce, proof.mac)) {
    refuse(p, wire::Field::kAuth, 1, 0, "authentication: the peer's proof does not verify (another key)");
    return Status::kRefused;
  }
  return connectEndpoint(p);
}

void Engine::sendHandshake(Peer& p, const Control& m) {
  ignore(p.socket.send(wire::encodeEngine(encode(m))));
}

Status Engine::connectEndpoint(Peer& p) {
  auto& rail = contexts_[routes_[ctrlRoute_].context].dev->rail(0);
  auto ep = ucx::Endpoint::create(rail.worker.get(), p.peerWorker, &Engine::onEndpointError,
                                  &p, &rail.peerFailureSupported);
  if (!ep.ok()) {
    peerLost(p, ep.error().message);
    return Status::kRemoteError;
  }
  p.ctrl = std::make_shared<transport::Lanes>();
  p.ctrl->configure(routes_[ctrlRoute_].channel);
  p.ctrl->add(transport::SharedEndpoint::own(std::move(*ep)), 0);
  --handshaking_;
  p.phase = Peer::Phase::kReady;
  PACT_INFO("engine %s: peer %s ready (%s)", config_.name.c_str(), p.name.c_str(),
            p.outbound ? "connected" : "accepted");
  proto_->peerReady(p.id, p.name);
  return Status::kOk;
}

void Engine::peerLost(Peer& p, const std::string& why) {
  if (p.phase == Peer::Phase::kLost) return;
  PACT_INFO("engine %s: peer %s lost: %s", config_.name.c_str(), p.name.c_str(), why.c_str());
  if (p.phase == Peer::Phase::kHandshake) --handshaking_;
  p.phase = Peer::Phase::kLost;
  p.lostReason = why;
  ignore(p.socket.flush());  // a refusal on its way goes out; then the peer sees the close
  p.socket = transport::ControlSocket();
  proto_->peerLost(p.id);
  closePeerEndpoints(p);
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


ucx::AmVerdict Engine::onControlAm(void* arg, const ucx::AmMessage& msg) {
  Engine* e = static_cast<AmSource*>(arg)->engine;
  uint64_t token = 0;
  if (msg.headerLength != sizeof token || msg.rendezvous) {
    PACT_WARN("engine %s: malformed control message dropped", e->config_.name.c_str());
    return ucx::AmVerdict::kRefuse;
  }
  std::memcpy(&token, msg.header, sizeof token);
  Peer* p = e->peerByToken(token);
  if (p == nullptr) return ucx::AmVerdict::kDone;  // from a connection already closed
  auto m = decode(std::span(static_cast<const uint8_t*>(msg.data), msg.length));
  if (!m.ok()) {
    PACT_WARN("engine %s: control message from %s refused: %s", e->config_.name.c_str(),
              p->name.c_str(), m.error().message.c_str());
    return ucx::AmVerdict::kDone;
  }
  e->proto_->onControl(p->id, *m);
  e->cv_.notify_all();
  return ucx::AmVerdict::kDone;
}

}  // namespace pact::engine
