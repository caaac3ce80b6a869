#include "net/hub.h"

#include "common/log.h"

namespace pact::net {

void Hub::drainRange(const Comm* comm, uintptr_t base, size_t size) {
  constexpr auto kDrainLimit = std::chrono::milliseconds(200);
  auto busy = [&] {
    bool any = false;
    const auto t = now();
    requests_->forEachInUse([&](Request& r) {
      if (r.comm != nullptr && r.comm != comm) return;
      // A dead peer's data that was on its way (a TCP socket's backlog) lands within moments of
      // the death being noticed, or UCX ends the operation; past kDrainLimit after the death
      // nothing more comes (and UCX 1.13's shared memory never ends such an operation), so one
      // wait per dead peer, not one per registration.
      if (r.peerDead && t - r.deadAt >= kDrainLimit) return;
      // A receive stranded on a rail that went out (Request::settled) never lands: its rail's
      // connections were reset, and UCX 1.22 never ends it.
      for (const Part& p : r.parts) {
        const auto a = reinterpret_cast<uintptr_t>(p.data);
        any = any || (p.ucxRequest != nullptr && !p.done && !p.stranded && a < base + size && a + p.size > base);
      }
    });
    return any;
  };
  // A cancelled receive whose rendezvous was under way keeps landing bytes until the sender
  // stops (it reads our abort) or its connection fails: bounded.
  const auto deadline = now() + kDrainLimit;
  while (busy() && now() < deadline) dev_->progress();
  if (busy())
    PACT_WARN("deregMr: UCX still holds an operation on %#zx+%zu after %lld ms (device %s)",
              static_cast<size_t>(base), size, static_cast<long long>(kDrainLimit.count()),
              dev_->info().name.c_str());
}

void Hub::sendLate(TimePoint due, std::shared_ptr<transport::SharedEndpoint> ep, uint64_t tag,
                   const void* data, size_t size) {
  auto l = std::make_unique<LateSend>();
  l->due = due;
  l->ep = std::move(ep);
  l->tag = tag;
  l->data.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + size);
  l->inFlight = loose_;
  late_.push_back(std::move(l));
}

void Hub::onLateSent(void* request, ucs_status_t, void* user) {
  std::unique_ptr<LateSend> l(static_cast<LateSend*>(user));
  --*l->inFlight;
  ucx::freeRequest(request);
}

void Hub::postLate() {
  const auto t = now();
  std::erase_if(late_, [&](std::unique_ptr<LateSend>& l) {
    if (l->due > t) return false;
    if (l->ep->ep.get() == nullptr) return true;  // closed under a failure of the peer
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send = onLateSent;
    param.user_data = l.get();
    void* r = l->ep->ep.tagSend(l->data.data(), l->data.size(), l->tag, param);
    if (r != nullptr && !UCS_PTR_IS_ERR(r)) {
      ++*loose_;
      (void)l.release();  // onLateSent owns it now
    }
    return true;
  });
}

}  // namespace pact::net
