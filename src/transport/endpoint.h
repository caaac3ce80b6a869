// SharedEndpoint: a UCX endpoint one or more users hold. The plugin's comms share one per (rail of
// their device context, lane, peer worker): every comm to a peer process rides the same
// endpoints, told apart by tag space (DeviceCtx::endpoint). UCX's error callback marks it failed
// and every user sees that on its next look. The last user's release starts a background close
// (DeviceCtx); an endpoint made with own() closes when its one user drops it.
#pragma once

#include <memory>

#include "ucx/worker.h"

namespace pact::transport {

struct SharedEndpoint {
  ucx::Endpoint ep;
  ucs_status_t error = UCS_OK;  // set by UCX's error callback (device mutex held)
  // A user let go with operations still in flight or its peer gone: the last release closes
  // forcibly (what UCX still holds on it fails) rather than waiting for a flush.
  bool forceClose = false;
  // A shared endpoint's first flush (DeviceCtx::endpoint): it ends once UCX has wired the
  // endpoint up. A comm that waits for it sends nothing before (Lanes::awaitWireUp): UCX 1.13
  // aborts when a connection fails while its wire-up messages wait behind the first sends
  // (wireup_ep.c:241).
  ucx::Pending wiring;
  bool wired = false;
  bool failed() const { return error != UCS_OK; }
  bool wiredUp() {
    if (!wired && (failed() || wiring.done())) wired = true;  // a failed one: its sends fail over
    return wired;
  }

  // An endpoint with one owner (the engine's lanes): closed (forced, bounded) when dropped.
  static std::shared_ptr<SharedEndpoint> own(ucx::Endpoint ep) {
    auto e = std::make_shared<SharedEndpoint>();
    e->ep = std::move(ep);
    return e;
  }
};

}  // namespace pact::transport
