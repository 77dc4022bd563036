#!/usr/bin/env python3
"""txscore's reading of SentencePiece tokenizer.model files against SentencePiece itself.

Debian's python3-sentencepiece (Google's library, not ours) trains BPE models here, at test
time, in the configurations real checkpoints use: Llama 2's (byte fallback, dummy prefix,
whitespace kept), Gemma's (byte fallback, no dummy prefix) and SentencePiece's own defaults
(no byte fallback, so unknown characters become <unk>; extra whitespace removed). Each model
tokenizes a varied corpus (several languages and scripts, emoji, digit and whitespace runs,
code) with SentencePiece and with `txscore llm tokenize`; the ids must be identical, and where
the model round-trips text, decoding must give the text back."""
import argparse
import glob
import io
import json
import os
import subprocess
import sys

import sentencepiece as spm

CONFIGURATIONS = {
    "llama2-style": dict(byte_fallback=True, add_dummy_prefix=True, remove_extra_whitespaces=False,
                         character_coverage=1.0),
    "gemma-style": dict(byte_fallback=True, add_dummy_prefix=False, remove_extra_whitespaces=False,
                        character_coverage=1.0),
    "defaults-without-byte-fallback": dict(byte_fallback=False, add_dummy_prefix=True, remove_extra_whitespaces=True,
                                           character_coverage=0.9995),
}


def training_lines(repo):
    """English prose and C++ from this repository: text with structure, mostly ASCII, so the
    test corpus's other scripts exercise the byte fallback and <unk> paths."""
    lines = []
    for path in sorted(glob.glob(os.path.join(repo, "docs", "*.md")) + glob.glob(os.path.join(repo, "llm", "*.h"))):
        with open(path, encoding="utf-8") as f:
            lines += [line for line in f.read().splitlines() if line.strip()]
    return lines


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--txscore", required=True)
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--work-dir", required=True)
    args = parser.parse_args()
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    train = training_lines(repo)
    with open(args.corpus) as f:
        corpus = json.load(f) + train[::25]
    os.makedirs(args.work_dir, exist_ok=True)
    failed = [name for name, options in CONFIGURATIONS.items() if not check(args, name, options, train, corpus)]
    sys.exit(1 if failed else 0)


def check(args, name, options, train, corpus):
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(train), model_writer=model, model_type="bpe",
                                   vocab_size=1500, normalization_rule_name="identity", num_threads=1,
                                   minloglevel=2, **options)
    path = os.path.join(args.work_dir, name + ".model")
    with open(path, "wb") as f:
        f.write(model.getvalue())
    reference = spm.SentencePieceProcessor(model_file=path)
    ours = subprocess.run([args.txscore, "llm", "tokenize", "--tokenizer", path, "--lines", "--no-special"],
                          input="".join(json.dumps(t) + "\n" for t in corpus), check=True, capture_output=True,
                          text=True).stdout.splitlines()
    decoded = subprocess.run([args.txscore, "llm", "tokenize", "--tokenizer", path, "--decode", "--lines"],
                             input="".join(line + "\n" for line in ours).encode(), check=True,
                             capture_output=True).stdout.decode().split("\n")[:-1]
    assert len(ours) == len(decoded) == len(corpus), (len(ours), len(decoded), len(corpus))
    failures = 0
    tokens = 0
    for text, got, back in zip(corpus, ours, decoded):
        want = reference.encode(text)
        got, back = json.loads(got), json.loads(back)
        tokens += len(want)
        if want != got:
            failures += 1
            print(f"{name}: MISMATCH for {text!r}:\n  sentencepiece {want}\n  txscore       {got}")
        elif options["byte_fallback"] and back != reference.decode(want):
            # Compared with SentencePiece's own decode, not with the text: a literal U+2581 in the
            # text is the meta symbol and decodes to a space in both.
            failures += 1
            print(f"{name}: DECODE MISMATCH for {text!r}: got {back!r}, sentencepiece {reference.decode(want)!r}")
    print(f"{name}: {len(corpus) - failures}/{len(corpus)} lines identical, {tokens} tokens")
    return failures == 0


if __name__ == "__main__":
    main()
