// The per-transfer event trace: a bounded ring of TraceEvents in record order. Each recorded event
// gets the next sequence number (0, 1, 2, ...); the ring keeps the newest capacity() of them and
// readers walk it with a cursor (the next sequence number they want), so several readers can each
// follow the trace at their own pace and learn when they fell behind.
//
// Not internally synchronized: the owner (the engine, under its lock) serializes record and read.
// record() does not allocate; the storage is allocated once by the constructor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/transfer_key.h"

namespace pact::telemetry {

struct TraceEvent {
  uint64_t timeNs = 0;  // CLOCK_MONOTONIC ns (monotonicNs())
  TransferKey key;
  uint64_t peer = 0;
  uint8_t role = 0, state = 0, event = 0;
};

// clock_gettime(CLOCK_MONOTONIC) in nanoseconds.
uint64_t monotonicNs();

class TraceRing {
 public:
  // capacity >= 1 (0 is taken as 1).
  explicit TraceRing(size_t capacity);

  // O(1); when full, overwrites the oldest kept event.
  void record(const TraceEvent& e);

  // Copies up to max events with sequence number >= *cursor, oldest first, into out, and sets
  // *cursor to one past the last copied. A cursor older than the oldest kept event starts at the
  // oldest kept one (the overwritten events are skipped; the caller sees the jump in *cursor). A
  // cursor at or past recorded() copies nothing and is left as it is. Returns the count copied.
  size_t read(uint64_t* cursor, TraceEvent* out, size_t max) const;

  // Total ever recorded, i.e. the sequence number the next event will get.
  uint64_t recorded() const { return recorded_; }
  size_t capacity() const { return slots_.size(); }

 private:
  std::vector<TraceEvent> slots_;  // event n lives in slots_[n % capacity]
  uint64_t recorded_ = 0;
};

}  // namespace pact::telemetry
