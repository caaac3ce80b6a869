// ByteWriter / ByteReader: the little-endian, bounds-checked primitives every wire codec of pact
// is built from (connection handshake, engine control messages). A reader never reads past its
// span; the first failure is kept and its message names the message and the field
// ("hello.worker_address: truncated").
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace pact {

class ByteWriter {
 public:
  void u8(uint8_t v) { put(v, 1); }
  void u16(uint16_t v) { put(v, 2); }
  void u32(uint32_t v) { put(v, 4); }
  void u64(uint64_t v) { put(v, 8); }
  // u16 length, then the bytes.
  void bytes(const std::vector<uint8_t>& b) {
    u16(static_cast<uint16_t>(b.size()));
    out.insert(out.end(), b.begin(), b.end());
  }
  // n bytes as they are (a fixed-size field).
  void raw(const uint8_t* b, size_t n) { out.insert(out.end(), b, b + n); }
  std::vector<uint8_t> out;

 private:
  void put(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
};

// { u32 magic, u16 version, u16 type, u32 body length } + body: the framing of every pact codec.
inline constexpr size_t kFrameHeader = 12;
// Writing a frame in place: beginFrame leaves room for the header in w (clearing it, keeping its
// capacity), the body is written after it, endFrame fills the header in.
inline void beginFrame(ByteWriter& w) { w.out.assign(kFrameHeader, 0); }
inline void endFrame(ByteWriter& w, uint32_t magic, uint16_t version, uint16_t type) {
  const uint64_t fields[] = {magic, version, type, w.out.size() - kFrameHeader};
  const int widths[] = {4, 2, 2, 4};
  size_t at = 0;
  for (int f = 0; f < 4; ++f)
    for (int i = 0; i < widths[f]; ++i) w.out[at++] = static_cast<uint8_t>(fields[f] >> (8 * i));
}
inline std::vector<uint8_t> frame(uint32_t magic, uint16_t version, uint16_t type,
                                  const ByteWriter& body) {
  ByteWriter w;
  beginFrame(w);
  w.out.insert(w.out.end(), body.out.begin(), body.out.end());
  endFrame(w, magic, version, type);
  return w.out;
}

class ByteReader {
 public:
  ByteReader(std::span<const uint8_t> in, const char* what) : in_(in), what_(what) {}
  bool u8(uint8_t* v, const char* f) { return get(v, 1, f); }
  bool u16(uint16_t* v, const char* f) { return get(v, 2, f); }
  bool u32(uint32_t* v, const char* f) { return get(v, 4, f); }
  bool u64(uint64_t* v, const char* f) { return get(v, 8, f); }
  // u16 length in [min, max], then the bytes.
  bool bytes(std::vector<uint8_t>* b, size_t max, const char* f, size_t min = 1) {
    uint16_t n = 0;
    if (!u16(&n, f)) return false;
    if (n < min || n > max)
      return fail(f, "length " + std::to_string(n) + " outside " + std::to_string(min) + ".." +
                         std::to_string(max));
    if (in_.size() - pos_ < n) return fail(f, "truncated");
    b->assign(in_.begin() + static_cast<long>(pos_), in_.begin() + static_cast<long>(pos_ + n));
    pos_ += n;
    return true;
  }
  bool raw(uint8_t* out, size_t n, const char* f) {
    if (in_.size() - pos_ < n) return fail(f, "truncated");
    std::memcpy(out, in_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  // True when every byte was consumed; otherwise fails naming the trailing bytes.
  bool done() {
    return pos_ == in_.size() || fail("body", std::to_string(in_.size() - pos_) + " trailing bytes");
  }
  // Records a semantic failure of field f (range, consistency); always returns false.
  bool fail(const char* f, const std::string& why) {
    if (msg_.empty()) msg_ = std::string(what_) + "." + f + ": " + why;
    return false;
  }
  Error error() const { return Error{Status::kInvalidArgument, msg_}; }

 private:
  template <typename T>
  bool get(T* v, size_t n, const char* f) {
    if (in_.size() - pos_ < n) return fail(f, "truncated");
    uint64_t x = 0;
    for (size_t i = 0; i < n; ++i) x |= static_cast<uint64_t>(in_[pos_ + i]) << (8 * i);
    *v = static_cast<T>(x);
    pos_ += n;
    return true;
  }
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
  const char* what_;
  std::string msg_;
};

}  // namespace pact
