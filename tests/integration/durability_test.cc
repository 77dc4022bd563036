// Crash and drain under load, on a real `txscore serve` process.
//
// Crash test in the style of RocksDB's: the server scores transactions from eight connections
// and is killed with SIGKILL at a random moment, again and again. After each
// kill the database is checked against what the clients were told: every acknowledged decision
// has its audit record, every card's state counts exactly the transactions the trail records
// for it (state and record land together or not at all) and at least the acknowledged ones,
// and `txscore audit verify` passes. Then the server starts again on the same database.
//
// Kills per durability: TXSCORE_CRASH_KILLS (default 3, what CTest runs; scripts/crash-test.sh
// runs 20). The random moments come from TXSCORE_CRASH_SEED (default: the time), printed so a
// failure can be replayed.
//
// Drain: SIGTERM under load turns readiness off first, serves on for server.stop_delay_ms,
// closes the listener, and answers every request it accepted.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "fraud/entity_state.h"
#include "fraud/keyset.h"
#include "service/transaction_json.h"
#include "storage/audit_chain.h"
#include "storage/audit_log.h"
#include "storage/database.h"
#include "tests/rpc_test_support.h"
#include "tests/test_support.h"

namespace txscore {
namespace {

int EnvInt(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::atoi(value) : fallback;
}

// `txscore serve --config settings` as a child process; its stderr goes to `log_path`.
class ServerProcess {
 public:
  ServerProcess(const std::string& settings, const std::string& log_path) {
    int out[2];
    if (pipe(out) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);
      const int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      dup2(log, STDERR_FILENO);
      close(out[0]);
      execl(TXSCORE_BINARY, "txscore", "serve", "--config", settings.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(out[1]);
    // `txscore serve` prints "listening thrift_port=P admin_port=Q" once it serves.
    std::string line;
    pollfd ready{out[0], POLLIN, 0};
    while (line.find('\n') == std::string::npos && poll(&ready, 1, 60000) == 1) {
      char buffer[256];
      const ssize_t n = read(out[0], buffer, sizeof buffer);
      if (n <= 0) break;
      line.append(buffer, static_cast<size_t>(n));
    }
    stdout_fd_ = out[0];
    const size_t at = line.find("thrift_port=");
    if (at != std::string::npos) port_ = std::atoi(line.c_str() + at + 12);
    const size_t admin_at = line.find("admin_port=");
    if (admin_at != std::string::npos) admin_port_ = std::atoi(line.c_str() + admin_at + 11);
  }
  ~ServerProcess() {
    if (pid_ > 0 && !reaped_) Kill();
    if (stdout_fd_ >= 0) close(stdout_fd_);
  }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  int admin_port() const { return admin_port_; }
  void Signal(int signal_number) { kill(pid_, signal_number); }
  int Wait() { return Reap(); }
  void Kill() {
    kill(pid_, SIGKILL);
    Reap();
  }
  int Terminate() {
    kill(pid_, SIGTERM);
    return Reap();
  }

 private:
  int Reap() {
    int status = 0;
    waitpid(pid_, &status, 0);
    reaped_ = true;
    return status;
  }
  pid_t pid_ = -1;
  int port_ = 0;
  int admin_port_ = 0;
  int stdout_fd_ = -1;
  bool reaped_ = false;
};

struct Acknowledged {
  std::string request_id;
  std::string card_token;
};

class CrashTest : public ::testing::TestWithParam<std::string> {
 protected:
  static constexpr int kClients = 8, kCardsPerClient = 4;

  void SetUp() override {
    testing::WriteTestPipeline(dir_, GetParam());
    settings_ = testing::TestSettingsPath(dir_);
    // Checkpoints every 50 entries, so that each round's trail has periodic ones to verify.
    std::string settings = testing::ReadFile(settings_);
    const std::string durability = "durability: " + GetParam() + "\n";
    settings.replace(settings.find(durability), durability.size(), durability + "  audit_checkpoint_every: 50\n");
    testing::WriteFile(settings_, settings);
    const fraud::Keyset keyset = fraud::LoadKeyset(testing::TestCardKeyPath(dir_)).value();
    checkpoint_public_key_ = fraud::AuditSigningPublicKey(keyset.primary()).value();
    checkpoint_key_id_ = keyset.primary().id;
  }

  // Scores from kClients connections until the server stops answering, `running` turns false,
  // or `stop_after` decisions are acknowledged; returns what was acknowledged.
  std::vector<Acknowledged> RunLoad(int port, int round, std::atomic<bool>* running, size_t stop_after = SIZE_MAX) {
    std::vector<Acknowledged> acknowledged;
    std::mutex mutex;
    std::vector<std::thread> clients;
    for (int c = 0; c < kClients; ++c) {
      clients.emplace_back([&, c] {
        std::unique_ptr<testing::RpcClient> client;
        try {
          client = std::make_unique<testing::RpcClient>(port);
        } catch (const std::exception&) {
          return;  // killed before this one connected
        }
        for (int n = 0; running->load(); ++n) {
          const std::string card = "crash-card-" + std::to_string(c) + "-" + std::to_string(n % kCardsPerClient);
          fraud::RawTransaction tx = testing::ValidTransaction("r" + std::to_string(round) + "-c" + std::to_string(c) +
                                                               "-" + std::to_string(n));
          tx.card_number.reset();
          tx.card_token = card;
          tx.timestamp_ms = 1796180000000 + (int64_t{round} * 1000000 + n) * 1000;
          rpc::ScoreResult result;
          try {
            client->client->score(result, service::ToThriftTransaction(tx));
          } catch (const std::exception&) {
            return;  // the server is gone: whatever was not acknowledged may or may not have landed
          }
          std::lock_guard<std::mutex> lock(mutex);
          acknowledged.push_back({tx.request_id, card});
          if (acknowledged.size() >= stop_after) running->store(false);
        }
      });
    }
    for (std::thread& client : clients) client.join();
    return acknowledged;
  }

  // The database against everything acknowledged so far; `round` names the check in failures.
  void CheckDatabase(const std::vector<Acknowledged>& acknowledged, int round) {
    auto db = storage::Database::Open(dir_.file("db"), {.read_only = true});
    ASSERT_TRUE(db.ok()) << db.error().ToString();
    const std::vector<storage::AuditRecord> records = storage::AuditLog(db->get()).ReadLast(10000000).value();
    std::map<std::string, std::string> card_of_request;
    std::map<std::string, uint64_t> records_per_card;
    for (const storage::AuditRecord& record : records) {
      card_of_request[record.request_id] = record.card_token;
      ++records_per_card[record.card_token];
    }
    std::map<std::string, uint64_t> acknowledged_per_card;
    for (const Acknowledged& ack : acknowledged) {
      const auto found = card_of_request.find(ack.request_id);
      ASSERT_NE(found, card_of_request.end())
          << "round " << round << ": acknowledged " << ack.request_id << " has no audit record";
      EXPECT_EQ(found->second, ack.card_token);
      ++acknowledged_per_card[ack.card_token];
    }
    for (const auto& [card, recorded] : records_per_card) {
      const auto stored = (*db)->Get(storage::ColumnFamily::kEntityState, card).value();
      ASSERT_TRUE(stored.has_value()) << "round " << round << ": " << card << " has records and no state";
      const fraud::CardState state = fraud::DecodeCardState(*stored).value();
      EXPECT_EQ(state.transaction_count, recorded) << "round " << round << ": " << card;
      EXPECT_GE(state.transaction_count, acknowledged_per_card[card]) << "round " << round << ": " << card;
    }
    storage::ChainVerifyOptions verify;
    verify.checkpoint_public_key = [this](const std::string& id) -> std::optional<std::string> {
      if (id == checkpoint_key_id_) return checkpoint_public_key_;
      return std::nullopt;
    };
    const storage::ChainReport report = storage::VerifyAuditChain(**db, verify).value();
    EXPECT_FALSE(report.problem.has_value()) << "round " << round << ": " << report.problem->detail;
    // And as an operator would check it: the command, exit status 0.
    const std::string command =
        std::string(TXSCORE_BINARY) + " audit verify --config " + settings_ + " > " + dir_.file("verify.out") + " 2>&1";
    EXPECT_EQ(std::system(command.c_str()), 0) << testing::ReadFile(dir_.file("verify.out"));
  }

  testing::TempDir dir_;
  std::string settings_;
  std::string checkpoint_key_id_, checkpoint_public_key_;
};

TEST_P(CrashTest, EveryAcknowledgedDecisionSurvivesSigkill) {
  const int kills = EnvInt("TXSCORE_CRASH_KILLS", 3);
  const unsigned seed = static_cast<unsigned>(EnvInt("TXSCORE_CRASH_SEED", static_cast<int>(time(nullptr))));
  std::mt19937 random(seed);
  std::uniform_int_distribution<int> kill_after_ms(50, 600);
  std::vector<Acknowledged> acknowledged;
  for (int round = 0; round < kills; ++round) {
    ServerProcess server(settings_, dir_.file("server.log"));
    ASSERT_GT(server.port(), 0) << "round " << round << ": the server did not start:\n"
                                << testing::ReadFile(dir_.file("server.log"));
    std::atomic<bool> running{true};
    const int delay_ms = kill_after_ms(random);
    std::thread killer([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      server.Kill();
      running = false;
    });
    std::vector<Acknowledged> round_acks = RunLoad(server.port(), round, &running);
    killer.join();
    acknowledged.insert(acknowledged.end(), round_acks.begin(), round_acks.end());
    CheckDatabase(acknowledged, round);
    if (HasFatalFailure() || HasNonfatalFailure()) {
      FAIL() << "seed " << seed << ", durability " << GetParam() << ", round " << round;
    }
    std::printf("round %d: killed after %d ms; %zu decisions acknowledged this round, %zu in all, each found\n", round,
                delay_ms, round_acks.size(), acknowledged.size());
  }
  // A round with a known count: a slow machine may acknowledge fewer than 50 decisions in each
  // random round above, and this one must write a periodic checkpoint (every 50 entries) before
  // its kill.
  {
    ServerProcess server(settings_, dir_.file("server.log"));
    ASSERT_GT(server.port(), 0) << testing::ReadFile(dir_.file("server.log"));
    std::atomic<bool> running{true};
    std::vector<Acknowledged> round_acks = RunLoad(server.port(), kills, &running, 60);
    server.Kill();
    ASSERT_GE(round_acks.size(), 60u);
    acknowledged.insert(acknowledged.end(), round_acks.begin(), round_acks.end());
    CheckDatabase(acknowledged, kills);
    if (HasFatalFailure() || HasNonfatalFailure()) FAIL() << "seed " << seed << ", the counted round";
  }
  // Last, a clean stop: the shutdown checkpoint signs everything, and the next start says so.
  ServerProcess server(settings_, dir_.file("server.log"));
  ASSERT_GT(server.port(), 0);
  const int status = server.Terminate();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << testing::ReadFile(dir_.file("server.log"));
  CheckDatabase(acknowledged, kills + 1);
  auto db = storage::Database::Open(dir_.file("db"), {.read_only = true});
  ASSERT_TRUE(db.ok());
  const std::vector<std::pair<std::string, std::string>> last =
      (*db)->ReadLast(storage::ColumnFamily::kAudit, 2).value();
  ASSERT_EQ(last.size(), 2u);
  EXPECT_NE(last[0].second.find("\"reason\":\"shutdown\""), std::string::npos) << last[0].second;
  EXPECT_NE(last[1].second.find("\"previous\":\"crash\""), std::string::npos) << last[1].second;
  // storage.audit_checkpoint_every: 50 from the settings file: signed periodic checkpoints.
  const std::vector<std::pair<std::string, std::string>> all = (*db)->ReadAll(storage::ColumnFamily::kAudit).value();
  // Each start takes the next epoch: the counted round, which is sure to pass 50 entries, is
  // epoch kills + 1.
  const std::string counted_round_periodic =
      "\"reason\":\"periodic\",\"epoch\":" + std::to_string(kills + 1) + ",\"checkpoint_every\":50,";
  const size_t periodic = std::count_if(all.begin(), all.end(), [&](const auto& entry) {
    return entry.second.find(counted_round_periodic) != std::string::npos;
  });
  EXPECT_GT(periodic, 0u);
  std::printf(
      "%d kills survived (durability %s, seed %u): %zu acknowledged decisions, all with their audit record "
      "and card state; audit verify passed after each\n",
      kills, GetParam().c_str(), seed, acknowledged.size());
}

INSTANTIATE_TEST_SUITE_P(Durability, CrashTest, ::testing::Values("sync", "wal"));

// The kernel may hand a process's SIGTERM to any thread that does not block it, such as a
// thread a library started before main (OpenBLAS does): it must still be a clean stop.
TEST(DrainTest, ASigtermRightAfterStartIsACleanStop) {
  testing::TempDir dir;
  testing::WriteTestPipeline(dir, "wal");
  for (int start = 0; start < 5; ++start) {
    ServerProcess server(testing::TestSettingsPath(dir), dir.file("server.log"));
    ASSERT_GT(server.port(), 0) << testing::ReadFile(dir.file("server.log"));
    const int status = server.Terminate();  // as soon as it says it listens
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "start " << start << ": "
        << (WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                                : "exit " + std::to_string(WEXITSTATUS(status)));
  }
  const std::string log = testing::ReadFile(dir.file("server.log"));
  size_t stops = 0;
  for (size_t at = log.find("stopped cleanly"); at != std::string::npos; at = log.find("stopped cleanly", at + 1)) {
    ++stops;
  }
  EXPECT_EQ(stops, 5u) << log;
}

// The database holds card tokens and the audit trail: whatever umask the server was started
// with, its files are its owner's alone (mode 0600, directories 0700).
TEST(FileModes, EverythingServeWritesIsForItsOwnerAlone) {
  testing::TempDir dir;
  testing::WriteTestPipeline(dir, "wal");
  const mode_t before = ::umask(022);  // a usual umask: files 0644 unless txscore sets its own
  {
    ServerProcess server(testing::TestSettingsPath(dir), dir.file("server.log"));
    ::umask(before);
    ASSERT_GT(server.port(), 0) << testing::ReadFile(dir.file("server.log"));
    const int status = server.Terminate();
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  int files = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir.file("db"))) {
    const auto perms = static_cast<unsigned>(entry.symlink_status().permissions());
    EXPECT_EQ(perms & 077u, 0u) << entry.path() << " has mode " << std::oct << perms;
    files += entry.is_regular_file() ? 1 : 0;
  }
  EXPECT_GT(files, 3);  // RocksDB's CURRENT, MANIFEST, OPTIONS, WAL at least
  const auto db_perms = static_cast<unsigned>(std::filesystem::status(dir.file("db")).permissions());
  EXPECT_EQ(db_perms & 077u, 0u) << std::oct << db_perms;
}

// The shipped default (security.allow_core_dumps false): the server runs with a core file size
// limit of 0, whatever limit it was started with, so a crash leaves no dump of its keys.
TEST(CoreDumps, TheServerRunsWithACoreFileLimitOfZero) {
  testing::TempDir dir;
  testing::WriteTestPipeline(dir, "wal");
  rlimit before{};
  ::getrlimit(RLIMIT_CORE, &before);
  rlimit some{before.rlim_max == 0 ? 0 : std::min<rlim_t>(4096, before.rlim_max), before.rlim_max};
  ::setrlimit(RLIMIT_CORE, &some);
  ServerProcess server(testing::TestSettingsPath(dir), dir.file("server.log"));
  ::setrlimit(RLIMIT_CORE, &before);
  ASSERT_GT(server.port(), 0) << testing::ReadFile(dir.file("server.log"));
  const std::string limits = testing::ReadFile("/proc/" + std::to_string(server.pid()) + "/limits");
  const size_t line = limits.find("Max core file size");
  ASSERT_NE(line, std::string::npos) << limits;
  std::istringstream fields(limits.substr(line + std::string("Max core file size").size()));
  std::string soft, hard;
  fields >> soft >> hard;
  EXPECT_EQ(soft, "0") << limits;
  EXPECT_EQ(hard, "0") << limits;
  const int status = server.Terminate();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

// The HTTP status of GET `target` on 127.0.0.1:port; 0 when nothing answers (the port closed).
int HttpStatus(int port, const std::string& target) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int status = 0;
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) {
    const std::string request = "GET " + target + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    if (write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
      char answer[16] = {};
      if (read(fd, answer, sizeof answer - 1) >= 12 && std::string(answer).rfind("HTTP/1.1 ", 0) == 0) {
        status = std::atoi(answer + 9);
      }
    }
  }
  close(fd);
  return status;
}

using SteadyTime = std::chrono::steady_clock::time_point;

TEST(DrainTest, SigtermUnderLoadTurnsReadinessOffFirstAndAnswersEveryAcceptedRequest) {
  testing::TempDir dir;
  testing::WriteTestPipeline(dir, "sync");
  std::string settings = testing::ReadFile(testing::TestSettingsPath(dir));
  settings.replace(settings.find("server:\n"), 8, "server:\n  stop_delay_ms: 400\n  drain_timeout_ms: 10000\n");
  testing::WriteFile(testing::TestSettingsPath(dir), settings);
  ServerProcess server(testing::TestSettingsPath(dir), dir.file("server.log"));
  ASSERT_GT(server.port(), 0) << testing::ReadFile(dir.file("server.log"));
  ASSERT_EQ(HttpStatus(server.admin_port(), "/readyz"), 200);

  // Eight clients score until they can no longer connect. Each request ends one of three ways:
  // a decision, an error reply, or no reply (the connection closed around it).
  struct Outcome {
    std::string request_id;
    enum { kDecision, kErrorReply, kNoReply } how;
    SteadyTime at;
  };
  std::mutex mutex;
  std::vector<Outcome> outcomes;
  std::vector<SteadyTime> refused_at;  // each client's first refused connect
  std::vector<std::thread> clients;
  for (int c = 0; c < 8; ++c) {
    clients.emplace_back([&, c] {
      std::unique_ptr<testing::RpcClient> client;
      for (int n = 0;; ++n) {
        if (client == nullptr) {
          try {
            client = std::make_unique<testing::RpcClient>(server.port());
          } catch (const std::exception&) {
            std::lock_guard<std::mutex> lock(mutex);
            refused_at.push_back(std::chrono::steady_clock::now());
            return;
          }
        }
        fraud::RawTransaction tx = testing::ValidTransaction("d-c" + std::to_string(c) + "-" + std::to_string(n));
        tx.card_number.reset();
        tx.card_token = "drain-card-" + std::to_string(c);
        tx.timestamp_ms = 1796180000000 + int64_t{n} * 1000;
        Outcome outcome{tx.request_id, Outcome::kDecision, {}};
        try {
          rpc::ScoreResult result;
          client->client->score(result, service::ToThriftTransaction(tx));
        } catch (const apache::thrift::transport::TTransportException&) {
          outcome.how = Outcome::kNoReply;
          client.reset();  // connect again: refused once the listener has closed
        } catch (const std::exception&) {
          outcome.how = Outcome::kErrorReply;
        }
        outcome.at = std::chrono::steady_clock::now();
        std::lock_guard<std::mutex> lock(mutex);
        outcomes.push_back(outcome);
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const SteadyTime sigterm_at = std::chrono::steady_clock::now();
  server.Signal(SIGTERM);
  // Readiness as a load balancer sees it, until the admin port closes.
  std::vector<std::pair<SteadyTime, int>> readiness;
  for (int status = 200; status != 0;) {
    status = HttpStatus(server.admin_port(), "/readyz");
    readiness.emplace_back(std::chrono::steady_clock::now(), status);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (std::thread& client : clients) client.join();
  const int exit_status = server.Wait();
  const std::string log = testing::ReadFile(dir.file("server.log"));
  EXPECT_TRUE(WIFEXITED(exit_status) && WEXITSTATUS(exit_status) == 0) << log;
  EXPECT_NE(log.find("stopping: readiness is off; serving 400 ms more (server.stop_delay_ms)"), std::string::npos)
      << log;

  // Readiness went false before the listener closed.
  SteadyTime first_not_ready = SteadyTime::max();
  for (const auto& [at, status] : readiness) {
    if (status == 503) {
      first_not_ready = at;
      break;
    }
  }
  ASSERT_NE(first_not_ready, SteadyTime::max()) << "readiness never said 503";
  ASSERT_EQ(refused_at.size(), 8u);
  const SteadyTime first_refused = *std::min_element(refused_at.begin(), refused_at.end());
  EXPECT_LT(first_not_ready, first_refused);
  EXPECT_GE(first_refused - sigterm_at, std::chrono::milliseconds(400));  // served through the delay

  // No request failed: no error replies, every decision is in the audit trail, and no request
  // left without a reply was processed (a request the server accepted was answered).
  auto db = storage::Database::Open(dir.file("db"), {.read_only = true});
  ASSERT_TRUE(db.ok()) << db.error().ToString();
  std::set<std::string> audited;
  const std::vector<storage::AuditRecord> records = storage::AuditLog(db->get()).ReadLast(10000000).value();
  for (const storage::AuditRecord& record : records) audited.insert(record.request_id);
  size_t decisions = 0, decisions_while_not_ready = 0, unanswered = 0;
  for (const Outcome& outcome : outcomes) {
    EXPECT_NE(outcome.how, Outcome::kErrorReply) << outcome.request_id;
    if (outcome.how == Outcome::kDecision) {
      ++decisions;
      if (outcome.at > first_not_ready) ++decisions_while_not_ready;
      EXPECT_EQ(audited.count(outcome.request_id), 1u) << outcome.request_id << " was answered and not audited";
    } else if (outcome.how == Outcome::kNoReply) {
      ++unanswered;
      EXPECT_EQ(audited.count(outcome.request_id), 0u) << outcome.request_id << " was processed and not answered";
    }
  }
  EXPECT_GT(decisions_while_not_ready, 0u);
  std::printf(
      "drain: %zu decisions (%zu after readiness went off); %zu requests sent on connections the server had "
      "closed, none of them processed; 0 failed among those it accepted\n",
      decisions, decisions_while_not_ready, unanswered);
}

}  // namespace
}  // namespace txscore
