"""``ddlab allreduce``: sweep a collective under the NCCL paths (or gloo on CPU processes) with
:func:`ddlab.measure.collectives_run.sweep`, print nccl-tests-style tables and the summary;
:func:`cli_plan` says what runs on a machine with a given number of GPUs.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Optional, Sequence

from ddlab.base import files
from ddlab.base.units import parse_size
from ddlab.measure import collectives_run
from ddlab.measure.collectives import DTYPES, OPS, CollectiveValidationError, results_to_json, summary, write_json
from ddlab.system import frameworks, nccl


def _parser():
    """The arguments of ``ddlab allreduce``."""
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
    p.add_argument("--isolated", action="store_true",
                   help="time each call alone after a barrier, as a training step's all-reduce runs "
                        "(default: back-to-back calls, as nccl-tests)")
    p.add_argument("--graph", action="store_true",
                   help="capture each call in a CUDA graph and time each replay alone (GPUs only)")
    p.add_argument("--log-dir", default=None, help="write each run's output (NCCL log) to DIR/nccl_<path>.log "
                                                   "(implies --nccl-debug)")
    p.add_argument("--json", action="store_true", help="print the results as JSON instead of tables")
    p.add_argument("--out", default=None, help="also write the results as JSON to this file")
    return p


def cli(argv: list) -> int:
    """``ddlab allreduce``: sweep a collective under NCCL paths (or gloo on CPU), print tables."""
    a = _parser().parse_args(argv)

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
    gpus = frameworks.gpu_count()
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
            r = collectives_run.sweep(op=a.op, nproc=a.nproc, backend=backend, path=path, min_bytes=min_bytes,
                                      max_bytes=max_bytes, factor=a.factor, iters=a.iters, warmup=a.warmup,
                                      dtype=a.dtype, timeout=a.timeout, nccl_debug=nccl_debug, inventory=inv,
                                      multicast_off=a.multicast_off, isolated=a.isolated, graph=a.graph,
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
    files.write_text(os.path.join(log_dir, name), text)
