#include "transport/lanes.h"

#include <algorithm>

namespace pact::transport {

size_t Lanes::choose(size_t bytes) {
  if (lanes_.size() == 1) return 0;
  if (cfg_.steering == Steering::kRoundRobin) return next_++ % lanes_.size();
  // Expected finish = (bytes already queued + this piece) / throughput. An unmeasured lane is
  // assumed as fast as the fastest measured one, so every lane gets tried.
  double best = 0;
  for (const auto& l : lanes_) best = std::max(best, l.bytesPerUs);
  // Ties go to the first lane in a rotating order, so equal lanes share evenly.
  const size_t n = lanes_.size();
  const size_t start = next_++ % n;
  size_t pick = start;
  double pickCost = 0;
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (start + k) % n;
    const Lane& l = lanes_[i];
    double rate = l.bytesPerUs > 0 ? l.bytesPerUs : (best > 0 ? best : 1.0);
    double cost = static_cast<double>(l.inflight + bytes) / rate;
    if (k == 0 || cost < pickCost) {
      pick = i;
      pickCost = cost;
    }
  }
  return pick;
}

void Lanes::completed(const Part& p) {
  Lane& l = lanes_[p.lane];
  l.inflight -= std::min(l.inflight, p.size);
  const auto t = now();
  // Time this piece held the lane: from when it was queued, or from the previous completion
  // if the lane was already busy then (pieces overlap on a lane).
  auto from = std::max(p.queuedAt, l.lastDone);
  double us = std::chrono::duration<double, std::micro>(t - from).count();
  l.lastDone = t;
  if (p.status != Status::kOk || p.size == 0 || us <= 0) return;
  double sample = static_cast<double>(p.size) / us;
  l.bytesPerUs = l.bytesPerUs == 0 ? sample : 0.8 * l.bytesPerUs + 0.2 * sample;
}

void Lanes::closeAll(bool force) {
  for (auto& l : lanes_) l.ep.close(force);
}

LaneStats Lanes::stats(size_t i) const {
  const Lane& l = lanes_[i];
  return LaneStats{l.pieces, l.bytes, l.bytesPerUs};
}

}  // namespace pact::transport
