// Card number (PAN) validation and tokenization.
//
// A PAN is checked (12-19 digits, Luhn) and replaced at once by a token:
// "<key id>_" + hex(HMAC-SHA256(card key, PAN)) under the keyset's primary key (fraud/keyset.h:
// the card purpose's key; a legacy key's tokens are the bare hex). The same PAN always maps to the same token under one
// key, so per-card state can be keyed by it; without the key the token reveals nothing.
// Only the token travels further: the PAN never reaches storage, logs, metrics or audit.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/pan_scan.h"  // LuhnValid
#include "common/result.h"
#include "fraud/keyset.h"

namespace txscore::fraud {

// The Luhn check digit that completes `digits` (ASCII digits) into a valid number.
char LuhnCheckDigit(std::string_view digits);

// OK when `pan` is 12-19 ASCII digits and Luhn-valid; the error never echoes the PAN.
Status ValidatePan(std::string_view pan);

// True for txscore's own token form: 64 lowercase hex digits (hex of an HMAC-SHA256), alone
// (a legacy key's) or after "<key id>_".
bool IsTxscoreTokenForm(std::string_view token);

// OK when `token` can be a card token sent by a caller that tokenizes itself, in one of two
// forms: txscore's own (IsTxscoreTokenForm; what a caller holding the key computes), or a
// caller-made token of 1-128 chars of [A-Za-z0-9_-] that holds no PAN (ContainsPan in
// pan_scan.h: 12-19 digits passing Luhn, separators ignored). Without this a PAN sent in the
// token field, formatted or embedded, would become a database key and an audit field.
Status ValidateCardToken(std::string_view token);

// OK when a card verification code (CVV2/CVC2) is 3 or 4 digits. It is checked, then wiped;
// txscore never stores it.
Status ValidateCardVerificationCode(std::string_view code);

// Thread-safe after construction: it only reads its keyset.
class CardTokenizer {
 public:
  static constexpr size_t kMinKeyBytes = 32;

  // Reads a keyset file (LoadKeyset: JSON, wrapped when `kek` names a source), or, where `form`
  // allows, a raw key file of at least kMinKeyBytes random bytes (one legacy key). Either must
  // not be readable by group or others (mode 0600 or stricter).
  static Result<std::unique_ptr<CardTokenizer>> FromKeyFile(const std::string& path, const KekSource& kek = {},
                                                            KeyFileForm form = KeyFileForm::kKeysetOrRawKey);
  static std::unique_ptr<CardTokenizer> FromKey(std::string key);  // one legacy key
  static std::unique_ptr<CardTokenizer> FromKeyset(Keyset keyset);
  ~CardTokenizer();

  // The token under the primary key. Validate the PAN first.
  std::string Tokenize(std::string_view pan) const;
  // A claimant id's token under the primary key's claimant key (of "claimant:<id>").
  std::string TokenizeClaimant(std::string_view claimant_id) const;
  // The tokens a card's state may be stored under: the primary key's first, then each active
  // key's (never a retired key's).
  std::vector<std::string> Candidates(std::string_view pan) const;
  // For a token a caller made: refused when it is in txscore's form under a key this keyset
  // has retired or never had; a caller's own token form passes (ValidateCardToken checked it).
  Status CheckCallerToken(std::string_view token, const char* field = "card_token") const;
  const Keyset& keyset() const { return keyset_; }

 private:
  explicit CardTokenizer(Keyset keyset);
  Keyset keyset_;
  // Each key's card and claimant keys (PurposeKey), in keyset_'s order, derived once; wiped at
  // destruction.
  std::vector<std::string> card_keys_, claimant_keys_;
  size_t primary_ = 0;
};

}  // namespace txscore::fraud
