// ProtocolConfig: what the commit protocol (protocol.h) is created with: the engine's name, its
// classes' profiles, budgets, the clock, PACT_FAULT. Plain data, read by the transfer table, the
// receiver and the sender; the table keeps the one copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/fault.h"
#include "cuda/driver.h"
#include "transport/profile.h"

namespace pact::engine {

struct ProtocolConfig {
  std::string name;              // the engine's, for messages
  uint64_t epoch = 0;            // the model epoch it starts on
  uint64_t creditBudget = 0;     // 0: none set (kUnlimited, and the classes' credits apply)
  std::vector<Profile> routes;   // the engine classes' profiles, DEFAULT first
  size_t traceEvents = 1 << 16;
  FaultSpec fault;               // PACT_FAULT
  TimePoint (*clock)() = &pact::now;  // the tests' own clock
  // Finished transfers remembered for exactly-once (duplicates, stale generations): size it above
  // the transfers that can still be retried.
  size_t exactlyOnceWindow = 1 << 16;
  // The CUDA driver for blocks in GPU memory (eager pieces copied in, checksums read through
  // staging); null: host blocks only (registration refuses CUDA memory without a driver).
  const cuda::Driver* cudaDriver = nullptr;
  // The routes' names, for the class counters ("DEFAULT", "KV"); missing: DEFAULT, then numbers.
  std::vector<std::string> routeNames = {};
};

// Host staging per engine for checksums over GPU blocks: each driver copy moves at most this.
inline constexpr size_t kVerifyStagingBytes = size_t{1} << 20;

}  // namespace pact::engine
