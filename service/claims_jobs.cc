#include "service/claims_jobs.h"

#include <chrono>
#include <filesystem>
#include <fstream>

#include "common/durable_file.h"
#include "common/file_io.h"
#include "common/logging.h"
#include "common/pan_scan.h"
#include "common/sha256.h"
#include "common/thread_priority.h"
#include "pipelines/claims_job.h"

namespace txscore::service {
namespace {}  // namespace

namespace {

namespace fs = std::filesystem;

// `path` lies inside `dir` (both canonical: no "..", no symlinks left).
bool Inside(const fs::path& path, const fs::path& dir) {
  auto p = path.begin();
  for (auto d = dir.begin(); d != dir.end(); ++d, ++p) {
    if (p == path.end() || *p != *d) return false;
  }
  return p != path.end();
}

// Inline claims live in the output directory, named inline-DIGEST.jsonl (SubmitClaims).
bool IsInlineInput(const std::string& input, const std::string& output_dir) {
  std::error_code ec;
  const fs::path path(input);
  return path.filename().string().rfind("inline-", 0) == 0 &&
         fs::weakly_canonical(path.parent_path(), ec) == fs::weakly_canonical(output_dir, ec);
}

}  // namespace

Result<std::unique_ptr<ClaimsJobManager>> ClaimsJobManager::Create(pipelines::ClaimsPipeline* pipeline,
                                                                   storage::Database* db,
                                                                   ClaimsJobManagerOptions options) {
  std::error_code ec;
  fs::create_directories(options.config.output_dir, ec);
  if (ec) return Internal("cannot create the jobs output directory " + options.config.output_dir + ": " + ec.message());
  std::unique_ptr<ClaimsJobManager> manager(new ClaimsJobManager(pipeline, db, std::move(options)));
  TXSCORE_RETURN_IF_ERROR(manager->ResumeInterruptedJobs());
  manager->worker_ = std::thread([m = manager.get()] { m->Work(); });
  return manager;
}

txscore::Status ClaimsJobManager::ResumeInterruptedJobs() {
  Result<std::map<std::string, pipelines::ClaimsJobRecord>> records = pipelines::ListClaimsJobs(*db_);
  if (!records.ok()) return records.error();
  for (const auto& [id, record] : *records) {
    // Only jobs this server ran: `txscore batch run` against the same database is left alone.
    if (id != JobIdOf(record.input)) continue;
    if (record.state != pipelines::ClaimsJobState::kQueued && record.state != pipelines::ClaimsJobState::kRunning &&
        record.state != pipelines::ClaimsJobState::kInterrupted)
      continue;
    Result<ClaimsJobView> queued =
        Enqueue(record.input, IsInlineInput(record.input, options_.config.output_dir), record.restart);
    if (!queued.ok()) return queued.error();
    if (record.state == pipelines::ClaimsJobState::kQueued) {
      Log("claims").info("claims job {} was queued when the server stopped; queued again", id);
    } else {
      Log("claims").info(
          "claims job {} was {} at {} of {} rows; resuming it", id,
          record.state == pipelines::ClaimsJobState::kRunning ? "stopped by a crash" : "interrupted by a server stop",
          record.done, record.total);
    }
  }
  return txscore::Status::Ok();
}

ClaimsJobManager::~ClaimsJobManager() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    interrupt_.store(true);  // the running job stops after its chunk and resumes at the next start
  }
  if (options_.on_stopping) options_.on_stopping();
  wake_.notify_all();
  if (worker_.joinable()) worker_.join();
}

Result<ClaimsJobView> ClaimsJobManager::SubmitFile(const std::string& relative_path, bool restart) {
  std::error_code ec;
  const fs::path dir = fs::weakly_canonical(options_.config.input_dir, ec);
  const fs::path path = fs::weakly_canonical(fs::path(options_.config.input_dir) / relative_path, ec);
  if (relative_path.empty() || ec || !Inside(path, dir)) {
    return InvalidArgument("input_path must name a file inside the server's jobs input directory", "input_path");
  }
  if (!fs::is_regular_file(path, ec)) {
    return InvalidArgument("no file " + relative_path + " in the server's jobs input directory", "input_path");
  }
  return Enqueue(path.string(), /*inline_input=*/false, restart);
}

Result<ClaimsJobView> ClaimsJobManager::SubmitClaims(const std::vector<fraud::RawClaim>& claims, bool restart) {
  if (claims.empty()) return InvalidArgument("a job needs at least one claim", "claims");
  std::string text;
  for (size_t i = 0; i < claims.size(); ++i) {
    Result<fraud::RawClaim> stored = fraud::ClaimForStorage(claims[i], pipeline_->tokenizer());
    if (!stored.ok()) {
      return InvalidArgument("claims[" + std::to_string(i) + "]: " + stored.error().message, "claims");
    }
    text += fraud::ClaimToJson(*stored) + "\n";
  }
  const fs::path path = fs::path(options_.config.output_dir) / ("inline-" + pipelines::ShortDigest(text) + ".jsonl");
  std::lock_guard<std::mutex> inline_lock(inline_inputs_mutex_);
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    // The job record that will point at this file is synced: the file must be durable first.
    const std::string tmp = path.string() + ".tmp";
    TXSCORE_RETURN_IF_ERROR(WriteFileDurably(tmp, text));
    fs::rename(tmp, path, ec);
    if (ec) return Internal("cannot write " + path.string() + ": " + ec.message());
    TXSCORE_RETURN_IF_ERROR(SyncDirectory(path.parent_path().string()));
  }
  Result<std::string> digest = Sha256Hex(text);  // the claims in the request: no file is read
  if (!digest.ok()) return digest.error();
  return Enqueue(fs::weakly_canonical(path, ec).string(), /*inline_input=*/true, restart, *digest);
}

std::string ClaimsJobManager::OutputOf(const std::string& input) const {
  return (fs::path(options_.config.output_dir) / (pipelines::ShortDigest(input) + ".out.jsonl"))
      .lexically_normal()
      .string();
}

std::string ClaimsJobManager::JobIdOf(const std::string& input) const {
  std::error_code ec;
  return pipelines::ClaimsJobId(input, fs::absolute(OutputOf(input), ec).lexically_normal().string());
}

Result<ClaimsJobView> ClaimsJobManager::Enqueue(const std::string& input, bool inline_input, bool restart,
                                                const std::string& content_sha256) {
  const std::string output = OutputOf(input);
  const std::string id = JobIdOf(input);
  // A finished job submitted again over the same input answers with its result and scores
  // nothing. The request's thread reads no input to tell (a file may be large): inline claims
  // are compared by their digest, a file by its stamp (common/file_io.h FileVersionStamp) when
  // the job last hashed it. A file whose stamp changed (or a record without one) is queued,
  // and the job hashes it on its own thread: the same content ends at once, done, and other
  // content fails saying so, as it would have without this shortcut.
  std::optional<pipelines::ClaimsJobRecord> finished;
  if (!restart) {
    Result<std::optional<pipelines::ClaimsJobRecord>> record = pipelines::ReadClaimsJob(*db_, id);
    if (!record.ok()) return record.error();
    if (record->has_value() && (*record)->state == pipelines::ClaimsJobState::kDone) {
      const pipelines::ClaimsJobRecord& done = **record;
      const bool unchanged = !content_sha256.empty()
                                 ? content_sha256 == done.input_sha256
                                 : !done.input_version.empty() && FileVersionStamp(input) == done.input_version;
      if (unchanged) finished = std::move(*record);
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopping_) return FailedPrecondition("the server is stopping");
  auto known = jobs_.find(id);
  if (known != jobs_.end() && known->second->view.state == JobState::kRunning && restart) {
    return FailedPrecondition("job " + id + " is running; cancel it first (txscore job cancel --id " + id +
                              "), then submit it again with restart");
  }
  if (known != jobs_.end() &&
      (known->second->view.state == JobState::kQueued || known->second->view.state == JobState::kRunning)) {
    if (restart && !known->second->restart) {
      // Kept in the record too, for a server stop before the job starts.
      std::error_code ec;
      TXSCORE_RETURN_IF_ERROR(pipelines::SetClaimsJobState(*db_, input,
                                                           fs::absolute(output, ec).lexically_normal().string(),
                                                           pipelines::ClaimsJobState::kQueued, "", true));
      known->second->restart = true;
    }
    return known->second->view;  // already on its way
  }
  // The record says "queued", so that a server stop before the job starts does not lose it (a
  // finished job's stays done).
  std::error_code ec;
  const std::string absolute_output = fs::absolute(output, ec).lexically_normal().string();
  Result<std::optional<pipelines::ClaimsJobRecord>> record = pipelines::ReadClaimsJob(*db_, id);
  if (!record.ok()) return record.error();
  auto job = std::make_shared<Job>();
  job->input = input;
  job->inline_input = inline_input;
  job->restart = restart;
  job->view.job_id = id;
  job->view.output_path = output;
  if (finished.has_value()) {
    job->view = ViewOfRecord(id, *finished);
    job->view.output_path = output;
  } else {
    TXSCORE_RETURN_IF_ERROR(
        pipelines::SetClaimsJobState(*db_, input, absolute_output, pipelines::ClaimsJobState::kQueued, "", restart));
    job->view.state = JobState::kQueued;
    // A job that resumes shows how far it got; one that starts over starts from nothing.
    if (!restart && record->has_value()) {
      job->view.done = (*record)->done;
      job->view.total = (*record)->total;
      job->view.errors = (*record)->errors;
    }
  }
  if (jobs_.count(id) == 0) submitted_.push_back(id);
  jobs_[id] = job;
  if (finished.has_value()) {
    // Inline claims submitted again were written again: personal data kept only for a job,
    // so gone at once.
    if (inline_input) RemoveInlineInput(id, input);
    return job->view;
  }
  queue_.push_back(job);
  wake_.notify_all();
  return job->view;
}

void ClaimsJobManager::RemoveInlineInput(const std::string& job_id, const std::string& input) const {
  std::error_code removed;
  if (!fs::remove(input, removed) && removed) {
    Log("claims").warn("claims job {}: cannot remove its inline input {}: {}", job_id, input, removed.message());
  }
}

const char* JobStateName(JobState state) {
  switch (state) {
    case JobState::kQueued:
      return "queued";
    case JobState::kRunning:
      return "running";
    case JobState::kDone:
      return "done";
    case JobState::kCancelled:
      return "cancelled";
    case JobState::kFailed:
      return "failed";
    case JobState::kInterrupted:
      return "interrupted";
    case JobState::kDegraded:
      return "degraded";
  }
  return "unknown";
}

std::vector<ClaimsJobView> ClaimsJobManager::Snapshot() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<ClaimsJobView> views;
  views.reserve(submitted_.size());
  for (const std::string& id : submitted_) views.push_back(jobs_.at(id)->view);
  return views;
}

Result<ClaimsJobView> ClaimsJobManager::Status(const std::string& job_id) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = jobs_.find(job_id);
    if (it != jobs_.end()) return it->second->view;
  }
  // A job of an earlier run of the server: what its record says.
  Result<std::optional<pipelines::ClaimsJobRecord>> record = pipelines::ReadClaimsJob(*db_, job_id);
  if (!record.ok()) return record.error();
  if (!record->has_value()) return NotFound("no claims job " + RedactCardNumbersIn(job_id));
  return ViewOfRecord(job_id, **record);
}

ClaimsJobView ClaimsJobManager::ViewOfRecord(const std::string& job_id, const pipelines::ClaimsJobRecord& r) const {
  ClaimsJobView view;
  view.job_id = job_id;
  view.done = r.done;
  view.total = r.total;
  view.errors = r.errors;
  view.output_path = r.output;
  view.claims_per_s = r.elapsed_s > 0 ? static_cast<double>(r.done) / r.elapsed_s : 0;
  view.llm_selected = r.llm_selected;
  view.llm_shortfalls = r.llm_shortfalls;
  if (r.state == pipelines::ClaimsJobState::kDone) {
    SetFinished(&view);
  } else if (r.state == pipelines::ClaimsJobState::kFailed) {
    view.state = JobState::kFailed;
    view.detail = r.error;
  } else if (r.state == pipelines::ClaimsJobState::kCancelled) {
    view.state = JobState::kCancelled;
    view.detail = "cancelled; submit it again to resume";
  } else if (r.state == pipelines::ClaimsJobState::kQueued) {
    view.state = JobState::kQueued;
  } else {  // running or interrupted, and not running here: a job of `txscore batch run`, or of another server
    view.state = JobState::kInterrupted;
    view.detail = "stopped by a " + std::string(r.state == pipelines::ClaimsJobState::kRunning ? "crash" : "stop") +
                  " at " + std::to_string(r.done) + " of " + std::to_string(r.total) +
                  " rows; submit it again to resume";
  }
  return view;
}

Result<ClaimsJobView> ClaimsJobManager::Cancel(const std::string& job_id) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = jobs_.find(job_id);
    if (it != jobs_.end()) {
      Job& job = *it->second;
      if (job.view.state == JobState::kQueued) {
        for (auto q = queue_.begin(); q != queue_.end(); ++q) {
          if (q->get() == &job) {
            queue_.erase(q);
            break;
          }
        }
        job.view.state = JobState::kCancelled;
        job.view.detail = "cancelled before it started";
        std::error_code ec;
        TXSCORE_RETURN_IF_ERROR(pipelines::SetClaimsJobState(
            *db_, job.input, fs::absolute(job.view.output_path, ec).lexically_normal().string(),
            pipelines::ClaimsJobState::kCancelled));
      } else if (job.view.state == JobState::kRunning) {
        job.cancel.store(true);
      }
      return job.view;
    }
  }
  return Status(job_id);  // not running here: nothing to stop
}

void ClaimsJobManager::SetFinished(ClaimsJobView* view) const {
  int64_t shortfalls = 0;
  std::string reasons;
  for (const auto& [reason, claims] : view->llm_shortfalls) {
    shortfalls += claims;
    reasons += (reasons.empty() ? "" : ", ") + reason + " " + std::to_string(claims);
  }
  view->detail.clear();
  view->state = JobState::kDone;
  if (shortfalls == 0) return;
  view->detail = "the LLM stage wrote no findings for " + std::to_string(shortfalls) + " of the " +
                 std::to_string(view->llm_selected) + " claims it was asked to read (" + reasons +
                 "; \"llm_shortfalls\" in the output says why); score them again with txscore batch run "
                 "--retry-llm-shortfalls";
  if (static_cast<double>(shortfalls) >
      options_.config.max_llm_shortfall_share * static_cast<double>(view->llm_selected)) {
    view->state = JobState::kDegraded;
  }
}

void ClaimsJobManager::Work() {
  if (options_.config.priority == JobsConfig::Priority::kIdle) {
    if (txscore::Status lowered = LowerThisThreadPriority(); !lowered.ok()) {
      Log("claims").warn("claims jobs run at normal priority: {}", lowered.error().message);
    }
  }
  while (true) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      job = queue_.front();
      queue_.pop_front();
      job->view.state = JobState::kRunning;
      job->cancel.store(false);
    }
    if (options_.before_job) options_.before_job(job->view.job_id);
    pipelines::ClaimsJobOptions run;
    run.input_path = job->input;
    run.output_path = job->view.output_path;
    run.chunk_size = options_.config.chunk;
    run.max_error_share = options_.config.max_error_share;
    run.restart = job->restart;
    run.cancel = &job->cancel;
    run.interrupt = &interrupt_;
    // The running job's rate is this run's: rows it finished over the time since it started.
    const auto run_started = std::chrono::steady_clock::now();
    run.progress = [this, &job, run_started](const pipelines::ClaimsJobProgress& p) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        job->view.done = p.done;
        job->view.total = p.total;
        job->view.errors = p.errors;
        job->view.llm_selected = p.llm_selected;
        job->view.llm_shortfalls = p.llm_shortfalls;
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_started).count();
        if (seconds > 0) job->view.claims_per_s = static_cast<double>(p.done - p.resumed_at) / seconds;
      }
      if (options_.after_progress) options_.after_progress(job->view.job_id, p.done);
    };
    Log("claims").info("claims job {} started: {} -> {}", job->view.job_id, RedactPans(job->input),
                       RedactPans(job->view.output_path));
    Result<pipelines::ClaimsJobSummary> summary = pipelines::RunClaimsJob(*pipeline_, *db_, run);
    // Inline claims are personal data kept only for the job: gone once it is done or failed.
    std::unique_lock<std::mutex> inline_lock(inline_inputs_mutex_, std::defer_lock);
    if (job->inline_input) inline_lock.lock();
    if (job->inline_input && (!summary.ok() || summary->state == pipelines::ClaimsJobState::kDone)) {
      RemoveInlineInput(job->view.job_id, job->input);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    job->restart = false;
    if (!summary.ok()) {
      job->view.state = JobState::kFailed;
      job->view.detail = RedactPans(summary.error().message);  // may quote the input's values
      if (summary.error().code == ErrorCode::kFailedPrecondition && summary.error().field == "input") {
        job->view.detail =
            "its input file has changed since the job began; to start over on the new file, submit it "
            "again with restart (txscore job submit --input NAME --restart)";
      } else if (summary.error().field == "max_error_share") {  // stopped early: the way out, in a client's words
        const std::string& message = summary.error().message;
        job->view.detail = RedactPans(message.substr(0, message.find(" Fix it"))) +
                           " Fix it and submit it again with restart (txscore job submit --input NAME --restart)";
      }
      // RunClaimsJob recorded the failure in its own words; the record gets the server's.
      std::error_code ec;
      if (txscore::Status saved = pipelines::SetClaimsJobState(
              *db_, job->input, fs::absolute(job->view.output_path, ec).lexically_normal().string(),
              pipelines::ClaimsJobState::kFailed, job->view.detail);
          !saved.ok()) {
        Log("claims").error("claims job {}: cannot record its failure: {}", job->view.job_id, saved.error().ToString());
      }
      // The progress it keeps for a resume (this run may have failed before reporting any).
      if (Result<std::optional<pipelines::ClaimsJobRecord>> record = pipelines::ReadClaimsJob(*db_, job->view.job_id);
          record.ok() && record->has_value()) {
        job->view.done = (*record)->done;
        job->view.total = (*record)->total;
        job->view.errors = (*record)->errors;
      }
      // Any error (not only a refused claim's) may quote the input's values.
      Log("claims").warn("claims job {} failed: {}", job->view.job_id, RedactPans(summary.error().ToString()));
      continue;
    }
    job->view.done = summary->done;
    job->view.total = summary->total;
    job->view.errors = summary->errors;
    job->view.claims_per_s = summary->claims_per_s();
    job->view.llm_selected = summary->llm_selected;
    job->view.llm_shortfalls = summary->llm_shortfalls;
    if (summary->state == pipelines::ClaimsJobState::kDone) {
      SetFinished(&job->view);
    } else if (summary->state == pipelines::ClaimsJobState::kInterrupted) {
      job->view.state = JobState::kInterrupted;
      job->view.detail = "interrupted by the server stopping; it resumes when the server starts again";
    } else {
      job->view.state = JobState::kCancelled;
      job->view.detail = "stopped after " + std::to_string(summary->done) + " rows; submit it again to resume";
    }
    Log("claims").info("claims job {} {}: {} of {} rows", job->view.job_id,
                       pipelines::ClaimsJobStateName(summary->state), summary->done, summary->total);
  }
}

}  // namespace txscore::service
