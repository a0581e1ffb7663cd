"""The step model set beside the recorded runs: the wrapper's cost fitted to them, and the
predicted against the measured speedups, held out first and in-sample for comparison.

:func:`fit_overheads` fits the data-parallel wrapper's fixed cost (per step, per bucket) to
recorded runs, :func:`fit_all_overheads` once per launcher. :func:`held_out` is the headline:
every recorded run predicted with that cost fitted on the runs that do not share its model,
then its path, then its batch per GPU (:func:`held_out_speedups`), with the runs whose
prediction does not depend on the path flagged (:func:`link_effect`). :func:`validate` is the
in-sample table (the cost fitted to the runs it predicts). Both return a
:class:`ddlab.base.tables.Table`; :func:`ddlab.views.cost_plots.plot_validation` draws it.
``python -m ddlab.cost.validation`` prints both.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from ddlab.base.units import format_ratio

from ddlab.cost.alpha_beta import AlphaBeta
from ddlab.cost.recorded_runs import RECORDED_RUNS, RecordedPoint, RecordedSet, predict_point, recorded_points
from ddlab.cost.step_model import Overheads, gradient_buckets

TOLERANCE = 0.10     # a prediction within ±10% of the measured speedup counts as right


def _with_profiles(rec: "RecordedSet", kwargs: dict) -> dict:
    """The recorded step profiles and channels, unless the caller chose the readiness or the
    profiles."""
    if "readiness" in kwargs or "profiles" in kwargs:
        return kwargs
    return dict(kwargs, profiles=rec.profiles, channels=rec.channels)


def _rel_errors(points, fits, over, **kwargs):
    return [predict_point(p, fits, over, **kwargs).speedup / p.measured - 1 for p in points]


def fit_overheads(points: Sequence[RecordedPoint], fits: dict, launcher: str = "", **kwargs) -> Overheads:
    """The wrapper's fixed costs (per step, per bucket) that best fit the recorded speedups of
    ``points`` (least squares of the relative error; both >= 0). Only points where the host
    does per-step work count (not CUDA-graph runs). Two free numbers for the whole launcher,
    never one per point. When every point has the same number of buckets the two cannot be
    told apart: then only the per-step cost is fitted and ``note`` says so."""
    pts = [p for p in points if p.host_work and (not launcher or p.launcher == launcher)]
    if not pts:
        raise ValueError(f"no recorded runs with host work per step{' for ' + launcher if launcher else ''} to fit")

    def cost(step, bucket):
        return sum(e * e for e in _rel_errors(pts, fits, Overheads(step, bucket), **kwargs))

    grid = np.concatenate([[0.0], np.geomspace(1e-6, 0.1, 121)])
    n_buckets = {len(gradient_buckets(p.model, **_bucket_kwargs(kwargs))) for p in pts}
    step = min(grid, key=lambda c: cost(c, 0.0))
    bucket, note = 0.0, ""
    if len(n_buckets) > 1:
        step, bucket = min(((a, b) for a in grid[::4] for b in grid[::4]), key=lambda ab: cost(*ab))
    else:
        note = (f"every run has {n_buckets.pop()} bucket(s), so a cost per bucket cannot be told apart from "
                "one per step: only the per-step cost is fitted")
    # refine around the grid's best (a few golden-section-like passes on each)
    for _ in range(2):
        step = _refine(lambda c: cost(c, bucket), step)
        if len(n_buckets) > 1:
            bucket = _refine(lambda c: cost(step, c), bucket)
    return Overheads(float(step), float(bucket), launcher, len(pts), note)


def _bucket_kwargs(kwargs):
    keys = ("bucket_cap_mb", "first_bucket_bytes", "bytes_per_param", "readiness")
    return {k: kwargs[k] for k in keys if k in kwargs}


def _refine(f, x0: float) -> float:
    lo, hi = max(0.0, x0 * 0.8 - 1e-6), x0 * 1.25 + 1e-6
    xs = np.linspace(lo, hi, 41)
    return float(min(xs, key=f))


def fit_all_overheads(rec: RecordedSet, **kwargs) -> dict:
    """{launcher: Overheads} fitted per launcher on all its recorded runs (in-sample), with
    the recorded step profiles unless ``kwargs`` choose the readiness or the profiles."""
    kwargs = _with_profiles(rec, kwargs)
    out = {}
    for label, *_ in RECORDED_RUNS:
        pts = [p for p in rec.points if p.launcher == label and p.host_work]
        if pts:
            out[label] = fit_overheads(pts, rec.fits, label, **kwargs)
    return out


def _validation_table(rows, title, notes):
    from ddlab.base.tables import Table
    cols = [("launcher", "text"), ("model", "text"), ("path", "text"),
            ("predicted", "ratio", "predicted speedup"), ("measured", "ratio", "measured speedup"),
            ("error_pct", lambda v: f"{v:+.1f}%", "error"), ("within", "text", f"within ±{100 * TOLERANCE:.0f}%"),
            ("bound", "text", "decided by")]
    return Table(cols, rows, title=title, notes=notes)


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
                     f"{kwargs.get('readiness', 'flops') if kwargs.get('readiness') == 'params' else 'FLOPs'} "
                     "(no measured step profile).")
    return notes


def validate(recorded: Optional[RecordedSet] = None, overheads: Optional[dict] = None, **kwargs):
    """Predicted against measured 2-GPU speedup for every recorded model x path x launcher,
    as a :class:`ddlab.base.tables.Table` (launcher, model, path, predicted, measured, error in
    %, within the ±10% band, what decided the step). ``overheads`` ({launcher:
    :class:`Overheads`}) default to :func:`fit_all_overheads` on the same runs: then the
    comparison is in-sample for the wrapper's cost (see :func:`holdout` for an
    out-of-sample check). Models without a recording are named in the notes."""
    rec = recorded or recorded_points()
    kwargs = _with_profiles(rec, kwargs)
    over = fit_all_overheads(rec, **kwargs) if overheads is None else overheads
    rows = []
    for p in rec.points:
        pred = predict_point(p, rec.fits, over.get(p.launcher), **kwargs)
        err = pred.speedup / p.measured - 1
        rows.append({"launcher": p.launcher, "model": p.model, "path": p.path, "predicted": pred.speedup,
                     "measured": p.measured, "error_pct": 100 * err,
                     "within": "yes" if abs(err) <= TOLERANCE else "no", "bound": pred.bound})
    inside = sum(r["within"] == "yes" for r in rows)
    notes = [f"{inside} of {len(rows)} within ±{100 * TOLERANCE:.0f}%"
             + (" in-sample (see held_out for the runs each fit did not see)." if overheads is None else ".")]
    if over:
        notes.append("Wrapper cost: " + "; ".join(o.describe() + (f" ({o.note})" if o.note else "")
                                                  for o in over.values()) + "."
                     + (" Fitted to these same runs (two numbers per launcher at most): in-sample for that term; "
                        "everything else comes from the one-GPU runs, the step profiles and the all-reduce sweeps."
                        if overheads is None else ""))
    if rec.missing:
        notes.append("Not recorded (no prediction checked): "
                     + ", ".join(f"{m} ({la})" for la, m in rec.missing) + ".")
    reps = sorted({p.repeats for p in rec.points})
    if reps == [1]:
        notes.append("Each recorded point is a single run: its spread between repeats is unknown.")
    notes += _input_notes(rec, kwargs)
    title = ("In-sample: predicted vs measured 2-GPU speedup, the wrapper's cost fitted to these same runs"
             if overheads is None else "Predicted vs measured 2-GPU speedup")
    return _validation_table(rows, title + (f" ({rec.machine})" if rec.machine else ""), notes)


# ----------------------------------------------------------------------------- held out
# What a held-out check leaves out: every recorded run of one model, one path or one batch per
# GPU; the wrapper's cost (the only number fitted to recorded runs) is fitted on the others.
HELD_OUT = {"model": lambda p: p.model, "path": lambda p: p.path, "batch": lambda p: p.batch}
PATH_INDEPENDENT = 1e-3      # a prediction a free link would change by less than this (relative)


def held_out_speedups(rec: RecordedSet, by: str, **kwargs) -> list:
    """For each recorded point (in ``rec.points`` order), the speedup predicted with the
    wrapper's cost fitted on the same launcher's runs that do NOT share its ``by`` ("model",
    "path" or "batch"), or None when nothing is left to fit on (then it cannot be held out).
    A run with no host work per step (a CUDA-graph run) uses no fitted number at all."""
    key = HELD_OUT[by]
    kwargs = _with_profiles(rec, kwargs)
    out, fitted = [], {}
    for p in rec.points:
        over = None
        if p.host_work:
            k = (p.launcher, key(p))
            if k not in fitted:
                train = [q for q in rec.points if q.launcher == p.launcher and q.host_work and key(q) != key(p)]
                fitted[k] = fit_overheads(train, rec.fits, p.launcher, **kwargs) if train else None
            over = fitted[k]
            if over is None:
                out.append(None)
                continue
        out.append(predict_point(p, rec.fits, over, **kwargs).speedup)
    return out


def link_effect(rec: RecordedSet, p: RecordedPoint, overheads: Optional[Overheads] = None, **kwargs) -> float:
    """How much the prediction for ``p`` owes to its path: the relative change of the predicted
    speedup when the path's fit is replaced by a link that costs nothing. Near 0: the prediction
    does not depend on the path (the link's time hides entirely), so the run tests the one-GPU
    step and the wrapper's cost, not the link."""
    kwargs = _with_profiles(rec, kwargs)
    real = predict_point(p, rec.fits, overheads, **kwargs).speedup
    free = predict_point(p, dict(rec.fits, **{p.path: AlphaBeta(0.0, 1e30)}), overheads,
                         **dict(kwargs, channels={})).speedup
    return abs(free / real - 1)


def _err(pred, measured):
    return None if pred is None else 100 * (pred / measured - 1)


def _err_text(v) -> str:
    if v is None:
        return "-"
    return f"{v:+.1f}%" + ("" if abs(v) <= 100 * TOLERANCE else " (out)")


def held_out(recorded: Optional[RecordedSet] = None, **kwargs):
    """The headline check of the step model: every recorded run (launcher x model x path x batch),
    predicted with the wrapper's cost fitted on the other runs, leaving out its model, then its
    path, then its batch per GPU (where the recordings have more than one batch), beside the
    in-sample error (the cost fitted to every run, this one included) and a flag for the runs
    whose prediction does not depend on the path. Returns a :class:`ddlab.base.tables.Table`
    (``plot_validation(table, predicted="model_pred")`` draws it); the notes count the hits,
    computed from its rows."""
    from ddlab.base.tables import Table
    rec = recorded or recorded_points()
    kwargs = _with_profiles(rec, kwargs)
    schemes = [by for by in HELD_OUT if len({HELD_OUT[by](p) for p in rec.points}) > 1]
    held = {by: held_out_speedups(rec, by, **kwargs) for by in schemes}
    inside = fit_all_overheads(rec, **kwargs)
    rows = []
    for i, p in enumerate(rec.points):
        over = inside.get(p.launcher) if p.host_work else None
        row = {"launcher": p.launcher, "model": p.model, "path": p.path, "batch": p.batch, "measured": p.measured,
               "in_sample": _err(predict_point(p, rec.fits, over, **kwargs).speedup, p.measured),
               "path_matters": "yes" if link_effect(rec, p, over, **kwargs) > PATH_INDEPENDENT else "NO",
               "fitted": "yes" if p.host_work else "none"}
        for by in schemes:
            row[f"{by}_pred"] = held[by][i]
            row[f"{by}_err"] = _err(held[by][i], p.measured)
        rows.append(row)
    cols = [("launcher", "text"), ("model", "text"), ("path", "text"), ("batch", "int", "batch/GPU"),
            ("measured", "ratio", "measured")]
    for by in schemes:
        cols += [(f"{by}_pred", lambda v: "-" if v is None else format_ratio(v), f"{by} out"),
                 (f"{by}_err", _err_text, "error")]
    cols += [("in_sample", _err_text, "in-sample error"), ("path_matters", "text", "depends on path"),
             ("fitted", "text", "fitted term")]
    return Table(cols, rows, title="Held out: each recorded 2-GPU run predicted with the wrapper's cost fitted on the "
                                   "other runs" + (f" ({rec.machine})" if rec.machine else ""),
                 notes=held_out_notes(rows, schemes, rec))


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
                                                                           "nothing left to fit on)" if m < n else ""))
    batches = sorted({r["batch"] for r in rows})
    if "batch" not in schemes:
        head.append(f"leaving each batch out is not possible: every recorded run has {batches[0]} images per GPU"
                    if len(batches) == 1 else "")
    k, m = hits(rows, "in_sample")
    notes = ["Held out: " + "; ".join(h for h in head if h) + ".",
             f"In-sample, for comparison only (the wrapper's cost fitted to every run, these included): {k} of {m} "
             f"within {band}."]
    flat = [r for r in rows if r["path_matters"] == "NO"]
    if flat:
        rest = [r for r in rows if r["path_matters"] != "NO"]
        text = (f"{len(flat)} of {n} predictions do not depend on the path (a link that cost nothing would change "
                f"them by less than {100 * PATH_INDEPENDENT:.1f}%: marked NO): those rows test the one-GPU step and the "
                "wrapper's cost, not the link.")
        if schemes:
            k, m = hits(rest, f"{schemes[0]}_err")
            text += f" Of the {len(rest)} that do, {k} of {m} are within {band} with each {schemes[0]} held out."
        notes.append(text)
    graph = [r for r in rows if r["fitted"] == "none"]
    if graph:
        notes.append(f"{len(graph)} runs (CUDA-graph steps: no wrapper work on the host) use no fitted number at all: "
                     "their predictions are the same in every column.")
    notes.append("The only number fitted to recorded runs is the wrapper's cost per launcher (per step, per bucket); "
                 "everything else comes from the one-GPU runs, the step profiles and the all-reduce sweeps. The "
                 "model's structure (buckets, overlap, host and device paths) was chosen looking at these same runs, "
                 "which no held-out column can undo.")
    if rec.missing:
        notes.append("Not recorded (no prediction checked): " + ", ".join(f"{m} ({la})" for la, m in rec.missing) + ".")
    return notes


if __name__ == "__main__":     # python -m ddlab.cost.validation: the held-out table, then the in-sample one
    print(held_out())
    print()
    print(validate())
