// Receiver: the receiving side of the commit protocol (protocol.h). It owns the model epoch and
// the commit hook, the credit ledger and what is staged per class, the offers waiting for their
// expect, the open receives and those waiting for credit, the exactly-once tables (committed
// keys with their nonces, generations, expects canceled before their offer) and the buffers its
// messages are built in. Its one responsibility: take a transfer from expect to one commit (or
// an abort the sender is told of): match the offer, grant credit and advertise, land range-checked
// pieces, verify, commit once. The transfers themselves, the timers and the peers are the table's
// (transfer_table.h). Files: receiver.cpp (expect, offers, credit, epochs, cancels),
// receiver_landing.cpp (pieces, Done, verify and commit).
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory_resource>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include "engine/credits.h"
#include "engine/dedup.h"
#include "engine/link.h"
#include "engine/transfer_table.h"
#include "engine/types.h"

namespace pact::engine {

class Receiver final : public TransferTable::Side {
 public:
  Receiver(TransferTable& table, Link& link);
  Receiver(const Receiver&) = delete;
  Receiver& operator=(const Receiver&) = delete;

  // ---- the application's calls ----
  // The new transfer's id.
  Result<uint64_t> expect(const TransferKey& key, std::span<const BlockRef> blocks, uint64_t deadlineUs,
                          size_t route);
  // The application released x (live): an expect no offer came for yet refuses a later one.
  void release(Transfer& x);
  Result<void> setEpoch(uint64_t epoch);
  uint64_t epoch() const { return epoch_; }
  void setCommitHook(CommitHook hook) { hook_ = std::move(hook); }
  // peer 0: the total budget.
  Result<void> setCredit(uint64_t peer, uint64_t budget);

  // ---- the connections' events ----
  // A peer became ready: it is told its credit share.
  void peerReady(uint64_t peer);
  // A peer is gone: the offers it made that wait for their expect are dropped.
  void peerLost(uint64_t peer);
  // data: the bytes behind an eager offer (m.bytes of them), or null.
  void onOffer(uint64_t from, const Offer& m, const uint8_t* data = nullptr);
  void onDone(uint64_t from, const Done& m);
  void onCancel(uint64_t from, const Cancel& m);
  PieceVerdict onPiece(uint64_t from, const PieceHeader& h, const void* data, size_t length,
                       bool rendezvous, void* descriptor);
  void pieceFetched(uint64_t xfer, uint32_t attempt, uint8_t* dst, uint64_t length, bool ok);
  void pieceLost(uint64_t xfer, uint32_t attempt, uint8_t* dst);
  // A rail to x's peer was taken out: x's advertisement again if the sender may not have it.
  void railOut(Transfer& x);

  // ---- timers and aborts ----
  // The kOffer timer id fired: its offer (if still waiting) is dropped. Whether one was.
  bool expireOffer(uint64_t id);
  void checkMissing(Transfer& x);
  // Ends x with result, and tells its sender (when an offer matched) why.
  void abort(Transfer& x, Event e, Status result, Reason r);
  // TransferTable::Side: out of receiving_ and the credit queue, its credit given back.
  void settled(Transfer& x) override;

 private:
  using TimerKind = TransferTable::TimerKind;
  using PeerView = TransferTable::PeerView;
  struct PendingOffer {
    uint64_t peer;
    Offer offer;
    uint64_t id = 0;  // for its expiry timer
  };

  const ProtocolConfig& config() const { return table_.config(); }
  const FaultSpec& fault() const { return table_.fault(); }
  bool inject(double p, size_t route) { return table_.inject(p, route); }
  TimePoint now() const { return table_.now(); }
  telemetry::CounterSet& counters() { return table_.counters(); }
  Transfer* openReceiver(const TransferKey& key);
  // One of the transfer's operations ended: it, when still live on that attempt (else nullptr).
  Transfer* endOp(uint64_t xferId, uint32_t attempt);
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
  void tryComplete(Transfer& x);
  bool retryAttempt(Transfer& x, Event why, Reason reason);
  void releaseCredit(Transfer& x);
  // The credit gauges (staged, peak, budget) follow the ledger.
  void syncCredit();
  void rememberCanceled(const TransferKey& k);

  TransferTable& table_;
  Link& link_;
  uint64_t epoch_ = 0;
  CommitHook hook_;
  CreditLedger credits_;
  bool creditSet_ = false;  // the application set a budget (config or setCredit)
  // Staged bytes per (sender, route), against the class's `credits` when the application set none.
  std::pmr::map<std::pair<uint64_t, size_t>, uint64_t> classStaged_;
  std::pmr::map<TransferKey, PendingOffer, ByIdentity> offers_;
  std::pmr::map<TransferKey, uint64_t, ByIdentity> receiving_;  // open receivers
  std::pmr::list<uint64_t> waitingCredit_;
  DedupSet committed_;
  GenerationTracker generations_;
  // Expects the application released before an offer came: a later offer is told kCanceled.
  std::pmr::set<TransferKey, ByIdentity> canceled_;
  std::pmr::list<TransferKey> canceledOrder_;  // oldest first (bounded)
  std::vector<BlockRef> commitTable_;  // the blocks the commit hook is shown (kept capacity)
  Control advertiseOut_;               // the Advertise being sent (kept capacity)
};

}  // namespace pact::engine
