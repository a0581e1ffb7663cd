"""The alpha-beta model of communication, and its fit to a measured sweep.

Sending a message of ``S`` bytes over a link costs a fixed start-up time ``alpha`` (latency:
software, synchronisation, the first byte crossing the link) plus ``S / beta`` (``beta`` the
bandwidth in bytes per second)::

    t(S) = alpha + S / beta

Small messages are *latency-bound* (alpha dominates), large ones *bandwidth-bound* (S/beta
dominates). The two terms are equal at the crossover size ``S* = alpha * beta``.

Units throughout: seconds, bytes, bytes per second. (A worked example: 64 KiB at 16 GB/s
takes 65536 / 16e9 s = 4.1 us; older material got such examples wrong by 10x.)

:func:`fit_alpha_beta` fits the two numbers to measured (size, time) pairs and
:func:`fit_sweep` to a collective sweep. What they predict for a whole data-parallel step is
in :mod:`ddlab.cost.step_model`; the plots of a fit are in :mod:`ddlab.views.cost_plots`.
"""
from __future__ import annotations

import math
from typing import NamedTuple, Optional, Sequence

import numpy as np

from ddlab.base.units import format_bytes, format_rate, format_time


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
    check_link(alpha_s, beta_bytes_per_s)
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
    check_link(alpha_s, beta_bytes_per_s)
    return alpha_s * beta_bytes_per_s


def ring_allreduce_time(nbytes, n: int, alpha_s: float, beta_bytes_per_s: float):
    """Ring all-reduce of ``nbytes`` on ``n`` ranks: ``2(n-1)`` steps (n-1 of reduce-scatter, n-1 of
    all-gather), each sending one ``nbytes/n`` chunk: ``2(n-1) * (alpha + nbytes/(n*beta))``.
    The bandwidth term tends to ``2*nbytes/beta`` as n grows; the latency term grows with n."""
    check_ranks(n)
    check_link(alpha_s, beta_bytes_per_s)
    nb = np.asarray(nbytes, dtype=float)
    t = 2 * (n - 1) * transfer_time(nb / n, alpha_s, beta_bytes_per_s) if n > 1 else nb * 0.0
    return float(t) if np.ndim(t) == 0 else t


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
    """Fit alpha and beta to a collective sweep (:class:`ddlab.measure.collectives.SweepResult`),
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


# ----------------------------------------------------------------------------- checks of the inputs
def check_link(alpha_s: float, beta: float) -> None:
    """ValueError unless ``alpha_s`` >= 0 and ``beta`` > 0 are finite numbers."""
    if not (math.isfinite(alpha_s) and alpha_s >= 0):
        raise ValueError(f"alpha (seconds) must be a finite number >= 0, got {alpha_s}")
    if not (math.isfinite(beta) and beta > 0):
        raise ValueError(f"beta (bytes per second) must be a finite positive number, got {beta}")


def check_ranks(n: int) -> None:
    """ValueError unless ``n`` is a whole number of ranks >= 1."""
    if int(n) != n or n < 1:
        raise ValueError(f"the number of ranks must be a whole number >= 1, got {n}")
