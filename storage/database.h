// txscore's one RocksDB instance and its column families.
//
// RocksDB Status values are converted to txscore Errors here and nowhere else; no RocksDB
// header leaks out of this component.
//
// Durability (DatabaseOptions::durability), i.e. what a write that has returned survives:
//   kSync: the write-ahead log is fsynced before Write returns. Survives a process crash and a
//          power loss. Costs one fdatasync per write group (concurrent writers share one,
//          RocksDB's group commit), ~0.2-0.6 ms on the disks measured.
//   kWal:  the write is in the write-ahead log (in the OS page cache) when Write returns.
//          Survives a process crash (kill -9); a power loss or kernel crash can lose the
//          writes of the last moments (until the OS flushes, typically up to ~30 s).
//
// A write that fails for its file system (a full disk, an I/O error) stops RocksDB taking
// writes. Then every write fails fast with kUnavailable and a reason that names no path, and a
// thread tries every second to resume (a 1 MiB probe file, RocksDB's Resume, then a probe
// write): when space returns, writes come back (write_health(), CheckHealth()). When RocksDB
// reports the failure as fatal (a failed sync always; a full disk often: docs/operations.md), or
// Resume fails three times in a row with space back (RocksDB's own full-disk recovery answers
// Busy until a whole write buffer fits), the database is closed and opened again in the process,
// as a restart would, once the probe file can be written. The reopen replays RocksDB's log, which may hold
// a write reported as failed (its bytes appended, its sync failed); generation() goes up, so
// that state kept in memory from the database (the audit trail's chain head) is read again.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"

namespace txscore::storage {

enum class ColumnFamily {
  kEntityState,  // per-card state, keyed by card token
  kAudit,        // one record per decision, keyed by time (see audit_log.h)
  kJobs,         // batch job progress (pipelines/claims_job.h)
};
const char* ColumnFamilyName(ColumnFamily cf);

enum class Durability { kSync, kWal };
Result<Durability> ParseDurability(std::string_view name);  // "sync" or "wal"

// For tests: while `no_space` is set, every write to the database's files fails as on a full
// disk (ENOSPC), through a file system wrapped around the real one.
struct WriteFaults {
  std::atomic<bool> no_space{false};
  // While set, every sync of a database file fails with an I/O error (EIO) after its bytes
  // were appended: a disk failing writeback. RocksDB calls that fatal.
  std::atomic<bool> sync_io_error{false};
  // While set, creating a MANIFEST file (as every writable open does) fails with an I/O error:
  // the database opens read-only only.
  std::atomic<bool> manifest_io_error{false};
};

struct DatabaseOptions {
  Durability durability = Durability::kSync;  // Default: sync, the WAL fsynced before each write returns
  bool read_only = false;                     // Default: false. Read-only opens may run beside a server.
  // Default: 128. Table files RocksDB keeps open (its own default keeps every one open): the
  // server sets aside 256 file descriptors beside its connections (service/rpc_server.cc), and
  // a growing database must not take the connections' share.
  int max_open_files = 128;
  // Default: none. Tests: faults injected into the database's file writes.
  std::shared_ptr<WriteFaults> write_faults;
  // Default: 1000. How often, while writes are stopped, recovery is tried.
  int resume_every_ms = 1000;
};

// A set of writes applied atomically by Database::Write.
class WriteBatch {
 public:
  void Put(ColumnFamily cf, std::string_view key, std::string_view value) {
    ops_.push_back({cf, std::string(key), std::string(value), false});
  }
  void Delete(ColumnFamily cf, std::string_view key) { ops_.push_back({cf, std::string(key), std::string(), true}); }
  // Moves `other`'s writes after this batch's (a group commit joins its members' batches).
  // This batch keeps its own RequireGeneration: `other`'s is the caller's to check first.
  void Append(WriteBatch&& other) {
    for (Op& op : other.ops_) ops_.push_back(std::move(op));
    other.ops_.clear();
  }
  bool empty() const { return ops_.empty(); }
  // Written only while the database is still the one of `generation` (Database::generation(),
  // taken before reading what the batch was made of): after a reopen, which may have brought
  // back a write reported as failed, the batch is refused (kUnavailable) instead of overwriting
  // it with values computed without it.
  void RequireGeneration(uint64_t generation) { required_generation_ = generation; }
  std::optional<uint64_t> required_generation() const { return required_generation_; }

 private:
  friend class Database;
  struct Op {
    ColumnFamily cf;
    std::string key;
    std::string value;
    bool erase = false;
  };
  std::vector<Op> ops_;
  std::optional<uint64_t> required_generation_;
};

// Thread-safe: RocksDB allows concurrent reads and writes.
class Database {
 public:
  static Result<std::unique_ptr<Database>> Open(const std::string& path, const DatabaseOptions& options = {});
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  // nullopt when the key is absent.
  Result<std::optional<std::string>> Get(ColumnFamily cf, std::string_view key) const;
  // Applies every write of the batch or none, with the configured durability.
  Status Write(const WriteBatch& batch);
  // 1 when opened; one more each time it is opened again in the process while recovering from
  // a failed write (for writing, or read-only meanwhile). WriteBatch::RequireGeneration binds a
  // write to it.
  uint64_t generation() const;
  // Up to `limit` entries with the largest keys, largest first.
  Result<std::vector<std::pair<std::string, std::string>>> ReadLast(ColumnFamily cf, size_t limit) const;
  // Visits entries from the largest key down while `visit` returns true.
  Status ScanBackward(ColumnFamily cf,
                      const std::function<bool(std::string_view key, std::string_view value)>& visit) const;
  // Visits entries from the first key >= `from` up while `visit` returns true.
  Status ScanForward(ColumnFamily cf, std::string_view from,
                     const std::function<bool(std::string_view key, std::string_view value)>& visit) const;
  // The entry with the largest key < `key`, or nullopt when there is none.
  Result<std::optional<std::pair<std::string, std::string>>> LastBefore(ColumnFamily cf, std::string_view key) const;
  // Every entry, smallest key first (tests and tools; not for the request path).
  Result<std::vector<std::pair<std::string, std::string>>> ReadAll(ColumnFamily cf) const;

  // Closes RocksDB (flushing nothing: every write is already in the WAL) and reports how
  // that went. Idempotent; reads and writes fail with kFailedPrecondition afterwards.
  Status Close();
  // OK while the database is open and takes writes. kUnavailable while writes are stopped
  // (with the reason and since when); kFailedPrecondition once closed.
  Status CheckHealth() const;
  // Whether writes are taken, and how often they stopped and came back since Open.
  struct WriteHealth {
    bool stopped = false;
    std::string reason;  // while stopped: e.g. "no space left on the database's disk"; no path
    int64_t stopped_since_ms = 0;
    uint64_t stops = 0;       // times writes stopped
    uint64_t recoveries = 0;  // times they came back
    uint64_t reopens = 0;     // times it was closed and opened again for writing in the process
  };
  WriteHealth write_health() const;
  // Write-ahead-log syncs (fsync/fdatasync) since Open: one per write under kSync, none under
  // kWal (RocksDB's own statistics).
  uint64_t WalSyncs() const;
  // RocksDB's own figures for one column family (its int properties), for metrics: nullopt
  // once closed. Estimates, as RocksDB says: keys counted twice until compaction merges them.
  struct ColumnFamilyStats {
    uint64_t estimated_keys = 0;            // rocksdb.estimate-num-keys
    uint64_t sst_bytes = 0;                 // rocksdb.total-sst-files-size
    uint64_t memtable_bytes = 0;            // rocksdb.cur-size-all-mem-tables
    uint64_t pending_compaction_bytes = 0;  // rocksdb.estimate-pending-compaction-bytes
  };
  std::optional<ColumnFamilyStats> Stats(ColumnFamily cf) const;
  // Background errors since Open, reopens included (rocksdb.background-errors): a failed flush
  // or compaction.
  uint64_t BackgroundErrors() const;

  const std::string& path() const { return path_; }

 private:
  struct Impl;
  explicit Database(std::unique_ptr<Impl> impl, std::string path);
  std::unique_ptr<Impl> impl_;
  std::string path_;
};

}  // namespace txscore::storage
