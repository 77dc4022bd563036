// `txscore plan` with out-of-tree backends loaded the way an operator loads them: a settings
// file whose devices.backend_library names a shared library, and whose devices.backend
// describes it where the library does not. Runs the real binary; no test code registers a
// device. The libraries: txscore's emulated device (libtxscore_emulated_device.so, which
// describes itself) and a test library built from the same emulator code that registers itself
// at load and exports no description (as torch-spyre's does).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tests/test_support.h"

namespace txscore {
namespace {

struct CommandRun {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

CommandRun RunCommand(const std::string& command, const testing::TempDir& dir) {
  CommandRun run;
  const std::string err_file = dir.file("stderr.txt");
  FILE* pipe = popen((command + " 2>" + err_file).c_str(), "r");
  if (pipe == nullptr) return run;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) run.out.append(buffer, n);
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.err = testing::ReadFile(err_file);
  return run;
}

class BackendPlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const CommandRun made =
        RunCommand(std::string(TXSCORE_BINARY) + " llm make-checkpoint --family qwen3 --size tiny --out " +
                       dir_.file("llm") + " >/dev/null",
                   dir_);
    ASSERT_EQ(made.exit_code, 0) << made.err;
  }

  // The test settings with `devices_yaml`, naming the test pipeline with a forensic stage placed
  // on `placement`. Returns the settings file's path.
  std::string Pipeline(const std::string& devices_yaml, const std::string& placement) {
    const std::string path = testing::WriteTestPipeline(dir_);
    testing::WriteFile(path, testing::ReadFile(path) +
                                 "  - {name: forensic, kind: llm_findings, after: decision, model: llm, dtype: "
                                 "bfloat16, placement: " +
                                 placement + "}\n");
    const std::string settings = testing::TestSettingsPath(dir_);
    testing::WriteFile(settings, testing::ReadFile(settings) + devices_yaml);
    return settings;
  }

  CommandRun Plan(const std::string& config) {
    return RunCommand(std::string(TXSCORE_BINARY) + " plan --json --config " + config, dir_);
  }

  nlohmann::json PlanJson(const std::string& config) {
    const CommandRun run = Plan(config);
    EXPECT_EQ(run.exit_code, 0) << run.err;
    return nlohmann::json::parse(run.out, nullptr, false);
  }

  static const nlohmann::json& Named(const nlohmann::json& list, const std::string& key, const std::string& value) {
    for (const nlohmann::json& item : list) {
      if (item.value(key, "") == value) return item;
    }
    static const nlohmann::json kNone;
    ADD_FAILURE() << "no entry with " << key << " " << value << " in " << list.dump();
    return kNone;
  }

  testing::TempDir dir_;
};

TEST_F(BackendPlanTest, TheEmulatedDeviceLoadedFromItsLibraryRunsTheForensicStage) {
  const nlohmann::json plan = PlanJson(
      Pipeline("devices:\n  backend_library: " + std::string(TXSCORE_EMULATED_DEVICE_LIBRARY) + "\n", "emulated"));
  const nlohmann::json& device = Named(plan["devices"], "name", "emulated:0");
  EXPECT_EQ(device["kind"], "emulated");
  EXPECT_EQ(device["emulated"], true);
  EXPECT_EQ(device["profile_source"], std::string("described by ") + TXSCORE_EMULATED_DEVICE_LIBRARY);
  const nlohmann::json& stage = Named(plan["stages"], "stage", "forensic");
  EXPECT_EQ(stage["device"], "emulated:0");
  EXPECT_EQ(stage["emulated"], true);
  EXPECT_EQ(stage["dtype"], "bfloat16");
}

TEST_F(BackendPlanTest, BackendOptionsReachTheLibrarysLatencyModel) {
  const nlohmann::json plan =
      PlanJson(Pipeline("devices:\n  backend_library: " + std::string(TXSCORE_EMULATED_DEVICE_LIBRARY) +
                            "\n  backend:\n    options: {stage_dispatch_us: 75, op_dispatch_us: 1, tflops: 20, "
                            "memory_gbps: 100, copy_gbps: 8, memory_gib: 4, alignment: 32}\n",
                        "emulated"));
  const nlohmann::json& device = Named(plan["devices"], "name", "emulated:0");
  EXPECT_EQ(device["dispatch_us"], 75.0);
  EXPECT_EQ(device["flops_per_s"], 20e12);
  EXPECT_EQ(device["memory_bytes_per_s"], 100e9);
  EXPECT_EQ(device["copy_bytes_per_s"], 8e9);
  EXPECT_EQ(device["memory_bytes"], 4LL << 30);
  EXPECT_EQ(device["alignment"], 32);
}

TEST_F(BackendPlanTest, ASecondBackendDescribedOnlyByTheSettingsFileIsPlacedOn) {
  const nlohmann::json plan =
      PlanJson(Pipeline("devices:\n  backend_library: " + std::string(TXSCORE_UNDESCRIBED_BACKEND_LIBRARY) +
                            "\n"
                            "  backend:\n"
                            "    kind: dataflow_b\n"
                            "    index: 0\n"
                            "    dtypes: [bfloat16]\n"
                            "    native_ops: [matmul, softmax, activation, rms_norm]\n"
                            "    memory_gib: 8\n"
                            "    alignment: 32\n"
                            "    emulator: true\n"
                            "    cost: {dispatch_us: 90, tflops: 10, memory_gbps: 100, "
                            "copy_gbps: 10}\n",
                        "dataflow_b"));
  const nlohmann::json& device = Named(plan["devices"], "name", "dataflow_b:0");
  EXPECT_EQ(device["kind"], "dataflow_b");
  EXPECT_EQ(device["index"], 0);
  EXPECT_EQ(device["emulated"], true);
  EXPECT_EQ(device["dtypes"], nlohmann::json::array({"bfloat16"}));
  EXPECT_EQ(device["native_ops"], nlohmann::json::array({"activation", "matmul", "rms_norm", "softmax"}));
  EXPECT_EQ(device["memory_bytes"], 8LL << 30);
  EXPECT_EQ(device["alignment"], 32);
  EXPECT_EQ(device["dispatch_us"], 90.0);
  EXPECT_EQ(device["flops_per_s"], 10e12);
  EXPECT_EQ(device["memory_bytes_per_s"], 100e9);
  EXPECT_EQ(device["copy_bytes_per_s"], 10e9);
  EXPECT_EQ(device["profile_source"], "config");
  EXPECT_EQ(device["description"],
            std::string("out-of-tree PyTorch backend from ") + TXSCORE_UNDESCRIBED_BACKEND_LIBRARY);
  const nlohmann::json& stage = Named(plan["stages"], "stage", "forensic");
  EXPECT_EQ(stage["device"], "dataflow_b:0");
  EXPECT_EQ(stage["emulated"], true);
  // rms_norm is native here, so of the decoder's adapters only these remain; alignment 32
  // divides the tiny checkpoint's head_dim (32) and vocabulary, so nothing is padded.
  const nlohmann::json& chosen = Named(stage["candidates"], "device", "dataflow_b:0 (emulated)");
  EXPECT_EQ(chosen["adapters"], nlohmann::json::array({"embedding lookup on the host",
                                                       "rope's rotate_half as a matmul with a signed permutation"}));
}

TEST_F(BackendPlanTest, AnUndescribedBackendWithoutACostProfileIsCalibratedOnItsDevice) {
  const nlohmann::json plan =
      PlanJson(Pipeline("devices:\n  backend_library: " + std::string(TXSCORE_UNDESCRIBED_BACKEND_LIBRARY) +
                            "\n  backend: {kind: dataflow_b, dtypes: [bfloat16], "
                            "native_ops: [matmul, softmax, activation], emulator: true}\n",
                        "auto"));
  const nlohmann::json& device = Named(plan["devices"], "name", "dataflow_b:0");
  EXPECT_EQ(device["profile_source"], "calibrated");
  EXPECT_GT(device["copy_bytes_per_s"].get<double>(), 0);  // copies to the device were measured
  EXPECT_EQ(device["memory_bytes"], 0);                    // not known: not checked
  EXPECT_EQ(device["alignment"], 1);
}

TEST_F(BackendPlanTest, TheSameLibraryLoadsUnderAKindNameTheFileGivesIt) {
  const nlohmann::json plan =
      PlanJson(Pipeline("devices:\n  backend_library: " + std::string(TXSCORE_EMULATED_DEVICE_LIBRARY) +
                            "\n  backend: {kind: dataflow_c}\n",
                        "dataflow_c"));
  const nlohmann::json& stage = Named(plan["stages"], "stage", "forensic");
  EXPECT_EQ(stage["device"], "dataflow_c:0");
  EXPECT_EQ(stage["emulated"], true);
}

TEST_F(BackendPlanTest, ALibraryThatCannotBeLoadedIsAbsentWithTheLoadersReason) {
  const nlohmann::json plan =
      PlanJson(Pipeline("devices:\n  backend_library: missing.so\n  backend: {kind: spyre}\n", "auto"));
  const std::string library = dir_.file("missing.so");
  EXPECT_EQ(Named(plan["absent"], "kind", "spyre")["reason"],
            "cannot load " + library + ": " + library + ": cannot open shared object file: No such file or directory");
  EXPECT_EQ(Named(plan["stages"], "stage", "forensic")["device"], "cpu");
}

TEST_F(BackendPlanTest, PlacementOnAKindNoBackendProvidesIsRefusedNamingTheKnownKinds) {
  const CommandRun run = Plan(Pipeline("", "spyre"));
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.err.find("stage forensic: placement \"spyre\" names a device that is not available: no device of "
                         "that kind was registered (known kinds: cpu, cuda)"),
            std::string::npos)
      << run.err;
}

TEST_F(BackendPlanTest, ABatchJobRunsItsLlmStageOnTheEmulatedDeviceLoadedFromItsLibrary) {
  const std::string txscore = TXSCORE_BINARY;
  CommandRun run = RunCommand(
      txscore + " train --kind claims --claims 400 --rounds 5 --threads 1 --out " + dir_.file("models") + " >/dev/null",
      dir_);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  run = RunCommand(
      txscore + " data generate --kind claims --claims 6 --seed 3 --format jsonl --out " + dir_.file("claims.jsonl"),
      dir_);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  testing::WriteFile(dir_.file("card.key"), testing::TestCardKey());
  testing::WriteFile(dir_.file("batch.yaml"),
                     "pipeline: claims.yaml\n"
                     "storage: {path: db}\n"
                     "security: {card_key_file: card.key}\n"
                     "devices: {backend_library: " +
                         std::string(TXSCORE_EMULATED_DEVICE_LIBRARY) + "}\n");
  testing::WriteFile(dir_.file("claims.yaml"),
                     "stages:\n"
                     "  - {name: features, kind: claim_features}\n"
                     "  - {name: claims_model, kind: xgboost, after: features, model: models/claims.ubj}\n"
                     "  - {name: analysis, kind: llm_findings, after: claims_model, model: llm, when: "
                     "\"claims_model.score >= 0.0\", max_new_tokens: 60, dtype: bfloat16, placement: emulated}\n"
                     "  - {name: decision, kind: decision, after: [claims_model, analysis]}\n");
  ::chmod(dir_.file("card.key").c_str(), 0600);
  run = RunCommand(txscore + " batch run --log-level info --config " + dir_.file("batch.yaml") + " --input " +
                       dir_.file("claims.jsonl") + " --output " + dir_.file("out.jsonl"),
                   dir_);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string said = run.out + run.err;  // the summary on stdout, the log on stderr
  EXPECT_NE(said.find("stage analysis on emulated:0 (emulated) (bfloat16): placement names emulated"),
            std::string::npos)
      << said;
  const size_t times = said.find("time per stage: analysis ");
  ASSERT_NE(times, std::string::npos) << said;
  const std::string times_line = said.substr(times, said.find('\n', times) - times);
  EXPECT_NE(times_line.find(" s on emulated:0 (emulated);"), std::string::npos) << times_line;
  EXPECT_NE(said.find("LLM findings for 6 of 6 claims it was asked to read"), std::string::npos) << said;
  std::istringstream lines(testing::ReadFile(dir_.file("out.jsonl")));
  std::string line;
  int with_findings = 0, total = 0;
  while (std::getline(lines, line)) {
    ++total;
    if (!nlohmann::json::parse(line)["findings"].is_null()) ++with_findings;
  }
  EXPECT_EQ(total, 6);
  EXPECT_EQ(with_findings, 6);  // every claim read by the LLM on the emulated device
}

}  // namespace
}  // namespace txscore
