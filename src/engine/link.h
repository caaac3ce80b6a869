// Link: what the commit protocol (protocol.h) needs of the connections under it, and nothing
// else. The engine's link is its Routes (routes.h: UCX active messages over each class's lanes,
// on the transport core); the protocol tests run two protocols over an in-memory link that
// drops, duplicates, reorders and delays what they choose (tests/unit/protocol_test.cpp).
//
// Every call is made with the engine's lock held. Peers are the ids the engine gave them
// (Protocol::peerReady); routes are the engine classes' indices (DEFAULT first).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "common/delivery.h"
#include "common/memory_type.h"
#include "engine/control.h"
#include "engine/transfer.h"

namespace pact::engine {

// What became of an arriving piece: taken (landed, being fetched, or dropped as stale or a
// duplicate) or refused (out of range: a rendezvous sender's operation then fails); the same
// answer UCX's active-message handlers give (ucx::AmVerdict).
using PieceVerdict = Delivery;

class Link {
 public:
  // Empty when route can carry pieces to peer; otherwise why not (the send fails with it).
  virtual std::string reach(uint64_t peer, size_t route) = 0;
  // A control message to peer, in order with the others to it. route >= 0: the transfer's Done,
  // sent behind its pieces on the route's first lane.
  virtual void sendControl(uint64_t peer, const Control& m, int route = -1) = 0;
  // A piece of n bytes at src (the link fills h.token). The link calls Protocol::pieceSent(xfer,
  // ok) exactly once for it, later (never from inside this call), also when it gives it up.
  // srcType: the memory src lies in.
  virtual void sendPiece(uint64_t peer, size_t route, const PieceHeader& h, const uint8_t* src,
                         uint64_t n, uint64_t xfer, MemoryType srcType) = 0;
  // An eager offer (m.flags has kOfferEager) with every byte of the transfer behind it, read
  // from src in order, as one active message on the route's first lane (never rendezvous). The
  // link calls Protocol::pieceSent(xfer, ok) exactly once for it, later, as for a piece.
  virtual void sendEager(uint64_t peer, size_t route, const Offer& m, std::span<const Extent> src,
                         uint64_t xfer) = 0;
  // Only from inside Protocol::onPiece for a rendezvous piece: fetches its n bytes into dst,
  // then calls Protocol::pieceFetched(xfer, attempt, dst, n, ok) exactly once, later.
  // dstType: the memory dst lies in (UCX writes GPU memory itself: no copy by the CPU).
  virtual void fetch(void* descriptor, uint8_t* dst, uint64_t n, uint64_t xfer, uint32_t attempt,
                     MemoryType dstType) = 0;

 protected:
  ~Link() = default;
};

}  // namespace pact::engine
