// The receive side of a plugin comm (comm.h): irecv posts each piece on every rail it may arrive
// on, a landed copy cancels the others, finish checks that every piece of a buffer arrived.
#include <algorithm>

#include "net/comm.h"
#include "net/parts.h"

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
  if (Status s = failure(); s != Status::kOk) return s;
  if (n < 1 || n > dev().params().max_recvs) return Status::kInvalidArgument;
  const size_t rails = static_cast<size_t>(std::max(1, cfg_.rails));
  size_t counts[kMaxBuffers];
  size_t total = 0;
  for (int i = 0; i < n; ++i) {
    counts[i] = cfg_.ordered ? 1 : std::min<size_t>(tag::kMaxPieces, piecesFor(sizes[i], cfg_.chunk));
    total += counts[i] * rails;
  }
  Request* r = acquire(false, n, total);
  if (r == nullptr) return Status::kOk;  // back-pressure
  r->pending = static_cast<int>(total);
  r->rails = static_cast<int>(rails);
  size_t next = 0;
  for (int i = 0; i < n; ++i) {
    const uint32_t seq = nextSeq(tags[i]);
    const size_t chunk = cfg_.ordered ? std::max<size_t>(sizes[i], 1) : cfg_.chunk;
    r->firstPart[static_cast<size_t>(i)] = static_cast<uint32_t>(next);
    r->partCount[static_cast<size_t>(i)] = static_cast<uint32_t>(counts[i]);
    for (size_t k = 0; k < counts[i]; ++k) {
      for (size_t rail = 0; rail < rails; ++rail, ++next) {
        Part* p = &r->parts[next];
        p->buffer = static_cast<uint8_t>(i);
        p->piece = static_cast<uint32_t>(k);
        p->rail = static_cast<uint8_t>(rail);
        p->data = static_cast<char*>(data[i]) + k * chunk;
        p->size = std::min(chunk, sizes[i] - std::min(sizes[i], k * chunk));
        p->done = false;
        // UCX 1.13 leaves recv_info unfilled when a receive completes immediately, so receives
        // always complete through the callback, which carries the real length and sender tag.
        ucp_request_param_t param = partParam(p);
        param.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
        param.cb.recv = onRecvDone;
        setMemh(&param, mhs ? mhs[i] : nullptr, p);
        track(p, ucp_tag_recv_nbx(dev().worker(rail).get(), p->data, p->size,
                                  tag::make(tagSpace_, tags[i], seq, p->piece, false),
                                  tag::kRecvMask, &param));
      }
    }
  }
  *out = r;
  return Status::kOk;
}

// The copy of `piece` that received the data, or nullptr.
static const Part* landed(const Request& r, int buffer, uint32_t piece) {
  const size_t base = r.firstPart[static_cast<size_t>(buffer)] + piece * static_cast<size_t>(r.rails);
  for (size_t i = base; i < base + static_cast<size_t>(r.rails); ++i)
    if (r.parts[i].done && !r.parts[i].canceled && r.parts[i].status == Status::kOk) return &r.parts[i];
  return nullptr;
}

void RecvComm::partDone(Part* p) {
  if (p->canceled || p->status != Status::kOk || p->owner->flush) return;
  counters_.add(telemetry::kPieces);
  Request* r = p->owner;
  if (p->piece != r->doneCount[p->buffer]) counters_.add(telemetry::kPiecesOutOfOrder);
  ++r->doneCount[p->buffer];
  r->landedBytes[p->buffer] += p->size;
  if (p->last) r->lastPiece[p->buffer] = p->piece;
  // PACT_FAULT reject: this side refuses the message, as a target refusing an access would.
  if (dice_ && inject(cfg_.fault.reject))
    abort(Status::kRemoteError, telemetry::ErrorKind::kRefused, "the receiver refused piece " + std::to_string(p->piece) +
                                    " of a message (PACT_FAULT reject)");
}

void RecvComm::cancel(Part& p) {
  if (p.done || p.canceled || p.ucxRequest == nullptr) return;
  p.canceled = true;
  ucp_request_cancel(dev().worker(p.rail).get(), p.ucxRequest);
}

void RecvComm::progressComm(Request* r) {
  // One receive per buffer (an ordered channel, or unordered pieces that all fit one chunk on
  // one rail): nothing can ever need cancelling.
  if (r->parts.size() == static_cast<size_t>(r->nbuffers)) return;
  if (r->rails > 1) {
    // A piece landed on one rail: its copies posted on the other rails will never match.
    for (Part& p : r->parts)
      if (!p.done && !p.canceled && landed(*r, p.buffer, p.piece) != nullptr) cancel(p);
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
  return result;
}

void RecvComm::abortInFlight() {
  for (Request* r = oldestPosted_; r != nullptr; r = r->newerPosted)
    for (Part& p : r->parts) cancel(p);
}

void RecvComm::shutdown() {
  abortInFlight();
  leaveInFlight();
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
