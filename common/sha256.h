// SHA-256 (OpenSSL), as lowercase hex: the one helper for content digests (model versions,
// claims job inputs and ids).
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

#include "common/result.h"

namespace txscore {

// 64 lowercase hex characters. kInternal only if OpenSSL fails (an allocation failure).
Result<std::string> Sha256Hex(std::string_view bytes);

// The digest of the file's contents, read in blocks. kNotFound when it cannot be opened.
Result<std::string> Sha256HexOfFile(const std::string& path);

// The raw 32-byte SHA-256 digest of the concatenation of `parts` (the audit chain's links, where
// a hex round trip per record would be waste). Aborts only if OpenSSL cannot allocate.
std::string Sha256Bytes(std::initializer_list<std::string_view> parts);
// The raw 32-byte HMAC-SHA256 of the concatenation of `parts` under `key`.
std::string HmacSha256Bytes(std::string_view key, std::initializer_list<std::string_view> parts);
// Lowercase hex of any bytes.
std::string HexOfBytes(std::string_view bytes);

}  // namespace txscore
