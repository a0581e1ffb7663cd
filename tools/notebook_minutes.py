"""Estimate each notebook's minutes (reading, exercises, Run All) and set them beside the stated ones.

    python tools/notebook_minutes.py                       # reading and exercises only
    python tools/notebook_minutes.py --run                 # and Run All, timed here under nbval
    python tools/notebook_minutes.py --junit results.xml   # Run All from a pytest --junitxml of the notebooks
    python tools/notebook_minutes.py --timings nbval.json  # Run All from tools/recording/gpu_nbval.sh
    ... --out minutes.json                                  # the table as JSON too (written whole)

How each part is estimated: ddlab.course.minutes. Exit status 1 when a notebook's stated minutes do
not cover its estimate or lie outside 15-30.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "source_code"))

from ddlab.base import files, tables  # noqa: E402
from ddlab.course import minutes  # noqa: E402


def notebooks() -> list:
    """Start_Here, then the notebooks in the course's order (by their number: 9 before 10)."""
    found = glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb"))
    return [os.path.join(ROOT, "Start_Here.ipynb")] + sorted(found, key=lambda p: (int(os.path.basename(p).split(".")[0]), p))


def run_seconds(path: str, timeout: float) -> float:
    """Seconds a Run All takes here: the notebook under nbval (killed after ``timeout``)."""
    t0 = time.monotonic()
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax", "--nbval-current-env", path]
    try:
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise SystemExit(f"notebook_minutes: {os.path.basename(path)} ran past {timeout:.0f} s and was stopped")
    if done.returncode:
        tail = "\n".join(done.stdout.splitlines()[-5:])
        raise SystemExit(f"notebook_minutes: {os.path.basename(path)} failed under nbval:\n{tail}")
    return time.monotonic() - t0


def junit_seconds(path: str) -> dict:
    """Notebook file name -> summed time of its nbval cells in a pytest --junitxml report."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as exc:
        raise SystemExit(f"notebook_minutes: cannot read {path} as a JUnit XML report ({exc})")
    out: dict = {}
    stems = {os.path.splitext(os.path.basename(nb))[0]: os.path.basename(nb) for nb in notebooks()}
    for case in root.iter("testcase"):
        name = case.get("classname", "") + "/" + case.get("name", "")
        for stem, file in stems.items():
            if stem in name and "Cell" in name:
                out[file] = out.get(file, 0.0) + float(case.get("time") or 0)
    return out


def nbval_json_seconds(path: str) -> dict:
    """Notebook file name -> Run All seconds in gpu_nbval.sh's nbval.json, leaving out (and naming) each
    time taken of an earlier version of its notebook than the one here."""
    data = files.read_json(path, "gpu_nbval.sh timings")
    out = {}
    for k, v in data.items():
        if not (isinstance(v, dict) and "seconds" in v):
            continue
        nb = os.path.join(ROOT, k)
        if os.path.isfile(nb) and minutes.timing_is_current(nb, v) is False:
            print(f"notebook_minutes: {k}: its {v['seconds']} s were timed on an earlier version of the notebook; "
                  "left out", file=sys.stderr)
            continue
        out[os.path.basename(k)] = v["seconds"]
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    g = p.add_mutually_exclusive_group()
    g.add_argument("--run", action="store_true", help="time each notebook's Run All here under nbval")
    g.add_argument("--junit", help="a pytest --junitxml report that ran the notebooks under nbval")
    g.add_argument("--timings", help="nbval.json written by tools/recording/gpu_nbval.sh")
    p.add_argument("--timeout", type=float, default=1200, help="seconds per notebook with --run (default 1200)")
    p.add_argument("--machine", default="", help="where the Run All times come from, for the table's note")
    p.add_argument("--out", help="also write the rows as JSON to this file")
    a = p.parse_args(argv)
    seconds = (junit_seconds(a.junit) if a.junit else nbval_json_seconds(a.timings) if a.timings else {})
    rows = []
    for nb in notebooks():
        run_s = run_seconds(nb, a.timeout) if a.run else seconds.get(os.path.basename(nb))
        rows.append(minutes.estimate(nb, run_s))
    tables.show(minutes.table(rows, a.machine))
    if a.out:
        files.write_json(a.out, {"rows": rows, "machine": a.machine,
                                 "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    bad = [r["notebook"] for r in rows if r["fits"] != "yes" and r["notebook"] != "Start_Here.ipynb"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
