#include "transport/priority.h"

#include <mutex>
#include <unordered_map>

namespace pact::transport {

std::shared_ptr<PeerGate> PeerGate::forPeer(uint64_t peerProcess) {
  static std::mutex mu;
  static auto* gates = new std::unordered_map<uint64_t, std::weak_ptr<PeerGate>>();  // never freed:
  // a lane set may drop its gate during static destruction
  std::lock_guard lock(mu);
  auto& w = (*gates)[peerProcess];
  if (auto g = w.lock()) return g;
  std::erase_if(*gates, [](const auto& e) { return e.second.expired(); });
  auto g = std::make_shared<PeerGate>();
  (*gates)[peerProcess] = g;
  return g;
}

}  // namespace pact::transport
