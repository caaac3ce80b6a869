// Payload checks of the traffic classes (Profile::verify): a streaming digest over the bytes of
// one transfer. CRC-32C comes from Intel ISA-L and XXH3 from xxHash; nothing is computed by hand.
//
// A Digest is fed any number of update() calls of any lengths, in order; value() is the check of
// every byte so far and may be read at any time without disturbing the stream. Not internally
// synchronized: one thread at a time. A moved-from Digest may only be destroyed or assigned to.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>



struct XXH3_state_s;  // xxHash's streaming state, kept opaque here

namespace pact {

// The payload checks a traffic class may ask for (the profile key `verify`). The values are also
// the engine's wire code of a check (engine/control.h: Offer's and Done's checksum kind).
enum class Verify : uint8_t { kNone = 0, kCrc32c = 1, kXxh3 = 2 };
inline constexpr const char* kVerifyNames[] = {"none", "crc32c", "xxh3"};  // by value
inline const char* verifyName(Verify v) { return kVerifyNames[static_cast<int>(v)]; }

class Digest {
 public:
  // Cheap for kNone and kCrc32c; kXxh3 allocates the library's state once (allocation failure
  // is std::bad_alloc, as for any allocation in the tree).
  explicit Digest(Verify kind);

  Digest(Digest&&) noexcept = default;
  Digest& operator=(Digest&&) noexcept = default;
  Digest(const Digest&) = delete;
  Digest& operator=(const Digest&) = delete;
  ~Digest() = default;

  // Feeds length bytes at data (data may be null when length is 0). Any length, including
  // more than 2 GiB: ISA-L takes int lengths, so long inputs are fed in pieces.
  void update(const void* data, size_t length);

  // kNone: 0. kCrc32c: the standard CRC-32C (Castagnoli; "123456789" -> 0xE3069283) in the low
  // 32 bits. kXxh3: XXH3_64bits with seed 0. Of every byte fed so far.
  uint64_t value() const;

  Verify kind() const { return kind_; }

 private:
  struct StateFree {
    void operator()(XXH3_state_s* state) const;
  };

  Verify kind_;
  uint32_t crc_ = 0;                              // ISA-L running value (not yet final-xored)
  std::unique_ptr<XXH3_state_s, StateFree> xxh_;  // kXxh3 only
};

}  // namespace pact
