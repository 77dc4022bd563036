// JSON forms of the RPC types, for the command line (`txscore score --file`) and tools.
//
// A transaction is one JSON object per line with the IDL's field names, e.g.
//   {"request_id": "r1", "timestamp_ms": 1767225600000, "amount_minor": 1250, "currency": "USD",
//    "card_number": "4000001234567899", "merchant_id": "m-1", "mcc": "5411",
//    "merchant_country": "US", "channel": "CARD_PRESENT", "entry_mode": "CHIP"}
// Enums may be given by name or number.
#pragma once

#include <string>

#include "common/result.h"
#include "fraud/claim.h"
#include "fraud/transaction.h"
#include "gen-cpp/txscore_types.h"

namespace txscore::service {

Result<rpc::Transaction> TransactionFromJson(const std::string& json_text);
std::string TransactionToJson(const rpc::Transaction& t);  // the inverse of TransactionFromJson
rpc::Transaction ToThriftTransaction(const fraud::RawTransaction& raw);

// A claim on the wire and as txscore reads it (an empty adjuster_notes is left unset).
rpc::Claim ToThriftClaim(const fraud::RawClaim& claim);
fraud::RawClaim FromThriftClaim(const rpc::Claim& claim);
std::string ScoreResultToJson(const rpc::ScoreResult& result);

}  // namespace txscore::service
