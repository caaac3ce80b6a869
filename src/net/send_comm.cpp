// The send side of a plugin comm (comm.h): isend cuts a message into pieces for the lanes, the
// PACT_FAULT wire faults act on them as they go, a sealed comm's seal follows the last piece, and
// a verified comm's sends wait for the receiver's verdict (asking pieces again, net/contract.h).
#include <algorithm>

#include "common/log.h"
#include "net/comm.h"
#include "net/contract.h"
#include "net/fence.h"
#include "net/parts.h"
#include "transport/seal.h"
#include "ucx/ucx_status.h"

namespace pact::net {

SendComm::SendComm(std::shared_ptr<Hub> hub, std::shared_ptr<Sessions> sessions, uint64_t channel,
                   uint32_t tagSpace, std::string peer, const ChannelConfig& cfg)
    : Comm(std::move(hub), std::move(sessions), channel, kSendInFlight, true, std::move(peer), cfg),
      tagSpace_(tagSpace) {
  lanes_.configure(cfg_);
  // Pieces waiting for a lane, held by the lane delay or waiting for a retransmission move on
  // every device progress.
  if (ticking()) startTicking();
}

SendComm::~SendComm() {
  if (ticker_) dev().removeTicker(this);
}

void SendComm::startTicking() {
  if (ticker_) return;
  ticker_ = true;
  dev().addTicker(this);
}

void SendComm::setGate(std::shared_ptr<transport::PeerGate> gate) {
  if (!gate) return;
  lanes_.setGate(std::move(gate), cfg_.priority);
  startTicking();  // held pieces go when the higher classes are idle, whoever progresses
}

void SendComm::setRails(transport::RailSet rails, std::shared_ptr<transport::AckSink> acks) {
  rails_ = std::move(rails);
  ackSink_ = std::move(acks);
  if (rails_.active()) startTicking();  // a rail that went out is looked at on every progress
}

Status SendComm::connectLanes(const std::vector<std::vector<uint8_t>>& remoteRails) {
  remoteRails_ = remoteRails;
  // Lane i runs on rail i mod (rails both sides have): rail r of this side talks to rail r of the
  // peer, each pinned to its own port.
  const int n = cfg_.ordered ? 1 : cfg_.lanes;
  const size_t rails = std::min(dev().rails(), remoteRails.size());
  for (int i = 0; i < n; ++i) {
    const size_t r = static_cast<size_t>(i) % rails;
    auto ep = dev().endpoint(r, static_cast<size_t>(i), remoteRails[r]);
    if (!ep.ok()) {
      fail(ep.status(), telemetry::ErrorKind::kTransport, ep.error().message);
      return ep.status();
    }
    lanes_.add(std::move(ep.value()), static_cast<uint8_t>(r));
  }
  lanes_.countAs("send comm to " + peer_, counters_.labels(), dev().railNames(), counters_.id());
  // Failover comms tick (setRails): their first pieces go from tick() once the wire-up ended.
  if (rails_.active()) lanes_.awaitWireUp();
  return Status::kOk;
}

void SendComm::checkLinks() {
  if (error_ != Status::kOk) return;
  if (rails_.active()) return checkRails();
  if (const ucs_status_t st = lanes_.failure(); st != UCS_OK) {
    // The endpoint is shared: a lost session (the peer process died) is the better reason.
    readPeer(sessions_->view(channel_, false));
    failPeer(Status::kRemoteError, ucxErrorKind(st), std::string("ucx endpoint error: ") + ucs_status_string(st));
  }
}

void SendComm::checkRails() {
  if (error_ != Status::kOk || byeReceived_) return;
  bool failed = false;
  for (size_t i = 0; i < lanes_.size(); ++i)
    if (lanes_.shared(i)->failed()) {
      rails_.suspend(lanes_.rail(i));
      failed = true;
    }
  const auto [out, back] = rails_.changes();
  // Every rail in and none changed since the last look (a suspension and its end show as a
  // change): every lane is home.
  if ((out | back) == 0 && !failed && rails_.allIn()) return;
  railChanges(rails_, out, back);
  // A peer that closed its side (its prober may be gone with it) or died says so on the session.
  if (out != 0) readPeer(sessions_->view(channel_, false));
  if (byeReceived_ || error_ != Status::kOk) return;
  if (!rails_.anyAnswering()) {  // none usable but some answering: endpoints failed, suspended a moment
    failPeer(Status::kRemoteError, telemetry::ErrorKind::kPeerLost, "every rail to the peer is out: " + rails_.causes());
    return;
  }
  // Lanes off their rail: to a live one (failover), or home again (recovery).
  std::vector<int> lanesOn = lanes_.lanesOn(rails_.size());
  std::string moved;
  size_t inFlight = 0;
  for (size_t i = 0; i < lanes_.size(); ++i) {
    const size_t from = lanes_.rail(i);
    const int to = rails_.pick(lanes_.home(i), lanesOn);
    // A lane whose endpoint failed on a rail that is usable again gets a new endpoint there.
    if (to < 0 || (static_cast<size_t>(to) == from && !lanes_.shared(i)->failed())) continue;
    auto ep = dev().endpoint(static_cast<size_t>(to), i, remoteRails_[static_cast<size_t>(to)]);
    if (!ep.ok()) {  // that rail is no better: tried again at the next look
      rails_.suspend(static_cast<size_t>(to));
      continue;
    }
    std::shared_ptr<transport::SharedEndpoint> old = lanes_.shared(i);
    const bool leaving = !rails_.usable(from) || old->failed();
    inFlight += leaving ? lanes_.laneInflight(i) : 0;
    lanes_.moveLane(i, std::move(*ep), static_cast<uint8_t>(to));
    --lanesOn[from];
    ++lanesOn[static_cast<size_t>(to)];
    moved += (moved.empty() ? "lane " : ", lane ") + std::to_string(i) + " to rail " + std::to_string(to);
    if (leaving) {
      // What UCX holds on the out rail's endpoint ends now (for every comm on it) and comes back
      // through failover() to be sent again.
      if (!old->failed()) old->error = UCS_ERR_CANCELED;
      old->ep.close(true);
    }
  }
  // Pieces UCX completed on an out rail may still have been in its socket: every one of a message
  // not acknowledged yet goes again (the receiver drops a second copy).
  size_t unacked = 0;
  if (out != 0 && ackSink_) {
    rails_.drainAcks();
    unacked += resendKept();  // small messages, completed from their copies
  }
  if (out != 0 && ackSink_)
    for (Request* q = oldestPosted_; q != nullptr; q = q->newerPosted)
      for (uint32_t k = 0; q->held && k < q->partCount[0] + q->seals; ++k) {
        Part& p = q->parts[k];  // a piece, or the seal after the last
        if (!p.posted || !p.done || (out & (1u << p.rail)) == 0) continue;
        inFlight += p.size;
        ++unacked;
        countResent(p.size);
        if (loose(p))
          sendLoose(&p);
        else
          resend(q, k);
      }
  for (size_t r = 0; r < rails_.size(); ++r) {
    if (out & (1u << r)) {
      const int resets = rails_.reset(r);  // not inside the log line: it runs whatever the log level
      PACT_WARN("send comm %p to %s: %s out (%s): %s; %zu bytes sent over it and not acknowledged go "
                "again (%zu pieces UCX had completed); %d TCP connection(s) on it reset",
                static_cast<void*>(this), peer_.c_str(), rails_.name(r).c_str(), rails_.cause(r).c_str(),
                moved.empty() ? "no lane on it" : moved.c_str(), inFlight, unacked, resets);
    }
    if (back & (1u << r))
      PACT_WARN("send comm %p to %s: %s back after %lld ms out: %s", static_cast<void*>(this), peer_.c_str(),
                rails_.name(r).c_str(), static_cast<long long>(rails_.lastOutage(r).count()),
                moved.empty() ? "no lane returns to it" : moved.c_str());
  }
}

Failover SendComm::failover(Part* p) {
  if (!rails_.active() || error_ != Status::kOk || closing_) return Failover::kNo;
  rails_.suspend(p->rail);  // its endpoint failed, or checkRails closed it
  if (!rails_.anyAnswering()) return Failover::kNo;
  countResent(p->size);
  if (!loose(*p)) {  // the part itself goes again
    p->status = Status::kRemoteError;  // no throughput sample
    lanes_.completed(*p);
    p->ucxOwned = true;
  }
  failedOver_.push_back(p);
  return Failover::kResent;
}

bool SendComm::keepCopy(const void* data, size_t size, uint32_t tag, uint32_t seq, MemHandle* mh) {
  // A sealed message waits for its acknowledgement (which its receiver sends at once): its seal
  // and a verdict's re-sends need the request.
  if (cfg_.sealed || size > transport::kLazyAckMax || memoryTypeOf(mh) != ucx::MemoryType::kHost) return false;
  if (kept_.prunesDue() || kept_.bytes() + size > KeptCopies::kMaxBytes) {
    rails_.drainAcks();
    kept_.prune(*ackSink_);
  }
  return kept_.keep(tag, seq, data, size, *ackSink_);
}

size_t SendComm::resendKept() {
  size_t pieces = 0;
  kept_.forEachUnacked(*ackSink_, [&](uint32_t tag, uint32_t seq, std::span<const uint8_t> bytes) {
    const size_t chunk = chunkFor(bytes.size());
    const size_t n = cfg_.ordered ? 1 : piecesFor(bytes.size(), chunk);
    for (size_t k = 0; k < n; ++k) {
      const size_t off = std::min(bytes.size(), k * chunk);
      const size_t len = std::min(chunk, bytes.size() - off);
      const size_t lane = k % lanes_.size();
      railBytes_[lanes_.rail(lane)] += len;
      countResent(len);
      hub_->sendLate(now(), lanes_.shared(lane), tag::make(tagSpace_, tag, seq, static_cast<uint32_t>(k), k + 1 == n),
                     bytes.data() + off, len);
      ++pieces;
    }
  });
  if (pieces != 0) hub_->postLate();
  return pieces;
}

bool SendComm::loose(const Part& p) const {
  return ackSink_ && (p.seal || memoryTypeOf(p.owner->memHandle, p.rail) == ucx::MemoryType::kHost);
}

void SendComm::sendLoose(Part* p) {
  p->rail = lanes_.rail(p->lane);  // a later failover of this rail sends it again
  railBytes_[p->rail] += p->size;
  hub_->sendLate(now(), lanes_.shared(p->lane), p->ucxTag, p->data, p->size);
  hub_->postLate();
}

bool SendComm::lostAttempt(Part* p) {
  const char* how = inject(cfg_.fault.drop) ? "lost" : nullptr;
  if (how == nullptr) return false;
  if (++p->attempts > cfg_.retries) {
    abort(Status::kRemoteError, telemetry::ErrorKind::kRetries,
          "piece " + std::to_string(p->piece) + " of a message was " + how + " on each of " +
              std::to_string(p->attempts) + " attempts (PACT_FAULT; the class allows retries=" +
              std::to_string(cfg_.retries) + ")");
    completePart(p, UCS_ERR_IO_ERROR, 0);
    return true;
  }
  counters_.add(telemetry::kRetransmits);
  class_.addShared(telemetry::kClassRetransmits);
  // 2, 4, 8 ... ms, at most about 2 s (retries may be up to 100).
  retransmit_.emplace_back(now() + kRetransmitBackoff * (1 << std::min(p->attempts - 1, 10)), p);
  return true;
}

bool SendComm::wireFault(Part* p, ucx::Endpoint& ep) {
  const FaultSpec& f = cfg_.fault;
  if (inject(f.stall)) {  // held for ever: the message stalls until its deadline or close
    stalled_.push_back(p);
    return true;
  }
  // The wire faults act on host bytes (a GPU buffer is never touched by the CPU here).
  if (memoryTypeOf(p->owner->memHandle, p->rail) == ucx::MemoryType::kHost && p->size > 0 && inject(f.corrupt)) {
    // A copy of the piece with one bit flipped goes instead of the piece: the application's
    // buffer stays as it was, so a re-send carries the right bytes.
    p->copy.assign(static_cast<const uint8_t*>(p->data), static_cast<const uint8_t*>(p->data) + p->size);
    p->copy[dice_->next() % p->size] ^= 0x10;
    sendPart(p, ep, p->copy.data(), nullptr);
    return true;
  }
  return false;
}

void SendComm::failLaneAt(uint64_t posted) {
  const FaultSpec& f = cfg_.fault;
  if (f.failLane < 0 || posted != f.failAfter || static_cast<size_t>(f.failLane) >= lanes_.size()) return;
  const size_t lane = static_cast<size_t>(f.failLane), rail = lanes_.rail(lane);
  // With failover, as a connection reset: UCX's TCP connections of the lane's rail to the peer are
  // shut down, so UCX fails the endpoints over them on both sides (its error callbacks mark them);
  // a comm of one rail (no such connections known) has its lane's endpoint marked failed.
  int shut = 0;
  if (rails_.active()) {
    shut = rails_.shutConnections(rail);
  } else if (transport::SharedEndpoint& ep = *lanes_.shared(lane); ep.error == UCS_OK) {
    ep.error = UCS_ERR_CONNECTION_RESET;
    shut = -1;  // nothing to shut: marked
  }
  if (shut != 0) countFault();  // counted only when it did something
  PACT_WARN("send comm %p to %s: PACT_FAULT lane_fail: lane %zu (rail %zu) fails after %llu pieces (%d TCP connection(s) shut)",
            static_cast<void*>(this), peer_.c_str(), lane, rail, static_cast<unsigned long long>(posted), shut);
}

void SendComm::post(Part* p, ucx::Endpoint& ep) {
  Request* r = p->owner;
  const bool first = !p->posted;
  if (first) {  // first attempt (a lost one counts: the seal says what the message holds)
    if (firstPosts_ == 0 && cfg_.fault.failLane >= 0) failLaneAt(0);
    p->posted = true;
    ++r->postedPieces;
  }
  if (!(dice_ && lostAttempt(p))) {
    if (ep.get() == nullptr) {  // closed under a failure of the peer
      completePart(p, UCS_ERR_NOT_CONNECTED, 0);
    } else if (!(dice_ && wireFault(p, ep))) {
      railBytes_[p->rail] += p->size;
      sendPart(p, ep, p->data, static_cast<const MemHandle*>(r->memHandle));
      // PACT_FAULT dup: a second copy of the piece follows it on the same endpoint.
      if (dice_ && memoryTypeOf(r->memHandle, p->rail) == ucx::MemoryType::kHost && inject(cfg_.fault.dup)) {
        hub_->sendLate(now(), lanes_.shared(p->lane), p->ucxTag, p->data, p->size);
        hub_->postLate();
      }
    }
  }
  if (first && cfg_.fault.failLane >= 0) failLaneAt(++firstPosts_);
  if (r->seals != 0 && r->postedPieces == r->partCount[0] && !r->sealPart(0).posted) postSeal(r);
}

void SendComm::postSeal(Request* r) {
  Part& s = r->sealPart(0);
  s.posted = true;
  const uint32_t pieces = r->partCount[0];
  const uint64_t bytes = r->msgBytes;
  const Fence& fence = Fence::process();
  const bool fenced = fence.active();
  wire::encodeSealHeader(static_cast<uint8_t>(cfg_.verify), fenced, fenced ? fence.epoch() : 0,
                         bytes, pieces, &r->sealMem);
  if (cfg_.verify != Verify::kNone) {
    const auto* base = static_cast<const uint8_t*>(r->parts[0].data);
    for (uint32_t k = 0; k < pieces; ++k) {
      auto check = checkBytes(cfg_.verify, base + size_t{k} * chunkFor(bytes), pieceSize(*r, k),
                              memoryTypeOf(r->memHandle), dev().driver(), hub_->staging());
      if (!check.ok()) {
        abort(check.status(), telemetry::ErrorKind::kOther, check.error().message);
        completePart(&s, UCS_ERR_IO_ERROR, 0);
        return;
      }
      wire::setCheck(&r->sealMem, k, *check);
    }
    if (!r->held) {  // done only at the receiver's verdict (or acknowledgement: already held)
      r->held = true;
      ++awaitingVerdicts_;
    }
  }
  s.data = r->sealMem.data();
  s.size = r->sealMem.size();
  s.ucxTag = tag::make(tagSpace_, r->tags[0], r->seqs[0], tag::kSealPiece, false);
  s.lane = 0;
  s.rail = lanes_.rail(0);
  ucx::Endpoint& ep = lanes_.endpoint(0);
  if (ep.get() == nullptr) {
    completePart(&s, UCS_ERR_NOT_CONNECTED, 0);
    return;
  }
  sendPart(&s, ep, s.data, nullptr);
}

void SendComm::dispatch(Part* p) {
  lanes_.dispatch(p, [this](transport::LanePiece* q, ucx::Endpoint& ep) { post(static_cast<Part*>(q), ep); });
}

Status SendComm::isend(const void* data, size_t size, int tag, MemHandle* mh, Request** out) {
  *out = nullptr;
  // A sender whose sends complete at once (eager) may never wait in test(): look at the session
  // here too, so a peer's abort or death fails the next send.
  checkLinks();
  pollPeer();
  if (Status s = failure(); s != Status::kOk) return s;
  // Ordered: the whole message is one piece.
  const size_t chunk = chunkFor(size);
  const size_t n = cfg_.ordered ? 1 : piecesFor(size, chunk);
  if (n > tag::kMaxDataPieces) {
    PACT_WARN("isend of %zu bytes needs %zu pieces of %zu bytes; at most %u per message", size, n,
              chunk, tag::kMaxDataPieces);
    return Status::kInvalidArgument;
  }
  // The class's credits to the peer: beyond them, NCCL's "try again later".
  if (credits_ && !credits_->tryTake(this, size)) {
    counters_.add(telemetry::kCreditRefusals);
    return Status::kOk;
  }
  const uint8_t seals = cfg_.sealed ? 1 : 0;
  Request* r = acquire(true, 1, n + seals);
  if (r == nullptr) {  // back-pressure
    if (credits_) credits_->give(size);
    return Status::kOk;
  }
  const uint32_t seq = nextSeq(tag);
  r->partCount[0] = static_cast<uint32_t>(n);
  r->pending = static_cast<int>(n + seals);
  r->memHandle = mh;
  r->seals = seals;
  r->credit = credits_ ? size : 0;
  r->tags[0] = tag;
  r->seqs[0] = seq;
  r->msgBytes = size;
  r->postedPieces = 0;
  // Rail failover: done at the receiver's acknowledgement (a verdict), or now from a kept copy.
  if (ackSink_ && !keepCopy(data, size, static_cast<uint32_t>(tag), seq, mh)) {
    r->held = true;
    ++awaitingVerdicts_;
  }
  if (seals != 0) {
    Part& sp = r->sealPart(0);
    sp.seal = true;
    sp.piece = tag::kSealPiece;
    sp.done = false;
  }
  for (size_t k = 0; k < n; ++k) {
    Part* p = &r->parts[k];
    p->piece = static_cast<uint32_t>(k);
    p->data = const_cast<char*>(static_cast<const char*>(data)) + k * chunk;
    p->size = pieceSize(*r, static_cast<uint32_t>(k));
    p->ucxTag = tag::make(tagSpace_, tag, seq, p->piece, k + 1 == n);
    p->done = false;
    p->ucxOwned = false;
    dispatch(p);
  }
  *out = r;
  return Status::kOk;
}

void SendComm::partDone(Part* p) {
  Request* r = p->owner;
  if (r->credit != 0 && r->done()) {  // the message's bytes left UCX: its credits come back
    credits_->give(r->credit);
    r->credit = 0;
  }
  if (p->seal) return;  // not one of the lanes' pieces
  counters_.add(telemetry::kPieces);
  if (rails_.active() && p->status == Status::kOk) rails_.heard(p->rail);
  lanes_.completed(*p);
}

void SendComm::progressComm(Request*) {}

void SendComm::settle(Request*) {
  if (awaitingVerdicts_ == 0) return;
  if (ackSink_) {  // rail failover: the receiver's acknowledgements (of a verified message too)
    rails_.drainAcks();
    for (Request* r = oldestPosted_; r != nullptr; r = r->newerPosted)
      if (r->held && ackSink_->acked(static_cast<uint32_t>(r->tags[0]), r->seqs[0])) {
        r->held = false;
        --awaitingVerdicts_;
      }
    if (cfg_.verify == Verify::kNone || awaitingVerdicts_ == 0) return;
  }
  verdicts_.clear();
  sessions_->takeVerdicts(channel_, &verdicts_);
  for (const wire::Verdict& v : verdicts_) applyVerdict(v);
  // Pieces asked again while UCX still had their first send (the verdict can overtake the
  // sender's completion: over shared memory the receiver reads the bytes before the sender hears
  // of it): they go as soon as that send is done.
  if (resendsDeferred_ == 0) return;
  for (Request* r = oldestPosted_; r != nullptr; r = r->newerPosted)
    for (uint32_t k = 0; k < r->partCount[0]; ++k)
      if (r->parts[k].again && r->parts[k].done) {
        r->parts[k].again = false;
        --resendsDeferred_;
        resend(r, k);
      }
}

void SendComm::resend(Request* r, uint32_t k) {
  Part* p = &r->parts[k];
  if (!p->done) {  // still with UCX: once it is done
    if (!p->again) ++resendsDeferred_;
    p->again = true;
    return;
  }
  p->size = pieceSize(*r, k);
  p->done = false;
  p->status = Status::kOk;
  ++r->pending;
  if (credits_) {
    credits_->takeAnyway(p->size);
    r->credit += p->size;
  }
  counters_.add(telemetry::kRetransmits);
  class_.addShared(telemetry::kClassRetransmits);
  dispatch(p);
}

void SendComm::applyVerdict(const wire::Verdict& v) {
  Request* r = oldestPosted_;
  while (r != nullptr && !(r->held && static_cast<uint32_t>(r->tags[0]) == v.tag && r->seqs[0] == v.seq))
    r = r->newerPosted;
  if (r == nullptr) return;  // not waited for (a comm failed meanwhile): nothing to do
  if (v.kind == wire::VerdictKind::kVerified) {
    r->held = false;
    --awaitingVerdicts_;
    return;
  }
  // Pieces whose check did not match at the receiver: the same bytes again (the application's
  // buffer is still ours: the send is not complete). The receiver counts the attempts and fails
  // the comm when its retries are spent.
  const uint32_t n = r->partCount[0];
  if (v.kind == wire::VerdictKind::kResendAll)
    for (uint32_t k = 0; k < n; ++k) resend(r, k);
  else
    for (uint32_t k : v.pieces)
      if (k < n) resend(r, k);
}

void SendComm::tick() {
  if (rails_.active()) {
    checkRails();
    if (kept_.size() != 0 && kept_.pruneDueAt(now())) {  // an idle comm lets its copies go too
      rails_.drainAcks();
      kept_.prune(*ackSink_);
    }
    if (!failedOver_.empty() && error_ == Status::kOk && rails_.anyUsable()) {
      std::vector<Part*> again;
      again.swap(failedOver_);
      for (Part* p : again) {
        if (loose(*p)) {  // a copy goes; the send completes at the receiver's acknowledgement
          sendLoose(p);
          completePart(p, UCS_OK, p->size);
          continue;
        }
        p->status = Status::kOk;
        dispatch(p);
      }
    }
  }
  lanes_.pump([this](transport::LanePiece* q, ucx::Endpoint& ep) { post(static_cast<Part*>(q), ep); });
  if (lanes_.gated()) counters_.set(telemetry::kPriorityHolds, lanes_.holds());
  if (retransmit_.empty()) return;
  const auto t = now();
  // post() may queue the piece again: take the due ones out first.
  std::vector<Part*> due;
  std::erase_if(retransmit_, [&](const auto& e) {
    if (e.first > t) return false;
    due.push_back(e.second);
    return true;
  });
  for (Part* p : due) post(p, lanes_.endpoint(p->lane));
}

void SendComm::dropHeld() {
  auto cancelled = [](Part* p) { completePart(p, UCS_ERR_CANCELED, 0); };
  lanes_.dropDelayed([&](transport::LanePiece* p) { cancelled(static_cast<Part*>(p)); });
  for (auto& e : retransmit_) cancelled(e.second);
  retransmit_.clear();
  for (Part* p : stalled_) cancelled(p);
  stalled_.clear();
  std::vector<Part*> resend;
  resend.swap(failedOver_);
  for (Part* p : resend) cancelled(p);
}

Status SendComm::finish(Request* r, int* sizes) {
  Status result = Status::kOk;
  size_t total = 0;
  for (size_t i = 0; i < r->dataParts(); ++i) {
    const Part& p = r->parts[i];
    if (p.status != Status::kOk && result == Status::kOk) result = p.status;
    total += p.size;
  }
  if (r->seals != 0 && r->sealPart(0).status != Status::kOk && result == Status::kOk) result = r->sealPart(0).status;
  if (sizes) sizes[0] = static_cast<int>(std::min<size_t>(total, INT32_MAX));
  return result;
}

void SendComm::abortInFlight() {
  dropHeld();
  // The peer is gone: the endpoints to it are of no use to any comm, and a forced close ends
  // what UCX still has in flight on them. A failure of this comm alone leaves them to the others.
  if (peerLost_) lanes_.closeAll();
}

void SendComm::shutdown() {
  closing_ = true;  // what ends from here on ends: nothing is sent again
  const bool lost = byeLost();
  // PACT_FAULT delay: what the delayed lane holds is already on the wire; it arrives late.
  if (cfg_.fault.delayLane >= 0 && error_ == Status::kOk) {
    lanes_.takeHeld([&](transport::LanePiece* q) {
      auto* p = static_cast<Part*>(q);
      hub_->sendLate(p->queuedAt + cfg_.fault.delay, lanes_.shared(p->lane), p->ucxTag, p->data, p->size);
      completePart(p, UCS_OK, p->size);
    });
  }
  dropHeld();
  // What the comm's messages still hold of the class's credits goes back now: requests UCX still
  // holds complete later without the comm.
  if (credits_) {
    for (Request* r = oldestPosted_; r != nullptr; r = r->newerPosted) {
      credits_->give(r->credit);
      r->credit = 0;
    }
    credits_->forget(this);
  }
  const bool inFlight = leaveInFlight();
  // The endpoints close in the background once the last comm to the peer lets go of them: a
  // flush, or forced when something is left in flight or the peer is gone (a flush needs its
  // cooperation).
  lanes_.release(inFlight || peerGone());
  sessions_->close(channel_, lost, nullptr);
}

}  // namespace pact::net
