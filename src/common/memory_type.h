// Where a block of memory lives: host memory, or CUDA device memory. Small enough for every layer
// (the engine's headers take it from here, not from UCX's registration cache).
#pragma once

#include <cstdint>

namespace pact {

enum class MemoryType : uint8_t { kHost, kCuda };
inline const char* memoryTypeName(MemoryType t) { return t == MemoryType::kCuda ? "cuda" : "host"; }

}  // namespace pact
