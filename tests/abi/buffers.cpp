// Host buffers, registrations and data patterns of the abi harness (see harness.h).
#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "tests/abi/harness.h"

namespace pact::abi_test {

std::string versionName(const ::testing::TestParamInfo<int>& info) {
  return "v" + std::to_string(info.param);
}

HostBuffer::HostBuffer(size_t size) : size_(size) {
  // mmap gives page alignment and fresh pages for large sizes; keep at least one page.
  size_t bytes = std::max<size_t>(size, 1);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    ADD_FAILURE() << "mmap of " << size << " bytes failed";
    size_ = 0;
    return;
  }
  data_ = static_cast<char*>(p);
}

HostBuffer::~HostBuffer() {
  if (data_) ::munmap(data_, std::max<size_t>(size_, 1));
}

MemReg::MemReg(NetPlugin& plugin, void* comm, void* data, size_t size)
    : plugin_(plugin), comm_(comm) {
  int rc = plugin_.regMr(comm_, data, size, loader::kPtrHost, &mhandle_);
  EXPECT_EQ(rc, loader::kSuccess) << "regMr(HOST, " << size << " bytes) on comm " << comm;
  ok_ = rc == loader::kSuccess;
  if (!ok_) mhandle_ = nullptr;
}

MemReg::~MemReg() {
  if (!ok_) return;
  int rc = plugin_.deregMr(comm_, mhandle_);
  EXPECT_EQ(rc, loader::kSuccess) << "deregMr on comm " << comm_;
}

namespace {

uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Bytes [offset, offset + n) of the pattern for seed, offset a multiple of 8.
void patternChunk(unsigned char* dst, size_t offset, size_t n, uint64_t seed) {
  const uint64_t base = mix(seed) ^ (seed << 32);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = mix(base + (offset + i) / 8);
    std::memcpy(dst + i, &v, 8);
  }
  if (i < n) {
    uint64_t v = mix(base + (offset + i) / 8);
    std::memcpy(dst + i, &v, n - i);
  }
}

}  // namespace

void fillPattern(void* dst, size_t n, uint64_t seed) {
  patternChunk(static_cast<unsigned char*>(dst), 0, n, seed);
}

::testing::AssertionResult matchesPattern(const void* p, size_t n, uint64_t seed) {
  constexpr size_t kChunk = 1 << 16;
  std::vector<unsigned char> expected(kChunk);
  const auto* got = static_cast<const unsigned char*>(p);
  for (size_t off = 0; off < n; off += kChunk) {
    size_t len = std::min(kChunk, n - off);
    patternChunk(expected.data(), off, len, seed);
    if (std::memcmp(expected.data(), got + off, len) == 0) continue;
    size_t first = 0;
    while (expected[first] == got[off + first]) ++first;
    size_t bad = 0;  // bytes that differ from `first` to the end of the message
    for (size_t o = off; o < n; o += kChunk) {
      size_t l = std::min(kChunk, n - o);
      patternChunk(expected.data(), o, l, seed);
      for (size_t i = 0; i < l; ++i) bad += expected[i] != got[o + i];
    }
    patternChunk(expected.data(), off, len, seed);
    char hex[64];
    std::snprintf(hex, sizeof hex, "0x%02x, expected 0x%02x", got[off + first], expected[first]);
    return ::testing::AssertionFailure()
           << "data mismatch in a " << n << "-byte message: first at offset " << off + first
           << " (got " << hex << "), " << bad << " bad bytes from there to the end"
           << (got[off + first] == kPoison ? " (0xA5 = receive poison: byte never written)" : "");
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult isPoison(const void* p, size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) {
    if (b[i] != kPoison) {
      size_t bad = 0;
      for (size_t j = i; j < n; ++j) bad += b[j] != kPoison;
      return ::testing::AssertionFailure()
             << "byte " << i << " of a guard area of " << n << " bytes was written (value "
             << static_cast<int>(b[i]) << "), " << bad << " written bytes in the guard";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace pact::abi_test
