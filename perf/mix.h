// `pact-perf mix`: KV bursts, all-to-all steps and a checkpoint stream at once between two
// engines, once alone (KV only), once with each on its own traffic class and once all on DEFAULT:
// per class goodput and P50/P95/P99, and what isolation buys the KV class. With --face nccl: a
// bulk and a latency stream through a net plugin, each on its own NCCL traffic class (mix_nccl.h).
#pragma once

namespace CLI {
class App;
}

namespace pact::perf {

void addMixCommand(CLI::App& app, int* exit_code);

}  // namespace pact::perf
