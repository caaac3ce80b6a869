// `pact-perf scale`: many comm pairs between two processes, opened as NCCL opens them (per
// connection a listen, a handle over the bootstrap, connect and accept polled until both exist),
// one message over every comm, then every comm closed in one of three orders. Per N and side:
// setup time and comms/s, message round, close time, and file descriptors, threads, RSS and
// memory mappings before setup, after setup and after close.
//
// Rank 0 (the parent) is A, the receiver: it listens and accepts. Rank 1 (a child forked before
// the plugin is opened) is B, the sender: it connects and isends.
#pragma once

namespace CLI {
class App;
}

namespace pact::perf {

// Adds the `scale` subcommand to app; when selected, parsing runs it and stores the exit status
// in *exit_code (0 = every round succeeded, 1 = a round failed, 2 = bad usage).
void addScaleCommand(CLI::App& app, int* exit_code);

}  // namespace pact::perf
