// Where each rank of a two-process pact-perf scenario runs and what it sees: `--netns A,B` (rank 0
// enters network namespace A, rank 1 enters B) and `--env-a` / `--env-b` (KEY=VALUE set in rank 0
// / rank 1), applied right after the fork and before the plugin opens, so that each side can have
// its own namespace and its own PACT_NET_DEVICES. Shared by `pact-perf p2p` and `mix --face nccl`.
#pragma once

#include <string>
#include <vector>

namespace pact::perf {

struct RankSetup {
  std::vector<std::string> netns;         // {rank 0's, rank 1's} network namespace, or empty
  std::vector<std::string> env_a, env_b;  // KEY=VALUE set in rank 0 / rank 1
};

// Before the fork, so that a mistake is reported once: two namespaces that exist, KEY=VALUE pairs.
// Dies (peer.h) with a line naming the option otherwise.
void checkRankSetup(const RankSetup& setup);

// In rank `rank` right after the fork, before the plugin is opened: its namespace, its variables.
void enterRankSetup(const RankSetup& setup, int rank);

}  // namespace pact::perf
