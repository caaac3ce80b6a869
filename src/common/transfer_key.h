// TransferKey: the one identity of an engine transfer, used by the protocol, its codecs, its
// tables and the trace. A transfer is (request_id, transfer_id, generation); the model epoch it
// carries is checked against the receiver's, but a duplicate of another epoch is the same
// transfer. ByIdentity orders keys that way for the protocol's maps; IdentityHash hashes them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <tuple>

namespace pact {

struct TransferKey {
  uint64_t requestId = 0;
  uint64_t transferId = 0;
  uint64_t modelEpoch = 0;
  uint32_t generation = 0;
  bool operator==(const TransferKey&) const = default;
  auto identity() const { return std::tie(requestId, transferId, generation); }
  bool sameTransfer(const TransferKey& o) const { return identity() == o.identity(); }
};

struct ByIdentity {
  bool operator()(const TransferKey& a, const TransferKey& b) const {
    return a.identity() < b.identity();
  }
};

// splitmix64's finalizer over the identity: every input bit affects every output bit, so ids
// that differ only in high bits or by small steps still spread over the buckets.
struct IdentityHash {
  static uint64_t mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
  }
  size_t operator()(const TransferKey& k) const {
    return static_cast<size_t>(mix(mix(mix(k.requestId) ^ k.transferId) ^ k.generation));
  }
};
struct SameTransfer {
  bool operator()(const TransferKey& a, const TransferKey& b) const { return a.sameTransfer(b); }
};

}  // namespace pact
