// The UCX tag layout both sides of an NCCL comm share:
// [receiver tag space:16][NCCL tag:20][per-tag sequence:10][piece:17][last:1].
// Receives ignore the `last` bit, and learn from the sender's tag which piece was the last one.
#pragma once

#include <cstdint>

namespace pact::net {

namespace tag {
inline constexpr uint32_t kSpaces = 1u << 16;
inline constexpr uint32_t kTagBits = 20;
inline constexpr uint32_t kSeqMask = (1u << 10) - 1;
inline constexpr uint32_t kMaxPieces = 1u << 17;
inline constexpr uint64_t kRecvMask = ~uint64_t{1};  // receives accept either `last` value

inline uint64_t make(uint32_t space, int nccltag, uint32_t seq, uint32_t piece, bool last) {
  return (static_cast<uint64_t>(space & 0xFFFFu) << 48) |
         (static_cast<uint64_t>(static_cast<uint32_t>(nccltag) & 0xFFFFFu) << 28) |
         (static_cast<uint64_t>(seq & kSeqMask) << 18) |
         (static_cast<uint64_t>(piece & (kMaxPieces - 1)) << 1) | (last ? 1u : 0u);
}
inline bool isLast(uint64_t t) { return (t & 1u) != 0; }
}  // namespace tag

}  // namespace pact::net
