#!/usr/bin/env python3
"""A remote LLM stage between two txscore processes on loopback (pipelines/remote_llm.h).

The pool: the demo configuration as shipped, serving the OpenAI-compatible API on its HTTPS
admin port. The scorer: the same, except that its forensic stage has `placement: remote`,
pointing at the pool's /v1 with the demo admin certificate, falling back to its own checkpoint
on the CPU. Then:
  1. the scorer's REVIEW decisions get findings written by the pool (audit placement: remote);
  2. the pool is killed while a load runs: every request is still answered, the circuit
     opens (metrics), and findings keep coming from the fallback (placement: cpu);
  3. the pool comes back on the same port: after the open interval a trial call closes the
     circuit, and findings come from the pool again.
  4. the pool hangs (SIGSTOP): calls time out, every request is answered, the circuit opens
     after breaker_failures timeouts and the CPU serves.
Needs scripts/setup.sh to have made var/ (the demo key, models and LLM checkpoint)."""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(txscore, *args, timeout=600):
    return subprocess.run([txscore, *args], capture_output=True, text=True, timeout=timeout)


class Server:
    def __init__(self, txscore, settings, log):
        self.log = log
        with open(log, "a") as stderr:  # a file: a pipe nobody reads would stop the server when full
            self.process = subprocess.Popen([txscore, "serve", "--config", settings, "--log-format", "text"],
                                            stdout=subprocess.PIPE, stderr=stderr, text=True)
        first = self.process.stdout.readline()
        assert first.startswith("listening thrift_port="), (first, open(log).read()[-3000:])
        self.ports = dict(part.split("=") for part in first.split()[1:])

    def kill(self):
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=60)

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.process.kill()


def metric(admin_tls, port, name):
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=admin_tls) as answer:
        text = answer.read().decode()
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name)]
    assert values, f"{name} is not in /metrics"
    return sum(values)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--txscore", required=True)
    parser.add_argument("--source", required=True)
    args = parser.parse_args()
    txscore = args.txscore
    repo_var = os.path.join(os.path.abspath(args.source), "var")
    for needed in ("keyset.json", "models/fraud.ubj", "models/llm-tiny/config.json"):
        if not os.path.exists(os.path.join(repo_var, needed)):
            sys.exit(f"missing var/{needed}: run ./scripts/setup.sh first")
    library = os.path.join(os.path.dirname(os.path.abspath(txscore)), "libtxscore_emulated_device.so")
    work = tempfile.mkdtemp(prefix="txscore-remote-")
    servers = []
    try:
        var = os.path.join(work, "var")
        os.makedirs(var)
        os.symlink(os.path.join(repo_var, "models"), os.path.join(var, "models"))
        shutil.copy(os.path.join(repo_var, "keyset.json"), os.path.join(var, "keyset.json"))
        os.chmod(os.path.join(var, "keyset.json"), 0o600)
        pki = os.path.join(var, "pki")
        r = subprocess.run([os.path.join(args.source, "scripts", "make-demo-pki.sh"), pki], capture_output=True,
                           text=True)
        assert r.returncode == 0, r.stderr
        admin_dir, client_dir = os.path.join(pki, "admin"), os.path.join(pki, "client")
        admin_tls = ssl.create_default_context(cafile=os.path.join(pki, "ca.crt"))
        admin_tls.load_cert_chain(os.path.join(admin_dir, "tls.crt"), os.path.join(admin_dir, "tls.key"))

        with open(os.path.join(args.source, "config", "txscore.yaml")) as f:
            shipped_settings = f.read()
        with open(os.path.join(args.source, "config", "pipeline.yaml")) as f:
            shipped_pipeline = f.read()
        pool_admin = free_port()
        configs = {}
        for role in ("pool", "scorer"):
            config_dir = os.path.join(work, role)
            os.makedirs(config_dir)
            shutil.copytree(os.path.join(args.source, "config", "lists"), os.path.join(config_dir, "lists"))
            settings = (shipped_settings.replace("  port: 9090\n", "  port: 0\n")
                        .replace("  port: 9091\n", f"  port: {pool_admin if role == 'pool' else 0}\n")
                        .replace("path: ../var/db", f"path: ../var/db-{role}")
                        .replace("../build/libtxscore_emulated_device.so", library))
            assert f"path: ../var/db-{role}" in settings
            pipeline = shipped_pipeline
            if role == "scorer":
                # Every decision is REVIEW, so every request runs the forensic stage.
                assert "review_threshold: 0.5" in pipeline and "decline_threshold: 0.9" in pipeline
                pipeline = pipeline.replace("review_threshold: 0.5", "review_threshold: 0.0").replace(
                    "decline_threshold: 0.9", "decline_threshold: 1.0")
                # Budgets for a slow, loaded machine (an AddressSanitizer build beside a browser
                # test missed the shipped 1.5 s): 8 s for the stage (under the client's 10 s reply
                # timeout), 3 s for a call; what is asserted is which device wrote the findings.
                assert "    budget_ms: 1500 " in pipeline
                pipeline = pipeline.replace("    budget_ms: 1500 ", "    budget_ms: 8000 ")
                # The forensic stage hands its work to the pool; its own checkpoint is the fallback.
                assert "    placement: cpu             # auto" in pipeline
                pipeline = pipeline.replace("    placement: cpu             # auto", (
                    "    placement: remote\n"
                    "    remote:\n"
                    f"      base_url: https://127.0.0.1:{pool_admin}/v1\n"
                    "      model: llm-tiny\n"
                    "      call_timeout_ms: 3000\n"
                    "      retries: 1\n"
                    "      backoff_ms: 20\n"
                    "      breaker_failures: 3\n"
                    "      breaker_open_ms: 3000\n"
                    "      fallback: cpu\n"
                    "      tls: {ca: ../var/pki/ca.crt, certificate: ../var/pki/admin/tls.crt, "
                    "private_key: ../var/pki/admin/tls.key}\n"
                    "    # was: placement: cpu # auto"))
            with open(os.path.join(config_dir, "txscore.yaml"), "w") as f:
                f.write(settings)
            shutil.copy(os.path.join(args.source, "config", "claims.yaml"), os.path.join(config_dir, "claims.yaml"))
            with open(os.path.join(config_dir, "pipeline.yaml"), "w") as f:
                f.write(pipeline)
            configs[role] = os.path.join(config_dir, "txscore.yaml")

        pool = Server(txscore, configs["pool"], os.path.join(work, "pool.log"))
        servers.append(pool)
        scorer = Server(txscore, configs["scorer"], os.path.join(work, "scorer.log"))
        servers.append(scorer)
        address = f"127.0.0.1:{scorer.ports['thrift_port']}"
        scorer_admin = scorer.ports["admin_port"]
        remote_name = f"remote:https://127.0.0.1:{pool_admin}/v1 (llm-tiny)"

        def score(count):
            r = run(txscore, "score", "--tls-dir", client_dir, "--server", address, "--json", "--count", str(count))
            assert r.returncode == 0, r.stderr
            results = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
            assert len(results) == count and all("decision" in x for x in results), r.stdout[-2000:]
            return results

        def placements(n):
            r = run(txscore, "audit", "--last", str(n), "--config", configs["scorer"])
            assert r.returncode == 0, r.stderr
            return [json.loads(line) for line in r.stdout.splitlines()]

        # 1. The pool writes the findings.
        results = score(66)
        reviews = [x for x in results if x["decision"] == "REVIEW"]
        assert reviews and all(x.get("findings") for x in reviews), results[:3]
        audited = [a for a in placements(66) if "forensic@" in a["placement"]]
        assert audited and all(f"forensic@{remote_name}" in a["placement"] for a in audited), audited[:3]
        assert metric(admin_tls, scorer_admin, "txscore_remote_llm_circuit_open{") == 0
        calls_before = metric(admin_tls, scorer_admin, 'txscore_remote_llm_calls_total{stage="forensic",outcome="ok"}')
        assert calls_before >= len(reviews), calls_before
        print(f"ok   {len(reviews)} REVIEW decisions, findings from the pool ({int(calls_before)} calls)")

        # 2. The pool dies under load: nothing fails, the circuit opens, the fallback serves.
        # The load: three runs of the demo transactions (other seeds) back to back.
        load = subprocess.Popen(["sh", "-c", " && ".join(
            f"{txscore} score --tls-dir {client_dir} --server {address} --json --seed {seed}" for seed in (2, 3, 4))],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ok_calls = 'txscore_remote_llm_calls_total{stage="forensic",outcome="ok"}'
        deadline = time.monotonic() + 120
        while metric(admin_tls, scorer_admin, ok_calls) < calls_before + 10:  # the pool is answering the load
            assert time.monotonic() < deadline and load.poll() is None, "the load did not reach the pool"
            time.sleep(0.05)
        pool.kill()
        out, err = load.communicate(timeout=600)
        assert load.returncode == 0, err
        loaded = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        # Every transaction sent has its answer (a request that failed would be an error line).
        assert len(loaded) >= 150 and all("decision" in x and "error" not in x for x in loaded), out[-2000:]
        reviews = [x for x in loaded if x["decision"] == "REVIEW"]
        assert reviews and all(x.get("findings") for x in reviews), [x for x in reviews if not x.get("findings")][:2]
        # Mid-load: the first findings of the load came from the pool, the rest from the CPU.
        during = [a["placement"] for a in placements(len(loaded)) if "forensic@" in a["placement"]]
        from_pool = sum(f"forensic@{remote_name}" in p for p in during)
        from_cpu = sum("forensic@cpu" in p for p in during)
        assert from_pool > 0 and from_cpu > 0 and from_pool + from_cpu == len(during), (from_pool, from_cpu, during[:3])
        assert metric(admin_tls, scorer_admin, "txscore_remote_llm_circuit_opened_total{") >= 1
        assert metric(admin_tls, scorer_admin, "txscore_remote_llm_circuit_open{") == 1
        results = score(66)
        reviews = [x for x in results if x["decision"] == "REVIEW"]
        assert reviews and all(x.get("findings") for x in reviews), results[:3]
        audited = [a for a in placements(66) if "forensic@" in a["placement"]]
        assert audited and all("forensic@cpu" in a["placement"] for a in audited), audited[:3]
        print(f"ok   the pool killed under load: {len(loaded)} answered with findings ({from_pool} from the pool, "
              f"{from_cpu} from the CPU after), circuit open; then {len(reviews)} more from the CPU")

        # 3. The pool comes back: after the open interval one trial call closes the circuit.
        pool = Server(txscore, configs["pool"], os.path.join(work, "pool.log"))
        servers.append(pool)
        assert int(pool.ports["admin_port"]) == pool_admin
        time.sleep(3.5)
        deadline = time.monotonic() + 120
        while metric(admin_tls, scorer_admin, "txscore_remote_llm_circuit_open{") != 0:
            score(5)
            assert time.monotonic() < deadline, "the circuit did not close within 120 s of the pool's return"
        results = score(66)
        reviews = [x for x in results if x["decision"] == "REVIEW"]
        audited = [a for a in placements(66) if "forensic@" in a["placement"]]
        assert reviews and all(x.get("findings") for x in reviews)
        assert audited and all(f"forensic@{remote_name}" in a["placement"] for a in audited), audited[:3]
        print(f"ok   the pool is back: circuit closed, {len(reviews)} findings from the pool again")

        # 4. The pool hangs (SIGSTOP: connections are accepted by the kernel, nothing answers).
        # Calls time out; every request is still answered; after breaker_failures timeouts the
        # circuit opens and the CPU writes the findings at once. Only the REVIEWs whose budget
        # the timeouts used up before that go without findings (reported cut short).
        opened_before = metric(admin_tls, scorer_admin, "txscore_remote_llm_circuit_opened_total{")
        timeouts_before = metric(admin_tls, scorer_admin,
                                 'txscore_remote_llm_calls_total{stage="forensic",outcome="failed"}')
        pool.process.send_signal(signal.SIGSTOP)
        try:
            results = score(66)
            reviews = [x for x in results if x["decision"] == "REVIEW"]
            without = [x for x in reviews if not x.get("findings")]
            assert metric(admin_tls, scorer_admin, "txscore_remote_llm_circuit_open{") == 1
            opened = metric(admin_tls, scorer_admin, "txscore_remote_llm_circuit_opened_total{") - opened_before
            failed = metric(admin_tls, scorer_admin,
                            'txscore_remote_llm_calls_total{stage="forensic",outcome="failed"}') - timeouts_before
            # breaker_failures (3) timeouts open it; after that only the trial call of each open
            # interval (3 s) goes to the hung pool, and its failure opens the circuit again.
            assert opened >= 1 and failed == 3 + (opened - 1), (opened, failed)
            assert len(without) <= failed, (len(without), failed)  # each spent its budget on a timeout
            audited = [a for a in placements(66) if "forensic@" in a["placement"]]
            # Newest first: all but the first three (at most) came from the CPU.
            assert all("forensic@cpu" in a["placement"] for a in audited[:-3]), audited[:3]
            print(f"ok   the pool hung: {len(results)} answered, {len(reviews) - len(without)} of {len(reviews)} "
                  f"REVIEWs with findings (the others' budget went to {int(failed)} timed-out calls), circuit open")
        finally:
            pool.process.send_signal(signal.SIGCONT)
    except BaseException:
        for role in ("pool", "scorer"):
            log = os.path.join(work, role + ".log")
            if os.path.exists(log):
                print(f"--- {role} log (end) ---\n" + open(log).read()[-4000:])
        raise
    finally:
        for server in servers:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
