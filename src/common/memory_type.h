// Where a block of memory lives: host memory, or CUDA device memory. Small enough for every layer
// (the engine's headers take it from here, not from UCX's registration cache).
#pragma once

#include <cstdint>

namespace pact {

enum class MemoryType : uint8_t { kHost, kCuda };
inline const char* memoryTypeName(MemoryType t) { return t == MemoryType::kCuda ? "cuda" : "host"; }

// What became of an arriving message (an active message, an engine piece): taken (landed, being
// fetched, or dropped as stale or a duplicate), or refused (a rendezvous refused: UCX fails the
// sender's operation).
enum class Delivery : uint8_t { kDone, kRefuse };

}  // namespace pact
