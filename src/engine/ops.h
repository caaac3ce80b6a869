// Routes-private (routes.cpp, peer_lanes.cpp, failover.cpp): the UCX operations of the engine's
// data path, each from one of the Routes' slabs (UCX completes into them, so the slabs outlive the
// workers), and what an active-message handler knows of where a message arrived.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/control.h"
#include "transport/lanes.h"
#include "ucx/worker.h"

namespace pact::engine {

class Routes;

// A UCX operation on a transfer's blocks (a piece sent or received), from the routes' slab: its
// completion finds the transfer by id (which may be gone by then: ids are never reused). size is
// the piece's length; lane and rail as the sender's lanes bound it.
struct PieceOp : ucx::Op, transport::LanePiece {
  Routes* routes = nullptr;
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
struct ControlOp : ucx::Op {
  Routes* routes = nullptr;
  std::vector<uint8_t> bytes;
  uint64_t xfer = 0;
  uint64_t peer = 0;  // the peer it goes to (its token)
  uint64_t token = 0;  // a control message's AM header: the peer's token for the connection
  std::vector<ucx::Iov> iov;
};

// What an active message handler knows of where the message arrived.
struct AmSource {
  Routes* routes;
  ucx::Worker* worker;
  uint8_t rail;
};

}  // namespace pact::engine
