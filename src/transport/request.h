// Requests of the NCCL-style data path and their fixed-size pool. A request covers up to
// kMaxBuffers buffers (a multi-receive) and, per buffer, one or more pieces; each piece is one
// UCX operation (a Part). The request is done when no part is still owned by UCX.
// Not thread-safe: the owning comm's device mutex protects it (UCX callbacks run under it too).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/clock.h"
#include "common/status.h"

namespace pact::transport {

inline constexpr int kMaxBuffers = 8;
// NCCL keeps at most 32 requests in flight per comm; a shared send comm may carry 32 per
// multi-receive buffer.
inline constexpr size_t kRecvPoolSize = 32;
inline constexpr size_t kSendPoolSize = kRecvPoolSize * kMaxBuffers;

class Comm;
struct Request;

struct Part {
  Request* owner = nullptr;
  void* ucxRequest = nullptr;  // non-null while UCX owns an operation for this part
  void* data = nullptr;        // where this piece lives
  size_t size = 0;             // posted size, then the size actually transferred
  uint64_t ucxTag = 0;
  TimePoint queuedAt{};        // when the piece was given to its lane
  Status status = Status::kOk;
  bool done = true;
  bool last = false;           // receive side: the sender marked this piece as the message's last
  bool canceled = false;       // receive side: cancelled because the message ended before it
  uint8_t buffer = 0;          // which buffer of a multi-receive
  uint8_t lane = 0;            // send side: the lane that carries it
  uint8_t rail = 0;            // the rail (worker) its UCX operation runs on
  uint32_t piece = 0;
};

struct Request {
  static constexpr uint32_t kMagic = 0x52514354;  // "TCQR"
  uint32_t magic = kMagic;
  bool inUse = false;
  bool isSend = false;
  int nbuffers = 0;
  int rails = 1;            // receive: copies of each piece, one per rail (parts are [piece][rail])
  int pending = 0;          // parts still owned by UCX or waiting on a lane
  uint64_t postIndex = 0;   // order of posting on the comm
  Comm* comm = nullptr;
  const void* memHandle = nullptr;  // send: the registration the buffer lies in (may be null)
  std::vector<Part> parts;  // sized before any part is posted: parts never move while in flight
  std::array<uint32_t, kMaxBuffers> firstPart{};   // index of each buffer's piece 0 in parts
  std::array<uint32_t, kMaxBuffers> partCount{};   // pieces posted for each buffer
  std::array<int64_t, kMaxBuffers> lastPiece{};    // -1 until the sender's last piece landed
  std::array<uint32_t, kMaxBuffers> doneCount{};   // pieces landed so far, per buffer

  bool done() const { return pending == 0; }
};

class RequestPool {
 public:
  explicit RequestPool(size_t capacity) : slots_(capacity) {}
  // A free request with nparts parts, or nullptr when every slot is taken (back-pressure).
  Request* acquire(Comm* comm, bool isSend, int nbuffers, size_t nparts);
  void release(Request* r) {
    r->inUse = false;
    --used_;
  }
  bool owns(const Request* r) const {
    return r >= slots_.data() && r < slots_.data() + slots_.size();
  }
  size_t used() const { return used_; }
  size_t capacity() const { return slots_.size(); }
  template <typename F>
  void forEachInUse(F&& f) {
    for (auto& r : slots_)
      if (r.inUse) f(r);
  }

 private:
  std::vector<Request> slots_;
  size_t next_ = 0;
  size_t used_ = 0;
  uint64_t posted_ = 0;
};

inline Request* RequestPool::acquire(Comm* comm, bool isSend, int nbuffers, size_t nparts) {
  if (used_ == slots_.size()) return nullptr;
  for (size_t i = 0; i < slots_.size(); ++i) {
    Request& r = slots_[(next_ + i) % slots_.size()];
    if (r.inUse) continue;
    next_ = (next_ + i + 1) % slots_.size();
    r.inUse = true;
    r.isSend = isSend;
    r.nbuffers = nbuffers;
    r.rails = 1;
    r.pending = 0;
    r.postIndex = posted_++;
    r.comm = comm;
    r.memHandle = nullptr;
    // Reset only what this request uses; the parts vector keeps its capacity across reuse.
    r.parts.resize(nparts);
    for (auto& p : r.parts) {
      p = Part{};
      p.owner = &r;
    }
    for (size_t b = 0; b < static_cast<size_t>(nbuffers) && b < kMaxBuffers; ++b) {
      r.firstPart[b] = 0;
      r.partCount[b] = 0;
      r.lastPiece[b] = -1;
      r.doneCount[b] = 0;
    }
    ++used_;
    return &r;
  }
  return nullptr;
}

}  // namespace pact::transport
