"""The data-parallel wrapper's own cost beside the all-reduce, and Horovod's fusion and cycle.

* :class:`Overheads`: the wrapper's fixed host time per step and per bucket (hooks, bookkeeping,
  launching and waiting for the collectives), with ``source``: where its numbers came from.
* :func:`measured`: that cost as measured on one worker (the recording
  ``reference/experiments/wrapper-cost-torch.json``: the same step plain, under DDP with world
  size 1 and under Horovod with size 1, timed in one process, the variants' runs interleaved).
  DDP's extra time over the plain step is fitted by least squares to a cost per step plus one
  per bucket over the recorded rows (models x batches): a fit to a one-GPU measurement, never to
  the 2-GPU runs the step model is checked against. Horovod registers its gradient hooks only
  when its size is above 1 or ``HOROVOD_ELASTIC=1`` (``horovod/torch/optimizer.py``), so its plain
  size-1 row times a plain step; its ``horovod-hooks`` row, built with that variable, times its hooks,
  its cycle and synchronize on one GPU. Horovod's cost is taken from those rows where the recording
  has them, else modelled as 0 (the source says which).
* Horovod's tensor fusion: gradients are packed, in the order they are ready, into buffers of
  at most ``HOROVOD_FUSION_THRESHOLD`` bytes (a tensor larger than that goes alone), and the
  background thread starts the buffers' all-reduces once per cycle of ``HOROVOD_CYCLE_TIME``
  (:func:`fusion_buffers`; the defaults of Horovod 0.28.1 below).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from ddlab.base.units import format_bytes, format_time
from ddlab.system.provenance import machine_of

# Horovod 0.28.1's defaults (horovod/common/operations.cc: SetTensorFusionThresholdBytes(128 * 1024 * 1024)
# and SetCycleTimeMs(1); docs/tensor-fusion.rst; changed from 64 MB and 5 ms in 0.21.0).
HOROVOD_FUSION_THRESHOLD_BYTES = 128 * 1024 * 1024
HOROVOD_CYCLE_TIME_S = 1e-3
HOROVOD_DEFAULTS_SOURCE = ("Horovod 0.28.1's defaults: HOROVOD_FUSION_THRESHOLD 128 MiB, HOROVOD_CYCLE_TIME 1 ms "
                           "(horovod/common/operations.cc; docs: tensor-fusion.rst)")
RECORDING = ("experiments", "wrapper-cost-torch")     # reference kind and name of the one-worker measurement
BASES = ("measured", "modelled", "assumed", "given", "fitted", "none")


@dataclass(frozen=True)
class Overheads:
    """The data-parallel wrapper's own cost on the host, beside the all-reduce itself: a fixed
    time per step and per bucket. ``points``: how many measured rows it came from; ``note``:
    what the measurement could and could not tell apart; ``source``: where the numbers came
    from; ``basis``: one of :data:`BASES`. ``cycle_s``: for Horovod measured with its hooks on, the
    cycle time it ran at, whose wait the cost then includes (None: it includes no cycle wait)."""
    per_step_s: float = 0.0
    per_bucket_s: float = 0.0
    launcher: str = ""
    points: int = 0
    note: str = ""
    source: str = ""
    basis: str = "given"
    cycle_s: Optional[float] = None

    def __post_init__(self):
        for name in ("per_step_s", "per_bucket_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a finite number of seconds >= 0, got {v!r}")
        if self.basis not in BASES:
            raise ValueError(f"basis must be one of {', '.join(BASES)}, got {self.basis!r}")

    def total_s(self, n_buckets: int) -> float:
        return self.per_step_s + self.per_bucket_s * n_buckets

    def describe(self) -> str:
        who = f"{self.launcher}: " if self.launcher else ""
        return (f"{who}{format_time(self.per_step_s)} per step + {format_time(self.per_bucket_s)} per bucket"
                + (f" (measured, {self.points} rows)" if self.points and self.basis == "measured" else ""))


NO_OVERHEADS = Overheads()


# ----------------------------------------------------------------------------- measured on one worker
@functools.lru_cache(maxsize=1)
def recording():
    """The recorded one-worker measurement of the wrappers' cost (an
    :class:`ddlab.training.results.ExperimentResult`); ReferenceMissing when there is none."""
    from ddlab.base import reference
    from ddlab.training.results import ExperimentResult
    return ExperimentResult.from_dict(reference.load(*RECORDING), source="recorded")


@functools.lru_cache(maxsize=64)
def _measured_cached(framework: str, exclude_models: tuple, exclude_batches: tuple) -> Overheads:
    return _measured(framework, exclude_models, exclude_batches, recording())


def measured(framework: str = "ddp", exclude_models: Sequence[str] = (), exclude_batches: Sequence[int] = (),
             result=None) -> Overheads:
    """The wrapper's cost of ``framework`` ("ddp" or "horovod") from the recorded one-worker
    measurement (``result``: that measurement, default :func:`recording`), leaving out the rows
    of ``exclude_models`` and ``exclude_batches``. DDP: least squares of its extra time per step
    over the plain step against a cost per step plus one per bucket (both >= 0; only per step
    when every row has the same number of buckets). Horovod: the mean extra time per step of its
    rows with hooks (``horovod-hooks``: every gradient through Horovod at size 1, the wait for its
    cycle included, so ``cycle_s`` is Horovod's default cycle), else 0, with the reason in ``source``."""
    if result is None:
        return _measured_cached(framework, tuple(sorted(exclude_models)), tuple(sorted(exclude_batches)))
    return _measured(framework, tuple(exclude_models), tuple(exclude_batches), result)


def _cycle_of(res) -> float:
    """The Horovod cycle time (seconds) a wrapper-cost recording ran under: HOROVOD_CYCLE_TIME (ms) as
    it recorded it, else Horovod's default."""
    ms = ((res.config or {}).get("horovod_env") or {}).get("HOROVOD_CYCLE_TIME")
    return HOROVOD_CYCLE_TIME_S if ms is None else float(ms) * 1e-3


def _measured(framework: str, exclude_models: tuple, exclude_batches: tuple, res) -> Overheads:
    if framework not in ("ddp", "horovod"):
        raise ValueError(f"the measured wrapper cost is for ddp or horovod, got {framework!r}")
    def usable(r, wrapper):
        return (r.get("wrapper") == wrapper and r.get("cost_ms") is not None and not r.get("error")
                and r.get("model") not in exclude_models and r.get("batch") not in exclude_batches)
    hooked = [r for r in res.rows if usable(r, "horovod-hooks")] if framework == "horovod" else []
    rows = hooked or [r for r in res.rows if usable(r, framework)]
    if not rows:
        raise ValueError(f"the wrapper-cost recording has no {framework} rows"
                         + (" besides those left out" if exclude_models or exclude_batches else ""))
    where = machine_of(res.provenance)
    models = sorted({r["model"] for r in rows})
    batches = sorted({r["batch"] for r in rows})
    repeats = sorted({r.get("repeats", 1) for r in rows})
    cost = np.array([r["cost_ms"] * 1e-3 for r in rows])
    what = (f"{len(rows)} rows ({', '.join(models)} at batch {', '.join(map(str, batches))}; each the median of "
            f"{'/'.join(map(str, repeats))} interleaved runs) measured on {where}")
    spread = f"the rows range from {format_time(cost.min())} to {format_time(cost.max())}"
    if hooked:
        return Overheads(max(float(np.mean(cost)), 0.0), 0.0, "horovod", len(rows),
                         note=f"one worker's Horovod step with its hooks over the plain one: {spread}",
                         source=("measured: Horovod with size 1 and its gradient hooks on (as for an elastic job of one "
                                 f"worker) over the plain step, {what}, the mean per step ({spread}); it holds the hooks, "
                                 "the wait for the background thread's cycle, a one-rank all-reduce and synchronize"),
                         basis="measured", cycle_s=_cycle_of(res))
    if framework == "horovod":
        return Overheads(0.0, 0.0, "horovod", len(rows),
                         note=f"one worker's Horovod step over the plain one: {spread}",
                         source=("modelled as 0: Horovod registers its gradient hooks only when its size is above 1, "
                                 f"so its one-worker rows ({what}; {spread}) time a plain step, and the recording has "
                                 "no row with its hooks on (horovod-hooks); its hooks', negotiation's and synchronize's "
                                 "host time is not measured"),
                         basis="modelled")
    buckets = np.array([r["buckets"] for r in rows], dtype=float)
    step, bucket, note = float(np.mean(cost)), 0.0, ""
    if len(set(buckets)) > 1:
        (step, bucket), *_ = np.linalg.lstsq(np.column_stack([np.ones_like(buckets), buckets]), cost, rcond=None)
        if bucket < 0 or step < 0:            # keep both >= 0: refit the one that stays
            step, bucket = ((float(np.mean(cost)), 0.0) if bucket < 0 else
                            (0.0, float(np.sum(cost * buckets) / np.sum(buckets ** 2))))
    else:
        note = f"every row has {int(buckets[0])} bucket(s): only a cost per step is fitted"
    return Overheads(max(float(step), 0.0), max(float(bucket), 0.0), "ddp", len(rows), note=note,
                     source=(f"measured: DDP with world size 1 over the plain step, {what}, least squares per step "
                             f"+ per bucket ({spread})" + (f"; {note}" if note else "")),
                     basis="measured")


# ----------------------------------------------------------------------------- Horovod's fusion
@dataclass(frozen=True)
class FusedBuffer:
    """One all-reduce of Horovod: the tensors fused into it (in the order they were ready) and
    its size in bytes."""
    tensors: tuple
    nbytes: int


def fusion_buffers(tensors: Sequence[tuple], threshold_bytes: int = HOROVOD_FUSION_THRESHOLD_BYTES) -> tuple:
    """Horovod's tensor fusion of ``tensors`` ((name, bytes) in the order they are ready): the
    first tensors that fit in ``threshold_bytes`` go into one buffer, then the next; a tensor
    larger than the threshold is all-reduced alone; threshold 0 disables fusion (every tensor
    alone)."""
    if isinstance(threshold_bytes, bool) or not isinstance(threshold_bytes, (int, float)) or threshold_bytes < 0:
        raise ValueError(f"the fusion threshold is a number of bytes >= 0, got {threshold_bytes!r}")
    out, names, size = [], [], 0
    for name, nbytes in tensors:
        if nbytes < 0:
            raise ValueError(f"tensor {name!r} has a negative size")
        if names and size + nbytes > threshold_bytes:
            out.append(FusedBuffer(tuple(names), size))
            names, size = [], 0
        names.append(name)
        size += nbytes
        if size > threshold_bytes:            # alone (too large, or fusion off)
            out.append(FusedBuffer(tuple(names), size))
            names, size = [], 0
    if names:
        out.append(FusedBuffer(tuple(names), size))
    return tuple(out)


def describe_fusion(buffers: Sequence[FusedBuffer]) -> str:
    return ", ".join(f"{format_bytes(b.nbytes)} ({'+'.join(b.tensors)})" for b in buffers)


def horovod_source(threshold_bytes: Optional[int] = None, cycle_s: Optional[float] = None) -> str:
    """Where Horovod's fusion threshold and cycle time came from."""
    if threshold_bytes in (None, HOROVOD_FUSION_THRESHOLD_BYTES) and cycle_s in (None, HOROVOD_CYCLE_TIME_S):
        return HOROVOD_DEFAULTS_SOURCE
    return (f"given: fusion threshold {format_bytes(threshold_bytes if threshold_bytes is not None else HOROVOD_FUSION_THRESHOLD_BYTES)}, "
            f"cycle time {format_time(cycle_s if cycle_s is not None else HOROVOD_CYCLE_TIME_S)}")


IN_STEP_SOURCE = ("in the one-GPU step already (it ran under the same wrapper with one worker: DDP keeps the same "
                  "hooks and calls at world size 1); what differs on more GPUs is modelled as 0")


def over_one_worker_step(framework: str = "ddp") -> Overheads:
    """The wrapper's cost to add to a one-GPU step that ran under the same launcher with one
    worker: nothing for DDP (its cost is in that step, :data:`IN_STEP_SOURCE`), and for Horovod,
    which registers no hooks at size 1, :func:`measured`."""
    if framework == "ddp":
        return Overheads(0.0, 0.0, "ddp", source=IN_STEP_SOURCE, basis="modelled")
    return measured(framework)
