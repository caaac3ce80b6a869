#include "net/fence.h"

namespace pact::net {

Fence& Fence::process() {
  static auto* f = new Fence();  // never destroyed: comms may judge during static destruction
  return *f;
}

void Fence::setEpoch(uint64_t epoch) {
  epoch_.store(epoch, std::memory_order_release);
  active_.store(true, std::memory_order_release);
}

void Fence::setHook(CommitHook hook) {
  {
    std::lock_guard lock(mu_);
    hook_ = hook ? std::make_shared<const CommitHook>(std::move(hook)) : nullptr;
  }
  active_.store(true, std::memory_order_release);
}

bool Fence::hasHook() const {
  std::lock_guard lock(mu_);
  return hook_ != nullptr;
}

int Fence::judge(const MessageFacts& m) const {
  std::shared_ptr<const CommitHook> h;
  {
    std::lock_guard lock(mu_);
    h = hook_;
  }
  return h ? (*h)(m) : 0;
}

}  // namespace pact::net
