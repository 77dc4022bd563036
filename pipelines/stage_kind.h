// Stage kinds as plug-ins: everything a kind of pipeline stage is, behind one interface.
//
// A StageKind is one object, registered by an explicit call (RegisterBuiltinStageKinds in
// pipelines/stages/builtin.cc; tests build registries of their own), that owns its stages'
// whole life:
//
//   spec()     its name, typed ports and traits (stage_graph.h checks the DAG with them);
//   Parse      reads and validates its own YAML keys (file:line:column errors), once;
//   Workload   what the placement planner weighs, for kinds that can run on a device;
//   Prepare    loads models, compiles rules and constraints, once: a PreparedStage;
//   Run        one request (the transaction path), or RunChunk, a chunk of claims (the
//              batch path), reading its inputs by port index from the request's values.
//
// The executors (scoring_pipeline.h, claims_pipeline.h) call stages only through this
// interface and never name a kind; a new kind touches its own files and one registration
// line (docs/pipeline-file.md, "Adding a stage kind").
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "accelerator/device.h"
#include "accelerator/placement_planner.h"
#include "common/blocking_wait.h"
#include "common/clock.h"
#include "common/result.h"
#include "fraud/claim.h"
#include "fraud/entity_state.h"
#include "fraud/transaction.h"
#include "llm/decoder.h"
#include "pipelines/stage_graph.h"
#include "pipelines/values.h"
#include "pipelines/yaml_reader.h"

namespace txscore::pipelines {

// What a pipeline scores: transactions (`txscore serve`) or claims (`txscore batch run`, jobs).
enum class ItemKind { kTransaction, kClaim };
const char* ItemKindName(ItemKind kind);  // "transactions", "claims"

// What every stage's settings hold; a kind derives its own and fills them in Parse.
struct StageSettings {
  virtual ~StageSettings() = default;
  std::string name;
  SourceLocation at;  // the stage's entry in the file
  // Default: cpu. auto, or a device kind; read only by kinds with a Workload.
  std::string placement = "cpu";
  // Default: 0, the pipeline's deadline_ms. Matters only for a stage the decision does not
  // depend on: it is skipped when it would start later than this many ms after the request's
  // arrival (the stages the decision depends on always run).
  int budget_ms = 0;
  // Default: 0, none. Threads the stage computes with on a device runtime (libtorch);
  // devices are profiled with the largest of them.
  int compute_threads = 0;
};

// What a stage reads of the item being scored, besides its inputs.
struct ScoredItem {
  const fraud::Transaction* transaction = nullptr;  // transaction pipelines
  const fraud::CardState* card_state = nullptr;     // the card's state before this transaction
  const fraud::Claim* claim = nullptr;              // claims pipelines
  int64_t provider_claims = 0;                      // the provider's claims of the 90 days before this one
  std::chrono::steady_clock::time_point deadline;   // this stage's, for this item
};

// A stage's inputs for one item: port k is the kind's k-th input (StageKindSpec::inputs),
// bound to its source stage when the pipeline was loaded. Nothing is looked up by name.
class StageInputs {
 public:
  StageInputs(const GraphStage& stage, const RequestValues& values) : stage_(&stage), values_(&values) {}
  // The value bound to input `port`: null when an optional input is unbound, or its source
  // stage did not run for this item.
  const StageOutputs* Get(size_t port) const;
  // The stages an each_upstream input joins, in `after:` order.
  const std::vector<int>& Joined(size_t port) const { return stage_->inputs[port].stages; }
  const RequestValues& values() const { return *values_; }

 private:
  const GraphStage* stage_;
  const RequestValues* values_;
};

// What happened when a stage ran on one item, beyond its outputs.
struct StageReport {
  enum class Outcome {
    kDone,      // outputs written
    kSkipped,   // never started (its deadline came first); outputs not written
    kCutShort,  // started, but its deadline came before it finished; outputs not written
    kFailed,    // a best-effort stage failed; `detail` says how; outputs not written
  };
  Outcome outcome = Outcome::kDone;
  std::string detail;
  std::string device;                       // where it ran, for the audit's placement; empty: not reported
  std::vector<std::string> failed_devices;  // devices that failed first, in the order tried
  int64_t elapsed_us = -1;                  // RunChunk: this item's time (a batched stage: its batch's)
};
// "done", "skipped", "cut_short", "failed".
const char* OutcomeName(StageReport::Outcome outcome);

struct ModelVersion {
  std::string id;
  std::string version;
};

// A model stage's inputs and outputs, as the Open Inference Protocol (KServe v2) describes a
// model's: GET /v2/models/{name} (service/inference_protocol.h). Shapes use -1 for the batch.
struct TensorSpec {
  std::string name;
  std::string datatype;  // the protocol's: "FP32", "BYTES", ...
  std::vector<int64_t> shape;
};
struct ModelSignature {
  std::string platform;  // e.g. "xgboost", "pytorch_libtorch"
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
};

// A stage as prepared for requests. Immutable once prepared and shared by every request of
// its pipeline: Run is called from many threads at once.
class ForensicStage;
class PreparedStage;

// A value a stage publishes for the server's /metrics. The server reads it at each scrape
// from the stage serving under this stage's name then (after a reload, the new pipeline's), so
// `read` is given that stage and keeps no pointer to the one that published it; a stage of
// another kind under the name reads as the kind's zero.
struct StageMetric {
  enum class Type { kGauge, kCounter };
  Type type = Type::kGauge;
  std::string name;
  std::string help;
  std::vector<std::pair<std::string, std::string>> labels;
  std::function<double(const PreparedStage&)> read;  // a counter's value is whole (exact below 2^53)
};

// What a prepared stage serves beyond its items, read once when its pipeline starts serving:
// with text_generation(), the hooks through which the server (service/) exposes a kind's
// metrics and engines without including the kind's header.
struct StageServices {
  std::vector<StageMetric> metrics;
};

class PreparedStage {
 public:
  virtual ~PreparedStage() = default;

  // One item. An error fails the whole request (a model that cannot score); a best-effort
  // kind reports its trouble in `report` instead.
  virtual Status Run(const StageInputs& inputs, const ScoredItem& item, StageOutputs* out,
                     StageReport* report) const = 0;

  struct ChunkItem {
    StageInputs inputs;
    ScoredItem item;
    StageOutputs* out;
    StageReport* report;
  };
  // The items of a chunk its condition selected. Default: Run on each in turn, timed.
  // A kind that batches (the LLM) overrides it to submit them together.
  virtual Status RunChunk(const std::vector<ChunkItem>& items) const;

  // A slow stage that can answer without a thread waiting for it (the local LLM) starts the
  // item and returns true; `finished` is then called once, on one of `host`'s threads, when
  // `out` and `report` hold what Run would have put there. `inputs` and `item` are read before
  // it returns; `out` and `report` must live until `finished`. False (the default): not
  // offered, nothing started; the caller runs Run instead.
  virtual bool RunThen(const StageInputs& inputs, const ScoredItem& item, StageOutputs* out, StageReport* report,
                       const std::shared_ptr<ContinuationHost>& host, std::function<void()> finished) const {
    return false;
  }

  // True for a stage that takes milliseconds or more: the transaction path releases the
  // card's lock while it runs (scoring_pipeline.h).
  virtual bool slow() const { return false; }
  // The model it scores with, reported in results and audit records.
  virtual std::optional<ModelVersion> model() const { return std::nullopt; }
  // What the model reads and writes (with model(): a stage with a model has one).
  virtual std::optional<ModelSignature> signature() const { return std::nullopt; }
  // Items that moved to another device because one failed; none for single-device kinds.
  virtual std::optional<uint64_t> device_fallbacks() const { return std::nullopt; }
  // Items this stage would like per chunk to run efficiently (a batch size); 0: no preference.
  virtual int preferred_chunk() const { return 0; }
  // What it serves to the server (StageServices). Default: nothing.
  virtual StageServices Serves() const { return {}; }
  // The engine behind the OpenAI-compatible API (service/openai_api.h), looked up on each API
  // request, so it is a pointer read; null: none.
  virtual ForensicStage* text_generation() const { return nullptr; }
  // One line for the start-up log, e.g. "review at >= 0.5, decline at >= 0.9".
  virtual std::string Describe() const = 0;
};

// Cross-pipeline sharing: an object stages of several pipelines may use (an LLM engine loaded
// once for the server's transaction pipeline and its claims pipeline), by a key the kind
// chooses. It holds weak references: an object lives as long as a prepared stage uses it.
// Thread-safe.
class SharedStageResources {
 public:
  std::shared_ptr<void> Find(const std::string& key) const;
  void Put(const std::string& key, std::shared_ptr<void> value);

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::weak_ptr<void>> objects_;
};

class StageKindRegistry;

// What the program provides beyond the pipeline file.
struct PipelineRuntime {
  // Needed by an llm_findings stage: llm::Decoder::Load (libtorch), which the pipelines
  // library does not link.
  llm::DecoderLoader load_decoder;
  // The devices of this process (accelerator::DiscoverDevices). Null: no discovery ran, every
  // stage runs on the CPU, and a placement naming another device is refused.
  const accelerator::DeviceRegistry* devices = nullptr;
  // Objects pipelines of this process share (null: none shared).
  std::shared_ptr<SharedStageResources> shared;
  // Default: false. Claims pipelines inside a server: batch work runs at the OS's lowest
  // priority, so it leaves the cores to requests.
  bool background = false;
  // The clock every deadline is measured with (common/clock.h): the request path's, the LLM
  // stage's batcher and generator, a claims chunk's stage limit. Default: steady_clock.
  DeadlineClock clock = SteadyDeadlineClock();
  // The stage kinds a server's reload reads the new pipeline file with (it must outlive the
  // server). Null: BuiltinStageKinds().
  const StageKindRegistry* kinds = nullptr;
};

struct PrepareContext {
  ItemKind items = ItemKind::kTransaction;
  const GraphStage* stage = nullptr;                  // its bound inputs
  const accelerator::Placement* placement = nullptr;  // kinds with a Workload, when devices were discovered
  const PipelineRuntime* runtime = nullptr;
};

// A file (or a directory: every regular file under it) whose bytes decide what a stage does:
// a model, a feature schema, a rule list, a checkpoint. `role` names it within its stage
// ("model", "list deny_merchants"); the pipeline's bundle digest covers it (bundle_digest.h).
struct StageFile {
  std::string role;
  std::string path;
};

class StageKind {
 public:
  virtual ~StageKind() = default;
  virtual const StageKindSpec& spec() const = 0;
  // Reads the stage's own keys (spec().keys; the common keys are in `declaration`). Errors
  // name the file, line and column.
  virtual Result<std::shared_ptr<const StageSettings>> Parse(const YamlReader& reader, const YAML::Node& stage,
                                                             const StageDeclaration& declaration) const = 0;
  // The work the placement planner weighs on each device; none (the default) for a kind
  // that always runs on the CPU beside the executor.
  virtual Result<std::optional<accelerator::StageWorkload>> Workload(const StageSettings& settings) const;
  virtual Result<std::unique_ptr<PreparedStage>> Prepare(const StageSettings& settings,
                                                         const PrepareContext& context) const = 0;
  // The files Prepare reads that decide what the stage does, including any it finds by
  // convention (a schema beside its model). Default: none (a kind configured by YAML alone).
  // Credentials (TLS keys of a remote model) are not listed: they do not decide.
  virtual std::vector<StageFile> Files(const StageSettings& settings) const;
};

// Reads a stage's `placement:` (auto or a device kind) into `*out`. Whether that device exists
// and can run the stage is the planner's question, asked when the pipeline is prepared.
Status ReadPlacement(const YamlReader& reader, const YAML::Node& stage, std::string* out);

class StageKindRegistry {
 public:
  // Fails on a second registration of a kind's name.
  Status Register(std::unique_ptr<StageKind> kind);
  const StageKind* Find(std::string_view kind) const;  // null when unknown
  std::vector<std::string> Kinds() const;              // sorted

 private:
  std::map<std::string, std::unique_ptr<StageKind>, std::less<>> kinds_;
};

// The kinds txscore ships (pipelines/stages/builtin.cc), one registration line each.
void RegisterBuiltinStageKinds(StageKindRegistry* registry);
// A registry holding them, built on first use and never freed.
const StageKindRegistry& BuiltinStageKinds();

}  // namespace txscore::pipelines
