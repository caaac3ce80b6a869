// Data patterns for the engine scenarios (kv, a2a): a sender fills each block from a seed that
// names what it is (key, block index); the receiver's check recomputes it, so any byte that is not
// exactly what was sent for that key (another request, epoch, generation, block or offset) fails.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace pact::perf {

inline uint64_t mix64(uint64_t x) {  // splitmix64 finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

inline uint64_t patternSeed(uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e) {
  return mix64(mix64(mix64(mix64(mix64(a) ^ b) ^ c) ^ d) ^ e);
}

// Word i of a block is (seed + i) * odd constant: distinct per offset and per seed.
inline void fillPattern(uint8_t* p, size_t length, uint64_t seed) {
  const size_t words = length / 8;
  for (size_t i = 0; i < words; ++i) {
    const uint64_t w = (seed + i) * 0x9e3779b97f4a7c15ULL;
    std::memcpy(p + i * 8, &w, 8);
  }
  const uint64_t tail = mix64(seed + words);
  std::memcpy(p + words * 8, &tail, length % 8);
}

inline bool checkPattern(const uint8_t* p, size_t length, uint64_t seed) {
  const size_t words = length / 8;
  uint64_t bad = 0;
  for (size_t i = 0; i < words; ++i) {
    uint64_t w;
    std::memcpy(&w, p + i * 8, 8);
    bad |= w ^ ((seed + i) * 0x9e3779b97f4a7c15ULL);
  }
  const uint64_t tail = mix64(seed + words);
  return bad == 0 && std::memcmp(p + words * 8, &tail, length % 8) == 0;
}

}  // namespace pact::perf
