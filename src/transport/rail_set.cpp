#include "transport/rail_set.h"

#include <unistd.h>

#include <mutex>

#include "common/log.h"
#include "common/parse.h"
#include "telemetry/timeline.h"
#include "telemetry/trace.h"
#include "ucx/tcp_reset.h"

namespace pact::transport {

namespace {

// The IP address of rail i of dev: a virtual device's member's, a port's own.
const std::string& railAddress(const DeviceCtx& dev, size_t i) {
  const ucx::DeviceInfo& info = dev.info();
  return i < info.memberAddresses.size() ? info.memberAddresses[i] : info.ipAddress;
}

}  // namespace

bool failoverWanted(size_t rails, std::chrono::microseconds timeout) {
  return timeout.count() != 0 && rails >= 2;
}

std::vector<wire::ProbeAddress> probesOf(DeviceCtx& dev, RailProber& prober,
                                         std::chrono::microseconds timeout, std::vector<wire::ProbeAddress>* acks) {
  std::vector<wire::ProbeAddress> out;
  if (timeout.count() == 0 || dev.rails() < 2 || dev.info().memberAddresses.size() < dev.rails()) return out;
  for (size_t i = 0; i < dev.rails(); ++i) {
    auto a = prober.listen(railAddress(dev, i));
    auto k = acks != nullptr ? prober.ackAddress(railAddress(dev, i)) : a;
    if (!a.ok() || !k.ok()) {
      PACT_WARN("device %s: rail %zu: %s; rail failover is off for its comms", dev.info().name.c_str(), i,
                (a.ok() ? k : a).error().message.c_str());
      if (acks != nullptr) acks->clear();
      return {};
    }
    out.push_back(*a);
    if (acks != nullptr) acks->push_back(*k);
  }
  return out;
}

RailSet::RailSet(DeviceCtx& dev, std::shared_ptr<RailProber> prober,
                     const std::vector<wire::ProbeAddress>& local, const std::vector<wire::ProbeAddress>& peer,
                     std::chrono::microseconds timeout)
    : prober_(std::move(prober)), timeout_(timeout) {
  const size_t n = std::min({local.size(), peer.size(), dev.rails(), kMax});
  if (n < 2 || !prober_) return;
  for (size_t r = 0; r < n; ++r) {
    auto w = prober_->watch(railAddress(dev, r), peer[r], timeout);
    if (!w.ok()) {
      PACT_WARN("device %s: watching rail %zu of the peer: %s; rail failover is off for this comm",
                dev.info().name.c_str(), r, w.error().message.c_str());
      watches_.clear();
      return;
    }
    watches_.push_back(std::move(*w));
    localIps_.push_back(railAddress(dev, r));
    peerIps_.push_back(RailProber::ipOf(peer[r]));
  }
  suspendedUntil_.assign(n, TimePoint{});
  outAtNs_.assign(n, 0);
  lastOutageUs_.assign(n, 0);
}

bool RailSet::anyUsable() const { return usableCount() != 0; }

bool RailSet::anyAnswering() const {
  for (const auto& w : watches_)
    if (w->up()) return true;
  return false;
}

std::string RailSet::causes() const {
  std::string out;
  for (size_t r = 0; r < watches_.size(); ++r) out += (r == 0 ? "" : "; ") + name(r) + ": " + cause(r);
  return out;
}

size_t RailSet::usableCount() const {
  size_t n = 0;
  for (size_t r = 0; r < watches_.size(); ++r) n += usable(r) ? 1 : 0;
  return n;
}

void RailSet::suspend(size_t r) {
  if (r < suspendedUntil_.size()) suspendedUntil_[r] = now() + timeout_;
}

int RailSet::pick(size_t home, const std::vector<int>& lanesOn) const {
  if (usable(home)) return static_cast<int>(home);
  int best = -1;
  for (size_t r = 0; r < watches_.size(); ++r)
    if (usable(r) && (best < 0 || lanesOn[r] < lanesOn[static_cast<size_t>(best)])) best = static_cast<int>(r);
  return best;
}

std::pair<unsigned, unsigned> RailSet::changes() {
  unsigned out = 0, back = 0;
  for (size_t r = 0; r < watches_.size(); ++r) {
    const unsigned bit = 1u << r;
    const bool isOut = !usable(r);
    if (isOut && !(seenOut_ & bit)) out |= bit;
    if (!isOut && (seenOut_ & bit)) back |= bit;
  }
  seenOut_ = (seenOut_ | out) & ~back;
  backOutageUs_ = 0;
  if ((out | back) == 0) return {out, back};
  const uint64_t t = telemetry::monotonicNs();
  if (!traceOwner_.empty()) traceChanges(out, back, t);
  for (size_t r = 0; r < watches_.size(); ++r) {
    if ((back & (1u << r)) && outAtNs_[r] != 0) {
      lastOutageUs_[r] = (t - outAtNs_[r]) / 1000;
      backOutageUs_ += lastOutageUs_[r];
      outAtNs_[r] = 0;
    }
    if (out & (1u << r)) outAtNs_[r] = t;
  }
  return {out, back};
}

void RailSet::trace(const std::string& owner, size_t maxKept) {
  if (!active()) return;
  traceOwner_ = owner;
  traceTrack_ = telemetry::timelineTrack();
  traceKept_ = maxKept;
  outCause_.assign(watches_.size(), "");
  telemetry::addToTimeline({"{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + std::to_string(::getpid()) +
                            ",\"tid\":" + std::to_string(traceTrack_) + ",\"args\":{\"name\":\"rails of " +
                            telemetry::jsonEscape(owner) + "\"}}"},
                           traceKept_);
}

void RailSet::traceChanges(unsigned out, unsigned back, uint64_t t) {
  using telemetry::jsonEscape;
  std::vector<std::string> events;
  for (size_t r = 0; r < watches_.size(); ++r) {
    const std::string head = "{\"name\":\"rail " + std::to_string(r) + " out\",\"cat\":\"rail failover\",\"pid\":" +
                             std::to_string(::getpid()) + ",\"tid\":" + std::to_string(traceTrack_);
    const auto args = [&](const std::string& cause) {
      return ",\"args\":{\"owner\":\"" + jsonEscape(traceOwner_) + "\",\"peer_rail\":\"" +
             jsonEscape(watches_[r]->name()) + "\",\"cause\":\"" + jsonEscape(cause) + "\"}}";
    };
    if (out & (1u << r)) {
      outCause_[r] = cause(r);
      events.push_back(head + ",\"ph\":\"i\",\"s\":\"t\",\"ts\":" + telemetry::timelineUs(t) + args(outCause_[r]));
    }
    if ((back & (1u << r)) && outAtNs_[r] != 0) {
      events.push_back(head + ",\"ph\":\"X\",\"ts\":" + telemetry::timelineUs(outAtNs_[r]) + ",\"dur\":" +
                       telemetry::timelineUs(t - outAtNs_[r]) + args(outCause_[r]));
    }
  }
  telemetry::addToTimeline(std::move(events), traceKept_);
}

int RailSet::reset(size_t r) const {
  // Out only because an endpoint failed (the probes still answered): the rail carries the peer's
  // other connections, and shutting them down would take it out on the peer's side too (and so
  // on, back and forth); the failed endpoint's own connection is dead already.
  if (watches_[r]->up()) return 0;
  return shutConnections(r);
}

int RailSet::shutConnections(size_t r) const { return ucx::resetTcpConnections(localIps_[r], peerIps_[r]); }

std::string RailSet::name(size_t r) const {
  return "rail " + std::to_string(r) + " (" + watches_[r]->name() + ")";
}

std::string RailSet::cause(size_t r) const {
  if (!watches_[r]->up()) return "no probe answered and no data for " + formatDuration(timeout_);
  return "an endpoint on it failed";
}

}  // namespace pact::transport
