"""What every named training experiment does the same way: its base run, its repeats (run in
interleaved rounds), the record of its configuration and the runs it keeps.
:mod:`ddlab.training.experiments` and :mod:`ddlab.course.tuning` build their experiments from these."""
from __future__ import annotations

from typing import Callable, Optional, Sequence

from ddlab.measure import launch
from ddlab.training.runs import ExperimentError, slim, spec_for, train
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


def interleaved(configs: Sequence[tuple], rounds: int, start: int = 0, got: Optional[dict] = None,
                failed: Optional[dict] = None, after_round: Optional[Callable[[int], None]] = None,
                stop_at_failure: bool = False, **common) -> tuple:
    """Each configuration of ``configs`` ([(key, spec, train keywords)]) run once per round, in
    order, in rounds ``start + 1`` to ``rounds`` (each spec with ``repeats=1``): a slow drift of the
    machine (clocks, the host) then spreads over every configuration's min-max instead of looking
    like one configuration's effect. A configuration whose launch fails is not run again: its runs
    are dropped and its error kept. Returns ({key: runs}, {key: the error}); ``got`` and ``failed``
    hold what earlier rounds found (a resumed experiment). ``after_round(done)``: called after
    each round but the last. ``stop_at_failure``: launch nothing more after the first failure
    (for an experiment that a failed launch fails whole). ``common``: keywords of every launch
    (echo, progress)."""
    got = {key: [] for key, _, _ in configs} if got is None else got
    failed = {} if failed is None else failed
    for done in range(start + 1, rounds + 1):
        for key, spec, kw in configs:
            if key in failed:
                continue
            try:
                got.setdefault(key, []).extend(repeat(spec.with_(repeats=1), **kw, **common))
            except (launch.LaunchError, ExperimentError) as exc:
                failed[key] = exc
                got[key] = []
                if stop_at_failure:
                    return got, failed
        if after_round is not None and done < rounds:
            after_round(done)
    return got, failed


INTERLEAVED_NOTE_START = "the repeats were interleaved"


def interleaved_note(rounds: int, what: str = "every configuration") -> str:
    """The note of a result whose repeats ran in ``rounds`` interleaved rounds (:func:`interleaved`);
    ``what``: what each round ran once. It starts with :data:`INTERLEAVED_NOTE_START`."""
    return (f"{INTERLEAVED_NOTE_START} in {rounds} round(s), each running {what} once in order: a drift of the "
            "machine widens every row's min-max alike")


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
