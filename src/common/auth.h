// Shared-secret authentication of connections (PACT_AUTH_KEY_FILE): both sides prove knowledge of
// the key with HMAC-SHA256 over both sides' fresh nonces (libsodium; constant-time comparison).
// Used by the plugin's handshake and the engine's; neither ever sends the key.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"

namespace pact::auth {

inline constexpr size_t kNonceSize = 32;
inline constexpr size_t kMacSize = 32;
inline constexpr size_t kMinKey = 16;
inline constexpr size_t kMaxKey = 4096;
using Nonce = std::array<uint8_t, kNonceSize>;
using Mac = std::array<uint8_t, kMacSize>;

struct Key {
  std::string path;    // as given (what pact-info shows; the secret is never printed)
  std::string secret;  // empty = no authentication
  bool enabled() const { return !secret.empty(); }
};

// The key: the file's bytes, one trailing newline removed; kMinKey..kMaxKey bytes. Errors say why
// ("cannot read: No such file or directory", "is 3 bytes; at least 16 are needed").
struct KeyParser {
  using value_type = Key;
  static Result<Key> parse(std::string_view path);
  static const char* allowed() {
    return "a readable file of 16 to 4096 bytes (the shared secret), or empty";
  }
};

Nonce freshNonce();
// HMAC-SHA256(key, label || challenge || response).
Mac mac(std::string_view key, std::string_view label, const Nonce& challenge, const Nonce& response);
// Constant-time check of mac(key, label, challenge, response) against got.
bool verify(std::string_view key, std::string_view label, const Nonce& challenge,
            const Nonce& response, std::span<const uint8_t> got);

}  // namespace pact::auth
