// DedupSet and GenerationTracker: a hash table for lookups plus a ring of keys in insertion
// order for FIFO eviction.
#include "engine/dedup.h"

#include <algorithm>

namespace pact::engine {
namespace {

// Appends key to the ring order (sized capacity): returns true and sets *evicted to the oldest
// key when the ring was full and that key must leave the table.
bool pushOrder(std::vector<TransferKey>& order, size_t& next, size_t capacity,
               const TransferKey& key, TransferKey* evicted) {
  if (order.size() < capacity) {
    order.push_back(key);
    return false;
  }
  *evicted = order[next];
  order[next] = key;
  next = (next + 1) % capacity;
  return true;
}

}  // namespace

DedupSet::DedupSet(size_t capacity, std::pmr::memory_resource* nodes)
    : capacity_(std::max<size_t>(capacity, 1)), set_(nodes) {}

bool DedupSet::insert(const TransferKey& key, uint64_t nonce) {
  if (set_.contains(key)) return false;
  TransferKey evicted{};
  if (pushOrder(order_, next_, capacity_, key, &evicted)) set_.erase(evicted);
  set_.emplace(key, nonce);
  return true;
}

bool DedupSet::contains(const TransferKey& key) const { return set_.contains(key); }

const uint64_t* DedupSet::nonceOf(const TransferKey& key) const {
  auto it = set_.find(key);
  return it == set_.end() ? nullptr : &it->second;
}

GenerationTracker::GenerationTracker(size_t capacity, std::pmr::memory_resource* nodes)
    : capacity_(std::max<size_t>(capacity, 1)), highest_(nodes) {}

void GenerationTracker::note(const TransferKey& key) {
  const TransferKey k = slot(key);
  if (auto it = highest_.find(k); it != highest_.end()) {
    it->second = std::max(it->second, key.generation);
    return;
  }
  TransferKey evicted{};
  if (pushOrder(order_, next_, capacity_, k, &evicted)) highest_.erase(evicted);
  highest_.emplace(k, key.generation);
}

bool GenerationTracker::isStale(const TransferKey& key) const {
  auto it = highest_.find(slot(key));
  return it != highest_.end() && key.generation < it->second;
}

}  // namespace pact::engine
