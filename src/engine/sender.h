// Sender: the sending side of the commit protocol (protocol.h). It owns the open sends by
// (receiver, key) and the nonce base its sends' nonces are made from. Its one responsibility:
// take a send from its offer to the receiver's verdict: offer (eagerly, with the bytes, when
// they fit the receiver's grant), wait for the advertisement, send the pieces, say Done (again,
// until the verdict comes), retry when told, withdraw when released. The transfers, the timers
// and the peers, with the credit each granted this sender (PeerView), are the table's
// (transfer_table.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory_resource>
#include <span>
#include <utility>

#include "engine/credits.h"  // kUnlimited
#include "engine/link.h"
#include "engine/transfer_table.h"
#include "engine/types.h"

namespace pact::engine {

class Sender final : public TransferTable::Side {
 public:
  Sender(TransferTable& table, Link& link);
  Sender(const Sender&) = delete;
  Sender& operator=(const Sender&) = delete;

  // The new transfer's id.
  Result<uint64_t> send(uint64_t peer, const TransferKey& key, std::span<const BlockRef> blocks,
                        uint64_t deadlineUs, size_t route);
  // The sender's application gave the transfer up: before its Done left the receiver is told
  // (Cancel) and never commits; after, the verdict still settles it (a release cannot un-commit).
  // waitVerdict: a release (the transfer stays open until its verdict); a destroy settles now.
  void withdraw(Transfer& x, Status result, bool waitVerdict);

  // ---- the connections' events ----
  void onAdvertise(uint64_t from, const Advertise& m);
  void onVerdict(uint64_t from, const Verdict& m);
  void onEpochChange(uint64_t from, const EpochChange& m);
  // What the receiver from grants this sender.
  void onCreditUpdate(uint64_t from, const CreditUpdate& m);
  void pieceSent(uint64_t xfer, bool ok);
  void pieceResent(uint64_t xfer, uint64_t length);
  // A rail to x's peer was taken out: x's offer again if it may not have been advertised.
  void railOut(Transfer& x);
  // x's kResendDone timer fired (this attempt): its eager offer, or its Done, again.
  void resendDue(Transfer& x);
  // TransferTable::Side: out of sending_, the peer's credit view given back.
  void settled(Transfer& x) override;

 private:
  using TimerKind = TransferTable::TimerKind;
  using PeerView = TransferTable::PeerView;
  // Open sends are per receiver: (peer, key), ordered by the key's identity.
  struct BySendIdentity {
    bool operator()(const std::pair<uint64_t, TransferKey>& a,
                    const std::pair<uint64_t, TransferKey>& b) const {
      return a.first != b.first ? a.first < b.first : ByIdentity{}(a.second, b.second);
    }
  };

  const ProtocolConfig& config() const { return table_.config(); }
  const FaultSpec& fault() const { return table_.fault(); }
  bool inject(double p, size_t route) { return table_.inject(p, route); }
  TimePoint now() const { return table_.now(); }
  telemetry::CounterSet& counters() { return table_.counters(); }
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
  // The checksum Done (or an eager offer) carries into *out, when x's class verifies; false when
  // it cannot be computed (x is settled then).
  bool senderChecksum(Transfer& x, uint64_t* out);

  TransferTable& table_;
  Link& link_;
  // A send's nonce is this plus its transfer id: unique among the process's engines and their
  // predecessors (a restarted engine's sends are not taken for the old one's).
  static uint64_t freshNonceBase();
  const uint64_t nonceBase_ = freshNonceBase();
  // Open transfers by (peer, key).
  std::pmr::map<std::pair<uint64_t, TransferKey>, uint64_t, BySendIdentity> sending_;
};

}  // namespace pact::engine
