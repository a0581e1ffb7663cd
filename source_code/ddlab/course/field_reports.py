"""The field reports' experiment: two small dense networks trained on two GPUs without
peer-to-peer, one global batch split over the two (strong scaling), slower than on one GPU.

* :func:`cited`: what the reports published, each figure with the section of the source it
  stands in (``source_code/reference/cited/``), shown as cited, never as the course's;
  :func:`samples_per_step` reads the reports' own step times to show their batch is split;
  :func:`model_sizes` sets the course's MLPs beside the reports' networks of the same widths;
* :func:`predicted`: the step model's prediction of the same experiment for the course's
  recorded machine (:func:`ddlab.cost.predict.predict`, ``ddlab predict --global-batch``), and
  :func:`busy_lines`, how much of the recorded one-GPU step it starts from is the GPU's own work;
* :func:`beside_cited`: the reports' speedups and that prediction side by side, per model and
  global batch, with what the course recorded of the experiment where it has it;
* :func:`recordings`, :func:`recording`, :func:`recorded` and :func:`recorded_grid`: the course's own
  runs of it (``tools/recording/record_experiments.py strong:launcher:model[:path]``);
* :func:`live`: the same experiment run now, on two GPUs with peer-to-peer off, or on two
  CPU processes over gloo.

The course's ``mlp-small`` and ``mlp-large`` have the reports' hidden widths (not their parameter
counts: :func:`model_sizes`); the reports used TensorFlow on GeForce cards, the course runs
PyTorch DDP (and Horovod).
"""
from __future__ import annotations

from typing import Optional, Sequence

from ddlab.base import reference
from ddlab.base.tables import Table, formatted
from ddlab.cost import predict as _predict
from ddlab.cost import recorded_runs, wrapper_cost
from ddlab.system import provenance
from ddlab.training.results import split_command
from ddlab.training.runs import launch_bar

CITED_KIND = "cited"
REPORTS = "two-gpus-without-p2p"      # reference/cited/<REPORTS>.json: the reports' figures
REPORT_MLPS = ("mlp-small", "mlp-large")          # the course's models with the reports' MLP widths
# The live run keeps to the MLP of notebook 10's exercise (six launches, not twelve, so that a Run All fits
# its stated minutes on two GPUs and on a 2-core laptop alike).
LIVE_MLPS = ("mlp-small",)
REPORT_GLOBAL_BATCHES = (4, 8, 16, 32, 64, 128)  # the global batches the reports split over two GPUs
REPORT_PATHS = ("shm", "default")                # P2P off (the reports' case), then NCCL's default here
RECORDED_PATHS = REPORT_PATHS + ("socket",)      # every path a recording of their experiment may take, in order
CPU_GLOBAL_BATCH = 32
CPU_LAUNCH_TIMEOUT_S = 300     # one CPU launch: seconds on an idle laptop, minutes on a shared, loaded machine
_STRONG_COLUMNS = [("model", "text"), ("path", "text"), ("global", "text", "global batch"),
                   ("one", "time", "step (1 worker)"), ("plain", "time", "step (1 GPU, plain)"),
                   ("compute", "time", "compute/GPU"), ("exposed", "time", "exposed"),
                   ("step", "time", "step (2 GPUs)"), ("speedup", "ratio", "predicted")]


def cited(name: str = REPORTS) -> Table:
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
    retrieved = f" (retrieved {prov['retrieved']})" if prov.get("retrieved") else ""
    notes = [f"Source: {prov['source']}{retrieved}.", f"Their machine: {prov.get('machine', 'not stated')}."]
    if "section" not in [c[0] for c in cols]:      # one line naming the sections, not a column repeating them
        sections = list(dict.fromkeys(r["section"] for r in obj["rows"]))
        notes.append("Section" + ("s" if len(sections) > 1 else "") + ": " + "; ".join(f"'{x}'" for x in sections)
                     + ".")
    return Table(cols, obj["rows"], title=title, notes=notes + list(obj.get("notes", [])), wrap=obj.get("wrap", ()))


def _number(text: str) -> float:
    """The figure of a cited cell such as "1,234 ± 45" (the part before the ±)."""
    return float(str(text).split("±")[0].replace(",", "").strip())


def samples_per_step(name: str = REPORTS) -> Table:
    """The reports' own evidence that their batch is global: for each row that gives a step time,
    samples/s x step time, the samples one step processes, on one GPU and on two. Equal counts say the
    two GPUs split the batch (strong scaling); two GPUs each taking it would process twice as many."""
    obj = reference.load(CITED_KIND, name)
    rows = []
    for r in obj["rows"]:
        if r.get("step_ms_one") is None:
            continue
        rows.append({"model": r["model"], "batch": r["batch"],
                     "one": _number(r["one_gpu"]) * r["step_ms_one"] / 1e3,
                     "two": _number(r["two_gpus"]) * r["step_ms_two"] / 1e3})
    if not rows:
        raise ValueError(f"reference/{CITED_KIND}/{name} gives no step time to read the batch from")
    worst = max(abs(r[k] / r["batch"] - 1) for r in rows for k in ("one", "two"))
    cols = [("model", "text", "network"), ("batch", "int", "batch"), ("one", lambda v: f"{v:.1f}", "1 GPU"),
            ("two", lambda v: f"{v:.1f}", "2 GPUs")]
    return Table(cols, rows, title="Samples per step = samples/s x step time, from the reports' own figures",
                 notes=[f"From the cited samples/s and step times. One and two GPUs process the batch once per step "
                        f"(within {100 * worst:.1f}%): it is split over the two."])


def model_sizes(name: str = REPORTS) -> Table:
    """The course's MLPs beside the reports' networks of the same hidden widths: parameters, counted
    from the course's layers (784 pixels in, 10 classes out) and as the reports state theirs, and the
    fp32 gradient bytes each all-reduces per step (4 per parameter)."""
    from ddlab.training import models
    theirs = {}
    for r in reference.load(CITED_KIND, name)["rows"]:
        theirs.setdefault(r["course_model"], int(str(r["parameters"]).replace(",", "")))
    rows = []
    for m in REPORT_MLPS:
        ours = sum(layer.params for layer in models.model_layers(m))
        rows.append({"model": m, "widths": "-".join(map(str, models.MLP_WIDTHS[m])), "ours": ours,
                     "ours_bytes": 4 * ours, "theirs": theirs.get(m), "theirs_bytes": 4 * theirs[m] if m in theirs else None})
    count = lambda v: f"{v:,}"     # noqa: E731
    cols = [("model", "text"), ("widths", "text", "hidden widths"), ("ours", count, "params (course)"),
            ("ours_bytes", "bytes", "grads (course)"), ("theirs", count, "params (reports)"),
            ("theirs_bytes", "bytes", "grads (reports)")]
    return Table(cols, rows, title="Same hidden widths, different networks: parameters and fp32 gradient bytes",
                 notes=["course: ddlab.training.models (784 in, 10 out); reports: 'Model Specifications' (input "
                        "and output sizes not stated)."],
                 missing="-")


def _one_gpu_step(rec, model: str):
    """The recorded DDP one-GPU step of ``model`` (a :class:`ddlab.cost.recorded_runs.RecordedPoint`), or None."""
    return next((p for p in rec.points if p.model == model and p.launcher == "ddp"), None)


def _predict_split(one, model: str, global_batch: int, path: str, gpus: int = 2):
    """:func:`ddlab.cost.predict.predict` of ``global_batch`` split over ``gpus`` GPUs on ``path`` of the
    recorded machine, from the recorded one-GPU step ``one`` (DDP at world size 1: its cost is in that step,
    and the speedup divides by that step less DDP's measured one-worker cost, the plain step)."""
    return _predict.predict(model, step_ms=one.compute_s * 1e3, global_batch=global_batch, gpus=gpus, path=path,
                            fits=_predict.RECORDED, framework="ddp", step_has_wrapper=True)


def _spread(row: dict) -> str:
    """A row's speedup min-max over its repeats, or "-" when it has none."""
    return f"{row['speedup_min']:.2f}-{row['speedup_max']:.2f}" if "speedup_min" in row else "-"


def _busy(model: str, one) -> str:
    """How much of the recorded one-GPU step ``one`` the GPU is busy (its CUDA-graph recording), in words."""
    return (f"{model}: recorded one-GPU step {one.compute_s * 1e3:.3f} ms at {one.batch} images, the GPU busy "
            f"{one.device_s * 1e3:.3f} ms of it ({100 * one.device_s / one.compute_s:.0f}%)")


HOST_SAID = "busy: from a CUDA-graph recording; the rest is the host launching kernels"


def busy_lines(models: Sequence[str] = REPORT_MLPS) -> str:
    """For each of ``models``, how much of its recorded DDP one-GPU step the GPU is busy (one line each),
    then what the rest is."""
    rec = _predict.recorded_set()
    lines = []
    for m in models:
        one = _one_gpu_step(rec, m)
        lines.append(_busy(m, one) + "." if one is not None and one.device_s else f"{m}: no CUDA-graph recording "
                     "of its one-GPU step, so its busy time is not known.")
    return "\n".join(lines + [f"({HOST_SAID}.)"])


def predicted(models: Sequence[str] = REPORT_MLPS, global_batches: Sequence[int] = REPORT_GLOBAL_BATCHES,
              paths: Sequence[str] = REPORT_PATHS, gpus: int = 2) -> Table:
    """The field reports' experiment predicted for the recorded machine: each global batch
    split over ``gpus`` GPUs (strong scaling), with :func:`ddlab.cost.predict.predict` (``ddlab
    predict --global-batch``). The one-GPU step is the recorded DDP one-GPU step of each model
    at its recorded batch, taken as the step at every one of these smaller global batches: the
    recording shows how little of it is the GPU's own work (the notes print the share). Global
    batches with the same prediction share a row."""
    rec = _predict.recorded_set()
    rows, notes, commands = [], [], []
    for m in models:
        one = _one_gpu_step(rec, m)
        if one is None:
            notes.append(f"{m}: no recorded one-GPU step, so no prediction.")
            continue
        if one.device_s:
            notes.append(_busy(m, one) + f", {HOST_SAID}: so the step is taken to be the same at these smaller "
                         "global batches.")
        for path in paths:
            preds = [(g, _predict_split(one, m, g, path, gpus)) for g in global_batches]
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
                rows.append({"model": m, "path": path, "global": span, "one": p.one_gpu_step_s,
                             "plain": p.plain_step_s,
                             "compute": p.compute_s, "exposed": p.exposed_comm_s, "step": p.step_s,
                             "speedup": p.speedup})
    if not rows:
        raise ValueError("none of the models has a recorded one-GPU step to predict from")
    notes += ["Predicted, not measured, for the machine in the title. What is recorded of this experiment, and on "
              "which machine: field_reports.recorded(). Paths: shm = peer-to-peer off, through host memory (the "
              "reports' case); default = NCCL's choice on the recorded machine (NVLink).",
              f"Wrapper: {wrapper_cost.IN_STEP_SOURCE}; so nothing is added for it (--step-has-wrapper), and the table "
              "has no wrapper column. The speedup divides by the plain one-GPU step (1 GPU, plain): the recorded step "
              "less DDP's one-worker cost measured on one GPU. The same prediction from the command line: "
              + "; ".join(commands[:1]) + "."]
    cols = formatted(_STRONG_COLUMNS, "path", recorded_runs.path_labels(rec))
    return Table(cols, rows, title=f"The reports' experiment predicted: a global batch split over {gpus} "
                                              f"GPUs ({rec.machine or _predict.RECORDED})", notes=notes)


def live(models: Optional[Sequence[str]] = None, global_batch: int = CPU_GLOBAL_BATCH, repeats: int = 3,
         echo: bool = False, machine=None, log: Optional[str] = "auto") -> Table:
    """The reports' experiment run now: ``global_batch`` images per step on one worker, then
    split over two (:func:`ddlab.training.experiments.strong_scaling`), for each of ``models``,
    ``repeats`` times. With two GPUs: on the GPUs with peer-to-peer off (NCCL path shm), as in
    the reports. Otherwise: two CPU processes over gloo, with small step counts. ``models`` None:
    :data:`LIVE_MLPS`. ``log``: a file for the launches' lines, with a progress bar instead of them
    ("auto": ``scratch/case1-strong-scaling.log`` in Jupyter; None: neither)."""
    from ddlab.system import policy
    from ddlab.training import experiments
    from ddlab.training.runspec import RunSpec
    gpus = policy.decide(policy.Needs(gpus=2, framework="torch", launcher="ddp"), machine).live
    models = list(models) if models is not None else list(LIVE_MLPS)
    rows, device, results = [], "cuda" if gpus else "cpu", []
    with launch_bar(len(models) * 3 * repeats, f"strong scaling: {', '.join(models)} plain, on 1 and on 2 workers",
                     log, name="case1-strong-scaling") as progress:
        for m in models:
            if gpus:
                spec = RunSpec.for_device("cuda", m, launcher="ddp", repeats=repeats)
            else:
                spec = RunSpec.for_device("cpu", m, launcher="ddp", steps=20, warmup_steps=5, repeats=repeats,
                                          test_samples=500, timeout=CPU_LAUNCH_TIMEOUT_S)
            results.append((m, experiments.strong_scaling(spec, global_batches=(global_batch,), device=device,
                                                          path="shm" if gpus else "default", echo=echo,
                                                          progress=progress)))
    from ddlab.training.results import run_label
    for m, res in results:
        for r in res.rows:
            rows.append({"model": m, "global": r["global_batch"], "run": run_label(r, "ddp"), "workers": r["workers"],
                         "per_worker": r["batch_per_worker"], "ips": r["images_per_s"],
                         "ips_spread": f"{r['images_per_s_min']:,.0f}-{r['images_per_s_max']:,.0f}",
                         "speedup": r["speedup"],
                         "spread": _spread(r), "step_ms": r["step_ms_median"]})
    cols = [("model", "text"), ("global", "int", "global batch"), ("run", "text"), ("workers", "int"),
            ("per_worker", "int", "per worker"), ("ips", lambda v: f"{v:,.0f}", "images/s"),
            ("ips_spread", "text", "min-max"), ("speedup", lambda v: "-" if v is None else f"{v:.2f}x",
                                                "speedup vs plain"), ("spread", "text", "min-max"),
            ("step_ms", lambda v: f"{v:.3f}", "step ms")]
    where = ("two GPUs, NCCL path shm (peer-to-peer off)" if gpus else
             "two CPU processes over gloo (they share this machine's cores)")
    notes = [f"Measured now: {where}; PyTorch DDP (the reports: TensorFlow's MirroredStrategy), median of {repeats} "
             "runs (min-max beside it)."]
    return Table(cols, rows, title=f"The reports' experiment run now: a global batch of {global_batch} on one worker, "
                                   "then split over two", notes=notes)


def recordings() -> list:
    """The recorded runs of the reports' experiment (``record_experiments.py strong:launcher:model[:path]``),
    as ExperimentResults, by launcher, then model (the reports' order, :data:`REPORT_MLPS`), then path (shm
    first: the reports' case); empty until one is recorded. Only the recordings under their JOB's own name
    (``strong-scaling-torch-<launcher>-<model>-<path>``); those kept under a longer name, the same JOB on
    another machine, are :func:`recorded_elsewhere`."""
    found = [res for name, res in _all_recordings() if name == _own_name(res)]

    def rank(value, order):
        return order.index(value) if value in order else len(order)
    return sorted(found, key=lambda r: (str(r.config.get("launcher")), rank(r.config.get("model"), REPORT_MLPS),
                                        rank(_path_of(r), RECORDED_PATHS)))


def run_command(run: dict) -> str:
    """The exact command line of one recorded run, copyable: the NCCL variables the run was given (its
    ``nccl_env``, less NCCL_VERSION, which reports the library) before the launch command its provenance
    recorded (the launcher, the script and its flags), each variable once: one the command sets already
    is not put before it again."""
    env = {k: v for k, v in sorted((run.get("nccl_env") or {}).items()) if k != "NCCL_VERSION"}
    command = (run.get("provenance") or {}).get("command") or "not recorded"
    given = {w.split("=", 1)[0] for w in split_command(command)[0]}
    return " ".join([f"{k}={v}" for k, v in env.items() if k not in given] + [command])


def recording(model: str = "mlp-small", launcher: str = "ddp", path: str = "shm"):
    """The course's recording of the reports' experiment for ``model``, ``launcher`` and ``path``
    (:func:`recordings`), or None while it is not recorded."""
    return next((r for r in _chosen((model,), (launcher,), (path,))), None)


def split_commands(result, global_batch: int) -> str:
    """The exact command line of the first recorded run of ``global_batch`` on one GPU and of the first on
    two (:func:`run_command`), one copyable line each."""
    runs = [r for r in result.runs if r.get("global_batch") == global_batch]
    lines = []
    for workers, label in ((1, "1 GPU: "), (2, "2 GPUs:")):
        run = next((r for r in runs if r.get("workers") == workers), None)
        lines.append(f"{label} {run_command(run) if run else 'not recorded'}")
    return "\n".join(lines)


def recorded_elsewhere() -> list:
    """The recordings of the reports' experiment kept under a longer name than their JOB's (the same JOB
    recorded on another machine than the course's, e.g. ``...-shm-2xh100-80gb-hbm3-nv18``), as
    (name, ExperimentResult). :func:`ddlab.cost.validation.held_out_other_machines` predicts them from
    their machine's own sweeps."""
    return [(name, res) for name, res in _all_recordings() if name != _own_name(res)]


def _all_recordings() -> list:
    from ddlab.training import recording
    return recording.recorded_with_prefix(recorded_runs.STRONG_PREFIX)


def _own_name(res) -> str:
    """The file name its JOB writes a recording of the reports' experiment under (as
    :func:`ddlab.recording.sets.record_strong` names it)."""
    from ddlab.training.recording import reference_name
    c = res.config
    stem = reference_name("strong-scaling", c.get("framework", "torch"), c.get("launcher"), c.get("model"))
    return f"{stem}-{_path_of(res)}"


def recorded(models: Sequence[str] = REPORT_MLPS, launchers: Sequence[str] = ("ddp", "horovod"),
             paths: Sequence[str] = RECORDED_PATHS) -> Table:
    """The reports' experiment as recorded: each global batch on one GPU, then split over two,
    the plain one-GPU step (no wrapper), the wrapper's one-worker step and the two-GPU step, and the
    median speedup over the plain run with its min-max over the repeats ("-" where no plain run of
    that batch is recorded), for the recordings of ``models`` x ``launchers`` x ``paths``. Its notes
    name each machine (runs with the same machine, software and date share one note), where the
    plain runs came from, and which recordings are not there yet."""
    from ddlab.training import baseline
    results = _chosen(models, launchers, paths)
    rows = []
    for res in results:
        c = res.config
        for r in res.rows:
            if r.get("workers", 1) < 2:
                continue
            one = next((o for o in res.rows if baseline.is_wrapper_one(o)
                        and o.get("global_batch") == r.get("global_batch")), None)
            plain = res.plain_run(r)
            rows.append({"model": c.get("model"), "launcher": c.get("launcher"), "path": _path_of(res),
                         "global": r.get("global_batch"), "per_gpu": r.get("batch_per_worker"),
                         "plain": plain.step_ms_median if plain is not None and plain.found else None,
                         "one": one["step_ms_median"] if one else None, "two": r.get("step_ms_median"),
                         "speedup": r.get("speedup"), "spread": _spread(r)})
    ms = (lambda v: "-" if v is None else f"{v:.3f}")     # noqa: E731
    cols = [("model", "text"), ("launcher", "text"), ("path", "text"), ("global", "int", "global batch"),
            ("per_gpu", "int", "per GPU"), ("plain", ms, "step ms (1 GPU, plain)"),
            ("one", ms, "step ms (1 worker)"), ("two", ms, "step ms (2 GPUs)"),
            ("speedup", lambda v: "-" if v is None else f"{v:.2f}x", "speedup vs plain"), ("spread", "text", "min-max")]
    return Table(cols, rows, title="The reports' experiment recorded: a global batch on one GPU, then split over two",
                 notes=_recorded_notes(results, models, launchers, paths) + _baseline_notes(results))


def recorded_grid(global_batches: Sequence[int] = (4, 32, 128), models: Sequence[str] = REPORT_MLPS,
                  launchers: Sequence[str] = ("ddp", "horovod"), paths: Sequence[str] = RECORDED_PATHS) -> Table:
    """The recordings of :func:`recorded` at a glance: one row per model, framework and path, one column
    per global batch of ``global_batches`` with the median speedup of two GPUs over one and its min-max
    ("-" where that batch is not recorded). The notes name the other batches recorded, which
    :func:`recorded` shows with their step times."""
    results = _chosen(models, launchers, paths)
    rows, more = [], {}          # more: "model launcher path" -> the other global batches recorded
    for res in results:
        c = res.config
        row = {"model": c.get("model"), "launcher": c.get("launcher"), "path": _path_of(res),
               **{f"g{g}": "-" for g in global_batches}}
        for r in res.rows:
            g = r.get("global_batch")
            if r.get("workers", 1) >= 2 and g in global_batches:
                row[f"g{g}"] = f"{r['speedup']:.2f}x ({_spread(r)})" if r.get("speedup") is not None else "-"
            elif r.get("workers", 1) >= 2:
                more.setdefault(f"{row['model']} {row['launcher']} {row['path']}", []).append(str(g))
        rows.append(row)
    cols = [("model", "text"), ("launcher", "text"), ("path", "text")] + [
        (f"g{g}", "text", f"global {g}") for g in global_batches]
    notes = ["Each cell: 2-GPU images/s over the plain one-GPU run's (no wrapper) at that global batch, median "
             f"(min-max); '-': not recorded, or no plain run of it. {PATHS_SAID}"]
    if more:
        notes.append("Also recorded (recorded() shows them): " + "; ".join(f"{k} at {', '.join(v)}"
                                                                           for k, v in more.items()) + ".")
    return Table(cols, rows, title="Recorded: the speedup of two GPUs over the plain one-GPU run, by global batch",
                 notes=notes + _recorded_notes(results, models, launchers, paths, general=False) + _baseline_notes(results),
                 align={f"g{g}": "right" for g in global_batches})


def _baseline_notes(results: list) -> list:
    """The caption lines for the plain runs the recordings' speedups divide by
    (:func:`ddlab.training.baseline.notes`); where some recordings hold their own plain runs and others
    divide by one recorded apart, each line names the recordings it covers."""
    from ddlab.training import baseline
    used = {(i, key): p for i, res in enumerate(results) for key, p in res.plain.items()}
    label = (lambda res: f"{res.config.get('model')} {res.config.get('launcher')} {_path_of(res)}")  # noqa: E731
    found = [(res, [p for p in res.plain.values() if p.found]) for res in results]
    apart = [label(res) for res, plains in found if any(not p.own for p in plains)]
    own = [label(res) for res, plains in found if plains and all(p.own for p in plains)]
    if not (own and apart):
        return baseline.notes(used)
    return ([f"speedup of {', '.join(own)}: over each one's own plain one-GPU run, timed between its other runs"]
            + baseline.notes(used, apart_for=apart))


def _path_of(res) -> str:
    """The NCCL path of a recording of the reports' experiment ("default" where its config names none)."""
    return res.config.get("path") or "default"


def _chosen(models: Sequence[str], launchers: Sequence[str], paths: Sequence[str]) -> list:
    """The :func:`recordings` of ``models`` x ``launchers`` x ``paths``."""
    return [r for r in recordings() if _one_of(r, models, launchers, paths)]


def _one_of(res, models: Sequence[str], launchers: Sequence[str], paths: Sequence[str]) -> bool:
    """Whether a recording of the reports' experiment is of one of ``models``, ``launchers`` and ``paths``."""
    c = res.config
    return c.get("model") in models and c.get("launcher") in launchers and _path_of(res) in paths


PATHS_SAID = ("shm = peer-to-peer off (as in the reports); default = NCCL's own choice (NVLink here); socket = "
              "TCP through the host.")


def _recorded_notes(results: list, models: Sequence[str], launchers: Sequence[str], paths: Sequence[str],
                    general: bool = True) -> list:
    """The notes :func:`recorded` and :func:`recorded_grid` share: one per machine, software and date, naming
    the recordings it covers; what is not recorded yet; with ``general``, what the runs keep of the reports
    and what speedup and the paths mean."""
    ran_on, seen = {}, set()
    for res in results:
        c, prov = res.config, res.provenance or {}
        path = _path_of(res)
        seen.add((c.get("model"), c.get("launcher"), path))
        where = (f"{prov.get('machine') or 'machine not recorded'}, {c.get('precision')}, {c.get('repeats')} repeats, "
                 f"recorded {str(prov.get('date', '?'))[:10]} (driver {prov.get('driver') or 'not recorded'}, "
                 f"CUDA {prov.get('cuda_runtime') or 'not recorded'}, NCCL {prov.get('nccl') or 'not recorded'}, "
                 f"torch {prov.get('torch') or 'not recorded'})")
        ran_on.setdefault(where, []).append(f"{c.get('model')} {c.get('launcher')} {path}")
    notes = ([f"Every row: {where}." for where in ran_on] if len(ran_on) == 1 else   # one machine, software, date
             [f"{', '.join(which)}: {where}." for where, which in ran_on.items()])
    missing = [f"{m} {lc} {p}" for m in models for lc in launchers for p in paths if (m, lc, p) not in seen]
    if missing:
        notes.append("Not recorded yet: " + "; ".join(missing) + ".")
    if general:
        other = [f"{res.config.get('model')} {res.config.get('launcher')} {_path_of(res)} on "
                 f"{provenance.machine_of(res.provenance)}"
                 for _, res in recorded_elsewhere() if _one_of(res, models, launchers, paths)]
        if other:
            notes.append("Recorded on another machine too, not shown here (validation.held_out_other_machines() "
                         "predicts it from that machine's own all-reduce sweeps): " + "; ".join(other) + ".")
        notes.append("The reports used TensorFlow's MirroredStrategy on two GeForce GPUs over PCIe; these runs split "
                     "the same global batches of the same MLP widths with the framework named in each row.")
        notes.append("Speedup: images/s on two GPUs over images/s of the plain one-GPU run (one process, no wrapper) "
                     f"at the same global batch (median of the repeats, min-max beside it). {PATHS_SAID}")
    return notes


def beside_cited(path: str = "shm", launcher: str = "ddp") -> Table:
    """The reports' speedups (:func:`cited`) beside the step model's prediction of the same split
    on the course's recorded machine over ``path`` (``shm``: peer-to-peer off, as in the reports)
    and, where the course recorded that model, global batch and path (:func:`recordings`), the
    measured median with its min-max. Three machines and two frameworks: the columns are set side
    by side, none is a check of another."""
    rec = _predict.recorded_set()
    measured = {}
    for res in recordings():
        c = res.config
        if c.get("launcher") == launcher and _path_of(res) == path:
            for r in res.rows:
                if r.get("workers", 1) >= 2:
                    measured[(c.get("model"), r.get("global_batch"))] = (r.get("speedup"), _spread(r), res.provenance or {})
    rows, machines = [], []
    theirs = reference.load(CITED_KIND, REPORTS)
    for r in theirs["rows"]:
        m, g = r["course_model"], int(r["batch"])
        one = _one_gpu_step(rec, m)
        pred = _predict_split(one, m, g, path) if one is not None else None
        got = measured.get((m, g))
        if got and m not in [mm for mm, _ in machines]:      # one recording (so one machine) per model
            machines.append((m, got[2]))
        rows.append({"model": m, "global": g, "per_gpu": g // 2, "cited": r["speedup"],
                     "predicted": pred.speedup if pred else None,
                     "measured": got[0] if got else None, "spread": got[1] if got else "-"})
    named = rec.path_label(path)
    notes = [f"cited: the reports' speedup of 2 GPUs over 1 ({theirs['provenance']['machine'].split(';')[0]}, "
             "TensorFlow); sections in cited().",
             f"predicted: ddlab predict for the course's recorded machine ({rec.machine or _predict.RECORDED}), path "
             f"{named}, {launcher}, from its recorded one-GPU step (predicted()).",
             "measured: the course's recording of the same split, model and path, median with its min-max over the "
             "repeats, " + (_models_on(machines) if machines else "on no machine yet: not recorded") +
             " (recorded()); '-' where that global batch is not recorded.",
             _beside_said(rec, [prov for _, prov in machines])]
    cols = [("model", "text"), ("global", "int", "global batch"), ("per_gpu", "int", "per GPU"),
            ("cited", "text", "cited (theirs)"), ("predicted", "ratio", f"predicted ({named})"),
            ("measured", lambda v: f"{v:.3g}x", f"measured ({named})"),
            ("spread", "text", "min-max")]
    return Table(cols, rows, title="The reports' experiment: their speedups beside the course's prediction and "
                                   "recording", notes=notes, align={"cited": "right", "measured": "right"}, missing="-")


def _models_on(machines: list) -> str:
    """'mlp-small and mlp-large on M1; ...' from [(model, provenance)], one clause per machine."""
    by = {}
    for m, prov in machines:
        by.setdefault(provenance.machine_of(prov), []).append(m)
    return "; ".join(f"{' and '.join(ms)} on {where}" for where, ms in by.items())


def _beside_said(rec, measured_on: list) -> str:
    """What :func:`beside_cited`'s columns may be read as: the reports' column never checks the others; the
    prediction checks the measurement only where every measured row ran on the machine of the prediction's
    sweeps (``measured_on``: the provenance of each)."""
    shared = ("What they share is the experiment: the same hidden widths and global batches, split over two GPUs "
              "with peer-to-peer off.")
    if measured_on and all(rec.made_here(prov) for prov in measured_on):
        return ("The reports' column is another machine and framework, set beside the others, not checked by them; "
                "the prediction and the measurement are of one machine, so they do check each other "
                "(validation.held_out() counts every such row). " + shared)
    return "Set side by side, not checked against each other: the columns come from different machines. " + shared
