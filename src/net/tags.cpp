#include "net/tags.h"

#include <string>

namespace pact::net {

Result<uint32_t> TagSpaces::take() {
  std::lock_guard lock(mu_);
  uint32_t index;
  if (!free_.empty()) {
    index = free_.front();
    free_.pop_front();
  } else if (generation_.size() < tag::kMaxIndex) {
    index = static_cast<uint32_t>(generation_.size() + 1);
    generation_.push_back(0);
  } else {
    return Error{Status::kNoResource, "all " + std::to_string(tag::kMaxIndex) +
                                          " receive tag spaces are held by open comms"};
  }
  ++live_;
  return index | (static_cast<uint32_t>(generation_[index - 1]) << tag::kIndexBits);
}

void TagSpaces::give(uint32_t space) {
  std::lock_guard lock(mu_);
  const uint32_t index = tag::indexOf(space);
  if (index == 0 || index > generation_.size()) return;
  uint8_t& g = generation_[index - 1];
  g = static_cast<uint8_t>((g + 1) & ((1u << tag::kGenerationBits) - 1));
  free_.push_back(index);
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
