// Conditions on a pipeline's edges: `when:` of a stage, over the typed outputs of the stages
// before it, e.g.
//
//   when: decision.decision == REVIEW
//   when: fraud.score >= 0.6 and decision.decision != DECLINE
//
// Outputs: an xgboost stage's `score` (a number in [0, 1]) and a decision stage's `decision`
// (APPROVE, REVIEW or DECLINE). Comparisons: == != for both, >= > <= < for numbers; terms are
// joined by `and` / `or`, evaluated left to right (no parentheses). Parsed and type-checked
// when the pipeline file is loaded; evaluating one costs a few comparisons.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/result.h"

namespace txscore::pipelines {

enum class Decision;  // pipelines/decision.h (which needs config.h, which needs this header)

enum class ValueType { kNumber, kDecision };

// What a request has produced when a condition is evaluated.
struct StageValues {
  double score = 0;
  Decision decision;
};

class Condition {
 public:
  // `outputs` maps "stage.output" to its type, for the stages upstream of the one being
  // configured; and which StageValues field each reads ("score" or "decision").
  struct Output {
    ValueType type;
  };
  static Result<Condition> Parse(const std::string& text, const std::map<std::string, Output>& outputs);

  bool Evaluate(const StageValues& values) const;
  const std::string& text() const { return text_; }

 private:
  enum class Op { kEq, kNe, kGe, kGt, kLe, kLt };
  struct Term {
    ValueType type = ValueType::kNumber;
    Op op = Op::kEq;
    double number = 0;
    Decision decision{};
  };
  std::string text_;
  std::vector<Term> terms_;
  std::vector<bool> joined_by_and_;  // between term i and i + 1
};

}  // namespace txscore::pipelines
