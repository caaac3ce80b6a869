// Lanes of a send comm: one UCX endpoint each, and the steering that picks the lane for a piece.
// Adaptive steering sends each piece where it is expected to finish first, from each lane's
// bytes in flight and its measured throughput, so a slow lane gets fewer pieces; round-robin is
// kept for comparison. The injected lane delay (a test hook) holds pieces back before UCX sees
// them. Device mutex must be held for every call.
#pragma once

#include <deque>
#include <vector>

#include "transport/channel.h"
#include "transport/request.h"
#include "ucx/worker.h"

namespace pact::transport {

struct LaneStats {
  uint64_t pieces = 0;
  uint64_t bytes = 0;
  double bytesPerUs = 0;  // measured throughput estimate (0 = not measured yet)
};

class Lanes {
 public:
  void configure(const ChannelConfig& cfg) { cfg_ = cfg; }
  void add(ucx::Endpoint ep, uint8_t rail) {
    lanes_.emplace_back();
    lanes_.back().ep = std::move(ep);
    lanes_.back().rail = rail;
  }
  size_t size() const { return lanes_.size(); }
  ucx::Endpoint& endpoint(size_t i) { return lanes_[i].ep; }

  // Picks the lane for a piece of `bytes` and charges it; the piece is posted now or, on the
  // delayed lane, once its delay has passed. post(part) does the UCX call.
  template <typename Post>
  void dispatch(Part* p, Post&& post);
  // Posts delayed pieces whose time has come.
  template <typename Post>
  void releaseDelayed(Post&& post);
  // A piece finished (any status): uncharge its lane and update the throughput estimate.
  void completed(const Part& p);
  // Pieces still waiting on a delayed lane are given back (abort): f(part) for each.
  template <typename F>
  void dropDelayed(F&& f);
  void closeAll(bool force);
  LaneStats stats(size_t i) const;

 private:
  struct Lane {
    ucx::Endpoint ep;
    uint8_t rail = 0;
    size_t inflight = 0;
    double bytesPerUs = 0;    // EWMA over busy windows
    TimePoint windowStart{};  // start of the current busy window
    size_t windowBytes = 0;   // completed in the current window
    std::deque<Part*> delayed;
    uint64_t pieces = 0;
    uint64_t bytes = 0;
  };
  size_t choose(size_t bytes);

  ChannelConfig cfg_;
  std::vector<Lane> lanes_;
  size_t next_ = 0;
};

template <typename Post>
void Lanes::dispatch(Part* p, Post&& post) {
  size_t i = choose(p->size);
  Lane& l = lanes_[i];
  p->lane = static_cast<uint8_t>(i);
  p->rail = l.rail;
  p->queuedAt = now();
  if (l.inflight == 0) {  // an idle lane starts a new measurement window
    l.windowStart = p->queuedAt;
    l.windowBytes = 0;
  }
  l.inflight += p->size;
  ++l.pieces;
  l.bytes += p->size;
  if (static_cast<int>(i) == cfg_.delayLane && cfg_.laneDelay.count() > 0)
    l.delayed.push_back(p);
  else
    post(p, l.ep);
}

template <typename Post>
void Lanes::releaseDelayed(Post&& post) {
  if (cfg_.delayLane < 0 || static_cast<size_t>(cfg_.delayLane) >= lanes_.size()) return;
  Lane& l = lanes_[static_cast<size_t>(cfg_.delayLane)];
  const auto t = now();
  while (!l.delayed.empty() && t - l.delayed.front()->queuedAt >= cfg_.laneDelay) {
    Part* p = l.delayed.front();
    l.delayed.pop_front();
    post(p, l.ep);
  }
}

template <typename F>
void Lanes::dropDelayed(F&& f) {
  for (auto& l : lanes_) {
    for (Part* p : l.delayed) f(p);
    l.delayed.clear();
  }
}

}  // namespace pact::transport
