// Timers: what must happen at a time (a deadline, a resend, a grace period), ordered by time. A
// timer names an object by id and carries the attempt it was armed for, so the owner can tell a
// timer of an attempt that is over. Not synchronized (the owner's lock).
#pragma once

#include <cstdint>
#include <iterator>
#include <map>
#include <memory_resource>

#include "common/clock.h"

namespace pact::engine {

template <typename Kind>
class Timers {
 public:
  struct Timer {
    uint64_t id;
    Kind kind;
    uint32_t attempt = 0;
  };
  // nodes: where the timers' nodes come from (the owner's pool: arming and firing then allocate
  // nothing once warm).
  explicit Timers(std::pmr::memory_resource* nodes = std::pmr::get_default_resource()) : timers_(nodes) {}
  // TimePoint::max() arms nothing.
  void add(TimePoint at, uint64_t id, Kind kind, uint32_t attempt = 0) {
    if (at != TimePoint::max()) timers_.emplace(at, Timer{id, kind, attempt});
  }
  // Disarms the timers of id and kind armed for at (none: nothing happens).
  void cancel(TimePoint at, uint64_t id, Kind kind) {
    if (at == TimePoint::max()) return;
    auto [it, end] = timers_.equal_range(at);
    while (it != end) it = it->second.id == id && it->second.kind == kind ? timers_.erase(it) : std::next(it);
  }
  bool empty() const { return timers_.empty(); }
  TimePoint next() const { return timers_.empty() ? TimePoint::max() : timers_.begin()->first; }
  // Calls fire(timer) for each timer due at t, earliest first (fire may add timers); the count.
  template <typename Fire>
  int popDue(TimePoint t, Fire&& fire) {
    int n = 0;
    while (!timers_.empty() && timers_.begin()->first <= t) {
      const Timer timer = timers_.begin()->second;
      timers_.erase(timers_.begin());
      n += fire(timer) ? 1 : 0;
    }
    return n;
  }

 private:
  std::pmr::multimap<TimePoint, Timer> timers_;
};

}  // namespace pact::engine
