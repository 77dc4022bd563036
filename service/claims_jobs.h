// Claims jobs on a running server: submitted over Thrift (a file under jobs.input_dir, or
// claims sent inline), queued, and run one at a time on a background thread, by default in
// the OS's idle scheduling class (jobs.priority; common/thread_priority.h), through
// RunClaimsJob (pipelines/claims_job.h). Requests keep the cores; a job uses what they leave.
//
// A job is its input: submitting the same file (or the same inline claims) again is the same
// job, which resumes where it stopped, or reports its result when done. Progress lives in the
// server's database, with the job's state: a job queued, or interrupted by a server stop (or
// crash), is queued again when the server starts, and goes on from its last durable chunk. A
// job cancelled over RPC, or failed, stays so until it is submitted again; submitted with
// `restart`, it forgets its progress and output and starts over (the way to run a job whose
// input file changed). A job that finished with the LLM stage writing no findings for more
// than jobs.max_llm_shortfall_share of the claims it was asked to read ends DEGRADED, not DONE.
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
#include "pipelines/claims_job_record.h"
#include "pipelines/claims_pipeline.h"
#include "pipelines/config.h"
#include "service/settings.h"
#include "storage/database.h"

namespace txscore::service {

// A job as clients see it: Thrift's JobState. Not the record's pipelines::ClaimsJobState,
// which is what the job loop stores: DEGRADED is a view (done, with the LLM stage short on more
// claims than jobs.max_llm_shortfall_share), not a state the job passes through.
enum class JobState {
  kQueued = 1,
  kRunning = 2,
  kDone = 3,
  kCancelled = 4,
  kFailed = 5,
  kInterrupted = 6,
  kDegraded = 7
};

// "queued", "running", "done", "cancelled", "failed", "interrupted", "degraded".
const char* JobStateName(JobState state);

struct ClaimsJobView {
  std::string job_id;
  JobState state = JobState::kQueued;
  int64_t done = 0;
  int64_t total = 0;
  int64_t errors = 0;
  std::string output_path;
  std::string detail;  // why it failed, or how it stopped
  double claims_per_s = 0;
  int64_t llm_selected = 0;                       // claims the LLM stage was asked to read
  std::map<std::string, int64_t> llm_shortfalls;  // of those without findings: reason -> claims
};

struct ClaimsJobManagerOptions {
  JobsConfig config;
  // Tests: called on the worker thread before each job starts (to hold it there).
  std::function<void(const std::string& job_id)> before_job;
  // Tests: called when the manager is stopping, after the running job was told to stop.
  std::function<void()> on_stopping;
  // Tests: called on the worker thread after each progress update (rows done so far), once
  // the job's view shows it (to hold a job in the middle).
  std::function<void(const std::string& job_id, int64_t done)> after_progress;
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
  // `restart`: forget the job's earlier progress and output; kFailedPrecondition while it runs.
  Result<ClaimsJobView> SubmitFile(const std::string& relative_path, bool restart = false);
  // The claims are written to output_dir as JSON lines named by their content, in the form
  // fraud::ClaimForStorage gives (claimant tokenized, card numbers in free text redacted),
  // fsynced with their directory before the job is queued, and removed when the job is done
  // or has failed (a cancelled job keeps its input, to resume). kInvalidArgument (field
  // "claims") for an empty list or a claim whose claimant_id is not a valid id.
  Result<ClaimsJobView> SubmitClaims(const std::vector<fraud::RawClaim>& claims, bool restart = false);
  // kNotFound for a job this server has never seen.
  Result<ClaimsJobView> Status(const std::string& job_id);
  // A queued job is dropped; a running one stops after its chunk in flight (poll Status).
  Result<ClaimsJobView> Cancel(const std::string& job_id);
  // Every job submitted since this manager started, in submission order (metrics, dashboard).
  std::vector<ClaimsJobView> Snapshot();

 private:
  struct Job {
    ClaimsJobView view;
    std::string input;
    bool inline_input = false;  // written by SubmitClaims: removed when the job ends
    bool restart = false;
    std::atomic<bool> cancel{false};
  };

  ClaimsJobManager(pipelines::ClaimsPipeline* pipeline, storage::Database* db, ClaimsJobManagerOptions options)
      : pipeline_(pipeline), db_(db), options_(std::move(options)) {}
  // Where a job's output goes, and its id: both follow from its input path.
  std::string OutputOf(const std::string& input) const;
  std::string JobIdOf(const std::string& input) const;
  // `content_sha256`: the input's digest when the caller has its bytes (inline claims); "" for a file.
  Result<ClaimsJobView> Enqueue(const std::string& input, bool inline_input, bool restart,
                                const std::string& content_sha256 = "");
  // DONE, or DEGRADED when the LLM stage fell short on too many claims (with why in `detail`).
  void SetFinished(ClaimsJobView* view) const;
  // What a job's record says, as a view (a job of an earlier run of the server, or a finished
  // one submitted again).
  ClaimsJobView ViewOfRecord(const std::string& job_id, const pipelines::ClaimsJobRecord& record) const;
  // Deletes a job's inline input file (claims sent in the request), logging a failure.
  void RemoveInlineInput(const std::string& job_id, const std::string& input) const;
  // Queues the jobs the database says are queued, running (a crash) or interrupted.
  txscore::Status ResumeInterruptedJobs();
  void Work();

  pipelines::ClaimsPipeline* pipeline_;
  storage::Database* db_;
  const ClaimsJobManagerOptions options_;
  std::mutex mutex_;
  // Held over writing an inline job's input and enqueueing it, and over a finished job's removal
  // of its inline input and the state change after it: a submit of the same claims meanwhile
  // either joins the job still running or writes the input anew for a job seen finished.
  std::mutex inline_inputs_mutex_;  // taken before mutex_
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::map<std::string, std::shared_ptr<Job>> jobs_;  // every job submitted since start
  std::vector<std::string> submitted_;                // their ids, in submission order
  bool stopping_ = false;
  std::atomic<bool> interrupt_{false};  // set when stopping: the running job stops, resumably
  std::thread worker_;                  // started last, in Create
};

}  // namespace txscore::service
