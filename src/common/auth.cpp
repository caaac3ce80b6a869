#include "common/auth.h"

#include <sodium.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>

namespace pact::auth {

namespace {

void initOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (sodium_init() < 0) std::abort();  // libsodium cannot work without its RNG
  });
}

}  // namespace

Result<Key> KeyParser::parse(std::string_view pathText) {
  const std::string path(pathText);
  if (path.empty()) return Key{};
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{Status::kInvalidArgument, std::string("cannot read: ") + std::strerror(errno)};
  std::string key((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return Error{Status::kInvalidArgument, "cannot read the file"};
  if (!key.empty() && key.back() == '\n') key.pop_back();
  if (key.size() < kMinKey)
    return Error{Status::kInvalidArgument, "is " + std::to_string(key.size()) +
                                               " bytes; at least 16 are needed"};
  if (key.size() > kMaxKey)
    return Error{Status::kInvalidArgument, "is " + std::to_string(key.size()) +
                                               " bytes; at most 4096 are allowed"};
  return Key{path, std::move(key)};
}

Nonce freshNonce() {
  initOnce();
  Nonce n;
  randombytes_buf(n.data(), n.size());
  return n;
}

Mac mac(std::string_view key, std::string_view label, const Nonce& challenge, const Nonce& response) {
  initOnce();
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, reinterpret_cast<const unsigned char*>(key.data()), key.size());
  crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(label.data()), label.size());
  crypto_auth_hmacsha256_update(&st, challenge.data(), challenge.size());
  crypto_auth_hmacsha256_update(&st, response.data(), response.size());
  Mac out;
  crypto_auth_hmacsha256_final(&st, out.data());
  sodium_memzero(&st, sizeof st);
  return out;
}

bool verify(std::string_view key, std::string_view label, const Nonce& challenge,
            const Nonce& response, std::span<const uint8_t> got) {
  if (got.size() != kMacSize) return false;
  const Mac want = mac(key, label, challenge, response);
  return sodium_memcmp(want.data(), got.data(), kMacSize) == 0;
}

}  // namespace pact::auth
