#include "fraud/card_token.h"

#include "common/pan_scan.h"
#include "common/wipe.h"

namespace txscore::fraud {

char LuhnCheckDigit(std::string_view digits) {
  std::string number(digits);
  number.push_back('0');
  for (char d = '0'; d <= '9'; ++d) {  // exactly one of the ten completes a valid number
    number.back() = d;
    if (LuhnValid(number)) return d;
  }
  return '0';  // `digits` held something else than ASCII digits
}

Status ValidatePan(std::string_view pan) {
  if (pan.size() < 12 || pan.size() > 19) {
    return InvalidArgument("must be 12 to 19 digits, got " + std::to_string(pan.size()) + " characters", "card_number");
  }
  for (char c : pan) {
    if (c < '0' || c > '9') return InvalidArgument("must contain digits only", "card_number");
  }
  if (!LuhnValid(pan)) return InvalidArgument("fails the Luhn check digit", "card_number");
  return Status::Ok();
}

bool IsTxscoreTokenForm(std::string_view token) { return !Keyset::KeyIdOf(token).empty(); }

Status ValidateCardToken(std::string_view token) {
  if (token.empty() || token.size() > 128) {
    return InvalidArgument("must be 1 to 128 characters", "card_token");
  }
  // An HMAC's hex digits hold digit runs by chance (0.7 % of random 64-hex strings hold a
  // Luhn-valid run of 12-19 digits): scanning txscore's own form would refuse real cards. But
  // 64 hex digits that are all decimal digits (a chance of (10/16)^64, about 1e-13, for an
  // HMAC) are a number someone wrote: refused when they are a short number padded with zeros
  // (at most 19 digits between the zeros: a card number's length) or hold a card number.
  if (IsTxscoreTokenForm(token)) {
    const std::string_view hex = token.substr(token.size() - 64);
    if (hex.find_first_not_of("0123456789") != std::string_view::npos) return Status::Ok();
    const size_t first = hex.find_first_not_of('0');
    const size_t core = first == std::string_view::npos ? 0 : hex.find_last_not_of('0') - first + 1;
    if (core > 19 && !ContainsPan(hex)) return Status::Ok();
    return InvalidArgument(
        "is 64 decimal digits holding a number of a card's length padded with zeros, or a card number; "
        "send the card number in card_number so that it is tokenized",
        "card_token");
  }
  if (ContainsPan(token)) {
    return InvalidArgument(
        "holds a card number (12-19 digits passing the Luhn check, separators ignored); send "
        "the card number in card_number so that it is tokenized",
        "card_token");
  }
  for (char c : token) {
    bool ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '-';
    if (!ok) return InvalidArgument("may contain only letters, digits, '_' and '-'", "card_token");
  }
  return Status::Ok();
}

Status ValidateCardVerificationCode(std::string_view code) {
  if (code.size() < 3 || code.size() > 4 || code.find_first_not_of("0123456789") != std::string_view::npos) {
    return InvalidArgument("must be 3 or 4 digits", "card_verification_code");
  }
  return Status::Ok();
}

Result<std::unique_ptr<CardTokenizer>> CardTokenizer::FromKeyFile(const std::string& path, const KekSource& kek,
                                                                  KeyFileForm form) {
  TXSCORE_ASSIGN_OR_RETURN(Keyset keyset, LoadKeyset(path, kek, form));
  return FromKeyset(std::move(keyset));
}

std::unique_ptr<CardTokenizer> CardTokenizer::FromKey(std::string key) {
  return FromKeyset(Keyset::Legacy(std::move(key)));
}

std::unique_ptr<CardTokenizer> CardTokenizer::FromKeyset(Keyset keyset) {
  return std::unique_ptr<CardTokenizer>(new CardTokenizer(std::move(keyset)));
}

CardTokenizer::CardTokenizer(Keyset keyset) : keyset_(std::move(keyset)) {
  for (size_t i = 0; i < keyset_.keys().size(); ++i) {
    const KeysetKey& key = keyset_.keys()[i];
    card_keys_.push_back(PurposeKey(key, KeyPurpose::kCardToken));
    claimant_keys_.push_back(PurposeKey(key, KeyPurpose::kClaimantToken));
    if (key.state == KeyState::kPrimary) primary_ = i;
  }
}

CardTokenizer::~CardTokenizer() {  // the keyset wipes its own secrets
  for (std::string& key : card_keys_) WipeString(&key);
  for (std::string& key : claimant_keys_) WipeString(&key);
}

std::string CardTokenizer::Tokenize(std::string_view pan) const {
  return MakeToken(keyset_.keys()[primary_].id, card_keys_[primary_], pan);
}

std::string CardTokenizer::TokenizeClaimant(std::string_view claimant_id) const {
  const std::string value = "claimant:" + std::string(claimant_id);
  return MakeToken(keyset_.keys()[primary_].id, claimant_keys_[primary_], value);
}

std::vector<std::string> CardTokenizer::Candidates(std::string_view pan) const {
  std::vector<std::string> tokens{Tokenize(pan)};
  for (size_t i = 0; i < keyset_.keys().size(); ++i) {
    const KeysetKey& key = keyset_.keys()[i];
    if (key.state == KeyState::kActive) tokens.push_back(MakeToken(key.id, card_keys_[i], pan));
  }
  return tokens;
}

Status CardTokenizer::CheckCallerToken(std::string_view token, const char* field) const {
  const std::string id = Keyset::KeyIdOf(token);
  if (id.empty()) return Status::Ok();  // the caller's own form
  for (const KeysetKey& key : keyset_.keys()) {
    if (key.id != id) continue;
    if (key.state != KeyState::kRetired) return Status::Ok();
    return InvalidArgument(
        "was made with key " + id + ", which is retired: tokenize with the primary key " + keyset_.primary().id, field);
  }
  // A legacy-looking token when the keyset has no legacy key is a caller's own 64-hex form.
  if (id == kLegacyKeyId) return Status::Ok();
  // The key id is the caller's text (what comes before the 64 hex digits): never echoed.
  return InvalidArgument(
      "was made with a key this server's keyset does not hold (the id before the 64 hex digits "
      "names none of its keys)",
      field);
}

}  // namespace txscore::fraud
