// Protocol: the epoch-aware commit protocol of the engine (ARCHITECTURE.md section 5,
// docs/engine.md), both sides of every transfer, with nothing of UCX or sockets in it: it talks
// to its peers through a Link (link.h). The engine (engine.h) owns the connections (its
// PeerTable) and the link (its Routes); the protocol tests drive two protocols over an in-memory
// link with a clock of their own.
//
// A thin facade over three objects, and the engine's one entry to them: the TransferTable
// (transfer_table.h: the transfers, their generic lifecycle, the timers, the per-peer view, the
// counters, the trace, PACT_FAULT), the Receiver (receiver.h: epochs, credit, offers,
// exactly-once, landing and commit) and the Sender (sender.h: offers, pieces, Done, retries,
// withdrawal). Protocol dispatches: a control message by its kind, a timer by its kind, a peer's
// loss, a release or an abort by each transfer's role.
//
// Not synchronized: every call runs under the engine's lock (UCX callbacks run inside progress
// with it held). Files: protocol.cpp (the facade's dispatch), transfer_table.cpp, receiver.cpp
// and receiver_landing.cpp, sender.cpp; ProtocolConfig in protocol_config.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>

#include "engine/link.h"
#include "engine/protocol_config.h"
#include "engine/receiver.h"
#include "engine/sender.h"
#include "engine/transfer_table.h"
#include "engine/types.h"
#include "telemetry/counters.h"
#include "telemetry/trace.h"

namespace pact::engine {

class Protocol {
 public:
  Protocol(const ProtocolConfig& config, Link& link);
  Protocol(const Protocol&) = delete;
  Protocol& operator=(const Protocol&) = delete;

  // ---- the application's calls (blocks already checked against the registrations) ----
  // The new transfer's id.
  Result<uint64_t> expect(const TransferKey& key, std::span<const BlockRef> blocks, uint64_t deadlineUs,
                          size_t route) {
    return receiver_.expect(key, blocks, deadlineUs, route);
  }
  Result<uint64_t> send(uint64_t peer, const TransferKey& key, std::span<const BlockRef> blocks,
                        uint64_t deadlineUs, size_t route) {
    return sender_.send(peer, key, blocks, deadlineUs, route);
  }
  // true: gone; false: final later (query/wait keep working on it until then).
  Result<bool> release(uint64_t xfer);
  Result<XferInfo> query(uint64_t xfer) const { return table_.query(xfer); }
  const Transfer* find(uint64_t xfer) const { return table_.find(xfer); }
  // A group step's transfer; a receiving one names the peer its chunk comes from, so that the
  // peer's loss ends it at once (PEER_LOST) instead of at its deadline.
  void markGroupChunk(uint64_t xfer, uint64_t source);
  Result<void> setEpoch(uint64_t epoch) { return receiver_.setEpoch(epoch); }
  uint64_t epoch() const { return receiver_.epoch(); }
  void setCommitHook(CommitHook hook) { receiver_.setCommitHook(std::move(hook)); }
  // peer 0: the total budget.
  Result<void> setCredit(uint64_t peer, uint64_t budget) { return receiver_.setCredit(peer, budget); }
  Result<CreditView> peerCredit(uint64_t peer) const;
  // This engine's counters (telemetry::kEngineCatalog; registered in the process registry).
  const telemetry::CounterSet& counters() const { return table_.counters(); }
  size_t traceRead(uint64_t* cursor, telemetry::TraceEvent* out, size_t max) {
    return table_.traceRead(cursor, out, max);
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
  int abandonSends(uint64_t peer) { return table_.abandonSends(peer); }
  // A control message of a transfer (Offer, Advertise, Done, Verdict, EpochChange, Credit, Cancel).
  void onControl(uint64_t peer, const Control& m);
  // An eager offer and the transfer's bytes behind it (data null: they did not come with it).
  void onEager(uint64_t peer, const Offer& m, const uint8_t* data, size_t length);
  // A piece from peer (0: unknown connection): range-checked before a byte moves, then landed
  // (copied now, or fetched through the link for a rendezvous: descriptor).
  PieceVerdict onPiece(uint64_t peer, const PieceHeader& h, const void* data, size_t length,
                       bool rendezvous, void* descriptor) {
    return receiver_.onPiece(peer, h, data, length, rendezvous, descriptor);
  }
  void pieceSent(uint64_t xfer, bool ok) { sender_.pieceSent(xfer, ok); }
  void pieceFetched(uint64_t xfer, uint32_t attempt, uint8_t* dst, uint64_t length, bool ok) {
    receiver_.pieceFetched(xfer, attempt, dst, length, ok);
  }

  // ---- rail failover (the link's: docs/reliability.md, "Rail failover") ----
  // The link fails the peer's rails over (grace > 0): a receiver waits at least grace for pieces
  // missing after Done, and longer while they still arrive (the sender sends again what went
  // over a rail taken out).
  void setRailFailover(uint64_t peer, std::chrono::microseconds grace) {
    table_.view(peer).failoverGrace = grace;
  }
  // A piece the link sent (and reported) once goes again: the attempt waits for it.
  void pieceResent(uint64_t xfer, uint64_t length) { sender_.pieceResent(xfer, length); }
  // A fetch failed with its rail: the piece is taken again from the copy sent again.
  void pieceLost(uint64_t xfer, uint32_t attempt, uint8_t* dst) { receiver_.pieceLost(xfer, attempt, dst); }
  // A rail to peer was taken out: the control messages it may have swallowed go again (each
  // side's own: an offer not advertised yet, an advertisement not yet answered by pieces).
  void railOut(uint64_t peer);
  void count(telemetry::EngineCounter c, uint64_t n = 1) { table_.counters().add(c, n); }

  // ---- time and teardown ----
  int fireTimers();
  TimePoint nextTimer() const { return table_.nextTimer(); }
  // Destroy: every open transfer aborts, each peer is told (its side ends PEER_LOST).
  void abortAll();
  // Whether a UCX operation still reads or writes a transfer's blocks.
  bool busy() const { return table_.busy(); }
  size_t openTransfers() const { return table_.size(); }
  void countRegistrations(size_t n) { table_.counters().set(telemetry::kOpenRegistrations, n); }

 private:
  TransferTable table_;  // first: its pool outlives the receiver's and the sender's containers
  Receiver receiver_;
  Sender sender_;
};

}  // namespace pact::engine
