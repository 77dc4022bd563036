// A pipeline's stages as a DAG: typed inputs and outputs, edges (`after:`), conditional
// edges (`when:`), fan-out (several stages after one) and join (one stage after several).
//
// Each stage kind declares its ports in a StageKindRegistry (filled by explicit calls such as
// RegisterBuiltinStageKinds; tests build their own). StageGraph::Build checks the stages of a
// pipeline file once, at load:
//   - every stage named in `after:` exists, and names are unique;
//   - the edges form no cycle;
//   - every input is bound to exactly one upstream output of its type: by name from the stages
//     it comes after, or explicitly (`inputs: {score: fraud_b.score}`), which must name a
//     stage upstream of it (directly or not) and an output of the input's type;
//   - `when:` names only outputs of stages upstream of it, compared with values of their type.
// Errors name the file, line and column of the offending key. The result holds the execution
// order (upstream first; ties in file order) and each input's binding, so a request does no
// lookups by name.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/result.h"
#include "pipelines/condition.h"
#include "pipelines/source_location.h"
#include "pipelines/values.h"

namespace txscore::pipelines {

struct PortSpec {
  std::string name;  // e.g. "score"
  ValueType type;
  // A join input: bound to this output of every stage in `after:` that has one (at least two,
  // or any number when optional), e.g. a blend stage's scores, or every rules stage's verdict
  // that a decision reads. Otherwise bound to exactly one.
  bool each_upstream = false;
  // May be left unbound, and the stage runs whether or not its source ran (a decision that
  // takes an LLM's findings into account when there are some).
  bool optional = false;
};

// What a stage kind is, as the graph and the executors see it (stage_kind.h).
struct StageKindSpec {
  std::string kind;  // as written in `kind:`
  std::vector<PortSpec> inputs;
  std::vector<PortSpec> outputs;  // at most one output per type (values.h)
  std::set<std::string> keys;     // its own YAML keys, beside name, kind, after, inputs and when
  // What items it can score: a stage that reads the transaction (features) or the claim
  // (claim_features) fixes what its pipeline scores. Default: both.
  bool transactions = true;
  bool claims = true;
  // Its stage is the pipeline's result (the decision): exactly one per pipeline, and the
  // stages it depends on always run.
  bool sink = false;
  // Its `number` output is a model score reported per stage (ScoreResult.stage_scores).
  bool reports_score = false;
  // It may fail or run out of time on an item without failing the item: the item is then
  // reported degraded (the LLM stage). Its failures count as shortfalls in a claims job.
  bool best_effort = false;
  // The condition used when its stage has no `when:`, with "$sink" standing for the sink's
  // stage name (which must then be upstream of it). Empty: always, once its inputs exist.
  std::string default_when;
};

class StageKindRegistry;  // stage_kind.h

// A stage as the pipeline file declares it.
struct StageDeclaration {
  std::string name;
  std::string kind;
  std::vector<std::string> after;
  std::map<std::string, std::string> inputs;  // explicit bindings: input -> "stage.output"
  std::string when;                           // empty: always, once its inputs exist
  SourceLocation at;                          // the stage itself
  SourceLocation after_at, inputs_at, when_at;
};

// Where an input's value comes from.
struct InputBinding {
  std::string input;
  ValueType type;
  std::vector<int> stages;  // one stage, or every joined one for an each_upstream input
};

struct GraphStage {
  std::string name;
  std::string kind;
  std::vector<int> after;            // stage indices
  std::vector<InputBinding> inputs;  // in the kind's port order; an unbound optional input has no stages
  std::vector<bool> optional;        // per input: may be absent at run time
  std::optional<Condition> when;
  // The sink reads it, directly or not, through inputs that are not optional or from a kind
  // that is not best effort (a rules verdict; see Build). It runs for every request: no `when:`,
  // and never skipped for its deadline.
  bool required = false;
};

class StageGraph {
 public:
  // With `require_sink`, exactly one stage is of a sink kind (StageKindSpec::sink) and the
  // stages it depends on are `required`; without, a sink is optional.
  static Result<StageGraph> Build(const std::vector<StageDeclaration>& stages, const StageKindRegistry& kinds,
                                  const std::string& source_path, bool require_sink = true);

  size_t size() const { return stages_.size(); }
  const GraphStage& stage(int index) const { return stages_[static_cast<size_t>(index)]; }
  const std::vector<GraphStage>& stages() const { return stages_; }
  // Stage indices, every stage after all the stages it reads from.
  const std::vector<int>& order() const { return order_; }
  int Find(const std::string& name) const;  // -1 when absent
  int sink() const { return sink_; }        // -1 without a sink
  // The stage that feeds input `port` of stage `index` (its first binding), or -1.
  int InputStage(int index, size_t port) const;

  // True when every stage a non-optional input of `index` is bound to has run for this
  // request, and its condition (if any) holds. (`after:` stages that feed it nothing only
  // order it.)
  bool ShouldRun(int index, const RequestValues& values) const;

 private:
  std::vector<GraphStage> stages_;
  std::vector<int> order_;
  int sink_ = -1;
};

}  // namespace txscore::pipelines
