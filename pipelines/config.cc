#include "pipelines/config.h"

#include <fcntl.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "common/file_io.h"

namespace txscore::pipelines {
namespace {

namespace fs = std::filesystem;

// Reads one YAML document strictly; every error carries file:line:column. yaml-cpp's
// exceptions are caught here and nowhere else.
class Reader {
 public:
  Reader(std::string source, fs::path base_dir) : source_(std::move(source)), base_dir_(std::move(base_dir)) {}

  Error ErrorAt(const YAML::Node& node, const std::string& message) const {
    const YAML::Mark mark = node.Mark();
    return ErrorAtMark(mark.line, mark.column, message);
  }
  Error ErrorAtMark(int line, int column, const std::string& message) const {
    return InvalidArgument(source_ + ":" + std::to_string(line + 1) + ":" + std::to_string(column + 1) + ": " +
                           message);
  }

  // The map at `node`, whose keys must all be in `allowed`.
  Status ExpectMap(const YAML::Node& node, const std::string& what, const std::set<std::string>& allowed) const {
    if (!node.IsMap()) return ErrorAt(node, what + " must be a mapping");
    std::map<std::string, int> first_line;  // yaml-cpp keeps duplicates and reads the first: refuse them
    for (const auto& entry : node) {
      const std::string key = entry.first.Scalar();
      const auto [seen, inserted] = first_line.emplace(key, entry.first.Mark().line + 1);
      if (!inserted) {
        return ErrorAt(entry.first, "\"" + key + "\" is given twice in " + what + " (first on line " +
                                        std::to_string(seen->second) + ")");
      }
      if (allowed.count(key) == 0) {
        std::string expected;
        for (const auto& k : allowed) expected += (expected.empty() ? "" : ", ") + k;
        return ErrorAt(entry.first, "unknown key \"" + key + "\" in " + what + " (expected one of: " + expected + ")");
      }
    }
    return Status::Ok();
  }

  template <typename T>
  Status Read(const YAML::Node& map, const std::string& key, const char* type_name, T* out) const {
    const YAML::Node node = map[key];
    if (!node) return Status::Ok();  // keep the default
    if (!node.IsScalar() || !YAML::convert<T>::decode(node, *out)) {
      return ErrorAt(node, "\"" + key + "\" must be " + type_name);
    }
    return Status::Ok();
  }

  // Ranges are checked on what the file says; an absent key keeps its default.
  Status ReadInt(const YAML::Node& map, const std::string& key, int64_t min, int64_t max, int64_t* out) const {
    if (!map[key]) return Status::Ok();
    TXSCORE_RETURN_IF_ERROR(Read<int64_t>(map, key, "an integer", out));
    if (*out < min || *out > max) {
      return ErrorAt(map[key],
                     "\"" + key + "\" must be between " + std::to_string(min) + " and " + std::to_string(max));
    }
    return Status::Ok();
  }
  Status ReadInt(const YAML::Node& map, const std::string& key, int min, int max, int* out) const {
    int64_t wide = *out;
    TXSCORE_RETURN_IF_ERROR(ReadInt(map, key, static_cast<int64_t>(min), static_cast<int64_t>(max), &wide));
    *out = static_cast<int>(wide);
    return Status::Ok();
  }
  Status ReadDouble(const YAML::Node& map, const std::string& key, double min, double max, double* out) const {
    if (!map[key]) return Status::Ok();
    TXSCORE_RETURN_IF_ERROR(Read<double>(map, key, "a number", out));
    if (!(*out >= min && *out <= max)) {
      return ErrorAt(map[key], "\"" + key + "\" must be between " + Format(min) + " and " + Format(max));
    }
    return Status::Ok();
  }
  Status ReadString(const YAML::Node& map, const std::string& key, bool required, std::string* out) const {
    const YAML::Node node = map[key];
    if (!node) {
      if (required) return ErrorAt(map, "missing required key \"" + key + "\"");
      return Status::Ok();
    }
    if (!node.IsScalar() || node.Scalar().empty()) return ErrorAt(node, "\"" + key + "\" must be a non-empty string");
    *out = node.Scalar();
    return Status::Ok();
  }
  // What a path read from the file must name when the file is loaded.
  enum class PathMustBe { kAnything, kRegularFile, kDirectory };
  static constexpr uintmax_t kMaxFileBytes = uintmax_t{16} << 30;  // models, keys, pipelines: 16 GiB at most

  // A path relative to the YAML file's directory. A kRegularFile must exist and be a regular
  // file (not a directory, a device or /proc/self/mem) of at most kMaxFileBytes; a kDirectory
  // must exist and be one.
  Status ReadPath(const YAML::Node& map, const std::string& key, bool required, PathMustBe must_be,
                  std::string* out) const {
    std::string raw;
    TXSCORE_RETURN_IF_ERROR(ReadString(map, key, required, &raw));
    if (raw.empty()) return Status::Ok();
    fs::path p(raw);
    if (p.is_relative()) p = base_dir_ / p;
    *out = p.lexically_normal().string();
    if (must_be == PathMustBe::kAnything) return Status::Ok();
    std::error_code ec;
    const fs::file_status status = fs::status(*out, ec);  // follows symbolic links
    if (ec || !fs::exists(status)) return ErrorAt(map[key], "\"" + key + "\": file " + *out + " does not exist");
    if (must_be == PathMustBe::kDirectory) {
      if (!fs::is_directory(status)) return ErrorAt(map[key], "\"" + key + "\": " + *out + " is not a directory");
      return Status::Ok();
    }
    if (!fs::is_regular_file(status)) {
      return ErrorAt(map[key], "\"" + key + "\": " + *out + " is not a regular file" +
                                   (fs::is_directory(status) ? " (it is a directory)" : ""));
    }
    const uintmax_t size = fs::file_size(*out, ec);
    if (ec || size > kMaxFileBytes) {
      return ErrorAt(map[key], "\"" + key + "\": " + *out + " is larger than 16 GiB");
    }
    // Readable from the start: files that look regular and are not, such as /proc/self/mem,
    // are refused here with the line. Permissions are left to the command that opens the
    // file (`txscore plan` or `audit` may run under an account that cannot read the card key).
    const int fd = ::open(out->c_str(), O_RDONLY | O_CLOEXEC);
    char first[1] = {0};
    const ssize_t read = fd < 0 ? 0 : ::read(fd, first, sizeof first);
    const int read_errno = errno;
    explicit_bzero(first, sizeof first);  // a key's first byte, maybe
    if (fd >= 0) ::close(fd);
    if (read < 0)
      return ErrorAt(map[key], "\"" + key + "\": " + *out + " cannot be read: " + std::strerror(read_errno));
    return Status::Ok();
  }

 private:
  static std::string Format(double v) {
    std::ostringstream s;
    s << v;
    return s.str();
  }
  std::string source_;
  fs::path base_dir_;

 public:
  const std::string& source() const { return source_; }
};

Status ParseServer(const Reader& r, const YAML::Node& node, RpcServerConfig* out) {
  TXSCORE_RETURN_IF_ERROR(r.ExpectMap(node, "server",
                                      {"host", "port", "workers", "io_threads", "max_connections",
                                       "max_queued_requests", "frame_timeout_ms", "idle_timeout_ms", "limits"}));
  TXSCORE_RETURN_IF_ERROR(r.ReadString(node, "host", false, &out->host));
  TXSCORE_RETURN_IF_ERROR(r.ReadInt(node, "port", 0, 65535, &out->port));
  TXSCORE_RETURN_IF_ERROR(r.ReadInt(node, "workers", 1, 1024, &out->workers));
  TXSCORE_RETURN_IF_ERROR(r.ReadInt(node, "io_threads", 1, 64, &out->io_threads));
  TXSCORE_RETURN_IF_ERROR(r.ReadInt(node, "max_connections", 1, 1000000, &out->max_connections));
  TXSCORE_RETURN_IF_ERROR(r.ReadInt(node, "max_queued_requests", 1, 1000000, &out->max_queued_requests));
  TXSCORE_RETURN_IF_ERROR(r.ReadInt(node, "frame_timeout_ms", 1, 600000, &out->frame_timeout_ms));
  TXSCORE_RETURN_IF_ERROR(r.ReadInt(node, "idle_timeout_ms", 1, 86400000, &out->idle_timeout_ms));
  if (const YAML::Node limits = node["limits"]) {
    TXSCORE_RETURN_IF_ERROR(r.ExpectMap(
        limits, "server.limits",
        {"max_message_bytes", "max_frame_bytes", "max_string_bytes", "max_container_items", "max_recursion_depth"}));
    ThriftLimits& l = out->limits;
    constexpr int64_t kGiB = 1LL << 30;
    TXSCORE_RETURN_IF_ERROR(r.ReadInt(limits, "max_message_bytes", 1024, kGiB, &l.max_message_bytes));
    TXSCORE_RETURN_IF_ERROR(r.ReadInt(limits, "max_frame_bytes", 1024, kGiB, &l.max_frame_bytes));
    TXSCORE_RETURN_IF_ERROR(r.ReadInt(limits, "max_string_bytes", 16, kGiB, &l.max_string_bytes));
    TXSCORE_RETURN_IF_ERROR(r.ReadInt(limits, "max_container_items", 1, 10000000, &l.max_container_items));
    TXSCORE_RETURN_IF_ERROR(r.ReadInt(limits, "max_recursion_depth", 4, 1000, &l.max_recursion_depth));
  }
  return Status::Ok();
}

// auto or a device kind; whether that device exists and can run the stage is the planner's
// question, asked at start-up.
Status ReadPlacement(const Reader& r, const YAML::Node& stage, std::string* out) {
  TXSCORE_RETURN_IF_ERROR(r.ReadString(stage, "placement", false, out));
  if (*out != "auto" && !accelerator::ParseDeviceKind(*out).ok()) {
    return r.ErrorAt(stage["placement"], "placement must be auto, cpu, cuda, spyre or emulated, not \"" + *out + "\"");
  }
  return Status::Ok();
}

Status ParseDevices(const Reader& r, const YAML::Node& node, DevicesConfig* out) {
  TXSCORE_RETURN_IF_ERROR(
      r.ExpectMap(node, "devices", {"emulated", "backend_library", "backend_kind", "calibration_cache"}));
  TXSCORE_RETURN_IF_ERROR(
      r.ReadPath(node, "backend_library", false, Reader::PathMustBe::kAnything, &out->backend_library));
  TXSCORE_RETURN_IF_ERROR(r.ReadString(node, "backend_kind", false, &out->backend_kind));
  if (out->backend_kind != "spyre") {
    return r.ErrorAt(node["backend_kind"], "backend_kind must be spyre (the out-of-tree kind txscore knows), not \"" +
                                               out->backend_kind + "\"");
  }
  TXSCORE_RETURN_IF_ERROR(
      r.ReadPath(node, "calibration_cache", false, Reader::PathMustBe::kAnything, &out->calibration_cache));
  if (const YAML::Node e = node["emulated"]) {
    TXSCORE_RETURN_IF_ERROR(r.ExpectMap(e, "devices.emulated",
                                        {"enabled", "stage_dispatch_us", "op_dispatch_us", "tflops", "memory_gbps",
                                         "copy_gbps", "memory_gib", "alignment"}));
    TXSCORE_RETURN_IF_ERROR(r.Read<bool>(e, "enabled", "true or false", &out->emulated));
    accelerator::EmulatedDeviceOptions& m = out->emulated_model;
    double tflops = m.flops_per_s / 1e12, memory_gbps = m.memory_bytes_per_s / 1e9,
           copy_gbps = m.copy_bytes_per_s / 1e9;
    double memory_gib = static_cast<double>(m.memory_bytes) / (1LL << 30);
    TXSCORE_RETURN_IF_ERROR(r.ReadDouble(e, "stage_dispatch_us", 0, 1e6, &m.stage_dispatch_us));
    TXSCORE_RETURN_IF_ERROR(r.ReadDouble(e, "op_dispatch_us", 0, 1e6, &m.op_dispatch_us));
    TXSCORE_RETURN_IF_ERROR(r.ReadDouble(e, "tflops", 0.001, 1e4, &tflops));
    TXSCORE_RETURN_IF_ERROR(r.ReadDouble(e, "memory_gbps", 0.001, 1e5, &memory_gbps));
    TXSCORE_RETURN_IF_ERROR(r.ReadDouble(e, "copy_gbps", 0.001, 1e5, &copy_gbps));
    TXSCORE_RETURN_IF_ERROR(r.ReadDouble(e, "memory_gib", 0.001, 1e6, &memory_gib));
    TXSCORE_RETURN_IF_ERROR(r.ReadInt(e, "alignment", 1, 4096, &m.alignment));
    m.flops_per_s = tflops * 1e12;
    m.memory_bytes_per_s = memory_gbps * 1e9;
    m.copy_bytes_per_s = copy_gbps * 1e9;
    m.memory_bytes = static_cast<int64_t>(memory_gib * (1LL << 30));
  }
  return Status::Ok();
}

SourceLocation LocationOf(const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  return {mark.line + 1, mark.column + 1};
}

// The keys every stage may have; each kind adds its own.
const std::set<std::string>& CommonStageKeys() {
  static const std::set<std::string> keys = {"name", "kind", "after", "inputs", "when"};
  return keys;
}

Status ExpectStageKeys(const Reader& r, const YAML::Node& stage, const std::string& name,
                       const std::set<std::string>& kind_keys) {
  std::set<std::string> allowed = CommonStageKeys();
  allowed.insert(kind_keys.begin(), kind_keys.end());
  return r.ExpectMap(stage, "stage " + name, allowed);
}

// name, kind, after (one name or a list), inputs ({input: stage.output}), when.
Status ParseStageDeclaration(const Reader& r, const YAML::Node& stage, StageDeclaration* d) {
  TXSCORE_RETURN_IF_ERROR(r.ReadString(stage, "name", true, &d->name));
  TXSCORE_RETURN_IF_ERROR(r.ReadString(stage, "kind", true, &d->kind));
  d->at = LocationOf(stage);
  if (const YAML::Node after = stage["after"]) {
    d->after_at = LocationOf(after);
    if (after.IsScalar() && !after.Scalar().empty()) {
      d->after.push_back(after.Scalar());
    } else if (after.IsSequence() && after.size() > 0) {
      for (const YAML::Node& item : after) {
        if (!item.IsScalar() || item.Scalar().empty()) return r.ErrorAt(item, "after: each entry must be a stage name");
        d->after.push_back(item.Scalar());
      }
    } else {
      return r.ErrorAt(after, "after: must be a stage name or a list of stage names");
    }
  }
  if (const YAML::Node inputs = stage["inputs"]) {
    d->inputs_at = LocationOf(inputs);
    if (!inputs.IsMap()) return r.ErrorAt(inputs, "inputs: must be a mapping from input to STAGE.OUTPUT");
    for (const auto& entry : inputs) {
      if (!entry.second.IsScalar() || entry.second.Scalar().find('.') == std::string::npos) {
        return r.ErrorAt(entry.second, "inputs: " + entry.first.Scalar() + " must name STAGE.OUTPUT");
      }
      d->inputs[entry.first.Scalar()] = entry.second.Scalar();
    }
  }
  if (const YAML::Node when = stage["when"]) {
    TXSCORE_RETURN_IF_ERROR(r.ReadString(stage, "when", false, &d->when));
    d->when_at = LocationOf(when);
  }
  return Status::Ok();
}

Status ParseModelStage(const Reader& r, const YAML::Node& stage, const std::string& name, ModelStageConfig* m) {
  TXSCORE_RETURN_IF_ERROR(
      ExpectStageKeys(r, stage, name, {"model", "schema", "placement", "threads", "evaluator", "budget_ms"}));
  m->name = name;
  TXSCORE_RETURN_IF_ERROR(r.ReadPath(stage, "model", true, Reader::PathMustBe::kRegularFile, &m->model_path));
  TXSCORE_RETURN_IF_ERROR(r.ReadPath(stage, "schema", false, Reader::PathMustBe::kRegularFile, &m->schema_path));
  TXSCORE_RETURN_IF_ERROR(ReadPlacement(r, stage, &m->placement));
  TXSCORE_RETURN_IF_ERROR(r.ReadInt(stage, "threads", 1, 256, &m->nthread));
  TXSCORE_RETURN_IF_ERROR(r.ReadInt(stage, "budget_ms", 1, 600000, &m->budget_ms));
  if (stage["evaluator"]) {
    std::string evaluator;
    TXSCORE_RETURN_IF_ERROR(r.ReadString(stage, "evaluator", false, &evaluator));
    if (evaluator != "fast" && evaluator != "xgboost") {
      return r.ErrorAt(stage["evaluator"], "evaluator must be \"fast\" or \"xgboost\", not \"" + evaluator + "\"");
    }
    m->fast_evaluator = evaluator == "fast";
  }
  return Status::Ok();
}

Status ParseBlendStage(const Reader& r, const YAML::Node& stage, const StageDeclaration& d, BlendStageConfig* b) {
  TXSCORE_RETURN_IF_ERROR(ExpectStageKeys(r, stage, d.name, {"weights"}));
  b->name = d.name;
  if (const YAML::Node weights = stage["weights"]) {
    if (!weights.IsSequence() || weights.size() != d.after.size()) {
      return r.ErrorAt(weights, "weights: must be a list of " + std::to_string(d.after.size()) +
                                    " numbers, one per stage in after:");
    }
    double sum = 0;
    for (const YAML::Node& w : weights) {
      double value = 0;
      if (!w.IsScalar() || !YAML::convert<double>::decode(w, value) || !(value >= 0)) {
        return r.ErrorAt(w, "weights: each weight must be a number >= 0");
      }
      b->weights.push_back(value);
      sum += value;
    }
    if (!(sum > 0)) return r.ErrorAt(weights, "weights: at least one weight must be above 0");
  }
  return Status::Ok();
}

Status ParseDecisionStage(const Reader& r, const YAML::Node& stage, const std::string& name, DecisionStageConfig* d) {
  TXSCORE_RETURN_IF_ERROR(
      ExpectStageKeys(r, stage, name, {"review_threshold", "decline_threshold", "max_reasons", "escalate_high_risk"}));
  TXSCORE_RETURN_IF_ERROR(r.Read<bool>(stage, "escalate_high_risk", "true or false", &d->escalate_high_risk));
  d->name = name;
  TXSCORE_RETURN_IF_ERROR(r.ReadDouble(stage, "review_threshold", 0.0, 1.0, &d->review_threshold));
  TXSCORE_RETURN_IF_ERROR(r.ReadDouble(stage, "decline_threshold", 0.0, 1.0, &d->decline_threshold));
  if (d->review_threshold > d->decline_threshold) {
    return r.ErrorAt(stage["review_threshold"] ? stage["review_threshold"] : stage,
                     "review_threshold must not exceed decline_threshold");
  }
  TXSCORE_RETURN_IF_ERROR(r.ReadInt(stage, "max_reasons", 0, 64, &d->max_reasons));
  return Status::Ok();
}

Status ParseFindingsStage(const Reader& r, const YAML::Node& stage, const std::string& name, FindingsStageConfig* f) {
  TXSCORE_RETURN_IF_ERROR(ExpectStageKeys(r, stage, name,
                                          {"model", "dtype", "threads", "max_new_tokens", "budget_ms", "placement",
                                           "expected_batch", "expected_tokens", "max_batch", "max_wait_us"}));
  f->enabled = true;
  f->name = name;
  TXSCORE_RETURN_IF_ERROR(r.ReadPath(stage, "model", true, Reader::PathMustBe::kDirectory, &f->model_dir));
  TXSCORE_RETURN_IF_ERROR(r.ReadString(stage, "dtype", false, &f->dtype));
  if (f->dtype != "float32" && f->dtype != "bfloat16") {
    return r.ErrorAt(stage["dtype"], "dtype must be \"float32\" or \"bfloat16\", not \"" + f->dtype + "\"");
  }
  TXSCORE_RETURN_IF_ERROR(r.ReadInt(stage, "threads", 0, 256, &f->threads));
  TXSCORE_RETURN_IF_ERROR(r.ReadInt(stage, "max_new_tokens", 50, 4096, &f->max_new_tokens));
  TXSCORE_RETURN_IF_ERROR(r.ReadInt(stage, "budget_ms", 1, 600000, &f->budget_ms));
  TXSCORE_RETURN_IF_ERROR(ReadPlacement(r, stage, &f->placement));
  TXSCORE_RETURN_IF_ERROR(r.ReadInt(stage, "expected_batch", 1, 4096, &f->expected_batch));
  TXSCORE_RETURN_IF_ERROR(r.ReadInt(stage, "expected_tokens", 1, 1 << 20, &f->expected_tokens));
  TXSCORE_RETURN_IF_ERROR(r.ReadInt(stage, "max_batch", 1, 1024, &f->max_batch));
  TXSCORE_RETURN_IF_ERROR(r.ReadInt(stage, "max_wait_us", 0, 10000000, &f->max_wait_us));
  return Status::Ok();
}

// The stages: each kind's settings, then the DAG they form, checked as a whole.
Status ParseStages(const Reader& r, const YAML::Node& node, PipelineConfig* out) {
  if (!node.IsSequence() || node.size() == 0) return r.ErrorAt(node, "stages must be a list of stages");
  StageKindRegistry kinds;
  RegisterBuiltinStageKinds(&kinds);
  bool seen_features = false;
  for (size_t i = 0; i < node.size(); ++i) {
    const YAML::Node stage = node[i];
    if (!stage.IsMap()) return r.ErrorAt(stage, "a stage must be a mapping");
    StageDeclaration d;
    TXSCORE_RETURN_IF_ERROR(ParseStageDeclaration(r, stage, &d));
    if (d.kind == "features" || d.kind == "claim_features") {
      TXSCORE_RETURN_IF_ERROR(ExpectStageKeys(r, stage, d.name, {}));
      const std::string kind = d.kind == "features" ? "transactions" : "claims";
      if (seen_features && kind != out->kind) {
        return r.ErrorAt(stage, "a pipeline scores transactions (features) or claims (claim_features), not both");
      }
      seen_features = true;
      out->kind = kind;
    } else if (d.kind == "xgboost") {
      out->models.emplace_back();
      TXSCORE_RETURN_IF_ERROR(ParseModelStage(r, stage, d.name, &out->models.back()));
    } else if (d.kind == "blend") {
      out->blends.emplace_back();
      TXSCORE_RETURN_IF_ERROR(ParseBlendStage(r, stage, d, &out->blends.back()));
    } else if (d.kind == "decision") {
      TXSCORE_RETURN_IF_ERROR(ParseDecisionStage(r, stage, d.name, &out->decision));
    } else if (d.kind == "llm_findings") {
      if (out->findings.enabled) return r.ErrorAt(stage, "a pipeline has at most one llm_findings stage");
      TXSCORE_RETURN_IF_ERROR(ParseFindingsStage(r, stage, d.name, &out->findings));
    }  // an unknown kind is reported by StageGraph::Build, with the known ones
    out->stages.push_back(std::move(d));
  }
  // The forensic stage's default condition: REVIEW decisions, when the decision is upstream of it.
  for (StageDeclaration& d : out->stages) {
    if (d.kind != "llm_findings" || !d.when.empty()) continue;
    std::vector<std::string> pending = d.after;
    std::set<std::string> upstream;
    std::string decision;
    while (!pending.empty()) {
      const std::string name = pending.back();
      pending.pop_back();
      if (!upstream.insert(name).second) continue;
      for (const StageDeclaration& other : out->stages) {
        if (other.name != name) continue;
        if (other.kind == "decision") decision = other.name;
        pending.insert(pending.end(), other.after.begin(), other.after.end());
      }
    }
    if (decision.empty()) {
      return r.ErrorAt(node[static_cast<size_t>(&d - out->stages.data())],
                       "stage \"" + d.name +
                           "\" needs a when: (its default, <decision>.decision == REVIEW, needs "
                           "the decision stage upstream of it), e.g. when: \"model.score >= 0.5\"");
    }
    d.when = decision + ".decision == REVIEW";
    d.when_at = d.at;
  }
  Result<StageGraph> graph = StageGraph::Build(out->stages, kinds, r.source(), "decision");
  if (!graph.ok()) return graph.error();
  out->graph = std::move(graph).value();
  if (out->models.empty()) return r.ErrorAt(node, "a pipeline needs at least one xgboost stage");
  if (!seen_features) return r.ErrorAt(node, "a pipeline needs a features (or claim_features) stage");
  if (out->findings.enabled) {
    const int f = out->graph.Find(out->findings.name);
    if (out->graph.stage(f).when) out->findings.when = *out->graph.stage(f).when;
  }
  return Status::Ok();
}

Result<PipelineConfig> Parse(const YAML::Node& root, const Reader& r, const std::string& source_path) {
  TXSCORE_RETURN_IF_ERROR(r.ExpectMap(
      root, "the pipeline file", {"pipeline", "server", "admin", "storage", "security", "devices", "jobs", "stages"}));
  PipelineConfig config;
  config.source_path = source_path;
  if (const YAML::Node p = root["pipeline"]) {
    TXSCORE_RETURN_IF_ERROR(r.ExpectMap(p, "pipeline", {"name", "version", "deadline_ms"}));
    TXSCORE_RETURN_IF_ERROR(r.ReadString(p, "name", false, &config.name));
    TXSCORE_RETURN_IF_ERROR(r.ReadInt(p, "deadline_ms", 1, 600000, &config.deadline_ms));
    TXSCORE_RETURN_IF_ERROR(r.ReadString(p, "version", false, &config.version));
  }
  if (const YAML::Node s = root["server"]) TXSCORE_RETURN_IF_ERROR(ParseServer(r, s, &config.server));
  if (const YAML::Node a = root["admin"]) {
    TXSCORE_RETURN_IF_ERROR(r.ExpectMap(a, "admin", {"host", "port"}));
    TXSCORE_RETURN_IF_ERROR(r.ReadString(a, "host", false, &config.admin.host));
    TXSCORE_RETURN_IF_ERROR(r.ReadInt(a, "port", 0, 65535, &config.admin.port));
  }
  const YAML::Node storage = root["storage"];
  if (!storage) return r.ErrorAt(root, "missing required key \"storage\"");
  TXSCORE_RETURN_IF_ERROR(r.ExpectMap(storage, "storage", {"path", "durability"}));
  TXSCORE_RETURN_IF_ERROR(r.ReadPath(storage, "path", true, Reader::PathMustBe::kAnything, &config.storage.path));
  if (storage["durability"]) {
    std::string durability;
    TXSCORE_RETURN_IF_ERROR(r.ReadString(storage, "durability", false, &durability));
    Result<storage::Durability> parsed = storage::ParseDurability(durability);
    if (!parsed.ok()) return r.ErrorAt(storage["durability"], parsed.error().message);
    config.storage.durability = *parsed;
  }
  const YAML::Node security = root["security"];
  if (!security) return r.ErrorAt(root, "missing required key \"security\"");
  TXSCORE_RETURN_IF_ERROR(r.ExpectMap(security, "security", {"card_key_file"}));
  TXSCORE_RETURN_IF_ERROR(
      r.ReadPath(security, "card_key_file", true, Reader::PathMustBe::kRegularFile, &config.security.card_key_file));
  if (const YAML::Node d = root["devices"]) TXSCORE_RETURN_IF_ERROR(ParseDevices(r, d, &config.devices));
  if (const YAML::Node j = root["jobs"]) {
    TXSCORE_RETURN_IF_ERROR(r.ExpectMap(
        j, "jobs", {"claims_pipeline", "input_dir", "output_dir", "chunk", "priority", "max_llm_shortfall_share"}));
    TXSCORE_RETURN_IF_ERROR(r.ReadString(j, "priority", false, &config.jobs.priority));
    if (config.jobs.priority != "idle" && config.jobs.priority != "normal") {
      return r.ErrorAt(j["priority"], "priority must be idle or normal, not \"" + config.jobs.priority + "\"");
    }
    TXSCORE_RETURN_IF_ERROR(
        r.ReadPath(j, "claims_pipeline", true, Reader::PathMustBe::kRegularFile, &config.jobs.claims_pipeline));
    TXSCORE_RETURN_IF_ERROR(r.ReadPath(j, "input_dir", true, Reader::PathMustBe::kAnything, &config.jobs.input_dir));
    TXSCORE_RETURN_IF_ERROR(r.ReadPath(j, "output_dir", true, Reader::PathMustBe::kAnything, &config.jobs.output_dir));
    TXSCORE_RETURN_IF_ERROR(r.ReadInt(j, "chunk", 0, 100000, &config.jobs.chunk));
    TXSCORE_RETURN_IF_ERROR(r.ReadDouble(j, "max_llm_shortfall_share", 0, 1, &config.jobs.max_llm_shortfall_share));
  }
  const YAML::Node stages = root["stages"];
  if (!stages) return r.ErrorAt(root, "missing required key \"stages\"");
  TXSCORE_RETURN_IF_ERROR(ParseStages(r, stages, &config));
  return config;
}

}  // namespace

const ModelStageConfig* PipelineConfig::FindModel(const std::string& stage_name) const {
  for (const ModelStageConfig& m : models) {
    if (m.name == stage_name) return &m;
  }
  return nullptr;
}

const BlendStageConfig* PipelineConfig::FindBlend(const std::string& stage_name) const {
  for (const BlendStageConfig& b : blends) {
    if (b.name == stage_name) return &b;
  }
  return nullptr;
}

Result<PipelineConfig> ParsePipelineConfig(const std::string& yaml_text, const std::string& source_path) {
  Reader reader(source_path, fs::path(source_path).parent_path());
  try {
    const YAML::Node root = YAML::Load(yaml_text);
    if (!root.IsDefined() || root.IsNull()) return InvalidArgument(source_path + ": the file is empty");
    return Parse(root, reader, source_path);
  } catch (const YAML::Exception& e) {
    return reader.ErrorAtMark(e.mark.line, e.mark.column, e.msg);
  }
}

Result<PipelineConfig> LoadPipelineConfig(const std::string& path) {
  Result<std::string> text = ReadFileBounded(path, 16 << 20, "pipeline file");
  if (!text.ok()) return text.error();
  return ParsePipelineConfig(*text, path);
}

}  // namespace txscore::pipelines
