#include "service/refusal_records.h"

#include "common/logging.h"
#include "common/utc_time.h"

namespace txscore::service {
namespace {

constexpr std::chrono::seconds kWindow(60);
constexpr char kAction[] = "authentication_refused";
constexpr char kOtherAddresses[] = "other addresses";

int64_t MicrosOf(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

// "10.0.0.7:5555" -> "10.0.0.7"; "::1:5555" -> "::1" (the ports write IPv6 without brackets).
std::string WithoutPort(const std::string& address) {
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

}  // namespace

bool IsAuthenticationRefusal(TlsRefusal refusal) {
  switch (refusal) {
    case TlsRefusal::kNoCertificate:
    case TlsRefusal::kUntrustedCertificate:
    case TlsRefusal::kExpiredCertificate:
    case TlsRefusal::kIdentityNotAllowed:
    case TlsRefusal::kWrongIssuer:
    case TlsRefusal::kRevokedCertificate:
      return true;
    case TlsRefusal::kProtocolVersion:
    case TlsRefusal::kNotTls:
    case TlsRefusal::kHandshakeTimeout:
    case TlsRefusal::kHandshakeFailed:
      return false;
  }
  return false;
}

RefusalRecorder::RefusalRecorder(Sink sink, RefusalRecordOptions options, Clock clock)
    : sink_(std::move(sink)),
      options_(options),
      clock_(clock ? std::move(clock) : Clock([] { return std::chrono::system_clock::now(); })),
      writer_([this] { WriterLoop(); }) {}

RefusalRecorder::~RefusalRecorder() { Close(); }

void RefusalRecorder::Refused(TlsPort port, const std::string& address, TlsRefusal refusal, const std::string& detail) {
  if (!IsAuthenticationRefusal(refusal)) return;
  const auto now = clock_();
  std::lock_guard<std::mutex> lock(mu_);
  if (closing_) return;
  // One window per port and address: the port is the entry's target.
  std::string key = std::string(TlsPortName(port)) + " " + WithoutPort(address);
  auto window = windows_.find(key);
  if (window == windows_.end() && windows_.size() >= options_.max_addresses) {
    key = std::string(TlsPortName(port)) + " " + kOtherAddresses;
    window = windows_.find(key);
  }
  if (window == windows_.end()) window = windows_.emplace(key, Window{now}).first;
  if (now - window->second.start >= kWindow) {
    QueueSummaryLocked(key, window->second);
    window->second = Window{now};
  }
  Window& w = window->second;
  if (w.individual < options_.individual_per_minute && queue_.size() < options_.max_queued &&
      key.find(kOtherAddresses) == std::string::npos) {
    ++w.individual;
    ++individually_;
    queue_.push_back({MicrosOf(now), kAction, "unauthenticated " + address, TlsPortName(port), "denied",
                      std::string(TlsRefusalName(refusal)) + ": " + detail});
    ++queued_total_;
    wake_.notify_one();
  } else {
    ++w.suppressed[TlsRefusalName(refusal)];
    ++w.suppressed_total;
    ++in_summaries_;
  }
}

void RefusalRecorder::QueueSummaryLocked(const std::string& key, const Window& window) {
  if (window.suppressed_total == 0) return;
  const size_t space = key.find(' ');
  const std::string port = key.substr(0, space);
  const std::string address = key.substr(space + 1);
  std::string reasons;
  for (const auto& [reason, count] : window.suppressed) {
    reasons += (reasons.empty() ? "" : ", ") + reason + " x" + std::to_string(count);
  }
  queue_.push_back({MicrosOf(clock_()), kAction, "unauthenticated " + address, port, "denied",
                    std::to_string(window.suppressed_total) + " more refusals from " + address +
                        " in the minute from " + FormatUtcTime(MicrosOf(window.start)) +
                        ", not recorded one by one: " + reasons});
  ++queued_total_;
  wake_.notify_one();
}

void RefusalRecorder::WriterLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    wake_.wait_for(lock, std::chrono::seconds(1), [this] { return closing_ || (open_ && !queue_.empty()); });
    // A minute over: its summary now, not at the address's next refusal (there may be none).
    const auto now = clock_();
    for (auto it = windows_.begin(); it != windows_.end();) {
      if (now - it->second.start < kWindow) {
        ++it;
        continue;
      }
      QueueSummaryLocked(it->first, it->second);
      it = windows_.erase(it);
    }
    while (open_ && !queue_.empty()) {
      const storage::AuditAction action = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      Status written = sink_(action);
      if (!written.ok()) {
        Log("audit").error("cannot record a refused authentication from {}: {}", action.caller,
                           written.error().ToString());
      }
      lock.lock();
      ++written_total_;
      written_.notify_all();
    }
    if (closing_) break;
  }
  if (!queue_.empty()) {
    Log("audit").error("{} refused authentications are not recorded: the audit trail was never opened", queue_.size());
  }
  written_.notify_all();
}

void RefusalRecorder::Open() {
  std::lock_guard<std::mutex> lock(mu_);
  open_ = true;
  wake_.notify_one();
}

void RefusalRecorder::Flush() {
  std::unique_lock<std::mutex> lock(mu_);
  for (const auto& [key, window] : windows_) QueueSummaryLocked(key, window);
  windows_.clear();
  if (!open_ || closing_) return;
  const uint64_t target = queued_total_;
  wake_.notify_one();
  written_.wait(lock, [&] { return written_total_ >= target || closing_; });
}

void RefusalRecorder::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    closed_ = true;
    for (const auto& [key, window] : windows_) QueueSummaryLocked(key, window);
    windows_.clear();
    closing_ = true;
    wake_.notify_one();
  }
  writer_.join();
}

uint64_t RefusalRecorder::recorded_individually() const {
  std::lock_guard<std::mutex> lock(mu_);
  return individually_;
}

uint64_t RefusalRecorder::recorded_in_summaries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_summaries_;
}

}  // namespace txscore::service
