// Monotonic time, one definition for the whole tree.
#pragma once

#include <chrono>

namespace pact {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;
using Duration = Clock::duration;

inline TimePoint now() { return Clock::now(); }

}  // namespace pact
