#include "pipelines/condition.h"

#include <cstdlib>
#include <sstream>

namespace txscore::pipelines {

Result<Condition> Condition::Parse(const std::string& text, const std::map<std::string, Output>& outputs) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  if (words.empty()) return InvalidArgument("the condition is empty");
  Condition c;
  c.text_ = text;
  size_t i = 0;
  while (true) {
    if (i + 3 > words.size())
      return InvalidArgument("expected STAGE.OUTPUT OP VALUE after \"" + (i > 0 ? words[i - 1] : "") + "\"");
    const std::string& name = words[i];
    const std::string& op = words[i + 1];
    const std::string& value = words[i + 2];
    auto output = outputs.find(name);
    if (output == outputs.end()) {
      std::string known;
      for (const auto& [k, v] : outputs) known += (known.empty() ? "" : ", ") + k;
      return InvalidArgument("\"" + name + "\" is not an output of an earlier stage (available: " + known + ")");
    }
    static const std::map<std::string, Op> kOps = {{"==", Op::kEq}, {"!=", Op::kNe}, {">=", Op::kGe},
                                                   {">", Op::kGt},  {"<=", Op::kLe}, {"<", Op::kLt}};
    auto parsed_op = kOps.find(op);
    if (parsed_op == kOps.end()) return InvalidArgument("\"" + op + "\" is not a comparison (==, !=, >=, >, <=, <)");
    Term term{output->second.type, output->second.stage, parsed_op->second};
    if (term.type == ValueType::kNumber) {
      char* end = nullptr;
      term.number = std::strtod(value.c_str(), &end);
      if (end == value.c_str() || *end != '\0') {
        return InvalidArgument(name + " is a number; \"" + value + "\" is not");
      }
    } else if (term.type == ValueType::kDecision) {
      if (term.op != Op::kEq && term.op != Op::kNe) {
        return InvalidArgument(name + " is a decision: compare it with == or !=, not " + op);
      }
      if (value == "APPROVE") {
        term.decision = Decision::kApprove;
      } else if (value == "REVIEW") {
        term.decision = Decision::kReview;
      } else if (value == "DECLINE") {
        term.decision = Decision::kDecline;
      } else {
        return InvalidArgument(name + " is a decision (APPROVE, REVIEW or DECLINE); \"" + value + "\" is not");
      }
    } else {
      return InvalidArgument(name + " is of type " + ValueTypeName(term.type) +
                             ", which cannot be compared (only numbers and decisions can)");
    }
    c.terms_.push_back(term);
    i += 3;
    if (i == words.size()) break;
    if (words[i] != "and" && words[i] != "or")
      return InvalidArgument("expected \"and\" or \"or\", not \"" + words[i] + "\"");
    c.joined_by_and_.push_back(words[i] == "and");
    ++i;
  }
  return c;
}

bool Condition::Evaluate(const RequestValues& values) const {
  auto holds = [&](const Term& t) {
    const StageOutputs& out = values[static_cast<size_t>(t.stage)];
    if (!out.ran) return false;
    if (t.type == ValueType::kDecision) {
      return t.op == Op::kEq ? out.decision == t.decision : out.decision != t.decision;
    }
    const double x = out.score;
    switch (t.op) {
      case Op::kEq:
        return x == t.number;
      case Op::kNe:
        return x != t.number;
      case Op::kGe:
        return x >= t.number;
      case Op::kGt:
        return x > t.number;
      case Op::kLe:
        return x <= t.number;
      case Op::kLt:
        return x < t.number;
    }
    return false;
  };
  bool result = holds(terms_[0]);
  for (size_t i = 1; i < terms_.size(); ++i) {
    result = joined_by_and_[i - 1] ? (result && holds(terms_[i])) : (result || holds(terms_[i]));
  }
  return result;
}

}  // namespace txscore::pipelines
