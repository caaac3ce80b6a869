// Lanes of a send comm: one UCX endpoint each, and the steering that picks the lane for a piece.
// The pieces of an unordered channel are bound to a lane late: pieces wait in one queue and each
// lane takes the next one while it has less than laneCap() bytes in flight, so a lane that drains
// faster takes more pieces, no decision is made long before the data moves, and no lane (a
// single one included) piles more rendezvous transfers on its UCX endpoint than it can move.
// Adaptive steering then gives each piece to the lane where it is expected to finish first (bytes
// in flight over measured throughput); round-robin is kept for comparison. The injected lane delay (a test
// hook) holds a lane's pieces back before UCX sees them. With a gate (transport/priority.h), a
// lane set whose class is below a busy class to the same peer holds its waiting pieces; its owner
// pumps it again on every progress. Device mutex held for every call.
#pragma once

#include <algorithm>
#include <vector>

#include "telemetry/counters.h"
#include "transport/channel.h"
#include "transport/endpoint.h"
#include "transport/priority.h"
#include "transport/ring.h"
#include "ucx/worker.h"

namespace pact::transport {

// What the lanes need of a piece of either face (a plugin Part, an engine piece operation).
struct LanePiece {
  size_t size = 0;             // bytes the piece carries
  TimePoint queuedAt{};        // when the piece was given to its lane
  Status status = Status::kOk; // its completion status
  uint8_t lane = 0;            // the lane that carries it
  uint8_t rail = 0;            // the rail (worker) its UCX operation runs on
};

struct LaneStats {
  uint64_t pieces = 0;
  uint64_t bytes = 0;
  double bytesPerUs = 0;  // measured throughput estimate (0 = not measured yet)
  uint64_t holds = 0;     // the lane set's: times it stood back for a higher class (Lanes::holds)
};

class Lanes {
 public:
  Lanes() = default;
  Lanes(const Lanes&) = delete;
  Lanes& operator=(const Lanes&) = delete;
  ~Lanes() { detachGate(); }
  void configure(const ChannelConfig& cfg) { cfg_ = cfg; }
  // Reports this set's work to gate at `priority` and yields to the levels above it.
  void setGate(std::shared_ptr<PeerGate> gate, int priority) {
    detachGate();
    gate_ = std::move(gate);
    priority_ = priority;
    if (gate_) gate_->add(priority_, static_cast<int64_t>(work_));
  }
  bool gated() const { return gate_ != nullptr; }
  // Times this set stood back (held its waiting pieces) because a higher class had work to the peer.
  uint64_t holds() const { return holds_; }
  // Bytes handed to UCX and not completed, over every lane.
  size_t inflight() const { return inflight_; }
  void add(std::shared_ptr<SharedEndpoint> ep, uint8_t rail) {
    lanes_.emplace_back();
    lanes_.back().ep = std::move(ep);
    lanes_.back().rail = rail;
    lanes_.back().home = rail;
  }
  // Rail failover (transport/rail_set.h): the rail lane i runs on now, and the one it was made on.
  uint8_t rail(size_t i) const { return lanes_[i].rail; }
  uint8_t home(size_t i) const { return lanes_[i].home; }
  // Bytes lane i has handed to UCX and not seen completed.
  size_t laneInflight(size_t i) const { return lanes_[i].inflight; }
  // Lanes on each of `rails` rails now.
  std::vector<int> lanesOn(size_t rails) const {
    std::vector<int> n(rails, 0);
    for (const auto& l : lanes_)
      if (l.rail < rails) ++n[l.rail];
    return n;
  }
  // Lane i goes on over ep on `rail`; its throughput is measured afresh. What its old endpoint
  // still holds completes as that endpoint decides (the caller closes it when the rail is out).
  void moveLane(size_t i, std::shared_ptr<SharedEndpoint> ep, uint8_t rail) {
    Lane& l = lanes_[i];
    l.ep = std::move(ep);
    l.rail = rail;
    l.bytesPerUs = 0;
  }
  size_t size() const { return lanes_.size(); }
  ucx::Endpoint& endpoint(size_t i) { return lanes_[i].ep->ep; }
  const std::shared_ptr<SharedEndpoint>& shared(size_t i) const { return lanes_[i].ep; }
  // The error UCX reported on one of the lanes' endpoints (UCS_OK: none).
  ucs_status_t failure() const {
    for (const auto& l : lanes_)
      if (l.ep && l.ep->failed()) return l.ep->error;
    return UCS_OK;
  }
  // Lets go of every endpoint (a shared one closes once its last user let go; forcibly when
  // force is set here or by another user).
  void release(bool force) {
    for (auto& l : lanes_)
      if (force && l.ep) l.ep->forceClose = true;
    lanes_.clear();
    detachGate();  // what is left completes without this set (orphans)
  }

  // Queues a piece for the lanes and binds what the lanes can take now. post(part, ep) does the
  // UCX call (not from inside a UCX callback).
  template <typename Post>
  void dispatch(LanePiece* p, Post&& post);
  // Binds waiting pieces to lanes with room and posts delayed pieces whose time has come.
  template <typename Post>
  void pump(Post&& post);
  bool idle() const { return waiting_.empty(); }
  // From now until every lane's endpoint was wired up (SharedEndpoint::wiredUp), pieces wait (a
  // comm with rail failover: a rail that fails at once then fails over, where UCX 1.13 would
  // abort a connection failing with sends queued behind its wire-up). Once wired, it stays (a
  // lane moved to a new endpoint by failover does not wait again).
  void awaitWireUp() { wired_ = false; }
  bool wiredUp() {
    if (wired_) return true;
    for (auto& l : lanes_)
      if (!l.ep->wiredUp()) return false;
    return wired_ = true;
  }
  // A piece finished (any status, sent or given back unsent): uncharge its lane and the gate and
  // update the throughput estimate.
  void completed(const LanePiece& p) {
    Lane& l = lanes_[p.lane];
    l.inflight -= std::min(l.inflight, p.size);
    inflight_ -= std::min(inflight_, p.size);
    done(p.size);
    if (p.status == Status::kOk && lanes_.size() > 1) measure(l, p);  // one lane: nothing to steer
  }
  // Pieces not yet posted (waiting, or held on a delayed lane) are given back: f(part) each.
  template <typename F>
  void dropDelayed(F&& f);
  // Only the pieces a delayed lane holds (bound to it, "on the wire"): f(part) each.
  template <typename F>
  void takeHeld(F&& f);
  // Closes the endpoints, forced, for every user: what UCX still holds on them fails now.
  void closeAll();
  LaneStats stats(size_t i) const;
  // With several lanes: each counts its share in the registry as "lane N of OWNER" (the
  // metrics' pact_lane_pieces_total and pact_lane_bytes_total), a set for each rail it carried
  // pieces on, labelled `labels` plus lane="N" and rail=railNames[rail]; comm: the plugin comm's
  // counter set id (0 for an engine's). One lane: nothing to share.
  void countAs(const std::string& owner, telemetry::Labels labels, std::vector<std::string> railNames,
               uint64_t comm = 0);

 private:
  struct Lane {
    std::shared_ptr<SharedEndpoint> ep;
    uint8_t rail = 0;
    uint8_t home = 0;  // the rail it was made on (it returns there once that rail is back)
    size_t inflight = 0;
    double bytesPerUs = 0;    // EWMA over busy windows
    TimePoint windowStart{};  // start of the current busy window
    size_t windowBytes = 0;   // completed in the current window
    Ring<LanePiece*> delayed;
    uint64_t pieces = 0;
    uint64_t bytes = 0;
    std::vector<std::unique_ptr<telemetry::CounterSet>> counters;  // countAs(), by rail
  };
  // countAs()'s: how a lane's set on a rail is made.
  struct Counting {
    std::string owner;
    telemetry::Labels labels;
    std::vector<std::string> rails;
    uint64_t comm = 0;
  };
  // Lane i's set for the rail it is on now (made on the rail's first piece).
  telemetry::CounterSet& railSet(size_t i);
  // The lane for a piece of `bytes` among lanes with room, or lanes_.size() when all are full.
  size_t choose(size_t bytes);
  void measure(Lane& l, const LanePiece& p);
  // Bytes a lane may have in flight before further pieces wait (a lane with nothing in flight
  // takes any piece).
  size_t laneCap() const { return std::max<size_t>(8 * cfg_.chunk, size_t{2} << 20); }
  // A higher class has work to the peer: hold. After kMaxPause of it, one piece every kTrickle,
  // one at a time (transport/priority.h).
  bool yielding() const {
    if (gate_ == nullptr || !gate_->higherBusy(priority_)) return false;
    if (inflight_ != 0 || !gate_->higherLongBusy(priority_)) return true;
    return now() - lastTrickle_ < gate_->trickle();
  }
  // yielding(), counting each time the set starts to stand back.
  bool standBack() {
    const bool y = yielding();
    holds_ += y && !standing_ ? 1 : 0;
    standing_ = y;
    return y;
  }
  // A piece's work is over (completed, or given back unsent).
  void done(size_t bytes) {
    work_ -= std::min(work_, bytes);
    if (gate_) gate_->add(priority_, -static_cast<int64_t>(bytes));
  }
  void detachGate() {
    if (gate_) gate_->add(priority_, -static_cast<int64_t>(work_));
    gate_.reset();
  }
  template <typename Post>
  void bind(LanePiece* p, size_t lane, Post&& post);

  ChannelConfig cfg_;
  std::vector<Lane> lanes_;
  Ring<LanePiece*> waiting_;  // pieces not bound to a lane yet
  size_t next_ = 0;
  size_t inflight_ = 0;  // bound to a lane, not completed (every lane)
  size_t work_ = 0;      // dispatched, not completed nor given back: what the gate counts
  std::shared_ptr<PeerGate> gate_;
  int priority_ = 0;
  uint64_t holds_ = 0;
  std::unique_ptr<Counting> counting_;  // countAs()
  bool wired_ = true;      // every lane's endpoint was wired up, or nothing waits for it (wiredUp)
  bool standing_ = false;  // standing back for a higher class now
  TimePoint lastTrickle_{};  // the last piece bound while a higher class had work
};

template <typename Post>
void Lanes::bind(LanePiece* p, size_t i, Post&& post) {
  Lane& l = lanes_[i];
  p->lane = static_cast<uint8_t>(i);
  p->rail = l.rail;
  const bool delayed = static_cast<int>(i) == cfg_.fault.delayLane && cfg_.fault.delay.count() > 0;
  // Time is only needed to steer among lanes or to hold a delayed piece: keep it off the
  // single-lane fast path.
  if (lanes_.size() > 1 || delayed) p->queuedAt = now();
  if (l.inflight == 0) {  // an idle lane starts a new measurement window
    l.windowStart = p->queuedAt;
    l.windowBytes = 0;
  }
  l.inflight += p->size;
  if (gate_ != nullptr && gate_->higherBusy(priority_)) lastTrickle_ = now();  // a trickled piece
  inflight_ += p->size;
  ++l.pieces;
  l.bytes += p->size;
  if (counting_) {
    telemetry::CounterSet& c = railSet(p->lane);
    c.add(telemetry::kLanePieces);
    c.add(telemetry::kLaneBytes, p->size);
  }
  if (delayed)
    l.delayed.push_back(p);
  else
    post(p, l.ep->ep);
}

template <typename Post>
void Lanes::dispatch(LanePiece* p, Post&& post) {
  // An ordered channel sends each message whole on its one lane, at once. Pieces of an unordered
  // channel wait in the queue even on one lane, so laneCap() bounds what the lane has in flight:
  // a window of 16 MiB messages in 512 KiB pieces is 256 rendezvous transfers outstanding on one
  // UCX endpoint, which over tcp moves 40% slower than 8 (docs/performance.md, "unordered").
  work_ += p->size;
  if (gate_) gate_->add(priority_, static_cast<int64_t>(p->size));
  if (lanes_.size() == 1 && cfg_.ordered && waiting_.empty() && !standBack() && wiredUp()) {
    bind(p, 0, post);
    return;
  }
  waiting_.push_back(p);
  pump(post);
}

template <typename Post>
void Lanes::pump(Post&& post) {
  if (!wiredUp()) return;
  while (!waiting_.empty() && !standBack()) {
    const size_t i = choose(waiting_.front()->size);
    if (i == lanes_.size()) break;  // every lane is full: wait for completions
    LanePiece* p = waiting_.front();
    waiting_.pop_front();
    bind(p, i, post);
  }
  const int delayLane = cfg_.fault.delayLane;
  if (delayLane < 0 || static_cast<size_t>(delayLane) >= lanes_.size()) return;
  Lane& l = lanes_[static_cast<size_t>(delayLane)];
  const auto t = now();
  while (!l.delayed.empty() && t - l.delayed.front()->queuedAt >= cfg_.fault.delay) {
    LanePiece* p = l.delayed.front();
    l.delayed.pop_front();
    post(p, l.ep->ep);
  }
}

template <typename F>
void Lanes::takeHeld(F&& f) {
  for (auto& l : lanes_) {
    l.delayed.forEach(f);
    l.delayed.clear();
  }
}

template <typename F>
void Lanes::dropDelayed(F&& f) {
  waiting_.forEach(f);
  waiting_.clear();
  takeHeld(f);
}

}  // namespace pact::transport
