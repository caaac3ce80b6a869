// The seal of a plugin message: a small tagged message the sender posts once every piece of a
// message has gone to UCX, on the same tag as the pieces with the piece index kSealPiece. It
// carries what the receiver must know before test() may report the message done: the sender's
// model epoch (epoch fencing), the message's size and piece count, and one checksum per piece
// (the class's verify). Comms carry seals only when a class or the application asks for them
// (verify, timeout, a fencing receiver): without them the data path is what it always was.
//
// Layout (little-endian): u32 magic "SEAL", u16 version, u8 verify kind (0 none, 1 crc32c,
// 2 xxh3), u8 flags (bit 0: the sender fences, epoch is its model epoch), u64 epoch, u64 bytes,
// u32 pieces, u32 zero, then one u64 check per piece when verify is not none. Pure functions, so
// they are unit-tested and fuzzed directly; decoding never reads past its span and names the
// field at fault.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"

namespace pact::wire {

inline constexpr uint32_t kSealMagic = 0x4c414553;  // "SEAL" in memory order
inline constexpr uint16_t kSealVersion = 1;
inline constexpr size_t kSealHeader = 32;
inline constexpr uint8_t kSealFenced = 1;

// What a seal says; checks points into the decoded bytes (or the encoder's vector).
struct SealView {
  uint8_t verify = 0;   // Verify's value
  bool fenced = false;  // the sender fences: epoch is its model epoch
  uint64_t epoch = 0;
  uint64_t bytes = 0;   // the message's size
  uint32_t pieces = 0;  // its pieces (at least one)
  std::span<const uint8_t> checks;  // pieces x u64 when verify != 0, else empty
  uint64_t check(uint32_t piece) const;
};

// Bytes of a seal for a message of `pieces` pieces.
inline size_t sealSize(uint32_t pieces, bool checked) {
  return kSealHeader + (checked ? size_t{8} * pieces : 0);
}

// Writes the header into out (resized to sealSize(pieces, verify != 0)); the caller fills the
// checks with setCheck afterwards.
void encodeSealHeader(uint8_t verify, bool fenced, uint64_t epoch, uint64_t bytes, uint32_t pieces,
                      std::vector<uint8_t>* out);
void setCheck(std::vector<uint8_t>* seal, uint32_t piece, uint64_t check);
// Checks magic, version, kind, flags, piece count (1..maxPieces) and that the length matches.
Result<SealView> decodeSeal(std::span<const uint8_t> in, uint32_t maxPieces);

}  // namespace pact::wire
