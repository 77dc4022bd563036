#!/usr/bin/env python3
"""The dashboard of the demo configuration as shipped, in Debian's chromium: starts `txscore
serve`, keeps a load of demo transactions running from the client certificate, and runs
dashboard_browser_test.js (playwright-core) against the admin port over HTTPS with the admin
certificate. Also checks /api/dashboard directly: the card numbers the load sent appear nowhere
in it. The screenshot is left in the build folder (dashboard.png)."""
import argparse
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import urllib.request

from demo_setup import prepare_demo, start_server


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--txscore", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--node-modules", required=True)
    parser.add_argument("--screenshot", required=True)
    args = parser.parse_args()
    playwright = os.path.join(args.node_modules, "playwright-core")
    if not os.path.isdir(playwright):
        sys.exit(f"{playwright} is missing: scripts/test.sh installs it with npm")
    if not os.access("/usr/bin/chromium", os.X_OK):
        sys.exit("/usr/bin/chromium is missing: scripts/setup.sh --tests installs Debian's chromium")
    work = tempfile.mkdtemp(prefix="txscore-dashboard-")
    server = None
    stop_load = threading.Event()
    load = None
    try:
        demo = prepare_demo(args.source, args.txscore, work)
        server, ports = start_server(args.txscore, demo.settings)
        address = f"127.0.0.1:{ports['thrift_port']}"
        origin = f"https://127.0.0.1:{ports['admin_port']}"

        # Generated transactions, a file per seed, so that the card numbers sent are known
        # before the browser looks for them; the load sends the files in turn until stopped.
        files, card_numbers = [], set()
        for seed in range(100, 130):
            transactions = os.path.join(work, f"tx-{seed}.jsonl")
            r = subprocess.run([args.txscore, "data", "generate", "--kind", "transactions", "--format", "jsonl",
                                "--cards", "40", "--days", "2", "--seed", str(seed), "--out", transactions],
                               capture_output=True, text=True, timeout=300)
            assert r.returncode == 0, r.stderr
            with open(transactions) as f:
                card_numbers.update(json.loads(line)["card_number"] for line in f)
            files.append(transactions)
        card_numbers_file = os.path.join(work, "card-numbers.txt")
        with open(card_numbers_file, "w") as f:
            f.write("\n".join(sorted(card_numbers)) + "\n")

        def run_load():
            turn = 0
            while not stop_load.is_set():
                r = subprocess.run([args.txscore, "score", "--tls-dir", demo.client_dir, "--server", address,
                                    "--json", "--file", files[turn % len(files)]],
                                   capture_output=True, text=True, timeout=300)
                assert r.returncode == 0, r.stderr
                turn += 1

        load = threading.Thread(target=run_load, daemon=True)
        load.start()

        env = dict(os.environ, NODE_EXTRA_CA_CERTS=os.path.join(demo.pki, "ca.crt"))
        with open(demo.pipeline) as f:
            names = re.findall(r"^  - name: ([A-Za-z0-9_]+)", f.read(), re.M)
        assert names, "no stage names in the shipped pipeline.yaml"
        r = subprocess.run(["node", os.path.join(os.path.dirname(os.path.abspath(__file__)), "dashboard_browser_test.js"),
                            os.path.abspath(args.node_modules), origin, os.path.join(demo.pki, "ca.crt"),
                            os.path.join(demo.admin_dir, "tls.crt"), os.path.join(demo.admin_dir, "tls.key"),
                            ",".join(names), card_numbers_file, os.path.abspath(args.screenshot)],
                           capture_output=True, text=True, timeout=600, env=env)
        print(r.stdout, end="")
        assert r.returncode == 0, r.stdout + r.stderr

        admin_tls = ssl.create_default_context(cafile=os.path.join(demo.pki, "ca.crt"))
        admin_tls.load_cert_chain(os.path.join(demo.admin_dir, "tls.crt"), os.path.join(demo.admin_dir, "tls.key"))
        with urllib.request.urlopen(origin + "/api/dashboard", context=admin_tls) as answer:
            body = answer.read().decode()
        state = json.loads(body)
        assert state["recent_decisions"], "no recent decisions after the load"
        assert all(d["card_token"] for d in state["recent_decisions"]), state["recent_decisions"][0]
        leaked = [n for n in card_numbers if n in body]
        assert not leaked, f"card numbers in /api/dashboard: {leaked[:3]}"
        print(f"ok   /api/dashboard names cards by token only ({len(state['recent_decisions'])} recent decisions, "
              f"{len(card_numbers)} card numbers sent looked for)")
    finally:
        stop_load.set()
        if load is not None:
            load.join(timeout=300)
        if server is not None and server.poll() is None:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=120)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
