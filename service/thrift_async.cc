#include "service/thrift_async.h"

#include <utility>

namespace txscore::service {
namespace {

class DelayedExceptionPtr : public apache::thrift::TDelayedException {
 public:
  explicit DelayedExceptionPtr(std::exception_ptr error) : error_(std::move(error)) {}
  void throw_it() override {
    std::exception_ptr error = std::move(error_);
    delete this;  // as Thrift's own TExceptionWrapper: the processor calls throw_it once
    std::rethrow_exception(error);
  }

 private:
  std::exception_ptr error_;
};

// Runs `call` (a synchronous method) and hands its result to `cob`, or what it threw to
// `exn_cob`.
template <typename Result, typename Call>
void AnswerWith(const std::function<void(const Result&)>& cob,
                const std::function<void(apache::thrift::TDelayedException*)>& exn_cob, Call call) {
  Result result;
  try {
    call(result);
  } catch (...) {
    return exn_cob(Delayed(std::current_exception()));
  }
  cob(result);
}

// The same for a method that declares no exception: a failure is the server's to answer.
template <typename Result, typename Call>
void AnswerWith(const std::function<void(const Result&)>& cob, Call call) {
  Result result;
  try {
    call(result);
  } catch (const std::exception& e) {
    throw HandlerFailed(e.what());
  }
  cob(result);
}

}  // namespace

apache::thrift::TDelayedException* Delayed(std::exception_ptr error) {
  return new DelayedExceptionPtr(std::move(error));
}

AnsweredInline::AnsweredInline(std::shared_ptr<rpc::TxScoreIf> handler) : handler_(std::move(handler)) {}

void AnsweredInline::score(std::function<void(const rpc::ScoreResult&)> cob,
                           std::function<void(apache::thrift::TDelayedException*)> exn_cob,
                           const rpc::Transaction& transaction) {
  AnswerWith(cob, exn_cob, [&](rpc::ScoreResult& result) { handler_->score(result, transaction); });
}

void AnsweredInline::scoreBatch(std::function<void(const std::vector<rpc::BatchItem>&)> cob,
                                const std::vector<rpc::Transaction>& transactions) {
  AnswerWith(cob, [&](std::vector<rpc::BatchItem>& results) { handler_->scoreBatch(results, transactions); });
}

void AnsweredInline::health(std::function<void(const rpc::HealthStatus&)> cob) {
  AnswerWith(cob, [&](rpc::HealthStatus& status) { handler_->health(status); });
}

void AnsweredInline::submitClaimsJob(std::function<void(const rpc::ClaimsJobStatus&)> cob,
                                     std::function<void(apache::thrift::TDelayedException*)> exn_cob,
                                     const rpc::ClaimsJobRequest& request) {
  AnswerWith(cob, exn_cob, [&](rpc::ClaimsJobStatus& status) { handler_->submitClaimsJob(status, request); });
}

void AnsweredInline::claimsJobStatus(std::function<void(const rpc::ClaimsJobStatus&)> cob,
                                     std::function<void(apache::thrift::TDelayedException*)> exn_cob,
                                     const std::string& job_id) {
  AnswerWith(cob, exn_cob, [&](rpc::ClaimsJobStatus& status) { handler_->claimsJobStatus(status, job_id); });
}

void AnsweredInline::cancelClaimsJob(std::function<void(const rpc::ClaimsJobStatus&)> cob,
                                     std::function<void(apache::thrift::TDelayedException*)> exn_cob,
                                     const std::string& job_id) {
  AnswerWith(cob, exn_cob, [&](rpc::ClaimsJobStatus& status) { handler_->cancelClaimsJob(status, job_id); });
}

}  // namespace txscore::service
