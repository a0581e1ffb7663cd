"""Training and hands-on runs kept so that the same launch, made again in the same checkout, can be
shown again.

The browser test (``make browser-test``) runs every notebook in JupyterLab to check what a learner
sees: errors, tables, widgets. The notebooks' CPU experiments take most of its time, and ``make
test`` has just made the very same launches under nbval. With ``DDLAB_KEPT_RUNS=DIR`` set, every
training run a notebook's kernel starts through :func:`ddlab.training.runs.train`, and every
hands-on script started through :func:`ddlab.course.handson.run`, is kept in ``DIR`` when it
finishes; with ``DDLAB_REUSE_KEPT_RUNS=1`` as well, a notebook's launch that is the same as a kept
one is answered with that run's result instead of running again, and its progress line says so. The
first launch of each kernel always runs, so the browser test still starts a real training run from
JupyterLab's own kernel in every notebook that trains.

"The same" is strict: the same launcher and number of processes, the same script arguments, the same
environment given to the workers, the same interpreter and the same code (every ``.py`` file of
``ddlab``, of the training scripts and of the hands-on scripts, by content). Each kept run is
answered once per process, in the order the runs were kept, so an experiment's repeats stay distinct
runs; when none is left the launch runs. Only launches made inside a Jupyter kernel are kept or
reused, never a unit test's. A kept training result is the run's own JSON, its date and provenance
included; a kept hands-on run is its output and seconds.
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
import time
import uuid
from typing import Mapping, Optional

from ddlab.base import files
from ddlab.base.progress import in_notebook

KEEP_ENV = "DDLAB_KEPT_RUNS"
REUSE_ENV = "DDLAB_REUSE_KEPT_RUNS"
_SOURCES = ("ddlab", "train", "handson")
_code_hash: Optional[str] = None
_taken: set = set()
_one_ran = False          # a launch of this process has run (keep() was called)


def _folder() -> Optional[str]:
    """``DDLAB_KEPT_RUNS`` where it is set and this process is a Jupyter kernel, else None."""
    folder = os.environ.get(KEEP_ENV, "")
    return folder if folder and in_notebook() else None


def source_hash(root: str) -> str:
    """SHA-256 over the names and content of every ``.py`` file of ``ddlab``, ``train`` and ``handson``
    under ``root``."""
    h = hashlib.sha256()
    for top in _SOURCES:
        for path in sorted(glob.glob(os.path.join(root, top, "**", "*.py"), recursive=True)):
            h.update(os.path.relpath(path, root).encode())
            h.update(bytes.fromhex(file_digest(path)))
    return h.hexdigest()


def file_digest(path: str) -> str:
    """SHA-256 of one file's content."""
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def code_hash() -> str:
    """:func:`source_hash` of this checkout's ``source_code``, once per process."""
    global _code_hash
    if _code_hash is None:
        _code_hash = source_hash(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    return _code_hash


def launch_key(argv, launcher: str, nproc: int, env: Mapping, python: str) -> Optional[str]:
    """The key of one launch: everything that makes two launches the same run; None where no run is
    kept here (then :func:`take` and :func:`keep` do nothing, and the code is never hashed)."""
    if _folder() is None:
        return None
    what = {"argv": [str(a) for a in argv], "launcher": launcher, "nproc": int(nproc),
            "env": {k: (None if v is None else str(v)) for k, v in sorted(env.items())},
            "python": python, "code": code_hash()}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:32]


def take(key: Optional[str]) -> Optional[dict]:
    """A kept result of this launch not yet answered in this process, when reuse is on and a launch of
    this process has already run; else None."""
    folder = _folder()
    if key is None or folder is None or os.environ.get(REUSE_ENV, "") != "1" or not _one_ran:
        return None
    for path in sorted(glob.glob(os.path.join(folder, key, "*.json"))):
        if path not in _taken:
            _taken.add(path)
            result = files.read_json(path, "kept training run")
            result.setdefault("notes", []).append(
                f"this run's result was kept from the same launch made earlier in this checkout "
                f"({REUSE_ENV}=1; {os.path.basename(path)})")
            return result
    return None


def keep(key: Optional[str], result: dict) -> None:
    """Keep a finished run's result under its key, when ``DDLAB_KEPT_RUNS`` is set in a kernel."""
    global _one_ran
    folder = _folder()
    if key is None or folder is None:
        return
    _one_ran = True
    name = f"{time.time_ns()}-{os.getpid()}-{uuid.uuid4().hex[:6]}.json"    # sorts in the order kept
    files.write_json(os.path.join(folder, key, name), result, allow_nan=True, what="kept training run")
