#include "fraud/keyset.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>

#include "common/durable_file.h"
#include "common/file_io.h"
#include "common/sha256.h"
#include "common/signing.h"
#include "common/wipe.h"

namespace txscore::fraud {
namespace {

constexpr char kFormat[] = "txscore-keyset";
constexpr char kPublicKeysFormat[] = "txscore-audit-public-keys";
constexpr char kDerivation[] = "hkdf-sha256";
constexpr char kWrappedFormat[] = "txscore-keyset-wrapped";
// Bound to the ciphertext (GCM's additional data): a wrapped keyset cannot pass for anything else.
constexpr char kWrapAad[] = "txscore-keyset-wrapped/1";
constexpr size_t kNonceBytes = 12, kTagBytes = 16;

// The bytes of lowercase or uppercase hex `text`, or nullopt-like empty + false.
bool FromHex(std::string_view text, std::string* out) {
  if (text.size() % 2 != 0) return false;
  out->clear();
  for (size_t i = 0; i < text.size(); i += 2) {
    int value = 0;
    for (size_t j = 0; j < 2; ++j) {
      const char c = text[i + j];
      const int digit = c >= '0' && c <= '9'   ? c - '0'
                        : c >= 'a' && c <= 'f' ? c - 'a' + 10
                        : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                               : -1;
      if (digit < 0) return false;
      value = value * 16 + digit;
    }
    out->push_back(static_cast<char>(value));
  }
  return true;
}

std::string RandomBytes(size_t n) {
  std::string bytes(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(bytes.data()), static_cast<int>(n)) != 1) std::abort();
  return bytes;
}

bool ValidKeyId(const std::string& id) {
  return !id.empty() && id.size() <= 32 &&
         id.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") == std::string::npos;
}

struct CipherDeleter {
  void operator()(EVP_CIPHER_CTX* ctx) const { EVP_CIPHER_CTX_free(ctx); }
};

// Who may replace a file of keys: its owner, who must be this process's user or root (root
// alone can make a file root's), and whoever may write to its directory, which must therefore be
// no one else unless the directory is sticky (a sticky directory lets others add files only).
Status CheckOnlyOwnerMayReplace(const struct stat& file, const std::string& path, const std::string& what) {
  if (file.st_uid != ::geteuid() && file.st_uid != 0) {
    return FailedPrecondition(what + " " + path + " belongs to user " + std::to_string(file.st_uid) +
                              ", not to this process's user " + std::to_string(::geteuid()) + " (or root)");
  }
  const std::string dir = std::filesystem::path(path).parent_path().string();
  struct stat dir_st {};
  if (::stat(dir.empty() ? "." : dir.c_str(), &dir_st) == 0 && (dir_st.st_mode & (S_IWGRP | S_IWOTH)) != 0 &&
      (dir_st.st_mode & S_ISVTX) == 0) {
    return FailedPrecondition(what + " " + path + " lies in a directory group or others may write to, so they could " +
                              "replace it; run: chmod go-w " + (dir.empty() ? "." : dir));
  }
  return Status::Ok();
}

// A key file must be its owner's alone (or a Kubernetes Secret's file, which an fsGroup makes
// 0440 for the pod's group: IsKubernetesSecretOfOurGroup), and only its owner may replace it.
Status CheckPrivate(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return NotFound(what + " " + path + " does not exist");
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0 && !IsKubernetesSecretOfOurGroup(st)) {
    return FailedPrecondition(what + " " + path + " is readable by group or others; run: chmod 600 " + path);
  }
  return CheckOnlyOwnerMayReplace(st, path, what);
}

}  // namespace

const char* KeyStateName(KeyState state) {
  switch (state) {
    case KeyState::kPrimary:
      return "primary";
    case KeyState::kActive:
      return "active";
    case KeyState::kRetired:
      return "retired";
  }
  return "retired";
}

Keyset::~Keyset() {
  for (KeysetKey& key : keys_) OPENSSL_cleanse(key.secret.data(), key.secret.size());
}

Result<Keyset> Keyset::FromKeys(std::vector<KeysetKey> keys) {
  std::set<std::string> ids;
  int primaries = 0;
  for (const KeysetKey& key : keys) {
    if (!ValidKeyId(key.id)) {
      return InvalidArgument("key id \"" + key.id + "\" is not 1-32 characters of a-z, 0-9 and -");
    }
    if (!ids.insert(key.id).second) return InvalidArgument("key id \"" + key.id + "\" appears twice");
    if (key.secret.size() < kKeyBytes || (key.id != kLegacyKeyId && key.secret.size() != kKeyBytes)) {
      return InvalidArgument("key \"" + key.id + "\" has " + std::to_string(key.secret.size()) +
                             " secret bytes; a key has 32");
    }
    if (key.state == KeyState::kPrimary) ++primaries;
  }
  if (primaries != 1) {
    return InvalidArgument("a keyset needs exactly one primary key; this one has " + std::to_string(primaries));
  }
  Keyset keyset;
  keyset.keys_ = std::move(keys);
  return keyset;
}

Keyset Keyset::Generate(int64_t now_ms) {
  Keyset keyset;
  keyset.keys_.push_back({"k1", KeyState::kPrimary, now_ms, 0, RandomBytes(kKeyBytes), /*per_purpose=*/true});
  return keyset;
}

Keyset Keyset::Legacy(std::string key) {
  Keyset keyset;
  keyset.keys_.push_back({kLegacyKeyId, KeyState::kPrimary, 0, 0, std::move(key)});
  return keyset;
}

const KeysetKey& Keyset::primary() const {
  for (const KeysetKey& key : keys_) {
    if (key.state == KeyState::kPrimary) return key;
  }
  std::abort();  // FromKeys, Generate and Legacy each make exactly one
}

Keyset Keyset::Rotated(int64_t now_ms) const {
  Keyset next = *this;
  int highest = 0;
  for (KeysetKey& key : next.keys_) {
    if (key.state == KeyState::kPrimary) key.state = KeyState::kActive;
    if (key.id.size() > 1 && key.id[0] == 'k' && key.id.find_first_not_of("0123456789", 1) == std::string::npos &&
        key.id.size() < 10) {
      highest = std::max(highest, std::atoi(key.id.c_str() + 1));
    }
  }
  next.keys_.push_back(
      {"k" + std::to_string(highest + 1), KeyState::kPrimary, now_ms, 0, RandomBytes(kKeyBytes), /*per_purpose=*/true});
  return next;
}

Result<Keyset> Keyset::WithRetired(const std::string& id, int64_t now_ms) const {
  Keyset next = *this;
  for (KeysetKey& key : next.keys_) {
    if (key.id != id) continue;
    if (key.state == KeyState::kPrimary) {
      return InvalidArgument("key " + id + " is the primary key: rotate first (txscore keys rotate), then retire it");
    }
    if (key.state != KeyState::kRetired) key.retired_ms = now_ms;  // retiring twice keeps the first time
    key.state = KeyState::kRetired;
    return next;
  }
  return NotFound("the keyset has no key " + id);
}

std::string PurposeKey(const KeysetKey& key, KeyPurpose purpose) {
  const char* label = "txscore audit signing key v1 (ed25519)";
  switch (purpose) {
    case KeyPurpose::kCardToken:
      if (!key.per_purpose) return key.secret;
      label = "txscore card token key v1";
      break;
    case KeyPurpose::kClaimantToken:
      if (!key.per_purpose) return key.secret;
      label = "txscore claimant token key v1";
      break;
    case KeyPurpose::kAuditSigning:
      break;
  }
  return HkdfSha256(key.secret, "txscore keyset", label, kKeyBytes);
}

Result<std::string> AuditSigningPublicKey(const KeysetKey& key) {
  std::string seed = PurposeKey(key, KeyPurpose::kAuditSigning);
  Result<std::string> public_key = Ed25519PublicKey(seed);
  WipeString(&seed);
  return public_key;
}

std::string MakeToken(std::string_view key_id, std::string_view purpose_key, std::string_view value) {
  const std::string hex = HexOfBytes(HmacSha256Bytes(purpose_key, {value}));
  return key_id == kLegacyKeyId ? hex : std::string(key_id) + "_" + hex;
}

std::string Keyset::TokenUnder(const KeysetKey& key, std::string_view value, KeyPurpose purpose) {
  std::string purpose_key = PurposeKey(key, purpose);
  std::string token = MakeToken(key.id, purpose_key, value);
  WipeString(&purpose_key);
  return token;
}

std::string DeriveLegacyAuditHmacKey(const KeysetKey& key) {
  return HmacSha256Bytes(key.secret, {"txscore audit checkpoint key v1"});
}

std::string Keyset::KeyIdOf(std::string_view token) {
  const auto is_hex = [](std::string_view s) {
    return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string_view::npos;
  };
  if (is_hex(token)) return kLegacyKeyId;
  const size_t underscore = token.find('_');
  if (underscore == std::string_view::npos || !is_hex(token.substr(underscore + 1))) return "";
  const std::string id(token.substr(0, underscore));
  return ValidKeyId(id) ? id : "";
}

Status CheckSuccessor(const Keyset& running, const Keyset& next) {
  for (const KeysetKey& key : running.keys()) {
    const KeysetKey* kept = nullptr;
    for (const KeysetKey& candidate : next.keys()) {
      if (candidate.id == key.id) kept = &candidate;
    }
    if (kept == nullptr) {
      return FailedPrecondition("the new keyset drops key " + key.id +
                                ", whose cards' history it would orphan: retire a key instead of removing it");
    }
    if (kept->per_purpose != key.per_purpose) {
      return FailedPrecondition("the new keyset changes key " + key.id +
                                "'s derivation, which would give every card under it a new token: keep the key's "
                                "\"derivation\" as it is (rotate to get a key with purposes)");
    }
    if (kept->secret.size() != key.secret.size() ||
        CRYPTO_memcmp(kept->secret.data(), key.secret.data(), key.secret.size()) != 0) {
      return FailedPrecondition("the new keyset gives key " + key.id +
                                " another secret: a key id names one key for good (rotate to get a new one)");
    }
  }
  return Status::Ok();
}

namespace {

// Wipes every string a JSON document holds (its secret_hex values) before it is freed.
template <typename Json>
void WipeStrings(Json* doc) {
  if (doc->is_string()) {
    WipeString(doc->template get_ptr<std::string*>());
  } else if (doc->is_structured()) {
    for (auto& item : *doc) WipeStrings(&item);
  }
}

}  // namespace

std::string SerializeKeyset(const Keyset& keyset) {
  nlohmann::ordered_json keys = nlohmann::ordered_json::array();
  for (const KeysetKey& key : keyset.keys()) {
    nlohmann::ordered_json entry = {{"id", key.id}, {"state", KeyStateName(key.state)}, {"created_ms", key.created_ms}};
    if (key.retired_ms != 0) entry["retired_ms"] = key.retired_ms;
    if (key.per_purpose) entry["derivation"] = kDerivation;
    entry["secret_hex"] = HexOfBytes(key.secret);
    keys.push_back(std::move(entry));
  }
  nlohmann::ordered_json doc = {{"format", kFormat}, {"version", 1}, {"keys", std::move(keys)}};
  WipeStrings(&keys);  // whatever an initializer list copied rather than moved
  std::string text = doc.dump(2) + "\n";
  WipeStrings(&doc);
  return text;
}

Result<Keyset> ParseKeyset(std::string_view json_text, const std::string& where) {
  nlohmann::json doc = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  // The parsed secrets (secret_hex) are wiped however this returns.
  struct WipeOnReturn {
    nlohmann::json* doc;
    ~WipeOnReturn() { WipeStrings(doc); }
  } wipe_doc{&doc};
  if (doc.is_discarded() || !doc.is_object()) return InvalidArgument(where + ": not a JSON object");
  std::vector<KeysetKey> keys;
  try {
    if (doc.at("format").get<std::string>() != kFormat || doc.at("version").get<int>() != 1) {
      return InvalidArgument(where + ": not a txscore keyset of version 1 (format \"txscore-keyset\", version 1)");
    }
    for (const nlohmann::json& entry : doc.at("keys")) {
      KeysetKey key;
      key.id = entry.at("id").get<std::string>();
      const std::string state = entry.at("state").get<std::string>();
      if (state == "primary") {
        key.state = KeyState::kPrimary;
      } else if (state == "active") {
        key.state = KeyState::kActive;
      } else if (state == "retired") {
        key.state = KeyState::kRetired;
      } else {
        return InvalidArgument(where + ": key " + key.id + " has state \"" + state +
                               "\"; a state is primary, active or retired");
      }
      key.created_ms = entry.value("created_ms", int64_t{0});
      key.retired_ms = entry.value("retired_ms", int64_t{0});
      if (key.retired_ms != 0 && key.state != KeyState::kRetired) {
        return InvalidArgument(where + ": key " + key.id + " has a retired_ms but its state is " + state);
      }
      if (entry.contains("derivation")) {
        const std::string derivation = entry.at("derivation").get<std::string>();
        if (derivation != kDerivation) {
          return InvalidArgument(where + ": key " + key.id + " has derivation \"" + derivation +
                                 "\"; this version knows \"" + kDerivation + "\" (or none, for a key from before)");
        }
        key.per_purpose = true;
      }
      if (!FromHex(entry.at("secret_hex").get_ref<const std::string&>(), &key.secret)) {
        return InvalidArgument(where + ": key " + key.id + ": secret_hex is not hex");
      }
      keys.push_back(std::move(key));
    }
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(where + ": malformed keyset: " + e.what());
  }
  Result<Keyset> keyset = Keyset::FromKeys(std::move(keys));
  if (!keyset.ok()) return InvalidArgument(where + ": " + keyset.error().message);
  return keyset;
}

bool IsWrappedKeyset(std::string_view file_text) {
  return file_text.find(std::string("\"") + kWrappedFormat + "\"") != std::string_view::npos;
}

Result<std::string> WrapKeyset(const std::string& plain_json, const std::string& kek) {
  if (kek.size() != kKeyBytes) return InvalidArgument("a key-encryption key has 32 bytes");
  const std::string nonce = RandomBytes(kNonceBytes);
  std::unique_ptr<EVP_CIPHER_CTX, CipherDeleter> ctx(EVP_CIPHER_CTX_new());
  std::string ciphertext(plain_json.size(), '\0');
  unsigned char tag[kTagBytes];
  int n = 0, total = 0;
  const auto* key = reinterpret_cast<const unsigned char*>(kek.data());
  const auto* iv = reinterpret_cast<const unsigned char*>(nonce.data());
  if (ctx == nullptr || EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, key, iv) != 1 ||
      EVP_EncryptUpdate(ctx.get(), nullptr, &n, reinterpret_cast<const unsigned char*>(kWrapAad),
                        static_cast<int>(std::strlen(kWrapAad))) != 1 ||
      EVP_EncryptUpdate(ctx.get(), reinterpret_cast<unsigned char*>(ciphertext.data()), &n,
                        reinterpret_cast<const unsigned char*>(plain_json.data()),
                        static_cast<int>(plain_json.size())) != 1) {
    return Internal("AES-256-GCM encryption failed");
  }
  total = n;
  if (EVP_EncryptFinal_ex(ctx.get(), reinterpret_cast<unsigned char*>(ciphertext.data()) + total, &n) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, kTagBytes, tag) != 1) {
    return Internal("AES-256-GCM encryption failed");
  }
  nlohmann::ordered_json doc = {
      {"format", kWrappedFormat},
      {"version", 1},
      {"algorithm", "AES-256-GCM"},
      {"nonce_hex", HexOfBytes(nonce)},
      {"ciphertext_hex", HexOfBytes(ciphertext)},
      {"tag_hex", HexOfBytes(std::string_view(reinterpret_cast<const char*>(tag), kTagBytes))}};
  return doc.dump(2) + "\n";
}

Result<std::string> UnwrapKeyset(const std::string& wrapped_json, const std::string& kek, const std::string& where) {
  const nlohmann::json doc = nlohmann::json::parse(wrapped_json, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return InvalidArgument(where + ": not a JSON object");
  std::string nonce, ciphertext, tag;
  try {
    if (doc.at("format").get<std::string>() != kWrappedFormat ||
        doc.at("algorithm").get<std::string>() != "AES-256-GCM" ||
        !FromHex(doc.at("nonce_hex").get<std::string>(), &nonce) ||
        !FromHex(doc.at("ciphertext_hex").get<std::string>(), &ciphertext) ||
        !FromHex(doc.at("tag_hex").get<std::string>(), &tag) || nonce.size() != kNonceBytes ||
        tag.size() != kTagBytes) {
      return InvalidArgument(where + ": not a keyset wrapped with AES-256-GCM");
    }
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(where + ": malformed wrapped keyset: " + e.what());
  }
  std::unique_ptr<EVP_CIPHER_CTX, CipherDeleter> ctx(EVP_CIPHER_CTX_new());
  std::string plain(ciphertext.size(), '\0');
  int n = 0;
  const auto* key = reinterpret_cast<const unsigned char*>(kek.data());
  const auto* iv = reinterpret_cast<const unsigned char*>(nonce.data());
  const bool opened = ctx != nullptr && kek.size() == kKeyBytes &&
                      EVP_DecryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, key, iv) == 1 &&
                      EVP_DecryptUpdate(ctx.get(), nullptr, &n, reinterpret_cast<const unsigned char*>(kWrapAad),
                                        static_cast<int>(std::strlen(kWrapAad))) == 1 &&
                      EVP_DecryptUpdate(ctx.get(), reinterpret_cast<unsigned char*>(plain.data()), &n,
                                        reinterpret_cast<const unsigned char*>(ciphertext.data()),
                                        static_cast<int>(ciphertext.size())) == 1 &&
                      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, kTagBytes, tag.data()) == 1 &&
                      EVP_DecryptFinal_ex(ctx.get(), reinterpret_cast<unsigned char*>(plain.data()) + n, &n) == 1;
  if (!opened) {
    return InvalidArgument(where +
                           ": cannot unwrap the keyset: the key-encryption key is not the one it was wrapped "
                           "with, or the file was altered");
  }
  return plain;
}

namespace {

// Key-encryption keys taken out of the environment (by variable name): kept for the reloads
// that read them again. Never freed: they live as long as the keys they unwrap.
struct TakenKeks {
  std::mutex mutex;
  std::map<std::string, std::string> by_variable;
};
TakenKeks& Taken() {
  static auto* taken = new TakenKeks();
  return *taken;
}

}  // namespace

Result<std::string> LoadKek(const KekSource& source) {
  if (!source.file.empty() && !source.env.empty()) {
    return InvalidArgument("give the key-encryption key as a file or as an environment variable, not both");
  }
  std::string text, where;
  char* environment_value = nullptr;
  if (!source.file.empty()) {
    TXSCORE_RETURN_IF_ERROR(CheckPrivate(source.file, "key-encryption key file"));
    TXSCORE_ASSIGN_OR_RETURN(text, ReadFileBounded(source.file, 4096, "key-encryption key file"));
    where = "key-encryption key file " + source.file;
  } else {
    {
      std::lock_guard<std::mutex> lock(Taken().mutex);
      if (const auto it = Taken().by_variable.find(source.env); it != Taken().by_variable.end()) return it->second;
    }
    environment_value = std::getenv(source.env.c_str());
    if (environment_value == nullptr) {
      return NotFound("the environment variable " + source.env + " (the key-encryption key) is not set");
    }
    text = environment_value;
    where = "the environment variable " + source.env;
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  std::string kek;
  const bool valid = text.size() == 2 * kKeyBytes && FromHex(text, &kek);
  WipeString(&text);
  if (!valid) {
    WipeString(&kek);
    return InvalidArgument(where + " must hold 64 hex digits (32 bytes; openssl rand -hex 32)");
  }
  if (environment_value != nullptr) {
    // Taken out of the environment: the value wiped where it lies (/proc/PID/environ shows the
    // initial environment block) and the variable removed, so that no child process or reader of
    // the environment sees it; later reloads find it here.
    std::lock_guard<std::mutex> lock(Taken().mutex);
    Taken().by_variable.emplace(source.env, kek);
    OPENSSL_cleanse(environment_value, std::strlen(environment_value));
    ::unsetenv(source.env.c_str());
  }
  return kek;
}

namespace {

// Why a raw key is too weak to tokenize card numbers under (anyone could guess it), or "".
// 32 random bytes have about 30 distinct values; fewer than 16 happens by chance with
// probability far below 2^-100.
std::string WeakRawKeyReason(const std::string& key) {
  bool seen[256] = {};  // which byte values the key holds: wiped below, as the key is
  size_t distinct = 0;
  for (const char c : key) {
    bool& value_seen = seen[static_cast<unsigned char>(c)];
    distinct += value_seen ? 0 : 1;
    value_seen = true;
  }
  OPENSSL_cleanse(seen, sizeof seen);
  // 32 random bytes hold about 30 values, and 64 random hex digits all 16 but rarely fewer
  // than 12: fewer than 8 happens by chance with probability below 2^-60 either way.
  if (distinct < 8) return "has only " + std::to_string(distinct) + " distinct byte values (a random key has more)";
  for (size_t period = 1; period <= key.size() / 2; ++period) {
    bool repeats = true;
    for (size_t i = period; i < key.size() && repeats; ++i) repeats = key[i] == key[i - period];
    if (repeats) return "repeats a pattern of " + std::to_string(period) + " bytes";
  }
  return "";
}

}  // namespace

Result<Keyset> LoadKeyset(const std::string& path, const KekSource& kek, KeyFileForm form) {
  TXSCORE_RETURN_IF_ERROR(CheckPrivate(path, "keyset file"));
  TXSCORE_ASSIGN_OR_RETURN(std::string text, ReadFileBounded(path, 1 << 20, "keyset file"));
  struct WipeOnReturn {  // the file's text (the keyset in clear, or unwrapped) however this returns
    std::string* text;
    ~WipeOnReturn() { WipeString(text); }
  } wipe_text{&text};
  const size_t first = text.find_first_not_of(" \t\r\n");
  // A keyset is JSON text; a raw key is random bytes, which may begin with '{' too (one file in
  // 256): random bytes are never all printable, so they are not taken for a broken keyset.
  const bool text_only = std::all_of(
      text.begin(), text.end(), [](char c) { return (c >= 0x20 && c < 0x7f) || c == '\n' || c == '\r' || c == '\t'; });
  if ((first == std::string::npos || text[first] != '{' || !text_only) && kek.empty()) {
    // Not a keyset's text, yet it names the keyset format: a keyset torn, padded with NULs, or
    // with bytes added around it (a BOM, junk), not a raw key (taken as one, it would give every
    // card a new token). Random bytes hold this 14-byte marker with probability below 2^-100.
    if (text.find("txscore-keyset") != std::string::npos) {
      return DataLoss("keyset file " + path +
                      " names the keyset format but is not a keyset's text (torn, padded with NUL bytes, or bytes "
                      "added around it?): restore it from a backup");
    }
    if (form == KeyFileForm::kKeysetOnly) {
      return InvalidArgument("keyset file " + path +
                             " is not a keyset (JSON text, from txscore keys create); a raw key file is read only "
                             "when the settings name it as security.card_key_file");
    }
    // A raw key file from before keysets: one legacy key.
    if (text.size() < kKeyBytes) {
      return InvalidArgument("card key file " + path + " holds " + std::to_string(text.size()) +
                             " bytes; at least 32 random bytes are needed (openssl rand -out " + path + " 32)");
    }
    if (const std::string weak = WeakRawKeyReason(text); !weak.empty()) {
      return InvalidArgument("card key file " + path + " " + weak +
                             ": not a random key; make one with txscore keys create (or openssl rand -out " + path +
                             " 32)");
    }
    return Keyset::Legacy(std::move(text));
  }
  if (!IsWrappedKeyset(text) && !kek.empty()) {
    // The settings promise a wrapped keyset: a file in clear is refused, not quietly used.
    return FailedPrecondition("keyset file " + path +
                              " is not wrapped, but a key-encryption key is configured: wrap it (txscore keys "
                              "rotate --kek-file/--kek-env writes it wrapped) or drop kek_file/kek_env");
  }
  if (IsWrappedKeyset(text)) {
    if (kek.empty()) {
      return FailedPrecondition("keyset file " + path +
                                " is wrapped: give its key-encryption key (security.kek_file or kek_env in the "
                                "settings; --kek-file or --kek-env for txscore keys)");
    }
    TXSCORE_ASSIGN_OR_RETURN(std::string key, LoadKek(kek));
    Result<std::string> plain = UnwrapKeyset(text, key, "keyset file " + path);
    WipeString(&key);
    if (!plain.ok()) return plain.error();
    text = std::move(*plain);
  }
  return ParseKeyset(text, "keyset file " + path);
}

Status SaveKeyset(const Keyset& keyset, const std::string& path, const KekSource& kek) {
  std::string text = SerializeKeyset(keyset);
  if (!kek.empty()) {
    TXSCORE_ASSIGN_OR_RETURN(std::string key, LoadKek(kek));
    Result<std::string> wrapped = WrapKeyset(text, key);
    WipeString(&key);
    WipeString(&text);
    if (!wrapped.ok()) return wrapped.error();
    text = std::move(*wrapped);
  }
  // Written beside it, then renamed over it: a crash leaves the old keyset or the new one,
  // never a truncated file (which would lose every key, and every card's history with it).
  const std::string temporary = path + ".tmp";
  std::filesystem::remove(temporary);
  Status written = WriteNewFileDurably(temporary, text, 0600);
  OPENSSL_cleanse(text.data(), text.size());
  TXSCORE_RETURN_IF_ERROR(written);
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) return Internal("cannot replace keyset file " + path + ": " + ec.message());
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return SyncDirectory(dir.empty() ? "." : dir);
}

Result<std::string> SerializeAuditPublicKeys(const Keyset& keyset) {
  nlohmann::ordered_json keys = nlohmann::ordered_json::array();
  for (const KeysetKey& key : keyset.keys()) {
    TXSCORE_ASSIGN_OR_RETURN(std::string public_key, AuditSigningPublicKey(key));
    nlohmann::ordered_json entry = {{"id", key.id}, {"state", KeyStateName(key.state)}, {"created_ms", key.created_ms}};
    if (key.retired_ms != 0) entry["retired_ms"] = key.retired_ms;
    entry["ed25519_public_hex"] = HexOfBytes(public_key);
    keys.push_back(std::move(entry));
  }
  const nlohmann::ordered_json doc = {{"format", kPublicKeysFormat}, {"version", 1}, {"keys", std::move(keys)}};
  return doc.dump(2) + "\n";
}

Result<std::vector<AuditPublicKey>> ParseAuditPublicKeys(std::string_view json_text, const std::string& where) {
  const nlohmann::json doc = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return InvalidArgument(where + ": not a JSON object");
  std::vector<AuditPublicKey> keys;
  std::set<std::string> ids;
  try {
    if (doc.at("format").get<std::string>() != kPublicKeysFormat || doc.at("version").get<int>() != 1) {
      return InvalidArgument(where + ": not txscore audit public keys of version 1 (format \"" +
                             std::string(kPublicKeysFormat) + "\", version 1; txscore keys public writes them)");
    }
    for (const nlohmann::json& entry : doc.at("keys")) {
      AuditPublicKey key;
      key.id = entry.at("id").get<std::string>();
      if (!ValidKeyId(key.id) || !ids.insert(key.id).second) {
        return InvalidArgument(where + ": key id \"" + key.id + "\" is malformed or appears twice");
      }
      const std::string state = entry.at("state").get<std::string>();
      if (state != "primary" && state != "active" && state != "retired") {
        return InvalidArgument(where + ": key " + key.id + " has state \"" + state + "\"");
      }
      key.state = state == "primary" ? KeyState::kPrimary : state == "active" ? KeyState::kActive : KeyState::kRetired;
      key.created_ms = entry.value("created_ms", int64_t{0});
      key.retired_ms = entry.value("retired_ms", int64_t{0});
      if (!FromHex(entry.at("ed25519_public_hex").get_ref<const std::string&>(), &key.public_key) ||
          key.public_key.size() != kEd25519PublicKeyBytes) {
        return InvalidArgument(where + ": key " + key.id + ": ed25519_public_hex is not 64 hex digits");
      }
      keys.push_back(std::move(key));
    }
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(where + ": malformed public keys: " + e.what());
  }
  return keys;
}

Result<std::vector<AuditPublicKey>> LoadAuditPublicKeys(const std::string& path) {
  // Anyone may read it; whoever may change it could put their own key in and sign a forged trail.
  const std::string what = "public key file";
  TXSCORE_ASSIGN_OR_RETURN(
      std::string text, ReadCheckedFileBounded(path, 1 << 20, what, [&](const struct stat& file) -> Status {
        if ((file.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
          return FailedPrecondition(what + " " + path +
                                    " may be written by group or others, who could put their own key in it; run: "
                                    "chmod go-w " +
                                    path);
        }
        return CheckOnlyOwnerMayReplace(file, path, what);
      }));
  return ParseAuditPublicKeys(text, what + " " + path);
}

}  // namespace txscore::fraud
