// DedupSet and GenerationTracker: a hash table for lookups plus a ring of keys in insertion
// order for FIFO eviction.
#include "engine/dedup.h"

#include <algorithm>

namespace pact::engine {
namespace {

// splitmix64's finalizer (xor-shift / multiply rounds): every input bit affects every output
// bit, so ids that differ only in high bits or by small steps still spread over the buckets.
uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

// Appends key to the ring order (sized capacity): returns true and sets *evicted to the oldest
// key when the ring was full and that key must leave the table.
template <typename Key>
bool pushOrder(std::vector<Key>& order, size_t& next, size_t capacity, const Key& key,
               Key* evicted) {
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

size_t DedupSet::KeyHash::operator()(const Key& k) const {
  return static_cast<size_t>(mix(mix(mix(k.requestId) ^ k.transferId) ^ k.generation));
}

DedupSet::DedupSet(size_t capacity) : capacity_(std::max<size_t>(capacity, 1)) {}

bool DedupSet::insert(uint64_t requestId, uint64_t transferId, uint32_t generation) {
  const Key key{requestId, transferId, generation};
  if (set_.contains(key)) return false;
  Key evicted{};
  if (pushOrder(order_, next_, capacity_, key, &evicted)) set_.erase(evicted);
  set_.insert(key);
  return true;
}

bool DedupSet::contains(uint64_t requestId, uint64_t transferId, uint32_t generation) const {
  return set_.contains(Key{requestId, transferId, generation});
}

size_t GenerationTracker::KeyHash::operator()(const Key& k) const {
  return static_cast<size_t>(mix(mix(k.requestId) ^ k.transferId));
}

GenerationTracker::GenerationTracker(size_t capacity) : capacity_(std::max<size_t>(capacity, 1)) {}

void GenerationTracker::note(uint64_t requestId, uint64_t transferId, uint32_t generation) {
  const Key key{requestId, transferId};
  if (auto it = highest_.find(key); it != highest_.end()) {
    it->second = std::max(it->second, generation);
    return;
  }
  Key evicted{};
  if (pushOrder(order_, next_, capacity_, key, &evicted)) highest_.erase(evicted);
  highest_.emplace(key, generation);
}

bool GenerationTracker::isStale(uint64_t requestId, uint64_t transferId,
                                uint32_t generation) const {
  auto it = highest_.find(Key{requestId, transferId});
  return it != highest_.end() && generation < it->second;
}

}  // namespace pact::engine
