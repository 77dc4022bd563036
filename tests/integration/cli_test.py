#!/usr/bin/env python3
"""The txscore command line end to end: what a user typing commands sees (messages and exit
codes), one check per behaviour, each run as its own subprocess."""
import argparse
import json
import os
import re
import subprocess
import sys


def run(txscore, *args):
    return subprocess.run([txscore, *args], capture_output=True, text=True, timeout=120)


def check_unknown_command_names_it_and_suggests_the_nearest(txscore):
    r = run(txscore, "scroe")
    assert r.returncode == 2, r
    assert r.stderr == 'txscore: unknown command "scroe"; did you mean "score"? (txscore --help lists the commands)\n', r.stderr
    r = run(txscore, "frobnicate")
    assert r.returncode == 2, r
    assert r.stderr == 'txscore: unknown command "frobnicate" (txscore --help lists the commands)\n', r.stderr


def check_a_mistyped_command_or_option_gets_the_nearest_one(txscore):
    r = run(txscore, "job", "sumbit")
    assert r.returncode == 2, r
    assert r.stderr == 'txscore job: unknown command "sumbit"; did you mean "submit"? ' \
                       '(txscore job --help lists the commands)\n', r.stderr
    # An option before the command (it belongs after it) does not hide the mistyped command.
    r = run(txscore, "job", "--server", "127.0.0.1:1", "sumbit")
    assert r.returncode == 2, r
    assert r.stderr == 'txscore job: unknown command "sumbit"; did you mean "submit"? ' \
                       '(txscore job --help lists the commands)\n', r.stderr
    r = run(txscore, "job", "--server", "127.0.0.1:1", "submit", "--file", "x")  # CLI11 names the misplaced option
    assert r.returncode == 2 and "--server" in r.stderr and "did you mean" not in r.stderr, r
    r = run(txscore, "keys", "frobnicate")
    assert r.returncode == 2, r
    assert r.stderr == 'txscore keys: unknown command "frobnicate" (txscore keys --help lists the commands)\n', r.stderr
    r = run(txscore, "score", "--sever", "127.0.0.1:1")
    assert r.returncode == 2, r
    assert r.stderr.endswith("txscore: unknown option --sever; did you mean --server?\n"), r.stderr
    r = run(txscore, "batch", "merge", "--outptu=x", "y")
    assert r.returncode == 2 and r.stderr.endswith("txscore: unknown option --outptu; did you mean --output?\n"), r


def check_a_failed_connection_says_so_without_thrifts_own_lines(txscore):
    r = run(txscore, "score", "--server", "127.0.0.1:1", "--count", "1", "--plaintext")
    assert r.returncode == 1, r
    assert r.stderr.startswith("cannot connect to 127.0.0.1:1: "), r.stderr
    assert "TSocket" not in r.stderr, r.stderr


def check_version_names_the_version_commit_and_compiler(txscore):
    source = SOURCE
    r = run(txscore, "--version")
    assert r.returncode == 0, r
    with open(os.path.join(source, "CMakeLists.txt")) as f:
        version = re.search(r"project\(txscore VERSION (\S+)", f.read()).group(1)
    match = re.fullmatch(rf"txscore {re.escape(version)} \(commit ([0-9a-f]{{12}})(-dirty)?, built with \S+ [0-9.]+\)\n",
                         r.stdout)
    assert match, r.stdout
    # A commit of this repository (the one built; HEAD may have moved on since).
    assert subprocess.run(["git", "-C", source, "cat-file", "-e", match.group(1) + "^{commit}"]).returncode == 0, r.stdout


def check_known_commands_are_not_called_unknown(txscore):
    r = run(txscore, "score", "--help")
    assert r.returncode == 0, r
    assert "unknown command" not in r.stderr


def check_an_unknown_log_level_is_refused_not_silenced(txscore):
    for command in (["serve", "--config", "/nonexistent.yaml"], ["batch", "run", "--config", "x", "--input", "y",
                                                                 "--output", "z"]):
        r = run(txscore, *command, "--log-level", "verbose")
        assert r.returncode != 0, r
        assert "--log-level: verbose not in {trace,debug,info,warn,error,off}" in r.stderr, r.stderr
        r = run(txscore, *command, "--log-format", "xml")
        assert r.returncode != 0, r
        assert "--log-format: xml not in {json,text}" in r.stderr, r.stderr


def check_serve_logs_json_lines_by_default_and_text_when_asked(txscore):
    # A settings file that does not exist: serve logs why and exits 1, in either format.
    r = run(txscore, "serve", "--config", "/nonexistent.yaml")
    assert r.returncode == 1, r
    entry = json.loads(r.stderr.splitlines()[-1])
    assert list(entry) == ["time", "level", "component", "message", "request_id", "trace_id"], entry
    assert entry["level"] == "error" and entry["component"] == "server", entry
    assert "/nonexistent.yaml" in entry["message"], entry
    r = run(txscore, "serve", "--config", "/nonexistent.yaml", "--log-format", "text")
    assert r.returncode == 1, r
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z error server: .*/nonexistent\.yaml.*",
                        r.stderr.splitlines()[-1]), r.stderr


def check_score_prints_input_errors_as_valid_json(txscore):
    import json
    import os
    import tempfile
    with tempfile.TemporaryDirectory() as work:
        path = os.path.join(work, "bad.jsonl")
        with open(path, "w") as f:
            f.write('{"request_id": "quote\\"and\\\\backslash", "amount_minor": "x"}\n')
            f.write('not json at all: "quoted" \\ text\n')
        r = run(txscore, "score", "--server", "127.0.0.1:1", "--file", path)
        lines = [line for line in r.stdout.splitlines() if line]
        assert len(lines) == 2, r
        for line in lines:
            parsed = json.loads(line)  # hand-built JSON broke on the quotes in these messages
            assert set(parsed) == {"line", "error"}, parsed
        assert [json.loads(line)["line"] for line in lines] == [1, 2]
        # Nothing to send: exit 3 before connecting, as `batch run` exits when no row scored.
        assert r.returncode == 3, r
        assert r.stderr == f"txscore score: no line of {path} is a transaction (each line above says why); " \
                           "nothing was sent\n", r.stderr
        open(path, "w").close()
        r = run(txscore, "score", "--server", "127.0.0.1:1", "--file", path)
        assert r.returncode == 3 and "is a transaction (the file is empty)" in r.stderr, r


def check_data_generate_takes_the_format_from_the_extension_or_refuses_a_clash(txscore):
    import json
    import os
    import tempfile
    with tempfile.TemporaryDirectory() as work:
        jsonl = os.path.join(work, "claims.jsonl")
        r = run(txscore, "data", "generate", "--kind", "claims", "--claims", "3", "--out", jsonl)
        assert r.returncode == 0, r
        with open(jsonl) as f:
            first = json.loads(f.readline())  # JSON lines, not CSV, for a .jsonl name
        assert "claim_id" in first, first
        csv = os.path.join(work, "claims.csv")
        assert run(txscore, "data", "generate", "--kind", "claims", "--claims", "3", "--out", csv).returncode == 0
        with open(csv) as f:
            assert f.readline().startswith("claim_id,policy_id,claimant_id,"), "a .csv name gets CSV"
        clash = os.path.join(work, "clash.jsonl")
        r = run(txscore, "data", "generate", "--kind", "claims", "--format", "csv", "--out", clash)
        assert r.returncode == 2, r
        assert r.stderr == f"--format csv does not match the file name {clash} (which says jsonl); change one of them\n", r.stderr
        assert not os.path.exists(clash) and not os.path.exists(clash + ".tmp"), "nothing written on a refusal"
        unknown = os.path.join(work, "claims.dat")
        r = run(txscore, "data", "generate", "--kind", "claims", "--out", unknown)
        assert r.returncode == 2, r
        assert "cannot tell the format from the name" in r.stderr, r.stderr
        r = run(txscore, "data", "generate", "--kind", "claims", "--claims", "2", "--format", "jsonl", "--out", unknown)
        assert r.returncode == 0, r  # an extension that names no format takes --format


def check_data_generate_labels_name_every_claim(txscore):
    import json
    import os
    import tempfile
    with tempfile.TemporaryDirectory() as work:
        claims, labels = os.path.join(work, "c.jsonl"), os.path.join(work, "labels.jsonl")
        r = run(txscore, "data", "generate", "--kind", "claims", "--claims", "30", "--seed", "3",
                "--out", claims, "--labels", labels)
        assert r.returncode == 0, r
        with open(claims) as f:
            claim_ids = [json.loads(line)["claim_id"] for line in f]
        with open(labels) as f:
            rows = [json.loads(line) for line in f]
        assert [row["claim_id"] for row in rows] == claim_ids, (rows, claim_ids)
        assert all(set(row) == {"claim_id", "fraud", "patterns"} for row in rows), rows
        assert all(isinstance(row["fraud"], bool) and isinstance(row["patterns"], list) for row in rows), rows
        # A fraudulent claim has at least one pattern, an honest one none.
        assert all(bool(row["patterns"]) == row["fraud"] for row in rows), rows


def check_generate_samples_reproducibly_from_its_seed(txscore):
    import json
    import os
    import tempfile
    with tempfile.TemporaryDirectory() as work:
        assert run(txscore, "llm", "make-checkpoint", "--family", "qwen3", "--size", "tiny", "--out", work).returncode == 0

        def sample(*flags):
            r = run(txscore, "generate", "--model", work, "--prompt", "The claim", "--max-new-tokens", "12",
                    "--ignore-eos", "--json", *flags)
            assert r.returncode == 0, r
            return json.loads(r.stdout)["generated_ids"]

        flags = ("--temperature", "1.5", "--top-k", "50", "--top-p", "0.95")
        first = sample(*flags, "--seed", "11")
        assert len(first) == 12, first
        assert sample(*flags, "--seed", "11") == first  # same seed, same tokens
        others = [sample(*flags, "--seed", str(seed)) for seed in (12, 13, 14)]
        assert any(o != first for o in others), "sampling ignored its seed"
        greedy = sample("--temperature", "0")
        assert sample("--temperature", "0", "--seed", "99") == greedy  # greedy: the seed plays no part
        # --top-k 1 is greedy whatever the temperature.
        assert sample("--temperature", "1.5", "--top-k", "1", "--seed", "5") == greedy

        # The CPU kernels run every decode step in bfloat16 and int8, on the machine's cores by
        # default; float32 runs libtorch's ops.
        def run_json(*flags):
            r = run(txscore, "generate", "--model", work, "--prompt", "The claim", "--max-new-tokens", "6",
                    "--ignore-eos", "--json", *flags)
            assert r.returncode == 0, r
            return json.loads(r.stdout)
        bf16 = run_json("--dtype", "bfloat16")
        assert bf16["cpu_kernel_steps"] == 5 and bf16["threads"] == os.cpu_count(), bf16
        int8 = run_json("--dtype", "bfloat16", "--quantization", "int8", "--threads", "1")
        assert int8["cpu_kernel_steps"] == 5 and int8["threads"] == 1 and int8["quantization"] == "int8", int8
        assert run_json()["cpu_kernel_steps"] == 0
        r = run(txscore, "generate", "--model", work, "--prompt", "x", "--quantization", "int4")
        assert r.returncode == 2, r


def check_llm_analyze_claim_takes_a_claim_inline_or_in_a_file(txscore):
    import json
    import os
    import tempfile
    with tempfile.TemporaryDirectory() as work:
        model = os.path.join(work, "llm")
        r = run(txscore, "llm", "make-checkpoint", "--family", "qwen3", "--size", "tiny", "--out", model)
        assert r.returncode == 0, r.stderr
        claims = os.path.join(work, "claims.jsonl")
        assert run(txscore, "data", "generate", "--kind", "claims", "--claims", "3", "--out", claims).returncode == 0
        with open(claims) as f:
            first = f.readline().strip()
        claim_id = json.loads(first)["claim_id"]
        # Amounts are numbers in the claims format: this aborted with an uncaught type_error.
        for argument in (claims, first):
            r = run(txscore, "llm", "analyze-claim", "--model", model, "--claim", argument)
            assert r.returncode == 0, r
            findings = json.loads(r.stdout.strip().splitlines()[-1])
            assert findings["claim_id"] == claim_id, findings
            assert list(findings) == ["claim_id", "risk_level", "flags", "summary", "model_id"], findings
        r = run(txscore, "llm", "analyze-claim", "--model", model, "--claim", '{"claim_id": "x"}')
        assert r.returncode == 2 and r.stderr.startswith("--claim: missing required key"), r
        r = run(txscore, "llm", "analyze-claim", "--model", model, "--claim", os.path.join(work, "none.json"))
        assert r.returncode == 2 and "--claim: no file" in r.stderr, r


def train_claims_model_and_card_key(txscore, work):
    """A small claims model in WORK/models and a private WORK/card.key, for batch pipelines."""
    import os
    r = run(txscore, "train", "--kind", "claims", "--claims", "400", "--rounds", "5", "--threads", "1",
            "--out", os.path.join(work, "models"))
    assert r.returncode == 0, r.stderr
    with open(os.path.join(work, "card.key"), "wb") as f:
        f.write(os.urandom(32))
    os.chmod(os.path.join(work, "card.key"), 0o600)


def check_batch_run_exits_3_when_no_row_was_scored(txscore):
    import os
    import tempfile
    with tempfile.TemporaryDirectory() as work:
        train_claims_model_and_card_key(txscore, work)
        with open(os.path.join(work, "batch.yaml"), "w") as f:
            f.write("pipeline: claims.yaml\nstorage: {path: db}\nsecurity: {card_key_file: card.key}\n")
        with open(os.path.join(work, "claims.yaml"), "w") as f:
            f.write("stages:\n"
                    "  - {name: features, kind: claim_features}\n"
                    "  - {name: claims_model, kind: xgboost, after: features, model: models/claims.ubj}\n"
                    "  - {name: decision, kind: decision, after: claims_model}\n")
        csv_named_jsonl = os.path.join(work, "claims.jsonl")  # the newcomer's trap: CSV in a .jsonl file
        assert run(txscore, "data", "generate", "--kind", "claims", "--claims", "20", "--format", "jsonl",
                   "--out", os.path.join(work, "good.jsonl")).returncode == 0
        assert run(txscore, "data", "generate", "--kind", "claims", "--claims", "20",
                   "--out", os.path.join(work, "claims.csv")).returncode == 0
        os.rename(os.path.join(work, "claims.csv"), csv_named_jsonl)
        config = os.path.join(work, "batch.yaml")
        r = run(txscore, "batch", "run", "--config", config, "--input", csv_named_jsonl,
                "--output", os.path.join(work, "out.jsonl"), "--quiet")
        assert r.returncode == 3, r
        assert "no row was scored: all 21 rows are errors" in r.stderr, r.stderr
        r = run(txscore, "batch", "run", "--config", config, "--input", os.path.join(work, "good.jsonl"),
                "--output", os.path.join(work, "good.out.jsonl"), "--quiet")
        assert r.returncode == 0, r
        # Run again, finished: it says so instead of reprinting a summary as if it had run.
        r = run(txscore, "batch", "run", "--config", config, "--input", os.path.join(work, "good.jsonl"),
                "--output", os.path.join(work, "good.out.jsonl"))
        assert r.returncode == 0, r
        assert "was already done: 20 of 20 rows, finished earlier; nothing was scored now" in r.stdout, r.stdout
        assert "decisions:" not in r.stdout, r.stdout

        # --retry-llm-shortfalls: only the rows an earlier output lists with a shortfall are
        # scored, each as in the whole run.
        import json
        with open(os.path.join(work, "good.out.jsonl")) as f:
            whole = [json.loads(line) for line in f]
        earlier = os.path.join(work, "earlier.jsonl")
        with open(earlier, "w") as f:
            for row in whole:
                if row["line"] in (2, 5):
                    row = dict(row, llm_shortfalls=[{"stage": "analysis", "reason": "failed", "detail": "x"}])
                f.write(json.dumps(row) + "\n")
        retry = os.path.join(work, "retry.jsonl")
        r = run(txscore, "batch", "run", "--config", config, "--input", os.path.join(work, "good.jsonl"),
                "--output", retry, "--retry-llm-shortfalls", earlier, "--quiet")
        assert r.returncode == 0, r
        with open(retry) as f:
            retried = [json.loads(line) for line in f]
        for row in retried + whole:
            row.pop("timings")
        assert retried == [whole[1], whole[4]], retried
        r = run(txscore, "batch", "run", "--config", config, "--input", os.path.join(work, "good.jsonl"),
                "--output", os.path.join(work, "retry2.jsonl"), "--retry-llm-shortfalls",
                os.path.join(work, "good.out.jsonl"))
        assert r.returncode == 0 and "nothing to score again" in r.stdout, r
        assert not os.path.exists(os.path.join(work, "retry2.jsonl"))
        r = run(txscore, "batch", "run", "--config", config, "--input", os.path.join(work, "good.jsonl"),
                "--output", os.path.join(work, "retry3.jsonl"), "--retry-llm-shortfalls", config)
        assert r.returncode == 2 and "not a line of a txscore batch run output" in r.stderr, r

        # --max-error-share: 2 bad rows of 22 (9 %) fail a 5 % share and pass a 20 % one.
        mixed = os.path.join(work, "mixed.jsonl")
        with open(os.path.join(work, "good.jsonl")) as f, open(mixed, "w") as out:
            out.write(f.read() + '{"claim_id": "bad-1"}\n' + 'not json\n')
        r = run(txscore, "batch", "run", "--config", config, "--input", mixed,
                "--output", os.path.join(work, "mixed.strict.jsonl"), "--quiet", "--max-error-share", "0.05")
        assert r.returncode == 3, r
        r = run(txscore, "batch", "run", "--config", config, "--input", mixed,
                "--output", os.path.join(work, "mixed.lenient.jsonl"), "--quiet", "--max-error-share", "0.2")
        assert r.returncode == 0, r
        # Past 1,000 rows, a run over its share stops there (exit 3) instead of writing an
        # error line for every row of a file in the wrong format.
        wrong = os.path.join(work, "wrong.jsonl")
        with open(wrong, "w") as out:
            out.write("claim_id,policy_id\n" * 1200)
        r = run(txscore, "batch", "run", "--config", config, "--input", wrong,
                "--output", os.path.join(work, "wrong.out.jsonl"), "--quiet", "--chunk", "100")
        assert r.returncode == 3, r
        assert "stopped after 1000 of 1200 rows: 1000 (100.0 %) are errors, over the maximum error share 0.1" \
            in r.stderr, r
        assert "Fix it and run again with --restart" in r.stderr, r
        with open(os.path.join(work, "wrong.out.jsonl")) as f:
            assert len(f.readlines()) == 1000
        # --max-llm-shortfall-share is a share: out of [0, 1] is refused before anything runs.
        r = run(txscore, "batch", "run", "--config", config, "--input", mixed,
                "--output", os.path.join(work, "never.jsonl"), "--max-llm-shortfall-share", "1.5")
        assert r.returncode != 0 and "--max-llm-shortfall-share" in r.stderr, r
        assert not os.path.exists(os.path.join(work, "never.jsonl"))


def check_pipeline_digest_prints_each_file_and_the_pin_refuses_other_files(txscore):
    """`txscore pipeline digest`: each file's SHA-256 and the bundle digest, which is SHA-256 of
    the documented manifest (computed here with hashlib); a settings file that pins it runs the
    pipeline (`batch run`), and one whose files changed is refused by both, exit 1."""
    import hashlib
    import os
    import tempfile
    with tempfile.TemporaryDirectory() as work:
        train_claims_model_and_card_key(txscore, work)
        pipeline = os.path.join(work, "claims.yaml")
        with open(pipeline, "w") as f:
            f.write("stages:\n"
                    "  - {name: features, kind: claim_features}\n"
                    "  - {name: claims_model, kind: xgboost, after: features, model: models/claims.ubj}\n"
                    "  - {name: decision, kind: decision, after: claims_model}\n")
        config = os.path.join(work, "batch.yaml")
        settings = "pipeline: claims.yaml\nstorage: {path: db}\nsecurity: {card_key_file: card.key}\n"
        with open(config, "w") as f:
            f.write(settings)

        def line(name, path):
            with open(path, "rb") as f:
                data = f.read()
            return f"{name} {hashlib.sha256(data).hexdigest()} {len(data)}\n"
        model = os.path.join(work, "models", "claims.ubj")
        schema = os.path.join(work, "models", "claims.features.json")
        manifest = ("txscore pipeline bundle v1\n" + line("pipeline", pipeline) + line("claims_model model", model) +
                    line("claims_model schema", schema))
        digest = "sha256:" + hashlib.sha256(manifest.encode()).hexdigest()
        r = run(txscore, "pipeline", "digest", "--config", config)
        assert r.returncode == 0, r
        lines = r.stdout.splitlines()
        def listed(name, path):  # as the command prints a file: SHA-256, name, bytes, path
            sha, size = line(name, path).split()[-2:]
            return f"{sha} {name} {size} {path}"
        assert lines[:3] == [listed("pipeline", pipeline), listed("claims_model model", model),
                             listed("claims_model schema", schema)], lines
        assert lines[3] == digest, (lines, digest)
        assert lines[4] == f'not pinned: to pin it, add to {config}: pipeline_digest: "{digest}"', lines
        r = run(txscore, "pipeline", "digest", "--pipeline", pipeline)
        assert r.returncode == 0 and r.stdout.splitlines()[3] == digest and len(r.stdout.splitlines()) == 4, r
        r = run(txscore, "pipeline", "digest", "--pipeline", pipeline, "--config", config)
        assert r.returncode == 2 and "excludes" in r.stderr, r

        with open(config, "w") as f:
            f.write(settings + f'pipeline_digest: "{digest}"\n')
        r = run(txscore, "pipeline", "digest", "--config", config)
        assert r.returncode == 0 and r.stdout.splitlines()[-1] == f"matches pipeline_digest in {config}", r
        assert run(txscore, "data", "generate", "--kind", "claims", "--claims", "5", "--format", "jsonl",
                   "--out", os.path.join(work, "claims.jsonl")).returncode == 0
        batch = [txscore, "batch", "run", "--config", config, "--input", os.path.join(work, "claims.jsonl"), "--quiet"]
        r = subprocess.run(batch + ["--output", os.path.join(work, "a.jsonl")], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r

        with open(os.path.join(work, "models", "claims.features.json"), "a") as f:
            f.write(" ")  # the same schema to a JSON reader; other bytes
        changed = ("txscore pipeline bundle v1\n" + line("pipeline", pipeline) + line("claims_model model", model) +
                   line("claims_model schema", schema))
        other = "sha256:" + hashlib.sha256(changed.encode()).hexdigest()
        refusal = (f"the pipeline's files have digest {other}, not the {digest} that pipeline_digest in {config} "
                   f"pins: a file of the pipeline changed; see each file's digest with: txscore pipeline digest "
                   f"--config {config}")
        r = run(txscore, "pipeline", "digest", "--config", config)
        assert r.returncode == 1 and r.stderr == refusal + "\n", r
        r = subprocess.run(batch + ["--output", os.path.join(work, "b.jsonl")], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode != 0 and refusal in r.stderr, r
        assert not os.path.exists(os.path.join(work, "b.jsonl")), "a refused run wrote its output"

        # A server's claims jobs: jobs.claims_pipeline_digest pins the claims pipeline the same
        # way; `txscore serve` does not start on the changed files, and starts on the new pin.
        r = run(txscore, "train", "--kind", "transactions", "--cards", "200", "--days", "5", "--rounds", "3",
                "--threads", "1", "--out", os.path.join(work, "models"))
        assert r.returncode == 0, r.stderr
        with open(os.path.join(work, "fraud.yaml"), "w") as f:
            f.write("stages:\n"
                    "  - {name: features, kind: features}\n"
                    "  - {name: fraud, kind: xgboost, after: features, model: models/fraud.ubj}\n"
                    "  - {name: decision, kind: decision, after: fraud}\n")
        serve_config = os.path.join(work, "serve.yaml")

        def serve_with_pin(pin):
            with open(serve_config, "w") as f:
                f.write("pipeline: fraud.yaml\n"
                        "server: {host: 127.0.0.1, port: 0, plaintext: true}\n"
                        "admin: {host: 127.0.0.1, port: 0, plaintext: true}\n"
                        "storage: {path: serve-db}\nsecurity: {card_key_file: card.key}\n"
                        f'jobs: {{claims_pipeline: claims.yaml, claims_pipeline_digest: "{pin}", input_dir: .,'
                        " output_dir: jobs-out}\n")
            return subprocess.Popen([txscore, "serve", "--config", serve_config], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
        server = serve_with_pin(digest)
        _, log = server.communicate(timeout=120)
        assert server.returncode == 1, (server.returncode, log)
        assert (f"the pipeline's files have digest {other}, not the {digest} that jobs.claims_pipeline_digest in "
                f"{serve_config} pins: a file of the pipeline changed; see each file's digest with: txscore pipeline "
                f"digest --pipeline {pipeline}") in log, log
        server = serve_with_pin(other)
        try:
            line = server.stdout.readline()
            assert line.startswith("listening thrift_port="), (line, server.stderr.read() if server.poll() else "")
        finally:
            server.terminate()
            server.wait(timeout=60)


def check_make_checkpoint_shows_its_progress(txscore):
    import os
    import tempfile
    with tempfile.TemporaryDirectory() as work:
        r = run(txscore, "llm", "make-checkpoint", "--family", "qwen3", "--size", "tiny", "--out", work)
        assert r.returncode == 0, r
        # 2 layers: the embedding, each layer and the writing are 4 steps; off a terminal, a
        # line per tenth and one at the end.
        lines = [line for line in r.stderr.splitlines() if line.startswith("make-checkpoint: ")]
        assert lines and lines[-1].startswith("make-checkpoint: 4/4 (100%)"), r.stderr
        assert os.path.exists(os.path.join(work, "model.safetensors"))


def check_generate_starts_the_prompt_with_one_bos_even_when_the_prompt_writes_it(txscore):
    import json
    import tempfile
    with tempfile.TemporaryDirectory() as work:
        assert run(txscore, "llm", "make-checkpoint", "--family", "llama", "--size", "tiny", "--out", work).returncode == 0
        with open(f"{work}/config.json") as f:
            bos = json.load(f)["bos_token_id"]
        for prompt in ("hello", "<|begin_of_text|>hello"):
            r = run(txscore, "generate", "--model", work, "--prompt", prompt, "--max-new-tokens", "2", "--json")
            assert r.returncode == 0, r
            ids = json.loads(r.stdout)["prompt_ids"]
            assert ids[0] == bos and ids.count(bos) == 1, (prompt, ids)


def check_a_server_address_that_is_not_host_port_is_refused(txscore):
    for command in (["score"], ["job", "status", "--id", "x"]):
        r = run(txscore, *command, "--server", "127.0.0.1:90x0")
        assert r.returncode == 2, (command, r)
        assert r.stderr == ('--server: "90x0" in "127.0.0.1:90x0" is not a port from 1 to 65535 '
                            '(HOST:PORT, e.g. 127.0.0.1:9090)\n'), r.stderr


def check_audit_last_zero_is_refused(txscore):
    r = run(txscore, "audit", "--last", "0", "--db", "/nonexistent")
    assert r.returncode != 0, r
    assert "--last: Value 0 not in range 1 to 1000000" in r.stderr, r.stderr


def check_audit_verify_says_what_it_could_not_check(txscore):
    """Exit 2, with the reason, when the trail cannot be checked: a bad --from, a keyset that
    cannot be read, a public-key file given with a keyset or writable by others, no database."""
    import os
    import stat
    import tempfile
    with tempfile.TemporaryDirectory() as work:
        keyset = os.path.join(work, "keyset.json")
        assert run(txscore, "keys", "create", "--out", keyset).returncode == 0
        r = run(txscore, "audit", "verify", "--from", "yesterday", "--keyset", keyset, "--db", work)
        assert r.returncode == 2, r
        assert r.stderr == ('--from must be a UTC time YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ, not "yesterday"\n'), r.stderr
        r = run(txscore, "audit", "verify", "--keyset", os.path.join(work, "absent.json"), "--db", work)
        assert r.returncode == 2, r
        assert r.stderr.startswith("cannot read the keyset that signs the audit checkpoints: "), r.stderr
        r = run(txscore, "audit", "verify", "--keyset", keyset, "--db", os.path.join(work, "no-db"))
        assert r.returncode == 2, r
        assert "no-db" in r.stderr, r.stderr
        # A wrapped keyset opens with its key-encryption key from --kek-file or --kek-env (the
        # check then gets as far as the missing database), and not without it.
        kek = os.path.join(work, "kek")
        with open(kek, "w") as f:
            f.write("ab" * 32)
        os.chmod(kek, 0o600)
        wrapped = os.path.join(work, "wrapped.json")
        assert run(txscore, "keys", "create", "--out", wrapped, "--kek-file", kek).returncode == 0
        for how in (["--kek-file", kek], ["--kek-env", "TXSCORE_TEST_AUDIT_KEK"]):
            r = subprocess.run([txscore, "audit", "verify", "--keyset", wrapped, *how, "--db", os.path.join(work, "no-db")],
                               capture_output=True, text=True, timeout=60,
                               env=dict(os.environ, TXSCORE_TEST_AUDIT_KEK="ab" * 32))
            assert r.returncode == 2 and "no-db" in r.stderr and "keyset" not in r.stderr, (how, r)
        r = run(txscore, "audit", "verify", "--keyset", wrapped, "--db", os.path.join(work, "no-db"))
        assert r.returncode == 2, r
        assert r.stderr.startswith("cannot read the keyset that signs the audit checkpoints: "), r.stderr
        # --public-keys alone: with a keyset or a KEK beside it, or a file others may write, refused.
        public = os.path.join(work, "public.json")
        assert run(txscore, "keys", "public", "--keyset", keyset, "--out", public).returncode == 0
        for beside in (["--keyset", keyset], ["--kek-file", kek], ["--kek-env", "TXSCORE_TEST_AUDIT_KEK"]):
            r = run(txscore, "audit", "verify", "--public-keys", public, *beside, "--db", work)
            assert r.returncode == 2, (beside, r)
            assert r.stderr == "--public-keys verifies without the keyset: give it alone, not with --keyset or a KEK\n", r
        # keys public never writes through what lies at --out: a file, or a link even to nowhere.
        os.symlink(os.path.join(work, "nowhere.json"), os.path.join(work, "dangling.json"))
        for taken in (public, os.path.join(work, "dangling.json")):
            r = run(txscore, "keys", "public", "--keyset", keyset, "--out", taken)
            assert r.returncode == 1 and f"{taken} exists: remove it first, or name another file" in r.stderr, r
        assert not os.path.exists(os.path.join(work, "nowhere.json"))
        assert stat.S_IMODE(os.stat(public).st_mode) == 0o644  # anyone may read it, only its owner write
        os.symlink(public, os.path.join(work, "link.json"))
        r = run(txscore, "audit", "verify", "--public-keys", os.path.join(work, "link.json"), "--db", work)
        assert r.returncode == 2 and "is a symbolic link; name the file itself" in r.stderr, r
        os.chmod(public, 0o666)
        r = run(txscore, "audit", "verify", "--public-keys", public, "--db", work)
        assert r.returncode == 2 and "may be written by group or others" in r.stderr, r
        os.chmod(public, 0o644)
        r = run(txscore, "audit", "verify", "--public-keys", public, "--db", os.path.join(work, "no-db"))
        assert r.returncode == 2 and "no-db" in r.stderr, r  # got as far as the database
        # A trail whose records carry no chain fields (as written before the chain, or stripped):
        # not "intact", exit 3. Made with RocksDB's own ldb.
        db = os.path.join(work, "legacy-db")
        def ldb(*args):
            r = subprocess.run(["ldb", f"--db={db}", *args], capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, (args, r)
        ldb("--create_if_missing", "put", "x", "y")
        for family in ("entity_state", "audit", "jobs"):
            ldb("create_column_family", family)
        key = (1796180000000000).to_bytes(8, "big") + ((1 << 40) | 0).to_bytes(8, "big")
        ldb("--column_family=audit", "--key_hex", "--value_hex", "put", "0x" + key.hex(),
            "0x" + b'{"decision":"APPROVE","request_id":"old"}'.hex())
        r = run(txscore, "audit", "verify", "--keyset", keyset, "--db", db)
        assert r.returncode == 3, r
        assert r.stdout.startswith("audit trail PARTLY VERIFIED: 1 records carry no chain fields"), r.stdout


def check_generate_reports_a_dump_logits_file_it_could_not_write(txscore):
    import os
    import tempfile
    with tempfile.TemporaryDirectory() as work:
        model = os.path.join(work, "llm")
        assert run(txscore, "llm", "make-checkpoint", "--family", "qwen3", "--size", "tiny", "--out", model).returncode == 0
        base = [txscore, "generate", "--model", model, "--prompt", "x", "--max-new-tokens", "2", "--dump-logits"]
        r = subprocess.run(base + ["/dev/full"], capture_output=True, text=True, timeout=120)
        assert r.returncode == 1 and "writing --dump-logits file /dev/full failed" in r.stderr, r
        missing = os.path.join(work, "no", "such", "dir", "l.bin")
        r = subprocess.run(base + [missing], capture_output=True, text=True, timeout=120)
        assert r.returncode == 1 and f"cannot write --dump-logits file {missing}" in r.stderr, r
        good = os.path.join(work, "l.bin")
        r = subprocess.run(base + [good], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and os.path.getsize(good) > 0, r


def check_keys_create_rotate_retire_and_list_a_wrapped_keyset(txscore):
    import os
    import stat
    import tempfile
    with tempfile.TemporaryDirectory() as work:
        keyset = os.path.join(work, "keyset.json")
        env = dict(os.environ, TXSCORE_TEST_KEK="ab" * 32)
        def keys(*args):
            return subprocess.run([txscore, "keys", *args], capture_output=True, text=True, timeout=60, env=env)
        r = keys("create", "--out", keyset, "--kek-env", "TXSCORE_TEST_KEK")
        assert r.returncode == 0 and "(wrapped with AES-256-GCM)" in r.stdout and "k1 primary" in r.stdout, r
        assert stat.S_IMODE(os.stat(keyset).st_mode) == 0o600
        with open(keyset) as f:
            assert "txscore-keyset-wrapped" in f.read()
        r = keys("create", "--out", keyset)
        assert r.returncode == 1 and "exists: a keyset is never overwritten" in r.stderr, r
        r = keys("rotate", "--keyset", keyset, "--kek-env", "TXSCORE_TEST_KEK")
        assert r.returncode == 0 and "k1 active" in r.stdout and "k2 primary" in r.stdout, r
        r = keys("retire", "--keyset", keyset, "--kek-env", "TXSCORE_TEST_KEK", "--id", "k1")
        assert r.returncode == 0 and "k1 retired" in r.stdout, r
        r = keys("retire", "--keyset", keyset, "--kek-env", "TXSCORE_TEST_KEK", "--id", "k2")
        assert r.returncode == 1 and "k2 is the primary key" in r.stderr, r
        r = keys("list", "--keyset", keyset, "--kek-env", "TXSCORE_TEST_KEK")
        lines = r.stdout.split("\n")
        assert r.returncode == 0 and lines[0].startswith("k1 retired"), r
        assert lines[0].endswith(" keys: hkdf-sha256 per purpose") and lines[1].endswith(" keys: hkdf-sha256 per purpose"), r
        assert "secret\"" not in r.stdout and "secret_hex" not in r.stdout, r.stdout
        r = keys("list", "--keyset", keyset)  # without its KEK
        assert r.returncode == 1 and "is wrapped" in r.stderr, r
        raw = os.path.join(work, "card.key")
        with open(raw, "wb") as f:
            f.write(os.urandom(32))
        os.chmod(raw, 0o600)
        r = keys("import", "--card-key", raw, "--out", os.path.join(work, "imported.json"))
        assert r.returncode == 0 and "legacy primary" in r.stdout, r
        assert r.stdout.rstrip("\n").endswith("legacy primary keys: the secret itself (from before)"), r.stdout
        # The keyset file holds the secret; the listing never does.
        with open(raw, "rb") as f:
            assert f.read().hex() not in r.stdout
        # keys list|rotate|retire|public read keysets only; import refuses a weak raw key.
        r = keys("list", "--keyset", raw)
        assert r.returncode == 1 and f"keyset file {raw} is not a keyset" in r.stderr, r
        with open(raw, "wb") as f:
            f.write(b"\0" * 32)
        r = keys("import", "--card-key", raw, "--out", os.path.join(work, "weak.json"))
        assert r.returncode == 1 and "has only 1 distinct byte values" in r.stderr, r
        assert not os.path.exists(os.path.join(work, "weak.json"))


def check_apply_chat_template_renders_the_checkpoints_template_or_says_it_has_none(txscore):
    import json
    import os
    import tempfile
    with tempfile.TemporaryDirectory() as work:
        chat, base = os.path.join(work, "chat"), os.path.join(work, "base")
        assert run(txscore, "llm", "make-checkpoint", "--family", "llama", "--out", chat).returncode == 0
        r = run(txscore, "llm", "make-checkpoint", "--family", "llama", "--out", base, "--no-chat-template")
        assert r.returncode == 0, r
        with open(os.path.join(base, "tokenizer_config.json")) as f:
            assert "chat_template" not in json.load(f)
        request = {"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": True}
        r = subprocess.run([txscore, "llm", "apply-chat-template", "--tokenizer", chat], input=json.dumps(request),
                           capture_output=True, text=True)
        assert r.returncode == 0, r
        answer = json.loads(r.stdout)
        assert answer["text"] == "<|begin_of_text|><|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", answer
        assert len(answer["ids"]) >= 7, answer
        r = subprocess.run([txscore, "llm", "apply-chat-template", "--tokenizer", base], input=json.dumps(request),
                           capture_output=True, text=True)
        assert r.returncode == 1 and "has no chat template" in r.stderr, r
        # --lines: one answer per request, an error as {"error"} and exit 1.
        lines = (json.dumps(request) + "\n" + json.dumps({"messages": "not a list"}) + "\n" +
                 json.dumps({"messages": [], "add_generation_prompt": "yes"}) + "\n")
        r = subprocess.run([txscore, "llm", "apply-chat-template", "--tokenizer", chat, "--lines"], input=lines,
                           capture_output=True, text=True)
        answers = [json.loads(line) for line in r.stdout.splitlines()]
        assert r.returncode == 1 and len(answers) == 3 and "text" in answers[0], r
        assert list(answers[1]) == ["error"] and "messages must be a list" in answers[1]["error"], answers[1]
        assert answers[2] == {"error": "add_generation_prompt must be true or false"}, answers[2]


def check_llm_help_describes_what_is_there(txscore):
    r = run(txscore, "llm", "--help")
    assert r.returncode == 0, r
    assert "follow)" not in r.stdout, r.stdout  # no promise of what "follows"
    for command in ("tokenize", "analyze-claim", "make-checkpoint", "apply-chat-template"):
        assert command in r.stdout, r.stdout


def check_conformance_reports_what_int8_weights_cost_per_family(txscore):
    import json
    import os
    import tempfile
    with tempfile.TemporaryDirectory() as work:
        r = run(txscore, "conformance", "--devices", "cpu", "--steps", "4", "--out", work)
        assert r.returncode == 0, r
        with open(os.path.join(work, "conformance.json")) as f:
            doc = json.load(f)
        int8 = [row for row in doc["results"] if row["weights"] == "int8"]
        assert sorted(row["model_type"] for row in int8) == ["gemma2", "gemma3_text", "granite", "llama", "qwen3"], int8
        for row in int8:
            assert row["device"].endswith("int8 weights") and row["dtype"] == "bfloat16", row
            assert row["passed"] and row["min_cosine"] >= 0.99 and 0 <= row["greedy_agreement"] <= 4, row
        assert "int8 weights" in r.stdout, r.stdout
    r = run(txscore, "conformance", "--help")
    assert r.returncode == 0 and "the CPU with int8 weights" in r.stdout, r


def check_conformance_lists_what_it_did_not_check_and_fails_on_a_requested_absent_device(txscore):
    import json
    import os
    import tempfile
    with tempfile.TemporaryDirectory() as work:
        r = run(txscore, "conformance", "--devices", "emulated", "--backend-library", EMULATED_DEVICE, "--steps", "2",
                "--out", work)
        assert r.returncode == 0, r
        with open(os.path.join(work, "conformance.json")) as f:
            doc = json.load(f)
        assert doc["results"] and all(row["device"].startswith("emulated") for row in doc["results"]), doc["results"]
        unchecked = {entry["device"] for entry in doc["not_checked"]}
        assert "cuda" in unchecked, doc["not_checked"]  # absent here, and said so
        assert "Not checked: cuda (" in r.stdout, r.stdout
        r = run(txscore, "conformance", "--devices", "cuda", "--steps", "2", "--out", work)
        assert r.returncode == 1 and "device cuda is not available" in r.stderr, r
        # The devices a settings file names, as `plan --config` reads them.
        settings = os.path.join(work, "settings.yaml")
        with open(os.path.join(work, "card.key"), "wb") as f:
            f.write(bytes(range(32)))
        os.chmod(os.path.join(work, "card.key"), 0o600)
        with open(os.path.join(work, "p.yaml"), "w") as f:
            f.write("stages: []\n")
        with open(settings, "w") as f:
            f.write(f"pipeline: p.yaml\nstorage: {{path: db}}\nsecurity: {{card_key_file: card.key}}\n"
                    f"devices: {{backend_library: {EMULATED_DEVICE}}}\n")
        os.remove(os.path.join(work, "conformance.json"))
        r = run(txscore, "conformance", "--devices", "emulated", "--config", settings, "--steps", "2", "--out", work)
        assert r.returncode == 0, r
        with open(os.path.join(work, "conformance.json")) as f:
            assert all(row["device"].startswith("emulated") for row in json.load(f)["results"])
        r = run(txscore, "conformance", "--config", settings, "--backend-library", EMULATED_DEVICE, "--out", work)
        assert r.returncode == 2 and "excludes" in r.stderr, r
        r = run(txscore, "conformance", "--config", os.path.join(work, "missing.yaml"), "--out", work)
        assert r.returncode == 2 and r.stderr.startswith("--config: "), r
        r = run(txscore, "conformance", "--devices", "emulated", "--steps", "2", "--out", work)
        assert r.returncode == 1 and "device emulated is not available: no device of that kind was found" in r.stderr, r
        r = run(txscore, "conformance", "--devices", "emulated", "--backend-library", EMULATED_DEVICE, "--steps", "2",
                "--out", "/etc/hostname/conformance")
        assert r.returncode == 1 and "cannot write" in r.stderr, r  # nothing written is a failure, not a pass


EMULATED_DEVICE = None  # the emulated device's library (--emulated-device)
SOURCE = None  # the repository (--source)

CHECKS = [
    check_unknown_command_names_it_and_suggests_the_nearest,
    check_a_mistyped_command_or_option_gets_the_nearest_one,
    check_a_failed_connection_says_so_without_thrifts_own_lines,
    check_known_commands_are_not_called_unknown,
    check_version_names_the_version_commit_and_compiler,
    check_an_unknown_log_level_is_refused_not_silenced,
    check_serve_logs_json_lines_by_default_and_text_when_asked,
    check_score_prints_input_errors_as_valid_json,
    check_data_generate_takes_the_format_from_the_extension_or_refuses_a_clash,
    check_data_generate_labels_name_every_claim,
    check_generate_samples_reproducibly_from_its_seed,
    check_llm_analyze_claim_takes_a_claim_inline_or_in_a_file,
    check_batch_run_exits_3_when_no_row_was_scored,
    check_audit_last_zero_is_refused,
    check_audit_verify_says_what_it_could_not_check,
    check_make_checkpoint_shows_its_progress,
    check_a_server_address_that_is_not_host_port_is_refused,
    check_generate_starts_the_prompt_with_one_bos_even_when_the_prompt_writes_it,
    check_generate_reports_a_dump_logits_file_it_could_not_write,
    check_llm_help_describes_what_is_there,
    check_keys_create_rotate_retire_and_list_a_wrapped_keyset,
    check_pipeline_digest_prints_each_file_and_the_pin_refuses_other_files,
    check_conformance_reports_what_int8_weights_cost_per_family,
    check_conformance_lists_what_it_did_not_check_and_fails_on_a_requested_absent_device,
    check_apply_chat_template_renders_the_checkpoints_template_or_says_it_has_none,
]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--txscore", required=True)
    parser.add_argument("--emulated-device", required=True, help="libtxscore_emulated_device.so")
    parser.add_argument("--source", required=True, help="the repository (its CMakeLists.txt and git history)")
    args = parser.parse_args()
    global EMULATED_DEVICE, SOURCE
    EMULATED_DEVICE = args.emulated_device
    SOURCE = args.source
    failed = 0
    for check in CHECKS:
        try:
            check(args.txscore)
            print(f"ok   {check.__name__}")
        except AssertionError as e:
            failed += 1
            print(f"FAIL {check.__name__}: {e}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
