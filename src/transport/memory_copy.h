// Copies into and out of memory of any type pact handles, by the CPU (host memory) or through the
// CUDA driver (device memory): where a face lands eager bytes or reads bytes for a checksum. No
// UCX here, so the engine's protocol can use it and stay free of UCX's headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "common/function_ref.h"
#include "common/memory_type.h"
#include "common/status.h"
#include "cuda/driver.h"

namespace pact::transport {

// Copies n bytes from host memory src into dst, which is memory of type t (CUDA: driver's copy;
// kUnsupported without a driver).
Status copyIn(const cuda::Driver* driver, void* dst, const void* src, size_t n, MemoryType t);
// Hands the n bytes at src (memory of type t) to sink in order: host memory directly, CUDA memory
// through staging (at most staging.size() bytes per driver copy).
Status readStaged(const cuda::Driver* driver, const void* src, size_t n, MemoryType t,
                  std::span<uint8_t> staging, FunctionRef<void(const uint8_t*, size_t)> sink);

}  // namespace pact::transport
