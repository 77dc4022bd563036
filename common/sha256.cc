#include "common/sha256.h"

#include <openssl/core_names.h>
#include <openssl/evp.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <vector>

namespace txscore {
namespace {

using DigestContext = std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)>;

std::string Hex(const unsigned char* bytes, unsigned int n) {
  static const char kDigits[] = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < n; ++i) {
    hex += kDigits[bytes[i] >> 4];
    hex += kDigits[bytes[i] & 15];
  }
  return hex;
}

// Feeds `feed(update)` into a SHA-256 context; `update` returns false when OpenSSL fails.
template <typename Feed>
Result<std::string> Digest(Feed feed) {
  DigestContext ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  if (ctx == nullptr || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
    return Internal("OpenSSL could not start a SHA-256 digest");
  }
  auto update = [&ctx](const void* data, size_t n) { return EVP_DigestUpdate(ctx.get(), data, n) == 1; };
  TXSCORE_RETURN_IF_ERROR(feed(update));
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(ctx.get(), digest, &length) != 1) return Internal("OpenSSL failed computing a SHA-256 digest");
  return Hex(digest, length);
}

[[noreturn]] void OpenSslFailed(const char* what) {
  std::fprintf(stderr, "fatal: OpenSSL failed computing %s\n", what);
  std::abort();
}

}  // namespace

std::string Sha256Bytes(std::initializer_list<std::string_view> parts) {
  DigestContext ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  if (ctx == nullptr || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) OpenSslFailed("SHA-256");
  for (std::string_view part : parts) {
    if (EVP_DigestUpdate(ctx.get(), part.data(), part.size()) != 1) OpenSslFailed("SHA-256");
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(ctx.get(), digest, &length) != 1) OpenSslFailed("SHA-256");
  return std::string(reinterpret_cast<const char*>(digest), length);
}

std::string HmacSha256Bytes(std::string_view key, std::initializer_list<std::string_view> parts) {
  using MacContext = std::unique_ptr<EVP_MAC_CTX, decltype(&EVP_MAC_CTX_free)>;
  std::unique_ptr<EVP_MAC, decltype(&EVP_MAC_free)> mac(EVP_MAC_fetch(nullptr, "HMAC", nullptr), &EVP_MAC_free);
  if (mac == nullptr) OpenSslFailed("HMAC-SHA256");
  MacContext ctx(EVP_MAC_CTX_new(mac.get()), &EVP_MAC_CTX_free);
  char digest_name[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest_name, 0), OSSL_PARAM_END};
  if (ctx == nullptr ||
      EVP_MAC_init(ctx.get(), reinterpret_cast<const unsigned char*>(key.data()), key.size(), params) != 1) {
    OpenSslFailed("HMAC-SHA256");
  }
  for (std::string_view part : parts) {
    if (EVP_MAC_update(ctx.get(), reinterpret_cast<const unsigned char*>(part.data()), part.size()) != 1) {
      OpenSslFailed("HMAC-SHA256");
    }
  }
  unsigned char out[EVP_MAX_MD_SIZE];
  size_t length = 0;
  if (EVP_MAC_final(ctx.get(), out, &length, sizeof out) != 1) OpenSslFailed("HMAC-SHA256");
  return std::string(reinterpret_cast<const char*>(out), length);
}

std::string HexOfBytes(std::string_view bytes) {
  return Hex(reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<unsigned int>(bytes.size()));
}

Result<std::string> Sha256Hex(std::string_view bytes) {
  return Digest([bytes](const auto& update) -> Status {
    if (!update(bytes.data(), bytes.size())) return Internal("OpenSSL failed computing a SHA-256 digest");
    return Status::Ok();
  });
}

Result<std::string> Sha256HexOfFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("input file " + path + " does not exist or cannot be read");
  return Digest([&in, &path](const auto& update) -> Status {
    std::vector<char> block(1 << 16);
    while (in.read(block.data(), static_cast<std::streamsize>(block.size())) || in.gcount() > 0) {
      if (!update(block.data(), static_cast<size_t>(in.gcount())))
        return Internal("OpenSSL failed computing a SHA-256 digest");
    }
    if (in.bad()) return Internal("cannot read " + path);
    return Status::Ok();
  });
}

}  // namespace txscore
