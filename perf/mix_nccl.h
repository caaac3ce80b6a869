// `pact-perf mix --face nccl`: class isolation on the NCCL face. Two ranks (processes; rank 0
// sends, rank 1 receives) drive a net plugin through the NCCL ABI (plugin/loader, as `p2p` does)
// with two comms, one per NCCL traffic class: a bulk stream (class A, --bulk-tc: --bulk-bytes
// messages, --bulk-window in flight) and a latency stream (class B, --latency-tc: --latency-bytes
// messages one at a time, one-way latency). Phases of --seconds, each on fresh comms: `alone` (B
// only), `bulk` (A only: its goodput at the receiver) and `mixed` (both). Reported: B's P50/P95/P99/
// max per phase, A's goodput, B's P99 mixed / alone (target <= 1.5) and A's goodput / --link-rate
// (target >= 0.9). Class profiles come from PACT_TC_<n>, as users set them.
#pragma once

#include "rank_setup.h"

#include <string>
#include <vector>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace pact::perf {

struct MixNcclOptions {
  // Shared with the engine face: set by `mix` from its own options.
  double seconds = 3;
  std::string phases = "alone,bulk,mixed";
  std::string json, plot;
  // The NCCL face's own.
  std::string plugin;  // default: the bundled pact plugin (defaultPluginPath)
  int version = 0, dev = 0;
  RankSetup ranks;     // --netns, --env-a, --env-b
  int bulk_tc = 1, latency_tc = 2;
  std::string bulk_bytes = "16M", latency_bytes = "256K";
  int bulk_window = 8;
  std::string link_rate;  // tc syntax (1gbit); empty: the goodput target is not judged
  unsigned timeout = 60;
  bool verbose = false;
  std::string inject;  // "bulk" or "latency": flip a byte of that stream's first message (tests)
};

// Adds the NCCL face's own options to the `mix` subcommand and returns them, so that `mix` can
// refuse them under --face engine.
std::vector<CLI::Option*> addMixNcclOptions(CLI::App& mix, MixNcclOptions* o);

// The exit status: 0 every message completed and every byte was right (targets missed do not
// change it), 1 a failed run, 2 bad usage.
int runMixNccl(MixNcclOptions o);

}  // namespace pact::perf
