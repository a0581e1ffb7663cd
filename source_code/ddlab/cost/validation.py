"""The step model set beside the recorded runs: the wrapper's cost fitted to them, and the
predicted against the measured speedups, in-sample and held out.

:func:`fit_overheads` fits the data-parallel wrapper's fixed cost (per step, per bucket) to
recorded runs, :func:`fit_all_overheads` once per launcher; :func:`validate` predicts every
recorded run (:class:`ddlab.cost.recorded_runs.RecordedSet`) with those costs (in-sample for
them) and :func:`holdout` fits each model's cost on the other models' runs (out-of-sample).
Both return a :class:`ddlab.base.tables.Table`; :func:`ddlab.views.cost_plots.plot_validation`
draws it.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

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
    notes = [f"{inside} of {len(rows)} within ±{100 * TOLERANCE:.0f}%."]
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
    return _validation_table(rows, "Predicted vs measured 2-GPU speedup" + (f" ({rec.machine})" if rec.machine else ""),
                             notes)


def holdout(recorded: Optional[RecordedSet] = None, **kwargs):
    """An out-of-sample check of the wrapper's cost: for each launcher and each recorded
    model, fit the cost on the *other* models' runs and predict this model's. Returns the
    same table as :func:`validate` (rows whose launcher has nothing to fit on are left out)."""
    rec = recorded or recorded_points()
    kwargs = _with_profiles(rec, kwargs)
    rows = []
    for label, *_ in RECORDED_RUNS:
        mine = [p for p in rec.points if p.launcher == label]
        for model in sorted({p.model for p in mine}):
            train = [p for p in mine if p.model != model and p.host_work]
            test = [p for p in mine if p.model == model]
            if test and test[0].host_work and not train:
                continue
            over = fit_overheads(train, rec.fits, label, **kwargs) if train else None
            for p in test:
                pred = predict_point(p, rec.fits, over, **kwargs)
                err = pred.speedup / p.measured - 1
                rows.append({"launcher": label, "model": p.model, "path": p.path, "predicted": pred.speedup,
                             "measured": p.measured, "error_pct": 100 * err,
                             "within": "yes" if abs(err) <= TOLERANCE else "no", "bound": pred.bound})
    inside = sum(r["within"] == "yes" for r in rows)
    return _validation_table(rows, "Held-out check: the wrapper's cost fitted on the other model, predicting this one",
                             f"{inside} of {len(rows)} within ±{100 * TOLERANCE:.0f}%.")
