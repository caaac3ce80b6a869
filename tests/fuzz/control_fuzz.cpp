// libFuzzer target: the engine's control codec and its data-piece header. Any input is decoded or
// refused with a message; whatever decodes re-encodes to the same bytes; advertised blocks always
// lie inside the region.
#include <cstring>

#include "engine/control.h"
#include "tests/fuzz/fuzz_main.h"

using namespace pact::engine;

std::vector<std::vector<uint8_t>> pact::fuzz::seeds() {
  Advertise a;
  a.key = {1, 2, 3, 4};
  a.regionLength = 8192;
  a.rkey = {1, 2};
  a.blocks = {{0, 4096}, {4096, 4096}};
  uint8_t piece[kPieceHeaderSize];
  encodePiece(PieceHeader{7, {1, 2, 3, 4}, 1, 2, 4096}, piece);
  return {encode(a), encode(Done{{1, 2, 3, 4}, 1, 10, Verify::kXxh3, 5, 99}),
          encode(Verdict{{1, 2, 3, 4}, Outcome::kRetry, Reason::kChecksum, 2, 99}),
          encode(EpochChange{3}), encode(CreditUpdate{1 << 20}), encode(Wired{}), encode(Cancel{{1, 2, 3, 4}, true, 99}),
          encode(Offer{{1, 2, 3, 4}, 8192, 1000, kOfferEager, Verify::kCrc32c, 7, 99}),
          encode(Hello{"decode-0", 9, 1, {1, 2, 3}}),
          encode(Hello{"rails-0", 9, 1, {1, 2, 3}, {{"tcp", {{4, 5}, {6, 7}}}},
                       {{4, {10, 77, 0, 1}, 4000}, {4, {10, 77, 1, 1}, 4001}}}),
          std::vector<uint8_t>(piece, piece + kPieceHeaderSize)};
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto piece = decodePiece(std::span<const uint8_t>(data, size));
  if (piece.ok()) {
    uint8_t again[kPieceHeaderSize];
    encodePiece(*piece, again);
    if (size != kPieceHeaderSize || std::memcmp(again, data, size) != 0) __builtin_trap();
  } else if (piece.error().message.empty()) {
    __builtin_trap();
  }
  auto m = decode(std::span<const uint8_t>(data, size));
  if (!m.ok()) {
    if (m.error().message.empty()) __builtin_trap();  // every refusal names its field
    return 0;
  }
  auto again = encode(*m);
  if (again.size() != size || std::memcmp(again.data(), data, size) != 0) __builtin_trap();
  if (auto* a = std::get_if<Advertise>(&*m))
    for (const Block& b : a->blocks)
      if (b.offset + b.length > a->regionLength || b.offset + b.length < b.offset) __builtin_trap();
  return 0;
}
