"""One rank of a collective sweep, started by torchrun as ``python -m
ddlab.measure.collectives_worker`` (see :func:`ddlab.measure.collectives_run.sweep`). For every
message size each worker

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

With ``--isolated`` each timed call runs alone instead, as a training step's all-reduce of one
bucket does: the ranks meet at a barrier and wait for their devices before every call, and each
call is timed by itself. A rank that reached the call early also times its wait for the other, so a
call's time is the shortest any rank measured (the last to arrive waited for nobody); the row
reports the median over the calls (``time_us``) and the median of each call's longest
(``time_us_max``). ``--graph`` (GPUs only) captures the call in a CUDA graph and times each replay
alone the same way, as a step captured whole (``--cuda-graph`` training) replays its all-reduces.

It writes the rows (and the devices, torch and NCCL versions it saw) as JSON to ``--out``; a
wrong element is reported (:mod:`ddlab.base.worker_report`, kind
:data:`ddlab.measure.collectives.VALIDATION_KIND`, by the rank that saw it) and the worker exits 3.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
from typing import Sequence

from ddlab.base import files, worker_report
from ddlab.measure.collectives import DTYPES, OPS, VALIDATION_KIND, bandwidths, format_time_us


def _parser():
    import argparse
    p = argparse.ArgumentParser(prog="python -m ddlab.measure.collectives_worker")
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
    p.add_argument("--isolated", action="store_true",
                   help="time each call alone, after a barrier and an idle device (a training step's all-reduce)")
    p.add_argument("--graph", action="store_true",
                   help="capture the call in a CUDA graph and time each replay alone (GPUs only)")
    p.add_argument("--inject-error", action="store_true",
                   help="corrupt one element of the last rank's result (proves validation fires)")
    return p


class _Rank:
    """This rank in its process group: its device, the collectives, the input pattern and the timer."""

    def __init__(self, torch, dist, backend: str, dtype_name: str):
        self.torch, self.dist = torch, dist
        self.rank, self.n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local_rank = int(os.environ.get("LOCAL_RANK", self.rank))
        self.gpu = backend == "nccl"
        if self.gpu:
            torch.cuda.set_device(local_rank)
            self.dev = torch.device("cuda", local_rank)
            # device_id: create the NCCL communicator now, not at the first timed call.
            dist.init_process_group("nccl", device_id=self.dev)
        else:
            self.dev = torch.device("cpu")
            dist.init_process_group("gloo")
        self.dtype = getattr(torch, dtype_name)
        self.esize = DTYPES[dtype_name][1]
        # Input values are (index % m + 1) * (rank + 1): small integers whose sum over all ranks
        # stays exactly representable in the dtype, so the check can demand exact equality.
        self.tri = self.n * (self.n + 1) // 2
        self.m = max(2, min(4093, (DTYPES[dtype_name][2] - 1) // self.tri))
        # torch >= 2.12 renamed the single-tensor forms; older versions only have the old names.
        self.all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        self.reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

    def sync(self):
        if self.gpu:
            self.torch.cuda.synchronize()

    def pattern(self, out, start, mult):
        """out[i] = ((start + i) % m + 1) * mult, computed on the device in place."""
        torch = self.torch
        idx = torch.arange(start, start + out.numel(), device=self.dev,
                           dtype=torch.int32 if start + out.numel() < 2 ** 31 else torch.int64)
        out.copy_(idx.remainder_(self.m).add_(1).mul_(mult))
        return out

    def time_calls(self, fn, k):
        """Seconds per call of ``k`` back-to-back calls of ``fn`` on this rank."""
        self.dist.barrier()
        self.sync()
        if self.gpu:
            start, end = self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)
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

    def graphed(self, fn):
        """``fn`` captured in a CUDA graph, after a warm-up on a side stream: returns the replay."""
        torch = self.torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        self.sync()
        return graph.replay

    def across_ranks(self, values, op):
        t = self.torch.tensor(values, dtype=self.torch.float64, device=self.dev)
        self.dist.all_reduce(t, op=op)
        return t.tolist()

    def gather_times(self, values: list) -> list:
        """Every rank's ``values`` (a list of numbers, as long on every rank), rank by rank."""
        mine = self.torch.tensor(values, dtype=self.torch.float64, device=self.dev)
        every = self.torch.empty(self.n * len(values), dtype=self.torch.float64, device=self.dev)
        self.all_gather(every, mine)
        flat, k = every.tolist(), len(values)
        return [flat[i * k:(i + 1) * k] for i in range(self.n)]

    def connect(self):
        """NCCL connects lazily at the first collective; do that before the first timed size."""
        w = self.torch.ones(1 << 20, dtype=self.dtype, device=self.dev)
        for _ in range(3):
            self.dist.all_reduce(w)
        self.sync()

    def buffers(self, op: str, nbytes: int) -> tuple:
        """(count, out, fn, expected) of one size: the element count of nccl-tests' column, the
        result buffer, the call, and the exact result every element of ``out`` must hold."""
        import functools
        torch, dist, dev, dtype, n, rank = self.torch, self.dist, self.dev, self.dtype, self.n, self.rank
        if op == "all_reduce":
            count = nbytes // self.esize
            buf = self.pattern(torch.empty(count, dtype=dtype, device=dev), 0, rank + 1)
            return count, buf, functools.partial(dist.all_reduce, buf), self.pattern(torch.empty_like(buf), 0, self.tri)
        count = nbytes // (self.esize * n)       # per rank, as nccl-tests' count column (the receive count)
        if op == "all_gather":
            inp = self.pattern(torch.empty(count, dtype=dtype, device=dev), 0, rank + 1)
            out = torch.full((count * n,), -1, dtype=dtype, device=dev)
            expected = torch.empty_like(out)
            for j in range(n):
                self.pattern(expected[j * count:(j + 1) * count], 0, j + 1)
            return count, out, functools.partial(self.all_gather, out, inp), expected
        inp = self.pattern(torch.empty(count * n, dtype=dtype, device=dev), 0, rank + 1)
        out = torch.full((count,), -1, dtype=dtype, device=dev)
        return count, out, functools.partial(self.reduce_scatter, out, inp), \
            self.pattern(torch.empty_like(out), rank * count, self.tri)


def _checked_call(r: _Rank, a, nbytes: int, count: int, out, fn, expected) -> tuple:
    """Step 1: one untimed call, every element checked. (the slowest rank's seconds for it, the
    wrong element this rank saw or "", whether any rank saw one)."""
    r.sync()
    t0 = time.perf_counter()
    fn()
    r.sync()
    probe = time.perf_counter() - t0
    if a.inject_error and r.rank == r.n - 1:
        out[out.numel() // 2] += 1
    bad = ""
    if not r.torch.equal(out, expected):
        wrong = (out != expected).nonzero()
        i = int(wrong[0])
        bad = (f"{a.op} rank {r.rank} of {r.n}, {nbytes} bytes ({count} {DTYPES[a.dtype][0]} per call): first wrong "
               f"element at index {i}: got {out[i].item()!r}, expected {expected[i].item()!r} "
               f"({wrong.numel()} of {out.numel()} elements wrong)")
    flag, probe = r.across_ranks([1.0 if bad else 0.0, probe], r.dist.ReduceOp.MAX)
    return probe, bad, bool(flag)


def _timed_row(r: _Rank, a, nbytes: int, count: int, fn, probe: float) -> dict:
    """Steps 2 and 3: the warm-up, then the timed calls, as one row."""
    # 2. warm-up (also estimates the time per call, so the iterations fit the time budget).
    warm = a.warmup if a.warmup >= 0 else max(1, min(5, int(0.02 / max(probe, 1e-9))))
    est = probe
    if warm:
        est = r.across_ranks([r.time_calls(fn, warm)], r.dist.ReduceOp.MAX)[0]
    iters = a.iters or max(a.min_iters, min(a.max_iters, math.ceil(a.target_s / max(est, 1e-9))))

    if a.isolated or a.graph:
        row = _isolated_row(r, a, nbytes, count, r.graphed(fn) if a.graph else fn, min(iters, ISOLATED_MAX_ITERS),
                            warm)
        return dict(row, graph=True) if a.graph else row
    # 3. timed calls: average per call on each rank, then over ranks (nccl-tests' default).
    per_rank = [t for (t,) in r.gather_times([r.time_calls(fn, iters)])]
    sec = sum(per_rank) / r.n
    algbw, busbw = bandwidths(a.op, nbytes, sec, r.n)
    return {"bytes": nbytes, "count": count, "time_us": sec * 1e6, "time_us_max": max(per_rank) * 1e6,
            "algbw_gbps": algbw, "busbw_gbps": busbw, "iters": iters, "warmup": warm}


ISOLATED_MAX_ITERS = 200      # each isolated call adds a barrier and a synchronize: fewer of them


def _isolated_row(r: _Rank, a, nbytes: int, count: int, fn, iters: int, warm: int) -> dict:
    """Step 3 with ``--isolated``: each call timed alone on every rank; a call's time is the shortest
    any rank measured, the row's the median over the calls."""
    import statistics
    # [rank][call]: each call timed by itself, after a barrier with the device idle
    per_rank = r.gather_times([r.time_calls(fn, 1) for _ in range(iters)])
    shortest = [min(calls) for calls in zip(*per_rank)]
    longest = [max(calls) for calls in zip(*per_rank)]
    sec = statistics.median(shortest)
    algbw, busbw = bandwidths(a.op, nbytes, sec, r.n)
    return {"bytes": nbytes, "count": count, "time_us": sec * 1e6, "time_us_max": statistics.median(longest) * 1e6,
            "algbw_gbps": algbw, "busbw_gbps": busbw, "iters": iters, "warmup": warm, "isolated": True}


def _write_meta(r: _Rank, a, rows: list) -> None:
    """Rank 0 writes the rows, the devices every rank saw and the versions to ``--out``."""
    torch = r.torch
    devices = [None] * r.n
    name = torch.cuda.get_device_name(r.dev) if r.gpu else "cpu"
    r.dist.all_gather_object(devices, name)
    if r.rank == 0:
        meta = {"op": a.op, "backend": a.backend, "nproc": r.n, "dtype": a.dtype, "torch": torch.__version__,
                "devices": devices, "timing": ("cuda events" if r.gpu else "perf_counter between barriers")
                + (", each call alone" if a.isolated or a.graph else "")
                + (", captured in a CUDA graph" if a.graph else ""),
                "rows": rows}
        if r.gpu:
            v = torch.cuda.nccl.version()
            meta["nccl_version"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        files.write_text(a.out, json.dumps(meta))


def main(argv: Sequence[str]) -> int:
    """One rank of a sweep (started by torchrun; see :func:`ddlab.measure.collectives_run.sweep`)."""
    from ddlab.measure import launch
    launch.install_hang_traceback()   # before torch: on SIGTERM (a timeout) print where this rank was

    import torch
    import torch.distributed as dist
    from torch.distributed.elastic.multiprocessing.errors import record

    # record: an exception of this rank goes to torchrun's error file, with its time
    # (ddlab.measure.rank_failures reads it to name the rank that failed first).
    return record(_sweep)(argv, torch, dist)


def _sweep(argv: Sequence[str], torch, dist) -> int:
    """The sweep of one rank: each size checked, then timed; rank 0 writes the result."""
    a = _parser().parse_args(argv)
    r = _Rank(torch, dist, a.backend, a.dtype)
    r.connect()
    tname = DTYPES[a.dtype][0]
    rows = []
    if r.rank == 0:
        print(f"# {a.op} on {r.n} ranks ({a.backend}), {a.dtype}", flush=True)
        print(f"# {'size':>10}  {'count':>12}  {'type':>8}  {'time':>8}  {'algbw':>7}  {'busbw':>7}  {'iters':>5}",
              flush=True)
    for nbytes in (int(s) for s in a.sizes.split(",")):
        count, out, fn, expected = r.buffers(a.op, nbytes)
        probe, bad, any_bad = _checked_call(r, a, nbytes, count, out, fn, expected)
        if any_bad:
            if bad:
                worker_report.emit(VALIDATION_KIND, rank=r.rank, op=a.op, bytes=nbytes, message=bad)
            dist.destroy_process_group()
            return 3
        del expected
        # For in-place all-reduce the values now double (n-fold) at every call and may reach
        # inf during timing; that changes nothing in NCCL's or gloo's speed (no data-dependent
        # paths, no floating-point traps), and the check above ran on a fresh input.
        row = _timed_row(r, a, nbytes, count, fn, probe)
        rows.append(row)
        if r.rank == 0:
            print(f"{nbytes:>12}  {count:>12}  {tname:>8}  {format_time_us(row['time_us']):>8}  {row['algbw_gbps']:>7.2f}  "
                  f"{row['busbw_gbps']:>7.2f}  {row['iters']:>5}", flush=True)
        # Free this size's buffers before allocating the next (1 GiB ones add up).
        out = fn = None

    _write_meta(r, a, rows)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
