#include "pipelines/stages/rules_stage.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <string_view>
#include <unordered_set>

#include "common/file_io.h"
#include "common/pan_scan.h"
#include "fraud/features.h"

namespace txscore::pipelines {
namespace {

constexpr size_t kMaxListFileBytes = 64 << 20;
constexpr size_t kMaxListEntryBytes = 256;

// An allow or deny list: looked up with a view of the item's field, without copying it.
struct ViewHash {
  using is_transparent = void;
  size_t operator()(std::string_view text) const { return std::hash<std::string_view>()(text); }
};
using EntryList = std::unordered_set<std::string, ViewHash, std::equal_to<>>;

// A name a condition may use, and how to read it from an item.
struct Field {
  enum class Type { kNumber, kText };
  Type type = Type::kNumber;
  bool transactions = false;  // defined for transactions
  bool claims = false;        // defined for claims
  std::function<double(const ScoredItem&, const fraud::FeatureVector&)> number;
  std::function<std::string_view(const ScoredItem&)> text;  // a view into the item: no copy
};

Field Number(bool transactions, std::function<double(const ScoredItem&)> read) {
  return {Field::Type::kNumber, transactions, !transactions,
          [read](const ScoredItem& item, const fraud::FeatureVector&) { return read(item); }, nullptr};
}
Field Text(bool transactions, std::function<std::string_view(const ScoredItem&)> read) {
  return {Field::Type::kText, transactions, !transactions, nullptr, std::move(read)};
}

const std::map<std::string, Field>& ItemFields() {
  static const std::map<std::string, Field>* const fields = [] {
    auto* f = new std::map<std::string, Field>();
    const bool tx = true, claim = false;
    (*f)["amount"] = Number(tx, [](const ScoredItem& i) { return i.transaction->amount_major(); });
    (*f)["currency"] = Text(tx, [](const ScoredItem& i) -> std::string_view { return i.transaction->currency; });
    (*f)["mcc"] = Text(tx, [](const ScoredItem& i) -> std::string_view { return i.transaction->mcc; });
    (*f)["merchant_id"] = Text(tx, [](const ScoredItem& i) -> std::string_view { return i.transaction->merchant_id; });
    (*f)["merchant_country"] =
        Text(tx, [](const ScoredItem& i) -> std::string_view { return i.transaction->merchant_country; });
    (*f)["card_country"] =
        Text(tx, [](const ScoredItem& i) -> std::string_view { return i.transaction->card_country; });
    (*f)["card_token"] = Text(tx, [](const ScoredItem& i) -> std::string_view { return i.transaction->card_token; });
    (*f)["device_id"] = Text(tx, [](const ScoredItem& i) {
      return i.transaction->device_id ? std::string_view(*i.transaction->device_id) : std::string_view();
    });
    (*f)["amount_claimed"] = Number(claim, [](const ScoredItem& i) { return i.claim->amount_claimed; });
    (*f)["policy_limit"] = Number(claim, [](const ScoredItem& i) { return i.claim->policy_limit; });
    (*f)["prior_claims"] =
        Number(claim, [](const ScoredItem& i) { return static_cast<double>(i.claim->prior_claims); });
    (*f)["claim_type"] = Text(claim, [](const ScoredItem& i) {
      return std::string_view(fraud::ClaimTypes()[static_cast<size_t>(i.claim->claim_type)]);
    });
    (*f)["policy_id"] = Text(claim, [](const ScoredItem& i) -> std::string_view { return i.claim->policy_id; });
    (*f)["provider_id"] = Text(claim, [](const ScoredItem& i) -> std::string_view { return i.claim->provider_id; });
    (*f)["claimant_token"] =
        Text(claim, [](const ScoredItem& i) -> std::string_view { return i.claim->claimant_token; });
    return f;
  }();
  return *fields;
}

// A feature by its schema name; transaction features for transactions, claim features for claims.
std::optional<Field> FeatureField(const std::string& name) {
  const std::optional<fraud::FeatureId> id = fraud::FeatureIdFromName(name);
  if (!id) return std::nullopt;
  const bool claim = static_cast<int>(*id) >= static_cast<int>(fraud::kFirstClaimFeature);
  const auto index = static_cast<size_t>(*id);
  return Field{Field::Type::kNumber, !claim, claim,
               [index](const ScoredItem&, const fraud::FeatureVector& features) { return features[index]; }, nullptr};
}

// A compiled condition.
struct Node {
  enum class Kind { kOr, kAnd, kNot, kCompare, kIn };
  enum class Op { kEq, kNe, kGt, kGe, kLt, kLe };
  Kind kind = Kind::kCompare;
  std::vector<Node> children;  // kOr, kAnd (two or more), kNot (one)
  std::string name;            // kCompare, kIn: the field
  Field field;
  Op op = Op::kEq;
  double number = 0;
  std::string text;
  size_t list = 0;  // kIn: index into the stage's lists, in name order
};

bool Evaluate(const Node& node, const ScoredItem& item, const fraud::FeatureVector& features,
              const std::vector<EntryList>& lists) {
  switch (node.kind) {
    case Node::Kind::kOr:
      for (const Node& c : node.children) {
        if (Evaluate(c, item, features, lists)) return true;
      }
      return false;
    case Node::Kind::kAnd:
      for (const Node& c : node.children) {
        if (!Evaluate(c, item, features, lists)) return false;
      }
      return true;
    case Node::Kind::kNot:
      return !Evaluate(node.children[0], item, features, lists);
    case Node::Kind::kIn:
      return lists[node.list].count(node.field.text(item)) > 0;
    case Node::Kind::kCompare:
      break;
  }
  if (node.field.type == Field::Type::kText) {
    const bool equal = node.field.text(item) == node.text;
    return node.op == Node::Op::kEq ? equal : !equal;
  }
  const double v = node.field.number(item, features);
  if (std::isnan(v)) return false;  // a missing value matches no comparison
  switch (node.op) {
    case Node::Op::kEq:
      return v == node.number;
    case Node::Op::kNe:
      return v != node.number;
    case Node::Op::kGt:
      return v > node.number;
    case Node::Op::kGe:
      return v >= node.number;
    case Node::Op::kLt:
      return v < node.number;
    case Node::Op::kLe:
      return v <= node.number;
  }
  return false;
}

// Recursive descent over a rule's `when:`; `lists` are the declared list names, in order.
class ConditionParser {
 public:
  ConditionParser(const std::string& text, const std::vector<std::string>& lists) : text_(text), lists_(lists) {}

  Result<Node> Parse() {
    Next();
    TXSCORE_ASSIGN_OR_RETURN(Node node, ParseOr());
    if (token_.kind != Token::kEnd) return Fail("unexpected \"" + token_.text + "\"");
    return node;
  }
  bool transactions() const { return transactions_; }
  bool claims() const { return claims_; }
  // The first name used that the item kind lacks, for the message.
  const std::string& first_transaction_only() const { return first_transaction_only_; }
  const std::string& first_claim_only() const { return first_claim_only_; }

 private:
  struct Token {
    enum Kind { kEnd, kName, kNumber, kText, kOp, kOpen, kClose };
    Kind kind = kEnd;
    std::string text;
    size_t at = 0;
  };

  Error Fail(const std::string& message) const {
    return InvalidArgument(message + " (at character " + std::to_string(token_.at + 1) + ")");
  }

  void Next() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    token_ = Token{};
    token_.at = pos_;
    if (pos_ >= text_.size()) return;
    const char c = text_[pos_];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      const size_t start = pos_;
      while (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_')) {
        ++pos_;
      }
      token_ = {Token::kName, text_.substr(start, pos_ - start), start};
    } else if (std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '.') {
      const char* begin = text_.c_str() + pos_;
      char* end = nullptr;
      std::strtod(begin, &end);
      const size_t length = end == begin ? 1 : static_cast<size_t>(end - begin);
      token_ = {end == begin ? Token::kOp : Token::kNumber, text_.substr(pos_, length), pos_};
      pos_ += length;
    } else if (c == '\'' || c == '"') {
      const size_t close = text_.find(c, pos_ + 1);
      if (close == std::string::npos) {
        token_ = {Token::kOp, text_.substr(pos_), pos_};  // reported as unexpected by the caller
        unterminated_ = true;
        pos_ = text_.size();
        return;
      }
      token_ = {Token::kText, text_.substr(pos_ + 1, close - pos_ - 1), pos_};
      pos_ = close + 1;
    } else if (c == '(' || c == ')') {
      token_ = {c == '(' ? Token::kOpen : Token::kClose, std::string(1, c), pos_};
      ++pos_;
    } else {
      size_t length = 1;
      if (pos_ + 1 < text_.size() && text_[pos_ + 1] == '=' && (c == '=' || c == '!' || c == '<' || c == '>')) {
        length = 2;
      }
      token_ = {Token::kOp, text_.substr(pos_, length), pos_};
      pos_ += length;
    }
  }
  bool IsWord(const char* word) const { return token_.kind == Token::kName && token_.text == word; }

  Result<Node> ParseOr() {
    TXSCORE_ASSIGN_OR_RETURN(Node first, ParseAnd());
    if (!IsWord("or")) return first;
    Node node;
    node.kind = Node::Kind::kOr;
    node.children.push_back(std::move(first));
    while (IsWord("or")) {
      Next();
      TXSCORE_ASSIGN_OR_RETURN(Node next, ParseAnd());
      node.children.push_back(std::move(next));
    }
    return node;
  }
  Result<Node> ParseAnd() {
    TXSCORE_ASSIGN_OR_RETURN(Node first, ParseUnary());
    if (!IsWord("and")) return first;
    Node node;
    node.kind = Node::Kind::kAnd;
    node.children.push_back(std::move(first));
    while (IsWord("and")) {
      Next();
      TXSCORE_ASSIGN_OR_RETURN(Node next, ParseUnary());
      node.children.push_back(std::move(next));
    }
    return node;
  }
  Result<Node> ParseUnary() {
    if (IsWord("not")) {
      Next();
      Node node;
      node.kind = Node::Kind::kNot;
      TXSCORE_ASSIGN_OR_RETURN(Node inner, ParseUnary());
      node.children.push_back(std::move(inner));
      return node;
    }
    if (token_.kind == Token::kOpen) {
      Next();
      TXSCORE_ASSIGN_OR_RETURN(Node inner, ParseOr());
      if (token_.kind != Token::kClose) return Fail("expected \")\"");
      Next();
      return inner;
    }
    return ParseTerm();
  }
  // NAME OP LITERAL, NAME in LIST, NAME not in LIST.
  Result<Node> ParseTerm() {
    if (unterminated_) return Fail("a quoted string is not closed");
    if (token_.kind != Token::kName || IsWord("and") || IsWord("or") || IsWord("in")) {
      return Fail(token_.kind == Token::kEnd ? "expected a condition, found the end"
                                             : "expected a feature or field name, found \"" + token_.text + "\"");
    }
    Node node;
    node.name = token_.text;
    TXSCORE_ASSIGN_OR_RETURN(node.field, Resolve(node.name));
    Next();
    const bool negated = IsWord("not");
    if (negated) Next();
    if (IsWord("in")) {
      Next();
      if (node.field.type != Field::Type::kText) return Fail(node.name + " is a number; only text can be in a list");
      if (token_.kind != Token::kName) return Fail("expected a list name after \"in\"");
      const auto it = std::find(lists_.begin(), lists_.end(), token_.text);
      if (it == lists_.end()) {
        std::string known;
        for (const std::string& l : lists_) known += (known.empty() ? "" : ", ") + l;
        return Fail("no list named \"" + token_.text + "\" (lists: " + (known.empty() ? "none" : known) + ")");
      }
      node.kind = Node::Kind::kIn;
      node.list = static_cast<size_t>(it - lists_.begin());
      Next();
      if (!negated) return node;
      Node outer;
      outer.kind = Node::Kind::kNot;
      outer.children.push_back(std::move(node));
      return outer;
    }
    if (negated) return Fail("expected \"in\" after \"not\"");
    static const std::map<std::string, Node::Op> kOps = {{"==", Node::Op::kEq}, {"!=", Node::Op::kNe},
                                                         {">", Node::Op::kGt},  {">=", Node::Op::kGe},
                                                         {"<", Node::Op::kLt},  {"<=", Node::Op::kLe}};
    const auto op = token_.kind == Token::kOp ? kOps.find(token_.text) : kOps.end();
    if (op == kOps.end()) return Fail("expected a comparison (== != > >= < <=) or \"in\" after " + node.name);
    node.op = op->second;
    Next();
    if (unterminated_) return Fail("a quoted string is not closed");
    if (node.field.type == Field::Type::kNumber) {
      if (token_.kind != Token::kNumber) return Fail(node.name + " is a number; compare it with a number");
      node.number = std::strtod(token_.text.c_str(), nullptr);
    } else {
      if (token_.kind != Token::kText) return Fail(node.name + " is text; compare it with a quoted string");
      if (node.op != Node::Op::kEq && node.op != Node::Op::kNe) {
        return Fail(node.name + " is text; compare it with == or !=");
      }
      node.text = token_.text;
    }
    Next();
    return node;
  }

  Result<Field> Resolve(const std::string& name) {
    // A field before a feature of the same name: claim_type is both (the feature is the type's
    // index, the field its name), and a rule means the name.
    std::optional<Field> field;
    if (const auto it = ItemFields().find(name); it != ItemFields().end()) {
      field = it->second;
    } else {
      field = FeatureField(name);
    }
    if (!field) return Fail("\"" + name + "\" is neither a feature nor a field");
    if (!field->claims && first_transaction_only_.empty()) first_transaction_only_ = name;
    if (!field->transactions && first_claim_only_.empty()) first_claim_only_ = name;
    transactions_ = transactions_ && field->transactions;
    claims_ = claims_ && field->claims;
    return *field;
  }

  const std::string& text_;
  const std::vector<std::string>& lists_;
  size_t pos_ = 0;
  Token token_;
  bool unterminated_ = false;
  bool transactions_ = true, claims_ = true;
  std::string first_transaction_only_, first_claim_only_;
};

std::vector<std::string> ListNames(const RulesStageSettings& settings) {
  std::vector<std::string> names;
  for (const auto& [name, path] : settings.lists) names.push_back(name);
  return names;
}

Error RuleError(const RulesStageSettings& settings, const RulesStageSettings::Rule& rule, const std::string& message) {
  return InvalidArgument(settings.source + ":" + std::to_string(rule.at.line) + ":" + std::to_string(rule.at.column) +
                         ": rule " + rule.id + ": " + message);
}

Result<EntryList> LoadList(const std::string& name, const std::string& path) {
  TXSCORE_ASSIGN_OR_RETURN(std::string text, ReadFileBounded(path, kMaxListFileBytes, "list " + name));
  EntryList entries;
  size_t line_number = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    ++line_number;
    std::string line = text.substr(start, end - start);
    start = end + 1;
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    line = line.substr(first, line.find_last_not_of(" \t\r") - first + 1);
    const std::string where = path + ":" + std::to_string(line_number) + ": list " + name + ": ";
    if (line.size() > kMaxListEntryBytes) {
      return InvalidArgument(where + "an entry is longer than " + std::to_string(kMaxListEntryBytes) + " bytes");
    }
    if (IdentifierHoldsCardNumber(line)) {  // a card token's hex is judged as tokens are
      return InvalidArgument(where +
                             "this entry looks like a card number; lists hold card tokens (ScoreResult.card_token), "
                             "never card numbers");
    }
    entries.insert(std::move(line));
  }
  return entries;
}

class PreparedRulesStage : public PreparedStage {
 public:
  struct CompiledRule {
    std::string id;
    std::optional<Decision> decision;
    Node when;
  };
  PreparedRulesStage(std::vector<CompiledRule> rules, std::vector<EntryList> lists)
      : rules_(std::move(rules)), lists_(std::move(lists)) {}

  Status Run(const StageInputs& inputs, const ScoredItem& item, StageOutputs* out, StageReport*) const override {
    const fraud::FeatureVector& features = inputs.Get(0)->features;
    for (const CompiledRule& rule : rules_) {
      if (!Evaluate(rule.when, item, features, lists_)) continue;
      out->rule_hits.push_back({rule.id, rule.decision});
      if (rule.decision && !out->forced_decision) out->forced_decision = rule.decision;
    }
    return Status::Ok();
  }
  std::string Describe() const override {
    size_t entries = 0;
    for (const auto& l : lists_) entries += l.size();
    return std::to_string(rules_.size()) + " rules, " + std::to_string(lists_.size()) + " lists of " +
           std::to_string(entries) + " entries";
  }

 private:
  std::vector<CompiledRule> rules_;
  std::vector<EntryList> lists_;
};

class RulesStageKind : public StageKind {
 public:
  RulesStageKind() {
    spec_.kind = "rules";
    spec_.inputs = {{"features", ValueType::kFeatures}};
    spec_.outputs = {{"verdict", ValueType::kVerdict}};
    spec_.keys = {"rules", "lists"};
  }
  const StageKindSpec& spec() const override { return spec_; }

  // The rules themselves are in the pipeline file; the lists are files of their own.
  std::vector<StageFile> Files(const StageSettings& settings) const override {
    std::vector<StageFile> files;
    for (const auto& [name, path] : static_cast<const RulesStageSettings&>(settings).lists) {
      files.push_back({"list " + name, path});
    }
    return files;
  }

  Result<std::shared_ptr<const StageSettings>> Parse(const YamlReader& r, const YAML::Node& stage,
                                                     const StageDeclaration& d) const override {
    auto s = std::make_shared<RulesStageSettings>();
    s->source = r.source();
    if (const YAML::Node lists = stage["lists"]) {
      if (!lists.IsMap()) return r.ErrorAt(lists, "lists: must map each list's name to its file");
      for (const auto& entry : lists) {
        const std::string name = entry.first.Scalar();
        const bool identifier =
            !name.empty() && (std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_') &&
            std::all_of(name.begin(), name.end(),
                        [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
        if (!identifier || name == "and" || name == "or" || name == "not" || name == "in") {
          return r.ErrorAt(entry.first, "lists: \"" + name + "\" is not a usable list name (letters, digits, _)");
        }
        if (s->lists.count(name) > 0) return r.ErrorAt(entry.first, "lists: \"" + name + "\" is given twice");
        std::string path;
        TXSCORE_RETURN_IF_ERROR(r.ReadPath(lists, name, true, YamlReader::PathMustBe::kRegularFile, &path));
        s->lists[name] = path;
      }
    }
    const YAML::Node rules = stage["rules"];
    if (!rules) return r.ErrorAt(stage, "stage \"" + d.name + "\": missing required key \"rules\"");
    if (!rules.IsSequence() || rules.size() == 0) return r.ErrorAt(rules, "rules: must be a list of rules");
    const std::vector<std::string> list_names = ListNames(*s);
    std::set<std::string> ids;
    for (const YAML::Node& rule : rules) {
      TXSCORE_RETURN_IF_ERROR(r.ExpectMap(rule, "a rule", {"id", "when", "decision"}));
      RulesStageSettings::Rule parsed;
      TXSCORE_RETURN_IF_ERROR(r.ReadString(rule, "id", true, &parsed.id));
      if (!ids.insert(parsed.id).second) return r.ErrorAt(rule["id"], "two rules have the id " + parsed.id);
      TXSCORE_RETURN_IF_ERROR(r.ReadString(rule, "when", true, &parsed.when));
      parsed.at = YamlReader::LocationOf(rule["when"]);
      if (rule["decision"]) {
        std::string decision;
        TXSCORE_RETURN_IF_ERROR(r.ReadString(rule, "decision", false, &decision));
        for (Decision candidate : {Decision::kApprove, Decision::kReview, Decision::kDecline}) {
          if (decision == DecisionName(candidate)) parsed.decision = candidate;
        }
        if (!parsed.decision) {
          return r.ErrorAt(rule["decision"], "decision must be APPROVE, REVIEW or DECLINE, not \"" + decision + "\"");
        }
      }
      ConditionParser parser(parsed.when, list_names);
      Result<Node> checked = parser.Parse();
      if (!checked.ok()) return r.ErrorAt(rule["when"], "rule " + parsed.id + ": when: " + checked.error().message);
      if (!parser.transactions() && !parser.claims()) {
        return r.ErrorAt(rule["when"], "rule " + parsed.id + ": when: " + parser.first_claim_only() +
                                           " is a claim's and " + parser.first_transaction_only() +
                                           " a transaction's; a rule reads one kind of item");
      }
      s->rules.push_back(std::move(parsed));
    }
    return std::shared_ptr<const StageSettings>(std::move(s));
  }

  Result<std::unique_ptr<PreparedStage>> Prepare(const StageSettings& settings,
                                                 const PrepareContext& context) const override {
    const auto& s = static_cast<const RulesStageSettings&>(settings);
    const std::vector<std::string> list_names = ListNames(s);
    std::vector<PreparedRulesStage::CompiledRule> rules;
    for (const RulesStageSettings::Rule& rule : s.rules) {
      ConditionParser parser(rule.when, list_names);
      TXSCORE_ASSIGN_OR_RETURN(Node when, parser.Parse());
      if (context.items == ItemKind::kTransaction && !parser.transactions()) {
        return RuleError(s, rule, parser.first_claim_only() + " is a claim's; this pipeline scores transactions");
      }
      if (context.items == ItemKind::kClaim && !parser.claims()) {
        return RuleError(s, rule, parser.first_transaction_only() + " is a transaction's; this pipeline scores claims");
      }
      rules.push_back({rule.id, rule.decision, std::move(when)});
    }
    std::vector<EntryList> lists;
    for (const auto& [name, path] : s.lists) {
      TXSCORE_ASSIGN_OR_RETURN(EntryList entries, LoadList(name, path));
      lists.push_back(std::move(entries));
    }
    return std::unique_ptr<PreparedStage>(new PreparedRulesStage(std::move(rules), std::move(lists)));
  }

 private:
  StageKindSpec spec_;
};

}  // namespace

std::unique_ptr<StageKind> MakeRulesStageKind() { return std::make_unique<RulesStageKind>(); }

}  // namespace txscore::pipelines
