// The data path of `pact-perf mix --face nccl`: the bulk stream (class A: messages of bulk_bytes,
// bulk_window in flight, each in its own slot of one registered region, counted at the receiver)
// and the latency stream (class B: one message at a time: post, wait until the send and the
// receive completed, post the next), on their own comms, driven from each rank's one thread as
// NCCL's proxy drives its comms (isend/irecv/test, oldest first, a NULL request = try again).
//
// Rank 0 sends, rank 1 receives. Latency is one-way: rank 0 writes CLOCK_MONOTONIC (steady_clock;
// the ranks share the kernel's clock, namespaces or not) into a latency message's first 8 bytes
// when it first tries isend, rank 1 subtracts it from the time test() reported the receive done.
// Every received byte is checked against a pattern of the message's sequence number (pattern.h;
// the bulk stream in slices between tests, so a check never delays noticing a latency message
// by more than one slice); a wrong byte or a failed call ends the run with a line naming it.
//
// A timed run ends by agreement over the control channel (peer.h): at its deadline rank 0 stops
// posting and sends what it posted of each stream; rank 1 answers with what it posted; both then
// complete up to the larger count (the extra messages are checked, not counted), so no request is
// left pending when the comms close.
#pragma once

#include "mix_nccl_link.h"

#include <cstddef>
#include <cstdint>

namespace pact::perf {

struct FlowPlan {
  bool bulk = false, latency = false;  // the streams that run
  size_t bulk_bytes = 0, latency_bytes = 0;
  int bulk_window = 1;
  double seconds = 0;                      // > 0: timed; 0: counted (a warm-up)
  long bulk_count = 0, latency_count = 0;  // counted: messages of each stream
  uint64_t seq0 = 0;                       // first sequence number (distinct per run)
  const char* run = "";                    // what the run is, for messages ("phase mixed")
  unsigned timeout = 60;                   // watchdog seconds for the drain after a timed run
  bool inject_bulk = false, inject_latency = false;  // flip a byte of the first message (a test)
};

// Links and buffers of the streams in the plan (null where a stream does not run).
struct FlowLinks {
  ClassLink* bulk = nullptr;
  const HostBuffer* bulk_buf = nullptr;  // bulk_window slots of bulk_bytes
  ClassLink* latency = nullptr;
  const HostBuffer* latency_buf = nullptr;
};

// What rank 1 measured, sent to rank 0 (plain data: it crosses the control channel).
struct FlowResult {
  uint64_t magic = 0;
  // latency stream: messages posted before the deadline, one-way latency percentiles (ms)
  long latency_count = 0;
  double latency_p50_ms = 0, latency_p95_ms = 0, latency_p99_ms = 0, latency_max_ms = 0;
  double latency_bytes_per_s = 0;  // latency_count messages over the run's seconds
  // bulk stream: receives completed by the deadline and the goodput between the first and the
  // last of them ((n - 1) messages over that time; one message: from the start)
  long bulk_count = 0;
  double bulk_bytes_per_s = 0;
  long bulk_checked = 0, latency_checked = 0;  // every message checked, the extra ones included
};

// Runs the plan on this rank (0 or 1); both ranks call it with the same plan. Returns rank 1's
// measurements on both ranks.
FlowResult runFlow(const FlowPlan& plan, const FlowLinks& links, int rank);

}  // namespace pact::perf
