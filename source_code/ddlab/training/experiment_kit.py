"""What every named training experiment does the same way: its base run, its repeats, the
record of its configuration and the runs it keeps. :mod:`ddlab.training.experiments` and
:mod:`ddlab.course.tuning` build their experiments from these."""
from __future__ import annotations

from typing import Optional

from ddlab.training.runs import slim, spec_for, train
from ddlab.training.runspec import RunSpec


def base_spec(base: Optional[RunSpec], device: str, workers: int, fields: dict) -> RunSpec:
    """The experiment's base run: ``base`` with ``fields`` changed, or the default for the device."""
    if base is not None:
        return base.with_(**{k: v for k, v in fields.items() if v is not None}) if fields else base
    fields = {k: v for k, v in fields.items() if k != "workers"}
    return spec_for(device, fields.pop("framework", "torch"), fields.pop("model", "cnn"), workers, **fields)


def repeat(spec: RunSpec, **kw) -> list:
    """``spec.repeats`` runs of ``spec`` (:func:`ddlab.training.runs.train` takes ``kw``)."""
    return [train(spec, **kw) for _ in range(spec.repeats)]


def config_of(spec: RunSpec, run: dict, **more) -> dict:
    """The configuration a result records: the spec, and what its first run reported."""
    c = {"framework": spec.framework, "launcher": spec.launcher, "model": spec.model, "params": run.get("params"),
         "gradient_bytes_per_step": run.get("gradient_bytes_per_step"), "batch_size": run.get("batch_per_worker"),
         "steps": run.get("steps"), "warmup_steps": run.get("warmup_steps"), "precision": run.get("precision"),
         "device": run.get("device"), "device_name": run.get("device_name"), "repeats": spec.repeats,
         "spec": spec.to_dict()}
    c.update(more)
    return c


def keep_runs(runs_out: list, runs: list) -> list:
    """Appends the runs (without logs) to ``runs_out`` and returns their indices there."""
    first = len(runs_out)
    runs_out += [slim(r) for r in runs]
    return list(range(first, len(runs_out)))
