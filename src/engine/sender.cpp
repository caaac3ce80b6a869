// The sender's side of a transfer: offer, wait for the receiver's advertisement (its credit),
// send the pieces, say Done (again, until the verdict comes), retry when told, withdraw.
#include "engine/sender.h"

#include <algorithm>
#include <atomic>
#include <random>

#include "common/log.h"

namespace pact::engine {

namespace {

// The largest piece of an ordered class: one active message, bounded so that one piece never
// holds its lane for long.
constexpr uint64_t kMaxOrderedPiece = 4ull << 20;
// An eager offer gathers at most this many source blocks (one UCX iov entry each).
constexpr size_t kMaxEagerBlocks = 64;

Status codeFor(Reason r) {
  switch (r) {
    case Reason::kEpochMismatch: return Status::kEpochMismatch;
    case Reason::kChecksum: return Status::kChecksum;
    case Reason::kDeadline: return Status::kDeadline;
    case Reason::kRejected: return Status::kRejected;
    case Reason::kDuplicate: return Status::kDuplicate;
    case Reason::kOutOfRange: return Status::kOutOfRange;
    case Reason::kPeerLost: case Reason::kShutdown: return Status::kRemoteError;
    case Reason::kStale: return Status::kStale;
    case Reason::kSizeMismatch: return Status::kInvalidArgument;
    case Reason::kIncomplete: return Status::kIncomplete;
    case Reason::kCanceled: return Status::kCanceled;
    case Reason::kNone: break;
  }
  return Status::kInternal;
}

}  // namespace

Sender::Sender(TransferTable& table, Link& link) : table_(table), link_(link), sending_(table.pool()) {}

uint64_t Sender::freshNonceBase() {
  // Random high bits (two engines, or an engine and its restarted self, never share them in
  // practice), a count of the process's engines in the middle, the transfer id added below.
  static std::atomic<uint64_t> engines{0};
  std::random_device rd;
  const uint64_t high = (static_cast<uint64_t>(rd()) << 32 | rd()) & ~((uint64_t{1} << 48) - 1);
  return high | (engines.fetch_add(1) & 0xffff) << 32;
}

Result<uint64_t> Sender::send(uint64_t to, const TransferKey& key, std::span<const BlockRef> blocks,
                              uint64_t deadlineUs, size_t route) {
  if (table_.peer(to) == nullptr) return Error{Status::kNotFound, "send: unknown peer " + std::to_string(to)};
  if (sending_.count({to, key}) != 0)
    return Error{Status::kDuplicate, "send " + keyText(key) + ": already open to this peer"};
  if (std::string why = link_.reach(to, route); !why.empty())
    return Error{Status::kRefused, "send " + keyText(key) + ": " + why};
  TransferKey k = key;
  if (fault().active() && fault().epochSkew != 0) {  // a peer on a skewed epoch
    k.modelEpoch += fault().epochSkew;
    counters().add(telemetry::kFaultsInjected);
    table_.classOf(route).addShared(telemetry::kClassFaultsInjected);
  }
  Transfer& x = table_.newTransfer(Role::kSender, k, blocks, route, to, deadlineUs);
  x.nonce = nonceBase_ + x.id;
  sending_[{to, k}] = x.id;
  const uint64_t id = x.id;
  if (eagerFits(x, *table_.peer(to))) {
    sendEager(x);
  } else {
    link_.sendControl(to, Offer{k, x.bytes, table_.remainingUs(x.deadline), 0, Verify::kNone, 0, x.nonce});
  }
  return id;
}

void Sender::onCreditUpdate(uint64_t from, const CreditUpdate& m) {
  PeerView& p = table_.view(from);
  p.creditBudget = m.budgetBytes;
  p.creditKnown = true;
}

// The sender's part of settling: the send is no longer open, and the credit it held in the
// peer's view (advertised, or eager bytes in flight) goes back.
void Sender::settled(Transfer& x) {
  sending_.erase({x.peer, x.key});
  PeerView* p = table_.peer(x.peer);
  if (p != nullptr && x.creditHeld) p->creditInUse -= std::min(p->creditInUse, x.bytes);
  if (p != nullptr) releaseEager(x, *p);
  x.creditHeld = false;
}

void Sender::releaseEager(Transfer& x, PeerView& p) {
  if (!x.eagerHeld) return;
  p.eagerInFlight -= std::min(p.eagerInFlight, x.bytes);
  x.eagerHeld = false;
}

void Sender::railOut(Transfer& x) {
  if (!x.eager && x.state == State::kAllocated) {
    link_.sendControl(x.peer, Offer{x.key, x.bytes, table_.remainingUs(x.deadline), kOfferRepeat,
                                    Verify::kNone, 0, x.nonce});
  }
}

void Sender::resendDue(Transfer& x) {
  if (x.eager && x.state == State::kAllocated) {
    repeatOffer(x);  // no verdict and no advertisement for the eager offer yet
  } else if (x.piecesPosted && x.pendingOps == 0) {
    sendDone(x);  // the receiver's verdict did not come: say Done again
  }
}

bool Sender::eagerFits(const Transfer& x, const PeerView& p) const {
  if (x.bytes > config().routes[x.route].eager || x.blocks.size() > kMaxEagerBlocks || !p.creditKnown)
    return false;
  // Within what the receiver granted this sender: eager bytes are in flight unasked.
  const uint64_t inUse = p.creditInUse + p.eagerInFlight;
  if (p.creditBudget != kUnlimited && (x.bytes > p.creditBudget || inUse > p.creditBudget - x.bytes))
    return false;
  return std::all_of(x.blocks.begin(), x.blocks.end(),
                     [](const Extent& b) { return b.type == MemoryType::kHost; });
}

// The offer, the bytes and their checksum in one message: the receiver commits on it (so, as
// after a Done, a release can no longer withdraw the transfer), or advertises and the bytes come
// again as pieces.
void Sender::sendEager(Transfer& x) {
  Offer m{x.key, x.bytes, table_.remainingUs(x.deadline), kOfferEager, x.verify, 0, x.nonce};
  if (!senderChecksum(x, &m.checksum)) return;
  x.eager = true;
  x.eagerHeld = true;
  table_.peer(x.peer)->eagerInFlight += x.bytes;
  x.doneSent = true;
  x.doneSentAt = now();
  // Faults as for a piece: not delivered (the repeated offer recovers it), or delivered twice.
  const int copies = inject(fault().drop, x.route) ? 0 : inject(fault().dup, x.route) ? 2 : 1;
  for (int c = 0; c < copies; ++c) {
    ++x.pendingOps;
    counters().add(telemetry::kBytesSent, x.bytes);
    link_.sendEager(x.peer, x.route, m, x.blocks, x.id);
  }
  armResend(x);
}

void Sender::repeatOffer(Transfer& x) {
  if (table_.peer(x.peer) == nullptr) return;
  // On the eager offer's lane, behind it: a Cancel never overtakes the bytes it withdraws.
  const int lane = static_cast<int>(x.route);
  if (x.userReleased) {
    link_.sendControl(x.peer, Cancel{x.key, true, x.nonce}, lane);
  } else {
    link_.sendControl(x.peer, Offer{x.key, x.bytes, table_.remainingUs(x.deadline),
                                    static_cast<uint8_t>(kOfferEager | kOfferRepeat), Verify::kNone, 0, x.nonce}, lane);
  }
  armResend(x);
}

void Sender::onAdvertise(uint64_t from, const Advertise& m) {
  auto it = sending_.find({from, m.key});
  if (it == sending_.end()) return;  // aborted here already; the receiver's deadline ends it
  Transfer& x = table_.at(it->second);
  if (!x.live() || x.state != State::kAllocated) return;
  uint64_t total = 0;
  for (const Block& b : m.blocks) total += b.length;
  if (total != x.bytes) {
    PACT_WARN("engine %s: %s advertised %lu bytes, sending %lu", config().name.c_str(),
              keyText(x.key).c_str(), static_cast<unsigned long>(total),
              static_cast<unsigned long>(x.bytes));
    table_.settle(x, Event::kFatalError, Status::kInvalidArgument);
    return;
  }
  if (x.userReleased) {  // an eager transfer released since: the receiver has not committed it
    link_.sendControl(from, Cancel{x.key, false, x.nonce});
    table_.settle(x, Event::kFatalError, Status::kCanceled);
    return;
  }
  for (const Block& b : m.blocks) x.remoteBlocks.push_back(b.length);
  if (PeerView* p = table_.peer(from)) {
    releaseEager(x, *p);  // answered: advertised
    p->creditInUse += x.bytes;
    x.creditHeld = true;
  }
  // An eager offer the receiver could not take (no expect or no credit yet, or its bytes failed
  // their check): it will not commit those bytes, so a release may withdraw again until the
  // pieces' Done leaves.
  x.doneSent = false;
  if (m.deadlineUs != 0) {
    table_.advanceDeadline(x, now() + std::chrono::microseconds(m.deadlineUs));
  }
  table_.step(x, Event::kAdvertise);
  table_.step(x, Event::kPost);
  postPieces(x);
}

// Cuts the source into pieces at both sides' block boundaries and, for an unordered class, at its
// chunk (the stripe unit, as for the plugin's unordered channels; an ordered class sends each block
// as one piece of at most kMaxOrderedPiece), and gives them to the link (the class's lanes: one
// lane in order, several steered).
void Sender::postPieces(Transfer& x) {
  if (table_.peer(x.peer) == nullptr) {
    table_.settle(x, Event::kFatalError, Status::kRemoteError);
    return;
  }
  table_.step(x, Event::kSend);
  x.piecesPosted = true;
  const Profile& profile = config().routes[x.route];
  const uint64_t chunk = profile.order == Order::kUnordered ? profile.chunk : kMaxOrderedPiece;
  size_t src = 0, dst = 0;
  uint64_t srcOff = 0, dstOff = 0;
  const uint64_t id = x.id;
  ++x.pendingOps;  // held while posting, so a completion inside the loop cannot finish the attempt
  x.stalled = false;
  while (src < x.blocks.size() && dst < x.remoteBlocks.size()) {
    const uint64_t n = std::min({x.blocks[src].length - srcOff, x.remoteBlocks[dst] - dstOff, chunk});
    // Faults: a piece not delivered, delivered twice, or held for ever (the attempt then stalls:
    // its Done never goes, and only the deadline ends the transfer).
    const bool held = inject(fault().stall, x.route);
    x.stalled = x.stalled || held;
    const int copies = held || inject(fault().drop, x.route) ? 0 : inject(fault().dup, x.route) ? 2 : 1;
    for (int c = 0; c < copies; ++c) {
      ++x.pendingOps;
      counters().add(telemetry::kBytesSent, n);
      link_.sendPiece(x.peer, x.route,
                      PieceHeader{0, x.key, x.attempt, static_cast<uint32_t>(dst), dstOff},
                      x.blocks[src].addr + srcOff, n, id, x.blocks[src].type);
    }
    srcOff += n;
    dstOff += n;
    if (srcOff == x.blocks[src].length) ++src, srcOff = 0;
    if (dstOff == x.remoteBlocks[dst]) ++dst, dstOff = 0;
  }
  pieceSent(id, true);  // drops the posting hold
}

void Sender::pieceSent(uint64_t xferId, bool ok) {
  Transfer* found = table_.find(xferId);
  if (found == nullptr) return;
  Transfer& x = *found;
  if (!ok && x.live()) {
    PACT_INFO("engine %s: %s piece send failed", config().name.c_str(), keyText(x.key).c_str());
    table_.settle(x, Event::kFatalError, Status::kRemoteError);
  }
  table_.opDone(xferId);  // may free x
  found = table_.find(xferId);
  if (found == nullptr) return;
  Transfer& y = *found;
  if (y.live() && y.pendingOps == 0 && y.state == State::kInFlight) sendDone(y);
}

void Sender::pieceResent(uint64_t xferId, uint64_t length) {
  Transfer* x = table_.find(xferId);
  if (x == nullptr) return;
  ++x->pendingOps;
  counters().add(telemetry::kEngineRailResentPieces);
  counters().add(telemetry::kEngineRailResentBytes, length);
}

bool Sender::senderChecksum(Transfer& x, uint64_t* out) {
  if (x.verify == Verify::kNone) return true;
  auto digest = table_.digest(x);
  if (!digest.ok()) {
    table_.settle(x, Event::kFatalError, digest.status());
    return false;
  }
  *out = *digest;
  return true;
}

void Sender::sendDone(Transfer& x) {
  if (table_.peer(x.peer) == nullptr || x.stalled) return;
  const bool lost = inject(fault().loseRemoteDone, x.route);
  Done d{x.key, x.attempt, x.bytes, x.verify, 0, x.nonce};
  if (!senderChecksum(x, &d.checksum)) return;
  // On the class's first lane, behind the pieces it carried (the others may still be landing:
  // the receiver waits for them).
  if (!lost) link_.sendControl(x.peer, d, static_cast<int>(x.route));
  x.doneSent = true;  // (a lost one counts: the receiver may get the repeat)
  x.doneSentAt = now();
  armResend(x);
}

// The verdict may be lost: say Done (or the eager offer) again after a while (the receiver
// answers either for a committed transfer with its verdict again).
void Sender::armResend(Transfer& x) {
  auto again = std::chrono::milliseconds(200);
  if (x.deadline != TimePoint::max())
    again = std::clamp(std::chrono::duration_cast<std::chrono::milliseconds>(x.deadline - now()) / 4,
                       std::chrono::milliseconds(5), again);
  table_.cancelTimer(x.resendDoneAt, x.id, TimerKind::kResendDone);
  x.resendDoneAt = now() + again;
  table_.addTimer(x.resendDoneAt, x.id, TimerKind::kResendDone, x.attempt);
}

void Sender::onVerdict(uint64_t from, const Verdict& m) {
  auto it = sending_.find({from, m.key});
  if (it == sending_.end()) return;
  Transfer& x = table_.at(it->second);
  // A verdict about another send of the key (an earlier one's, late) is not this send's.
  if (!x.live() || m.nonce != x.nonce) return;
  switch (m.outcome) {
    case Outcome::kCommitted:
      // This send committed (perhaps on an earlier Done, or on the eager offer, whose verdict
      // was lost): the state walks to COMMITTED from wherever it stands.
      if (x.state == State::kAllocated) table_.step(x, Event::kEager);  // committed on the eager offer
      if (x.state == State::kAdvertised) table_.step(x, Event::kPost);
      if (x.state == State::kRetrying) table_.step(x, Event::kRetry);
      if (x.state == State::kPosted) table_.step(x, Event::kSend);
      if (x.state == State::kInFlight) table_.step(x, Event::kRemoteDone);
      if (x.state == State::kRemoteDone) table_.step(x, Event::kVerified);
      table_.settle(x, Event::kCommit, Status::kOk);
      return;
    case Outcome::kRetry:
      if (x.state != State::kInFlight || x.pendingOps != 0) return;
      table_.step(x, Event::kRetryableError);
      table_.step(x, Event::kRetry);
      x.attempt = m.attempt;
      x.doneSent = false;
      ++x.retries;
      counters().add(telemetry::kRetried);
      table_.classOf(x.route).addShared(telemetry::kClassRetransmits);
      postPieces(x);
      return;
    case Outcome::kAborted: {
      const Event e = m.reason == Reason::kEpochMismatch ? Event::kEpochMismatch
                      : m.reason == Reason::kDeadline    ? Event::kDeadline
                                                         : Event::kFatalError;
      table_.settle(x, e, codeFor(m.reason));
      return;
    }
  }
}

void Sender::withdraw(Transfer& x, Status result, bool waitVerdict) {
  if (!x.live()) return;
  if (x.doneSent) {
    // The receiver may commit on that Done: only its verdict (or the deadline, or the peer's
    // loss) can tell how it ended, so a release waits for it. An eager offer the receiver has
    // not answered may also wait there for its expect or credit: a Cancel asks it to answer
    // (committed, or canceled now), and is repeated until it does.
    if (!waitVerdict) {
      table_.settle(x, Event::kFatalError, result);
    } else if (x.eager && x.state == State::kAllocated && table_.peer(x.peer) != nullptr) {
      link_.sendControl(x.peer, Cancel{x.key, true, x.nonce}, static_cast<int>(x.route));
    }
    return;
  }
  // A release, or (no verdict awaited) the engine's destroy: the receiver tells them apart.
  if (table_.peer(x.peer) != nullptr) link_.sendControl(x.peer, Cancel{x.key, false, x.nonce, !waitVerdict});
  table_.settle(x, Event::kFatalError, result);
}

void Sender::onEpochChange(uint64_t from, const EpochChange& m) {
  table_.forEachLive(
      [&](const Transfer& x) {
        return x.role == Role::kSender && x.peer == from && x.key.modelEpoch != m.newEpoch;
      },
      [&](Transfer& x) { table_.settle(x, Event::kEpochMismatch, Status::kEpochMismatch); });
}

}  // namespace pact::engine
