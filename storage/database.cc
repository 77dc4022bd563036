#include "storage/database.h"

#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/options.h>
#include <rocksdb/statistics.h>
#include <rocksdb/write_batch.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

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
    return FSWritableFileOwnerWrapper::Sync(options, dbg);
  }
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions& options, rocksdb::IODebugContext* dbg) override {
    if (faults_->no_space) return NoSpace();
    return FSWritableFileOwnerWrapper::Fsync(options, dbg);
  }

 private:
  static rocksdb::IOStatus NoSpace() { return rocksdb::IOStatus::NoSpace("injected", "No space left on device"); }
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

struct Database::Impl {
  std::unique_ptr<rocksdb::Env> env;  // with write_faults: the faulty file system's (outlives db)
  std::shared_ptr<rocksdb::FileSystem> file_system = rocksdb::FileSystem::Default();  // the database's
  std::unique_ptr<rocksdb::DB> db;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;  // indexed by ColumnFamily, then default last
  rocksdb::WriteOptions write_options;

  rocksdb::ColumnFamilyHandle* handle(ColumnFamily cf) const { return handles[static_cast<size_t>(cf)]; }

  std::shared_ptr<rocksdb::Statistics> statistics;

  // Writes stopped by a failed write, and the thread that tries to resume them.
  mutable std::mutex health_mutex;
  std::condition_variable health_changed;
  std::atomic<bool> writes_stopped{false};
  std::string stop_reason;
  int64_t stopped_since_ms = 0;
  uint64_t stops = 0;
  uint64_t recoveries = 0;
  bool closing = false;
  std::chrono::milliseconds resume_every{1000};
  std::thread resumer;

  // After a write failed with `s`: stops writes (once) and starts trying to resume them.
  void WritesFailed(const rocksdb::Status& s, const std::string& path) {
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
    resumer = std::thread([this, path] { ResumeLoop(path); });
  }

  // Every resume_every: a probe file written and synced beside the database, then RocksDB's
  // Resume (which flushes what it holds and writes its MANIFEST), then a probe write with the
  // writes' own options; writes are taken again once all three succeed. The probe file comes
  // first because a Resume that fails on a disk still full may leave RocksDB with a fatal error
  // that no later Resume clears; if that happens anyway (space ran out again mid-Resume), the
  // reason says a restart is needed, and the thread stops trying.
  void ResumeLoop(const std::string& path) {
    std::unique_lock<std::mutex> lock(health_mutex);
    while (!closing) {
      health_changed.wait_for(lock, resume_every, [this] { return closing; });
      if (closing) return;
      lock.unlock();
      rocksdb::Status s = ProbeDisk(path);
      if (s.ok()) s = db->Resume();
      if (s.ok()) {
        rocksdb::WriteBatch probe;
        s = probe.Put(handle(ColumnFamily::kJobs), "write-probe", "");
        if (s.ok()) s = db->Write(write_options, &probe);
      }
      lock.lock();
      if (s.ok()) {
        writes_stopped = false;
        ++recoveries;
        Log("storage").warn("database {} takes writes again (stopped {} ms)", path, NowMs() - stopped_since_ms);
        return;
      }
      if (s.severity() >= rocksdb::Status::Severity::kFatalError) {
        stop_reason += "; txscore must be restarted to write to it again";
        Log("storage").error("database {} cannot resume writes while running ({}): restart txscore once there is space",
                             path, s.ToString());
        return;
      }
    }
  }

  // Writes and syncs kProbeBytes to a file in the database's directory, through the database's
  // own file system, then removes it. Space for the probe does not promise space for the
  // flush, but a disk that cannot take it certainly cannot take the flush.
  rocksdb::Status ProbeDisk(const std::string& path) const {
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
      rocksdb::IOStatus closed = file->Close(rocksdb::IOOptions(), nullptr);
      if (s.ok()) s = closed;
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
    if (!db) return rocksdb::Status::OK();
    for (auto* h : handles) db->DestroyColumnFamilyHandle(h);
    handles.clear();
    rocksdb::Status s = db->Close();
    db.reset();
    return s;
  }
  ~Impl() { Close(); }  // an unchecked close: Database::Close() is the checked one
};

Database::Database(std::unique_ptr<Impl> impl, std::string path) : impl_(std::move(impl)), path_(std::move(path)) {}
Database::~Database() = default;

Result<std::unique_ptr<Database>> Database::Open(const std::string& path, const DatabaseOptions& options) {
  rocksdb::DBOptions db_options;
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;
  db_options.keep_log_file_num = 4;
  db_options.max_open_files = options.max_open_files;
  db_options.statistics = rocksdb::CreateDBStatistics();  // tickers only (WAL syncs): cheap
  rocksdb::ColumnFamilyOptions cf_options;
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  for (ColumnFamily cf : kAllFamilies) descriptors.emplace_back(ColumnFamilyName(cf), cf_options);
  descriptors.emplace_back(rocksdb::kDefaultColumnFamilyName, cf_options);

  auto impl = std::make_unique<Impl>();
  impl->resume_every = std::chrono::milliseconds(options.resume_every_ms);
  if (options.write_faults) {
    impl->file_system = std::make_shared<FaultyFileSystem>(rocksdb::FileSystem::Default(), options.write_faults);
    impl->env = rocksdb::NewCompositeEnv(impl->file_system);
    db_options.env = impl->env.get();
  }
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = options.read_only
                          ? rocksdb::DB::OpenForReadOnly(db_options, path, descriptors, &impl->handles, &raw)
                          : rocksdb::DB::Open(db_options, path, descriptors, &impl->handles, &raw);
  if (!s.ok()) return FromRocks(s, "cannot open database " + path);
  impl->db.reset(raw);
  impl->statistics = db_options.statistics;
  impl->write_options.sync = options.durability == Durability::kSync;
  return std::unique_ptr<Database>(new Database(std::move(impl), path));
}

Status Database::Close() {
  rocksdb::Status s = impl_->Close();
  if (!s.ok()) return FromRocks(s, "close database " + path_);
  return Status::Ok();
}

Status Database::CheckHealth() const {
  if (!impl_->db) return FailedPrecondition("database " + path_ + " is closed");
  const WriteHealth health = write_health();
  if (health.stopped) {
    return Error{ErrorCode::kUnavailable,
                 "takes no writes since " + FormatUtcTime(health.stopped_since_ms * 1000) + ": " + health.reason +
                     "; retrying every " + std::to_string(impl_->resume_every.count()) + " ms",
                 {}};
  }
  std::string ignored;
  rocksdb::Status s =
      impl_->db->Get(rocksdb::ReadOptions(), impl_->handle(ColumnFamily::kJobs), "readyz-probe", &ignored);
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
  return health;
}

uint64_t Database::WalSyncs() const {
  return impl_->statistics ? impl_->statistics->getTickerCount(rocksdb::WAL_FILE_SYNCED) : 0;
}

std::optional<Database::ColumnFamilyStats> Database::Stats(ColumnFamily cf) const {
  if (!impl_->db) return std::nullopt;
  rocksdb::ColumnFamilyHandle* handle = impl_->handle(cf);
  ColumnFamilyStats stats;
  const auto read = [&](const std::string& property, uint64_t* value) {
    if (!impl_->db->GetIntProperty(handle, property, value)) *value = 0;
  };
  read(rocksdb::DB::Properties::kEstimateNumKeys, &stats.estimated_keys);
  read(rocksdb::DB::Properties::kTotalSstFilesSize, &stats.sst_bytes);
  read(rocksdb::DB::Properties::kCurSizeAllMemTables, &stats.memtable_bytes);
  read(rocksdb::DB::Properties::kEstimatePendingCompactionBytes, &stats.pending_compaction_bytes);
  return stats;
}

uint64_t Database::BackgroundErrors() const {
  uint64_t errors = 0;
  if (!impl_->db || !impl_->db->GetIntProperty(rocksdb::DB::Properties::kBackgroundErrors, &errors)) return 0;
  return errors;
}

Result<std::optional<std::string>> Database::Get(ColumnFamily cf, std::string_view key) const {
  if (!impl_->db) return FailedPrecondition("database " + path_ + " is closed");
  std::string value;
  rocksdb::Status s =
      impl_->db->Get(rocksdb::ReadOptions(), impl_->handle(cf), rocksdb::Slice(key.data(), key.size()), &value);
  if (s.IsNotFound()) return std::optional<std::string>();
  if (!s.ok()) return FromRocks(s, std::string("read from ") + ColumnFamilyName(cf));
  return std::optional<std::string>(std::move(value));
}

Status Database::Write(const WriteBatch& batch) {
  if (!impl_->db) return FailedPrecondition("database " + path_ + " is closed");
  if (impl_->writes_stopped) {
    // Fails fast while stopped; the resumer brings writes back.
    std::lock_guard<std::mutex> lock(impl_->health_mutex);
    if (impl_->writes_stopped) {
      return Error{ErrorCode::kUnavailable, "the database takes no writes now: " + impl_->stop_reason, {}};
    }
  }
  rocksdb::WriteBatch rocks_batch;
  for (const WriteBatch::Op& op : batch.ops_) {
    rocksdb::Status s = op.erase ? rocks_batch.Delete(impl_->handle(op.cf), op.key)
                                 : rocks_batch.Put(impl_->handle(op.cf), op.key, op.value);
    if (!s.ok()) return FromRocks(s, "prepare write batch");
  }
  rocksdb::Status s = impl_->db->Write(impl_->write_options, &rocks_batch);
  if (s.IsIOError()) {
    impl_->WritesFailed(s, path_);
    return Error{ErrorCode::kUnavailable, "the database takes no writes now: " + WriteStopReason(s), {}};
  }
  if (!s.ok()) return FromRocks(s, "write batch");
  return Status::Ok();
}

Result<std::vector<std::pair<std::string, std::string>>> Database::ReadLast(ColumnFamily cf, size_t limit) const {
  if (!impl_->db) return FailedPrecondition("database " + path_ + " is closed");
  std::vector<std::pair<std::string, std::string>> out;
  std::unique_ptr<rocksdb::Iterator> it(impl_->db->NewIterator(rocksdb::ReadOptions(), impl_->handle(cf)));
  for (it->SeekToLast(); it->Valid() && out.size() < limit; it->Prev()) {
    out.emplace_back(it->key().ToString(), it->value().ToString());
  }
  if (!it->status().ok()) return FromRocks(it->status(), std::string("scan ") + ColumnFamilyName(cf));
  return out;
}

Status Database::ScanBackward(ColumnFamily cf,
                              const std::function<bool(std::string_view key, std::string_view value)>& visit) const {
  if (!impl_->db) return FailedPrecondition("database " + path_ + " is closed");
  std::unique_ptr<rocksdb::Iterator> it(impl_->db->NewIterator(rocksdb::ReadOptions(), impl_->handle(cf)));
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
  if (!impl_->db) return FailedPrecondition("database " + path_ + " is closed");
  std::unique_ptr<rocksdb::Iterator> it(impl_->db->NewIterator(rocksdb::ReadOptions(), impl_->handle(cf)));
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
  if (!impl_->db) return FailedPrecondition("database " + path_ + " is closed");
  std::unique_ptr<rocksdb::Iterator> it(impl_->db->NewIterator(rocksdb::ReadOptions(), impl_->handle(cf)));
  const rocksdb::Slice target(key.data(), key.size());
  it->SeekForPrev(target);
  if (it->Valid() && it->key() == target) it->Prev();  // strictly before
  if (!it->status().ok()) return FromRocks(it->status(), std::string("scan ") + ColumnFamilyName(cf));
  if (!it->Valid()) return std::optional<std::pair<std::string, std::string>>();
  return std::optional<std::pair<std::string, std::string>>(
      std::make_pair(it->key().ToString(), it->value().ToString()));
}

Result<std::vector<std::pair<std::string, std::string>>> Database::ReadAll(ColumnFamily cf) const {
  if (!impl_->db) return FailedPrecondition("database " + path_ + " is closed");
  std::vector<std::pair<std::string, std::string>> out;
  std::unique_ptr<rocksdb::Iterator> it(impl_->db->NewIterator(rocksdb::ReadOptions(), impl_->handle(cf)));
  for (it->SeekToFirst(); it->Valid(); it->Next()) out.emplace_back(it->key().ToString(), it->value().ToString());
  if (!it->status().ok()) return FromRocks(it->status(), std::string("scan ") + ColumnFamilyName(cf));
  return out;
}

}  // namespace txscore::storage
