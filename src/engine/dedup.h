// Exactly-once bookkeeping of the transfer engine: which transfer identities already finished
// (DedupSet) and the newest generation of each transfer (GenerationTracker), so a duplicate or a
// stale retry is recognized and dropped instead of being applied twice. Both take the one
// TransferKey (common/transfer_key.h) and look only at its identity.
//
// Both are bounded FIFOs: when full, the entry noted first is forgotten to make room. A forgotten
// identity is unknown again (not a duplicate, not stale), so the owner sizes the capacity above
// the number of transfers that can still be retried. Capacity 0 is taken as 1.
//
// Not internally synchronized: the engine holds its lock. Construction is cheap; memory grows
// with use up to capacity entries (one hash node and one ring slot each) and no further. nodes:
// where the hash nodes come from (a pool: a full table that forgets one entry per new one then
// allocates nothing).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory_resource>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/transfer_key.h"

namespace pact::engine {

// Remembers the identities (request_id, transfer_id, generation) of finished transfers, each
// with the nonce of the send that finished it (control.h: a copy of that send's frames is told
// apart from a second send of the key).
class DedupSet {
 public:
  explicit DedupSet(size_t capacity, std::pmr::memory_resource* nodes = std::pmr::get_default_resource());

  // Remembers the identity; false (and nothing changes) if it is already present.
  bool insert(const TransferKey& key, uint64_t nonce = 0);
  bool contains(const TransferKey& key) const;
  // The nonce noted with the identity, or null when it is not (or no longer) known.
  const uint64_t* nonceOf(const TransferKey& key) const;
  size_t size() const { return set_.size(); }
  size_t capacity() const { return capacity_; }

 private:
  size_t capacity_;
  std::pmr::unordered_map<TransferKey, uint64_t, IdentityHash, SameTransfer> set_;
  std::vector<TransferKey> order_;  // insertion order, a ring once full; order_[next_] is the oldest
  size_t next_ = 0;
};

// The highest generation noted per (request_id, transfer_id); a lower one is stale. Raising the
// generation of a known transfer does not move it in the FIFO (it stays as old as its first note).
class GenerationTracker {
 public:
  explicit GenerationTracker(size_t capacity,
                             std::pmr::memory_resource* nodes = std::pmr::get_default_resource());

  // Keeps max(key.generation, what was noted before) for the transfer.
  void note(const TransferKey& key);
  // key.generation < the highest noted for the transfer; false for one not (or no longer) known.
  bool isStale(const TransferKey& key) const;
  size_t size() const { return highest_.size(); }
  size_t capacity() const { return capacity_; }

 private:
  // The table's key: the transfer with generation (and epoch) 0, the highest generation its value.
  static TransferKey slot(const TransferKey& k) { return {k.requestId, k.transferId, 0, 0}; }
  size_t capacity_;
  std::pmr::unordered_map<TransferKey, uint32_t, IdentityHash, SameTransfer> highest_;
  std::vector<TransferKey> order_;  // as in DedupSet
  size_t next_ = 0;
};

}  // namespace pact::engine
