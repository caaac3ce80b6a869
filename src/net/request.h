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
#include "transport/device_ctx.h"
#include "transport/lanes.h"

namespace pact::net {

inline constexpr int kMaxBuffers = 8;
// NCCL keeps at most 32 requests in flight per comm; a shared send comm may carry 32 per
// multi-receive buffer.
inline constexpr size_t kRecvPoolSize = 32;
inline constexpr size_t kSendPoolSize = kRecvPoolSize * kMaxBuffers;

class Comm;
struct Request;

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
  uint8_t buffer = 0;          // which buffer of a multi-receive
  uint8_t attempts = 0;        // send side: delivery attempts lost so far (PACT_FAULT)
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
  // The comm's requests not yet reported done, in posting order (an intrusive list, so posting
  // and reporting a request cost a few pointer writes and never allocate).
  Request* olderPosted = nullptr;
  Request* newerPosted = nullptr;
  Comm* comm = nullptr;
  const void* memHandle = nullptr;  // send: the registration the buffer lies in (may be null)
  std::vector<Part> parts;  // sized before any part is posted: parts never move while in flight
  std::array<uint32_t, kMaxBuffers> firstPart{};   // index of each buffer's piece 0 in parts
  std::array<uint32_t, kMaxBuffers> partCount{};   // pieces posted for each buffer
  std::array<int64_t, kMaxBuffers> lastPiece{};    // -1 until the sender's last piece landed
  std::array<uint32_t, kMaxBuffers> doneCount{};   // pieces landed so far, per buffer
  std::array<uint64_t, kMaxBuffers> landedBytes{}; // bytes those pieces carried, per buffer

  bool done() const { return pending == 0; }
  // More parts than buffers (pieces of an unordered message, or copies on several rails): parts
  // past a buffer's last piece, or copies on other rails, may have to be cancelled.
  bool multiPart() const { return parts.size() > static_cast<size_t>(nbuffers); }
};

class RequestPool final : public transport::Orphan {
 public:
  explicit RequestPool(size_t capacity) : slots_(capacity) {}
  // Requests UCX still holds an operation of (a closed comm's pool lives on until this is 0).
  size_t stillHeld() override {
    size_t n = 0;
    forEachInUse([&](Request& r) { n += r.done() ? 0 : 1; });
    return n;
  }
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
  // Slots are handed out round-robin from the one after the last taken; one is free.
  const auto after = [this](size_t i) { return i + 1 == slots_.size() ? 0 : i + 1; };
  size_t i = next_;
  while (slots_[i].inUse) i = after(i);
  next_ = after(i);
  Request& r = slots_[i];
  r.inUse = true;
  r.isSend = isSend;
  r.nbuffers = nbuffers;
  r.rails = 1;
  r.pending = 0;
  r.postIndex = posted_++;
  r.olderPosted = r.newerPosted = nullptr;
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
    r.landedBytes[b] = 0;
  }
  ++used_;
  return &r;
}

}  // namespace pact::net
