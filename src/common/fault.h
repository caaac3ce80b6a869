// PACT_FAULT: faults injected inside the transport at the points where real ones happen. Parsed by
// the config registry; deterministic for a given seed; zero cost when unset (one branch).
// Grammar: comma-separated key=value; this build applies:
//   delay=laneN:DURATION   pieces sent on lane N wait DURATION before UCX sees them
//   seed=N                 seed of the fault generator (default 1)
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace pact {

struct FaultSpec {
  int delayLane = -1;
  std::chrono::microseconds delay{0};
  uint64_t seed = 1;
  bool active() const { return delayLane >= 0; }
  std::string describe() const;
};

struct FaultParser {
  using value_type = FaultSpec;
  static Result<FaultSpec> parse(std::string_view s);
  static const char* allowed() {
    return "comma-separated delay=laneN:DURATION (N 0..15, DURATION with us/ms/s) and seed=N";
  }
};

}  // namespace pact
