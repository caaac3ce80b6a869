// Protocol: the epoch-aware commit protocol of the engine (ARCHITECTURE.md section 5,
// docs/engine.md), both sides of every transfer, with nothing of UCX or sockets in it: it talks
// to its peers through a Link (link.h). It owns the transfers, the receiver's credit ledger and
// its pending offers, the dedup and generation tables, the timers, the per-peer credit view, the
// counters and the trace. The engine (engine.h) owns the connections and the link; the protocol
// tests drive two protocols over an in-memory link with a clock of their own.
//
// Not synchronized: every call runs under the engine's lock (UCX callbacks run inside progress
// with it held). Files: protocol.cpp (transfers, timers, queries), receiver.cpp, sender.cpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <list>
#include <map>
#include <memory_resource>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "common/fault.h"
#include "common/function_ref.h"
#include "engine/credits.h"
#include "engine/dedup.h"
#include "engine/link.h"
#include "engine/timers.h"
#include "engine/types.h"
#include "telemetry/counters.h"
#include "telemetry/trace.h"
#include "transport/profile.h"
#include "transport/memory_copy.h"

namespace pact::engine {

struct ProtocolConfig {
  std::string name;              // the engine's, for messages
  uint64_t epoch = 0;            // the model epoch it starts on
  uint64_t creditBudget = 0;     // 0: none set (kUnlimited, and the classes' credits apply)
  std::vector<Profile> routes;   // the engine classes' profiles, DEFAULT first
  size_t traceEvents = 1 << 16;
  FaultSpec fault;               // PACT_FAULT
  TimePoint (*clock)() = &pact::now;  // the tests' own clock
  // Finished transfers remembered for exactly-once (duplicates, stale generations): size it above
  // the transfers that can still be retried.
  size_t exactlyOnceWindow = 1 << 16;
  // The CUDA driver for blocks in GPU memory (eager pieces copied in, checksums read through
  // staging); null: host blocks only (registration refuses CUDA memory without a driver).
  const cuda::Driver* cudaDriver = nullptr;
  // The routes' names, for the class counters ("DEFAULT", "KV"); missing: DEFAULT, then numbers.
  std::vector<std::string> routeNames = {};
};

// Host staging per engine for checksums over GPU blocks: each driver copy moves at most this.
inline constexpr size_t kVerifyStagingBytes = size_t{1} << 20;

class Protocol {
 public:
  Protocol(const ProtocolConfig& config, Link& link);
  Protocol(const Protocol&) = delete;
  Protocol& operator=(const Protocol&) = delete;

  // ---- the application's calls (blocks already checked against the registrations) ----
  Status expect(const TransferKey& key, std::span<const BlockRef> blocks, uint64_t deadlineUs,
              size_t route, uint64_t* xfer);
  Status send(uint64_t peer, const TransferKey& key, std::span<const BlockRef> blocks,
            uint64_t deadlineUs, size_t route, uint64_t* xfer);
  // kOk: gone; kInProgress: final later (query/wait keep working on it until then).
  Status release(uint64_t xfer);
  Status query(uint64_t xfer, XferInfo* info) const;
  const Transfer* find(uint64_t xfer) const;
  // A group step's transfer; a receiving one names the peer its chunk comes from, so that the
  // peer's loss ends it at once (PEER_LOST) instead of at its deadline.
  void markGroupChunk(uint64_t xfer, uint64_t source);
  Status setEpoch(uint64_t epoch);
  uint64_t epoch() const { return epoch_; }
  void setCommitHook(CommitHook hook) { hook_ = std::move(hook); }
  // peer 0: the total budget.
  Status setCredit(uint64_t peer, uint64_t budget);
  Status peerCredit(uint64_t peer, uint64_t* budget, uint64_t* inUse) const;
  // This engine's counters (telemetry::kEngineCatalog; registered in the process registry).
  const telemetry::CounterSet& counters() const { return counters_; }
  size_t traceRead(uint64_t* cursor, telemetry::TraceEvent* out, size_t max) {
    return trace_.read(cursor, out, max);
  }

  // ---- the connections' events ----
  // A peer became ready: it is told its credit.
  void peerReady(uint64_t peer, const std::string& name);
  // A peer is gone: its transfers abort with status (kRemoteError, PACT_ERR_PEER_LOST: it died
  // or closed; kPeerStale: the application disconnected it), its offers are dropped.
  void peerLost(uint64_t peer, Status status = Status::kRemoteError);
  // After peerLost and the force close of its endpoints: sends UCX still holds to the lost peer
  // may never end (UCX 1.13's shared memory cannot force-close at all; 1.22's keeps a rendezvous
  // send waiting for a dead reader), so its transfers stop waiting for them and become final.
  // A send only reads its blocks, and no reader of them is left. Returns how many.
  int abandonSends(uint64_t peer);
  // A control message of a transfer (Offer, Advertise, Done, Verdict, EpochChange, Credit, Cancel).
  void onControl(uint64_t peer, const Control& m);
  // An eager offer and the transfer's bytes behind it (data null: they did not come with it).
  void onEager(uint64_t peer, const Offer& m, const uint8_t* data, size_t length);
  // A piece from peer (0: unknown connection): range-checked before a byte moves, then landed
  // (copied now, or fetched through the link for a rendezvous: descriptor).
  PieceVerdict onPiece(uint64_t peer, const PieceHeader& h, const void* data, size_t length,
                       bool rendezvous, void* descriptor);
  void pieceSent(uint64_t xfer, bool ok);
  void pieceFetched(uint64_t xfer, uint32_t attempt, uint8_t* dst, uint64_t length, bool ok);

  // ---- rail failover (the link's: docs/reliability.md, "Rail failover") ----
  // The link fails the peer's rails over (grace > 0): a receiver waits at least grace for pieces
  // missing after Done, and longer while they still arrive (the sender sends again what went
  // over a rail taken out).
  void setRailFailover(uint64_t peer, std::chrono::microseconds grace);
  // A piece the link sent (and reported) once goes again: the attempt waits for it.
  void pieceResent(uint64_t xfer, uint64_t length);
  // A fetch failed with its rail: the piece is taken again from the copy sent again.
  void pieceLost(uint64_t xfer, uint32_t attempt, uint8_t* dst);
  // A rail to peer was taken out: the control messages it may have swallowed go again (each
  // side's own: an offer not advertised yet, an advertisement not yet answered by pieces).
  void railOut(uint64_t peer);
  void count(telemetry::EngineCounter c, uint64_t n = 1) { counters_.add(c, n); }

  // ---- time and teardown ----
  int fireTimers();
  TimePoint nextTimer() const { return timers_.next(); }
  // Destroy: every open transfer aborts, each peer is told (its side ends PEER_LOST).
  void abortAll();
  // Whether a UCX operation still reads or writes a transfer's blocks.
  bool busy() const;
  size_t openTransfers() const { return xfers_.size(); }
  void countRegistrations(size_t n) { counters_.set(telemetry::kOpenRegistrations, n); }

  static std::string keyText(const TransferKey& k);

 private:
  // kMissing: Done came but pieces of the attempt did not (dropped); a grace period, then retry.
  // kOffer: an offer waiting for its expect reached the sender's deadline.
  enum class TimerKind : uint8_t { kDeadline, kResendDone, kMissing, kOffer };
  // The protocol's view of a peer: its name and, as a sender, the credit it was granted.
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
  // Open sends are per receiver: (peer, key), ordered by the key's identity.
  struct BySendIdentity {
    bool operator()(const std::pair<uint64_t, TransferKey>& a,
                    const std::pair<uint64_t, TransferKey>& b) const {
      return a.first != b.first ? a.first < b.first : ByIdentity{}(a.second, b.second);
    }
  };

  TimePoint now() const { return config_.clock(); }
  // The time left to a deadline in us, at least 1; 0 for none (what Offer and Advertise carry).
  uint64_t remainingUs(TimePoint deadline) const {
    if (deadline == TimePoint::max()) return 0;
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - now()).count();
    return static_cast<uint64_t>(std::max<int64_t>(left, 1));
  }
  // PACT_FAULT: true (and counted) when a fault of probability p strikes; one branch when unset.
  // route: the class of the traffic it hits, counted there too (kNoRoute: not known).
  static constexpr size_t kNoRoute = SIZE_MAX;
  bool inject(double p, size_t route) {
    if (!fault_.active() || !dice_.roll(p)) return false;
    counters_.add(telemetry::kFaultsInjected);
    if (route != kNoRoute) classOf(route).addShared(telemetry::kClassFaultsInjected);
    return true;
  }
  // A connected peer, or nullptr (unknown or lost).
  PeerView* peer(uint64_t id);
  void addTimer(TimePoint at, uint64_t id, TimerKind kind, uint32_t attempt = 0) {
    timers_.add(at, id, kind, attempt);
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

  // ---- transfers (protocol.cpp) ----
  // peer: the receiver (sender side), 0 until an offer matches (receiver side).
  Transfer& newTransfer(Role role, const TransferKey& key, std::span<const BlockRef> blocks,
                        size_t route, uint64_t peer, uint64_t deadlineUs);
  bool step(Transfer& x, Event e);
  void settle(Transfer& x, Event e, Status result);
  void maybeFinish(Transfer& x);
  void opDone(uint64_t xferId);
  Transfer* openReceiver(const TransferKey& key);
  // Calls fn on every live transfer matching pred; fn may settle (and so free) it.
  void forEachLive(FunctionRef<bool(const Transfer&)> pred, FunctionRef<void(Transfer&)> fn);

  // ---- receiver (receiver.cpp) ----
  // data: the bytes behind an eager offer (m.bytes of them), or null.
  void onOffer(uint64_t from, const Offer& m, const uint8_t* data = nullptr);
  void onDone(uint64_t from, const Done& m);
  void onCancel(uint64_t from, const Cancel& m);
  // The offer of peer from matched x: x waits for credit, then is advertised.
  void match(Transfer& x, uint64_t from, const Offer& offer);
  // x is the transfer of that offer's send (its peer, nonce and deadline).
  void bindPeer(Transfer& x, uint64_t from, const Offer& offer);
  // An eager offer matched x: landed and committed now when credit allows, else advertised.
  void matchEager(Transfer& x, uint64_t from, const Offer& m, const uint8_t* data);
  void advertiseWaiting();
  void advertise(Transfer& x);
  void takeCredit(Transfer& x);
  void sendAdvertise(Transfer& x);
  bool classCreditFits(const Transfer& x) const;
  // nonce: of the send it answers (control.h).
  void sendVerdict(uint64_t to, const TransferKey& key, uint64_t nonce, Outcome o, Reason r, uint32_t attempt = 0);
  bool copyIn(Transfer& x, const Extent& b, uint8_t* dst, const void* src, size_t n);
  void landed(Transfer& x, uint8_t* dst, uint64_t length);
  // PACT_FAULT corrupt: flips a bit of [dst, dst + length), one of x's blocks.
  void maybeCorrupt(Transfer& x, uint8_t* dst, uint64_t length);
  void checkMissing(Transfer& x);
  void tryComplete(Transfer& x);
  bool retryAttempt(Transfer& x, Event why, Reason reason);
  void receiverAbort(Transfer& x, Event e, Status result, Reason r);
  void releaseCredit(Transfer& x);
  // The credit gauges (staged, peak, budget) follow the ledger.
  void syncCredit();
  void rememberCanceled(const TransferKey& k);

  // ---- sender (sender.cpp) ----
  void onAdvertise(uint64_t from, const Advertise& m);
  void onVerdict(uint64_t from, const Verdict& m);
  void onEpochChange(uint64_t from, const EpochChange& m);
  // The sender's application gave the transfer up: before its Done left the receiver is told
  // (Cancel) and never commits; after, the verdict still settles it (a release cannot un-commit).
  // waitVerdict: a release (the transfer stays open until its verdict); a destroy settles now.
  void senderWithdraw(Transfer& x, Status result, bool waitVerdict);
  // Whether x may go eagerly to p: small enough for its class, host memory, within p's grant.
  bool eagerFits(const Transfer& x, const PeerView& p) const;
  void releaseEager(Transfer& x, PeerView& p);
  void sendEager(Transfer& x);
  // An eager transfer not advertised yet: its offer again (the offer or the verdict may be lost,
  // or the receiver waits for its expect or credit); released: Cancel, answered with the verdict.
  void repeatOffer(Transfer& x);
  void postPieces(Transfer& x);
  void sendDone(Transfer& x);
  // Arms the timer that says Done (or an eager offer) again while no verdict comes.
  void armResend(Transfer& x);
  // The checksum of x's blocks (verify kind x.verify); GPU blocks are read through staging_.
  Result<uint64_t> digestBlocks(const Transfer& x);
  // The checksum Done (or an eager offer) carries into *out, when x's class verifies; false when
  // it cannot be computed (x is settled then).
  bool senderChecksum(Transfer& x, uint64_t* out);

  ProtocolConfig config_;
  Link& link_;
  std::vector<uint8_t> staging_;  // kVerifyStagingBytes once a GPU block is verified
  uint64_t nextId_ = 1;
  // A send's nonce is this plus its transfer id: unique among the process's engines and their
  // predecessors (a restarted engine's sends are not taken for the old one's).
  static uint64_t freshNonceBase();
  const uint64_t nonceBase_ = freshNonceBase();
  // Every container of per-transfer state takes its nodes from pool_ (declared first, so it
  // outlives them; no lock: the engine's), and a freed Transfer waits in spare_ (its vectors keep
  // their capacity): a warm engine allocates nothing per transfer.
  std::pmr::unsynchronized_pool_resource pool_;
  std::pmr::unordered_map<uint64_t, std::unique_ptr<Transfer>> xfers_{&pool_};
  std::vector<std::unique_ptr<Transfer>> spare_;
  static constexpr size_t kSpareTransfers = 256;
  std::vector<BlockRef> commitTable_;  // the blocks the commit hook is shown (kept capacity)
  std::vector<uint64_t> liveIds_;      // forEachLive's list (kept capacity)
  Control advertiseOut_;               // the Advertise being sent (kept capacity)
  std::map<uint64_t, PeerView> peers_;
  Timers<TimerKind> timers_{&pool_};

  // Receiver.
  uint64_t epoch_ = 0;
  CommitHook hook_;
  CreditLedger credits_;
  bool creditSet_ = false;  // the application set a budget (config or setCredit)
  // Staged bytes per (sender, route), against the class's `credits` when the application set none.
  std::pmr::map<std::pair<uint64_t, size_t>, uint64_t> classStaged_{&pool_};
  struct PendingOffer {
    uint64_t peer;
    Offer offer;
    uint64_t id = 0;  // for its expiry timer
  };
  std::pmr::map<TransferKey, PendingOffer, ByIdentity> offers_{&pool_};
  std::pmr::map<TransferKey, uint64_t, ByIdentity> receiving_{&pool_};  // open receivers
  std::pmr::list<uint64_t> waitingCredit_{&pool_};
  DedupSet committed_;
  GenerationTracker generations_;
  // Expects the application released before an offer came: a later offer is told kCanceled.
  std::pmr::set<TransferKey, ByIdentity> canceled_{&pool_};
  std::pmr::list<TransferKey> canceledOrder_{&pool_};  // oldest first (bounded)

  // Sender: open transfers by (peer, key).
  std::pmr::map<std::pair<uint64_t, TransferKey>, uint64_t, BySendIdentity> sending_{&pool_};

  telemetry::CounterSet counters_;
  // Each route's class set ("engine class KV"), shared by the process's engines (addShared).
  std::vector<telemetry::CounterSet*> classes_;
  telemetry::CounterSet& classOf(size_t route) { return *classes_[std::min(route, classes_.size() - 1)]; }
  telemetry::TraceRing trace_;
  FaultSpec fault_;
  FaultDice dice_{1, 0};
};

}  // namespace pact::engine
