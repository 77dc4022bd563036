// The event-driven Thrift server on its own, with a fake handler: connection limits, frame
// and idle deadlines, load shedding and each protocol limit, without a pipeline behind it.
#include "service/rpc_server.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <thrift/TApplicationException.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>
#include <thrift/transport/TSocket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <future>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>

#include "common/blocking_wait.h"
#include "gen-cpp/TxScore.h"
#include "service/thrift_async.h"
#include "tests/rpc_test_support.h"
#include "tests/test_pki.h"
#include "tests/test_support.h"

namespace txscore::service {
namespace {

using apache::thrift::protocol::TBinaryProtocol;
using apache::thrift::transport::TFramedTransport;
using apache::thrift::transport::TMemoryBuffer;
using apache::thrift::transport::TSocket;

// Echoes requests; health() waits while the gate is closed, so a test can hold workers busy.
class FakeHandler : public rpc::TxScoreIf {
 public:
  void score(rpc::ScoreResult& out, const rpc::Transaction& transaction) override {
    out.request_id = transaction.request_id;
    if (transaction.request_id == kThrows) throw std::runtime_error("the handler broke");
    if (transaction.request_id != kWaitsForLlm) return;
    // As the pipeline waits for its LLM stage (pipelines/scoring_pipeline.cc), or skips it
    // when the wait is refused.
    ScopedBlockingWait waiting;
    if (waiting.refused()) {
      out.request_id = kWaitRefused;
      return;
    }
    std::unique_lock<std::mutex> lock(mutex_);
    ++slow_calls_entered_;
    changed_.notify_all();
    changed_.wait(lock, [this] { return slow_gate_open_; });
  }
  static constexpr const char* kWaitsForLlm = "waits-for-llm";
  static constexpr const char* kThrows = "throws";             // score() throws an exception it does not declare
  static constexpr const char* kWaitRefused = "wait-refused";  // the answer of a slow call whose wait was refused
  void CloseSlowGate() {
    std::lock_guard<std::mutex> lock(mutex_);
    slow_gate_open_ = false;
  }
  void OpenSlowGate() {
    std::lock_guard<std::mutex> lock(mutex_);
    slow_gate_open_ = true;
    changed_.notify_all();
  }
  void AwaitSlowCallsEntered(int n) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return slow_calls_entered_ >= n; });
  }
  void scoreBatch(std::vector<rpc::BatchItem>& out, const std::vector<rpc::Transaction>& transactions) override {
    out.resize(transactions.size());
    if (reply_id_bytes > 0) {
      for (rpc::BatchItem& item : out)
        item.result.request_id = std::string(reply_id_bytes, 'r'), item.__isset.result = true;
    }
  }
  size_t reply_id_bytes = 0;  // > 0: every batch item carries a result with an id this long (large replies)
  std::atomic<bool> health_throws{false};
  void health(rpc::HealthStatus& out) override {
    if (health_throws) throw std::runtime_error("health broke");
    std::unique_lock<std::mutex> lock(mutex_);
    ++health_calls_entered_;
    changed_.notify_all();
    changed_.wait(lock, [this] { return gate_open_; });
    out.live = true;
  }
  void submitClaimsJob(rpc::ClaimsJobStatus&, const rpc::ClaimsJobRequest&) override {}
  void claimsJobStatus(rpc::ClaimsJobStatus&, const std::string&) override {}
  void cancelClaimsJob(rpc::ClaimsJobStatus&, const std::string&) override {}

  void CloseGate() {
    std::lock_guard<std::mutex> lock(mutex_);
    gate_open_ = false;
  }
  void OpenGate() {
    std::lock_guard<std::mutex> lock(mutex_);
    gate_open_ = true;
    changed_.notify_all();
  }
  int health_calls_entered() {
    std::lock_guard<std::mutex> lock(mutex_);
    return health_calls_entered_;
  }
  void AwaitHealthCallsEntered(int n) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return health_calls_entered_ >= n; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool gate_open_ = true;
  int health_calls_entered_ = 0;
  bool slow_gate_open_ = true;
  int slow_calls_entered_ = 0;
};

using Client = testing::RpcClient;
using testing::Framed;

rpc::Transaction TransactionWithId(const std::string& id) {
  rpc::Transaction t;
  t.request_id = id;
  return t;
}

std::string HealthCallWithNesting(int depth) { return testing::CallWithNestedUnknownField("health", depth); }

using testing::Eventually;

class RpcServerUnitTest : public ::testing::Test {
 protected:
  void Start(RpcServerConfig config) {
    config.host = "127.0.0.1";
    config.port = 0;
    auto server = RpcServer::Create(config, handler_);
    ASSERT_TRUE(server.ok()) << server.error().ToString();
    server_ = std::move(server).value();
    serve_ = std::thread([this] { server_->Serve(); });
    ASSERT_TRUE(Eventually([this] { return server_->serving(); }));  // every thread started
  }
  void TearDown() override {
    handler_->OpenGate();
    handler_->OpenSlowGate();
    if (server_) server_->Stop();
    if (serve_.joinable()) serve_.join();
  }

  int RawConnect() { return testing::RawConnect(server_->port()); }

  // Sends `bytes` on a fresh connection; true when the server then closes it without a reply.
  bool ClosedWithoutReply(const std::string& bytes) {
    int fd = RawConnect();
    ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    char buf[256];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    const bool reset = n < 0 && errno == ECONNRESET;  // closed with our bytes unread: a reset, not a FIN
    ::close(fd);
    return n == 0 || reset;
  }

  bool Answers(const std::string& bytes) {
    int fd = RawConnect();
    ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    char buf[256];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    ::close(fd);
    return n > 0;
  }

  void ExpectStillServing() {
    Client c(server_->port());
    rpc::ScoreResult result;
    c.client->score(result, TransactionWithId("after"));
    EXPECT_EQ(result.request_id, "after");
  }

  std::shared_ptr<FakeHandler> handler_ = std::make_shared<FakeHandler>();
  std::unique_ptr<RpcServer> server_;
  std::thread serve_;
};

TEST_F(RpcServerUnitTest, ServesMoreConnectionsThanWorkersAtOnce) {
  Start({.workers = 1});
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 20; ++i) clients.push_back(std::make_unique<Client>(server_->port()));
  // Every connection stays open while every other one is served: none holds the one worker.
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < 20; ++i) {
      rpc::ScoreResult result;
      clients[i]->client->score(result, TransactionWithId("c" + std::to_string(i)));
      EXPECT_EQ(result.request_id, "c" + std::to_string(i));
    }
  }
  EXPECT_EQ(server_->stats().connections_open, 20u);
}

TEST_F(RpcServerUnitTest, IdleConnectionsHoldNoWorker) {
  Start({.workers = 1});
  std::vector<int> idle;
  for (int i = 0; i < 50; ++i) idle.push_back(RawConnect());
  ASSERT_TRUE(Eventually([&] { return server_->stats().connections_open == 50; }));
  ExpectStillServing();
  for (int fd : idle) ::close(fd);
}

TEST_F(RpcServerUnitTest, ClosesAFrameThatTricklesInPastTheFrameDeadline) {
  Start({.frame_timeout_ms = 300});
  int fd = RawConnect();
  const std::string call = Framed(std::string(100, 'x'));
  size_t sent = 0;
  char buf[16];
  ssize_t n = -1;
  // One byte every 20 ms: the whole frame would take 2 s; the deadline is 300 ms from its first byte.
  for (; sent < call.size(); ++sent) {
    if (::send(fd, call.data() + sent, 1, MSG_NOSIGNAL) != 1) break;
    n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0) break;  // closed by the server
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (n != 0) n = ::recv(fd, buf, sizeof buf, 0);
  ::close(fd);
  EXPECT_EQ(n, 0);
  EXPECT_LT(sent, call.size());  // cut off before the frame was complete
  EXPECT_EQ(server_->stats().frame_timeouts, 1u);
  EXPECT_EQ(server_->stats().idle_timeouts, 0u);
  ExpectStillServing();
}

TEST_F(RpcServerUnitTest, ClosesAConnectionSilentForTheIdleTimeout) {
  Start({.idle_timeout_ms = 200});
  int fd = RawConnect();
  char buf[16];
  EXPECT_EQ(::recv(fd, buf, sizeof buf, 0), 0);  // the server closes it; SO_RCVTIMEO is 10 s
  ::close(fd);
  EXPECT_EQ(server_->stats().idle_timeouts, 1u);
  EXPECT_EQ(server_->stats().frame_timeouts, 0u);
}

TEST_F(RpcServerUnitTest, AnUndeclaredExceptionIsAnsweredAsAnApplicationErrorAndTheConnectionStays) {
  Start({});
  Client c(server_->port());
  rpc::ScoreResult result;
  try {
    c.client->score(result, TransactionWithId(FakeHandler::kThrows));
    ADD_FAILURE() << "score() answered";
  } catch (const apache::thrift::TApplicationException& e) {
    EXPECT_STREQ(e.what(), "the handler broke");
  }
  // health() declares no exception at all: answered the same way.
  handler_->health_throws = true;
  rpc::HealthStatus health;
  try {
    c.client->health(health);
    ADD_FAILURE() << "health() answered";
  } catch (const apache::thrift::TApplicationException& e) {
    EXPECT_EQ(e.getType(), apache::thrift::TApplicationException::UNKNOWN);
    EXPECT_STREQ(e.what(), "health broke");
  }
  handler_->health_throws = false;
  // The same connection goes on.
  c.client->score(result, TransactionWithId("after"));
  EXPECT_EQ(result.request_id, "after");
  c.client->health(health);
  EXPECT_TRUE(health.live);
  EXPECT_EQ(server_->stats().protocol_errors, 0u);
}

TEST_F(RpcServerUnitTest, AConnectionBetweenCallsIsIdleNotMidFrame) {
  // A persistent client that pauses between calls longer than the frame deadline keeps its
  // connection: the frame deadline runs only from a frame's first byte.
  Start({.frame_timeout_ms = 100});
  Client c(server_->port());
  rpc::ScoreResult result;
  c.client->score(result, TransactionWithId("first"));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  c.client->score(result, TransactionWithId("second"));
  EXPECT_EQ(result.request_id, "second");
  EXPECT_EQ(server_->stats().frame_timeouts, 0u);
}

TEST_F(RpcServerUnitTest, AReplyTheClientDoesNotReadIsCutOffAtTheFrameDeadline) {
  // A reply far larger than the socket buffers, and a client that never reads it.
  handler_->reply_id_bytes = 4096;
  Start({.frame_timeout_ms = 300});
  int fd = RawConnect();
  const int small = 4096;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  auto buffer = std::make_shared<TMemoryBuffer>();
  TBinaryProtocol out(buffer);
  out.writeMessageBegin("scoreBatch", apache::thrift::protocol::T_CALL, 1);
  rpc::TxScore_scoreBatch_pargs args;
  const std::vector<rpc::Transaction> batch(4000, TransactionWithId("x"));
  args.transactions = &batch;
  args.write(&out);
  out.writeMessageEnd();
  const std::string call = Framed(buffer->getBufferAsString());
  ASSERT_EQ(::send(fd, call.data(), call.size(), MSG_NOSIGNAL), static_cast<ssize_t>(call.size()));
  ASSERT_TRUE(Eventually([&] { return server_->stats().frame_timeouts == 1; }));  // 16 MB unread: cut off
  ::close(fd);
  ExpectStillServing();
}

TEST_F(RpcServerUnitTest, AReplyLargerThanTheSocketBuffersArrivesWhole) {
  handler_->reply_id_bytes = 4096;
  Start({});
  Client c(server_->port());
  std::vector<rpc::BatchItem> items;
  c.client->scoreBatch(items, std::vector<rpc::Transaction>(2000, TransactionWithId("x")));  // an 8 MB reply
  ASSERT_EQ(items.size(), 2000u);
  EXPECT_EQ(items[1999].result.request_id, std::string(4096, 'r'));
  EXPECT_EQ(server_->stats().frame_timeouts, 0u);
}

TEST_F(RpcServerUnitTest, RefusesConnectionsOverTheLimitWhenNoneIsIdle) {
  Start({.max_connections = 3});
  // Three connections each in the middle of a frame: none of them may be closed for another.
  std::vector<int> mid_frame;
  for (int i = 0; i < 3; ++i) {
    mid_frame.push_back(RawConnect());
    ASSERT_EQ(::send(mid_frame.back(), "\0\0", 2, MSG_NOSIGNAL), 2);
  }
  ASSERT_TRUE(
      Eventually([&] { return server_->stats().connections_open == 3 && server_->stats().connections_idle == 0; }));
  EXPECT_TRUE(ClosedWithoutReply(HealthCallWithNesting(0)));
  EXPECT_EQ(server_->stats().connections_refused, 1u);
  EXPECT_EQ(server_->stats().idle_evictions, 0u);
  ::close(mid_frame.back());  // one closes: a new client gets its place
  mid_frame.pop_back();
  ASSERT_TRUE(Eventually([&] { return server_->stats().connections_open == 2; }));
  ExpectStillServing();
  for (int fd : mid_frame) ::close(fd);
}

TEST_F(RpcServerUnitTest, AFullServerClosesTheConnectionIdleTheLongestForANewClient) {
  Start({.max_connections = 3});
  std::vector<std::unique_ptr<Client>> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(std::make_unique<Client>(server_->port()));
    ASSERT_TRUE(Eventually([&] { return server_->stats().connections_idle == static_cast<uint64_t>(i + 1); }));
  }
  // The second and third have been used since; the first has waited the longest.
  for (int i = 1; i < 3; ++i) {
    rpc::HealthStatus health;
    held[static_cast<size_t>(i)]->client->health(health);
  }
  ExpectStillServing();  // a fourth client is served...
  EXPECT_EQ(server_->stats().connections_refused, 0u);
  ASSERT_TRUE(Eventually([&] { return server_->stats().idle_evictions == 1; }));  // the close runs on its own thread
  // ...and the first was closed to make room; the others still work.
  rpc::HealthStatus health;
  EXPECT_THROW(held[0]->client->health(health), apache::thrift::TException);
  held[1]->client->health(health);
  held[2]->client->health(health);
  EXPECT_TRUE(health.live);
}

TEST_F(RpcServerUnitTest, ABurstOfConnectionsToAFullServerStaysWithinTheLimit) {
  Start({.max_connections = 5});
  std::vector<int> sockets;
  for (int i = 0; i < 5; ++i) sockets.push_back(RawConnect());
  ASSERT_TRUE(Eventually([&] { return server_->stats().connections_idle == 5; }));
  for (int i = 0; i < 50; ++i) sockets.push_back(RawConnect());  // as fast as they connect
  // Each newcomer took an idle connection's place or was refused: never more than the limit.
  ASSERT_TRUE(Eventually([&] {
    const RpcServerStats stats = server_->stats();
    return stats.idle_evictions + stats.connections_refused == 50 && stats.connections_open == 5;
  })) << server_->stats().connections_open
      << " open, " << server_->stats().idle_evictions << " evicted";
  for (int fd : sockets) ::close(fd);
}

TEST_F(RpcServerUnitTest, ShedsRequestsWhenTheQueueIsFullAndKeepsTheConnection) {
  Start({.workers = 1, .max_queued_requests = 1});
  handler_->CloseGate();
  rpc::HealthStatus first_answer, second_answer;
  std::thread first([&] {
    try {
      Client(server_->port()).client->health(first_answer);
    } catch (const apache::thrift::TException& e) {
      ADD_FAILURE() << "first call: " << e.what();
    }
  });
  handler_->AwaitHealthCallsEntered(1);  // the one worker is busy
  std::thread second([&] {
    try {
      Client(server_->port()).client->health(second_answer);
    } catch (const apache::thrift::TException& e) {
      ADD_FAILURE() << "second call: " << e.what();
    }
  });
  ASSERT_TRUE(Eventually([&] { return server_->stats().requests_queued == 1; }));  // the queue is full

  Client third(server_->port());
  rpc::HealthStatus shed;
  try {
    third.client->health(shed);
    ADD_FAILURE() << "expected the call to be shed";
  } catch (const apache::thrift::TApplicationException& e) {
    EXPECT_EQ(e.getType(), apache::thrift::TApplicationException::INTERNAL_ERROR);
    EXPECT_EQ(std::string(e.what()),
              "txscore is overloaded: 1 requests are already waiting; retry shortly or on another replica");
  } catch (const apache::thrift::TException& e) {
    ADD_FAILURE() << "expected an 'overloaded' answer, got: " << e.what();
  }
  EXPECT_EQ(server_->stats().requests_shed, 1u);
  handler_->OpenGate();
  first.join();
  second.join();
  EXPECT_TRUE(first_answer.live);
  EXPECT_TRUE(second_answer.live);
  rpc::ScoreResult result;
  third.client->score(result, TransactionWithId("same connection"));  // the shed call's connection still works
  EXPECT_EQ(result.request_id, "same connection");
}

TEST_F(RpcServerUnitTest, StopAnswersTheRequestInFlightThenEndsServe) {
  Start({});
  handler_->CloseGate();
  rpc::HealthStatus answer;
  std::thread call([&] { Client(server_->port()).client->health(answer); });
  handler_->AwaitHealthCallsEntered(1);
  std::thread stop([&] { server_->Stop(); });
  handler_->OpenGate();
  call.join();
  stop.join();
  serve_.join();
  EXPECT_TRUE(answer.live);
  EXPECT_THROW(Client c(server_->port()), apache::thrift::TException);  // nothing listens
}

// A stop closes each connection once nothing of a request has arrived on it; a request whose
// first bytes have arrived is read, run and answered first (docs/operations.md, "Stopping").
TEST_F(RpcServerUnitTest, StopAnswersARequestWhoseFirstBytesHadArrived) {
  Start({});
  const std::string frame = HealthCallWithNesting(0);  // framed
  int fd = RawConnect();
  ASSERT_EQ(::send(fd, frame.data(), 2, MSG_NOSIGNAL), 2);  // half the frame's length
  ASSERT_TRUE(Eventually([&] { return server_->stats().connections_open == 1; }));
  std::thread stop([&] { server_->Stop(); });
  const auto listening = [this] {
    const int probe = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(server_->port()));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool connected = ::connect(probe, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
    ::close(probe);
    return connected;
  };
  ASSERT_TRUE(Eventually([&] { return !listening(); }));  // the stop has begun: the listener is closed
  ASSERT_EQ(::send(fd, frame.data() + 2, frame.size() - 2, MSG_NOSIGNAL), static_cast<ssize_t>(frame.size() - 2));
  char reply[256];
  EXPECT_GT(::recv(fd, reply, sizeof reply, 0), 0);  // the answer, then the close
  ::close(fd);
  stop.join();
  serve_.join();
}

TEST_F(RpcServerUnitTest, StopGivesUpOnARequestStillRunningAfterTheDrainTimeout) {
  RpcServerConfig config;
  config.drain_timeout_ms = 100;
  Start(config);
  handler_->CloseGate();
  std::thread call([&] {
    try {
      rpc::HealthStatus answer;
      Client(server_->port()).client->health(answer);
    } catch (const apache::thrift::TException&) {
      // The connection may be closed under it: what the timeout is for.
    }
  });
  handler_->AwaitHealthCallsEntered(1);
  const auto stop_started = std::chrono::steady_clock::now();
  server_->Stop();  // returns while the request is still held at the gate
  // Far below the 30 s default: the configured window was used (generous for a loaded machine).
  EXPECT_LT(std::chrono::steady_clock::now() - stop_started, std::chrono::seconds(20));
  handler_->OpenGate();
  call.join();
  serve_.join();
}

// Each limit, with a request that is valid except for that limit, and the same request
// within it as the control.
TEST_F(RpcServerUnitTest, FrameOverTheFrameLimitClosesTheConnection) {
  RpcServerConfig config;
  config.limits.max_frame_bytes = 2048;
  Start(config);
  std::vector<rpc::BatchItem> items;
  Client(server_->port()).client->scoreBatch(items, std::vector<rpc::Transaction>(10, TransactionWithId("x")));
  EXPECT_EQ(items.size(), 10u);
  EXPECT_EQ(server_->stats().protocol_errors, 0u);
  EXPECT_THROW(
      Client(server_->port())
          .client->scoreBatch(items, std::vector<rpc::Transaction>(10, TransactionWithId(std::string(300, 'x')))),
      apache::thrift::transport::TTransportException);  // 3 KB frame: closed unanswered
  EXPECT_EQ(server_->stats().protocol_errors, 1u);
  ExpectStillServing();
}

TEST_F(RpcServerUnitTest, MessageOverTheMessageLimitClosesTheConnection) {
  RpcServerConfig config;
  config.limits.max_message_bytes = 2048;
  Start(config);
  std::vector<rpc::BatchItem> items;
  Client(server_->port()).client->scoreBatch(items, std::vector<rpc::Transaction>(10, TransactionWithId("x")));
  EXPECT_EQ(items.size(), 10u);
  EXPECT_THROW(
      Client(server_->port())
          .client->scoreBatch(items, std::vector<rpc::Transaction>(10, TransactionWithId(std::string(300, 'x')))),
      apache::thrift::transport::TTransportException);
  EXPECT_EQ(server_->stats().protocol_errors, 1u);
  ExpectStillServing();
}

TEST_F(RpcServerUnitTest, StringOverTheStringLimitClosesTheConnection) {
  RpcServerConfig config;
  config.limits.max_string_bytes = 64;
  Start(config);
  rpc::ScoreResult result;
  Client(server_->port()).client->score(result, TransactionWithId(std::string(64, 'r')));
  EXPECT_EQ(result.request_id, std::string(64, 'r'));
  EXPECT_THROW(Client(server_->port()).client->score(result, TransactionWithId(std::string(65, 'r'))),
               apache::thrift::transport::TTransportException);
  EXPECT_EQ(server_->stats().protocol_errors, 1u);
  ExpectStillServing();
}

TEST_F(RpcServerUnitTest, ListOverTheContainerLimitClosesTheConnection) {
  RpcServerConfig config;
  config.limits.max_container_items = 3;
  Start(config);
  std::vector<rpc::BatchItem> items;
  Client(server_->port()).client->scoreBatch(items, std::vector<rpc::Transaction>(3, TransactionWithId("x")));
  EXPECT_EQ(items.size(), 3u);
  EXPECT_THROW(
      Client(server_->port()).client->scoreBatch(items, std::vector<rpc::Transaction>(4, TransactionWithId("x"))),
      apache::thrift::transport::TTransportException);
  EXPECT_EQ(server_->stats().protocol_errors, 1u);
  ExpectStillServing();
}

TEST_F(RpcServerUnitTest, NestingOverTheRecursionLimitClosesTheConnection) {
  RpcServerConfig config;
  config.limits.max_recursion_depth = 8;
  Start(config);
  EXPECT_TRUE(Answers(HealthCallWithNesting(6)));
  EXPECT_EQ(server_->stats().protocol_errors, 0u);
  EXPECT_TRUE(ClosedWithoutReply(HealthCallWithNesting(9)));
  EXPECT_EQ(server_->stats().protocol_errors, 1u);
  ExpectStillServing();
}

// Hostile clients: each is turned away without a reply, costs no more memory than the bytes it
// sent, leaves no connection behind, and the server goes on serving.
TEST_F(RpcServerUnitTest, NegativeFrameLengthsCloseTheConnection) {
  Start({});
  EXPECT_TRUE(ClosedWithoutReply(std::string("\xff\xff\xff\xff", 4)));  // -1
  EXPECT_TRUE(ClosedWithoutReply(std::string("\x80\x00\x00\x00", 4)));  // INT32_MIN
  EXPECT_TRUE(ClosedWithoutReply(std::string("\x00\x00\x00\x00", 4)));  // an empty frame
  EXPECT_EQ(server_->stats().protocol_errors, 3u);
  ExpectStillServing();
}

// A scoreBatch call whose list says `count` Transactions follow, and then ends.
std::string ScoreBatchDeclaring(int32_t count) {
  auto buffer = std::make_shared<TMemoryBuffer>();
  TBinaryProtocol out(buffer);
  out.writeMessageBegin("scoreBatch", apache::thrift::protocol::T_CALL, 1);
  out.writeStructBegin("TxScore_scoreBatch_args");
  out.writeFieldBegin("transactions", apache::thrift::protocol::T_LIST, 1);
  out.writeListBegin(apache::thrift::protocol::T_STRUCT, static_cast<uint32_t>(count));
  return testing::Framed(buffer->getBufferAsString());
}

TEST_F(RpcServerUnitTest, AListDeclaringMoreItemsThanItsFrameHoldsIsRefusedBeforeAnyIsAllocated) {
  RpcServerConfig config;
  config.limits.max_container_items = 1 << 30;  // so only the bytes that follow can refuse it
  Start(config);
  ExpectStillServing();  // the server's own buffers are in the baseline
  testing::ResetPeakResidentBytes();
  const size_t peak_before = testing::PeakResidentBytes();
  // A million Transactions would fit the 1 MiB message limit at one byte each (their smallest
  // encoding), and would take hundreds of megabytes as C++ objects; 30 bytes follow.
  EXPECT_TRUE(ClosedWithoutReply(ScoreBatchDeclaring(1'000'000)));
  EXPECT_EQ(server_->stats().protocol_errors, 1u);
  testing::ExpectPeakGrowthBelow(peak_before, 32u << 20);
  ExpectStillServing();
}

TEST_F(RpcServerUnitTest, TruncatedFramesAndResetsMidRequestLeaveNoConnectionBehind) {
  // Deadlines far away, so only the server's handling of the hang-up or reset can close them.
  RpcServerConfig config;
  config.frame_timeout_ms = 600000;
  config.idle_timeout_ms = 600000;
  Start(config);
  const std::string call = HealthCallWithNesting(0);
  const auto send_then_end = [&](size_t bytes, bool reset) {
    int fd = RawConnect();
    ASSERT_EQ(::send(fd, call.data(), bytes, MSG_NOSIGNAL), static_cast<ssize_t>(bytes));
    if (reset) {
      linger abort{1, 0};  // close() then sends a reset, not a FIN
      ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort, sizeof abort);
    }
    ::close(fd);
  };
  send_then_end(2, false);                // half a frame header, then the client hangs up
  send_then_end(call.size() - 1, false);  // all but the frame's last byte
  send_then_end(4, true);                 // the header, then a reset
  send_then_end(call.size() / 2, true);   // half the frame, then a reset
  EXPECT_TRUE(Eventually([this] { return server_->stats().connections_open == 0; }));
  EXPECT_EQ(server_->stats().frame_timeouts, 0u);
  EXPECT_EQ(handler_->health_calls_entered(), 0);  // no partial request ran
  ExpectStillServing();
}

TEST_F(RpcServerUnitTest, RandomBytesAreRefusedAndTheServerGoesOn) {
  Start({});
  ExpectStillServing();
  testing::ResetPeakResidentBytes();
  const size_t peak_before = testing::PeakResidentBytes();
  std::mt19937 random(20261202);
  for (int i = 0; i < 200; ++i) {
    std::string bytes(1 + random() % 4096, '\0');
    for (char& c : bytes) c = static_cast<char>(random());
    // Half of them get a frame header that matches their length, so the random bytes reach
    // the Thrift decoder instead of failing the frame size check.
    if (i % 2 == 0 && bytes.size() > 4) bytes = testing::Framed(bytes.substr(4));
    int fd = RawConnect();
    ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    ::shutdown(fd, SHUT_WR);
    char reply[512];
    while (::recv(fd, reply, sizeof reply, 0) > 0) {
    }
    ::close(fd);
  }
  EXPECT_TRUE(Eventually([this] { return server_->stats().connections_open == 0; }));
  EXPECT_GE(server_->stats().protocol_errors, 100u);
  testing::ExpectPeakGrowthBelow(peak_before, 32u << 20);
  ExpectStillServing();
}

TEST_F(RpcServerUnitTest, ThreadsAreFixedAtCreateWhateverTheConnections) {
  Start({.workers = 3, .io_threads = 2});
  const auto threads_now = [] {
    size_t n = 0;
    for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) ++n;
    return n;
  };
  ExpectStillServing();
  const size_t before = threads_now();
  std::vector<int> idle;
  for (int i = 0; i < 200; ++i) idle.push_back(RawConnect());
  ASSERT_TRUE(Eventually([&] { return server_->stats().connections_open == 200; }));
  ExpectStillServing();
  EXPECT_EQ(threads_now(), before);
  for (int fd : idle) ::close(fd);
}

// The request id a score call on a fresh connection is answered with within `limit` (far
// beyond any machine's need: a request that can never run is what this catches, not a slow
// one); "failed: ..." or "no answer" otherwise.
std::string AnswerWithin(int port, const std::string& id, std::chrono::seconds limit = std::chrono::seconds(60)) {
  std::future<std::string> answer = std::async(std::launch::async, [port, id]() -> std::string {
    try {
      Client c(port);
      rpc::ScoreResult result;
      c.client->score(result, TransactionWithId(id));
      return result.request_id;
    } catch (const apache::thrift::TException& e) {
      return std::string("failed: ") + e.what();  // the client's own receive timeout (10 s) included
    }
  });
  if (answer.wait_for(limit) != std::future_status::ready) {
    answer.wait();  // the test fails; let the call end before the server does
    return "no answer";
  }
  return answer.get();
}
bool ScoredWithin(int port, const std::string& id, std::chrono::seconds limit = std::chrono::seconds(60)) {
  return AnswerWithin(port, id, limit) == id;
}

TEST_F(RpcServerUnitTest, ARequestWaitingForTheLlmGivesItsWorkerToTheNextRequest) {
  Start({.workers = 1, .waiting_threads = 2});
  handler_->CloseSlowGate();
  std::future<bool> waiting = std::async(std::launch::async, [this] {
    return ScoredWithin(server_->port(), FakeHandler::kWaitsForLlm, std::chrono::seconds(120));
  });
  handler_->AwaitSlowCallsEntered(1);
  EXPECT_EQ(server_->stats().requests_waiting, 1u);
  // The one worker slot is free while the first request waits: a second one runs.
  EXPECT_TRUE(ScoredWithin(server_->port(), "needs-no-llm"));
  handler_->OpenSlowGate();
  EXPECT_TRUE(waiting.get());
  EXPECT_EQ(server_->stats().requests_waiting, 0u);
}

TEST_F(RpcServerUnitTest, AWaitBeyondTheWaitingThreadsIsRefusedAndHoldsNoWorker) {
  Start({.workers = 1, .waiting_threads = 1});
  handler_->CloseSlowGate();
  std::future<bool> waiting = std::async(std::launch::async, [this] {
    return ScoredWithin(server_->port(), FakeHandler::kWaitsForLlm, std::chrono::seconds(120));
  });
  handler_->AwaitSlowCallsEntered(1);
  EXPECT_EQ(server_->stats().requests_waiting, 1u);
  // The one waiting thread is taken: the next slow call is refused its wait and answered at
  // once, without holding the worker, and a request needing no slow stage still runs.
  EXPECT_EQ(AnswerWithin(server_->port(), FakeHandler::kWaitsForLlm), FakeHandler::kWaitRefused);
  EXPECT_EQ(server_->stats().waits_refused, 1u);
  EXPECT_TRUE(ScoredWithin(server_->port(), "needs-no-llm"));
  EXPECT_EQ(server_->stats().requests_queued, 0u);
  handler_->OpenSlowGate();
  EXPECT_TRUE(waiting.get());
  EXPECT_EQ(server_->stats().waits_refused, 1u);
}

TEST_F(RpcServerUnitTest, WithNoWaitingThreadsAWaitingRequestKeepsItsWorkerAndIsNeverRefused) {
  Start({.workers = 1, .waiting_threads = 0});
  handler_->CloseSlowGate();
  std::future<bool> waiting = std::async(std::launch::async, [this] {
    return ScoredWithin(server_->port(), FakeHandler::kWaitsForLlm, std::chrono::seconds(120));
  });
  handler_->AwaitSlowCallsEntered(1);
  std::future<bool> next = std::async(std::launch::async, [this] { return ScoredWithin(server_->port(), "next"); });
  ASSERT_TRUE(Eventually([&] { return server_->stats().requests_queued == 1; }));
  EXPECT_EQ(server_->stats().requests_waiting, 0u);
  handler_->OpenSlowGate();
  EXPECT_TRUE(next.get());
  EXPECT_TRUE(waiting.get());
  EXPECT_EQ(server_->stats().waits_refused, 0u);
}

// Holds every TLS handshake step the server takes (RpcServer::SetHandshakeStepHook) while
// closed, and counts how many are held at once.
class HandshakeGate {
 public:
  void Step() {
    std::unique_lock<std::mutex> lock(mutex_);
    ++entered_;
    most_inside_ = std::max(most_inside_, ++inside_);
    changed_.notify_all();
    changed_.wait(lock, [this] { return open_; });
    --inside_;
  }
  void Close() {
    std::lock_guard<std::mutex> lock(mutex_);
    open_ = false;
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mutex_);
    open_ = true;
    changed_.notify_all();
  }
  void AwaitEntered(int n) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return entered_ >= n; });
  }
  int most_inside() {
    std::lock_guard<std::mutex> lock(mutex_);
    return most_inside_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool open_ = true;
  int entered_ = 0, inside_ = 0, most_inside_ = 0;
};

// The Thrift server over mutual TLS with the test PKI (txscore-client allowed), with the fake
// handler and a gate on its handshake steps.
class RpcServerTlsTest : public ::testing::Test {
 protected:
  void Start(RpcServerConfig config) {
    const testing::TestPki& pki = testing::SharedTestPki();
    TlsConfig tls;
    tls.certificate = pki.server_certificate;
    tls.private_key = pki.server_key;
    tls.client_ca = pki.ca_certificate;
    tls.thrift_clients = {"txscore-client"};
    tls.admin_clients = {"txscore-admin"};
    auto context = TlsServerContext::Create(tls);
    ASSERT_TRUE(context.ok()) << context.error().ToString();
    config.host = "127.0.0.1";
    config.port = 0;
    config.frame_timeout_ms = 600000;  // held handshakes must not time out while a test runs
    auto server = RpcServer::Create(
        config,
        [this](const Caller&) -> std::shared_ptr<rpc::TxScoreCobSvIf> {
          return std::make_shared<AnsweredInline>(handler_);
        },
        *context);
    ASSERT_TRUE(server.ok()) << server.error().ToString();
    server_ = std::move(server).value();
    server_->SetHandshakeStepHook([this] { gate_.Step(); });
    serve_ = std::thread([this] { server_->Serve(); });
    ASSERT_TRUE(Eventually([this] { return server_->serving(); }));
  }
  void TearDown() override {
    gate_.Open();
    if (server_) server_->Stop();
    if (serve_.joinable()) serve_.join();
  }
  std::unique_ptr<RpcConnection> Connect() {
    return RpcConnection::Open({"127.0.0.1", server_->port()},
                               {.tls = TlsClientFilesIn(testing::SharedTestPki().client_dir)})
        .value();
  }

  HandshakeGate gate_;
  std::shared_ptr<FakeHandler> handler_ = std::make_shared<FakeHandler>();
  std::unique_ptr<RpcServer> server_;
  std::thread serve_;
};

TEST_F(RpcServerTlsTest, HandshakesTakeNoMoreThreadsThanTheIoThreadsAndAdmittedClientsAreServed) {
  Start({.workers = 2, .io_threads = 1, .waiting_threads = 0});
  std::unique_ptr<RpcConnection> admitted = Connect();
  rpc::HealthStatus health;
  admitted->client().health(health);  // the handshake happens at the first call
  ASSERT_EQ(server_->stats().handshakes_in_progress, 0u);
  gate_.Close();
  // Four strangers connect: each connection's first handshake step runs at its accept.
  std::vector<int> strangers;
  for (int i = 0; i < 4; ++i) strangers.push_back(testing::RawConnect(server_->port()));
  gate_.AwaitEntered(1);
  ASSERT_TRUE(Eventually([&] { return server_->stats().handshakes_in_progress == 4; }));
  // One step runs (held by the gate); the other three wait for it, not on the workers.
  std::future<std::string> answer = std::async(std::launch::async, [&] {
    rpc::ScoreResult result;
    admitted->client().score(result, TransactionWithId("admitted"));
    return result.request_id;
  });
  ASSERT_EQ(answer.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  EXPECT_EQ(answer.get(), "admitted");
  EXPECT_EQ(gate_.most_inside(), 1);
  gate_.Open();
  for (int fd : strangers) ::close(fd);
  ASSERT_TRUE(Eventually([&] { return server_->stats().handshakes_in_progress == 0; }));
  Connect()->client().health(health);  // the queue drained: a new client is admitted
  EXPECT_TRUE(health.live);
}

TEST_F(RpcServerTlsTest, AConnectionBeyondMaxHandshakesClosesTheOldestStillShakingHands) {
  Start({.max_handshakes = 2});
  // Two strangers connect and say nothing: they hold both handshake places.
  std::vector<int> strangers;
  for (int i = 0; i < 2; ++i) {
    strangers.push_back(testing::RawConnect(server_->port()));
    ASSERT_TRUE(Eventually([&] { return server_->stats().handshakes_in_progress == strangers.size(); }));
  }
  // A client still gets in: the oldest stranger is closed to make room.
  rpc::HealthStatus health;
  Connect()->client().health(health);
  EXPECT_TRUE(health.live);
  EXPECT_EQ(server_->stats().handshakes_evicted, 1u);
  const timeval limit{60, 0};  // far beyond any machine's need: a server that never closes fails
  ::setsockopt(strangers[0], SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  char byte = 0;
  EXPECT_EQ(::recv(strangers[0], &byte, 1, 0), 0);         // closed
  EXPECT_EQ(server_->stats().handshakes_in_progress, 1u);  // the second stranger still waits
  for (int fd : strangers) ::close(fd);
}

}  // namespace
}  // namespace txscore::service
