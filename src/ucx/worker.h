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

#include "common/delivery.h"
#include "common/status.h"

namespace pact::ucx {

// A UCX operation that completes later: done(op, status) is called once, from inside progress
// (never from inside the call that started it). The owner keeps op alive until then.
struct Op {
  void (*done)(Op* self, ucs_status_t status) = nullptr;
};

// An active message as a handler sees it. data is the payload for an eager message, or UCX's
// descriptor of a rendezvous one (then Worker::amRecvData fetches the bytes).
struct AmMessage {
  const void* header = nullptr;
  size_t headerLength = 0;
  void* data = nullptr;
  size_t length = 0;
  bool rendezvous = false;
};
// What a handler decided: kDone (taken, copied, or dropped), kRefuse (a rendezvous refused:
// UCX fails the sender's operation). common/delivery.h's, which the engine's protocol answers too.
using AmVerdict = pact::Delivery;
using AmHandler = AmVerdict (*)(void* arg, const AmMessage& m);

struct ContextDeleter { void operator()(ucp_context_h c) const { ucp_cleanup(c); } };
struct WorkerDeleter { void operator()(ucp_worker_h w) const { ucp_worker_destroy(w); } };

// The UCX library this process runs (ucp_get_version), and "1.22.0".
struct Version {
  unsigned major = 0, minor = 0, release = 0;
  std::string text() const;
};
Version version();

class Context {
 public:
  // netDevice: restricts UCX to that network device (plus shared memory), whatever the user's
  // UCX_NET_DEVICES says (it chooses pact's devices: discoverDevices). Empty = UCX's default.
  // settings: further UCX settings (key without the UCX_ prefix, e.g. {"TLS", "rc,sm,self"}),
  // applied in order with ucp_config_modify; the caller decides whether the user's UCX_<KEY>
  // wins (transport/service.h leaves out every key the user set).
  using Settings = std::vector<std::pair<std::string, std::string>>;
  // features: UCP_FEATURE_* (the plugin uses tags; the engine active messages and wakeup).
  static Result<Context> create(const std::string& netDevice, const std::string& name,
                                const Settings& settings = {},
                                uint64_t features = UCP_FEATURE_TAG);
  ucp_context_h get() const { return h_.get(); }
  // The memory types the context can handle (UCS_BIT(ucs_memory_type_t); host only where UCX
  // cannot say).
  uint64_t memoryTypes() const;
  // The bytes UCX needs in front of a request handle the caller provides
  // (UCP_OP_ATTR_FIELD_REQUEST; ucp_context_query's request size).
  size_t requestSize() const;
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
  // Active messages with this id run handler(arg, message) inside progress(). The route lives
  // as long as the worker.
  Status setAmHandler(unsigned id, AmHandler handler, void* arg);
  // The fd that turns readable when the worker has events (contexts with UCP_FEATURE_WAKEUP).
  Result<int> eventFd();
  // Arms the event fd before a sleep; false when events are pending (progress instead).
  bool arm();
  // Fetches a rendezvous active message's bytes into dst: UCS_OK done now, UCS_INPROGRESS
  // op->done later, or the error.
  // memType: what dst is (given to UCX explicitly; UNKNOWN lets UCX look it up).
  ucs_status_t amRecvData(void* descriptor, void* dst, size_t length, Op* op,
                          ucs_memory_type_t memType = UCS_MEMORY_TYPE_UNKNOWN);
  // Receives and drops every tagged message waiting unexpected whose tag matches tag under mask;
  // returns how many. A receive that does not end at once (a rendezvous) counts itself in
  // *inFlight until its callback, so the owner knows UCX still holds it.
  size_t discardUnexpected(uint64_t tag, uint64_t mask, const std::shared_ptr<size_t>& inFlight);
  // A tagged receive of up to length bytes into dst matching tag under mask (ucp_tag_recv_nbx):
  // UCX's request (the caller's own memory when param gives it), or an error pointer. The NCCL
  // face's receives; param carries the callback and its user data.
  ucs_status_ptr_t tagRecv(void* dst, size_t length, uint64_t tag, uint64_t mask, const ucp_request_param_t& param);
  // Cancels a receive still waiting (ucp_request_cancel): its callback runs with UCS_ERR_CANCELED.
  void cancel(void* request);
  // Gives up ownership without ucp_worker_destroy (UCX 1.13 asserts when a worker is destroyed
  // with a rendezvous still stuck on a dead link; leaking it is the lesser harm).
  void abandon() { (void)h_.release(); }

 private:
  struct AmRoute {
    AmHandler handler;
    void* arg;
  };
  std::unique_ptr<ucp_worker, WorkerDeleter> h_;
  std::vector<uint8_t> address_;
  std::vector<std::unique_ptr<AmRoute>> amRoutes_;  // stable addresses: UCX holds them
};

// Gives a request UCX allocated back (ucp_request_free), from its callback or after it ended.
void freeRequest(void* request);

// Progresses worker until request completes or the deadline passes; frees the request.
// Returns the request's final status (UCS_ERR_TIMED_OUT when the deadline passed).
ucs_status_t waitRequest(ucp_worker_h worker, void* request, std::chrono::milliseconds limit);

// One extent of a gathered send (amSendIov).
using Iov = ucp_dt_iov_t;

// An endpoint close or flush UCX is still carrying out (Endpoint::closeLater, flushLater). done()
// polls it without progressing; status() is how it ended. Destroying an unfinished one hands the
// request to UCX, which frees it when it ends.
class Pending {
 public:
  Pending() = default;
  explicit Pending(void* request);  // nullptr: ended at once; an error pointer: ended with it
  ~Pending();
  Pending(Pending&& o) noexcept : req_(std::exchange(o.req_, nullptr)), status_(o.status_) {}
  Pending& operator=(Pending&& o) noexcept;
  Pending(const Pending&) = delete;
  Pending& operator=(const Pending&) = delete;
  bool done();
  ucs_status_t status() const { return status_; }  // UCS_OK until it ended otherwise

 private:
  void* req_ = nullptr;
  ucs_status_t status_ = UCS_OK;
};

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
  // Sends an active message (header and data are read until completion): UCS_OK done now (op
  // not called), UCS_INPROGRESS op->done later, or the error. eager: never rendezvous.
  // memType: what data is (given to UCX explicitly; UNKNOWN lets UCX look it up).
  // datatype: contiguous (data, length bytes), or ucp_dt_make_iov() (data: an array of length
  // ucp_dt_iov_t, read until completion too).
  ucs_status_t amSend(unsigned id, const void* header, size_t headerLength, const void* data,
                      size_t length, bool eager, Op* op,
                      ucs_memory_type_t memType = UCS_MEMORY_TYPE_UNKNOWN,
                      ucp_datatype_t datatype = ucp_dt_make_contig(1));
  // amSend of host memory gathered from iov (kept alive by the caller until op completes).
  ucs_status_t amSendIov(unsigned id, const void* header, size_t headerLength, const std::vector<Iov>& iov,
                         bool eager, Op* op) {
    return amSend(id, header, headerLength, iov.data(), iov.size(), eager, op, UCS_MEMORY_TYPE_HOST,
                  ucp_dt_make_iov());
  }
  // Sends length bytes of data with tag (ucp_tag_send_nbx): null done now, an error pointer, or
  // UCX's request (the caller's own memory when param gives it). The NCCL face's data path.
  ucs_status_ptr_t tagSend(const void* data, size_t length, uint64_t tag, const ucp_request_param_t& param);
  // Reads length bytes at the peer's address remote (rkey) into dst (ucp_get_nbx): as tagSend.
  ucs_status_ptr_t get(void* dst, size_t length, uint64_t remote, ucp_rkey_h rkey, const ucp_request_param_t& param);
  // Flushes (force=false: outstanding sends complete first) or aborts (force=true) the endpoint;
  // progresses the worker for a bounded time. Outstanding requests complete (with an error
  // when forced) before this returns.
  void close(bool force);
  // Starts the close (a flush first unless force) and returns at once; the worker's progress
  // carries it out.
  Pending closeLater(bool force);
  // Starts a flush: it ends once every operation on the endpoint completed, and UCX's own wireup
  // of the endpoint's connections with them (the worker's progress carries it out).
  Pending flushLater();
  // Human-readable lane/transport description (ucp_ep_print_info).
  std::string describe() const;

 private:
  void* startClose(bool force);  // ucp_ep_close_nbx; the endpoint is UCX's from then on
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
