// DeviceCtx: the UCX state of one network device (context, worker, registration cache) and the
// mutex that serializes every use of them, by every comm on the device and every thread.
// Shared (shared_ptr) by the Net that opened it and by each comm and memory handle on it, so it
// lives until the last of them is gone.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "common/params.h"
#include "ucx/devices.h"
#include "ucx/reg_cache.h"
#include "transport/request.h"
#include "ucx/worker.h"

namespace pact::transport {

class DeviceCtx {
 public:
  static Result<std::shared_ptr<DeviceCtx>> open(const ucx::DeviceInfo& info, const Params& params);

  const ucx::DeviceInfo& info() const { return info_; }
  const Params& params() const { return params_; }
  std::mutex& mutex() { return mu_; }
  ucx::Worker& worker() { return worker_; }
  ucx::RegCache& cache() { return *cache_; }
  // A tag space (16 bits) for a new receive comm. Never reused within this worker's life, so a
  // late message of a closed comm can never match a new one.
  Result<uint32_t> allocTagSpace();

  // Keeps the request slots of a closed comm alive while UCX still holds operations on them;
  // slots whose operations all ended are freed here. Device mutex must be held.
  void adoptOrphans(std::unique_ptr<RequestPool> pool);
  size_t orphanPools() const { return orphans_.size(); }

  bool peerFailureSupported = true;  // cleared once UCX says the transports lack it
  std::atomic<int64_t> liveComms{0};
  std::atomic<int64_t> liveMemHandles{0};

 private:
  DeviceCtx(ucx::DeviceInfo info, const Params& params) : info_(std::move(info)), params_(params) {}

  ucx::DeviceInfo info_;
  Params params_;
  std::mutex mu_;
  std::vector<std::unique_ptr<RequestPool>> orphans_;  // outlives the worker (declared first)
  // Destroyed in reverse order: cache (regions) before the worker before the context.
  ucx::Context context_;
  ucx::Worker worker_;
  std::unique_ptr<ucx::RegCache> cache_;
  uint32_t nextTagSpace_ = 1;
};

}  // namespace pact::transport
