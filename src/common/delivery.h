// What became of an arriving message (a UCX active message, an engine piece): taken (landed, being
// fetched, or dropped as stale or a duplicate), or refused (a rendezvous refused: UCX fails the
// sender's operation). One answer for the UCX layer (ucx::AmVerdict) and the engine's protocol
// (engine::PieceVerdict).
#pragma once

#include <cstdint>

namespace pact {

enum class Delivery : uint8_t { kDone, kRefuse };

}  // namespace pact
