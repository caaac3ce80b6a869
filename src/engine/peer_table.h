// PeerTable: the engine's peers. It owns the Peer records (peer.h) and their ids, the transport
// core's Sessions (transport/session.h: one control connection per peer engine's process, its
// handshake with PACT_AUTH_KEY_FILE proofs, its liveness) with the engine's listener, the
// handshake (each peer a channel whose open and answer carry the two Hellos; a timer per peer at
// PACT_PEER_TIMEOUT) and the peers' liveness (the session's EOF or keepalive, the channel's
// goodbye). Its one job: which peers there are, and in which phase. What a peer's handshake,
// readiness or loss means for the lanes and the transfers it tells its owner through Events; it
// calls nothing of UCX or of the protocol. Implemented in peer_table.cpp.
//
// Not synchronized: every call runs under the engine's lock.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "engine/control.h"
#include "engine/peer.h"
#include "engine/timers.h"
#include "transport/params.h"
#include "transport/session.h"
#include "transport/wire.h"

namespace pact::engine {

class PeerTable {
 public:
  // What the table tells its owner (the engine), each with the engine's lock held.
  class Events {
   public:
    // This engine's Hello to p, as a channel payload.
    virtual std::vector<uint8_t> hello(const Peer& p) = 0;
    // p's Hello came (its name, token, worker, contexts and probes are set): connect what
    // carries messages to it and start wiring it up. An error loses p, with its message.
    virtual Result<void> greeted(Peer& p) = 0;
    // Whether p is wired up on both sides (asked of a peer in Phase::kWiring on every poll); an
    // error loses p, with its message.
    virtual Result<bool> wired(Peer& p) = 0;
    // p is ready.
    virtual void ready(Peer& p) = 0;
    // p is lost (its reason set, its channel closed): its transfers end with status transfers.
    virtual void lost(Peer& p, Status transfers) = 0;

   protected:
    ~Events() = default;
  };

  PeerTable(std::string name, const Params& params, Events& events);
  ~PeerTable();
  PeerTable(const PeerTable&) = delete;
  PeerTable& operator=(const PeerTable&) = delete;

  // The sessions (epoch: the engine's at creation; the protocol judges epochs per transfer).
  void open(uint64_t epoch);
  // Listens on ip (an interface or host name too) and port. Bound to the wildcard, what
  // address() publishes is routableIp instead (the engine's first device's address).
  Result<void> listen(const std::string& ip, uint16_t port, const std::string& routableIp);
  Result<std::string> address() const;
  // A new peer in its handshake: a channel to the engine at h whose open carries this engine's
  // Hello. An error: the peer is lost already, with it.
  Result<Peer*> connect(const wire::ListenHandle& h);

  // Steps the sessions (engines connecting here, answers to this side's connects, peers that
  // closed or were lost) when due at t: every PACT_LIVENESS_INTERVAL, every call during a
  // handshake. The number of events.
  int poll(TimePoint t);
  // The handshakes not done within PACT_PEER_TIMEOUT end (p lost); how many.
  int fireTimers(TimePoint t);
  TimePoint nextTimer() const { return timers_.next(); }
  // Readable when the sessions have something (every session and the listener).
  int fd() const { return sessions_->fd(); }

  // p is gone (why: the reason; transfers: what its transfers end with). A second loss is nothing.
  void lose(Peer& p, const std::string& why, Status transfers = Status::kRemoteError);
  // Every ready peer says goodbye (each sees "the peer closed"), lost with why.
  void loseAll(const std::string& why);
  // The session's keepalive stops (on) or resumes judging whether p lives (rail failover).
  void holdLiveness(const Peer& p, bool on);
  // p, in Phase::kWiring, is wired up on both sides (Routes, when the peer's Wired comes after
  // this side's went): it is ready now.
  void wiredUp(Peer& p);
  // p's process (its session's id): what per-peer-process state is keyed by.
  uint64_t process(const Peer& p) const { return sessions_->peerProcess(p.channel); }

  // ---- lookups (no allocation) ----
  // The peer with this id (ready or not), or nullptr.
  Peer* find(uint64_t id) {
    auto it = peers_.find(id);
    return it == peers_.end() ? nullptr : it->second.get();
  }
  // The connected peer with this id (our token for it: being wired up, or ready), or nullptr.
  Peer* byToken(uint64_t token) {
    Peer* p = find(token);
    return p != nullptr && p->connected() ? p : nullptr;
  }
  // The id of the ready peer named name, 0 when none is.
  uint64_t readyNamed(const std::string& name) const;
  // f(peer) for every peer, in id order.
  template <class F>
  void forEach(F&& f) {
    for (auto& [id, p] : peers_) f(*p);
  }
  // Forgets every peer (the engine's shutdown, their endpoints closed).
  void clear() { peers_.clear(); }

 private:
  enum class TimerKind : uint8_t { kHandshake };
  Peer& newPeer(bool outbound);
  int pollPeers();
  // p's Hello: p is being wired up now (or was lost, with the reason).
  void onHello(Peer& p, const Hello& hello);
  void becomeReady(Peer& p);

  const std::string name_;  // the engine's
  const Params& params_;    // the engine's
  Events& events_;
  // The per-peer-process control connections of the one core (the plugin's Net has its own).
  std::unique_ptr<transport::Sessions> sessions_;
  wire::ListenHandle listenHandle_;  // where other engines connect (listen id 0 reaches it)
  bool listening_ = false;
  uint64_t nextId_ = 1;
  std::map<uint64_t, std::unique_ptr<Peer>> peers_;
  Timers<TimerKind> timers_;
  TimePoint lastSessionCheck_{};
  size_t handshaking_ = 0;  // peers connecting (the sessions are stepped every call)
};

}  // namespace pact::engine
