"""Collective bandwidth sweeps: all-reduce, all-gather and reduce-scatter over message size.

``sweep()`` starts one worker process per GPU (NCCL) or two CPU processes (gloo) through
:func:`ddlab.measure.launch.run` with torchrun. For every message size each worker

1. fills its input with values that depend on its rank and on the element index, runs the
   collective once and checks **every** element of the result against the exact expected
   value (the values are small integers, so float sums are exact). A wrong element stops
   the sweep with the rank, the size and the first wrong index;
2. warms up, then times ``iters`` back-to-back calls (CUDA events on a GPU, a wall clock
   between barriers on CPU) and divides by ``iters``. (nccl-tests reads a host clock around
   the launches and a stream synchronize; the events measure the same span on the GPU, without
   the host's launch of the first call.) Calls are queued without a host sync in between, so
   for large messages only the collective is timed; for tiny ones the time per call is bounded
   by how fast Python and torch.distributed can issue calls, which is part of what a training
   step pays too;
3. reports the time as nccl-tests does by default: the per-rank average over the
   iterations, then averaged over the ranks (nccl-tests' ``-a 1``; the slowest rank is
   kept too, as ``time_us_max``).

Bandwidths follow nccl-tests, doc/PERFORMANCE.md (github.com/NVIDIA/nccl-tests):

* ``algbw = S / t`` with S the size of the operation in bytes. For all-reduce S is the
  buffer size; for all-gather and reduce-scatter S is the size of the *whole* array,
  ``count_per_rank * sizeof(type) * n`` (PERFORMANCE.md: "S is the size in bytes of the
  total array, which for NCCL is equal to recvcount*sizeof(datatype)*n").
* ``busbw = algbw * 2(n-1)/n`` for all-reduce and ``algbw * (n-1)/n`` for all-gather and
  reduce-scatter. busbw is what each rank's link must carry, so it can be compared with
  the hardware's link bandwidth whatever the number of ranks.

GB/s means 10^9 bytes per second, as in nccl-tests.

The NCCL *paths* (:mod:`ddlab.system.nccl`) are environments that make NCCL choose a different
transport between GPUs of one machine, so a learner sees what NVLink peer-to-peer is worth.
NVLink multicast is NCCL's choice unless the path turns it off (``shm`` and ``socket`` do,
so nothing bypasses the host or the network) or the caller passes ``multicast_off=True``; a
sweep's ``provenance["nccl_env"]`` records every NCCL variable its workers saw.

Length (about 830 lines): the worker that runs inside torchrun (``_worker``), the launcher of a
sweep, its result, the recorded sweeps, the level sweep and the command line share one row
format. The worker is the part to move out next.
"""
from __future__ import annotations

import json
import math
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional, Sequence

from ddlab.system import nccl
from ddlab.base.tables import Table
from ddlab.base.units import format_bytes, parse_size, significant

OPS = ("all_reduce", "all_gather", "reduce_scatter")

# dtype name -> (nccl-tests' type name, bytes per element, largest n with all integers 0..n exact)
DTYPES = {
    "float32": ("float", 4, 2 ** 24),
    "float64": ("double", 8, 2 ** 53),
    "float16": ("half", 2, 2 ** 11),
    "bfloat16": ("bfloat16", 2, 2 ** 8),
}
VALIDATION_MARKER = "DDLAB_VALIDATION_FAILED"
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
# Sizes are read and written by ddlab.base.units (binary units, as nccl-tests' -b/-e). parse_size and
# format_size stay importable from here under the names earlier callers used.
format_size = format_bytes


def bus_factor(op: str, n: int) -> float:
    """busbw / algbw for ``op`` on ``n`` ranks (nccl-tests, doc/PERFORMANCE.md, "Summary")."""
    _check_op(op)
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
    _check_op(op)
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


def _check_op(op: str) -> None:
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
    def label(self) -> str:
        where = self.path if self.backend == "nccl" else "gloo, CPU"
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
        body = [f"{r['bytes']:>12}  {r['count']:>12}  {tname:>8}  {redop:>6}  {_fmt_time(r['time_us']):>8}  "
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


def _fmt_time(us: float) -> str:
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
    with open(path, "w") as f:
        json.dump(results_to_json(results), f, indent=1)
        f.write("\n")
    return path


def read_json(path: str, source: str = "live") -> list:
    with open(path) as f:
        return results_from_json(json.load(f), source=source)


def save_recorded(name: str, results: Iterable[SweepResult]) -> str:
    """Keep sweeps under ``source_code/reference/allreduce/<name>.json``."""
    from ddlab.base import reference
    return reference.save("allreduce", name, results_to_json(results))


def load_recorded(name: str, op: str = "all_reduce") -> dict:
    """Recorded sweeps of ``op`` from ``source_code/reference/allreduce/<name>.json``, as a dict
    path -> SweepResult with ``source == "recorded"``."""
    from ddlab.base import reference
    _check_op(op)
    found = {r.path: r for r in results_from_json(reference.load("allreduce", name), source="recorded")
             if r.op == op}
    if not found:
        raise ValueError(f"reference allreduce/{name} holds no {op} sweep")
    return found


def load_recorded_levels(name: str) -> dict:
    """A recorded level sweep (:func:`compare_levels` saved with :func:`save_recorded` as
    ``reference/allreduce/<name>.json``) as ``{level: SweepResult}``, in NCCL's order."""
    from ddlab.base import reference
    found = {r.env.get("NCCL_P2P_LEVEL"): r for r in results_from_json(reference.load("allreduce", name),
                                                                         source="recorded")}
    if None in found or not found:
        raise ValueError(f"reference allreduce/{name} is not a level sweep (each sweep needs NCCL_P2P_LEVEL)")
    return {lv: found[lv] for lv in nccl.P2P_LEVELS if lv in found}


# ----------------------------------------------------------------------------- running
def _gpu_count() -> int:
    """GPUs torch can use here (0 with a CPU-only torch build)."""
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def sweep(op: str = "all_reduce", nproc: Optional[int] = None, backend: Optional[str] = None,
          path: str = "default", min_bytes=8, max_bytes=None, factor: int = 2,
          sizes: Optional[Sequence[int]] = None, iters: Optional[int] = None,
          warmup: Optional[int] = None, dtype: str = "float32",
          env: Optional[Mapping[str, Optional[str]]] = None, timeout: Optional[float] = None,
          nccl_debug: bool = False, command=None, inventory=None, echo: bool = False,
          multicast_off: bool = False, _inject_error: bool = False) -> SweepResult:
    """Measure ``op`` over message sizes with ``nproc`` processes; returns a :class:`SweepResult`.

    backend: ``"nccl"`` (one process per GPU; the default when this machine has 2 or more) or
    ``"gloo"`` (CPU processes, 2 by default; the default with 0 or 1 GPU). ``path`` picks an NCCL environment
    (a name or alias of :data:`ddlab.system.nccl.PATHS`); with gloo only ``"default"`` means anything.
    ``multicast_off`` turns NVLink multicast off for this sweep (:data:`ddlab.system.nccl.MULTICAST_OFF`)
    whatever the path; without it the path decides (see :class:`ddlab.system.nccl.NcclPath`). Sizes run
    from ``min_bytes`` to ``max_bytes`` (default 1 GiB on GPUs, 64 MiB on CPU; ``"512M"``-style strings accepted)
    by ``factor``, or exactly ``sizes``. ``iters``/``warmup`` default to an automatic choice
    that keeps each size to a fraction of a second. ``nccl_debug`` runs with NCCL_DEBUG=INFO
    and keeps the log in ``.nccl_log_text``. A wrong result raises
    :class:`CollectiveValidationError`; a crash or timeout raises :class:`ddlab.measure.launch.LaunchError`.
    """
    from ddlab.base.paths import SOURCE_DIR
    from ddlab.measure import launch
    from ddlab.system import provenance

    _check_op(op)
    path = nccl.get(path).name
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    gpus = _gpu_count()
    # One GPU cannot run a collective between GPUs: then CPU processes are what this machine has.
    backend = backend or ("nccl" if gpus >= 2 else "gloo")
    if backend not in ("nccl", "gloo"):
        raise ValueError(f"backend must be 'nccl' or 'gloo', got {backend!r}")
    if backend == "nccl":
        if gpus < 2:
            raise ValueError(f"NCCL collectives between GPUs need at least 2 GPUs; this machine has {gpus}. "
                             f"Use backend='gloo' to measure CPU processes instead.")
        nproc = gpus if nproc is None else nproc
        if nproc > gpus:
            raise ValueError(f"nproc={nproc} but only {gpus} GPUs are visible (one process per GPU)")
    else:
        nproc = 2 if nproc is None else nproc
        if path != "default":
            raise ValueError(f"path {path!r} is an NCCL setting; gloo ignores NCCL variables, so with "
                             f"backend='gloo' only path='default' is meaningful")
    if nproc < 2:
        raise ValueError(f"a collective between processes needs nproc >= 2, got {nproc}")
    if iters is not None and iters < 1:
        raise ValueError(f"iters must be at least 1, got {iters}")
    if warmup is not None and warmup < 0:
        raise ValueError(f"warmup must be 0 or more, got {warmup}")
    if sizes is None:
        lo = parse_size(min_bytes)
        hi = parse_size(max_bytes) if max_bytes is not None else DEFAULT_MAX_BYTES[backend]
        sizes = message_sizes(op, lo, hi, nproc, dtype, factor)
    else:
        unit = DTYPES[dtype][1] * (1 if op == "all_reduce" else nproc)
        sizes = [parse_size(s) for s in sizes]
        bad = [s for s in sizes if s < unit or s % unit]
        if not sizes or bad:
            raise ValueError(f"sizes must be positive multiples of {unit} bytes for {op} of {dtype} "
                             f"on {nproc} ranks; got {bad or sizes}")
    timeout = timeout if timeout is not None else (600.0 if backend == "nccl" else 300.0)

    overrides = (nccl.get(path).environment(env, multicast_off=multicast_off) if backend == "nccl"
                 else dict(env or {}))
    nccl_debug = nccl_debug and backend == "nccl"     # gloo writes no NCCL log
    if nccl_debug:
        overrides["NCCL_DEBUG"] = "INFO"
    # The workers import ddlab from this checkout whatever the caller's sys.path trick was.
    pp = os.environ.get("PYTHONPATH")
    overrides["PYTHONPATH"] = SOURCE_DIR + (os.pathsep + pp if pp else "")
    auto = AUTO_ITERS[backend]

    with tempfile.TemporaryDirectory(prefix="ddlab-coll-") as tmp:
        out = os.path.join(tmp, "result.json")
        argv = ["-m", "ddlab.measure.collectives", "--worker", "--op", op, "--backend", backend,
                "--dtype", dtype, "--sizes", ",".join(map(str, sizes)), "--out", out,
                "--iters", str(iters or 0), "--warmup", str(-1 if warmup is None else warmup),
                "--target-s", str(auto["target_s"]), "--min-iters", str(auto["min_iters"]),
                "--max-iters", str(auto["max_iters"])]
        if _inject_error:
            argv.append("--inject-error")
        try:
            launched = launch.run(argv, launcher="torchrun", nproc=nproc, env=overrides,
                                  timeout=timeout, echo=echo)
        except launch.LaunchError as exc:
            text = exc.result.output if exc.result is not None else ""
            wrong = [ln.split(VALIDATION_MARKER, 1)[1].strip(" :") for ln in text.splitlines()
                     if VALIDATION_MARKER in ln]
            if wrong:
                raise CollectiveValidationError(
                    f"{op} returned wrong values, so no bandwidth is reported:\n  " + "\n  ".join(wrong)) from None
            raise
        with open(out) as f:
            worker = json.load(f)

    if command is None:
        command = (f"ddlab.measure.collectives.sweep(op={op!r}, backend={backend!r}, path={path!r}, nproc={nproc}, "
                   f"sizes={format_bytes(sizes[0])}..{format_bytes(sizes[-1])}, dtype={dtype!r})")
    prov = provenance.collect(command, inventory=inventory)
    # Record the NCCL variables the workers saw (this process's environment is not theirs).
    prov["nccl_env"] = nccl.recorded_environment(launch.worker_environment(overrides))
    shown_env = {k: v for k, v in overrides.items()
                 if v is not None and k != "PYTHONPATH" and (backend == "nccl" or not k.startswith("NCCL_"))}
    return SweepResult(op=op, backend=backend, path=path, env=shown_env, nproc=nproc, rows=worker["rows"],
                       provenance=prov, source="live", dtype=dtype,
                       nccl_log_text=launched.output if nccl_debug else None,
                       meta={k: v for k, v in worker.items() if k != "rows"})


def compare_paths(paths: Sequence[str] = nccl.COMPARED, op: str = "all_reduce",
                  **kwargs) -> dict:
    """``sweep()`` once per NCCL path; returns ``{path: SweepResult}`` in the order given."""
    from ddlab.system import hardware
    if isinstance(paths, str):
        paths = [p.strip() for p in paths.split(",") if p.strip()]
    paths = [nccl.get(p).name for p in paths]
    kwargs.setdefault("inventory", hardware.inventory())
    return {p: sweep(op=op, path=p, **kwargs) for p in paths}


def compare_levels(levels: Sequence[str] = nccl.P2P_LEVELS, sizes: Sequence = ("256M",), op: str = "all_reduce",
                   **kwargs) -> dict:
    """The level sweep: ``sweep()`` once per ``NCCL_P2P_LEVEL`` (the level paths of
    :data:`ddlab.system.nccl.PATHS`: that variable alone), each with ``NCCL_DEBUG=INFO`` so that the
    transport NCCL chose is read from its log. Returns ``{level: SweepResult}``;
    :func:`level_table` prints it. Needs two GPUs: NCCL levels act only between GPUs."""
    if isinstance(levels, str):
        levels = [p.strip() for p in levels.split(",") if p.strip()]
    levels = [str(lv).strip().upper() for lv in levels]
    bad = [lv for lv in levels if lv not in nccl.P2P_LEVELS]
    if bad:
        raise ValueError(f"unknown NCCL_P2P_LEVEL {bad[0]!r}; choose from {', '.join(nccl.P2P_LEVELS)}")
    if _gpu_count() < 2:
        raise ValueError("the level sweep needs at least 2 GPUs: NCCL_P2P_LEVEL acts only on the P2P transport "
                         "between GPUs, and CPU processes (gloo) have no NCCL")
    kwargs.setdefault("nccl_debug", True)
    return {lv: sweep(op=op, backend="nccl", path=lv, sizes=sizes, **kwargs) for lv in levels}


def level_table(results: Mapping[str, "SweepResult"]):
    """One row per level of a level sweep: the transports NCCL reported (connections of each
    kind) and the bus bandwidth at the sweep's largest size, as a :class:`ddlab.base.tables.Table`."""
    from ddlab.base.tables import Table
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


# ----------------------------------------------------------------------------- plotting
def plot_sweep(results, ax=None, metric: str = "busbw", logy: Optional[bool] = None):
    """Draw one line per sweep over message size (log x). ``results``: a SweepResult, a list of
    them, or a dict label -> SweepResult. ``metric``: "busbw", "algbw" or "time"."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    keys = {"busbw": ("busbw_gbps", "bus bandwidth (GB/s)"), "algbw": ("algbw_gbps", "algorithm bandwidth (GB/s)"),
            "time": ("time_us", "time per call (us)")}
    if metric not in keys:
        raise ValueError(f"metric must be one of {', '.join(keys)}, got {metric!r}")
    if isinstance(results, SweepResult):
        items = [(results.label, results)]
    elif isinstance(results, Mapping):
        items = [(str(k), v) for k, v in results.items()]
    else:
        items = [(r.label, r) for r in results]
    if not items:
        raise ValueError("nothing to plot: no sweep results given")
    key, ylabel = keys[metric]
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    for name, r in items:
        xs = [row["bytes"] for row in r.rows]
        ys = [row[key] for row in r.rows]
        ax.plot(xs, ys, marker="o", ms=3, label=name, linestyle="--" if r.source == "recorded" else "-")
    ax.set_xscale("log", base=2)
    if logy is None:
        peaks = [max(row[key] for row in r.rows) for _, r in items if r.rows]
        logy = metric == "time" or (len(peaks) > 1 and min(peaks) > 0 and max(peaks) / min(peaks) > 10)
    if logy:
        ax.set_yscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: format_bytes(v).replace(" ", "")))
    ax.set_xlabel("message size (bytes, as nccl-tests counts them)")
    ax.set_ylabel(ylabel)
    ops = sorted({r.op for _, r in items})
    ax.set_title(f"{', '.join(ops)} over message size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    return ax


# ----------------------------------------------------------------------------- worker
def _worker(argv: Sequence[str]) -> int:
    """One rank of a sweep (started by torchrun; see ``sweep``)."""
    import argparse
    import functools

    from ddlab.measure import launch
    launch.install_hang_traceback()   # before torch: on SIGTERM (a timeout) print where this rank was

    import torch
    import torch.distributed as dist

    p = argparse.ArgumentParser(prog="ddlab.measure.collectives --worker")
    p.add_argument("--worker", action="store_true")
    p.add_argument("--op", required=True, choices=OPS)
    p.add_argument("--backend", required=True, choices=("nccl", "gloo"))
    p.add_argument("--dtype", default="float32", choices=tuple(DTYPES))
    p.add_argument("--sizes", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--iters", type=int, default=0)          # 0: automatic
    p.add_argument("--warmup", type=int, default=-1)        # -1: automatic
    p.add_argument("--target-s", type=float, default=0.1)
    p.add_argument("--min-iters", type=int, default=5)
    p.add_argument("--max-iters", type=int, default=1000)
    p.add_argument("--inject-error", action="store_true",
                   help="corrupt one element of the last rank's result (proves validation fires)")
    a = p.parse_args(argv)

    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    gpu = a.backend == "nccl"
    if gpu:
        torch.cuda.set_device(local_rank)
        dev = torch.device("cuda", local_rank)
        # device_id: create the NCCL communicator now, not at the first timed call.
        dist.init_process_group("nccl", device_id=dev)
    else:
        dev = torch.device("cpu")
        dist.init_process_group("gloo")
    dtype = getattr(torch, a.dtype)
    esize = DTYPES[a.dtype][1]
    # Input values are (index % m + 1) * (rank + 1): small integers whose sum over all ranks
    # stays exactly representable in the dtype, so the check can demand exact equality.
    tri = n * (n + 1) // 2
    m = max(2, min(4093, (DTYPES[a.dtype][2] - 1) // tri))
    # torch >= 2.12 renamed the single-tensor forms; older versions only have the old names.
    all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

    def sync():
        if gpu:
            torch.cuda.synchronize()

    def pattern(out, start, mult):
        """out[i] = ((start + i) % m + 1) * mult, computed on the device in place."""
        idx = torch.arange(start, start + out.numel(), device=dev,
                           dtype=torch.int32 if start + out.numel() < 2 ** 31 else torch.int64)
        out.copy_(idx.remainder_(m).add_(1).mul_(mult))
        return out

    def time_calls(fn, k):
        """Seconds per call of ``k`` back-to-back calls of ``fn`` on this rank."""
        dist.barrier()
        sync()
        if gpu:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(k):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3 / k
        t0 = time.perf_counter()
        for _ in range(k):
            fn()      # gloo calls on CPU tensors return when the collective is complete
        return (time.perf_counter() - t0) / k

    def across_ranks(values, op):
        t = torch.tensor(values, dtype=torch.float64, device=dev)
        dist.all_reduce(t, op=op)
        return t.tolist()

    def gather_times(sec):
        mine = torch.tensor([sec], dtype=torch.float64, device=dev)
        every = torch.empty(n, dtype=torch.float64, device=dev)
        all_gather(every, mine)
        return every.tolist()

    # NCCL connects lazily at the first collective; do that before the first timed size.
    w = torch.ones(1 << 20, dtype=dtype, device=dev)
    for _ in range(3):
        dist.all_reduce(w)
    sync()
    del w

    tname = DTYPES[a.dtype][0]
    rows = []
    if rank == 0:
        print(f"# {a.op} on {n} ranks ({a.backend}), {a.dtype}", flush=True)
        print(f"# {'size':>10}  {'count':>12}  {'type':>8}  {'time':>8}  {'algbw':>7}  {'busbw':>7}  {'iters':>5}",
              flush=True)
    for nbytes in (int(s) for s in a.sizes.split(",")):
        if a.op == "all_reduce":
            count = nbytes // esize
            buf = torch.empty(count, dtype=dtype, device=dev)
            pattern(buf, 0, rank + 1)
            out, fn = buf, functools.partial(dist.all_reduce, buf)
            expected = pattern(torch.empty_like(buf), 0, tri)
        elif a.op == "all_gather":
            count = nbytes // (esize * n)       # per rank, as nccl-tests' count column
            inp = pattern(torch.empty(count, dtype=dtype, device=dev), 0, rank + 1)
            out = torch.full((count * n,), -1, dtype=dtype, device=dev)
            fn = functools.partial(all_gather, out, inp)
            expected = torch.empty_like(out)
            for j in range(n):
                pattern(expected[j * count:(j + 1) * count], 0, j + 1)
        else:
            count = nbytes // (esize * n)       # per rank (the receive count)
            inp = pattern(torch.empty(count * n, dtype=dtype, device=dev), 0, rank + 1)
            out = torch.full((count,), -1, dtype=dtype, device=dev)
            fn = functools.partial(reduce_scatter, out, inp)
            expected = pattern(torch.empty_like(out), rank * count, tri)

        # 1. one untimed call, every element checked.
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        probe = time.perf_counter() - t0
        if a.inject_error and rank == n - 1:
            out[out.numel() // 2] += 1
        bad = "" if torch.equal(out, expected) else "x"
        if bad:
            wrong = (out != expected).nonzero()
            i = int(wrong[0])
            bad = (f"{a.op} rank {rank} of {n}, {nbytes} bytes ({count} {tname} per call): first wrong "
                   f"element at index {i}: got {out[i].item()!r}, expected {expected[i].item()!r} "
                   f"({wrong.numel()} of {out.numel()} elements wrong)")
        flag, probe = across_ranks([1.0 if bad else 0.0, probe], dist.ReduceOp.MAX)
        if flag:
            if bad:
                print(f"{VALIDATION_MARKER}: {bad}", flush=True)
            dist.destroy_process_group()
            return 3
        del expected
        # For in-place all-reduce the values now double (n-fold) at every call and may reach
        # inf during timing; that changes nothing in NCCL's or gloo's speed (no data-dependent
        # paths, no floating-point traps), and the check above ran on a fresh input.

        # 2. warm-up (also estimates the time per call, so the iterations fit the time budget).
        warm = a.warmup if a.warmup >= 0 else max(1, min(5, int(0.02 / max(probe, 1e-9))))
        est = probe
        if warm:
            est = across_ranks([time_calls(fn, warm)], dist.ReduceOp.MAX)[0]
        iters = a.iters or max(a.min_iters, min(a.max_iters, math.ceil(a.target_s / max(est, 1e-9))))

        # 3. timed calls: average per call on each rank, then over ranks (nccl-tests' default).
        per_rank = gather_times(time_calls(fn, iters))
        sec = sum(per_rank) / n
        algbw, busbw = bandwidths(a.op, nbytes, sec, n)
        rows.append({"bytes": nbytes, "count": count, "time_us": sec * 1e6, "time_us_max": max(per_rank) * 1e6,
                     "algbw_gbps": algbw, "busbw_gbps": busbw, "iters": iters, "warmup": warm})
        if rank == 0:
            print(f"{nbytes:>12}  {count:>12}  {tname:>8}  {_fmt_time(sec * 1e6):>8}  {algbw:>7.2f}  "
                  f"{busbw:>7.2f}  {iters:>5}", flush=True)
        # Free this size's buffers before allocating the next (1 GiB ones add up).
        out = inp = buf = fn = None

    devices = [None] * n
    name = torch.cuda.get_device_name(dev) if gpu else "cpu"
    dist.all_gather_object(devices, name)
    if rank == 0:
        meta = {"op": a.op, "backend": a.backend, "nproc": n, "dtype": a.dtype, "torch": torch.__version__,
                "devices": devices, "timing": "cuda events" if gpu else "perf_counter between barriers",
                "rows": rows}
        if gpu:
            v = torch.cuda.nccl.version()
            meta["nccl_version"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        with open(a.out, "w") as f:
            json.dump(meta, f)
    dist.barrier()
    dist.destroy_process_group()
    return 0


# ----------------------------------------------------------------------------- CLI
def cli(argv: list) -> int:
    """``ddlab allreduce``: sweep a collective under NCCL paths (or gloo on CPU), print tables."""
    import argparse

    p = argparse.ArgumentParser(
        prog="ddlab allreduce",
        description="Bandwidth of a collective over message size, as nccl-tests reports it (time, algbw, "
                    "busbw), with every result checked. GPUs: NCCL under the paths default (NVLink/PCIe P2P), "
                    "shm (NCCL_P2P_LEVEL=LOC: staged through host memory) and socket (P2P and SHM off: TCP, as "
                    "between nodes). No GPU (or one): gloo on CPU processes.")
    p.add_argument("--op", default="all_reduce", choices=OPS)
    p.add_argument("--paths", default=None,
                   help="comma-separated NCCL paths from: " + ", ".join(nccl.PATHS) + " (default: "
                        + ", ".join(nccl.COMPARED) + " on GPUs)")
    p.add_argument("--multicast-off", action="store_true",
                   help="turn NVLink multicast (NVLS) off on every path (shm and socket always do)")
    p.add_argument("--nproc", type=int, default=None, help="processes (default: one per GPU; 2 on CPU)")
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto")
    p.add_argument("--min-bytes", default="8", help="smallest size, e.g. 8, 64K (default 8)")
    p.add_argument("--max-bytes", default=None, help="largest size, e.g. 64M, 1G (default 1G on GPUs, 64M on CPU)")
    p.add_argument("--factor", type=int, default=2, help="size multiplier between steps (default 2)")
    p.add_argument("--iters", type=int, default=None, help="timed calls per size (default: automatic)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up calls per size (default: automatic)")
    p.add_argument("--dtype", default="float32", choices=tuple(DTYPES))
    p.add_argument("--timeout", type=float, default=None, help="seconds per path before the launch is killed")
    p.add_argument("--nccl-debug", action="store_true", help="run with NCCL_DEBUG=INFO and keep the log")
    p.add_argument("--log-dir", default=None, help="write each run's output (NCCL log) to DIR/nccl_<path>.log "
                                                   "(implies --nccl-debug)")
    p.add_argument("--json", action="store_true", help="print the results as JSON instead of tables")
    p.add_argument("--out", default=None, help="also write the results as JSON to this file")
    a = p.parse_args(argv)

    def note(msg):
        # With --json, stdout carries only JSON; notes go to stderr.
        print(msg, file=sys.stderr if a.json else sys.stdout, flush=True)

    try:
        min_bytes = parse_size(a.min_bytes)
        max_bytes = parse_size(a.max_bytes) if a.max_bytes is not None else None
    except ValueError as exc:
        print(f"ddlab allreduce: {exc}", file=sys.stderr)
        return 2
    requested = [x.strip() for x in a.paths.split(",") if x.strip()] if a.paths else None
    gpus = _gpu_count()
    try:
        backend, paths, notes = cli_plan(gpus, a.backend, requested, a.nproc)
    except ValueError as exc:
        print(f"ddlab allreduce: {exc}", file=sys.stderr)
        return 2
    for msg in notes:
        note(msg)
    nccl_debug = a.nccl_debug or bool(a.log_dir)
    if a.log_dir:
        os.makedirs(a.log_dir, exist_ok=True)

    from ddlab.system import hardware
    inv = hardware.inventory()
    results, failed = [], []
    for path in paths:
        where = f"NCCL path {nccl.get(path).describe(a.multicast_off)}" if backend == "nccl" else "gloo"
        note(f"running {a.op} on {a.nproc or (gpus if backend == 'nccl' else 2)} processes, {where} ...")
        try:
            r = sweep(op=a.op, nproc=a.nproc, backend=backend, path=path, min_bytes=min_bytes, max_bytes=max_bytes,
                      factor=a.factor, iters=a.iters, warmup=a.warmup, dtype=a.dtype, timeout=a.timeout,
                      nccl_debug=nccl_debug, inventory=inv, multicast_off=a.multicast_off,
                      command=["ddlab", "allreduce", *argv])
        except (ValueError, CollectiveValidationError, RuntimeError) as exc:
            print(f"ddlab allreduce: {where} failed: {exc}", file=sys.stderr)
            failed.append(path)
            out_text = getattr(getattr(exc, "result", None), "output", None)
            if a.log_dir and out_text:
                _write_log(a.log_dir, a.op, path, out_text)
            continue
        results.append(r)
        if a.log_dir and r.nccl_log_text:
            _write_log(a.log_dir, a.op, path, r.nccl_log_text)
        if not a.json:
            print(r.table())
            print()
    if results and a.out:
        write_json(results, a.out)
        note(f"wrote {a.out}")
    if a.json and results:
        print(json.dumps(results_to_json(results), indent=1))
    elif results:
        print(summary(results))
    return 1 if failed or not results else 0


def cli_plan(gpus: int, backend: str = "auto", paths: Optional[Sequence[str]] = None,
             nproc: Optional[int] = None) -> tuple:
    """What ``ddlab allreduce`` runs on a machine with ``gpus`` GPUs: ``(backend, paths, notes)``.

    2+ GPUs: NCCL, all three paths unless asked otherwise. 0 or 1 GPU: gloo on CPU processes,
    and only the "default" path: the paths are NCCL variables, which gloo never reads."""
    paths = [nccl.get(x).name for x in (paths or [])] or None
    if backend not in ("auto", "nccl", "gloo"):
        raise ValueError(f"backend must be auto, nccl or gloo, got {backend!r}")
    notes = []
    if backend == "auto":
        backend = "nccl" if gpus >= 2 else "gloo"
        if gpus == 1:
            notes.append("This machine has 1 GPU: a collective over NCCL needs at least 2 GPUs. Running gloo "
                         f"on {nproc or 2} CPU processes instead (the NCCL paths do not apply).")
        elif gpus == 0:
            notes.append(f"No GPU found: running gloo on {nproc or 2} CPU processes (a real measurement of "
                         "CPU processes on this machine; the NCCL paths do not apply).")
    if backend == "nccl" and gpus < 2:
        raise ValueError(f"--backend nccl needs at least 2 GPUs; this machine has {gpus}")
    if backend == "nccl":
        return backend, list(paths or nccl.COMPARED), notes
    if any(x != "default" for x in (paths or [])):
        notes.append("NCCL paths (shm, socket) are NCCL settings and gloo ignores them: with gloo only "
                     "'default' is measured.")
    return backend, ["default"], notes


def _write_log(log_dir: str, op: str, path: str, text: str) -> None:
    name = f"nccl_{path}.log" if op == "all_reduce" else f"nccl_{op}_{path}.log"
    with open(os.path.join(log_dir, name), "w") as f:
        f.write(text)


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
        rows.append({"op": r.op, "path": r.path if r.backend == "nccl" else "gloo", "ranks": r.nproc,
                     "busbw_at": row["busbw_gbps"], "measured_at": row["bytes"],
                     "peak": best["busbw_gbps"], "peak_at": best["bytes"]})
    cols = [("op", "text"), ("path", "text"), ("ranks", "int"),
            ("busbw_at", "rate:GB/s", f"busbw at {format_bytes(at_bytes)}")]
    if any(x["measured_at"] != at_bytes for x in rows):    # a sweep that did not reach at_bytes
        cols.append(("measured_at", "bytes", "(nearest size)"))
    cols += [("peak", "rate:GB/s", "peak busbw"), ("peak_at", "bytes", "at")]
    return Table(cols, rows)


if __name__ == "__main__":
    args = sys.argv[1:]
    sys.exit(_worker(args) if args[:1] == ["--worker"] else cli(args))
