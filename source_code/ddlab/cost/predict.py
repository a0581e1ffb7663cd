"""``ddlab predict``: the step model as one function and one command with the same inputs.

:func:`predict` takes a model (a course model's name, the widths of an MLP, or a parameter
count and a number of layers), the one-GPU step (given, or measured now with
:mod:`ddlab.training.step_timing`), the batch (per GPU: weak scaling; or global, split over
the GPUs: strong scaling), the number of GPUs, the NCCL path and the all-reduce fits it is
read from (a recorded machine, a sweep file of ``ddlab allreduce --out``, or a sweep measured
now), the framework and the gradients' type, and returns a :class:`Prediction`: the step on
``n`` GPUs split into compute, exposed communication and the wrapper's cost, the speedup over
the plain one-GPU run (no wrapper), the term that bounds the step, and where each term's number came from.

The model underneath is :func:`ddlab.cost.step_model.predict_step` (DDP's buckets, or
Horovod's fusion buffers and cycle; each all-reduce from the path's alpha-beta fit carried to
``n`` GPUs by the ring factor 2(n-1)/n; overlap with the backward pass); the wrapper's cost is
the one measured on one worker (:func:`ddlab.cost.wrapper_cost.measured`): a given one-GPU
step is taken as a plain step, without the wrapper. Every term of the result says where its
number came from (``terms``). :func:`cli` is the command; bad input ends it with one message
and exit status 2.

    python -m ddlab predict --mlp 847,256,128,64,1 --step-ms 0.41 --batch 64 --gpus 2 \\
        --path default --fits h200x2 [--framework ddp|horovod] [--dtype fp32|bf16] [--json]
"""
from __future__ import annotations

import argparse
import functools
import json
import math
import os
import sys
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

from ddlab.base.errors import CourseError
from ddlab.base.units import format_bytes, format_time
from ddlab.cost import recorded_runs, wrapper_cost
from ddlab.cost.alpha_beta import AlphaBeta, fit_sweep
from ddlab.cost.step_model import Overheads, StepPrediction, predict_step
from ddlab.training.models import MODELS, Layer, model_layers

FRAMEWORKS = ("ddp", "horovod")
DTYPES = {"fp32": 4, "bf16": 2}          # bytes per gradient value on the wire
PATHS = ("default", "shm", "socket")     # the course's NCCL paths (ddlab.system.nccl.COMPARED)
RECORDED = "h200x2"                      # the recorded machine the wrapper's cost is fitted on
LIVE = "live"


class PredictError(CourseError, ValueError):
    """Input ``predict`` cannot use; its message names the bad value."""


# ----------------------------------------------------------------------------- the inputs
def model_of(model: Optional[str] = None, mlp: Optional[Sequence[int]] = None, params: Optional[int] = None,
             layers: Optional[int] = None) -> tuple:
    """(label, layers as :class:`ddlab.training.models.Layer` items) for exactly one of: a course
    model's name, MLP widths (inputs first, outputs last), or a parameter count with a number of
    layers (equal layers, their FLOPs in proportion to their parameters)."""
    given = [x is not None for x in (model, mlp, params)]
    if sum(given) != 1:
        raise PredictError("give the model one way: a course model's name (--model), MLP widths (--mlp), "
                           "or a parameter count and a layer count (--params and --layers)")
    if layers is not None and params is None:
        raise PredictError("--layers goes with --params (a parameter count split over that many layers)")
    if model is not None:
        if model not in MODELS:
            raise PredictError(f"unknown model {model!r}; the course's models are {', '.join(MODELS)}")
        return model, model_layers(model)
    if mlp is not None:
        widths = tuple(mlp)
        if len(widths) < 2 or not all(isinstance(w, int) and not isinstance(w, bool) and w >= 1 for w in widths):
            raise PredictError(f"MLP widths are whole numbers >= 1, inputs first and outputs last (at least two), "
                               f"got {list(widths)!r}")
        out = tuple(Layer(f"dense{i + 1}", a * b + b, 2.0 * a * b) for i, (a, b) in enumerate(zip(widths, widths[1:])))
        return "mlp " + "-".join(map(str, widths)), out
    if isinstance(params, bool) or not isinstance(params, int) or params < 1:
        raise PredictError(f"a parameter count is a whole number >= 1, got {params!r}")
    if layers is None:
        raise PredictError("--params needs --layers: how many layers the parameters are split over")
    if isinstance(layers, bool) or not isinstance(layers, int) or not 1 <= layers <= params:
        raise PredictError(f"the layer count is a whole number from 1 to the parameter count, got {layers!r}")
    each, extra = divmod(params, layers)
    sizes = [each + (1 if i < extra else 0) for i in range(layers)]
    return (f"a model of {layers} equal layer(s)",
            tuple(Layer(f"layer{i + 1}", s, 2.0 * s) for i, s in enumerate(sizes)))


@dataclass(frozen=True)
class Fits:
    """All-reduce fits per path: an :class:`ddlab.cost.alpha_beta.AlphaBeta` of a measured sweep
    (or a link of :mod:`ddlab.system.links`), the ranks each sweep ran on, the NCCL channels
    its log names, and where they came from."""
    label: str
    by_path: dict
    ranks: dict = field(default_factory=dict)
    channels: dict = field(default_factory=dict)


def _fits_of_sweeps(label: str, sweeps: Mapping) -> Fits:
    by_path, ranks, channels = {}, {}, {}
    for p, s in sweeps.items():
        try:
            by_path[p] = fit_sweep(s)
        except ValueError as exc:
            raise PredictError(f"the {p} sweep of {label} cannot be fitted: {exc}") from None
        ranks[p] = s.nproc
        c = recorded_runs.nccl_channels(s)
        if c:
            channels[p] = c
    return Fits(label, by_path, ranks, channels)


@functools.lru_cache(maxsize=4)
def recorded_fits(name: str = RECORDED) -> Fits:
    """The fits of the recorded all-reduce sweeps ``reference/allreduce/<name>.json``."""
    from ddlab.base.reference import ReferenceMissing, names
    from ddlab.measure import collectives
    try:
        sweeps = collectives.load_recorded(name)
    except ReferenceMissing:
        raise PredictError(f"no recorded all-reduce sweeps named {name!r}; recorded: "
                           f"{', '.join(names('allreduce')) or 'none'} (or give a file of `ddlab allreduce --out`, "
                           f"or '{LIVE}')") from None
    except ValueError as exc:
        raise PredictError(f"reference allreduce/{name}: {exc}") from None
    return _fits_of_sweeps(f"the recorded sweeps {name}", sweeps)


def file_fits(path: str) -> Fits:
    """The fits of a sweep file written by ``ddlab allreduce --out`` (read and checked by
    :func:`ddlab.measure.collectives.read_json`)."""
    from ddlab.base import files
    from ddlab.measure import collectives
    try:
        sweeps = [s for s in collectives.read_json(path) if s.op == "all_reduce"]
    except OSError as exc:
        raise PredictError(f"cannot read the fit file {path}: {exc.strerror or exc}") from None
    except (files.ResultFileError, ValueError) as exc:
        raise PredictError(f"not a sweep file of `ddlab allreduce --out`: {exc}") from None
    if not sweeps:
        raise PredictError(f"{path} holds no all-reduce sweep")
    return _fits_of_sweeps(os.path.basename(path), {s.path: s for s in sweeps})


def live_fits(echo: bool = False) -> Fits:
    """This machine's all-reduce sweeps measured now: NCCL under each path with two GPUs or
    more, else gloo between two CPU processes (its path is 'default')."""
    from ddlab.measure import collectives_run
    from ddlab.system import frameworks
    if frameworks.gpu_count() >= 2:
        sweeps = collectives_run.compare_paths(echo=echo)
        return _fits_of_sweeps("this machine's sweeps, measured now", sweeps)
    sweep = collectives_run.sweep(backend="gloo", max_bytes="16M", echo=echo)
    return _fits_of_sweeps("this machine's gloo sweep between 2 CPU processes, measured now", {"default": sweep})


def fits_of(fits) -> Fits:
    """A :class:`Fits` for ``fits``: a recorded machine's name, a sweep file, ``'live'``, a
    :class:`Fits`, or a mapping {path: AlphaBeta or link}."""
    if isinstance(fits, Fits):
        return fits
    if isinstance(fits, Mapping):
        return Fits("the fits given", dict(fits))
    if not isinstance(fits, str) or not fits:
        raise PredictError(f"--fits names a recorded machine (e.g. {RECORDED}), a sweep file or '{LIVE}', "
                           f"got {fits!r}")
    if fits == LIVE:
        return live_fits()
    if fits.endswith(".json") or os.sep in fits or os.path.exists(fits):
        return file_fits(fits)
    return recorded_fits(fits)


@functools.lru_cache(maxsize=2)
def recorded_set(name: str = RECORDED) -> recorded_runs.RecordedSet:
    """The recorded runs of machine ``name`` (loaded once per session)."""
    return recorded_runs.recorded_points(sweeps=name)


def measured_wrapper(framework: str) -> Overheads:
    """The wrapper's cost of ``framework`` measured on one worker (:func:`ddlab.cost.wrapper_cost.measured`);
    none, said so, where the course has no such recording."""
    from ddlab.base.reference import ReferenceMissing
    try:
        return wrapper_cost.measured(framework)
    except ReferenceMissing:
        return Overheads(launcher=framework, basis="none",
                         source="none: no recorded measurement of the wrapper's cost on one worker")


# ----------------------------------------------------------------------------- the prediction
@dataclass(frozen=True)
class Prediction:
    """A predicted step on ``gpus`` GPUs: ``step`` (its compute, exposed communication and
    wrapper cost), the one-GPU step it is compared with, and ``sources``: {term: where its
    number came from}. Weak scaling keeps the batch per GPU; strong scaling splits the global
    batch, and ``one_gpu_step_s`` is then the one-GPU step at the global batch."""
    model: str
    parameters: int
    gradient_bytes: int
    gpus: int
    scaling: str                 # "weak" or "strong"
    batch_per_gpu: int
    global_batch: int
    one_gpu_step_s: float
    step: StepPrediction
    path: str
    fits: str
    framework: str
    dtype: str
    sources: dict
    plain_step_s: Optional[float] = None   # the plain one-GPU step the speedup divides by (None: the one-GPU step)

    @property
    def step_s(self) -> float:
        return self.step.total_s

    @property
    def compute_s(self) -> float:
        return self.step.compute_s

    @property
    def exposed_comm_s(self) -> float:
        return self.step.exposed_comm_s

    @property
    def wait_s(self) -> float:
        """The wait for the slower rank, as far as it lengthens the step (a device-bound step hides it)."""
        return self.step.slower_rank_s

    @property
    def two_worker_s(self) -> float:
        """What two workers cost beyond the other terms (measured on the probe), as far as it lengthens the step."""
        return self.step.two_workers_s

    @property
    def wrapper_s(self) -> float:
        return self.step.wrapper_s

    @property
    def speedup(self) -> float:
        """Images per second on ``gpus`` GPUs over images per second of the plain one-GPU run (no
        wrapper: the given step, or with ``step_has_wrapper`` that step less the wrapper's one-worker cost)."""
        plain = self.plain_step_s if self.plain_step_s is not None else self.one_gpu_step_s
        return (self.gpus if self.scaling == "weak" else 1) * plain / self.step_s

    def terms(self) -> dict:
        return {"compute": self.compute_s, "exposed communication": self.exposed_comm_s,
                "wrapper": self.wrapper_s, "slower rank": self.wait_s, "two workers": self.two_worker_s}

    def model_terms(self) -> list:
        """Every term of the step model with its time, basis and where its number came from."""
        return [t.to_dict() for t in self.step.terms]

    @property
    def bound(self) -> str:
        """The largest of the terms: what bounds the step."""
        t = self.terms()
        return max(t, key=t.get)

    def to_dict(self) -> dict:
        ms = 1e3
        return {"speedup": self.speedup, "step_ms": self.step_s * ms, "compute_ms": self.compute_s * ms,
                "exposed_comm_ms": self.exposed_comm_s * ms, "wrapper_ms": self.wrapper_s * ms,
                "wait_ms": self.wait_s * ms, "two_worker_ms": self.two_worker_s * ms,
                "bound": self.bound, "one_gpu_step_ms": self.one_gpu_step_s * ms,
                "plain_step_ms": (self.plain_step_s if self.plain_step_s is not None else self.one_gpu_step_s) * ms,
                "allreduce_ms": self.step.comm_s * ms, "hidden_comm_ms": self.step.hidden_comm_s * ms,
                "buckets": len(self.step.buckets), "gradient_bytes": self.gradient_bytes,
                "parameters": self.parameters, "model": self.model, "gpus": self.gpus, "scaling": self.scaling,
                "batch_per_gpu": self.batch_per_gpu, "global_batch": self.global_batch, "path": self.path,
                "fits": self.fits, "framework": self.framework, "dtype": self.dtype, "sources": dict(self.sources),
                "cycle_wait_ms": self.step.cycle_wait_s * ms, "terms": self.model_terms()}

    def describe(self) -> str:
        batch = (f"{self.batch_per_gpu} images per GPU (weak scaling)" if self.scaling == "weak" else
                 f"global batch {self.global_batch} split into {self.batch_per_gpu} per GPU (strong scaling)")
        lines = [f"{self.model}: {self.parameters:,} parameters, {format_bytes(self.gradient_bytes)} of {self.dtype} "
                 f"gradients in {len(self.step.buckets)} {'fused buffer(s)' if self.framework == 'horovod' else 'bucket(s)'}; {self.framework.upper() if self.framework == 'ddp' else 'Horovod'} "
                 f"on {self.gpus} GPUs over path {self.path}, {batch}",
                 f"  {'one GPU':<23} {format_time(self.one_gpu_step_s):>10}   {self.sources.get('one GPU', '')}"]
        for name, v in self.terms().items():
            lines.append(f"  {name:<23} {format_time(v):>10}   {self.sources.get(name, '')}")
        lines.append(f"  {'step on %d GPUs' % self.gpus:<23} {format_time(self.step_s):>10}")
        lines.append("terms of the model:")
        for t in self.step.terms:
            v = "" if t.seconds is None else format_time(t.seconds)
            lines.append(f"  {t.name:<23} {v:>10}   {t.basis}: {t.source}")
        if self.plain_step_s is not None and self.plain_step_s != self.one_gpu_step_s:
            lines.insert(2, f"  {'plain one GPU':<23} {format_time(self.plain_step_s):>10}   "
                            f"{self.sources.get('plain one GPU', '')}")
        lines.append(f"speedup {self.speedup:.2f}x over the plain one-GPU run; the step is bound by {self.bound}.")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.describe()


def _positive_int(what: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise PredictError(f"{what} must be a whole number >= 1, got {v!r}")
    return v


def _positive_ms(what: str, v, zero: bool = False) -> float:
    if (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
            or not (v >= 0 if zero else v > 0)):
        raise PredictError(f"{what} must be a {'' if zero else 'positive '}number of milliseconds"
                           f"{' >= 0' if zero else ''}, got {v!r}")
    return float(v)


def predict(model: Optional[str] = None, *, mlp: Optional[Sequence[int]] = None, params: Optional[int] = None,
            layers: Optional[int] = None, step_ms: Optional[float] = None, measure: bool = False,
            batch: Optional[int] = None, global_batch: Optional[int] = None, gpus: int = 2, path: str = "default",
            fits=RECORDED, framework: str = "ddp", dtype: str = "fp32", fixed_ms: Optional[float] = None,
            wrapper: Optional[Overheads] = None, step_device: Optional[str] = None,
            wait_ms: Optional[float] = None, wait_source: str = "", step_has_wrapper: bool = False) -> Prediction:
    """Predict one data-parallel step on ``gpus`` GPUs (see the module's docstring).

    * the model: ``model`` (a course model), ``mlp`` (widths) or ``params`` with ``layers``;
    * the one-GPU step: ``step_ms``, or ``measure=True`` (timed now on this machine's first GPU,
      else its CPU, with :func:`ddlab.training.step_timing.measure`);
    * ``batch`` per GPU (weak scaling), or ``global_batch`` split over the GPUs (strong scaling:
      ``step_ms`` is the one-GPU step at the global batch; ``fixed_ms`` of it does not shrink
      with the batch and the rest shrinks in proportion; default: all of it is fixed, as for a
      small-batch step on a GPU, which launching kernels bounds. ``measure`` times both batches);
    * ``path`` and ``fits``: see :func:`fits_of`; ``framework``: "ddp" or "horovod" (the
      wrapper's cost measured on one worker for that framework, unless ``wrapper`` gives one);
      ``dtype``: the gradients' type on the wire ("fp32" or "bf16");
    * ``step_device``: what a given ``step_ms`` was measured on ("cpu" or a GPU's name), so that
      a recorded step profile of another device is not used;
    * ``step_has_wrapper``: the given one-GPU step ran under the same wrapper with one worker (DDP with
      world size 1): its cost is not added again, and the plain step the speedup divides by is that
      step less DDP's measured one-worker cost (Horovod registers no hooks with one worker);
    * ``wait_ms``: the wait for the slower rank per step (e.g.
      :func:`ddlab.cost.step_model.slower_rank_wait` of one GPU's step times), with where it came
      from in ``wait_source``; default: not included (0).

    Raises :class:`PredictError` (a ValueError) for input it cannot use."""
    label, model_layers_ = model_of(model, mlp, params, layers)
    gpus, strong, per_gpu, global_batch = _checked(framework, dtype, gpus, batch, global_batch, step_ms, measure,
                                                   params, fixed_ms)
    t1, compute, step_device, sources = _one_gpu_step(model, mlp, step_ms, measure, strong, per_gpu, global_batch,
                                                      fixed_ms, step_device)
    f = fits_of(fits)
    if path not in f.by_path:
        if path not in PATHS and not isinstance(fits, Mapping):
            raise PredictError(f"unknown path {path!r}; the course's paths are {', '.join(PATHS)}")
        raise PredictError(f"{f.label} have no fit for path {path!r} (have: {', '.join(f.by_path) or 'none'})")
    link = f.by_path[path]
    rec = recorded_set()
    over = (wrapper_cost.over_one_worker_step(framework) if step_has_wrapper and wrapper is None else
            wrapper if wrapper is not None else measured_wrapper(framework))
    measured = {}
    if model is not None:
        measured = recorded_runs.measured_inputs(model, per_gpu, rec.profiles, f.channels.get(path), step_device)
    how = (f"the alpha-beta fit of {f.label}, path {path} ({link.describe()}), carried to {gpus} GPUs by the "
           f"ring's 2(n-1)/n" if isinstance(link, AlphaBeta) else
           f"the ring formula on {getattr(link, 'name', link)} (its alpha and beta)")
    model_sources = {"one-GPU step": ("measured" if measure else "given", sources["compute"]), "all-reduce": how}
    wait = 0.0
    if wait_ms is not None:
        wait = _positive_ms("--wait-ms", wait_ms, zero=True) * 1e-3
        model_sources["slower rank"] = ("measured", wait_source) if wait_source else ("given", "--wait-ms")
        sources["slower rank"] = wait_source or "given (--wait-ms)"
    else:
        sources["slower rank"] = "not included (--wait-ms)"
    two = rec.two_workers.get((framework, path)) if fits == RECORDED else None
    if two:
        model_sources["two workers"] = ("measured", two[1] + (f"; measured on 2 GPUs, taken for {gpus}" if gpus > 2
                                                              else ""))
    sources["two workers"] = model_sources["two workers"][1] if two else (
        "not included: the probe is recorded for the course's machine only (--fits " + RECORDED + ")")
    try:
        step = predict_step(model_layers_, compute, link, gpus, batch=per_gpu, overheads=over,
                            bytes_per_param=DTYPES[dtype], fit_ranks=f.ranks.get(path, 2), framework=framework,
                            sources=model_sources, slower_rank_s=wait, two_worker_s=two[0] if two else 0.0,
                            **measured)
    except ValueError as exc:
        raise PredictError(str(exc)) from None
    sources["exposed communication"] = _exposed_source(step, framework, how, model, "profile" in measured)
    sources["wrapper"] = ("given: " + over.describe()) if wrapper is not None else f"{over.describe()}: {over.source}"
    plain_s = t1
    if step_has_wrapper:
        plain_s, sources["plain one GPU"] = _plain_step(t1, framework, len(step.buckets))
    return Prediction(label, sum(x.params for x in model_layers_), sum(b.nbytes for b in step.buckets), gpus,
                      "strong" if strong else "weak", per_gpu, per_gpu * gpus, t1, step, path, f.label, framework,
                      dtype, sources, plain_s)


def _checked(framework, dtype, gpus, batch, global_batch, step_ms, measure, params, fixed_ms) -> tuple:
    """(gpus, strong?, batch per GPU, global batch) from :func:`predict`'s arguments, each checked."""
    gpus = _positive_int("--gpus", gpus)
    if gpus < 2:
        raise PredictError(f"--gpus must be 2 or more: on one GPU the step is the one-GPU step itself (got {gpus})")
    if framework not in FRAMEWORKS:
        raise PredictError(f"unknown framework {framework!r}; choose one of {', '.join(FRAMEWORKS)}")
    if dtype not in DTYPES:
        raise PredictError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    if (batch is None) == (global_batch is None):
        raise PredictError("give the batch per GPU (--batch, weak scaling) or the global batch split over the GPUs "
                           "(--global-batch, strong scaling), one of the two")
    if (step_ms is None) == (not measure):
        raise PredictError("give the one-GPU step (--step-ms) or ask for it to be measured now (--measure), "
                           "one of the two")
    if measure and params is not None:
        raise PredictError("--measure needs --model or --mlp: a parameter count has no layers to run")
    if fixed_ms is not None and (global_batch is None or measure):
        raise PredictError("--fixed-ms goes with --global-batch and --step-ms (with --measure both steps are timed)")
    strong = global_batch is not None
    if strong:
        global_batch = _positive_int("--global-batch", global_batch)
        if global_batch % gpus:
            raise PredictError(f"a global batch of {global_batch} does not split evenly over {gpus} GPUs")
        return gpus, True, global_batch // gpus, global_batch
    return gpus, False, _positive_int("--batch", batch), None


def _one_gpu_step(model, mlp, step_ms, measure, strong, per_gpu, global_batch, fixed_ms, step_device) -> tuple:
    """(the one-GPU step, the compute per GPU, the device it was measured on, {term: source}): given
    (``step_ms``, cut to the batch share for strong scaling) or timed now (``measure``)."""
    sources = {}
    if measure:
        from ddlab.training import step_timing
        what = model if model is not None else tuple(mlp)
        one = step_timing.measure(what, global_batch if strong else per_gpu)
        t1, step_device = one.seconds, one.device
        sources["one GPU"] = "measured now: " + one.describe()
        if strong:
            each = step_timing.measure(what, per_gpu)
            sources["compute"] = "measured now: " + each.describe()
            return t1, each.seconds, step_device, sources
        sources["compute"] = "the one-GPU step (measured now)"
        return t1, t1, step_device, sources
    t1 = _positive_ms("--step-ms", step_ms) * 1e-3
    sources["one GPU"] = "given (--step-ms)" + (f", at the global batch {global_batch}" if strong else "")
    if not strong:
        sources["compute"] = "the one-GPU step (given)"
        return t1, t1, step_device, sources
    fixed = t1 if fixed_ms is None else _positive_ms("--fixed-ms", fixed_ms) * 1e-3
    if fixed > t1:
        raise PredictError(f"--fixed-ms ({fixed_ms}) cannot exceed the one-GPU step ({step_ms} ms)")
    sources["compute"] = (f"the one-GPU step with its batch cut to {per_gpu}: "
                          + ("all of it taken not to shrink (a small-batch step on a GPU is bound by "
                             "launching kernels; --fixed-ms or --measure changes that)" if fixed_ms is None else
                             f"{format_time(fixed)} of it fixed (--fixed-ms), the rest in proportion"))
    return t1, fixed + (t1 - fixed) * per_gpu / global_batch, step_device, sources


def _exposed_source(step: StepPrediction, framework: str, how: str, model: Optional[str], profiled: bool) -> str:
    """Where the exposed communication's number came from."""
    if framework == "horovod":
        return (f"{len(step.buckets)} fused all-reduce(s), {format_time(step.comm_s)} in all, from {how}, after a "
                f"wait of half a cycle ({format_time(step.cycle_wait_s)}; {wrapper_cost.horovod_source()}); none of "
                "it hidden behind the backward pass")
    hidden = step.hidden_comm_s if step.hidden_comm_s > 1e-12 else 0.0     # not rounding noise
    ready = ("when each layer's gradient is ready: the recorded step profile of " + str(model) if profiled
             else "each layer's gradient taken ready in proportion to its FLOPs")
    return (f"{len(step.buckets)} all-reduce(s), {format_time(step.comm_s)} in all, from {how}; "
            f"{format_time(hidden)} of it hidden behind the backward pass ({ready})")


def _plain_step(t1: float, framework: str, buckets: int) -> tuple:
    """(the plain one-GPU step, its source) for a one-GPU step ``t1`` that ran under the wrapper with one
    worker: DDP's measured one-worker cost taken off (:func:`ddlab.cost.wrapper_cost.measured`); Horovod
    registers no hooks with one worker, so its step is the plain one. The speedup divides by the plain step."""
    if framework != "ddp":
        return t1, "the given step (Horovod with one worker registers no hooks: its step is the plain one)"
    over = measured_wrapper(framework)
    if over.basis == "none":
        raise PredictError("--step-has-wrapper needs DDP's one-worker cost to find the plain step, and none is "
                           "recorded (source_code/reference/experiments/wrapper-cost-torch.json)")
    cost = over.total_s(buckets)
    if cost >= t1:
        raise PredictError(f"the given step ({format_time(t1)}) is not longer than DDP's one-worker cost "
                           f"({format_time(cost)}): it cannot have run under DDP")
    return t1 - cost, (f"the given step less DDP's one-worker cost ({format_time(cost)}, {over.describe()}), so the "
                       "speedup is over the plain one-GPU run")


# ----------------------------------------------------------------------------- the command
class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise PredictError(message)


def _widths(text: str) -> tuple:
    try:
        return tuple(int(w) for w in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"layer widths are whole numbers separated by commas, inputs first and "
                                         f"outputs last (e.g. 847,256,128,64,1), got {text!r}") from None


def _count(text: str) -> int:
    """A parameter count: 258305, 258K, 6.9M or 1.2G."""
    scale = {"k": 1e3, "m": 1e6, "g": 1e9}
    t = text.strip().lower().replace(",", "").replace("_", "")
    try:
        value = float(t[:-1]) * scale[t[-1]] if t and t[-1] in scale else float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a parameter count is a number such as 258305, 258K or 6.9M, got {text!r}") from None
    if not (math.isfinite(value) and value >= 1):
        raise argparse.ArgumentTypeError(f"a parameter count must be at least 1, got {text!r}")
    return int(round(value))


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="ddlab predict",
                description="Predict a data-parallel training step on several GPUs from the one-GPU step: compute, "
                            "exposed communication (the gradients' all-reduce from a path's alpha-beta fit, overlapped "
                            "with the backward pass) and the wrapper's cost; the speedup and what bounds the step.")
    m = p.add_mutually_exclusive_group(required=True)
    m.add_argument("--model", help="a course model: " + ", ".join(MODELS))
    m.add_argument("--mlp", type=_widths, help="MLP layer widths, inputs first and outputs last, e.g. 847,256,128,64,1")
    m.add_argument("--params", type=_count, help="a parameter count (e.g. 6.9M), with --layers")
    p.add_argument("--layers", type=int, help="with --params: how many equal layers hold them")
    s = p.add_mutually_exclusive_group(required=True)
    s.add_argument("--step-ms", type=float, help="the one-GPU training step in ms (at --batch, or at --global-batch)")
    s.add_argument("--measure", action="store_true", help="measure the one-GPU step now on this machine "
                                                          "(its first GPU, else its CPU)")
    b = p.add_mutually_exclusive_group(required=True)
    b.add_argument("--batch", type=int, help="images per GPU (weak scaling: each GPU keeps this batch)")
    b.add_argument("--global-batch", type=int, help="images per step split over the GPUs (strong scaling)")
    p.add_argument("--fixed-ms", type=float, help="with --global-batch and --step-ms: the part of the step that does "
                                                  "not shrink with the batch (default: all of it)")
    p.add_argument("--gpus", type=int, default=2, help="GPUs to predict (2 or more; default 2)")
    p.add_argument("--path", default="default", help="NCCL path: " + ", ".join(PATHS) + " (default: default)")
    p.add_argument("--fits", default=RECORDED, help=f"the all-reduce fits: a recorded machine ({RECORDED}), a JSON "
                                                    f"file of `ddlab allreduce --out`, or {LIVE} (measured now)")
    p.add_argument("--framework", default="ddp", choices=FRAMEWORKS)
    p.add_argument("--step-has-wrapper", action="store_true",
                   help="the one-GPU step ran under the same wrapper with one worker (DDP with world size 1): its "
                        "cost is in --step-ms already, so it is not added again, and the speedup divides by that step "
                        "less DDP's measured one-worker cost, the plain step (Horovod registers no hooks with one "
                        "worker, so its cost is still added)")
    p.add_argument("--wait-ms", type=float, help="the wait for the slower rank per step in ms (a step lasts as long "
                                                 "as the slowest rank's; default: not included)")
    p.add_argument("--dtype", default="fp32", choices=tuple(DTYPES), help="the gradients' type on the wire")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p


def cli(argv: list) -> int:
    """``ddlab predict``: 0 with the prediction, 2 (one message) for input it cannot use."""
    try:
        a = parser().parse_args(argv)
        pred = predict(a.model, mlp=a.mlp, params=a.params, layers=a.layers, step_ms=a.step_ms, measure=a.measure,
                       batch=a.batch, global_batch=a.global_batch, gpus=a.gpus, path=a.path, fits=a.fits,
                       framework=a.framework, dtype=a.dtype, fixed_ms=a.fixed_ms, wait_ms=a.wait_ms,
                       step_has_wrapper=a.step_has_wrapper)
    except ValueError as exc:            # PredictError and the checks under it
        print(f"ddlab predict: {exc}", file=sys.stderr)
        return 2
    except (RuntimeError, OSError) as exc:   # a measurement that could not run here
        print(f"ddlab predict: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(pred.to_dict(), indent=1) if a.json else pred.describe())
    return 0
