// The engine's public calls on its peers (engine.h): each takes the engine's lock, asks the
// PeerTable (peer_table.h) and, to connect, waits for the handshake.
#include "engine/engine.h"

#include "transport/control_socket.h"

namespace pact::engine {

Result<std::string> Engine::address() {
  std::lock_guard lock(mu_);
  return peers_.address();
}

Result<uint64_t> Engine::connect(const std::string& address, int timeoutMs) {
  auto handle = transport::parseAddress(address);
  if (!handle.ok()) return Error{Status::kInvalidArgument, handle.error().message};
  std::unique_lock lock(mu_);
  auto opened = peers_.connect(*handle);
  if (!opened) return Error{opened.status(), "connect " + address + ": " + opened.error().message};
  Peer& p = **opened;
  if (!waitFor(lock, timeoutMs, [&] { return !p.connecting(); })) {
    peers_.lose(p, "handshake timed out");
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
  waitFor(lock, timeoutMs, [&] { return (found = peers_.readyNamed(name)) != 0; });
  if (found == 0)
    return Error{Status::kTimeout, "no peer named '" + name + "' within " + std::to_string(timeoutMs) + " ms"};
  return found;
}

Result<void> Engine::checkPeer(uint64_t peer) {
  std::lock_guard lock(mu_);
  const Peer* p = peers_.find(peer);
  if (p == nullptr) return Error{Status::kNotFound, "peer " + std::to_string(peer) + ": unknown"};
  if (p->phase != Peer::Phase::kReady)
    return Error{Status::kRemoteError,
                 "peer " + p->name + ": " + (p->lostReason.empty() ? "not connected" : p->lostReason)};
  return {};
}

Result<void> Engine::disconnectPeer(uint64_t peer, const std::string& reason) {
  std::lock_guard lock(mu_);
  Peer* p = peers_.find(peer);
  if (p == nullptr)
    return Error{Status::kNotFound, "disconnect: peer " + std::to_string(peer) + ": unknown"};
  peers_.lose(*p, "disconnected by the application" + (reason.empty() ? "" : ": " + reason),
              Status::kPeerStale);
  wake();
  return {};
}

Result<CreditView> Engine::peerCredit(uint64_t peer) {
  std::lock_guard lock(mu_);
  if (peers_.find(peer) == nullptr)
    return Error{Status::kNotFound, "peer " + std::to_string(peer) + ": unknown"};
  return proto_->peerCredit(peer);
}

}  // namespace pact::engine
