// Conditions on a pipeline's edges: `when:` of a stage, over the typed outputs of the stages
// before it, e.g.
//
//   when: decision.decision == REVIEW
//   when: fraud.score >= 0.6 and decision.decision != DECLINE
//
// Outputs that can be compared: numbers (a model's `score`, in [0, 1]) and decisions (APPROVE,
// REVIEW or DECLINE). Comparisons: == != for both, >= > <= < for numbers; terms are joined by
// `and` / `or`, evaluated left to right (no parentheses). A term over a stage that did not run
// for the request is false. Parsed and type-checked when the pipeline file is loaded;
// evaluating one costs a few comparisons.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/result.h"
#include "pipelines/values.h"

namespace txscore::pipelines {

class Condition {
 public:
  // `outputs` maps "stage.output" to its type and its stage's index, for the stages upstream
  // of the one being configured.
  struct Output {
    ValueType type;
    int stage = 0;
  };
  static Result<Condition> Parse(const std::string& text, const std::map<std::string, Output>& outputs);

  bool Evaluate(const RequestValues& values) const;
  const std::string& text() const { return text_; }

 private:
  enum class Op { kEq, kNe, kGe, kGt, kLe, kLt };
  struct Term {
    ValueType type = ValueType::kNumber;
    int stage = 0;
    Op op = Op::kEq;
    double number = 0;
    Decision decision{};
  };
  std::string text_;
  std::vector<Term> terms_;
  std::vector<bool> joined_by_and_;  // between term i and i + 1
};

}  // namespace txscore::pipelines
