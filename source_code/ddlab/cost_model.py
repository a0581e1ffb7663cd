"""The alpha-beta model of communication, and what it predicts for data-parallel training.

Sending a message of ``S`` bytes over a link costs a fixed start-up time ``alpha`` (latency:
software, synchronisation, the first byte crossing the link) plus ``S / beta`` (``beta`` the
bandwidth in bytes per second)::

    t(S) = alpha + S / beta

Small messages are *latency-bound* (alpha dominates), large ones *bandwidth-bound* (S/beta
dominates). The two terms are equal at the crossover size ``S* = alpha * beta``.

Units throughout: seconds, bytes, bytes per second. (A worked example: 64 KiB at 16 GB/s
takes 65536 / 16e9 s = 4.1 us; older material got such examples wrong by 10x.)
"""
from __future__ import annotations

import math
from typing import NamedTuple, Optional, Sequence

import numpy as np

from .units import format_bytes, format_rate, format_time


class AlphaBeta(NamedTuple):
    """A fitted link: ``alpha`` in seconds, ``beta`` in bytes per second. Unpacks as
    ``alpha, beta = fit``."""
    alpha: float
    beta: float

    @property
    def crossover_bytes(self) -> float:
        return crossover_bytes(self.alpha, self.beta)

    def predict(self, nbytes):
        return transfer_time(nbytes, self.alpha, self.beta)

    def describe(self) -> str:
        return (f"alpha = {format_time(self.alpha)}, beta = {format_rate(self.beta)}, "
                f"crossover at {format_bytes(self.crossover_bytes)}")


# ----------------------------------------------------------------------------- the model
def transfer_terms(nbytes, alpha_s: float, beta_bytes_per_s: float):
    """The two terms of the model, ``(alpha, nbytes / beta)``: the latency term and the
    bandwidth term, in seconds (the second a number or an array, as ``nbytes``)."""
    _check_link(alpha_s, beta_bytes_per_s)
    nb = np.asarray(nbytes, dtype=float)
    if np.any(nb < 0):
        raise ValueError("message sizes must not be negative")
    bw = nb / beta_bytes_per_s
    return alpha_s, (float(bw) if np.ndim(bw) == 0 else bw)


def transfer_time(nbytes, alpha_s: float, beta_bytes_per_s: float):
    """``alpha + nbytes / beta``: seconds to move ``nbytes`` over one link (numbers or arrays)."""
    latency, bandwidth = transfer_terms(nbytes, alpha_s, beta_bytes_per_s)
    return latency + bandwidth


def crossover_bytes(alpha_s: float, beta_bytes_per_s: float) -> float:
    """The size where latency and bandwidth terms are equal: ``alpha * beta`` bytes."""
    _check_link(alpha_s, beta_bytes_per_s)
    return alpha_s * beta_bytes_per_s


def ring_allreduce_time(nbytes, n: int, alpha_s: float, beta_bytes_per_s: float):
    """Ring all-reduce of ``nbytes`` on ``n`` ranks: ``2(n-1)`` steps (n-1 of reduce-scatter, n-1 of
    all-gather), each sending one ``nbytes/n`` chunk: ``2(n-1) * (alpha + nbytes/(n*beta))``.
    The bandwidth term tends to ``2*nbytes/beta`` as n grows; the latency term grows with n."""
    _check_n(n)
    _check_link(alpha_s, beta_bytes_per_s)
    nb = np.asarray(nbytes, dtype=float)
    t = 2 * (n - 1) * transfer_time(nb / n, alpha_s, beta_bytes_per_s) if n > 1 else nb * 0.0
    return float(t) if np.ndim(t) == 0 else t


def tree_allreduce_time(nbytes, n: int, alpha_s: float, beta_bytes_per_s: float):
    """Idealised pipelined (double binary) tree all-reduce: a reduce up and a broadcast down a tree
    of depth ``ceil(log2 n)``, the message cut into pieces so the levels work at once:
    ``2*ceil(log2 n)*alpha + 2*nbytes/beta``. Latency grows only with log2 n, which is why NCCL
    prefers trees for small messages on many ranks; for large messages the ring's
    ``2(n-1)/n`` bandwidth term is slightly smaller."""
    _check_n(n)
    _check_link(alpha_s, beta_bytes_per_s)
    nb = np.asarray(nbytes, dtype=float)
    depth = math.ceil(math.log2(n)) if n > 1 else 0
    t = (2 * depth * alpha_s + 2 * nb / beta_bytes_per_s) if n > 1 else nb * 0.0
    return float(t) if np.ndim(t) == 0 else t


def allreduce_time(nbytes, n: int, alpha_s: float, beta_bytes_per_s: float, algorithm: str = "ring"):
    if algorithm == "ring":
        return ring_allreduce_time(nbytes, n, alpha_s, beta_bytes_per_s)
    if algorithm == "tree":
        return tree_allreduce_time(nbytes, n, alpha_s, beta_bytes_per_s)
    raise ValueError(f"algorithm must be 'ring' or 'tree', got {algorithm!r}")


def step_time(compute_s: float, comm_s: float, overlap: float = 0.0) -> float:
    """One training step: compute plus communication, of which the fraction ``overlap`` (0..1)
    of the shorter one is hidden behind the other (DDP overlaps gradient all-reduce with the
    backward pass): ``compute + comm - overlap * min(compute, comm)``."""
    if compute_s < 0 or comm_s < 0:
        raise ValueError(f"times must not be negative, got compute {compute_s} and comm {comm_s}")
    if not 0.0 <= overlap <= 1.0:
        raise ValueError(f"overlap is a fraction between 0 and 1, got {overlap}")
    return compute_s + comm_s - overlap * min(compute_s, comm_s)


def predicted_speedup(compute_s_one_gpu: float, grad_bytes: float, n: int, alpha_s: float,
                      beta_bytes_per_s: float, overlap: float = 0.0, algorithm: str = "ring",
                      scaling: str = "weak") -> float:
    """Throughput of ``n`` data-parallel GPUs relative to one.

    ``scaling="weak"`` (the course's experiments): each GPU keeps the one-GPU batch, so a step
    computes for ``compute_s_one_gpu`` and then all-reduces ``grad_bytes``; speedup =
    ``n * t_1 / t_n``. ``scaling="strong"``: the global batch is fixed and split, so each GPU
    computes ``compute_s_one_gpu / n``; speedup = ``t_1 / t_n``. One GPU needs no all-reduce.
    """
    if compute_s_one_gpu <= 0:
        raise ValueError(f"compute time must be positive, got {compute_s_one_gpu}")
    if grad_bytes < 0:
        raise ValueError(f"gradient size must not be negative, got {grad_bytes}")
    _check_n(n)
    if scaling not in ("weak", "strong"):
        raise ValueError(f"scaling must be 'weak' or 'strong', got {scaling!r}")
    compute = compute_s_one_gpu if scaling == "weak" else compute_s_one_gpu / n
    comm = allreduce_time(grad_bytes, n, alpha_s, beta_bytes_per_s, algorithm) if n > 1 else 0.0
    t_n = step_time(compute, comm, overlap)
    return (n if scaling == "weak" else 1) * compute_s_one_gpu / t_n


def scaling_efficiency(compute_s_one_gpu: float, grad_bytes: float, n: int, alpha_s: float,
                       beta_bytes_per_s: float, overlap: float = 0.0, algorithm: str = "ring",
                       scaling: str = "weak") -> float:
    """``predicted_speedup / n``: 1.0 is perfect scaling."""
    return predicted_speedup(compute_s_one_gpu, grad_bytes, n, alpha_s, beta_bytes_per_s,
                             overlap, algorithm, scaling) / n


# ----------------------------------------------------------------------------- fitting
def fit_alpha_beta(sizes: Sequence[float], times: Sequence[float], robust: bool = True) -> AlphaBeta:
    """Fit ``t = alpha + S/beta`` to measured (size in bytes, time in seconds) pairs.

    The model is linear in ``alpha`` and ``1/beta``, so this is a least-squares fit, but of
    the *relative* error ``(model - t) / t``: a plain fit would be decided by the largest sizes
    alone (their times are thousands of times longer) and could return any alpha, even a
    negative one. Weighting by 1/t lets a 10 us point and a 10 ms point count alike. With
    ``robust`` the fit is then repeated with Huber weights (iteratively reweighted least
    squares), so a few outliers (a hiccup, a protocol switch) pull it less.

    alpha is kept >= 0 (a negative start-up time has no meaning: then the fit is redone with
    alpha = 0). Raises ValueError for unusable input: fewer than two distinct sizes, lengths
    that differ, negative sizes, non-positive or non-finite times, or times that do not grow
    with size (no bandwidth can be read from them).
    """
    s = np.asarray(sizes, dtype=float).ravel()
    t = np.asarray(times, dtype=float).ravel()
    if s.size != t.size:
        raise ValueError(f"sizes and times differ in length ({s.size} and {t.size})")
    if s.size < 2 or np.unique(s).size < 2:
        raise ValueError("need at least two different message sizes to fit alpha and beta")
    if not (np.all(np.isfinite(s)) and np.all(np.isfinite(t))):
        raise ValueError("sizes and times must be finite numbers")
    if np.any(s < 0):
        raise ValueError("message sizes must not be negative")
    if np.any(t <= 0):
        raise ValueError("times must be positive (seconds)")

    X = np.column_stack([np.ones_like(s), s])      # t = alpha * 1 + (1/beta) * S
    w = 1.0 / t                                     # relative error
    huber = np.ones_like(t)
    coef = _wls(X, t, w)
    if robust:
        for _ in range(20):
            r = (X @ coef - t) / t
            scale = 1.4826 * np.median(np.abs(r - np.median(r)))
            if scale <= 1e-12:
                break
            k = 1.345 * scale
            huber = np.where(np.abs(r) <= k, 1.0, k / np.maximum(np.abs(r), 1e-300))
            new = _wls(X, t, w * np.sqrt(huber))
            if np.allclose(new, coef, rtol=1e-10, atol=0):
                coef = new
                break
            coef = new
    alpha, inv_beta = coef
    if alpha < 0:
        # Refit through the origin: t = S/beta, same weights.
        ww = w * np.sqrt(huber)
        inv_beta = float(np.sum(ww ** 2 * s * t) / np.sum(ww ** 2 * s * s))
        alpha = 0.0
    if not inv_beta > 0:
        raise ValueError("the times do not grow with message size, so no bandwidth can be fitted "
                         "(are the sizes too small to leave the latency-bound range?)")
    return AlphaBeta(float(alpha), float(1.0 / inv_beta))


def _wls(X, y, w):
    coef, *_ = np.linalg.lstsq(X * w[:, None], y * w, rcond=None)
    return coef


def fit_sweep(result, min_bytes: int = 0, max_bytes: Optional[int] = None) -> AlphaBeta:
    """Fit alpha and beta to a collective sweep (:class:`ddlab.collectives.SweepResult`),
    time per call against the bytes of the operation.

    For an all-reduce, ``beta`` is then the *effective algorithm bandwidth* the collective
    reaches for large messages (``algbw`` in nccl-tests' terms), not the link's: on ``n``
    ranks the link carries ``beta * 2(n-1)/n`` (the bus bandwidth), so for 2 GPUs the two are
    equal. ``alpha`` is the whole per-call overhead: for torch.distributed it includes the
    Python call and kernel launch, not only NCCL's own latency.
    """
    rows = [r for r in result.rows if r["bytes"] >= min_bytes and (max_bytes is None or r["bytes"] <= max_bytes)]
    if len(rows) < 2:
        raise ValueError(f"the sweep has {len(rows)} rows in the chosen size range; need at least two")
    return fit_alpha_beta([r["bytes"] for r in rows], [r["time_us"] * 1e-6 for r in rows])


# ----------------------------------------------------------------------------- plotting
def plot_alpha_beta(sizes, times, ax=None, fit: Optional[AlphaBeta] = None, label: str = "measured",
                    title: Optional[str] = None):
    """Time against size on log-log axes: the measured points, the fitted ``alpha + S/beta``
    line, the crossover ``alpha*beta`` and the latency-bound (left) and bandwidth-bound (right)
    regions shaded and named. Returns the axes."""
    import matplotlib.pyplot as plt

    s = np.asarray(sizes, dtype=float)
    t = np.asarray(times, dtype=float)
    fit = fit or fit_alpha_beta(s, t)
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.5))
    lo, hi = float(np.min(s[s > 0])) / 2, float(np.max(s)) * 2
    cross = fit.crossover_bytes
    left = max(lo, min(cross, hi))
    ax.axvspan(lo, left, color="tab:orange", alpha=0.08, lw=0)
    ax.axvspan(left, hi, color="tab:blue", alpha=0.08, lw=0)
    ax.plot(s, t * 1e6, "o", ms=4, color="black", label=label)
    grid = np.geomspace(lo, hi, 200)
    ax.plot(grid, fit.predict(grid) * 1e6, "-", color="tab:red",
            label=f"fit: alpha = {format_time(fit.alpha)}, beta = {format_rate(fit.beta)}")
    if lo < cross < hi:
        ax.axvline(cross, color="gray", ls=":", label=f"crossover alpha*beta = {format_bytes(cross)}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    # Region names at the top of each shaded side (axes-fraction y, data x).
    trans = ax.get_xaxis_transform()
    if left > lo:
        ax.text(math.sqrt(lo * left), 0.95, "latency-bound\n(alpha dominates)", transform=trans,
                ha="center", va="top", fontsize="small", color="tab:orange")
    if left < hi:
        ax.text(math.sqrt(left * hi), 0.95, "bandwidth-bound\n(S/beta dominates)", transform=trans,
                ha="center", va="top", fontsize="small", color="tab:blue")
    ax.set_xlabel("message size S (bytes)")
    ax.set_ylabel("time (us)")
    ax.set_title(title or "alpha-beta model: t = alpha + S/beta")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small", loc="lower right")
    return ax


def plot_sweep_fit(result, ax=None, fit: Optional[AlphaBeta] = None):
    """:func:`plot_alpha_beta` for a collective sweep, labelled with its op, path and ranks."""
    fit = fit or fit_sweep(result)
    return plot_alpha_beta([r["bytes"] for r in result.rows], [r["time_us"] * 1e-6 for r in result.rows],
                           ax=ax, fit=fit, label=f"{result.op}, {result.label}",
                           title=f"{result.op} time per call and the alpha-beta fit")


# ----------------------------------------------------------------------------- helpers
def _check_link(alpha_s: float, beta: float) -> None:
    if not (math.isfinite(alpha_s) and alpha_s >= 0):
        raise ValueError(f"alpha (seconds) must be a finite number >= 0, got {alpha_s}")
    if not (math.isfinite(beta) and beta > 0):
        raise ValueError(f"beta (bytes per second) must be a finite positive number, got {beta}")


def _check_n(n: int) -> None:
    if int(n) != n or n < 1:
        raise ValueError(f"the number of ranks must be a whole number >= 1, got {n}")

