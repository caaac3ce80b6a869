// Class priority to one peer process (the profile key `priority`, docs/traffic-classes.md).
//
// A PeerGate is the process's one record of the work each priority level has queued or in flight
// towards one peer process, shared by every send path to that peer, of both faces: the plugin's
// send comms and the engines' routes (transport::Lanes reports its pieces to it). A lane set
// whose class is below a level that has work keeps at most one piece in flight and holds the
// rest back, so the higher class's pieces go to UCX first and the bulk class's bytes in flight
// stay bounded; it resumes as soon as the higher levels are idle. Classes of different priority
// also get UCX contexts of their own (transport::contextKey), so no bulk bytes already handed to
// a shared connection sit in front of the higher class's.
//
// The levels are atomics: lanes on different device contexts (different mutexes) share a gate.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>

namespace pact::transport {

class PeerGate {
 public:
  static constexpr int kLevels = 8;  // Profile::kMaxPriority + 1
  // The gate of a peer process, made on first use and shared while anyone holds it.
  static std::shared_ptr<PeerGate> forPeer(uint64_t peerProcess);

  // bytes (may be negative) of work queued or in flight at a level.
  void add(int level, int64_t bytes) { work_[level].fetch_add(bytes, std::memory_order_relaxed); }
  // Whether a level above `level` has work.
  bool higherBusy(int level) const {
    for (int l = level + 1; l < kLevels; ++l)
      if (work_[l].load(std::memory_order_relaxed) > 0) return true;
    return false;
  }
  int64_t work(int level) const { return work_[level].load(std::memory_order_relaxed); }

 private:
  std::array<std::atomic<int64_t>, kLevels> work_{};
};

}  // namespace pact::transport
