#include "transport/seal.h"

#include <string>

#include "common/codec.h"

namespace pact::wire {

uint64_t SealView::check(uint32_t piece) const {
  uint64_t v = 0;
  for (size_t i = 0; i < 8; ++i) v |= static_cast<uint64_t>(checks[size_t{piece} * 8 + i]) << (8 * i);
  return v;
}

void encodeSealHeader(uint8_t verify, bool fenced, uint64_t epoch, uint64_t bytes, uint32_t pieces,
                      std::vector<uint8_t>* out) {
  ByteWriter w;
  w.out = std::move(*out);  // keeps the caller's capacity
  w.out.clear();
  w.u32(kSealMagic);
  w.u16(kSealVersion);
  w.u8(verify);
  w.u8(fenced ? kSealFenced : 0);
  w.u64(epoch);
  w.u64(bytes);
  w.u32(pieces);
  w.u32(0);
  w.out.resize(sealSize(pieces, verify != 0), 0);
  *out = std::move(w.out);
}

void setCheck(std::vector<uint8_t>* seal, uint32_t piece, uint64_t check) {
  uint8_t* at = seal->data() + kSealHeader + size_t{piece} * 8;
  for (size_t i = 0; i < 8; ++i) at[i] = static_cast<uint8_t>(check >> (8 * i));
}

Result<SealView> decodeSeal(std::span<const uint8_t> in, uint32_t maxPieces) {
  ByteReader r(in, "seal");
  uint32_t magic = 0, reserved = 0;
  uint16_t version = 0;
  uint8_t flags = 0;
  SealView v;
  if (!r.u32(&magic, "magic") || !r.u16(&version, "version") || !r.u8(&v.verify, "verify") ||
      !r.u8(&flags, "flags") || !r.u64(&v.epoch, "epoch") || !r.u64(&v.bytes, "bytes") ||
      !r.u32(&v.pieces, "pieces") || !r.u32(&reserved, "reserved"))
    return r.error();
  if (magic != kSealMagic) r.fail("magic", "not a seal");
  else if (version != kSealVersion)
    r.fail("version", std::to_string(version) + ", this side speaks " + std::to_string(kSealVersion));
  else if (v.verify > 2) r.fail("verify", std::to_string(v.verify) + " is not 0, 1 or 2");
  else if ((flags & ~kSealFenced) != 0) r.fail("flags", "unknown bits " + std::to_string(flags));
  else if (v.pieces < 1 || v.pieces > maxPieces)
    r.fail("pieces", std::to_string(v.pieces) + " outside 1.." + std::to_string(maxPieces));
  else if (reserved != 0) r.fail("reserved", std::to_string(reserved) + " is not 0");
  else if (in.size() != sealSize(v.pieces, v.verify != 0))
    r.fail("length", std::to_string(in.size()) + " bytes for " + std::to_string(v.pieces) +
                         " piece(s), expected " + std::to_string(sealSize(v.pieces, v.verify != 0)));
  else {
    v.fenced = (flags & kSealFenced) != 0;
    v.checks = in.subspan(kSealHeader);
    return v;
  }
  return r.error();
}

}  // namespace pact::wire
