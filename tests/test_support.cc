#include "tests/test_support.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>

#include "fraud/trainer.h"
#include "tests/test_pki.h"

namespace txscore::testing {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base ? base : "/tmp") + "/txscore-test-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
  if (!out) throw std::runtime_error("cannot write " + path);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

const std::string& SmallModelDir() {
  static TempDir* dir = new TempDir();  // lives until the process exits
  static std::once_flag once;
  std::call_once(once, [] {
    for (const char* format : {"json", "ubj"}) {
      fraud::TrainOptions options;
      options.data.cards = 300;
      options.data.days = 10;
      options.rounds = 40;
      options.nthread = 1;
      options.out_dir = dir->path();
      options.format = format;
      Result<fraud::TrainReport> report = fraud::TrainFraudModel(options);
      if (!report.ok()) throw std::runtime_error("training the test model failed: " + report.error().ToString());
    }
  });
  return dir->path();
}

const std::string& ChallengerModelDir() {
  static TempDir* dir = new TempDir();  // lives until the process exits
  static std::once_flag once;
  std::call_once(once, [] {
    fraud::TrainOptions options;
    options.data.cards = 200;
    options.data.days = 10;
    options.data.seed = 7;
    options.rounds = 8;
    options.nthread = 1;
    options.out_dir = dir->path();
    options.format = "ubj";
    Result<fraud::TrainReport> report = fraud::TrainFraudModel(options);
    if (!report.ok()) throw std::runtime_error("training the challenger model failed: " + report.error().ToString());
  });
  return dir->path();
}

const std::string& ClaimsModelDir() {
  static TempDir* dir = new TempDir();  // lives until the process exits
  static std::once_flag once;
  std::call_once(once, [] {
    fraud::TrainOptions options;
    options.kind = "claims";
    options.model_name = "claims";
    options.claims_data.claims = 800;
    options.rounds = 20;
    options.nthread = 1;
    options.out_dir = dir->path();
    Result<fraud::TrainReport> report = fraud::TrainFraudModel(options);
    if (!report.ok()) throw std::runtime_error("training the claims model failed: " + report.error().ToString());
  });
  return dir->path();
}

std::string WriteTestPipelineWithStages(const TempDir& dir, const std::string& stages_yaml) {
  const std::string yaml = WriteTestPipeline(dir);
  std::string text = ReadFile(yaml);
  WriteFile(yaml, text.substr(0, text.find("stages:\n") + 8) + stages_yaml);
  return yaml;
}

std::string FraudModelStagesYaml() {
  return "  - {name: features, kind: features}\n"
         "  - {name: fraud, kind: xgboost, after: features, model: " +
         SmallModelDir() + "/fraud.ubj}\n";
}

std::string ClaimsModelStagesYaml() {
  return "  - {name: features, kind: claim_features}\n"
         "  - {name: claims_model, kind: xgboost, after: features, model: " +
         ClaimsModelDir() + "/claims.ubj}\n";
}

std::string WriteClaimsPipelineWithLlmStage(const TempDir& dir, const std::string& when) {
  const std::string yaml = dir.file("claims.yaml");
  WriteFile(yaml, "stages:\n" + ClaimsModelStagesYaml() +
                      "  - {name: analysis, kind: llm_findings, after: claims_model, model: llm, when: \"" + when +
                      "\"}\n"
                      "  - {name: decision, kind: decision, after: [claims_model, analysis]}\n");
  return yaml;
}

std::string WriteTestPipeline(const TempDir& dir, const std::string& durability, TestTransport transport) {
  const std::string key = dir.file("card.key");
  WriteFile(key, TestCardKey());
  ::chmod(key.c_str(), 0600);
  const bool tls = transport == TestTransport::kTls;
  const std::string plaintext = tls ? "" : "  plaintext: true\n";
  WriteFile(TestSettingsPath(dir),
            "pipeline: pipeline.yaml\n"
            "server:\n  host: 127.0.0.1\n  port: 0\n  workers: 4\n  frame_timeout_ms: 2000\n" +
                plaintext +
                "  limits:\n    max_string_bytes: 1024\n    max_container_items: 100\n"
                "admin:\n  host: 127.0.0.1\n  port: 0\n" +
                plaintext + "storage:\n  path: db\n  durability: " + durability +
                "\n"
                "security:\n  card_key_file: card.key\n" +
                (tls ? TestTlsSettingsYaml() : ""));
  const std::string yaml = dir.file("pipeline.yaml");
  WriteFile(yaml,
            "pipeline:\n  name: test\n  version: \"t1\"\n"
            "stages:\n"
            "  - {name: features, kind: features}\n"
            "  - {name: fraud, kind: xgboost, after: features, model: " +
                SmallModelDir() +
                "/fraud.ubj}\n"
                "  - {name: decision, kind: decision, after: fraud, review_threshold: 0.5, decline_threshold: 0.9}\n");
  return yaml;
}

fraud::RawTransaction ValidTransaction(const std::string& request_id) {
  fraud::RawTransaction tx;
  tx.request_id = request_id;
  tx.timestamp_ms = 1767261600000;  // 2026-01-01T10:00:00Z, a Thursday
  tx.amount_minor = 4250;
  tx.currency = "USD";
  tx.card_number = kTestPan;
  tx.merchant_id = "m-US-17";
  tx.mcc = "5411";
  tx.merchant_country = "US";
  tx.card_country = "US";
  tx.channel = 1;
  tx.entry_mode = 1;
  tx.latitude = 40.71;
  tx.longitude = -74.0;
  return tx;
}

}  // namespace txscore::testing
