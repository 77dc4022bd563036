"""What the batch integration tests share: a work folder with a claims model, a tiny LLM
checkpoint, generated claims, a card key, and a batch config whose LLM stage reads the claims
the model scores at 0.1 or more."""

import json
import os
import subprocess


def run(cmd, **kwargs):
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kwargs)


def lines_without_timings(path):
    """The output's lines, each without its timings (the only field that differs run to run)."""
    out = []
    with open(path) as f:
        for line in f:
            doc = json.loads(line)
            doc.pop("timings", None)
            out.append(json.dumps(doc, sort_keys=True))
    return out


def make_claims_workdir(txscore, work, seed, chunk):
    """Writes models/, claims.jsonl (60 claims from `seed`), card.key, claims.yaml (the LLM
    stage's max_batch is `chunk`) and batch.yaml into `work`; returns (config, claims) paths."""
    models = os.path.join(work, "models")
    run([txscore, "train", "--kind", "claims", "--claims", "800", "--rounds", "20", "--threads", "1",
         "--out", models])
    run([txscore, "llm", "make-checkpoint", "--family", "qwen3", "--size", "tiny",
         "--out", os.path.join(models, "llm")])
    claims = os.path.join(work, "claims.jsonl")
    run([txscore, "data", "generate", "--kind", "claims", "--format", "jsonl", "--claims", "60",
         "--seed", str(seed), "--out", claims])
    key = os.path.join(work, "card.key")
    with open(key, "wb") as f:
        f.write(os.urandom(32))
    os.chmod(key, 0o600)
    config = os.path.join(work, "batch.yaml")
    with open(config, "w") as f:
        f.write("pipeline: claims.yaml\nstorage: {path: db, durability: sync}\n"
                "security: {card_key_file: card.key}\ndevices: {calibration_cache: profiles.json}\n")
    with open(os.path.join(work, "claims.yaml"), "w") as f:
        f.write(f"""stages:
  - {{name: features, kind: claim_features}}
  - {{name: claims_model, kind: xgboost, after: features, model: models/claims.ubj}}
  - {{name: analysis, kind: llm_findings, after: claims_model, when: "claims_model.score >= 0.1",
     model: models/llm, max_new_tokens: 60, max_batch: {chunk}}}
  - {{name: decision, kind: decision, after: [claims_model, analysis]}}
""")
    return config, claims
