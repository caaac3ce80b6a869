// Engine-private: a connection to another engine and the context of a UCX operation on a
// transfer's blocks. Included by the engine's own .cpp files only.
#pragma once

#include <string>
#include <vector>

#include "common/auth.h"
#include "transport/rail_set.h"

#include "engine/engine.h"

namespace pact::engine {


// One connection to another engine (or to this one): a channel of the session to its process
// (handshake, then liveness), the control endpoint (to the peer's CTRL context) and, per engine
// class used to send to it, that class's lanes (endpoints to the peer's context of the same
// service).
struct Engine::Peer {
  enum class Phase : uint8_t { kHandshake, kReady, kLost };
  uint64_t id = 0;           // our token: the peer puts it in every message to us
  uint64_t remoteToken = 0;  // its token: we put it in every message to it
  std::string name;
  bool outbound = false;
  Phase phase = Phase::kHandshake;
  uint64_t channel = 0;      // of the session to the peer's process (0: none)
  // The control lane: one endpoint from the CTRL class's context to the peer's control worker.
  // Classes of one lane on the same context share it (one connection, pieces and Done in order).
  std::shared_ptr<transport::Lanes> ctrl;
  std::vector<ContextAddress> contexts;                  // the peer's (from its Hello)
  std::vector<std::shared_ptr<transport::Lanes>> lanes;  // per route; null until first used
  std::string lostReason;
  bool refused = false;      // the handshake was refused (by either side): connect says REFUSED
  std::vector<uint8_t> peerWorker;
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

// A UCX operation on a transfer's blocks (a piece sent or received), from the engine's slab: its
// completion finds the transfer by id (which may be gone by then: ids are never reused). size is
// the piece's length; lane and rail as the sender's lanes bound it.
struct Engine::PieceOp : ucx::Op, transport::LanePiece {
  Engine* engine = nullptr;
  uint64_t xfer = 0;
  uint32_t attempt = 0;
  uint64_t peer = 0;     // send: whose lanes carry it
  size_t route = 0;      // send: which class's lanes
  uint8_t* addr = nullptr;  // send: the source; receive: the destination
  ucs_memory_type_t memType = UCS_MEMORY_TYPE_HOST;  // what addr is, as UCX is told
  bool posted = false;   // send: handed to UCX (a failure then is its rail's, not a withdrawal)
  uint8_t header[kPieceHeaderSize] = {};
};

// A control message on its way (the slab keeps the buffer's capacity for the next one).
// Also an eager offer: then bytes is the AM header (token and offer) and iov the transfer's
// blocks, and xfer the transfer told when it completes.
struct Engine::ControlOp : ucx::Op {
  Engine* engine = nullptr;
  std::vector<uint8_t> bytes;
  uint64_t xfer = 0;
  uint64_t peer = 0;  // the peer it goes to (its token)
  uint64_t token = 0;  // a control message's AM header: the peer's token for the connection
  std::vector<ucx::Iov> iov;
};

// What an active message handler knows of where the message arrived.
struct Engine::AmSource {
  Engine* engine;
  ucx::Worker* worker;
  uint8_t rail;
};

}  // namespace pact::engine
