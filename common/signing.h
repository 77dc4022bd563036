// Key derivation and signatures (OpenSSL): HKDF-SHA256 gives each use of a keyset key its own
// key (card tokens, claimant tokens, the audit trail's signing key), and Ed25519 signs the audit
// trail's checkpoints, so that whoever verifies the trail needs only a public key and holds no
// secret that could make (or reverse, by enumeration) a card token.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

#include "common/result.h"

namespace txscore {

// RFC 5869 HKDF with SHA-256: `length` bytes (at most 255 * 32) of output keying material from
// `ikm`, `salt` and `info`. Aborts only if OpenSSL cannot allocate.
std::string HkdfSha256(std::string_view ikm, std::string_view salt, std::string_view info, size_t length);

inline constexpr size_t kEd25519SeedBytes = 32;
inline constexpr size_t kEd25519PublicKeyBytes = 32;
inline constexpr size_t kEd25519SignatureBytes = 64;

// The public key of a 32-byte Ed25519 private key (RFC 8032's "secret key", the seed).
Result<std::string> Ed25519PublicKey(std::string_view seed);
// The 64-byte signature of the concatenation of `parts`.
Result<std::string> Ed25519Sign(std::string_view seed, std::initializer_list<std::string_view> parts);
// True when `signature` is `public_key`'s over the concatenation of `parts`; false for any
// malformed input.
bool Ed25519Verify(std::string_view public_key, std::initializer_list<std::string_view> parts,
                   std::string_view signature);

}  // namespace txscore
