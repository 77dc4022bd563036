// The Thrift server: binary protocol, framed transport, event-driven.
//
// A connection costs a file descriptor and a few hundred bytes, never a thread. A fixed set
// of io_threads + workers threads runs a Boost.Asio reactor: it accepts connections and reads
// frames without blocking. The thread that completes a frame runs the request and writes the
// reply itself (no hand-off between threads), but only while fewer than `workers` requests run,
// so io_threads threads are always left to accept, read and shed. Idle and slow clients hold
// no thread, and:
//   - at most `max_connections` are open; one more is accepted and closed at once;
//   - a frame must arrive whole within `frame_timeout_ms` of its first byte (a client that
//     trickles bytes is cut off), and a reply must be taken within the same time;
//   - a connection silent for `idle_timeout_ms` between frames is closed;
//   - at most `max_queued_requests` complete frames wait for a free slot; the next one is
//     answered at once with a Thrift TApplicationException (INTERNAL_ERROR) whose message
//     starts "txscore is overloaded", and the connection stays usable.
//   - a request whose method answers later (score() on a REVIEW waiting for the local LLM's
//     findings: service/thrift_async.h) is parked: its thread goes back to the pool when the
//     method returns, and no thread waits for it; the answer continues it on a server thread
//     (the server is the thread's ContinuationHost, common/blocking_wait.h), over the `workers`
//     cap until it is done, and its reply is written then. Parked requests are bounded by the
//     connections (one request at a time each) and their deadlines (the LLM stage's budget).
//   - a request whose slow stage can only wait the blocking way (a remote LLM, a scoreBatch
//     item) gives its slot back while it waits, on one of `waiting_threads` more threads, so
//     requests that need no LLM keep running; when it goes on, it runs over the `workers` cap
//     until it is done. With all of them waiting, the next such request's slow stage is skipped
//     (it is answered without findings, counted in waits_refused) rather than hold a worker.
// TLS (a TlsServerContext given to Create): at most `max_handshakes` connections shake hands at
// once (one more closes the oldest still shaking hands), their handshake steps (the costly key exchange and
// signature) run on at most io_threads threads at once, so they cannot take the threads that
// run admitted connections' requests; the handshake must be done within frame_timeout_ms
// of the connection's accept, the client's certificate must name an identity the Thrift port
// allows (service/tls.h), and the same framed binary protocol runs inside, so Thrift's own
// TSSLSocket clients connect. Refused clients are closed and counted by reason. OpenSSL reads
// and writes the non-blocking socket directly: the reactor only waits for readiness, as it does
// for plaintext.
// Frames over the message or frame limit, and messages over the string, container or nesting
// limits, close the connection. Deadlines are checked by one sweeper every quarter of the
// shorter timeout (10 ms to 1 s), so a deadline is enforced within that of passing. Thread
// count: io_threads + workers + waiting_threads, fixed at Create().
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "service/settings.h"
#include "service/tls.h"

namespace txscore::rpc {
class TxScoreIf;
class TxScoreCobSvIf;
class TxScoreAsyncProcessor;
}  // namespace txscore::rpc

namespace txscore::service {

// How the server reads one request frame: Thrift's binary protocol (strict) under the
// `server.limits`, into a processor. The server's one decoding path, and the one
// tests/fuzz/thrift_request_fuzz.cc feeds with arbitrary bytes.
class ThriftFrameReader {
 public:
  explicit ThriftFrameReader(const ThriftLimits& limits);
  ~ThriftFrameReader();
  // Called once with the reply as a frame (its length first) and whether the connection stays
  // open (false: a message Thrift could not read; the reply is empty then).
  using Answered = std::function<void(std::vector<uint8_t> reply, bool keep_open)>;
  // Runs the request in `frame` (the bytes after the 4-byte frame length) through `processor`:
  // the frame is read before this returns; `answered` is called before it returns too, or
  // later from another thread by a method that answers later (score() on a REVIEW waiting for
  // the LLM). Throws Thrift's exception for a malformed, truncated or over-limit message
  // header (the server then closes the connection); `answered` is not called then.
  void Process(rpc::TxScoreAsyncProcessor& processor, const uint8_t* frame, size_t size, Answered answered) const;
  // A TApplicationException of `exception_type` (Thrift's TApplicationExceptionType; default
  // INTERNAL_ERROR) with `message` answering the request in `frame`, or empty when the frame
  // has no readable message header.
  std::vector<uint8_t> ErrorReply(const uint8_t* frame, size_t size, const std::string& message,
                                  int exception_type = 6) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Counters since Create(); read them at any time from any thread.
struct RpcServerStats {
  uint64_t connections_open = 0;
  uint64_t connections_idle = 0;        // of those, waiting for a frame
  uint64_t connections_accepted = 0;    // including those refused
  uint64_t connections_refused = 0;     // over max_connections, none of them idle
  uint64_t idle_evictions = 0;          // idle connections closed to make room for a new one
  uint64_t frame_timeouts = 0;          // a frame or a reply not through within frame_timeout_ms
  uint64_t idle_timeouts = 0;           // silent for idle_timeout_ms between frames
  uint64_t requests_queued = 0;         // complete frames waiting for a worker now
  uint64_t requests_shed = 0;           // answered "overloaded": the worker queue was full
  uint64_t requests_waiting = 0;        // waiting for a slow stage now: parked, or on a waiting thread
  uint64_t waits_refused = 0;           // slow stages skipped: waiting_threads requests were waiting
  uint64_t handshakes_in_progress = 0;  // TLS connections not yet admitted nor refused
  uint64_t handshakes_evicted = 0;      // closed in their handshake, the oldest, to make room (server.max_handshakes)
  uint64_t protocol_errors = 0;         // bad frame size, limits exceeded, malformed message
  std::array<uint64_t, kTlsRefusalCount> tls_refusals{};  // by TlsRefusal
  // The most handshake steps one connection took, after its first, that neither read nor wrote
  // a byte: a connection waiting for the rest of a TLS record must wait for the socket, not poll
  // it. At most 1 (a wake-up OpenSSL had no use for, seen in TLS 1.3 handshakes) unless the
  // transport polls.
  uint64_t tls_most_idle_handshake_steps = 0;
};

// Makes the handler for one connection's requests, once its caller is known (after the TLS
// handshake). Called on an I/O thread; must be thread-safe. Asynchronous (service/thrift_async.h):
// a method may answer after it returns, from any thread.
using RpcHandlerFactory = std::function<std::shared_ptr<rpc::TxScoreCobSvIf>(const Caller& caller)>;

class RpcServer {
 public:
  // Binds and listens before returning, so port() is known and connections queue at once.
  // `tls`: null serves plaintext (every caller is an operator: see Caller).
  // `on_refused`: told of each client the TLS checks refuse (null: none).
  static Result<std::unique_ptr<RpcServer>> Create(const RpcServerConfig& config, RpcHandlerFactory handlers,
                                                   std::shared_ptr<const TlsServerContext> tls,
                                                   TlsRefusalObserver on_refused = nullptr);
  // Plaintext, one handler for every connection, each call answered on the thread that runs it
  // (tests of the transport).
  static Result<std::unique_ptr<RpcServer>> Create(const RpcServerConfig& config,
                                                   std::shared_ptr<rpc::TxScoreIf> handler);
  ~RpcServer();  // Stop()s

  // The bound port (useful when the config asked for port 0).
  int port() const { return port_; }
  // Serves until Stop(); returns after in-flight requests have been answered.
  void Serve();
  // Stops accepting, closes idle connections and those in the middle of sending a frame, lets
  // requests already read finish and their replies be written, then ends Serve(). Connections
  // still open after drain_timeout_ms have no more of their requests read; those already read,
  // parked ones included, are still answered first (their LLM stage's deadline bounds the
  // wait). Safe to call from another thread; idempotent.
  void Stop();

  RpcServerStats stats() const;
  // New connections use `tls` from now on (a reload read the certificate files again); open
  // ones keep theirs. Ignored on a plaintext server: a restart changes the mode.
  void SetTls(std::shared_ptr<const TlsServerContext> tls);
  bool uses_tls() const;
  // Tests: called on the I/O thread before each TLS handshake step (SSL_do_handshake), holding
  // only that connection's lock. Set before Serve().
  void SetHandshakeStepHook(std::function<void()> hook);
  // True while Serve() runs the I/O threads.
  bool serving() const;

  struct Shared;  // state the I/O threads, workers and connections share (rpc_server.cc)

 private:
  RpcServer() = default;
  std::shared_ptr<Shared> shared_;
  int port_ = 0;
};

}  // namespace txscore::service
