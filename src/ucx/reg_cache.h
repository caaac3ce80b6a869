// RegCache: refcounted, overlap-aware registration cache over ucp_mem_map for one UCP context,
// keyed by (memory type, range): a request that falls inside a live registration of the same
// memory type reuses it (refcount); otherwise the page-aligned range is registered anew (for CUDA
// memory, clipped to the allocation the driver reports). The last release unmaps.
// CUDA memory is checked with the driver first (device memory it knows, the range inside one
// allocation) and registered with its memory type given to UCX explicitly; Region::ucxType is
// what every operation on it passes too (UCX's memory-type cache would otherwise guess "host" for
// memory it did not see allocated). With the driver double (cuda::Driver::hostBacked) that type is
// host: the double's device memory is host memory.
// Thread-safe. The cache must outlive every Region it handed out.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/memory_type.h"
#include "common/status.h"
#include "cuda/driver.h"
#include "ucx/worker.h"

namespace pact::ucx {

using MemoryType = pact::MemoryType;  // common/memory_type.h
using pact::memoryTypeName;
// What UCX is told memory of type t is: CUDA memory is UCS_MEMORY_TYPE_CUDA, except the driver
// double's, which is host memory.
inline ucs_memory_type_t ucxMemoryType(MemoryType t, const cuda::Driver& driver) {
  return t == MemoryType::kCuda && !driver.hostBacked() ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
}

struct RegRequest {
  void* addr = nullptr;
  size_t length = 0;
  MemoryType type = MemoryType::kHost;
  int device = -1;  // CUDA memory: the device ordinal it must be on; -1: whichever
};

struct Region {
  uintptr_t start = 0;  // page-aligned (clipped to the allocation for CUDA memory)
  uintptr_t end = 0;
  MemoryType type = MemoryType::kHost;
  ucs_memory_type_t ucxType = UCS_MEMORY_TYPE_HOST;  // what UCX is told, on map and every operation
  int device = -1;      // CUDA device ordinal; -1 for host memory
  MemMap map;
  // The packed remote key (lazily, for the loopback flush read; RegCache::packedKey).
  std::vector<uint8_t> rkey;
  Region() = default;
  ~Region();
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  // The remote key unpacked on ep (the loopback endpoint of a flush read), kept until the region
  // goes or another endpoint asks. Caller serializes (the device mutex).
  Result<ucp_rkey_h> flushKey(ucp_ep_h ep, class RegCache* cache);
  bool covers(uintptr_t a, size_t len, MemoryType t) const {
    return t == type && a >= start && a + len <= end;
  }

 private:
  ucp_ep_h keyEp_ = nullptr;
  ucp_rkey_h key_ = nullptr;
};

class RegCache {
 public:
  RegCache(const Context& ctx, const cuda::Driver& driver);
  RegCache(const RegCache&) = delete;
  RegCache& operator=(const RegCache&) = delete;

  // hit (may be null): set to whether a region already mapped served the request.
  Result<std::shared_ptr<Region>> acquire(const RegRequest& req, bool* hit = nullptr);

  struct Stats {
    size_t live = 0;    // regions currently mapped
    size_t hits = 0;    // acquires served by an existing region
    size_t misses = 0;  // acquires that mapped a new region
  };
  Stats stats() const;
  // Whether this context can register CUDA memory (UCX lists the CUDA memory type, or the driver
  // double's device memory is host memory), and why not.
  bool cudaMemory(std::string* why = nullptr) const;
  // The region's packed remote key (ucp_rkey_pack), packed on first use.
  Result<const std::vector<uint8_t>*> packedKey(Region& region);

 private:
  Result<std::shared_ptr<Region>> mapLocked(uintptr_t start, uintptr_t end, const RegRequest& req,
                                            ucs_memory_type_t ucxType, int device);
  void purgeExpiredLocked();

  ucp_context_h ctx_;
  const cuda::Driver& driver_;
  uint64_t ucxMemoryTypes_;  // Context::memoryTypes
  mutable std::mutex mu_;
  std::multimap<uintptr_t, std::weak_ptr<Region>> byStart_;
  size_t hits_ = 0;
  size_t misses_ = 0;
};

}  // namespace pact::ucx
