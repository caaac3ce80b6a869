// Class priority to one peer process (the profile key `priority`, docs/traffic-classes.md).
//
// A PeerGate is the process's one record of the work each priority level has queued or in flight
// towards one peer process, shared by every send path to that peer, of both faces: the plugin's
// send comms and the engines' routes (transport::Lanes reports its pieces to it). A lane set
// whose class is below a level that has work hands UCX no new piece, so the higher class's pieces
// go first and have the link to themselves: over TCP a piece "completes" once the kernel took
// it, so a bulk class allowed even one piece in flight keeps its connection full and takes half
// the link. It resumes once the higher levels have been idle for kLinger, so that a latency class
// sending message after message does not find the bulk class's bytes refilled in front of each
// one. A higher class busy for more than kMaxPause at a stretch (a send waiting for a receiver
// that has not posted yet, or message after message with no break longer than the linger) no
// longer stops the bulk class: it then gets one piece every kTrickle, one at a time, so it is
// never starved (64 KiB pieces: 52 Mbit/s), and the higher class meets at most one such piece. Classes of different priority also get UCX contexts of their own
// (transport::contextKey), so no bulk bytes already handed to a shared connection sit in front of
// the higher class's.
//
// The levels are atomics: lanes on different device contexts (different mutexes) share a gate.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>

#include "common/clock.h"

namespace pact::transport {

class PeerGate {
 public:
  static constexpr int kLevels = 8;  // Profile::kMaxPriority + 1
  static constexpr std::chrono::milliseconds kLinger{5};
  static constexpr std::chrono::milliseconds kMaxPause{20};
  static constexpr std::chrono::milliseconds kTrickle{10};
  explicit PeerGate(std::chrono::nanoseconds linger = kLinger, std::chrono::nanoseconds maxPause = kMaxPause,
                    std::chrono::nanoseconds trickle = kTrickle)
      : linger_(linger.count()), maxPause_(maxPause.count()), trickle_(trickle) {}
  // How often a class below a long-busy one may send a piece.
  std::chrono::nanoseconds trickle() const { return trickle_; }
  // The gate of a peer process, made on first use and shared while anyone holds it.
  static std::shared_ptr<PeerGate> forPeer(uint64_t peerProcess);

  // bytes (may be negative) of work queued or in flight at a level.
  void add(int level, int64_t bytes) {
    const int64_t before = work_[level].fetch_add(bytes, std::memory_order_relaxed);
    if (before + bytes <= 0 && bytes < 0) idleSince_[level].store(nowNs(), std::memory_order_relaxed);
    // A stretch of work starts anew only after a break longer than the linger: message after
    // message of a latency class is one stretch to the classes below it.
    if (before <= 0 && before + bytes > 0) {
      const int64_t t = nowNs();
      if (t - idleSince_[level].load(std::memory_order_relaxed) >= linger_ ||
          busySince_[level].load(std::memory_order_relaxed) == 0)
        busySince_[level].store(t, std::memory_order_relaxed);
    }
  }
  // Whether a level above `level` has had work, breaks shorter than the linger aside, for longer
  // than the pause bound: the classes below it get a piece now and then, so that none is starved
  // by a higher class that never stops.
  bool higherLongBusy(int level, int64_t t = nowNs()) const {
    for (int l = level + 1; l < kLevels; ++l) {
      const bool busy = work_[l].load(std::memory_order_relaxed) > 0 ||
                        t - idleSince_[l].load(std::memory_order_relaxed) < linger_;
      if (busy && t - busySince_[l].load(std::memory_order_relaxed) > maxPause_) return true;
    }
    return false;
  }
  // Whether a level above `level` has work, or had some less than the linger ago (t: now, ns).
  bool higherBusy(int level, int64_t t = nowNs()) const {
    int64_t lastIdle = 0;
    for (int l = level + 1; l < kLevels; ++l) {
      if (work_[l].load(std::memory_order_relaxed) > 0) return true;
      lastIdle = std::max(lastIdle, idleSince_[l].load(std::memory_order_relaxed));
    }
    return lastIdle != 0 && t - lastIdle < linger_;
  }
  static int64_t nowNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(now().time_since_epoch()).count();
  }
  int64_t work(int level) const { return work_[level].load(std::memory_order_relaxed); }

 private:
  const int64_t linger_, maxPause_;
  const std::chrono::nanoseconds trickle_;
  std::array<std::atomic<int64_t>, kLevels> work_{};
  std::array<std::atomic<int64_t>, kLevels> idleSince_{};  // when each level's work last ran out
  std::array<std::atomic<int64_t>, kLevels> busySince_{};  // when it last began
};

}  // namespace pact::transport
