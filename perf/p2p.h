// `pact-perf p2p`: point-to-point bandwidth and latency of any NCCL net plugin, driven through
// pact::loader exactly as NCCL's proxy would (two processes, one per rank, non-blocking
// connect/accept, isend/irecv/test in posting order, NULL request = back-pressure).
//
// Rank 0 (the parent) sends the bandwidth stream and measures ping-pong RTT; rank 1 (a child forked
// before the plugin is opened) receives, measures bandwidth at the receiver and echoes pings.
#pragma once

namespace CLI {
class App;
}

namespace pact::perf {

// Adds the `p2p` subcommand to app. When it is selected, parsing runs the benchmark and stores the
// process exit status in *exit_code (0 = success). exit_code must outlive app.parse().
void addP2pCommand(CLI::App& app, int* exit_code);

}  // namespace pact::perf
