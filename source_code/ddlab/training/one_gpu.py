"""One GPU's experiments: what a single GPU trains at, and what the data-parallel wrapper costs
before any second GPU is involved.

* :func:`single_gpu_throughput` - images/s of the CNN and the two seed-sized MLPs on one GPU, in
  fp32 and bf16 (one process, ``launcher="none"``), each step launched eagerly (no CUDA graph),
  like the recorded 2-GPU runs they are set beside.
* :func:`wrapper_cost` - the same model's step plain, under DDP with world size 1 (NCCL) and
  under Horovod with size 1 (when Horovod is built for PyTorch), at several batch sizes, timed in
  one process (:mod:`ddlab.training.wrapper_cost_torch`). With one worker nothing crosses a link, so the
  difference is the wrapper's own fixed cost per step: hooks, bucketing, a collective call on
  one rank. That cost does not shrink with a faster link, which is why small models scale badly
  even over NVLink; the cost model takes it as a measured input (per step, and per gradient
  bucket when the caller says how many buckets the model has: ``buckets``, e.g. from
  :func:`ddlab.cost.step_model.gradient_buckets`, which lives above this layer).

:func:`single_gpu_throughput` runs the course's training script through
:func:`ddlab.training.runs.train` (a configuration that fails gets a row with its error and the
others still run); both return an :class:`~ddlab.training.results.ExperimentResult` ("one-gpu",
"wrapper-cost").
"""
from __future__ import annotations

import os
from typing import Callable, Optional, Sequence

from ddlab.measure import launch
from ddlab.system.frameworks import availability
from ddlab.system.provenance import run_provenance
from ddlab.training.experiment_kit import config_of, keep_runs, repeat
from ddlab.training.models import MODELS
from ddlab.training.results import ExperimentResult, median_run, row_of_repeats
from ddlab.training.runs import ExperimentError, failure_row
from ddlab.training.runspec import LIVE_GPU_REPEATS, PRECISIONS, RunSpec, RunSpecError

ONE_GPU_MODELS = ("cnn", "mlp-small", "mlp-large")     # the CNN and the seed-sized MLPs
WRAPPER_BATCHES = (32, 128, 512)
WRAPPER_WARMUP = 10      # untimed steps before each timed run
# Horovod 0.28.1's DistributedOptimizer registers its gradient hooks only when size() > 1
# (horovod/torch/optimizer.py, in _DistributedOptimizer.__init__), so with one worker it adds nothing.
HOROVOD_SIZE_ONE = ("Horovod with one worker registers no gradient hooks (its optimizer does so only when size() > 1), "
                    "so its rows time the plain step: Horovod's own cost appears only with two or more workers")
HOROVOD_HOOKS = ("horovod-hooks: the same optimizer with its hooks registered at size 1 (HOROVOD_ELASTIC=1 while it "
                 "is built, as for an elastic job of one worker), so every gradient goes through Horovod: its hook, "
                 "its background thread's next cycle, a one-rank all-reduce and synchronize, with no link crossed")
WRAPPERS = ("plain", "ddp", "horovod", "horovod-hooks")
Progress = Optional[Callable[[str], None]]


def _check(models, precisions=()) -> None:
    for m in models:
        if m not in MODELS:
            raise RunSpecError(f"unknown model {m!r}; choose from {', '.join(MODELS)}")
    for p in precisions:
        if p not in PRECISIONS:
            raise RunSpecError(f"unknown precision {p!r}; choose from {', '.join(PRECISIONS)}")


def _spec(device: str, model: str, launcher: str, fields: dict) -> RunSpec:
    """One process on one device, each step launched eagerly (no CUDA graph on a GPU)."""
    extra = {"cuda_graph": "off"} if device == "cuda" else {}
    return RunSpec.for_device(device, model, launcher=launcher, workers=1, **extra, **fields)


def planned_launches(models: Sequence[str] = ONE_GPU_MODELS, precisions: Sequence[str] = ("fp32", "bf16"),
                     repeats: Optional[int] = None) -> int:
    """How many launches :func:`single_gpu_throughput` makes on a GPU (a progress bar's total): each model
    in each precision, ``repeats`` times (None: :data:`LIVE_GPU_REPEATS`, as it does)."""
    return len(models) * len(precisions) * (LIVE_GPU_REPEATS if repeats is None else int(repeats))


def single_gpu_throughput(models: Sequence[str] = ONE_GPU_MODELS, precisions: Sequence[str] = ("fp32", "bf16"),
                          device: str = "cuda", echo: bool = False, progress: Progress = None,
                          **fields) -> ExperimentResult:
    """Images/s of each model in each precision on one ``device`` (one process, no wrapper).
    ``fields``: further RunSpec fields (batch, steps, repeats, timeout, ...). On a CPU only
    fp32 runs (bf16 autocast is the GPU's speed option), and a note says so."""
    models, precisions = list(models), list(precisions)
    _check(models, precisions)
    notes = []
    if device == "cpu" and "bf16" in precisions:
        precisions = [p for p in precisions if p != "bf16"] or ["fp32"]
        notes.append("CPU: fp32 only (bf16 is a GPU speed option here)")
    if device == "cuda":
        notes.append("one process, each step launched eagerly (no CUDA graph), like the recorded 2-GPU runs")
        if fields.get("repeats") is None:
            fields = dict(fields, repeats=LIVE_GPU_REPEATS)
    rows, all_runs, spec = [], [], None
    for model in models:
        for precision in precisions:
            spec = _spec(device, model, "none", dict(fields, precision=precision))
            try:
                runs = repeat(spec, echo=echo, progress=progress, graph_fallback=False)
            except (launch.LaunchError, ExperimentError) as exc:
                rows.append(failure_row(exc, model=model, precision=precision, workers=1))
                notes.append(f"{model} {precision} failed: {str(exc).splitlines()[0]}")
                continue
            row = row_of_repeats(runs)
            idx = keep_runs(all_runs, runs)
            rows.append(dict(row, model=model, precision=precision, params=runs[0].get("params"),
                             run=idx[median_run(runs)], runs=idx))
    if not all_runs:
        raise ExperimentError("every single-GPU run failed:\n" + "\n".join(notes))
    return ExperimentResult("one-gpu", rows, "live", run_provenance(
        f"ddlab.training.one_gpu.single_gpu_throughput(models={models}, precisions={precisions}, device={device!r})"),
        notes, config_of(spec, all_runs[0], models=models, precisions=precisions), all_runs)


def available_wrappers(framework: str = "torch") -> list:
    """plain and ddp, and horovod and horovod-hooks (:data:`HOROVOD_HOOKS`) when Horovod is installed
    and built for ``framework``."""
    return ["plain", "ddp"] + (["horovod", "horovod-hooks"] if availability(framework, "horovod")[0] else [])


def wrapper_cost(models: Sequence[str] = ("mlp-small",), batches: Sequence[int] = WRAPPER_BATCHES,
                 wrappers: Optional[Sequence[str]] = None, device: str = "cuda",
                 buckets: Optional[Callable[[str], int]] = None, precision: str = "bf16", steps: int = 50,
                 repeats: int = 5) -> ExperimentResult:
    """The data-parallel wrapper's own cost on one worker: for each model and batch, the step of
    the plain model and of the model under each wrapper (``wrappers`` None:
    :func:`available_wrappers`: DDP with world size 1, Horovod with size 1), timed in one
    process (:func:`ddlab.training.wrapper_cost_torch.measure`: the same inputs, the variants'
    runs interleaved, the median of ``repeats`` runs of ``steps`` steps). Rows:
    ``step_ms_median`` and ``cost_ms`` (the wrapper's step minus the plain step), ``cost_share``
    (of the plain step), and with ``buckets`` (model -> number of DDP gradient buckets)
    ``buckets`` and ``cost_per_bucket_ms``. Raises :class:`ExperimentError` with one line when
    the device or a wrapper cannot be had."""
    from ddlab.training import wrapper_cost_torch
    models, batches = list(models), [int(b) for b in batches]
    _check(models, [precision])
    if not batches or min(batches) < 1:
        raise RunSpecError("batches must be positive whole numbers, e.g. (32, 128, 512)")
    wrappers = list(wrappers) if wrappers is not None else available_wrappers()
    for w in wrappers:
        if w not in WRAPPERS:
            raise RunSpecError(f"unknown wrapper {w!r}; choose from {', '.join(WRAPPERS)}")
    order = ["plain"] + [w for w in wrappers if w != "plain"]
    notes = ["one worker, one process: nothing crosses a link, so a wrapper's extra time per step is its own "
             f"fixed cost; each step the median of {repeats} runs of {steps} steps, the variants' runs interleaved"]
    if not any(w.startswith("horovod") for w in order):
        notes.append("Horovod not measured: " + availability("torch", "horovod")[1])
    if "horovod" in order:
        notes.append(HOROVOD_SIZE_ONE)
    if "horovod-hooks" in order:
        notes.append(HOROVOD_HOOKS)
    if device == "cpu":
        notes.append("CPU (DDP over gloo): the code path, not GPU figures")
    try:
        timed = wrapper_cost_torch.measure(models, batches, order, device=device, precision=precision, steps=steps,
                                           warmup=WRAPPER_WARMUP, repeats=repeats)
    except (RuntimeError, ImportError) as exc:
        raise ExperimentError(f"the wrapper's cost could not be measured: {str(exc).splitlines()[0]}") from None
    plain = {(t["model"], t["batch"]): t["step_s"] for t in timed if t["wrapper"] == "plain"}
    rows = []
    for t in timed:
        n_buckets = buckets(t["model"]) if buckets else None
        base = plain[(t["model"], t["batch"])]
        cost = (t["step_s"] - base) * 1e3
        rows.append({"model": t["model"], "batch": t["batch"], "wrapper": t["wrapper"], "workers": 1,
                     "step_ms_median": t["step_s"] * 1e3, "step_ms_spread": f"{t['min_s'] * 1e3:.3f}-{t['max_s'] * 1e3:.3f}",
                     "step_ms_runs": [r * 1e3 for r in t["runs"]], "images_per_s": t["batch"] / t["step_s"],
                     "images_per_s_min": t["batch"] / t["max_s"], "images_per_s_max": t["batch"] / t["min_s"],
                     "cost_ms": cost, "cost_share": cost / (base * 1e3), "buckets": n_buckets,
                     "cost_per_bucket_ms": cost / n_buckets if n_buckets and t["wrapper"] != "plain" else None,
                     "precision": precision, "device": device, "repeats": repeats})
    # the run description: the first model at the largest batch under DDP; the rows vary model, batch, wrapper
    spec = _spec(device, models[0], "ddp", dict(batch=max(batches), steps=steps + WRAPPER_WARMUP,
                                                 warmup_steps=WRAPPER_WARMUP, precision=precision, repeats=repeats))
    cfg = {"framework": "torch", "launcher": "+".join(order), "models": models, "batches": batches,
           "wrappers": order, "device": device, "precision": precision, "steps": steps, "repeats": repeats,
           "spec": spec.to_dict(),
           # Horovod's cycle and fusion as set here (unset: its defaults), which horovod-hooks ran under
           "horovod_env": {k: os.environ[k] for k in ("HOROVOD_CYCLE_TIME", "HOROVOD_FUSION_THRESHOLD")
                           if k in os.environ}}
    return ExperimentResult("wrapper-cost", rows, "live", run_provenance(
        f"ddlab.training.one_gpu.wrapper_cost(models={models}, batches={batches}, wrappers={order}, "
        f"device={device!r})"), notes, cfg)


def beside_recorded(result: ExperimentResult):
    """A :class:`ddlab.base.tables.Table` of ``result``'s single-GPU images/s (a "one-gpu"
    result) beside the course's recorded DDP scaling runs of the same model (bf16, batch 512 per
    GPU, :func:`ddlab.training.recording.load_recorded`): their one-worker and two-worker images/s,
    and this GPU over the recorded one worker (n/a where nothing is recorded)."""
    from ddlab.base import reference
    from ddlab.base.tables import Table
    from ddlab.system.provenance import label
    from ddlab.training import recording
    if result.name != "one-gpu":
        raise ValueError(f"needs a one-gpu result, got {result.name!r}")
    rows, machines = [], set()
    for r in result.rows:
        row = {"model": r.get("model"), "precision": r.get("precision"), "here": r.get("images_per_s")}
        try:
            rec = recording.load_recorded("scaling", "torch", "ddp", r.get("model"))
        except reference.ReferenceMissing:
            rec = None
        if rec is not None:
            by_workers = {x["workers"]: x["images_per_s"] for x in rec.rows if not x.get("error")}
            row.update(one=by_workers.get(1), two=by_workers.get(2))
            machines.add(label(rec.provenance))
        row["ratio"] = row["here"] / row["one"] if row.get("one") and row.get("here") else None
        rows.append(row)
    where = "; ".join(sorted(machines)) or "nothing recorded"
    return Table([("model", "text"), ("precision", "text"), ("here", "count", "this GPU, images/s"),
                  ("one", "count", "recorded 1 GPU (DDP)"), ("two", "count", "recorded 2 GPUs (DDP)"),
                  ("ratio", "ratio", "this / recorded 1")], rows,
                 title=f"This GPU beside the recorded 2-GPU runs ({where})",
                 notes="recorded: DDP, bf16, batch 512 per GPU, steps launched eagerly; compare the bf16 rows "
                       "like with like")
