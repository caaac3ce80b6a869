// TransferTable: what both sides of the commit protocol (protocol.h) share. It owns the transfers
// (by id, the spare ones kept for reuse, and the pool every per-transfer container of the
// protocol takes its nodes from), the timers, the per-peer view, the engine counters and class
// counter sets, the trace ring, PACT_FAULT injection, the clock and the checksum staging. Its one
// responsibility: a transfer's generic lifecycle (created, stepped through the transition table,
// settled, freed once final and released), whichever side runs it. What settling means for the
// side that owns a transfer's role (its tables, its credit) it asks of that side through Side;
// it knows nothing of the receiver's or the sender's own state.
//
// Not synchronized: the engine's lock (protocol.h).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <memory_resource>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/fault.h"
#include "common/function_ref.h"
#include "engine/protocol_config.h"
#include "engine/timers.h"
#include "engine/types.h"
#include "telemetry/counters.h"
#include "telemetry/trace.h"

namespace pact::engine {

// "(request r, transfer t, epoch e, generation g)", for messages.
std::string keyText(const TransferKey& k);

class TransferTable {
 public:
  // kMissing: Done came but pieces of the attempt did not (dropped); a grace period, then retry.
  // kOffer: an offer waiting for its expect reached the sender's deadline.
  enum class TimerKind : uint8_t { kDeadline, kResendDone, kMissing, kOffer };
  using Timer = Timers<TimerKind>::Timer;
  // The protocol's view of a peer: its name and, as a sender, the credit it was granted. Both
  // sides read the name, the loss and the failover grace; the credit fields are the sender's
  // (kept here so that one entry per peer is made at peerReady and marked lost once).
  struct PeerView {
    std::string name;
    uint64_t creditBudget = 0;  // kUnlimited, or bytes (0 grants nothing)
    uint64_t creditInUse = 0;   // advertised to this sender, not final (pact_peer_credit)
    // Eager bytes sent and not answered (neither verdict nor advertisement): they count against
    // the grant when deciding to send eagerly, not in creditInUse (the receiver took no credit
    // for those it keeps waiting, and advertises others meanwhile).
    uint64_t eagerInFlight = 0;
    bool creditKnown = false;   // a CreditUpdate came (eager offers wait for one)
    bool lost = false;          // gone; what it was granted stays readable (pact_peer_credit)
    std::chrono::microseconds failoverGrace{0};  // setRailFailover
  };
  // The side that owns one role's transfers (the protocol's Receiver or Sender).
  class Side {
   public:
    // x has just settled (COMMITTED or ABORTED, counted): the side drops it from its own tables
    // and gives back what x held of its credit. The table frees x after, if it is final and
    // released.
    virtual void settled(Transfer& x) = 0;

   protected:
    ~Side() = default;
  };
  // route of traffic no class is known for (inject).
  static constexpr size_t kNoRoute = SIZE_MAX;

  explicit TransferTable(const ProtocolConfig& config);
  TransferTable(const TransferTable&) = delete;
  TransferTable& operator=(const TransferTable&) = delete;
  // The sides settle calls back into, by the transfer's role; before the first transfer.
  void attach(Side& receiver, Side& sender) {
    receiver_ = &receiver;
    sender_ = &sender;
  }

  const ProtocolConfig& config() const { return config_; }
  // Every container of per-transfer state, on either side, takes its nodes from here.
  std::pmr::memory_resource* pool() { return &pool_; }
  TimePoint now() const { return config_.clock(); }
  // The time left to a deadline in us, at least 1; 0 for none (what Offer and Advertise carry).
  uint64_t remainingUs(TimePoint deadline) const {
    if (deadline == TimePoint::max()) return 0;
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - now()).count();
    return static_cast<uint64_t>(std::max<int64_t>(left, 1));
  }
  // ---- PACT_FAULT, counters, trace ----
  const FaultSpec& fault() const { return fault_; }
  FaultDice& dice() { return dice_; }
  // PACT_FAULT: true (and counted) when a fault of probability p strikes; one branch when unset.
  // route: the class of the traffic it hits, counted there too (kNoRoute: not known).
  bool inject(double p, size_t route) {
    if (!fault_.active() || !dice_.roll(p)) return false;
    counters_.add(telemetry::kFaultsInjected);
    if (route != kNoRoute) classOf(route).addShared(telemetry::kClassFaultsInjected);
    return true;
  }
  telemetry::CounterSet& counters() { return counters_; }
  const telemetry::CounterSet& counters() const { return counters_; }
  telemetry::CounterSet& classOf(size_t route) { return *classes_[std::min(route, classes_.size() - 1)]; }
  size_t traceRead(uint64_t* cursor, telemetry::TraceEvent* out, size_t max) {
    return trace_.read(cursor, out, max);
  }

  // ---- peers ----
  // A connected peer, or nullptr (unknown or lost).
  PeerView* peer(uint64_t id);
  // Any peer this protocol was told of, lost ones too (nullptr: never); view() makes its entry.
  const PeerView* known(uint64_t id) const;
  PeerView& view(uint64_t id) { return peers_[id]; }
  const std::map<uint64_t, PeerView>& peers() const { return peers_; }
  void markLost(uint64_t id);  // its credit view stays readable

  // ---- transfers ----
  // peer: the receiver (sender side), 0 until an offer matches (receiver side).
  Transfer& newTransfer(Role role, const TransferKey& key, std::span<const BlockRef> blocks,
                        size_t route, uint64_t peer, uint64_t deadlineUs);
  // An id from the transfers' sequence for something that is not a transfer (a pending offer's
  // expiry timer).
  uint64_t takeId() { return nextId_++; }
  const Transfer* find(uint64_t xfer) const;
  Transfer* find(uint64_t xfer);
  Transfer& at(uint64_t xfer) { return *xfers_.at(xfer); }
  size_t size() const { return xfers_.size(); }
  bool step(Transfer& x, Event e);
  void settle(Transfer& x, Event e, Status result);
  void maybeFinish(Transfer& x);
  // One of x's operations ended (a piece sent or fetched).
  void opDone(uint64_t xferId);
  // Calls fn on every live transfer matching pred; fn may settle (and so free) it.
  void forEachLive(FunctionRef<bool(const Transfer&)> pred, FunctionRef<void(Transfer&)> fn);
  // Whether a UCX operation still reads or writes a transfer's blocks.
  bool busy() const;
  // Protocol::abandonSends.
  int abandonSends(uint64_t peer);
  Result<XferInfo> query(uint64_t xfer) const;
  // The checksum of x's blocks (verify kind x.verify); GPU blocks are read through staging_.
  Result<uint64_t> digest(const Transfer& x);

  // ---- timers ----
  void addTimer(TimePoint at, uint64_t id, TimerKind kind, uint32_t attempt = 0) {
    timers_.add(at, id, kind, attempt);
  }
  void cancelTimer(TimePoint at, uint64_t id, TimerKind kind) { timers_.cancel(at, id, kind); }
  TimePoint nextTimer() const { return timers_.next(); }
  // Calls fire for each timer due now, earliest first; the count of those it says fired.
  int popDue(FunctionRef<bool(const Timer&)> fire) {
    return timers_.popDue(now(), fire);
  }
  // Moves the transfer's deadline earlier (a peer's budget is shorter), disarming the old timer.
  // Freeing a transfer disarms its deadline and Done-resend timers (a KV class's timeout would
  // keep thousands armed); a kMissing grace timer (kStragglerGrace) is left to fire and find none.
  void advanceDeadline(Transfer& x, TimePoint at) {
    if (at >= x.deadline) return;
    timers_.cancel(x.deadline, x.id, TimerKind::kDeadline);
    x.deadline = at;
    addTimer(x.deadline, x.id, TimerKind::kDeadline);
  }

 private:
  ProtocolConfig config_;
  Side* receiver_ = nullptr;
  Side* sender_ = nullptr;
  std::vector<uint8_t> staging_;  // kVerifyStagingBytes once a GPU block is verified
  uint64_t nextId_ = 1;
  // Every container of per-transfer state takes its nodes from pool_ (declared first, so it
  // outlives them; the receiver's and the sender's containers too: the protocol declares its
  // table before them; no lock: the engine's), and a freed Transfer waits in spare_ (its vectors
  // keep their capacity): a warm engine allocates nothing per transfer.
  std::pmr::unsynchronized_pool_resource pool_;
  std::pmr::unordered_map<uint64_t, std::unique_ptr<Transfer>> xfers_{&pool_};
  std::vector<std::unique_ptr<Transfer>> spare_;
  static constexpr size_t kSpareTransfers = 256;
  std::vector<uint64_t> liveIds_;      // forEachLive's list (kept capacity)
  std::map<uint64_t, PeerView> peers_;
  Timers<TimerKind> timers_{&pool_};

  telemetry::CounterSet counters_;
  // Each route's class set ("engine class KV"), shared by the process's engines (addShared).
  std::vector<telemetry::CounterSet*> classes_;
  telemetry::TraceRing trace_;
  FaultSpec fault_;
  FaultDice dice_{1, 0};
};

}  // namespace pact::engine
