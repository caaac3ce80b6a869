#include "net/hub.h"

#include "common/log.h"

namespace pact::net {

void Hub::drainRange(const Comm* comm, uintptr_t base, size_t size) {
  constexpr auto kDrainLimit = std::chrono::milliseconds(200);
  auto busy = [&] {
    bool any = false;
    requests_->forEachInUse([&](Request& r) {
      if ((r.comm != nullptr && r.comm != comm) || r.peerDead) return;
      for (const Part& p : r.parts) {
        const auto a = reinterpret_cast<uintptr_t>(p.data);
        any = any || (p.ucxRequest != nullptr && !p.done && a < base + size && a + p.size > base);
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

}  // namespace pact::net
