#include "net/tags.h"

#include <algorithm>
#include <string>

namespace pact::net {

TagSpaces::TagSpaces(uint32_t indices)
    : indices_(std::clamp<uint32_t>(indices, 1, tag::kMaxIndex)),
      live_bits_(new uint64_t[indices_ / 64 + 1]()) {}

Result<uint32_t> TagSpaces::take() {
  std::lock_guard lock(mu_);
  if (live_ == indices_) {
    return Error{Status::kNoResource, "all " + std::to_string(indices_) +
                                          " receive tag spaces are held by open comms"};
  }
  // A free index exists, so this ends within one lap.
  do {
    if (++cursor_ > indices_) {
      cursor_ = 1;
      lap_ = (lap_ + 1) & ((1u << tag::kGenerationBits) - 1);
    }
  } while (isLive(cursor_));
  flip(cursor_);
  ++live_;
  return cursor_ | (lap_ << tag::kIndexBits);
}

void TagSpaces::give(uint32_t space) {
  std::lock_guard lock(mu_);
  const uint32_t index = tag::indexOf(space);
  if (index == 0 || index > indices_ || !isLive(index)) return;
  flip(index);
  --live_;
  ++recycled_;
}

uint64_t TagSpaces::recycled() const {
  std::lock_guard lock(mu_);
  return recycled_;
}

size_t TagSpaces::live() const {
  std::lock_guard lock(mu_);
  return live_;
}

}  // namespace pact::net
