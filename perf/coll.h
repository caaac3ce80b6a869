// `pact-perf coll`: NCCL collectives (allreduce, allgather, reducescatter, alltoall, broadcast,
// sendrecv) over any NCCL net plugin, on N ranks (forked here, or from mpirun, Slurm or
// torchrun), every byte moved through the plugin in NCCL's pattern (coll_sched.h), printed in
// nccl-tests' format with every element checked. docs/performance.md, "Collectives".
#pragma once

namespace CLI {
class App;
}

namespace pact::perf {

// Adds the `coll` subcommand; when it runs, *exit_code gets the process exit status.
void addCollCommand(CLI::App& app, int* exit_code);

}  // namespace pact::perf
