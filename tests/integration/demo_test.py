#!/usr/bin/env python3
"""The demo configuration exactly as shipped (config/txscore.yaml, batch.yaml, pipeline.yaml and
claims.yaml, only the two ports set to 0 and the files placed in a scratch folder), driven the
way README's commands drive it: `txscore serve`, `score`, `audit`, `plan`, `job
submit|status|cancel`, `batch run`, then SIGTERM. Needs scripts/setup.sh to have made var/ (the demo key, models and LLM checkpoint)."""
import argparse
import calendar
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from demo_setup import prepare_demo, start_server


def run(txscore, *args, timeout=300):
    return subprocess.run([txscore, *args], capture_output=True, text=True, timeout=timeout)


def ldb(db, *args):
    assert shutil.which("ldb"), "RocksDB's ldb is missing: scripts/setup.sh --tests installs rocksdb-tools"
    r = subprocess.run(["ldb", f"--db={db}", "--column_family=audit", "--key_hex", "--value_hex", *args],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r
    return r.stdout


# A card number as it could hide in text: 12 to 19 digits, maybe grouped by spaces or dashes,
# not part of a longer word (a hex hash's digit runs are bounded by its letters).
PAN_LIKE = re.compile(r"(?<![0-9A-Za-z])\d(?:[ -]?\d){11,18}(?![0-9A-Za-z])")
LOG_FIELDS = ["time", "level", "component", "message", "request_id", "trace_id"]


def luhn_valid(digits):
    total = 0
    for i, d in enumerate(reversed(digits)):
        n = int(d) * (2 if i % 2 else 1)
        total += n - 9 if n > 9 else n
    return total % 10 == 0


def card_numbers_in(text):
    found = []
    for match in PAN_LIKE.finditer(text):
        digits = re.sub(r"[ -]", "", match.group(0))
        if luhn_valid(digits):
            found.append(match.group(0))
    return found


def check_json_log(log, claimant_ids, what):
    """`what`'s log is JSON lines with the documented fields (common/logging.h), and holds no
    card number and no claimant id. Returns it as "component: message" lines for the checks
    that read it."""
    assert card_numbers_in("paid with 4111-1111-1111-1111 today") == ["4111-1111-1111-1111"]  # the scan finds one
    assert card_numbers_in("hash 8f41111111111111111e") == []
    text = []
    for number, line in enumerate(log.splitlines(), 1):
        entry = json.loads(line)
        assert list(entry) == LOG_FIELDS, (what, number, line)
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", entry["time"]), (what, line)
        assert entry["trace_id"] is None or re.fullmatch(r"[0-9a-f]{32}", entry["trace_id"]), (what, line)
        text.append(f"{entry['component']}: {entry['message']}")
    assert text, f"{what} logged nothing"
    assert card_numbers_in(log) == [], (what, card_numbers_in(log))
    ids = re.compile(r"(?<![0-9A-Za-z-])(" + "|".join(map(re.escape, sorted(claimant_ids))) + r")(?![0-9])")
    assert not ids.search(log), (what, ids.search(log).group(0))
    return "\n".join(text)


def check_audit_trail(txscore, settings, db, server_log, run_started):
    """The stopped server's trail verifies, ends at the shutdown checkpoint the server logged,
    and a decision edited, or deleted, in a copy with RocksDB's own ldb (as someone with the
    disk could) is reported at its position. Returns the entries verified."""
    r = run(txscore, "audit", "verify", "--config", settings)
    assert r.returncode == 0, r
    assert r.stdout.startswith("audit trail intact: "), r.stdout
    assert "entries after the last checkpoint" not in r.stdout, r.stdout  # the shutdown signed it all
    head = re.search(r"head: seq (\d+), hash ([0-9a-f]{64})", r.stdout)
    assert head, r.stdout
    assert re.search(rf"audit: shutdown checkpoint seq {head.group(1)} \(epoch \d+\), hash {head.group(2)}",
                     server_log), r.stdout
    assert int(re.search(r"checkpoint signatures verified: (\d+)", r.stdout).group(1)) >= 2, r.stdout
    # From a time (the test's start: the whole trail), with the keyset named rather than read
    # from the settings.
    keyset = os.path.join(os.path.dirname(db), "keyset.json")
    r = run(txscore, "audit", "verify", "--from", run_started, "--keyset", keyset, "--db", db)
    assert r.returncode == 0, r
    assert r.stdout.startswith(f"audit trail intact: {int(head.group(1)) + 1} entries verified (seq 0 to "), r.stdout
    assert f"from {run_started[:-1]}.000000Z" in r.stdout, r.stdout
    # As an auditor holding only the public keys (`keys public`): the same trail, the same head,
    # and nothing in the file that makes a token (no secret; not a key's hex either).
    public = os.path.join(os.path.dirname(db), "audit-public-keys.json")
    r = run(txscore, "keys", "public", "--keyset", keyset, "--out", public)
    assert r.returncode == 0 and r.stdout.startswith(f"wrote {public}: the audit trail's public keys"), r
    with open(public) as f:
        public_text = f.read()
    with open(keyset) as f:
        secrets = [key["secret_hex"] for key in json.load(f)["keys"]]
    assert "secret" not in public_text and not any(secret in public_text for secret in secrets), public_text
    assert oct(os.stat(public).st_mode & 0o777) == "0o644", oct(os.stat(public).st_mode)
    r = run(txscore, "audit", "verify", "--public-keys", public, "--db", db)
    assert r.returncode == 0, r
    assert f"head: seq {head.group(1)}, hash {head.group(2)}" in r.stdout, r.stdout
    r = run(txscore, "keys", "public", "--keyset", keyset, "--out", public)
    assert r.returncode == 1 and f"{public} exists" in r.stderr, r  # never overwritten
    # The signing key retired: now (after every checkpoint) the trail still verifies; dated back
    # to the test's start, every checkpoint was signed after its retirement, which whoever still
    # held the key could have done: refused at the first.
    retired = os.path.join(os.path.dirname(db), "retired-keyset.json")
    shutil.copy(keyset, retired)
    with open(retired) as f:
        signer = next(key["id"] for key in json.load(f)["keys"] if key["state"] == "primary")
    assert run(txscore, "keys", "rotate", "--keyset", retired).returncode == 0
    r = run(txscore, "keys", "retire", "--keyset", retired, "--id", signer)
    assert r.returncode == 0, r
    assert re.search(rf"^{signer} retired( created \S+Z)? retired \S+Z keys: "
                     r"(hkdf-sha256 per purpose|the secret itself \(from before\))$", r.stdout, re.M), r.stdout
    r = run(txscore, "audit", "verify", "--keyset", retired, "--db", db)
    assert r.returncode == 0 and r.stdout.startswith("audit trail intact: "), r
    with open(retired) as f:
        doc = json.load(f)
    started_ms = int(calendar.timegm(time.strptime(run_started, "%Y-%m-%dT%H:%M:%SZ"))) * 1000
    next(key for key in doc["keys"] if key["id"] == signer)["retired_ms"] = started_ms
    with open(retired, "w") as f:
        json.dump(doc, f)
    r = run(txscore, "audit", "verify", "--keyset", retired, "--db", db)
    assert r.returncode == 1, r
    assert r.stdout.startswith("audit trail BROKEN: retired key at position 1 (seq 0;"), r.stdout
    assert f"the checkpoint is signed with key {signer}, which was retired " in r.stdout, r.stdout
    # The public-key file carries the retirement too.
    retired_public = os.path.join(os.path.dirname(db), "retired-public-keys.json")
    assert run(txscore, "keys", "public", "--keyset", retired, "--out", retired_public).returncode == 0
    r = run(txscore, "audit", "verify", "--public-keys", retired_public, "--db", db)
    assert r.returncode == 1, r
    assert r.stdout.startswith("audit trail BROKEN: retired key at position 1 (seq 0;"), r.stdout

    entries = []  # (key hex, value bytes) of the trail's entries (16-byte keys), in key order
    for line in ldb(db, "scan").splitlines():
        key, _, value = line.partition(" : ")
        if len(key) == 2 + 32:
            entries.append((key, bytes.fromhex(value[2:])))
    assert len(entries) == int(head.group(1)) + 1, (len(entries), r.stdout)
    position = next(i for i, (_, v) in enumerate(entries) if b'"decision":"' in v and i > len(entries) // 2) + 1
    key, value = entries[position - 1]
    for tamper, kind in (("edit", "altered"), ("delete", "missing")):
        copy = db + "-" + tamper
        shutil.copytree(db, copy)
        if tamper == "edit":
            decision = re.search(rb'"decision":"([A-Z]+)"', value).group(1)
            other = b"APPROVE" if decision != b"APPROVE" else b"DECLINE"
            edited = value.replace(b'"decision":"' + decision + b'"', b'"decision":"' + other + b'"')
            ldb(copy, "put", key, "0x" + edited.hex().upper())
        else:
            ldb(copy, "delete", key)
        # The edit with the keyset the settings name, the deletion with the public keys alone.
        how = ["--config", settings] if tamper == "edit" else ["--public-keys", public]
        r = run(txscore, "audit", "verify", *how, "--db", copy)
        assert r.returncode == 1, r
        assert r.stdout.startswith(f"audit trail BROKEN: {kind} at position {position} (seq {position - 1};"), \
            (tamper, position, r.stdout)
    return len(entries)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--txscore", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--node-modules", required=True)
    parser.add_argument("--promtool", required=True)
    args = parser.parse_args()
    txscore = args.txscore
    run_started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 1))  # before any audit entry
    work = tempfile.mkdtemp(prefix="txscore-demo-")
    server = None
    try:
        demo = prepare_demo(args.source, txscore, work)
        config_dir, var, pki = demo.config_dir, demo.var, demo.pki
        client_dir, admin_dir = demo.client_dir, demo.admin_dir
        admin_tls = ssl.create_default_context(cafile=os.path.join(pki, "ca.crt"))
        admin_tls.load_cert_chain(os.path.join(admin_dir, "tls.crt"), os.path.join(admin_dir, "tls.key"))
        r = run(txscore, "data", "generate", "--kind", "claims", "--claims", "40", "--seed", "11",
                "--out", os.path.join(var, "claims-small.jsonl"))
        assert r.returncode == 0, r.stderr
        settings = os.path.join(config_dir, "txscore.yaml")
        pipeline = os.path.join(config_dir, "pipeline.yaml")

        # A corrupt calibration cache is said, measured again and rewritten (it was silently ignored).
        cache = os.path.join(var, "device-profiles.json")
        with open(cache, "w") as f:
            f.write("not json")
        r = run(txscore, "plan", "--config", settings)
        assert r.returncode == 0, r.stderr
        assert f"calibration cache {cache} is not a JSON object; calibrating again and rewriting it" in r.stdout + r.stderr, r
        with open(cache) as f:
            assert "cpu/threads=" in json.load(f).__repr__()
        for line in ("stage fraud (placement: cpu)", "stage forensic (placement: cpu)", "-> cpu, float32",
                     "  emulated:0 (emulated)  dispatch 150.0 us"):
            assert line in r.stdout, (line, r.stdout)

        server, ports = start_server(txscore, settings)
        address = f"127.0.0.1:{ports['thrift_port']}"

        # Demo transactions: every result a JSON line; REVIEWs carry the forensic stage's findings.
        r = run(txscore, "score", "--tls-dir", client_dir, "--server", address, "--json")
        assert r.returncode == 0, r.stderr
        results = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
        assert len(results) > 20, r.stdout
        reviews = [x for x in results if x.get("decision") == "REVIEW"]
        assert reviews, "the demo transactions gave no REVIEW"
        assert all(x.get("findings") for x in reviews), reviews[0]
        # The story retries one fraudulent purchase at a merchant on the demo's deny list: the
        # rules stage declines it (R20), whatever the model said.
        denied = [x for x in results if any(h.get("rule") == "R20" for h in x.get("rule_hits", []))]
        assert len(denied) == 1 and denied[0]["decision"] == "DECLINE", [x.get("rule_hits") for x in results]
        # A second demo run scores new cards, not the past of the first run's cards: the same
        # story, decided the same way, for the same reasons (not "seconds_since_last" of
        # transactions sent before the cards' stored history).
        r = run(txscore, "score", "--tls-dir", client_dir, "--server", address, "--json")
        assert r.returncode == 0, r.stderr
        again = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
        def story(xs):
            return [(x["decision"], [reason["feature"] for reason in x.get("reasons", [])]) for x in xs]
        assert story(again) == story(results), (story(results)[:5], story(again)[:5])
        # The table README shows: request, decision, score, the rules that matched, top reasons.
        r = run(txscore, "score", "--tls-dir", client_dir, "--server", address)
        assert r.returncode == 0, r.stderr
        ruled = [line.split() for line in r.stdout.splitlines() if "rule R20" in line]
        assert len(ruled) == 1 and ruled[0][1] == "DECLINE" and ruled[0][3] == "rule", r.stdout

        # The OpenAI-compatible API of the demo's LLM stage, called by the official openai npm
        # client over the admin port's HTTPS with the admin certificate.
        openai_modules = os.path.join(args.node_modules, "openai")
        assert os.path.isdir(openai_modules), f"{openai_modules} is missing: scripts/test.sh installs it with npm"
        r = subprocess.run(["node", os.path.join(os.path.dirname(os.path.abspath(__file__)), "openai_client_test.js"),
                            os.path.abspath(args.node_modules), f"https://127.0.0.1:{ports['admin_port']}/v1",
                            os.path.join(pki, "ca.crt"), os.path.join(admin_dir, "tls.crt"),
                            os.path.join(admin_dir, "tls.key"), "llm-tiny"],
                           capture_output=True, text=True, timeout=600)
        print(r.stdout, end="")
        assert r.returncode == 0, r.stdout + r.stderr

        r = run(txscore, "audit", "--last", "3", "--config", settings)
        assert r.returncode == 0, r.stderr
        audited = [json.loads(line) for line in r.stdout.splitlines()]
        assert len(audited) == 3 and all("card_token" in a for a in audited), r.stdout
        assert all("rule_hits" in a for a in audited), r.stdout

        # SIGHUP reloads the settings and the pipeline file: a new version serves without a
        # restart; a change to a restart-only setting is refused (named in the log, checked at
        # the end) and the running pipeline keeps serving.
        with open(pipeline) as f:
            shipped = f.read()
        with open(settings) as f:
            shipped_settings = f.read()
        assert 'version: "2026.11"' in shipped and "  workers: 8 " in shipped_settings
        # The new version also places the forensic stage on the emulated device that `serve`
        # loaded from devices.backend_library (with time for the device's latency model).
        assert "    placement: cpu             # auto" in shipped and "budget_ms: 1500 " in shipped
        with open(pipeline, "w") as f:
            f.write(shipped.replace('version: "2026.11"', 'version: "2026.12"')
                    .replace("    placement: cpu             # auto", "    placement: emulated        # auto")
                    .replace("budget_ms: 1500 ", "budget_ms: 60000 "))
        server.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 60
        while True:
            r = run(txscore, "score", "--tls-dir", client_dir, "--server", address, "--json", "--count", "1")
            assert r.returncode == 0, r.stderr
            scored = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
            if scored and scored[0]["pipeline_version"] == "2026.12":
                break
            assert time.monotonic() < deadline, f"still {scored[0]['pipeline_version']} 60 s after SIGHUP"
            time.sleep(0.2)
        r = run(txscore, "score", "--tls-dir", client_dir, "--server", address, "--json")
        assert r.returncode == 0, r.stderr
        on_device = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
        reviews = [x for x in on_device if x.get("decision") == "REVIEW"]
        assert reviews and all(x.get("findings") for x in reviews), on_device[:3]
        r = run(txscore, "audit", "--last", str(len(on_device)), "--config", settings)
        assert r.returncode == 0, r.stderr
        placements = [json.loads(line)["placement"] for line in r.stdout.splitlines()]
        assert sum("forensic@emulated:0 (emulated)" in p for p in placements) == len(reviews), placements
        with open(pipeline, "w") as f:
            f.write(shipped.replace('version: "2026.11"', 'version: "2026.13"'))
        with open(settings, "w") as f:
            f.write(shipped_settings.replace("  workers: 8 ", "  workers: 9 "))
        server.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 60
        while True:  # /readyz names the last reload
            with urllib.request.urlopen(f"https://127.0.0.1:{ports['admin_port']}/readyz", context=admin_tls) as answer:
                last = json.load(answer).get("last_reload", {})
            if "workers" in last.get("detail", ""):
                assert last["applied"] is False and last["trigger"] == "SIGHUP", last
                break
            assert time.monotonic() < deadline, f"no refusal 60 s after SIGHUP: {last}"
            time.sleep(0.2)
        r = run(txscore, "score", "--tls-dir", client_dir, "--server", address, "--json", "--count", "1")
        assert r.returncode == 0 and '"pipeline_version": "2026.12"' in r.stdout.replace('":"', '": "'), r.stdout
        with open(pipeline, "w") as f:
            f.write(shipped)
        with open(settings, "w") as f:
            f.write(shipped_settings)

        def wait_for_job(job_id):
            deadline = time.monotonic() + 240
            while True:
                r = run(txscore, "job", "status", "--tls-dir", admin_dir, "--server", address, "--id", job_id)
                assert r.returncode == 0, r.stderr
                state = r.stdout.split()[2].rstrip(":")
                if state not in ("QUEUED", "RUNNING"):
                    return state, r.stdout
                assert time.monotonic() < deadline, f"job still {state} after 240 s: {r.stdout}"
                time.sleep(0.2)

        r = run(txscore, "job", "submit", "--tls-dir", admin_dir, "--server", address, "--input", "claims-small.jsonl")
        assert r.returncode == 0, r.stderr
        job_id = r.stdout.split()[1]
        state, status = wait_for_job(job_id)
        assert state == "DONE" and "40 of 40 rows, 0 errors" in status, status
        llm_line = [line for line in status.splitlines() if line.startswith("LLM findings for ")]
        assert len(llm_line) == 1 and llm_line[0].endswith(" claims it was asked to read"), status
        output = status.splitlines()[1].split(" ", 1)[1]
        with open(output) as f:
            first_run = [json.loads(line) for line in f]
        assert len(first_run) == 40
        # --restart: the same job, scored again from the start, to the same results.
        r = run(txscore, "job", "submit", "--tls-dir", admin_dir, "--server", address, "--input", "claims-small.jsonl", "--restart")
        assert r.returncode == 0 and r.stdout.split()[1] == job_id, r
        state, status = wait_for_job(job_id)
        assert state == "DONE" and "40 of 40 rows, 0 errors" in status, status
        with open(output) as f:
            second_run = [json.loads(line) for line in f]
        for line in first_run + second_run:
            line.pop("timings", None)
        assert second_run == first_run
        r = run(txscore, "job", "cancel", "--tls-dir", admin_dir, "--server", address, "--id", job_id)  # done: nothing to stop
        assert r.returncode == 0 and " DONE:" in r.stdout, r

        # The batch settings as shipped: the same claims in a process of its own (its own database).
        r = run(txscore, "batch", "run", "--config", os.path.join(config_dir, "batch.yaml"), "--input",
                os.path.join(var, "claims-small.jsonl"), "--output", os.path.join(work, "batch.jsonl"),
                "--log-format", "json", "--log-level", "debug")
        assert r.returncode == 0, r.stderr
        with open(os.path.join(var, "claims-small.jsonl")) as f:
            batch_log = check_json_log(r.stderr, {json.loads(line)["claimant_id"] for line in f}, "txscore batch run")
        assert "batch: chunk 0: scoring " in batch_log and "batch: 40 of 40 claims done" in batch_log, batch_log
        with open(os.path.join(work, "batch.jsonl")) as f:
            batch_run = [json.loads(line) for line in f]
        for line in batch_run:
            line.pop("timings", None)
        assert batch_run == first_run, (batch_run[:2], first_run[:2])

        # Inline claims over the server's 1 MiB frame limit: told so, and what to do instead.
        big = os.path.join(work, "big.jsonl")
        assert run(txscore, "data", "generate", "--kind", "claims", "--claims", "4000", "--out", big).returncode == 0
        r = run(txscore, "job", "submit", "--tls-dir", admin_dir, "--server", address, "--claims", big)
        assert r.returncode == 1, r
        assert "over the server's frame limit" in r.stderr and "--input NAME" in r.stderr, r.stderr

        # Operator actions are in the audit trail with who did them; a client that is no operator
        # is denied job control, and that attempt is recorded too.
        r = run(txscore, "job", "cancel", "--tls-dir", client_dir, "--server", address, "--id", job_id)
        assert r.returncode == 1 and "denied: txscore-client is not an operator" in r.stderr, r
        r = run(txscore, "audit", "--actions", "--last", "50", "--config", settings)
        assert r.returncode == 0, r.stderr
        actions = [json.loads(line) for line in r.stdout.splitlines()]
        assert actions[0]["action"] == "cancel_claims_job" and actions[0]["outcome"] == "denied", actions[0]
        assert actions[0]["caller"].startswith("txscore-client (127.0.0.1:"), actions[0]
        assert any(a["action"] == "submit_claims_job" and a["outcome"] == "applied" and
                   a["caller"].startswith("txscore-admin (127.0.0.1:") for a in actions), actions
        assert any(a["action"] == "reload" and a["outcome"] == "applied" and a["caller"] == "signal SIGHUP"
                   for a in actions), actions

        # The probes and metadata a platform reads (Open Inference Protocol v2), and /metrics as
        # Prometheus' own checker reads it.
        def get(path):
            try:
                with urllib.request.urlopen(f"https://127.0.0.1:{ports['admin_port']}{path}", context=admin_tls) as a:
                    return a.status, a.read().decode()
            except urllib.error.HTTPError as e:
                return e.code, e.read().decode()
        assert get("/v2/health/live") == (200, "") and get("/v2/health/ready") == (200, "")
        server_metadata = json.loads(get("/v2")[1])
        assert server_metadata["name"] == "txscore" and server_metadata["extensions"] == [], server_metadata
        fraud = json.loads(get("/v2/models/fraud")[1])
        assert fraud["platform"] == "xgboost" and fraud["outputs"][0] == {"name": "score", "datatype": "FP32",
                                                                           "shape": [-1]}, fraud
        assert get(f"/v2/models/fraud/versions/{fraud['versions'][0]}/ready") == (200, "")
        forensic = json.loads(get("/v2/models/forensic")[1])
        assert forensic["platform"] == "pytorch_libtorch" and forensic["parameters"]["model_id"] == "llm-tiny", forensic
        assert get("/v2/models/decision")[0] == 404  # a stage without a model
        status, metrics = get("/metrics")
        assert status == 200
        promtool = args.promtool
        assert os.access(promtool, os.X_OK), f"{promtool} is missing: scripts/setup.sh --tests extracts it"
        r = subprocess.run([promtool, "check", "metrics"], input=metrics, capture_output=True, text=True, timeout=60)
        # It parses (exit 1 is a format error), and its lint finds nothing but the colon in the
        # names vLLM gives its metrics (vLLM's own /metrics draws the same), kept so that
        # dashboards built for vLLM read them.
        problems = (r.stdout + r.stderr).splitlines()
        assert r.returncode in (0, 3), r.stdout + r.stderr
        assert all(re.fullmatch(r"vllm:\w+ metric names should not contain ':'", p) for p in problems), problems
        vllm_families = {line.split()[2] for line in metrics.splitlines() if line.startswith("# TYPE vllm:")}
        assert sorted(p.split()[0] for p in problems) == sorted(vllm_families), (problems, vllm_families)
        for series in ("txscore_build_info{", "process_cpu_seconds_total ", "process_resident_memory_bytes ",
                       'txscore_rocksdb_estimated_keys{column_family="audit"} ', 'txscore_claims_jobs{state="done"} 1\n',
                       "vllm:generation_tokens_total{"):
            assert series in metrics, series
        print("ok   /v2 probes and metadata; /metrics passes promtool check metrics")

        server.send_signal(signal.SIGTERM)
        _, log = server.communicate(timeout=60)
        assert server.returncode == 0, log
        # The whole run's log: JSON lines, no card number of the demo transactions, no claimant
        # id of the claims the jobs read (the inline ones the server refused included).
        claimant_ids = set()
        for claims in (os.path.join(var, "claims-small.jsonl"), big):
            with open(claims) as f:
                claimant_ids |= {json.loads(line)["claimant_id"] for line in f}
        err = check_json_log(log, claimant_ids, "txscore serve")
        assert "stopped cleanly" in err, err
        assert "reload (SIGHUP): applied: pipeline transactions version 2026.12" in err, err
        assert "reload (SIGHUP): refused, the running pipeline keeps serving: these settings change only " \
               "with a restart: server.workers: 8 -> 9" in err, err
        # The shipped rules stage was prepared with its list, and the decision reads its verdict.
        assert "stage rules (rules): 3 rules, 1 lists of 2 entries" in err, err
        server = None
        verified = check_audit_trail(txscore, settings, os.path.join(var, "db"), err, run_started)
        print(f"ok: {len(results)} scored ({len(reviews)} REVIEW with findings), audit read, plan shown, "
              f"job {job_id} DONE with 40 rows, stopped cleanly, audit trail of {verified} entries verified and "
              "tampering found")
    finally:
        if server is not None and server.poll() is None:
            server.kill()
            server.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
