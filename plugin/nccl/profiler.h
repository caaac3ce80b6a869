// NCCL's profiler (net v10+), the plugin face's side: an event per isend and per receive buffer
// NCCL gave a handle, started with that handle (the proxy step, its parent) and ended with an
// update-and-stop carrying how the message travelled once test reports the request done or
// failed (include/pact/nccl_ext.h: PACT_NET_PROFILER_ID, pact_net_event_t). The handle slots
// are NULL before each start: a profiler that has net events off leaves them so and stop is
// still called, as NCCL asks. The callback is process-wide: NCCL passes the same one to every
// init.
#pragma once

#include <cstddef>

#include "abi/net_common.h"
#include "net/request.h"

namespace pact::plugin::profiler {

// init's callback (v10+; null: none). The last non-null one stays.
void set(ncclProfilerCallback_t cb);
// Whether a callback is set (test() then asks the core for the request's ending).
bool active();
// After isend/irecv posted `request` on comm: starts buffer i's event when phandles[i] is set.
void start(void* request, void* comm, bool send, int n, void* const* phandles, const size_t* sizes);
// A request ended (Net::test filled ending): stops its open events. sizes: what test reported
// (may be null), result: test's result.
void stop(const net::Ending& ending, const int* sizes, ncclResult_t result);

}  // namespace pact::plugin::profiler
