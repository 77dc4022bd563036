#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/NAME/), the inputs the fuzzers
start from and CTest replays. Run from the repository root after scripts/setup.sh (it reads the
generated thrift bindings in build/gen/gen-py and the demo tiny LLM's tokenizer.json); the output
is committed, so this runs again only when the seeds should change:

    python3 tests/fuzz/make_seed_corpus.py
"""
import json
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")


def write(target, name, data):
    directory = os.path.join(CORPUS, target)
    os.makedirs(directory, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(directory, name), "wb") as f:
        f.write(data)


def thrift_seeds():
    sys.path.insert(0, os.path.join(ROOT, "build", "gen", "gen-py"))
    from thrift.protocol import TBinaryProtocol
    from thrift.transport import TTransport
    from txscore_rpc import TxScore
    from txscore_rpc.ttypes import Channel, ClaimsJobRequest, EntryMode, Transaction

    def frame(method, args, seq=1):
        buffer = TTransport.TMemoryBuffer()
        protocol = TBinaryProtocol.TBinaryProtocol(buffer, strictRead=True, strictWrite=True)
        protocol.writeMessageBegin(method, 1, seq)  # CALL
        args.write(protocol)
        protocol.writeMessageEnd()
        return buffer.getvalue()  # the frame's body: the server's reader gets it without the length

    def transaction(request_id, **extra):
        fields = dict(request_id=request_id, timestamp_ms=1796180000000, amount_minor=12345, currency="EUR",
                      card_number="4000001234567899", merchant_id="m-DE-1", mcc="5411", merchant_country="DE",
                      channel=Channel.ECOMMERCE, entry_mode=EntryMode.CREDENTIAL_ON_FILE, device_id="d-1",
                      ip_address="192.0.2.1", latitude=52.5, longitude=13.4,
                      traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        fields.update(extra)
        return Transaction(**fields)

    write("thrift_request_fuzz", "health", frame("health", TxScore.health_args()))
    write("thrift_request_fuzz", "score", frame("score", TxScore.score_args(transaction=transaction("seed-1"))))
    write("thrift_request_fuzz", "score_token",
          frame("score", TxScore.score_args(transaction=transaction("seed-2", card_number=None,
                                                                    card_token="tok_seed_2", budget_ms=5))))
    write("thrift_request_fuzz", "score_batch",
          frame("scoreBatch", TxScore.scoreBatch_args(
              transactions=[transaction("seed-3"), transaction("seed-4", amount_minor=-1)])))
    write("thrift_request_fuzz", "job_status", frame("claimsJobStatus", TxScore.claimsJobStatus_args(job_id="j-1")))
    write("thrift_request_fuzz", "job_submit",
          frame("submitClaimsJob", TxScore.submitClaimsJob_args(request=ClaimsJobRequest(input_path="claims.jsonl"))))
    write("thrift_request_fuzz", "unknown_method", frame("nope", TxScore.health_args()))


def safetensors_seeds():
    def seed(name, data_size, header):
        write("safetensors_header_fuzz", name, struct.pack("<Q", data_size) + json.dumps(header).encode())

    seed("one_f32", 16, {"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
                         "__metadata__": {"format": "pt"}})
    seed("two_bf16", 12, {"a": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]},
                          "b": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [4, 12]}})
    seed("empty", 0, {})
    seed("overlap", 16, {"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                         "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})
    seed("past_end", 8, {"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})


def tokenizer_seeds():
    for i, text in enumerate(["Hello world", "The claimant says the water damage began on 2026-01-01.",
                              "<|im_start|>user\nAnalyse claim CLM-1<|im_end|>", "Küche, 数字, emoji 🙂, tabs\t\n",
                              "   leading and trailing spaces   ", "a" * 300]):
        write("tokenizer_fuzz", f"text_{i}", b"\x00" + text.encode())
    with open(os.path.join(ROOT, "var", "models", "llm-tiny", "tokenizer.json"), "rb") as f:
        write("tokenizer_fuzz", "tokenizer_json", b"\x01" + f.read())
    write("tokenizer_fuzz", "tokenizer_json_tiny", b"\x01" + json.dumps({
        "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]},
        "added_tokens": [], "pre_tokenizer": {"type": "ByteLevel"}, "decoder": {"type": "ByteLevel"}}).encode())


def pipeline_seeds():
    for name in ("pipeline.yaml", "claims.yaml"):
        with open(os.path.join(ROOT, "config", name)) as f:
            write("pipeline_yaml_fuzz", name, f.read())
    write("pipeline_yaml_fuzz", "small.yaml", """pipeline: {name: fuzz, version: "1"}
stages:
  - {name: features, kind: features}
  - {name: rules, kind: rules, after: features, rules: [{id: R1, when: "amount > 100 and channel == 'ECOMMERCE'", decision: REVIEW}]}
  - {name: decision, kind: decision, after: rules}
""")
    write("pipeline_yaml_fuzz", "aliases.yaml", """a: &a [x, x, x, x, x, x, x, x]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b]
pipeline: {name: *c, version: 1}
stages: *c
""")
    write("pipeline_yaml_fuzz", "wrong_types.yaml", "pipeline: [1, 2]\nstages: {features: yes}\ndeadline_ms: -1\n")


def claims_seeds():
    with open(os.path.join(ROOT, "var", "claims-demo.jsonl")) as f:
        lines = [next(f) for _ in range(4)]
    write("claims_rows_fuzz", "jsonl", b"\x00" + "".join(lines).encode())
    first = json.loads(lines[0])
    first["narrative"] = "Paid with card 4000 0012 3456 7899, please refund."
    write("claims_rows_fuzz", "jsonl_pan", b"\x00" + json.dumps(first).encode() + b"\n")
    columns = sorted(first.keys())
    row = ",".join('"' + str(first[c]).replace('"', '""') + '"' for c in columns)
    write("claims_rows_fuzz", "csv", b"\x01" + (",".join(columns) + "\n" + row + "\n" +
                                                row.replace("Paid with", "Paid\nwith") + "\n").encode())


def ubjson_seeds():
    with open(os.path.join(ROOT, "tests", "data", "fraud-3-trees.ubj"), "rb") as f:
        write("ubjson_check_fuzz", "fraud-3-trees.ubj", f.read())
    write("ubjson_check_fuzz", "empty_object", b"{}")
    write("ubjson_check_fuzz", "typed_array", b"[$U#U\x03\x01\x02\x03")
    write("ubjson_check_fuzz", "strings", b"{U\x01aSU\x05hello}")



def chat_template_seeds():
    # The generated checkpoints' own ChatML template (llm/checkpoint_maker.cc), and the
    # constructs the real families' templates use.
    write("chat_template_fuzz", "chatml", (
        "{{- bos_token if bos_token is defined else '' -}}\n"
        "{%- for message in messages -%}\n"
        "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] | trim + '<|im_end|>\\n' -}}\n"
        "{%- endfor -%}\n"
        "{%- if add_generation_prompt -%}\n{{- '<|im_start|>assistant\\n' -}}\n{%- endif -%}\n"))
    write("chat_template_fuzz", "namespace_loop", (
        "{%- set ns = namespace(last=-1, sys='') -%}\n"
        "{%- for m in messages[::-1] if m.role != 'system' %}{% if loop.first %}{% set ns.last = loop.revindex0 %}"
        "{% endif %}{% endfor -%}\n"
        "{%- if messages[0]['role'] == 'system' %}{% set ns.sys = messages[0].content.strip() %}{% endif -%}\n"
        "{{ ns.sys | tojson }}{% for m in messages %}{{ loop.index0 ~ ':' ~ m.role | upper }}"
        "{% if m.content is string and m.content.startswith('{') %}{{ m.content[1:-1].split(',') | join('|') }}"
        "{% elif m.name is defined %}{{ m.name | title }}{% else %}{{ m.content | length }}{% endif %}"
        "{% if not loop.last %}, {% endif %}{% endfor %}{{ (ns.last * 2) ** 2 // 3 % 5 }}"))
    write("chat_template_fuzz", "raise", (
        "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"))
    write("chat_template_fuzz", "refused_macro", "{% macro m(x) %}{{ x }}{% endmacro %}{{ m(1) }}")
    write("chat_template_fuzz", "long_loop",
          "{% for i in range(1000) %}{% for j in range(1000) %}{{ i * j }}{% endfor %}{% endfor %}")
    # What a review found: SIGFPE, a 10 GB tojson, a stack overflow, a quadratic loop.
    write("chat_template_fuzz", "int_edges",
          "{{ (-9223372036854775807 - 1) // -1 }}{{ -(-9223372036854775807 - 1) }}{{ '99999999999999999999'|int }}")
    write("chat_template_fuzz", "tojson_indent", "{{ messages | tojson(indent=100000000) }}")
    write("chat_template_fuzz", "nesting",
          "{% set ns = namespace(a=[]) %}{% for i in range(20000) %}{% set ns.a = [ns.a] %}{% endfor %}{{ ns.a }}")
    write("chat_template_fuzz", "quadratic",
          "{% set ns = namespace(a=[]) %}{% for i in range(100000) %}{% set ns.a = ns.a + [i] %}{% endfor %}")
    write("chat_template_fuzz", "escapes_and_defined",
          "{{ '\\101\\N{BULLET}' }}{% if strftime_now is defined %}{{ strftime_now('%d %b %Y') }}{% endif %}")


def openai_request_seeds():
    write("openai_request_fuzz", "chat", b"\x01" + json.dumps({
        "model": "llm-tiny", "messages": [{"role": "system", "content": "Be brief."},
                                          {"role": "user", "content": "Claim 7.", "name": "adjuster"}],
        "max_tokens": 8, "temperature": 0.5, "top_p": 0.9, "seed": 3, "stop": ["\n", "END"], "stream": True,
        "stream_options": {"include_usage": True}}).encode())
    write("openai_request_fuzz", "chat_schema", b"\x01" + json.dumps({
        "model": "llm-tiny", "messages": [{"role": "user", "content": "x"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "f", "strict": True, "schema": {
            "type": "object", "properties": {"a": {"type": "string", "enum": ["x", "y"]}}, "required": ["a"]}}}
    }).encode())
    write("openai_request_fuzz", "completion", b"\x00" + json.dumps({
        "model": "llm-tiny", "prompt": "Claim 7:", "max_tokens": 4, "stop": "\n", "temperature": 0}).encode())
    write("openai_request_fuzz", "wrong_types", b"\x00" + json.dumps({
        "model": 7, "prompt": ["a", 1], "max_tokens": "many", "n": 2}).encode())
    write("openai_request_fuzz", "deep", b"\x01" + b'{"model": "m", "messages": ' + b"[" * 100 + b"]" * 100 + b"}")


if __name__ == "__main__":
    thrift_seeds()
    safetensors_seeds()
    tokenizer_seeds()
    pipeline_seeds()
    claims_seeds()
    ubjson_seeds()
    chat_template_seeds()
    openai_request_seeds()
    print(f"wrote the seed corpora under {CORPUS}")
