#include "net/parts.h"

#include <string>

#include "net/comm.h"
#include "ucx/ucx_status.h"

namespace pact::net {

telemetry::ErrorKind ucxErrorKind(ucs_status_t st) {
  switch (st) {
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_NOT_CONNECTED:
      return telemetry::ErrorKind::kPeerLost;
    default:
      return telemetry::ErrorKind::kTransport;
  }
}

void completePart(Part* p, ucs_status_t st, size_t length) {
  Request* owner = p->owner;
  // Rail failover (transport/rail_set.h): a part that failed with its rail may be sent again on another
  // (a send: the comm has it now) or be one copy of a piece among others (a receive: a cancel).
  Failover f = Failover::kNo;
  // A receive this side cancelled (its piece landed on another rail) is not a failure.
  const bool failed = st != UCS_OK && !p->canceled && (owner->isSend || st != UCS_ERR_CANCELED);
  if (failed && owner->comm != nullptr) f = owner->comm->failover(p);
  if (f == Failover::kResent) {
    p->ucxRequest = nullptr;
    return;
  }
  if (f == Failover::kCopyLost) {
    p->canceled = true;
    st = UCS_ERR_CANCELED;
  }
  p->ucxRequest = nullptr;
  p->done = true;
  p->status = st == UCS_OK ? Status::kOk : ucx::toStatus(st);
  p->size = length;
  Request* r = owner;
  --r->pending;
  if (p->stranded) --r->stranded;
  if (r->comm == nullptr) {  // orphaned: its comm is closed
    if (r->done()) r->slab->release(r);
    return;
  }
  r->comm->partDone(p);
  if (p->status != Status::kOk && p->status != Status::kCanceled)  // the endpoint failed
    r->comm->failPeer(p->status, ucxErrorKind(st), std::string(r->isSend ? "send" : r->flush ? "GPU flush read" : "receive") +
                                     " failed: " + ucs_status_string(st));
}

void track(Part* p, void* ret) {
  if (ret == nullptr) {  // sends only: receives never complete immediately (NO_IMM_CMPL)
    completePart(p, UCS_OK, p->size);
  } else if (UCS_PTR_IS_ERR(ret)) {
    completePart(p, UCS_PTR_STATUS(ret), 0);
  } else if (!p->done) {
    p->ucxRequest = ret;
  }
}

namespace {
void onSendDone(void* request, ucs_status_t st, void* user) {
  auto* p = static_cast<Part*>(user);
  const bool owned = p->ucxOwned;
  completePart(p, st, p->size);
  if (owned) ucx::freeRequest(request);
}
}  // namespace

void sendPart(Part* p, ucx::Endpoint& ep, const void* data, const MemHandle* mh) {
  ucp_request_param_t param = sendParam(onSendDone, p);
  if (p->ucxOwned) param.op_attr_mask &= ~UCP_OP_ATTR_FIELD_REQUEST;
  if (mh != nullptr) setMemh(&param, mh, p);
  track(p, ep.tagSend(data, p->size, p->ucxTag, param));
}

ucp_request_param_t partParam(Part* p) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_REQUEST | UCP_OP_ATTR_FIELD_CALLBACK |
                       UCP_OP_ATTR_FIELD_USER_DATA;
  param.request = p->owner->ucxHandle(p);
  param.user_data = p;
  return param;
}

ucp_request_param_t sendParam(ucp_send_nbx_callback_t onDone, Part* p) {
  ucp_request_param_t param = partParam(p);
  param.cb.send = onDone;
  return param;
}

void setMemh(ucp_request_param_t* param, const MemHandle* mh, const Part* p) {
  if (mh == nullptr || p->rail >= mh->regions.size()) return;
  const auto& region = mh->regions[p->rail];
  if (region->covers(reinterpret_cast<uintptr_t>(p->data), p->size, region->type)) {
    param->op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH | UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    param->memh = region->map.get();
    param->memory_type = region->ucxType;
  }
}

}  // namespace pact::net
