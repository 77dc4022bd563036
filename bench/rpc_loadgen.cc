// Open-loop RPC load generator: offers a fixed rate of score() calls over loopback and
// reports achieved throughput and latency percentiles.
//
//   ./build/bench/rpc_loadgen --server 127.0.0.1:9090 --rate 2000 --seconds 10 --connections 32
//
// Each connection sends on a fixed schedule (rate / connections per second). Latency is
// measured from the *scheduled* send time, not the actual one, so a stalled server shows up
// as latency instead of silently lowering the offered load (no coordinated omission).
#include <sys/prctl.h>
#include <thrift/Thrift.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <set>
#include <thread>
#include <vector>

#include "common/host_port.h"
#include "fraud/synthetic.h"
#include "gen-cpp/TxScore.h"
#include "service/rpc_client.h"
#include "service/transaction_json.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  txscore::HostPort address{"127.0.0.1", 9090};
  double rate = 1000;   // calls per second, all connections together
  double seconds = 10;  // measured period
  double warmup_seconds = 2;
  int connections = 4;
  std::string method = "score";          // or "health": the same RPC round trip with no scoring work
  txscore::service::TlsClientFiles tls;  // none: plaintext
};

struct ConnectionResult {
  std::vector<double> latencies_us;
  std::vector<int> decisions;  // score(): each measured call's rpc::Decision, in the order of latencies_us
  std::vector<bool> findings;  // score(): whether it came with the LLM's findings, in the same order
  long errors = 0;
  std::string first_error;  // what the first failed call threw
  std::string open_error;   // non-empty: the connection never opened
};

// Connections whose first call has been answered (with TLS, the handshake is done then).
std::atomic<int> connections_answered{0};

void RunConnection(const Options& options, int index, const std::vector<txscore::rpc::Transaction>& transactions,
                   Clock::time_point start, ConnectionResult* out) {
  txscore::Result<std::unique_ptr<txscore::service::RpcConnection>> connection =
      txscore::service::RpcConnection::Open(options.address, {.tls = options.tls});
  if (!connection.ok()) {
    out->open_error = connection.error().message;
    return;
  }
  txscore::rpc::TxScoreClient& client = (*connection)->client();
  const double interval_s = options.connections / options.rate;
  const auto total = std::chrono::duration<double>(options.warmup_seconds + options.seconds);
  const auto measure_from =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options.warmup_seconds));
  // Stagger connections across one interval so sends do not line up.
  auto next = start + std::chrono::duration_cast<Clock::duration>(
                          std::chrono::duration<double>(interval_s * index / options.connections));
  size_t i = static_cast<size_t>(index);
  while (next - start < total) {
    std::this_thread::sleep_until(next);
    int decision = 0;  // none (health, or an error)
    bool with_findings = false;
    try {
      if (options.method == "health") {
        txscore::rpc::HealthStatus health;
        client.health(health);
      } else {
        txscore::rpc::ScoreResult result;
        client.score(result, transactions[i % transactions.size()]);
        decision = static_cast<int>(result.decision);
        with_findings = result.__isset.findings;
      }
    } catch (const apache::thrift::TException& e) {
      if (out->errors++ == 0) out->first_error = e.what();
    }
    if (i == static_cast<size_t>(index) && ++connections_answered == options.connections) {
      // A harness may start what the calls must stand up to from here on (run_handshake_flood_bench.sh).
      std::fprintf(stderr, "every connection has been answered once\n");
    }
    const auto done = Clock::now();
    if (next >= measure_from) {
      out->latencies_us.push_back(std::chrono::duration<double, std::micro>(done - next).count());
      out->decisions.push_back(decision);
      out->findings.push_back(with_findings);
    }
    i += static_cast<size_t>(options.connections);
    next += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(interval_s));
  }
  (*connection)->Close();
}

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  return sorted[std::min(sorted.size() - 1, static_cast<size_t>(p * static_cast<double>(sorted.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  // Wake from sleep_until within ~1 us instead of the default 50 us timer slack, so the
  // schedule, not the kernel, sets the send times.
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  Options options;
  std::string server = "127.0.0.1:9090";
  CLI::App app{"Open-loop load generator for txscore score()"};
  app.add_option("--server", server, "HOST:PORT")->capture_default_str();
  app.add_option("--rate", options.rate, "Offered calls per second")->capture_default_str();
  app.add_option("--seconds", options.seconds, "Measured seconds")->capture_default_str();
  app.add_option("--warmup", options.warmup_seconds, "Warm-up seconds (not measured)")->capture_default_str();
  app.add_option("--connections", options.connections, "Concurrent connections (a transaction switch holds dozens)")
      ->capture_default_str();
  app.add_option("--method", options.method, "score, or health as the RPC-only reference")
      ->check(CLI::IsMember({"score", "health"}))
      ->capture_default_str();
  bool by_decision = false;
  app.add_flag("--by-decision", by_decision,
               "Also print score()'s latency for each decision (APPROVE, REVIEW, DECLINE), one line each, "
               "with how many calls came with the LLM's findings");
  uint64_t seed = 123;
  app.add_option("--seed", seed, "Seed of the generated transactions (another seed: other cards)")
      ->capture_default_str();
  double below_amount = 0;
  app.add_option("--below-amount", below_amount,
                 "Send only transactions of less than this amount, in major units of their currency as a "
                 "pipeline rule reads `amount` (0: all): a client that sends no transaction a rule on the "
                 "amount would send to REVIEW");
  std::string tls_dir;
  app.add_option("--tls-dir", tls_dir, "Client certificate directory (ca.crt, tls.crt, tls.key); none: plaintext");
  CLI11_PARSE(app, argc, argv);
  if (!tls_dir.empty()) options.tls = txscore::service::TlsClientFilesIn(tls_dir);
  const txscore::Result<txscore::HostPort> address = txscore::ParseHostPort(server);
  if (!address.ok()) {
    std::fprintf(stderr, "--server: %s\n", address.error().message.c_str());
    return 2;
  }
  options.address = *address;

  // Many cards over a month, with synthetic PANs: tokenization is part of the measured work.
  std::vector<txscore::rpc::Transaction> transactions;
  for (const auto& t : txscore::fraud::GenerateTransactions({.seed = seed, .cards = 2000, .days = 30})) {
    if (below_amount > 0) {
      const txscore::Result<txscore::fraud::Transaction> valid = txscore::fraud::ValidateTransaction(t.tx);
      if (!valid.ok() || valid->amount_major() >= below_amount) continue;
    }
    transactions.push_back(txscore::service::ToThriftTransaction(t.tx));
  }

  std::vector<ConnectionResult> results(static_cast<size_t>(options.connections));
  std::vector<std::thread> threads;
  const auto start = Clock::now() + std::chrono::milliseconds(100);
  for (int c = 0; c < options.connections; ++c) {
    threads.emplace_back(RunConnection, std::cref(options), c, std::cref(transactions), start, &results[c]);
  }
  for (auto& t : threads) t.join();

  std::vector<double> all;
  long errors = 0;
  for (const auto& r : results) {
    if (!r.open_error.empty()) {
      std::fprintf(stderr, "cannot connect to %s: %s\n", server.c_str(), r.open_error.c_str());
      return 1;
    }
    all.insert(all.end(), r.latencies_us.begin(), r.latencies_us.end());
    errors += r.errors;
  }
  // Why calls failed, once per distinct reason.
  std::set<std::string> reasons;
  for (const auto& r : results) {
    if (r.errors > 0 && reasons.insert(r.first_error).second) {
      std::fprintf(stderr, "a call failed: %s\n", r.first_error.c_str());
    }
  }
  // By decision, before `all` is sorted: the same calls, told apart by what they were answered.
  std::vector<std::vector<double>> by(4);
  std::vector<size_t> with_findings(4, 0);
  for (const auto& r : results) {
    for (size_t k = 0; k < r.latencies_us.size(); ++k) {
      const size_t d = static_cast<size_t>(r.decisions[k]) % 4;
      by[d].push_back(r.latencies_us[k]);
      with_findings[d] += r.findings[k] ? 1 : 0;
    }
  }
  std::sort(all.begin(), all.end());
  std::printf(
      "%s: offered %.0f/s over %d connections for %.0f s: completed %.0f/s, errors %ld; "
      "latency us p50 %.0f p90 %.0f p99 %.0f p99.9 %.0f max %.0f\n",
      options.method.c_str(), options.rate, options.connections, options.seconds,
      static_cast<double>(all.size()) / options.seconds, errors, Percentile(all, 0.50), Percentile(all, 0.90),
      Percentile(all, 0.99), Percentile(all, 0.999), all.empty() ? 0.0 : all.back());
  if (by_decision) {
    const char* const names[] = {"none", "APPROVE", "REVIEW", "DECLINE"};
    for (size_t d = 1; d < by.size(); ++d) {
      std::sort(by[d].begin(), by[d].end());
      std::printf("  %s: %zu calls, %zu with findings; latency us p50 %.0f p99 %.0f max %.0f\n", names[d], by[d].size(),
                  with_findings[d], Percentile(by[d], 0.50), Percentile(by[d], 0.99),
                  by[d].empty() ? 0.0 : by[d].back());
    }
  }
  return errors > 0 ? 1 : 0;
}
