#!/usr/bin/env python3
"""Time `ddlab doctor` (a fresh Python each run, as a user types it) and print a table;
writes the runs as JSON with their provenance. A benchmark, not a test: nothing is asserted.

    python tools/bench_doctor.py                    # 5 runs of `ddlab doctor`
    python tools/bench_doctor.py --runs 10 --check-build --json results/bench_doctor.json

--check-build also times `ddlab doctor --check-build` (Horovod's own report, which imports
every framework) for comparison. The machine's load changes the numbers: the JSON records
the load average before and after.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "source_code"))

from ddlab.system import provenance  # noqa: E402
from ddlab.base import files  # noqa: E402
from ddlab.base.tables import Table  # noqa: E402


def time_command(argv: list, runs: int, timeout: float) -> list:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        dt = time.perf_counter() - t0
        if out.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} exited {out.returncode}: {out.stderr.strip()[-500:]}")
        times.append(dt)
    return times


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--check-build", action="store_true", help="also time `ddlab doctor --check-build`")
    p.add_argument("--json", default="results/bench_doctor.json", help="where to write the runs")
    p.add_argument("--timeout", type=float, default=600, help="seconds one run may take")
    a = p.parse_args(argv)
    if a.runs < 1:
        p.error("--runs must be at least 1")
    variants = [("ddlab doctor", [])] + ([("ddlab doctor --check-build", ["--check-build"])] if a.check_build else [])
    load_before = os.getloadavg()
    results = []
    for name, extra in variants:
        times = time_command([sys.executable, "-m", "ddlab", "doctor", *extra], a.runs, a.timeout)
        results.append({"command": name, "runs": a.runs, "seconds": [round(t, 4) for t in times],
                        "min_s": min(times), "median_s": statistics.median(times), "max_s": max(times)})
    load_after = os.getloadavg()
    table = Table([("command", "text"), ("runs", "int"), ("min_s", "time", "min"),
                   ("median_s", "time", "median"), ("max_s", "time", "max")], results,
                  title=f"ddlab doctor, wall time per run (fresh Python each), {os.cpu_count()} CPU cores",
                  notes=f"load average (1 min) {load_before[0]:.2f} before, {load_after[0]:.2f} after")
    print(table)
    record = {"benchmark": "ddlab doctor", "results": results, "cpu_count": os.cpu_count(),
              "loadavg_before": load_before, "loadavg_after": load_after,
              "provenance": provenance.collect([sys.executable, *sys.argv])}
    files.write_json(a.json, record, what="benchmark record")
    print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
