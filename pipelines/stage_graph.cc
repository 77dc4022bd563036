#include "pipelines/stage_graph.h"

#include <algorithm>
#include <set>

#include "pipelines/stage_kind.h"

namespace txscore::pipelines {

namespace {

Error ErrorAt(const std::string& source, SourceLocation at, const std::string& message) {
  return InvalidArgument(source + ":" + std::to_string(at.line) + ":" + std::to_string(at.column) + ": " + message);
}

const PortSpec* FindPort(const std::vector<PortSpec>& ports, const std::string& name) {
  for (const PortSpec& p : ports) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

std::string JoinNames(const std::vector<std::string>& names, const std::string& separator = ", ") {
  std::string joined;
  for (const std::string& n : names) joined += (joined.empty() ? "" : separator) + n;
  return joined;
}

// A cycle among the stages left over by a topological sort, found from `start` (one of them):
// each has an upstream stage that is left over too, so walking upstream repeats a stage.
std::vector<int> FindCycle(const std::vector<std::vector<int>>& after, const std::vector<bool>& left_over, int start) {
  std::vector<int> path = {start};
  std::vector<int> position(after.size(), -1);
  position[static_cast<size_t>(start)] = 0;
  int node = start;
  while (true) {
    int next = -1;
    for (int p : after[static_cast<size_t>(node)]) {
      if (left_over[static_cast<size_t>(p)]) {
        next = p;
        break;
      }
    }
    if (position[static_cast<size_t>(next)] >= 0) {
      std::vector<int> cycle(path.begin() + position[static_cast<size_t>(next)], path.end());
      cycle.push_back(next);
      return cycle;
    }
    position[static_cast<size_t>(next)] = static_cast<int>(path.size());
    path.push_back(next);
    node = next;
  }
}

}  // namespace

Result<StageGraph> StageGraph::Build(const std::vector<StageDeclaration>& declared, const StageKindRegistry& kinds,
                                     const std::string& source, bool require_sink) {
  StageGraph graph;
  const size_t n = declared.size();
  std::map<std::string, int> index;
  std::vector<const StageKindSpec*> specs;
  for (size_t i = 0; i < n; ++i) {
    const StageDeclaration& d = declared[i];
    if (!index.emplace(d.name, static_cast<int>(i)).second) {
      return ErrorAt(source, d.at, "there are two stages named \"" + d.name + "\"");
    }
    const StageKind* kind = kinds.Find(d.kind);
    if (kind == nullptr) {
      return ErrorAt(
          source, d.at,
          "stage \"" + d.name + "\": unknown kind \"" + d.kind + "\" (known: " + JoinNames(kinds.Kinds()) + ")");
    }
    specs.push_back(&kind->spec());
    GraphStage stage;
    stage.name = d.name;
    stage.kind = d.kind;
    graph.stages_.push_back(std::move(stage));
  }
  for (size_t i = 0; i < n; ++i) {
    const StageDeclaration& d = declared[i];
    for (const std::string& upstream : d.after) {
      auto it = index.find(upstream);
      if (it == index.end()) {
        return ErrorAt(source, d.after_at,
                       "stage \"" + d.name + "\" comes after \"" + upstream + "\", but there is no stage of that name");
      }
      if (it->second == static_cast<int>(i)) {
        return ErrorAt(source, d.after_at, "stage \"" + d.name + "\" cannot come after itself");
      }
      graph.stages_[i].after.push_back(it->second);
    }
  }

  // Topological order, ties in file order (Kahn's algorithm, taking the lowest ready index).
  std::vector<std::vector<int>> after(n), downstream(n);
  std::vector<int> waiting(n, 0);
  for (size_t i = 0; i < n; ++i) {
    after[i] = graph.stages_[i].after;
    waiting[i] = static_cast<int>(after[i].size());
    for (int u : after[i]) downstream[static_cast<size_t>(u)].push_back(static_cast<int>(i));
  }
  std::set<int> ready;
  for (size_t i = 0; i < n; ++i) {
    if (waiting[i] == 0) ready.insert(static_cast<int>(i));
  }
  while (!ready.empty()) {
    const int next = *ready.begin();
    ready.erase(ready.begin());
    graph.order_.push_back(next);
    for (int d : downstream[static_cast<size_t>(next)]) {
      if (--waiting[static_cast<size_t>(d)] == 0) ready.insert(d);
    }
  }
  if (graph.order_.size() != n) {
    std::vector<bool> left_over(n, true);
    for (int i : graph.order_) left_over[static_cast<size_t>(i)] = false;
    const int first_left = static_cast<int>(std::find(left_over.begin(), left_over.end(), true) - left_over.begin());
    const std::vector<int> cycle = FindCycle(after, left_over, first_left);
    std::vector<std::string> names;
    // FindCycle walks upstream; print it the way data flows.
    for (auto it = cycle.rbegin(); it != cycle.rend(); ++it) names.push_back(declared[static_cast<size_t>(*it)].name);
    const int reported = *std::min_element(cycle.begin(), cycle.end());
    return ErrorAt(source, declared[static_cast<size_t>(reported)].after_at,
                   "the stages form a cycle: " + JoinNames(names, " -> "));
  }

  // The sink: the stage whose outputs are the pipeline's result.
  std::vector<int> sinks;
  for (size_t i = 0; i < n; ++i) {
    if (specs[i]->sink) sinks.push_back(static_cast<int>(i));
  }
  std::string sink_kind;
  for (const std::string& k : kinds.Kinds()) {
    if (kinds.Find(k)->spec().sink) sink_kind += (sink_kind.empty() ? "" : " or ") + k;
  }
  if (sinks.size() > 1 || (require_sink && sinks.empty())) {
    return ErrorAt(source, sinks.size() > 1 ? declared[static_cast<size_t>(sinks[1])].at : SourceLocation{1, 1},
                   "a pipeline has exactly one " + sink_kind + " stage; this one has " + std::to_string(sinks.size()));
  }
  if (!sinks.empty()) graph.sink_ = sinks[0];

  // Every stage's upstream, direct or not.
  std::vector<std::set<int>> upstream(n);
  for (int i : graph.order_) {
    for (int u : after[static_cast<size_t>(i)]) {
      upstream[static_cast<size_t>(i)].insert(u);
      upstream[static_cast<size_t>(i)].insert(upstream[static_cast<size_t>(u)].begin(),
                                              upstream[static_cast<size_t>(u)].end());
    }
  }

  for (size_t i = 0; i < n; ++i) {
    const StageDeclaration& d = declared[i];
    GraphStage& stage = graph.stages_[i];
    const StageKindSpec& spec = *specs[i];
    for (const auto& [input, from] : d.inputs) {
      if (FindPort(spec.inputs, input) == nullptr) {
        std::vector<std::string> known;
        for (const PortSpec& p : spec.inputs) known.push_back(p.name);
        return ErrorAt(source, d.inputs_at,
                       "stage \"" + d.name + "\" (" + d.kind + ") has no input \"" + input +
                           "\" (its inputs: " + (known.empty() ? "none" : JoinNames(known)) + ")");
      }
    }
    for (const PortSpec& port : spec.inputs) {
      InputBinding binding{port.name, port.type, {}};
      auto explicit_binding = d.inputs.find(port.name);
      if (explicit_binding != d.inputs.end()) {
        const std::string& from = explicit_binding->second;
        const size_t dot = from.find('.');
        auto it = dot == std::string::npos ? index.end() : index.find(from.substr(0, dot));
        if (port.each_upstream) {
          return ErrorAt(source, d.inputs_at,
                         "stage \"" + d.name + "\": input \"" + port.name +
                             "\" joins every stage it comes after; it cannot be named");
        }
        if (it == index.end() || upstream[i].count(it->second) == 0) {
          return ErrorAt(source, d.inputs_at,
                         "stage \"" + d.name + "\": input \"" + port.name + "\" reads \"" + from +
                             "\", which is not an output of a stage upstream of it");
        }
        const PortSpec* output = FindPort(specs[static_cast<size_t>(it->second)]->outputs, from.substr(dot + 1));
        if (output == nullptr) {
          return ErrorAt(source, d.inputs_at,
                         "stage \"" + d.name + "\": input \"" + port.name + "\" reads \"" + from + "\", but stage \"" +
                             from.substr(0, dot) + "\" has no such output");
        }
        if (output->type != port.type) {
          return ErrorAt(source, d.inputs_at,
                         "stage \"" + d.name + "\": input \"" + port.name + "\" is of type " +
                             ValueTypeName(port.type) + ", but " + from + " is of type " + ValueTypeName(output->type));
        }
        binding.stages.push_back(it->second);
      } else {
        std::vector<std::string> providers;
        for (int u : stage.after) {
          const PortSpec* output = FindPort(specs[static_cast<size_t>(u)]->outputs, port.name);
          if (output == nullptr) continue;
          const std::string& upstream_name = declared[static_cast<size_t>(u)].name;
          if (output->type != port.type) {
            return ErrorAt(source, d.after_at,
                           "stage \"" + d.name + "\": input \"" + port.name + "\" is of type " +
                               ValueTypeName(port.type) + ", but " + upstream_name + "." + port.name + " is of type " +
                               ValueTypeName(output->type));
          }
          binding.stages.push_back(u);
          providers.push_back(upstream_name);
        }
        const SourceLocation where = d.after.empty() ? d.at : d.after_at;
        if (binding.stages.empty() && port.optional) {
          stage.inputs.push_back(std::move(binding));
          stage.optional.push_back(true);
          continue;
        }
        if (binding.stages.empty()) {
          return ErrorAt(source, where,
                         "stage \"" + d.name + "\" needs input \"" + port.name + "\" (" + ValueTypeName(port.type) +
                             "), and none of the stages it comes after (" +
                             (d.after.empty() ? "none" : JoinNames(d.after)) + ") has an output \"" + port.name + "\"");
        }
        if (port.each_upstream && !port.optional && binding.stages.size() < 2) {
          return ErrorAt(source, where,
                         "stage \"" + d.name + "\" joins \"" + port.name +
                             "\" from at least two stages; it comes after only " + JoinNames(providers));
        }
        if (!port.each_upstream && binding.stages.size() > 1) {
          return ErrorAt(source, where,
                         "stage \"" + d.name + "\": input \"" + port.name + "\" could come from " +
                             JoinNames(providers, " or ") + "; choose one with inputs: {" + port.name + ": STAGE." +
                             port.name + "} or join them with a blend stage");
        }
      }
      stage.inputs.push_back(std::move(binding));
      stage.optional.push_back(port.optional);
    }
    std::string when = d.when;
    SourceLocation when_at = d.when_at;
    if (when.empty() && !spec.default_when.empty()) {
      const std::string placeholder = "$sink";
      std::string shown = spec.default_when;
      shown.replace(shown.find(placeholder), placeholder.size(), "<" + sink_kind + ">");
      if (graph.sink_ < 0 || upstream[i].count(graph.sink_) == 0) {
        return ErrorAt(source, d.at,
                       "stage \"" + d.name + "\" needs a when: (its default, " + shown + ", needs the " + sink_kind +
                           " stage upstream of it), e.g. when: \"model.score >= 0.5\"");
      }
      when = spec.default_when;
      when.replace(when.find(placeholder), placeholder.size(), declared[static_cast<size_t>(graph.sink_)].name);
      when_at = d.at;
    }
    if (!when.empty()) {
      std::map<std::string, Condition::Output> outputs;
      for (int u : upstream[i]) {
        for (const PortSpec& p : specs[static_cast<size_t>(u)]->outputs) {
          outputs[declared[static_cast<size_t>(u)].name + "." + p.name] = {p.type, u};
        }
      }
      Result<Condition> condition = Condition::Parse(when, outputs);
      if (!condition.ok()) return ErrorAt(source, when_at, "when: " + condition.error().message);
      stage.when = std::move(condition).value();
    }
  }

  if (graph.sink_ >= 0) {
    // The sink and everything it reads, directly or not, must run for every request.
    std::vector<int> pending = {graph.sink_};
    while (!pending.empty()) {
      const int s = pending.back();
      pending.pop_back();
      GraphStage& stage = graph.stages_[static_cast<size_t>(s)];
      if (stage.required) continue;
      stage.required = true;
      if (stage.when) {
        return ErrorAt(source, declared[static_cast<size_t>(s)].when_at,
                       "stage \"" + stage.name + "\" cannot have a condition: the " + sink_kind +
                           " depends on it, and every request needs one");
      }
      // An optional input binds a stage the sink can do without only when that stage is
      // best effort (the LLM's findings). Any other stage it reads (a rules verdict) must run:
      // were it skipped past its deadline, a caller's short budget could skip a forced DECLINE.
      for (size_t k = 0; k < stage.inputs.size(); ++k) {
        for (int u : stage.inputs[k].stages) {
          if (!stage.optional[k] || !specs[static_cast<size_t>(u)]->best_effort) pending.push_back(u);
        }
      }
    }
  }
  return graph;
}

int StageGraph::Find(const std::string& name) const {
  for (size_t i = 0; i < stages_.size(); ++i) {
    if (stages_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

int StageGraph::InputStage(int index, size_t port) const {
  const std::vector<InputBinding>& inputs = stage(index).inputs;
  if (port >= inputs.size() || inputs[port].stages.empty()) return -1;
  return inputs[port].stages[0];
}

bool StageGraph::ShouldRun(int index, const RequestValues& values) const {
  const GraphStage& s = stage(index);
  for (size_t k = 0; k < s.inputs.size(); ++k) {
    if (s.optional[k]) continue;
    for (int u : s.inputs[k].stages) {
      if (!values[static_cast<size_t>(u)].ran) return false;
    }
  }
  return !s.when || s.when->Evaluate(values);
}

}  // namespace txscore::pipelines
