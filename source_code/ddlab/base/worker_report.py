"""How a worker process reports to the process that started it: JSON lines, one object a line,
the same shape from every worker of the course::

    {"ddlab": "report/1", "rank": 1, "kind": "smoke", "check": "ddp-step", "ok": true}

``ddlab`` names the format and its version, ``rank`` the worker (0 for a single process),
``kind`` what the report is about; the other keys are its payload. A worker calls
:func:`emit`; its parent reads the launch's output with :func:`parse`, which picks the report
lines out of everything else there (the launcher's lines, NCCL's log, progress lines, a
traceback). A launcher's prefix before the object (horovodrun's ``[1,0]<stdout>:``, torchrun's
``[rank1]:``) is allowed: the object starts at ``{"ddlab":`` wherever that is in the line.

:func:`emit` writes each line with one ``write()`` to the file descriptor: all ranks share the
launcher's pipe, and a write of up to ``PIPE_BUF`` bytes (4096 on Linux) to a pipe is never mixed
with another's, so two ranks' reports never end up glued into one line. Reports are small
records; a large result (a sweep's rows, a training run's every step time) goes to a file the
parent names, written whole by :mod:`ddlab.base.files`.

Workers: ``ddlab.measure.smoke`` (kind ``smoke``), ``ddlab.measure.collectives_worker``
(``validation_error``), ``source_code/train/fmnist_torch.py`` through
``ddlab.training.cuda_graph_torch`` (``cuda_graph_capture``), the hands-on scripts
(``result``) and the repair exercise's probe (its events, written to a file in this shape).
"""
from __future__ import annotations

import io
import json
import os
import sys
from typing import Optional

from ddlab.base.errors import CourseError

FORMAT = "report/1"
FIELDS = ("ddlab", "rank", "kind")        # the fixed keys; every other key is payload
# What starts every report line's object (json.dumps' default separators, FIELDS first), and
# what marks a line as meant to be one: a line that has MARK but is no valid report is an error.
START = '{"ddlab": '
MARK = '"ddlab": "report/'


class WorkerReportError(CourseError, ValueError):
    """A line of a worker's output that is meant to be a report but is not a valid one."""


def encode(kind: str, *, rank: int, **payload) -> str:
    """The report as one line of JSON, without its newline."""
    if not isinstance(kind, str) or not kind:
        raise ValueError(f"a report's kind is a non-empty string, got {kind!r}")
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise ValueError(f"a report's rank is a whole number from 0, got {rank!r}")
    if "ddlab" in payload:
        raise ValueError("'ddlab' is the report's format field, not a payload key")
    line = json.dumps({"ddlab": FORMAT, "rank": rank, "kind": kind, **payload})
    if "\n" in line:      # json.dumps escapes newlines in strings; a payload object cannot add one
        raise ValueError("a report must fit on one line")
    return line


def emit(kind: str, *, rank: int, **payload) -> str:
    """Write one report line to standard output now (flushing what was printed before it, so
    the order holds) and return it. One ``write()`` to the file descriptor where there is one
    (a worker's pipe); where standard output has none (a notebook, a test's capture) through
    ``sys.stdout``."""
    line = encode(kind, rank=rank, **payload)
    data = (line + "\n").encode()
    sys.stdout.flush()
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        fd = None
    if fd is None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
        return line
    while data:       # a write of more than PIPE_BUF bytes may be partial: write the rest
        data = data[os.write(fd, data):]
    return line


def _problem(obj) -> Optional[str]:
    """What makes a decoded object no valid report (None: it is one)."""
    if not isinstance(obj, dict):
        return "it is not a JSON object"
    if obj.get("ddlab") != FORMAT:
        return f"its format is {obj.get('ddlab')!r}, this course reads {FORMAT!r}"
    rank, kind = obj.get("rank"), obj.get("kind")
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        return f"its rank is {rank!r}, not a whole number from 0"
    if not isinstance(kind, str) or not kind:
        return f"its kind is {kind!r}, not a name"
    return None


def parse(text: str, *, kind: Optional[str] = None, strict: bool = True) -> list:
    """The reports in ``text`` (a launch's whole output), as dicts, in the order they were
    written; lines that are no report are passed over. ``kind``: only the reports of that kind.

    A line that is meant to be a report (it holds ``"ddlab": "report/``) but does not decode to
    a valid one raises :class:`WorkerReportError` naming the line; ``strict=False`` passes over
    it instead (for the output of a run that failed anyway, where a worker may have been killed
    in the middle of its line and the failure's own message matters more)."""
    decoder = json.JSONDecoder()
    out = []
    for number, line in enumerate((text or "").splitlines(), 1):
        if MARK not in line:
            continue
        at = line.find(START)
        try:
            if at < 0:
                raise ValueError(f"it does not start with {START!r}")
            obj, _ = decoder.raw_decode(line, at)
            why = _problem(obj)
            if why:
                raise ValueError(why)
        except ValueError as exc:
            if not strict:
                continue
            shown = line if len(line) <= 300 else line[:300] + "..."
            raise WorkerReportError(f"line {number} of the workers' output is not a valid report ({exc}): "
                                    f"{shown}") from None
        if kind is None or obj["kind"] == kind:
            out.append(obj)
    return out


def by_rank(reports) -> dict:
    """``{rank: [its reports, in order]}``, ranks ascending."""
    out: dict = {}
    for r in sorted(reports, key=lambda r: r["rank"]):
        out.setdefault(r["rank"], []).append(r)
    return out
