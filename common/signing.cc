#include "common/signing.h"

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

namespace txscore {
namespace {

using PkeyPtr = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;
using MdContext = std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)>;

const unsigned char* Bytes(std::string_view text) { return reinterpret_cast<const unsigned char*>(text.data()); }

// Ed25519 (PureEdDSA) hashes the message twice, so OpenSSL takes it whole: the parts are joined.
std::string Joined(std::initializer_list<std::string_view> parts) {
  std::string message;
  for (std::string_view part : parts) message.append(part);
  return message;
}

}  // namespace

std::string HkdfSha256(std::string_view ikm, std::string_view salt, std::string_view info, size_t length) {
  std::unique_ptr<EVP_KDF, decltype(&EVP_KDF_free)> kdf(EVP_KDF_fetch(nullptr, "HKDF", nullptr), &EVP_KDF_free);
  std::unique_ptr<EVP_KDF_CTX, decltype(&EVP_KDF_CTX_free)> ctx(kdf ? EVP_KDF_CTX_new(kdf.get()) : nullptr,
                                                                &EVP_KDF_CTX_free);
  char digest[] = "SHA256";
  // OSSL_PARAM takes non-const pointers; OpenSSL only reads them.
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, const_cast<char*>(ikm.data()), ikm.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, const_cast<char*>(salt.data()), salt.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, const_cast<char*>(info.data()), info.size()),
      OSSL_PARAM_END};
  std::string out(length, '\0');
  if (ctx == nullptr || EVP_KDF_derive(ctx.get(), reinterpret_cast<unsigned char*>(out.data()), length, params) != 1) {
    std::fprintf(stderr, "fatal: OpenSSL failed computing HKDF-SHA256\n");
    std::abort();
  }
  return out;
}

Result<std::string> Ed25519PublicKey(std::string_view seed) {
  if (seed.size() != kEd25519SeedBytes) return InvalidArgument("an Ed25519 private key is 32 bytes");
  PkeyPtr key(EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nullptr, Bytes(seed), seed.size()), &EVP_PKEY_free);
  std::string public_key(kEd25519PublicKeyBytes, '\0');
  size_t length = public_key.size();
  if (key == nullptr ||
      EVP_PKEY_get_raw_public_key(key.get(), reinterpret_cast<unsigned char*>(public_key.data()), &length) != 1 ||
      length != kEd25519PublicKeyBytes) {
    return Internal("OpenSSL could not make an Ed25519 public key");
  }
  return public_key;
}

Result<std::string> Ed25519Sign(std::string_view seed, std::initializer_list<std::string_view> parts) {
  if (seed.size() != kEd25519SeedBytes) return InvalidArgument("an Ed25519 private key is 32 bytes");
  PkeyPtr key(EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nullptr, Bytes(seed), seed.size()), &EVP_PKEY_free);
  MdContext ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  const std::string message = Joined(parts);
  std::string signature(kEd25519SignatureBytes, '\0');
  size_t length = signature.size();
  const bool signed_ok = key != nullptr && ctx != nullptr &&
                         EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, key.get()) == 1 &&
                         EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(signature.data()), &length,
                                        Bytes(message), message.size()) == 1 &&
                         length == kEd25519SignatureBytes;
  if (!signed_ok) return Internal("OpenSSL could not make an Ed25519 signature");
  return signature;
}

bool Ed25519Verify(std::string_view public_key, std::initializer_list<std::string_view> parts,
                   std::string_view signature) {
  if (public_key.size() != kEd25519PublicKeyBytes || signature.size() != kEd25519SignatureBytes) return false;
  PkeyPtr key(EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nullptr, Bytes(public_key), public_key.size()),
              &EVP_PKEY_free);
  MdContext ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  const std::string message = Joined(parts);
  return key != nullptr && ctx != nullptr &&
         EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, key.get()) == 1 &&
         EVP_DigestVerify(ctx.get(), Bytes(signature), signature.size(), Bytes(message), message.size()) == 1;
}

}  // namespace txscore
