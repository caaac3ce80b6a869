// Move-only RAII wrappers for the UCP handles pact uses: Context, Worker, Endpoint, MemMap.
// Lifetime: a Context must outlive its Workers and MemMaps; a Worker must outlive its Endpoints.
// None of these are thread-safe; callers serialize (the transport holds one mutex per worker).
#pragma once

#include <ucp/api/ucp.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace pact::ucx {

struct ContextDeleter { void operator()(ucp_context_h c) const { ucp_cleanup(c); } };
struct WorkerDeleter { void operator()(ucp_worker_h w) const { ucp_worker_destroy(w); } };

class Context {
 public:
  // netDevice: restricts UCX to that network device (plus shared memory) unless the user set
  // UCX_NET_DEVICES, which always wins. Empty = UCX's default.
  // settings: further UCX settings (key without the UCX_ prefix, e.g. {"TLS", "rc,sm,self"}),
  // applied in order with ucp_config_modify; the caller decides whether the user's UCX_<KEY>
  // wins (transport/service.h leaves out every key the user set).
  using Settings = std::vector<std::pair<std::string, std::string>>;
  // features: UCP_FEATURE_* (the plugin uses tags; the engine active messages and wakeup).
  static Result<Context> create(const std::string& netDevice, const std::string& name,
                                const Settings& settings = {},
                                uint64_t features = UCP_FEATURE_TAG);
  ucp_context_h get() const { return h_.get(); }
  // Gives up ownership without ucp_cleanup (a context UCX still has work on: see DeviceCtx).
  void abandon() { (void)h_.release(); }

 private:
  std::unique_ptr<ucp_context, ContextDeleter> h_;
};

class Worker {
 public:
  static Result<Worker> create(const Context& ctx);
  ucp_worker_h get() const { return h_.get(); }
  const std::vector<uint8_t>& address() const { return address_; }
  unsigned progress() { return ucp_worker_progress(h_.get()); }
  // Gives up ownership without ucp_worker_destroy (UCX 1.13 asserts when a worker is destroyed
  // with a rendezvous still stuck on a dead link; leaking it is the lesser harm).
  void abandon() { (void)h_.release(); }

 private:
  std::unique_ptr<ucp_worker, WorkerDeleter> h_;
  std::vector<uint8_t> address_;
};

// Progresses worker until request completes or the deadline passes; frees the request.
// Returns the request's final status (UCS_ERR_TIMED_OUT when the deadline passed).
ucs_status_t waitRequest(ucp_worker_h worker, void* request, std::chrono::milliseconds limit);

class Endpoint {
 public:
  using ErrorHandler = void (*)(void* arg, ucp_ep_h ep, ucs_status_t status);
  Endpoint() = default;
  // Peer-failure error handling when *peerFailureSupported; if the transports cannot provide it,
  // falls back to none and clears the flag (the caller keeps it per worker).
  static Result<Endpoint> create(ucp_worker_h worker, const std::vector<uint8_t>& remoteAddress,
                                 ErrorHandler onError, void* arg, bool* peerFailureSupported);
  ~Endpoint() { close(true); }
  Endpoint(Endpoint&& o) noexcept;
  Endpoint& operator=(Endpoint&& o) noexcept;
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  ucp_ep_h get() const { return ep_; }
  // Flushes (force=false: outstanding sends complete first) or aborts (force=true) the endpoint;
  // progresses the worker for a bounded time. Outstanding requests complete (with an error
  // when forced) before this returns.
  void close(bool force);
  // Human-readable lane/transport description (ucp_ep_print_info).
  std::string describe() const;

 private:
  ucp_worker_h worker_ = nullptr;
  ucp_ep_h ep_ = nullptr;
};

// A ucp_mem_map registration; unmapped on destruction.
class MemMap {
 public:
  MemMap() = default;
  static Result<MemMap> map(ucp_context_h ctx, void* addr, size_t length, ucs_memory_type_t type);
  ~MemMap();
  MemMap(MemMap&& o) noexcept;
  MemMap& operator=(MemMap&& o) noexcept;
  MemMap(const MemMap&) = delete;
  MemMap& operator=(const MemMap&) = delete;
  ucp_mem_h get() const { return memh_; }

 private:
  ucp_context_h ctx_ = nullptr;
  ucp_mem_h memh_ = nullptr;
};

}  // namespace pact::ucx
