// Rail failover's copies of small messages (at most transport::kLazyAckMax bytes, host memory):
// a send comm whose receiver acknowledges its messages (transport::AckSink) completes a small
// send as soon as UCX is done with it, from a copy kept here until the acknowledgement comes, so
// no small message waits for a round trip of its own; a rail that goes out before then sends the
// copies again (the receiver drops a second one). At most kMaxBytes are kept per comm: past that
// a small send waits for its acknowledgement as a large one does.
#pragma once

#include <cstddef>
#include <chrono>
#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "common/clock.h"
#include "transport/rail_probe.h"

namespace pact::net {

class KeptCopies {
 public:
  static constexpr size_t kMaxBytes = size_t{8} << 20;
  // Keeps a copy of the seq-th message of tag; false when it would pass kMaxBytes even after the
  // acknowledged ones are dropped (acks: the comm's sink, read just before by the caller's drain).
  bool keep(uint32_t tag, uint32_t seq, const void* data, size_t size, const transport::AckSink& acks);
  // Drops the copies whose message was acknowledged.
  void prune(const transport::AckSink& acks);
  // f(tag, seq, bytes) for every copy not acknowledged yet.
  template <class F>
  void forEachUnacked(const transport::AckSink& acks, F&& f) const {
    for (const Copy& c : copies_)
      if (!acks.acked(c.tag, c.seq)) f(c.tag, c.seq, std::span<const uint8_t>(c.bytes));
  }
  size_t bytes() const { return bytes_; }
  size_t size() const { return copies_.size(); }
  // Whether the caller should drain and prune now: every kPruneEvery keeps, or (pruneDueAt, from a
  // comm's progress while copies are kept) kPruneInterval after the last prune.
  bool prunesDue() { return ++sincePrune_ >= kPruneEvery; }
  bool pruneDueAt(TimePoint t) const { return t - prunedAt_ >= kPruneInterval; }

 private:
  static constexpr unsigned kPruneEvery = 64;
  static constexpr auto kPruneInterval = std::chrono::milliseconds(20);  // the acknowledgements' repeat
  struct Copy {
    uint32_t tag = 0, seq = 0;
    std::vector<uint8_t> bytes;
  };
  std::deque<Copy> copies_;
  std::vector<std::vector<uint8_t>> spare_;  // buffers of dropped copies, reused
  size_t bytes_ = 0;
  unsigned sincePrune_ = 0;
  TimePoint prunedAt_{};
};

}  // namespace pact::net
