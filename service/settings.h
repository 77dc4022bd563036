// The service's own settings (config/txscore.yaml): ports, limits, storage, keys, devices,
// claims jobs, and the pipeline file the process runs. A pipeline file (pipelines/config.h)
// describes only a pipeline; these settings describe the process that runs it.
//
//   pipeline: pipeline.yaml   # required: the pipeline file (relative to this file)
//   server: ...               # Thrift (txscore serve)
//   admin: ...                # HTTP: health, metrics, reload (txscore serve)
//   storage: ...              # required: the RocksDB directory
//   security: ...             # required: the card key; TLS for both ports (security.tls)
//   devices: ...              # which devices the process looks for
//   jobs: ...                 # claims jobs over Thrift (txscore serve)
//
// Loading is as strict as a pipeline file's: an unknown key, a value of the wrong type or out
// of range, or a file that does not exist is an error naming this file, line and column.
// Relative paths resolve against this file's directory. Loaded settings are not changed
// afterwards: a reload loads them again and compares (RestartOnlyChanges).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "accelerator/backend.h"
#include "common/result.h"
#include "fraud/keyset.h"
#include "service/shard_map.h"
#include "service/tls.h"
#include "storage/database.h"

namespace txscore::service {

// Thrift's protection against hostile or broken clients.
struct ThriftLimits {
  int64_t max_message_bytes = 1 << 20;  // Default: 1 MiB per message
  int64_t max_frame_bytes = 1 << 20;    // Default: 1 MiB per frame (framed transport)
  int64_t max_string_bytes = 64 << 10;  // Default: 64 KiB per string field
  int64_t max_container_items = 10000;  // Default: 10000 items per list/map/set (scoreBatch size)
  int max_recursion_depth = 64;         // Default: 64 nested structs
  bool operator==(const ThriftLimits&) const = default;
};

struct RpcServerConfig {
  std::string host = "0.0.0.0";  // Default: all interfaces
  int port = 9090;               // Default: 9090; 0 picks a free port
  // Default: false, and the port serves TLS with client certificates (security.tls). true:
  // plaintext, no caller identity, a warning at start-up; for a trusted network or tests only.
  bool plaintext = false;
  // Default: 8 requests run at once. A connection holds no thread: only a complete frame
  // needs one (service/rpc_server.h).
  int workers = 8;
  // Default: 1. Threads always left to accept connections, read frames and shed load; the
  // server runs io_threads + workers threads in all.
  int io_threads = 1;
  // Default: 32. score() on a REVIEW whose findings the local LLM writes holds no thread while
  // it waits (it is parked: service/rpc_server.h). A slow stage that can only wait the blocking
  // way (a remote LLM, or the LLM for an item of scoreBatch) gives its worker slot back while it
  // waits, so requests that need no LLM keep running; it waits on a thread of its own, of which
  // there are this many more (idle threads cost memory, not CPU). When all are taken, the next
  // such stage is skipped: the request is answered without findings rather than hold a worker
  // (counted: txscore_rpc_slow_stage_waits_refused_total). 0: no thread is lent, such a request
  // waits keeping its slot and every slow stage runs.
  int waiting_threads = 32;
  // Default: 64. TLS handshakes in progress at once; a connection accepted beyond them closes
  // the oldest still shaking hands (counted), so strangers cannot queue unbounded handshake
  // work, nor lock new clients out by connecting and staying silent. Handshake
  // steps run on at most io_threads threads at once, so the workers stay free for the
  // requests of connections already admitted.
  int max_handshakes = 64;
  int max_connections = 4096;      // Default: 4096 open connections; one more is closed at once
  int max_queued_requests = 1024;  // Default: 1024 complete frames waiting to run; more are shed
  // Default: 5 s. A frame must arrive whole within this of its first byte, and a reply be
  // taken within this; a client that trickles bytes or does not read is disconnected.
  int frame_timeout_ms = 5000;
  int idle_timeout_ms = 600000;  // Default: 10 min of silence between frames closes a connection
  // A stop (SIGTERM) first turns readiness off, then keeps serving for stop_delay_ms (Default:
  // 0), so that a load balancer polling /readyz sends its traffic elsewhere before the listener
  // closes (set it to the balancer's probe period, or run a preStop sleep instead). Then the
  // listener closes, idle connections close, and requests in flight get drain_timeout_ms
  // (Default: 30 s) to be answered; connections still open after it are closed.
  int stop_delay_ms = 0;
  int drain_timeout_ms = 30000;
  ThriftLimits limits;
  bool operator==(const RpcServerConfig&) const = default;
};

struct AdminConfig {
  std::string host = "127.0.0.1";  // Default: loopback only
  int port = 9091;                 // Default: 9091; 0 picks a free port
  // Default: false, and the port serves HTTPS with client certificates (security.tls). true:
  // plain HTTP; only loopback callers may reload; a warning at start-up.
  bool plaintext = false;
  // Default: none. A second listener on 127.0.0.1 at this port (0 picks a free one) answering
  // the health probes alone (/healthz, /readyz, /v2/health/live, /v2/health/ready) over plain
  // HTTP: a liveness probe run inside the pod or host reaches it however many connections hold
  // the admin port, which callers elsewhere can fill (docs/security.md, "The probe port").
  std::optional<int> probe_port;
  bool operator==(const AdminConfig&) const = default;
};

struct StorageConfig {
  std::string path;                                             // required: RocksDB directory, created when missing
  storage::Durability durability = storage::Durability::kSync;  // Default: sync (see storage/database.h)
  // Default: 1000. The audit trail writes a signed checkpoint after this many entries (and at
  // each start and shutdown); see storage/audit_chain.h. Restart-only.
  int audit_checkpoint_every = 1000;
  bool operator==(const StorageConfig&) const = default;
};

// `security:`. `tls` is needed by `txscore serve` unless both ports say plaintext: true; it is
// read again by each reload (certificates and lists may change without a restart), so it is
// not restart-only. `card_key_file` is.
struct SecurityConfig {
  // Exactly one of the two (required). A keyset (fraud/keyset.h; `txscore keys create`): keys
  // with ids and states that rotate without losing history, read again by each reload; any
  // other file there is refused. Or a raw key file from before keysets: >= 32 random bytes
  // (a weak key is refused), one key, no rotation. Mode 0600 either way.
  std::string keyset;
  std::string card_key_file;
  // At most one, with a wrapped keyset: its key-encryption key (64 hex digits) from a file
  // (mode 0600) or an environment variable. Read again by each reload.
  std::string kek_file;
  std::string kek_env;
  // Default: false. false: `serve` and `batch` run non-dumpable with a core-file limit of 0, so
  // no core dump holds the keys (common/core_dumps.h). Read at start only.
  bool allow_core_dumps = false;
  std::optional<TlsConfig> tls;
  // The file the card keys come from, and the KEK source, as the tokenizers take them.
  const std::string& key_file() const { return keyset.empty() ? card_key_file : keyset; }
  fraud::KekSource kek() const { return {kek_file, kek_env}; }
  // What key_file() may hold: `keyset` a keyset only; `card_key_file` a raw key too.
  fraud::KeyFileForm key_form() const {
    return keyset.empty() ? fraud::KeyFileForm::kKeysetOrRawKey : fraud::KeyFileForm::kKeysetOnly;
  }
  bool operator==(const SecurityConfig&) const = default;
};

// Which devices the process looks for (accelerator/discovery.h). Placement itself is per stage.
// cpu (and cuda, when libtorch has it and sees a GPU) are always looked for; any other device
// is an out-of-tree PyTorch backend on PrivateUse1, loaded from a shared library and described
// by the library itself (accelerator/backend_abi.h) and/or by `backend:` here. Keys:
//
//   backend_library    Default: none, and no out-of-tree device. The backend's .so, relative to
//                      the file: torch-spyre's, or txscore's emulated device
//                      (../build/libtxscore_emulated_device.so). One per process (PrivateUse1).
//   backend:           Each key overrides what the library says of itself; a library without
//                      the txscore_describe_backend entry point needs kind, dtypes, native_ops.
//     kind             Default: the library's own. The name `placement:` uses ([a-z0-9_])
//     index            Default: the library's, else 0. Device index (privateuseone:<index>)
//     dtypes           Default: the library's. List of float32, bfloat16, float16
//     native_ops       Default: the library's. List from matmul, softmax, rms_norm, rope,
//                      embedding, activation, tree_walk
//     memory_gib       Default: the library's, else not known and not checked
//     alignment        Default: the library's, else 1 (no padding by the op adapters)
//     emulator         Default: the library's, else false. true: reported "(emulated)" everywhere
//     cost:            Default: the library's, else calibrated at start (and cached). All four:
//       dispatch_us, tflops, memory_gbps, copy_gbps
//     options          Default: none. A map passed as text to the library's entry point (the
//                      emulated device's latency model: stage_dispatch_us, op_dispatch_us,
//                      tflops, memory_gbps, copy_gbps, memory_gib, alignment)
//   calibration_cache  Default: none (calibrate at every start); measured profiles are kept here
struct DevicesConfig {
  accelerator::BackendConfig backend;  // backend_library and backend:, as above
  std::string calibration_cache;
  bool operator==(const DevicesConfig&) const = default;
};

// Claims jobs on a running server (`jobs:`): submitted over Thrift, run one at a time in the
// background through the claims pipeline named here (service/claims_jobs.h).
struct JobsConfig {
  // Default: none, and no jobs. A claims pipeline file (as `txscore batch run` runs); its jobs'
  // progress goes to this server's database and its LLM stage runs at the lowest OS priority.
  std::string claims_pipeline;
  // Default: none. The claims pipeline's bundle digest ("sha256:" and 64 hex digits, as `txscore
  // pipeline digest --pipeline FILE` prints it): the server does not start when its files have
  // another, as pipeline_digest pins the transaction pipeline.
  std::string claims_pipeline_digest;
  std::string input_dir;   // required with claims_pipeline: a server-side input must be inside it
  std::string output_dir;  // required with claims_pipeline: outputs and inline inputs go here (created)
  int chunk = 0;           // Default: 0, as `txscore batch run --chunk`
  // Default: idle. The jobs' threads (the job runner and its LLM stage) run in the OS's idle
  // class: they get only CPU time no request wants, and wait while the machine is kept busy.
  // normal: they compete with requests as equals.
  enum class Priority { kIdle, kNormal };
  Priority priority = Priority::kIdle;
  // Default: 0.1. A job that finishes with the LLM stage writing no findings for more than
  // this share of the claims it was asked to read ends DEGRADED rather than DONE (as
  // `txscore batch run --max-llm-shortfall-share`).
  double max_llm_shortfall_share = 0.1;
  // Default: 0.1. A job whose error rows pass this share of the rows it has done, once it has
  // done pipelines::kErrorShareCheckRows, stops FAILED with the reason, rather than writing
  // an error line for each of a million bad rows (as `txscore batch run --max-error-share`).
  double max_error_share = 0.1;
  bool operator==(const JobsConfig&) const = default;
};
const char* PriorityName(JobsConfig::Priority priority);

struct ServiceSettings {
  std::string source_path;  // the YAML file these came from
  // Required: the pipeline file this process runs (`txscore serve`: a transactions pipeline;
  // `txscore batch run`: a claims pipeline). A reload may point it at another file.
  std::string pipeline;
  // Default: none (not pinned). "sha256:<64 hex>": the pipeline's bundle digest (the pipeline
  // file and every file its stages read; pipelines/bundle_digest.h), as `txscore pipeline
  // digest` prints it. A start or reload whose files have another digest is refused. A reload
  // may change it (with the files it pins).
  std::string pipeline_digest;
  RpcServerConfig server;
  AdminConfig admin;
  StorageConfig storage;
  SecurityConfig security;
  DevicesConfig devices;
  JobsConfig jobs;
  ShardingConfig sharding;  // Default: none (one replica owns every card)
  // Every setting but `pipeline` as the file wrote it, flattened: "server.port" -> "9090".
  // A running server cannot change them; a reload compares them (RestartOnlyChanges).
  std::map<std::string, std::string> restart_only;
};

Result<ServiceSettings> LoadServiceSettings(const std::string& path);
// For tests: parse YAML text as if it were the file `source_path`.
Result<ServiceSettings> ParseServiceSettings(const std::string& yaml_text, const std::string& source_path);

// The restart-only settings that differ between the running settings and newly loaded ones,
// e.g. "server.port: 9090 -> 9095" ("(default)" where the file has no such key), sorted.
std::vector<std::string> RestartOnlyChanges(const ServiceSettings& running, const ServiceSettings& loaded);

}  // namespace txscore::service
