// Engine-private: a connection to another engine. The PeerTable (peer_table.h) owns the records
// and writes who the peer is and in which phase; the Routes (routes.h) write what carries
// messages to it (its lanes, its watched rails). Included by the engine's own files only.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "engine/control.h"
#include "transport/lanes.h"
#include "transport/rail_set.h"
#include "ucx/worker.h"

namespace pact::engine {

struct PieceOp;

// One connection to another engine (or to this one): a channel of the session to its process
// (handshake, then liveness), the control endpoint (to the peer's CTRL context) and, per engine
// class used to send to it, that class's lanes (endpoints to the peer's context of the same
// service).
struct Peer {
  // kHandshake: the Hellos are being exchanged over the session. kWiring: they were, and the
  // endpoints to the peer finish their UCX wireup (messages already flow). kReady: both sides are
  // wired (connect and peer_wait return). kLost: gone.
  enum class Phase : uint8_t { kHandshake, kWiring, kReady, kLost };
  // ---- the PeerTable's: who the peer is, its session, its phase ----
  uint64_t id = 0;           // our token: the peer puts it in every message to us
  uint64_t remoteToken = 0;  // its token: we put it in every message to it
  std::string name;
  bool outbound = false;
  Phase phase = Phase::kHandshake;
  uint64_t channel = 0;      // of the session to the peer's process (0: none)
  std::string lostReason;    // (an endpoint's error may set it first: Routes::onEndpointError)
  bool refused = false;      // the handshake was refused (by either side): connect says REFUSED
  std::vector<uint8_t> peerWorker;       // the peer's control worker (from its Hello)
  std::vector<ContextAddress> contexts;  // the peer's (from its Hello)
  std::vector<wire::ProbeAddress> probes;  // the peer's rails' probe addresses (from its Hello)
  bool connecting() const { return phase == Phase::kHandshake || phase == Phase::kWiring; }
  // Its Hellos exchanged and not lost: messages to and from it flow.
  bool connected() const { return phase == Phase::kWiring || phase == Phase::kReady; }

  // ---- the Routes': what carries messages to it ----
  // The control lane: one endpoint from the CTRL class's context to the peer's control worker.
  // Classes of one lane on the same context share it (one connection, pieces and Done in order).
  std::shared_ptr<transport::Lanes> ctrl;
  std::vector<std::shared_ptr<transport::Lanes>> lanes;  // per route, made at the handshake (null: the peer has none)
  // The wiring (Routes::connect, Routes::wired): a flush of every endpoint made at the handshake
  // (the connecting side's at once, the accepting side's once the peer's Wired came: ctrl stays
  // null until then), which ends once UCX finished wiring it up; then this side's Wired is sent
  // (wiredHere), and the peer's came (wiredThere). After both, neither side has a UCX wireup
  // under way that a peer leaving could abort (docs/engine.md).
  std::vector<ucx::Pending> wiring;
  bool wiredHere = false;
  bool wiredThere = false;
  // Rail failover (failover.cpp): the peer's rails as watched from here, the pieces UCX completed
  // over them whose transfer is still live (sent again if their rail goes out), and those that
  // failed with their rail (sent again once the lanes moved).
  transport::RailSet rails;
  std::vector<PieceOp*> sent;
  std::vector<PieceOp*> parked;
  // Endpoints lanes left on their way home, closed gracefully once due: closing one at once could
  // end the connection it shares with the peer's endpoint on that rail while the peer, not home
  // yet, still sends over it.
  std::vector<std::pair<TimePoint, std::shared_ptr<transport::SharedEndpoint>>> leaving;
  static constexpr size_t kMinSentPrune = 256;
  // Whether a rail's failure is failed over (not a loss of the peer).
  bool failsOver() const { return phase == Phase::kReady && rails.active(); }
  size_t sentPruneAt = kMinSentPrune;  // sent is pruned of settled transfers' pieces at this size
};

}  // namespace pact::engine
