#include "service/refusal_records.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "common/utc_time.h"

namespace txscore::service {
namespace {

using std::chrono::seconds;
using std::chrono::system_clock;

// A recorder writing into a vector, on a clock the test moves.
class RefusalRecorderTest : public ::testing::Test {
 protected:
  RefusalRecorder& Recorder(RefusalRecordOptions options = {}) {
    recorder_ = std::make_unique<RefusalRecorder>(
        [this](const storage::AuditAction& action) {
          std::lock_guard<std::mutex> lock(mu_);
          written_.push_back(action);
          return Status::Ok();
        },
        options, [this] { return system_clock::time_point(seconds(now_s_.load())); });
    return *recorder_;
  }
  std::vector<storage::AuditAction> Written() {
    std::lock_guard<std::mutex> lock(mu_);
    return written_;
  }

  std::atomic<int64_t> now_s_{1796000000};  // 2026-11-29T...
  std::mutex mu_;
  std::vector<storage::AuditAction> written_;
  std::unique_ptr<RefusalRecorder> recorder_;
};

// Each refused authentication is an audit action naming the address, the port, the reason and
// why; nothing is written before the trail is open, and nothing of it is lost meanwhile.
TEST_F(RefusalRecorderTest, EachRefusedAuthenticationIsOneActionOnceTheTrailIsOpen) {
  RefusalRecorder& recorder = Recorder();
  recorder.Refused(TlsPort::kThrift, "10.0.0.7:5555", TlsRefusal::kIdentityNotAllowed,
                   "txscore-stranger is not on the allowlist");
  recorder.Refused(TlsPort::kAdmin, "::1:6000", TlsRefusal::kNoCertificate, "the client sent none");
  recorder.Flush();  // not open: returns without writing
  EXPECT_TRUE(Written().empty());
  recorder.Open();
  recorder.Flush();
  const std::vector<storage::AuditAction> written = Written();
  ASSERT_EQ(written.size(), 2u);
  EXPECT_EQ(written[0].action, "authentication_refused");
  EXPECT_EQ(written[0].caller, "unauthenticated 10.0.0.7:5555");
  EXPECT_EQ(written[0].target, "thrift");
  EXPECT_EQ(written[0].outcome, "denied");
  EXPECT_EQ(written[0].detail, "identity_not_allowed: txscore-stranger is not on the allowlist");
  EXPECT_EQ(written[0].time_us, int64_t{1796000000} * 1000000);
  EXPECT_EQ(written[1].caller, "unauthenticated ::1:6000");
  EXPECT_EQ(written[1].target, "admin");
  EXPECT_EQ(written[1].detail, "no_certificate: the client sent none");
  EXPECT_EQ(recorder.recorded_individually(), 2u);
  EXPECT_EQ(recorder.recorded_in_summaries(), 0u);
}

// What never offered credentials (a port scan, a health check, an old protocol) is not an
// access attempt: metrics count it, the trail does not.
TEST_F(RefusalRecorderTest, ConnectionsThatOfferedNoCredentialsAreNotRecorded) {
  RefusalRecorder& recorder = Recorder();
  recorder.Open();
  for (const TlsRefusal refusal : {TlsRefusal::kNotTls, TlsRefusal::kProtocolVersion, TlsRefusal::kHandshakeTimeout,
                                   TlsRefusal::kHandshakeFailed}) {
    EXPECT_FALSE(IsAuthenticationRefusal(refusal));
    recorder.Refused(TlsPort::kThrift, "10.0.0.7:5555", refusal, "x");
  }
  for (const TlsRefusal refusal :
       {TlsRefusal::kNoCertificate, TlsRefusal::kUntrustedCertificate, TlsRefusal::kExpiredCertificate,
        TlsRefusal::kIdentityNotAllowed, TlsRefusal::kWrongIssuer, TlsRefusal::kRevokedCertificate}) {
    EXPECT_TRUE(IsAuthenticationRefusal(refusal)) << TlsRefusalName(refusal);
  }
  recorder.Flush();
  EXPECT_TRUE(Written().empty());
}

// A flood from one address costs at most individual_per_minute entries a minute, and every
// refusal beyond them is counted, by reason, into one entry when its minute is over; another
// address keeps its own allowance.
TEST_F(RefusalRecorderTest, AFloodFromOneAddressIsRecordedOneByOneUpToTheLimitThenCountedIntoOneEntry) {
  RefusalRecorder& recorder = Recorder({.individual_per_minute = 3});
  recorder.Open();
  const int64_t minute_start_s = now_s_.load();
  for (int i = 0; i < 7; ++i) {
    recorder.Refused(TlsPort::kThrift, "10.0.0.7:" + std::to_string(5000 + i),
                     i < 5 ? TlsRefusal::kIdentityNotAllowed : TlsRefusal::kExpiredCertificate, "why");
  }
  recorder.Refused(TlsPort::kThrift, "10.0.0.8:5000", TlsRefusal::kNoCertificate, "why");
  recorder.Refused(TlsPort::kAdmin, "10.0.0.7:5000", TlsRefusal::kNoCertificate, "why");  // another port
  now_s_ += 61;  // the minute is over: the next refusal from the address writes its summary first
  recorder.Refused(TlsPort::kThrift, "10.0.0.7:6000", TlsRefusal::kIdentityNotAllowed, "why");
  recorder.Flush();
  const std::vector<storage::AuditAction> written = Written();
  ASSERT_EQ(written.size(), 7u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(written[i].caller, "unauthenticated 10.0.0.7:" + std::to_string(5000 + i));
  EXPECT_EQ(written[3].caller, "unauthenticated 10.0.0.8:5000");
  EXPECT_EQ(written[4].target, "admin");
  EXPECT_EQ(written[5].caller, "unauthenticated 10.0.0.7");
  EXPECT_EQ(written[5].target, "thrift");
  EXPECT_EQ(written[5].outcome, "denied");
  EXPECT_EQ(written[5].detail, "4 more refusals from 10.0.0.7 in the minute from " +
                                   FormatUtcTime(minute_start_s * 1000000) +
                                   ", not recorded one by one: expired_certificate x2, identity_not_allowed x2");
  EXPECT_EQ(written[6].caller, "unauthenticated 10.0.0.7:6000");  // a new minute, one by one again
  EXPECT_EQ(recorder.recorded_individually(), 6u);
  EXPECT_EQ(recorder.recorded_in_summaries(), 4u);
}

// A minute's summary is written when the minute is over even if the address never comes back,
// and Close writes the summaries of minutes still running: no refusal is left uncounted.
TEST_F(RefusalRecorderTest, SummariesAreWrittenWhenTheMinuteEndsAndAtClose) {
  RefusalRecorder& recorder = Recorder({.individual_per_minute = 1});
  recorder.Open();
  for (int i = 0; i < 3; ++i) recorder.Refused(TlsPort::kAdmin, "10.0.0.9:1", TlsRefusal::kRevokedCertificate, "why");
  now_s_ += 61;
  // The writer looks at least once a second; wait for it to notice, then for what it queued.
  while (Written().size() < 2) std::this_thread::yield();
  EXPECT_EQ(Written()[1].detail.substr(0, 34), "2 more refusals from 10.0.0.9 in t");
  recorder.Refused(TlsPort::kAdmin, "10.0.0.9:1", TlsRefusal::kRevokedCertificate, "why");
  recorder.Refused(TlsPort::kAdmin, "10.0.0.9:1", TlsRefusal::kRevokedCertificate, "why");
  recorder.Close();
  const std::vector<storage::AuditAction> written = Written();
  ASSERT_EQ(written.size(), 4u);
  EXPECT_EQ(written[3].detail.substr(0, 31), "1 more refusals from 10.0.0.9 i");
  recorder.Refused(TlsPort::kAdmin, "10.0.0.9:1", TlsRefusal::kRevokedCertificate, "why");  // after Close: dropped
  EXPECT_EQ(Written().size(), 4u);
}

// Memory and the queue are bounded: past max_addresses, new addresses share one count; past
// max_queued, refusals go into their address's count instead of the queue.
TEST_F(RefusalRecorderTest, AddressesAndTheQueueAreBounded) {
  RefusalRecorder& recorder = Recorder({.individual_per_minute = 100, .max_addresses = 2, .max_queued = 3});
  for (int i = 0; i < 4; ++i) {
    recorder.Refused(TlsPort::kThrift, "10.0.0." + std::to_string(i) + ":1", TlsRefusal::kNoCertificate, "why");
  }
  recorder.Refused(TlsPort::kThrift, "10.0.0.0:2", TlsRefusal::kNoCertificate, "why");
  recorder.Refused(TlsPort::kThrift, "10.0.0.1:2", TlsRefusal::kNoCertificate, "why");  // the queue is full
  recorder.Open();
  recorder.Flush();
  std::vector<std::string> callers;
  for (const storage::AuditAction& action : Written())
    callers.push_back(action.caller + " | " + action.detail.substr(0, 16));
  EXPECT_EQ(callers,
            (std::vector<std::string>{
                "unauthenticated 10.0.0.0:1 | no_certificate: ", "unauthenticated 10.0.0.1:1 | no_certificate: ",
                "unauthenticated 10.0.0.0:2 | no_certificate: ", "unauthenticated 10.0.0.1 | 1 more refusals ",
                "unauthenticated other addresses | 2 more refusals "}));
}

}  // namespace
}  // namespace txscore::service
