"""The case studies of notebook 10, as tables built from measurements and the step model.

* **When a second GPU pays** (:func:`second_gpu_table`): every recorded model x NCCL path of a
  2-GPU recording, with the one-GPU step, the all-reduce of the model's gradients on that path
  (from the path's alpha-beta fit, :mod:`ddlab.cost.alpha_beta`), their ratio, the predicted split
  of the 2-GPU step and the predicted speedup beside the measured median and spread.
  :func:`predicted_vs_measured` does the same for a live scaling or NCCL-path result and a live
  all-reduce fit (CPU processes over gloo, or GPUs over NCCL); :func:`second_gpu_live` runs
  it now; :func:`recorded_batch_sweep` joins the recordings at several batches per GPU.
* **Diagnosing a machine from its p2p matrix**: :func:`exercise_matrix` is a matrix built for
  the exercise (not a measurement) in the shape field reports describe: four PCIe GPUs, one of
  them slow with every partner, one pair slower in one direction. :func:`ddlab.measure.p2p_diagnosis.diagnose`
  reads it, and :func:`ddlab.course.checks.check_p2p_diagnosis` checks the learner's answer.
* **Tuning when communication dominates**: :func:`recorded_tunings` (the recorded
  :mod:`ddlab.course.tuning` comparisons, and a line naming those missing) and :func:`tuning_live`.
* **Cited figures** (:func:`cited`): results other people published, kept under
  ``source_code/reference/cited/`` with their source, shown as cited, never as ours.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Optional, Sequence

import numpy as np

from ddlab.cost import alpha_beta, recorded_runs, step_model, wrapper_cost
from ddlab.cost import predict as _predict
from ddlab.base import reference
from ddlab.base.tables import Table

CITED_KIND = "cited"


@contextmanager
def _launch_bar(total: int, title: str, log: Optional[str]):
    """A progress bar over ``total`` training launches whose own lines go to the file ``log``; it
    yields the ``progress`` callback to pass down. No bar (and None) when ``log`` is None."""
    if log is None:
        yield None
        return
    from ddlab.base import progress
    from ddlab.training.runs import DONE_MARK
    with progress.Bar(total, title, log=log) as bar:
        yield bar.counter(DONE_MARK)

# ----------------------------------------------------------------------------- cited figures
def cited(name: str) -> Table:
    """A cited result (``reference/cited/<name>.json``) as a table whose title names its
    source. The file holds ``columns`` (key, format, header), ``rows`` and a provenance with
    ``cited: true``, ``source`` (a URL), ``machine`` and ``retrieved``. Every row names the
    ``section`` of the source its figures come from (a figure without one is not cited); a
    file may hold no rows, and its notes then say why."""
    obj = reference.load(CITED_KIND, name)
    prov = obj["provenance"]
    if not prov.get("cited") or not prov.get("source"):
        raise ValueError(f"reference/{CITED_KIND}/{name} must say it is cited and name its source")
    unplaced = [i for i, r in enumerate(obj["rows"]) if not str(r.get("section") or "").strip()]
    if unplaced:
        raise ValueError(f"reference/{CITED_KIND}/{name}: row(s) {', '.join(map(str, unplaced))} name no section of "
                         "the source (a cited figure must be found at a named place in it)")
    cols = [tuple(c) for c in obj["columns"]]
    title = f"Cited, not measured by this course: {obj.get('title', name)}"
    notes = [f"Source: {prov['source']} (retrieved {prov.get('retrieved', '?')}).",
             f"Their machine: {prov.get('machine', 'not stated')}."] + list(obj.get("notes", []))
    return Table(cols, obj["rows"], title=title, notes=notes)


# ----------------------------------------------------------------------------- case 1
def _row(model, path, compute_s, pred, measured, spread=None, repeats=None):
    lo, hi = spread if spread else (None, None)
    return {"model": model, "path": path, "gradients": sum(b.nbytes for b in pred.buckets), "compute": compute_s,
            "allreduce": pred.comm_s, "ratio": compute_s / pred.comm_s if pred.comm_s > 0 else float("inf"),
            "exposed": pred.exposed_comm_s, "overhead": pred.overhead_s, "predicted": pred.speedup,
            "measured": measured, "spread": f"{lo:.2f}-{hi:.2f}" if lo is not None and hi is not None else "-",
            "repeats": repeats, "error_pct": 100 * (pred.speedup / measured - 1) if measured else None}


_COLUMNS = [("model", "text"), ("path", "text"), ("gradients", "bytes", "grads"),
            ("compute", "time", "step (1)"), ("allreduce", "time", "all-reduce"),
            ("ratio", "ratio", "ratio"), ("exposed", "time", "exposed"),
            ("overhead", "time", "wrapper"), ("predicted", "ratio", "predicted"),
            ("measured", "ratio", "measured"), ("spread", "text", "min-max"),
            ("error_pct", lambda v: f"{v:+.1f}%", "error")]
_LEGEND_TERMS = ("grads: gradient bytes per step; step (1): the one-worker (one-GPU) step; all-reduce: its time "
                 "for those bytes on that path, from the path's alpha-beta fit; ratio: step (1) / all-reduce; "
                 "exposed: the part of the all-reduce the backward pass cannot hide; wrapper: the data-parallel "
                 "wrapper's own cost per step")
_LEGEND = (_LEGEND_TERMS + "; predicted and measured: speedup of 2 workers over 1 (measured: the median, min-max "
           "over the repeats).")

def _named_paths(columns: list, name) -> list:
    """``columns`` with the path column shown through ``name`` (e.g. "NCCL default, NVLS off"); rows keep their key."""
    return [("path", name, "path") if c[0] == "path" else c for c in columns]


# What the ratio can and cannot say (weak scaling: n GPUs, each with the one-GPU batch).
RATIO_NOTE = ("The ratio is a first look, not the verdict: part of the all-reduce hides behind the backward pass, and on "
              "n GPUs each carries 2(n-1)/n of the gradients (1 for two GPUs). The speedup is n x step / (step + "
              "exposed + wrapper), so n GPUs are slower than one only when exposed + wrapper exceed (n-1) steps.")


def second_gpu_table(launcher: str = "ddp", models: Optional[Sequence[str]] = None,
                     recorded: Optional[recorded_runs.RecordedSet] = None) -> Table:
    """Case 1 on the recorded 2-GPU machine: for every recorded model x path of ``launcher``
    ("ddp", "ddp-graph" or "horovod"), the one-GPU step, the all-reduce of the gradients on
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
    pts.sort(key=lambda p: (order.get(p.model, 99), p.path))
    rows = []
    for p in pts:
        pred = recorded_runs.predict_point(p, rec.fits, over.get(p.framework), profiles=rec.profiles,
                                           channels=rec.channels, sweeps=rec.sweeps)
        rows.append(_row(p.model, p.path, p.compute_s, pred, p.measured, (p.measured_min, p.measured_max),
                         p.repeats))
    notes = [_LEGEND, RATIO_NOTE, f"Wrapper cost: {pred.term('wrapper').source}."]
    cols = _named_paths(_COLUMNS, recorded_runs.path_labels(rec))
    return Table(cols, rows, title=f"When a second GPU pays: {launcher}, 2 GPUs over 1"
                 + (f" ({rec.machine})" if rec.machine else ""), notes=notes)


def predicted_vs_measured(result, fit, overheads: Optional[step_model.Overheads] = None,
                          recorded: Optional[recorded_runs.RecordedSet] = None) -> Table:
    """The step model against a live (or recorded) scaling or NCCL-path result: for each row
    with 2 or more workers, the prediction from the one-worker row's step time and ``fit``
    (an :class:`ddlab.cost.alpha_beta.AlphaBeta` of the all-reduce the run used, or a dict
    {path: fit} for an NCCL-path comparison) beside the measured speedup. ``recorded`` (default:
    :func:`ddlab.cost.recorded_runs.recorded_points`) supplies the step profiles of the GPU the result
    ran on, and the channels of its own recorded paths."""
    rows_in = [r for r in result.rows if not r.get("error")]
    base = [r for r in rows_in if r.get("workers") == 1]
    if not base:
        raise ValueError("the result has no one-worker row to take the compute time from")
    model = result.config.get("model")
    compute_s = base[0]["global_batch"] / base[0]["images_per_s"]
    rec = recorded or recorded_runs.recorded_points()
    device = "cpu" if result.config.get("device") == "cpu" else result.config.get("device_name")
    rows = []
    for r in rows_in:
        if r.get("workers", 1) < 2 or r.get("speedup") is None:
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
        lo, hi = r.get("speedup_min"), r.get("speedup_max")
        row = _row(model, path, compute_s, pred.step, r["speedup"], (lo, hi) if lo is not None else None,
                   r.get("repeats", 1))
        row["batch"] = base[0]["global_batch"]
        rows.append(row)
    if not rows:
        raise ValueError("no row with 2 or more workers and a fit for its path")
    from ddlab.training.results import path_name
    shown = {r.get("path"): path_name(r, result.provenance) for r in rows_in if isinstance(r.get("path"), str)}
    cols = _named_paths(_COLUMNS[:1] + [("batch", "int", "batch")] + _COLUMNS[1:], lambda v: shown.get(v, v))
    return Table(cols, rows, title=f"Predicted vs measured: {model}, {result.config.get('launcher', '?')}",
                 notes=[_LEGEND + " batch: per worker."])


# ----------------------------------------------------------------------------- case 1, as the reports ran it
REPORT_MLPS = ("mlp-small", "mlp-large")          # the course's models with the reports' MLP widths
REPORT_GLOBAL_BATCHES = (4, 8, 16, 32, 64, 128)  # the global batches the reports split over two GPUs
REPORT_PATHS = ("shm", "default")                # P2P off (the reports' case), then NCCL's default here
CPU_GLOBAL_BATCH = 32
_STRONG_COLUMNS = [("model", "text"), ("path", "text"), ("global", "text", "global batch"),
                   ("per_gpu", "text", "per GPU"), ("one", "time", "step (1 GPU)"), ("compute", "time", "compute/GPU"),
                   ("exposed", "time", "exposed"), ("wrapper", "time", "wrapper"), ("step", "time", "step (2 GPUs)"),
                   ("speedup", "ratio", "predicted"), ("bound", "text", "bound by")]


def strong_scaling_predicted(models: Sequence[str] = REPORT_MLPS, global_batches: Sequence[int] = REPORT_GLOBAL_BATCHES,
                             paths: Sequence[str] = REPORT_PATHS, gpus: int = 2) -> Table:
    """The field reports' experiment predicted for the recorded machine: each global batch
    split over ``gpus`` GPUs (strong scaling), with :func:`ddlab.cost.predict.predict` (``ddlab
    predict --global-batch``). The one-GPU step is the recorded DDP one-GPU step of each model
    at its recorded batch, taken as the step at every one of these smaller global batches: the
    recording shows how little of it is the GPU's own work (the notes print the share). Global
    batches with the same prediction share a row."""
    rec = _predict.recorded_set()
    in_step = wrapper_cost.over_one_worker_step("ddp")   # the recorded one-GPU step ran DDP with world size 1
    rows, notes, commands = [], [], []
    for m in models:
        pts = [p for p in rec.points if p.model == m and p.launcher == "ddp"]
        if not pts:
            notes.append(f"{m}: no recorded one-GPU step, so no prediction.")
            continue
        one = pts[0]
        if one.device_s:
            notes.append(f"{m}: the recorded one-GPU step is {one.compute_s * 1e3:.3f} ms at {one.batch} images; the "
                         f"GPU is busy {one.device_s * 1e3:.3f} ms of it ({100 * one.device_s / one.compute_s:.0f}%, "
                         "from a CUDA-graph recording), the rest is the host launching kernels, which does not shrink "
                         "with the batch: so the step is taken to be the same at these smaller global batches.")
        for path in paths:
            preds = [(g, _predict.predict(m, step_ms=one.compute_s * 1e3, global_batch=g, gpus=gpus, path=path,
                                          fits=_predict.RECORDED, framework="ddp", wrapper=in_step))
                     for g in global_batches]
            commands.append(f"python -m ddlab predict --model {m} --step-ms {one.compute_s * 1e3:.3f} --global-batch "
                            f"{preds[0][0]} --gpus {gpus} --path {path} --fits {_predict.RECORDED} --step-has-wrapper")
            groups: list = []
            for g, p in preds:
                if groups and abs(groups[-1][1].speedup - p.speedup) < 1e-9:
                    groups[-1][0].append(g)
                else:
                    groups.append(([g], p))
            for gs, p in groups:
                span = str(gs[0]) if len(gs) == 1 else f"{gs[0]}-{gs[-1]} (each)"
                per = str(gs[0] // gpus) if len(gs) == 1 else f"{gs[0] // gpus}-{gs[-1] // gpus}"
                rows.append({"model": m, "path": path, "global": span, "per_gpu": per, "one": p.one_gpu_step_s,
                             "compute": p.compute_s, "exposed": p.exposed_comm_s, "wrapper": p.wrapper_s,
                             "step": p.step_s, "speedup": p.speedup, "bound": p.bound})
    if not rows:
        raise ValueError("none of the models has a recorded one-GPU step to predict from")
    notes += ["Predicted, not measured, for the machine in the title. What is recorded of this experiment, and on "
              "which machine: strong_scaling_recorded(). Paths: shm = peer-to-peer off, through host memory (the "
              "reports' case); default = NCCL's choice on the recorded machine (NVLink).",
              f"Wrapper: {in_step.source}; so nothing is added for it (--step-has-wrapper). The same prediction "
              "from the command line: " + "; ".join(commands[:1]) + "."]
    cols = _named_paths(_STRONG_COLUMNS, recorded_runs.path_labels(rec))
    return Table(cols, rows, title=f"The reports' experiment predicted: a global batch split over {gpus} "
                                              f"GPUs ({rec.machine or _predict.RECORDED})", notes=notes)


def strong_scaling_live(models: Sequence[str] = REPORT_MLPS, global_batch: int = CPU_GLOBAL_BATCH, repeats: int = 3,
                        echo: bool = False, machine=None, log: Optional[str] = None) -> Table:
    """The reports' experiment run now: ``global_batch`` images per step on one worker, then
    split over two (:func:`ddlab.training.experiments.strong_scaling`), for each of ``models``,
    ``repeats`` times. With two GPUs: on the GPUs with peer-to-peer off (NCCL path shm), as in
    the reports. Otherwise: two CPU processes over gloo, with small step counts. ``log``: a
    file for the launches' lines, with a progress bar instead of them (None: neither)."""
    from ddlab.training import experiments
    from ddlab.training.runspec import RunSpec
    gpus = _gpus_live("ddp", machine)
    rows, device, results = [], "cuda" if gpus else "cpu", []
    with _launch_bar(len(models) * 2 * repeats, f"strong scaling: {', '.join(models)} on 1 and 2 workers",
                     log) as progress:
        for m in models:
            if gpus:
                spec = RunSpec.for_device("cuda", m, launcher="ddp", repeats=repeats)
            else:
                spec = RunSpec.for_device("cpu", m, launcher="ddp", steps=20, warmup_steps=5, repeats=repeats,
                                          test_samples=500, timeout=120)
            results.append((m, experiments.strong_scaling(spec, global_batches=(global_batch,), device=device,
                                                          path="shm" if gpus else "default", echo=echo,
                                                          progress=progress)))
    for m, res in results:
        for r in res.rows:
            rows.append({"model": m, "global": r["global_batch"], "workers": r["workers"],
                         "per_worker": r["batch_per_worker"], "ips": r["images_per_s"],
                         "ips_spread": f"{r['images_per_s_min']:,.0f}-{r['images_per_s_max']:,.0f}",
                         "speedup": r["speedup"],
                         "spread": f"{r['speedup_min']:.2f}-{r['speedup_max']:.2f}" if "speedup_min" in r else "-",
                         "step_ms": r["step_ms_median"]})
    cols = [("model", "text"), ("global", "int", "global batch"), ("workers", "int"),
            ("per_worker", "int", "per worker"), ("ips", lambda v: f"{v:,.0f}", "images/s"),
            ("ips_spread", "text", "min-max"), ("speedup", "ratio", "speedup vs 1"), ("spread", "text", "min-max"),
            ("step_ms", lambda v: f"{v:.3f}", "step ms")]
    where = ("two GPUs, NCCL path shm (peer-to-peer off)" if gpus else
             "two CPU processes over gloo (they share this machine's cores)")
    notes = [f"Measured now: {where}; DDP, median of {repeats} runs (min-max beside it). The reports used TensorFlow's "
             "MirroredStrategy; this is the same experiment with PyTorch DDP."]
    return Table(cols, rows, title=f"The reports' experiment run now: a global batch of {global_batch} on one worker, "
                                   "then split over two", notes=notes)


STRONG_RECORDED_PREFIX = "strong-scaling-torch-"


def strong_scaling_recordings() -> list:
    """The recorded runs of the reports' experiment (``record_experiments.py strong:launcher:model[:path]``),
    as ExperimentResults, in name order; empty until one is recorded."""
    from ddlab.training import recording
    from ddlab.training.results import ExperimentResult
    return [ExperimentResult.from_dict(reference.load(recording.REFERENCE_KIND, n), source="recorded")
            for n in sorted(reference.names(recording.REFERENCE_KIND)) if n.startswith(STRONG_RECORDED_PREFIX)]


def strong_scaling_recorded(models: Sequence[str] = REPORT_MLPS, launchers: Sequence[str] = ("ddp", "horovod"),
                            paths: Sequence[str] = ("shm", "default", "socket")) -> Table:
    """The reports' experiment as recorded: each global batch on one GPU, then split over two,
    median speedup with its min-max over the repeats. Its notes name each machine and say which
    of ``models`` x ``launchers`` x ``paths`` is not recorded yet."""
    results = strong_scaling_recordings()
    rows, notes, seen = [], [], set()
    for res in results:
        c, prov = res.config, res.provenance or {}
        path = c.get("path") or "default"
        seen.add((c.get("model"), c.get("launcher"), path))
        machine = prov.get("machine") or "machine not recorded"
        for r in res.rows:
            if r.get("workers", 1) < 2:
                continue
            one = next((o for o in res.rows if o.get("workers") == 1 and o.get("global_batch") == r.get("global_batch")),
                       None)
            rows.append({"model": c.get("model"), "launcher": c.get("launcher"), "path": path,
                         "global": r.get("global_batch"), "per_gpu": r.get("batch_per_worker"),
                         "one": one["step_ms_median"] if one else None, "two": r.get("step_ms_median"),
                         "speedup": r.get("speedup"),
                         "spread": (f"{r['speedup_min']:.2f}-{r['speedup_max']:.2f}" if "speedup_min" in r else "-"),
                         "machine": machine})
        notes.append(f"{c.get('model')}, {c.get('launcher')}, {path}: {machine}, {c.get('precision')}, "
                     f"{c.get('repeats')} repeats, recorded {str(prov.get('date', '?'))[:10]} "
                     f"(driver {prov.get('driver') or 'not recorded'}, CUDA {prov.get('cuda_runtime') or 'not recorded'}, "
                     f"NCCL {prov.get('nccl') or 'not recorded'}, torch {prov.get('torch') or 'not recorded'}).")
    missing = [f"{m} {lc} {p}" for m in models for lc in launchers for p in paths if (m, lc, p) not in seen]
    if missing:
        notes.append("Not recorded yet: " + "; ".join(missing) + ".")
    notes.append("The reports used TensorFlow's MirroredStrategy on two GeForce GPUs over PCIe; these runs split the "
                 "same global batches of the same MLP widths with the framework named in each row.")
    notes.append("Speedup: images/s on two GPUs over images/s on one at the same global batch (median of the "
                 "repeats, min-max beside it); shm = peer-to-peer off, through host memory, as in the reports.")
    cols = [("model", "text"), ("launcher", "text"), ("path", "text"), ("global", "int", "global batch"),
            ("per_gpu", "int", "per GPU"), ("one", lambda v: "-" if v is None else f"{v:.3f}", "step ms (1 GPU)"),
            ("two", lambda v: "-" if v is None else f"{v:.3f}", "step ms (2 GPUs)"), ("speedup", "ratio"),
            ("spread", "text", "min-max")]
    return Table(cols, rows, title="The reports' experiment recorded: a global batch on one GPU, then split over two",
                 notes=notes)


# ----------------------------------------------------------------------------- case 2
def exercise_matrix() -> tuple:
    """(matrix in GB/s, labels, description) for the diagnosis exercise: a 4-GPU PCIe
    machine's unidirectional P2P bandwidth, built for the exercise in the shape field reports
    describe (one GPU slow with every partner, one pair slower in one direction). Not a
    measurement: the numbers are chosen so the answer is clear."""
    n = 4
    m = np.full((n, n), 10.2)
    m += np.array([[0.0, 0.1, -0.2, 0.1], [0.2, 0.0, 0.1, -0.1], [-0.1, 0.2, 0.0, 0.1], [0.1, -0.2, 0.1, 0.0]])
    m[1, :] = m[:, 1] = 3.4          # GPU 1: a third of the others' speed with every partner
    m[2, 3] = 5.9                    # 2 -> 3 much slower than 3 -> 2
    np.fill_diagonal(m, np.nan)      # copies within one GPU are not a link: left out
    desc = ("A matrix built for this exercise (not a measurement): unidirectional P2P bandwidth of a 4-GPU "
            "PCIe machine, rows = source GPU, GB/s.")
    return m, list(range(n)), desc


def exercise_table() -> Table:
    """:func:`exercise_matrix` as a table (rows = source GPU)."""
    m, labels, desc = exercise_matrix()
    cols = [("src", "text", "from \\ to")] + [(f"g{j}", lambda v: "-" if np.isnan(v) else f"{v:.1f}", f"GPU{j}")
                                             for j in labels]
    rows = [dict({"src": f"GPU{i}"}, **{f"g{j}": float(m[i, j]) for j in labels}) for i in labels]
    return Table(cols, rows, title="Diagnosis exercise: unidirectional P2P bandwidth (GB/s)", notes=desc)


# ----------------------------------------------------------------------------- case 1, live
CPU_BATCHES = (32, 512)


def _gpus_live(launcher: str, machine=None, gpus: int = 2) -> bool:
    """Whether the ``gpus``-GPU version runs live here: the course's one policy (:func:`ddlab.system.policy.decide`)."""
    from ddlab.system import policy
    return policy.decide(policy.Needs(gpus=gpus, framework="torch", launcher=launcher), machine).live


_PREDICTED_COLUMNS = _COLUMNS[:1] + [("batch", "int", "batch")] + _COLUMNS[1:-3]


def second_gpu_predicted(model: str = "mlp-small", repeats: int = 3, echo: bool = False,
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
    (one,) = res.rows
    compute_s = one["global_batch"] / one["images_per_s"]
    rec = recorded or _predict.recorded_set()
    over = wrapper_cost.over_one_worker_step("ddp")
    rows = []
    for path in rec.fits:
        pred = _predict.predict(model, step_ms=compute_s * 1e3, batch=one["global_batch"], gpus=2, path=path,
                                fits=_predict.RECORDED, framework="ddp", step_device=res.config.get("device_name"),
                                wrapper=over)
        rows.append(dict(_row(model, path, compute_s, pred.step, None), batch=one["global_batch"]))
    gpu = res.config.get("device_name") or this_machine()[0]
    spread = (f"{one['images_per_s_min']:,.0f}-{one['images_per_s_max']:,.0f}" if "images_per_s_min" in one else "")
    notes = [_LEGEND_TERMS + "; predicted: speedup of 2 GPUs over 1; batch: per GPU.",
             f"step (1) measured now on this GPU ({gpu}): DDP on one GPU, median of {one.get('repeats', 1)} runs "
             f"at {one['images_per_s']:,.0f} images/s" + (f" (min-max {spread})." if spread else "."),
             "The second GPU is predicted, not measured: this machine has one. Its links are those of the recorded "
             f"machine ({rec.machine or 'recorded'}): the alpha-beta fit of each path's recorded all-reduce sweep, "
             f"and the DDP wrapper's cost {over.source}.",
             "The same model on two GPUs of the recorded machine: the recorded table above."]
    cols = _named_paths(_PREDICTED_COLUMNS, recorded_runs.path_labels(rec))
    return Table(cols, rows,
                 title=f"Predicted, not measured: {model}, DDP, one GPU measured now and a second GPU "
                       "over each recorded path", notes=notes)


def second_gpu_live(inventory=None, model: str = "mlp-small", batches: Optional[Sequence[int]] = None,
                    repeats: int = 3, echo: bool = False, machine=None, log: Optional[str] = None) -> Table:
    """Case 1 run now on this machine, with the step model's prediction beside each point.

    With two GPUs or more: the NCCL-path comparison of ``model`` (1 GPU, then 2 under each
    path, ``repeats`` times) and the all-reduce sweep under each path, fitted to the
    alpha-beta model; the wrapper's cost is in the one-GPU step (DDP with world size 1).
    With one GPU: :func:`second_gpu_predicted` (the one-GPU step measured now, the second GPU
    predicted over the recorded machine's links).
    Otherwise: the same model on 1 and 2 CPU processes over gloo at each of ``batches``
    (default :data:`CPU_BATCHES`, the test pass cut to 1,000 images), predicted from a gloo
    sweep; no wrapper cost is measured for CPU processes, so the prediction leaves it out.
    ``log``: a file for the training launches' lines, with a progress bar instead of them."""
    from ddlab.measure import collectives_run
    from ddlab.training import experiments
    from ddlab.system import hardware
    from ddlab.system import policy
    from ddlab.training.runspec import RunSpec
    machine = machine or policy.Machine.detect()
    two_gpus = _gpus_live("ddp", machine)
    if not two_gpus and _gpus_live("ddp", machine, gpus=1):
        with _launch_bar(repeats, f"{model}: DDP on this GPU", log) as progress:
            return second_gpu_predicted(model, repeats=repeats, echo=echo, progress=progress)
    inv = inventory or hardware.inventory(horovod_check=False)
    if two_gpus:
        spec = RunSpec.for_device("cuda", model, launcher="ddp", repeats=repeats)
        with _launch_bar((1 + len(experiments.COMPARED_PATHS)) * repeats,
                         f"{model}: 1 GPU, then 2 under each NCCL path", log) as progress:
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
    with _launch_bar(len(batches) * 2 * repeats, f"{model}: 1 and 2 CPU processes at batches "
                     f"{', '.join(map(str, batches))}", log) as progress:
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
    line = ("Every tuning comparison is recorded." if not missing else
            f"Not recorded yet on the course's GPU machine ({model} model):\n  " + "\n  ".join(missing))
    return found, line


def tuning_live(launcher: str = "ddp", repeats: int = 3, echo: bool = False, machine=None, log: Optional[str] = None):
    """Case 3 run now: with two GPUs, the wide model untuned and with every DDP fix combined
    (:data:`GPU_LIVE_TUNINGS`) on NCCL's default path; otherwise a small real version on two
    CPU processes over gloo: :data:`CPU_MODEL` with :data:`CPU_TUNINGS` (a tuning this
    PyTorch cannot run shows its reason instead of a measurement). ``log``: a file for the
    launches' lines, with a progress bar instead of them."""
    from ddlab.course import tuning
    from ddlab.training.runspec import RunSpec
    gpus = _gpus_live(launcher, machine)
    chosen = GPU_LIVE_TUNINGS if gpus else CPU_TUNINGS
    with _launch_bar(tuning.planned_launches(launcher, chosen, repeats), f"tunings: {', '.join(chosen)}",
                     log) as progress:
        if gpus:
            return tuning.tuning_comparison(TUNED_MODEL, launcher, "default", tunings=chosen, device="cuda",
                                            repeats=repeats, echo=echo, progress=progress)
        base = RunSpec.for_device("cpu", CPU_MODEL, launcher=launcher, workers=2, repeats=repeats, test_samples=1000)
        return tuning.tuning_comparison(tunings=chosen, base=base, echo=echo, progress=progress)


# ----------------------------------------------------------------------------- case 1, batches
def recorded_batch_sweep(model: str = "mlp-small", launcher: str = "ddp") -> tuple:
    """(Table, or None until two batches are recorded; one line naming the recorded batches):
    the recorded NCCL-path comparisons of ``model`` at every batch per GPU recorded (``record_experiments.py --batch N`` writes them
    with the variant ``bN``; the live default batch has no suffix), each 2-GPU row with the step
    model's prediction from that recording's own one-GPU step and the recorded sweeps' fits."""
    from ddlab.training import recording
    from ddlab.base import reference
    name = recording.reference_name("nccl-paths", "torch", launcher, model)
    variants = sorted((int(n[len(name) + 2:]), n[len(name) + 1:]) for n in reference.names(recording.REFERENCE_KIND)
                      if n.startswith(name + "-b") and n[len(name) + 2:].isdigit())
    results = []
    for _, variant in [(None, None)] + variants:
        try:
            results.append(recording.load_recorded("nccl-paths", "torch", launcher, model, variant))
        except reference.ReferenceMissing:
            pass
    batches = sorted({r.rows[0].get("global_batch") for r in results if r.rows})
    line = (f"Recorded batches per GPU for {model} ({launcher}): {', '.join(map(str, batches)) or 'none'}."
            + ("" if len(batches) > 1 else " The batch sweep (record_experiments.py --batch N) is not recorded yet."))
    if len(batches) < 2:
        return None, line
    rec = recorded_runs.recorded_points()
    over = wrapper_cost.over_one_worker_step("horovod" if launcher == "horovod" else "ddp")
    rows, cols = [], None
    for res in results:
        t = predicted_vs_measured(res, rec.fits, over, rec)
        rows += t.rows
        cols = t.columns
    rows.sort(key=lambda r: (r["batch"], r["path"]))
    title = f"When a second GPU pays, by batch: {model}, {launcher}, 2 GPUs over 1"
    return Table(cols, rows, title=title + (f" ({rec.machine})" if rec.machine else ""), notes=[_LEGEND]), line
