#include "net/tags.h"

#include <string>

namespace pact::net {

// Default-initialised: the pages stay untouched until an index is minted.
TagSpaces::TagSpaces() : slots_(new uint32_t[tag::kMaxIndex + 1]) {}

Result<uint32_t> TagSpaces::take() {
  std::lock_guard lock(mu_);
  uint32_t index;
  if (head_ != 0) {
    index = head_;
    head_ = tag::indexOf(slots_[index]);
    if (head_ == 0) tail_ = 0;
  } else if (minted_ < tag::kMaxIndex) {
    index = ++minted_;
    slots_[index] = 0;
  } else {
    return Error{Status::kNoResource, "all " + std::to_string(tag::kMaxIndex) +
                                          " receive tag spaces are held by open comms"};
  }
  ++live_;
  return index | (tag::generationOf(slots_[index]) << tag::kIndexBits);
}

void TagSpaces::give(uint32_t space) {
  std::lock_guard lock(mu_);
  const uint32_t index = tag::indexOf(space);
  if (index == 0 || index > minted_) return;
  const uint32_t next = (tag::generationOf(slots_[index]) + 1) & ((1u << tag::kGenerationBits) - 1);
  slots_[index] = next << tag::kIndexBits;  // the last free index: no next
  if (tail_ != 0)
    slots_[tail_] = (slots_[tail_] & ~tag::kMaxIndex) | index;
  else
    head_ = index;
  tail_ = index;
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
