// txscore job submit|status|cancel --server HOST:PORT: claims jobs on a running server
// (service/claims_jobs.h), over Thrift.
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>

#include "common/host_port.h"
#include "fraud/claim.h"
#include "gen-cpp/TxScore.h"
#include "service/commands/client_tls.h"
#include "service/commands/commands.h"
#include "service/rpc_client.h"
#include "service/transaction_json.h"

namespace txscore::service {
namespace {

struct JobOptions {
  std::string server = "127.0.0.1:9090";
  ClientTlsFlags tls;
  std::string action;       // submit, status, cancel
  std::string input_path;   // submit: a file in the server's jobs input directory
  std::string claims_file;  // submit: local JSON-lines claims, sent inline
  std::string job_id;       // status, cancel
  bool restart = false;     // submit: start the job over
};

void Print(const rpc::ClaimsJobStatus& s) {
  std::printf("job %s %s: %lld of %lld rows, %lld errors", s.job_id.c_str(), rpc::_JobState_VALUES_TO_NAMES.at(s.state),
              static_cast<long long>(s.done), static_cast<long long>(s.total), static_cast<long long>(s.errors));
  if (s.__isset.claims_per_s) std::printf(", %.1f claims/s", s.claims_per_s);
  std::printf("\noutput %s\n", s.output_path.c_str());
  if (s.__isset.llm_selected && s.llm_selected > 0) {
    int64_t shortfalls = 0;
    for (const auto& [reason, claims] : s.llm_shortfalls) shortfalls += claims;
    std::printf("LLM findings for %lld of %lld claims it was asked to read",
                static_cast<long long>(s.llm_selected - shortfalls), static_cast<long long>(s.llm_selected));
    for (const auto& [reason, claims] : s.llm_shortfalls) {
      std::printf("; %s %lld", reason.c_str(), static_cast<long long>(claims));
    }
    std::printf("\n");
  }
  if (s.__isset.detail) std::printf("%s\n", s.detail.c_str());
}

constexpr size_t kDefaultServerFrameBytes = 1 << 20;  // service/settings.h ThriftLimits

// What the request weighs on the wire (binary protocol), to explain a refused frame.
size_t SerializedBytes(const rpc::ClaimsJobRequest& request) {
  auto buffer = std::make_shared<apache::thrift::transport::TMemoryBuffer>();
  apache::thrift::protocol::TBinaryProtocol protocol(buffer);
  request.write(&protocol);
  return buffer->available_read();
}

int RunJob(const JobOptions& options) {
  Result<HostPort> server = ParseHostPort(options.server);
  if (!server.ok()) {
    std::fprintf(stderr, "--server: %s\n", server.error().message.c_str());
    return 2;
  }
  rpc::ClaimsJobRequest request;
  if (options.action == "submit") {
    if (options.input_path.empty() == options.claims_file.empty()) {
      std::fprintf(stderr, "submit needs exactly one of --input (a file on the server) and --claims (a local file)\n");
      return 2;
    }
    if (!options.input_path.empty()) request.__set_input_path(options.input_path);
    if (options.restart) request.__set_restart(true);
    if (!options.claims_file.empty()) {
      std::ifstream in(options.claims_file);
      if (!in) {
        std::fprintf(stderr, "cannot read %s\n", options.claims_file.c_str());
        return 2;
      }
      std::vector<rpc::Claim> claims;
      size_t line_number = 0;
      for (std::string line; std::getline(in, line);) {
        ++line_number;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        Result<fraud::RawClaim> raw = fraud::ParseClaimJson(line);
        if (!raw.ok()) {
          std::fprintf(stderr, "%s:%zu: %s\n", options.claims_file.c_str(), line_number, raw.error().message.c_str());
          return 2;
        }
        claims.push_back(ToThriftClaim(*raw));
      }
      request.__set_claims(claims);
    }
  } else if (options.job_id.empty()) {
    std::fprintf(stderr, "%s needs --id JOB_ID\n", options.action.c_str());
    return 2;
  }
  Result<TlsClientFiles> tls = ResolveClientTls(options.tls);
  if (!tls.ok()) {
    std::fprintf(stderr, "%s\n", tls.error().message.c_str());
    return 2;
  }
  Result<std::unique_ptr<RpcConnection>> connection =
      RpcConnection::Open(*server, {.recv_timeout_ms = 60000, .tls = *tls});
  if (!connection.ok()) {
    std::fprintf(stderr, "cannot reach %s: %s\nIs the server running?\n", options.server.c_str(),
                 connection.error().message.c_str());
    return 1;
  }
  rpc::TxScoreClient& client = (*connection)->client();
  try {
    rpc::ClaimsJobStatus status;
    if (options.action == "submit") client.submitClaimsJob(status, request);
    if (options.action == "status") client.claimsJobStatus(status, options.job_id);
    if (options.action == "cancel") client.cancelClaimsJob(status, options.job_id);
    Print(status);
  } catch (const rpc::InvalidRequest& e) {
    std::fprintf(stderr, "refused: %s: %s\n", e.field.c_str(), e.reason.c_str());
    return 1;
  } catch (const rpc::UnknownJob& e) {
    std::fprintf(stderr, "the server knows no job %s\n", e.job_id.c_str());
    return 1;
  } catch (const rpc::ServiceError& e) {
    std::fprintf(stderr, "the server failed: %s\n", e.reason.c_str());
    return 1;
  } catch (const rpc::AccessDenied& e) {
    std::fprintf(stderr, "denied: %s\nJob control needs an operator's certificate (--tls-dir).\n", e.reason.c_str());
    return 1;
  } catch (const apache::thrift::TException& e) {
    const size_t request_bytes = SerializedBytes(request);
    if (options.action == "submit" && request_bytes > kDefaultServerFrameBytes) {
      // The server closes a connection whose frame is over its limit without a word.
      std::fprintf(stderr,
                   "the server closed the connection: the request is %zu bytes, over the server's frame limit "
                   "(server.limits.max_frame_bytes, 1 MiB unless configured). Send large inputs as a file: put it in "
                   "the server's jobs.input_dir and submit it with --input NAME.\n",
                   request_bytes);
      return 1;
    }
    std::fprintf(stderr, "the connection to %s failed: %s\n%s", options.server.c_str(), e.what(),
                 ConnectionFailureHint(options.tls, e).c_str());
    return 1;
  }
  return 0;
}

}  // namespace

void AddJobCommand(CLI::App& app, int* exit_code) {
  CLI::App* job = app.add_subcommand("job", "Claims jobs on a running server: submit, status, cancel");
  job->require_subcommand(1);
  auto options = std::make_shared<JobOptions>();
  for (const char* action : {"submit", "status", "cancel"}) {
    CLI::App* cmd = job->add_subcommand(action, std::string(action) + " a claims job");
    cmd->add_option("--server", options->server, "HOST:PORT of txscore serve")->capture_default_str();
    AddClientTlsFlags(cmd, &options->tls, "var/pki/admin");
    if (std::string(action) == "submit") {
      cmd->add_option("--input", options->input_path, "A claims file in the server's jobs.input_dir");
      cmd->add_option("--claims", options->claims_file, "A local JSON-lines claims file, sent inline");
      cmd->add_flag("--restart", options->restart,
                    "Forget the job's earlier progress and output and start over (e.g. its input changed)");
    } else {
      cmd->add_option("--id", options->job_id, "The job id submit printed")->required();
    }
    cmd->callback([options, exit_code, action] {
      options->action = action;
      *exit_code = RunJob(*options);
    });
  }
}

}  // namespace txscore::service
