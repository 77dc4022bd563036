#!/usr/bin/env python3
"""txscore's decoder against the independent Python reference (reference_decoder.py) for every
family, on generated checkpoints: in float32, the logits of every step agree within 1e-4 and
greedy decoding picks the same 64 tokens. The prompt starts with the BOS the family's
tokenizer adds (llama, gemma2, gemma3: config.json's bos_token_id names it), and granite's and
qwen3's with none.

txscore runs as users run it (`txscore generate --json --dump-logits`, KV cache, prefill then
one token per step); the reference recomputes the whole sequence at every step."""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_decoder import ReferenceDecoder  # noqa: E402

STEPS = 64
TOLERANCE = 1e-4
PROMPT = "Claim C-40123: water damage in the kitchen on 3 March 2026. Amount claimed 4200.50 EUR."


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--txscore", required=True)
    parser.add_argument("--families", default="llama,qwen3,granite,gemma2,gemma3")
    args = parser.parse_args()
    torch.set_num_threads(1)
    failures = []
    with tempfile.TemporaryDirectory(prefix="txscore-decoder-") as work:
        for family in args.families.split(","):
            model = os.path.join(work, family)
            subprocess.run([args.txscore, "llm", "make-checkpoint", "--family", family, "--size", "tiny",
                            "--out", model], check=True, stdout=subprocess.DEVNULL)
            logits_file = os.path.join(work, family + ".logits")
            out = subprocess.run([args.txscore, "generate", "--model", model, "--prompt", PROMPT, "--json",
                                  "--max-new-tokens", str(STEPS), "--ignore-eos", "--dump-logits", logits_file],
                                 check=True, capture_output=True, text=True).stdout
            result = json.loads(out)
            prompt, generated = result["prompt_ids"], result["generated_ids"]
            with open(logits_file, "rb") as f:
                blob = f.read()
            vocab = len(blob) // 4 // STEPS
            ours = torch.tensor(struct.unpack(f"<{len(blob) // 4}f", blob)).reshape(STEPS, vocab)

            reference = ReferenceDecoder(model)
            # Greedy with the reference alone, recomputing everything each step.
            sequence = list(prompt)
            worst = 0.0
            reference_tokens = []
            for step in range(STEPS):
                with torch.no_grad():
                    row = reference.logits(sequence)[-1]
                worst = max(worst, float((row - ours[step]).abs().max()))
                token = int(torch.argmax(row))
                reference_tokens.append(token)
                sequence.append(token)
            agree = sum(a == b for a, b in zip(reference_tokens, generated))
            print(f"{family:8}: prompt {len(prompt)} tokens, {STEPS} steps, largest logit difference {worst:.2e}, "
                  f"greedy tokens agree {agree}/{STEPS}")
            with open(os.path.join(model, "config.json")) as f:
                bos = json.load(f)["bos_token_id"]
            with_bos = family in ("llama", "gemma2", "gemma3")
            if (prompt[:1] == [bos]) != with_bos or prompt.count(bos) != int(with_bos):
                failures.append(f"{family}: prompt {prompt[:3]}... should {'' if with_bos else 'not '}start with "
                                f"the BOS {bos}, once")
            if worst > TOLERANCE:
                failures.append(f"{family}: logits differ by {worst:.2e} > {TOLERANCE}")
            if reference_tokens != generated:
                failures.append(f"{family}: greedy tokens differ: reference {reference_tokens} txscore {generated}")
    for failure in failures:
        print("FAIL " + failure)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
