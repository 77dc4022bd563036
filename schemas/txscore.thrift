// txscore RPC contract.
//
// Compatibility rules (callers built against an older copy of this file must keep working):
//   - field ids are never reused or renumbered;
//   - every field added after the first release is `optional`;
//   - enum values are never renumbered; new values are appended.
// Units are in the field names: `_ms` milliseconds since the Unix epoch (UTC), `_us`
// microseconds, `_minor` the currency's minor unit (cents for USD, yen for JPY).

namespace cpp txscore.rpc
namespace py txscore_rpc

enum Channel {
  UNKNOWN = 0,
  CARD_PRESENT = 1,
  ECOMMERCE = 2,
  ATM = 3,
  MAIL_PHONE_ORDER = 4,
  RECURRING = 5,
  CONTACTLESS = 6,
}

enum EntryMode {
  UNKNOWN = 0,
  CHIP = 1,
  MAGSTRIPE = 2,
  CONTACTLESS = 3,
  MANUAL_KEYED = 4,
  CREDENTIAL_ON_FILE = 5,
  TOKENIZED_WALLET = 6,
}

enum Decision {
  APPROVE = 1,
  REVIEW = 2,
  DECLINE = 3,
}

struct Transaction {
  // Caller's id for this authorization; echoed back and written to the audit trail.
  1: required string request_id,
  2: required i64 timestamp_ms,
  3: required i64 amount_minor,
  // ISO 4217 alphabetic code, e.g. "USD".
  4: required string currency,
  // Exactly one of card_number (PAN, 12-19 digits, Luhn-valid) and card_token must be set.
  // The PAN is replaced by an HMAC-SHA256 token on arrival and never stored or logged.
  5: optional string card_number,
  6: optional string card_token,
  7: required string merchant_id,
  // ISO 18245 merchant category code, 4 digits.
  8: required string mcc,
  // ISO 3166-1 alpha-2, e.g. "US".
  9: required string merchant_country,
  10: required Channel channel,
  11: required EntryMode entry_mode,
  12: optional string device_id,
  13: optional string ip_address,
  14: optional double latitude,
  15: optional double longitude,
  // W3C trace context, passed through to logs and the audit trail.
  16: optional string traceparent,
  // ISO 3166-1 alpha-2 country of the card issuer; when absent, the card's first-seen
  // merchant country stands in for it.
  17: optional string card_country,
  // Card verification code (CVV2/CVC2). Checked for shape only, never stored or logged.
  18: optional string card_verification_code,
  // Time budget for this request in milliseconds from its arrival (1..600000). Only stages
  // that may take long (the LLM forensic stage) use it; when absent, the stage's own
  // budget_ms from the pipeline file applies, and when present the smaller of the two.
  19: optional i32 budget_ms,
  // Set only by a txscore replica that forwards a transaction to the shard owning its card
  // (docs/scaling-out.md): the forwarding shard's name, and the card's tokens under the
  // keyset's older active keys, where the owner may hold state stored before a key rotation.
  // Honoured only from a caller on the owner's sharding.peer_identities; a forwarded
  // transaction is never forwarded again. The owner re-keys only state it holds itself.
  20: optional string forwarded_by,
  21: optional list<string> older_card_tokens,
  // With forwarded_by: who the forwarding replica served (its caller's identity and address), so
  // that the owner's audit record names the caller behind the peer (PCI DSS 10.2.2).
  22: optional string forwarded_for,
}

struct ReasonCode {
  // Feature name from the model's feature schema, e.g. "velocity_count_1m".
  1: required string feature,
  // Contribution to the score in log-odds (positive pushes towards fraud).
  2: required double contribution,
  // The feature's value for this transaction (NaN when it was missing).
  3: required double value,
}

// A deterministic rule that matched (a rules stage): its id is the reason code.
struct RuleHit {
  1: required string rule,
  // The decision the rule forces; unset for a rule that only reports its reason. The first
  // matching rule with a decision decided the result.
  2: optional Decision decision,
}

struct StageTiming {
  1: required string stage,
  2: required i64 elapsed_us,
}

// Written by the LLM forensic stage (a pipeline's llm_findings stage) for REVIEW decisions:
// risk_level is low|medium|high; flags come from inconsistent_dates, amount_mismatch,
// prior_claims_pattern, vague_description, pressure_to_settle, provider_anomaly, none;
// summary has at most 400 characters; model_id names the checkpoint.
struct Findings {
  1: optional string risk_level,
  2: optional list<string> flags,
  3: optional string summary,
  4: optional string model_id,
}

struct ScoreResult {
  1: required string request_id,
  // Fraud probability in [0, 1].
  2: required double score,
  3: required Decision decision,
  // Top contributions towards fraud, largest first.
  4: required list<ReasonCode> reasons,
  5: required string model_id,
  6: required string model_version,
  7: required string pipeline_version,
  8: required list<StageTiming> timings,
  // Stages that ran in a reduced form or not at all, by name; empty when all ran fully.
  9: required list<string> degraded_stages,
  10: required list<string> skipped_stages,
  11: optional Findings findings,
  // HMAC token of the card; lets callers correlate without ever holding the PAN.
  12: optional string card_token,
  // The score of every model stage that ran (shadow models and blends included), by stage name.
  13: optional map<string, double> stage_scores,
  // The rules that matched, in rule order (pipelines with a rules stage).
  14: optional list<RuleHit> rule_hits,
}

exception InvalidRequest {
  // The Transaction field at fault, e.g. "card_number".
  1: required string field,
  2: required string reason,
}

// A failure on txscore's side (storage, model). The request was not applied.
exception ServiceError {
  1: required string reason,
}

// The shard that owns this card (docs/scaling-out.md) could not be reached or did not answer
// in time, or does not own it by the shard list this replica has. No score: treat it as "score
// unavailable" (retry later, or decide by the caller's own fallback), never as a decision.
// Unreachable: nothing was written. No answer in time: the owner may still apply it once it
// answers again, as after any RPC timeout (its audit trail has the request id).
exception ShardUnavailable {
  1: required string shard,
  2: required string reason,
}

// One entry of scoreBatch: exactly one of result and the errors is set.
struct BatchItem {
  1: optional ScoreResult result,
  2: optional InvalidRequest error,
  3: optional ServiceError service_error,
  4: optional ShardUnavailable unavailable,
}

// An insurance claim, as a claims file's row holds it (README, "Claims and batch jobs").
struct Claim {
  1: required string claim_id,
  2: required string policy_id,
  // Personal data: only its HMAC token with the service key is kept.
  3: required string claimant_id,
  // YYYY-MM-DD, real calendar dates; the report not before the incident.
  4: required string incident_date,
  5: required string report_date,
  // auto_collision, auto_theft, property_water, property_fire, burglary, health, travel.
  6: required string claim_type,
  // Major currency units.
  7: required double amount_claimed,
  8: required double policy_limit,
  9: required i32 prior_claims,
  10: required string provider_id,
  11: required string narrative,
  12: optional string adjuster_notes,
}

// A claims job: exactly one of a file on the server (relative to the server's jobs.input_dir)
// and claims sent inline. The same input submitted again is the same job: it resumes (or, when
// done, reports its result).
struct ClaimsJobRequest {
  1: optional string input_path,
  2: optional list<Claim> claims,
  // Forget the job's earlier progress and output and start over (e.g. after its input file
  // changed, which fails a resume). Refused while the job runs: cancel it first.
  3: optional bool restart,
}

enum JobState {
  QUEUED = 1,
  RUNNING = 2,
  DONE = 3,
  // Stopped by cancelClaimsJob; submitting it again resumes it.
  CANCELLED = 4,
  // Stopped by an error (detail says which); submitting it again resumes it (with restart:
  // starts it over).
  FAILED = 5,
  // Stopped by a server stop or crash; the server resumes it when it starts again.
  INTERRUPTED = 6,
  // Finished, but the LLM stage wrote no findings for more than the server's
  // jobs.max_llm_shortfall_share of the claims it was asked to read (detail says why).
  DEGRADED = 7,
}

struct ClaimsJobStatus {
  1: required string job_id,
  2: required JobState state,
  // Rows finished (output lines written durably), of total; rows that became error lines.
  3: required i64 done,
  4: required i64 total,
  5: required i64 errors,
  // On the server: one JSON line per input row; OUTPUT.summary.json when done.
  6: required string output_path,
  // Why it failed.
  7: optional string detail,
  8: optional double claims_per_s,
  // Claims the LLM stage was asked to read; of those, claims it wrote no findings for, by
  // reason (failed, cut_short, skipped).
  9: optional i64 llm_selected,
  10: optional map<string, i64> llm_shortfalls,
}

exception UnknownJob {
  1: required string job_id,
}

// The caller may not do this: submitting, cancelling and reading the status of claims jobs is
// for operators (a client certificate whose identity is on security.tls.operators). The attempt
// is in the audit trail.
exception AccessDenied {
  1: required string reason,
}

struct HealthStatus {
  1: required bool live,
  2: required bool ready,
  3: required string model_id,
  4: required string model_version,
  5: required string pipeline_version,
  6: optional string detail,
}

service TxScore {
  ScoreResult score(1: Transaction transaction) throws (1: InvalidRequest invalid, 2: ServiceError failure, 3: ShardUnavailable unavailable),
  // Items are scored in order; one bad item gets its own error and does not fail the others.
  list<BatchItem> scoreBatch(1: list<Transaction> transactions),
  HealthStatus health(),
  // Claims jobs run in the background, one at a time, below requests in priority.
  ClaimsJobStatus submitClaimsJob(1: ClaimsJobRequest request) throws (1: InvalidRequest invalid, 2: ServiceError failure, 3: AccessDenied denied),
  ClaimsJobStatus claimsJobStatus(1: string job_id) throws (1: UnknownJob unknown, 2: ServiceError failure, 3: AccessDenied denied),
  ClaimsJobStatus cancelClaimsJob(1: string job_id) throws (1: UnknownJob unknown, 2: ServiceError failure, 3: AccessDenied denied),
}
