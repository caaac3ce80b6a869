// The UCX tag layout both sides of an NCCL comm share:
//   [tag space: index 17 | generation 5][NCCL tag:20][per-tag sequence:9][piece:12][last:1]
// The tag space names the receive comm on the receiver's worker; every comm between two
// processes shares the same endpoints, so the tag space is what tells them apart. Receives ignore
// the `last` bit, and learn from the sender's tag which piece was the last one.
//
// Tag spaces are recycled (TagSpaces): an index is given back once its receive comm is closed
// and the sender has said goodbye (or its process is gone), and comes back with the next
// generation. A message of an old comm that is still on its way when the index is reused
// carries the old generation, so it cannot match a receive of the new comm (docs/scale.md has the
// argument).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>

#include "common/status.h"

namespace pact::net {

namespace tag {
inline constexpr uint32_t kIndexBits = 17;
inline constexpr uint32_t kGenerationBits = 5;
inline constexpr uint32_t kSpaceBits = kIndexBits + kGenerationBits;
inline constexpr uint32_t kMaxIndex = (1u << kIndexBits) - 1;  // index 0 is never used
inline constexpr uint32_t kTagBits = 20;
inline constexpr uint32_t kSeqBits = 9;
inline constexpr uint32_t kSeqMask = (1u << kSeqBits) - 1;
inline constexpr uint32_t kPieceBits = 12;
inline constexpr uint32_t kMaxPieces = 1u << kPieceBits;
inline constexpr uint64_t kRecvMask = ~uint64_t{1};  // receives accept either `last` value
static_assert(kSpaceBits + kTagBits + kSeqBits + kPieceBits + 1 == 64);

// space: index | generation << kIndexBits (TagSpaces hands these out).
inline uint64_t make(uint32_t space, int nccltag, uint32_t seq, uint32_t piece, bool last) {
  constexpr uint32_t kPieceShift = 1, kSeqShift = kPieceShift + kPieceBits,
                     kTagShift = kSeqShift + kSeqBits, kSpaceShift = kTagShift + kTagBits;
  return (static_cast<uint64_t>(space & ((1u << kSpaceBits) - 1)) << kSpaceShift) |
         (static_cast<uint64_t>(static_cast<uint32_t>(nccltag) & ((1u << kTagBits) - 1)) << kTagShift) |
         (static_cast<uint64_t>(seq & kSeqMask) << kSeqShift) |
         (static_cast<uint64_t>(piece & (kMaxPieces - 1)) << kPieceShift) | (last ? 1u : 0u);
}
inline bool isLast(uint64_t t) { return (t & 1u) != 0; }
inline uint32_t indexOf(uint32_t space) { return space & kMaxIndex; }
inline uint32_t generationOf(uint32_t space) { return space >> kIndexBits; }
}  // namespace tag

// The tag spaces of one worker (one device context): taken by each new receive comm, given back
// once nothing can match them any more. A given-back index is reused before a new one is minted
// (so the live indices stay dense), oldest first, each time with the next generation.
// Thread-safe.
class TagSpaces {
 public:
  TagSpaces();
  // A free space, or kNoResource when kMaxIndex receive comms are open at once.
  Result<uint32_t> take();
  void give(uint32_t space);
  size_t live() const;
  uint64_t recycled() const;  // spaces given back so far

 private:
  mutable std::mutex mu_;
  // Per index (1 .. minted_), laid out as a space: the generation its next use gets (the space's
  // generation bits) and, while the index is free, the next free index (its index bits; 0 = none).
  // One array for every index, allocated whole up front and touched only as indices are minted:
  // a burst of 100,000 comms leaves 4 bytes per index it used, not bookkeeping scattered through
  // the heap that pins the pages the burst's comms used.
  std::unique_ptr<uint32_t[]> slots_;
  uint32_t minted_ = 0;
  uint32_t head_ = 0, tail_ = 0;  // the free indices, oldest given back first
  size_t live_ = 0;
  uint64_t recycled_ = 0;
};

}  // namespace pact::net
