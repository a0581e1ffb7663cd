"""Convergence at scale: the learning rate for a global batch, the gradient noise scale, and
time to accuracy (framework-free: numpy only; the training script and the sweep use it).

* :func:`peak_lr` and :func:`lr_at`: the learning rate of a global batch under a scaling rule
  ("none", "linear": Goyal et al. 2017, "sqrt") relative to a reference batch, reached after a
  linear warm-up from the reference rate (what ``fmnist_torch.py --lr-scaling
  --lr-ref-batch --lr-warmup-epochs`` applies at every step).
* :func:`noise_scale`: the "simple" gradient noise scale of McCandlish et al. 2018 ("An
  Empirical Model of Large-Batch Training", appendix A.1), B_simple = tr(Sigma) / |G|^2,
  from squared gradient norms measured at two batch sizes: each rank's own gradient (B_small =
  batch per worker) and the all-reduced one (B_big = global batch). With E|g_B|^2 =
  |G|^2 + tr(Sigma)/B, the unbiased estimates are
  |G|^2 ~ (B_big |g_big|^2 - B_small |g_small|^2) / (B_big - B_small) and
  tr(Sigma) ~ (|g_small|^2 - |g_big|^2) / (1/B_small - 1/B_big). One step's estimate is
  noisy; like the paper we average both over many steps before taking the ratio (both are
  linear in the measured norms, so averaging the norms first gives the same numbers).
* :func:`time_to_accuracy`: the training seconds until the held-out test accuracy first
  reaches a target.

The sweep that runs the training script over global batches and rules, several seeds each,
and its result (median and min-max over the seeds) are in :mod:`ddlab.course.convergence_sweep`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

LR_RULES = ("none", "linear", "sqrt")


# ----------------------------------------------------------------------------- learning rate
def lr_factor(rule: str, global_batch: int, ref_batch: int) -> float:
    """How much the learning rate grows for ``global_batch`` over ``ref_batch`` under ``rule``."""
    if rule not in LR_RULES:
        raise ValueError(f"unknown learning-rate scaling {rule!r}; choose one of {', '.join(LR_RULES)}")
    if global_batch < 1 or ref_batch < 1:
        raise ValueError(f"batch sizes must be positive, got global {global_batch} and reference {ref_batch}")
    k = global_batch / ref_batch
    return {"none": 1.0, "linear": k, "sqrt": math.sqrt(k)}[rule]


def peak_lr(base_lr: float, rule: str, global_batch: int, ref_batch: int) -> float:
    """The learning rate after warm-up: ``base_lr`` (right for ``ref_batch``) times :func:`lr_factor`."""
    return base_lr * lr_factor(rule, global_batch, ref_batch)


def warmup_steps(warmup_epochs: float, steps_per_epoch: int) -> int:
    """Optimizer steps the warm-up of ``warmup_epochs`` epochs lasts (0: none)."""
    if warmup_epochs < 0:
        raise ValueError(f"warm-up epochs cannot be negative, got {warmup_epochs}")
    return int(round(warmup_epochs * steps_per_epoch))


def lr_at(step: int, base_lr: float, peak: float, warmup: int) -> float:
    """The learning rate of optimizer step ``step`` (0-based): a straight line from
    ``min(base_lr, peak)`` at step 0 to ``peak`` at step ``warmup``, then ``peak`` (Goyal et
    al.'s gradual warm-up starts from the reference batch's rate). ``warmup`` 0: always ``peak``."""
    if step < 0:
        raise ValueError(f"step cannot be negative, got {step}")
    if warmup <= 0 or step >= warmup:
        return peak
    start = min(base_lr, peak)
    return start + (peak - start) * step / warmup


# ----------------------------------------------------------------------------- noise scale
@dataclass(frozen=True)
class NoiseScale:
    """The estimates from squared gradient norms at two batch sizes."""
    b_small: int
    b_big: int
    small_sq: float        # mean |g|^2 of one rank's gradient (batch b_small)
    big_sq: float          # mean |g|^2 of the all-reduced gradient (batch b_big)
    grad_sq: float         # estimate of |G|^2, the true gradient's squared norm
    trace: float           # estimate of tr(Sigma), the per-example gradient covariance's trace
    steps: int = 0         # how many steps were averaged

    @property
    def b_simple(self) -> Optional[float]:
        """tr(Sigma) / |G|^2, or None when |G|^2 is not positive (the noise swamps the signal:
        more steps must be averaged before the ratio means anything)."""
        return self.trace / self.grad_sq if self.grad_sq > 0 else None


def noise_scale(b_small: int, b_big: int, small_sq: float, big_sq: float, steps: int = 0) -> NoiseScale:
    """The unbiased estimates of |G|^2 and tr(Sigma), and B_simple, from the mean squared norm
    ``small_sq`` of gradients over ``b_small`` examples and ``big_sq`` over ``b_big``."""
    if not 0 < b_small < b_big:
        raise ValueError(f"need 0 < b_small < b_big, got {b_small} and {b_big} (one worker measures only one "
                         "batch size: the noise scale needs at least 2 workers)")
    grad_sq = (b_big * big_sq - b_small * small_sq) / (b_big - b_small)
    trace = (small_sq - big_sq) / (1.0 / b_small - 1.0 / b_big)
    return NoiseScale(b_small, b_big, float(small_sq), float(big_sq), float(grad_sq), float(trace), steps)


def noise_scales(run: Mapping) -> list:
    """One :class:`NoiseScale` per evaluation interval of a training result that logged the
    gradient norms (``--noise-scale``): the interval's steps averaged."""
    out = []
    for ev in run.get("evaluations") or []:
        n = ev.get("noise")
        if n and n.get("steps"):
            out.append(noise_scale(run["batch_per_worker"], run["global_batch"], n["small_sq"], n["big_sq"],
                                   n["steps"]))
    return out


def pooled_noise_scale(runs: Sequence[Mapping], from_epoch: float = 0.0) -> Optional[NoiseScale]:
    """One estimate from several runs (e.g. the seeds of one configuration): the squared norms
    of every interval that ends after ``from_epoch``, weighted by its steps. None without any."""
    small = big = 0.0
    steps = 0
    sizes = set()
    for run in runs:
        for ev in run.get("evaluations") or []:
            n = ev.get("noise")
            if not n or not n.get("steps") or ev["epoch"] <= from_epoch:
                continue
            sizes.add((run["batch_per_worker"], run["global_batch"]))
            small += n["small_sq"] * n["steps"]
            big += n["big_sq"] * n["steps"]
            steps += n["steps"]
    if not steps:
        return None
    if len(sizes) != 1:
        raise ValueError(f"runs of different batch sizes cannot be pooled: {sorted(sizes)}")
    (b_small, b_big), = sizes
    return noise_scale(b_small, b_big, small / steps, big / steps, steps)


# ----------------------------------------------------------------------------- time to accuracy
def time_to_accuracy(evaluations: Sequence[Mapping], target: float, clock: str = "train_s") -> Optional[float]:
    """Seconds (``clock``: "train_s", training time without the evaluations, or "wall_s",
    since the process started) at the first evaluation whose test accuracy reaches
    ``target``; None when no evaluation does."""
    if not 0 < target <= 1:
        raise ValueError(f"the target is a fraction of the test set, within (0, 1]; got {target}")
    for ev in evaluations:
        if ev["test_accuracy"] >= target:
            return ev[clock]
    return None
