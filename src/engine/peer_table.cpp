// The PeerTable (peer_table.h): listen/connect over the transport core's sessions
// (transport/session.h: one control connection per peer engine's process, its handshake with
// PACT_AUTH_KEY_FILE proofs, its liveness), each peer a channel whose open and answer carry the
// two Hellos (names, tokens, UCX addresses).
#include "engine/peer_table.h"

#include <arpa/inet.h>

#include "common/log.h"
#include "engine/engine.h"
#include "transport/control_socket.h"

namespace pact::engine {

PeerTable::PeerTable(std::string name, const Params& params, Events& events)
    : name_(std::move(name)), params_(params), events_(events) {}

PeerTable::~PeerTable() = default;

void PeerTable::open(uint64_t epoch) {
  transport::Sessions::Config sc;
  sc.epoch = epoch;
  sc.key = params_.auth_key;
  sc.peerTimeout = params_.peer_timeout;
  sc.face = "engine " + name_;
  sc.checkEpoch = false;  // the protocol judges epochs per transfer; setEpoch changes it live
  sessions_ = std::make_unique<transport::Sessions>(sc);
}

Result<void> PeerTable::listen(const std::string& listenIp, uint16_t port, const std::string& routableIp) {
  auto ip = transport::resolveListenIp(listenIp);  // an interface or host name too
  if (!ip.ok()) return Error{ip.status(), "engine " + name_ + ": " + ip.error().message};
  auto h = sessions_->listen(*ip, port, true);
  if (!h.ok())
    return Error{h.status(), "listen on " + *ip + ":" + std::to_string(port) + ": " + h.error().message};
  listenHandle_ = *h;
  listening_ = true;
  if (!transport::isWildcard(*ip)) return {};
  // Bound to the wildcard: what address() and the metadata publish is the engine's first device's
  // address instead (a device pact takes is never loopback unless named).
  if (routableIp.empty() || inet_pton(listenHandle_.family, routableIp.c_str(), listenHandle_.addr) != 1) {
    PACT_WARN("engine %s: listening on %s, but no routable address of this host to publish in its place",
              name_.c_str(), transport::formatAddress(listenHandle_).c_str());
    return {};
  }
  PACT_INFO("engine %s: listening on every address; publishing %s", name_.c_str(),
            transport::formatAddress(listenHandle_).c_str());
  return {};
}

Result<std::string> PeerTable::address() const {
  if (!listening_) return Error{Status::kNotFound, "engine " + name_ + " does not listen"};
  return transport::formatAddress(listenHandle_);
}

Peer& PeerTable::newPeer(bool outbound) {
  auto p = std::make_unique<Peer>();
  p->id = nextId_++;
  p->outbound = outbound;
  timers_.add(now() + params_.peer_timeout, p->id, TimerKind::kHandshake);
  ++handshaking_;
  Peer& ref = *p;
  peers_.emplace(ref.id, std::move(p));
  return ref;
}

Result<Peer*> PeerTable::connect(const wire::ListenHandle& h) {
  Peer& p = newPeer(true);
  // The session carries the handshake (wire version, PACT_AUTH_KEY_FILE proofs); the channel's
  // open and its answer carry each side's Hello.
  auto channel = sessions_->open(h, events_.hello(p));
  if (!channel.ok()) {
    lose(p, channel.error().message);
    return channel.error();
  }
  p.channel = *channel;
  return &p;
}

uint64_t PeerTable::readyNamed(const std::string& name) const {
  for (const auto& [id, p] : peers_)
    if (p->phase == Peer::Phase::kReady && p->name == name) return id;
  return 0;
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

int PeerTable::poll(TimePoint t) {
  // The sessions only carry handshakes and liveness: look at them every PACT_LIVENESS_INTERVAL
  // (every call while a handshake is under way), not on every spin of a busy progress loop.
  if (handshaking_ == 0 && t - lastSessionCheck_ < params_.liveness_interval) return 0;
  lastSessionCheck_ = t;
  return pollPeers();
}

int PeerTable::pollPeers() {
  int n = sessions_->step();
  // Engines connecting to this one: a channel to its listen id each.
  while (listening_) {
    auto in = sessions_->nextOpen(listenHandle_.listenId, false);  // stepped above
    if (!in.ok()) {  // a session this listener refused (another key, one side without one)
      PACT_INFO("engine %s: %s", name_.c_str(), in.error().message.c_str());
      if (in.status() == Status::kRefused) continue;
      break;
    }
    if (!*in) break;
    ++n;
    auto hello = helloFrom((*in)->open.payload);
    if (!hello.ok()) {
      PACT_WARN("engine %s: connection from %s refused: handshake: %s", name_.c_str(),
                (*in)->peer.c_str(), hello.error().message.c_str());
      sessions_->refuseOpen(**in, wire::Refuse{wire::Field::kVersion, wire::kVersion, 0});
      continue;
    }
    Peer& p = newPeer(false);
    auto channel = sessions_->acceptOpen(**in, events_.hello(p));
    if (!channel.ok()) {
      lose(p, channel.error().message);
      continue;
    }
    p.channel = *channel;
    onHello(p, *hello);
  }
  for (auto& [id, pp] : peers_) {
    Peer& p = *pp;
    if (p.phase == Peer::Phase::kLost) continue;
    const transport::ChannelView v = p.phase == Peer::Phase::kHandshake ? transport::ChannelView{}
                                                                         : sessions_->view(p.channel, false);
    if (v.peerClosed) {
      lose(p, "the peer closed");
      ++n;
      continue;
    }
    if (!v.lostReason.empty()) {
      lose(p, v.lostReason);
      ++n;
      continue;
    }
    if (p.phase == Peer::Phase::kWiring) {
      auto wired = events_.wired(p);
      if (!wired) {
        lose(p, wired.error().message);
        ++n;
      } else if (*wired) {
        becomeReady(p);
        ++n;
      }
      continue;
    }
    if (p.phase == Peer::Phase::kHandshake) {
      if (!p.outbound || p.channel == 0) continue;
      auto opened = sessions_->opened(p.channel, false);
      if (!opened.ok()) {
        p.channel = 0;  // the sessions forgot it
        p.refused = opened.status() == Status::kRefused;
        lose(p, opened.error().message);
        ++n;
        continue;
      }
      if (!*opened) continue;
      ++n;
      auto hello = helloFrom((*opened)->payload);
      if (!hello.ok()) {
        lose(p, "handshake: " + hello.error().message);
        continue;
      }
      onHello(p, *hello);
    }
  }
  return n;
}

void PeerTable::onHello(Peer& p, const Hello& hello) {
  p.name = hello.name;
  p.remoteToken = hello.token;
  p.peerWorker = hello.workerAddress;
  p.contexts = hello.contexts;
  p.probes = hello.probes;
  p.phase = Peer::Phase::kWiring;  // messages to and from it flow from here on
  if (auto r = events_.greeted(p); !r) lose(p, r.error().message);
}

void PeerTable::wiredUp(Peer& p) {
  if (p.phase == Peer::Phase::kWiring) becomeReady(p);
}

void PeerTable::becomeReady(Peer& p) {
  --handshaking_;
  p.phase = Peer::Phase::kReady;
  PACT_INFO("engine %s: peer %s ready (%s)", name_.c_str(), p.name.c_str(),
            p.outbound ? "connected" : "accepted");
  events_.ready(p);
}

int PeerTable::fireTimers(TimePoint t) {
  return timers_.popDue(t, [&](const Timers<TimerKind>::Timer& timer) {
    Peer* p = find(timer.id);
    if (p == nullptr || !p->connecting()) return false;
    lose(*p, p->phase == Peer::Phase::kHandshake
                 ? "no handshake from the peer within PACT_PEER_TIMEOUT"
                 : "the UCX endpoints to the peer were not wired up within PACT_PEER_TIMEOUT");
    return true;
  });
}

void PeerTable::lose(Peer& p, const std::string& why, Status transfers) {
  if (p.phase == Peer::Phase::kLost) return;
  PACT_INFO("engine %s: peer %s lost: %s", name_.c_str(), p.name.c_str(), why.c_str());
  if (p.connecting()) --handshaking_;
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
  events_.lost(p, transfers);
}

void PeerTable::loseAll(const std::string& why) {
  for (auto& [id, p] : peers_)
    if (p->phase == Peer::Phase::kReady) lose(*p, why);
}

void PeerTable::holdLiveness(const Peer& p, bool on) {
  if (p.channel != 0) sessions_->holdLiveness(p.channel, on);
}

}  // namespace pact::engine
