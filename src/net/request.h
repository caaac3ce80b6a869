// Requests of the NCCL-style data path and the slab they come from. A request covers up to
// kMaxBuffers buffers (a multi-receive) and, per buffer, one or more pieces; each piece is one
// UCX operation (a Part). The request is done when no part is still owned by UCX.
// Every comm of a device context draws from one slab (an idle comm holds no request); a comm
// bounds how many it holds at once. A closed comm's requests that UCX still holds stay taken,
// with no comm, until their last part completes (then they go back by themselves).
// UCX's request for each part's operation lives in the request too (UCP_OP_ATTR_FIELD_REQUEST),
// not in the worker's request pool: UCX's pool never shrinks before the worker goes, so a burst
// of 100,000 comms with a message in flight each kept about 35 MB after every comm had closed;
// this memory goes back with the slab's trim.
// Not thread-safe: the device mutex protects it (UCX callbacks run under it too).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "net/tags.h"
#include "transport/device_ctx.h"
#include "transport/lanes.h"
#include "transport/slab.h"

namespace pact::net {

inline constexpr int kMaxBuffers = 8;
// NCCL keeps at most 32 requests in flight per comm; a shared send comm may carry 32 per
// multi-receive buffer.
inline constexpr size_t kRecvInFlight = 32;
inline constexpr size_t kSendInFlight = kRecvInFlight * kMaxBuffers;

class Comm;
class RequestSlab;
struct Request;

// What a face keeps with a request, opaque to the core and handed back once when the request
// ends: the events it opened in an outside profiler (NCCL's, from the plugin face), one handle
// per buffer, and when it was posted (its timeline).
struct FaceRecord {
  std::array<void*, kMaxBuffers> handle{};
  uint8_t open = 0;      // bit b: buffer b's event was started and is not stopped yet
  uint64_t postedNs = 0;  // CLOCK_MONOTONIC at the post (0: not recorded)
  uint64_t bytes = 0;     // posted size (all buffers)
};

// What Net::test hands the face about a request that ended (done, or failed): its face record
// and how it travelled.
struct Ending {
  FaceRecord face;
  const void* comm = nullptr;         // the request's comm, as the face handed it out
  const std::string* peer = nullptr;  // the comm's peer, valid during the call
  bool send = false;
  int nbuffers = 0;
  uint32_t pieces = 0;    // UCX operations the request's parts made
  uint32_t laneMask = 0;  // bit l: a part went over lane l
  uint32_t lanes() const { return static_cast<uint32_t>(__builtin_popcount(laneMask)); }
};

// size: posted size, then the size actually transferred; lane (send side) and rail as the lanes
// bound it.
struct Part : transport::LanePiece {
  Request* owner = nullptr;
  void* ucxRequest = nullptr;  // non-null while UCX owns an operation for this part
  void* data = nullptr;        // where this piece lives
  uint64_t ucxTag = 0;
  bool done = true;
  bool last = false;           // receive side: the sender marked this piece as the message's last
  bool canceled = false;       // receive side: cancelled because the message ended before it
  // Receive side: UCX still had it when its rail went out (rail failover). UCX 1.22 never ends a
  // rendezvous receive matched on a connection that was reset, and a cancel cannot reach it.
  bool stranded = false;
  // Receive side: when it was cancelled because another rail's copy of its piece landed (a rail
  // failover sent the piece again); zero otherwise. RecvComm::strandOvertaken watches it.
  TimePoint overtakenAt{};
  bool seal = false;           // the message's seal (transport/seal.h), not one of its pieces
  bool posted = false;         // send side: handed to UCX at least once (or lost on the way)
  // Send side: sent again after a rail failover, in a request UCX allocates (the part's own
  // request memory may still be tied to the closed endpoint's operation); freed at completion.
  bool ucxOwned = false;
  bool again = false;          // send side: asked again (verdict) while UCX still had it
  uint8_t buffer = 0;          // which buffer of a multi-receive
  // Send side: delivery attempts lost so far (PACT_FAULT drop). Receive side, on a piece's first
  // rail: checks that did not match so far (verify).
  uint8_t attempts = 0;
  uint32_t piece = 0;
  std::vector<uint8_t> copy;   // PACT_FAULT corrupt: the corrupted bytes UCX sends instead
};

struct Request {
  static constexpr uint32_t kMagic = 0x52514354;  // "TCQR"
  uint32_t magic = kMagic;
  bool inUse = false;
  bool isSend = false;
  bool flush = false;       // an iflush's loopback reads (one part per flushed buffer)
  int nbuffers = 0;
  int rails = 1;            // receive: copies of each piece, one per rail (parts are [piece][rail])
  int pending = 0;          // parts still owned by UCX or waiting on a lane
  int stranded = 0;         // of those, receives stranded on a rail that went out (Part::stranded)
  uint64_t postIndex = 0;   // order of posting on the comm
  // The comm's requests not yet reported done, in posting order (an intrusive list, so posting
  // and reporting a request cost a few pointer writes and never allocate).
  Request* olderPosted = nullptr;
  Request* newerPosted = nullptr;
  Comm* comm = nullptr;     // null once its comm closed (an orphan UCX still holds)
  bool peerDead = false;    // its comm failed because the peer is gone ...
  TimePoint deadAt{};       // ... noticed then: what was on its way lands within moments
  RequestSlab* slab = nullptr;
  const void* memHandle = nullptr;  // send: the registration the buffer lies in (may be null)
  // Done with UCX but not reportable yet: a send waiting for its receiver's verdict (verify), a
  // receive whose seals are not judged yet. Set and cleared by the comm (the class contract).
  bool held = false;
  // Seal parts, at the end of parts: one per message and rail it may come on, [buffer][rail]
  // (send: 1).
  uint8_t seals = 0;
  uint64_t credit = 0;      // send: bytes taken from the class's budget (net/credits.h)
  uint64_t msgBytes = 0;    // send: the message's size
  uint32_t postedPieces = 0;  // send: data pieces handed to UCX so far (the seal follows the last)
  TimePoint firstLanded{};  // receive: when its first part landed (the timeout's start)
  std::array<int, kMaxBuffers> tags{};        // each message's NCCL tag
  std::array<uint32_t, kMaxBuffers> seqs{};   // and its count of that tag (all 32 bits)
  std::array<const void*, kMaxBuffers> mhs{}; // receive: each buffer's registration (may be null)
  std::array<uint32_t, kMaxBuffers> sealAt{}; // where each message's seal lies in sealMem
  std::vector<uint8_t> sealMem;               // the seals' bytes (capacity kept across reuse)
  FaceRecord face;                  // the face's, kept as it left them (see Ending)
  std::vector<Part> parts;  // sized before any part is posted: parts never move while in flight
  // UCX's request memory, one block per part (kept, like parts, across reuse; never resized
  // while a part is in flight).
  std::vector<std::byte> ucxMem;
  std::array<uint32_t, kMaxBuffers> firstPart{};   // index of each buffer's piece 0 in parts
  std::array<uint32_t, kMaxBuffers> partCount{};   // pieces posted for each buffer
  std::array<int64_t, kMaxBuffers> lastPiece{};    // -1 until the sender's last piece landed
  std::array<uint32_t, kMaxBuffers> doneCount{};   // pieces landed so far, per buffer
  std::array<uint64_t, kMaxBuffers> landedBytes{}; // bytes those pieces carried, per buffer

  bool done() const { return pending == 0; }
  // Reportable: every part UCX still holds is stranded on an out rail (its piece landed on
  // another rail, or the message failed). Such a request is reported and left to UCX, with no
  // comm, until its stranded parts end (Comm::release); it is never reused before.
  bool settled() const { return pending == stranded; }
  size_t dataParts() const { return parts.size() - seals; }
  Part& sealPart(int buffer, int rail = 0) { return parts[copiesOf(buffer, tag::kSealPiece) + static_cast<size_t>(rail)]; }
  // Receive: the copy of buffer's piece (tag::kSealPiece: its seal) that landed, other than
  // `except`, or nullptr.
  const Part* landed(int buffer, uint32_t piece, const Part* except = nullptr) const {
    if (piece == tag::kSealPiece && seals == 0) return nullptr;
    const size_t base = copiesOf(buffer, piece);
    for (size_t i = base; i < base + static_cast<size_t>(rails); ++i)
      if (&parts[i] != except && parts[i].done && !parts[i].canceled && parts[i].status == Status::kOk) return &parts[i];
    return nullptr;
  }
  // Where buffer's piece (or seal) has its copies, one per rail, in parts.
  size_t copiesOf(int buffer, uint32_t piece) const {
    return piece == tag::kSealPiece ? parts.size() - seals + static_cast<size_t>(buffer * rails)
                                    : firstPart[static_cast<size_t>(buffer)] + piece * static_cast<size_t>(rails);
  }
  // More data parts than buffers (pieces of an unordered message, or copies on several rails):
  // parts past a buffer's last piece, or copies on other rails, may have to be cancelled.
  bool multiPart() const { return dataParts() > static_cast<size_t>(nbuffers); }
  // The request handle to give UCX for part p: UCX's request occupies the slab's stride of bytes
  // before it, cache-line aligned.
  void* ucxHandle(const Part* p);
  static constexpr uintptr_t kUcxAlign = 64;
};

class RequestSlab final : public transport::Orphan {
 public:
  // ucxRequestSize: what UCX needs before each request handle (ucx::Context::requestSize).
  // counters (may be null): the device context's, whose `requests` gauge follows the slab.
  explicit RequestSlab(size_t ucxRequestSize, telemetry::CounterSet* counters = nullptr)
      : ucxStride_((ucxRequestSize + Request::kUcxAlign - 1) & ~(Request::kUcxAlign - 1)), counters_(counters) {}
  RequestSlab(const RequestSlab&) = delete;
  RequestSlab& operator=(const RequestSlab&) = delete;
  // Requests UCX still holds (after the last comm is gone, the slab lives on until this is 0).
  size_t stillHeld() override {
    size_t n = 0;
    forEachInUse([&](Request& r) { n += r.done() ? 0 : 1; });
    return n;
  }
  size_t stranded() override {
    size_t n = 0;
    forEachInUse([&](Request& r) { n += !r.done() && r.settled() ? 1 : 0; });
    return n;
  }
  // Requests of closed comms that UCX still holds, and will end (not stranded).
  size_t orphaned() {
    size_t n = 0;
    forEachInUse([&](Request& r) { n += r.comm == nullptr && !r.settled() ? 1 : 0; });
    return n;
  }
  // A request with nparts parts (grows the slab when every slot is taken).
  Request* acquire(Comm* comm, bool isSend, int nbuffers, size_t nparts);
  void release(Request* r) {
    r->inUse = false;
    r->comm = nullptr;
    slots_.give(r);
    if (counters_ != nullptr) counters_->sub(telemetry::kRequests);
  }
  size_t ucxStride() const { return ucxStride_; }
  size_t used() const { return slots_.live(); }
  size_t capacity() const { return slots_.capacity(); }
  // Gives the memory back when no request is taken (after a teardown: a burst of comms may have
  // grown the slab far past what the survivors need).
  void trim() { (void)slots_.trim(); }
  template <typename F>
  void forEachInUse(F&& f) {
    if (slots_.live() == 0) return;
    slots_.forEach([&](Request& r) {
      if (r.inUse) f(r);
    });
  }

 private:
  transport::Slab<Request> slots_;
  size_t ucxStride_;
  telemetry::CounterSet* counters_;
  uint64_t posted_ = 0;
};

inline void* Request::ucxHandle(const Part* p) {
  auto base = (reinterpret_cast<uintptr_t>(ucxMem.data()) + kUcxAlign - 1) & ~(kUcxAlign - 1);
  return reinterpret_cast<void*>(base + static_cast<size_t>(p - parts.data() + 1) * slab->ucxStride());
}

inline Request* RequestSlab::acquire(Comm* comm, bool isSend, int nbuffers, size_t nparts) {
  Request& r = *slots_.take();
  if (counters_ != nullptr) counters_->add(telemetry::kRequests);
  r.inUse = true;
  r.isSend = isSend;
  r.flush = false;
  r.nbuffers = nbuffers;
  r.rails = 1;
  r.pending = 0;
  r.stranded = 0;
  r.postIndex = posted_++;
  r.olderPosted = r.newerPosted = nullptr;
  r.comm = comm;
  r.peerDead = false;
  r.deadAt = {};
  r.slab = this;
  r.memHandle = nullptr;
  r.held = false;
  r.seals = 0;
  r.credit = 0;
  r.firstLanded = {};
  r.face.open = 0;
  r.face.postedNs = 0;
  // Reset only what this request uses; the parts vector keeps its capacity across reuse.
  r.parts.resize(nparts);
  r.ucxMem.resize(nparts * ucxStride_ + Request::kUcxAlign);
  for (auto& p : r.parts) {
    p = Part{};
    p.owner = &r;
  }
  for (size_t b = 0; b < static_cast<size_t>(nbuffers) && b < kMaxBuffers; ++b) {
    r.firstPart[b] = 0;
    r.partCount[b] = 0;
    r.lastPiece[b] = -1;
    r.doneCount[b] = 0;
    r.landedBytes[b] = 0;
  }
  return &r;
}

}  // namespace pact::net
