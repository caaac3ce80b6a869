// RegCache: refcounted, overlap-aware registration cache over ucp_mem_map for one UCP context.
// A registration request that falls inside a live registration of the same memory type reuses it
// (refcount); otherwise the page-aligned range is registered anew. The last release unmaps.
// The request already carries the memory type and an optional dmabuf fd/offset so that GPU
// backends plug in without reshaping this interface (UCX 1.13 here has neither: those types
// return kUnsupported with a message saying so).
// Thread-safe. The cache must outlive every Region it handed out.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "common/status.h"
#include "ucx/worker.h"

namespace pact::ucx {

enum class MemoryType : uint8_t { kHost, kCuda };

struct RegRequest {
  void* addr = nullptr;
  size_t length = 0;
  MemoryType type = MemoryType::kHost;
  int dmabufFd = -1;  // >= 0: register through dmabuf (GPU backends)
  uint64_t dmabufOffset = 0;
};

struct Region {
  uintptr_t start = 0;  // page-aligned
  uintptr_t end = 0;
  MemoryType type = MemoryType::kHost;
  MemMap map;
  bool covers(uintptr_t a, size_t len, MemoryType t) const {
    return t == type && a >= start && a + len <= end;
  }
};

class RegCache {
 public:
  explicit RegCache(ucp_context_h ctx) : ctx_(ctx) {}
  RegCache(const RegCache&) = delete;
  RegCache& operator=(const RegCache&) = delete;

  Result<std::shared_ptr<Region>> acquire(const RegRequest& req);

  struct Stats {
    size_t live = 0;    // regions currently mapped
    size_t hits = 0;    // acquires served by an existing region
    size_t misses = 0;  // acquires that mapped a new region
  };
  Stats stats() const;

 private:
  void purgeExpiredLocked();

  ucp_context_h ctx_;
  mutable std::mutex mu_;
  std::multimap<uintptr_t, std::weak_ptr<Region>> byStart_;
  size_t hits_ = 0;
  size_t misses_ = 0;
};

}  // namespace pact::ucx
