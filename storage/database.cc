#include "storage/database.h"

#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/options.h>
#include <rocksdb/statistics.h>
#include <rocksdb/write_batch.h>

#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "common/logging.h"
#include "common/utc_time.h"

namespace txscore::storage {
namespace {

constexpr ColumnFamily kAllFamilies[] = {ColumnFamily::kEntityState, ColumnFamily::kAudit, ColumnFamily::kJobs};

Error FromRocks(const rocksdb::Status& s, const std::string& what) {
  const std::string message = what + ": " + s.ToString();
  if (s.IsNotFound()) return NotFound(message);
  if (s.IsCorruption()) return DataLoss(message);
  if (s.IsBusy() || s.IsTimedOut() || s.IsTryAgain()) return Error{ErrorCode::kUnavailable, message, {}};
  if (s.IsIOError() && s.ToString().find("lock") != std::string::npos) {
    return FailedPrecondition(message + " (is another txscore using this database? read-only tools may run beside it)");
  }
  return Internal(message);
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A file the database writes, failing as on a full disk while the test's switch is on.
class FaultyWritableFile : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  FaultyWritableFile(std::unique_ptr<rocksdb::FSWritableFile> file, std::shared_ptr<WriteFaults> faults)
      : FSWritableFileOwnerWrapper(std::move(file)), faults_(std::move(faults)) {}
  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                           rocksdb::IODebugContext* dbg) override {
    if (faults_->no_space) return NoSpace();
    return FSWritableFileOwnerWrapper::Append(data, options, dbg);
  }
  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                           const rocksdb::DataVerificationInfo& info, rocksdb::IODebugContext* dbg) override {
    if (faults_->no_space) return NoSpace();
    return FSWritableFileOwnerWrapper::Append(data, options, info, dbg);
  }
  rocksdb::IOStatus Flush(const rocksdb::IOOptions& options, rocksdb::IODebugContext* dbg) override {
    if (faults_->no_space) return NoSpace();
    return FSWritableFileOwnerWrapper::Flush(options, dbg);
  }
  rocksdb::IOStatus Sync(const rocksdb::IOOptions& options, rocksdb::IODebugContext* dbg) override {
    if (faults_->no_space) return NoSpace();
    if (faults_->sync_io_error) return SyncFailed();
    return FSWritableFileOwnerWrapper::Sync(options, dbg);
  }
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions& options, rocksdb::IODebugContext* dbg) override {
    if (faults_->no_space) return NoSpace();
    if (faults_->sync_io_error) return SyncFailed();
    return FSWritableFileOwnerWrapper::Fsync(options, dbg);
  }
  rocksdb::IOStatus RangeSync(uint64_t offset, uint64_t nbytes, const rocksdb::IOOptions& options,
                              rocksdb::IODebugContext* dbg) override {
    if (faults_->no_space) return NoSpace();
    if (faults_->sync_io_error) return SyncFailed();
    return FSWritableFileOwnerWrapper::RangeSync(offset, nbytes, options, dbg);
  }

 private:
  static rocksdb::IOStatus NoSpace() { return rocksdb::IOStatus::NoSpace("injected", "No space left on device"); }
  static rocksdb::IOStatus SyncFailed() { return rocksdb::IOStatus::IOError("injected", "Input/output error"); }
  std::shared_ptr<WriteFaults> faults_;
};

class FaultyFileSystem : public rocksdb::FileSystemWrapper {
 public:
  FaultyFileSystem(const std::shared_ptr<rocksdb::FileSystem>& base, std::shared_ptr<WriteFaults> faults)
      : FileSystemWrapper(base), faults_(std::move(faults)) {}
  const char* Name() const override { return "TxscoreFaultyFileSystem"; }
  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* dbg) override {
    if (faults_->no_space) return rocksdb::IOStatus::NoSpace("injected", "No space left on device");
    if (faults_->manifest_io_error && f.find("MANIFEST") != std::string::npos) {
      return rocksdb::IOStatus::IOError("injected", "Input/output error");
    }
    rocksdb::IOStatus s = FileSystemWrapper::NewWritableFile(f, options, result, dbg);
    if (s.ok()) *result = std::make_unique<FaultyWritableFile>(std::move(*result), faults_);
    return s;
  }
  rocksdb::IOStatus ReopenWritableFile(const std::string& f, const rocksdb::FileOptions& options,
                                       std::unique_ptr<rocksdb::FSWritableFile>* result,
                                       rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = FileSystemWrapper::ReopenWritableFile(f, options, result, dbg);
    if (s.ok()) *result = std::make_unique<FaultyWritableFile>(std::move(*result), faults_);
    return s;
  }

 private:
  std::shared_ptr<WriteFaults> faults_;
};

// RocksDB's own log, in txscore's (component "rocksdb"), warnings and worse only. RocksDB would
// otherwise write a LOG file into the database's directory, on the disk that may fill up: on a
// full disk, RocksDB 7.8's file logger asserts (aborting the process, as Debian builds it) on
// the write after one that failed.
class RocksLogToTxscore : public rocksdb::Logger {
 public:
  RocksLogToTxscore() : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL) {}
  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override { Logv(rocksdb::InfoLogLevel::INFO_LEVEL, format, ap); }
  void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override {
    if (level < GetInfoLogLevel()) return;
    // One line per message (RocksDB's may hold newlines), and at most one per format every
    // 10 s: a reopen retried every second repeats the same few.
    uint64_t suppressed = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      Throttle& throttle = by_format_[format];
      const auto now = std::chrono::steady_clock::now();
      if (throttle.last != std::chrono::steady_clock::time_point() && now - throttle.last < std::chrono::seconds(10)) {
        ++throttle.suppressed;
        return;
      }
      throttle.last = now;
      suppressed = std::exchange(throttle.suppressed, 0);
    }
    char line[1024];
    std::vsnprintf(line, sizeof line, format, ap);
    std::string text(line);
    for (char& c : text) {
      if (c == '\n' || c == '\r') c = ' ';
    }
    while (!text.empty() && text.back() == ' ') text.pop_back();
    if (suppressed > 0) text += " (" + std::to_string(suppressed) + " more like it in the last 10 s)";
    Log("rocksdb").log(level >= rocksdb::InfoLogLevel::ERROR_LEVEL ? spdlog::level::err : spdlog::level::warn, "{}",
                       text);
  }

 private:
  struct Throttle {
    std::chrono::steady_clock::time_point last;
    uint64_t suppressed = 0;
  };
  std::mutex mutex_;
  std::map<const char*, Throttle> by_format_;  // RocksDB's formats are string literals: a few dozen
};

// Resumes that may fail, the disk taking the probe file each time, before the database is
// reopened instead. RocksDB may be recovering by itself and answer Resume with Busy: its own
// recovery from a full disk waits for room to flush a whole write buffer (64 MiB), which a
// small disk never has (seen on a 20 MiB filesystem: Busy for as long as it was tried).
constexpr int kResumesBeforeReopen = 3;

// What a failed write tells the caller: why, never where (the path is the operator's, in the log).
std::string WriteStopReason(const rocksdb::Status& s) {
  if (s.IsNoSpace() || s.ToString().find("No space left") != std::string::npos) {
    return "no space left on the database's disk";
  }
  return "an I/O error on the database's disk";
}

}  // namespace

const char* ColumnFamilyName(ColumnFamily cf) {
  switch (cf) {
    case ColumnFamily::kEntityState:
      return "entity_state";
    case ColumnFamily::kAudit:
      return "audit";
    case ColumnFamily::kJobs:
      return "jobs";
  }
  return "unknown";
}

Result<Durability> ParseDurability(std::string_view name) {
  if (name == "sync") return Durability::kSync;
  if (name == "wal") return Durability::kWal;
  return InvalidArgument("durability must be \"sync\" or \"wal\", not \"" + std::string(name) + "\"");
}

// The RocksDB instance and its column family handles, replaced whole when the database is
// reopened: an operation holds a shared_ptr to the one it started with; the last holder to let
// go closes it (the shared_ptr's deleter) and says so to whoever waits for the close.
struct OpenRocks {
  std::unique_ptr<rocksdb::DB> db;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;  // indexed by ColumnFamily, then default last
  uint64_t generation = 0;                            // 1 for the first open, +1 at each later one

  rocksdb::ColumnFamilyHandle* handle(ColumnFamily cf) const { return handles[static_cast<size_t>(cf)]; }
  uint64_t BackgroundErrors() const {
    uint64_t errors = 0;
    return db && db->GetIntProperty(rocksdb::DB::Properties::kBackgroundErrors, &errors) ? errors : 0;
  }
  rocksdb::Status Close() {
    if (!db) return rocksdb::Status::OK();
    for (auto* h : handles) db->DestroyColumnFamilyHandle(h);
    handles.clear();
    rocksdb::Status s = db->Close();
    db.reset();
    return s;
  }
  ~OpenRocks() { Close().PermitUncheckedError(); }  // an unchecked close: Database::Close is the checked one
};

struct Database::Impl {
  std::string path;
  std::unique_ptr<rocksdb::Env> env;  // with write_faults: the faulty file system's (outlives every open)
  std::shared_ptr<rocksdb::FileSystem> file_system = rocksdb::FileSystem::Default();  // the database's
  rocksdb::DBOptions db_options;
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  rocksdb::WriteOptions write_options;
  std::shared_ptr<rocksdb::Statistics> statistics;  // shared by every open: counts since Database::Open

  // The open instance: null once closed, and while a reopen finds none to open.
  // `open_released` gets it back once its last holder lets go.
  mutable std::mutex open_mutex;
  std::shared_ptr<OpenRocks> open;
  std::future<std::unique_ptr<OpenRocks>> open_released;
  bool closed = false;
  std::atomic<uint64_t> generation{0};
  uint64_t earlier_background_errors = 0;  // of the instances closed by reopens (under open_mutex)

  // Writes stopped by a failed write, and the thread that tries to resume them.
  mutable std::mutex health_mutex;
  std::condition_variable health_changed;
  std::atomic<bool> writes_stopped{false};
  std::string stop_reason;
  int64_t stopped_since_ms = 0;
  uint64_t stops = 0;
  uint64_t recoveries = 0;
  uint64_t reopens = 0;
  bool closing = false;
  std::chrono::milliseconds resume_every{1000};
  std::thread resumer;

  // Opens the database (read-only when `read_only_open`) and makes it the instance operations
  // run on.
  rocksdb::Status OpenRocksDb(bool read_only_open) {
    auto next = std::make_unique<OpenRocks>();
    rocksdb::DB* raw = nullptr;
    rocksdb::Status s = read_only_open
                            ? rocksdb::DB::OpenForReadOnly(db_options, path, descriptors, &next->handles, &raw)
                            : rocksdb::DB::Open(db_options, path, descriptors, &next->handles, &raw);
    if (!s.ok()) return s;
    next->db.reset(raw);
    // The last holder to let go hands the instance to whoever waits to close it (TakeAndClose),
    // so that no request thread closes RocksDB; unclaimed, it closes itself.
    auto released = std::make_shared<std::promise<std::unique_ptr<OpenRocks>>>();
    std::future<std::unique_ptr<OpenRocks>> released_future = released->get_future();
    std::shared_ptr<OpenRocks> shared(
        next.release(), [released](OpenRocks* instance) { released->set_value(std::unique_ptr<OpenRocks>(instance)); });
    std::lock_guard<std::mutex> lock(open_mutex);
    if (closed) return rocksdb::Status::Aborted("closed while reopening");  // `shared` closes itself
    shared->generation = generation + 1;
    open = std::move(shared);
    open_released = std::move(released_future);
    generation = open->generation;
    return s;
  }

  // Takes the instance away from new operations, waits until the ones under way let go of it
  // (each holds it for one read, write or scan), and closes it on this thread: its close's
  // status, OK when there was none.
  rocksdb::Status TakeAndClose(bool closing_for_good) {
    std::shared_ptr<OpenRocks> old;
    std::future<std::unique_ptr<OpenRocks>> old_released;
    {
      std::lock_guard<std::mutex> lock(open_mutex);
      if (closing_for_good) closed = true;
      if (!open) return rocksdb::Status::OK();
      earlier_background_errors += open->BackgroundErrors();
      old = std::move(open);
      old_released = std::move(open_released);
    }
    old.reset();
    return old_released.get()->Close();
  }

  // The instance to run one operation on; nullopt-like null when closed or being reopened.
  std::shared_ptr<OpenRocks> Current() const {
    std::lock_guard<std::mutex> lock(open_mutex);
    return open;
  }

  // Why there is no instance: closed, or a reopen under way.
  Error NotOpen() const {
    {
      std::lock_guard<std::mutex> lock(open_mutex);
      if (closed) return FailedPrecondition("database " + path + " is closed");
    }
    return Error{ErrorCode::kUnavailable, "the database is being reopened after a failed write", {}};
  }

  // After a write failed with `s`: stops writes (once) and starts trying to resume them.
  void WritesFailed(const rocksdb::Status& s) {
    static RateLimitedWarning failed_writes("storage", std::chrono::seconds(10));
    failed_writes.Warn("a write to database {} failed: {}", path, s.ToString());
    std::lock_guard<std::mutex> lock(health_mutex);
    if (writes_stopped || closing) return;
    writes_stopped = true;
    stop_reason = WriteStopReason(s);
    stopped_since_ms = NowMs();
    ++stops;
    Log("storage").error("database {} takes no writes: {} ({}); retrying every {} ms", path, stop_reason, s.ToString(),
                         resume_every.count());
    if (resumer.joinable()) resumer.join();  // the previous episode's, finished
    resumer = std::thread([this] { ResumeLoop(); });
  }

  // Every resume_every: a probe file written and synced beside the database, then RocksDB's
  // Resume (which flushes what it holds and writes its MANIFEST), then a probe write with the
  // writes' own options; writes are taken again once all three succeed. The probe file comes
  // first because a Resume on a disk still full may turn the error fatal. When RocksDB calls
  // the error fatal (no Resume clears it: a failed sync, or space running out mid-flush), or
  // Resume has failed kResumesBeforeReopen times in a row with the probe file written (Busy:
  // RocksDB's own full-disk recovery never ends on a disk smaller than its write buffer), the
  // database is closed and opened again instead, as a restart would; the reopen replays RocksDB's log, which may hold a
  // write that was reported as failed (its sync failed after the bytes were appended), and generation() tells readers
  // of state kept in memory (the audit trail's chain head) to read it again.
  void ResumeLoop() {
    std::unique_lock<std::mutex> lock(health_mutex);
    bool needs_reopen = false;
    int resumes_failed_with_space = 0;  // in a row, the probe file written each time
    while (!closing) {
      health_changed.wait_for(lock, resume_every, [this] { return closing; });
      if (closing) return;
      lock.unlock();
      rocksdb::Status s = ProbeDisk();
      if (!s.ok()) {
        resumes_failed_with_space = 0;
      } else if (needs_reopen) {
        s = Reopen();
      } else {
        s = ResumeCurrent();
        if (!s.ok() && (s.severity() >= rocksdb::Status::Severity::kFatalError ||
                        ++resumes_failed_with_space >= kResumesBeforeReopen)) {
          Log("storage").error("database {} cannot resume writes ({}): closing and opening it again", path,
                               s.ToString());
          needs_reopen = true;
          s = Reopen();
        }
      }
      if (s.ok()) {
        if (needs_reopen) resumes_failed_with_space = 0;
        needs_reopen = false;
        s = ProbeWrite();
      }
      if (!s.ok()) {
        static RateLimitedWarning not_yet("storage", std::chrono::seconds(10));
        not_yet.Warn("database {} takes no writes yet: {}", path, s.ToString());
      }
      lock.lock();
      if (s.ok()) {
        writes_stopped = false;
        ++recoveries;
        Log("storage").warn("database {} takes writes again (stopped {} ms)", path, NowMs() - stopped_since_ms);
        return;
      }
    }
  }

  rocksdb::Status ResumeCurrent() {
    std::shared_ptr<OpenRocks> current = Current();
    return current ? current->db->Resume() : rocksdb::Status::Aborted("not open");
  }

  // Closes the instance (once every operation on it has finished) and opens the database again.
  // Should the writable open fail (space ran out again, say), the database is opened read-only
  // meanwhile, so that reads go on while writes stay stopped, and the next try reopens it.
  rocksdb::Status Reopen() {
    {
      std::lock_guard<std::mutex> lock(open_mutex);
      if (closed) return rocksdb::Status::Aborted("closed");
    }
    const rocksdb::Status closed_status = TakeAndClose(/*closing_for_good=*/false);
    if (!closed_status.ok()) Log("storage").debug("database {} closed with {}", path, closed_status.ToString());
    rocksdb::Status s = OpenRocksDb(/*read_only_open=*/false);
    if (s.ok()) {
      std::lock_guard<std::mutex> lock(health_mutex);
      ++reopens;
      Log("storage").warn("database {} reopened (generation {})", path, generation.load());
      return s;
    }
    static RateLimitedWarning not_opened("storage", std::chrono::seconds(10));
    const rocksdb::Status reading = OpenRocksDb(/*read_only_open=*/true);
    not_opened.Warn("database {} could not be opened again for writing ({}); {}, retrying every {} ms", path,
                    s.ToString(), reading.ok() ? "open read-only meanwhile" : "nor read-only: " + reading.ToString(),
                    resume_every.count());
    return s;
  }

  rocksdb::Status ProbeWrite() {
    std::shared_ptr<OpenRocks> current = Current();
    if (!current) return rocksdb::Status::Aborted("not open");
    rocksdb::WriteBatch probe;
    rocksdb::Status s = probe.Put(current->handle(ColumnFamily::kJobs), "write-probe", "");
    if (s.ok()) s = current->db->Write(write_options, &probe);
    return s;
  }

  // Writes and syncs kProbeBytes to a file in the database's directory, through the database's
  // own file system, then removes it. Space for the probe does not promise space for the
  // flush, but a disk that cannot take it certainly cannot take the flush.
  rocksdb::Status ProbeDisk() const {
    constexpr size_t kProbeBytes = 1 << 20;
    const std::string probe_path = path + "/txscore-space-probe";
    std::unique_ptr<rocksdb::FSWritableFile> file;
    rocksdb::IOStatus s = file_system->NewWritableFile(probe_path, rocksdb::FileOptions(), &file, nullptr);
    if (s.ok()) {
      const std::string block(64 << 10, '\0');
      for (size_t written = 0; s.ok() && written < kProbeBytes; written += block.size()) {
        s = file->Append(block, rocksdb::IOOptions(), nullptr);
      }
      if (s.ok()) s = file->Sync(rocksdb::IOOptions(), nullptr);
      rocksdb::IOStatus closed_status = file->Close(rocksdb::IOOptions(), nullptr);
      if (s.ok()) s = closed_status;
      file.reset();
      file_system->DeleteFile(probe_path, rocksdb::IOOptions(), nullptr).PermitUncheckedError();
    }
    return s;
  }

  rocksdb::Status Close() {
    {
      std::lock_guard<std::mutex> lock(health_mutex);
      closing = true;
      health_changed.notify_all();
    }
    if (resumer.joinable()) resumer.join();
    return TakeAndClose(/*closing_for_good=*/true);
  }
  ~Impl() { Close().PermitUncheckedError(); }
};

Database::Database(std::unique_ptr<Impl> impl, std::string path) : impl_(std::move(impl)), path_(std::move(path)) {}
Database::~Database() = default;

Result<std::unique_ptr<Database>> Database::Open(const std::string& path, const DatabaseOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  rocksdb::DBOptions& db_options = impl->db_options;
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;
  db_options.max_open_files = options.max_open_files;
  db_options.statistics = rocksdb::CreateDBStatistics();  // tickers only (WAL syncs): cheap
  db_options.info_log = std::make_shared<RocksLogToTxscore>();
  impl->statistics = db_options.statistics;
  rocksdb::ColumnFamilyOptions cf_options;
  for (ColumnFamily cf : kAllFamilies) impl->descriptors.emplace_back(ColumnFamilyName(cf), cf_options);
  impl->descriptors.emplace_back(rocksdb::kDefaultColumnFamilyName, cf_options);
  impl->resume_every = std::chrono::milliseconds(options.resume_every_ms);
  if (options.write_faults) {
    impl->file_system = std::make_shared<FaultyFileSystem>(rocksdb::FileSystem::Default(), options.write_faults);
    impl->env = rocksdb::NewCompositeEnv(impl->file_system);
    db_options.env = impl->env.get();
  }
  impl->write_options.sync = options.durability == Durability::kSync;
  if (!options.read_only) {
    // Made here, not by RocksDB, which logs a missing directory as an error before making it.
    std::error_code ignored;  // Open reports what matters
    std::filesystem::create_directories(path, ignored);
  }
  rocksdb::Status s = impl->OpenRocksDb(options.read_only);
  if (!s.ok()) return FromRocks(s, "cannot open database " + path);
  return std::unique_ptr<Database>(new Database(std::move(impl), path));
}

Status Database::Close() {
  rocksdb::Status s = impl_->Close();
  if (!s.ok()) return FromRocks(s, "close database " + path_);
  return Status::Ok();
}

uint64_t Database::generation() const { return impl_->generation; }

Status Database::CheckHealth() const {
  std::shared_ptr<OpenRocks> open = impl_->Current();
  const WriteHealth health = write_health();
  if (health.stopped) {
    return Error{ErrorCode::kUnavailable,
                 "takes no writes since " + FormatUtcTime(health.stopped_since_ms * 1000) + ": " + health.reason +
                     "; retrying every " + std::to_string(impl_->resume_every.count()) + " ms",
                 {}};
  }
  if (!open) return impl_->NotOpen();
  std::string ignored;
  rocksdb::Status s =
      open->db->Get(rocksdb::ReadOptions(), open->handle(ColumnFamily::kJobs), "readyz-probe", &ignored);
  if (!s.ok() && !s.IsNotFound()) return FromRocks(s, "probe read of " + path_);
  return Status::Ok();
}

Database::WriteHealth Database::write_health() const {
  std::lock_guard<std::mutex> lock(impl_->health_mutex);
  WriteHealth health;
  health.stopped = impl_->writes_stopped;
  health.reason = impl_->writes_stopped ? impl_->stop_reason : "";
  health.stopped_since_ms = impl_->writes_stopped ? impl_->stopped_since_ms : 0;
  health.stops = impl_->stops;
  health.recoveries = impl_->recoveries;
  health.reopens = impl_->reopens;
  return health;
}

uint64_t Database::WalSyncs() const {
  return impl_->statistics ? impl_->statistics->getTickerCount(rocksdb::WAL_FILE_SYNCED) : 0;
}

std::optional<Database::ColumnFamilyStats> Database::Stats(ColumnFamily cf) const {
  const std::shared_ptr<OpenRocks> open = impl_->Current();
  if (!open) return std::nullopt;
  rocksdb::ColumnFamilyHandle* handle = open->handle(cf);
  ColumnFamilyStats stats;
  const auto read = [&](const std::string& property, uint64_t* value) {
    if (!open->db->GetIntProperty(handle, property, value)) *value = 0;
  };
  read(rocksdb::DB::Properties::kEstimateNumKeys, &stats.estimated_keys);
  read(rocksdb::DB::Properties::kTotalSstFilesSize, &stats.sst_bytes);
  read(rocksdb::DB::Properties::kCurSizeAllMemTables, &stats.memtable_bytes);
  read(rocksdb::DB::Properties::kEstimatePendingCompactionBytes, &stats.pending_compaction_bytes);
  return stats;
}

uint64_t Database::BackgroundErrors() const {
  std::lock_guard<std::mutex> lock(impl_->open_mutex);
  return impl_->earlier_background_errors + (impl_->open ? impl_->open->BackgroundErrors() : 0);
}

Result<std::optional<std::string>> Database::Get(ColumnFamily cf, std::string_view key) const {
  const std::shared_ptr<OpenRocks> open = impl_->Current();
  if (!open) return impl_->NotOpen();
  std::string value;
  rocksdb::Status s =
      open->db->Get(rocksdb::ReadOptions(), open->handle(cf), rocksdb::Slice(key.data(), key.size()), &value);
  if (s.IsNotFound()) return std::optional<std::string>();
  if (!s.ok()) return FromRocks(s, std::string("read from ") + ColumnFamilyName(cf));
  return std::optional<std::string>(std::move(value));
}

Status Database::Write(const WriteBatch& batch) {
  if (impl_->writes_stopped) {
    // Fails fast while stopped; the resumer brings writes back.
    std::lock_guard<std::mutex> lock(impl_->health_mutex);
    if (impl_->writes_stopped) {
      return Error{ErrorCode::kUnavailable, "the database takes no writes now: " + impl_->stop_reason, {}};
    }
  }
  const std::shared_ptr<OpenRocks> open = impl_->Current();
  if (!open) return impl_->NotOpen();
  // The instance cannot be replaced while this write holds it, so the check holds for the write.
  if (batch.required_generation_ && open->generation != *batch.required_generation_) {
    return Error{ErrorCode::kUnavailable,
                 "the database was reopened since what this write was made of was read (generation " +
                     std::to_string(*batch.required_generation_) + "); nothing was written",
                 {}};
  }
  rocksdb::WriteBatch rocks_batch;
  for (const WriteBatch::Op& op : batch.ops_) {
    rocksdb::Status s = op.erase ? rocks_batch.Delete(open->handle(op.cf), op.key)
                                 : rocks_batch.Put(open->handle(op.cf), op.key, op.value);
    if (!s.ok()) return FromRocks(s, "prepare write batch");
  }
  rocksdb::Status s = open->db->Write(impl_->write_options, &rocks_batch);
  if (s.IsIOError()) {
    impl_->WritesFailed(s);
    return Error{ErrorCode::kUnavailable, "the database takes no writes now: " + WriteStopReason(s), {}};
  }
  if (!s.ok()) return FromRocks(s, "write batch");
  return Status::Ok();
}

Result<std::vector<std::pair<std::string, std::string>>> Database::ReadLast(ColumnFamily cf, size_t limit) const {
  const std::shared_ptr<OpenRocks> open = impl_->Current();
  if (!open) return impl_->NotOpen();
  std::vector<std::pair<std::string, std::string>> out;
  std::unique_ptr<rocksdb::Iterator> it(open->db->NewIterator(rocksdb::ReadOptions(), open->handle(cf)));
  for (it->SeekToLast(); it->Valid() && out.size() < limit; it->Prev()) {
    out.emplace_back(it->key().ToString(), it->value().ToString());
  }
  if (!it->status().ok()) return FromRocks(it->status(), std::string("scan ") + ColumnFamilyName(cf));
  return out;
}

Status Database::ScanBackward(ColumnFamily cf,
                              const std::function<bool(std::string_view key, std::string_view value)>& visit) const {
  const std::shared_ptr<OpenRocks> open = impl_->Current();
  if (!open) return impl_->NotOpen();
  std::unique_ptr<rocksdb::Iterator> it(open->db->NewIterator(rocksdb::ReadOptions(), open->handle(cf)));
  for (it->SeekToLast(); it->Valid(); it->Prev()) {
    if (!visit(std::string_view(it->key().data(), it->key().size()),
               std::string_view(it->value().data(), it->value().size()))) {
      return Status::Ok();
    }
  }
  if (!it->status().ok()) return FromRocks(it->status(), std::string("scan ") + ColumnFamilyName(cf));
  return Status::Ok();
}

Status Database::ScanForward(ColumnFamily cf, std::string_view from,
                             const std::function<bool(std::string_view key, std::string_view value)>& visit) const {
  const std::shared_ptr<OpenRocks> open = impl_->Current();
  if (!open) return impl_->NotOpen();
  std::unique_ptr<rocksdb::Iterator> it(open->db->NewIterator(rocksdb::ReadOptions(), open->handle(cf)));
  for (it->Seek(rocksdb::Slice(from.data(), from.size())); it->Valid(); it->Next()) {
    if (!visit(std::string_view(it->key().data(), it->key().size()),
               std::string_view(it->value().data(), it->value().size()))) {
      return Status::Ok();
    }
  }
  if (!it->status().ok()) return FromRocks(it->status(), std::string("scan ") + ColumnFamilyName(cf));
  return Status::Ok();
}

Result<std::optional<std::pair<std::string, std::string>>> Database::LastBefore(ColumnFamily cf,
                                                                                std::string_view key) const {
  const std::shared_ptr<OpenRocks> open = impl_->Current();
  if (!open) return impl_->NotOpen();
  std::unique_ptr<rocksdb::Iterator> it(open->db->NewIterator(rocksdb::ReadOptions(), open->handle(cf)));
  const rocksdb::Slice target(key.data(), key.size());
  it->SeekForPrev(target);
  if (it->Valid() && it->key() == target) it->Prev();  // strictly before
  if (!it->status().ok()) return FromRocks(it->status(), std::string("scan ") + ColumnFamilyName(cf));
  if (!it->Valid()) return std::optional<std::pair<std::string, std::string>>();
  return std::optional<std::pair<std::string, std::string>>(
      std::make_pair(it->key().ToString(), it->value().ToString()));
}

Result<std::vector<std::pair<std::string, std::string>>> Database::ReadAll(ColumnFamily cf) const {
  const std::shared_ptr<OpenRocks> open = impl_->Current();
  if (!open) return impl_->NotOpen();
  std::vector<std::pair<std::string, std::string>> out;
  std::unique_ptr<rocksdb::Iterator> it(open->db->NewIterator(rocksdb::ReadOptions(), open->handle(cf)));
  for (it->SeekToFirst(); it->Valid(); it->Next()) out.emplace_back(it->key().ToString(), it->value().ToString());
  if (!it->status().ok()) return FromRocks(it->status(), std::string("scan ") + ColumnFamilyName(cf));
  return out;
}

}  // namespace txscore::storage
