// Engine connections: listen/connect over the transport core's sessions (transport/session.h:
// one control connection per peer engine's process, its handshake with PACT_AUTH_KEY_FILE
// proofs, its liveness), each peer a channel whose open and answer carry the two Hellos (names,
// tokens, UCX addresses); and the control messages on UCX active messages handed to the protocol.
#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "engine/engine.h"
#include "engine/peer.h"
#include "transport/wire.h"
#include "ucx/ucx_status.h"

namespace pact::engine {


Result<std::string> Engine::address() {
  std::lock_guard lock(mu_);
  if (!listening_) return Error{Status::kNotFound, "engine " + config_.name + " does not listen"};
  return transport::formatAddress(listenHandle_);
}

std::vector<uint8_t> Engine::helloFor(const Peer& p) {
  transport::DeviceCtx& ctrl = *contexts_[routes_[ctrlRoute_].context].dev;
  Hello hello{config_.name, p.id, proto_->epoch(), ctrl.worker(0).address(), {}, probes_};
  for (const Context& c : contexts_) hello.contexts.push_back({c.dev->serviceKey(), c.dev->addresses()});
  return encode(Control(hello));
}

Engine::Peer& Engine::newPeer(bool outbound) {
  auto p = std::make_unique<Peer>();
  p->id = nextId_++;
  p->outbound = outbound;
  timers_.add(now() + params_.peer_timeout, p->id, TimerKind::kHandshake);
  ++handshaking_;
  Peer& ref = *p;
  peers_.emplace(ref.id, std::move(p));
  return ref;
}

Result<uint64_t> Engine::connect(const std::string& address, int timeoutMs) {
  auto handle = transport::parseAddress(address);
  if (!handle.ok()) return Error{Status::kInvalidArgument, handle.error().message};
  std::unique_lock lock(mu_);
  Peer& p = newPeer(true);
  // The session carries the handshake (wire version, PACT_AUTH_KEY_FILE proofs); the channel's
  // open and its answer carry each side's Hello.
  auto channel = sessions_->open(*handle, helloFor(p));
  if (!channel.ok()) {
    peerLost(p, channel.error().message);
    return Error{channel.status(), "connect " + address + ": " + channel.error().message};
  }
  p.channel = *channel;
  if (!waitFor(lock, timeoutMs, [&] { return p.phase != Peer::Phase::kHandshake; })) {
    peerLost(p, "handshake timed out");
    return Error{Status::kTimeout,
                 "connect " + address + ": no handshake within " + std::to_string(timeoutMs) + " ms"};
  }
  if (p.phase == Peer::Phase::kLost)
    return Error{p.refused ? Status::kRefused : Status::kRemoteError, "connect " + address + ": " + p.lostReason};
  return p.id;
}

Result<uint64_t> Engine::waitPeer(const std::string& name, int timeoutMs) {
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
    return Error{Status::kTimeout, "no peer named '" + name + "' within " + std::to_string(timeoutMs) + " ms"};
  return found;
}

Result<void> Engine::checkPeer(uint64_t peer) {
  std::lock_guard lock(mu_);
  auto it = peers_.find(peer);
  if (it == peers_.end()) return Error{Status::kNotFound, "peer " + std::to_string(peer) + ": unknown"};
  if (it->second->phase != Peer::Phase::kReady)
    return Error{Status::kRemoteError,
                 "peer " + it->second->name + ": " +
                     (it->second->lostReason.empty() ? "not connected" : it->second->lostReason)};
  return {};
}

Result<void> Engine::disconnectPeer(uint64_t peer, const std::string& reason) {
  std::lock_guard lock(mu_);
  auto it = peers_.find(peer);
  if (it == peers_.end())
    return Error{Status::kNotFound, "disconnect: peer " + std::to_string(peer) + ": unknown"};
  peerLost(*it->second, "disconnected by the application" + (reason.empty() ? "" : ": " + reason),
           Status::kPeerStale);
  wake();
  return {};
}

Result<CreditView> Engine::peerCredit(uint64_t peer) {
  std::lock_guard lock(mu_);
  if (peers_.count(peer) == 0) return Error{Status::kNotFound, "peer " + std::to_string(peer) + ": unknown"};
  return proto_->peerCredit(peer);
}

namespace {
// A peer's Hello from a channel payload, or why it is not one.
Result<Hello> helloFrom(const std::vector<uint8_t>& payload) {
  auto m = decode(payload);
  if (!m.ok()) return m.error();
  if (!std::holds_alternative<Hello>(*m)) return Error{Status::kInvalidArgument, "expected a hello"};
  return std::get<Hello>(*m);
}
}  // namespace

int Engine::pollPeers() {
  int n = sessions_->step();
  // Engines connecting to this one: a channel to its listen id each.
  while (listening_) {
    auto in = sessions_->nextOpen(listenHandle_.listenId, false);  // stepped above
    if (!in.ok()) {  // a session this listener refused (another key, one side without one)
      PACT_INFO("engine %s: %s", config_.name.c_str(), in.error().message.c_str());
      if (in.status() == Status::kRefused) continue;
      break;
    }
    if (!*in) break;
    ++n;
    auto hello = helloFrom((*in)->open.payload);
    if (!hello.ok()) {
      PACT_WARN("engine %s: connection from %s refused: handshake: %s", config_.name.c_str(),
                (*in)->peer.c_str(), hello.error().message.c_str());
      sessions_->refuseOpen(**in, wire::Refuse{wire::Field::kVersion, wire::kVersion, 0});
      continue;
    }
    Peer& p = newPeer(false);
    auto channel = sessions_->acceptOpen(**in, helloFor(p));
    if (!channel.ok()) {
      peerLost(p, channel.error().message);
      continue;
    }
    p.channel = *channel;
    onHello(p, *hello);
  }
  for (auto& [id, pp] : peers_) {
    Peer& p = *pp;
    if (p.phase == Peer::Phase::kLost) continue;
    if (p.phase == Peer::Phase::kHandshake) {
      if (!p.outbound || p.channel == 0) continue;
      auto opened = sessions_->opened(p.channel, false);
      if (!opened.ok()) {
        p.channel = 0;  // the sessions forgot it
        p.refused = opened.status() == Status::kRefused;
        peerLost(p, opened.error().message);
        ++n;
        continue;
      }
      if (!*opened) continue;
      ++n;
      auto hello = helloFrom((*opened)->payload);
      if (!hello.ok()) {
        peerLost(p, "handshake: " + hello.error().message);
        continue;
      }
      onHello(p, *hello);
      continue;
    }
    const transport::ChannelView v = sessions_->view(p.channel, false);
    if (v.peerClosed) {
      peerLost(p, "the peer closed");
      ++n;
    } else if (!v.lostReason.empty()) {
      peerLost(p, v.lostReason);
      ++n;
    }
  }
  return n;
}

bool Engine::onHello(Peer& p, const Hello& hello) {
  p.name = hello.name;
  p.remoteToken = hello.token;
  p.peerWorker = hello.workerAddress;
  p.contexts = hello.contexts;
  if (!connectEndpoint(p)) return false;
  watchRails(p, hello.probes);
  return true;
}

bool Engine::connectEndpoint(Peer& p) {
  auto ep = contexts_[routes_[ctrlRoute_].context].dev->ownEndpoint(0, p.peerWorker, &Engine::onEndpointError, &p);
  if (!ep.ok()) {
    peerLost(p, ep.error().message);
    return false;
  }
  p.ctrl = std::make_shared<transport::Lanes>();
  p.ctrl->configure(routes_[ctrlRoute_].channel);
  p.ctrl->add(std::move(*ep), 0);
  --handshaking_;
  p.phase = Peer::Phase::kReady;
  PACT_INFO("engine %s: peer %s ready (%s)", config_.name.c_str(), p.name.c_str(),
            p.outbound ? "connected" : "accepted");
  proto_->peerReady(p.id, p.name);
  return true;
}

void Engine::peerLost(Peer& p, const std::string& why, Status transfers) {
  if (p.phase == Peer::Phase::kLost) return;
  PACT_INFO("engine %s: peer %s lost: %s", config_.name.c_str(), p.name.c_str(), why.c_str());
  if (p.phase == Peer::Phase::kHandshake) --handshaking_;
  p.phase = Peer::Phase::kLost;
  p.lostReason = why;
  if (p.channel != 0) {
    // An answered channel says goodbye (the peer sees "the peer closed"); an unanswered open is
    // given up.
    if (p.outbound && p.remoteToken == 0)
      sessions_->forget(p.channel);
    else
      sessions_->close(p.channel, false, nullptr);
    p.channel = 0;
  }
  proto_->peerLost(p.id, transfers);
  closePeerEndpoints(p);
  if (int n = proto_->abandonSends(p.id); n > 0)
    PACT_INFO("engine %s: %d send(s) to %s still inside UCX after the close, given up",
              config_.name.c_str(), n, p.name.c_str());
  cv_.notify_all();
}

void Engine::onEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto* p = static_cast<Peer*>(arg);
  // Runs inside ucp_worker_progress with the engine lock held. The peer's session reports a dead
  // peer (pollPeers -> peerLost); this keeps UCX's reason for a send refused before that, and
  // marks the lane's endpoint failed (rail failover takes its rail out: failover.cpp).
  const auto mark = [&](transport::Lanes* l) {
    for (size_t i = 0; l != nullptr && i < l->size(); ++i)
      if (l->endpoint(i).get() == ep) l->shared(i)->error = status;
  };
  mark(p->ctrl.get());
  for (auto& l : p->lanes) mark(l.get());
  if (p->lostReason.empty() && !p->rails.active()) p->lostReason = std::string("ucx: ") + ucs_status_string(status);
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
  auto m = decode(std::span(static_cast<const uint8_t*>(msg.data), msg.length), &e->spareAdvertise_);
  if (!m.ok()) {
    PACT_WARN("engine %s: control message from %s refused: %s", e->config_.name.c_str(),
              p->name.c_str(), m.error().message.c_str());
    return ucx::AmVerdict::kDone;
  }
  e->proto_->onControl(p->id, *m);
  if (auto* a = std::get_if<Advertise>(&*m)) e->spareAdvertise_ = std::move(*a);  // for the next one
  e->cv_.notify_all();
  return ucx::AmVerdict::kDone;
}

}  // namespace pact::engine
