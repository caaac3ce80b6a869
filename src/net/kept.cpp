#include "net/kept.h"

#include <algorithm>

namespace pact::net {

bool KeptCopies::keep(uint32_t tag, uint32_t seq, const void* data, size_t size, const transport::AckSink& acks) {
  if (bytes_ + size > kMaxBytes) prune(acks);
  if (bytes_ + size > kMaxBytes) return false;
  Copy& c = copies_.emplace_back();
  c.tag = tag;
  c.seq = seq;
  if (!spare_.empty()) {
    c.bytes = std::move(spare_.back());
    spare_.pop_back();
  }
  const auto* p = static_cast<const uint8_t*>(data);
  c.bytes.assign(p, p + size);
  bytes_ += size;
  return true;
}

void KeptCopies::prune(const transport::AckSink& acks) {
  sincePrune_ = 0;
  prunedAt_ = now();
  std::erase_if(copies_, [&](Copy& c) {
    if (!acks.acked(c.tag, c.seq)) return false;
    bytes_ -= c.bytes.size();
    if (spare_.size() < 64) spare_.push_back(std::move(c.bytes));
    return true;
  });
}

}  // namespace pact::net
