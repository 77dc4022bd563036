// What the audit trail's hash chain costs a decision: persisting one decision (its record and
// its card's new state) the way the request path did before the chain (encode, one batch, one
// write) against AuditLog::Commit (encode, chain, sign a checkpoint every 1000, one write).
//
//   ./build/bench/audit_chain_bench --benchmark_repetitions=5
//       --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true
//   (one command line)
//
// One thread, durability wal (sync would add a disk flush, 0.6-1 ms on the VM measured, to both
// and hide the difference). The database lives in a temporary directory under /tmp.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "common/bytes.h"
#include "storage/audit_chain.h"
#include "storage/audit_log.h"
#include "storage/database.h"

namespace txscore::storage {
namespace {

// A record shaped like the demo pipeline's (three reasons, six timings, one model stage).
AuditRecord TypicalRecord(int64_t n) {
  AuditRecord r;
  r.time_us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
                  .count();
  r.request_id = "bench-" + std::to_string(n);
  r.card_token = "k1_9f2c4e0b7a1d3c5e8f6a2b4c6d8e0f1a3b5c7d9e1f2a4b6c8d0e2f4a6b8c0d2e";
  r.transaction_time_ms = 1796180000000 + n;
  r.model_id = "fraud";
  r.model_version = "5d41402abc4b2a76b9719d911017c592";
  r.pipeline_version = "3";
  r.score = 0.8731;
  r.decision = "DECLINE";
  r.reasons = {{"amount_vs_card_mean", 1.42, 8.1}, {"new_merchant_country", 0.77, 1}, {"tx_count_1h", 0.31, 6}};
  r.timings_us = {{"validate", 3}, {"state", 11}, {"features", 4}, {"fraud", 38}, {"decision", 1}, {"persist", 0}};
  r.placement = "fraud@cpu";
  r.stage_scores = {{"fraud", 0.8731}};
  r.traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  return r;
}

std::string CardState() { return std::string(180, 's'); }

// A database in a fresh directory under /tmp, removed when the benchmark ends.
class ScratchDir {
 public:
  ScratchDir() {
    char pattern[] = "/tmp/audit_chain_bench.XXXXXX";
    if (mkdtemp(pattern) == nullptr) std::abort();
    path_ = pattern;
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::unique_ptr<Database> OpenScratch(ScratchDir& dir) {
  auto db = Database::Open(dir.file("db"), {.durability = Durability::kWal});
  if (!db.ok()) {
    std::fprintf(stderr, "%s\n", db.error().ToString().c_str());
    std::exit(1);
  }
  return std::move(db).value();
}

// Before the chain: the record encoded, keyed (time, epoch|counter) and written with the state.
void BM_PersistDecision_Unchained(benchmark::State& state) {
  ScratchDir dir;
  std::unique_ptr<Database> db = OpenScratch(dir);
  uint64_t counter = 0;
  for (auto _ : state) {
    const AuditRecord record = TypicalRecord(static_cast<int64_t>(counter));
    WriteBatch batch;
    batch.Put(ColumnFamily::kEntityState, record.card_token, CardState());
    batch.Put(ColumnFamily::kAudit, MakeAuditKey({record.time_us, 1, counter++}), EncodeAuditRecord(record));
    if (!db->Write(batch).ok()) state.SkipWithError("write failed");
  }
  state.SetItemsProcessed(state.iterations());
}

// With the chain: AuditLog::Commit.
void BM_PersistDecision_Chained(benchmark::State& state) {
  ScratchDir dir;
  std::unique_ptr<Database> db = OpenScratch(dir);
  AuditLog log(db.get());
  if (!log.BeginWriting({"k1", std::string(32, 'k')}).ok()) state.SkipWithError("BeginWriting failed");
  int64_t n = 0;
  for (auto _ : state) {
    const AuditRecord record = TypicalRecord(n++);
    WriteBatch batch;
    batch.Put(ColumnFamily::kEntityState, record.card_token, CardState());
    if (!log.Commit(record, std::move(batch)).ok()) state.SkipWithError("commit failed");
  }
  state.SetItemsProcessed(state.iterations());
}

// The chain's own arithmetic, without the database: hash the previous entry, splice the fields.
void BM_ChainOneEntry(benchmark::State& state) {
  const std::string json = EncodeAuditRecord(TypicalRecord(0));
  const std::string key = MakeAuditKey({1, 1, 1});
  std::string head(32, '\0');
  uint64_t seq = 0;
  for (auto _ : state) {
    const std::string value = ChainAuditEntry(json, seq++, head);
    head = AuditEntryHash(key, value);
    benchmark::DoNotOptimize(head);
  }
  state.counters["record_bytes"] = static_cast<double>(json.size());
}

BENCHMARK(BM_PersistDecision_Unchained)->MinTime(1.0);
BENCHMARK(BM_PersistDecision_Chained)->MinTime(1.0);
BENCHMARK(BM_ChainOneEntry);

}  // namespace
}  // namespace txscore::storage

BENCHMARK_MAIN();
