// HeldLink: a Link that holds back every send asked for while UCX is inside its progress, and
// passes them on, in order, once it has returned (release()). Nothing the protocol sends then
// starts from inside a UCX callback.
//
// Why: UCX 1.13's tcp transport handles one batch of socket events per progress call. A send
// started from a callback of that batch on an endpoint whose peer just died fails at once, and
// UCX closes that endpoint there; when the same endpoint's own event comes later in the batch,
// UCX aborts the process (tcp_iface.c:307, `ep->conn_state != UCT_TCP_EP_CONN_STATE_CLOSED`).
// A survivor of a peer's death died with it (issue #33; tests/fault/group_death_test.cpp).
//
// fetch() and reach() pass straight through: a rendezvous piece must be fetched from inside the
// callback that announced it, and reach() sends nothing. Order is kept: everything held goes
// out before anything sent after the release.
#pragma once

#include <variant>
#include <vector>

#include "engine/link.h"

namespace pact::engine {

class HeldLink final : public Link {
 public:
  explicit HeldLink(Link& inner) : inner_(inner) {}

  // While held, sends queue up; release() ends the hold and sends them.
  void hold() { held_ = true; }
  void release();

  std::string reach(uint64_t peer, size_t route) override { return inner_.reach(peer, route); }
  void sendControl(uint64_t peer, const Control& m, int route = -1) override;
  void sendPiece(uint64_t peer, size_t route, const PieceHeader& h, const uint8_t* src, uint64_t n,
                 uint64_t xfer, MemoryType srcType) override;
  void sendEager(uint64_t peer, size_t route, const Offer& m, std::span<const Extent> src,
                 uint64_t xfer) override;
  void fetch(void* descriptor, uint8_t* dst, uint64_t n, uint64_t xfer, uint32_t attempt,
             MemoryType dstType) override {
    inner_.fetch(descriptor, dst, n, xfer, attempt, dstType);
  }

 private:
  struct ControlSend {
    uint64_t peer;
    Control m;
    int route;
  };
  struct PieceSend {
    uint64_t peer;
    size_t route;
    PieceHeader h;
    const uint8_t* src;
    uint64_t n, xfer;
    MemoryType srcType;
  };
  struct EagerSend {
    uint64_t peer;
    size_t route;
    Offer m;
    std::vector<Extent> src;
    uint64_t xfer;
  };
  using Held = std::variant<ControlSend, PieceSend, EagerSend>;

  Link& inner_;
  bool held_ = false;
  std::vector<Held> queue_, sending_;  // both keep their capacity: no allocation per progress
};

}  // namespace pact::engine
