// Requests of the NCCL-style data path and their fixed-size pool. A request groups up to kMaxParts
// UCX operations (one per buffer of a multi-receive) and is done when all of them are.
// Not thread-safe: the owning comm's device mutex protects it (UCX callbacks run under it too).
#pragma once

#include <ucp/api/ucp.h>

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"

namespace pact::transport {

inline constexpr int kMaxParts = 8;
// NCCL keeps at most 32 requests in flight per comm; a shared send comm may carry 32 per
// multi-receive buffer.
inline constexpr size_t kRecvPoolSize = 32;
inline constexpr size_t kSendPoolSize = kRecvPoolSize * kMaxParts;

class Comm;
struct Request;

struct Part {
  Request* owner = nullptr;
  void* ucxRequest = nullptr;  // non-null while UCX owns an operation for this part
  size_t size = 0;             // posted size, then the size actually transferred
  Status status = Status::kOk;
  bool done = true;
};

struct Request {
  static constexpr uint32_t kMagic = 0x52514354;  // "TCQR"
  uint32_t magic = kMagic;
  bool inUse = false;
  bool isSend = false;
  int nparts = 0;
  int pending = 0;  // parts not yet done
  Comm* comm = nullptr;
  std::array<Part, kMaxParts> parts{};

  bool done() const { return pending == 0; }
};

class RequestPool {
 public:
  explicit RequestPool(size_t capacity) : slots_(capacity) {}
  // A free request, or nullptr when every slot is taken (back-pressure, not an error).
  Request* acquire(Comm* comm, bool isSend, int nparts);
  void release(Request* r) { r->inUse = false; --used_; }
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
};

inline Request* RequestPool::acquire(Comm* comm, bool isSend, int nparts) {
  if (used_ == slots_.size()) return nullptr;
  for (size_t i = 0; i < slots_.size(); ++i) {
    Request& r = slots_[(next_ + i) % slots_.size()];
    if (r.inUse) continue;
    next_ = (next_ + i + 1) % slots_.size();
    r.inUse = true;
    r.isSend = isSend;
    r.nparts = nparts;
    r.pending = 0;
    r.comm = comm;
    for (auto& p : r.parts) p = Part{};
    ++used_;
    return &r;
  }
  return nullptr;
}

}  // namespace pact::transport
