"""A tuning comparison cut short, continued: :func:`problem` says why a partial result cannot be
continued by a given comparison, and :func:`from_partial` turns one that can into the ``resume``
hook of :func:`ddlab.course.tuning.tuning_comparison`, which then runs only the rounds left.

A partial result is what the comparison hands its ``partial`` callback after each round but the
last; ``tools/recording/record_experiments.py`` saves it, so a run cut short on the GPU machine is
continued by the next one there.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

from ddlab.course import tuning
from ddlab.system.provenance import SAME_MACHINE, differences, run_provenance
from ddlab.training.runs import ExperimentError
from ddlab.training.runspec import RunSpecError


def problem(partial, spec, tunings: Sequence[str]) -> Optional[str]:
    """Why ``partial`` (a recorded tuning comparison) cannot be continued by a comparison of ``spec``
    (the two-worker run, with its NCCL path) over ``tunings`` on this machine, or None: it must be a
    partial interleaved comparison with the same run description, tunings and planned repeats,
    recorded on the same GPU model and count with the same driver, CUDA, NCCL and PyTorch (and
    Horovod, for Horovod's tunings)."""
    c = getattr(partial, "config", None) or {}
    if getattr(partial, "name", None) != tuning.EXPERIMENT or c.get("order") != "interleaved":
        return "it is not an interleaved tuning comparison"
    if c.get("spec") != spec.to_dict():
        return "it describes another run (model, launcher, batch, steps, precision, path or repeats differ)"
    if list(c.get("tunings") or []) != list(tunings):
        return f"it compares other tunings ({', '.join(c.get('tunings') or [])})"
    rounds = c.get("rounds")
    if not isinstance(rounds, int) or not 0 < rounds < spec.repeats:
        return f"it is not partial: {rounds} of {spec.repeats} rounds ran"
    here, there = run_provenance("resume check"), partial.provenance or {}
    differ = differences(there, here, SAME_MACHINE + (("horovod",) if spec.launcher == "horovod" else ()))
    return f"it was recorded on another machine or software: {'; '.join(differ)}" if differ else None


def from_partial(partial) -> Callable:
    """The ``resume`` hook for :func:`ddlab.course.tuning.tuning_comparison`: given the comparison's
    two-worker spec and tunings, it checks ``partial`` against them (:func:`problem`; RunSpecError
    when it cannot be continued) and returns its rounds as a :class:`ddlab.course.tuning.Resumed`."""
    def resumed(spec, chosen: Sequence[str]) -> tuning.Resumed:
        why = problem(partial, spec, chosen)
        if why:
            raise RunSpecError(f"cannot resume the tuning comparison: {why}")
        rounds = int(partial.config["rounds"])
        got, failed = {}, {}
        for row in partial.rows:
            if row.get("not_run") or "tuning" not in row:
                continue
            if row.get("error"):
                failed[row["tuning"]] = ExperimentError(row["error"])
            else:
                got[row["tuning"]] = [partial.runs[i] for i in row["runs"]]
        prov = partial.provenance or {}
        note = (f"{'round 1 was' if rounds == 1 else f'rounds 1-{rounds} were'} resumed from a partial recording of "
                f"this comparison made {prov.get('date', 'at an unrecorded date')} (ddlab "
                f"{prov.get('ddlab_commit', '?')}) on the same GPU model, driver, CUDA, NCCL and PyTorch; the rest "
                "ran at the date of this result")
        return tuning.Resumed(rounds, got, failed, note)
    return resumed
