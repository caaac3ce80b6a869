// TraceRing: a fixed array indexed by sequence number modulo capacity.
#include "telemetry/trace.h"

#include <time.h>

#include <algorithm>

namespace pact::telemetry {

uint64_t monotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

TraceRing::TraceRing(size_t capacity) : slots_(std::max<size_t>(capacity, 1)) {}

void TraceRing::record(const TraceEvent& e) {
  slots_[recorded_ % slots_.size()] = e;
  ++recorded_;
}

size_t TraceRing::read(uint64_t* cursor, TraceEvent* out, size_t max) const {
  const uint64_t cap = slots_.size();
  const uint64_t oldest = recorded_ > cap ? recorded_ - cap : 0;
  const uint64_t start = std::max(*cursor, oldest);
  const uint64_t available = recorded_ > start ? recorded_ - start : 0;
  const size_t n = static_cast<size_t>(std::min<uint64_t>(available, max));
  for (size_t i = 0; i < n; ++i) out[i] = slots_[(start + i) % cap];
  *cursor = start + n;
  return n;
}

}  // namespace pact::telemetry
