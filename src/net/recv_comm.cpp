// The receive side of a plugin comm (comm.h): irecv posts each piece on every rail it may arrive
// on, a landed copy cancels the others, finish checks that every piece of a buffer arrived. On a
// sealed comm each message's seal is received too (posted on every rail, as its pieces are: lane 0
// that carries it may move) and judged before the message is reported (epoch, checks, the commit
// hook); pieces whose check failed are posted again and asked for.
#include <algorithm>
#include <array>
#include <optional>

#include "common/log.h"
#include "net/comm.h"
#include "net/contract.h"
#include "net/fence.h"
#include "net/parts.h"
#include "transport/seal.h"

namespace pact::net {

namespace {

void onRecvDone(void* /*request*/, ucs_status_t st, const ucp_tag_recv_info_t* info, void* user) {
  auto* p = static_cast<Part*>(user);
  p->last = st == UCS_OK && tag::isLast(info->sender_tag);
  completePart(p, st, st == UCS_OK ? info->length : 0);
}

}  // namespace

RecvComm::RecvComm(std::shared_ptr<Hub> hub, std::shared_ptr<Sessions> sessions, uint64_t channel,
                   uint32_t tagSpace, std::string peer, const ChannelConfig& cfg)
    : Comm(std::move(hub), std::move(sessions), channel, kRecvInFlight, false, std::move(peer), cfg),
      tagSpace_(tagSpace) {}

RecvComm::~RecvComm() = default;

Status RecvComm::irecv(int n, void* const* data, const size_t* sizes, const int* tags,
                       MemHandle* const* mhs, Request** out) {
  *out = nullptr;
  beforeTest();  // lazy acknowledgements of messages reported earlier
  if (Status s = failure(); s != Status::kOk) return s;
  if (n < 1 || n > dev().params().max_recvs) return Status::kInvalidArgument;
  const size_t rails = static_cast<size_t>(std::max(1, cfg_.rails));
  size_t counts[kMaxBuffers];
  size_t total = 0;
  for (int i = 0; i < n; ++i) {
    counts[i] = cfg_.ordered ? 1 : std::min<size_t>(tag::kMaxDataPieces, piecesFor(sizes[i], cfg_.chunk));
    total += counts[i] * rails;
  }
  const uint8_t seals = cfg_.sealed ? static_cast<uint8_t>(n * static_cast<int>(rails)) : 0;
  Request* r = acquire(false, n, total + seals);
  if (r == nullptr) return Status::kOk;  // back-pressure
  r->pending = static_cast<int>(total + seals);
  r->rails = static_cast<int>(rails);
  r->seals = seals;
  r->held = seals != 0;  // reported once its seals are judged
  // Every part is in flight from here: one that completes inside its own post (a message that
  // came before its receive: UCX runs the callback at once) must not take a later copy of its
  // piece, not posted yet, for one that landed (a fresh part reads done).
  for (Part& p : r->parts) p.done = false;
  if (seals != 0) {
    size_t at = 0;
    for (int i = 0; i < n; ++i) {
      r->sealAt[static_cast<size_t>(i)] = static_cast<uint32_t>(at);
      at += wire::sealSize(static_cast<uint32_t>(counts[i]), cfg_.verify != Verify::kNone);
    }
    r->sealMem.resize(at);
  }
  size_t next = 0;
  for (int i = 0; i < n; ++i) {
    const size_t b = static_cast<size_t>(i);
    const uint32_t seq = nextSeq(tags[i]);
    if ((seq & ((1u << tag::kBlockBits) - 1)) == 0) drainStale(tags[i], seq);
    r->tags[b] = tags[i];
    r->seqs[b] = seq;
    r->mhs[b] = mhs ? mhs[i] : nullptr;
    const size_t chunk = cfg_.ordered ? std::max<size_t>(sizes[i], 1) : cfg_.chunk;
    r->firstPart[b] = static_cast<uint32_t>(next);
    r->partCount[b] = static_cast<uint32_t>(counts[i]);
    for (size_t k = 0; k < counts[i]; ++k) {
      for (size_t rail = 0; rail < rails; ++rail, ++next) {
        Part* p = &r->parts[next];
        p->buffer = static_cast<uint8_t>(i);
        p->piece = static_cast<uint32_t>(k);
        p->rail = static_cast<uint8_t>(rail);
        postPart(p, static_cast<char*>(data[i]) + k * chunk, std::min(chunk, sizes[i] - std::min(sizes[i], k * chunk)));
      }
    }
    for (size_t rail = 0; seals != 0 && rail < rails; ++rail) {  // on lane 0's rail, wherever it is
      Part& s = r->sealPart(i, static_cast<int>(rail));
      s.seal = true;
      s.buffer = static_cast<uint8_t>(i);
      s.piece = tag::kSealPiece;
      s.rail = static_cast<uint8_t>(rail);
      postPart(&s, r->sealMem.data() + r->sealAt[b],
               wire::sealSize(static_cast<uint32_t>(counts[i]), cfg_.verify != Verify::kNone));
    }
  }
  *out = r;
  return Status::kOk;
}

void RecvComm::postPart(Part* p, void* data, size_t size) {
  Request* r = p->owner;
  p->data = data;
  p->size = size;
  p->done = false;
  p->canceled = false;
  p->last = false;
  p->status = Status::kOk;
  // UCX 1.13 leaves recv_info unfilled when a receive completes immediately, so receives always
  // complete through the callback, which carries the real length and sender tag.
  ucp_request_param_t param = partParam(p);
  param.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  param.cb.recv = onRecvDone;
  if (!p->seal) setMemh(&param, static_cast<const MemHandle*>(r->mhs[p->buffer]), p);
  track(p, dev().worker(p->rail).tagRecv(data, size,
                                         tag::make(tagSpace_, r->tags[p->buffer], r->seqs[p->buffer], p->piece, false),
                                         tag::kRecvMask, param));
}

void RecvComm::drainStale(int tag, uint32_t seq) {
  const uint32_t block = seq >> tag::kBlockBits;
  for (uint32_t back = 1; back <= tag::kDrainBlocks; ++back)
    dropUnexpected(tag::blockTag(tagSpace_, tag, (block - back) & 7u), tag::blockMask());
}

void RecvComm::dropUnexpected(uint64_t probe, uint64_t mask) {
  for (size_t rail = 0; rail < static_cast<size_t>(std::max(1, cfg_.rails)); ++rail)
    counters_.add(telemetry::kDuplicatesFiltered, dev().worker(rail).discardUnexpected(probe, mask, hub_->looseOps()));
}

// Buffer b's seal as it landed (decoded in place: the view points into r's seal memory).
static Result<wire::SealView> sealOf(const Request& r, const Part& landed) {
  return wire::decodeSeal(std::span<const uint8_t>(r.sealMem.data() + r.sealAt[landed.buffer], landed.size),
                          tag::kMaxDataPieces);
}

Failover RecvComm::failover(Part* p) {
  if (!rails_.active() || p->owner->flush || error_ != Status::kOk) return Failover::kNo;
  rails_.suspend(p->rail);
  // The piece's (or seal's) copies on the other rails are still posted: the sender sends it again
  // there.
  return rails_.anyAnswering() ? Failover::kCopyLost : Failover::kNo;
}

void RecvComm::checkRails() {
  if (error_ != Status::kOk || byeReceived_) return;
  const auto [out, back] = rails_.changes();
  if ((out | back) == 0 && rails_.allIn()) return;  // every rail in, as at the last look
  railChanges(rails_, out, back);
  // A peer that closed its side (its prober may be gone with it) or died says so on the session.
  if (out != 0) readPeer(sessions_->view(channel_, false));
  if (byeReceived_ || error_ != Status::kOk) return;
  for (size_t r = 0; r < rails_.size(); ++r) {
    if (out & (1u << r)) {
      strand(static_cast<int>(r));
      const int resets = rails_.reset(r);  // not inside the log line: it runs whatever the log level
      PACT_WARN("recv comm %p from %s: %s out (%s); its pieces come on the other rails; %d TCP connection(s) "
                "on it reset",
                static_cast<void*>(this), peer_.c_str(), rails_.name(r).c_str(), rails_.cause(r).c_str(), resets);
    }
    if (back & (1u << r))
      PACT_WARN("recv comm %p from %s: %s back after %lld ms out", static_cast<void*>(this), peer_.c_str(),
                rails_.name(r).c_str(), static_cast<long long>(rails_.lastOutage(r).count()));
  }
  if (rails_.anyAnswering()) return;  // none usable but some answering: endpoints failed, suspended a moment
  failPeer(Status::kRemoteError, telemetry::ErrorKind::kPeerLost, "every rail from the peer is out: " + rails_.causes());
}

void RecvComm::strand(int rail) {
  for (Request* r = oldestPosted_; r != nullptr; r = r->newerPosted)
    for (Part& p : r->parts)
      if (p.rail == rail && !p.done && p.ucxRequest != nullptr && !p.stranded) {
        p.stranded = true;
        ++r->stranded;
      }
}

void RecvComm::partDone(Part* p) {
  if (p->canceled || p->status != Status::kOk || p->owner->flush) return;
  Request* r = p->owner;
  if (cfg_.timeout.count() != 0 && r->firstLanded == TimePoint{}) r->firstLanded = now();
  if (p->seal) return;
  if (rails_.active() && r->landed(p->buffer, p->piece, p) != nullptr) {  // a piece sent again on another rail (failover)
    counters_.add(telemetry::kDuplicatesFiltered);
    return;
  }
  counters_.add(telemetry::kPieces);
  if (rails_.active()) rails_.heard(p->rail);
  if (p->piece != r->doneCount[p->buffer]) counters_.add(telemetry::kPiecesOutOfOrder);
  ++r->doneCount[p->buffer];
  r->landedBytes[p->buffer] += p->size;
  if (p->last) r->lastPiece[p->buffer] = p->piece;
  // PACT_FAULT reject: this side refuses the message, as a target refusing an access would.
  if (dice_ && inject(cfg_.fault.reject))
    abort(Status::kRemoteError, telemetry::ErrorKind::kRefused, "the receiver refused piece " + std::to_string(p->piece) +
                                    " of a message (PACT_FAULT reject)");
}

void RecvComm::strandOvertaken(Request* r) {
  // Long enough for a healthy rendezvous already under way to finish (a 4 MiB piece at 100 Mbit/s
  // takes a third of a second), short against a message's deadline.
  const auto bound = std::max<std::chrono::microseconds>(4 * rails_.timeout(), std::chrono::milliseconds(400));
  std::optional<TimePoint> t;
  unsigned shut = 0;  // rails whose connections were shut here
  for (Part& p : r->parts) {
    if (p.overtakenAt == TimePoint{} || p.done || p.stranded) continue;
    if (!t) t = now();
    if (*t - p.overtakenAt < bound) continue;
    if (!(shut & (1u << p.rail))) {
      shut |= 1u << p.rail;
      const int n = rails_.shutConnections(p.rail);
      PACT_WARN("recv comm %p from %s: a copy of piece %u on %s was overtaken by another rail's %lld ms "
                "ago and UCX has not ended it (a rendezvous on a connection that failed); %d TCP "
                "connection(s) on that rail shut, the copy left to UCX",
                static_cast<void*>(this), peer_.c_str(), p.piece, rails_.name(p.rail).c_str(),
                static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(*t - p.overtakenAt).count()),
                n);
    }
    p.stranded = true;
    ++r->stranded;
  }
}

void RecvComm::cancel(Part& p) {
  if (p.done || p.canceled || p.ucxRequest == nullptr) return;
  p.canceled = true;
  dev().worker(p.rail).cancel(p.ucxRequest);
}

void RecvComm::progressComm(Request* r) {
  // One receive per buffer (an ordered channel, or unordered pieces that all fit one chunk on
  // one rail): nothing can ever need cancelling.
  if (r->dataParts() == static_cast<size_t>(r->nbuffers)) return;
  if (r->rails > 1) {
    // A piece (or seal) landed on one rail: its copies posted on the other rails will never match.
    for (size_t i = 0; i < r->parts.size(); ++i) {
      Part& p = r->parts[i];
      if (!p.done && !p.canceled && r->landed(p.buffer, p.piece) != nullptr) {
        cancel(p);
        if (rails_.active()) p.overtakenAt = now();
      }
    }
    if (rails_.active()) strandOvertaken(r);
  }
  // Once a buffer's last piece has landed, receives posted past it will never match: cancel them.
  for (int b = 0; b < r->nbuffers; ++b) {
    const int64_t last = r->lastPiece[static_cast<size_t>(b)];
    if (last < 0) continue;
    const size_t first = r->firstPart[static_cast<size_t>(b)];
    const size_t end = first + r->partCount[static_cast<size_t>(b)] * static_cast<size_t>(r->rails);
    for (size_t i = first + (static_cast<size_t>(last) + 1) * static_cast<size_t>(r->rails); i < end; ++i)
      cancel(r->parts[i]);
  }
}

// ---- the class contract: seals, verdicts, the deadline -------------------------------------------

void RecvComm::settle(Request* r) {
  // Ordered: judged in posting order, as reported.
  if (r->settled() && !(cfg_.ordered && earlierInFlight(r))) judge(r);
}

void RecvComm::repost(Request* r, int b, uint32_t piece) {
  const size_t base = r->copiesOf(b, piece);
  const Part* got = r->landed(b, piece);
  const size_t size = got != nullptr ? got->size : 0;
  void* data = r->parts[base].data;
  r->doneCount[static_cast<size_t>(b)] -= 1;
  r->landedBytes[static_cast<size_t>(b)] -= size;
  for (size_t i = base; i < base + static_cast<size_t>(r->rails); ++i) {
    Part& p = r->parts[i];
    if (!p.done) continue;  // a cancel still under way: that copy cannot be posted again yet
    ++r->pending;
    postPart(&p, data, size);
  }
}

bool RecvComm::judge(Request* r) {
  // Failed, or short of pieces (a message larger than the buffer, a piece that never came):
  // finish() reports those.
  auto release = [&] {
    r->held = false;
    return true;
  };
  if (isError(error_)) return release();
  const Fence& fence = Fence::process();
  const bool fencing = fence.active();
  const std::string cls = "class " + cfg_.className + ": ";
  std::vector<uint32_t> bad;
  std::array<wire::SealView, kMaxBuffers> seals;
  bool resent = false;
  for (int b = 0; b < r->nbuffers; ++b) {
    const size_t bi = static_cast<size_t>(b);
    const int64_t last = r->lastPiece[bi];
    if (last < 0 || r->doneCount[bi] != static_cast<uint64_t>(last) + 1) return release();
    const uint32_t pieces = static_cast<uint32_t>(last) + 1;
    const std::string name = messageName(static_cast<uint32_t>(r->tags[bi]), r->seqs[bi], r->landedBytes[bi], pieces);
    const Part* s = r->landed(b, tag::kSealPiece);
    if (s == nullptr) {  // every copy ended without it: never reported unjudged
      abort(Status::kRemoteError, telemetry::ErrorKind::kOther, cls + name + " landed, but its seal did not");
      return release();
    }
    auto seal = sealOf(*r, *s);
    if (!seal.ok()) {
      abort(Status::kRemoteError, telemetry::ErrorKind::kOther, cls + name + ": its seal is malformed: " + seal.error().message);
      return release();
    }
    if (seal->pieces != pieces || seal->bytes != r->landedBytes[bi]) {
      abort(Status::kRemoteError, telemetry::ErrorKind::kOther,
            cls + name + " landed, but its seal says " + std::to_string(seal->bytes) + " bytes in " +
                std::to_string(seal->pieces) + " pieces");
      return release();
    }
    if (fencing && (!seal->fenced || seal->epoch != fence.epoch())) {
      abort(Status::kEpochMismatch, telemetry::ErrorKind::kRefused,
            cls + name + (seal->fenced ? " is of model epoch " + std::to_string(seal->epoch)
                                       : std::string(" comes from a sender that does not fence (no model epoch)")) +
                "; this receiver is at epoch " + std::to_string(fence.epoch()) + ": not reported done");
      return release();
    }
    seals[bi] = *seal;
    if (cfg_.verify == Verify::kNone) continue;
    if (seal->verify != static_cast<uint8_t>(cfg_.verify)) {
      abort(Status::kRemoteError, telemetry::ErrorKind::kOther,
            cls + name + " is checked with " + verifyName(static_cast<Verify>(seal->verify)) +
                "; the comm verifies with " + verifyName(cfg_.verify));
      return release();
    }
    bad.clear();
    for (uint32_t k = 0; k < pieces; ++k) {
      const Part* p = r->landed(b, k);
      auto check = checkBytes(cfg_.verify, p->data, p->size, memoryTypeOf(r->mhs[bi]), dev().driver(), hub_->staging());
      if (!check.ok()) {
        abort(check.status(), telemetry::ErrorKind::kOther, cls + name + ": " + check.error().message);
        return release();
      }
      if (*check != seal->check(k)) bad.push_back(k);
    }
    if (bad.empty()) continue;
    counters_.add(telemetry::kChecksumMismatches, bad.size());
    for (uint32_t k : bad) {
      Part& first = r->parts[r->firstPart[bi] + k * static_cast<size_t>(r->rails)];
      if (++first.attempts > cfg_.retries) {
        abort(Status::kChecksum, telemetry::ErrorKind::kRetries,
              cls + name + ": piece " + std::to_string(k) + "'s " + verifyName(cfg_.verify) +
                  " did not match the sender's on each of " + std::to_string(first.attempts) +
                  " attempts (retries=" + std::to_string(cfg_.retries) + ")");
        return release();
      }
    }
    PACT_INFO("recv comm %p from %s: %s%s: %zu piece(s) failed %s, asked again", static_cast<void*>(this),
              peer_.c_str(), cls.c_str(), name.c_str(), bad.size(), verifyName(cfg_.verify));
    for (uint32_t k : bad) repost(r, b, k);
    wire::Verdict v{0, static_cast<uint32_t>(r->tags[bi]), r->seqs[bi], wire::VerdictKind::kResend, bad};
    if (bad.size() > wire::kMaxResendList) v.kind = wire::VerdictKind::kResendAll;
    sessions_->verdict(channel_, std::move(v));
    resent = true;
  }
  if (resent) return false;
  if (fencing && fence.hasHook()) {
    for (int b = 0; b < r->nbuffers; ++b) {
      const size_t bi = static_cast<size_t>(b);
      const wire::SealView* seal = &seals[bi];
      MessageFacts m;
      m.comm = this;
      m.peer = &peer_;
      m.className = &cfg_.className;
      m.buffer = b;
      m.tag = static_cast<uint32_t>(r->tags[bi]);
      m.bytes = r->landedBytes[bi];
      m.epoch = seal->epoch;
      m.verify = seal->verify;
      m.checksum = messageCheck(*seal);
      if (const int veto = fence.judge(m); veto != 0) {
        abort(Status::kRejected, telemetry::ErrorKind::kRefused,
              cls + messageName(m.tag, r->seqs[bi], m.bytes, seal->pieces) +
                  ": the commit hook vetoed it (returned " + std::to_string(veto) + ")");
        return release();
      }
    }
  }
  if (cfg_.verify != Verify::kNone && !acks_)  // with rail failover, finish() acknowledges it
    for (int b = 0; b < r->nbuffers; ++b)
      sessions_->verdict(channel_, wire::Verdict{0, static_cast<uint32_t>(r->tags[static_cast<size_t>(b)]),
                                                 r->seqs[static_cast<size_t>(b)], wire::VerdictKind::kVerified, {}});
  return release();
}

void RecvComm::checkDeadlines() {
  if (cfg_.timeout.count() == 0 || error_ != Status::kOk || (livenessCalls_ & 31u) != 0) return;
  const auto t = now();
  for (Request* r = oldestPosted_; r != nullptr; r = r->newerPosted) {
    if (r->flush || r->settled() || r->firstLanded == TimePoint{} || t - r->firstLanded <= cfg_.timeout) continue;
    // The first buffer still short of something: what landed and what it waits for.
    for (int b = 0; b < r->nbuffers; ++b) {
      const size_t bi = static_cast<size_t>(b);
      const Part* seal = r->landed(b, tag::kSealPiece);
      const bool sealIn = seal != nullptr;
      uint32_t pieces = r->lastPiece[bi] >= 0 ? static_cast<uint32_t>(r->lastPiece[bi]) + 1 : 0;
      uint64_t bytes = 0;
      if (sealIn) {
        if (auto v = sealOf(*r, *seal); v.ok()) pieces = v->pieces, bytes = v->bytes;
      }
      std::string waiting;
      const uint32_t upTo = pieces != 0 ? pieces : r->partCount[bi];
      int listed = 0;
      for (uint32_t k = 0; k < upTo && listed < 8; ++k)
        if (r->landed(b, k) == nullptr) waiting += (listed++ == 0 ? "piece " : ", ") + std::to_string(k);
      if (!sealIn && r->seals != 0) waiting += std::string(waiting.empty() ? "" : " and ") + "the message's seal";
      if (waiting.empty()) continue;
      abort(Status::kDeadline, telemetry::ErrorKind::kDeadline,
            "class " + cfg_.className + ": message " + std::to_string(r->seqs[bi]) + " of tag " +
                std::to_string(r->tags[bi]) + " stalled: " + std::to_string(r->landedBytes[bi]) + " of " +
                (bytes != 0 ? std::to_string(bytes) : std::string("?")) + " bytes (" +
                std::to_string(r->doneCount[bi]) + " of " + (pieces != 0 ? std::to_string(pieces) : std::string("?")) +
                " pieces) landed within timeout=" + formatDuration(cfg_.timeout) +
                " of its first part; waiting for " + waiting);
      return;
    }
  }
}

Status RecvComm::finish(Request* r, int* sizes) {
  if (isError(error_)) return error_;
  if (r->flush) {
    for (const Part& p : r->parts)
      if (p.status != Status::kOk) return p.status;
    return Status::kOk;
  }
  Status result = Status::kOk;
  for (size_t b = 0; b < static_cast<size_t>(r->nbuffers); ++b) {
    // Each piece lands at most once (on one rail) and none past the sender's last can match, so
    // the buffer is complete when pieces 0..last have all landed. No last piece at all: every
    // posted piece landed and none was the sender's last, so the message exceeds the buffer.
    const int64_t last = r->lastPiece[b];
    if (result == Status::kOk) {
      if (last < 0)
        result = Status::kTruncated;
      else if (r->doneCount[b] != static_cast<uint64_t>(last) + 1)  // a piece never arrived
        result = Status::kRemoteError;
    }
    if (sizes) sizes[b] = static_cast<int>(std::min<uint64_t>(r->landedBytes[b], INT32_MAX));
  }
  if (result == Status::kTruncated)
    abort(result, telemetry::ErrorKind::kOutOfRange, "a message is larger than the posted receive buffer");
  // Rail failover: the sender's send completes now; small ones lazily (rail_probe.h), but not on a
  // sealed comm, whose sender keeps no copies and waits for it.
  if (result == Status::kOk && acks_)
    for (size_t b = 0; b < static_cast<size_t>(r->nbuffers); ++b)
      acks_->delivered(static_cast<uint32_t>(r->tags[b]), r->seqs[b],
                       cfg_.sealed || r->landedBytes[b] > transport::kLazyAckMax);
  return result;
}

void RecvComm::abortInFlight() {
  for (Request* r = oldestPosted_; r != nullptr; r = r->newerPosted)
    for (Part& p : r->parts) cancel(p);
}

void RecvComm::shutdown() {
  if (acks_) acks_->flush(true);  // the last lazy acknowledgements (the sender may hold a send for one)
  abortInFlight();
  leaveInFlight();
  // Second copies that came after their message was reported (a rail failover sends again what
  // was not acknowledged yet) would wait in UCX's unexpected queue until the worker goes.
  dropUnexpected(tag::spaceTag(tagSpace_), tag::spaceMask());
  // The tag space is given back once the sender has closed too (or its process is gone), so no
  // message of this comm is still on its way from a sender that could send more; the generation
  // covers one still on the wire (tags.h). Until then the Reaper progresses the device: the last
  // receives may owe the sender an acknowledgement that leaves only while this side progresses
  // (UCX 1.13 shared memory with two lanes: the sender's last pieces never complete otherwise).
  // The callback runs under the sessions' lock: it holds nothing whose release could take a
  // device mutex.
  std::shared_ptr<TagSpaces> tags = hub_->tags();
  const uint32_t space = tagSpace_;
  sessions_->close(channel_, byeLost(), [tags, space] { tags->give(space); });
}

}  // namespace pact::net
