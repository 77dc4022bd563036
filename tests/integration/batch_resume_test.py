#!/usr/bin/env python3
"""`txscore batch run` killed with SIGKILL at several points (as a chunk starts, in the middle
of an LLM batch, at a moment picked by the clock, while resuming) and started again with the
same command finishes with an output that holds every claim exactly once, in input order, and
equals an uninterrupted run line for line once the "timings" objects are set aside. A job whose
input changed refuses to resume.

Runs the real binary with a generated claims model and the tiny random LLM checkpoint."""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

from claims_batch_setup import lines_without_timings, make_claims_workdir, run
import time

CHUNK = 4  # rows per chunk (--chunk), and the LLM stage's max_batch: at most one LLM batch per chunk


class Job:
    def __init__(self, txscore, config, claims, output):
        self.cmd = [txscore, "batch", "run", "--config", config, "--input", claims, "--output", output,
                    "--chunk", str(CHUNK), "--log-level", "debug"]
        self.output = output

    def run_to_end(self):
        done = subprocess.run(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return done.returncode, done.stderr

    def kill_when(self, pattern, delay_s, timeout_s=120):
        """Starts the job, waits for `pattern` on stderr (a list: each in turn; None: just the
        delay), sleeps `delay_s`, then SIGKILLs it. Returns True if it was killed, False if it
        finished first."""
        proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + timeout_s
        patterns = [] if pattern is None else [pattern] if isinstance(pattern, str) else list(pattern)
        for line in proc.stderr if patterns else []:
            if patterns[0] in line:
                patterns.pop(0)
                if not patterns:
                    break
            if time.monotonic() > deadline:
                break
        time.sleep(delay_s)
        finished = proc.poll() is not None
        if not finished:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stderr.close()
        return not finished


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--txscore", required=True)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="txscore-batch-resume-")
    try:
        config, claims = make_claims_workdir(args.txscore, work, seed=3, chunk=CHUNK)

        reference = Job(args.txscore, config, claims, os.path.join(work, "reference.jsonl"))
        rc, err = reference.run_to_end()
        assert rc == 0, err
        expected = lines_without_timings(reference.output)
        assert len(expected) == 60, len(expected)
        llm_chunks = sorted({i // CHUNK for i, line in enumerate(expected) if json.loads(line)["findings"] is not None})
        assert len(llm_chunks) >= 3, f"too few chunks with LLM work to test: {llm_chunks}"

        job = Job(args.txscore, config, claims, os.path.join(work, "out.jsonl"))
        kills = 0
        # As a chunk starts (before its claims reach the model).
        kills += job.kill_when(f"chunk {llm_chunks[0]}: scoring", 0.0)
        # In the middle of an LLM batch: the chunk's claims are scored, the tiny model has begun
        # generating (killed as soon as it says so, rather than after a fixed delay that a fast
        # machine finishes the batch within).
        mid = llm_chunks[1]
        if job.kill_when([f"chunk {mid}: scoring", "generating findings for"], 0.0):
            kills += 1
            with open(job.output) as f:
                durable = sum(1 for _ in f)
            assert durable == mid * CHUNK, f"killed mid-batch of chunk {mid}, yet {durable} lines are durable"
        # While resuming, and at a moment picked by the clock.
        kills += job.kill_when("resuming job", 0.0)
        kills += job.kill_when(None, 0.8)
        rc, err = job.run_to_end()
        assert rc == 0, err
        assert kills >= 3, f"only {kills} of the kills landed before the job finished"

        got = lines_without_timings(job.output)
        ids = [json.loads(line)["claim_id"] for line in got]
        assert len(ids) == len(set(ids)) == 60, f"{len(ids)} lines, {len(set(ids))} distinct claims"
        for i, (a, b) in enumerate(zip(got, expected)):
            assert a == b, f"line {i + 1} differs from the uninterrupted run:\n{a}\n{b}"
        with open(job.output + ".summary.json") as f:
            summary = json.load(f)
        assert summary["done"] == 60 and summary["runs"] >= 2, summary

        # A job whose input changes under it refuses to go on.
        changed = Job(args.txscore, config, claims, os.path.join(work, "changed.jsonl"))
        assert changed.kill_when("chunk 1: scoring", 0.0)
        with open(claims, "a") as f:
            f.write("\n")
        rc, err = changed.run_to_end()
        assert rc == 1 and "has changed since job" in err, (rc, err)
        print(f"ok: {kills} kills, 60 claims exactly once, identical to the uninterrupted run; changed input refused")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
