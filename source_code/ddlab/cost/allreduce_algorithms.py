"""All-reduce, simulated: n ranks in one process, numpy buffers, every transfer counted.

Data-parallel training ends every step with an *all-reduce*: each rank holds a gradient
buffer of ``S`` bytes, and afterwards every rank holds the element-wise sum (divided by
``n`` it is the average). How the bytes travel decides what it costs. Three ways, each
simulated step by step on real numbers so that the result can be checked against the
plain sum and the traffic of every rank read off:

* :func:`naive_allreduce` - *reduce to a root, then broadcast*: every other rank sends its
  whole buffer to the root, which adds them and sends the sum back to each. The root sends
  ``(n-1) S`` and receives ``(n-1) S``: its one link carries everything, and the time grows
  with ``n``.
* :func:`all_to_all_allreduce` - *everyone to everyone*: every rank sends its whole buffer
  to each of the others and adds what it receives. No root, but each rank sends ``(n-1) S``.
* :func:`ring_allreduce` - the ranks form a ring ``0 -> 1 -> ... -> n-1 -> 0`` and each
  buffer is cut into ``n`` chunks. *Reduce-scatter*: in each of ``n-1`` steps every rank
  sends one chunk to its right neighbour, which adds it to its own copy; afterwards rank
  ``r`` holds the complete sum of chunk ``(r+1) mod n``. *All-gather*: in ``n-1`` more steps
  the complete chunks travel round the ring, each overwriting the receiver's copy. Every
  rank sends one chunk (``S/n``) per step, so ``2(n-1) S/n`` in all: the factor
  :func:`ring_traffic_factor` ``2(n-1)/n``, below 2 whatever ``n``.

Every function returns an :class:`AllReduceRun`: the buffers each rank ends with, and the
steps with every transfer (source, destination, chunk, bytes). Its ``time(alpha, beta)``
applies the alpha-beta model of :mod:`ddlab.cost.alpha_beta` step by step (a rank's link carries
its messages one after another; all ranks work at once), and for the ring it equals
:func:`ddlab.cost.alpha_beta.ring_allreduce_time`.

:func:`gradient_averaging` shows why the all-reduce *averages*: the mean of the gradients of
equal shards of a batch is the gradient of the whole batch.

A little over 400 lines: three simulated algorithms with their transfer accounting, tables and
the gradient-averaging demonstration, each short.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Optional, Sequence

import numpy as np

from ddlab.base import units
from ddlab.base.tables import Table

ALGORITHMS = ("naive", "all-to-all", "ring")


# ----------------------------------------------------------------------------- records
@dataclass(frozen=True)
class Transfer:
    """One message: ``src`` sends ``nbytes`` to ``dst``. ``chunk`` is the ring chunk it
    carries (None: the whole buffer); ``op`` is what the receiver does with it: "add" it to
    its own copy or "copy" it over (the all-gather and the broadcast)."""
    src: int
    dst: int
    nbytes: int
    chunk: Optional[int] = None
    op: str = "add"


@dataclass
class Step:
    """One round in which all ranks send at once. ``phase`` names the part of the algorithm
    ("reduce", "broadcast", "exchange", "reduce-scatter", "all-gather"), ``number`` counts
    from 1 within the phase. ``before``: each rank's buffer when the step starts (kept only
    when the run was asked to keep states, for drawings)."""
    phase: str
    number: int
    transfers: list
    before: Optional[list] = None

    def sent(self, n: int) -> np.ndarray:
        """Bytes each of the ``n`` ranks sends in this step."""
        out = np.zeros(n, dtype=np.int64)
        for t in self.transfers:
            out[t.src] += t.nbytes
        return out

    def received(self, n: int) -> np.ndarray:
        out = np.zeros(n, dtype=np.int64)
        for t in self.transfers:
            out[t.dst] += t.nbytes
        return out

    def messages(self, n: int) -> np.ndarray:
        """The larger of the messages each rank sends and receives in this step."""
        sends, recvs = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
        for t in self.transfers:
            sends[t.src] += 1
            recvs[t.dst] += 1
        return np.maximum(sends, recvs)


@dataclass
class AllReduceRun:
    """What one simulated all-reduce did. ``results[r]``: the buffer rank ``r`` ended with;
    ``buffer_bytes``: the size ``S`` of one rank's buffer."""
    algorithm: str
    n: int
    buffer_bytes: int
    results: list
    steps: list = field(default_factory=list)
    chunk_bytes: Optional[list] = None   # ring only: the size of each chunk

    # ---- traffic
    def sent_per_step(self) -> np.ndarray:
        """Bytes sent, one row per step, one column per rank."""
        return np.array([s.sent(self.n) for s in self.steps], dtype=np.int64).reshape(len(self.steps), self.n)

    def received_per_step(self) -> np.ndarray:
        return np.array([s.received(self.n) for s in self.steps], dtype=np.int64).reshape(len(self.steps), self.n)

    def bytes_sent(self) -> np.ndarray:
        """Total bytes each rank sent."""
        return self.sent_per_step().sum(axis=0)

    def bytes_received(self) -> np.ndarray:
        return self.received_per_step().sum(axis=0)

    def busiest_rank(self) -> int:
        """The rank whose link carries the most (sent or received; the lowest rank on a tie)."""
        return int(np.argmax(np.maximum(self.bytes_sent(), self.bytes_received())))

    def traffic_factor(self) -> float:
        """Bytes the busiest rank sends or receives, in buffers: its traffic / S."""
        most = max(self.bytes_sent().max(), self.bytes_received().max())
        return float(most) / self.buffer_bytes if self.buffer_bytes else 0.0

    # ---- time
    def time(self, alpha_s: float, beta_bytes_per_s: float) -> float:
        """Seconds by the alpha-beta model: each step lasts as long as its busiest link, whose
        messages go one after another (``messages x alpha + bytes / beta``, the larger of the
        sending and the receiving side); all links work at once, in both directions."""
        if not alpha_s >= 0 or not beta_bytes_per_s > 0:
            raise ValueError(f"need alpha >= 0 s and beta > 0 B/s, got {alpha_s} and {beta_bytes_per_s}")
        total = 0.0
        for s in self.steps:
            per_rank = (s.messages(self.n) * alpha_s
                        + np.maximum(s.sent(self.n), s.received(self.n)) / beta_bytes_per_s)
            total += float(per_rank.max())
        return total

    # ---- checks and text
    def max_error(self, buffers: Sequence) -> float:
        """Largest absolute difference between any rank's result and the plain sum of ``buffers``."""
        expected = np.sum(np.stack([np.asarray(b) for b in buffers]), axis=0)
        return max(float(np.max(np.abs(np.asarray(r, dtype=float) - expected), initial=0.0)) for r in self.results)

    def table(self) -> Table:
        """Step by step: the phase and the bytes each rank sends, then the totals (a
        :class:`ddlab.base.tables.Table`: HTML in Jupyter, aligned text in a terminal)."""
        cols = [("step", "text"), ("phase", "text")] + [(f"rank {r}", "count") for r in range(self.n)]
        rows = [dict({"step": str(i), "phase": f"{s.phase} {s.number}"},
                     **{f"rank {r}": int(b) for r, b in enumerate(s.sent(self.n))})
                for i, s in enumerate(self.steps, 1)]
        rows.append(dict({"step": "total", "phase": "sent"}, **{f"rank {r}": int(b) for r, b in enumerate(self.bytes_sent())}))
        rows.append(dict({"step": "total", "phase": "received"},
                         **{f"rank {r}": int(b) for r, b in enumerate(self.bytes_received())}))
        return Table(cols, rows, title=f"{self.algorithm} all-reduce on {self.n} ranks, a buffer of "
                     f"{self.buffer_bytes:,} bytes per rank: bytes sent by each rank in each step",
                     notes=f"busiest rank: {self.busiest_rank()}, carrying {self.traffic_factor():.4g} buffers")

    def __str__(self) -> str:
        return str(self.table())


# ----------------------------------------------------------------------------- helpers
def _check_buffers(buffers) -> list:
    if isinstance(buffers, np.ndarray) and buffers.ndim >= 1:
        buffers = list(buffers)
    if not isinstance(buffers, (list, tuple)) or len(buffers) < 1:
        raise ValueError("give one buffer per rank: a list of 1-D arrays of the same length")
    arrays = [np.array(b, copy=True).reshape(-1) for b in buffers]
    shapes = {a.shape for a in arrays}
    if len(shapes) != 1:
        raise ValueError(f"every rank's buffer must have the same length; got lengths "
                         f"{sorted(a.size for a in arrays)}")
    dtypes = {a.dtype for a in arrays}
    if len(dtypes) != 1:
        raise ValueError(f"every rank's buffer must have the same dtype; got {sorted(map(str, dtypes))}")
    if not np.issubdtype(arrays[0].dtype, np.number):
        raise ValueError(f"buffers must hold numbers, got dtype {arrays[0].dtype}")
    return arrays


def chunk_bounds(elements: int, n: int) -> list:
    """Where the ring cuts a buffer of ``elements`` into ``n`` chunks: (start, stop) pairs,
    as equal as possible (the first ``elements % n`` chunks one element longer; a chunk is
    empty when there are fewer elements than ranks)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"the number of ranks must be a positive integer, got {n!r}")
    if elements < 0:
        raise ValueError("a buffer cannot have a negative length")
    base, extra = divmod(int(elements), int(n))
    bounds, start = [], 0
    for c in range(n):
        stop = start + base + (1 if c < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def ring_traffic_factor(n: int) -> Fraction:
    """``2(n-1)/n``: the buffers each rank sends (and receives) in a ring all-reduce, exactly."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"the number of ranks must be a positive integer, got {n!r}")
    return Fraction(2 * (int(n) - 1), int(n))


def _snapshot(bufs, keep):
    return [b.copy() for b in bufs] if keep else None


# ----------------------------------------------------------------------------- algorithms
def naive_allreduce(buffers, root: int = 0, keep_states: bool = False) -> AllReduceRun:
    """Reduce to ``root`` (every other rank sends its whole buffer there, the root adds),
    then broadcast (the root sends the sum to every other rank)."""
    bufs = _check_buffers(buffers)
    n, size = len(bufs), bufs[0].nbytes
    if isinstance(root, bool) or not isinstance(root, (int, np.integer)) or not 0 <= root < n:
        raise ValueError(f"root must be a rank between 0 and {n - 1}, got {root!r}")
    steps = []
    if n > 1:
        others = [r for r in range(n) if r != root]
        before = _snapshot(bufs, keep_states)
        incoming = [bufs[r].copy() for r in others]          # all sent at once
        for data in incoming:
            bufs[root] += data
        steps.append(Step("reduce", 1, [Transfer(r, root, size) for r in others], before))
        before = _snapshot(bufs, keep_states)
        for r in others:
            bufs[r][...] = bufs[root]
        steps.append(Step("broadcast", 1, [Transfer(root, r, size, op="copy") for r in others], before))
    return AllReduceRun("naive", n, size, bufs, steps)


def all_to_all_allreduce(buffers, keep_states: bool = False) -> AllReduceRun:
    """Every rank sends its whole buffer to every other rank, and adds what it receives."""
    bufs = _check_buffers(buffers)
    n, size = len(bufs), bufs[0].nbytes
    steps = []
    if n > 1:
        before = _snapshot(bufs, keep_states)
        originals = [b.copy() for b in bufs]
        for dst in range(n):
            for src in range(n):
                if src != dst:
                    bufs[dst] += originals[src]
        steps.append(Step("exchange", 1, [Transfer(s, d, size) for s in range(n) for d in range(n) if s != d],
                          before))
    return AllReduceRun("all-to-all", n, size, bufs, steps)


def ring_allreduce(buffers, keep_states: bool = False) -> AllReduceRun:
    """Ring all-reduce: ``n-1`` reduce-scatter steps, then ``n-1`` all-gather steps; in each,
    rank ``r`` sends one chunk to rank ``(r+1) mod n``. ``keep_states`` stores each rank's
    buffer at the start of every step (``Step.before``), for :func:`ddlab.views.diagrams.ring_allreduce`."""
    bufs = _check_buffers(buffers)
    n, size = len(bufs), bufs[0].nbytes
    item = bufs[0].itemsize
    bounds = chunk_bounds(bufs[0].size, n)
    chunk_bytes = [(b - a) * item for a, b in bounds]
    steps = []

    def do_step(phase, number, chunk_of_sender, op):
        before = _snapshot(bufs, keep_states)
        # Every rank sends at the same time: read all outgoing chunks before anyone writes.
        outgoing = []
        for r in range(n):
            c = chunk_of_sender(r)
            a, b = bounds[c]
            outgoing.append((r, (r + 1) % n, c, bufs[r][a:b].copy()))
        transfers = []
        for src, dst, c, data in outgoing:
            a, b = bounds[c]
            if op == "add":
                bufs[dst][a:b] += data
            else:
                bufs[dst][a:b] = data
            transfers.append(Transfer(src, dst, chunk_bytes[c], chunk=c, op=op))
        steps.append(Step(phase, number, transfers, before))

    for s in range(n - 1):       # reduce-scatter: rank r sends chunk (r - s) mod n
        do_step("reduce-scatter", s + 1, lambda r, s=s: (r - s) % n, "add")
    for s in range(n - 1):       # all-gather: rank r sends its complete chunk (r + 1 - s) mod n
        do_step("all-gather", s + 1, lambda r, s=s: (r + 1 - s) % n, "copy")
    return AllReduceRun("ring", n, size, bufs, steps, chunk_bytes=chunk_bytes)


def allreduce(buffers, algorithm: str = "ring", **kwargs) -> AllReduceRun:
    """Run the named algorithm ("naive", "all-to-all" or "ring") on ``buffers``."""
    funcs = {"naive": naive_allreduce, "all-to-all": all_to_all_allreduce, "ring": ring_allreduce}
    if algorithm not in funcs:
        raise ValueError(f"unknown all-reduce algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}")
    return funcs[algorithm](buffers, **kwargs)


def random_buffers(n: int, elements: int, seed: int = 0, dtype=np.float32) -> list:
    """``n`` buffers of ``elements`` random numbers each, as gradients of ``n`` ranks might be."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"the number of ranks must be a positive integer, got {n!r}")
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(int(elements)).astype(dtype) for _ in range(n)]


def compare(ranks: Sequence[int] = (2, 4, 8), elements: int = 1_000_000, dtype=np.float32, seed: int = 0,
            link=None) -> Table:
    """Each algorithm run on ``elements`` random numbers per rank, for each number of ranks,
    as a :class:`ddlab.base.tables.Table`. Without ``link``: what the busiest rank sends (or
    receives), in buffers S, beside 2(n-1)/n. With ``link`` (an ``(alpha_s, beta_bytes_per_s)``
    pair, or anything with ``latency_s`` and ``bandwidth_Bps`` such as a :mod:`ddlab.system.links`
    entry): each algorithm's time by :meth:`AllReduceRun.time` instead. Either way the last
    column says whether every rank of every algorithm ended with the plain sum."""
    if link is not None and not isinstance(link, tuple):
        link = (link.latency_s, link.bandwidth_Bps)
    cols = [("ranks", "int"), ("buffer", "bytes", "buffer S")]
    if link is None:
        cols += [("naive", "number", "naive (root), S"), ("all-to-all", "number", "all-to-all, S"),
                 ("ring", "number", "ring, S"), ("factor", "text", "2(n-1)/n")]
        title = "bytes the busiest rank sends (or receives), in buffers S"
    else:
        cols += [("naive", "time"), ("all-to-all", "time"), ("ring", "time")]
        title = (f"time by the alpha-beta model, alpha = {units.format_time(link[0])}, "
                 f"beta = {units.format_rate(link[1])} per link and direction")
    cols.append(("ok", "text", "all sums right"))
    rows = []
    for n in ranks:
        bufs = random_buffers(n, elements, seed, dtype)
        runs = dict(zip(ALGORITHMS, (allreduce(bufs, a) for a in ALGORITHMS)))
        tol = 1e-3 * n if np.issubdtype(np.dtype(dtype), np.floating) else 0
        row = {"ranks": n, "buffer": runs["ring"].buffer_bytes,
               "ok": "yes" if all(r.max_error(bufs) <= tol for r in runs.values()) else "NO"}
        for a, r in runs.items():
            row[a] = r.traffic_factor() if link is None else r.time(*link)
        if link is None:
            f = ring_traffic_factor(n)
            row["factor"] = f"{f.numerator}/{f.denominator} = {float(f):g}" if f.denominator > 1 else str(f)
        rows.append(row)
    return Table(cols, rows, title=title)


# ----------------------------------------------------------------------------- why average
@dataclass
class GradientAveraging:
    """The gradients of one batch, computed whole and in shards (see :func:`gradient_averaging`)."""
    workers: int
    shard_sizes: list
    full: np.ndarray            # gradient of the mean loss over the whole batch
    shards: list                # gradient of the mean loss over each shard
    mean: np.ndarray            # the plain mean of the shard gradients (what DDP and Horovod compute)
    weighted_mean: np.ndarray   # the mean weighted by shard size (equals ``mean`` for equal shards)
    total: np.ndarray           # their sum

    @property
    def equal_shards(self) -> bool:
        return len(set(self.shard_sizes)) == 1

    @property
    def mean_error(self) -> float:
        """Largest |plain mean - full-batch gradient|: float rounding when the shards are equal."""
        return float(np.max(np.abs(self.mean - self.full)))

    @property
    def weighted_error(self) -> float:
        return float(np.max(np.abs(self.weighted_mean - self.full)))

    @property
    def sum_ratio(self) -> float:
        """|sum| / |full gradient|: how much too long a step the sum would take."""
        return float(np.linalg.norm(self.total) / np.linalg.norm(self.full))

    def __str__(self) -> str:
        np_fmt = lambda v: np.array2string(v, precision=4, suppress_small=True, floatmode="fixed")
        rows = [("full-batch gradient", self.full)]
        rows += [(f"worker {i}'s shard", g) for i, g in enumerate(self.shards)]
        rows += [(f"mean of the {self.workers} shards", self.mean)]
        if not self.equal_shards:
            rows += [("mean weighted by size", self.weighted_mean)]
        rows += [(f"sum of the {self.workers} shards", self.total)]
        width = max(len(label) for label, _ in rows) + 2
        lines = [f"a batch of {sum(self.shard_sizes)} examples split over {self.workers} workers "
                 f"(shards of {', '.join(map(str, self.shard_sizes))}); gradient of the mean loss "
                 f"(w1..w{len(self.full) - 1}, b):", ""]
        lines += [label.ljust(width) + np_fmt(v) for label, v in rows]
        lines.append("")
        if self.equal_shards:
            lines.append(f"largest |mean - full|: {self.mean_error:.2e} (float rounding: the mean IS the "
                         f"full-batch gradient)")
        else:
            lines += [f"largest |mean - full|: {self.mean_error:.2e}: with unequal shards the plain mean is NOT "
                      f"the full-batch gradient",
                      f"largest |weighted mean - full|: {self.weighted_error:.2e} (weighting each shard by its size "
                      f"repairs it)"]
        lines.append(f"|sum| / |full|: {self.sum_ratio:.3g} (the sum is a step about {self.workers} times too long)")
        return "\n".join(lines)


def gradient_averaging(workers: int = 4, batch: int = 64, features: int = 4, seed: int = 0) -> GradientAveraging:
    """A tiny model, linear regression ``y ~ X w + b`` with the mean squared error, its
    gradient written out (``dL/dw = X^T (X w + b - y) / B``, ``dL/db = mean(X w + b - y)``),
    computed on a whole batch of ``batch`` examples and on ``workers`` shards of it (as equal
    as possible). With equal shards the plain mean of the shard gradients equals the
    full-batch gradient (up to float rounding); their sum is ``workers`` times too large.
    When ``workers`` does not divide ``batch`` the shards differ in size, the plain mean is
    off, and only the mean weighted by shard size is the full-batch gradient: which is why
    data-parallel training gives every worker an equal shard."""
    for name, v in (("workers", workers), ("batch", batch), ("features", features)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if batch < workers:
        raise ValueError(f"a batch of {batch} cannot give each of {workers} workers an example; use batch >= workers")
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((batch, features))
    y = X @ rng.standard_normal(features) + 0.1 * rng.standard_normal(batch)
    w, b = 0.5 * rng.standard_normal(features), 0.0          # the current parameters

    def grad(Xs, ys):
        err = Xs @ w + b - ys
        return np.concatenate([Xs.T @ err / len(ys), [err.mean()]])

    full = grad(X, y)
    bounds = chunk_bounds(batch, workers)
    sizes = [hi - lo for lo, hi in bounds]
    shards = [grad(X[lo:hi], y[lo:hi]) for lo, hi in bounds]
    weighted = np.sum([g * k for g, k in zip(shards, sizes)], axis=0) / batch
    return GradientAveraging(workers, sizes, full, shards, np.mean(shards, axis=0), weighted,
                             np.sum(shards, axis=0))
