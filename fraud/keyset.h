// The keys that tokenize card numbers and claimant ids: a keyset, so that keys can rotate
// without losing any card's history (PCI DSS 3.6/3.7: cryptoperiods and key changes).
//
// Each key has an id, a state and 32 secret bytes, from which each use gets its own key
// (KeyPurpose: card tokens, claimant tokens, the audit trail's Ed25519 signing key):
//   primary  tokenizes new traffic (exactly one);
//   active   still resolves: a card whose state was written under it is found, and re-keyed
//            under the primary on its next transaction;
//   retired  kept for the record only: its tokens are no longer resolved.
// A token carries its key's id: "<id>_<64 hex digits of HMAC-SHA256(purpose key, value)>". One id is
// special: "legacy", the key of a raw key file from before keysets, whose tokens are the bare
// 64 hex digits, so a database written then is still read (txscore keys import puts such a key
// into a keyset).
//
// The file (docs/security.md, "Keys") is JSON:
//   {"format": "txscore-keyset", "version": 1,
//    "keys": [{"id": "k1", "state": "primary", "created_ms": 1796180000000, "derivation": "hkdf-sha256",
//              "secret_hex": "<64 hex>"}]}
// or, wrapped by a key-encryption key (KEK) with AES-256-GCM, so the data keys are never on disk
// in clear:
//   {"format": "txscore-keyset-wrapped", "version": 1, "algorithm": "AES-256-GCM",
//    "nonce_hex": "<24 hex>", "ciphertext_hex": "...", "tag_hex": "<32 hex>"}
// The KEK (64 hex digits) comes from a file or an environment variable: the one place where an
// HSM or a KMS would plug in (it would unwrap the keyset, or hold the KEK itself).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace txscore::fraud {

enum class KeyState { kPrimary, kActive, kRetired };
const char* KeyStateName(KeyState state);

struct KeysetKey {
  std::string id;  // [a-z0-9-], 1-32 characters
  KeyState state = KeyState::kActive;
  int64_t created_ms = 0;  // ms since the epoch
  // When `txscore keys retire` retired it, ms since the epoch: a checkpoint of the audit trail
  // it signed later is refused. 0: not retired (or retired before keysets recorded when).
  int64_t retired_ms = 0;
  std::string secret;  // 32 bytes
  // Whether card and claimant tokens are made under keys of their own derived from `secret`
  // (PurposeKey; "derivation": "hkdf-sha256" in the file). True for the keys `keys create` and
  // `keys rotate` make; false for a legacy key and for keys written before purposes existed,
  // which tokenize under `secret` itself, so that the history stored under them stays found
  // (rotating moves new traffic to a key with purposes).
  bool per_purpose = false;
};

// What a key is used for. Each gets its own key, so that holding one (the public key that
// verifies the audit trail, above all) gives nothing of another.
enum class KeyPurpose { kCardToken, kClaimantToken, kAuditSigning };

// The 32-byte key `key` gives `purpose`: HKDF-SHA256 (common/signing.h) of the secret with the
// purpose's label as info. A key without per_purpose gives its secret itself for card and
// claimant tokens (as before purposes; the claimant's "claimant:" prefix still separates the
// two). The audit signing key is derived for every key: an Ed25519 private key, whose public key
// (AuditSigningPublicKey) is all that `txscore audit verify --public-keys` needs.
std::string PurposeKey(const KeysetKey& key, KeyPurpose purpose);
Result<std::string> AuditSigningPublicKey(const KeysetKey& key);
// A token of `value` under a purpose key: "<key_id>_<hex HMAC-SHA256(purpose_key, value)>", or
// the bare hex for the legacy key.
std::string MakeToken(std::string_view key_id, std::string_view purpose_key, std::string_view value);

inline constexpr char kLegacyKeyId[] = "legacy";
inline constexpr size_t kKeyBytes = 32;

// Where a wrapped keyset's key-encryption key comes from (at most one of the two).
struct KekSource {
  std::string file;  // a file holding 64 hex digits, mode 0600
  std::string env;   // an environment variable holding 64 hex digits
  bool empty() const { return file.empty() && env.empty(); }
};

// Copies hold copies of the secrets; each is wiped when its keyset is destroyed.
class Keyset {
 public:
  Keyset() = default;
  Keyset(const Keyset&) = default;
  Keyset(Keyset&&) = default;
  Keyset& operator=(const Keyset&) = default;
  Keyset& operator=(Keyset&&) = default;
  ~Keyset();

  // Checks: ids well-formed and unique, exactly one primary, 32-byte secrets.
  static Result<Keyset> FromKeys(std::vector<KeysetKey> keys);
  // A new keyset of one primary key "k1" with random secret bytes.
  static Keyset Generate(int64_t now_ms);
  // One legacy primary key (a raw key file's bytes; any length from 32).
  static Keyset Legacy(std::string key);

  const std::vector<KeysetKey>& keys() const { return keys_; }
  const KeysetKey& primary() const;
  // A copy with a new primary key (id "k<n+1>", random secret); the old primary becomes active.
  Keyset Rotated(int64_t now_ms) const;
  // A copy with key `id` retired; refused for the primary and for an unknown id.
  Result<Keyset> WithRetired(const std::string& id, int64_t now_ms) const;

  // The token of `value` under `key`'s key for `purpose` (a claimant's value is
  // "claimant:<id>"). Derives the purpose key on each call: CardTokenizer keeps them derived.
  static std::string TokenUnder(const KeysetKey& key, std::string_view value,
                                KeyPurpose purpose = KeyPurpose::kCardToken);
  // The id of the key a txscore token was made with ("legacy" for bare hex), or "" when the
  // token is not in txscore's form.
  static std::string KeyIdOf(std::string_view token);

 private:
  std::vector<KeysetKey> keys_;
};

// The HMAC secret of the audit checkpoints written before they were signed with Ed25519:
// HMAC-SHA256(key.secret, "txscore audit checkpoint key v1"). Only `audit verify --keyset` uses
// it, to verify a trail written then; nothing signs with it any more.
std::string DeriveLegacyAuditHmacKey(const KeysetKey& key);

// The audit trail's public keys (no secret): what `txscore keys public` writes for whoever
// verifies the trail. JSON:
//   {"format": "txscore-audit-public-keys", "version": 1,
//    "keys": [{"id": "k1", "state": "primary", "created_ms": ..., "retired_ms": ...,
//              "ed25519_public_hex": "<64 hex>"}]}
struct AuditPublicKey {
  std::string id;
  KeyState state = KeyState::kActive;
  int64_t created_ms = 0;
  int64_t retired_ms = 0;  // 0: not retired (or not known when)
  std::string public_key;  // 32 bytes
};
Result<std::string> SerializeAuditPublicKeys(const Keyset& keyset);
Result<std::vector<AuditPublicKey>> ParseAuditPublicKeys(std::string_view json_text, const std::string& where);
// Reads a public-key file, refusing one that someone other than this user (or root) could change
// (whoever may change it may swap in their own key and sign a rewritten trail): one group or
// others may write, one owned by another user, one in a directory others may write to (unless
// sticky), and a symbolic link (kInvalidArgument; name the file itself).
Result<std::vector<AuditPublicKey>> LoadAuditPublicKeys(const std::string& path);

// OK when `next` may follow `running` (a reload): it keeps every key `running` has, each with
// the same secret and derivation (states may change). A key dropped, or a secret or derivation
// changed, would orphan the history stored under it, and make its id name two keys.
Status CheckSuccessor(const Keyset& running, const Keyset& next);

// The keyset as JSON (secrets in hex); WrapKeyset seals that text under a KEK.
std::string SerializeKeyset(const Keyset& keyset);
Result<Keyset> ParseKeyset(std::string_view json_text, const std::string& where);
Result<std::string> WrapKeyset(const std::string& plain_json, const std::string& kek);
Result<std::string> UnwrapKeyset(const std::string& wrapped_json, const std::string& kek, const std::string& where);
bool IsWrappedKeyset(std::string_view file_text);
// The 32-byte KEK from its source; errors name the file or variable.
Result<std::string> LoadKek(const KekSource& source);

// What a key file named in the settings may hold: `security.keyset` names a keyset and nothing
// else; `security.card_key_file` a raw key from before keysets (or a keyset).
enum class KeyFileForm {
  kKeysetOrRawKey,  // `card_key_file`, `keys import --card-key`
  kKeysetOnly,      // `keyset`: a file that is not a keyset is refused, never read as a raw key
};

// Reads a keyset file (plain, or wrapped when `kek` names a source), refusing a file that
// group or others may read. With kKeysetOrRawKey a raw key file (not JSON) is read as
// Keyset::Legacy, and refused when its key is weak: fewer than 8 distinct byte values (32 zero
// bytes, one byte repeated) or a repeating pattern. Either way a file that names the keyset
// format but does not parse as one (torn, padded with NULs, a BOM or junk added) is refused as
// damaged, never taken for a raw key, which would give every card a new token.
Result<Keyset> LoadKeyset(const std::string& path, const KekSource& kek = {},
                          KeyFileForm form = KeyFileForm::kKeysetOrRawKey);
// Writes it (wrapped when `kek` names a source) durably with mode 0600, replacing the file.
Status SaveKeyset(const Keyset& keyset, const std::string& path, const KekSource& kek = {});

}  // namespace txscore::fraud
