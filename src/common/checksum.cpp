// Digest: CRC-32C through ISA-L's crc32_iscsi, XXH3 through xxHash's streaming state.
#include "common/checksum.h"

#include <isa-l/crc.h>
#include <xxhash.h>

#include <algorithm>
#include <new>

namespace pact {
namespace {

// crc32_iscsi neither inverts its input value nor its result, so the standard CRC-32C is the
// running value started at all ones and inverted once at the end.
constexpr uint32_t kCrcInit = 0xFFFFFFFFu;
constexpr uint32_t kCrcFinalXor = 0xFFFFFFFFu;
// Largest piece handed to crc32_iscsi, whose length is an int.
constexpr size_t kCrcMaxPiece = size_t{1} << 30;

}  // namespace

void Digest::StateFree::operator()(XXH3_state_s* state) const { XXH3_freeState(state); }

Digest::Digest(Verify kind) : kind_(kind) {
  switch (kind_) {
    case Verify::kNone:
      break;
    case Verify::kCrc32c:
      crc_ = kCrcInit;
      break;
    case Verify::kXxh3:
      xxh_.reset(XXH3_createState());
      if (!xxh_) throw std::bad_alloc();
      XXH3_64bits_reset(xxh_.get());
      break;
  }
}

void Digest::update(const void* data, size_t length) {
  if (length == 0) return;
  switch (kind_) {
    case Verify::kNone:
      break;
    case Verify::kCrc32c: {
      // ISA-L takes a non-const pointer but only reads through it.
      auto* p = static_cast<unsigned char*>(const_cast<void*>(data));
      while (length > 0) {
        size_t piece = std::min(length, kCrcMaxPiece);
        crc_ = crc32_iscsi(p, static_cast<int>(piece), crc_);
        p += piece;
        length -= piece;
      }
      break;
    }
    case Verify::kXxh3:
      XXH3_64bits_update(xxh_.get(), data, length);
      break;
  }
}

uint64_t Digest::value() const {
  switch (kind_) {
    case Verify::kNone:
      return 0;
    case Verify::kCrc32c:
      return crc_ ^ kCrcFinalXor;
    case Verify::kXxh3:
      return XXH3_64bits_digest(xxh_.get());
  }
  return 0;
}

}  // namespace pact
