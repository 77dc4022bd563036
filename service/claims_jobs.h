// Claims jobs on a running server: submitted over Thrift (a file under jobs.input_dir, or
// claims sent inline), queued, and run one at a time on a background thread, by default in
// the OS's idle scheduling class (jobs.priority; common/thread_priority.h), through
// RunClaimsJob (pipelines/claims_job.h). Requests keep the cores; a job uses what they leave.
//
// A job is its input: submitting the same file (or the same inline claims) again is the same
// job, which resumes where it stopped, or reports its result when done. Progress lives in the
// server's database: a job interrupted by a server stop (or crash) is queued again when the
// server starts, and goes on from its last durable chunk. A job cancelled over RPC stays
// cancelled until it is submitted again.
//
// Thread safety: all methods may be called from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/result.h"
#include "fraud/claim.h"
#include "pipelines/claims_pipeline.h"
#include "pipelines/config.h"
#include "storage/database.h"

namespace txscore::service {

enum class JobState { kQueued = 1, kRunning = 2, kDone = 3, kCancelled = 4, kFailed = 5 };  // as Thrift's

struct ClaimsJobView {
  std::string job_id;
  JobState state = JobState::kQueued;
  int64_t done = 0;
  int64_t total = 0;
  int64_t errors = 0;
  std::string output_path;
  std::string detail;  // why it failed, or how it stopped
  double claims_per_s = 0;
};

struct ClaimsJobManagerOptions {
  pipelines::JobsConfig config;
  // Tests: called on the worker thread before each job starts (to hold it there).
  std::function<void(const std::string& job_id)> before_job;
  // Tests: called when the manager is stopping, after the running job was told to stop.
  std::function<void()> on_stopping;
};

class ClaimsJobManager {
 public:
  // `pipeline` and `db` must outlive the manager. Creates the output directory.
  static Result<std::unique_ptr<ClaimsJobManager>> Create(pipelines::ClaimsPipeline* pipeline, storage::Database* db,
                                                          ClaimsJobManagerOptions options);
  // Stops the running job after its chunk in flight (it resumes when a manager is created on
  // the same database again) and joins the worker.
  ~ClaimsJobManager();

  // kInvalidArgument (field "input_path"): a path outside input_dir, or no such file.
  Result<ClaimsJobView> SubmitFile(const std::string& relative_path);
  // The claims are written to output_dir as JSON lines named by their content, in the form
  // fraud::ClaimForStorage gives (claimant tokenized, card numbers in free text redacted),
  // fsynced with their directory before the job is queued, and removed when the job is done
  // or has failed (a cancelled job keeps its input, to resume). kInvalidArgument (field
  // "claims") for an empty list or a claim whose claimant_id is not a valid id.
  Result<ClaimsJobView> SubmitClaims(const std::vector<fraud::RawClaim>& claims);
  // kNotFound for a job this server has never seen.
  Result<ClaimsJobView> Status(const std::string& job_id);
  // A queued job is dropped; a running one stops after its chunk in flight (poll Status).
  Result<ClaimsJobView> Cancel(const std::string& job_id);

 private:
  struct Job {
    ClaimsJobView view;
    std::string input;
    bool inline_input = false;  // written by SubmitClaims: removed when the job ends
    std::atomic<bool> cancel{false};
  };

  ClaimsJobManager(pipelines::ClaimsPipeline* pipeline, storage::Database* db, ClaimsJobManagerOptions options)
      : pipeline_(pipeline), db_(db), options_(std::move(options)) {}
  // Where a job's output goes, and its id: both follow from its input path.
  std::string OutputOf(const std::string& input) const;
  std::string JobIdOf(const std::string& input) const;
  Result<ClaimsJobView> Enqueue(const std::string& input, bool inline_input = false);
  // Queues the jobs a server stop or crash left "running" in the database.
  txscore::Status ResumeInterruptedJobs();
  void Work();

  pipelines::ClaimsPipeline* pipeline_;
  storage::Database* db_;
  const ClaimsJobManagerOptions options_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::map<std::string, std::shared_ptr<Job>> jobs_;  // every job submitted since start
  bool stopping_ = false;
  std::atomic<bool> interrupt_{false};  // set when stopping: the running job stops, resumably
  std::thread worker_;  // started last, in Create
};

}  // namespace txscore::service
