// The scoring service over loopback: a real Thrift server on a free port, real clients.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>
#include <thrift/transport/TSocket.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "common/wipe.h"
#include "fraud/card_token.h"
#include "fraud/feature_schema.h"
#include "fraud/features.h"
#include "fraud/keyset.h"
#include "fraud/synthetic.h"
#include "fraud/xgboost_model.h"
#include "gen-cpp/TxScore.h"
#include "service/build_info.h"
#include "service/scoring_server.h"
#include "service/transaction_json.h"
#include "storage/audit_chain.h"
#include "storage/audit_log.h"
#include "storage/database.h"
#include "tests/rpc_test_support.h"
#include "tests/server_test_support.h"
#include "tests/test_pki.h"
#include "tests/test_support.h"

namespace txscore::service {
namespace {

using apache::thrift::protocol::TBinaryProtocol;
using apache::thrift::transport::TFramedTransport;
using apache::thrift::transport::TSocket;

using Client = testing::RpcClient;

struct HttpAnswer {
  int status;
  std::string body;
};

HttpAnswer HttpRequest(int port, const std::string& target,
                       boost::beast::http::verb verb = boost::beast::http::verb::get) {
  namespace http = boost::beast::http;
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket socket(io);
  socket.connect({boost::asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
  http::request<http::string_body> request{verb, target, 11};
  request.set(http::field::host, "localhost");
  http::write(socket, request);
  boost::beast::flat_buffer buffer;
  http::response<http::string_body> response;
  http::read(socket, buffer, response);
  return {static_cast<int>(response.result_int()), response.body()};
}

class RpcServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::WriteTestPipeline(dir_);
    auto server = testing::CreateTestServer(testing::TestSettingsPath(dir_));
    ASSERT_TRUE(server.ok()) << server.error().ToString();
    server_ = std::move(server).value();
    server_->Start();
    db_path_ = dir_.file("db");
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }

  std::vector<rpc::Transaction> Demo(int cards, int days, uint64_t seed = 1) {
    std::vector<rpc::Transaction> out;
    for (const auto& t : fraud::GenerateTransactions({.seed = seed, .cards = cards, .days = days})) {
      out.push_back(ToThriftTransaction(t.tx));
    }
    return out;
  }

  // A raw TCP connection for sending bytes no Thrift client would.
  int RawConnect() { return testing::RawConnect(server_->rpc_port()); }

  // Sends bytes and returns what recv() says next: 0 means the server closed the connection.
  ssize_t SendAndAwaitClose(const std::string& bytes) {
    int fd = RawConnect();
    ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    char buf[256];
    ssize_t n;
    do {
      n = ::recv(fd, buf, sizeof buf, 0);
    } while (n > 0);  // drain any exception reply until the close
    ::close(fd);
    return n;
  }

  void ExpectStillServing() {
    Client c(server_->rpc_port());
    rpc::ScoreResult result;
    c.client->score(result, ToThriftTransaction(testing::ValidTransaction("after")));
    EXPECT_EQ(result.request_id, "after");
  }

  testing::TempDir dir_;
  std::unique_ptr<ScoringServer> server_;
  std::string db_path_;
};

TEST_F(RpcServerTest, ScoresDemoTransactionsAndAuditsEveryOne) {
  Client c(server_->rpc_port());
  const auto transactions = Demo(10, 2);
  std::set<std::string> ids;
  for (const auto& t : transactions) {
    rpc::ScoreResult result;
    c.client->score(result, t);
    EXPECT_EQ(result.request_id, t.request_id);
    EXPECT_GE(result.score, 0.0);
    EXPECT_LE(result.score, 1.0);
    EXPECT_EQ(result.model_id, "fraud");
    EXPECT_EQ(result.pipeline_version, "t1");
    EXPECT_EQ(result.timings.size(), 6u);
    ids.insert(t.request_id);
  }
  auto audit = server_->audit_log().ReadLast(100000);
  ASSERT_TRUE(audit.ok());
  ASSERT_EQ(audit->size(), transactions.size());
  std::set<std::string> audited;
  for (const auto& r : *audit) audited.insert(r.request_id);
  EXPECT_EQ(audited, ids);
}

TEST_F(RpcServerTest, ScoreBatchGivesPerItemResultsAndErrors) {
  Client c(server_->rpc_port());
  rpc::Transaction bad = ToThriftTransaction(testing::ValidTransaction("bad"));
  bad.card_number = "4000001234567898";  // Luhn fails
  std::vector<rpc::BatchItem> items;
  c.client->scoreBatch(items, {ToThriftTransaction(testing::ValidTransaction("a")), bad,
                               ToThriftTransaction(testing::ValidTransaction("b"))});
  ASSERT_EQ(items.size(), 3u);
  ASSERT_TRUE(items[0].__isset.result);
  EXPECT_EQ(items[0].result.request_id, "a");
  ASSERT_TRUE(items[1].__isset.error);
  EXPECT_FALSE(items[1].__isset.result);
  EXPECT_EQ(items[1].error.field, "card_number");
  EXPECT_EQ(items[1].error.reason, "fails the Luhn check digit");
  ASSERT_TRUE(items[2].__isset.result);
  EXPECT_EQ(items[2].result.request_id, "b");
  EXPECT_EQ(server_->audit_log().ReadLast(10).value().size(), 2u);
}

TEST_F(RpcServerTest, BadInputsGetTypedErrorsNamingTheField) {
  Client c(server_->rpc_port());
  struct Case {
    std::function<void(rpc::Transaction&)> spoil;
    std::string field;
    std::string reason;
  };
  const std::vector<Case> cases = {
      {[](rpc::Transaction& t) { t.card_number = "1234567890123"; }, "card_number", "fails the Luhn check digit"},
      {[](rpc::Transaction& t) { t.amount_minor = -500; }, "amount_minor", "must not be negative"},
      {[](rpc::Transaction& t) { t.currency = "EUX"; }, "currency", "is not an ISO 4217 currency code"},
      {[](rpc::Transaction& t) { t.merchant_id = std::string(200, 'm'); }, "merchant_id",
       "is 200 bytes; the limit is 128"},
  };
  for (const Case& test_case : cases) {
    rpc::Transaction t = ToThriftTransaction(testing::ValidTransaction("bad"));
    test_case.spoil(t);
    rpc::ScoreResult result;
    try {
      c.client->score(result, t);
      ADD_FAILURE() << "expected InvalidRequest for " << test_case.field;
    } catch (const rpc::InvalidRequest& e) {
      EXPECT_EQ(e.field, test_case.field);
      EXPECT_EQ(e.reason, test_case.reason);
    }
  }
  EXPECT_TRUE(server_->audit_log().ReadLast(10).value().empty());  // nothing written
  ExpectStillServing();
}

size_t ThreadsOfThisProcess() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

using testing::ResidentBytes;

// Values no caller should send, one field at a time: invalid UTF-8 and NUL bytes in every
// string field, NaN and infinite coordinates, enum values off the IDL's list, card numbers
// hidden in free-text ids. Each is refused with InvalidRequest naming its field, without the
// card number echoed back, nothing is audited, and the same connection goes on serving.
TEST_F(RpcServerTest, HostileValuesAreRefusedNamingTheFieldAndNeverEchoed) {
  const std::string pan = "4111111111111111";
  using Setter = std::function<void(rpc::Transaction&, const std::string&)>;
  const std::vector<std::pair<std::string, Setter>> string_fields = {
      {"request_id", [](rpc::Transaction& t, const std::string& v) { t.request_id = v; }},
      {"currency", [](rpc::Transaction& t, const std::string& v) { t.currency = v; }},
      {"card_number", [](rpc::Transaction& t, const std::string& v) { t.__set_card_number(v); }},
      {"card_token",
       [](rpc::Transaction& t, const std::string& v) {
         t.__isset.card_number = false;
         t.__set_card_token(v);
       }},
      {"merchant_id", [](rpc::Transaction& t, const std::string& v) { t.merchant_id = v; }},
      {"mcc", [](rpc::Transaction& t, const std::string& v) { t.mcc = v; }},
      {"merchant_country", [](rpc::Transaction& t, const std::string& v) { t.merchant_country = v; }},
      {"device_id", [](rpc::Transaction& t, const std::string& v) { t.__set_device_id(v); }},
      {"ip_address", [](rpc::Transaction& t, const std::string& v) { t.__set_ip_address(v); }},
      {"traceparent", [](rpc::Transaction& t, const std::string& v) { t.__set_traceparent(v); }},
      {"card_country", [](rpc::Transaction& t, const std::string& v) { t.__set_card_country(v); }},
      {"card_verification_code", [](rpc::Transaction& t, const std::string& v) { t.__set_card_verification_code(v); }},
  };
  struct Case {
    std::string field;
    std::function<void(rpc::Transaction&)> spoil;
  };
  std::vector<Case> cases;
  // Not UTF-8: a truncated sequence, bytes never valid, an overlong '/', a UTF-16 surrogate;
  // then a NUL byte inside otherwise printable text.
  for (const std::string& bad : {std::string("\xc3\x28"), std::string("ab\xff\xfe"), std::string("\xc0\xaf"),
                                 std::string("\xed\xa0\x80"), std::string("US\0", 3)}) {
    for (const auto& [field, set] : string_fields) {
      cases.push_back({field, [set = set, bad](rpc::Transaction& t) { set(t, bad); }});
    }
  }
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (const double bad : {nan, inf, -inf}) {
    cases.push_back({"latitude", [bad](rpc::Transaction& t) { t.__set_latitude(bad), t.__set_longitude(0); }});
    cases.push_back({"longitude", [bad](rpc::Transaction& t) { t.__set_latitude(0), t.__set_longitude(bad); }});
  }
  cases.push_back({"channel", [](rpc::Transaction& t) { t.channel = static_cast<rpc::Channel::type>(99); }});
  cases.push_back({"channel", [](rpc::Transaction& t) { t.channel = static_cast<rpc::Channel::type>(-1); }});
  cases.push_back({"entry_mode", [](rpc::Transaction& t) { t.entry_mode = static_cast<rpc::EntryMode::type>(1000); }});
  // A card number where free text goes, bare, grouped and spaced.
  cases.push_back({"request_id", [&](rpc::Transaction& t) { t.request_id = "order-" + pan; }});
  cases.push_back({"merchant_id", [](rpc::Transaction& t) { t.merchant_id = "shop 4111-1111-1111-1111"; }});
  cases.push_back({"device_id", [](rpc::Transaction& t) { t.__set_device_id("4111 1111 1111 1111"); }});

  Client c(server_->rpc_port());
  int scored = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    rpc::Transaction t = ToThriftTransaction(testing::ValidTransaction("hostile"));
    cases[i].spoil(t);
    rpc::ScoreResult result;
    try {
      c.client->score(result, t);
      ADD_FAILURE() << "case " << i << " (" << cases[i].field << ") was scored";
    } catch (const rpc::InvalidRequest& e) {
      EXPECT_EQ(e.field, cases[i].field) << "case " << i << ": " << e.reason;
      EXPECT_EQ(e.reason.find("4111"), std::string::npos) << e.reason;
    }
    // The same connection, a valid transaction: still served.
    fraud::RawTransaction valid = testing::ValidTransaction("valid-" + std::to_string(i));
    valid.timestamp_ms += 1000 * static_cast<int64_t>(i);
    c.client->score(result, ToThriftTransaction(valid));
    EXPECT_EQ(result.request_id, valid.request_id);
    ++scored;
  }
  auto audit = server_->audit_log().ReadLast(10000);
  ASSERT_TRUE(audit.ok());
  EXPECT_EQ(audit.value().size(), static_cast<size_t>(scored));  // the valid ones only
  for (const auto& record : audit.value()) EXPECT_EQ(record.request_id.rfind("valid-", 0), 0u) << record.request_id;
}

// What the server sends first on a fresh connection after `frame` (a reply, or "" when it
// closes the connection instead).
std::string FirstAnswer(int fd, const std::string& frame) {
  ::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL);
  char buf[4096];
  const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
  ::close(fd);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

// A health() message with this name and type, framed.
std::string HealthFrame(const std::string& name, apache::thrift::protocol::TMessageType type) {
  auto buffer = std::make_shared<apache::thrift::transport::TMemoryBuffer>();
  TBinaryProtocol out(buffer);
  out.writeMessageBegin(name, type, 7);
  rpc::TxScore_health_pargs args;
  args.write(&out);
  out.writeMessageEnd();
  return testing::Framed(buffer->getBufferAsString());
}

TEST_F(RpcServerTest, ALongMethodNameOrAOnewayMessageIsClosedWithoutAnAnswer) {
  // An unknown name of ordinary length gets Thrift's exception, naming it.
  const std::string unknown = FirstAnswer(RawConnect(), HealthFrame("nosuchmethod", apache::thrift::protocol::T_CALL));
  EXPECT_NE(unknown.find("nosuchmethod"), std::string::npos);
  // 60 KB of name: no answer at all (it came back twice, 120 KB, before).
  EXPECT_EQ(FirstAnswer(RawConnect(), HealthFrame(std::string(60 << 10, 'm'), apache::thrift::protocol::T_CALL)), "");
  // health() sent as oneway: not run as a call and answered.
  EXPECT_EQ(FirstAnswer(RawConnect(), HealthFrame("health", apache::thrift::protocol::T_ONEWAY)), "");
  EXPECT_NE(server_->metrics().RenderPrometheus().find("\ntxscore_rpc_protocol_errors_total 2\n"), std::string::npos);
  // The same health() as a call is answered.
  EXPECT_NE(FirstAnswer(RawConnect(), HealthFrame("health", apache::thrift::protocol::T_CALL)), "");
  ExpectStillServing();
}

TEST_F(RpcServerTest, IdleAndTricklingConnectionsNeverDelayAWellBehavedClient) {
  // What locked everyone out of the thread-per-connection server: idle connections by the
  // thousand, then slow clients sending a frame a byte at a time. A client on a fresh
  // connection is served while they all stay open, none of them cut off or timed out to make
  // room for it (a server that needed them gone would not answer until their deadlines, which
  // are ten minutes here), and the server's threads and memory stay bounded. Cutting slow
  // clients off at the frame deadline is RpcServerUnitTest's.
  server_->Stop();
  server_.reset();  // its database closed before the next server opens it
  std::string settings = testing::ReadFile(testing::TestSettingsPath(dir_));
  const std::string deadline = "frame_timeout_ms: 2000";
  settings.replace(settings.find(deadline), deadline.size(), "frame_timeout_ms: 600000");
  testing::WriteFile(testing::TestSettingsPath(dir_), settings);
  auto restarted = testing::CreateTestServer(testing::TestSettingsPath(dir_));
  ASSERT_TRUE(restarted.ok()) << restarted.error().ToString();
  server_ = std::move(restarted).value();
  server_->Start();

  int scored = 0;
  const auto served = [&](const char* when) {
    Client c(server_->rpc_port());
    rpc::ScoreResult result;
    fraud::RawTransaction tx = testing::ValidTransaction("fresh-" + std::to_string(scored));
    tx.timestamp_ms += 1000 * scored++;
    EXPECT_NO_THROW(c.client->score(result, ToThriftTransaction(tx))) << when;
    EXPECT_EQ(result.request_id, tx.request_id) << when;
    const RpcServerStats stats = server_->rpc_stats();
    EXPECT_EQ(stats.idle_timeouts + stats.idle_evictions + stats.frame_timeouts, 0u)
        << when << ": a connection was closed to serve it";
  };
  served("before");
  const size_t threads_before = ThreadsOfThisProcess();
  const size_t memory_before = ResidentBytes();

  // Each idle connection takes two descriptors of this process (client and server side).
  constexpr int kIdle = 2000;
  rlimit files{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &files), 0);
  ASSERT_GE(files.rlim_max, rlim_t{2 * kIdle + 200}) << "raise the hard limit on open files (ulimit -Hn)";
  if (files.rlim_cur < rlim_t{2 * kIdle + 200}) {
    files.rlim_cur = files.rlim_max;
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &files), 0);
  }
  std::vector<int> idle;
  for (int i = 0; i < kIdle; ++i) idle.push_back(RawConnect());
  served("with 2000 idle connections");

  // 16 slow clients trickle a valid score() frame, one byte each every 50 ms, and never send
  // its last byte.
  std::string frame;
  {
    auto buffer = std::make_shared<apache::thrift::transport::TMemoryBuffer>();
    TBinaryProtocol out(buffer);
    rpc::TxScore_score_pargs args;
    const rpc::Transaction slow = ToThriftTransaction(testing::ValidTransaction("slow"));
    args.transaction = &slow;
    out.writeMessageBegin("score", apache::thrift::protocol::T_CALL, 1);
    args.write(&out);
    out.writeMessageEnd();
    frame = testing::Framed(buffer->getBufferAsString());
  }
  constexpr int kSlowClients = 16;
  std::vector<int> slow;
  for (int i = 0; i < kSlowClients; ++i) slow.push_back(RawConnect());
  std::atomic<int> bytes_sent{0};
  std::atomic<bool> stop_trickling{false};
  std::thread trickler([&] {
    for (size_t byte = 0; byte + 1 < frame.size() && !stop_trickling.load(); ++byte) {
      for (int i = 0; i < kSlowClients; ++i) ::send(slow[i], frame.data() + byte, 1, MSG_NOSIGNAL);
      bytes_sent = static_cast<int>(byte + 1);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  const auto every_slow_client_is_open = [&] {
    for (int fd : slow) {
      char buf[8];
      if (::recv(fd, buf, sizeof buf, MSG_DONTWAIT) == 0) return false;  // closed by the server
    }
    return true;
  };
  for (int check = 0; check < 5; ++check) {
    // Each check comes after more bytes of the slow frames have arrived.
    const int before = bytes_sent.load();
    while (bytes_sent.load() == before) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    served("while slow clients trickle");
    EXPECT_TRUE(every_slow_client_is_open());
    EXPECT_EQ(ThreadsOfThisProcess(), threads_before + 1);  // + the trickler: the server started none
  }
  stop_trickling = true;
  trickler.join();
  EXPECT_GE(bytes_sent.load(), 5);
  EXPECT_LT(static_cast<size_t>(bytes_sent.load()), frame.size());  // no slow frame was whole
  EXPECT_TRUE(every_slow_client_is_open());
  for (int fd : slow) ::close(fd);
  served("after the slow clients");
  // The idle ones stay, each costing a descriptor only (the fresh and slow clients' closes are
  // seen asynchronously: wait for them, up to 10 s).
  for (int i = 0; i < 1000 && server_->rpc_stats().connections_open != kIdle; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(server_->rpc_stats().connections_open, static_cast<uint64_t>(kIdle));
  testing::ExpectResidentGrowthBelow(memory_before, 64u << 20);
  for (int fd : idle) ::close(fd);
}

TEST_F(RpcServerTest, BatchOverTheContainerLimitClosesTheConnection) {
  {
    Client c(server_->rpc_port());
    std::vector<rpc::Transaction> many(101, ToThriftTransaction(testing::ValidTransaction()));  // limit: 100
    std::vector<rpc::BatchItem> items;
    EXPECT_THROW(c.client->scoreBatch(items, many), apache::thrift::TException);
  }
  EXPECT_TRUE(server_->audit_log().ReadLast(10).value().empty());
  ExpectStillServing();
}

TEST_F(RpcServerTest, GarbageBytesCloseTheConnection) {
  EXPECT_EQ(SendAndAwaitClose("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), 0);          // frame size 0x47455420: too big
  EXPECT_EQ(SendAndAwaitClose(std::string("\x00\x00\x00\x08garbage!", 12)), 0);  // a frame of junk
  EXPECT_EQ(SendAndAwaitClose(std::string("\x7f\xff\xff\xff", 4)), 0);           // 2 GiB frame announced
  ExpectStillServing();
}

// A framed score() call whose arguments carry, before a valid Transaction, an unknown field
// nested `depth` structs deep. Unknown fields are skipped, so only the nesting limit (64 in
// the test config) decides whether the call is answered.
std::string ScoreCallWithNesting(int depth) {
  return testing::CallWithNestedUnknownField("score", depth, [](apache::thrift::protocol::TProtocol& out) {
    out.writeFieldBegin("transaction", apache::thrift::protocol::T_STRUCT, 1);
    ToThriftTransaction(testing::ValidTransaction("nested")).write(&out);
    out.writeFieldEnd();
  });
}

TEST_F(RpcServerTest, NestingWithinTheRecursionLimitIsAnswered) {
  int fd = RawConnect();
  const std::string call = ScoreCallWithNesting(10);
  ::send(fd, call.data(), call.size(), MSG_NOSIGNAL);
  char reply[512];
  EXPECT_GT(::recv(fd, reply, sizeof reply, 0), 0);  // a reply frame, not a close
  ::close(fd);
  auto audit = server_->audit_log().ReadLast(10);
  ASSERT_EQ(audit.value().size(), 1u);
  EXPECT_EQ(audit.value()[0].request_id, "nested");
}

TEST_F(RpcServerTest, NestingDeeperThanTheRecursionLimitClosesTheConnection) {
  EXPECT_EQ(SendAndAwaitClose(ScoreCallWithNesting(200)), 0);
  EXPECT_TRUE(server_->audit_log().ReadLast(10).value().empty());
  ExpectStillServing();
}

// Fails the test for any number 737 in `value` (at `path`), the timings aside.
void ExpectNoNumber737(const nlohmann::json& value, const std::string& path) {
  if (value.is_number()) {
    EXPECT_NE(value.get<double>(), 737.0) << "737 at " << path;
  } else if (value.is_structured()) {
    for (auto it = value.begin(); it != value.end(); ++it) {
      const std::string key = value.is_object() ? it.key() : "[]";
      if (key != "timings_us") ExpectNoNumber737(it.value(), path + "/" + key);
    }
  }
}

// No PAN and no card verification code in the database: its files as bytes (the WAL, table
// files), and every key and value of every column family as RocksDB decodes them (table files
// may be compressed, where a byte scan would see nothing either way).
TEST_F(RpcServerTest, TheDatabaseHoldsNoPanAndNoCardVerificationCode) {
  Client c(server_->rpc_port());
  std::set<std::string> pans;
  for (auto t : Demo(10, 2, 9)) {
    t.__set_card_verification_code("737");
    rpc::ScoreResult result;
    c.client->score(result, t);
    pans.insert(t.card_number);
  }
  server_->Stop();  // flush and close, so every byte is on disk
  size_t files = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(db_path_)) {
    if (!entry.is_regular_file()) continue;
    ++files;
    const std::string bytes = testing::ReadFile(entry.path().string());
    for (const std::string& pan : pans) {
      EXPECT_EQ(bytes.find(pan), std::string::npos) << "PAN found in " << entry.path();
    }
  }
  EXPECT_GT(files, 0u);
  EXPECT_EQ(pans.size(), 10u);
  auto db = storage::Database::Open(db_path_, {.read_only = true});
  ASSERT_TRUE(db.ok()) << db.error().ToString();
  size_t entries = 0, json_records = 0;
  for (storage::ColumnFamily cf :
       {storage::ColumnFamily::kEntityState, storage::ColumnFamily::kAudit, storage::ColumnFamily::kJobs}) {
    ASSERT_TRUE((*db)
                    ->ScanForward(cf, "",
                                  [&](std::string_view key, std::string_view value) {
                                    ++entries;
                                    const std::string entry = std::string(key) + "\n" + std::string(value);
                                    for (const std::string& pan : pans)
                                      EXPECT_EQ(entry.find(pan), std::string::npos) << entry;
                                    for (const char* name : {"verification", "\"cvc\"", "\"cvv\"", "\"737\""}) {
                                      EXPECT_EQ(entry.find(name), std::string::npos) << name << " in " << entry;
                                    }
                                    // Nor 737 as a number, under any name: every number of a
                                    // JSON record but the stages' timings, which may be 737 us.
                                    const auto record = nlohmann::json::parse(value, nullptr, false);
                                    if (!record.is_discarded()) {
                                      ++json_records;
                                      ExpectNoNumber737(record, "");
                                    }
                                    return true;
                                  })
                    .ok());
  }
  EXPECT_GE(entries, 30u);  // 10 cards' state and 20 decisions at least
  EXPECT_GE(json_records, 10u);
}

// How many times `digits` (ASCII digits, given shifted by +17 so that this function's own
// memory never holds them) occur in this process's writable memory: heap, stacks, anonymous
// maps. The scan buffer is a private mapping it skips by address: the kernel may merge it with
// a neighbouring anonymous mapping, so /proc/self/maps need not show it as a line of its own
// (skipping only a line that starts at it counted the copy just read into it, now and then).
size_t CopiesInWritableMemory(const std::string& shifted_digits) {
  constexpr size_t kChunk = 1 << 20;
  void* scratch = ::mmap(nullptr, kChunk, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  EXPECT_NE(scratch, MAP_FAILED);
  const auto* buffer = static_cast<const char*>(scratch);
  const uintptr_t scratch_begin = reinterpret_cast<uintptr_t>(scratch), scratch_end = scratch_begin + kChunk;
  const int mem = ::open("/proc/self/mem", O_RDONLY);
  EXPECT_GE(mem, 0);
  std::ifstream maps("/proc/self/maps");
  size_t copies = 0;
  const size_t n = shifted_digits.size();
  // Scans [begin, end) in overlapping windows (a copy may straddle two); each match is counted
  // once, in the window where it starts.
  const auto scan = [&](uintptr_t begin, uintptr_t end) {
    for (uintptr_t at = begin; at < end; at += kChunk - (n - 1)) {
      const size_t length = std::min<uintptr_t>(kChunk, end - at);
      const ssize_t got = ::pread(mem, scratch, length, static_cast<off_t>(at));
      if (got < static_cast<ssize_t>(n)) break;
      const bool last = length < kChunk;
      for (ssize_t i = 0; i + static_cast<ssize_t>(n) <= got; ++i) {
        if (!last && i > static_cast<ssize_t>(kChunk - n)) break;  // the next window counts it
        size_t k = 0;
        while (k < n && buffer[i + k] == shifted_digits[k] - 17) ++k;
        if (k == n) ++copies;
      }
      if (last) break;
    }
  };
  for (std::string line; std::getline(maps, line);) {
    uintptr_t begin = 0, end = 0;
    char perms[5] = {};
    if (std::sscanf(line.c_str(), "%lx-%lx %4s", &begin, &end, perms) != 3) continue;
    if (perms[0] != 'r' || perms[1] != 'w') continue;
    if (end <= scratch_begin || begin >= scratch_end) {
      scan(begin, end);
    } else {
      if (begin < scratch_begin) scan(begin, scratch_begin);
      if (scratch_end < end) scan(scratch_end, end);
    }
  }
  ::close(mem);
  ::munmap(scratch, kChunk);
  return copies;
}

// Overwrites the stack below the caller's frame, where a function that returned (Thrift's
// serializer, ScoreFrameWithAFreshPan) left copies in its dead frames.
[[gnu::noinline]] void WipeDeadStackFrames() {
  unsigned char below[1 << 16];
  WipeBytes(below, sizeof below);
  asm volatile("" : : "r"(below) : "memory");
}

// A PAN no other test uses, made at run time (no literal of it exists anywhere), returned
// shifted by 17 (CopiesInWritableMemory's form), and a framed Thrift score call carrying it,
// built in place in `frame`: the test's own copies are wiped. With `padding`, unknown fields
// of that many bytes in all (1000 each: the test server's max_string_bytes is 1024) come first
// in the call's arguments (Thrift skips them), so the card number lies that far into the request.
std::string ScoreFrameWithAFreshPan(std::string* frame, size_t padding = 0) {
  const std::string shifted = "EJDHBFJBHDGHBHG";  // '4','9','3','7','1','5','9','1','7','3','6','7','1','7','6' + 17
  std::string pan;
  for (char c : shifted) pan.push_back(static_cast<char>(c - 17));
  pan.push_back(fraud::LuhnCheckDigit(pan));
  std::string shifted_pan;
  for (char c : pan) shifted_pan.push_back(static_cast<char>(c + 17));
  rpc::Transaction tx = ToThriftTransaction(testing::ValidTransaction("memory"));
  tx.card_number = pan;
  WipeString(&pan);
  auto buffer = std::make_shared<apache::thrift::transport::TMemoryBuffer>();
  TBinaryProtocol out(buffer);
  rpc::TxScore_score_pargs args;
  args.transaction = &tx;
  out.writeMessageBegin("score", apache::thrift::protocol::T_CALL, 1);
  if (padding == 0) {
    args.write(&out);
  } else {
    out.writeStructBegin("TxScore_score_pargs");
    for (size_t field = 0; field * 1000 < padding; ++field) {
      out.writeFieldBegin("padding", apache::thrift::protocol::T_STRING, static_cast<int16_t>(100 + field));
      out.writeString(std::string(std::min<size_t>(1000, padding - field * 1000), 'p'));
      out.writeFieldEnd();
    }
    out.writeFieldBegin("transaction", apache::thrift::protocol::T_STRUCT, 1);
    tx.write(&out);
    out.writeFieldEnd();
    out.writeFieldStop();
    out.writeStructEnd();
  }
  out.writeMessageEnd();
  uint8_t* bytes = nullptr;
  uint32_t length = 0;
  buffer->getBuffer(&bytes, &length);
  frame->reserve(4 + length);  // built in place: a temporary would leave a copy in freed memory
  for (int shift = 24; shift >= 0; shift -= 8) frame->push_back(static_cast<char>((length >> shift) & 0xff));
  frame->append(reinterpret_cast<const char*>(bytes), length);
  WipeBytes(bytes, length);
  WipeString(&tx.card_number);
  return shifted_pan;
}

TEST_F(RpcServerTest, NoCopyOfThePanStaysInTheServersMemoryAfterScoring) {
#if defined(__SANITIZE_ADDRESS__)
  // The scan reads every writable mapping; AddressSanitizer's shadow memory maps terabytes.
  GTEST_SKIP() << "not under AddressSanitizer (scripts/asan.sh): its shadow memory is too large to scan";
#endif
  std::string frame;
  const std::string shifted_pan = ScoreFrameWithAFreshPan(&frame);
  WipeDeadStackFrames();
  // The test's own copies are gone; the one left is the frame about to be sent.
  ASSERT_EQ(CopiesInWritableMemory(shifted_pan), 1u);
  int fd = RawConnect();
  ASSERT_EQ(::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL), static_cast<ssize_t>(frame.size()));
  WipeString(&frame);
  char reply[2048];
  ASSERT_GT(::recv(fd, reply, sizeof reply, 0), 0);  // scored and answered
  ASSERT_EQ(server_->audit_log().ReadLast(1).value().at(0).request_id, "memory");
  // The server read the frame, deserialised it, converted and tokenized the PAN. With the
  // connection still open (its frame buffer alive), no copy is left in live memory. (Freed
  // small strings are overwritten by the allocator anyway; the wipes of Thrift's arguments
  // and the pipeline's input are tested on their own.)
  EXPECT_EQ(CopiesInWritableMemory(shifted_pan), 0u);
  ::close(fd);
}

// The same over TLS: OpenSSL decrypts each record in its own read buffer before handing the
// bytes on, and that buffer (given back when the connection goes idle) would keep the PAN in
// clear unless told to cleanse it (SSL_OP_CLEANSE_PLAINTEXT, service/tls.cc). The card number
// sits near the end of a 15 KB record: nearer its start, the answer's record and the scoring's
// small allocations, carved out of the same freed memory next, overwrite it anyway and the test
// would pass without the cleanse (it did at 4 KB). The client here is this process too, so it
// cleanses its own buffers the same way.
TEST(RpcServerTlsTest, NoCopyOfThePanStaysInTheServersMemoryAfterScoringOverTls) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "not under AddressSanitizer (scripts/asan.sh): its shadow memory is too large to scan";
#endif
  testing::TempDir dir;
  testing::WriteTestPipeline(dir, "wal", testing::TestTransport::kTls);
  auto created = testing::CreateTestServer(testing::TestSettingsPath(dir));
  ASSERT_TRUE(created.ok()) << created.error().ToString();
  auto server = std::move(created).value();
  server->Start();

  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL_CTX_set_options(ctx, SSL_OP_CLEANSE_PLAINTEXT);
  SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
  const std::string cert_dir = testing::SharedTestPki().client_dir;
  ASSERT_EQ(SSL_CTX_use_certificate_chain_file(ctx, (cert_dir + "/tls.crt").c_str()), 1);
  ASSERT_EQ(SSL_CTX_use_PrivateKey_file(ctx, (cert_dir + "/tls.key").c_str(), SSL_FILETYPE_PEM), 1);
  const int fd = testing::RawConnect(server->rpc_port());
  SSL* ssl = SSL_new(ctx);
  SSL_set_fd(ssl, fd);
  ASSERT_EQ(SSL_connect(ssl), 1);

  std::string frame;
  const std::string shifted_pan = ScoreFrameWithAFreshPan(&frame, 15000);
  WipeDeadStackFrames();
  ASSERT_EQ(CopiesInWritableMemory(shifted_pan), 1u);
  ASSERT_EQ(SSL_write(ssl, frame.data(), static_cast<int>(frame.size())), static_cast<int>(frame.size()));
  WipeString(&frame);
  char reply[2048];
  ASSERT_GT(SSL_read(ssl, reply, sizeof reply), 0);  // scored and answered
  ASSERT_EQ(server->audit_log().ReadLast(1).value().at(0).request_id, "memory");
  // The connection stays open (its TLS state alive, its read buffer given back or kept).
  EXPECT_EQ(CopiesInWritableMemory(shifted_pan), 0u);
  SSL_shutdown(ssl);
  SSL_free(ssl);
  ::close(fd);
  SSL_CTX_free(ctx);
  server->Stop();
}

TEST_F(RpcServerTest, HealthReportsReadyModel) {
  Client c(server_->rpc_port());
  rpc::HealthStatus health;
  c.client->health(health);
  EXPECT_TRUE(health.live);
  EXPECT_TRUE(health.ready);
  EXPECT_EQ(health.model_id, "fraud");
  EXPECT_EQ(health.model_version, server_->pipeline()->FindStage("fraud")->model()->version);
}

// The group commit's metrics: every entry counted once, and under durability sync exactly one
// WAL sync per database write (however many decisions the write carried).
TEST(RpcServerGroupCommit, MetricsCountAuditEntriesWritesAndOneSyncPerWrite) {
  for (const std::string durability : {"sync", "wal"}) {
    testing::TempDir dir;
    testing::WriteTestPipeline(dir, durability);
    auto server = testing::CreateTestServer(testing::TestSettingsPath(dir));
    ASSERT_TRUE(server.ok()) << server.error().ToString();
    (*server)->Start();
    std::vector<std::thread> clients;
    for (int c = 0; c < 4; ++c) {
      clients.emplace_back([&, c] {
        Client client((*server)->rpc_port());
        for (int i = 0; i < 10; ++i) {
          fraud::RawTransaction tx = testing::ValidTransaction("g" + std::to_string(c) + "-" + std::to_string(i));
          tx.timestamp_ms += (c * 10 + i) * 1000;
          rpc::ScoreResult result;
          client.client->score(result, ToThriftTransaction(tx));
        }
      });
    }
    for (std::thread& client : clients) client.join();
    const std::string metrics = HttpRequest((*server)->admin_port(), "/metrics").body;
    const auto value = [&metrics](const std::string& name) {
      const size_t at = metrics.find("\n" + name + " ");
      return at == std::string::npos ? -1 : std::stoll(metrics.substr(at + name.size() + 2));
    };
    EXPECT_EQ(value("txscore_audit_entries_total"), 41) << durability;  // the start checkpoint and 40 decisions
    const int64_t writes = value("txscore_audit_writes_total");
    EXPECT_GE(writes, 1) << durability;
    EXPECT_LE(writes, 41) << durability;
    EXPECT_EQ(value("txscore_wal_syncs_total"), durability == "sync" ? writes : 0) << durability << "\n" << metrics;
    (*server)->Stop();
  }
}

TEST_F(RpcServerTest, AdminPortServesHealthReadinessAndMetrics) {
  {
    Client c(server_->rpc_port());
    rpc::ScoreResult result;
    c.client->score(result, ToThriftTransaction(testing::ValidTransaction("m1")));
  }
  const int port = server_->admin_port();
  EXPECT_EQ(HttpRequest(port, "/healthz").status, 200);
  EXPECT_EQ(HttpRequest(port, "/healthz").body, "ok\n");
  const HttpAnswer ready = HttpRequest(port, "/readyz");
  EXPECT_EQ(ready.status, 200);
  const std::string fraud_model = "fraud@" + server_->pipeline()->FindStage("fraud")->model()->version;
  EXPECT_EQ(ready.body, "{\"database\":\"open\",\"listener\":\"serving\",\"model\":\"" + fraud_model +
                            "\",\"models\":{\"fraud\":\"" + fraud_model +
                            "\"},\"phase\":\"serving\",\"pipeline_version\":\"t1\",\"ready\":true}\n");
  const std::string metrics = HttpRequest(port, "/metrics").body;
  EXPECT_NE(metrics.find("txscore_requests_total{method=\"score\",outcome=\"ok\"} 1\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("txscore_request_duration_seconds_count{method=\"score\"} 1\n"), std::string::npos);
  EXPECT_NE(metrics.find("txscore_stage_duration_seconds_count{stage=\"fraud\"} 1\n"), std::string::npos);
  EXPECT_NE(metrics.find("txscore_model_info{model_id=\"fraud\",model_version=\""), std::string::npos);
  EXPECT_NE(metrics.find("txscore_request_path_model_builds_total 0\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("txscore_request_path_graph_builds_total 0\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("txscore_request_path_weight_bytes_moved_total 0\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("txscore_admin_bad_requests_total 0\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("txscore_admin_connections_refused_total 0\n"), std::string::npos) << metrics;
  EXPECT_EQ(HttpRequest(port, "/nope").status, 404);
  EXPECT_EQ(HttpRequest(port, "/healthz", boost::beast::http::verb::post).status, 405);
  // A request over the header limit is answered 431 and counted.
  int fd = testing::RawConnect(port);
  const std::string oversized = "GET /healthz HTTP/1.1\r\nX-Padding: " + std::string(9000, 'a') + "\r\n\r\n";
  ::send(fd, oversized.data(), oversized.size(), MSG_NOSIGNAL);
  char reply[16] = {};
  EXPECT_EQ(::recv(fd, reply, 12, MSG_WAITALL), 12);
  EXPECT_EQ(std::string(reply), "HTTP/1.1 431");
  ::close(fd);
  EXPECT_NE(HttpRequest(port, "/metrics").body.find("txscore_admin_bad_requests_total 1\n"), std::string::npos);
}

TEST_F(RpcServerTest, TheInferenceProtocolsProbesAndMetadataDescribeTheModelStages) {
  const int port = server_->admin_port();
  EXPECT_EQ(HttpRequest(port, "/v2/health/live").status, 200);
  EXPECT_EQ(HttpRequest(port, "/v2/health/live").body, "");
  EXPECT_EQ(HttpRequest(port, "/v2/health/ready").status, 200);
  const nlohmann::json server_metadata = nlohmann::json::parse(HttpRequest(port, "/v2").body);
  EXPECT_EQ(
      server_metadata,
      (nlohmann::json{{"name", "txscore"}, {"version", ThisBuild().version}, {"extensions", nlohmann::json::array()}}));
  // The fraud stage: its model's version, one FP32 input per feature in the model's order.
  const std::string version = server_->pipeline()->FindStage("fraud")->model()->version;
  const HttpAnswer fraud = HttpRequest(port, "/v2/models/fraud");
  ASSERT_EQ(fraud.status, 200) << fraud.body;
  const nlohmann::json metadata = nlohmann::json::parse(fraud.body);
  EXPECT_EQ(metadata["name"], "fraud");
  EXPECT_EQ(metadata["versions"], nlohmann::json::array({version}));
  EXPECT_EQ(metadata["platform"], "xgboost");
  EXPECT_EQ(metadata["parameters"]["model_id"], "fraud");
  const fraud::FeatureSchema schema =
      fraud::FeatureSchema::Load(fraud::SchemaPathForModel(testing::SmallModelDir() + "/fraud.ubj")).value();
  ASSERT_EQ(metadata["inputs"].size(), schema.size());
  EXPECT_EQ(
      metadata["inputs"][0],
      (nlohmann::json{{"name", std::string(fraud::FeatureName(schema.at(0)))}, {"datatype", "FP32"}, {"shape", {-1}}}));
  EXPECT_EQ(metadata["outputs"], nlohmann::json::parse(R"([{"name":"score","datatype":"FP32","shape":[-1]},)"
                                                       R"({"name":"reasons","datatype":"BYTES","shape":[-1,3]}])"));
  EXPECT_EQ(HttpRequest(port, "/v2/models/fraud/ready").status, 200);
  EXPECT_EQ(HttpRequest(port, "/v2/models/fraud/versions/" + version).status, 200);
  EXPECT_EQ(HttpRequest(port, "/v2/models/fraud/versions/" + version + "/ready").status, 200);
  // Unknown models and versions, stages without a model, paths the protocol does not have.
  const HttpAnswer other_version = HttpRequest(port, "/v2/models/fraud/versions/0/ready");
  EXPECT_EQ(other_version.status, 404);
  EXPECT_EQ(nlohmann::json::parse(other_version.body)["error"],
            "model fraud has no version 0 (it serves " + version + ")");
  EXPECT_EQ(HttpRequest(port, "/v2/models/nope").status, 404);
  EXPECT_EQ(HttpRequest(port, "/v2/models/decision").status, 404);
  EXPECT_EQ(HttpRequest(port, "/v2/models/fraud/infer").status, 404);
  EXPECT_EQ(HttpRequest(port, "/v2/models/fraud/versions").status, 404);
  // The database gone: not ready, by the protocol's 4xx; still live.
  ASSERT_TRUE(server_->database().Close().ok());
  EXPECT_EQ(HttpRequest(port, "/v2/health/ready").status, 400);
  EXPECT_EQ(HttpRequest(port, "/v2/models/fraud/ready").status, 400);
  EXPECT_EQ(HttpRequest(port, "/v2/health/live").status, 200);
}

// The value of the one series `series` (name and labels, exactly) in /metrics; NaN when absent.
double MetricValue(const std::string& metrics, const std::string& series) {
  const size_t at = metrics.find("\n" + series + " ");
  return at == std::string::npos ? std::nan("") : std::stod(metrics.substr(at + series.size() + 2));
}

TEST_F(RpcServerTest, MetricsSayWhichBuildRunsAndWhatTheProcessAndDatabaseHold) {
  for (int i = 0; i < 3; ++i) {
    Client c(server_->rpc_port());
    rpc::ScoreResult result;
    fraud::RawTransaction tx = testing::ValidTransaction("m" + std::to_string(i));
    tx.timestamp_ms += i * 1000;
    c.client->score(result, ToThriftTransaction(tx));
  }
  const std::string metrics = HttpRequest(server_->admin_port(), "/metrics").body;
  const BuildInfo& build = ThisBuild();
  EXPECT_EQ(MetricValue(metrics, "txscore_build_info{version=\"" + build.version + "\",commit=\"" + build.commit +
                                     "\",compiler=\"" + build.compiler + "\"}"),
            1)
      << metrics;
  EXPECT_NE(build.commit, "");
  EXPECT_GT(MetricValue(metrics, "process_resident_memory_bytes"), 1e6);
  EXPECT_GT(MetricValue(metrics, "process_open_fds"), 3);
  EXPECT_GT(MetricValue(metrics, "process_cpu_seconds_total"), 0);
  EXPECT_EQ(metrics.find("# TYPE process_cpu_seconds_total counter\n") != std::string::npos, true);
  // One card's state written three times, and three audit records (with the trail's start
  // checkpoint): RocksDB's estimate counts each write in the memtable until compaction.
  EXPECT_EQ(MetricValue(metrics, "txscore_rocksdb_estimated_keys{column_family=\"entity_state\"}"), 3);
  EXPECT_GE(MetricValue(metrics, "txscore_rocksdb_estimated_keys{column_family=\"audit\"}"), 3);
  EXPECT_GT(MetricValue(metrics, "txscore_rocksdb_memtable_bytes{column_family=\"audit\"}"), 0);
  EXPECT_EQ(MetricValue(metrics, "txscore_rocksdb_sst_bytes{column_family=\"jobs\"}"), 0);
  EXPECT_EQ(MetricValue(metrics, "txscore_rocksdb_background_errors_total"), 0);
  // No claims pipeline is configured: no job metrics.
  EXPECT_EQ(metrics.find("txscore_claims_jobs"), std::string::npos);
}

TEST_F(RpcServerTest, ReadinessFollowsTheDatabase) {
  ASSERT_EQ(HttpRequest(server_->admin_port(), "/readyz").status, 200);
  ASSERT_TRUE(server_->database().Close().ok());  // as if RocksDB had gone away under the server
  const HttpAnswer ready = HttpRequest(server_->admin_port(), "/readyz");
  EXPECT_EQ(ready.status, 503);
  EXPECT_EQ(nlohmann::json::parse(ready.body)["database"], "database " + db_path_ + " is closed");
  EXPECT_EQ(nlohmann::json::parse(ready.body)["ready"], false);
}

TEST(RpcRuleHits, AForcedDecisionAndEveryMatchingRuleReachTheCallerOverThrift) {
  testing::TempDir dir;
  testing::WriteFile(dir.file("deny.txt"), "m-US-17\n");
  testing::WriteTestPipelineWithStages(dir, testing::FraudModelStagesYaml() +
                                                "  - name: rules\n"
                                                "    kind: rules\n"
                                                "    after: features\n"
                                                "    lists: {deny: deny.txt}\n"
                                                "    rules:\n"
                                                "      - {id: N01, when: \"amount > 1\"}\n"
                                                "      - {id: R20, when: \"merchant_id in deny\", decision: DECLINE}\n"
                                                "  - {name: decision, kind: decision, after: [fraud, rules]}\n");
  auto server = testing::CreateTestServer(testing::TestSettingsPath(dir));
  ASSERT_TRUE(server.ok()) << server.error().ToString();
  (*server)->Start();
  {
    Client c((*server)->rpc_port());
    rpc::ScoreResult result;
    c.client->score(result, ToThriftTransaction(testing::ValidTransaction("req-denied")));  // merchant m-US-17
    EXPECT_EQ(result.decision, rpc::Decision::DECLINE);
    ASSERT_TRUE(result.__isset.rule_hits);
    ASSERT_EQ(result.rule_hits.size(), 2u);
    EXPECT_EQ(result.rule_hits[0].rule, "N01");
    EXPECT_FALSE(result.rule_hits[0].__isset.decision);
    EXPECT_EQ(result.rule_hits[1].rule, "R20");
    ASSERT_TRUE(result.rule_hits[1].__isset.decision);
    EXPECT_EQ(result.rule_hits[1].decision, rpc::Decision::DECLINE);
    // `txscore score --json` shows them in the one JSON form (common/json_forms.h).
    const nlohmann::json shown = nlohmann::json::parse(ScoreResultToJson(result));
    EXPECT_EQ(shown["rule_hits"],
              nlohmann::json::parse(R"([{"rule":"N01","decision":null},{"rule":"R20","decision":"DECLINE"}])"));
  }
  (*server)->Stop();
}

TEST(ScoringServerReadiness, IsStartingWhileLoadingAndDrainingWhileStopping) {
  testing::TempDir dir;
  testing::WriteTestPipeline(dir);
  int admin_port = 0;
  std::vector<HttpAnswer> seen;
  ScoringServer::Hooks hooks;
  hooks.on_starting = [&](int port) {
    admin_port = port;
    seen.push_back(HttpRequest(port, "/readyz"));
    seen.push_back(HttpRequest(port, "/healthz"));  // live while starting
  };
  hooks.on_draining = [&] { seen.push_back(HttpRequest(admin_port, "/readyz")); };
  auto server = testing::CreateTestServer(testing::TestSettingsPath(dir), {}, hooks);
  ASSERT_TRUE(server.ok()) << server.error().ToString();
  EXPECT_EQ(HttpRequest(admin_port, "/readyz").status, 503);  // created, not started
  (*server)->Start();
  EXPECT_EQ(HttpRequest(admin_port, "/readyz").status, 200);
  (*server)->Stop();
  EXPECT_TRUE((*server)->stop_status().ok());
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].status, 503);
  EXPECT_EQ(seen[0].body, "{\"phase\":\"starting\",\"ready\":false}\n");
  EXPECT_EQ(seen[1].status, 200);
  EXPECT_EQ(seen[2].status, 503);
  EXPECT_EQ(seen[2].body, "{\"phase\":\"draining\",\"ready\":false}\n");
}

// The server's audit trail walked as `txscore audit verify` does, with the card key file's
// checkpoint keys.
storage::ChainReport VerifyTrail(ScoringServer& server, const std::string& key_file) {
  const fraud::Keyset keys = fraud::LoadKeyset(key_file).value();
  storage::ChainVerifyOptions verify;
  verify.checkpoint_public_key = [&keys](const std::string& id) -> std::optional<std::string> {
    for (const fraud::KeysetKey& key : keys.keys()) {
      if (key.id == id) return fraud::AuditSigningPublicKey(key).value();
    }
    return std::nullopt;
  };
  return storage::VerifyAuditChain(server.database(), verify).value();
}

// A full disk: scoring fails with a reason that names no path, Thrift health(), /readyz and
// /v2/health/ready say not ready (with why), /metrics counts it; when space returns the server
// writes again on its own, without a request or a restart (RocksDB's Resume, or a reopen of
// the database in the process when RocksDB called the error fatal), every decision acknowledged
// is in the trail, and the trail's chain verifies across the episode.
TEST(ScoringServerDiskFull, NotReadyWhileTheDiskIsFullAndServingAgainWhenSpaceReturns) {
  testing::TempDir dir;
  testing::WriteTestPipeline(dir);
  ScoringServer::Hooks hooks;
  hooks.write_faults = std::make_shared<storage::WriteFaults>();
  hooks.resume_every_ms = 10;
  auto server = testing::CreateTestServer(testing::TestSettingsPath(dir), {}, hooks);
  ASSERT_TRUE(server.ok()) << server.error().ToString();
  (*server)->Start();
  Client c((*server)->rpc_port());
  rpc::ScoreResult result;
  c.client->score(result, ToThriftTransaction(testing::ValidTransaction("before")));
  const auto metric = [&](const std::string& name) {
    return MetricValue(HttpRequest((*server)->admin_port(), "/metrics").body, name);
  };
  EXPECT_EQ(metric("txscore_database_writes_stopped"), 0);

  hooks.write_faults->no_space = true;
  for (int i = 0; i < 3; ++i) {
    fraud::RawTransaction tx = testing::ValidTransaction("during-" + std::to_string(i));
    tx.timestamp_ms += 1000 * (i + 1);
    try {
      c.client->score(result, ToThriftTransaction(tx));
      ADD_FAILURE() << "scored with the disk full";
    } catch (const rpc::ServiceError& e) {
      EXPECT_NE(e.reason.find("no space left on the database's disk"), std::string::npos) << e.reason;
      EXPECT_EQ(e.reason.find(dir.path()), std::string::npos) << e.reason;
    }
  }
  rpc::HealthStatus health;
  c.client->health(health);
  EXPECT_FALSE(health.ready);
  const HttpAnswer ready = HttpRequest((*server)->admin_port(), "/readyz");
  EXPECT_EQ(ready.status, 503);
  const std::string database = nlohmann::json::parse(ready.body)["database"];
  EXPECT_NE(database.find("takes no writes since "), std::string::npos) << database;
  EXPECT_NE(database.find(": no space left on the database's disk; retrying every 10 ms"), std::string::npos)
      << database;
  EXPECT_EQ(HttpRequest((*server)->admin_port(), "/v2/health/ready").status, 400);
  EXPECT_EQ(metric("txscore_database_writes_stopped"), 1);
  EXPECT_EQ(metric("txscore_database_write_stops_total"), 1);

  hooks.write_faults->no_space = false;  // space freed
  ASSERT_TRUE(testing::Eventually([&] { return !(*server)->database().write_health().stopped; }));
  EXPECT_EQ(metric("txscore_database_write_recoveries_total"), 1);
  c.client->health(health);
  EXPECT_TRUE(health.ready);
  EXPECT_EQ(HttpRequest((*server)->admin_port(), "/readyz").status, 200);
  fraud::RawTransaction after = testing::ValidTransaction("after");
  after.timestamp_ms += 10000;
  c.client->score(result, ToThriftTransaction(after));
  EXPECT_EQ(result.request_id, "after");
  EXPECT_EQ(metric("txscore_database_writes_stopped"), 0);
  const Result<std::vector<storage::AuditRecord>> records = (*server)->audit_log().ReadLast(10);
  ASSERT_TRUE(records.ok()) << records.error().ToString();
  std::vector<std::string> audited;
  for (const storage::AuditRecord& r : *records) audited.push_back(r.request_id);
  EXPECT_EQ(audited, (std::vector<std::string>{"after", "before"}));  // a failed append never reached the log
  const storage::ChainReport report = VerifyTrail(**server, dir.file("card.key"));
  EXPECT_FALSE(report.problem.has_value()) << report.problem->detail;
  EXPECT_EQ(report.entries, 3u);  // the start checkpoint, before, after
  (*server)->Stop();
  EXPECT_TRUE((*server)->stop_status().ok()) << (*server)->stop_status().error().ToString();
}

// A sync that fails with an I/O error is fatal to RocksDB: no Resume clears it, so the server
// closes and opens its database again in the process once syncs work. The decision whose sync
// failed was answered with an error, yet its bytes were in RocksDB's log and come back with
// the reopen: the trail's chain continues from it, and the next decision is chained after it.
TEST(ScoringServerDiskFull, AFatalWriteErrorReopensTheDatabaseAndTheChainContinues) {
  testing::TempDir dir;
  testing::WriteTestPipeline(dir, "sync");  // a sync per decision: the one that fails
  ScoringServer::Hooks hooks;
  hooks.write_faults = std::make_shared<storage::WriteFaults>();
  hooks.resume_every_ms = 10;
  auto server = testing::CreateTestServer(testing::TestSettingsPath(dir), {}, hooks);
  ASSERT_TRUE(server.ok()) << server.error().ToString();
  (*server)->Start();
  Client c((*server)->rpc_port());
  rpc::ScoreResult result;
  c.client->score(result, ToThriftTransaction(testing::ValidTransaction("before")));
  hooks.write_faults->sync_io_error = true;
  fraud::RawTransaction during = testing::ValidTransaction("during");
  during.timestamp_ms += 1000;
  try {
    c.client->score(result, ToThriftTransaction(during));
    ADD_FAILURE() << "scored while syncs fail";
  } catch (const rpc::ServiceError& e) {
    EXPECT_NE(e.reason.find("an I/O error on the database's disk"), std::string::npos) << e.reason;
  }
  hooks.write_faults->sync_io_error = false;
  ASSERT_TRUE(testing::Eventually([&] { return !(*server)->database().write_health().stopped; }));
  const auto metric = [&](const std::string& name) {
    return MetricValue(HttpRequest((*server)->admin_port(), "/metrics").body, name);
  };
  EXPECT_EQ(metric("txscore_database_reopens_total"), 1);
  EXPECT_EQ(metric("txscore_database_write_recoveries_total"), 1);
  EXPECT_EQ(HttpRequest((*server)->admin_port(), "/readyz").status, 200);
  fraud::RawTransaction after = testing::ValidTransaction("after");
  after.timestamp_ms += 10000;
  c.client->score(result, ToThriftTransaction(after));
  EXPECT_EQ(result.request_id, "after");
  const std::vector<storage::AuditRecord> records = (*server)->audit_log().ReadLast(10).value();
  std::vector<std::string> audited;
  for (const storage::AuditRecord& r : records) audited.push_back(r.request_id);
  EXPECT_EQ(audited, (std::vector<std::string>{"after", "during", "before"}));
  const storage::ChainReport report = VerifyTrail(**server, dir.file("card.key"));
  EXPECT_FALSE(report.problem.has_value()) << report.problem->detail;
  EXPECT_EQ(report.entries, 4u);
  (*server)->Stop();
  EXPECT_TRUE((*server)->stop_status().ok()) << (*server)->stop_status().error().ToString();
}

// A tmpfs of `megabytes` mounted at `path` for the test's life; mounted() is false where this
// process may not mount one (it needs root's CAP_SYS_ADMIN), and why() says so.
class SmallFilesystem {
 public:
  SmallFilesystem(const std::string& path, int megabytes) : path_(path) {
    std::filesystem::create_directories(path);
    const std::string options = "size=" + std::to_string(megabytes) + "m";
    mounted_ = ::mount("tmpfs", path.c_str(), "tmpfs", 0, options.c_str()) == 0;
    if (!mounted_) why_ = std::strerror(errno);
  }
  ~SmallFilesystem() {
    if (mounted_) ::umount2(path_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const std::string& why() const { return why_; }
  uint64_t free_bytes() const {
    struct statvfs fs {};
    return ::statvfs(path_.c_str(), &fs) == 0 ? static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize : 0;
  }

 private:
  std::string path_;
  bool mounted_ = false;
  std::string why_;
};

// A real full disk, not an injected one: the database on a 20 MiB tmpfs, filled by a file
// beside it until a decision fails; once the file is removed, the server writes again without a
// restart, every acknowledged decision is in the trail, and the trail verifies. (RocksDB's own
// recovery from a full disk waits for room for a whole write buffer, which this disk never has:
// the server reopens the database once Resume has failed three times with space back.)
TEST(ScoringServerDiskFull, ARealFullDiskComesBackWhenSpaceIsFreedWithoutARestart) {
  testing::TempDir dir;
  SmallFilesystem disk(dir.file("small"), 20);
  if (!disk.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here (" << disk.why() << "): needs root";
  testing::WriteTestPipeline(dir, "sync");
  std::string settings = testing::ReadFile(testing::TestSettingsPath(dir));
  settings.replace(settings.find("path: db"), 8, "path: " + dir.file("small/db"));
  testing::WriteFile(testing::TestSettingsPath(dir), settings);
  ScoringServer::Hooks hooks;
  hooks.resume_every_ms = 10;
  auto server = testing::CreateTestServer(testing::TestSettingsPath(dir), {}, hooks);
  ASSERT_TRUE(server.ok()) << server.error().ToString();
  (*server)->Start();
  Client c((*server)->rpc_port());
  std::set<std::string> acknowledged;
  int sent = 0;
  const auto score = [&]() -> std::string {  // "" when scored, else the server's reason
    fraud::RawTransaction tx = testing::ValidTransaction("tx-" + std::to_string(sent));
    tx.timestamp_ms += 1000LL * sent++;
    rpc::ScoreResult result;
    try {
      c.client->score(result, ToThriftTransaction(tx));
    } catch (const rpc::ServiceError& e) {
      return e.reason;
    }
    acknowledged.insert(result.request_id);
    return "";
  };
  ASSERT_EQ(score(), "");
  {
    // Leave 256 KB free, then score until a decision finds the disk full.
    const int filler = ::open(dir.file("small/filler").c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    ASSERT_GE(filler, 0);
    ASSERT_EQ(::posix_fallocate(filler, 0, static_cast<off_t>(disk.free_bytes() - (256 << 10))), 0);
    ::close(filler);
  }
  std::string reason;
  for (int i = 0; i < 100000 && reason.empty(); ++i) reason = score();
  EXPECT_NE(reason.find("no space left on the database's disk"), std::string::npos) << reason;
  EXPECT_EQ(reason.find(dir.path()), std::string::npos) << reason;
  EXPECT_EQ(HttpRequest((*server)->admin_port(), "/readyz").status, 503);

  std::filesystem::remove(dir.file("small/filler"));  // space freed
  ASSERT_TRUE(testing::Eventually([&] { return !(*server)->database().write_health().stopped; }));
  EXPECT_EQ(HttpRequest((*server)->admin_port(), "/readyz").status, 200);
  EXPECT_EQ((*server)->database().write_health().recoveries, 1u);
  EXPECT_EQ((*server)->database().write_health().reopens, 1u);  // Resume stayed Busy: reopened
  ASSERT_EQ(score(), "");
  const std::vector<storage::AuditRecord> records = (*server)->audit_log().ReadLast(sent + 10).value();
  std::set<std::string> audited;
  for (const storage::AuditRecord& r : records) audited.insert(r.request_id);
  for (const std::string& id : acknowledged) EXPECT_EQ(audited.count(id), 1u) << id << " acknowledged, not audited";
  const storage::ChainReport report = VerifyTrail(**server, dir.file("card.key"));
  EXPECT_FALSE(report.problem.has_value()) << report.problem->detail;
  c.connection.reset();
  (*server)->Stop();
  EXPECT_TRUE((*server)->stop_status().ok()) << (*server)->stop_status().error().ToString();
}

TEST_F(RpcServerTest, TheRequestPathBuildsNoModelAndMovesNoWeightsUnderLoad) {
  std::vector<std::thread> clients;
  for (int c = 0; c < 3; ++c) {
    clients.emplace_back([&, c] {
      Client client(server_->rpc_port());
      for (int i = 0; i < 50; ++i) {
        rpc::ScoreResult result;
        client.client->score(result,
                             ToThriftTransaction(testing::ValidTransaction("load-" + std::to_string(c * 100 + i))));
      }
    });
  }
  for (std::thread& t : clients) t.join();
  const PrepareSnapshot work = server_->RequestPathWork();
  EXPECT_EQ(work.model_builds, 0u);
  EXPECT_EQ(work.graph_builds, 0u);
  EXPECT_EQ(work.weight_bytes_moved, 0u);
  // And the counters are live: a model built now, after the start, shows up.
  ASSERT_TRUE(fraud::XGBoostModel::Load(testing::SmallModelDir() + "/fraud.ubj").ok());
  EXPECT_EQ(server_->RequestPathWork().model_builds, 1u);
}

TEST_F(RpcServerTest, StopAnswersEveryRequestItAccepted) {
  // Clients keep scoring while the server stops. Whatever the interleaving, a request either
  // got its reply or was never applied: the replied and the audited sets are equal.
  constexpr int kClients = 3;
  std::vector<std::vector<std::string>> replied(kClients);
  std::atomic<int> answered{0}, finished{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      try {
        Client client(server_->rpc_port());
        for (int i = 0;; ++i) {
          fraud::RawTransaction tx = testing::ValidTransaction("stop-" + std::to_string(c) + "-" + std::to_string(i));
          tx.timestamp_ms += i * 1000;
          rpc::ScoreResult result;
          client.client->score(result, ToThriftTransaction(tx));
          replied[c].push_back(result.request_id);
          answered++;
        }
      } catch (const apache::thrift::TException&) {
        // the server closed the connection: this client is done
      }
      finished++;
    });
  }
  // Stop while requests are flowing (or at once if the clients failed, which the checks report).
  while (answered.load() < 30 && finished.load() < kClients) std::this_thread::yield();
  server_->Stop();
  for (auto& t : clients) t.join();
  std::set<std::string> replied_ids;
  for (const auto& ids : replied) replied_ids.insert(ids.begin(), ids.end());

  auto db = storage::Database::Open(db_path_, {.read_only = true});
  ASSERT_TRUE(db.ok()) << db.error().ToString();
  auto audit = storage::AuditLog(db->get()).ReadLast(100000);
  ASSERT_TRUE(audit.ok());
  std::set<std::string> audited_ids;
  for (const auto& record : *audit) audited_ids.insert(record.request_id);
  EXPECT_GE(replied_ids.size(), 30u);
  EXPECT_EQ(audited_ids, replied_ids);
}

TEST_F(RpcServerTest, StopFinishesAndReadinessTurnsOff) {
  server_->Stop();
  EXPECT_FALSE(server_->ready());
  EXPECT_THROW(Client c(server_->rpc_port()), apache::thrift::TException);
}

}  // namespace
}  // namespace txscore::service
