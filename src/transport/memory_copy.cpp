#include "transport/memory_copy.h"

#include <algorithm>
#include <cstring>

namespace pact::transport {

Status copyIn(const cuda::Driver* driver, void* dst, const void* src, size_t n, MemoryType t) {
  if (t == MemoryType::kHost) {
    std::memcpy(dst, src, n);
    return Status::kOk;
  }
  return driver != nullptr ? driver->copyToDevice(dst, src, n) : Status::kUnsupported;
}

Status readStaged(const cuda::Driver* driver, const void* src, size_t n, MemoryType t,
                  std::span<uint8_t> staging, FunctionRef<void(const uint8_t*, size_t)> sink) {
  const auto* p = static_cast<const uint8_t*>(src);
  if (t == MemoryType::kHost) {
    sink(p, n);
    return Status::kOk;
  }
  if (driver == nullptr) return Status::kUnsupported;
  if (staging.empty()) return Status::kInvalidArgument;
  for (size_t at = 0; at < n;) {
    const size_t chunk = std::min(staging.size(), n - at);
    if (Status s = driver->copyToHost(staging.data(), p + at, chunk); s != Status::kOk) return s;
    sink(staging.data(), chunk);
    at += chunk;
  }
  return Status::kOk;
}

}  // namespace pact::transport
