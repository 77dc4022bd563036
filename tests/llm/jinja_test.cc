// The Jinja subset of llm/jinja.h, rendered as transformers renders chat templates. Expected
// texts are what python3-jinja2 (with transformers' environment) prints for the same template;
// tests/llm/chat_template_reference_test.py checks whole real templates against it and
// against @huggingface/jinja.
#include "llm/jinja.h"

#include <gtest/gtest.h>

#include <string>

namespace txscore::llm::jinja {
namespace {

std::string Render(const std::string& source, const Json& variables = Json::object()) {
  Result<Template> t = Template::Parse(source, "t");
  if (!t.ok()) return "PARSE ERROR: " + t.error().message;
  Result<std::string> out = t->Render(variables);
  if (!out.ok()) return "RENDER ERROR: " + out.error().message;
  return *out;
}

std::string ParseError(const std::string& source) {
  Result<Template> t = Template::Parse(source, "t");
  return t.ok() ? "parsed" : t.error().message;
}

TEST(JinjaTemplate, WritesTextAndExpressions) {
  EXPECT_EQ(Render("Hello {{ name }}!", {{"name", "Ann"}}), "Hello Ann!");
  EXPECT_EQ(Render("{{ 'a' + \"b\" }}{{ 1 + 2 }}{{ 7 // 2 }}{{ -7 // 2 }}{{ -7 % 3 }}{{ 7 / 2 }}"), "ab33-423.5");
  EXPECT_EQ(Render("{{ 'x' ~ 1 ~ none ~ true }}"), "x1NoneTrue");
  EXPECT_EQ(Render("{{ [1, 'a', none, 1.5] }} {{ {'k': [true]} }}"), "[1, 'a', None, 1.5] {'k': [True]}");
  EXPECT_EQ(Render("{{ 2 ** 10 }} {{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 3 * 'ab' }}{{ 'ab' * 2 }}"),
            "1024 1.0 0.30000000000000004 1e+20 ababab"
            "abab");
  EXPECT_EQ(Render("{{ 'it''s' }} {{ \"a\\nb\" }} {{ '\\u00e9' }}"), "its a\nb \xc3\xa9");
}

TEST(JinjaTemplate, UndefinedNamesRenderAsNothingAndAreFalse) {
  EXPECT_EQ(Render("[{{ missing }}]{% if missing %}yes{% else %}no{% endif %}"), "[]no");
  EXPECT_EQ(Render("{{ missing is defined }} {{ missing is undefined }} {{ missing | length }}"), "False True 0");
  EXPECT_EQ(Render("{{ d.missing is defined }} {{ d['k'] }}", {{"d", {{"k", 1}}}}), "False 1");
}

TEST(JinjaTemplate, AnAttributeOfAnUndefinedValueIsAnErrorNamingIt) {
  EXPECT_EQ(Render("\n{{ missing.attr }}"), "RENDER ERROR: t:2: 'missing' is undefined");
  EXPECT_EQ(Render("{{ 'a' + missing }}"), "RENDER ERROR: t:1: 'missing' is undefined");
}

TEST(JinjaTemplate, ConditionsFollowPythonTruthiness) {
  const std::string t = "{% for v in values %}{% if v %}T{% elif v is none %}N{% else %}F{% endif %}{% endfor %}";
  EXPECT_EQ(Render(t, {{"values", {0, 1, "", "x", Json::array(), Json::array({0}), nullptr, false, 0.0}}}),
            "FTFTFTNFF");
  EXPECT_EQ(Render("{{ 1 if x else 2 }}{{ 'a' and 'b' }}{{ '' or 'c' }}{{ not 0 }}", {{"x", true}}), "1bcTrue");
  EXPECT_EQ(Render("{{ 'b' in 'abc' }}{{ 2 in [1, 2] }}{{ 'k' in d }}{{ 'z' not in 'abc' }}", {{"d", {{"k", 1}}}}),
            "TrueTrueTrueTrue");
}

TEST(JinjaTemplate, LoopsExposeLoopVariablesAndKeepAssignmentsInside) {
  EXPECT_EQ(Render("{% for x in items %}{{ loop.index0 }}{{ loop.index }}{{ loop.first }}{{ loop.last }}"
                   "{{ loop.length }}{{ loop.revindex0 }}|{% endfor %}",
                   {{"items", {"a", "b"}}}),
            "01TrueFalse21|12FalseTrue20|");
  EXPECT_EQ(Render("{% set x = 1 %}{% for i in [1, 2] %}{% set x = i %}{% endfor %}{{ x }}"), "1");
  EXPECT_EQ(Render("{% for i in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(Render("{% for i in range(10) if i is odd %}{{ i }}{% endfor %}"), "13579");
  EXPECT_EQ(Render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", {{"d", {{"b", 1}, {"a", 2}}}}),
            "b=1;a=2;");
  EXPECT_EQ(Render("{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 3 %}{% break %}"
                   "{% endif %}{{ i }}{% endfor %}"),
            "02");
}

TEST(JinjaTemplate, NamespacesCarryValuesOutOfLoops) {
  EXPECT_EQ(Render("{% set ns = namespace(last=-1, seen=false) %}{% for m in ms %}{% if m == 'u' %}"
                   "{% set ns.last = loop.index0 %}{% set ns.seen = true %}{% endif %}{% endfor %}{{ ns.last }}"
                   "{{ ns.seen }}",
                   {{"ms", {"u", "a", "u", "a"}}}),
            "2True");
}

// A namespace may hold itself, as in Python (whose answer here is 8: ns.a is ns, not a copy).
// The cycle once leaked both namespaces; scripts/asan.sh's LeakSanitizer fails this test if it
// comes back.
TEST(JinjaTemplate, ANamespaceThatHoldsItselfIsTheSameNamespaceAndIsFreed) {
  EXPECT_EQ(Render("{% set ns = namespace(b=7) %}{% set ns.a = ns %}{% set ns.b = 8 %}{{ ns.a.a.b }}"), "8");
  EXPECT_EQ(Render("{% set x = namespace(n=1) %}{% set y = namespace(x=x) %}{% set x.y = y %}{{ x.y.x.n }}"), "1");
}

TEST(JinjaTemplate, SlicesAndIndexesCountCodePoints) {
  const Json v = {{"s", "h\xc3\xa9llo"}, {"l", {1, 2, 3, 4}}};
  EXPECT_EQ(Render("{{ s[1] }} {{ s[-1] }} {{ s[1:3] }} {{ s[::-1] }}", v), "\xc3\xa9 o \xc3\xa9l oll\xc3\xa9h");
  EXPECT_EQ(Render("{{ l[1:] }} {{ l[::-1] }} {{ l[-2] }} {{ l[::2] }} {{ l[10] is defined }}", v),
            "[2, 3, 4] [4, 3, 2, 1] 3 [1, 3] False");
}

TEST(JinjaTemplate, StringMethodsBehaveAsPythons) {
  EXPECT_EQ(Render("{{ s.startswith('<a') }}{{ s.endswith(('x', 'b>')) }}{{ s.split('</t>')[-1] }}|"
                   "{{ '  a b  '.split() }}{{ 'a,b,c'.split(',', 1) }}{{ 'a,b,c'.rsplit(',', 1) }}",
                   {{"s", "<a></t>x<b>"}}),
            "TrueTruex<b>|['a', 'b']['a', 'b,c']['a,b', 'c']");
  EXPECT_EQ(Render("[{{ '\\n x \\n'.strip() }}][{{ '\\nx\\n'.lstrip('\\n') }}][{{ 'xyyx'.strip('x') }}]"),
            "[x][x\n][yy]");
  EXPECT_EQ(
      Render("{{ 'ab'.upper() }}{{ 'AB'.lower() }}{{ 'a-b c'.title() }}{{ 'aB c'.capitalize() }}"
             "{{ 'aaa'.replace('a', 'b', 2) }}{{ 'abcb'.find('b') }}{{ 'abcb'.count('b') }}{{ '-'.join(['a', 'b']) }}"),
      "ABabA-B CAb cbba12a-b");
}

TEST(JinjaTemplate, FiltersBehaveAsJinjas) {
  EXPECT_EQ(
      Render(
          "[{{ ' a \\n' | trim }}]{{ 'ab' | upper }}{{ [3, 1] | length }}{{ 'h\xc3\xa9' | length }}"
          "{{ [1, 2] | first }}{{ [1, 2] | last }}{{ [1, 2] | join(', ') }}{{ x | default('d') }}"
          "{{ '' | default('e', true) }}{{ '42' | int }}{{ 'x' | int }}{{ 2 | float }}{{ [1, 2] | reverse | list }}"),
      "[a]AB22"
      "12"
      "1, 2de420"
      "2.0[2, 1]");
  EXPECT_EQ(Render("{% for k, v in d | items %}{{ k }}{{ v }}{% endfor %}{{ ms | map(attribute='r') | join }}"
                   "{{ ms | selectattr('r', 'equalto', 'u') | list | length }}{{ [1, 2, 3, 4] | select('odd') | list }}"
                   "{{ [1, 2, 3] | reject('odd') | list }}",
                   {{"d", {{"a", 1}}}, {"ms", {{{"r", "u"}}, {{"r", "a"}}, {{"r", "u"}}}}}),
            "a1uau2[1, 3][2]");
}

TEST(JinjaTemplate, ToJsonIsTransformersJsonDumps) {
  const Json v = {
      {"t", {{"name", "f\xc3\xa9"}, {"d", "<x> & \"y\"\n"}, {"n", {1, 2.5, true, nullptr}}, {"e", Json::object()}}}};
  EXPECT_EQ(Render("{{ t | tojson }}", v),
            "{\"name\": \"f\xc3\xa9\", \"d\": \"<x> & \\\"y\\\"\\n\", \"n\": [1, 2.5, true, null], \"e\": {}}");
  EXPECT_EQ(Render("{{ {'a': [1, {'b': 2}]} | tojson(indent=2) }}"),
            "{\n  \"a\": [\n    1,\n    {\n      \"b\": 2\n    }\n  ]\n}");
}

TEST(JinjaTemplate, TestsCoverTypesAndComparisons) {
  EXPECT_EQ(
      Render("{{ 'a' is string }}{{ 1 is number }}{{ 1 is integer }}{{ 1.5 is float }}{{ true is boolean }}"
             "{{ false is false }}{{ true is true }}{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is sequence }}"
             "{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 1 is eq 1 }}{{ 1 is not ne 1 }}{{ 2 is gt(1) }}"
             "{{ 'a' is in 'abc' }}{{ none is none }}{{ 0 is not none }}"),
      "TrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrue");
}

TEST(JinjaTemplate, WhitespaceControlTrimsAsHuggingFaceConfiguresJinja) {
  // trim_blocks: the newline after a block tag goes; lstrip_blocks: indentation before one goes.
  EXPECT_EQ(Render("{% if true %}\n    a\n    {% endif %}\nb\n"), "    a\nb");
  // "-" strips all whitespace on its side, newlines included; "{{" tags are not trimmed.
  EXPECT_EQ(Render("x  \n  {{- 'y' -}}  \n  z {{ 'w' }}\n"), "xyz w");
  // "+" keeps what trim_blocks and lstrip_blocks would take.
  EXPECT_EQ(Render("  {%+ if true +%}\na{% endif %}"), "  \na");
  EXPECT_EQ(Render("a {# comment #}\nb\n  {#- c -#}  c"), "a bc");
  EXPECT_EQ(Render("line\r\nnext\r\n"), "line\nnext");  // one trailing newline dropped, as Jinja does
}

TEST(JinjaTemplate, RaiseExceptionStopsRenderingWithItsMessage) {
  EXPECT_EQ(Render("a{{ raise_exception('Conversation roles must alternate') }}"),
            "RENDER ERROR: t:1: the template raised: Conversation roles must alternate");
}

TEST(JinjaTemplate, UnsupportedConstructsAreRefusedAtParseNamingThem) {
  EXPECT_EQ(ParseError("{% macro m() %}{% endmacro %}"), "t:1: the statement 'macro' is not supported");
  EXPECT_EQ(ParseError("a\n{% include 'x' %}"), "t:2: the statement 'include' is not supported");
  EXPECT_EQ(ParseError("{{ x | wordwrap }}"), "t:1: the filter 'wordwrap' is not supported");
  EXPECT_EQ(ParseError("{{ x is callable }}"), "t:1: the test 'callable' is not supported");
  EXPECT_EQ(ParseError("{{ cycler('a') }}"), "t:1: the function 'cycler' is not supported");
  EXPECT_EQ(ParseError("{{ x.format(1) }}"), "t:1: the method 'format' is not supported");
  EXPECT_EQ(ParseError("{{ loop.previtem }}"), "t:1: loop.previtem is not supported");
  EXPECT_EQ(ParseError("{% set x %}a{% endset %}"),
            "t:1: block assignments ({% set x %}...{% endset %}) are not supported");
  EXPECT_EQ(ParseError("{% raw %}{{ x }}{% endraw %}"), "t:1: the statement 'raw' is not supported");
  EXPECT_EQ(ParseError("{% for x in y recursive %}{% endfor %}"), "t:1: recursive for loops are not supported");
}

TEST(JinjaTemplate, MalformedTemplatesAreRefusedWithTheirLine) {
  EXPECT_EQ(ParseError("a\n{% if x %}"), "t:2: 'if' is never closed (expected endif)");
  EXPECT_EQ(ParseError("{% endfor %}"), "t:1: unexpected 'endfor'");
  EXPECT_EQ(ParseError("{{ 'a' "), "t:1: {{ is never closed");
  EXPECT_EQ(ParseError("{{ 'a }}"), "t:1: {{ is never closed");
  EXPECT_EQ(ParseError("{% break %}"), "t:1: 'break' outside a loop");
  EXPECT_EQ(ParseError("{{ a b }}"), "t:1: unexpected 'b'");
  EXPECT_EQ(ParseError("{{ " + std::string(300, '(') + "1" + std::string(300, ')') + " }}").find("nested too deeply") !=
                std::string::npos,
            true);
}

TEST(JinjaTemplate, RenderingIsBoundedInStepsAndOutput) {
  Result<Template> loop =
      Template::Parse("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "t");
  ASSERT_TRUE(loop.ok());
  RenderLimits limits;
  limits.max_steps = 100000;
  Result<std::string> out = loop->Render(Json::object(), limits);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().code, ErrorCode::kResourceExhausted);
  Result<Template> big = Template::Parse("{% for i in range(1000) %}{{ 'x' * 1000 }}{% endfor %}", "t");
  ASSERT_TRUE(big.ok());
  limits.max_steps = 1'000'000;
  limits.max_output_bytes = 100'000;
  out = big->Render(Json::object(), limits);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().code, ErrorCode::kResourceExhausted);
  EXPECT_NE(out.error().message.find("longer than 100000 bytes"), std::string::npos);
}

TEST(JinjaTemplate, TypeErrorsAreReportedNotGuessed) {
  EXPECT_EQ(Render("{{ 'a' + 1 }}"), "RENDER ERROR: t:1: unsupported operand types for +: 'str' and 'int'");
  EXPECT_EQ(Render("{{ 1 // 0 }}"), "RENDER ERROR: t:1: integer division or modulo by zero");
  EXPECT_EQ(Render("{{ [1].startswith('a') }}"), "RENDER ERROR: t:1: 'list' object has no method 'startswith'");
  EXPECT_EQ(Render("{{ 9223372036854775807 + 1 }}"), "RENDER ERROR: t:1: integer overflow");
}

TEST(JinjaTemplate, ComparisonsChainAndPowersKeepTheirSignAsInPython) {
  EXPECT_EQ(Render("{{ 3 > 2 > 1 }} {{ 1 < 3 > 2 }} {{ 1 < 2 < 2 }} {{ 1 == 1 in [1] }}"), "True True False True");
  EXPECT_EQ(Render("{{ (-1) ** 3 }} {{ (-1) ** 4 }} {{ (-2) ** 3 }} {{ 1 ** 9 }} {{ 0 ** 0 }}"), "-1 1 -8 1 1");
}

TEST(JinjaTemplate, TheTitleFilterIsJinjasAndTheTitleMethodIsPythons) {
  EXPECT_EQ(Render("{{ \"they're bill's (red) car\" | title }}|{{ \"they're\".title() }}"),
            "They're Bill's (Red) Car|They'Re");
}

TEST(JinjaTemplate, LongChainsOfOperatorsFiltersOrAttributesAreRefusedLikeDeepNesting) {
  std::string sum = "{{ 1";
  for (int i = 0; i < 20000; ++i) sum += " + 1";
  EXPECT_EQ(ParseError(sum + " }}"), "t:1: the expression is nested too deeply");
  std::string trims = "{{ 'x'";
  for (int i = 0; i < 30000; ++i) trims += "|trim";
  EXPECT_EQ(ParseError(trims + " }}"), "t:1: the expression is nested too deeply");
  std::string attributes = "{{ a";
  for (int i = 0; i < 30000; ++i) attributes += ".b";
  EXPECT_EQ(ParseError(attributes + " }}"), "t:1: the expression is nested too deeply");
  std::string short_sum = "{{ 1";
  for (int i = 0; i < 150; ++i) short_sum += " + 1";
  EXPECT_EQ(Render(short_sum + " }}"), "151");  // a chain under the limit renders
}

TEST(JinjaTemplate, ValuesATemplateBuildsAreBoundedNotOnlyItsOutput) {
  const auto exhausted = [](const std::string& source) {
    Result<Template> t = Template::Parse(source, "t");
    if (!t.ok()) return "PARSE ERROR: " + t.error().message;
    Result<std::string> out = t->Render(Json::object());
    return out.ok() ? std::string("rendered") : std::string(ErrorCodeName(out.error().code));
  };
  const std::string kExhausted = ErrorCodeName(ErrorCode::kResourceExhausted);
  // Doubling a string 40 times (2^40 bytes) without writing it out.
  EXPECT_EQ(exhausted("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
                      "{% endfor %}"),
            kExhausted);
  EXPECT_EQ(exhausted("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}"
                      "{% endfor %}"),
            kExhausted);
  EXPECT_EQ(exhausted("{% set l = [('x' * 4000000)] * 1000 %}"), kExhausted);
  EXPECT_EQ(exhausted("{% set l = [1, 2, 3] * 100000000 %}"), kExhausted);
  EXPECT_EQ(exhausted("{% set s = 'x' * 100000 %}{% set t = s.replace('', s) %}"), kExhausted);
  EXPECT_EQ(exhausted("{% set s = 'ab' * 3000 %}{% set t = s.replace('a', s) %}"), kExhausted);
  EXPECT_EQ(exhausted("{% set r = range(100000000) %}"), kExhausted);
  EXPECT_EQ(exhausted("{% set s = 'x' * 1000 %}{{ (s ~ s) | length }}{{ s.replace('x', 'yy') | length }}"), "rendered");
}

TEST(JinjaTemplate, IntegerEdgesAreErrorsOrPythonsAnswersNeverACrash) {
  // INT64_MIN // -1 is the one quotient past int64 (SIGFPE in C++); Python's big ints have it.
  EXPECT_EQ(Render("{{ (-9223372036854775807 - 1) // -1 }}"), "RENDER ERROR: t:1: integer overflow");
  EXPECT_EQ(Render("{{ (-9223372036854775807 - 1) % -1 }}"), "0");
  EXPECT_EQ(Render("{{ -(-9223372036854775807 - 1) }}"), "RENDER ERROR: t:1: integer overflow");
  EXPECT_EQ(Render("{{ (-9223372036854775807 - 1) | abs }}"), "RENDER ERROR: t:1: integer overflow");
  EXPECT_EQ(Render("{{ '99999999999999999999' | int }}"), "RENDER ERROR: t:1: integer overflow: 99999999999999999999");
  EXPECT_EQ(Render("{{ 1e300 | int }}"), "RENDER ERROR: t:1: integer overflow");
}

TEST(JinjaTemplate, IntAndFloatFiltersReadStringsAsPythonDoes) {
  // python3-jinja2's answers: int(), else int(float()), else the default; no hexadecimal.
  EXPECT_EQ(Render("{{ '0x1A'|int }} {{ '1_000'|int }} {{ ' 7 '|int }} {{ '12.9'|int }} {{ 'nan'|int }} "
                   "{{ '+5'|int }} {{ '5_'|int }} {{ '-0'|int }}"),
            "0 1000 7 12 0 5 0 0");
  EXPECT_EQ(Render("{{ '1_0.5'|float }} {{ '0x1p3'|float }} {{ 'x'|float(2.5) }}"), "10.5 0.0 2.5");
}

TEST(JinjaTemplate, StringLiteralsTakePythonsOctalAndNamedEscapes) {
  EXPECT_EQ(Render("{{ '\\101\\N{BULLET}\\7|\\N{latin small letter a}' }}"), "A\xe2\x80\xa2\x07|a");
  EXPECT_EQ(ParseError("{{ '\\N{NO SUCH CHARACTER}' }}"),
            "t:1: unknown Unicode character name in \\N{NO SUCH CHARACTER}");
}

TEST(JinjaTemplate, CapitalizeAndTheTitleMethodUseTitleCaseAndTheTitleFilterUpperCase) {
  // U+01C6 (dz digraph): title case U+01C5, upper case U+01C4, as python3-jinja2 renders.
  EXPECT_EQ(Render("{{ '\u01c6x'|capitalize }} {{ '\u01c6x \u01c6y'.title() }} {{ '\u01c6x'|title }}"),
            "\u01c5x \u01c5x \u01c5y \u01c4x");
}

TEST(JinjaTemplate, GlobalFunctionsAreDefinedAndRefusedAsValues) {
  // Llama 3.x Instruct asks `strftime_now is defined` to choose its date line.
  EXPECT_EQ(Render("{{ strftime_now is defined }}|{{ raise_exception is undefined }}|{{ range is defined }}|"
                   "{{ nothing is defined }}"),
            "True|False|True|False");
  EXPECT_EQ(Render("{{ strftime_now }}"),
            "RENDER ERROR: t:1: the function strftime_now can only be called here (or tested with 'is defined')");
  // A variable of the same name is the variable.
  EXPECT_EQ(Render("{{ range }} {{ range is defined }}", {{"range", 3}}), "3 True");
}

TEST(JinjaTemplate, TojsonAndNestingAreBoundedAndSlowTemplatesAreStoppedByTheClock) {
  const auto fails = [](const std::string& source, const RenderLimits& limits = {}) {
    Result<Template> t = Template::Parse(source, "t");
    if (!t.ok()) return "PARSE ERROR: " + t.error().message;
    Result<std::string> out = t->Render(Json{{"messages", Json::array({Json{{"role", "user"}}})}}, limits);
    return out.ok() ? std::string("rendered")
                    : std::string(ErrorCodeName(out.error().code)) + ": " + out.error().message;
  };
  // A 10^9-space indent: stopped past 4 MiB of text (it once took 10 GB and 98 s).
  EXPECT_EQ(fails("{{ messages | tojson(indent=1000000000) }}").rfind("resource exhausted: t:1: ", 0), 0u);
  EXPECT_EQ(fails("{{ messages | tojson(indent=2) }}"), "rendered");
  EXPECT_EQ(fails("{% set ns = namespace(a=[]) %}{% for i in range(20000) %}{% set ns.a = [ns.a] %}{% endfor %}"),
            "resource exhausted: t:1: a list or dict nested more than 256 deep");
  EXPECT_EQ(fails("{% set ns = namespace(a={}) %}{% for i in range(20000) %}{% set ns.a = dict(x=ns.a) %}{% endfor %}"),
            "resource exhausted: t:1: a list or dict nested more than 256 deep");
  // A list grown by + in a loop copies itself each time: quadratic, within the step budget.
  RenderLimits quick;
  quick.max_duration = std::chrono::milliseconds(100);
  EXPECT_EQ(fails("{% set ns = namespace(a=[]) %}{% for i in range(1000000) %}{% set ns.a = ns.a + [i] %}"
                  "{% endfor %}",
                  quick),
            "resource exhausted: t:1: rendering took more than 100 ms");
}

TEST(PythonStr, FormatsFloatsAsPythonRepr) {
  EXPECT_EQ(PythonStr(Json(0.1)), "0.1");
  EXPECT_EQ(PythonStr(Json(100.0)), "100.0");
  EXPECT_EQ(PythonStr(Json(1e16)), "1e+16");
  EXPECT_EQ(PythonStr(Json(1234567890123456.0)), "1234567890123456.0");
  EXPECT_EQ(PythonStr(Json(0.0001)), "0.0001");
  EXPECT_EQ(PythonStr(Json(0.00001)), "1e-05");
  EXPECT_EQ(PythonStr(Json(-2.5e-7)), "-2.5e-07");
  EXPECT_EQ(PythonStr(Json("it's")), "it's");
  EXPECT_EQ(PythonStr(Json::array({"it's", "a\"b"})), "[\"it's\", 'a\"b']");
}

}  // namespace
}  // namespace txscore::llm::jinja
