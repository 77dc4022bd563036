// Every refused authentication on the Thrift and admin ports, recorded in the audit trail (PCI
// DSS 10.2.1.4: invalid logical access attempts), without letting a flood of them block a port
// or fill the disk.
//
// A refusal is recorded when the client offered something to authenticate with and it failed:
// no client certificate, one that does not chain to the CA, is expired or revoked, names no
// allowed identity or comes from the wrong issuer (TlsRefusal's certificate kinds), and an open
// connection a reload closed for the same reasons. What never got that far (not TLS, an old
// protocol version, a handshake cut off or broken) is counted in metrics only: a TCP health
// check or a port scan is not an access attempt.
//
// Each is an audit action {"action": "authentication_refused", "caller": "unauthenticated
// ADDRESS", "target": "thrift"|"admin", "outcome": "denied", "detail": "REASON: why"}. The first
// `individual_per_minute` from one address (without its port) in a minute are recorded one by
// one; the rest of that minute's are counted and recorded as one entry when the minute is over:
// "N more refusals from ADDRESS in the minute from TIME, not recorded one by one: REASON xK, ...".
// No refusal goes unrecorded, and an address's flood costs at most that many entries a minute.
//
// The ports call Refused on their IO threads: it only queues. A writer thread commits what is
// queued (each commit waits for the trail's group write) once Open is called, the database
// being open then; what was queued before waits for it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "service/tls.h"
#include "storage/audit_log.h"

namespace txscore::service {

struct RefusalRecordOptions {
  // Default: 60. Refusals from one address recorded one by one per minute; the rest of the
  // minute's are counted into one summary entry.
  int individual_per_minute = 60;
  // Default: 4096. Addresses counted at once; refusals from the further ones are counted
  // under "other addresses".
  size_t max_addresses = 4096;
  // Default: 10000. Entries waiting for the writer; further refusals are counted into their
  // address's summary instead.
  size_t max_queued = 10000;
};

// Whether a refusal of this kind is an authentication attempt that failed (recorded), or a
// connection that never offered credentials (metrics only).
bool IsAuthenticationRefusal(TlsRefusal refusal);

class RefusalRecorder {
 public:
  using Sink = std::function<Status(const storage::AuditAction& action)>;
  using Clock = std::function<std::chrono::system_clock::time_point()>;

  // `clock`: null for the system clock (tests pass their own).
  RefusalRecorder(Sink sink, RefusalRecordOptions options = {}, Clock clock = nullptr);
  ~RefusalRecorder();  // Close()s
  RefusalRecorder(const RefusalRecorder&) = delete;
  RefusalRecorder& operator=(const RefusalRecorder&) = delete;

  // From a port's IO thread; never waits for the database. `address`: "IP:PORT".
  void Refused(TlsPort port, const std::string& address, TlsRefusal refusal, const std::string& detail);

  // Starts writing (the trail is open).
  void Open();
  // Writes every summary still counting (of minutes not over yet too) and everything queued,
  // and returns when it is written; then stops the writer. Refusals after it are not recorded.
  void Close();
  // The same without stopping: what was refused until now is in the trail when it returns
  // (tests; a clean shutdown uses Close).
  void Flush();

  // Refusals recorded one by one, and counted into summaries (for metrics and tests).
  uint64_t recorded_individually() const;
  uint64_t recorded_in_summaries() const;

 private:
  struct Window {
    std::chrono::system_clock::time_point start;
    int individual = 0;
    std::map<std::string, uint64_t> suppressed;  // reason -> count, this minute, beyond the individual ones
    uint64_t suppressed_total = 0;
  };
  // Queues `address`'s summary when it counted any; caller holds mu_.
  void QueueSummaryLocked(const std::string& address, const Window& window);
  void WriterLoop();

  const Sink sink_;
  const RefusalRecordOptions options_;
  const Clock clock_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable written_;
  std::deque<storage::AuditAction> queue_;
  std::map<std::string, Window> windows_;  // by address without its port ("other addresses" too)
  bool open_ = false;
  bool closing_ = false;
  bool closed_ = false;
  uint64_t queued_total_ = 0;   // entries ever queued
  uint64_t written_total_ = 0;  // entries the writer has handed to the sink
  uint64_t individually_ = 0;
  uint64_t in_summaries_ = 0;
  std::thread writer_;
};

}  // namespace txscore::service
