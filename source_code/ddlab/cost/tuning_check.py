"""The step model against the recorded communication tunings (notebook 10's case 3).

A recorded tuning comparison (``tuning-torch-<launcher>-<model>-<path>``, recorded by
``tools/recording/record_experiments.py tune:...``) holds the one-GPU untuned run and each tuning on
two GPUs, three repeats each. Several tunings change exactly what a term of
:func:`ddlab.cost.step_model.predict_step` takes as input, so the model can predict them with nothing
new measured or fitted:

* DDP's bucket cap (``--bucket-cap-mb``): the buckets the all-reduces go out in;
* gradients all-reduced as 16-bit floats (DDP's bf16 hook, Horovod's fp16 compression): two bytes
  per gradient on the link instead of four. The compression's own cost (the casts before and after,
  the extra work per tensor) is not in the model;
* Horovod's fusion threshold and cycle time: its fusion buffers and the half-cycle wait.

Tunings whose effect the model has no input for (DDP's gradients as bucket views, its static graph)
are predicted as the untuned run and marked so; tunings that change the batch per optimizer step
(a larger batch, accumulation) are not predicted, since the one-GPU step at that batch is not
recorded. :func:`tuning_check` sets each prediction beside the measured median and its min-max.
The tuning runs are a held-out check: no term of the model is fitted to them.
"""
from __future__ import annotations

from typing import Optional

from ddlab.base.units import format_ratio
from ddlab.cost.recorded_runs import (RecordedPoint, RecordedSet, path_labels, plain_fields, predict_point,
                                      ratios_to_one, recorded_points, recorded_sets)
from ddlab.cost.validation import TOLERANCE, baseline_notes, err_text
from ddlab.training.baseline import is_wrapper_one

MIB = 1024 * 1024
PREFIX = "tuning-torch-"
NOT_MODELLED = {"gradient_as_bucket_view": "gradients as bucket views", "static_graph": "static graph"}


def model_inputs(config: Optional[dict]) -> tuple:
    """(keyword arguments of :func:`predict_step`, what they model, what the model leaves out, why
    not predicted or None) for a recorded row's ``tuning_config``."""
    c = config or {}
    if int(c.get("accumulate") or 1) != 1:
        return {}, [], [], "accumulation: the one-GPU step of several micro-batches is not recorded"
    kw, modelled, left = {}, [], []
    if c.get("bucket_cap_mb"):
        kw["bucket_cap_mb"] = float(c["bucket_cap_mb"])
        modelled.append(f"buckets of {c['bucket_cap_mb']:g} MB")
    if c.get("comm_hook") not in (None, "none") or c.get("hvd_compression") not in (None, "none"):
        kw["bytes_per_param"] = 2
        modelled.append("2 bytes per gradient on the link (the compression's own cost not modelled)")
    if c.get("hvd_fusion_mb"):
        kw["fusion_threshold_bytes"] = int(float(c["hvd_fusion_mb"]) * MIB)
        modelled.append(f"fusion buffer {c['hvd_fusion_mb']:g} MB")
    if c.get("hvd_cycle_ms"):
        kw["cycle_s"] = float(c["hvd_cycle_ms"]) * 1e-3
        modelled.append(f"cycle {c['hvd_cycle_ms']:g} ms")
    left = [text for key, text in NOT_MODELLED.items() if c.get(key)]
    return kw, modelled, left, None


def recorded_comparisons(rec: RecordedSet, elsewhere: Optional[list] = None) -> list:
    """The recorded tuning comparisons made on ``rec``'s machine, on a path ``rec`` has a fit for, as
    ExperimentResults (name order). ``elsewhere``: a list that gets "<name> (<machine>)" of each
    recorded comparison made on another machine (not checked: its links were not swept)."""
    from ddlab.system.provenance import machine_of
    from ddlab.training import recording
    found = []
    for name, res in recording.recorded_with_prefix(PREFIX):
        if (res.config.get("path") or "default") not in rec.fits:
            continue
        if rec.made_here(res.provenance):
            found.append(res)
        elif elsewhere is not None:
            elsewhere.append(f"{name} ({machine_of(res.provenance)})")
    return found


def _device_s(rec: RecordedSet, model: str, batch: int) -> tuple:
    """(the GPU's busy time per step of ``model`` at ``batch`` as the recorded points have it, its source)."""
    p = next((p for p in rec.points if p.model == model and p.batch == batch and p.device_s and not p.strong), None)
    return (p.device_s, p.device_source) if p else (None, "")


def _miss_notes(rows) -> list:
    """Why the rows outside the band miss, from their own numbers: the gap between the measured
    two-GPU step (the one-GPU step times 2 over the measured speedup) and the predicted one."""
    out = [r for r in rows if abs(r["error_pct"]) > 100 * TOLERANCE]
    notes = []

    def span(rs):
        g = sorted(1e3 * r["gap_s"] for r in rs)
        return f"{g[0]:.2f} ms" if len(g) == 1 else f"{g[0]:.2f} to {g[-1]:.2f} ms"

    def named(rs):
        return ", ".join(f"{r['launcher']} {r['tuning']} ({r['error_pct']:+.1f}%)" for r in rs)
    slow16 = [r for r in out if r["sixteen_bit"] and r["gap_s"] > 0]
    slow = [r for r in out if not r["sixteen_bit"] and r["gap_s"] > 0]
    fast = [r for r in out if r["gap_s"] <= 0]
    if slow16:
        notes.append(f"16-bit gradients, predicted too fast: {named(slow16)}; the measured step is longer by "
                     f"{span(slow16)}: the model counts only the halved bytes on the link, none of the "
                     "compression's own cost (casting each gradient to 16 bits and back, the extra work per tensor "
                     "in the hook or in Horovod), which the course does not measure."
                     + (" Each ran slower than its launcher's untuned run: here that cost is larger than what the "
                        "halved bytes save." if all(r["slower_than_untuned"] for r in slow16) else ""))
    if slow:
        horovod = any(r["launcher"] == "horovod" for r in slow)
        notes.append(f"Predicted too fast: {named(slow)}; the measured step is longer by {span(slow)}: time on two "
                     "GPUs the model does not have (what two processes cost beyond one"
                     + ("; for Horovod, what two workers add to its host work measured on one" if horovod else "")
                     + "), modelled as 0.")
    if fast:
        notes.append(f"Predicted too slow: {named(fast)}; the predicted step is longer by "
                     f"{span([dict(r, gap_s=-r['gap_s']) for r in fast])}.")
    return notes


def tuning_check(recorded: Optional[RecordedSet] = None):
    """Each recorded tuning's measured 2-GPU speedup beside the step model's prediction, as a
    :class:`ddlab.base.tables.Table` (launcher, tuning, measured median and min-max, predicted,
    error, what the model changed for it); the notes count the predictions within ±10%."""
    from ddlab.base.tables import Table
    rec = recorded or recorded_points()
    wrappers = rec.wrappers()
    rows, skipped = [], []
    elsewhere: list = []
    comparisons = recorded_comparisons(rec, elsewhere)
    for res in comparisons:
        c = res.config
        launcher, model, path = c.get("launcher"), c.get("model"), c.get("path") or "default"
        base = next((r for r in res.rows if is_wrapper_one(r) and not r.get("error")), None)
        if base is None:
            continue
        one_s = base["global_batch"] / base["images_per_s"]
        device_s, device_source = _device_s(rec, model, base["global_batch"])
        untuned = next((r["images_per_s"] for r in res.rows if r.get("tuning") == "untuned"
                        and r.get("images_per_s")), None)
        for r in res.rows:
            if r.get("workers", 1) < 2 or r.get("error") or not r.get("images_per_s"):
                continue
            kw, modelled, left, why_not = model_inputs(r.get("tuning_config"))
            if why_not is None and r.get("global_batch") != r["workers"] * base["global_batch"]:
                why_not = "a larger batch per GPU: the one-GPU step at that batch is not recorded"
            if why_not:
                skipped.append(f"{launcher} {r['tuning']} ({why_not})")
                continue
            p = RecordedPoint(launcher, model, path, r["workers"], base["global_batch"], one_s, device_s, True,
                              *ratios_to_one(r, base), launcher == "ddp", device_source, **plain_fields(res, base))
            pred = predict_point(p, rec.fits, wrappers.get(p.framework), profiles=rec.profiles,
                                 channels=rec.channels, sweeps=rec.sweeps, two_workers=rec.two_workers, **kw)
            got = p.speedup(pred)
            lo, hi = p.over_plain(p.measured_min), p.over_plain(p.measured_max)
            rows.append({"launcher": launcher, "model": model, "path": path, "tuning": r["tuning"],
                         "measured": p.measured_plain,
                         "spread": f"{format_ratio(lo)}-{format_ratio(hi)}" if lo is not None else "-",
                         "predicted": p.over_plain(got), "error_pct": 100 * (got / p.measured - 1),
                         "modelled": "; ".join(modelled + [f"{t}: not modelled" for t in left]) or "untuned",
                         "bound": pred.bound, "sixteen_bit": kw.get("bytes_per_param") == 2,
                         "gap_s": p.images_factor * one_s / p.measured - pred.total_s,
                         "slower_than_untuned": untuned is not None and r["images_per_s"] < untuned,
                         "plain_source": p.plain_source})
    inside = sum(abs(r["error_pct"]) <= 100 * TOLERANCE for r in rows)
    notes = [f"{inside} of {len(rows)} within ±{100 * TOLERANCE:.0f}%. Each two-GPU tuning predicted from its "
             "comparison's own one-GPU run, the path's recorded all-reduce sweep and the model's terms, with the "
             "tuning's setting as the model's input (last column); nothing fitted to these runs, and nothing in the "
             "model changed for them."]
    notes += _miss_notes(rows)
    notes += baseline_notes(rows)
    if any("not modelled" in r["modelled"] for r in rows):
        notes.append("A setting marked 'not modelled' changes nothing in the prediction: the model has no term for "
                     "it, so its row is predicted as the untuned run.")
    if skipped:
        notes.append("Not predicted: " + "; ".join(skipped) + ".")
    if not comparisons:
        notes.append("No tuning comparison is recorded on this machine yet.")
    if elsewhere:
        notes.append("Not checked, recorded on another machine than the all-reduce sweeps the model is fitted to "
                     "(each machine whose own sweeps are recorded has a table of its own: tuning_check.tuning_check() "
                     "for the course's, tuning_check.tuning_check_other_machines() for the others): " + ", ".join(elsewhere) + ".")
    models = sorted({r["model"] for r in rows})
    cols = [("launcher", "text"), ("path", path_labels(rec), "path"), ("tuning", "text"),
            ("measured", _ratio, "measured"), ("spread", "text", "min-max"), ("predicted", _ratio, "predicted"),
            ("error_pct", err_text, "error"),
            ("modelled", "text", "model input")]
    if len(models) > 1:
        cols.insert(1, ("model", "text"))
    named = f", the {models[0]} model" if len(models) == 1 else ""
    return Table(cols, rows, title=f"The step model against the recorded tunings{named}: 2-GPU speedup over the "
                                   "plain one-GPU run" + (f" ({rec.machine})" if rec.machine else ""), notes=notes,
                 wrap=("modelled",), missing="-")


def _ratio(v) -> str:
    return "-" if v is None else format_ratio(v)


def tuning_check_other_machines() -> list:
    """:func:`tuning_check` for each other machine than the course's whose all-reduce sweeps are recorded
    and that has tuning comparisons of its own (:func:`ddlab.cost.recorded_runs.recorded_sets`): each
    machine's tunings predicted from its own sweeps and one-GPU runs, one table each; empty when none has."""
    return [tuning_check(rec) for rec in recorded_sets(others_only=True) if recorded_comparisons(rec)]
