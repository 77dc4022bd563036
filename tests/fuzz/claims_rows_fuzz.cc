// The claims parsers (fraud/claim.h), as a claims file feeds them: the first byte chooses.
//   even: JSON lines: each line parsed, validated, and made ready for storage;
//   odd:  CSV: the first record is the header, each later record a claim.
// A claim made ready for storage carries no claimant id (only its token), no card number in its
// free text, and no id that looks like a card number.
#include <sstream>

#include "common/pan_scan.h"
#include "fraud/card_token.h"
#include "fraud/claim.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

const txscore::fraud::CardTokenizer& Tokenizer() {
  static const auto* tokenizer = txscore::fraud::CardTokenizer::FromKey(std::string(32, 'k')).release();
  return *tokenizer;
}

void Check(const txscore::fraud::RawClaim& raw) {
  (void)txscore::fraud::ValidateClaim(raw, Tokenizer());
  const auto stored = txscore::fraud::ClaimForStorage(raw, Tokenizer());
  if (!stored.ok()) return;
  if (!stored->claimant_id.empty()) txscore::fuzz::Fail("a claimant id survived into a claim ready for storage");
  // Free text by the every-window rule (what RedactPans removes), identifiers by the stricter
  // rule validation applies to them (common/pan_scan.h: ids are often long numbers).
  for (const std::string* text : {&stored->narrative, &stored->adjuster_notes}) {
    if (txscore::ContainsPan(*text)) {
      txscore::fuzz::Fail("a card number survived into a claim's free text ready for storage: " + *text);
    }
  }
  for (const std::string* id : {&stored->claim_id, &stored->policy_id, &stored->provider_id}) {
    if (txscore::LooksLikeCardNumber(*id)) {
      txscore::fuzz::Fail("an id that looks like a card number was accepted for storage: " + *id);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) { return 0; }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::istringstream lines{std::string(txscore::fuzz::AsText(data + 1, size - 1))};
  std::string line;
  if (data[0] % 2 == 0) {
    while (std::getline(lines, line)) {
      const auto raw = txscore::fraud::ParseClaimJson(line);
      if (raw.ok()) Check(*raw);
    }
    return 0;
  }
  std::optional<txscore::fraud::ClaimCsvHeader> header;
  std::string record;
  while (std::getline(lines, line)) {
    record += record.empty() ? line : "\n" + line;
    bool complete = true;
    const std::vector<std::string> fields = txscore::fraud::SplitCsvRecord(record, &complete);
    if (!complete) continue;
    record.clear();
    if (!header) {
      auto parsed = txscore::fraud::ClaimCsvHeader::Parse(fields);
      if (!parsed.ok()) return 0;
      header = std::move(parsed).value();
      continue;
    }
    const auto raw = header->Read(fields);
    if (raw.ok()) Check(*raw);
  }
  return 0;
}
