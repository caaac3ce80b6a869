#include "engine/held_link.h"

namespace pact::engine {

void HeldLink::release() {
  // A send passed on may lead to more (a failed piece settles its transfer, which sends a
  // Cancel): the hold lasts until the queue is empty, so those go after everything before them.
  while (!queue_.empty()) {
    std::swap(queue_, sending_);
    for (Held& h : sending_) {
      std::visit(
          [&](auto& s) {
            using T = std::decay_t<decltype(s)>;
            if constexpr (std::is_same_v<T, ControlSend>) inner_.sendControl(s.peer, s.m, s.route);
            else if constexpr (std::is_same_v<T, PieceSend>)
              inner_.sendPiece(s.peer, s.route, s.h, s.src, s.n, s.xfer, s.srcType);
            else inner_.sendEager(s.peer, s.route, s.m, s.src, s.xfer);
          },
          h);
    }
    sending_.clear();
  }
  held_ = false;
}

void HeldLink::sendControl(uint64_t peer, const Control& m, int route) {
  if (held_) queue_.push_back(ControlSend{peer, m, route});
  else inner_.sendControl(peer, m, route);
}

void HeldLink::sendPiece(uint64_t peer, size_t route, const PieceHeader& h, const uint8_t* src,
                         uint64_t n, uint64_t xfer, MemoryType srcType) {
  if (held_) queue_.push_back(PieceSend{peer, route, h, src, n, xfer, srcType});
  else inner_.sendPiece(peer, route, h, src, n, xfer, srcType);
}

void HeldLink::sendEager(uint64_t peer, size_t route, const Offer& m, std::span<const Extent> src,
                         uint64_t xfer) {
  if (held_) queue_.push_back(EagerSend{peer, route, m, {src.begin(), src.end()}, xfer});
  else inner_.sendEager(peer, route, m, src, xfer);
}

}  // namespace pact::engine
