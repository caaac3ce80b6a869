// pact-perf kv --breakdown: where each request's time went, from the engines' trace rings
// (pact_trace_read; every engine of the run is in this process, so their CLOCK_MONOTONIC stamps
// compare). A request's transfer passes five phases between the prefill side's send (its first
// event: the KV is ready) and the decode side's commit, a TTFT-like figure:
//   waiting for the receiver: the offer is out, the decode worker has not posted its expect;
//   waiting for credit:       expected, the receiver has no credit to advertise yet;
//   on the wire:              advertised, until every byte landed and the sender's Done arrived;
//   landed to verified:       the receiver's check of the bytes (checksums, the hook's verify);
//   verified to committed:    the commit itself (the hook decides, epochs are checked).
// A phase the transfer skipped (an eager transfer is never advertised) takes no time. Per phase
// P50/P95/P99 over the committed requests, and the phase that dominates the slowest 1%: the
// largest mean share of the total among the requests at or above the total's P99.
#pragma once

#include <pact/pact.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <vector>

namespace pact::perf::kv {

// events: every engine's trace of the run, in any order. Prints the table to out and returns
// it as JSON: {"requests", "incomplete", "phases": {name: {p50_us, p95_us, p99_us, mean_us}},
// "total": {...}, "dominant_at_p99": name, "shares_at_p99": {name: fraction}}.
nlohmann::json breakdown(const std::vector<pact_event_t>& events, std::FILE* out);

}  // namespace pact::perf::kv
