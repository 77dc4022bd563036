// A seeded, deterministic generator of card transactions with labelled fraud.
//
// Legitimate behaviour: each card has a home country and location, a typical amount, a few
// devices and favourite merchants; it buys mostly in daytime, card-present near home or
// online from a known device, and now and then travels (flights, so no impossible speeds).
// Hard negatives are included on purpose (app-store micro-payments, habitual night-time
// gamblers, phone upgrades) so a model has to learn more than one rule.
// Fraud patterns:
//   - card testing: a burst of tiny online payments at many merchants within minutes;
//   - account takeover: a new device, then a few large online purchases;
//   - impossible travel: a card-present payment far away minutes after one at home;
//   - high-risk MCC at night: gambling or quasi-cash, large, between 01:00 and 04:00 local.
// The same options give the same transactions on every run of the same build.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fraud/transaction.h"

namespace txscore::fraud {

enum class FraudPattern { kNone, kCardTesting, kAccountTakeover, kImpossibleTravel, kHighRiskNight };
const char* FraudPatternName(FraudPattern pattern);

struct SyntheticOptions {
  uint64_t seed = 42;                   // Default: 42
  int cards = 2000;                     // Default: 2000 cards
  int days = 30;                        // Default: 30 days of activity
  int64_t start_ms = 1767225600000;     // Default: 2026-01-01T00:00:00Z
  double attacked_card_fraction = 0.2;  // Default: 20 % of cards see one fraud episode
};

struct LabeledTransaction {
  RawTransaction tx;  // card_number holds a synthetic, Luhn-valid test PAN
  bool is_fraud = false;
  FraudPattern pattern = FraudPattern::kNone;
};

// All transactions of all cards, ordered by timestamp; request ids are "syn-<seed>-<n>".
std::vector<LabeledTransaction> GenerateTransactions(const SyntheticOptions& options);

}  // namespace txscore::fraud
