// The UCX tag layout both sides of an NCCL comm share:
//   [tag space: index 17 | generation 5][NCCL tag:20][per-tag sequence:9][piece:12][last:1]
// The tag space names the receive comm on the receiver's worker; every comm between two
// processes shares the same endpoints, so the tag space is what tells them apart. Receives ignore
// the `last` bit, and learn from the sender's tag which piece was the last one. Piece index
// kSealPiece is the message's seal (transport/seal.h), so a message has at most 4,095 pieces.
//
// A message the receiver already consumed may arrive again (PACT_FAULT dup, a re-send whose first
// copy was not lost after all). Such a copy waits in UCX's unexpected queue and, 512 messages of
// its tag later, would match the receive of the message that reuses its sequence number. The
// receive comm drains them (RecvComm::drainStale): when a tag's count enters a block of 64
// sequence numbers, the two blocks behind it (1 to 128 messages back, every one of them posted
// already: a message that still arrives for one finds its receive, and what waits unexpected
// there is a stale copy) are probed and whatever waits there is received and dropped. Each block
// is drained twice, as the count passes the next two, so a copy up to 64 messages late (it
// follows its original on the same endpoint) is caught long before its sequence number comes
// round again. The same sequence numbers 512 on are a later lap: a sender more than 384
// messages of a tag ahead of its receiver would have those drained, as one 512 ahead would
// already have them matched by the wrong receive. NCCL keeps its sender 8 steps ahead at most;
// the plugin itself does not hold a sender back (an eager send completes without its receiver),
// so the bound is the caller's, as the 512-message lap always was.
//
// Tag spaces are recycled (TagSpaces): an index is given back once its receive comm is closed
// and the sender has said goodbye (or its process is gone), and is handed out again round-robin,
// after every other index, with the generation of the cursor's next lap. A message of an old comm
// that is still on its way when the index is reused carries the old generation, so it cannot
// match a receive of the new comm (docs/scale.md has the argument).
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
inline constexpr uint32_t kSealPiece = kMaxPieces - 1;      // the seal's piece index
inline constexpr uint32_t kMaxDataPieces = kMaxPieces - 1;  // pieces of one message
inline constexpr uint32_t kBlockBits = 6;                   // a drain block: 64 sequence numbers
inline constexpr uint32_t kDrainBlocks = 2;                 // drained behind the current one
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
// Every message of a tag whose sequence number lies in block `block` (0..7) of a tag space, as a
// probe's tag and mask.
inline uint64_t blockTag(uint32_t space, int nccltag, uint32_t block) {
  return make(space, nccltag, block << kBlockBits, 0, false);
}
inline uint64_t blockMask() {
  const uint64_t seqKept = uint64_t{(1u << kSeqBits) - (1u << kBlockBits)} << (1 + kPieceBits);
  return ~((uint64_t{1} << (1 + kPieceBits + kSeqBits)) - 1) | seqKept;
}
// Every message of a tag space, as a probe's tag and mask.
inline uint64_t spaceTag(uint32_t space) { return make(space, 0, 0, 0, false); }
inline uint64_t spaceMask() { return ~((uint64_t{1} << (64 - kSpaceBits)) - 1); }
inline uint32_t indexOf(uint32_t space) { return space & kMaxIndex; }
inline uint32_t generationOf(uint32_t space) { return space >> kIndexBits; }
}  // namespace tag

// The tag spaces of one worker (one device context): taken by each new receive comm, given back
// once nothing can match them any more. Handed out round-robin over indices 1 .. `indices`: the
// next free index after the last one taken, so an index given back comes round again only after
// every other one has; each time the cursor wraps, the generation of what it hands out goes up by
// one. An index and generation pair therefore recurs only after 32 full laps (docs/scale.md).
// One bit per index (16 KiB, allocated up front). Thread-safe.
class TagSpaces {
 public:
  // indices: 1 .. tag::kMaxIndex (PACT_TAG_SPACES).
  explicit TagSpaces(uint32_t indices = tag::kMaxIndex);
  // A free space, or kNoResource when `indices` receive comms are open at once.
  Result<uint32_t> take();
  void give(uint32_t space);  // an index that is not taken is ignored
  size_t live() const;
  uint64_t recycled() const;  // spaces given back so far
  uint32_t capacity() const { return indices_; }

 private:
  bool isLive(uint32_t index) const { return (live_bits_[index / 64] >> (index % 64)) & 1u; }
  void flip(uint32_t index) { live_bits_[index / 64] ^= uint64_t{1} << (index % 64); }

  mutable std::mutex mu_;
  const uint32_t indices_;
  std::unique_ptr<uint64_t[]> live_bits_;  // bit i: index i is held by a receive comm
  uint32_t cursor_ = 0;                    // the index taken last
  uint32_t lap_ = 0;                       // the generation of what the cursor hands out now
  size_t live_ = 0;
  uint64_t recycled_ = 0;
};

}  // namespace pact::net
