// txscore conformance: every model family on every available device against the CPU in float32.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "accelerator/discovery.h"
#include "accelerator/placement_planner.h"
#include "llm/checkpoint_maker.h"
#include "llm/conformance.h"
#include "llm/decoder.h"
#include "llm/model_config.h"
#include "llm/model_family.h"
#include "llm/tokenizer.h"
#include "service/commands/commands.h"
#include "service/settings.h"

namespace txscore::service {
namespace {

namespace fs = std::filesystem;

struct ConformanceOptions {
  std::vector<std::string> models;   // empty: generate a tiny checkpoint of each family
  std::vector<std::string> devices;  // empty: every device found
  std::string backend_library;       // Default: none. The out-of-tree backend to load (and check)
  std::string config_path;           // Default: none. Service settings: their devices section, as `plan` reads it
  int steps = 32;
  std::string out_dir = "var/conformance";
};

// A device and dtype to check, with the adapters the planner would give a decoder there.
struct Target {
  std::string kind;   // device kind, e.g. "emulated"
  std::string label;  // e.g. "emulated:0 (emulated) bfloat16"
  std::string torch_device;
  accelerator::Dtype dtype = accelerator::Dtype::kFloat32;
  accelerator::OpAdapters adapters;
  // int8 weights: the CPU's quantized decoder, checked for what the quantization costs.
  llm::DecoderOptions::Quantization quantization = llm::DecoderOptions::Quantization::kNone;
};

// A device (and dtype) found but not checked, and why.
struct Unchecked {
  std::string kind;   // device kind, e.g. "emulated"
  std::string label;  // e.g. "emulated:0 (emulated) float32"
  std::string reason;
};

std::vector<Target> TargetsFor(const accelerator::DeviceRegistry& devices, const std::vector<std::string>& wanted,
                               std::vector<Unchecked>* unchecked) {
  std::vector<Target> targets;
  const std::set<std::string> decoder_ops = accelerator::DecoderWorkload("llm", accelerator::DecoderShape{}).ops;
  for (const accelerator::Device& d : devices.devices()) {
    const std::string& kind = d.kind;
    if (!wanted.empty() && std::find(wanted.begin(), wanted.end(), kind) == wanted.end()) continue;
    std::vector<std::string> missing;
    const accelerator::OpAdapters adapters = accelerator::ChooseAdapters(decoder_ops, d.native_ops, &missing);
    if (!missing.empty()) {
      std::string ops;
      for (const std::string& op : missing) ops += (ops.empty() ? "" : ", ") + op;
      unchecked->push_back({kind, d.DisplayName(), "lacks ops the decoder needs and no adapter covers: " + ops});
      continue;
    }
    for (accelerator::Dtype dtype : {accelerator::Dtype::kFloat32, accelerator::Dtype::kBFloat16}) {
      const std::string name = accelerator::DtypeName(dtype);
      if (!d.Supports(dtype)) {
        unchecked->push_back({kind, d.DisplayName() + " " + name, "does not run " + name});
        continue;
      }
      if (d.kind == accelerator::kCpuKind && dtype == accelerator::Dtype::kFloat32) continue;  // the reference
      targets.push_back({kind, d.DisplayName() + " " + name, d.torch_device, dtype, adapters});
      if (d.kind == accelerator::kCpuKind && dtype == accelerator::Dtype::kBFloat16) {
        targets.push_back({kind, d.DisplayName() + " int8 weights", d.torch_device, dtype, adapters,
                           llm::DecoderOptions::Quantization::kInt8});
      }
    }
  }
  return targets;
}

std::vector<int32_t> PromptFor(const std::string& model_dir) {
  Result<std::unique_ptr<llm::Tokenizer>> tokenizer = llm::Tokenizer::FromDirectory(model_dir);
  if (tokenizer.ok()) {
    std::vector<int32_t> ids =
        (*tokenizer)
            ->Encode(
                "Claim C-1: water damage reported 48 days after the incident; the plumber's invoice predates the leak.",
                {.parse_special = false});
    if (!ids.empty()) return ids;
  }
  return {1, 2, 3, 4, 5, 6, 7, 8};
}

int RunConformance(ConformanceOptions options) {
  std::error_code ignored;
  fs::create_directories(options.out_dir, ignored);
  if (options.models.empty()) {
    for (const std::string& family : llm::BuiltinModelFamilies().Names()) {
      const std::string dir = options.out_dir + "/checkpoints/" + family;
      if (!fs::exists(dir + "/config.json")) {
        Result<llm::CheckpointSummary> made = llm::MakeCheckpoint({.family = family, .size = "tiny"}, dir);
        if (!made.ok()) {
          std::cerr << "cannot write the " << family << " checkpoint: " << made.error().ToString() << "\n";
          return 1;
        }
      }
      options.models.push_back(dir);
    }
  }
  accelerator::DiscoveryOptions discovery;
  if (!options.config_path.empty()) {
    // The devices the server would find: its settings' backend and calibration cache.
    Result<ServiceSettings> settings = LoadServiceSettings(options.config_path);
    if (!settings.ok()) {
      std::cerr << "--config: " << settings.error().message << "\n";
      return 2;
    }
    discovery.backend = settings->devices.backend;
    discovery.calibration_cache = settings->devices.calibration_cache;
  } else {
    discovery.backend.library = options.backend_library;
  }
  Result<accelerator::DeviceRegistry> devices = accelerator::DiscoverDevices(discovery);
  if (!devices.ok()) {
    std::cerr << "device discovery failed: " << devices.error().ToString() << "\n";
    return 1;
  }
  std::vector<Unchecked> unchecked;
  const std::vector<Target> targets = TargetsFor(*devices, options.devices, &unchecked);
  for (const std::string& wanted : options.devices) {
    if (devices->Find(wanted) == nullptr) {
      std::string why = devices->AbsenceReason(wanted);
      if (why.empty()) {
        why = "no device of that kind was found (known kinds:";
        for (const std::string& kind : devices->Kinds()) why += " " + kind;
        why += "; an out-of-tree backend is loaded with --backend-library)";
      }
      std::cerr << "device " << wanted << " is not available: " << why << "\n";
      return 1;
    }
    // A requested device with nothing checked on it is a failure, not an empty column.
    const bool checked =
        std::any_of(targets.begin(), targets.end(), [&](const Target& t) { return t.kind == wanted; }) ||
        (wanted == "cpu");  // cpu float32 is the reference every other is compared with
    if (!checked) {
      std::cerr << "device " << wanted << " was requested but nothing could be checked on it:";
      for (const Unchecked& u : unchecked) {
        if (u.kind == wanted) std::cerr << " " << u.label << ": " << u.reason << ";";
      }
      std::cerr << "\n";
      return 1;
    }
  }
  if (targets.empty()) {
    std::cerr << "nothing to check: no device besides the cpu float32 reference runs the decoder\n";
    for (const Unchecked& u : unchecked) std::cerr << "  not checked: " << u.label << ": " << u.reason << "\n";
    return 1;
  }

  nlohmann::json results = nlohmann::json::array();
  std::ostringstream table;
  table << "| model | reference |";
  for (const Target& t : targets) table << " " << t.label << " |";
  table << "\n|---|---|";
  for (size_t i = 0; i < targets.size(); ++i) table << "---|";
  table << "\n";
  bool all_passed = true;
  for (const std::string& model_dir : options.models) {
    Result<llm::ModelConfig> config = llm::LoadModelConfig(model_dir);
    Result<std::unique_ptr<llm::Decoder>> reference =
        llm::Decoder::Load(model_dir, {.dtype = accelerator::Dtype::kFloat32});
    if (!config.ok() || !reference.ok()) {
      std::cerr << "cannot load " << model_dir << ": "
                << (config.ok() ? reference.error().ToString() : config.error().ToString()) << "\n";
      return 1;
    }
    const std::vector<int32_t> prompt = PromptFor(model_dir);
    table << "| " << fs::path(model_dir).filename().string() << " (" << config->model_type << ") | cpu float32 |";
    for (const Target& t : targets) {
      const bool int8 = t.quantization == llm::DecoderOptions::Quantization::kInt8;
      Result<std::unique_ptr<llm::Decoder>> candidate = llm::Decoder::Load(
          model_dir,
          {.dtype = t.dtype, .device = t.torch_device, .adapters = t.adapters, .quantization = t.quantization});
      Result<llm::ConformanceReport> report =
          candidate.ok() ? llm::CompareDecoders(**reference, **candidate, prompt, options.steps,
                                                int8 ? llm::Int8Thresholds() : llm::ThresholdsFor(t.dtype))
                         : Result<llm::ConformanceReport>(candidate.error());
      nlohmann::json row = {{"model", model_dir},
                            {"model_type", config->model_type},
                            {"device", t.label},
                            {"dtype", accelerator::DtypeName(t.dtype)},
                            {"weights", int8 ? "int8" : accelerator::DtypeName(t.dtype)},
                            {"steps", options.steps},
                            {"adapters", t.adapters.Describe()}};
      if (!report.ok()) {
        row["error"] = report.error().ToString();
        row["passed"] = false;
        table << " ERROR |";
        all_passed = false;
      } else {
        row.update({{"cosine_per_step", report->cosine},
                    {"max_abs_difference_per_step", report->max_abs_difference},
                    {"min_cosine", report->min_cosine},
                    {"max_abs_difference", report->max_abs},
                    {"greedy_agreement", report->same_tokens},
                    {"passed", report->passed}});
        if (!report->passed) row["failure"] = report->failure;
        char cell[160];
        std::snprintf(cell, sizeof cell, " %s cos>=%.6f max|d|=%.2g %d/%d |", report->passed ? "PASS" : "FAIL",
                      report->min_cosine, report->max_abs, report->same_tokens, report->steps);
        table << cell;
        all_passed = all_passed && report->passed;
      }
      results.push_back(std::move(row));
    }
    table << "\n";
  }
  table << "\nThresholds: float32 cosine >= 0.99999 at every step and every greedy token equal; "
           "bfloat16 cosine >= 0.999 at every step; int8 weights (bfloat16 activations, the CPU's own kernels) "
           "cosine >= 0.99 at every step, greedy agreement reported as the quantization's cost. Each cell: min cosine "
           "over "
        << options.steps
        << " teacher-forced steps, largest absolute logit difference, greedy tokens equal to the reference's.\n";
  nlohmann::json not_checked = nlohmann::json::array();
  for (const Unchecked& u : unchecked) {
    table << "Not checked: " << u.label << " (" << u.reason << ").\n";
    not_checked.push_back({{"device", u.label}, {"reason", u.reason}});
  }
  for (const accelerator::AbsentDevice& a : devices->absent()) {
    table << "Not checked: " << a.kind << " (" << a.reason << ").\n";
    not_checked.push_back({{"device", a.kind}, {"reason", a.reason}});
  }
  for (const auto& [name, text] :
       {std::pair<std::string, std::string>{
            "conformance.json", nlohmann::json{{"results", results}, {"not_checked", not_checked}}.dump(2) + "\n"},
        {"conformance.md", table.str()}}) {
    std::ofstream out(options.out_dir + "/" + name, std::ios::trunc);
    out << text;
    out.close();
    if (!out) {
      std::cerr << "cannot write " << options.out_dir << "/" << name << "\n";
      return 1;
    }
  }
  std::cout << table.str() << "written: " << options.out_dir << "/conformance.json and conformance.md\n";
  return all_passed ? 0 : 1;
}

}  // namespace

void AddConformanceCommand(CLI::App& app, int* exit_code) {
  auto options = std::make_shared<ConformanceOptions>();
  CLI::App* cmd =
      app.add_subcommand("conformance",
                         "Run each model on each device against the CPU in float32, and the CPU with int8 weights (the "
                         "quantization's cost: cosine and greedy agreement); write a JSON file and a Markdown matrix");
  cmd->add_option("--models", options->models, "Checkpoint directories (default: a generated tiny one per family)");
  cmd->add_option("--devices", options->devices, "Device kinds to check, e.g. cpu emulated cuda (default: all found)")
      ->delimiter(',');
  CLI::Option* library =
      cmd->add_option("--backend-library", options->backend_library,
                      "An out-of-tree PyTorch backend (.so) that describes itself (accelerator/backend_abi.h), e.g. "
                      "build/libtxscore_emulated_device.so (default: none)");
  cmd->add_option("--config", options->config_path,
                  "Service settings whose devices section (backend library and its overrides) to use, as `txscore "
                  "plan` does (default: none)")
      ->excludes(library);
  cmd->add_option("--steps", options->steps, "Greedy steps after the prompt")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--out", options->out_dir, "Where conformance.json and conformance.md go")->capture_default_str();
  cmd->callback([options, exit_code] { *exit_code = RunConformance(*options); });
}

}  // namespace txscore::service
