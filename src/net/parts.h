// The completion plumbing of a request's parts (request.h), shared by the comms' data path
// (comm.cpp, recv_comm.cpp) and the GPU flush reads (flush.cpp); parts.cpp. Device mutex held, as for every part.
#pragma once

#include <ucp/api/ucp.h>

#include "net/request.h"
#include "telemetry/counters.h"

namespace pact::net {

// What a UCX error on an endpoint or operation says of the peer: gone (connection reset, endpoint
// timeout, unreachable, not connected), or a transport fault.
telemetry::ErrorKind ucxErrorKind(ucs_status_t st);
// A part's UCX operation ended with st, having moved length bytes: the request's bookkeeping, the
// comm's partDone, and a failure of the peer's endpoint failing the comm.
void completePart(Part* p, ucs_status_t st, size_t length);
// The UCX call for one part returned: immediate completion, error, or a request UCX now owns.
// The part was counted in its request's `pending` (and marked not done) before the call. UCX may
// already have run the callback inside the call (a receive matching a message that had arrived):
// then the part is done (UCX's request is the part's own memory: nothing to free).
void track(Part* p, void* ret);
// The parameters of part p's operation: its own request memory (Request::ucxHandle) and p as
// the callback's user data; the caller sets the callback.
ucp_request_param_t partParam(Part* p);
// The parameters of a send-like operation (send, get) completing into onDone(part).
ucp_request_param_t sendParam(ucp_send_nbx_callback_t onDone, Part* p);
struct MemHandle;
// Sends part p's p->size bytes from data (the part's own, or a copy of them) with its tag on ep;
// mh (may be null): the registration data lies in.
void sendPart(Part* p, ucx::Endpoint& ep, const void* data, const MemHandle* mh);
// Part p's registration and memory type into param when mh's region on p's rail covers it (UCX
// would otherwise look the address up in its memory-type cache, which takes memory it did not
// see allocated for host).
void setMemh(ucp_request_param_t* param, const MemHandle* mh, const Part* p);

}  // namespace pact::net
