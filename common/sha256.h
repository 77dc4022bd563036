// SHA-256 (OpenSSL), as lowercase hex: the one helper for content digests (model versions,
// claims job inputs and ids).
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"

namespace txscore {

// 64 lowercase hex characters. kInternal only if OpenSSL fails (an allocation failure).
Result<std::string> Sha256Hex(std::string_view bytes);

// The digest of the file's contents, read in blocks. kNotFound when it cannot be opened.
Result<std::string> Sha256HexOfFile(const std::string& path);

}  // namespace txscore
