#!/usr/bin/env python3
"""Run 2-process DDP scripts many times on the CPU under torchrun and count teardown aborts.

    python tools/teardown_loop.py                                  # 50 runs of each script
    python tools/teardown_loop.py --runs 5 --scripts solution_ddp --out results/teardown_loop.json

A DDP script whose work is done could abort (SIGABRT, "terminate called without an active
exception") at Python's exit when its process group was still open there: Gloo's threads outlived
the interpreter. The scripts now close their group first (see the end of
source_code/handson/solution_ddp.py and fmnist_torch.py's main); this loop is how that is checked.
Each run goes through ddlab.measure.launch (torchrun, 2 processes, Gloo, a timeout, nothing left
behind) with tiny sizes. An abort is a run whose output has "terminate called" or whose ranks died
of SIGABRT; any other failure is counted apart, with its first line. The table: script, runs,
aborts, other failures, median seconds per run; --out writes every run's seconds and each failed
run's first lines as JSON (atomically). Exit status 1 when any run aborted or failed.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "source_code"))

from ddlab.base.files import write_json  # noqa: E402
from ddlab.base.tables import Table  # noqa: E402
from ddlab.measure import launch, rank_failures  # noqa: E402

# name -> (script, its tiny arguments): each a 2-process DDP run of a few seconds on the CPU.
SCRIPTS = {
    "solution_ddp": ("source_code/handson/solution_ddp.py",
                     ["--train-samples", "512", "--test-samples", "200", "--epochs", "2"]),
    "fmnist_torch": ("source_code/train/fmnist_torch.py",
                     ["--launcher", "ddp", "--device", "cpu", "--model", "mlp-small", "--batch-size", "16",
                      "--steps", "6", "--warmup-steps", "2", "--train-samples", "512", "--test-samples", "200"]),
}

_ABORT = re.compile(r"terminate called|SIGABRT|exitcode\s*:\s*-6\b|\(exitcode: -6\)")


def is_abort(res) -> bool:
    """A run that aborted: a C++ terminate, or a rank (or the launcher) ended by SIGABRT."""
    return bool(_ABORT.search(res.output or "")) or res.returncode == -6


def run_once(script: str, args: list, timeout: float) -> dict:
    """One 2-process torchrun launch; {"seconds", "status": ok|abort|failed, "first_lines"}."""
    env = {"OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "source_code")] + [p for p in [os.environ.get("PYTHONPATH")] if p])}
    t0 = time.monotonic()
    try:
        res = launch.run([str(ROOT / script), *args], launcher="torchrun", nproc=2, env=env, timeout=timeout,
                         check=False, python=sys.executable)
    except launch.LaunchTimeout as exc:
        return {"seconds": time.monotonic() - t0, "status": "failed",
                "first_lines": str(exc).splitlines()[:3]}
    seconds = time.monotonic() - t0
    if res.ok and not is_abort(res):
        return {"seconds": seconds, "status": "ok"}
    failure = rank_failures.first_failure(res)
    lines = rank_failures.describe(failure).splitlines() or [f"exit code {res.returncode}"]
    return {"seconds": seconds, "status": "abort" if is_abort(res) else "failed", "first_lines": lines,
            "tail": res.tail(15)}


def loop(name: str, runs: int, timeout: float, say=print) -> dict:
    script, args = SCRIPTS[name]
    done = []
    for i in range(runs):
        r = run_once(script, args, timeout)
        done.append(r)
        if r["status"] != "ok":
            say(f"{name} run {i + 1}: {r['status']}: {r['first_lines'][0]}")
    seconds = [r["seconds"] for r in done]
    return {"script": name, "path": script, "args": args, "runs": runs,
            "aborts": sum(r["status"] == "abort" for r in done),
            "failures": sum(r["status"] == "failed" for r in done),
            "median_s": statistics.median(seconds), "total_s": sum(seconds),
            "seconds": [round(s, 3) for s in seconds],
            "failed_runs": [dict(r, run=i + 1, seconds=round(r["seconds"], 3))
                            for i, r in enumerate(done) if r["status"] != "ok"]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=50, help="launches per script (default 50)")
    p.add_argument("--scripts", nargs="+", choices=sorted(SCRIPTS), default=list(SCRIPTS),
                   help="which scripts (default: all)")
    p.add_argument("--timeout", type=float, default=120, help="seconds one launch may take")
    p.add_argument("--out", help="write the runs as JSON here")
    a = p.parse_args(argv)
    if a.runs < 1:
        p.error("--runs must be at least 1")
    load_before = os.getloadavg()
    results = [loop(name, a.runs, a.timeout) for name in a.scripts]
    load_after = os.getloadavg()
    print(Table([("script", "text"), ("runs", "int"), ("aborts", "int"), ("failures", "int", "other failures"),
                 ("median_s", "time", "median")], results,
                title=f"2-process DDP on the CPU under torchrun: teardown aborts, {os.cpu_count()} CPU cores",
                notes=f"load average (1 min) {load_before[0]:.2f} before, {load_after[0]:.2f} after"))
    if a.out:
        from ddlab.system import provenance
        write_json(a.out, {"benchmark": "teardown loop", "results": results, "cpu_count": os.cpu_count(),
                           "loadavg_before": list(load_before), "loadavg_after": list(load_after),
                           "provenance": provenance.collect([sys.executable, *sys.argv])})
        print(f"wrote {a.out}")
    return 1 if any(r["aborts"] or r["failures"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
