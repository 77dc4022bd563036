#include "pipelines/bundle_digest.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include "common/sha256.h"
#include "pipelines/scoring_pipeline.h"
#include "tests/test_support.h"

namespace txscore::pipelines {
namespace {

namespace fs = std::filesystem;

// A bundle of every kind of file a stage reads, in DIR/bundle: the pipeline file, a model with
// its schema found beside it, a rule list, and an LLM checkpoint directory (never prepared
// here: the digest reads files, it loads nothing).
class BundleDigestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::WriteTestPipeline(dir_);  // card.key and settings.yaml, for the pipeline tests below
    fs::create_directories(Bundle("llm/tokenizer"));
    fs::copy_file(testing::SmallModelDir() + "/fraud.ubj", Bundle("fraud.ubj"));
    fs::copy_file(testing::SmallModelDir() + "/fraud.features.json", Bundle("fraud.features.json"));
    testing::WriteFile(Bundle("deny.txt"), "m-1\nm-2\n");
    testing::WriteFile(Bundle("llm/config.json"), "{\"model_type\": \"qwen3\"}");
    testing::WriteFile(Bundle("llm/tokenizer/vocab.txt"), "a\nb\n");
    testing::WriteFile(Bundle("pipeline.yaml"), kPipeline);
  }
  std::string Bundle(const std::string& name) const { return dir_.file("bundle/" + name); }
  Result<BundleDigest> Digest(const std::string& dir = "bundle") const {
    Result<PipelineConfig> config = LoadPipelineConfig(dir_.file(dir + "/pipeline.yaml"));
    EXPECT_TRUE(config.ok()) << config.error().ToString();
    if (!config.ok()) return config.error();
    return DigestPipelineBundle(*config);
  }
  static std::string Line(const std::string& name, const std::string& path) {
    return name + " " + Sha256HexOfFile(path).value() + " " + std::to_string(fs::file_size(path)) + "\n";
  }

  static constexpr char kPipeline[] =
      "pipeline: {name: t, version: \"1\"}\n"
      "stages:\n"
      "  - {name: features, kind: features}\n"
      "  - {name: fraud, kind: xgboost, after: features, model: fraud.ubj}\n"
      "  - {name: rules, kind: rules, after: features, lists: {deny: deny.txt},\n"
      "     rules: [{id: R1, when: \"merchant_id in deny\", decision: DECLINE}]}\n"
      "  - {name: decision, kind: decision, after: [fraud, rules]}\n"
      "  - {name: forensic, kind: llm_findings, after: decision, model: llm}\n";
  testing::TempDir dir_;
};

// The digest is SHA-256 over the documented manifest: each file by stage and role, its SHA-256
// and size, a checkpoint's files sorted by their path inside it.
TEST_F(BundleDigestTest, IsTheSha256OfAManifestNamingEveryFileByStageAndRole) {
  const BundleDigest bundle = Digest().value();
  const std::string manifest =
      "txscore pipeline bundle v1\n" + Line("pipeline", Bundle("pipeline.yaml")) +
      Line("fraud model", Bundle("fraud.ubj")) + Line("fraud schema", Bundle("fraud.features.json")) +
      Line("rules list deny", Bundle("deny.txt")) + Line("forensic model/config.json", Bundle("llm/config.json")) +
      Line("forensic model/tokenizer/vocab.txt", Bundle("llm/tokenizer/vocab.txt"));
  EXPECT_EQ(bundle.Manifest(), manifest);
  EXPECT_EQ(bundle.digest, "sha256:" + Sha256Hex(manifest).value());
  EXPECT_TRUE(IsBundleDigest(bundle.digest));
  EXPECT_FALSE(IsBundleDigest("sha256:" + std::string(63, 'a')));
  EXPECT_FALSE(IsBundleDigest("sha256:" + std::string(64, 'A')));
  EXPECT_FALSE(IsBundleDigest("sha512:" + std::string(64, 'a')));
}

// Whatever decides (the pipeline file, a model, its schema, a list, any checkpoint file, even
// a checkpoint file's name) changes the digest; where the bundle lies does not.
TEST_F(BundleDigestTest, EveryFileThatDecidesChangesItAndTheBundlesPlaceDoesNot) {
  const std::string original = Digest()->digest;
  fs::copy(dir_.file("bundle"), dir_.file("copy"), fs::copy_options::recursive);
  EXPECT_EQ(Digest("copy")->digest, original);
  const auto changed = [&](const std::function<void()>& change) {
    fs::remove_all(dir_.file("copy"));
    fs::copy(dir_.file("bundle"), dir_.file("copy"), fs::copy_options::recursive);
    change();
    return Digest("copy")->digest;
  };
  const auto append = [&](const std::string& name, const std::string& text) {
    return [this, name, text] {
      testing::WriteFile(dir_.file("copy/" + name), testing::ReadFile(dir_.file("copy/" + name)) + text);
    };
  };
  for (const std::string& name : {"pipeline.yaml", "fraud.ubj", "fraud.features.json", "deny.txt", "llm/config.json",
                                  "llm/tokenizer/vocab.txt"}) {
    EXPECT_NE(changed(append(name, name == "pipeline.yaml" ? "# a comment\n" : " ")), original) << name;
  }
  EXPECT_NE(changed([&] { fs::rename(dir_.file("copy/llm/tokenizer/vocab.txt"), dir_.file("copy/llm/vocab.txt")); }),
            original);
  EXPECT_NE(changed([&] { testing::WriteFile(dir_.file("copy/llm/extra.bin"), ""); }), original);
}

TEST_F(BundleDigestTest, ACheckpointHoldingSomethingButFilesAndDirectoriesIsRefused) {
  ASSERT_EQ(::mkfifo(Bundle("llm/pipe").c_str(), 0600), 0);
  EXPECT_TRUE(testing::IsError(
      Digest(), ErrorCode::kInvalidArgument,
      "pipeline bundle: " + Bundle("llm/pipe") + " (in forensic model) is neither a regular file nor a directory"));
}

// A pin that does not match refuses the pipeline before any stage reads its files: here a model
// file that is not a model is never parsed, the pin's refusal comes first.
TEST_F(BundleDigestTest, APipelineWhoseFilesDoNotMatchThePinIsRefusedBeforeItsStagesLoad) {
  auto db = storage::Database::Open(dir_.file("db"));
  ASSERT_TRUE(db.ok());
  Result<PipelineConfig> config = LoadPipelineConfig(testing::WriteTestPipeline(dir_));
  ASSERT_TRUE(config.ok());
  const std::string pinned = DigestPipelineBundle(*config)->digest;
  config->pinned_digest = pinned;
  config->pinned_in = "settings.yaml";
  {
    auto pipeline = ScoringPipeline::Create(*config, db->get(), testing::TestCardKeyPath(dir_));
    ASSERT_TRUE(pipeline.ok()) << pipeline.error().ToString();
    EXPECT_EQ((*pipeline)->bundle().digest, pinned);
  }
  config->pinned_digest = "sha256:" + std::string(64, '0');
  EXPECT_TRUE(testing::IsError(
      ScoringPipeline::Create(*config, db->get(), testing::TestCardKeyPath(dir_)), ErrorCode::kFailedPrecondition,
      "the pipeline's files have digest " + pinned + ", not the sha256:" + std::string(64, '0') +
          " that pipeline_digest in settings.yaml pins: a file of the pipeline changed; see each file's digest with: "
          "txscore pipeline digest --config settings.yaml"));

  // Pinned to the bundle's own digest, a model that is not a model fails as a model; pinned to
  // another, the pin refuses it first.
  const Result<PipelineConfig> broken = LoadPipelineConfig(Bundle("pipeline.yaml"));
  ASSERT_TRUE(broken.ok());
  testing::WriteFile(Bundle("fraud.ubj"), "not a model");
  PipelineConfig pinned_broken = *broken;
  pinned_broken.pinned_digest = DigestPipelineBundle(pinned_broken)->digest;
  const auto not_a_model = ScoringPipeline::Create(pinned_broken, db->get(), testing::TestCardKeyPath(dir_));
  ASSERT_FALSE(not_a_model.ok());
  EXPECT_NE(not_a_model.error().code, ErrorCode::kFailedPrecondition) << not_a_model.error().ToString();
  pinned_broken.pinned_digest = pinned;
  const auto refused = ScoringPipeline::Create(pinned_broken, db->get(), testing::TestCardKeyPath(dir_));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, ErrorCode::kFailedPrecondition) << refused.error().ToString();
  EXPECT_NE(refused.error().message.find("that pipeline_digest in"), std::string::npos);
}

// Each decision's audit record names the digest of the bundle that decided it.
TEST_F(BundleDigestTest, EveryAuditRecordNamesTheDigestOfWhatDecided) {
  auto db = storage::Database::Open(dir_.file("db"));
  ASSERT_TRUE(db.ok());
  Result<PipelineConfig> config = LoadPipelineConfig(testing::WriteTestPipeline(dir_));
  ASSERT_TRUE(config.ok());
  auto pipeline = ScoringPipeline::Create(*config, db->get(), testing::TestCardKeyPath(dir_));
  ASSERT_TRUE(pipeline.ok()) << pipeline.error().ToString();
  ASSERT_TRUE((*pipeline)->Score(testing::ValidTransaction("req-1")).ok());
  const auto audit = (*pipeline)->audit_log().ReadLast(1);
  ASSERT_TRUE(audit.ok() && audit->size() == 1u);
  EXPECT_EQ((*audit)[0].pipeline_digest, DigestPipelineBundle(*config)->digest);
  EXPECT_TRUE(IsBundleDigest((*audit)[0].pipeline_digest));
}

}  // namespace
}  // namespace txscore::pipelines
