#include "transport/comm.h"

#include "common/log.h"
#include "ucx/ucx_status.h"

namespace pact::transport {

namespace {

constexpr auto kDrainLimit = std::chrono::milliseconds(200);

void completePart(Part* p, ucs_status_t st, size_t length) {
  p->ucxRequest = nullptr;
  p->done = true;
  p->status = ucx::toStatus(st);
  p->size = length;
  Request* r = p->owner;
  --r->pending;
  if (r->comm == nullptr) return;  // orphaned: its comm is closed
  if (p->status != Status::kOk && p->status != Status::kCanceled)
    r->comm->fail(p->status, std::string(r->isSend ? "send" : "receive") + " failed: " +
                                 ucs_status_string(st));
}

void onSendDone(void* request, ucs_status_t st, void* user) {
  auto* p = static_cast<Part*>(user);
  completePart(p, st, p->size);
  ucp_request_free(request);
}

void onRecvDone(void* request, ucs_status_t st, const ucp_tag_recv_info_t* info, void* user) {
  auto* p = static_cast<Part*>(user);
  completePart(p, st, st == UCS_OK ? info->length : 0);
  ucp_request_free(request);
}

void onEndpointError(void* arg, ucp_ep_h, ucs_status_t st) {
  static_cast<Comm*>(arg)->fail(Status::kRemoteError,
                                std::string("ucx endpoint error: ") + ucs_status_string(st));
}

// Starts a UCX operation for one part: immediate completion, error, or a request UCX now owns.
void track(Part* p, void* ret) {
  p->owner->pending++;
  p->done = false;
  if (ret == nullptr) {  // sends only: receives never complete immediately (NO_IMM_CMPL)
    completePart(p, UCS_OK, p->size);
  } else if (UCS_PTR_IS_ERR(ret)) {
    completePart(p, UCS_PTR_STATUS(ret), 0);
  } else {
    p->ucxRequest = ret;
  }
}

}  // namespace

uint64_t makeTag(uint32_t tagSpace, int tag, uint32_t seq) {
  return (static_cast<uint64_t>(tagSpace & 0xFFFFFu) << 44) |
         (static_cast<uint64_t>(static_cast<uint32_t>(tag)) << 12) | (seq & 0xFFFu);
}

Comm::Comm(std::shared_ptr<DeviceCtx> dev, ControlSocket sock, size_t poolSize, bool isSend,
           std::string peer)
    : dev_(std::move(dev)), sock_(std::move(sock)), pool_(std::make_unique<RequestPool>(poolSize)), isSend_(isSend),
      peer_(std::move(peer)) {
  dev_->liveComms++;
}

Comm::~Comm() {
  magic = 0;
  dev_->liveComms--;
}

void Comm::fail(Status s, const std::string& why) {
  if (error_ != Status::kOk) return;
  error_ = s;
  PACT_WARN("%s comm %p to %s on %s failed: %s", isSend_ ? "send" : "recv", static_cast<void*>(this),
            peer_.c_str(), dev_->info().name.c_str(), why.c_str());
}

void Comm::checkPeer() {
  const auto t = now();
  if (t < nextLivenessCheck_) return;
  nextLivenessCheck_ = t + dev_->params().liveness_interval;
  if (byeReceived_) {
    if (t - byeAt_ > dev_->params().peer_timeout)
      fail(Status::kRemoteError, "peer closed the comm with this request unmatched");
    return;
  }
  ignore(sock_.flush());
  for (;;) {
    auto f = sock_.poll();
    if (!f.ok()) {
      // Drain what UCX already delivered before declaring the loss.
      dev_->worker().progress();
      fail(Status::kRemoteError, f.error().message + " without goodbye (peer process died?)");
      return;
    }
    if (!f.value()) return;
    if (f.value()->header.type == wire::FrameType::kBye) {
      byeReceived_ = true;
      byeAt_ = t;
      return;
    }
  }
}

Status Comm::test(Request* r, bool* done, int* sizes) {
  *done = false;
  if (!r->done()) dev_->worker().progress();
  if (!r->done()) {
    if (error_ == Status::kOk) checkPeer();
    if (error_ != Status::kOk && !aborted_) {
      aborted_ = true;
      abortInFlight();
    }
    return isError(error_) ? error_ : Status::kOk;
  }
  Status result = Status::kOk;
  for (int i = 0; i < r->nparts; ++i) {
    const Part& p = r->parts[static_cast<size_t>(i)];
    if (p.status != Status::kOk && result == Status::kOk) result = p.status;
    if (sizes) sizes[i] = static_cast<int>(std::min<size_t>(p.size, INT32_MAX));
  }
  pool_->release(r);
  if (result != Status::kOk) return result == Status::kCanceled ? Status::kRemoteError : result;
  *done = true;
  return Status::kOk;
}

void Comm::drainParts() {
  const auto deadline = now() + kDrainLimit;
  auto busy = [this] {
    bool any = false;
    pool_->forEachInUse([&](Request& r) { any = any || !r.done(); });
    return any;
  };
  while (busy() && now() < deadline) dev_->worker().progress();
  if (busy()) {
    PACT_INFO("comm %p: UCX still holds operations after close; their slots outlive the comm",
              static_cast<void*>(this));
    pool_->forEachInUse([](Request& r) { r.comm = nullptr; });
    dev_->adoptOrphans(std::move(pool_));
  }
}

void Comm::sayBye() {
  if (error_ == Status::kOk) ignore(sock_.send(wire::encodeBye()));
}

// ---- send -------------------------------------------------------------------------------------

SendComm::SendComm(std::shared_ptr<DeviceCtx> dev, ControlSocket sock, uint32_t tagSpace,
                   std::string peer)
    : Comm(std::move(dev), std::move(sock), kSendPoolSize, true, std::move(peer)),
      tagSpace_(tagSpace) {}

SendComm::~SendComm() = default;

Status SendComm::connectEndpoint(const std::vector<uint8_t>& remoteWorkerAddress) {
  auto ep = ucx::Endpoint::create(dev_->worker().get(), remoteWorkerAddress, onEndpointError, this,
                                 &dev_->peerFailureSupported);
  if (!ep.ok()) {
    fail(ep.status(), ep.error().message);
    return ep.status();
  }
  ep_ = std::move(ep.value());
  return Status::kOk;
}

Status SendComm::isend(const void* data, size_t size, int tag, MemHandle* mh, Request** out) {
  *out = nullptr;
  if (isError(error_)) return error_;
  Request* r = pool_->acquire(this, true, 1);
  if (r == nullptr) return Status::kOk;  // back-pressure
  Part* p = &r->parts[0];
  p->owner = r;
  p->size = size;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = onSendDone;
  param.user_data = p;
  if (mh != nullptr && mh->region->covers(reinterpret_cast<uintptr_t>(data), size, ucx::MemoryType::kHost)) {
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
    param.memh = mh->region->map.get();
  }
  track(p, ucp_tag_send_nbx(ep_.get(), data, size, makeTag(tagSpace_, tag, nextSeq(tag)), &param));
  *out = r;
  return Status::kOk;
}

void SendComm::abortInFlight() { ep_.close(true); }

void SendComm::shutdown() {
  bool inFlight = false;
  pool_->forEachInUse([&](Request& r) { inFlight = inFlight || !r.done(); });
  sayBye();
  ep_.close(inFlight || isError(error_));
  drainParts();
}

// ---- receive ----------------------------------------------------------------------------------

RecvComm::RecvComm(std::shared_ptr<DeviceCtx> dev, ControlSocket sock, uint32_t tagSpace,
                   std::string peer)
    : Comm(std::move(dev), std::move(sock), kRecvPoolSize, false, std::move(peer)),
      tagSpace_(tagSpace) {}

RecvComm::~RecvComm() = default;

Status RecvComm::irecv(int n, void* const* data, const size_t* sizes, const int* tags,
                       MemHandle* const* mhs, Request** out) {
  *out = nullptr;
  if (isError(error_)) return error_;
  if (n < 1 || n > dev_->params().max_recvs) return Status::kInvalidArgument;
  Request* r = pool_->acquire(this, false, n);
  if (r == nullptr) return Status::kOk;  // back-pressure
  for (int i = 0; i < n; ++i) {
    Part* p = &r->parts[static_cast<size_t>(i)];
    p->owner = r;
    p->size = sizes[i];
    ucp_request_param_t param{};
    // UCX 1.13 leaves recv_info unfilled when a receive completes immediately, so receives
    // always complete through the callback, which carries the real length.
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                         UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    param.cb.recv = onRecvDone;
    param.user_data = p;
    MemHandle* mh = mhs ? mhs[i] : nullptr;
    if (mh != nullptr &&
        mh->region->covers(reinterpret_cast<uintptr_t>(data[i]), sizes[i], ucx::MemoryType::kHost)) {
      param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
      param.memh = mh->region->map.get();
    }
    track(p, ucp_tag_recv_nbx(dev_->worker().get(), data[i], sizes[i],
                              makeTag(tagSpace_, tags[i], nextSeq(tags[i])), ~0ull, &param));
  }
  *out = r;
  return Status::kOk;
}

void RecvComm::abortInFlight() {
  pool_->forEachInUse([this](Request& r) {
    for (int i = 0; i < r.nparts; ++i)
      if (void* req = r.parts[static_cast<size_t>(i)].ucxRequest)
        ucp_request_cancel(dev_->worker().get(), req);
  });
}

void RecvComm::shutdown() {
  abortInFlight();
  drainParts();
  sayBye();
}

}  // namespace pact::transport
