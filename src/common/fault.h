// PACT_FAULT: faults injected inside the transport at the points where real ones happen. Parsed by
// the config registry; deterministic for a given seed; zero cost when unset (one branch on
// active()). Grammar: comma-separated key=value, each at most once:
//   drop=P                a data piece is not delivered (probability P in [0, 1])
//   dup=P                 a data piece is sent twice (a real second copy on the wire)
//   corrupt=P             a bit of a data piece is flipped (engine: after landing; plugin: in a
//                         copy of the piece as it is sent, never in the application's buffer)
//   stall=P               a data piece is held by the sender and never sent (the message stalls
//                         until its deadline, or for ever without one)
//   reject=P              the target refuses (engine: a verified transfer at commit; plugin: a
//                         landed piece)
//   lose_remote_done=P    a completion notice is lost (engine: the sender's Done, the
//                         receiver's verdict; plugin: the goodbye at close)
//   delay=laneN:DURATION  pieces sent on lane N wait DURATION before UCX sees them (plugin)
//   lane_fail=laneN:K     lane N's endpoint of each send comm fails once the comm has posted K
//                         data pieces (K=0: before its first), as UCX's error callback marks a
//                         failed one (plugin; with rail failover the lane moves to another rail)
//   epoch_skew=N          this process's transfers carry a model epoch N above the one asked
//   kill_after=DURATION   this process dies by SIGKILL DURATION after its first engine or comm
//   seed=N                seed of the fault generator (default 1)
// docs/reliability.md says where each one is applied.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace pact {

struct FaultSpec {
  double drop = 0, dup = 0, corrupt = 0, reject = 0, loseRemoteDone = 0, stall = 0;
  int delayLane = -1;
  std::chrono::microseconds delay{0};
  int failLane = -1;       // lane_fail: the lane, and the pieces posted before it fails
  uint64_t failAfter = 0;
  uint64_t epochSkew = 0;
  std::chrono::microseconds killAfter{0};
  uint64_t seed = 1;
  // Faults decided per data piece or completion notice (drop .. stall).
  bool onPieces() const {
    return drop > 0 || dup > 0 || corrupt > 0 || reject > 0 || loseRemoteDone > 0 || stall > 0;
  }
  bool active() const {
    return onPieces() || delayLane >= 0 || failLane >= 0 || epochSkew > 0 || killAfter.count() > 0;
  }
  // The spec in the grammar above, normalized ("none" when inactive).
  std::string describe() const;
};

struct FaultParser {
  using value_type = FaultSpec;
  static Result<FaultSpec> parse(std::string_view s);
  static const char* allowed() {
    return "comma-separated drop=P, dup=P, corrupt=P, reject=P, lose_remote_done=P, stall=P (P in 0..1), "
           "delay=laneN:DURATION, lane_fail=laneN:K, epoch_skew=N, kill_after=DURATION, seed=N";
  }
};

// Deterministic fault decisions: one generator per fault site, seeded from the spec's seed and
// the site's own salt, so one site's draws do not shift another's.
class FaultDice {
 public:
  FaultDice(uint64_t seed, uint64_t salt) : state_(seed * 0x9e3779b97f4a7c15ull ^ salt) {}
  // True with probability p (p <= 0: never, without drawing).
  bool roll(double p) {
    if (p <= 0) return false;
    return static_cast<double>(next() >> 11) * 0x1.0p-53 < p;
  }
  uint64_t next() {  // splitmix64
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

 private:
  uint64_t state_;
};

// Arms kill_after once per process (the first call wins): a thread that SIGKILLs the process.
void armKillAfter(const FaultSpec& spec);

}  // namespace pact
