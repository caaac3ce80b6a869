#include "transport/lanes.h"

#include <algorithm>

namespace pact::transport {

size_t Lanes::choose(size_t bytes) {
  const size_t n = lanes_.size();
  const size_t cap = laneCap();
  const size_t start = next_ % n;
  if (cfg_.steering == Steering::kRoundRobin) {
    // Strict rotation: the next lane in turn, once it has room.
    if (lanes_[start].inflight >= cap) return n;
    ++next_;
    return start;
  }
  // Expected finish = (bytes already queued + this piece) / throughput. An unmeasured lane is
  // assumed as fast as the fastest measured one, so every lane gets tried. Ties go to the first
  // lane in a rotating order, so equal lanes share evenly. When the lane that would finish first
  // is full, the piece waits for it rather than going to a lane that would finish it later.
  double best = 0;
  for (const auto& l : lanes_) best = std::max(best, l.bytesPerUs);
  size_t pick = 0;
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
  if (lanes_[pick].inflight >= cap) return n;
  ++next_;
  return pick;
}

void Lanes::measure(Lane& l, const LanePiece& p) {
  // Throughput = bytes completed over a window in which the lane was busy the whole time.
  // Windows of at least kWindow smooth out completions that arrive in bursts (one progress call
  // often completes many pieces), which a per-piece estimate would read as infinite speed.
  constexpr auto kWindow = std::chrono::microseconds(2000);
  l.windowBytes += p.size;
  const auto t = now();
  const auto span = t - l.windowStart;
  if (span >= kWindow) {
    double sample = static_cast<double>(l.windowBytes) /
                    std::chrono::duration<double, std::micro>(span).count();
    l.bytesPerUs = l.bytesPerUs == 0 ? sample : 0.7 * l.bytesPerUs + 0.3 * sample;
    l.windowStart = t;
    l.windowBytes = 0;
  }
}

void Lanes::closeAll() {
  for (auto& l : lanes_) {
    if (!l.ep->failed()) l.ep->error = UCS_ERR_CANCELED;  // its other users stop posting on it
    l.ep->ep.close(true);
  }
}

void Lanes::countAs(const std::string& owner, telemetry::Labels labels, std::vector<std::string> railNames,
                    uint64_t comm) {
  if (lanes_.size() < 2) return;
  counting_ = std::make_unique<Counting>(Counting{owner, std::move(labels), std::move(railNames), comm});
  for (size_t i = 0; i < lanes_.size(); ++i) railSet(i);  // each lane shows from the start
}

telemetry::CounterSet& Lanes::railSet(size_t i) {
  Lane& l = lanes_[i];
  if (l.counters.size() <= l.rail) l.counters.resize(l.rail + 1u);
  auto& set = l.counters[l.rail];
  if (!set) {
    const Counting& c = *counting_;
    telemetry::Labels labels = c.labels;
    labels.push_back({"lane", std::to_string(i)});
    labels.push_back({"rail", l.rail < c.rails.size() ? c.rails[l.rail] : std::to_string(l.rail)});
    set = std::make_unique<telemetry::CounterSet>(telemetry::kLaneCatalog, "lane " + std::to_string(i) + " of " + c.owner,
                                                  std::move(labels), c.comm);
  }
  return *set;
}

LaneStats Lanes::stats(size_t i) const {
  const Lane& l = lanes_[i];
  return LaneStats{l.pieces, l.bytes, l.bytesPerUs, holds_};
}

}  // namespace pact::transport
