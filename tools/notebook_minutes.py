"""Estimate each notebook's minutes (reading, exercises, Run All) and set them beside the stated ones.

    python tools/notebook_minutes.py                       # reading and exercises only
    python tools/notebook_minutes.py --run                 # and Run All, timed here under nbval
    python tools/notebook_minutes.py --junit results.xml   # Run All from a pytest --junitxml of the notebooks
    python tools/notebook_minutes.py --timings nbval.json  # Run All from tools/recording/gpu_nbval.sh
    python tools/notebook_minutes.py --words               # and the word limits: each notebook run here on CPU
    python tools/notebook_minutes.py --words --printed words.json  # printed words from pytest --printed-words-json
    ... --notebooks notebooks/2.Latency-and-Bandwidth.ipynb # only these notebooks
    ... --out minutes.json                                  # the table as JSON too (written whole)

How each part is estimated: ddlab.course.minutes. --words also prints the word limits
(ddlab.course.minutes.WORD_LIMITS): each notebook's Markdown words and the words it prints when run on a
machine without a GPU (CUDA hidden; executed with nbclient, each cell within --timeout seconds, unless
--printed gives the counts of an nbval run), and the words of README.md, instructor/GUIDE.md and
tools/recording/README.md. The printed words are read at the same rate as the Markdown in the estimate.
Exit status 1 when a notebook's stated minutes do not cover its estimate or lie outside 15-30, or with
--words when anything is over its word limit or a notebook failed to run.
"""
import argparse
import glob
import json
import os
import re
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


def doc_words() -> list:
    """(path, words) of each document with a word limit."""
    out = []
    for rel in minutes.DOCUMENTS:
        with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
            out.append((rel, minutes.doc_words(f.read())))
    return out


def executed_printed_words(path: str, timeout: float):
    """Words the notebook prints when run here with CUDA hidden (a machine without a GPU), each cell
    within ``timeout`` seconds, in a kernel of this Python (as nbval --nbval-current-env starts); None,
    and a line saying why, when a cell fails or runs past ``timeout``."""
    import nbformat
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError
    from nbval.kernel import CURRENT_ENV_KERNEL_NAME, NbvalKernelspecManager
    nb = nbformat.read(path, as_version=4)
    km = KernelManager(kernel_spec_manager=NbvalKernelspecManager(), kernel_name=CURRENT_ENV_KERNEL_NAME)
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = ""          # the kernel inherits it: no GPU visible
    t0 = time.monotonic()
    try:
        NotebookClient(nb, km=km, timeout=timeout, allow_errors=False,
                       resources={"metadata": {"path": os.path.dirname(path)}}).execute()
    except (CellExecutionError, CellTimeoutError, DeadKernelError) as exc:
        last = re.sub(r"\x1b\[[0-9;]*m", "", (str(exc).strip().splitlines() or [""])[-1])
        print(f"notebook_minutes: {os.path.basename(path)} failed when run on CPU, its printed words not counted: "
              f"{last[:200]}", file=sys.stderr)
        return None
    finally:
        if km.has_kernel:                                # nbclient leaves a kernel it was given running
            km.shutdown_kernel(now=True)
        if hidden is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = hidden
    words = minutes.printed_words(nb)
    print(f"notebook_minutes: {os.path.basename(path)} ran on CPU in {time.monotonic() - t0:.0f} s and printed "
          f"{words:,} words", file=sys.stderr)
    return words


def counted_words(counted: dict, path: str):
    """A notebook's printed words from the JSON of pytest --printed-words-json (conftest.py): None,
    and a line saying why, when its cells were not all counted."""
    entry = counted.get(os.path.basename(path))
    if not isinstance(entry, dict):
        return None
    if entry.get("cells_counted") != entry.get("code_cells"):
        print(f"notebook_minutes: {os.path.basename(path)}: only {entry.get('cells_counted')} of its "
              f"{entry.get('code_cells')} cells were counted; printed words left out", file=sys.stderr)
        return None
    return entry.get("words")


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
    p.add_argument("--words", action="store_true",
                   help="also the word limits: Markdown, printed (each notebook run here on CPU) and the documents")
    p.add_argument("--printed", help="with --words: printed words per notebook from pytest --printed-words-json, "
                                     "instead of running the notebooks here")
    p.add_argument("--notebooks", nargs="+", help="only these notebooks (paths)")
    p.add_argument("--timeout", type=float, default=1200,
                   help="seconds per notebook with --run, per cell with --words (default 1200)")
    p.add_argument("--machine", default="", help="where the Run All times come from, for the table's note")
    p.add_argument("--out", help="also write the rows as JSON to this file")
    a = p.parse_args(argv)
    seconds = (junit_seconds(a.junit) if a.junit else nbval_json_seconds(a.timings) if a.timings else {})
    counted = files.read_json(a.printed, "printed words") if a.printed else {}
    rows, failed = [], []
    for nb in [os.path.abspath(p) for p in a.notebooks] if a.notebooks else notebooks():
        run_s = run_seconds(nb, a.timeout) if a.run else seconds.get(os.path.basename(nb))
        printed = None
        if a.words:
            printed = counted_words(counted, nb) if a.printed else executed_printed_words(nb, a.timeout)
            failed += [] if a.printed or printed is not None else [nb]
        rows.append(minutes.estimate(nb, run_s, printed))
    tables.show(minutes.table(rows, a.machine))
    docs = doc_words() if a.words else []
    words = minutes.word_table(rows, docs) if a.words else None
    if words is not None:
        tables.show(words)
    if a.out:
        files.write_json(a.out, {"rows": rows, "docs": dict(docs), "machine": a.machine,
                                 "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    bad = [r["notebook"] for r in rows if r["fits"] != "yes" and r["notebook"] != "Start_Here.ipynb"]
    over = [r for r in (words.rows if words is not None else []) if r["over"] == "yes"]
    for r in over:
        print(f"notebook_minutes: {r['what']}: {r['words']:,} {r['kind']} words, over its {r['limit']:,}", file=sys.stderr)
    return 1 if bad or over or failed else 0


if __name__ == "__main__":
    sys.exit(main())
