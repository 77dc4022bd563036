// The rules stage kind: deterministic rules beside the models, as banks run them. Each rule
// is a condition on the item's features and fields; the rules that match are its verdict,
// which the decision stage combines with the model score (decision_stage.h): the first
// matching rule that names a decision forces it, and every matching rule's id appears as a
// reason code in the result and the audit record.
//
//   - name: rules
//     kind: rules
//     after: features
//     lists:                                   # name -> file, one entry per line
//       deny_merchants: lists/deny-merchants.txt
//     rules:                                   # checked in this order
//       - {id: R17, when: "velocity_count_1m > 5 and amount > 500", decision: DECLINE}
//       - {id: R20, when: "merchant_id in deny_merchants", decision: DECLINE}
//       - {id: N05, when: "cross_border == 1 and amount >= 2000"}    # a reason code only
//
// A condition compares a name with a literal: a feature (fraud/features.h names, e.g.
// velocity_count_1m; a missing value compares false), or a field of the item:
//   transactions: amount (major units), currency, mcc, merchant_id, merchant_country,
//                 card_country, card_token, device_id
//   claims:       amount_claimed, policy_limit, prior_claims, claim_type (its name, e.g.
//                 'property_water'; the field wins over the feature of the same name),
//                 policy_id, provider_id, claimant_token
// Numbers take == != > >= < <=; text takes == != with a quoted string ('...' or "..."), and
// `in LIST` / `not in LIST`. Terms combine with `and`, `or` (and binds tighter), `not` and
// parentheses. Everything is checked when the file is loaded: unknown names, a number
// compared with text, a list that is not declared, a field of the other item kind.
//
// List files: one entry per line; blank lines and lines starting with # are skipped, spaces
// around an entry trimmed. Lists hold card tokens, never card numbers: an entry that looks
// like one (common/pan_scan.h) is refused with its line, as is a file over 64 MiB.
//
// Keys: rules (required, at least one; each with id, when, and optionally decision: APPROVE,
// REVIEW or DECLINE), lists (Default: none).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "pipelines/stage_kind.h"

namespace txscore::pipelines {

struct RulesStageSettings : StageSettings {
  struct Rule {
    std::string id;
    std::string when;
    std::optional<Decision> decision;
    SourceLocation at;  // its `when:`
  };
  std::vector<Rule> rules;
  std::map<std::string, std::string> lists;  // name -> file
  std::string source;                        // the pipeline file, for errors found at Prepare
};

std::unique_ptr<StageKind> MakeRulesStageKind();

}  // namespace txscore::pipelines
