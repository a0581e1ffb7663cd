"""What the alpha-beta model predicts for one data-parallel training step.

:func:`step_time` is the simplest picture: compute plus communication, part of it hidden.
:func:`predict_step` is the course's step model, built from terms that each say where their
number came from (:class:`Term`, ``StepPrediction.terms``):

* the one-GPU step (recorded or given) and, when known, the GPU's busy time in it (a CUDA-graph
  recording);
* the wrapper's own host cost per step and per bucket (:class:`ddlab.cost.wrapper_cost.Overheads`,
  measured on one worker by :func:`ddlab.cost.wrapper_cost.measured`), or nothing where the
  one-GPU step already ran under the same wrapper;
* each all-reduce from the path's alpha-beta fit (:func:`bucket_allreduce_time`);
* for DDP: the gradients in DDP's buckets (:func:`gradient_buckets`), each bucket starting as
  soon as the backward pass has produced its gradients and the previous one is done, so
  communication overlaps the rest of the backward pass (when each gradient is ready: a recorded
  step profile, else counted by FLOPs), the overlapped backward slowed by the all-reduce's share
  of the GPU;
* for Horovod: the gradients fused into buffers of at most the fusion threshold
  (:func:`ddlab.cost.wrapper_cost.fusion_buffers`), started at the next cycle of its background
  thread, on average half a cycle after the last gradient; a fused buffer waits for all its
  tensors, and the step waits in ``synchronize`` for the all-reduces, so they overlap nothing;
* what grows with the batch on a multi-GPU step (input copies, synchronisation): 0, assumed,
  unless given (``batch_term_s``);
* what two or more workers cost beyond the terms above (``two_worker_s``), per launcher and path:
  measured on the probe model, whose compute and all-reduce are close to nothing, as its two-worker
  step less this model's prediction of it (:func:`ddlab.cost.recorded_runs.two_worker_terms`); 0 unless
  given;
* the wait for the slower rank (``slower_rank_s``): every step ends in an all-reduce that needs
  every rank, so a step lasts as long as the slowest rank's; 0 unless given. One estimate of it,
  :func:`slower_rank_wait` of one GPU's own step times, is a candidate the course checks beside
  the model, not in it (:func:`ddlab.cost.validation.held_out` counts what it would change).

The recorded runs and the measured inputs the model takes from them are in
:mod:`ddlab.cost.recorded_runs`; the predictions set beside the recorded speedups in
:mod:`ddlab.cost.validation`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Optional

from ddlab.base.units import format_bytes, format_time
from ddlab.cost.alpha_beta import check_link, check_ranks, ring_allreduce_time
from ddlab.cost.wrapper_cost import (HOROVOD_CYCLE_TIME_S, HOROVOD_FUSION_THRESHOLD_BYTES, IN_STEP_SOURCE,
                                     NO_OVERHEADS, Overheads, fusion_buffers, horovod_source)
from ddlab.training.models import Layer, model_layers

FRAMEWORKS = ("ddp", "horovod")
SLOWER_RANK_SOURCE = ("not included, so 0: the one estimate the course has (slower_rank_wait of one GPU's step "
                      "times) is a candidate checked beside the model, not in it")
TWO_WORKER_SOURCE = ("not measured for this machine and path, so 0: the probe (one small layer at batch 4, "
                     "ddp:probe and horovod:probe of tools/recording/record_experiments.py) measures it")
BATCH_TERM_SOURCE = ("assumed 0: nothing measures what grows with the batch on two GPUs (input copies, "
                     "synchronisation) apart from the 2-GPU runs the model is checked against, and the step profiles "
                     "time one GPU only")


def step_time(compute_s: float, comm_s: float, overlap: float = 0.0) -> float:
    """One training step: compute plus communication, of which the fraction ``overlap`` (0..1)
    of the shorter one is hidden behind the other (DDP overlaps gradient all-reduce with the
    backward pass): ``compute + comm - overlap * min(compute, comm)``."""
    if compute_s < 0 or comm_s < 0:
        raise ValueError(f"times must not be negative, got compute {compute_s} and comm {comm_s}")
    if not 0.0 <= overlap <= 1.0:
        raise ValueError(f"overlap is a fraction between 0 and 1, got {overlap}")
    return compute_s + comm_s - overlap * min(compute_s, comm_s)


def slower_rank_wait(step_times_s, n_ranks: int = 2) -> float:
    """What waiting for the slowest of ``n_ranks`` ranks adds to a step, in the units of
    ``step_times_s``: the expected longest of ``n_ranks`` independent draws from those step
    times (one GPU's own steps, one per entry) minus their mean. A rank's step is taken to vary
    as the one GPU's did, independently of the others; a collective at the end of every step
    makes each step last as long as the slowest rank's. Exact for the empirical distribution:
    with the times sorted, the k-th (from 0) is the longest of the draws with probability
    ((k+1)^n - k^n) / N^n."""
    xs = sorted(float(x) for x in step_times_s)
    if not xs or not all(math.isfinite(x) and x >= 0 for x in xs):
        raise ValueError("step times must be a non-empty list of numbers >= 0")
    check_ranks(n_ranks)
    n, size = int(n_ranks), len(xs)
    longest = sum(x * ((k + 1) ** n - k ** n) for k, x in enumerate(xs)) / size ** n
    return max(0.0, longest - sum(xs) / size)


# DistributedDataParallel's defaults (torch.nn.parallel.DistributedDataParallel): gradients are
# all-reduced in buckets of bucket_cap_mb=25 MiB, the first bucket closing at 1 MiB so that
# communication starts early. After the first iteration DDP rebuilds its buckets in the order
# the gradients became ready (the reverse of the layer order); a bucket closes as soon as it
# holds at least its limit, and a tensor is never split, so one tensor larger than the cap is a
# bucket of its own.
DDP_FIRST_BUCKET_BYTES = 1024 * 1024
DDP_BUCKET_CAP_MB = 25
# The backward pass does twice the arithmetic of the forward pass (a gradient for the inputs
# and one for the weights): 2/3 of forward + backward. An assumption, not a measurement.
BACKWARD_FRACTION = 2 / 3
READINESS = ("flops", "params")


def _as_layers(model) -> tuple:
    if isinstance(model, str):
        return model_layers(model)
    if isinstance(model, (int, float)) and not isinstance(model, bool):
        if not model > 0:
            raise ValueError(f"a parameter count must be positive, got {model!r}")
        return (Layer("all parameters", int(model), float(model)),)
    layers = tuple(model)
    if not layers or not all(isinstance(x, Layer) for x in layers):
        raise ValueError("give a model name, a parameter count, or a non-empty sequence of models.Layer")
    if any(x.params < 0 or x.flops < 0 for x in layers) or sum(x.params for x in layers) <= 0:
        raise ValueError("layers need parameter counts and FLOPs >= 0, and some parameters in all")
    return layers


@dataclass(frozen=True)
class Bucket:
    """One all-reduce of DDP: the layers whose gradients it carries (in the order they
    become ready), its size in bytes, and ``ready``: the share of the backward pass done
    when its last gradient is ready (0..1)."""
    layers: tuple
    nbytes: int
    ready: float


def bucket_count(model: str) -> int:
    """How many gradient buckets DDP makes of a course model with its default bucketing."""
    return len(gradient_buckets(model))


def gradient_buckets(model, bucket_cap_mb: float = DDP_BUCKET_CAP_MB,
                     first_bucket_bytes: Optional[int] = DDP_FIRST_BUCKET_BYTES,
                     bytes_per_param: int = 4, readiness: str = "flops") -> tuple:
    """DDP's buckets for ``model`` (a name, a parameter count or
    :class:`ddlab.training.models.Layer` items), in
    the order they are all-reduced: the gradients in reverse layer order, a bucket closing
    once it holds at least its limit (the first ``first_bucket_bytes``, then
    ``bucket_cap_mb`` MiB; None: every bucket gets the cap). ``readiness`` says how the
    backward pass is shared among the layers: by forward FLOPs ("flops"), by parameter
    count ("params"), or as measured: a mapping {layer name: share of the backward pass done
    when its gradient is ready} (:attr:`ddlab.training.step_profile.StepProfile.ready`)."""
    layers = _as_layers(model)
    measured = None
    if isinstance(readiness, Mapping):
        missing = [x.name for x in layers if x.params and x.name not in readiness]
        if missing:
            raise ValueError(f"the measured readiness has no share for layer(s) {', '.join(missing)}")
        measured = {k: float(v) for k, v in readiness.items()}
    elif readiness not in READINESS:
        raise ValueError(f"readiness must be one of {', '.join(READINESS)} or a mapping of layer to share, "
                         f"got {readiness!r}")
    if not bucket_cap_mb > 0:
        raise ValueError(f"bucket_cap_mb must be positive, got {bucket_cap_mb!r}")
    if int(bytes_per_param) != bytes_per_param or bytes_per_param < 1:
        raise ValueError(f"bytes_per_param must be a whole number >= 1, got {bytes_per_param!r}")
    cap = int(bucket_cap_mb * 1024 * 1024)
    weight = [0.0 if measured else (x.flops if readiness == "flops" else x.params) for x in layers]
    total_w = sum(weight) or 1.0
    limit = cap if first_bucket_bytes is None else int(first_bucket_bytes)
    out, names, size, done = [], [], 0, 0.0
    for layer, w in zip(reversed(layers), reversed(weight)):
        done = max(done, measured[layer.name]) if measured and layer.params else done + w / total_w
        if layer.params == 0:
            continue
        names.append(layer.name)
        size += layer.params * bytes_per_param
        if size >= limit:
            out.append(Bucket(tuple(names), size, min(done, 1.0)))
            names, size, limit = [], 0, cap
    if names:
        out.append(Bucket(tuple(names), size, 1.0))
    return tuple(out)


def bucket_allreduce_time(nbytes: float, n_gpus: int, path, fit_ranks: int = 2) -> float:
    """Seconds to all-reduce one bucket of ``nbytes`` on ``n_gpus`` over ``path``.

    ``path`` is either an :class:`ddlab.cost.alpha_beta.AlphaBeta` fitted to a measured all-reduce
    sweep on ``fit_ranks`` ranks (:func:`ddlab.cost.alpha_beta.fit_sweep`: ``alpha`` the whole
    per-call cost, ``beta`` the algorithm bandwidth), or a link of :mod:`ddlab.system.links`
    (``latency_s``, ``bandwidth_Bps``), for which the ring formula
    :func:`ddlab.cost.alpha_beta.ring_allreduce_time` applies. A sweep's fit is carried
    to ``n`` ranks by the ring's bandwidth term ``2(n-1)/n`` (its bus bandwidth stays the
    same); its alpha is kept as measured."""
    check_ranks(n_gpus)
    if n_gpus == 1:
        return 0.0
    if hasattr(path, "bandwidth_Bps") and hasattr(path, "latency_s"):
        return ring_allreduce_time(nbytes, n_gpus, path.latency_s, path.bandwidth_Bps)
    alpha, beta = path
    check_link(alpha, beta)
    check_ranks(fit_ranks)
    if fit_ranks < 2:
        raise ValueError("a sweep's fit needs at least 2 ranks")
    busbw = beta * 2 * (fit_ranks - 1) / fit_ranks
    return alpha + nbytes * (2 * (n_gpus - 1) / n_gpus) / busbw




@dataclass(frozen=True)
class Term:
    """One term of a predicted step: its name, its time in seconds (None where it is not a time
    of its own, e.g. the overlap), ``basis`` (measured, modelled, assumed, given, fitted or none)
    and ``source``: where its number came from."""
    name: str
    seconds: Optional[float]
    basis: str
    source: str

    def to_dict(self) -> dict:
        return {"name": self.name, "ms": None if self.seconds is None else self.seconds * 1e3, "basis": self.basis,
                "source": self.source}


@dataclass(frozen=True)
class StepPrediction:
    """One predicted data-parallel step (weak scaling: every GPU keeps the one-GPU batch).
    ``total_s = compute_s + exposed_comm_s + overhead_s``; ``comm_s`` is all the
    all-reduce time, of which ``hidden_comm_s`` runs during the backward pass (for Horovod
    ``exposed_comm_s`` includes ``cycle_wait_s``, the wait for its background thread's cycle).
    ``terms``: every term with where its number came from. The all-reduces of Horovod overlap
    nothing, so none of them is hidden."""
    n_gpus: int
    compute_s: float
    comm_s: float
    exposed_comm_s: float
    overhead_s: float
    total_s: float
    buckets: tuple
    bound: str          # "serial", "device" or "host": what decides the step time
    batch: Optional[int] = None
    framework: str = "ddp"
    cycle_wait_s: float = 0.0
    terms: tuple = ()

    @property
    def hidden_comm_s(self) -> float:
        return max(0.0, self.comm_s - self.exposed_comm_s)

    @property
    def speedup(self) -> float:
        return self.n_gpus * self.compute_s / self.total_s

    @property
    def efficiency(self) -> float:
        return self.speedup / self.n_gpus

    @property
    def images_per_s(self) -> Optional[float]:
        return self.n_gpus * self.batch / self.total_s if self.batch else None

    def _added_s(self, name: str, before: float = 0.0) -> float:
        """Term ``name`` of the host's path as far as it lengthens the step: within the overhead left
        after ``before`` (a device-bound step hides what the GPU's work covers); 0 where there is none."""
        t = next((t.seconds for t in self.terms if t.name == name), None)
        return max(0.0, min(t, self.overhead_s - before)) if t else 0.0

    @property
    def slower_rank_s(self) -> float:
        """The wait for the slower rank, as far as it lengthens the step."""
        return self._added_s("slower rank")

    @property
    def two_workers_s(self) -> float:
        """What two workers cost beyond the other terms (measured on the probe), as far as it lengthens the step."""
        return self._added_s("two workers", self.slower_rank_s)

    @property
    def wrapper_s(self) -> float:
        """The overhead that is the wrapper's own cost: the rest after the slower rank and two workers."""
        rest = self.overhead_s - self.slower_rank_s - self.two_workers_s
        return 0.0 if abs(rest) < 1e-12 * max(1.0, self.total_s) else rest     # rounding, not a cost

    def parts(self) -> dict:
        return {"compute": self.compute_s, "exposed communication": self.exposed_comm_s,
                "overhead": self.overhead_s}

    def term(self, name: str) -> Term:
        for t in self.terms:
            if t.name == name:
                return t
        raise KeyError(f"no term {name!r}; terms: {', '.join(t.name for t in self.terms)}")

    def terms_table(self):
        """The terms as a :class:`ddlab.base.tables.Table`: name, time, basis, source."""
        from ddlab.base.tables import Table
        return Table([("name", "text", "term"), ("seconds", "time", "time"), ("basis", "text"),
                      ("source", "text", "where the number came from")],
                     [{"name": t.name, "seconds": t.seconds, "basis": t.basis, "source": t.source} for t in self.terms],
                     missing="-", wrap=["source"])

    def describe(self) -> str:
        t = self.total_s
        unit = "fused buffer(s)" if self.framework == "horovod" else "bucket(s)"
        text = (f"{self.n_gpus} GPU(s): step {format_time(t)} = compute {format_time(self.compute_s)} "
                f"+ exposed communication {format_time(self.exposed_comm_s)} "
                f"+ overhead {format_time(self.overhead_s)}; all-reduce {format_time(self.comm_s)} in "
                f"{len(self.buckets)} {unit}, {format_time(self.hidden_comm_s)} of it hidden behind the "
                f"{'GPU' if self.framework == 'horovod' else 'backward pass'}; speedup {self.speedup:.2f}x over one GPU "
                f"(efficiency {100 * self.efficiency:.0f}%)")
        if self.images_per_s:
            text += f", {self.images_per_s:,.0f} images/s"
        return text + "."

    def __str__(self) -> str:
        return self.describe()


def predict_step(model, compute_s: float, path, n_gpus: int = 2, *, batch: Optional[int] = None,
                 device_s: Optional[float] = None, overheads: Optional[Overheads] = None,
                 backward_fraction: float = BACKWARD_FRACTION, optimizer_s: float = 0.0,
                 bucket_cap_mb: float = DDP_BUCKET_CAP_MB,
                 first_bucket_bytes: Optional[int] = DDP_FIRST_BUCKET_BYTES,
                 bytes_per_param: int = 4, readiness="flops", fit_ranks: int = 2,
                 profile=None, comm_sm_share: float = 0.0, framework: str = "ddp",
                 wrapper_in_step: bool = False, fusion_threshold_bytes: Optional[int] = None,
                 cycle_s: Optional[float] = None, batch_term_s: float = 0.0, slower_rank_s: float = 0.0,
                 two_worker_s: float = 0.0, sources: Optional[Mapping[str, str]] = None) -> StepPrediction:
    """Predict one data-parallel training step on ``n_gpus`` (weak scaling).

    * ``model``: a course model's name, a parameter count, or :class:`ddlab.training.models.Layer`
      items.
    * ``compute_s``: the measured one-GPU step (forward, backward and optimizer) at the
      per-GPU ``batch`` (the batch only turns the result into images/s).
    * ``path``: the all-reduce path: an :class:`ddlab.cost.alpha_beta.AlphaBeta` fitted to a
      measured sweep (on ``fit_ranks`` ranks) or a link of :mod:`ddlab.system.links` (see
      :func:`bucket_allreduce_time`).
    * ``device_s``: how long the GPU is busy in that step, when known (e.g. the step of a
      CUDA-graph run, where the host does no work per step). Then a step is the longer of
      the device's path and the host's path (``compute_s`` + the wrapper's ``overheads``): a
      host-bound step can hide communication in the GPU's idle time, and a device-bound one can
      hide the wrapper's host work. Without it the parts simply add up.
    * ``overheads``: the wrapper's host cost per step and per bucket; ``wrapper_in_step``: the
      one-GPU step already ran under the same wrapper (DDP with world size 1 runs the same hooks
      and calls), so only what differs on ``n_gpus`` is added, modelled as nothing.
    * ``framework`` "ddp": the gradients go out in :func:`gradient_buckets` (DDP's defaults);
      each bucket's all-reduce starts when its gradients are ready and the previous all-reduce is
      done (one communication stream); the optimizer waits for the last one. The backward pass
      is ``backward_fraction`` of the device step without the optimizer's ``optimizer_s``.
      ``profile``: a :class:`ddlab.training.step_profile.StepProfile` measured for this model;
      its readiness of each layer, backward fraction and optimizer share of the step replace
      ``readiness``, ``backward_fraction`` and ``optimizer_s``. ``comm_sm_share``: the share of
      the GPU's SMs the all-reduce kernels hold while they run (NCCL runs one thread block per
      channel); the backward work beside an all-reduce runs that much slower.
    * ``framework`` "horovod": the gradients fused into buffers of ``fusion_threshold_bytes``
      (default Horovod's), the buffers all-reduced one after another at the background thread's
      next cycle, half of ``cycle_s`` on average after the last gradient (the cycle's phase
      taken as random against the step); a buffer waits for all its tensors on the GPU and the
      host waits for the all-reduces, so they overlap nothing: the step is
      ``max(host + wait, device) + all-reduces``.
    * ``batch_term_s``: what grows with the batch on a multi-GPU step beyond the one-GPU step
      (input copies, synchronisation), added to the host's path; 0 unless given.
    * ``slower_rank_s``: the wait for the slower rank (:func:`slower_rank_wait` of the one-GPU
      step times), added to the host's path; 0 unless given.
    * ``two_worker_s``: what two or more workers cost beyond the other terms (measured on the probe:
      :func:`ddlab.cost.recorded_runs.two_worker_terms`), added to the host's path; 0 unless given.
    * ``sources``: {term name: where its number came from} for the inputs the caller knows
      ("one-GPU step", "GPU busy time", "all-reduce", "batch term", "slower rank", "two workers";
      the rest the model says).
    """
    cycle, threshold = _checked_settings(framework, comm_sm_share, batch_term_s, slower_rank_s, cycle_s,
                                         fusion_threshold_bytes, two_worker_s)
    if profile is not None:
        readiness, backward_fraction = profile.ready, profile.backward_fraction
        optimizer_s = profile.optimizer_share * (compute_s if device_s is None else device_s)
    dev = _checked_step(compute_s, n_gpus, device_s, backward_fraction, optimizer_s, batch)
    over, src = overheads or NO_OVERHEADS, dict(sources or {})
    buckets = _gradient_units(model, framework, bucket_cap_mb, first_bucket_bytes, bytes_per_param, readiness,
                              threshold)
    terms = _input_terms(src, compute_s, device_s)
    if n_gpus == 1:
        return StepPrediction(1, compute_s, 0.0, 0.0, 0.0, compute_s, buckets, "serial", batch, framework,
                              terms=tuple(terms))
    comm_each = [bucket_allreduce_time(b.nbytes, n_gpus, path, fit_ranks) for b in buckets]
    comm_total = sum(comm_each)
    overhead = 0.0 if wrapper_in_step else over.total_s(len(buckets))
    if framework == "ddp":
        exposed, wait = _ddp_exposed(buckets, comm_each, dev, backward_fraction, optimizer_s, comm_sm_share), 0.0
    else:
        exposed, wait = None, _horovod_wait(cycle, over, wrapper_in_step)
    host_path = compute_s + overhead + batch_term_s + slower_rank_s + two_worker_s
    total, bound, shown_exposed, shown_over = _step_time(framework, compute_s, device_s, host_path, exposed, wait,
                                                         comm_total)
    terms += _model_terms(framework, buckets, comm_total, shown_exposed, wait, over, overhead, wrapper_in_step,
                          batch_term_s, path, src, readiness, profile, comm_sm_share, threshold, cycle)
    terms += [_slower_rank_term(slower_rank_s, src), _two_worker_term(two_worker_s, src)]
    return StepPrediction(n_gpus, compute_s, comm_total, shown_exposed, shown_over, total, buckets, bound, batch,
                          framework, wait, tuple(terms))


def _checked_settings(framework, comm_sm_share, batch_term_s, slower_rank_s, cycle_s, fusion_threshold_bytes,
                      two_worker_s=0.0):
    """(cycle time, fusion threshold) of :func:`predict_step`, Horovod's defaults where not given, after
    checking the wrapper's settings and the added terms; raises ValueError on a bad one."""
    if framework not in FRAMEWORKS:
        raise ValueError(f"framework must be one of {', '.join(FRAMEWORKS)}, got {framework!r}")
    if not (math.isfinite(comm_sm_share) and 0 <= comm_sm_share < 1):
        raise ValueError(f"comm_sm_share is a share of the GPU between 0 and 1, got {comm_sm_share!r}")
    for name, v in (("batch_term_s", batch_term_s), ("slower_rank_s", slower_rank_s), ("two_worker_s", two_worker_s)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
            raise ValueError(f"{name} must be a number of seconds >= 0, got {v!r}")
    cycle = HOROVOD_CYCLE_TIME_S if cycle_s is None else cycle_s
    if not (isinstance(cycle, (int, float)) and math.isfinite(cycle) and cycle >= 0):
        raise ValueError(f"the cycle time must be a number of seconds >= 0, got {cycle_s!r}")
    threshold = HOROVOD_FUSION_THRESHOLD_BYTES if fusion_threshold_bytes is None else fusion_threshold_bytes
    return cycle, threshold


def _checked_step(compute_s, n_gpus, device_s, backward_fraction, optimizer_s, batch) -> float:
    """The device's step (``device_s``, else the one-GPU step ``compute_s``) after checking the
    measured step's inputs of :func:`predict_step`; raises ValueError on a bad one."""
    if not (math.isfinite(compute_s) and compute_s > 0):
        raise ValueError(f"the one-GPU step time must be a positive number of seconds, got {compute_s!r}")
    check_ranks(n_gpus)
    if device_s is not None and not (math.isfinite(device_s) and device_s > 0):
        raise ValueError(f"device_s must be a positive number of seconds, got {device_s!r}")
    if not 0 < backward_fraction <= 1:
        raise ValueError(f"backward_fraction is a share between 0 and 1, got {backward_fraction!r}")
    dev = compute_s if device_s is None else device_s
    if not 0 <= optimizer_s < dev:
        raise ValueError(f"optimizer_s must be >= 0 and shorter than the step, got {optimizer_s!r}")
    if batch is not None and (int(batch) != batch or batch < 1):
        raise ValueError(f"batch must be a whole number >= 1, got {batch!r}")
    return dev


def _gradient_units(model, framework, bucket_cap_mb, first_bucket_bytes, bytes_per_param, readiness,
                    threshold) -> tuple:
    """What one step all-reduces, one :class:`Bucket` per all-reduce: DDP's gradient buckets, or for
    Horovod the gradients fused into buffers of up to ``threshold`` bytes, each ready at the end of
    the backward pass."""
    buckets = gradient_buckets(model, bucket_cap_mb, first_bucket_bytes, bytes_per_param, readiness)
    if framework == "horovod":
        tensors = [(x.name, x.params * bytes_per_param) for x in reversed(_as_layers(model)) if x.params]
        buckets = tuple(Bucket(b.tensors, b.nbytes, 1.0) for b in fusion_buffers(tensors, threshold))
    return buckets


def _input_terms(src: Mapping, compute_s: float, device_s: Optional[float]) -> list:
    """The terms the caller measured: the one-GPU step and, when given, the GPU's busy time."""
    terms = [Term("one-GPU step", compute_s, *_given(src, "one-GPU step", "given"))]
    if device_s is not None:
        terms.append(Term("GPU busy time", device_s, *_given(src, "GPU busy time", "given")))
    return terms


def _horovod_wait(cycle: float, over: Overheads, wrapper_in_step: bool) -> float:
    """Horovod: the average wait for the background thread's next cycle, half of ``cycle``; when the
    measured wrapper cost holds half of its own cycle already, only half the difference is added."""
    if _cycle_in_cost(over, wrapper_in_step):
        return (cycle - over.cycle_s) / 2
    return cycle / 2


def _step_time(framework, compute_s, device_s, host_path, exposed, wait, comm_total) -> tuple:
    """(total, bound, exposed communication, overhead) of a multi-GPU step, from the host's path (the
    one-GPU step plus the wrapper, batch and slower-rank terms) and, when ``device_s`` is given, the
    device's path; the exposed communication and the overhead add up to what the step adds to ``compute_s``."""
    dev = compute_s if device_s is None else device_s
    if framework == "ddp" and device_s is None:
        total, bound, shown_exposed = host_path + exposed, "serial", exposed
    elif framework == "ddp":
        device_path = dev + exposed
        total = max(device_path, host_path, compute_s)
        bound = "device" if device_path >= host_path else "host"
        shown_exposed = min(total - compute_s, max(0.0, device_path - compute_s))
    else:   # Horovod: the wait for the cycle hides behind a GPU still busy with the step
        host_wait = max(compute_s, host_path + wait)
        start = host_wait if device_s is None else max(dev, host_wait)
        total = start + comm_total
        bound = "serial" if device_s is None else ("device" if dev >= host_wait else "host")
        # a wait shorter than the measured cost's own (a shorter cycle) shortens the wrapper's share instead
        shown_exposed = total - compute_s if bound == "device" else max(0.0, host_wait - host_path) + comm_total
    shown_over = total - compute_s - shown_exposed
    shown_over = 0.0 if abs(shown_over) < 1e-12 * max(1.0, total) else shown_over     # rounding, not a cost
    return total, bound, shown_exposed, shown_over


def _slower_rank_term(slower_rank_s: float, src: Mapping) -> Term:
    """The wait for the slower rank: given by the caller, or 0 (assumed) with where that comes from."""
    if slower_rank_s:
        return Term("slower rank", slower_rank_s, *_given(src, "slower rank", "given"))
    return Term("slower rank", 0.0, "assumed", src.get("slower rank", SLOWER_RANK_SOURCE))


def _two_worker_term(two_worker_s: float, src: Mapping) -> Term:
    """What two workers cost beyond the other terms: measured on the probe and given, or 0 with why."""
    if two_worker_s:
        return Term("two workers", two_worker_s, *_given(src, "two workers", "measured"))
    return Term("two workers", 0.0, "none", src.get("two workers", TWO_WORKER_SOURCE))


def _cycle_in_cost(over: Overheads, wrapper_in_step: bool) -> bool:
    """Whether the wrapper's cost added to the step holds Horovod's cycle wait already (measured with
    its hooks on, :attr:`Overheads.cycle_s`)."""
    return over.cycle_s is not None and not wrapper_in_step


def _given(src: Mapping, name: str, basis: str) -> tuple:
    """(basis, source) of an input the caller describes: ``src[name]`` is a text (basis
    ``basis``) or a (basis, text) pair."""
    v = src.get(name, "given")
    return tuple(v) if isinstance(v, (tuple, list)) else (basis, v)


def _ddp_exposed(buckets, comm_each, dev, backward_fraction, optimizer_s, comm_sm_share) -> float:
    """DDP: what the step loses to its bucketed all-reduces: the backward pass slowed beside them,
    and the part of them after it."""
    backward = backward_fraction * (dev - optimizer_s)
    comm_free, now = 0.0, 0.0                       # times from the start of the backward pass
    done = [0.0]                                    # backward work done, in seconds of backward alone
    slow = 1.0 / (1.0 - comm_sm_share)              # time per unit of backward work beside an all-reduce

    def work_until(target: float) -> float:
        """Run the backward pass until ``target`` seconds of its work are done; the time then."""
        t = now
        while done[0] < target:
            if t < comm_free:                       # beside an all-reduce: slower
                dt = min(comm_free - t, (target - done[0]) * slow)
                t, done[0] = t + dt, done[0] + dt / slow
            else:
                t, done[0] = t + target - done[0], target
        return t

    for b, t in zip(buckets, comm_each):
        now = work_until(b.ready * backward)
        comm_free = max(now, comm_free) + t
    now = work_until(backward)
    return max(now, comm_free) - backward


def _model_terms(framework, buckets, comm_total, exposed, wait, over, overhead, wrapper_in_step, batch_term_s,
                 path, src, readiness, profile, comm_sm_share, threshold, cycle) -> list:
    """The terms the model itself computes, each with where its number came from."""
    sizes = ", ".join(format_bytes(b.nbytes) for b in buckets)
    fit = src.get("all-reduce") or (f"the alpha-beta fit {path.describe()}" if hasattr(path, "describe") else
                                    f"the ring formula on {getattr(path, 'name', path)}")
    if wrapper_in_step:
        wrapper = Term("wrapper", 0.0, "modelled", IN_STEP_SOURCE)
    else:
        wrapper = Term("wrapper", overhead, over.basis,
                       over.source or ("given: " + over.describe() if over.total_s(1) else "none given"))
    if framework == "ddp":
        if isinstance(readiness, Mapping):
            ready = ("when each gradient is ready: the recorded step profile" + (f" ({profile.device})" if profile
                                                                                 else ""))
            basis = "measured"
        else:
            ready = f"when each gradient is ready: counted by {'FLOPs' if readiness == 'flops' else 'parameters'}"
            basis = "assumed"
        share = (f"; the overlapped backward slowed by the all-reduce's {100 * comm_sm_share:.0f}% of the SMs "
                 "(NCCL channels / SMs)" if comm_sm_share else "")
        comm = Term("all-reduce", comm_total, "measured", f"{len(buckets)} DDP bucket(s) ({sizes}), each from {fit}")
        overlap = Term("exposed communication", exposed, "modelled",
                       f"each bucket starts when its gradients are ready and the previous one is done; {ready} "
                       f"({basis}){share}")
        return [wrapper, comm, overlap, Term("grows with the batch", batch_term_s, "assumed" if not batch_term_s
                                             else "given", src.get("batch term", BATCH_TERM_SOURCE))]
    hsrc = horovod_source(threshold, cycle)
    comm = Term("all-reduce", comm_total, "measured",
                f"{len(buckets)} fused buffer(s) ({sizes}; fusion threshold {format_bytes(threshold)}), each from {fit}")
    if _cycle_in_cost(over, wrapper_in_step):
        added = ("none added at the same cycle" if abs(cycle - over.cycle_s) < 1e-12 else
                 f"half of the difference to the cycle time {format_time(cycle)} added")
        wait_t = Term("cycle wait", wait, "modelled",
                      f"in the measured wrapper cost, which ran at a cycle of {format_time(over.cycle_s)}; {added} ({hsrc})")
    else:
        wait_t = Term("cycle wait", wait, "modelled", f"half of the cycle time {format_time(cycle)} on average ({hsrc})")
    overlap = Term("exposed communication", exposed, "modelled",
                   "the cycle wait plus the fused all-reduces: a buffer waits for all its tensors and the step waits "
                   "for the all-reduces, so they overlap nothing; the wait hides behind a busy GPU")
    return [wrapper, comm, wait_t, overlap,
            Term("grows with the batch", batch_term_s, "assumed" if not batch_term_s else "given",
                 src.get("batch term", BATCH_TERM_SOURCE))]
