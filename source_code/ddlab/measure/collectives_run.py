"""Running a collective sweep: :func:`sweep` starts one worker process per GPU (NCCL) or two CPU
processes (gloo) through :func:`ddlab.measure.launch.run` with torchrun, each running
:mod:`ddlab.measure.collectives_worker`, and returns a :class:`ddlab.measure.collectives.SweepResult`;
:func:`compare_paths` sweeps once per NCCL path, :func:`compare_levels` once per ``NCCL_P2P_LEVEL``.

The NCCL *paths* (:mod:`ddlab.system.nccl`) are environments that make NCCL choose a different
transport between GPUs of one machine, so a learner sees what NVLink peer-to-peer is worth.
NVLink multicast is NCCL's choice unless the path turns it off (``shm`` and ``socket`` do,
so nothing bypasses the host or the network) or the caller passes ``multicast_off=True``; a
sweep's ``provenance["nccl_env"]`` records every NCCL variable its workers saw.
"""
from __future__ import annotations

import os
import tempfile
from typing import Mapping, Optional, Sequence

from ddlab.base import files, worker_report
from ddlab.base.paths import SOURCE_DIR
from ddlab.base.units import format_bytes, parse_size
from ddlab.measure import launch
from ddlab.measure.collectives import (AUTO_ITERS, DEFAULT_MAX_BYTES, DTYPES, VALIDATION_KIND,
                                       CollectiveValidationError, SweepResult, check_op, message_sizes)
from ddlab.system import frameworks, nccl


def sweep(op: str = "all_reduce", nproc: Optional[int] = None, backend: Optional[str] = None,
          path: str = "default", min_bytes=8, max_bytes=None, factor: int = 2,
          sizes: Optional[Sequence[int]] = None, iters: Optional[int] = None,
          warmup: Optional[int] = None, dtype: str = "float32",
          env: Optional[Mapping[str, Optional[str]]] = None, timeout: Optional[float] = None,
          nccl_debug: bool = False, command=None, inventory=None, echo: bool = False,
          multicast_off: bool = False, isolated: bool = False, graph: bool = False,
          _inject_error: bool = False) -> SweepResult:
    """Measure ``op`` over message sizes with ``nproc`` processes; returns a :class:`SweepResult`.

    backend: ``"nccl"`` (one process per GPU; the default when this machine has 2 or more) or
    ``"gloo"`` (CPU processes, 2 by default; the default with 0 or 1 GPU). ``path`` picks an NCCL environment
    (a name or alias of :data:`ddlab.system.nccl.PATHS`); with gloo only ``"default"`` means anything.
    ``multicast_off`` turns NVLink multicast off for this sweep (:data:`ddlab.system.nccl.MULTICAST_OFF`)
    whatever the path; without it the path decides (see :class:`ddlab.system.nccl.NcclPath`). Sizes run
    from ``min_bytes`` to ``max_bytes`` (default 1 GiB on GPUs, 64 MiB on CPU; ``"512M"``-style strings accepted)
    by ``factor``, or exactly ``sizes``. ``iters``/``warmup`` default to an automatic choice
    that keeps each size to a fraction of a second. ``nccl_debug`` runs with NCCL_DEBUG=INFO
    and keeps the log in ``.nccl_log_text``. ``isolated`` times each call alone, after a barrier with the
    devices idle, as a training step's all-reduce of one bucket runs (:mod:`ddlab.measure.collectives_worker`),
    instead of back-to-back calls as nccl-tests does; ``graph`` (NCCL only) captures each call in a CUDA
    graph and times its replays so. A wrong result raises
    :class:`~ddlab.measure.collectives.CollectiveValidationError`; a crash or timeout raises
    :class:`ddlab.measure.launch.LaunchError`.
    """
    from ddlab.system import provenance

    check_op(op)
    path = nccl.get(path).name
    backend, nproc = _backend_and_nproc(backend, nproc, path, dtype, iters, warmup)
    if graph and backend != "nccl":
        raise ValueError("graph=True captures the call in a CUDA graph: it needs the nccl backend (GPUs)")
    sizes = _sweep_sizes(op, sizes, min_bytes, max_bytes, factor, nproc, dtype, backend)
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

    launched, worker = _run_workers(op, backend, dtype, sizes, iters, warmup, auto, nproc, overrides, timeout,
                                    echo, _inject_error, isolated, graph)
    if command is None:
        command = (f"ddlab.measure.collectives_run.sweep(op={op!r}, backend={backend!r}, path={path!r}, nproc={nproc}, "
                   f"sizes={format_bytes(sizes[0])}..{format_bytes(sizes[-1])}, dtype={dtype!r}"
                   + (", isolated=True" if isolated else "") + (", graph=True" if graph else "") + ")")
    prov = provenance.collect(command, inventory=inventory)
    # Record the NCCL variables the workers saw (this process's environment is not theirs).
    prov["nccl_env"] = nccl.recorded_environment(launch.worker_environment(overrides))
    shown_env = {k: v for k, v in overrides.items()
                 if v is not None and k != "PYTHONPATH" and (backend == "nccl" or not k.startswith("NCCL_"))}
    return SweepResult(op=op, backend=backend, path=path, env=shown_env, nproc=nproc, rows=worker["rows"],
                       provenance=prov, source="live", dtype=dtype,
                       nccl_log_text=launched.output if nccl_debug else None,
                       meta={k: v for k, v in worker.items() if k != "rows"})


def _backend_and_nproc(backend: Optional[str], nproc: Optional[int], path: str, dtype: str,
                       iters: Optional[int], warmup: Optional[int]) -> tuple:
    """(backend, nproc) of a sweep, after checking them with the path, dtype, iters and warmup."""
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    gpus = frameworks.gpu_count()
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
    return backend, nproc


def _sweep_sizes(op: str, sizes, min_bytes, max_bytes, factor: int, nproc: int, dtype: str, backend: str) -> list:
    """The message sizes: ``sizes`` checked (each a whole number of elements on every rank), or
    ``min_bytes`` to ``max_bytes`` (default by backend) by ``factor``."""
    if sizes is None:
        lo = parse_size(min_bytes)
        hi = parse_size(max_bytes) if max_bytes is not None else DEFAULT_MAX_BYTES[backend]
        return message_sizes(op, lo, hi, nproc, dtype, factor)
    unit = DTYPES[dtype][1] * (1 if op == "all_reduce" else nproc)
    sizes = [parse_size(s) for s in sizes]
    bad = [s for s in sizes if s < unit or s % unit]
    if not sizes or bad:
        raise ValueError(f"sizes must be positive multiples of {unit} bytes for {op} of {dtype} "
                         f"on {nproc} ranks; got {bad or sizes}")
    return sizes


def _run_workers(op: str, backend: str, dtype: str, sizes: list, iters, warmup, auto: dict, nproc: int,
                 overrides: dict, timeout: float, echo: bool, inject_error: bool, isolated: bool = False,
                 graph: bool = False) -> tuple:
    """Launch the workers under torchrun: (the launch's result, the workers' result JSON). Wrong
    values a worker reports raise :class:`CollectiveValidationError`."""
    with tempfile.TemporaryDirectory(prefix="ddlab-coll-") as tmp:
        out = os.path.join(tmp, "result.json")
        argv = ["-m", "ddlab.measure.collectives_worker", "--op", op, "--backend", backend,
                "--dtype", dtype, "--sizes", ",".join(map(str, sizes)), "--out", out,
                "--iters", str(iters or 0), "--warmup", str(-1 if warmup is None else warmup),
                "--target-s", str(auto["target_s"]), "--min-iters", str(auto["min_iters"]),
                "--max-iters", str(auto["max_iters"])]
        if inject_error:
            argv.append("--inject-error")
        argv += ["--isolated"] * isolated + ["--graph"] * graph
        try:
            launched = launch.run(argv, launcher="torchrun", nproc=nproc, env=overrides,
                                  timeout=timeout, echo=echo)
        except launch.LaunchError as exc:
            wrong = validation_failures(exc.result.output if exc.result is not None else "")
            if wrong:
                raise CollectiveValidationError(
                    f"{op} returned wrong values, so no bandwidth is reported:\n  " + "\n  ".join(wrong)) from None
            raise
        return launched, files.read_json(out, "all-reduce workers' result")


def validation_failures(output: str) -> list:
    """What the workers of a failed sweep reported as wrong results (one text per rank that saw
    one, by rank), from their reports in the launch's ``output``. A report line cut short by
    the failure is passed over: the launch's own error is raised then."""
    found = worker_report.parse(output, kind=VALIDATION_KIND, strict=False)
    return [r["message"] for r in sorted(found, key=lambda r: r["rank"])]


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
    :func:`ddlab.measure.collectives.level_table` prints it. Needs two GPUs: NCCL levels act only between GPUs."""
    if isinstance(levels, str):
        levels = [p.strip() for p in levels.split(",") if p.strip()]
    levels = [str(lv).strip().upper() for lv in levels]
    bad = [lv for lv in levels if lv not in nccl.P2P_LEVELS]
    if bad:
        raise ValueError(f"unknown NCCL_P2P_LEVEL {bad[0]!r}; choose from {', '.join(nccl.P2P_LEVELS)}")
    if frameworks.gpu_count() < 2:
        raise ValueError("the level sweep needs at least 2 GPUs: NCCL_P2P_LEVEL acts only on the P2P transport "
                         "between GPUs, and CPU processes (gloo) have no NCCL")
    kwargs.setdefault("nccl_debug", True)
    return {lv: sweep(op=op, backend="nccl", path=lv, sizes=sizes, **kwargs) for lv in levels}

