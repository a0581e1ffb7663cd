"""The plain one-GPU runs the committed 2-GPU recordings divide their speedups by
(:mod:`ddlab.training.baseline`), recorded on one GPU.

:func:`configs_from_recordings` lists, from the committed nccl-paths, scaling, strong-scaling and
tuning recordings, every model x batch x precision x CUDA-graph setting (with the recordings'
steps, warm-up and test pass) whose plain run they need: for weak scaling the batch per GPU, for
strong scaling the whole global batch (the one GPU takes all of it). :func:`record` runs each of
them ``repeats`` times, the repeats interleaved round by round, and returns one
:class:`~ddlab.training.results.ExperimentResult` ("plain-baselines") with one row per
configuration, written by ``tools/recording/record_experiments.py OUT plain-baselines`` as
``plain-baselines-torch.json`` for ``source_code/reference/experiments/``, where
:data:`ddlab.training.baseline.RECORDINGS` looks first.

Each run is the course's training script itself (``fmnist_torch.py --launcher none``, the same
argv a launch gets), called through its ``main()`` in this one process, so that the imports
(10-15 s a launch on a GPU machine) are paid once: the same data, model, step, timing and test
pass as a launch, without a process start between the runs.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shlex
import sys
import tempfile
from typing import Callable, Optional, Sequence

from ddlab.base import reference
from ddlab.training.results import ExperimentResult, median_run, row_of_repeats
from ddlab.training.runspec import RunSpec, RunSpecError

EXPERIMENT = "plain-baselines"
NAME = "plain-baselines-torch"
PREFIXES = ("nccl-paths-", "scaling-", "strong-scaling-", "tuning-")
Progress = Optional[Callable[[str], None]]


def _plain(spec: RunSpec, batch: int) -> RunSpec:
    """The plain one-GPU run of ``spec`` at ``batch`` images per step (as experiments.plain_spec)."""
    return spec.with_(launcher="none", workers=1, path="default", batch=int(batch),
                      cuda_graph=spec.cuda_graph or "off", extra_args=(), timeout=None)


def _key(spec: RunSpec) -> tuple:
    return (spec.model, spec.batch, spec.precision, spec.cuda_graph, spec.steps, spec.warmup_steps, spec.test_samples)


def configs_from_recordings(gpu_model: Optional[str] = None) -> list:
    """The plain runs (:class:`RunSpec`, ``launcher="none"``) the committed recordings of
    :data:`PREFIXES` need, each once, in (model, batch, precision, graph) order; with ``gpu_model``
    only those of the recordings made on that GPU model."""
    found = {}
    for name in reference.names("experiments"):
        if not name.startswith(PREFIXES):
            continue
        res = ExperimentResult.from_dict(reference.load("experiments", name), source="recorded")
        spec = res.spec
        if spec is None or spec.framework != "torch" or spec.device != "cuda":
            continue
        if gpu_model and (res.provenance or {}).get("gpu_model") != gpu_model:
            continue
        batches = res.config.get("global_batches") if res.name == "strong-scaling" else [spec.batch]
        for b in batches or []:
            plain = _plain(spec, b)
            found.setdefault(_key(plain), plain)
    return [found[k] for k in sorted(found, key=lambda k: tuple(str(x) for x in k))]


def _script():
    """The training script as a module (its ``main(argv)``), loaded once."""
    from ddlab.training.runspec import SCRIPTS
    mod = sys.modules.get("ddlab_fmnist_torch")
    if mod is None:
        spec = importlib.util.spec_from_file_location("ddlab_fmnist_torch", SCRIPTS["torch"])
        mod = importlib.util.module_from_spec(spec)
        sys.modules["ddlab_fmnist_torch"] = mod
        spec.loader.exec_module(mod)
    return mod


def run_once(spec: RunSpec) -> dict:
    """One plain run of ``spec`` through the training script's ``main()`` in this process; its JSON result."""
    argv = spec.script_args()
    before = os.environ.get("DDLAB_COMMAND")
    os.environ["DDLAB_COMMAND"] = shlex.join([sys.executable, *argv])      # what the result's provenance shows
    try:
        with tempfile.TemporaryDirectory(prefix="ddlab-plain-") as tmp:
            out = os.path.join(tmp, "result.json")
            code = _script().main([*argv[1:], "--json", out])
            if code not in (0, None) or not os.path.exists(out):
                raise RuntimeError(f"the training script ended with status {code} and wrote no result")
            with open(out) as f:
                return json.load(f)
    finally:
        if before is None:
            os.environ.pop("DDLAB_COMMAND", None)
        else:
            os.environ["DDLAB_COMMAND"] = before


def record(specs: Sequence[RunSpec], repeats: int = 3, progress: Progress = None,
           run: Optional[Callable[[RunSpec], dict]] = None) -> ExperimentResult:
    """Each plain run of ``specs`` ``repeats`` times, the repeats interleaved (each round runs every
    configuration once; ``run``: one run, default :func:`run_once`), as one "plain-baselines" result: a row per configuration (model, batch,
    precision, cuda_graph, steps; images/s median and min-max over the repeats), or its error."""
    from ddlab.system.provenance import run_provenance
    if not specs:
        raise RunSpecError("no plain runs to record")
    if any(s.launcher != "none" or s.workers != 1 for s in specs):
        raise RunSpecError("a plain run is one process with no wrapper: launcher 'none', one worker")
    say = progress or (lambda line: None)
    run = run or run_once
    got = {i: [] for i in range(len(specs))}
    failed: dict = {}
    for rnd in range(repeats):
        for i, spec in enumerate(specs):
            if i in failed:
                continue
            what = (f"{spec.model} batch {spec.batch} {spec.precision} graph {spec.cuda_graph} "
                    f"({rnd + 1} of {repeats})")
            try:
                got[i].append(run(spec))
                say(f"plain: {what}: {got[i][-1]['images_per_s']:,.0f} images/s")
            except (Exception, SystemExit) as exc:     # the script's own refusals are SystemExit: a row each
                failed[i] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                say(f"plain: {what}: failed: {failed[i]}")
    rows, runs = [], []
    for i, spec in enumerate(specs):
        fields = {"model": spec.model, "batch": spec.batch, "precision": spec.precision,
                  "cuda_graph": spec.cuda_graph == "on", "steps": spec.steps, "warmup_steps": spec.warmup_steps,
                  "path": "plain", "launcher": "none", "plain": True, "workers": 1}
        if i in failed or not got[i]:
            rows.append(dict(fields, error=failed.get(i, "no run")))
            continue
        row = row_of_repeats(got[i])
        idx = list(range(len(runs), len(runs) + len(got[i])))
        runs += got[i]
        rows.append(dict(row, **fields, run=idx[median_run(got[i])], runs=idx))
    device = specs[0].device
    notes = [f"plain one-GPU runs (one process, no wrapper: fmnist_torch.py --launcher none) of every model, batch, "
             f"precision and CUDA-graph setting of the committed 2-GPU recordings (strong scaling: the whole global "
             f"batch), with their steps and warm-up; {repeats} repeats, interleaved round by round; each run a call "
             "of the training script's main() in this one process (the imports paid once)"]
    if failed:
        notes.append(f"{len(failed)} configuration(s) failed: their rows say why")
    cfg = {"framework": "torch", "launcher": "none", "device": device, "repeats": repeats,
           "configs": len(specs), "order": "interleaved", "models": sorted({s.model for s in specs}),
           "batches": sorted({s.batch for s in specs})}
    return ExperimentResult(EXPERIMENT, rows, "live", run_provenance(
        f"ddlab.training.plain_runs.record({len(specs)} configurations, repeats={repeats}, device={device!r})"),
        notes, cfg, runs)


def this_gpu_model() -> Optional[str]:
    """The name of this machine's first GPU as PyTorch gives it (the recordings' ``gpu_model``), or None."""
    try:
        import torch
        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except (ImportError, RuntimeError):
        return None


def dry_specs(specs: Sequence[RunSpec], steps: int = 4, warmup_steps: int = 1, test_samples: int = 100) -> list:
    """``specs`` made tiny and moved to the CPU (no CUDA graph there): the same code path, in seconds."""
    out, seen = [], set()
    for s in specs:
        small = s.with_(device="cpu", steps=steps, warmup_steps=warmup_steps, test_samples=test_samples,
                        cuda_graph="off", batch=min(s.batch, 16))
        if _key(small) not in seen:
            seen.add(_key(small))
            out.append(small)
    return out
