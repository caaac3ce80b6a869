// TraceRing: record order, wrap-around, cursor semantics (resume, skip the overwritten, future
// cursors), max limits, and the monotonic clock.
#include <gtest/gtest.h>

#include <vector>

#include "telemetry/trace.h"

namespace pact::telemetry {
namespace {

TraceEvent ev(uint64_t id) {
  TraceEvent e;
  e.timeNs = 1000 + id;
  e.key.requestId = id;
  e.key.transferId = id * 2;
  e.key.modelEpoch = 7;
  e.key.generation = static_cast<uint32_t>(id % 5);
  e.peer = 0xabc;
  e.role = 1;
  e.state = static_cast<uint8_t>(id % 10);
  e.event = static_cast<uint8_t>(id % 15);
  return e;
}

// Reads everything available from cursor in pieces of at most max; returns the request ids.
std::vector<uint64_t> drain(const TraceRing& ring, uint64_t* cursor, size_t max) {
  std::vector<uint64_t> ids;
  std::vector<TraceEvent> buf(max);
  while (size_t n = ring.read(cursor, buf.data(), max)) {
    EXPECT_LE(n, max);
    for (size_t i = 0; i < n; ++i) ids.push_back(buf[i].key.requestId);
  }
  return ids;
}

TEST(TraceRing, EmptyRingReadsNothing) {
  TraceRing ring(4);
  EXPECT_EQ(ring.capacity(), 4u);
  EXPECT_EQ(ring.recorded(), 0u);
  uint64_t cursor = 0;
  TraceEvent out[4];
  EXPECT_EQ(ring.read(&cursor, out, 4), 0u);
  EXPECT_EQ(cursor, 0u);
}

TEST(TraceRing, ReadsInOrderAndResumesAtTheCursor) {
  TraceRing ring(8);
  for (uint64_t i = 0; i < 5; ++i) ring.record(ev(i));
  EXPECT_EQ(ring.recorded(), 5u);
  uint64_t cursor = 0;
  TraceEvent out[8];
  ASSERT_EQ(ring.read(&cursor, out, 8), 5u);
  EXPECT_EQ(cursor, 5u);
  for (uint64_t i = 0; i < 5; ++i) {
    EXPECT_EQ(out[i].key.requestId, i);
    EXPECT_EQ(out[i].key.transferId, i * 2);
    EXPECT_EQ(out[i].timeNs, 1000 + i);
    EXPECT_EQ(out[i].key.generation, i % 5);
    EXPECT_EQ(out[i].state, i % 10);
    EXPECT_EQ(out[i].event, i % 15);
    EXPECT_EQ(out[i].peer, 0xabcu);
    EXPECT_EQ(out[i].key.modelEpoch, 7u);
    EXPECT_EQ(out[i].role, 1);
  }
  EXPECT_EQ(ring.read(&cursor, out, 8), 0u);  // caught up
  EXPECT_EQ(cursor, 5u);
  ring.record(ev(5));
  ring.record(ev(6));
  ASSERT_EQ(ring.read(&cursor, out, 8), 2u);
  EXPECT_EQ(out[0].key.requestId, 5u);
  EXPECT_EQ(out[1].key.requestId, 6u);
  EXPECT_EQ(cursor, 7u);
}

TEST(TraceRing, MaxLimitsEachRead) {
  TraceRing ring(16);
  for (uint64_t i = 0; i < 10; ++i) ring.record(ev(i));
  uint64_t cursor = 0;
  TraceEvent out[16];
  EXPECT_EQ(ring.read(&cursor, out, 0), 0u);
  EXPECT_EQ(cursor, 0u);
  ASSERT_EQ(ring.read(&cursor, out, 3), 3u);
  EXPECT_EQ(out[2].key.requestId, 2u);
  EXPECT_EQ(cursor, 3u);
  ASSERT_EQ(ring.read(&cursor, out, 1), 1u);
  EXPECT_EQ(out[0].key.requestId, 3u);
  EXPECT_EQ(cursor, 4u);
  EXPECT_EQ(drain(ring, &cursor, 4), (std::vector<uint64_t>{4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(cursor, 10u);
}

TEST(TraceRing, WrapsAroundKeepingTheNewest) {
  TraceRing ring(4);
  for (uint64_t i = 0; i < 11; ++i) ring.record(ev(i));
  EXPECT_EQ(ring.recorded(), 11u);
  uint64_t cursor = 7;  // the oldest kept event
  EXPECT_EQ(drain(ring, &cursor, 3), (std::vector<uint64_t>{7, 8, 9, 10}));
  EXPECT_EQ(cursor, 11u);
  cursor = 9;  // inside the kept window, across the wrap point
  EXPECT_EQ(drain(ring, &cursor, 100), (std::vector<uint64_t>{9, 10}));
}

TEST(TraceRing, StaleCursorSkipsOverwrittenEvents) {
  TraceRing ring(4);
  for (uint64_t i = 0; i < 10; ++i) ring.record(ev(i));  // 0..5 overwritten, 6..9 kept
  uint64_t cursor = 2;
  TraceEvent out[2];
  ASSERT_EQ(ring.read(&cursor, out, 2), 2u);
  EXPECT_EQ(out[0].key.requestId, 6u);
  EXPECT_EQ(out[1].key.requestId, 7u);
  EXPECT_EQ(cursor, 8u);  // the caller sees the jump from 2: four events were lost

  // A stale cursor with max 0 still moves to the oldest kept event.
  cursor = 0;
  EXPECT_EQ(ring.read(&cursor, out, 0), 0u);
  EXPECT_EQ(cursor, 6u);

  // A reader that falls behind again while reading.
  cursor = 8;
  for (uint64_t i = 10; i < 20; ++i) ring.record(ev(i));  // keeps 16..19
  EXPECT_EQ(drain(ring, &cursor, 2), (std::vector<uint64_t>{16, 17, 18, 19}));
  EXPECT_EQ(cursor, 20u);
}

TEST(TraceRing, CursorInTheFutureReadsNothingAndStays) {
  TraceRing ring(4);
  for (uint64_t i = 0; i < 3; ++i) ring.record(ev(i));
  uint64_t cursor = 50;
  TraceEvent out[4];
  EXPECT_EQ(ring.read(&cursor, out, 4), 0u);
  EXPECT_EQ(cursor, 50u);
}

TEST(TraceRing, CapacityOne) {
  TraceRing ring(1);
  uint64_t cursor = 0;
  TraceEvent out[4];
  ring.record(ev(0));
  ring.record(ev(1));
  ASSERT_EQ(ring.read(&cursor, out, 4), 1u);
  EXPECT_EQ(out[0].key.requestId, 1u);
  EXPECT_EQ(cursor, 2u);
  EXPECT_EQ(TraceRing(0).capacity(), 1u);  // 0 is taken as 1
}

TEST(TraceRing, IndependentReaders) {
  TraceRing ring(8);
  uint64_t fast = 0, slow = 0;
  for (uint64_t i = 0; i < 6; ++i) {
    ring.record(ev(i));
    EXPECT_EQ(drain(ring, &fast, 1), std::vector<uint64_t>{i});
  }
  EXPECT_EQ(drain(ring, &slow, 5), (std::vector<uint64_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(fast, slow);
}

TEST(TraceRing, MonotonicClockDoesNotGoBack) {
  uint64_t a = monotonicNs();
  uint64_t b = monotonicNs();
  EXPECT_GT(a, 0u);
  EXPECT_LE(a, b);
}

}  // namespace
}  // namespace pact::telemetry
