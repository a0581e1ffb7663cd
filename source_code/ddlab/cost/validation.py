"""The step model set beside the recorded 2-GPU runs: held out first, and why it misses where it does.

No number of the step model (:func:`ddlab.cost.step_model.predict_step`) is fitted to the recorded
2-GPU runs. Its terms are the one-GPU step and the GPU's busy time (the recordings' one-worker
runs), each path's all-reduce (the alpha-beta fit of its recorded sweep), when each gradient is
ready (the recorded step profiles), the all-reduce's share of the GPU (NCCL's channels over the
SMs), the wrapper's cost (measured on one worker, :func:`ddlab.cost.wrapper_cost.measured`),
Horovod's fusion threshold and cycle time (its documented defaults), and what grows with the
batch (0, assumed). So every prediction is out-of-sample for the runs it is checked against.
:func:`held_out` is the headline all the same: each run predicted leaving out its model (the
wrapper's one-worker rows of that model too), its path, and its batch per GPU where the
recordings have more than one batch (:func:`held_out_speedups`); the columns say so when leaving
something out changes no prediction. Rows whose prediction does not depend on the path are
flagged (:func:`link_effect`), and :func:`miss_notes` says by how much and why the misses miss.
:func:`validate` is the plain table of predicted against measured.

Structure choices, and when they were made:

* before the validation below was first printed with them: the wrapper's cost taken from the
  one-worker measurement instead of fitted to these runs, and counted as already in the one-GPU
  step where that step ran under the same wrapper (DDP with world size 1, which keeps its hooks;
  Horovod registers none at size 1); Horovod modelled by its fusion buffer and cycle (every
  gradient of a step fused at the cycle after the last one, half a cycle of wait on average, no
  overlap with the backward pass, the host waiting for the all-reduces) with its documented
  defaults, its own host time at size 2 left at 0 because nothing measures it; what grows with
  the batch left at 0 because every recorded 2-GPU run then had the same batch per GPU (the recorded
  strong-scaling runs, at other batches, were added to the check later, with no term changed for them);
* earlier, while looking at these same runs (no held-out column can undo that): DDP's buckets,
  their overlap with the backward pass, the measured readiness, the SM share, and the host and
  device paths.

None of these choices was changed after seeing its held-out result. ``python -m ddlab.cost.validation``
prints the held-out table of each machine whose runs and all-reduce sweeps are recorded (each predicted
from its own sweeps), then the plain one.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Optional

from ddlab.base.units import format_ratio, format_time

from ddlab.cost.alpha_beta import AlphaBeta
from ddlab.cost import wrapper_cost
from ddlab.cost.recorded_runs import (COURSE_SWEEPS, RecordedPoint, RecordedSet, path_labels, predict_point,
                                      recorded_points, two_worker_terms)
from ddlab.measure.collectives import REPEATS_SUFFIX

TOLERANCE = 0.10     # a prediction within ±10% of the measured speedup counts as right
# What a held-out check leaves out: every recorded run of one model, one path or one batch per
# GPU, and the one-worker measurements of the same model or batch the wrapper's cost comes from.
HELD_OUT = {"model": lambda p: p.model, "path": lambda p: p.path, "batch": lambda p: p.batch}
_OTHER_SCHEMES = "The predictions with the "    # how held_out's note on the schemes not in a column begins
PATH_INDEPENDENT = 1e-3      # a prediction a free link would change by less than this (relative)


def _with_profiles(rec: RecordedSet, kwargs: dict) -> dict:
    """The recorded step profiles and channels, unless the caller chose the readiness or the
    profiles."""
    if "readiness" in kwargs or "profiles" in kwargs:
        return kwargs
    return dict(kwargs, profiles=rec.profiles, channels=rec.channels)


def _predict(rec: RecordedSet, p: RecordedPoint, wrappers: dict, two_workers: Optional[dict] = None, **kwargs):
    """``p`` predicted with ``wrappers`` and the two-worker term ``two_workers`` taken with them (default
    ``rec.two_workers``, taken with ``rec.wrappers()``)."""
    two = rec.two_workers if two_workers is None else two_workers
    return predict_point(p, rec.fits, wrappers.get(p.framework), sweeps=rec.sweeps, two_workers=two, **kwargs)


def _left_out(by: str, p: RecordedPoint) -> dict:
    """What the wrapper's one-worker measurement leaves out when ``p``'s ``by`` is held out."""
    return {"model": {"exclude_models": (p.model,)}, "batch": {"exclude_batches": (p.batch,)}}.get(by, {})


def held_out_speedups(rec: RecordedSet, by: str, **kwargs) -> list:
    """For each recorded point (in ``rec.points`` order), the ratio of its 2-GPU images/s to its
    one-worker run's (:meth:`RecordedPoint.speedup`, what :attr:`RecordedPoint.measured` is beside)
    predicted without anything measured on its ``by`` ("model", "path" or "batch"): the wrapper's
    one-worker rows of the same model (or batch) left out. None where nothing is left to measure
    it on. :meth:`RecordedPoint.over_plain` turns one into the speedup over the plain one-GPU run."""
    if by not in HELD_OUT:
        raise ValueError(f"held out by one of {', '.join(HELD_OUT)}, got {by!r}")
    kwargs = _with_profiles(rec, kwargs)
    measured: dict = {}      # what is left out -> (the wrappers measured without it, the two-worker term with them)
    out = []
    for p in rec.points:
        left = _left_out(by, p)
        key = tuple(sorted(left.items()))
        if key not in measured:
            try:
                wrappers = rec.wrappers(**left)
                measured[key] = (wrappers, two_worker_terms(rec, wrappers))
            except ValueError:
                measured[key] = None
        if measured[key] is None:
            out.append(None)
            continue
        wrappers, two = measured[key]
        out.append(p.speedup(_predict(rec, p, wrappers, two, **kwargs)))
    return out


def link_effect(rec: RecordedSet, p: RecordedPoint, wrappers: Optional[dict] = None, **kwargs) -> float:
    """How much the prediction for ``p`` owes to its path: the relative change of the predicted
    speedup when the path's fit is replaced by a link that costs nothing. Near 0: the prediction
    does not depend on the path (the link's time hides entirely), so the run tests the one-GPU
    step and the wrapper, not the link."""
    kwargs = _with_profiles(rec, kwargs)
    wrappers = rec.wrappers() if wrappers is None else wrappers
    real = _predict(rec, p, wrappers, **kwargs).speedup
    free = predict_point(p, dict(rec.fits, **{p.path: AlphaBeta(0.0, 1e30)}), wrappers.get(p.framework),
                         two_workers=rec.two_workers, **dict(kwargs, channels={})).speedup
    return abs(free / real - 1)


def path_variants(rec: RecordedSet, wrappers: dict) -> dict:
    """{path: [(``rec`` with that sweep's fit for the path, the two-worker term measured with it)]}, one
    entry per recorded sweep of each path that has repeats (:attr:`RecordedSet.path_fits`)."""
    out = {}
    for path, fits in rec.path_fits.items():
        if len(fits) > 1:
            others = [replace(rec, fits=dict(rec.fits, **{path: fit})) for fit in fits]
            out[path] = [(other, two_worker_terms(other, wrappers)) for other in others]
    return out


def path_range(p: RecordedPoint, variants: dict, wrappers: dict, **kwargs) -> Optional[tuple]:
    """(lowest, highest) ratio of ``p``'s 2-GPU images/s to its one-worker run's, predicted with each
    recorded sweep of its path on this machine in turn (``variants``, :func:`path_variants`: the sweep the
    model uses and its repeats); None where the path has no repeat. How far the predictions spread is
    how far the path's own all-reduce varies."""
    out = [p.speedup(_predict(other, p, wrappers, two, **kwargs)) for other, two in variants.get(p.path, ())]
    return (min(out), max(out)) if out else None


SWEEP_SHOWN_BYTES = 8 * 1024 * 1024       # the size at which the repeated sweeps' spread is quoted


def repeats_note(rec: RecordedSet) -> Optional[str]:
    """One line: how far the recorded sweeps of each path on this machine differ (:attr:`RecordedSet.path_fits`),
    as the time of one all-reduce of :data:`SWEEP_SHOWN_BYTES`; None without repeats."""
    if not rec.path_fits:
        return None
    parts = []
    for path, fits in rec.path_fits.items():
        t = sorted(f.predict(SWEEP_SHOWN_BYTES) for f in fits)
        parts.append(f"{rec.path_label(path)} {format_time(t[0])} to {format_time(t[-1])} ({len(fits)} sweeps)")
    return (f"The same all-reduce sweeps measured again on this machine (allreduce/{rec.sweeps}{REPEATS_SUFFIX}, "
            f"other days and machines of the same kind): one all-reduce of {SWEEP_SHOWN_BYTES // 2**20} MiB, fitted, "
            "took " + "; ".join(parts) + f". The model uses allreduce/{rec.sweeps}; a run over a path whose sweeps "
            "differ this much cannot be predicted closer than they differ.")


def _err(pred, measured):
    return None if pred is None else 100 * (pred / measured - 1)


def err_text(v) -> str:
    """An error in percent as the tables show it, "(out)" beyond the ±10% band; "-" for none."""
    if v is None:
        return "-"
    return f"{v:+.1f}%" + ("" if abs(v) <= 100 * TOLERANCE else " (out)")


def _spread(p: RecordedPoint) -> str:
    """The measured speedup's min-max over the plain one-GPU run ("-" where that run is missing)."""
    if p.measured_min is None or p.measured_max is None:
        return "single run" if p.repeats == 1 else "-"
    if not p.plain_ratio:
        return "-"
    return f"{format_ratio(p.over_plain(p.measured_min))}-{format_ratio(p.over_plain(p.measured_max))}"


def held_out(recorded: Optional[RecordedSet] = None, **kwargs):
    """The headline check of the step model: every recorded run (launcher x model x path x batch)
    predicted leaving out its model, then its path, then its batch per GPU (where the recordings
    have more than one batch), beside the measured median and its min-max over the repeats, what
    decided the predicted step, and a flag for the runs whose prediction does not depend on the
    path. Returns a :class:`ddlab.base.tables.Table` (``plot_validation(table,
    predicted="model_pred")`` draws it); the notes count the hits and explain the misses, computed
    from its rows."""
    from ddlab.base.tables import Table
    rec = recorded or recorded_points()
    kwargs = _with_profiles(rec, kwargs)
    schemes = [by for by in HELD_OUT if len({HELD_OUT[by](p) for p in rec.points}) > 1]
    held = {by: held_out_speedups(rec, by, **kwargs) for by in schemes}
    wrappers = rec.wrappers()
    variants = path_variants(rec, wrappers)
    rows = []
    for i, p in enumerate(rec.points):
        pred = _predict(rec, p, wrappers, **kwargs)
        # shown: speedups over the plain one-GPU run; m1...: the same over the one-worker run, which the
        # model predicts from (the errors are the same either way: both columns divide by one run)
        row = {"launcher": p.launcher, "model": p.model, "path": p.path, "batch": p.batch,
               "measured": p.measured_plain, "spread": _spread(p), "m1": p.measured, "m1_min": p.measured_min,
               "m1_max": p.measured_max, "all_pred": p.speedup(pred), "step_s": pred.total_s, "comm_s": pred.comm_s,
               "compute_s": p.compute_s, "n_gpus": p.n_gpus, "images_factor": p.images_factor,
               "plain_source": p.plain_source, "bound": pred.bound,
               "path_matters": "yes" if link_effect(rec, p, wrappers, **kwargs) > PATH_INDEPENDENT else "NO",
               "path_range": path_range(p, variants, wrappers, **kwargs)}
        for by in schemes:
            row[f"{by}_p1"] = held[by][i]
            row[f"{by}_pred"] = p.over_plain(held[by][i])
            row[f"{by}_err"] = _err(held[by][i], p.measured)
        rows.append(row)
    ratio = lambda v: "-" if v is None else format_ratio(v)    # noqa: E731
    cols = [("launcher", "text"), ("model", "text"), ("path", path_labels(rec), "path"), ("batch", "int", "batch/GPU"),
            ("measured", ratio, "measured"), ("spread", "text", "min-max")]
    notes = held_out_notes(rows, schemes, rec)
    if schemes and any(p.rank_wait_s for p in rec.points):
        notes.insert(1, _rank_wait_note(rec, rows, schemes[0], kwargs))
    if schemes and any(p.share_device_s for p in rec.points):
        notes.insert(1, _share_device_note(rec, rows, schemes[0], kwargs))
    if schemes and rec.two_workers:
        without = held_out_speedups(rec, schemes[0], **dict(kwargs, two_worker=False))
        for r, w in zip(rows, without):      # the model without the term measured on the probe: before and after
            r["without_two_workers_err"] = _err(w, r["m1"])
        notes.insert(1, _two_worker_note(rec, rows, schemes[0]))
    groups = _same_predictions(rows, schemes)
    for group in groups:
        named = " or ".join(group) if len(group) < 3 else ", ".join(group[:-1]) + " or " + group[-1]
        if len(groups) == 1:
            cols += [(f"{group[0]}_pred", ratio, f"{named} out"), (f"{group[0]}_err", err_text, "error")]
        else:     # one prediction column (the first scheme's), then each scheme's error: the table stays on the page
            if group is groups[0]:
                cols.append((f"{group[0]}_pred", ratio, f"predicted ({named} out)"))
            cols.append((f"{group[0]}_err", err_text, f"error ({named} out)"))
        if len(group) > 1:
            notes.append(f"Leaving out its {named} gives the same prediction for every row, so one column shows "
                         "them (the rows keep each: " + ", ".join(f"{by}_pred" for by in group) + ").")
    if len(groups) > 1:
        notes.append(_OTHER_SCHEMES + " and the ".join(g[0] for g in groups[1:]) + " left out are in the rows ("
                     + ", ".join(f"{g[0]}_pred" for g in groups[1:]) + "); the table shows their errors.")
    cols += [("bound", "text", "decided by"), ("path_matters", "text", "depends on path")]
    left = ", then its ".join(schemes) if schemes else "nothing"
    return Table(cols, rows, title="Held out: each recorded 2-GPU run predicted from measured terms, its "
                                   f"{left} left out" + (f" ({rec.machine})" if rec.machine else ""),
                 notes=notes, compact=True, missing="-")     # a dozen columns or more: narrow cells keep it on the page


def _rank_wait_note(rec: RecordedSet, rows: list, by: str, kwargs: dict) -> str:
    """What the candidate wait for the slower rank (:func:`ddlab.cost.recorded_runs.rank_wait`) would do
    to this table: how many rows it would hold within the band, beside the model's count."""
    waited = held_out_speedups(rec, by, **dict(kwargs, rank_wait=True))
    k, m = hits([{"e": _err(w, r["m1"])} for w, r in zip(waited, rows)], "e")
    k0, m0 = hits(rows, f"{by}_err")
    waits = sorted(p.rank_wait_s for p in rec.points)
    return (f"A candidate term, not in the model: the wait for the slower rank, the expected longest of one draw per "
            f"GPU from the one-worker run's own step times less their mean ({format_time(waits[0])} to "
            f"{format_time(waits[-1])} here). Added, leaving each {by} out, {k} of {m} would be within "
            f"±{100 * TOLERANCE:.0f}% ({k0} of {m0} without it). "
            + ("It was built after this table's host-bound misses, so it counts only if it also holds on runs it was "
               "not built on: compare the same line under each table of validation.held_out_other_machines()."
               if rec.sweeps == COURSE_SWEEPS else
               "It was built after the host-bound misses of the course's machine (validation.held_out()); these runs "
               "are ones it was not built on."))


def _share_device_note(rec: RecordedSet, rows: list, by: str, kwargs: dict) -> str:
    """What the candidate GPU busy time at a strong run's share (:attr:`RecordedPoint.share_device_s`) would do
    to this table: the count within the band with it, beside the model's, each run it moves across the band,
    and each run outside it both ways whose error moves by more than the band."""
    errs = [_err(g, r["m1"]) for g, r in zip(held_out_speedups(rec, by, **dict(kwargs, share_device=True)), rows)]
    band = 100 * TOLERANCE
    groups = {"In": [], "Out": [], "Still out, moved by more than the band": []}
    for after, r in zip(errs, rows):
        before = r[f"{by}_err"]
        if before is None or after is None:
            continue
        was, now = abs(before) <= band, abs(after) <= band
        group = ("In" if now and not was else "Out" if was and not now else
                 "Still out, moved by more than the band" if not (was or now) and abs(after - before) > band else None)
        if group:
            groups[group].append(f"{r['launcher']} {r['model']} {r['path']} {r['batch']}/GPU {err_text(before)} -> "
                                 f"{err_text(after)}")
    k, m = hits([{"e": e} for e in errs], "e")
    k0, _ = hits(rows, f"{by}_err")
    batches = sorted({p.batch for p in rec.points if p.share_device_s})
    return (f"A candidate input, not in the model: the GPU's busy time at a strong run's share (the one-GPU "
            f"CUDA-graph run at {', '.join(map(str, batches))} per GPU), which lets a DDP step overlap its all-reduce "
            f"with the host's work instead of adding it. Given, leaving each {by} out, {k} of {m} would be within "
            f"±{band:.0f}% ({k0} of {m} without it). "
            + " ".join(f"{head}: {'; '.join(runs) or 'none'}." for head, runs in groups.items()))


def _two_worker_note(rec: RecordedSet, rows: list, by: str) -> str:
    """The table before and after the two-worker term (measured on the probe): the hits leaving each
    ``by`` out without it (``without_two_workers_err``) and with it, in all and per launcher, and the
    term per launcher and path."""
    before = [{"launcher": r["launcher"], "e": r["without_two_workers_err"]} for r in rows]
    k0, m0 = hits(before, "e")
    k, m = hits(rows, f"{by}_err")
    per = []
    for la in dict.fromkeys(r["launcher"] for r in rows):
        b = hits([r for r in before if r["launcher"] == la], "e")
        a = hits([r for r in rows if r["launcher"] == la], f"{by}_err")
        per.append(f"{la} {b[0]} -> {a[0]} of {a[1]}")
    terms = ", ".join(f"{'Horovod' if f == 'horovod' else 'DDP'} {rec.path_label(path)} {format_time(t)}"
                      for (f, path), (t, _) in sorted(rec.two_workers.items()))
    return (f"Before and after the two-worker term: leaving each {by} out, {k0} of {m0} within "
            f"±{100 * TOLERANCE:.0f}% without it, {k} of {m} with it ({'; '.join(per)}). The term is what a step on "
            f"two workers costs beyond the other terms, measured on the probe alone (one small layer at batch 4), "
            f"per launcher and path: {terms}; it is added to the eager steps (a CUDA-graph step replays its "
            "all-reduce without the host).")


def first_scheme(table):
    """A :func:`held_out` table with one held-out scheme's columns only (the first: the model left
    out), the prediction and its error, for a page too narrow for every scheme's error. The rows keep
    every scheme's prediction and error, the notes count each, and one more note says so."""
    keys = [c.key for c in table.columns]
    errs = [k for k in keys if k.endswith("_err")]
    if len(errs) < 2:
        return table
    shown = [k for k in keys if not k.endswith("_err") or k == errs[0]]
    others = " and the ".join(k[:-len("_err")] for k in errs[1:])
    kept = [n for n in table.notes if not n.startswith(_OTHER_SCHEMES)]
    return table.select(shown, notes=kept + [f"Shown: the errors with the {errs[0][:-len('_err')]} left out; "
                                                   f"those with the {others} left out are counted above and kept in "
                                                   f"the rows (the whole table: `print(validation.held_out())`)."])


def held_out_other_machines(**kwargs) -> list:
    """:func:`held_out` for each other machine whose all-reduce sweeps and runs are recorded
    (:func:`ddlab.cost.recorded_runs.recorded_sets` but the course's own): each machine's runs
    predicted from its own sweeps, one table each; empty when only the course's machine has them."""
    from ddlab.cost.recorded_runs import recorded_sets
    return [held_out(rec, **kwargs) for rec in recorded_sets(others_only=True)]


def _same_predictions(rows, schemes) -> list:
    """``schemes`` grouped where they give the same held-out prediction for every row (in order)."""
    def same(a, b):
        return (a is None and b is None) or (a is not None and b is not None and abs(a - b) <= 1e-12 * max(1.0, abs(a)))
    groups: list = []
    for by in schemes:
        for g in groups:
            if all(same(r[f"{g[0]}_p1"], r[f"{by}_p1"]) for r in rows):
                g.append(by)
                break
        else:
            groups.append([by])
    return groups


def missed(row) -> bool:
    """Whether a row of :func:`held_out` is one the lesson reads: a prediction outside ±10% in any
    column (held out or in-sample), or a measured speedup above 2x, which a model that only adds
    costs cannot reach."""
    errs = [v for k, v in row.items() if (k.endswith("_err") or k == "in_sample") and v is not None]
    return any(abs(e) > 100 * TOLERANCE for e in errs) or (row.get("measured") or 0) > 2


def hits(rows, key: str) -> tuple:
    """(within ±10%, predicted) over ``rows`` for the error column ``key``."""
    errs = [r[key] for r in rows if r.get(key) is not None]
    return sum(abs(e) <= 100 * TOLERANCE for e in errs), len(errs)


def held_out_notes(rows, schemes, rec: RecordedSet) -> list:
    band = f"±{100 * TOLERANCE:.0f}%"
    n = len(rows)
    head = []
    for by in schemes:
        k, m = hits(rows, f"{by}_err")
        head.append(f"leaving each {by} out, {k} of {m} within {band}" + (f" ({n - m} could not be held out: "
                                                                           "nothing left to measure on)" if m < n else ""))
    batches = sorted({r["batch"] for r in rows})
    if "batch" not in schemes and batches:
        head.append(f"leaving each batch out is not possible: every recorded run has {batches[0]} images per GPU")
    same = [by for by in schemes if all(r[f"{by}_p1"] is not None and abs(r[f"{by}_p1"] / r["all_pred"] - 1) < 1e-9
                                        for r in rows)]
    notes = ["Held out: " + "; ".join(head) + ".",
             "No number of the model is fitted to these 2-GPU runs, so there is no in-sample count: every prediction "
             "is out-of-sample. Leaving a model or a batch out drops its rows from the one-worker measurement of the "
             "wrapper's cost; leaving a path out drops nothing, since each path's all-reduce comes from its own sweep."
             + (f" Leaving out a {' or a '.join(same)} changes no prediction here." if same else "")]
    flat = [r for r in rows if r["path_matters"] == "NO"]
    if flat and schemes:
        rest = [r for r in rows if r["path_matters"] != "NO"]
        k, m = hits(rest, f"{schemes[0]}_err")
        notes.append(f"{len(flat)} of {n} predictions do not depend on the path (a link that cost nothing would change "
                     f"them by less than {100 * PATH_INDEPENDENT:.1f}%: marked NO): those rows test the one-GPU step "
                     f"and the wrapper, not the link. Of the {len(rest)} that do, {k} of {m} are within {band}.")
    notes += miss_notes(rows, schemes[0] if schemes else None, two_workers=bool(rec.two_workers))
    repeats = repeats_note(rec)
    if repeats:
        notes.append(repeats)
    notes.append("Terms: " + "; ".join(f"{name} ({basis})" for name, basis in term_bases(rec).items()) + ".")
    notes += baseline_notes(rows)
    if any(r["launcher"].endswith(" strong") for r in rows):
        notes.append("Rows of launcher '... strong' are the field reports' experiment: one global batch on one GPU, then "
                     "split over two (batch/GPU is the share); their speedup is over the plain one-GPU run of the same "
                     "global batch, and the model starts from the one-worker run's step at that batch, taken as the "
                     "step at the share.")
    if rec.missing:
        notes.append("Not recorded (no prediction checked): " + ", ".join(f"{m} ({la})" for la, m in rec.missing) + ".")
    if rec.elsewhere:
        machines: dict = {}
        for name, where in rec.elsewhere:
            machines.setdefault(where, []).append(name)
        notes.append("Not predicted here, recorded on another machine than these all-reduce sweeps (a run is predicted "
                     "only from sweeps of its own machine; each machine whose sweeps are recorded has a table of its own: "
                     "validation.held_out() for the course's, validation.held_out_other_machines() for the others): "
                     + "; ".join(f"{where}: {', '.join(names)}" for where, names in machines.items()) + ".")
    return notes


def baseline_notes(rows) -> list:
    """Where the plain one-GPU runs the shown speedups divide by came from, and which are missing."""
    found = sorted({r["plain_source"] for r in rows if r.get("measured") is not None and r.get("plain_source")})
    missing = sorted({r["plain_source"] for r in rows if r.get("measured") is None and r.get("plain_source")})
    notes = []
    if found:
        notes.append("Measured and predicted: speedup over the plain one-GPU run (one process, no wrapper) of the same "
                     "model, batch and precision, recorded on " + "; ".join(found) + ". The model predicts each "
                     "2-GPU step from the one-worker run of the same recording, so its error is that of the 2-GPU "
                     "images/s, whichever run the speedups divide by.")
    if missing:
        notes.append("'-': " + "; ".join(missing) + "; the error is still that of the 2-GPU images/s.")
    return notes


def term_bases(rec: RecordedSet) -> dict:
    """{term: measured, modelled or assumed} over the predictions of every recorded run: a
    term measured for some runs and assumed for others is listed with both."""
    out: dict = {}
    wrappers = rec.wrappers()
    for p in rec.points:
        for t in _predict(rec, p, wrappers, profiles=rec.profiles, channels=rec.channels).terms:
            kinds = out.setdefault(t.name, [])
            if t.basis not in kinds:
                kinds.append(t.basis)
    return {k: " or ".join(v) for k, v in out.items()}


def _gap_ms(r) -> float:
    """How much longer the measured step is than the predicted one, in ms (negative: shorter)."""
    measured_step = r.get("images_factor", r["n_gpus"]) * r["compute_s"] / r["m1"]
    return 1e3 * (measured_step - r["step_s"])


_TIMELINE_OF = "a profiler timeline of one two-GPU step (torch.profiler)"
_TIMELINE = f"{_TIMELINE_OF} beside the one-worker step's would measure it"


def miss_notes(rows, by: Optional[str] = "model", two_workers: bool = False) -> list:
    """By how much and why the rows outside the band miss, grouped by what the row's own numbers
    say: measured above linear, predicted inside the repeats' spread, or a step whose predicted
    time is too short (host-bound: host time the model does not have) or off on the device path
    (the all-reduce during training against the sweep timed alone); each group that a missing term
    explains names that term and what would measure it. ``two_workers``: the predictions hold the
    two-worker term measured on the probe."""
    key = f"{by}_err" if by else None
    out_rows = [r for r in rows if key and r.get(key) is not None and abs(r[key]) > 100 * TOLERANCE]
    if not out_rows:
        return ["Every held-out prediction is within the band."] if key else []
    groups: dict = {}
    for r in out_rows:
        lo, hi = r.get("m1_min"), r.get("m1_max")
        pred = r[f"{by}_p1"]
        if (r.get("measured") or 0) > r["n_gpus"]:
            why = "above_linear"
        elif lo is not None and hi is not None and lo <= pred <= hi:
            why = "in_spread"
        elif r.get("path_range") and r["path_range"][0] <= r["m1"] <= r["path_range"][1]:
            why = "path_spread"
        elif pred < r["m1"]:
            why = "too_long"
        elif r["bound"] in ("host", "serial"):
            why = f"host_{r['launcher']}"
        else:
            why = "device"
        groups.setdefault(why, []).append(r)

    runs = [(r["launcher"], r["model"], r["path"]) for r in rows]

    def names(rs):       # a run recorded at several batches per GPU is named with its batch
        return ", ".join(f"{r['launcher']} {r['model']} {r['path']}"
                         + (f" at {r['batch']}/GPU" if runs.count((r["launcher"], r["model"], r["path"])) > 1 else "")
                         + f" ({r[key]:+.1f}%)" for r in rs)

    def gaps(rs):
        g = sorted(abs(_gap_ms(r)) for r in rs)
        return (f"{format_time(g[0] * 1e-3)}" if len(g) == 1 else
                f"{format_time(g[0] * 1e-3)} to {format_time(g[-1] * 1e-3)}")

    def share(rs):
        v = sorted(100 * r["comm_s"] / r["step_s"] for r in rs)
        return f"{v[0]:.0f}%" if len(v) == 1 else f"{v[0]:.0f}% to {v[-1]:.0f}%"

    notes = [f"Misses ({len(out_rows)} of {len(rows)} with each {by} held out), by what their own numbers say:"]
    for why, rs in groups.items():
        if why == "above_linear":
            notes.append(f"  measured above {rs[0]['n_gpus']}x, which a model that only adds costs cannot reach: "
                         f"{names(rs)}; two processes ran faster than {rs[0]['n_gpus']} times the plain one-GPU run.")
        elif why == "in_spread":
            notes.append(f"  inside the min-max of the measured repeats, so within what the runs themselves vary by: "
                         f"{names(rs)}; no missing term shows here: more interleaved repeats would narrow the spread.")
        elif why == "path_spread":
            notes.append(f"  within what the path's own all-reduce varies by: {names(rs)}; predicted with each "
                         "recorded sweep of its path in turn, the measured speedup lies between the lowest and the "
                         "highest prediction, so no missing term shows here.")
        elif why == "host_horovod":
            notes.append(f"  Horovod, host-bound: {names(rs)}; the measured step is longer than predicted by "
                         f"{gaps(rs)}: " + _horovod_host_gap(two_workers))
        elif why.startswith("host_"):
            notes.append(f"  {rs[0]['launcher']}, host-bound: {names(rs)}; the measured step is longer than predicted by "
                         f"{gaps(rs)}: " + _ddp_host_gap(two_workers))
        elif why == "too_long":
            notes.append(f"  predicted too slow: {names(rs)}; the predicted step is longer than the measured one by "
                         f"{gaps(rs)}, with the all-reduce {share(rs)} of the predicted step: the path's fit, from a "
                         "sweep timed alone, charges more for these messages than the training step took. Missing "
                         "term: how much of the all-reduce overlaps the host's own work in the step (the model adds "
                         f"it in full to a host-bound step); {_TIMELINE}.")
        else:
            notes.append(f"  decided by the device path: {names(rs)}; the measured step is longer than predicted by "
                         f"{gaps(rs)}: the all-reduce during training is not the sweep timed alone (the backward "
                         "pass shares the GPU and the link, and a slow path's threads share the host). Missing term: "
                         f"the all-reduce's slowdown inside the step; the NCCL kernels' time in {_TIMELINE_OF}, "
                         "against the sweep, would measure it.")
    return notes


def _ddp_host_gap(two_workers: bool) -> str:
    """Why a host-bound DDP step can be longer than predicted: the term that is missing and what would measure it."""
    if two_workers:
        return ("the two-worker term measured on the probe (one small layer) is in the prediction, so what is missing "
                "grows with the model: the host work of two processes per gradient bucket (each bucket handed to NCCL, "
                f"the other process's launches on the same cores). Missing term: a two-worker cost per bucket; {_TIMELINE}.")
    return ("what two processes cost beyond one (waiting for the slower rank, sharing the host) is not measured on this "
            "machine and is modelled as 0: the probe JOBs of tools/recording/record_experiments.py (ddp:probe, "
            "horovod:probe) measure it.")


def recorded_terms(launcher: str = "ddp", model: str = "wide", path: str = "shm",
                   recorded: Optional[RecordedSet] = None):
    """The terms of the prediction for one recorded run, each with its time, how it is known
    (measured, modelled, assumed) and where its number came from, as a
    :class:`ddlab.base.tables.Table`."""
    rec = recorded or recorded_points()
    pts = [p for p in rec.points if (p.launcher, p.model, p.path) == (launcher, model, path)]
    if not pts:
        have = sorted({(p.launcher, p.model, p.path) for p in rec.points})
        raise ValueError(f"no recorded run {launcher} {model} {path}; recorded: "
                         + ", ".join(" ".join(h) for h in have))
    p = pts[0]
    pred = _predict(rec, p, rec.wrappers(), profiles=rec.profiles, channels=rec.channels)
    t = pred.terms_table()
    over = (lambda v: format_ratio(v) if v is not None else "-")     # noqa: E731
    t.title = (f"The terms of one prediction: {launcher} {model} over {path}, predicted "
               f"{over(p.over_plain(p.speedup(pred)))}, measured {over(p.measured_plain)} (over the plain one-GPU run)")
    t.notes = [f"Step on {p.n_gpus} GPUs {format_time(pred.total_s)}, decided by the {pred.bound} path."]
    return t


def validate(recorded: Optional[RecordedSet] = None, **kwargs):
    """Predicted against measured 2-GPU speedup for every recorded model x path x launcher,
    as a :class:`ddlab.base.tables.Table` (launcher, model, path, predicted, measured, error in
    %, within the ±10% band, what decided the step). Nothing in it is fitted to these runs; the
    same predictions with each model, path or batch held out are :func:`held_out`. Models
    without a recording are named in the notes."""
    from ddlab.base.tables import Table
    rec = recorded or recorded_points()
    kwargs = _with_profiles(rec, kwargs)
    wrappers = rec.wrappers()
    rows = []
    for p in rec.points:
        pred = _predict(rec, p, wrappers, **kwargs)
        err = p.speedup(pred) / p.measured - 1
        rows.append({"launcher": p.launcher, "model": p.model, "path": p.path,
                     "predicted": p.over_plain(p.speedup(pred)), "measured": p.measured_plain, "error_pct": 100 * err,
                     "within": "yes" if abs(err) <= TOLERANCE else "no", "bound": pred.bound,
                     "plain_source": p.plain_source})
    inside = sum(r["within"] == "yes" for r in rows)
    notes = [f"{inside} of {len(rows)} within ±{100 * TOLERANCE:.0f}%; no term is fitted to these runs."]
    notes.append("Wrapper cost: " + "; ".join(o.describe() for o in wrappers.values()) + "; where the one-GPU step "
                 "ran under the same wrapper (DDP with world size 1) it is in that step already.")
    notes += baseline_notes(rows)
    if rec.missing:
        notes.append("Not recorded (no prediction checked): "
                     + ", ".join(f"{m} ({la})" for la, m in rec.missing) + ".")
    if sorted({p.repeats for p in rec.points}) == [1]:
        notes.append("Each recorded point is a single run: its spread between repeats is unknown.")
    notes += _input_notes(rec, kwargs)
    cols = [("launcher", "text"), ("model", "text"), ("path", path_labels(rec), "path"),
            ("predicted", lambda v: "-" if v is None else format_ratio(v), "predicted speedup"),
            ("measured", lambda v: "-" if v is None else format_ratio(v), "measured speedup"),
            ("error_pct", lambda v: f"{v:+.1f}%", "error"), ("within", "text", f"within ±{100 * TOLERANCE:.0f}%"),
            ("bound", "text", "decided by")]
    return Table(cols, rows, title="Predicted vs measured 2-GPU speedup" + (f" ({rec.machine})" if rec.machine else ""),
                 notes=notes, missing="-")


def _input_notes(rec: RecordedSet, kwargs: dict) -> list:
    """Where the model's inputs other than the recorded runs came from."""
    notes = []
    if rec.device_elsewhere:
        where = sorted(set(rec.device_elsewhere.values()))
        text = (f"The GPU's busy time per step of {', '.join(rec.device_elsewhere)} comes from one-GPU CUDA-graph "
                f"runs on {'; '.join(where)} (the same GPU model), because the two-GPU machine has no graph run of "
                "them recorded.")
        if rec.device_check:
            text += (" For the models both machines recorded, that machine's graph step differs from the two-GPU "
                     "machine's by " + ", ".join(f"{100 * (r - 1):+.1f}% ({m})" for m, r in rec.device_check.items())
                     + ".")
        notes.append(text)
    profiles = kwargs.get("profiles") or {}
    if profiles:
        devices = sorted({p.device for p in profiles.values()})
        others = sorted({p.model for p in rec.points} - set(profiles))
        notes.append(f"When each layer's gradient is ready, and the shares of the backward pass and the optimizer, are "
                     f"measured ({', '.join(profiles)}: ddlab.training.step_profile on {', '.join(devices)})"
                     + (f"; for {', '.join(others)} they are counted by FLOPs." if others else "."))
    elif "readiness" not in kwargs or isinstance(kwargs.get("readiness"), str):
        notes.append(f"Each layer's gradient is taken to be ready in proportion to its "
                     f"{'parameters' if kwargs.get('readiness') == 'params' else 'FLOPs'} (no measured step profile).")
    return notes


def _horovod_host_gap(two_workers: bool = False) -> str:
    """Why a host-bound Horovod step can be longer than predicted, as far as the recorded measurements
    reach: with its hooks measured on one worker, what two workers add beyond that (beyond the probe's
    two-worker term where ``two_workers``); else all of Horovod's own host work. Names what would measure it."""
    try:
        hooked = wrapper_cost.measured("horovod").cycle_s is not None
    except (ValueError, OSError):
        hooked = False
    timeline = "Horovod's timeline (HOROVOD_TIMELINE) of a two-GPU run would measure it."
    if hooked and two_workers:
        return ("Horovod's host work is measured on one worker with its hooks on, and the two-worker term on the probe "
                "(one small layer); what is missing grows with the model: the negotiation of each tensor over the "
                "controller, and waiting for the other rank. " + timeline)
    if hooked:
        return ("Horovod's host work is measured on one worker with its hooks on; what two workers add to it (the "
                "negotiation of each cycle over its controller, waiting for the other rank) is not measured and is "
                "modelled as 0. " + timeline)
    return ("Horovod's own host work on two workers (its hooks, the negotiation of each cycle over its controller, "
            "synchronize) is not measured and is modelled as 0. " + timeline)


if __name__ == "__main__":     # python -m ddlab.cost.validation: each machine's held-out table, then the plain one
    print(held_out())
    for other in held_out_other_machines():     # every other machine's runs, from its own recorded sweeps
        print()
        print(other)
    print()
    print(validate())
