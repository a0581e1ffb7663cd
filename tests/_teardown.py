"""Shared by the teardown tests: launch a script with 2 Gloo processes through
tests/fixtures/teardown/threads_after.py and read which threads each rank still had once the
script was done (after its destroy_process_group, before Python's exit)."""
import json
import os
import re
import sys

from ddlab.measure import launch

RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "teardown", "threads_after.py")
SOURCE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "source_code")


def launch_and_read_threads(script: str, *args: str, timeout: float = 240.0) -> tuple:
    """({rank: [thread names]}, the launch's output) after ``script args...`` ran as 2 torchrun
    processes on CPU."""
    env = {"OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": os.pathsep.join([SOURCE_DIR] + [p for p in [os.environ.get("PYTHONPATH")] if p])}
    res = launch.run([RUNNER, script, *args], launcher="torchrun", nproc=2, env=env, timeout=timeout,
                     check=True, python=sys.executable)
    found = {}
    # The two ranks share one output stream: their lines may run together, so match the objects.
    for text in re.findall(r"THREADS_AFTER (\{[^{}]*\})", res.output):
        row = json.loads(text)
        found[row["rank"]] = row["threads"]
    assert sorted(found) == [0, 1], res.tail()
    return found, res.output


def threads_left(script: str, *args: str, timeout: float = 240.0) -> dict:
    """{rank: [thread names]} after ``script args...`` ran as 2 torchrun processes on CPU."""
    return launch_and_read_threads(script, *args, timeout=timeout)[0]


def gloo_threads(found: dict) -> dict:
    """The Gloo threads still running, per rank (empty lists: the group was really closed)."""
    return {rank: [t for t in names if "gloo" in t] for rank, names in found.items()}
