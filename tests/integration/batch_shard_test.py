#!/usr/bin/env python3
"""`txscore batch run --shard I/N` and `txscore batch merge`: a claims file split across three
round-robin shards run side by side (one of them SIGKILLed and started again, resuming), and
across two contiguous shards, merges into the output one unsharded run writes, line for line
once the "timings" objects are set aside, with the summary's counts added up. Merge refuses,
writing nothing, a missing shard, a shard given twice, shards of different splits or inputs,
and a shard that is not done; --shard refuses a shard that does not exist. Everything it writes
is for its owner alone, whatever the umask.

Runs the real binary with a generated claims model and the tiny random LLM checkpoint."""
import argparse
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile

from claims_batch_setup import lines_without_timings, make_claims_workdir, run

CHUNK = 4


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--txscore", required=True)
    args = parser.parse_args()
    txscore = args.txscore
    os.umask(0o022)  # a usual umask: files 0644 unless txscore sets its own
    work = tempfile.mkdtemp(prefix="txscore-batch-shard-")
    try:
        config, claims = make_claims_workdir(txscore, work, seed=5, chunk=CHUNK)
        with open(claims) as f:
            rows = f.readlines()
        rows.insert(9, '{"claim_id": "broken"\n')  # an error line, row 9 (line 10)
        with open(claims, "w") as f:
            f.writelines(rows)

        def batch(*extra, output, quiet=True):
            return [txscore, "batch", "run", "--config", config, "--input", claims, "--output", output,
                    "--chunk", str(CHUNK), "--max-error-share", "0.5", *(["--quiet"] if quiet else []), *extra]

        def merge(output, *shard_outputs):
            return subprocess.run([txscore, "batch", "merge", "--output", output, *shard_outputs],
                                  capture_output=True, text=True, timeout=120)

        reference = os.path.join(work, "reference.jsonl")
        r = subprocess.run(batch(output=reference), capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        expected = lines_without_timings(reference)
        assert len(expected) == 61, len(expected)
        with open(reference + ".summary.json") as f:
            reference_summary = json.load(f)

        # Three round-robin shards side by side; shard 1 is killed once it has begun, then run again.
        shard_out = [os.path.join(work, f"rr-{i}.jsonl") for i in range(3)]
        procs = [subprocess.Popen(batch("--shard", f"{i}/3", "--log-level", "debug", output=shard_out[i], quiet=False),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for i in range(3)]
        killed = False
        for line in procs[1].stderr:
            if "chunk 1: scoring" in line:
                os.kill(procs[1].pid, signal.SIGKILL)
                killed = True
                break
        for p in procs:
            p.wait(timeout=600)
            p.stderr.close()
        assert killed, "shard 1 finished before it could be killed"
        assert procs[0].returncode == 0 and procs[2].returncode == 0, [p.returncode for p in procs]
        # Not done: merge refuses and writes nothing.
        merged = os.path.join(work, "merged.jsonl")
        r = merge(merged, *shard_out)
        assert r.returncode == 2 and "is not done" in r.stderr and not os.path.exists(merged), (r.returncode, r.stderr)
        r = subprocess.run(batch("--shard", "1/3", output=shard_out[1]), capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        with open(shard_out[1] + ".summary.json") as f:
            shard_summary = json.load(f)
        assert shard_summary["shard"] == "1/3" and shard_summary["runs"] == 2, shard_summary
        assert shard_summary["total"] == 20, shard_summary  # rows 1, 4, ..., 58 of 61
        # Each shard's progress lives in a database of its own beside the configured one.
        assert all(os.path.isdir(os.path.join(work, f"db-shard-{i}-of-3")) for i in range(3)), os.listdir(work)
        # Run again, a shard that is done scores nothing.
        r = subprocess.run(batch("--shard", "2/3", output=shard_out[2]), capture_output=True, text=True, timeout=600)
        assert r.returncode == 0 and "was already done" in r.stdout, r.stdout

        r = merge(merged, shard_out[2], shard_out[0], shard_out[1])  # any order
        assert r.returncode == 0, r.stderr
        assert "merged 3 shards: 61 lines (1 errors)" in r.stdout, r.stdout
        got = lines_without_timings(merged)
        for i, (a, b) in enumerate(zip(got, expected)):
            assert a == b, f"merged line {i + 1} differs from the unsharded run:\n{a}\n{b}"
        assert len(got) == len(expected)
        with open(merged + ".summary.json") as f:
            merged_summary = json.load(f)
        assert len(reference_summary["pipeline_digests"]) == 1, reference_summary
        assert reference_summary["pipeline_digests"][0].startswith("sha256:"), reference_summary
        for key in ("total", "done", "errors", "llm_selected", "analysed", "decisions", "llm_shortfalls", "input",
                    "input_sha256", "pipeline_digests"):
            assert merged_summary[key] == reference_summary[key], (key, merged_summary[key], reference_summary[key])
        assert [m["shard"] for m in merged_summary["merged_from"]] == ["0/3", "1/3", "2/3"], merged_summary
        # Started with umask 022 (below), txscore still writes its outputs, summaries, merged file
        # and state databases for its owner alone: they hold claimant tokens and findings.
        written = [os.path.join(work, name) for name in os.listdir(work)
                   if name.startswith(("reference.jsonl", "rr-", "merged.jsonl", "db-"))]
        checked = 0
        for top in written:
            for path in [top] + [os.path.join(d, n) for d, ds, fs in os.walk(top) for n in ds + fs]:
                mode = stat.S_IMODE(os.lstat(path).st_mode)
                assert mode & 0o077 == 0, f"{path} has mode {mode:o}"
                checked += 1
        assert checked > 20, written  # outputs, summaries and each shard's RocksDB files

        # Two contiguous shards: the first and second half.
        halves = [os.path.join(work, f"half-{i}.jsonl") for i in range(2)]
        for i in range(2):
            r = subprocess.run(batch("--shard", f"{i}/2:contiguous", output=halves[i]), capture_output=True,
                               text=True, timeout=600)
            assert r.returncode == 0, r.stderr
        assert len(lines_without_timings(halves[0])) == 30 and len(lines_without_timings(halves[1])) == 31
        merged_halves = os.path.join(work, "halves.jsonl")
        r = merge(merged_halves, *halves)
        assert r.returncode == 0, r.stderr
        assert lines_without_timings(merged_halves) == expected

        # An existing output is replaced only with --force: without it, nothing is touched.
        before = (open(merged, "rb").read(), open(merged + ".summary.json", "rb").read())
        r = merge(merged, *halves)
        assert r.returncode == 1 and f"{merged} exists: merge into a new file, or give --force" in r.stderr, r.stderr
        assert (open(merged, "rb").read(), open(merged + ".summary.json", "rb").read()) == before
        os.remove(merged)  # the summary alone left behind is refused too
        r = merge(merged, *halves)
        assert r.returncode == 1 and f"{merged}.summary.json exists" in r.stderr, r.stderr
        assert not os.path.exists(merged)
        r = merge(merged, *halves, "--force")
        assert r.returncode == 0, r.stderr
        assert lines_without_timings(merged) == expected
        with open(merged + ".summary.json") as f:
            assert [m["shard"] for m in json.load(f)["merged_from"]] == ["0/2:contiguous", "1/2:contiguous"]

        # Refusals, each writing nothing.
        refused = os.path.join(work, "refused.jsonl")
        for outputs, message in (([shard_out[0], shard_out[1]], "shard 2/3 is missing"),
                                 ([shard_out[0], shard_out[0], shard_out[1]], "is given twice"),
                                 ([shard_out[0], shard_out[1], halves[1]], "not the same split"),
                                 ([reference], "is not the output of a shard")):
            r = merge(refused, *outputs)
            assert r.returncode == 2 and message in r.stderr, (outputs, r.stderr)
            assert not os.path.exists(refused) and not os.path.exists(refused + ".summary.json")
        r = subprocess.run(batch("--shard", "3/3", output=os.path.join(work, "x.jsonl")), capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 2 and "--shard takes I/N with 0 <= I < N" in r.stderr, r.stderr
        print("ok: 3 round-robin shards (one killed and resumed) and 2 contiguous shards merge into the unsharded "
              "output, line for line; merge refusals write nothing")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
