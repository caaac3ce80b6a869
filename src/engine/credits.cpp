#include "engine/credits.h"

#include <algorithm>

namespace pact::engine {

uint64_t CreditLedger::grantFor(uint64_t peer) const {
  auto it = peers_.find(peer);
  return it != peers_.end() && it->second.share != kUnlimited ? it->second.share : total_;
}

bool CreditLedger::fits(uint64_t peer, uint64_t bytes) const {
  if (total_ != kUnlimited && (bytes > total_ || staged_ > total_ - bytes)) return false;
  auto it = peers_.find(peer);
  if (it == peers_.end() || it->second.share == kUnlimited) return true;
  const Share& s = it->second;
  return bytes <= s.share && s.staged <= s.share - bytes;
}

void CreditLedger::take(uint64_t peer, uint64_t bytes) {
  staged_ += bytes;
  peers_[peer].staged += bytes;
  peak_ = std::max(peak_, staged_);
}

void CreditLedger::give(uint64_t peer, uint64_t bytes) {
  staged_ -= std::min(staged_, bytes);
  auto it = peers_.find(peer);
  if (it != peers_.end()) it->second.staged -= std::min(it->second.staged, bytes);
}

uint64_t CreditLedger::staged(uint64_t peer) const {
  auto it = peers_.find(peer);
  return it == peers_.end() ? 0 : it->second.staged;
}

}  // namespace pact::engine
