// A stage kind defined only in tests: every run fails with Internal("boom"). The executor runs
// it through the one StageKind interface, with no code outside the kind naming it; tests use
// it to prove that a canary or a request meets a failing stage.
#pragma once

#include <memory>

#include "pipelines/stage_kind.h"

namespace txscore::testing {

class ExplodingKind : public pipelines::StageKind {
 public:
  ExplodingKind() {
    spec_.kind = "explodes";
    spec_.inputs = {{"features", pipelines::ValueType::kFeatures}};
  }
  const pipelines::StageKindSpec& spec() const override { return spec_; }
  Result<std::shared_ptr<const pipelines::StageSettings>> Parse(const pipelines::YamlReader&, const YAML::Node&,
                                                                const pipelines::StageDeclaration&) const override {
    return std::shared_ptr<const pipelines::StageSettings>(std::make_shared<pipelines::StageSettings>());
  }
  Result<std::unique_ptr<pipelines::PreparedStage>> Prepare(const pipelines::StageSettings&,
                                                            const pipelines::PrepareContext&) const override {
    class Prepared : public pipelines::PreparedStage {
     public:
      Status Run(const pipelines::StageInputs&, const pipelines::ScoredItem&, pipelines::StageOutputs*,
                 pipelines::StageReport*) const override {
        return Internal("boom");
      }
      std::string Describe() const override { return "always fails"; }
    };
    return std::unique_ptr<pipelines::PreparedStage>(new Prepared());
  }

 private:
  pipelines::StageKindSpec spec_;
};

}  // namespace txscore::testing
