// Serving TxScore through Thrift's asynchronous ("cob style") processor, so that a method may
// answer after it returns: score() on a REVIEW whose findings the LLM writes later holds no
// thread meanwhile (ScoringPipeline::ScoreThen). The RPC server runs every connection's
// requests through rpc::TxScoreAsyncProcessor over an rpc::TxScoreCobSvIf.
//
// AnsweredInline serves a synchronous handler (rpc::TxScoreIf) that way, each call answered on
// the thread that makes it: for tests' handlers, and for the methods that have nothing to wait
// for. TxScoreHandler's own (service/thrift_handler.h) answers score() later.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include "gen-cpp/TxScore.h"

namespace txscore::service {

// Thrown out of the processor when a method that declares no exception (health, scoreBatch)
// failed unexpectedly: the server answers it with a TApplicationException, as Thrift's
// synchronous processor does, and keeps the connection.
class HandlerFailed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A Thrift exception to give a method's exn_cob: rethrows `error` where the processor writes
// the reply.
apache::thrift::TDelayedException* Delayed(std::exception_ptr error);

class AnsweredInline : public rpc::TxScoreCobSvIf {
 public:
  explicit AnsweredInline(std::shared_ptr<rpc::TxScoreIf> handler);

  void score(std::function<void(const rpc::ScoreResult&)> cob,
             std::function<void(apache::thrift::TDelayedException*)> exn_cob,
             const rpc::Transaction& transaction) override;
  void scoreBatch(std::function<void(const std::vector<rpc::BatchItem>&)> cob,
                  const std::vector<rpc::Transaction>& transactions) override;
  void health(std::function<void(const rpc::HealthStatus&)> cob) override;
  void submitClaimsJob(std::function<void(const rpc::ClaimsJobStatus&)> cob,
                       std::function<void(apache::thrift::TDelayedException*)> exn_cob,
                       const rpc::ClaimsJobRequest& request) override;
  void claimsJobStatus(std::function<void(const rpc::ClaimsJobStatus&)> cob,
                       std::function<void(apache::thrift::TDelayedException*)> exn_cob,
                       const std::string& job_id) override;
  void cancelClaimsJob(std::function<void(const rpc::ClaimsJobStatus&)> cob,
                       std::function<void(apache::thrift::TDelayedException*)> exn_cob,
                       const std::string& job_id) override;

 private:
  std::shared_ptr<rpc::TxScoreIf> handler_;
};

}  // namespace txscore::service
