// txscore score --server HOST:PORT [--file FILE.jsonl]: send transactions to a running
// server and print each result as a JSON line, then a summary. Without --file it sends
// generated demo transactions (synthetic, Luhn-valid test card numbers).
#include <thrift/Thrift.h>
#include <thrift/transport/TTransportException.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>

#include "common/host_port.h"
#include "fraud/card_token.h"
#include "fraud/synthetic.h"
#include "gen-cpp/TxScore.h"
#include "service/commands/client_tls.h"
#include "service/commands/commands.h"
#include "service/rpc_client.h"
#include "service/shard_map.h"
#include "service/transaction_json.h"

namespace txscore::service {
namespace {

struct ScoreOptions {
  std::string server = "127.0.0.1:9090";
  ClientTlsFlags tls;
  std::string file;
  int count = 0;  // 0: all
  uint64_t seed = 7;
  bool json = false;
  // Default: none. NAME=HOST:PORT,... of a shard set: a transaction with a card_token goes
  // straight to the shard that owns it (service/shard_map.h); one with a card number to --server.
  std::string shards;
};

// One human-readable line: request id, decision, score, then the rules that matched (a rule
// may have decided) and the top reasons.
void PrintTableRow(const rpc::ScoreResult& result) {
  std::string reasons;
  for (const rpc::RuleHit& hit : result.rule_hits) reasons += (reasons.empty() ? "rule " : ", rule ") + hit.rule;
  for (const rpc::ReasonCode& r : result.reasons) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%s%s(%+.2f)", reasons.empty() ? "" : ", ", r.feature.c_str(), r.contribution);
    reasons += buf;
  }
  std::printf("%-22s %-8s %.4f  %s\n", result.request_id.c_str(), rpc::_Decision_VALUES_TO_NAMES.at(result.decision),
              result.score, reasons.c_str());
}

// `pan` with its account digits (after the 6-digit issuer prefix) replaced by digits derived
// from the PAN and `run` (a random number per run), and a new Luhn check digit: the same card
// within a run, another one in every other run.
std::string CardOfThisRun(const std::string& pan, uint64_t run) {
  uint64_t hash = 1469598103934665603ULL;  // FNV-1a, 64 bits
  for (char c : pan + ":" + std::to_string(run)) hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  std::string digits = pan.substr(0, 6);
  while (digits.size() + 1 < pan.size()) {
    digits += static_cast<char>('0' + hash % 10);
    hash = hash / 10 == 0 ? hash * 2654435761ULL + 1 : hash / 10;
  }
  return digits + fraud::LuhnCheckDigit(digits);
}

int RunScore(const ScoreOptions& options) {
  Result<HostPort> server = ParseHostPort(options.server);
  if (!server.ok()) {
    std::fprintf(stderr, "--server: %s\n", server.error().message.c_str());
    return 2;
  }

  std::vector<rpc::Transaction> transactions;
  std::vector<std::string> input_errors;  // per input line, "" when the line parsed
  if (!options.file.empty()) {
    std::ifstream in(options.file);
    if (!in) {
      std::fprintf(stderr, "cannot read %s\n", options.file.c_str());
      return 2;
    }
    std::string line;
    size_t line_number = 0;
    while (std::getline(in, line)) {
      ++line_number;
      if (line.empty()) continue;
      Result<rpc::Transaction> t = TransactionFromJson(line);
      if (!t.ok()) {
        // Built as JSON, not by hand: the message may quote the line's own characters.
        std::printf("%s\n", nlohmann::json{{"line", line_number}, {"error", t.error().ToString()}}.dump().c_str());
        continue;
      }
      transactions.push_back(std::move(t).value());
    }
    if (transactions.empty()) {
      std::fprintf(stderr, "txscore score: no line of %s is a transaction%s; nothing was sent\n", options.file.c_str(),
                   line_number == 0 ? " (the file is empty)" : " (each line above says why)");
      return 3;
    }
  } else {
    // A few cards over the three days before today (UTC), half of them attacked so the demo
    // shows fraud. Each run gets cards of its own (card_number rewritten for the run),
    // so a second run does not send transactions into the past of the first run's cards,
    // whose history the server keeps; and since the story is anchored at midnight, runs on
    // the same day send the same story at the same times and decide the same way.
    const int64_t now_s =
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    const int64_t day_start_s = now_s - now_s % 86400;
    fraud::SyntheticOptions demo;
    demo.seed = options.seed;
    demo.cards = 8;
    demo.days = 3;
    demo.start_ms = (day_start_s - 3 * 86400) * 1000;
    demo.attacked_card_fraction = 0.5;
    // Two runs may start within the same second: the run's cards come from a random number.
    const uint64_t run = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
    std::vector<fraud::LabeledTransaction> story = fraud::GenerateTransactions(demo);
    // The first fraudulent purchase is tried again a second later at a merchant on the demo's
    // deny list (config/lists/deny-merchants.txt), so the demo shows a rule deciding (R20). It
    // is tried on a card of its own: on the attacked card it would add to the velocity of the
    // attack's next purchases and change how they are decided.
    for (size_t i = 0; i < story.size(); ++i) {
      if (!story[i].is_fraud || story[i].tx.timestamp_ms + 1000 >= day_start_s * 1000) continue;
      fraud::LabeledTransaction blocked = story[i];
      blocked.tx.merchant_id = "m-BLOCKED-1";
      blocked.tx.timestamp_ms += 1000;
      // Another check digit: no card of the story (each Luhn-valid) maps to the same card of the run.
      std::string& pan = *blocked.tx.card_number;
      pan.back() = pan.back() == '0' ? '1' : '0';
      story.insert(story.begin() + static_cast<std::ptrdiff_t>(i) + 1, std::move(blocked));
      break;
    }
    for (const fraud::LabeledTransaction& t : story) {
      if (t.tx.timestamp_ms >= day_start_s * 1000) continue;
      rpc::Transaction wire = ToThriftTransaction(t.tx);
      wire.__set_card_number(CardOfThisRun(t.tx.card_number.value_or(""), run));
      wire.request_id = "demo-" + std::to_string(now_s) + "-" + std::to_string(run % 100000) + "-" +
                        std::to_string(transactions.size());
      transactions.push_back(std::move(wire));
    }
  }
  if (options.count > 0 && static_cast<int>(transactions.size()) > options.count) transactions.resize(options.count);

  Result<TlsClientFiles> tls = ResolveClientTls(options.tls);
  if (!tls.ok()) {
    std::fprintf(stderr, "%s\n", tls.error().message.c_str());
    return 2;
  }
  Result<std::unique_ptr<RpcConnection>> connection = RpcConnection::Open(*server, {.tls = *tls});
  if (!connection.ok()) {
    std::fprintf(stderr, "cannot connect to %s: %s\nIs the server running? Start it with ./scripts/demo.sh\n",
                 options.server.c_str(), connection.error().message.c_str());
    return 1;
  }
  // Routing by card token: a connection per shard, opened on first use.
  std::vector<ShardEndpoint> shards;
  std::stringstream shard_list(options.shards);
  for (std::string entry; std::getline(shard_list, entry, ',');) {
    const size_t equals = entry.find('=');
    if (equals == std::string::npos) {
      std::fprintf(stderr, "--shards: \"%s\" is not NAME=HOST:PORT\n", entry.c_str());
      return 2;
    }
    shards.push_back({entry.substr(0, equals), entry.substr(equals + 1)});
  }
  std::optional<ShardMap> shard_map;
  if (!shards.empty()) {
    Result<ShardMap> map = ShardMap::Create(shards, shards.front().name);
    if (!map.ok()) {
      std::fprintf(stderr, "--shards: %s\n", map.error().message.c_str());
      return 2;
    }
    shard_map = std::move(map).value();
  }
  std::map<std::string, std::unique_ptr<RpcConnection>> shard_connections;
  const auto client_for = [&](const rpc::Transaction& t) -> rpc::TxScoreClient& {
    if (!shard_map || !t.__isset.card_token) return (*connection)->client();
    const ShardEndpoint& owner = shard_map->OwnerOf(t.card_token);
    std::unique_ptr<RpcConnection>& open = shard_connections[owner.name];
    if (open == nullptr) {
      Result<std::unique_ptr<RpcConnection>> opened =
          RpcConnection::Open(ParseHostPort(owner.address).value(), {.tls = *tls});
      if (!opened.ok()) {
        throw apache::thrift::transport::TTransportException("cannot connect to shard " + owner.name + ": " +
                                                             opened.error().message);
      }
      open = std::move(opened).value();
    }
    return open->client();
  };
  std::map<std::string, int> by_decision;
  int invalid = 0, unavailable = 0;
  try {
    for (const rpc::Transaction& t : transactions) {
      try {
        rpc::ScoreResult result;
        client_for(t).score(result, t);
        if (options.json) {
          std::printf("%s\n", ScoreResultToJson(result).c_str());
        } else {
          PrintTableRow(result);
        }
        by_decision[rpc::_Decision_VALUES_TO_NAMES.at(result.decision)]++;
      } catch (const rpc::InvalidRequest& e) {
        const nlohmann::json invalid_line = {{"request_id", t.request_id},
                                             {"invalid", {{"field", e.field}, {"reason", e.reason}}}};
        std::printf("%s\n", invalid_line.dump().c_str());
        ++invalid;
      } catch (const rpc::ShardUnavailable& e) {
        // Score unavailable: the card's shard is down. Said, and the others go on.
        const nlohmann::json unavailable_line = {{"request_id", t.request_id},
                                                 {"unavailable", {{"shard", e.shard}, {"reason", e.reason}}}};
        std::printf("%s\n", unavailable_line.dump().c_str());
        ++unavailable;
      } catch (const apache::thrift::transport::TTransportException& e) {
        // Only a connection that failed (not an answer, such as the owner's ServiceError).
        if (!shard_map || !t.__isset.card_token) throw;
        // The shard this client routed the card to is down: the same, said from here.
        const std::string& shard = shard_map->OwnerOf(t.card_token).name;
        shard_connections.erase(shard);
        const nlohmann::json unavailable_line = {{"request_id", t.request_id},
                                                 {"unavailable", {{"shard", shard}, {"reason", e.what()}}}};
        std::printf("%s\n", unavailable_line.dump().c_str());
        ++unavailable;
      }
    }
  } catch (const apache::thrift::TException& e) {
    std::fprintf(stderr, "request failed: %s\n%s", e.what(), ConnectionFailureHint(options.tls, e).c_str());
    return 1;
  }
  (*connection)->Close();
  std::fflush(stdout);
  const size_t scored = transactions.size() - invalid - unavailable;
  std::fprintf(stderr, "scored %zu transactions%s", scored, by_decision.empty() ? "" : ":");
  for (const auto& [decision, n] : by_decision) std::fprintf(stderr, " %s %d", decision.c_str(), n);
  std::fprintf(stderr, "; invalid %d", invalid);
  if (unavailable > 0) std::fprintf(stderr, "; unavailable (shard down) %d", unavailable);
  std::fprintf(stderr, "\n");
  if (scored == 0) {
    // Nothing the caller asked for was done: a script must not read that as success (exit 3,
    // as `batch run` exits when no row was scored).
    std::fprintf(stderr, "txscore score: no transaction was scored (each line above says why)\n");
    return 3;
  }
  return 0;
}

}  // namespace

void AddScoreCommand(CLI::App& app, int* exit_code) {
  auto options = std::make_shared<ScoreOptions>();
  CLI::App* cmd = app.add_subcommand("score", "Send transactions to a running server and print the results");
  cmd->add_option("--server", options->server, "HOST:PORT of txscore serve")->capture_default_str();
  AddClientTlsFlags(cmd, &options->tls, "var/pki/client");
  cmd->add_option("--file", options->file, "JSON lines of transactions (default: generated demo transactions)");
  cmd->add_option("--count", options->count, "Send at most this many (0: all)")->capture_default_str();
  cmd->add_flag("--json", options->json, "Print each result as a JSON line instead of a table row");
  cmd->add_option("--seed", options->seed, "Seed of the demo transactions")->capture_default_str();
  cmd->add_option("--shards", options->shards,
                  "NAME=HOST:PORT,... of a shard set: card_token transactions go straight to their shard");
  cmd->callback([options, exit_code] { *exit_code = RunScore(*options); });
}

}  // namespace txscore::service
