"""The case studies of notebook 10, as tables built from measurements and the step model.

* **When a second GPU pays** (:func:`second_gpu_table`): every recorded model x NCCL path of a
  2-GPU recording, with the one-GPU step, the all-reduce of the model's gradients on that path
  (from the path's alpha-beta fit, :mod:`ddlab.cost.alpha_beta`), their ratio, the predicted split
  of the 2-GPU step and the predicted speedup beside the measured median and spread.
  :func:`predicted_vs_measured` does the same for a live scaling or NCCL-path result and a live
  all-reduce fit (CPU processes over gloo, or GPUs over NCCL); :func:`second_gpu_live` runs
  it now (:func:`second_gpu_here`, the notebook's cell: on CPU processes only when asked);
  :func:`recorded_batch_sweep` joins the recordings at several batches per GPU; :func:`below_one_line`
  names the recorded runs slower than one GPU, :func:`held_out_line` counts the step model's held-out hits.
* **Diagnosing a machine from its p2p matrix**: :func:`report_matrix` is the 4x V100 report's pair
  figures (cited) as a matrix, :func:`report_table` the figures themselves;
  :func:`ddlab.measure.p2p_diagnosis.diagnose` reads the matrix (:func:`diagnosis_text`, one cause of
  each kind), and :func:`ddlab.course.checks.check_p2p_diagnosis` checks the learner's answer.
* **Tuning when communication dominates**: :func:`recorded_tunings` (the recorded
  :mod:`ddlab.course.tuning` comparisons, and a line naming those missing), :func:`tuning_effects` (each
  setting against the untuned 2-GPU run) with :func:`tuning_commands` (the recorded runs' commands),
  :func:`tuning_check_line`, :func:`tuning_live`, and :func:`tuning_here`, the notebook's cell: only when asked.

The field reports' own experiment (strong scaling, their cited figures) is :mod:`ddlab.course.field_reports`.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from ddlab.cost import alpha_beta, recorded_runs, step_model, wrapper_cost
from ddlab.cost import predict as _predict
from ddlab.base import reference
from ddlab.base.units import format_time
from ddlab.base.tables import Table, formatted
from ddlab.course import field_reports
from ddlab.training.runs import launch_bar


# ----------------------------------------------------------------------------- case 1
def _row(model, path, compute_s, pred, measured, spread=None, repeats=None, plain_ratio: Optional[float] = 1.0):
    """One case row. ``measured`` (and ``spread``) and ``pred.speedup`` are over the one-worker run whose
    step is ``compute_s``; ``plain_ratio`` (that run's images/s over the plain one-GPU run's) turns them
    into speedups over the plain run, as shown; None: no plain run recorded, so they show as "-". The
    error is the 2-GPU images/s', the same over either run."""
    lo, hi = spread if spread else (None, None)

    def over(v):
        return v * plain_ratio if v is not None and plain_ratio else None
    term = pred.term("two workers").seconds if pred.n_gpus > 1 else 0.0
    return {"model": model, "path": path, "gradients": sum(b.nbytes for b in pred.buckets), "compute": compute_s,
            "allreduce": pred.comm_s, "ratio": compute_s / pred.comm_s if pred.comm_s > 0 else float("inf"),
            "exposed": pred.exposed_comm_s, "overhead": pred.wrapper_s, "two_workers": term,
            "predicted": over(pred.speedup),
            "measured": over(measured),
            "spread": f"{over(lo):.2f}-{over(hi):.2f}" if lo is not None and hi is not None and plain_ratio else "-",
            "repeats": repeats, "error_pct": 100 * (pred.speedup / measured - 1) if measured else None}


def _or_dash(fmt):
    return lambda v: "-" if v is None else fmt(v)


_COLUMNS = [("model", "text"), ("path", "text"), ("gradients", "bytes", "grads"),
            ("compute", "time", "step (1)"), ("allreduce", "time", "all-reduce"),
            ("ratio", "ratio", "ratio"), ("exposed", "time", "exposed"),
            ("overhead", "time", "wrapper"), ("predicted", _or_dash(lambda v: f"{v:.2f}x"), "predicted"),
            ("measured", _or_dash(lambda v: f"{v:.2f}x"), "measured"), ("spread", "text", "min-max"),
            ("error_pct", _or_dash(lambda v: f"{v:+.1f}%"), "error")]
_LEGEND_TERMS = ("step (1): the one-worker step; all-reduce: the grads on that path (alpha-beta fit); ratio: step (1) / "
                 "all-reduce; exposed: what the backward pass cannot hide; wrapper: its own cost per step")
_LEGEND = (_LEGEND_TERMS + "; predicted (the bound) and measured (median, min-max): 2-GPU images/s over the plain "
           "one-GPU run's (no wrapper; '-': none recorded); error: of the 2-GPU images/s.")

PATHS_NOTE = "default = NCCL's own choice (NVLink here); shm = peer-to-peer off; socket = TCP."
TABLE_WIDTH = 110      # characters: the widest table line notebook 10 shows (the HTML table fits the notebook)


def _case_table(columns: list, rows: list, title: str, notes: list) -> Table:
    """A case table; the wrapper column is left out (and a note says so) when it is 0 in every row,
    as for DDP, whose cost is in the one-worker step, so the table fits the notebook's width."""
    if rows and all(not r.get("overhead") for r in rows):
        columns = [c for c in columns if c[0] != "overhead"]
        notes = notes + ["wrapper: 0 s in every row (in the one-worker step), so no column."]
    return Table(columns, rows, title=title, notes=notes, missing="-")


def second_gpu_table(launcher: str = "ddp", models: Optional[Sequence[str]] = None,
                     recorded: Optional[recorded_runs.RecordedSet] = None) -> Table:
    """Case 1 on the recorded 2-GPU machine: for every recorded model x path of ``launcher``
    ("ddp", "ddp-graph" or "horovod"), and each batch per GPU where more than one is recorded (then a
    batch column), the one-GPU step, the all-reduce of the gradients on
    that path, the ratio of the two (the rule of thumb), the predicted 2-GPU step split and
    speedup, and the measured median with its min-max over the repeats. The wrapper's cost is
    the one measured on one worker (:meth:`ddlab.cost.recorded_runs.RecordedSet.wrappers`)."""
    rec = recorded or recorded_runs.recorded_points()
    over = rec.wrappers()
    pts = [p for p in rec.points if p.launcher == launcher and (models is None or p.model in models)]
    if not pts:
        raise ValueError(f"no recorded 2-GPU runs for launcher {launcher!r}"
                         + (f" and models {', '.join(models)}" if models else ""))
    order = {m: i for i, m in enumerate(models or ("mlp-small", "cnn", "mlp-large", "wide"))}
    pts.sort(key=lambda p: (order.get(p.model, 99), p.batch, p.path))
    rows = []
    for p in pts:
        pred = recorded_runs.predict_point(p, rec.fits, over.get(p.framework), profiles=rec.profiles,
                                           channels=rec.channels, sweeps=rec.sweeps, two_workers=rec.two_workers)
        rows.append(dict(_row(p.model, p.path, p.compute_s, pred, p.measured, (p.measured_min, p.measured_max),
                              p.repeats, p.plain_ratio), batch=p.batch))
    notes = [_LEGEND + " " + PATHS_NOTE]
    if any(r["overhead"] for r in rows):
        notes.append(f"Wrapper cost: {pred.term('wrapper').source}.")
    two = {r["path"]: r["two_workers"] for r in rows if r["two_workers"]}
    if two:
        notes.append("In each prediction, what two workers cost beyond the other terms, measured on the probe (one "
                     "small layer at batch 4): " + ", ".join(f"{path} {format_time(t)}" for path, t in two.items())
                     + ".")
    plains = sorted({p.plain_source for p in pts if p.plain_source})
    if plains:
        notes.append("Plain one-GPU runs: " + "; ".join(plains) + ".")
    batch = [("batch", "int", "batch/GPU")] if len({p.batch for p in pts}) > 1 else []
    cols = formatted(_COLUMNS[:1] + batch + _COLUMNS[1:], "path", recorded_runs.path_labels(rec))
    return _case_table(cols, rows, f"When a second GPU pays: {launcher}, 2 GPUs over 1"
                       + (f" ({rec.machine})" if rec.machine else ""), notes)


def predicted_vs_measured(result, fit, overheads: Optional[step_model.Overheads] = None,
                          recorded: Optional[recorded_runs.RecordedSet] = None) -> Table:
    """The step model against a live (or recorded) scaling or NCCL-path result: for each row
    with 2 or more workers, the prediction from the one-worker row's step time and ``fit``
    (an :class:`ddlab.cost.alpha_beta.AlphaBeta` of the all-reduce the run used, or a dict
    {path: fit} for an NCCL-path comparison) beside the measured speedup. ``recorded`` (default:
    :func:`ddlab.cost.recorded_runs.recorded_points`) supplies the step profiles of the GPU the result
    ran on, and the channels of its own recorded paths."""
    from ddlab.training import baseline
    rows_in = [r for r in result.rows if not r.get("error")]
    base = [r for r in rows_in if baseline.is_wrapper_one(r)]
    if not base:
        raise ValueError("the result has no one-worker row to take the compute time from")
    plain = result.plain_run(base[0])
    plain_ratio = base[0]["images_per_s"] / plain.images_per_s if plain is not None and plain.found else None
    model = result.config.get("model")
    compute_s = base[0]["global_batch"] / base[0]["images_per_s"]
    rec = recorded or recorded_runs.recorded_points()
    device = "cpu" if result.config.get("device") == "cpu" else result.config.get("device_name")
    rows = []
    for r in rows_in:
        if r.get("workers", 1) < 2 or not r.get("images_per_s"):
            continue
        path = r.get("path") if isinstance(r.get("path"), str) else "default"
        f = fit.get(path) if isinstance(fit, dict) else fit
        if f is None:
            continue
        # the recorded machine's channels only go with its own recorded fits
        channels = rec.channels.get(path) if f is rec.fits.get(path) else None
        fits = _predict.Fits("the fits given", {path: f}, channels={path: channels} if channels else {})
        pred = _predict.predict(model, step_ms=compute_s * 1e3, batch=base[0]["global_batch"], gpus=r["workers"],
                                path=path, fits=fits, wrapper=overheads or step_model.NO_OVERHEADS,
                                step_device=device)
        one_ips = base[0]["images_per_s"]
        lo, hi = r.get("images_per_s_min"), r.get("images_per_s_max")
        row = _row(model, path, compute_s, pred.step, r["images_per_s"] / one_ips,
                   (lo / one_ips, hi / one_ips) if lo is not None and hi is not None else None, r.get("repeats", 1),
                   plain_ratio)
        row["batch"] = base[0]["global_batch"]
        rows.append(row)
    if not rows:
        raise ValueError("no row with 2 or more workers and a fit for its path")
    from ddlab.training.results import path_name
    shown = {r.get("path"): path_name(r, result.provenance) for r in rows_in if isinstance(r.get("path"), str)}
    cols = formatted(_COLUMNS[:1] + [("batch", "int", "batch")] + _COLUMNS[1:], "path", lambda v: shown.get(v, v))
    return _case_table(cols, rows, f"Predicted vs measured: {model}, {result.config.get('launcher', '?')}",
                       [_LEGEND + " batch: per worker."] + baseline.notes(result.plain))


# ----------------------------------------------------------------------------- case 2
V100_REPORT = "four-v100-p2p"       # reference/cited/<V100_REPORT>.json: the 4x V100 report's P2P figures


def report_matrix(name: str = V100_REPORT) -> tuple:
    """(matrix in GB/s, labels, description) for the diagnosis exercise: the cited report's pair
    figures (:data:`V100_REPORT`) as a 4 x 4 matrix, rows = source GPU. The report gives one figure per
    pair, so a pair's two cells hold the same figure; for the pair it calls asymmetric it gives a range
    and no direction, so the matrix puts the low end on the lower GPU's row (an assumption the
    description states)."""
    from ddlab.base import reference
    rows = reference.load("cited", name)["rows"]
    n = 1 + max(max(r["a"], r["b"]) for r in rows)
    m = np.full((n, n), np.nan)
    ranged = []
    for r in rows:
        a, b = r["a"], r["b"]
        m[a, b], m[b, a] = r["low_gbps"], r["high_gbps"]
        if r["low_gbps"] != r["high_gbps"]:
            ranged.append(f"GPU{a} -> GPU{b} {r['low_gbps']:g}, GPU{b} -> GPU{a} {r['high_gbps']:g}")
    desc = ("Matrix: each pair's figure both ways" + (f"; {'; '.join(ranged)} (the report does not say which "
                                                      "direction is slow)." if ranged else "."))
    return m, list(range(n)), desc


def report_table(name: str = V100_REPORT) -> Table:
    """The cited report's pair figures (:func:`ddlab.course.field_reports.cited`) with one note more: its
    fastest figure beside what PCIe 3.0 x16 (a Tesla V100-PCIE's link) carries per direction
    (:func:`ddlab.system.links.pcie_x16_gbs`), a question about how the report measured."""
    from ddlab.base import reference
    from ddlab.system import links
    t = field_reports.cited(name)
    fastest = max(r["high_gbps"] for r in reference.load("cited", name)["rows"])
    gen3 = links.pcie_x16_gbs(3)
    if fastest > gen3:
        t.notes.append(f"Read it critically: {fastest:g} GB/s is above the {gen3:.2f} GB/s PCIe 3.0 x16 (a V100-PCIE's "
                       "link) carries one way. What did it measure? (quiz below)")
    return t


# ----------------------------------------------------------------------------- case 1, live
CPU_BATCHES = (32, 512)
SECOND_GPU_REPEATS = 3     # repeats of each run with one GPU or on CPU processes (two GPUs: mode.TWO_GPU_LIVE_REPEATS)


def _gpus_live(launcher: str, machine=None, gpus: int = 2) -> bool:
    """Whether the ``gpus``-GPU version runs live here: the course's one policy (:func:`ddlab.system.policy.decide`)."""
    from ddlab.system import policy
    return policy.decide(policy.Needs(gpus=gpus, framework="torch", launcher=launcher), machine).live


_PREDICTED_COLUMNS = _COLUMNS[:1] + [("batch", "int", "batch")] + _COLUMNS[1:-3]


def second_gpu_predicted(model: str = "mlp-small", repeats: int = SECOND_GPU_REPEATS, echo: bool = False,
                         recorded: Optional[recorded_runs.RecordedSet] = None, progress=None) -> Table:
    """Case 1 on a machine with one GPU: the one-GPU step of ``model`` measured now (DDP on
    this GPU, ``repeats`` times: the run behind the one-GPU row of a recorded comparison), and
    the step model's 2-GPU speedup over each path of the recorded machine (the alpha-beta fit
    of its all-reduce sweep per path; the DDP wrapper's cost is in the step measured now).
    Nothing here can measure a second GPU, so the table has predictions and no measured
    column; the recorded table above has the measurements of the recorded machine."""
    from ddlab.training import experiments
    from ddlab.system.machine_name import this_machine
    from ddlab.training.runspec import RunSpec
    spec = RunSpec.for_device("cuda", model, launcher="ddp", workers=1, repeats=repeats)
    res = experiments.throughput_scaling(spec, workers=(1,), device="cuda", echo=echo, progress=progress)
    plain, one = res.rows        # the plain one-GPU run, then DDP with one worker
    compute_s = one["global_batch"] / one["images_per_s"]
    rec = recorded or _predict.recorded_set()
    over = wrapper_cost.over_one_worker_step("ddp")
    rows = []
    for path in rec.fits:
        pred = _predict.predict(model, step_ms=compute_s * 1e3, batch=one["global_batch"], gpus=2, path=path,
                                fits=_predict.RECORDED, framework="ddp", step_device=res.config.get("device_name"),
                                wrapper=over)
        rows.append(dict(_row(model, path, compute_s, pred.step, None,
                              plain_ratio=one["images_per_s"] / plain["images_per_s"]), batch=one["global_batch"]))
    gpu = res.config.get("device_name") or this_machine()[0]
    spread = (f"{one['images_per_s_min']:,.0f}-{one['images_per_s_max']:,.0f}" if "images_per_s_min" in one else "")
    notes = [_LEGEND_TERMS + "; predicted: speedup of 2 GPUs over the plain one-GPU run measured now; batch: per GPU.",
             f"step (1) measured now on this GPU ({gpu}): DDP on one GPU, median of {one.get('repeats', 1)} runs "
             f"at {one['images_per_s']:,.0f} images/s" + (f" (min-max {spread})" if spread else "")
             + f"; the plain run (no wrapper) at {plain['images_per_s']:,.0f} images/s.",
             "The second GPU is predicted, not measured: this machine has one. Its links are those of the recorded "
             f"machine ({rec.machine or 'recorded'}): the alpha-beta fit of each path's recorded all-reduce sweep, "
             f"and the DDP wrapper's cost {over.source}.",
             "The same model on two GPUs of the recorded machine: the recorded table above."]
    cols = formatted(_PREDICTED_COLUMNS, "path", recorded_runs.path_labels(rec))
    return _case_table(cols, rows, f"Predicted, not measured: {model}, DDP, one GPU measured now and a second "
                       "GPU over each recorded path", notes)


def second_gpu_live(inventory=None, model: str = "mlp-small", batches: Optional[Sequence[int]] = None,
                    repeats: Optional[int] = None, echo: bool = False, machine=None,
                    log: Optional[str] = "auto") -> Table:
    """Case 1 run now on this machine, with the step model's prediction beside each point.

    ``repeats``: of each run (None: :data:`ddlab.course.mode.TWO_GPU_LIVE_REPEATS` on two GPUs,
    :data:`SECOND_GPU_REPEATS` otherwise).
    With two GPUs or more: the NCCL-path comparison of ``model`` (1 GPU, then 2 under each
    path) and the all-reduce sweep under each path, fitted to the alpha-beta model; the
    wrapper's cost is in the one-GPU step (DDP with world size 1).
    With one GPU: :func:`second_gpu_predicted` (the one-GPU step measured now, the second GPU
    predicted over the recorded machine's links).
    Otherwise: the same model on 1 and 2 CPU processes over gloo at each of ``batches``
    (default :data:`CPU_BATCHES`, the test pass cut to 1,000 images), predicted from a gloo
    sweep; no wrapper cost is measured for CPU processes, so the prediction leaves it out.
    ``log``: a file for the training launches' lines, with a progress bar instead of them ("auto":
    ``scratch/case1-second-gpu.log`` in Jupyter)."""
    from ddlab.measure import collectives_run
    from ddlab.training import experiments
    from ddlab.system import hardware
    from ddlab.system import policy
    from ddlab.training.runspec import RunSpec
    from ddlab.course import mode
    machine = machine or policy.Machine.detect()
    two_gpus = _gpus_live("ddp", machine)
    if repeats is None:
        repeats = mode.TWO_GPU_LIVE_REPEATS if two_gpus else SECOND_GPU_REPEATS
    if not two_gpus and _gpus_live("ddp", machine, gpus=1):
        with launch_bar(2 * repeats, f"{model}: plain and DDP on this GPU", log,
                        name="case1-second-gpu") as progress:
            return second_gpu_predicted(model, repeats=repeats, echo=echo, progress=progress)
    inv = inventory or hardware.inventory(horovod_check=False)
    if two_gpus:
        spec = RunSpec.for_device("cuda", model, launcher="ddp", repeats=repeats)
        with launch_bar(experiments.planned_launches("nccl-paths", repeats=repeats),
                         f"{model}: 1 GPU plain and under DDP, then 2 under each NCCL path", log,
                        name="case1-second-gpu") as progress:
            res = experiments.nccl_path_comparison(spec, echo=echo, progress=progress)
        fits = {p: alpha_beta.fit_sweep(s) for p, s in collectives_run.compare_paths(inventory=inv).items()}
        rec = recorded_runs.recorded_points()
        over = wrapper_cost.over_one_worker_step("ddp")
        t = predicted_vs_measured(res, fits, over, rec)
        t.notes.append(f"Wrapper cost: {over.source}.")
        return t
    sweep = collectives_run.sweep(backend="gloo", max_bytes="16M", inventory=inv)
    fit = alpha_beta.fit_sweep(sweep)
    rows, tables_ = [], []
    rec = recorded_runs.recorded_points()
    batches = batches or CPU_BATCHES
    with launch_bar(len(batches) * 3 * repeats, f"{model}: plain, 1 and 2 CPU processes at batches "
                     f"{', '.join(map(str, batches))}", log,
                        name="case1-second-gpu") as progress:
        for b in batches:
            spec = RunSpec.for_device("cpu", model, launcher="ddp", batch=int(b), repeats=repeats, test_samples=1000)
            res = experiments.throughput_scaling(spec, workers=(1, 2), device="cpu", echo=echo, progress=progress)
            tables_.append(predicted_vs_measured(res, fit, recorded=rec))
            rows += tables_[-1].rows
    t = Table(tables_[0].columns, rows, title=f"Predicted vs measured: {model}, DDP on 1 and 2 CPU processes (gloo)",
              notes=tables_[0].notes + [f"All-reduce fit of a gloo sweep between 2 CPU processes: {fit.describe()}.",
                     "No wrapper cost is measured for CPU processes: the prediction leaves it out. The two processes "
                     "share this machine's cores, so compute slows down too, which the model does not know."])
    return t


# ----------------------------------------------------------------------------- case 3
TUNED_MODEL = "wide"
TUNED_PATHS = ("default", "shm")
GPU_LIVE_TUNINGS = ("untuned", "combined")
CPU_MODEL = "mlp-large"
CPU_TUNINGS = ("untuned", "accumulate 2", "bf16 hook")


def recorded_tunings(model: str = TUNED_MODEL, paths: Sequence[str] = TUNED_PATHS) -> tuple:
    """([recorded tuning comparisons], one line naming those not recorded) for DDP and
    Horovod on each of ``paths`` (:func:`ddlab.course.tuning.recorded`)."""
    from ddlab.course import tuning
    from ddlab.base.reference import ReferenceMissing
    found, missing = [], []
    for launcher in tuning.LAUNCHERS:
        for path in paths:
            try:
                found.append(tuning.recorded(launcher, model, path))
            except ReferenceMissing:
                missing.append(f"{launcher} over {path}")
    partial = [f"{r.config.get('launcher')} over {r.config.get('path')} ({ran} of {planned} repeats)"
               for r in found for ran, planned in [r.repeats_run()] if ran and planned and ran < planned]
    line = ("Every tuning comparison is recorded." if not missing else
            f"Not recorded yet ({model} model):\n  " + "\n  ".join(missing))
    if partial:
        line += f"\nCut short, fewer repeats than planned:\n  " + "\n  ".join(partial)
    return found, line


def tuning_here(asked: bool = False, launcher: str = "ddp", repeats: int = 3, echo: bool = False, machine=None,
                log: Optional[str] = "auto") -> tuple:
    """Notebook 10's live case 3: (a result, or None; one line saying what ran, or why nothing did). It runs
    only when ``asked`` (LIVE_TUNING = True in the cell): with two GPUs the wide model's comparison, the
    notebook's longest wait; otherwise :func:`tuning_live`'s small comparison on two CPU processes. The
    recorded comparisons above are the experiment itself, so a Run All leaves it out and says how to ask."""
    from ddlab.course import tuning
    gpus = _gpus_live(launcher, machine)
    if not asked:
        chosen = GPU_LIVE_TUNINGS if gpus else CPU_TUNINGS
        what = (f"the {TUNED_MODEL} model on two GPUs" if gpus else f"{CPU_MODEL} on two CPU processes over Gloo")
        launches = tuning.planned_launches(launcher, chosen, repeats)
        return None, (f"Live tuning ({what}: {', '.join(chosen)}, {launches} launches) runs when asked: set "
                      "LIVE_TUNING = True in this cell and run it again.")
    res = tuning_live(launcher, repeats=repeats, echo=echo, machine=machine, log=log)
    where = (f"two GPUs, the {TUNED_MODEL} model on NCCL's default path" if gpus else
             f"two CPU processes over gloo, {CPU_MODEL}")
    return res, f"Measured now: {where}."


def second_gpu_here(inventory=None, asked: bool = False, machine=None, log: Optional[str] = "auto") -> tuple:
    """Notebook 10's live weak-scaling case: (a table, or None; one line). With one GPU or two,
    :func:`second_gpu_live` runs (the one-GPU step measured and a second GPU predicted, or the NCCL-path
    comparison). Without a GPU it runs only when ``asked``: two CPU processes share the cores, which the
    model does not know, so the comparison says more about the laptop than about the model."""
    from ddlab.system import policy
    machine = machine or policy.Machine.detect()
    if not asked and not _gpus_live("ddp", machine, gpus=1):
        return None, ("No GPU here: 1 against 2 CPU processes over Gloo at batch 512 runs when asked (LIVE_CPU = "
                      "True in this cell); the processes share the cores, which the model does not know.")
    return second_gpu_live(inventory, batches=(512,), machine=machine, log=log), "Measured now."


def tuning_live(launcher: str = "ddp", repeats: int = 3, echo: bool = False, machine=None,
                log: Optional[str] = "auto"):
    """Case 3 run now: with two GPUs, the wide model untuned and with every DDP fix combined
    (:data:`GPU_LIVE_TUNINGS`) on NCCL's default path; otherwise a small real version on two
    CPU processes over gloo: :data:`CPU_MODEL` with :data:`CPU_TUNINGS` (a tuning this
    PyTorch cannot run shows its reason instead of a measurement). ``log``: a file for the
    launches' lines, with a progress bar instead of them ("auto": ``scratch/case3-tuning.log`` in Jupyter)."""
    from ddlab.course import tuning
    from ddlab.training.runspec import RunSpec
    gpus = _gpus_live(launcher, machine)
    chosen = GPU_LIVE_TUNINGS if gpus else CPU_TUNINGS
    with launch_bar(tuning.planned_launches(launcher, chosen, repeats), f"tunings: {', '.join(chosen)}",
                     log, name="case3-tuning") as progress:
        if gpus:
            return tuning.tuning_comparison(TUNED_MODEL, launcher, "default", tunings=chosen, device="cuda",
                                            repeats=repeats, echo=echo, progress=progress)
        base = RunSpec.for_device("cpu", CPU_MODEL, launcher=launcher, workers=2, repeats=repeats, test_samples=1000)
        return tuning.tuning_comparison(tunings=chosen, base=base, echo=echo, progress=progress)


# ----------------------------------------------------------------------------- case 1, batches
def _batch_rows(rec: recorded_runs.RecordedSet, results: list, launcher: str, model: str, batches: list,
                own: bool) -> tuple:
    """(columns, rows by batch then path, notes) of the recorded NCCL-path comparisons ``results`` of one
    machine (``own``: the machine of ``rec``'s sweeps): where ``rec`` holds their runs at every batch, the same
    predictions as the held-out check (:func:`second_gpu_table`); else each result predicted from its own
    one-worker step and ``rec``'s fits."""
    if own and sorted({p.batch for p in rec.points if (p.launcher, p.model) == (launcher, model)}) == batches:
        t = second_gpu_table(launcher, (model,), rec)
        notes = list(t.notes)
    else:
        over = wrapper_cost.over_one_worker_step("horovod" if launcher == "horovod" else "ddp")
        tables = [predicted_vs_measured(res, rec.fits, over, rec) for res in results]
        t = Table(tables[0].columns, [r for tb in tables for r in tb.rows])
        notes = [_LEGEND]
    rows = sorted(t.rows, key=lambda r: (r["batch"], r["path"]))
    return [c for c in t.columns if c.key != "model"], rows, notes      # the title names the model


def recorded_batch_sweep(model: str = "mlp-small", launcher: str = "ddp") -> tuple:
    """(Table, or None until one machine has two batches recorded; one line naming the recorded
    batches and, where they differ, their machines): the recorded NCCL-path comparisons of ``model``
    at every batch per GPU recorded (``record_experiments.py --batch N`` writes them with the
    variant ``bN``; the live default batch has no suffix), each 2-GPU row with the step model's
    prediction: :func:`second_gpu_table`'s where a recorded set holds that machine's runs at every batch,
    else one from each recording's own one-GPU step and the recorded sweeps' fits. Batches
    recorded on different machines are never joined in one table: the table holds the machine
    with the most batches (the sweeps' machine on a tie), and a note says when the fits come from
    another machine than its runs."""
    from ddlab.training import recording
    from ddlab.base import reference
    from ddlab.system.provenance import machine_of
    variants = recording.batch_variants("nccl-paths", "torch", launcher, model)
    results = []
    for _, variant in [(None, None)] + variants:
        try:
            res = recording.load_recorded("nccl-paths", "torch", launcher, model, variant)
        except reference.ReferenceMissing:
            continue
        if res.rows:
            results.append(res)
    rec = recorded_runs.recorded_points()
    by_machine: dict = {}
    for res in results:
        by_machine.setdefault(machine_of(res.provenance), []).append(res)
    batches = {m: sorted({r.rows[0].get("global_batch") for r in rs}) for m, rs in by_machine.items()}
    listed = lambda bs: ", ".join(map(str, bs))
    if len(batches) > 1:
        line = (f"Recorded batches per GPU for {model} ({launcher}): "
                + "; ".join(f"{listed(bs)} on {m}" for m, bs in batches.items()) + ".")
    else:
        line = f"Recorded batches per GPU for {model} ({launcher}): {listed(next(iter(batches.values()), [])) or 'none'}."
    if not any(len(bs) > 1 for bs in batches.values()):
        return None, line + " The batch sweep (record_experiments.py --batch N) is not recorded yet on one machine."
    here = lambda m: rec.made_here(by_machine[m][0].provenance)
    machine = max(batches, key=lambda m: (len(batches[m]), here(m)))
    # each machine's runs are predicted from its own recorded all-reduce sweeps, where they are recorded
    prov = by_machine[machine][0].provenance
    if not rec.made_here(prov):
        rec = next((r for r in recorded_runs.recorded_sets(others_only=True) if r.made_here(prov)), rec)
    own = rec.made_here(prov)
    cols, rows, notes = _batch_rows(rec, by_machine[machine], launcher, model, batches[machine], own)
    notes.append(f"Link fits: the all-reduce sweeps recorded on {rec.machine} ({rec.sweeps}).")
    if not own:
        notes.append(f"Predicted with the link fits of the all-reduce sweeps recorded on {rec.machine}; these runs "
                     f"were recorded on {machine}, whose links are not swept.")
    title = f"When a second GPU pays, by batch: {model}, {launcher}, 2 GPUs over 1 ({machine})"
    table = Table(cols, rows, title=title, notes=notes, missing="-")
    path_col = next(c for c in table.columns if c.key == "path")
    above = [f"batch {r['batch']} over {table.cell(r, path_col)}" for r in rows if r.get("measured") and r["measured"] > 2]
    if above:
        table.notes.append(f"Measured above 2x (linear) at {'; '.join(above)}: each of the two GPUs ran more "
                           "images per second than the one GPU alone; the recording holds no measurement that says "
                           "why.")
    return table, line



# ----------------------------------------------------------------------------- one-line readings of the recordings
def held_out_line(held=None) -> str:
    """The step model's held-out check in one line, counted from :func:`ddlab.cost.validation.held_out`
    (``held``: its table, if already computed): how many recorded 2-GPU runs it predicts within the band
    with each run's model left out, how many of the misses it predicts faster than measured, and on how
    many it gets "does a second GPU pay?" wrong (the prediction and the measurement on opposite sides of 1x)."""
    from ddlab.cost import validation
    held = held if held is not None else validation.held_out()
    key = next(c.key for c in held.columns if c.key.endswith("_err"))
    pred = key[:-len("_err")] + "_pred"
    k, m = validation.hits(held.rows, key)
    band = 100 * validation.TOLERANCE
    misses = [r for r in held.rows if r.get(key) is not None and abs(r[key]) > band]
    optimistic = sum(r[key] > 0 for r in misses)
    wrong = [r for r in held.rows if r.get(pred) is not None and r.get("measured") is not None
             and (r[pred] > 1) != (r["measured"] > 1)]
    named = "; ".join(f"{r['launcher']} {r['model']} {r['path']} {r['batch']}/GPU" for r in wrong)
    k0, m0 = validation.hits(held.rows, "without_two_workers_err") if held.rows and \
        "without_two_workers_err" in held.rows[0] else (None, None)
    before = f" ({k0} of {m0} without the two-worker term measured on the probe)" if k0 is not None else ""
    return (f"Held out ({key[:-len('_err')]} left out): {k} of {m} recorded 2-GPU runs within ±{band:.0f}%{before}; "
            f"{optimistic} of the {len(misses)} misses predict faster than measured. Wrong about whether the second "
            f"GPU pays on {len(wrong)}" + (f": {named}." if wrong else ".")
            + " The table: python -m ddlab.cost.validation")


def below_one_line(recorded: Optional[recorded_runs.RecordedSet] = None) -> str:
    """Which recorded 2-GPU runs with the batch per GPU kept (weak scaling: every launcher but the
    "... strong" ones) measured slower than the plain one-GPU run, by model, from their median speedups
    over it; runs with no plain run recorded are counted apart."""
    rec = recorded or recorded_runs.recorded_points()
    weak = [p for p in rec.points if "strong" not in p.launcher]
    slow: dict = {}
    for p in weak:
        if p.measured_plain is not None and p.measured_plain < 1:
            slow.setdefault(p.model, []).append(f"{p.launcher} {p.path}")
    unknown = sum(p.measured_plain is None for p in weak)
    batches = sorted({p.batch for p in weak})
    head = (f"Recorded with {', '.join(map(str, batches))} images per GPU on both GPUs ({rec.machine or 'recorded'}), "
            f"{sum(map(len, slow.values()))} of {len(weak) - unknown} runs measured slower than the plain one-GPU run"
            + (f" ({unknown} more have no plain run recorded)" if unknown else ""))
    return head + (": " + "; ".join(f"{m}: {', '.join(v)}" for m, v in slow.items()) + "." if slow else ".")


TUNING_SHOWN = {"ddp": ("bf16 hook", "bucket 100 MB", "combined"),
                "horovod": ("fp16 compression", "fusion 256 MB", "combined")}
_TUNING_HEADS = ("16-bit grads", "buckets / fusion", "combined")


def _against(row: dict, base: dict) -> str:
    """A tuning's 2-GPU images/s over the untuned 2-GPU run's, and whether the repeats' min-max ranges
    say it is faster, slower or neither."""
    ratio = row["images_per_s"] / base["images_per_s"]
    lo, hi = row.get("images_per_s_min", row["images_per_s"]), row.get("images_per_s_max", row["images_per_s"])
    blo, bhi = base.get("images_per_s_min", base["images_per_s"]), base.get("images_per_s_max", base["images_per_s"])
    word = "faster" if lo > bhi else "slower" if hi < blo else "overlap"
    return f"{ratio:.2f}x {word}"


def tuning_effects(found: Optional[list] = None) -> Table:
    """What each recorded tuning comparison (:func:`recorded_tunings`) shows for the settings that keep
    the global batch: 16-bit gradients, DDP's bucket cap or Horovod's fusion buffer, and every fix
    combined, each as its 2-GPU images/s over the untuned 2-GPU run's on the same path (the same
    baseline for every cell), with "faster" or "slower" where the repeats' min-max ranges do not overlap."""
    found = found if found is not None else recorded_tunings()[0]
    rows, machines = [], {}
    for res in found:
        c = res.config
        by = {r.get("tuning"): r for r in res.rows}
        base = by.get("untuned")
        if base is None:
            continue
        row = {"launcher": c.get("launcher"), "path": c.get("path")}
        for key, name in zip(_TUNING_HEADS, TUNING_SHOWN.get(c.get("launcher"), ())):
            row[key] = _against(by[name], base) if name in by else "-"
        rows.append(row)
        where = (res.provenance or {}).get("machine") or "machine not recorded"
        machines.setdefault(where, []).append(f"{row['launcher']} {row['path']}")
    cols = [("launcher", "text"), ("path", "text")] + [(k, "text", k) for k in _TUNING_HEADS]
    notes = ["Each cell: 2-GPU images/s with the setting over untuned (medians); faster or slower: min-max ranges "
             "apart. 16-bit: bf16 hook (DDP), fp16 (Horovod); buckets / fusion: 100 MB (DDP), 256 MB (Horovod).",
             "Recorded on " + "; ".join(f"{m} ({', '.join(w)})" for m, w in machines.items()) + "."]
    return Table(cols, rows, title=f"Each setting over untuned ({TUNED_MODEL} model, 2 GPUs)", notes=notes)


def tunings_side_by_side(found: Optional[list] = None, path: str = "default") -> tuple:
    """(a table or None, one line): DDP and Horovod by absolute images/s on two GPUs over ``path``,
    untuned and with each setting of :data:`TUNING_SHOWN` (the same model, batch per GPU and path), from the
    recorded tuning comparisons (:func:`recorded_tunings`): which framework trains faster, tuned or not,
    read off the throughput (:func:`ddlab.training.result_views.images_side_by_side`); the plain one-GPU run
    and each wrapper's one worker are rows of their own (the plain run's ratio is the difference between the two
    recordings' machines, which every ratio carries). No table unless both frameworks are recorded over
    ``path`` on the same GPU model and count; the line says which is missing or where each ran."""
    from ddlab.training.result_views import images_side_by_side
    from ddlab.training.results import ExperimentResult
    found = found if found is not None else recorded_tunings()[0]
    by_launcher = {r.config.get("launcher"): r for r in found if r.config.get("path") == path}
    missing = [name for name in ("ddp", "horovod") if name not in by_launcher]
    if missing:
        return None, f"DDP against Horovod over {path}: {' and '.join(missing)} not recorded."
    from ddlab.system.provenance import differences, machine_of
    ddp_prov, hvd_prov = by_launcher["ddp"].provenance, by_launcher["horovod"].provenance
    if differences(ddp_prov, hvd_prov, ("gpu_model", "gpu_count")):
        return None, (f"DDP against Horovod over {path}: not compared, recorded on different GPUs "
                      f"(DDP on {machine_of(ddp_prov)}, Horovod on {machine_of(hvd_prov)}).")
    shown = {}
    for launcher, label in (("ddp", "DDP"), ("horovod", "Horovod")):
        res = ExperimentResult.from_dict(by_launcher[launcher].to_dict())
        names = dict(zip(("untuned",) + TUNING_SHOWN[launcher], ("untuned",) + _TUNING_HEADS))
        res.rows[:] = [dict(r, setting=names.get(r.get("tuning"))) for r in res.rows
                       if r.get("workers") == 1 or r.get("tuning") in names]
        shown[label] = res
    title = f"DDP and Horovod by images/s: {TUNED_MODEL} model, two GPUs, {path}"
    return images_side_by_side(shown, key="setting", title=title, explain=False), \
        f"DDP against Horovod over {path}, both on {machine_of(ddp_prov)}."


def tuning_commands(launcher: str = "ddp", path: str = "default", found: Optional[list] = None) -> str:
    """The exact command line (:func:`ddlab.course.field_reports.run_command`) of the first recorded run of
    the untuned 2-GPU comparison and of the two single settings of :data:`TUNING_SHOWN`, for ``launcher`` over ``path``."""
    found = found if found is not None else recorded_tunings()[0]
    res = next((r for r in found if r.config.get("launcher") == launcher and r.config.get("path") == path), None)
    if res is None:
        return f"{launcher} over {path}: not recorded."
    by = {r.get("tuning"): r for r in res.rows}
    first = lambda name: field_reports.run_command(res.runs[by[name]["runs"][0]])   # noqa: E731
    name = TUNING_SHOWN.get(launcher, ())[0]
    if not by.get(name, {}).get("runs") or not by.get("untuned", {}).get("runs"):
        return f"{launcher} over {path}: no run of {name} or untuned recorded."
    tuned, plain = first(name), first("untuned")
    flags = by[name].get("flags") or ""
    flags = flags if isinstance(flags, str) else " ".join(map(str, flags))
    same = bool(flags) and tuned == f"{plain} {flags}"
    return (f"{launcher} over {path}, {name}: {tuned}" +
            (f"\n  (untuned: the same without {flags})" if same else f"\n  untuned: {plain}"))


def tuning_check_line() -> str:
    """How the step model does on the recorded tunings (:func:`ddlab.cost.tuning_check.tuning_check`), in one line."""
    from ddlab.cost import tuning_check, validation
    t = tuning_check.tuning_check()
    key = next((c.key for c in t.columns if "err" in c.key), None)
    if key is None or not t.rows:
        return "The step model on the recorded tunings: nothing to check."
    k, m = validation.hits(t.rows, key)
    return (f"The step model on the recorded tunings it has an input for: {k} of {m} within "
            f"±{100 * validation.TOLERANCE:.0f}% (the table: tables.show(tuning_check.tuning_check())).")


def diagnosis_text(matrix, labels, causes: int = 1) -> str:
    """:func:`ddlab.measure.p2p_diagnosis.diagnose` of ``matrix`` as text, with only the first ``causes`` typical
    causes of each finding (the rest: ``print(p2p_diagnosis.diagnose(matrix, labels))``)."""
    from ddlab.measure import p2p_diagnosis
    d = p2p_diagnosis.diagnose(matrix, labels)
    kept, seen = [], {}
    for c in d.causes:
        kind = c.split(":")[0]
        seen[kind] = seen.get(kind, 0) + 1
        if seen[kind] <= causes:
            kept.append(c)
    d.causes = kept
    return d.text()
