#include "ucx/worker.h"

#include <ucs/debug/log_def.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <utility>

#include "common/clock.h"
#include "common/log.h"
#include "common/parse.h"
#include "pact_config.h"
#include "ucx/ucx_status.h"

namespace pact::ucx {

Version version() {
  Version v;
  ucp_get_version(&v.major, &v.minor, &v.release);
  return v;
}

std::string Version::text() const {
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
}

namespace {
struct ConfigDeleter { void operator()(ucp_config_t* c) const { ucp_config_release(c); } };

// While this thread probes whether the transports support peer-failure handling, UCX's own
// error line about a refused probe is expected and swallowed (only on this thread).
thread_local bool t_probing = false;

ucs_log_func_rc_t swallowProbeErrors(const char*, unsigned, const char*, ucs_log_level_t level,
                                     const ucs_log_component_config_t*, const char*, va_list) {
  return t_probing && level <= UCS_LOG_LEVEL_ERROR ? UCS_LOG_FUNC_RC_STOP : UCS_LOG_FUNC_RC_CONTINUE;
}

class ProbeScope {
 public:
  ProbeScope() {
    t_probing = true;
    ucs_log_push_handler(swallowProbeErrors);
  }
  ~ProbeScope() {
    ucs_log_pop_handler();
    t_probing = false;
  }
};
}  // namespace

Result<Context> Context::create(const std::string& netDevice, const std::string& name,
                                const Settings& settings, uint64_t features) {
  ucp_config_t* raw = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &raw);
  if (st != UCS_OK) return error("config_read", st);
  std::unique_ptr<ucp_config_t, ConfigDeleter> config(raw);
  // Pinned to its device, whatever the user's UCX_NET_DEVICES says: that variable chooses pact's
  // devices when PACT_NET_DEVICES does not (discoverDevices), but a device's traffic must never go
  // out of another port (two NCCL NICs that share one would be one rail reported as two).
  if (!netDevice.empty()) {
    st = ucp_config_modify(config.get(), "NET_DEVICES", netDevice.c_str());
    if (st != UCS_OK) return error("config_modify(NET_DEVICES)", st);
    PACT_DEBUG("ucx context %s: NET_DEVICES=%s", name.c_str(), netDevice.c_str());
  }
  // UCX's tcp transport completes a zero-copy send twice when its connection fails under it
  // (uct_tcp_ep_sendv's error path purges the send, which completes it, then completes it again;
  // the same code through 1.22). A UCX built with assertions, as Debian's 1.13 is, then aborts
  // the surviving process when a peer dies during a large send (uct_iface.h:884 `comp->count >
  // 0`): 18 of 60 runs of the abi suite's peer-death cases over tcp. So under UCX 1.13 pact sends
  // without zero-copy unless UCX_ZCOPY_THRESH says otherwise (docs/plugin.md has the price: tcp
  // bandwidth from 64 KiB to 1 MiB).
  if (const Version v = version(); v.major == 1 && v.minor <= 13 && !envIsSet("UCX_ZCOPY_THRESH")) {
    st = ucp_config_modify(config.get(), "ZCOPY_THRESH", "inf");
    if (st != UCS_OK) return error("config_modify(ZCOPY_THRESH)", st);
  }
  for (const auto& [key, value] : settings) {
    // A tcp transport key (TCP_TX_SEG_SIZE): UCX 1.22 takes it as named, UCX 1.13 accepts it but
    // never applies it (it warns "invalid configurations" at worker creation) and takes only the
    // name without the transport prefix, which 1.22 refuses. So the bare name first.
    const char* applied = key.c_str();
    if (key.rfind("TCP_", 0) == 0 &&
        ucp_config_modify(config.get(), applied + 4, value.c_str()) == UCS_OK) {
      applied += 4;
    } else if ((st = ucp_config_modify(config.get(), applied, value.c_str())) != UCS_OK) {
      return error(("config_modify(" + key + "=" + value + ")").c_str(), st);
    }
    PACT_DEBUG("ucx context %s: %s=%s", name.c_str(), applied, value.c_str());
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED |
                      UCP_PARAM_FIELD_NAME;
  params.features = features;
  params.mt_workers_shared = 0;
  params.name = name.c_str();
  ucp_context_h ctx = nullptr;
  st = ucp_init(&params, config.get(), &ctx);
  if (st != UCS_OK) return error("init", st);
  Context c;
  c.h_.reset(ctx);
  return c;
}

uint64_t Context::memoryTypes() const {
  uint64_t types = UCS_BIT(UCS_MEMORY_TYPE_HOST);
#if PACT_UCX_HAVE_MEMORY_TYPES
  ucp_context_attr_t attr{};
  attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  if (ucp_context_query(h_.get(), &attr) == UCS_OK) types = attr.memory_types;
#endif
  return types;
}

size_t Context::requestSize() const {
  ucp_context_attr_t attr{};
  attr.field_mask = UCP_ATTR_FIELD_REQUEST_SIZE;
  if (ucp_context_query(h_.get(), &attr) != UCS_OK) return 0;
  return attr.request_size;
}

Result<Worker> Worker::create(const Context& ctx) {
  ucp_worker_params_t params{};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  params.thread_mode = UCS_THREAD_MODE_SERIALIZED;  // callers hold the worker's mutex
  ucp_worker_h w = nullptr;
  ucs_status_t st = ucp_worker_create(ctx.get(), &params, &w);
  if (st != UCS_OK) return error("worker_create", st);
  Worker worker;
  worker.h_.reset(w);
  ucp_address_t* addr = nullptr;
  size_t len = 0;
  st = ucp_worker_get_address(w, &addr, &len);
  if (st != UCS_OK) return error("worker_get_address", st);
  auto* bytes = reinterpret_cast<const uint8_t*>(addr);
  worker.address_.assign(bytes, bytes + len);
  ucp_worker_release_address(w, addr);
  return worker;
}

namespace {
void onOpSend(void* request, ucs_status_t st, void* user) {
  ucp_request_free(request);
  auto* op = static_cast<Op*>(user);
  op->done(op, st);
}
void onOpRecv(void* request, ucs_status_t st, size_t, void* user) { onOpSend(request, st, user); }

ucs_status_t started(void* ret) {
  if (ret == nullptr) return UCS_OK;
  if (UCS_PTR_IS_ERR(ret)) return UCS_PTR_STATUS(ret);
  return UCS_INPROGRESS;
}
}  // namespace

Status Worker::setAmHandler(unsigned id, AmHandler handler, void* arg) {
  amRoutes_.push_back(std::make_unique<AmRoute>(AmRoute{handler, arg}));
  ucp_am_handler_param_t hp{};
  hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                  UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
  hp.id = id;
  hp.cb = [](void* a, const void* header, size_t headerLength, void* data, size_t length,
             const ucp_am_recv_param_t* param) -> ucs_status_t {
    auto* route = static_cast<AmRoute*>(a);
    const AmMessage m{header, headerLength, data, length,
                      (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0};
    return route->handler(route->arg, m) == AmVerdict::kRefuse && m.rendezvous
               ? UCS_ERR_INVALID_PARAM
               : UCS_OK;
  };
  hp.arg = amRoutes_.back().get();
  hp.flags = UCP_AM_FLAG_WHOLE_MSG;
  if (ucs_status_t st = ucp_worker_set_am_recv_handler(h_.get(), &hp); st != UCS_OK) {
    PACT_WARN("%s", error("worker_set_am_recv_handler", st).message.c_str());
    return ucx::toStatus(st);
  }
  return Status::kOk;
}

Result<int> Worker::eventFd() {
  int fd = -1;
  if (ucs_status_t st = ucp_worker_get_efd(h_.get(), &fd); st != UCS_OK)
    return error("worker_get_efd", st);
  return fd;
}

bool Worker::arm() { return ucp_worker_arm(h_.get()) == UCS_OK; }

namespace {
// A message received only to be dropped (Worker::discardUnexpected).
struct Discarded {
  std::vector<uint8_t> bytes;
  std::shared_ptr<size_t> inFlight;
};
void onDiscarded(void* request, ucs_status_t, const ucp_tag_recv_info_t*, void* user) {
  auto* d = static_cast<Discarded*>(user);
  --*d->inFlight;
  delete d;
  ucp_request_free(request);
}
}  // namespace

size_t Worker::discardUnexpected(uint64_t tag, uint64_t mask, const std::shared_ptr<size_t>& inFlight) {
  size_t n = 0;
  for (;;) {
    ucp_tag_recv_info_t info{};
    ucp_tag_message_h m = ucp_tag_probe_nb(h_.get(), tag, mask, 1, &info);
    if (m == nullptr) return n;
    ++n;
    auto* sink = new Discarded{std::vector<uint8_t>(std::max<size_t>(info.length, 1)), inFlight};
    ++*inFlight;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    param.cb.recv = onDiscarded;
    param.user_data = sink;
    void* req = ucp_tag_msg_recv_nbx(h_.get(), sink->bytes.data(), info.length, m, &param);
    if (req == nullptr || UCS_PTR_IS_ERR(req)) {  // no callback comes
      --*inFlight;
      delete sink;
    }
  }
}

ucs_status_t Worker::amRecvData(void* descriptor, void* dst, size_t length, Op* op,
                                ucs_memory_type_t memType) {
  ucp_request_param_t rp{};
  rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  if (memType != UCS_MEMORY_TYPE_UNKNOWN) {
    rp.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    rp.memory_type = memType;
  }
  rp.cb.recv_am = onOpRecv;
  rp.user_data = op;
  return started(ucp_am_recv_data_nbx(h_.get(), descriptor, dst, length, &rp));
}

ucs_status_ptr_t Endpoint::tagSend(const void* data, size_t length, uint64_t tag, const ucp_request_param_t& param) {
  return ucp_tag_send_nbx(ep_, data, length, tag, &param);
}

ucs_status_ptr_t Endpoint::get(void* dst, size_t length, uint64_t remote, ucp_rkey_h rkey,
                               const ucp_request_param_t& param) {
  return ucp_get_nbx(ep_, dst, length, remote, rkey, &param);
}

ucs_status_ptr_t Worker::tagRecv(void* dst, size_t length, uint64_t tag, uint64_t mask, const ucp_request_param_t& param) {
  return ucp_tag_recv_nbx(h_.get(), dst, length, tag, mask, &param);
}

void Worker::cancel(void* request) { ucp_request_cancel(h_.get(), request); }

void freeRequest(void* request) { ucp_request_free(request); }

ucs_status_t Endpoint::amSend(unsigned id, const void* header, size_t headerLength,
                              const void* data, size_t length, bool eager, Op* op,
                              ucs_memory_type_t memType, ucp_datatype_t datatype) {
  ucp_request_param_t rp{};
  rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                    UCP_OP_ATTR_FIELD_DATATYPE;
  rp.datatype = datatype;
  if (memType != UCS_MEMORY_TYPE_UNKNOWN) {
    rp.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    rp.memory_type = memType;
  }
  if (eager) {
    rp.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
    rp.flags = UCP_AM_SEND_FLAG_EAGER;
  }
  rp.cb.send = onOpSend;
  rp.user_data = op;
  return started(ucp_am_send_nbx(ep_, id, header, headerLength, data, length, &rp));
}

ucs_status_t waitRequest(ucp_worker_h worker, void* request, std::chrono::milliseconds limit) {
  if (request == nullptr) return UCS_OK;
  if (UCS_PTR_IS_ERR(request)) return UCS_PTR_STATUS(request);
  const auto deadline = now() + limit;
  ucs_status_t st;
  while ((st = ucp_request_check_status(request)) == UCS_INPROGRESS) {
    ucp_worker_progress(worker);
    if (now() > deadline) {
      ucp_request_cancel(worker, request);
      ucp_worker_progress(worker);
      st = ucp_request_check_status(request);
      if (st == UCS_INPROGRESS) {
        // Released to UCX, which frees it when it completes. Never block forever.
        PACT_INFO("ucx request %p still in progress after %lld ms; released", request,
                  static_cast<long long>(limit.count()));
        ucp_request_free(request);
        return UCS_ERR_TIMED_OUT;
      }
      break;
    }
  }
  ucp_request_free(request);
  return st;
}

Result<Endpoint> Endpoint::create(ucp_worker_h worker, const std::vector<uint8_t>& remoteAddress,
                                  ErrorHandler onError, void* arg, bool* peerFailureSupported) {
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(remoteAddress.data());
  params.err_mode = *peerFailureSupported ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
  params.err_handler.cb = onError;
  params.err_handler.arg = arg;
  ucp_ep_h ep = nullptr;
  ucs_status_t st;
  if (*peerFailureSupported) {
    ProbeScope probe;
    st = ucp_ep_create(worker, &params, &ep);
  } else {
    st = ucp_ep_create(worker, &params, &ep);
  }
  if (st == UCS_ERR_UNREACHABLE && *peerFailureSupported) {
    // UCX 1.13's shared-memory transports have no peer-failure support. The control connection
    // still detects a dead peer, so this worker connects without it from now on.
    PACT_INFO("ucx transports lack peer-failure handling; endpoints on this worker go without it");
    *peerFailureSupported = false;
    params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    st = ucp_ep_create(worker, &params, &ep);
  }
  if (st != UCS_OK) return error("ep_create", st);
  Endpoint e;
  e.worker_ = worker;
  e.ep_ = ep;
  return e;
}

Endpoint::Endpoint(Endpoint&& o) noexcept
    : worker_(std::exchange(o.worker_, nullptr)), ep_(std::exchange(o.ep_, nullptr)) {}

Endpoint& Endpoint::operator=(Endpoint&& o) noexcept {
  if (this != &o) {
    close(true);
    worker_ = std::exchange(o.worker_, nullptr);
    ep_ = std::exchange(o.ep_, nullptr);
  }
  return *this;
}

void* Endpoint::startClose(bool force) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  void* req = ucp_ep_close_nbx(ep_, &param);
  ep_ = nullptr;  // UCX owns the close from here
  return req;
}

void Endpoint::close(bool force) {
  if (ep_ == nullptr) return;
  const void* ep = ep_;
  const ucs_status_t st = waitRequest(worker_, startClose(force), std::chrono::milliseconds(500));
  if (st != UCS_OK && !force) {
    // A flush that failed (dead peer) cannot be retried on the same ep; UCX released it.
    PACT_DEBUG("ucx ep %p flush-close ended with %s", ep, ucs_status_string(st));
  }
}

Pending Endpoint::closeLater(bool force) {
  return ep_ == nullptr ? Pending() : Pending(startClose(force));
}

Pending Endpoint::flushLater() {
  if (ep_ == nullptr) return Pending(UCS_STATUS_PTR(UCS_ERR_NOT_CONNECTED));
  ucp_request_param_t param{};
  return Pending(ucp_ep_flush_nbx(ep_, &param));
}

Pending::Pending(void* request) {
  if (UCS_PTR_IS_ERR(request))
    status_ = UCS_PTR_STATUS(request);
  else
    req_ = request;  // nullptr: ended at once
}

Pending::~Pending() {
  if (req_ != nullptr) ucp_request_free(req_);
}

Pending& Pending::operator=(Pending&& o) noexcept {
  if (this != &o) {
    if (req_ != nullptr) ucp_request_free(req_);
    req_ = std::exchange(o.req_, nullptr);
    status_ = o.status_;
  }
  return *this;
}

bool Pending::done() {
  if (req_ == nullptr) return true;
  const ucs_status_t st = ucp_request_check_status(req_);
  if (st == UCS_INPROGRESS) return false;
  status_ = st;
  ucp_request_free(req_);
  req_ = nullptr;
  return true;
}

std::string Endpoint::describe() const {
  if (ep_ == nullptr) return "(closed)";
  char* buf = nullptr;
  size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  if (f == nullptr) return "(unavailable)";
  ucp_ep_print_info(ep_, f);
  std::fclose(f);
  std::string out(buf, len);
  std::free(buf);
  return out;
}

Result<MemMap> MemMap::map(ucp_context_h ctx, void* addr, size_t length, ucs_memory_type_t type) {
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                      UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
  params.address = addr;
  params.length = length;
  params.memory_type = type;
  ucp_mem_h memh = nullptr;
  ucs_status_t st = ucp_mem_map(ctx, &params, &memh);
  if (st != UCS_OK) return error("mem_map", st);
  MemMap m;
  m.ctx_ = ctx;
  m.memh_ = memh;
  return m;
}

MemMap::~MemMap() {
  if (memh_ != nullptr) ucp_mem_unmap(ctx_, memh_);
}

MemMap::MemMap(MemMap&& o) noexcept
    : ctx_(std::exchange(o.ctx_, nullptr)), memh_(std::exchange(o.memh_, nullptr)) {}

MemMap& MemMap::operator=(MemMap&& o) noexcept {
  if (this != &o) {
    if (memh_ != nullptr) ucp_mem_unmap(ctx_, memh_);
    ctx_ = std::exchange(o.ctx_, nullptr);
    memh_ = std::exchange(o.memh_, nullptr);
  }
  return *this;
}

}  // namespace pact::ucx
