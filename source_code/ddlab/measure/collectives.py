"""Collective bandwidth sweeps: all-reduce, all-gather and reduce-scatter over message size.

This module holds what a sweep is and what it found: the operations and data types, the sizes a
sweep visits (:func:`message_sizes`), nccl-tests' bandwidth arithmetic (:func:`bandwidths`,
:func:`bus_factor`), :class:`SweepResult` and its JSON file format, and the tables that compare
sweeps (:func:`summary`, :func:`level_table`), and the sweeps recorded on a course machine
(``source_code/reference/allreduce/<name>.json``): :func:`load_recorded` one per NCCL path,
:func:`load_recorded_levels` one per ``NCCL_P2P_LEVEL``. Around it:

* :mod:`ddlab.measure.collectives_run` runs a sweep through torchrun
  (:func:`~ddlab.measure.collectives_run.sweep`; one per NCCL path or P2P level);
* :mod:`ddlab.measure.collectives_worker` is one rank of a sweep: it checks every result and times
  the calls;
* :mod:`ddlab.measure.collectives_cli` is ``ddlab allreduce``;
* :func:`ddlab.views.sweep_plots.plot_sweep` draws sweeps over message size.

Bandwidths follow nccl-tests, doc/PERFORMANCE.md (github.com/NVIDIA/nccl-tests):

* ``algbw = S / t`` with S the size of the operation in bytes. For all-reduce S is the
  buffer size; for all-gather and reduce-scatter S is the size of the *whole* array,
  ``count_per_rank * sizeof(type) * n`` (PERFORMANCE.md: "S is the size in bytes of the
  total array, which for NCCL is equal to recvcount*sizeof(datatype)*n").
* ``busbw = algbw * 2(n-1)/n`` for all-reduce and ``algbw * (n-1)/n`` for all-gather and
  reduce-scatter. busbw is what each rank's link must carry, so it can be compared with
  the hardware's link bandwidth whatever the number of ranks.

GB/s means 10^9 bytes per second, as in nccl-tests.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional

from ddlab.base import files
from ddlab.base.tables import Table
from ddlab.base.units import format_bytes, significant

OPS = ("all_reduce", "all_gather", "reduce_scatter")

# dtype name -> (nccl-tests' type name, bytes per element, largest n with all integers 0..n exact)
DTYPES = {
    "float32": ("float", 4, 2 ** 24),
    "float64": ("double", 8, 2 ** 53),
    "float16": ("half", 2, 2 ** 11),
    "bfloat16": ("bfloat16", 2, 2 ** 8),
}
VALIDATION_KIND = "validation_error"     # the report a worker makes of a wrong result (ddlab.base.worker_report)
RESULT_FORMAT = 1

# Sweep defaults per backend: GPUs go to 1 GiB (NVLink reaches its peak only for large
# messages); CPU processes stop at 64 MiB so a learner's laptop finishes in seconds.
DEFAULT_MAX_BYTES = {"nccl": 1 << 30, "gloo": 64 << 20}
# Auto iterations: enough calls to fill about target_s of timed work per size, within bounds.
AUTO_ITERS = {"nccl": dict(target_s=0.2, min_iters=5, max_iters=1000),
              "gloo": dict(target_s=0.05, min_iters=3, max_iters=200)}


class CollectiveValidationError(RuntimeError):
    """A collective returned a wrong value: the benchmark refuses to report a speed for it."""


# ----------------------------------------------------------------------------- sizes and formulas
def bus_factor(op: str, n: int) -> float:
    """busbw / algbw for ``op`` on ``n`` ranks (nccl-tests, doc/PERFORMANCE.md, "Summary")."""
    check_op(op)
    if n < 1:
        raise ValueError(f"need at least one rank, got {n}")
    return 2.0 * (n - 1) / n if op == "all_reduce" else (n - 1) / n


def bandwidths(op: str, nbytes: int, time_s: float, n: int) -> tuple:
    """``(algbw, busbw)`` in GB/s (10^9 B/s) for an operation of ``nbytes`` (as nccl-tests counts
    them: the whole array for all-gather and reduce-scatter) that took ``time_s``."""
    if time_s <= 0:
        raise ValueError(f"time must be positive, got {time_s}")
    algbw = nbytes / time_s / 1e9
    return algbw, algbw * bus_factor(op, n)


def message_sizes(op: str, min_bytes: int, max_bytes: int, n: int, dtype: str = "float32",
                  factor: int = 2) -> list:
    """The sizes a sweep visits: ``min_bytes``, ``min_bytes*factor``, ... up to ``max_bytes``,
    each rounded down to whole elements (for all-gather/reduce-scatter: whole elements on every
    rank, ``n * element size``), at least one element, without repeats."""
    check_op(op)
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    if factor < 2 or int(factor) != factor:
        raise ValueError(f"factor must be a whole number >= 2, got {factor}")
    if min_bytes < 1 or max_bytes < min_bytes:
        raise ValueError(f"need 1 <= min_bytes <= max_bytes, got {min_bytes} and {max_bytes}")
    unit = DTYPES[dtype][1] * (1 if op == "all_reduce" else n)
    sizes, s = [], min_bytes
    while s <= max_bytes:
        b = max(unit, s // unit * unit)
        if not sizes or b != sizes[-1]:
            sizes.append(b)
        s *= factor
    return sizes


def check_op(op: str) -> None:
    """ValueError naming the choices unless ``op`` is one of :data:`OPS`."""
    if op not in OPS:
        raise ValueError(f"unknown collective {op!r}; choose one of {', '.join(OPS)}")



# ----------------------------------------------------------------------------- result
@dataclass
class SweepResult:
    """One sweep of one collective under one NCCL path (or gloo).

    ``rows``: one dict per message size with ``bytes`` (as nccl-tests counts them), ``count``
    (elements per call argument, as nccl-tests prints it: per rank for all-gather and
    reduce-scatter), ``time_us`` (average over iterations and ranks), ``time_us_max`` (slowest
    rank), ``algbw_gbps``, ``busbw_gbps`` and ``iters``.
    """
    op: str
    backend: str
    path: str
    env: dict
    nproc: int
    rows: list
    provenance: dict
    source: str = "live"          # "live" (measured now) or "recorded" (loaded from reference/)
    dtype: str = "float32"
    nccl_log_text: Optional[str] = None
    meta: dict = field(default_factory=dict)   # torch/NCCL versions and devices the workers saw

    # -- reading
    def peak_busbw(self) -> float:
        """The highest bus bandwidth of the sweep in GB/s."""
        return max(r["busbw_gbps"] for r in self.rows) if self.rows else float("nan")

    def row_at(self, nbytes: int) -> dict:
        """The row whose size is closest to ``nbytes`` (on a log scale)."""
        if not self.rows:
            raise ValueError("this sweep has no rows")
        return min(self.rows, key=lambda r: abs(math.log(r["bytes"]) - math.log(max(1, nbytes))))

    def busbw_at(self, nbytes: int) -> float:
        return self.row_at(nbytes)["busbw_gbps"]

    @property
    def path_name(self) -> str:
        """The path as tables and legends show it: ``default`` is "NCCL default, NVLS off" where the
        sweep's recorded environment had NCCL_NVLS_ENABLE=0 (ddlab.system.nccl.display_name)."""
        from ddlab.system import nccl
        env = dict((self.provenance or {}).get("nccl_env") or {})
        env.update(self.env or {})
        return nccl.display_name(self.path, env)

    def settings_text(self) -> str:
        """The NCCL variables the sweep's path set, as recorded (``NCCL_DEBUG``, which only makes NCCL
        print its choices, left out): what the path *was* in this run, whatever the path's name says."""
        if self.backend != "nccl":
            return f"({self.backend}: no NCCL)"
        return " ".join(f"{k}={v}" for k, v in (self.env or {}).items() if k != "NCCL_DEBUG") or "(NCCL defaults)"

    @property
    def multicast_off(self) -> bool:
        from ddlab.system import nccl
        return self.backend == "nccl" and nccl.multicast_was_off(
            {**((self.provenance or {}).get("nccl_env") or {}), **(self.env or {})})

    @property
    def label(self) -> str:
        where = self.path_name if self.backend == "nccl" else "gloo, CPU"
        rec = ", recorded" if self.source == "recorded" else ""
        return f"{where} ({self.nproc} ranks{rec})"

    def transport_counts(self):
        """Transports NCCL reported (from ``nccl_log_text``), via :mod:`ddlab.system.nccl_log`; ``None``
        when the sweep kept no log or that module is not available."""
        log = self.nccl_log()
        return None if log is None else log.transport_counts()

    def nccl_log(self):
        if not self.nccl_log_text:
            return None
        try:
            from ddlab.system import nccl_log
        except ImportError:
            return None
        return nccl_log.parse(self.nccl_log_text)

    def table(self) -> str:
        """The sweep as an nccl-tests-style table."""
        tname = DTYPES.get(self.dtype, (self.dtype,))[0]
        redop = "sum" if self.op != "all_gather" else "none"
        place = "in-place" if self.op == "all_reduce" else "out-of-place"
        nccl_env = " ".join(f"{k}={v}" for k, v in sorted(self.env.items())) or "(NCCL defaults)"
        head = [f"# ddlab {self.op}: {self.backend}, {self.nproc} ranks, "
                + (f"path {self.path}: {nccl_env}" if self.backend == "nccl" else "CPU processes")
                + f", {place}" + (" [recorded]" if self.source == "recorded" else ""),
                "#",
                f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'time':>8}  {'algbw':>7}  {'busbw':>7}  {'#wrong':>6}",
                f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'(us)':>8}  {'(GB/s)':>7}  {'(GB/s)':>7}  {'':>6}"]
        body = [f"{r['bytes']:>12}  {r['count']:>12}  {tname:>8}  {redop:>6}  {format_time_us(r['time_us']):>8}  "
                f"{r['algbw_gbps']:>7.2f}  {r['busbw_gbps']:>7.2f}  {0:>6}" for r in self.rows]
        tail = []
        if self.rows:
            avg = sum(r["busbw_gbps"] for r in self.rows) / len(self.rows)
            best = max(self.rows, key=lambda r: r["busbw_gbps"])
            tail = ["# Out of bounds values : 0 OK (every element of every size checked)",
                    f"# Avg bus bandwidth    : {significant(avg, 4)} GB/s",
                    f"# Peak bus bandwidth   : {significant(best['busbw_gbps'], 4)} GB/s at {format_bytes(best['bytes'])}"]
        return "\n".join(head + body + tail)

    # -- storing
    def to_dict(self) -> dict:
        d = {"op": self.op, "backend": self.backend, "path": self.path, "env": dict(self.env),
             "nproc": self.nproc, "dtype": self.dtype, "rows": [dict(r) for r in self.rows],
             "meta": dict(self.meta), "provenance": dict(self.provenance)}
        if self.nccl_log_text:
            d["nccl_log_text"] = self.nccl_log_text
        return d

    @classmethod
    def from_dict(cls, d: Mapping, source: Optional[str] = None) -> "SweepResult":
        missing = [k for k in ("op", "backend", "path", "nproc", "rows", "provenance") if k not in d]
        if missing:
            raise ValueError(f"not a collectives sweep: missing {', '.join(missing)}")
        return cls(op=d["op"], backend=d["backend"], path=d["path"], env=dict(d.get("env") or {}),
                   nproc=int(d["nproc"]), rows=[dict(r) for r in d["rows"]], provenance=dict(d["provenance"]),
                   source=source or d.get("source", "live"), dtype=d.get("dtype", "float32"),
                   nccl_log_text=d.get("nccl_log_text"), meta=dict(d.get("meta") or {}))


def format_time_us(us: float) -> str:
    """A time in microseconds as nccl-tests prints it."""
    # nccl-tests' rule: fewer decimals for longer times.
    return f"{us:.0f}" if us >= 10000 else (f"{us:.1f}" if us >= 100 else f"{us:.2f}")


def results_to_json(results: Iterable[SweepResult]) -> dict:
    """Several sweeps as one JSON object (the format of ``--out`` files and reference/allreduce/)."""
    results = list(results)
    if not results:
        raise ValueError("no sweep results to write")
    return {"kind": "ddlab.collectives", "format": RESULT_FORMAT,
            "provenance": results[0].provenance, "sweeps": [r.to_dict() for r in results]}


def results_from_json(obj: Mapping, source: str = "live") -> list:
    if obj.get("kind") != "ddlab.collectives" or "sweeps" not in obj:
        raise ValueError("not an all-reduce sweep result file (expected kind 'ddlab.collectives' and 'sweeps')")
    return [SweepResult.from_dict(s, source=source) for s in obj["sweeps"]]


def write_json(results: Iterable[SweepResult], path: str) -> str:
    """Write sweeps to ``path`` in the format of :func:`results_to_json` (atomically: the whole
    file or none of it, checked against the ``allreduce`` schema); returns ``path``."""
    return files.write_json(path, results_to_json(results), schema="allreduce", what="all-reduce sweep file")


def read_json(path: str, source: str = "live") -> list:
    """The sweeps in a file written by :func:`write_json` (``ddlab allreduce --out``); a missing
    or corrupt file, or one that breaks the ``allreduce`` schema, raises :class:`ddlab.base.files.ResultFileError`."""
    return results_from_json(files.read_json(path, "all-reduce sweep file", schema="allreduce"), source=source)




# ----------------------------------------------------------------------------- tables
def summary(results: Iterable[SweepResult], at_bytes: Optional[int] = None) -> Table:
    """One row per sweep: busbw at ``at_bytes`` (default: 512 MiB, the size course figures
    quote, or the largest size all sweeps reached if that is smaller) and the peak busbw."""
    results = list(results)
    if at_bytes is None:
        at_bytes = min([512 << 20] + [max(r["bytes"] for r in res.rows) for res in results if res.rows])
    rows = []
    for r in results:
        row = r.row_at(at_bytes)
        best = max(r.rows, key=lambda x: x["busbw_gbps"])
        rows.append({"op": r.op, "path": r.path_name if r.backend == "nccl" else "gloo", "ranks": r.nproc,
                     "settings": r.settings_text(), "busbw_at": row["busbw_gbps"], "measured_at": row["bytes"],
                     "peak": best["busbw_gbps"], "peak_at": best["bytes"]})
    cols = [("op", "text"), ("path", "text"), ("settings", "text", "NCCL settings it ran with"), ("ranks", "int"),
            ("busbw_at", "rate:GB/s", f"busbw at {format_bytes(at_bytes)}")]
    if any(x["measured_at"] != at_bytes for x in rows):    # a sweep that did not reach at_bytes
        cols.append(("measured_at", "bytes", "(nearest size)"))
    cols += [("peak", "rate:GB/s", "peak busbw"), ("peak_at", "bytes", "at")]
    from ddlab.system import nccl
    notes = [nccl.MULTICAST_OFF_WHY] if any(r.multicast_off for r in results) else []
    notes += [f"command: {c}" for c in sweep_commands(results)]
    return Table(cols, rows, notes=notes or None)



def sweep_commands(results: Iterable[SweepResult]) -> list:
    """The commands that produced ``results``, one shell line each (once per distinct command): the NCCL
    variables all of their workers had in common (the shell's; ``NCCL_VERSION``, which NVIDIA's containers
    set to name their NCCL, left out), then the command the provenance recorded. A command that ran several
    paths (``ddlab allreduce --paths ...``) set each path's own variables, which :meth:`SweepResult.settings_text`
    shows per sweep. Empty when none was recorded."""
    results = list(results)
    envs = [dict((r.provenance or {}).get("nccl_env") or {}) for r in results]
    common = {k: v for k, v in (envs[0] if envs else {}).items()
              if k != "NCCL_VERSION" and all(e.get(k) == v for e in envs)}
    words = [f"{k}={v}" for k, v in common.items()]
    commands = dict.fromkeys(str((r.provenance or {}).get("command") or "") for r in results)
    return [" ".join(words + [c]) for c in commands if c]


def level_table(results: Mapping[str, "SweepResult"]):
    """One row per level of a level sweep: the transports NCCL reported (connections of each
    kind) and the bus bandwidth at the sweep's largest size, as a :class:`ddlab.base.tables.Table`."""
    if not results:
        raise ValueError("no level sweep results to show")
    rows = []
    for level, res in results.items():
        counts = res.transport_counts()
        last = max(res.rows, key=lambda r: r["bytes"]) if res.rows else {}
        rows.append({"level": level,
                     "transports": ", ".join(f"{k} ({n})" for k, n in counts.items()) if counts else "not in the log",
                     "busbw": last.get("busbw_gbps"), "size": last.get("bytes")})
    return Table([("level", "text", "NCCL_P2P_LEVEL"), ("transports", "text", "transports NCCL chose (connections)"),
                  ("busbw", lambda v: f"{v:.1f} GB/s", "busbw"), ("size", "bytes", "at")], rows, missing="-",
                 align={"busbw": "right"})


# ----------------------------------------------------------------------------- recorded sweeps
# reference/allreduce/<machine><suffix>.json beside a machine's sweeps: its NCCL_P2P_LEVEL sweep, and the
# same sweeps measured again; neither is a machine of its own.
LEVELS_SUFFIX, REPEATS_SUFFIX = "-levels", "-repeats"
COMPANION_SUFFIXES = (LEVELS_SUFFIX, REPEATS_SUFFIX)


def recorded_machines() -> list:
    """The machines whose all-reduce sweeps are recorded (``reference/allreduce/<name>.json``), without
    the companion files of :data:`COMPANION_SUFFIXES`."""
    from ddlab.base import reference
    return [n for n in reference.names("allreduce") if not n.endswith(COMPANION_SUFFIXES)]


def load_recorded(name: str, op: str = "all_reduce") -> dict:
    """Recorded sweeps of ``op`` from ``source_code/reference/allreduce/<name>.json``, as a dict
    path -> SweepResult with ``source == "recorded"``."""
    from ddlab.base import reference
    check_op(op)
    found = {r.path: r for r in results_from_json(reference.load("allreduce", name), source="recorded")
             if r.op == op}
    if not found:
        raise ValueError(f"reference allreduce/{name} holds no {op} sweep")
    return found


def load_recorded_levels(name: str) -> dict:
    """A recorded level sweep (the sweeps of :func:`ddlab.measure.collectives_run.compare_levels`,
    kept as ``reference/allreduce/<name>.json``) as ``{level: SweepResult}``, in NCCL's order."""
    from ddlab.base import reference
    found = {r.env.get("NCCL_P2P_LEVEL"): r for r in results_from_json(reference.load("allreduce", name),
                                                                         source="recorded")}
    if None in found or not found:
        raise ValueError(f"reference allreduce/{name} is not a level sweep (each sweep needs NCCL_P2P_LEVEL)")
    from ddlab.system.nccl import P2P_LEVELS
    return {lv: found[lv] for lv in P2P_LEVELS if lv in found}

