#include "service/rpc_server.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <thrift/TApplicationException.h>
#include <thrift/TConfiguration.h>
#include <thrift/TOutput.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/blocking_wait.h"
#include "common/host_port.h"
#include "common/logging.h"
#include "common/wipe.h"
#include "gen-cpp/TxScore.h"
#include "service/thrift_async.h"

namespace txscore::service {

namespace asio = boost::asio;
using apache::thrift::TApplicationException;
using apache::thrift::TConfiguration;
using apache::thrift::protocol::TBinaryProtocol;
using apache::thrift::transport::TMemoryBuffer;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kMaxMethodNameBytes = 64;
constexpr size_t kFirstReadBytes = 4 << 10;    // a frame's buffer starts at this and doubles
constexpr size_t kKeptBufferBytes = 64 << 10;  // an idle connection keeps at most this much buffer

// Raises the soft file-descriptor limit towards what `connections` need, as far as the hard
// limit allows; returns how many connections fit.
int FitConnectionsToDescriptorLimit(int connections) {
  constexpr rlim_t kReserve = 256;  // the database, models, the admin port, logs
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return connections;
  const rlim_t wanted = static_cast<rlim_t>(connections) + kReserve;
  if (limit.rlim_cur < wanted) {
    rlimit raised = limit;
    raised.rlim_cur = (limit.rlim_max == RLIM_INFINITY || limit.rlim_max >= wanted) ? wanted : limit.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  if (limit.rlim_cur >= wanted) return connections;
  const int fit = limit.rlim_cur > kReserve ? static_cast<int>(limit.rlim_cur - kReserve) : 1;
  Log("thrift").warn(
      "server.max_connections {} needs {} file descriptors but the limit is {} (ulimit -n); "
      "accepting at most {} connections. Raise the limit to serve more.",
      connections, wanted, limit.rlim_cur, fit);
  return fit;
}

// The bytes written to `out` after its 4-byte placeholder, with the placeholder set to their
// length; empty when nothing followed it.
std::vector<uint8_t> FramedReply(TMemoryBuffer& out) {
  uint8_t* bytes = nullptr;
  uint32_t length = 0;
  out.getBuffer(&bytes, &length);
  if (length <= 4) return {};
  const uint32_t body = length - 4;
  bytes[0] = static_cast<uint8_t>(body >> 24);
  bytes[1] = static_cast<uint8_t>(body >> 16);
  bytes[2] = static_cast<uint8_t>(body >> 8);
  bytes[3] = static_cast<uint8_t>(body);
  return std::vector<uint8_t>(bytes, bytes + length);
}

// TBinaryProtocol that refuses a list, set or map declaring more items than the rest of the
// frame could hold, before the generated code allocates them. Thrift's own check counts a
// struct item as 0 bytes, so on its own a list of a million Transactions declared in 30 bytes
// passed it and cost 400 MB (tests/service/rpc_server_test.cc); here every item needs at
// least the bytes of its smallest encoding (a struct: its stop byte).
class FrameBoundedProtocol : public apache::thrift::protocol::TVirtualProtocol<FrameBoundedProtocol, TBinaryProtocol> {
 public:
  using TType = apache::thrift::protocol::TType;
  FrameBoundedProtocol(std::shared_ptr<TMemoryBuffer> frame, const ThriftLimits& limits)
      : TVirtualProtocol(frame), frame_(frame.get()) {
    setStringSizeLimit(static_cast<int32_t>(limits.max_string_bytes));
    setContainerSizeLimit(static_cast<int32_t>(limits.max_container_items));
    setStrict(/*strict_read=*/true, /*strict_write=*/true);
  }
  // A message's name is one of the service's methods (the longest is a few dozen bytes): a
  // longer one is refused before Thrift's "invalid method name" reply echoes it back twice. A
  // oneway call is refused too: the service has no oneway method, and the generated code would
  // answer it as a call.
  uint32_t readMessageBegin(std::string& name, apache::thrift::protocol::TMessageType& type, int32_t& sequence_id) {
    const uint32_t read = TBinaryProtocol::readMessageBegin(name, type, sequence_id);
    if (name.size() > kMaxMethodNameBytes) {
      throw apache::thrift::protocol::TProtocolException(apache::thrift::protocol::TProtocolException::INVALID_DATA,
                                                         "a method name of " + std::to_string(name.size()) +
                                                             " bytes (no method is longer than " +
                                                             std::to_string(kMaxMethodNameBytes) + ")");
    }
    if (type == apache::thrift::protocol::T_ONEWAY) {
      throw apache::thrift::protocol::TProtocolException(apache::thrift::protocol::TProtocolException::INVALID_DATA,
                                                         "a oneway message (the service has no oneway method)");
    }
    return read;
  }
  uint32_t readListBegin(TType& item, uint32_t& size) {
    const uint32_t read = TBinaryProtocol::readListBegin(item, size);
    RefuseIfLongerThanTheFrame(size, SmallestEncoding(item));
    return read;
  }
  uint32_t readSetBegin(TType& item, uint32_t& size) {
    const uint32_t read = TBinaryProtocol::readSetBegin(item, size);
    RefuseIfLongerThanTheFrame(size, SmallestEncoding(item));
    return read;
  }
  uint32_t readMapBegin(TType& key, TType& value, uint32_t& size) {
    const uint32_t read = TBinaryProtocol::readMapBegin(key, value, size);
    RefuseIfLongerThanTheFrame(size, SmallestEncoding(key) + SmallestEncoding(value));
    return read;
  }

 private:
  static uint64_t SmallestEncoding(TType type) {
    using namespace apache::thrift::protocol;
    switch (type) {
      case T_I16:
        return 2;
      case T_I32:
        return 4;
      case T_I64:
      case T_DOUBLE:
        return 8;
      case T_STRING:
        return 4;  // its length
      case T_LIST:
      case T_SET:
        return 5;  // item type and count
      case T_MAP:
        return 6;  // key and value types, count
      default:
        return 1;  // bool, byte, struct (its stop byte)
    }
  }
  void RefuseIfLongerThanTheFrame(uint32_t items, uint64_t bytes_each) {
    if (uint64_t{items} * bytes_each > frame_->available_read()) {
      throw apache::thrift::protocol::TProtocolException(apache::thrift::protocol::TProtocolException::SIZE_LIMIT,
                                                         "a container declares " + std::to_string(items) +
                                                             " items; the rest of the frame holds " +
                                                             std::to_string(frame_->available_read()) + " bytes");
    }
  }
  TMemoryBuffer* frame_;
};

}  // namespace

struct ThriftFrameReader::Impl {
  explicit Impl(const ThriftLimits& limits)
      : thrift_config(std::make_shared<TConfiguration>(static_cast<int>(limits.max_message_bytes),
                                                       static_cast<int>(limits.max_frame_bytes),
                                                       limits.max_recursion_depth)),
        limits(limits) {}
  // A protocol reading `size` bytes at `frame` (not copied; the caller keeps it alive).
  std::shared_ptr<FrameBoundedProtocol> Reader(const uint8_t* frame, size_t size) const {
    auto in = std::make_shared<TMemoryBuffer>(const_cast<uint8_t*>(frame), static_cast<uint32_t>(size),
                                              TMemoryBuffer::OBSERVE, thrift_config);
    // The message is this frame (Thrift's string checks count what is left of it).
    in->updateKnownMessageSize(static_cast<long>(size));
    return std::make_shared<FrameBoundedProtocol>(std::move(in), limits);
  }
  std::shared_ptr<TConfiguration> thrift_config;
  const ThriftLimits limits;
};

ThriftFrameReader::ThriftFrameReader(const ThriftLimits& limits) : impl_(std::make_unique<Impl>(limits)) {}
ThriftFrameReader::~ThriftFrameReader() = default;

void ThriftFrameReader::Process(rpc::TxScoreAsyncProcessor& processor, const uint8_t* frame, size_t size,
                                Answered answered) const {
  auto out = std::make_shared<TMemoryBuffer>(impl_->thrift_config);
  uint8_t placeholder[4] = {0, 0, 0, 0};  // the reply's frame header, filled in by FramedReply
  out->write(placeholder, sizeof placeholder);
  // The processor writes a later answer through the protocol's raw pointer: the callback keeps
  // it alive until then.
  auto protocol = std::make_shared<TBinaryProtocol>(out);
  try {
    // A copy: the catch below answers with `answered` when the method threw instead.
    processor.process(
        [out, protocol, answered](bool ok) { ok ? answered(FramedReply(*out), true) : answered({}, false); },
        impl_->Reader(frame, size), protocol);
  } catch (const HandlerFailed& e) {
    // A method without declared exceptions failed: answered as Thrift's synchronous processor
    // answers it (the frame is still whole: the method ran inside process).
    std::vector<uint8_t> reply = ErrorReply(frame, size, e.what(), TApplicationException::UNKNOWN);
    answered(std::move(reply), true);
  }
}

std::vector<uint8_t> ThriftFrameReader::ErrorReply(const uint8_t* frame, size_t size, const std::string& message,
                                                   int exception_type) const {
  try {
    std::string method;
    apache::thrift::protocol::TMessageType type;
    int32_t sequence_id = 0;
    impl_->Reader(frame, size)->readMessageBegin(method, type, sequence_id);
    auto out = std::make_shared<TMemoryBuffer>();
    uint8_t placeholder[4] = {0, 0, 0, 0};
    out->write(placeholder, sizeof placeholder);
    auto protocol = std::make_shared<TBinaryProtocol>(out);
    protocol->writeMessageBegin(method, apache::thrift::protocol::T_EXCEPTION, sequence_id);
    TApplicationException(static_cast<TApplicationException::TApplicationExceptionType>(exception_type), message)
        .write(protocol.get());
    protocol->writeMessageEnd();
    return FramedReply(*out);
  } catch (const std::exception&) {
    return {};
  }
}

class Connection;
// Runs a connection's complete frame now or queues it, or sheds it (defined below).
void Dispatch(const std::shared_ptr<Connection>& connection);

// The observer of every server thread (common/blocking_wait.h): a request about to wait for a
// slow stage gives its slot back, up to config.waiting_threads at once; one more is refused the
// wait (its stage is skipped) rather than keep a worker. With waiting_threads 0 nothing is lent
// and nothing refused (defined below).
class SlotLender : public BlockingWaitObserver {
 public:
  explicit SlotLender(RpcServer::Shared* shared) : shared_(shared) {}
  Answer Begin() override;
  void End() override;

 private:
  RpcServer::Shared* shared_;
};

struct RpcServer::Shared {
  Shared(const RpcServerConfig& config, RpcHandlerFactory handlers, std::shared_ptr<const TlsServerContext> tls)
      : config(config),
        frames(config.limits),
        handlers(std::move(handlers)),
        tls_enabled(tls != nullptr),
        tls(std::move(tls)),
        acceptor(asio::make_strand(io)),
        work(io.get_executor()),
        free_slots(config.workers),
        free_handshake_slots(config.io_threads),
        slot_lender(this) {}

  const RpcServerConfig config;
  int max_connections = 0;
  // The largest frame accepted: a framed message is its frame, so both limits apply.
  int64_t max_frame_bytes = 0;
  const ThriftFrameReader frames;
  const RpcHandlerFactory handlers;

  // TLS: fixed at Create whether the server uses it; which certificates, replaced by a reload.
  const bool tls_enabled;
  std::shared_ptr<const TlsServerContext> CurrentTls() {
    std::lock_guard<std::mutex> lock(tls_mutex);
    return tls;
  }
  std::mutex tls_mutex;
  std::shared_ptr<const TlsServerContext> tls;
  // Counts SetTls calls: a connection admitted under an older one is admitted again.
  std::atomic<uint64_t> tls_generation{0};
  TlsRefusalCounters tls_refusals;
  TlsRefusalObserver on_refused;  // set before the first accept, then only read

  asio::io_context io;
  tcp::acceptor acceptor;
  asio::executor_work_guard<asio::io_context::executor_type> work;

  // Requests run on the I/O threads themselves (no hand-off: the thread that read a frame runs
  // it and writes the reply), but at most `workers` at once, so io_threads threads are always
  // left to accept, read and shed. A complete frame that finds no free slot waits in
  // `pending`, which the next thread to finish a request takes from; when that is full too,
  // the frame is answered "overloaded".
  std::atomic<int> free_slots;
  std::mutex pending_mutex;
  std::deque<std::shared_ptr<Connection>> pending;

  bool TryTakeSlot() {
    int free = free_slots.load();
    while (free > 0) {
      if (free_slots.compare_exchange_weak(free, free - 1)) return true;
    }
    return false;
  }
  std::shared_ptr<Connection> PopPending() {
    std::lock_guard<std::mutex> lock(pending_mutex);
    if (pending.empty()) return nullptr;
    std::shared_ptr<Connection> next = std::move(pending.front());
    pending.pop_front();
    return next;
  }

  // Requests parked: their method answers later (a REVIEW waiting for the LLM) and no thread
  // waits for them. They go on on a server thread (`continuations`), over the `workers` cap as a
  // request back from a wait does.
  std::atomic<int> parked{0};
  std::shared_ptr<ContinuationHost> continuations;  // installed on every server thread (Serve)
  // Stop waits for parked requests (notified under connections_mutex): a parked request's
  // continuation must run before the threads stop, while what it writes to is still there.
  // After the drain timeout no more frames are read (`closing`), and once the threads stop,
  // work handed to `continuations` is dropped (`continuations_stopped`).
  std::atomic<bool> closing{false};
  std::atomic<bool> continuations_stopped{false};
  std::condition_variable none_parked;

  // Requests waiting for a slow stage without their slot (SlotLender), at most
  // config.waiting_threads: the server runs that many more threads, so a slot given back
  // always finds a thread to use it.
  std::atomic<int> waiting{0};

  // TLS handshakes: at most config.max_handshakes connections in one (Connection::Start), and
  // their steps on at most io_threads threads at once; a step that finds no free place waits in
  // `handshake_queue` for the next step to end (Connection::ContinueHandshake).
  std::atomic<int> handshakes_in_progress{0};
  std::atomic<int> free_handshake_slots;
  std::mutex handshake_queue_mutex;
  std::deque<std::shared_ptr<Connection>> handshake_queue;  // a connection leaves it when it closes
  std::function<void()> handshake_step_hook;                // tests; set before Serve
  bool TryTakeHandshakeSlot() {
    int free = free_handshake_slots.load();
    while (free > 0) {
      if (free_handshake_slots.compare_exchange_weak(free, free - 1)) return true;
    }
    return false;
  }
  // Gives the next queued handshake step a free place, if there are both (defined below).
  void ResumeQueuedHandshake();
  // Connections in their handshake, oldest first (entries of others are dropped as they reach
  // the front), so that a full server closes the oldest to make room.
  std::mutex handshaking_mutex;
  std::deque<std::weak_ptr<Connection>> handshaking;
  void AddHandshake(const std::shared_ptr<Connection>& connection);
  std::shared_ptr<Connection> OldestHandshake();  // and takes it out; null when none

  SlotLender slot_lender;

  asio::steady_timer sweeper{io};  // closes connections past their deadline (Sweep)
  std::chrono::milliseconds sweep_period{100};
  std::atomic<bool> stopped_sweeping{false};
  std::atomic<bool> serving{false};  // Serve() is running the I/O threads
  std::atomic<bool> stopping{false};
  std::mutex connections_mutex;
  std::condition_variable connections_closed;
  std::unordered_map<Connection*, std::weak_ptr<Connection>> connections;
  // Newcomers waiting for the idle connection picked to make room for them: each holds a
  // place against max_connections until it is started (the pick was still idle) or refused
  // (a request had begun on it meanwhile).
  std::atomic<int64_t> evictions_pending{0};

  struct {
    std::atomic<uint64_t> accepted{0}, refused{0}, idle_evictions{0}, frame_timeouts{0}, idle_timeouts{0}, shed{0},
        protocol_errors{0}, most_idle_handshake_steps{0}, handshakes_evicted{0}, waits_refused{0};
  } counters;
  RateLimitedWarning refused_warning{"thrift", std::chrono::seconds(10)};
  RateLimitedWarning timeout_warning{"thrift", std::chrono::seconds(10)};
  RateLimitedWarning shed_warning{"thrift", std::chrono::seconds(10)};
  RateLimitedWarning protocol_warning{"thrift", std::chrono::seconds(10)};
  RateLimitedWarning tls_warning{"thrift", std::chrono::seconds(10)};
  RateLimitedWarning handshakes_warning{"thrift", std::chrono::seconds(10)};
};

// One client connection. Its state is guarded by mutex_, taken by every completion handler
// (they run on whichever I/O thread the reactor picks; a connection has at most one socket
// operation outstanding). The thread that completes a frame runs it (Dispatch), writes the
// reply and starts the next read itself: a hand-off between threads would cost a wake-up per
// request. Deadlines are a time stored per phase, enforced by the server's sweeper (no timer
// operations per request).
//
// Bytes move through ReadSome and WriteSome: recv/send on the non-blocking socket, or
// SSL_read/SSL_write on it with TLS. Either says when it would block and on what (TLS may need
// to write to read), and the connection waits for that readiness through the reactor.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(std::shared_ptr<RpcServer::Shared> shared, tcp::socket socket)
      : shared_(std::move(shared)), socket_(std::move(socket)) {}

  ~Connection() {
    LeaveHandshake();
    if (ssl_ != nullptr) SSL_free(ssl_);
    std::lock_guard<std::mutex> lock(shared_->connections_mutex);
    shared_->connections.erase(this);
    if (shared_->connections.empty()) shared_->connections_closed.notify_all();
  }

  // Call once, right after construction, from the acceptor.
  void Start() {
    // Idle (a candidate to make room) from the moment it counts against max_connections: the
    // handler below runs later on an I/O thread, and a server whose slots were all taken by
    // connections not yet started would otherwise refuse a good client.
    idle_since_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lock(shared_->connections_mutex);
      shared_->connections.emplace(this, weak_from_this());
    }
    asio::post(socket_.get_executor(), [self = shared_from_this()] {
      std::lock_guard<std::mutex> lock(self->mutex_);
      if (self->phase_ == Phase::kClosed) return;  // evicted (or the server stopped) before it started
      boost::system::error_code ec;
      self->socket_.set_option(tcp::no_delay(true), ec);  // replies are small: send at once
      // OpenSSL reads and writes the descriptor itself: it must never block an I/O thread (Asio
      // would make it non-blocking only at its first asynchronous operation).
      self->socket_.non_blocking(true, ec);
      const tcp::endpoint peer = self->socket_.remote_endpoint(ec);
      self->address_ = ec ? "unknown" : PeerText(peer.address().to_string(), peer.address().is_v6(), peer.port());
      if (!self->shared_->tls_enabled) {
        Caller caller;
        caller.address = self->address_;
        // Plaintext: no identities (service/tls.h, Caller).
        caller.is_operator = caller.may_use_llm_api = !ec && peer.address().is_loopback();
        caller.may_send_card_tokens = true;
        return self->Admitted(caller);
      }
      // The generation first: a reload between the two reads makes the connection admitted again
      // at its first request, never skipped (SetTls swaps the context, then counts).
      self->shaking_hands_ = true;  // counted in handshakes_in_progress until LeaveHandshake
      if (self->shared_->handshakes_in_progress.fetch_add(1) >= self->shared_->config.max_handshakes) {
        // Full: the oldest handshake makes room, as silent connections must not lock out
        // every new client (it closes when its thread gets to it).
        if (std::shared_ptr<Connection> oldest = self->shared_->OldestHandshake()) oldest->EvictFromHandshake();
      }
      self->shared_->AddHandshake(self);
      self->tls_generation_ = self->shared_->tls_generation.load();
      self->tls_ = self->shared_->CurrentTls();
      self->ssl_ = self->tls_->NewConnection();
      if (self->ssl_ == nullptr || SSL_set_fd(self->ssl_, self->socket_.native_handle()) != 1) {
        Log("thrift").error("cannot start TLS on a connection from {} (out of memory?)", self->address_);
        self->Close();
        return;
      }
      SSL_set_accept_state(self->ssl_);
      self->phase_ = Phase::kHandshake;  // still idle since Start (not overwritten: it may have been taken)
      self->SetDeadline(self->shared_->config.frame_timeout_ms);  // the whole handshake within this
      self->ContinueHandshake();
    });
  }

  // The server is stopping: close unless a request of ours has begun to arrive, is being run or
  // is being answered. A request partly read, or waiting unread in the socket, is accepted: it
  // is read (under the frame deadline), run and answered, and the connection closes after it
  // (ReadHeader). A connection with nothing of a request yet, or still shaking hands, closes now.
  void OnServerStopping() {
    asio::post(socket_.get_executor(), [self = shared_from_this()] {
      std::lock_guard<std::mutex> lock(self->mutex_);
      if (self->phase_ == Phase::kHandshake) return static_cast<void>(self->Close());
      if (self->phase_ != Phase::kIdle) return;  // reading, running or answering a request
      if (!self->RequestArriving()) self->Close();
    });
  }

  // Whether bytes of a request have arrived: read into the header, or waiting in the socket
  // (or in OpenSSL's buffer). Call with mutex_ held.
  bool RequestArriving() {
    boost::system::error_code ec;
    const bool waiting = header_bytes_ > 0 || socket_.available(ec) > 0 || (ssl_ != nullptr && SSL_pending(ssl_) > 0);
    return waiting && !ec;
  }

  const std::shared_ptr<RpcServer::Shared>& shared() const { return shared_; }

  // For the sweeper: the current phase's deadline in steady-clock ticks, 0 when none runs.
  int64_t deadline() const { return deadline_.load(std::memory_order_relaxed); }

  // For the acceptor: since when the connection has waited for a frame (steady-clock ticks),
  // 0 when it is not idle.
  int64_t idle_since() const { return idle_since_.load(std::memory_order_relaxed); }

  // For the acceptor: closed, waiting only for its last reference to go.
  bool closed() const { return closed_.load(std::memory_order_relaxed); }

  // The acceptor picks this connection to make room: true when it was still idle (and is
  // now no longer a candidate, so that one connection is not picked twice).
  bool TakeForEviction(int64_t idle_since) { return idle_since_.compare_exchange_strong(idle_since, 0); }

  // The server is full and `newcomer` waits: close this connection if it is still idle, with
  // no bytes of a request waiting unread, and start the newcomer in its place; otherwise (a
  // frame has begun since TakeForEviction) refuse the newcomer, so the limit is never passed.
  void EvictIfIdleFor(tcp::socket newcomer) {
    asio::post(socket_.get_executor(), [self = shared_from_this(), newcomer = std::move(newcomer)]() mutable {
      bool evicted = false;
      {
        std::lock_guard<std::mutex> lock(self->mutex_);
        boost::system::error_code ec;
        const bool tls_pending = self->ssl_ != nullptr && SSL_pending(self->ssl_) > 0;
        // Still shaking hands counts as idle: clients that never finish a handshake must not
        // hold every slot.
        if (self->phase_ == Phase::kHandshake ||
            (self->phase_ == Phase::kIdle && self->socket_.available(ec) == 0 && !ec && !tls_pending)) {
          self->shared_->counters.idle_evictions.fetch_add(1);
          self->Close();
          evicted = true;
        }
      }
      const std::shared_ptr<RpcServer::Shared>& shared = self->shared_;
      if (evicted && !shared->stopping.load()) {
        std::make_shared<Connection>(shared, std::move(newcomer))->Start();
      } else {
        shared->counters.refused.fetch_add(1);
        shared->refused_warning.Warn("refused a connection: the idle one picked to make room began a request");
        boost::system::error_code ignored;
        newcomer.close(ignored);
      }
      shared->evictions_pending.fetch_sub(1);  // after Start: the newcomer now counts itself
    });
  }

  // The sweeper saw the deadline pass: close if it still has (the phase may have moved on).
  void CloseIfPastDeadline() {
    asio::post(socket_.get_executor(), [self = shared_from_this()] {
      std::lock_guard<std::mutex> lock(self->mutex_);
      const int64_t deadline = self->deadline();
      if (deadline == 0 || Clock::now().time_since_epoch().count() < deadline) return;
      if (self->phase_ == Phase::kIdle) {
        self->shared_->counters.idle_timeouts.fetch_add(1);
      } else if (self->phase_ == Phase::kHandshake) {
        Admission timeout;
        timeout.refusal = TlsRefusal::kHandshakeTimeout;
        timeout.detail = "no TLS handshake within " + std::to_string(self->shared_->config.frame_timeout_ms) +
                         " ms (server.frame_timeout_ms)";
        return self->RefuseTls(timeout);
      } else if (self->phase_ == Phase::kReading || self->phase_ == Phase::kWriting) {
        self->shared_->counters.frame_timeouts.fetch_add(1);
        self->shared_->timeout_warning.Warn(
            "closed a connection that took over {} ms to {} a frame "
            "(server.frame_timeout_ms)",
            self->shared_->config.frame_timeout_ms, self->phase_ == Phase::kReading ? "send" : "read");
      } else {
        return;  // processing: no deadline of the client's
      }
      self->Close();
    });
  }

 private:
  enum class Phase { kHandshake, kIdle, kReading, kProcessing, kWriting, kClosed };
  // What ReadSome or WriteSome did: moved `bytes`, or would block until the socket is ready
  // for `wait`, or found the connection closed (by the peer, or an error).
  struct Io {
    size_t bytes = 0;
    tcp::socket::wait_type wait = tcp::socket::wait_read;
    bool closed = false;
  };

  void SetDeadline(int timeout_ms) {
    deadline_.store((Clock::now() + std::chrono::milliseconds(timeout_ms)).time_since_epoch().count(),
                    std::memory_order_relaxed);
  }

  // Each method below runs with mutex_ held.

  Io ReadSome(uint8_t* data, size_t size) {
    Io io;
    if (ssl_ != nullptr) {
      ERR_clear_error();
      return TlsOutcome(SSL_read(ssl_, data, static_cast<int>(std::min<size_t>(size, INT32_MAX))), io);
    }
    for (;;) {
      const ssize_t n = ::recv(socket_.native_handle(), data, size, MSG_DONTWAIT);
      if (n > 0) {
        io.bytes = static_cast<size_t>(n);
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
        io.closed = true;  // gone, or a socket error
      }
      return io;
    }
  }

  Io WriteSome(const uint8_t* data, size_t size) {
    Io io;
    io.wait = tcp::socket::wait_write;
    if (ssl_ != nullptr) {
      ERR_clear_error();
      return TlsOutcome(SSL_write(ssl_, data, static_cast<int>(std::min<size_t>(size, INT32_MAX))), io);
    }
    for (;;) {
      const ssize_t n = ::send(socket_.native_handle(), data, size, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        io.bytes = static_cast<size_t>(n);
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (!(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))) {
        io.closed = true;  // the client went away
      }
      return io;
    }
  }

  // What an SSL_read/SSL_write that returned `n` did: moved n bytes, or waits (for what
  // OpenSSL asks), or closed.
  Io TlsOutcome(int n, Io io) {
    if (n > 0) {
      io.bytes = static_cast<size_t>(n);
      return io;
    }
    const int ssl_error = SSL_get_error(ssl_, n);
    if (ssl_error == SSL_ERROR_WANT_READ) {
      io.wait = tcp::socket::wait_read;
    } else if (ssl_error == SSL_ERROR_WANT_WRITE) {
      io.wait = tcp::socket::wait_write;
    } else {
      // close_notify (ZERO_RETURN) ends the connection cleanly; anything else is fatal, after
      // which OpenSSL must not be asked to shut down.
      tls_fatal_ = ssl_error != SSL_ERROR_ZERO_RETURN;
      io.closed = true;
      ERR_clear_error();
    }
    return io;
  }

  // Calls `resume(error_code)` under no lock once the socket is ready for `wait`, or at once
  // (through the reactor) when TLS already holds decrypted bytes the socket will not signal
  // again. Only decrypted bytes count (SSL_pending): part of a record (SSL_has_pending) needs
  // the rest from the socket, and retrying at once would spin an I/O thread (a client sending
  // 9 bytes of a hello held one at 100 % until the handshake deadline).
  template <typename Resume>
  void WaitFor(tcp::socket::wait_type wait, Resume resume) {
    if (wait == tcp::socket::wait_read && ssl_ != nullptr && SSL_pending(ssl_) > 0) {
      asio::post(socket_.get_executor(),
                 [resume = std::move(resume)]() mutable { resume(boost::system::error_code()); });
      return;
    }
    socket_.async_wait(wait, std::move(resume));
  }

  // The next handshake step, now if one of io_threads places is free, else when a step ends.
  void ContinueHandshake() {
    if (!shared_->TryTakeHandshakeSlot()) {
      {
        std::lock_guard<std::mutex> lock(shared_->handshake_queue_mutex);
        shared_->handshake_queue.push_back(shared_from_this());
      }
      // Every place may have been freed between the failed take and the push.
      shared_->ResumeQueuedHandshake();
      return;
    }
    StepHandshake();
  }

 public:
  // Still shaking hands (readable without mutex_: Shared::OldestHandshake).
  bool shaking_hands() const { return shaking_hands_.load(); }

  // The server has max_handshakes in progress and this one is the oldest: close it if it is
  // still shaking hands.
  void EvictFromHandshake() {
    asio::post(socket_.get_executor(), [self = shared_from_this()] {
      std::lock_guard<std::mutex> lock(self->mutex_);
      if (self->phase_ != Phase::kHandshake) return;
      self->shared_->counters.handshakes_evicted.fetch_add(1);
      self->shared_->handshakes_warning.Warn(
          "closed a connection from {} still in its TLS handshake: {} handshakes were in progress "
          "(server.max_handshakes)",
          self->address_, self->shared_->config.max_handshakes);
      self->Close();
    });
  }

  // ResumeQueuedHandshake took a place for this connection's queued step: run it, unless the
  // connection has moved on (closed) meanwhile.
  void ResumeHandshake() {
    asio::post(socket_.get_executor(), [self = shared_from_this()] {
      std::lock_guard<std::mutex> lock(self->mutex_);
      if (self->phase_ != Phase::kHandshake) {
        self->shared_->free_handshake_slots.fetch_add(1);
        self->shared_->ResumeQueuedHandshake();
        return;
      }
      self->StepHandshake();
    });
  }

 private:
  // One handshake step, holding a place; gives it back before admitting the connection (which
  // may run its first request at once).
  void StepHandshake() {
    if (shared_->handshake_step_hook) shared_->handshake_step_hook();
    ERR_clear_error();
    const uint64_t read_before = BIO_number_read(SSL_get_rbio(ssl_));
    const uint64_t written_before = BIO_number_written(SSL_get_wbio(ssl_));
    const int done = SSL_do_handshake(ssl_);
    std::optional<Admission> admission;
    if (done == 1) admission = tls_->Admit(ssl_, TlsPort::kThrift, address_);  // verifies: costly too
    shared_->free_handshake_slots.fetch_add(1);
    shared_->ResumeQueuedHandshake();
    if (handshake_steps_++ > 0 && BIO_number_read(SSL_get_rbio(ssl_)) == read_before &&
        BIO_number_written(SSL_get_wbio(ssl_)) == written_before && SSL_get_error(ssl_, done) == SSL_ERROR_WANT_READ) {
      // A step that did nothing: once is a wake-up OpenSSL had no use for; more is polling.
      const uint64_t idle = ++idle_handshake_steps_;
      uint64_t most = shared_->counters.most_idle_handshake_steps.load(std::memory_order_relaxed);
      while (idle > most && !shared_->counters.most_idle_handshake_steps.compare_exchange_weak(most, idle)) {
      }
    }
    if (admission) {
      LeaveHandshake();
      if (!admission->admitted) return RefuseTls(*admission);
      return Admitted(admission->caller);
    }
    const int error = SSL_get_error(ssl_, done);
    if (error != SSL_ERROR_WANT_READ && error != SSL_ERROR_WANT_WRITE) {
      tls_fatal_ = true;
      const Admission refusal = tls_->Refuse(ssl_, ERR_peek_error());
      ERR_clear_error();
      return RefuseTls(refusal);
    }
    WaitFor(error == SSL_ERROR_WANT_READ ? tcp::socket::wait_read : tcp::socket::wait_write,
            [self = shared_from_this()](boost::system::error_code ec) {
              std::lock_guard<std::mutex> lock(self->mutex_);
              if (ec || self->phase_ != Phase::kHandshake) {
                self->Close();
                return;
              }
              self->ContinueHandshake();
            });
  }

  void RefuseTls(const Admission& refusal) {
    // Told before it is counted: whoever saw the count sees the record queued.
    if (shared_->on_refused) shared_->on_refused(TlsPort::kThrift, address_, refusal.refusal, refusal.detail);
    shared_->tls_refusals.Add(refusal.refusal);
    shared_->tls_warning.Warn("refused a TLS client from {}: {} ({})", address_, TlsRefusalName(refusal.refusal),
                              refusal.detail);
    Close();
  }

  // The caller is known: its requests go to a handler made for it.
  void Admitted(const Caller& caller) {
    if (!BindCaller(caller)) {
      Close();
      return;
    }
    ReadHeader();
  }

  // Requests from now on go to a handler made for `caller`; false when none could be made.
  bool BindCaller(const Caller& caller) {
    std::shared_ptr<rpc::TxScoreCobSvIf> handler = shared_->handlers(caller);
    if (handler == nullptr) return false;
    caller_ = caller;
    processor_ = std::make_shared<rpc::TxScoreAsyncProcessor>(std::move(handler));
    return true;
  }

  // A reload replaced the certificates or lists since this connection was admitted: verifies its
  // certificate again and admits it under the new ones, so that a removed CA, a revoked
  // certificate or an identity taken off a list (or off operators) loses its rights on open
  // connections too. False when it is no longer allowed. Runs in kProcessing,
  // when nothing else touches the connection.
  bool ReadmitIfTlsChanged() {
    const uint64_t generation = shared_->tls_generation.load();
    if (ssl_ == nullptr || generation == tls_generation_) return true;
    tls_generation_ = generation;
    const std::shared_ptr<const TlsServerContext> current = shared_->CurrentTls();
    const Admission admission = current->Readmit(ssl_, TlsPort::kThrift, address_);
    if (!admission.admitted) {
      if (shared_->on_refused) {
        shared_->on_refused(TlsPort::kThrift, address_, admission.refusal,
                            "an open connection closed after a reload: " + admission.detail);
      }
      shared_->tls_refusals.Add(admission.refusal);
      shared_->tls_warning.Warn("closed a connection from {} after a reload: {} ({})", address_,
                                TlsRefusalName(admission.refusal), admission.detail);
      return false;
    }
    if (admission.caller == caller_) {
      return true;
    }
    return BindCaller(admission.caller);
  }

  void ReadHeader() {
    header_bytes_ = 0;
    // Stopping: close once nothing of a request has arrived (see OnServerStopping).
    if ((shared_->stopping.load() && !RequestArriving()) || shared_->closing.load()) {
      Close();
      return;
    }
    phase_ = Phase::kIdle;
    idle_since_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
    SetDeadline(shared_->config.idle_timeout_ms);
    // Waits first, even when bytes are there: ReadHeader may run inside Process, which must not
    // dispatch the next request itself.
    WaitForHeader(tcp::socket::wait_read);
  }

  void WaitForHeader(tcp::socket::wait_type wait) {
    WaitFor(wait, [self = shared_from_this()](boost::system::error_code ec) {
      std::unique_lock<std::mutex> lock(self->mutex_);
      if (ec || self->phase_ == Phase::kClosed) return static_cast<void>(self->Close());
      if (!self->ContinueHeader()) return;
      lock.unlock();
      Dispatch(self);
    });
  }

  // The Continue* functions return true when a whole frame is in frame_ (the phase is then
  // kProcessing): the caller releases the lock and dispatches it.
  bool ContinueHeader() {
    while (header_bytes_ < sizeof header_) {
      const Io io = ReadSome(header_ + header_bytes_, sizeof header_ - header_bytes_);
      if (io.closed) return Close();
      if (io.bytes == 0) {
        WaitForHeader(io.wait);
        return false;
      }
      if (header_bytes_ == 0) {
        // The frame's first byte: from now on the whole frame must arrive within the deadline.
        phase_ = Phase::kReading;
        idle_since_.store(0, std::memory_order_relaxed);
        SetDeadline(shared_->config.frame_timeout_ms);
      }
      header_bytes_ += io.bytes;
    }
    const int64_t size =
        (int64_t{header_[0]} << 24) | (int64_t{header_[1]} << 16) | (int64_t{header_[2]} << 8) | int64_t{header_[3]};
    if (size <= 0 || size > shared_->max_frame_bytes) {
      shared_->counters.protocol_errors.fetch_add(1);
      // The header is a signed 32-bit length: show it as the client meant it (-1, not 4294967295).
      shared_->protocol_warning.Warn("closed a connection that announced a frame of {} bytes (limit {})",
                                     static_cast<int32_t>(static_cast<uint32_t>(size)), shared_->max_frame_bytes);
      return Close();
    }
    frame_size_ = static_cast<size_t>(size);
    frame_bytes_ = 0;
    frame_.resize(std::min(frame_.size(), frame_size_));  // a smaller frame needs no more
    return ContinueBody();
  }

  bool ContinueBody() {
    for (;;) {
      if (frame_bytes_ == frame_.size()) GrowFrame();
      // The body has usually arrived with its header: read it now rather than through the
      // reactor, whose completion would be queued (and could wake another thread).
      const Io io = ReadSome(frame_.data() + frame_bytes_, frame_.size() - frame_bytes_);
      if (io.closed) return Close();
      if (io.bytes == 0) {
        WaitFor(io.wait, [self = shared_from_this()](boost::system::error_code ec) {
          std::unique_lock<std::mutex> lock(self->mutex_);
          if (ec || self->phase_ == Phase::kClosed) return static_cast<void>(self->Close());
          if (!self->ContinueBody()) return;
          lock.unlock();
          Dispatch(self);
        });
        return false;
      }
      frame_bytes_ += io.bytes;
      if (frame_bytes_ < frame_size_) continue;
      phase_ = Phase::kProcessing;
      deadline_.store(0, std::memory_order_relaxed);  // the server's time is not the client's
      return true;
    }
  }

 public:
  // Runs the request in frame_, then answers it (Answer): at once, or later from another thread
  // when the method answers later (a REVIEW waiting for the LLM: the request is parked, and no
  // thread waits for it). While the phase is kProcessing nothing else touches frame_ or the
  // socket, so the request runs without the lock.
  void Process() {
    const uint64_t request = ++requests_run_;
    if (!ReadmitIfTlsChanged()) return Answer(request, {}, false);
    try {
      shared_->frames.Process(*processor_, frame_.data(), frame_size_,
                              [self = shared_from_this(), request](std::vector<uint8_t> reply, bool keep_open) {
                                if (!keep_open) self->CountBadMessage("its arguments could not be read");
                                self->Answer(request, std::move(reply), keep_open);
                              });
    } catch (const std::exception& e) {
      // Over a limit, malformed or truncated: Thrift threw while reading the message.
      CountBadMessage(e.what());
      return Answer(request, {}, false);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (answered_through_ >= request) return;
    // Parked: the frame has been read, and the request may carry a card number.
    parked_ = true;
    shared_->parked.fetch_add(1);
    WipeFrame();
  }

  // Answers request number `request` (of this connection's Process calls) with `reply`, or
  // closes the connection.
  void Answer(uint64_t request, std::vector<uint8_t> reply, bool keep_open) {
    std::lock_guard<std::mutex> lock(mutex_);
    answered_through_ = request;
    if (parked_) {
      parked_ = false;
      if (shared_->parked.fetch_sub(1) == 1) {
        std::lock_guard<std::mutex> stop_lock(shared_->connections_mutex);
        shared_->none_parked.notify_all();
      }
    } else {
      WipeFrame();  // the request may carry a card number: it leaves no copy in our buffers
    }
    try {
      if (!keep_open || reply.empty() || phase_ == Phase::kClosed) {
        Close();
        return;
      }
      SendReply(std::move(reply));
    } catch (const std::exception& e) {
      // Out of memory or a socket error thrown by Asio: this connection ends, the server goes on.
      Log("thrift").error("closing a connection after an error: {}", e.what());
      Close();
    }
  }

  void CountBadMessage(const std::string& why) {
    shared_->counters.protocol_errors.fetch_add(1);
    shared_->protocol_warning.Warn("closed a connection after a bad message: {}", why);
  }

  // Answers the frame in frame_ "overloaded" without running it.
  void Shed() {
    std::lock_guard<std::mutex> lock(mutex_);
    shared_->counters.shed.fetch_add(1);
    shared_->shed_warning.Warn(
        "{} requests wait for a worker (server.max_queued_requests); answering "
        "'overloaded'",
        shared_->config.max_queued_requests);
    std::vector<uint8_t> reply = OverloadedReply();
    WipeFrame();
    if (reply.empty()) {
      Close();
      return;
    }
    SendReply(std::move(reply));
  }

 private:
  // A TApplicationException reply to the frame in frame_, or nothing when it has no readable
  // message header (then the connection is closed).
  std::vector<uint8_t> OverloadedReply() {
    std::vector<uint8_t> reply =
        shared_->frames.ErrorReply(frame_.data(), frame_size_,
                                   "txscore is overloaded: " + std::to_string(shared_->config.max_queued_requests) +
                                       " requests are already waiting; retry shortly or on another replica");
    if (reply.empty()) shared_->counters.protocol_errors.fetch_add(1);
    return reply;
  }

  // Writes what the socket takes at once (a small reply: all of it), then reads the next
  // frame; the rest, if any, is written asynchronously under the frame deadline.
  void SendReply(std::vector<uint8_t> reply) {
    reply_ = std::move(reply);
    reply_sent_ = 0;
    ContinueReply();
  }

  // Sends what the socket takes now; the rest when it becomes writable, each time under the
  // lock (a composed async_write would touch the socket from a handler without the lock,
  // racing a Close() from the sweeper).
  void ContinueReply() {
    tcp::socket::wait_type wait = tcp::socket::wait_write;
    while (reply_sent_ < reply_.size()) {
      const Io io = WriteSome(reply_.data() + reply_sent_, reply_.size() - reply_sent_);
      if (io.closed) {
        Close();  // the client went away
        return;
      }
      if (io.bytes == 0) {
        wait = io.wait;
        break;
      }
      reply_sent_ += io.bytes;
    }
    if (reply_sent_ == reply_.size()) {
      std::vector<uint8_t>().swap(reply_);
      return ReadHeader();
    }
    if (phase_ != Phase::kWriting) {
      phase_ = Phase::kWriting;
      SetDeadline(shared_->config.frame_timeout_ms);  // the whole reply must be taken within this
    }
    WaitFor(wait, [self = shared_from_this()](boost::system::error_code ec) {
      std::lock_guard<std::mutex> lock(self->mutex_);
      if (ec || self->phase_ == Phase::kClosed) {
        self->Close();
        return;
      }
      self->ContinueReply();
    });
  }

  // Returns false, for the Continue* functions' "no frame to dispatch".
  // No longer counted among the handshakes in progress (idempotent).
  void LeaveHandshake() {
    if (!shaking_hands_.exchange(false)) return;
    shared_->handshakes_in_progress.fetch_sub(1);
  }

  bool Close() {
    if (phase_ == Phase::kClosed) return false;
    if (phase_ == Phase::kHandshake) {
      // Out of the queue for a handshake step, if it waits there (the caller holds a reference).
      std::lock_guard<std::mutex> lock(shared_->handshake_queue_mutex);
      std::deque<std::shared_ptr<Connection>>& queue = shared_->handshake_queue;
      queue.erase(std::remove_if(queue.begin(), queue.end(), [this](const auto& c) { return c.get() == this; }),
                  queue.end());
    }
    LeaveHandshake();
    phase_ = Phase::kClosed;
    closed_.store(true, std::memory_order_relaxed);
    deadline_.store(0, std::memory_order_relaxed);
    idle_since_.store(0, std::memory_order_relaxed);
    if (ssl_ != nullptr) {
      // A close_notify when the session is healthy (best effort: the socket is non-blocking);
      // after a fatal error OpenSSL must not be asked.
      if (!tls_fatal_ && SSL_is_init_finished(ssl_) == 1) {
        ERR_clear_error();
        SSL_shutdown(ssl_);
      }
      ERR_clear_error();
      SSL_free(ssl_);
      ssl_ = nullptr;
    }
    boost::system::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    if (frame_bytes_ > 0) WipeFrame();
    return false;
  }

  // Makes room for more of the frame: the buffer starts small and doubles as bytes arrive (up
  // to the announced size), so announcing a large frame reserves nothing. The old block is
  // wiped before it is freed: it may hold a card number.
  void GrowFrame() {
    const size_t size = std::min(frame_size_, std::max(kFirstReadBytes, 2 * frame_.size()));
    std::vector<uint8_t> larger(size);
    std::copy(frame_.begin(), frame_.begin() + static_cast<std::ptrdiff_t>(frame_bytes_), larger.begin());
    if (!frame_.empty()) WipeBytes(frame_.data(), frame_.size());
    frame_.swap(larger);
  }

  // Wipes the buffer (it may hold a card number), and frees it when it grew large, so an idle
  // connection keeps at most kKeptBufferBytes.
  void WipeFrame() {
    if (!frame_.empty()) WipeBytes(frame_.data(), frame_.size());
    if (frame_.size() > kKeptBufferBytes) std::vector<uint8_t>().swap(frame_);
    frame_bytes_ = 0;
  }

  std::shared_ptr<RpcServer::Shared> shared_;
  std::mutex mutex_;
  tcp::socket socket_;
  std::string address_;                          // the peer's IP:port, for logs and the caller
  std::shared_ptr<const TlsServerContext> tls_;  // the certificates this connection was accepted with
  SSL* ssl_ = nullptr;                           // null on a plaintext server, and once closed
  std::atomic<bool> shaking_hands_{false};       // counted in Shared::handshakes_in_progress
  uint64_t handshake_steps_ = 0;                 // StepHandshake calls so far
  uint64_t idle_handshake_steps_ = 0;            // of those, steps that read and wrote nothing (RpcServerStats)
  uint64_t tls_generation_ = 0;                  // Shared::tls_generation of tls_ (or when last admitted)
  Caller caller_;                                // who this connection's requests come from
  bool tls_fatal_ = false;                       // OpenSSL reported a fatal error: no close_notify
  std::shared_ptr<rpc::TxScoreAsyncProcessor> processor_;  // set once the caller is admitted
  uint64_t requests_run_ = 0;                              // Process calls so far (only Process touches it)
  uint64_t answered_through_ = 0;                          // the last request answered; under mutex_
  bool parked_ = false;                 // the request runs on without a thread (Shared::parked); under mutex_
  std::atomic<int64_t> deadline_{0};    // steady-clock ticks; 0: no deadline (processing, closed)
  std::atomic<int64_t> idle_since_{0};  // steady-clock ticks; 0: not idle
  std::atomic<bool> closed_{false};     // phase_ is kClosed (readable without mutex_)
  Phase phase_ = Phase::kIdle;
  uint8_t header_[4] = {0, 0, 0, 0};
  size_t header_bytes_ = 0;
  std::vector<uint8_t> frame_;
  size_t frame_size_ = 0;
  size_t frame_bytes_ = 0;
  std::vector<uint8_t> reply_;  // the reply being sent, when the socket did not take it at once
  size_t reply_sent_ = 0;
};

void RpcServer::Shared::AddHandshake(const std::shared_ptr<Connection>& connection) {
  std::lock_guard<std::mutex> lock(handshaking_mutex);
  while (!handshaking.empty()) {
    std::shared_ptr<Connection> front = handshaking.front().lock();
    if (front != nullptr && front->shaking_hands()) break;
    handshaking.pop_front();
  }
  handshaking.push_back(connection);
}

std::shared_ptr<Connection> RpcServer::Shared::OldestHandshake() {
  std::lock_guard<std::mutex> lock(handshaking_mutex);
  while (!handshaking.empty()) {
    std::shared_ptr<Connection> front = handshaking.front().lock();
    handshaking.pop_front();
    if (front != nullptr && front->shaking_hands()) return front;
  }
  return nullptr;
}

void RpcServer::Shared::ResumeQueuedHandshake() {
  for (;;) {
    std::shared_ptr<Connection> next;
    {
      std::lock_guard<std::mutex> lock(handshake_queue_mutex);
      if (handshake_queue.empty() || !TryTakeHandshakeSlot()) return;
      next = std::move(handshake_queue.front());
      handshake_queue.pop_front();
    }
    return next->ResumeHandshake();
  }
}

namespace {

// Runs queued requests while this thread holds a slot, then gives the slot back; takes it
// again if a request was queued meanwhile (else it could wait with every slot free). A thread
// whose request waited for a slow stage may come back to find every slot lent (free_slots
// below 0): it runs no queued request then.
void DrainPendingAndFreeSlot(RpcServer::Shared& shared) {
  for (;;) {
    while (shared.free_slots.load() >= 0) {
      std::shared_ptr<Connection> next = shared.PopPending();
      if (next == nullptr) break;
      next->Process();
    }
    shared.free_slots.fetch_add(1);
    {
      std::lock_guard<std::mutex> lock(shared.pending_mutex);
      if (shared.pending.empty()) return;
    }
    if (!shared.TryTakeSlot()) return;  // another thread took the slot and will drain
  }
}

}  // namespace

BlockingWaitObserver::Answer SlotLender::Begin() {
  if (shared_->config.waiting_threads == 0) return Answer::kNotCounted;  // lending is off: wait keeping the slot
  int waiting = shared_->waiting.load();
  do {
    if (waiting >= shared_->config.waiting_threads) {
      // Every waiting thread is taken: waiting here would hold a worker from requests that
      // need no slow stage, so this one goes on without it.
      shared_->counters.waits_refused.fetch_add(1);
      return Answer::kRefused;
    }
  } while (!shared_->waiting.compare_exchange_weak(waiting, waiting + 1));
  shared_->free_slots.fetch_add(1);
  // A queued request may take the slot now, on another thread (there is one: see waiting).
  asio::post(shared_->io, [shared = shared_] {
    if (shared->TryTakeSlot()) DrainPendingAndFreeSlot(*shared);
  });
  return Answer::kCounted;
}

void SlotLender::End() {
  shared_->free_slots.fetch_sub(1);  // the request runs on, over the cap if every slot was lent
  shared_->waiting.fetch_sub(1);
}

// Called by the thread that completed the frame, without the connection's lock.
void Dispatch(const std::shared_ptr<Connection>& connection) {
  RpcServer::Shared& shared = *connection->shared();
  if (shared.TryTakeSlot()) {
    connection->Process();
    return DrainPendingAndFreeSlot(shared);
  }
  bool queued = false;
  {
    std::lock_guard<std::mutex> lock(shared.pending_mutex);
    if (shared.pending.size() < static_cast<size_t>(shared.config.max_queued_requests)) {
      shared.pending.push_back(connection);
      queued = true;
    }
  }
  if (!queued) return connection->Shed();
  // Every slot may have been freed between the failed take and the push: if so, drain.
  if (shared.TryTakeSlot()) DrainPendingAndFreeSlot(shared);
}

namespace {

// Every sweep period, closes the connections whose phase deadline has passed. One timer for
// the server instead of timer operations on every request; a deadline is enforced within one
// period of passing.
void Sweep(const std::weak_ptr<RpcServer::Shared>& weak) {
  std::shared_ptr<RpcServer::Shared> shared = weak.lock();
  if (!shared || shared->stopped_sweeping.load()) return;
  const int64_t now = Clock::now().time_since_epoch().count();
  std::vector<std::shared_ptr<Connection>> expired;
  {
    std::lock_guard<std::mutex> lock(shared->connections_mutex);
    for (auto& [raw, connection] : shared->connections) {
      const int64_t deadline = raw->deadline();
      if (deadline != 0 && deadline <= now) {
        if (auto alive = connection.lock()) expired.push_back(std::move(alive));
      }
    }
  }
  for (auto& connection : expired) connection->CloseIfPastDeadline();
  shared->sweeper.expires_after(shared->sweep_period);
  shared->sweeper.async_wait([weak](boost::system::error_code ec) {
    if (!ec) Sweep(weak);
  });
}

}  // namespace

namespace {

void Accept(const std::shared_ptr<RpcServer::Shared>& shared);

void RetryAcceptSoon(const std::shared_ptr<RpcServer::Shared>& shared) {
  auto timer = std::make_shared<asio::steady_timer>(shared->acceptor.get_executor(), std::chrono::milliseconds(100));
  timer->async_wait([shared, timer](boost::system::error_code ec) {
    if (!ec) Accept(shared);
  });
}

void Accept(const std::shared_ptr<RpcServer::Shared>& shared) {
  shared->acceptor.async_accept(shared->io.get_executor(), [shared](boost::system::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !shared->acceptor.is_open()) return;  // stopping
    if (ec) {
      // Out of descriptors (EMFILE) or a transient network error: pause instead of spinning.
      shared->refused_warning.Warn("accept failed: {}; retrying in 100 ms", ec.message());
      return RetryAcceptSoon(shared);
    }
    shared->counters.accepted.fetch_add(1);
    size_t open = 0;
    std::weak_ptr<Connection> longest_idle_weak;
    int64_t oldest = 0;
    {
      // No shared_ptr to a connection may be released under this lock: the last one runs
      // ~Connection, which takes it too. Only weak pointers are copied here.
      std::lock_guard<std::mutex> lock(shared->connections_mutex);
      // Closed connections still in the map are on their way out; newcomers waiting for an
      // eviction hold a place already.
      for (const auto& [raw, weak] : shared->connections) open += raw->closed() ? 0 : 1;
      open += static_cast<size_t>(shared->evictions_pending.load());
      if (open >= static_cast<size_t>(shared->max_connections)) {
        // Full: the connection idle the longest makes room, so that idle connections (a
        // caller's spare pool, or someone holding sockets open) cannot lock out a client
        // with a request to send. Connections mid-frame or mid-request are never evicted.
        for (const auto& [raw, weak] : shared->connections) {
          const int64_t since = raw->idle_since();
          if (since == 0 || (oldest != 0 && since >= oldest)) continue;
          longest_idle_weak = weak;
          oldest = since;
        }
      }
    }
    std::shared_ptr<Connection> longest_idle = longest_idle_weak.lock();
    if (longest_idle != nullptr && !longest_idle->TakeForEviction(oldest)) longest_idle = nullptr;
    if (longest_idle != nullptr && !shared->stopping.load()) {
      // The pick is closed, or the new client refused, on the pick's own thread.
      shared->evictions_pending.fetch_add(1);
      longest_idle->EvictIfIdleFor(std::move(socket));
    } else if (shared->stopping.load() || open >= static_cast<size_t>(shared->max_connections)) {
      shared->counters.refused.fetch_add(1);
      shared->refused_warning.Warn("refused a connection: {} are open (server.max_connections)", open);
      boost::system::error_code ignored;
      socket.close(ignored);
    } else {
      std::make_shared<Connection>(shared, std::move(socket))->Start();
    }
    Accept(shared);
  });
}

}  // namespace

namespace {

// Where a parked request goes on (Shared::continuations): the server's threads, and its timers
// for deadlines. Holds the server weakly: work handed to a server that is gone is dropped.
// Work handed over after the server's threads stopped (a request that parked while Stop gave
// up waiting for it) is dropped, never run: what it would write to may be closed.
class ServerContinuations : public ContinuationHost {
 public:
  explicit ServerContinuations(const std::shared_ptr<RpcServer::Shared>& shared) : shared_(shared) {}
  void Post(std::function<void()> work) override {
    std::shared_ptr<RpcServer::Shared> shared = shared_.lock();
    if (shared == nullptr || shared->continuations_stopped.load()) return Drop(std::move(work));
    asio::post(shared->io, [weak = shared_, work = std::move(work)]() mutable { RunUnlessStopped(weak, work); });
  }
  void PostAt(std::chrono::steady_clock::time_point when, std::function<void()> work) override {
    std::shared_ptr<RpcServer::Shared> shared = shared_.lock();
    if (shared == nullptr || shared->continuations_stopped.load()) return Drop(std::move(work));
    auto timer = std::make_shared<asio::steady_timer>(shared->io, when);
    timer->async_wait([timer, weak = shared_, work = std::move(work)](const boost::system::error_code&) mutable {
      RunUnlessStopped(weak, work);
    });
  }

 private:
  static void RunUnlessStopped(const std::weak_ptr<RpcServer::Shared>& weak, std::function<void()>& work) {
    std::shared_ptr<RpcServer::Shared> shared = weak.lock();
    if (shared == nullptr || shared->continuations_stopped.load()) return Drop(std::move(work));
    work();
  }
  // Destroyed on a thread of its own: the last hold on a request may be the last on its
  // pipeline, whose LLM batcher must not be destroyed by its own thread (the caller may be it).
  static void Drop(std::function<void()> work) {
    std::thread([dropped = std::move(work)]() mutable { dropped = nullptr; }).detach();
  }
  std::weak_ptr<RpcServer::Shared> shared_;
};

}  // namespace

Result<std::unique_ptr<RpcServer>> RpcServer::Create(const RpcServerConfig& config,
                                                     std::shared_ptr<rpc::TxScoreIf> handler) {
  auto answered_inline = std::make_shared<AnsweredInline>(std::move(handler));
  return Create(
      config, [answered_inline](const Caller&) -> std::shared_ptr<rpc::TxScoreCobSvIf> { return answered_inline; },
      nullptr);
}

Result<std::unique_ptr<RpcServer>> RpcServer::Create(const RpcServerConfig& config, RpcHandlerFactory handlers,
                                                     std::shared_ptr<const TlsServerContext> tls,
                                                     TlsRefusalObserver on_refused) {
  // Thrift reports trouble through GlobalOutput (stderr by default); send it to our log.
  apache::thrift::GlobalOutput.setOutputFunction([](const char* message) { Log("thrift").warn("{}", message); });
  auto shared = std::make_shared<Shared>(config, std::move(handlers), std::move(tls));
  shared->on_refused = std::move(on_refused);
  shared->continuations = std::make_shared<ServerContinuations>(shared);
  shared->max_connections = FitConnectionsToDescriptorLimit(config.max_connections);
  shared->max_frame_bytes = std::min(config.limits.max_frame_bytes, config.limits.max_message_bytes);
  // A deadline is enforced within a quarter of the shorter timeout (10 ms to 1 s) of passing.
  shared->sweep_period =
      std::chrono::milliseconds(std::clamp(std::min(config.frame_timeout_ms, config.idle_timeout_ms) / 4, 10, 1000));
  const std::string where = config.host + ":" + std::to_string(config.port);
  try {
    const tcp::endpoint endpoint(asio::ip::make_address(config.host), static_cast<unsigned short>(config.port));
    shared->acceptor.open(endpoint.protocol());
    shared->acceptor.set_option(tcp::acceptor::reuse_address(true));
    shared->acceptor.bind(endpoint);
    shared->acceptor.listen(1024);
  } catch (const boost::system::system_error& e) {
    return Error{ErrorCode::kUnavailable, "cannot listen on " + where + ": " + e.what(), {}};
  }
  std::unique_ptr<RpcServer> server(new RpcServer());
  server->port_ = shared->acceptor.local_endpoint().port();
  server->shared_ = std::move(shared);
  Accept(server->shared_);
  Sweep(server->shared_);
  return server;
}

RpcServer::~RpcServer() {
  Stop();
  // Connections' handlers hold `shared_`; drop whatever Serve() never ran.
  shared_->io.restart();
  shared_->io.poll();
}

void RpcServer::Serve() {
  std::vector<std::thread> extra;
  const auto run = [this] {
    BlockingWaitObserver* const previous = SetThreadBlockingWaitObserver(&shared_->slot_lender);
    std::shared_ptr<ContinuationHost> previous_host = SetThreadContinuationHost(shared_->continuations);
    for (;;) {
      try {
        shared_->io.run();
        SetThreadBlockingWaitObserver(previous);
        SetThreadContinuationHost(std::move(previous_host));
        return;
      } catch (const std::exception& e) {
        Log("thrift").error("I/O thread: {}", e.what());  // a handler threw: keep serving
      }
    }
  };
  // Threads that run requests are I/O threads too (see Shared::free_slots). `serving` turns
  // true once they all exist, so a caller waiting for it sees the final thread count.
  const int threads = shared_->config.io_threads + shared_->config.workers + shared_->config.waiting_threads;
  for (int i = 1; i < threads; ++i) extra.emplace_back(run);
  shared_->serving = true;
  run();
  for (std::thread& t : extra) t.join();
  shared_->serving = false;
}

void RpcServer::Stop() {
  if (shared_->stopping.exchange(true)) return;
  // Once Stop() returns, nothing listens: a new client's connect fails at once.
  if (shared_->serving.load()) {
    std::promise<void> closed;
    asio::post(shared_->acceptor.get_executor(), [shared = shared_, &closed] {
      boost::system::error_code ignored;
      shared->acceptor.close(ignored);
      closed.set_value();
    });
    closed.get_future().wait();
  } else {
    boost::system::error_code ignored;
    shared_->acceptor.close(ignored);  // no I/O thread runs: nothing else touches the acceptor
  }
  std::vector<std::shared_ptr<Connection>> open;
  {
    std::lock_guard<std::mutex> lock(shared_->connections_mutex);
    for (auto& [raw, weak] : shared_->connections) {
      if (auto connection = weak.lock()) open.push_back(std::move(connection));
    }
  }
  for (auto& connection : open) connection->OnServerStopping();
  open.clear();
  {
    std::unique_lock<std::mutex> lock(shared_->connections_mutex);
    const auto drain_timeout = std::chrono::milliseconds(shared_->config.drain_timeout_ms);
    if (!shared_->connections_closed.wait_for(lock, drain_timeout, [this] { return shared_->connections.empty(); })) {
      Log("thrift").warn(
          "{} connection(s) still open {} ms after stop was asked (server.drain_timeout_ms); "
          "reading no more of their requests",
          shared_->connections.size(), shared_->config.drain_timeout_ms);
    }
    // Parked requests are answered first: their deadlines bound the wait (a REVIEW's LLM
    // stage budget), and what they write must still be open. A request still running on a
    // thread is waited for by Serve, which joins its thread.
    shared_->closing = true;
    if (shared_->parked.load() > 0) {
      Log("thrift").info("stopping: waiting for {} parked request(s) to be answered", shared_->parked.load());
    }
    shared_->none_parked.wait(lock, [this] { return shared_->parked.load() == 0; });
  }
  shared_->continuations_stopped = true;
  shared_->stopped_sweeping = true;
  shared_->work.reset();
  shared_->io.stop();
}

bool RpcServer::serving() const { return shared_->serving.load(); }

RpcServerStats RpcServer::stats() const {
  RpcServerStats s;
  {
    std::lock_guard<std::mutex> lock(shared_->connections_mutex);
    s.connections_open = shared_->connections.size();
    for (const auto& [raw, weak] : shared_->connections) s.connections_idle += raw->idle_since() != 0 ? 1 : 0;
  }
  s.connections_accepted = shared_->counters.accepted.load();
  s.connections_refused = shared_->counters.refused.load();
  s.idle_evictions = shared_->counters.idle_evictions.load();
  s.frame_timeouts = shared_->counters.frame_timeouts.load();
  s.idle_timeouts = shared_->counters.idle_timeouts.load();
  s.requests_shed = shared_->counters.shed.load();
  s.requests_waiting = static_cast<uint64_t>(shared_->waiting.load() + shared_->parked.load());
  s.handshakes_in_progress = static_cast<uint64_t>(shared_->handshakes_in_progress.load());
  s.handshakes_evicted = shared_->counters.handshakes_evicted.load();
  s.waits_refused = shared_->counters.waits_refused.load();
  {
    std::lock_guard<std::mutex> lock(shared_->pending_mutex);
    s.requests_queued = shared_->pending.size();
  }
  s.protocol_errors = shared_->counters.protocol_errors.load();
  s.tls_most_idle_handshake_steps = shared_->counters.most_idle_handshake_steps.load();
  for (size_t i = 0; i < kTlsRefusalCount; ++i)
    s.tls_refusals[i] = shared_->tls_refusals.Get(static_cast<TlsRefusal>(i));
  return s;
}

void RpcServer::SetTls(std::shared_ptr<const TlsServerContext> tls) {
  if (!shared_->tls_enabled || tls == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(shared_->tls_mutex);
    shared_->tls.swap(tls);  // the old one is freed when its last connection closes
  }
  shared_->tls_generation.fetch_add(1);
}

bool RpcServer::uses_tls() const { return shared_->tls_enabled; }

void RpcServer::SetHandshakeStepHook(std::function<void()> hook) { shared_->handshake_step_hook = std::move(hook); }

}  // namespace txscore::service
