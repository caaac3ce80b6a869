// The rails of a plugin comm or an engine peer with failover (docs/reliability.md, "Rail failover"): one watch per
// rail to the peer (transport/rail_probe.h), the rails a comm's lanes may use now, and what the
// comm counts of its failovers. Both sides of a comm over a device of several rails exchange their
// rails' probe addresses in the handshake (CommShape, CommAccept); a comm whose two sides both
// offer them is watched. A rail is usable while its watch is up and no endpoint of the comm on
// it failed within the last timeout (a refused or reset connection is out at once, before the
// probes notice). Device mutex held for every call but probes().
#pragma once

#include <array>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "transport/device_ctx.h"
#include "transport/rail_probe.h"
#include "ucx/tcp_reset.h"

namespace pact::transport {

// The probe addresses of every rail of dev, answered by prober (bound now); empty when failover
// is off (timeout 0), the device has one rail, or a socket could not be bound (logged).
// acks (may be null): where this side reads acknowledgements on each rail (a sender's).
std::vector<wire::ProbeAddress> probesOf(DeviceCtx& dev, RailProber& prober,
                                         std::chrono::microseconds timeout,
                                         std::vector<wire::ProbeAddress>* acks = nullptr);

// Whether a device of `rails` rails fails over under `timeout` (PACT_RAIL_TIMEOUT): several rails
// and a timeout.
bool failoverWanted(size_t rails, std::chrono::microseconds timeout);

class RailSet {
 public:
  static constexpr size_t kMax = wire::kMaxRails;
  RailSet() = default;
  // Watches the peer's rails (its probe addresses) from this side's rails of dev, up to the
  // rails both sides have. Inactive (no failover) when either list is empty or a watch fails.
  RailSet(DeviceCtx& dev, std::shared_ptr<RailProber> prober,
            const std::vector<wire::ProbeAddress>& local, const std::vector<wire::ProbeAddress>& peer,
            std::chrono::microseconds timeout);
  bool active() const { return !watches_.empty(); }
  // The watches, by rail (the paths a receiver's acknowledgements take: AckSource).
  const std::vector<std::shared_ptr<RailWatch>>& watches() const { return watches_; }
  size_t size() const { return watches_.size(); }
  // Called on every test() of a failed-over comm: the clock is read only while r is suspended.
  bool usable(size_t r) const {
    return r < watches_.size() && watches_[r]->up() &&
           (suspendedUntil_[r] == TimePoint{} || now() >= suspendedUntil_[r]);
  }
  bool anyUsable() const;
  size_t usableCount() const;
  // Whether the peer answers probes on any rail, suspended ones included: when no rail is usable
  // only because endpoints failed (the peer closing an endpoint it moved off a rail fails the
  // endpoints sharing its connection), the peer is not lost; the suspensions end within a timeout.
  bool anyAnswering() const;
  // "rail 0 (...): cause; rail 1 (...): cause", for the error of a peer no rail reaches.
  std::string causes() const;
  // Rail r is out: UCX's TCP connections over it to the peer are shut down (ucx/tcp_reset.h), so
  // what they hold ends now and nothing of it can land later. The number shut down. Only when the
  // probes took it out: an endpoint's failure alone leaves the rail's other connections be.
  int reset(size_t r) const;
  // UCX's TCP connections over rail r to the peer shut down, whatever the probes say (PACT_FAULT
  // lane_fail): the number.
  int shutConnections(size_t r) const;
  // Reads the acknowledgements waiting for this process now (RailProber::drainAcks).
  void drainAcks() const {
    if (prober_) prober_->drainAcks();
  }
  // Data moved over rail r (RailWatch::heard).
  void heard(size_t r) {
    if (r < watches_.size()) watches_[r]->heard();
  }
  // An endpoint of the comm on rail r failed: out for one timeout (the probes then decide).
  void suspend(size_t r);
  // The rail a lane whose home is `home` should be on: home when usable, else the usable rail
  // carrying the fewest lanes (lanesOn[r]); -1 when none is.
  int pick(size_t home, const std::vector<int>& lanesOn) const;
  // Rails whose state changed since the last call: out (first) and back (second), as bit sets.
  // Traced (trace()): each outage joins the process's timeline (PACT_TRACE_FILE).
  std::pair<unsigned, unsigned> changes();
  // No rail out at the last changes(): with no change since, a comm has nothing to look at.
  bool allIn() const { return seenOut_ == 0; }
  // PACT_TRACE_FILE is set: each rail's outage becomes a span "rail R out" (from the failover to
  // the recovery, with owner, peer rail and cause; an instant event at the failover, so an outage
  // that never ends shows too) on a track of its own named `owner` ("send comm to 10.77.0.1:...").
  void trace(const std::string& owner, size_t maxKept);
  // The outages of the rails the last changes() found back, summed (us).
  uint64_t backOutageUs() const { return backOutageUs_; }
  // How long this set had rail r out, up to the changes() that found it back: its watch's down
  // time, or a suspension (an endpoint failed while the probes answered), which the watch never saw.
  std::chrono::milliseconds lastOutage(size_t r) const {
    return std::chrono::milliseconds(r < lastOutageUs_.size() ? lastOutageUs_[r] / 1000 : 0);
  }
  // "rail 1 (10.77.1.2:40123)", for log lines.
  std::string name(size_t r) const;
  // Why rail r is out: "no probe answered and no data for 100ms" or "an endpoint failed".
  std::string cause(size_t r) const;
  std::chrono::microseconds downTime(size_t r) const { return watches_[r]->downTime(); }
  std::chrono::microseconds timeout() const { return timeout_; }

 private:
  std::shared_ptr<RailProber> prober_;
  std::vector<std::shared_ptr<RailWatch>> watches_;
  std::vector<TimePoint> suspendedUntil_;
  std::vector<std::string> localIps_, peerIps_;  // each rail's ends
  unsigned seenOut_ = 0;  // rails this comm has taken as out
  std::vector<uint64_t> outAtNs_;  // per rail: when this set took it out (monotonic ns; 0: in)
  std::vector<uint64_t> lastOutageUs_;  // per rail: its last outage, once back
  uint64_t backOutageUs_ = 0;
  // trace(): the owner, its track, the timeline's bound; per rail, why it went out.
  std::string traceOwner_;
  int traceTrack_ = 0;
  size_t traceKept_ = 0;
  std::vector<std::string> outCause_;
  void traceChanges(unsigned out, unsigned back, uint64_t t);
  std::chrono::microseconds timeout_{};
};

}  // namespace pact::transport
