// Digest: the standard check values, streaming in odd pieces equals one pass, inputs longer than
// ISA-L's int length, and moves.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <xxhash.h>

#include <cstring>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "common/checksum.h"

namespace pact {
namespace {

uint64_t digestOf(Verify kind, const void* data, size_t length) {
  Digest d(kind);
  d.update(data, length);
  return d.value();
}

std::vector<unsigned char> pattern(size_t length) {
  std::vector<unsigned char> v(length);
  uint32_t x = 12345;
  for (auto& b : v) {
    x = x * 1103515245u + 12345u;
    b = static_cast<unsigned char>(x >> 16);
  }
  return v;
}

TEST(Digest, Crc32cCheckValue) {
  const std::string check = "123456789";
  EXPECT_EQ(digestOf(Verify::kCrc32c, check.data(), check.size()), 0xE3069283u);
  // Further published CRC-32C vectors (RFC 3720 B.4): 32 zero bytes and 32 0xFF bytes.
  std::vector<unsigned char> zeros(32, 0x00), ones(32, 0xFF);
  EXPECT_EQ(digestOf(Verify::kCrc32c, zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(digestOf(Verify::kCrc32c, ones.data(), ones.size()), 0x62A8AB43u);
}

TEST(Digest, EmptyInput) {
  EXPECT_EQ(Digest(Verify::kNone).value(), 0u);
  EXPECT_EQ(Digest(Verify::kCrc32c).value(), 0u);  // CRC-32C of nothing
  EXPECT_EQ(Digest(Verify::kXxh3).value(), XXH3_64bits(nullptr, 0));
  Digest d(Verify::kCrc32c);
  d.update(nullptr, 0);
  EXPECT_EQ(d.value(), 0u);
}

TEST(Digest, Xxh3MatchesOneShot) {
  const std::string check = "123456789";
  EXPECT_EQ(digestOf(Verify::kXxh3, check.data(), check.size()),
            XXH3_64bits(check.data(), check.size()));
  // Lengths around XXH3's internal boundaries (16, 128, 240 bytes, stripes, blocks).
  auto data = pattern(70000);
  for (size_t len : {1, 3, 16, 17, 128, 129, 240, 241, 1024, 1025, 65536, 70000}) {
    EXPECT_EQ(digestOf(Verify::kXxh3, data.data(), len), XXH3_64bits(data.data(), len)) << len;
  }
}

TEST(Digest, NoneIsAlwaysZero) {
  auto data = pattern(1000);
  Digest d(Verify::kNone);
  d.update(data.data(), data.size());
  d.update(data.data(), 7);
  EXPECT_EQ(d.value(), 0u);
}

TEST(Digest, OddPiecesEqualOnePass) {
  auto data = pattern(200003);
  for (Verify kind : {Verify::kCrc32c, Verify::kXxh3}) {
    const uint64_t whole = digestOf(kind, data.data(), data.size());
    for (size_t step : {1, 3, 7, 63, 241, 4093, 65537}) {
      Digest d(kind);
      size_t off = 0, piece = 0;
      while (off < data.size()) {
        // Vary the piece size (including empty pieces) around the step.
        size_t len = std::min(data.size() - off, (step * (piece % 5)) / 2);
        d.update(data.data() + off, len);
        off += len;
        ++piece;
      }
      EXPECT_EQ(d.value(), whole) << verifyName(kind) << " step " << step;
    }
  }
}

TEST(Digest, ValueDoesNotDisturbTheStream) {
  auto data = pattern(5000);
  for (Verify kind : {Verify::kCrc32c, Verify::kXxh3}) {
    Digest d(kind);
    d.update(data.data(), 1234);
    const uint64_t prefix = d.value();
    EXPECT_EQ(prefix, digestOf(kind, data.data(), 1234));
    d.update(data.data() + 1234, data.size() - 1234);
    EXPECT_EQ(d.value(), digestOf(kind, data.data(), data.size()));
  }
}

TEST(Digest, FlippedBitChangesTheValue) {
  auto data = pattern(4096);
  for (Verify kind : {Verify::kCrc32c, Verify::kXxh3}) {
    const uint64_t good = digestOf(kind, data.data(), data.size());
    for (size_t bit : {size_t{0}, size_t{7}, size_t{4096 * 8 / 2 + 3}, size_t{4096 * 8 - 1}}) {
      auto bad = data;
      bad[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
      EXPECT_NE(digestOf(kind, bad.data(), bad.size()), good) << verifyName(kind) << " " << bit;
    }
  }
}

TEST(Digest, MovesKeepTheStream) {
  auto data = pattern(3000);
  for (Verify kind : {Verify::kCrc32c, Verify::kXxh3}) {
    Digest a(kind);
    a.update(data.data(), 1000);
    Digest b(std::move(a));
    b.update(data.data() + 1000, 1000);
    Digest c(Verify::kNone);
    c = std::move(b);
    c.update(data.data() + 2000, 1000);
    EXPECT_EQ(c.kind(), kind);
    EXPECT_EQ(c.value(), digestOf(kind, data.data(), data.size())) << verifyName(kind);
  }
  std::vector<Digest> many;
  for (int i = 0; i < 100; ++i) many.emplace_back(i % 2 ? Verify::kXxh3 : Verify::kCrc32c);
  EXPECT_EQ(many[1].value(), XXH3_64bits(nullptr, 0));
}

// More than INT_MAX bytes in one update(): ISA-L takes int lengths, so Digest must cut the input.
// The buffer is a private anonymous mapping that is read (zero pages) except for a marker at each
// end, so it costs time but little memory.
TEST(Digest, Crc32cOverTwoGiB) {
  const size_t length = (size_t{1} << 31) + 4099;
  void* map = mmap(nullptr, length, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (map == MAP_FAILED) GTEST_SKIP() << "cannot map " << length << " bytes";
  auto* p = static_cast<unsigned char*>(map);
  p[0] = 0x5a;
  p[length - 1] = 0xa5;
  const uint64_t whole = digestOf(Verify::kCrc32c, p, length);
  Digest pieces(Verify::kCrc32c);
  const size_t piece = size_t{3} << 28;  // 768 MiB, each under INT_MAX
  for (size_t off = 0; off < length; off += piece) {
    pieces.update(p + off, std::min(piece, length - off));
  }
  EXPECT_EQ(whole, pieces.value());
  // And the bytes past INT_MAX count: dropping the last byte changes the value.
  EXPECT_NE(whole, digestOf(Verify::kCrc32c, p, length - 1));
  munmap(map, length);
}

}  // namespace
}  // namespace pact
