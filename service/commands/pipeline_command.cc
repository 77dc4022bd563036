// txscore pipeline digest [--config SETTINGS | --pipeline FILE]: the bundle digest of a pipeline
// (pipelines/bundle_digest.h), each file's digest, and whether the settings' pin matches it.
#include <cstdio>

#include "pipelines/bundle_digest.h"
#include "pipelines/config.h"
#include "service/commands/commands.h"
#include "service/settings.h"

namespace txscore::service {
namespace {

struct PipelineOptions {
  std::string config_path = "config/txscore.yaml";
  std::string pipeline_path;  // instead of the settings' pipeline (no pin is checked)
};

int RunDigest(const PipelineOptions& options) {
  std::string pipeline_path = options.pipeline_path;
  ServiceSettings settings;
  if (pipeline_path.empty()) {
    Result<ServiceSettings> loaded = LoadServiceSettings(options.config_path);
    if (!loaded.ok()) {
      std::fprintf(stderr, "invalid settings file: %s\n", loaded.error().ToString().c_str());
      return 1;
    }
    settings = std::move(loaded).value();
    pipeline_path = settings.pipeline;
  }
  Result<pipelines::PipelineConfig> config = pipelines::LoadPipelineConfig(pipeline_path);
  if (!config.ok()) {
    std::fprintf(stderr, "invalid pipeline file: %s\n", config.error().ToString().c_str());
    return 1;
  }
  Result<pipelines::BundleDigest> bundle = pipelines::DigestPipelineBundle(*config);
  if (!bundle.ok()) {
    std::fprintf(stderr, "%s\n", bundle.error().ToString().c_str());
    return 1;
  }
  for (const pipelines::BundleFile& file : bundle->files) {
    std::printf("%s %s %llu %s\n", file.sha256_hex.c_str(), file.name.c_str(),
                static_cast<unsigned long long>(file.bytes), file.path.c_str());
  }
  std::printf("%s\n", bundle->digest.c_str());
  if (settings.pipeline_digest.empty()) {
    if (options.pipeline_path.empty()) {
      std::printf("not pinned: to pin it, add to %s: pipeline_digest: \"%s\"\n", settings.source_path.c_str(),
                  bundle->digest.c_str());
    }
    return 0;
  }
  if (Status pinned = pipelines::CheckPinnedDigest(settings.pipeline_digest, *bundle, settings.source_path);
      !pinned.ok()) {
    std::fprintf(stderr, "%s\n", pinned.error().message.c_str());
    return 1;
  }
  std::printf("matches pipeline_digest in %s\n", settings.source_path.c_str());
  return 0;
}

}  // namespace

void AddPipelineCommand(CLI::App& app, int* exit_code) {
  CLI::App* pipeline = app.add_subcommand("pipeline", "What a pipeline's files are");
  pipeline->require_subcommand(1);
  auto options = std::make_shared<PipelineOptions>();
  CLI::App* digest = pipeline->add_subcommand(
      "digest",
      "Print the SHA-256 of each file the pipeline reads (the pipeline file, models, schemas, rule lists, "
      "checkpoints) and the bundle digest over them, which pipeline_digest in the settings pins; exit 1 when the "
      "pin does not match");
  auto* config = digest->add_option("--config", options->config_path, "Service settings file: its pipeline and pin")
                     ->capture_default_str();
  digest->add_option("--pipeline", options->pipeline_path, "A pipeline file instead (no pin is checked)")
      ->excludes(config);
  digest->callback([options, exit_code] { *exit_code = RunDigest(*options); });
}

}  // namespace txscore::service
