// The pipeline YAML (config/pipeline.yaml), loaded into typed structs.
//
// Loading is strict: an unknown key, a value of the wrong type or out of range, or a file
// that does not exist is an error that names the YAML file, line and column. Relative paths
// in the file are resolved against the directory of the YAML file, so a config works from
// any working directory. Every field has the default written next to it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "accelerator/emulated_device.h"
#include "accelerator/op_adapters.h"
#include "common/result.h"
#include "pipelines/condition.h"
#include "pipelines/stage_graph.h"
#include "storage/database.h"

namespace txscore::pipelines {

// Thrift's protection against hostile or broken clients.
struct ThriftLimits {
  int64_t max_message_bytes = 1 << 20;  // Default: 1 MiB per message
  int64_t max_frame_bytes = 1 << 20;    // Default: 1 MiB per frame (framed transport)
  int64_t max_string_bytes = 64 << 10;  // Default: 64 KiB per string field
  int64_t max_container_items = 10000;  // Default: 10000 items per list/map/set (scoreBatch size)
  int max_recursion_depth = 64;         // Default: 64 nested structs
};

struct RpcServerConfig {
  std::string host = "0.0.0.0";  // Default: all interfaces
  int port = 9090;               // Default: 9090; 0 picks a free port
  // Default: 8 requests run at once. A connection holds no thread: only a complete frame
  // needs one (service/rpc_server.h).
  int workers = 8;
  // Default: 1. Threads always left to accept connections, read frames and shed load; the
  // server runs io_threads + workers threads in all.
  int io_threads = 1;
  int max_connections = 4096;      // Default: 4096 open connections; one more is closed at once
  int max_queued_requests = 1024;  // Default: 1024 complete frames waiting to run; more are shed
  // Default: 5 s. A frame must arrive whole within this of its first byte, and a reply be
  // taken within this; a client that trickles bytes or does not read is disconnected.
  int frame_timeout_ms = 5000;
  int idle_timeout_ms = 600000;  // Default: 10 min of silence between frames closes a connection
  ThriftLimits limits;
};

struct AdminConfig {
  std::string host = "127.0.0.1";  // Default: loopback only
  int port = 9091;                 // Default: 9091; 0 picks a free port
};

struct StorageConfig {
  std::string path;                                             // required: RocksDB directory, created when missing
  storage::Durability durability = storage::Durability::kSync;  // Default: sync (see storage/database.h)
};

struct SecurityConfig {
  std::string card_key_file;  // required: >= 32 random bytes, mode 0600
};

// Which devices the process looks for (accelerator/discovery.h). Placement itself is per stage.
struct DevicesConfig {
  bool emulated = true;                               // Default: the emulated dataflow device is registered
  accelerator::EmulatedDeviceOptions emulated_model;  // its latency model; defaults in emulated_device.h
  std::string backend_library;         // Default: none. An out-of-tree PyTorch backend (.so), e.g. torch-spyre's
  std::string backend_kind = "spyre";  // Default: spyre; what that backend is
  std::string calibration_cache;       // Default: none (calibrate at every start); measured profiles are kept here
};

// An xgboost stage. A pipeline may have several: a champion and a shadow (challenger) model
// fed by the same features, or models joined by a blend stage.
// Claims jobs on a running server (`jobs:`): submitted over Thrift, run one at a time in the
// background through the claims pipeline named here (service/claims_jobs.h).
struct JobsConfig {
  // Default: none, and no jobs. A claims pipeline file; its storage section is not used (jobs'
  // progress goes to this server's database) and its LLM stage runs at the lowest OS priority.
  std::string claims_pipeline;
  std::string input_dir;   // required with claims_pipeline: a server-side input must be inside it
  std::string output_dir;  // required with claims_pipeline: outputs and inline inputs go here (created)
  int chunk = 0;           // Default: 0, as `txscore batch run --chunk`
  // Default: idle. The jobs' threads (the job runner and its LLM stage) run in the OS's idle
  // class: they get only CPU time no request wants, and wait while the machine is kept busy.
  // normal: they compete with requests as equals.
  std::string priority = "idle";
  // Default: 0.1. A job that finishes with the LLM stage writing no findings for more than
  // this share of the claims it was asked to read ends DEGRADED rather than DONE (as
  // `txscore batch run --max-llm-shortfall-share`).
  double max_llm_shortfall_share = 0.1;
};

struct ModelStageConfig {
  std::string name = "fraud";
  std::string model_path;   // required: XGBoost .json or .ubj
  std::string schema_path;  // Default: beside the model (fraud.ubj -> fraud.features.json)
  // Default: cpu. auto, cpu, cuda, spyre or emulated; the planner checks it at start-up (tree
  // ensembles are branchy and small: only the CPU walks trees, and auto finds that).
  std::string placement = "cpu";
  int nthread = 1;  // Default: 1 (fastest for single rows)
  // Score with txscore's tree evaluator when the model allows; false forces XGBoost's C API.
  bool fast_evaluator = true;  // Default: true
  // Default: 0, the pipeline's deadline_ms. Matters only for a stage the decision does not
  // depend on (a shadow model): it is skipped when it would start later than this many ms
  // after the request's arrival. The stages the decision depends on always run.
  int budget_ms = 0;
};

// A join: the weighted mean of the scores (and of each feature's contributions, matched by
// feature name) of the stages it comes after.
struct BlendStageConfig {
  std::string name = "blend";
  std::vector<double> weights;  // Default: equal weights; else one per stage in `after:`, in that order
};

struct DecisionStageConfig {
  std::string name = "decision";
  double review_threshold = 0.5;   // Default: score >= 0.5 -> REVIEW
  double decline_threshold = 0.9;  // Default: score >= 0.9 -> DECLINE
  int max_reasons = 3;             // Default: the 3 largest contributions towards fraud
  // Default: true. With a findings input (the claims pipeline): an APPROVE whose LLM findings
  // say risk "high" becomes REVIEW, so a person looks at it.
  bool escalate_high_risk = true;
};

// The forensic stage: when its condition holds (default: REVIEW decisions), an LLM reads the
// transaction and the model's reasons and writes Findings (llm/claim_analysis.h) into the
// result and the audit record.
struct FindingsStageConfig {
  bool enabled = false;  // true when the pipeline file has an llm_findings stage
  std::string name = "forensic";
  // `when:` over the outputs of the stages before it (pipelines/condition.h).
  // Default: "<decision stage>.decision == REVIEW".
  Condition when;
  std::string model_dir;          // required: a Hugging Face checkpoint directory
  std::string dtype = "float32";  // Default: float32; or bfloat16
  int threads = 1;                // Default: 1 libtorch thread (0: libtorch's choice), leaving cores to scoring
  int max_new_tokens = 96;        // Default: 96; the findings schema needs at least 50
  // Default: 1500 ms from the request's arrival, unless the request asks for less
  // (Transaction.budget_ms). Output still unfinished then is dropped: the stage is reported
  // degraded and the decision stands without findings.
  int budget_ms = 1500;
  // Default: cpu. auto, cpu, cuda, spyre or emulated; auto picks the device with the least
  // predicted time at the expected batch and tokens below.
  std::string placement = "cpu";
  int expected_batch = 1;     // Default: 1 request at a time
  int max_batch = 8;          // Default: the dynamic batcher runs up to 8 requests together
  int max_wait_us = 2000;     // Default: waiting up to 2 ms after the first for more
  int expected_tokens = 512;  // Default: 512 tokens per request (prompt and findings)
  // Set at start-up from the plan, not read from the file: the libtorch device the stage runs
  // on and the op adapters it uses there, then the devices to fall back to, in order.
  struct Target {
    std::string name;          // as reported, e.g. "emulated:0 (emulated)"
    std::string torch_device;  // e.g. "privateuseone:0"
    std::string dtype;
    accelerator::OpAdapters adapters{};
  };
  std::string device = "cpu";
  std::string device_name = "cpu";
  accelerator::OpAdapters adapters{};
  std::vector<Target> fallback;
  bool background = false;  // the batcher's thread at the lowest OS priority (jobs inside a server)
};

struct PipelineConfig {
  std::string source_path;  // the YAML file this came from
  // What the pipeline scores: "transactions" (its first stage is of kind features; served by
  // `txscore serve`) or "claims" (claim_features; run by `txscore batch run` and the job RPCs).
  std::string kind = "transactions";
  std::string name = "transactions";
  std::string version = "1";  // reported in every ScoreResult and audit record
  RpcServerConfig server;
  AdminConfig admin;
  StorageConfig storage;
  SecurityConfig security;
  DevicesConfig devices;
  JobsConfig jobs;
  // Default: 1500 ms. The deadline, from a request's arrival, of every stage that sets no
  // budget_ms of its own. A request may ask for less (Transaction.budget_ms): that caps every
  // stage's deadline. What happens at a deadline: see ScoringPipeline.
  int deadline_ms = 1500;
  // The stages as the file declares them, and the DAG they form (stage_graph.h); its sink is
  // the decision stage.
  std::vector<StageDeclaration> stages;
  StageGraph graph;
  // Each kind's settings, by stage name.
  std::vector<ModelStageConfig> models;  // the xgboost stages, in file order; at least one
  std::vector<BlendStageConfig> blends;
  DecisionStageConfig decision;  // exactly one
  FindingsStageConfig findings;  // at most one (enabled when present)

  const ModelStageConfig* FindModel(const std::string& name) const;
  const BlendStageConfig* FindBlend(const std::string& name) const;
};

Result<PipelineConfig> LoadPipelineConfig(const std::string& path);
// For tests: parse YAML text as if it were the file `source_path`.
Result<PipelineConfig> ParsePipelineConfig(const std::string& yaml_text, const std::string& source_path);

}  // namespace txscore::pipelines
