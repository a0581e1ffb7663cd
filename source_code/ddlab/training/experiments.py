"""The named Fashion-MNIST training experiments, shared by the notebooks and the ``ddlab`` CLI.

Each takes a base :class:`~ddlab.training.runspec.RunSpec` (or its fields as keywords) plus what it
varies, runs every configuration ``spec.repeats`` times through :func:`ddlab.training.runs.train`, and
returns an :class:`~ddlab.training.results.ExperimentResult` (median and min-max over the repeats):

* :func:`throughput_scaling` - images/s over 1, 2, ... workers, speedup and efficiency;
* :func:`strong_scaling` - a global batch on one worker and split over several, as the field
  reports ran it;
* :func:`nccl_path_comparison` - the course's central experiment: the same training over
  NCCL's default path, over shared host memory and over sockets, each under
  ``NCCL_DEBUG=INFO`` so the transport NCCL really chose is read from its log;
* :func:`launchers_side_by_side` - DDP and Horovod on each NCCL path in one table;
* :func:`performance_options` - one GPU, the same model with each speed option.

:func:`run_or_load` runs one live when this machine can (the policy is
:func:`ddlab.system.policy.decide`) and otherwise loads the recording (:mod:`ddlab.training.recording`); with no
GPU it also runs the experiment for real, small, on CPU processes with gloo, and puts it beside.
"""
from __future__ import annotations

from typing import Callable, Mapping, Optional, Sequence

from ddlab.measure import launch
from ddlab.system import nccl
from ddlab.base import reference
from ddlab.training import baseline, data, throughput
from ddlab.training.results import ExperimentResult, add_speedup, median_run, row_of_repeats, take_runs  # noqa: F401
from ddlab.training.result_views import combine_launchers, compare_speedups, images_side_by_side  # noqa: F401
from ddlab.system.frameworks import availability, gpu_count  # noqa: F401  (names the notebooks use)
from ddlab.system.provenance import run_provenance
from ddlab.training.experiment_kit import base_spec, config_of, interleaved, interleaved_note, keep_runs, repeat
from ddlab.training.runs import ExperimentError, failure_row, launch_bar, spec_for, train  # noqa: F401  (names the notebooks use)
from ddlab.training.runspec import LIVE_GPU_REPEATS, MODELS, RunSpec, RunSpecError, _check_choice, nccl_path_env, nccl_path_name  # noqa: F401
from ddlab.training.recording import load_recorded, reference_name  # noqa: F401

EXPERIMENTS = ("scaling", "nccl-paths", "perf-options")
COMPARED_PATHS = nccl.COMPARED

# Single-GPU speed options for performance_options(): label -> what they change in the RunSpec.
PERF_OPTIONS = {
    "plain fp32": {"precision": "fp32", "cuda_graph": "off"},
    "bf16": {"precision": "bf16", "cuda_graph": "off"},
    "cuda-graph fp32": {"precision": "fp32", "cuda_graph": "on"},
    "cuda-graph bf16": {"precision": "bf16", "cuda_graph": "on"},
    "cuda-graph bf16 channels-last": {"precision": "bf16", "cuda_graph": "on", "channels_last": True},
    "compile bf16": {"precision": "bf16", "compile": "default", "cuda_graph": "off"},
    "compile + cuda-graph bf16": {"precision": "bf16", "compile": "default", "cuda_graph": "on"},
}
Progress = Optional[Callable[[str], None]]
PLAIN_TEXT = "(one process, no wrapper: the run every speedup divides by)"


def plain_spec(spec: RunSpec) -> RunSpec:
    """The plain one-GPU run of ``spec`` (:mod:`ddlab.training.baseline`): one process, no wrapper
    (``launcher="none"``), the same model, batch, precision, steps and CUDA-graph setting (one process
    on a GPU would capture a CUDA graph by default: an eager PyTorch ``spec`` gets ``cuda_graph="off"``;
    the CUDA-graph option is PyTorch's, so another framework's spec keeps it unset)."""
    graph = (spec.cuda_graph or "off") if spec.framework == "torch" else spec.cuda_graph
    return spec.with_(launcher="none", workers=1, path="default", cuda_graph=graph)


# ----------------------------------------------------------------------------- experiments
def throughput_scaling(base: Optional[RunSpec] = None, workers: Sequence[int] = (1, 2), device: str = "auto",
                       env: Optional[Mapping] = None, echo: bool = False, progress: Progress = None,
                       log: Optional[str] = None, **fields) -> ExperimentResult:
    """Images/s of the same training on each number of ``workers`` (batch per worker fixed,
    so the global batch grows with the workers): the plain one-process run first, then the wrapper on
    each count. ``fields``: RunSpec fields (framework, launcher="ddp", model, ...) when no ``base`` is
    given. Runs on GPUs when there is one per worker, else on CPU processes. ``log`` (without
    ``progress``): a progress bar over the launches, their lines in that file ("auto": in Jupyter
    ``scratch/scaling-<device>.log``: :func:`ddlab.training.runs.launch_bar`)."""
    workers = sorted({int(w) for w in workers})
    if not workers or workers[0] < 1:
        raise RunSpecError("workers must be positive integers, e.g. [1, 2]")
    if base is None:
        fields.setdefault("launcher", "ddp")
    spec = base_spec(base, device, max(workers), dict(fields, workers=max(workers)))
    if spec.launcher == "none" and workers != [1]:
        raise RunSpecError("launcher 'none' is one process; use 'ddp' or 'horovod' to scale")
    all_runs, rows = [], []
    configs = ([(baseline.PLAIN_PATH, plain_spec(spec))] if spec.launcher != "none" else []) \
        + [(w, spec.with_(workers=w)) for w in workers]
    title = f"{spec.device} launches: " + ("plain, then " if spec.launcher != "none" else "") \
        + f"{spec.launcher} on {', '.join(map(str, workers))} worker(s)"
    with launch_bar(len(configs) * spec.repeats, title, None if progress else log,
                    name=f"scaling-{spec.device}") as bar:
        for what, one in configs:
            runs = repeat(one, env=env, echo=echo, progress=progress or bar)
            row = row_of_repeats(runs)
            row.update(runs=keep_runs(all_runs, runs), efficiency=None)
            if what == baseline.PLAIN_PATH:
                row.update(path=baseline.PLAIN_PATH, launcher="none", plain=True)
            rows.append(row)
    if spec.launcher == "none":         # the plain run itself: its own baseline
        rows[0]["plain"] = True
    notes = []
    if spec.device == "cpu":
        notes.append("CPU processes with gloo: the workers share this machine's cores, so scaling shows the "
                     "real code path, not what GPUs would do")
    return ExperimentResult("scaling", rows, "live", run_provenance(
        f"ddlab.training.experiments.throughput_scaling({spec.framework!r}, {spec.launcher!r}, workers={workers}, "
        f"model={spec.model!r})"), notes, config_of(spec, all_runs[0], workers=workers), all_runs)


def strong_scaling(base: Optional[RunSpec] = None, global_batches: Sequence[int] = (32,), workers: int = 2,
                   device: str = "auto", path: str = "default", echo: bool = False, progress: Progress = None,
                   **fields) -> ExperimentResult:
    """Strong scaling, as the field reports ran it: each global batch once on one worker and
    once split evenly over ``workers`` (``global / workers`` images each), ``spec.repeats``
    times; the speedup is images/s on ``workers`` over images/s on one at the same global
    batch. ``path``: the NCCL path of the multi-worker runs (e.g. "shm": peer-to-peer off, as
    in the reports). ``fields``: RunSpec fields (framework, launcher="ddp", model, steps, ...)
    when no ``base`` is given. (Weak scaling, a fixed batch per worker, is
    :func:`throughput_scaling`; several paths sharing one set of one-worker runs is
    :func:`strong_scaling_paths`.)"""
    only, = strong_scaling_paths(base, global_batches, workers, device, (path,), echo, progress, **fields).values()
    return only


def strong_scaling_paths(base: Optional[RunSpec] = None, global_batches: Sequence[int] = (32,), workers: int = 2,
                         device: str = "auto", paths: Sequence[str] = ("default",), echo: bool = False,
                         progress: Progress = None, **fields) -> dict:
    """:func:`strong_scaling` over several NCCL ``paths`` in one experiment: each round runs every
    global batch on one worker, then split over ``workers`` on each path, so the paths share the
    one-worker runs (one launch fewer per path beyond the first) and the same rounds. Returns
    {path: ExperimentResult}, each as :func:`strong_scaling` gives it, with a note naming the
    other paths when there are several."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 2:
        raise RunSpecError(f"strong scaling splits the batch over 2 or more workers, got {workers!r}")
    batches = sorted({int(g) for g in global_batches})
    bad = [g for g in batches if g < workers or g % workers]
    if not batches or bad:
        raise RunSpecError(f"each global batch must split evenly over {workers} workers; got {bad or batches}")
    paths = list(dict.fromkeys(nccl_path_name(p) for p in ([paths] if isinstance(paths, str) else paths)))
    if not paths:
        raise RunSpecError(f"name at least one NCCL path ({', '.join(nccl.PATHS)})")
    if base is None:
        fields.setdefault("launcher", "ddp")
    spec = base_spec(base, device, workers, dict(fields, workers=workers))
    if spec.launcher == "none":
        raise RunSpecError("launcher 'none' is one process; use 'ddp' or 'horovod' to split a batch")
    if spec.device == "cpu" and paths != ["default"]:
        raise RunSpecError(f"path {[p for p in paths if p != 'default'][0]!r} is an NCCL setting: "
                           "CPU processes all-reduce with gloo")
    configs = []
    for g in batches:
        configs.append(((g, 0, None), plain_spec(spec).with_(batch=g), dict(env=None)))
        configs.append(((g, 1, None), spec.with_(workers=1, batch=g, path="default"), dict(env=None)))
        configs += [((g, workers, p), spec.with_(workers=workers, batch=g // workers, path=p), dict(env=None))
                    for p in paths]
    got, failed = interleaved(configs, spec.repeats, stop_at_failure=True, echo=echo, progress=progress)
    if failed:      # a failed launch fails the whole experiment: its rows would not compare like with like
        raise next(iter(failed.values()))
    return {p: _strong_result(spec, batches, workers, p, paths, got) for p in paths}


def _strong_result(spec: RunSpec, batches: list, workers: int, path: str, paths: list,
                   got: dict) -> ExperimentResult:
    """One path's strong-scaling result from the runs of :func:`strong_scaling_paths`."""
    what = ("every global batch plain on one GPU, on 1 worker and on several" if len(paths) == 1 else
            f"every global batch plain on one GPU, on 1 worker and on {workers} over each path ({', '.join(paths)})")
    all_runs, rows = [], []
    for g in batches:
        for w, key in ((1, (g, 0, None)), (1, (g, 1, None)), (workers, (g, workers, path))):
            runs = got.get(key)
            if not runs:
                continue
            row = row_of_repeats(runs)
            row.update(runs=keep_runs(all_runs, runs), batch_per_worker=g // w, global_batch=g)
            if key[1] == 0:
                row.update(path=baseline.PLAIN_PATH, launcher="none", plain=True)
            rows.append(row)
    notes = [f"strong scaling: each global batch on one GPU (plain, and under the wrapper with 1 worker), then split "
             f"over {workers}; speedup over the plain one-GPU run at the same global batch"]
    if spec.repeats > 1:
        notes.append(interleaved_note(spec.repeats, what))
    if spec.device == "cpu":
        notes.append("CPU processes with gloo: the workers share this machine's cores, so scaling shows the real "
                     "code path, not what GPUs would do")
    elif path != "default":
        notes.append(f"the {workers}-worker runs use NCCL path {path!r}")
    others = [p for p in paths if p != path]
    if others:
        notes.append(f"the one-GPU runs are shared with the {workers}-worker runs over path(s) "
                     f"{', '.join(others)}, recorded in the same experiment (their own files)")
    call = (f"path={path!r}" if len(paths) == 1 else f"paths={paths}")
    fn = "strong_scaling" if len(paths) == 1 else "strong_scaling_paths"
    return ExperimentResult("strong-scaling", rows, "live", run_provenance(
        f"ddlab.training.experiments.{fn}({spec.framework!r}, {spec.launcher!r}, model={spec.model!r}, "
        f"global_batches={batches}, workers={workers}, {call})"), notes,
        config_of(spec, all_runs[0], workers=[1, workers], global_batches=batches, batch_size=None,
                  path=None if spec.device == "cpu" else path, order="interleaved"),
        all_runs)


def _transport_of(log_text: str, dev: str, backend: str) -> dict:
    """The transport NCCL reported, via ddlab.system.nccl_log; the raw NCCL lines when that parser
    is not available."""
    if dev == "cpu" or "gloo" in backend:
        return {"transport": "gloo (TCP, no NCCL)", "transport_counts": {}}
    nccl_lines = [ln for ln in log_text.splitlines() if "NCCL" in ln]
    try:
        from ddlab.system import nccl_log
    except ImportError:
        return {"transport": "see nccl_log_lines", "transport_counts": {}, "nccl_log_lines": nccl_lines[-400:]}
    parsed = nccl_log.parse(log_text)
    counts = parsed.transport_counts()
    return {"transport": " + ".join(counts) if counts else ("no NCCL connection lines" if not parsed.empty
                                                            else "no NCCL INFO lines"),
            "transport_counts": counts, "transports": parsed.transports(), "nccl_version": parsed.version,
            "nccl_env_reported": parsed.env, "nccl_summary": parsed.summary(),
            "nccl_connection_lines": [ln for ln in nccl_lines if " via " in ln][:64]}


def nccl_path_comparison(base: Optional[RunSpec] = None, paths: Sequence[str] = COMPARED_PATHS, workers: int = 2,
                         device: str = "auto", echo: bool = False, progress: Progress = None,
                         **fields) -> ExperimentResult:
    """The same training on ``workers`` GPUs under each NCCL path (default; shm =
    ``NCCL_P2P_LEVEL=LOC``; socket = ``NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1``),
    plus one worker alone as the baseline, each ``spec.repeats`` times. Each path runs under
    ``NCCL_DEBUG=INFO`` and its row says which transport NCCL used. On CPU (gloo) there is no
    NCCL: only the default path runs, and the notes say so. A run that fails, the baseline
    included, gets a row with its error (one that timed out also with ``hang_traceback``:
    where each worker was stuck) and the others still run; without a baseline the speedups
    are left out. ``fields``: RunSpec fields (framework, launcher="ddp", model="wide", ...)
    when no ``base`` is given.

    With DDP on GPUs the step is not captured as a CUDA graph unless ``cuda_graph="on"``
    (see fmnist_torch.py): baseline and paths then all run eagerly, so their ratios compare
    like with like."""
    paths = [nccl_path_name(p) for p in paths]
    if base is None:
        fields.setdefault("launcher", "ddp")
        fields.setdefault("model", "wide")
    if workers < 2:
        raise RunSpecError("the NCCL paths need at least 2 workers")
    if (base.launcher if base is not None else fields["launcher"]) == "none":
        raise RunSpecError("the NCCL paths need several workers: use launcher 'ddp' or 'horovod'")
    spec = base_spec(base, device, workers, dict(fields, workers=workers))
    notes = []
    if spec.device == "cpu":
        notes.append("CPU processes: gloo all-reduces over TCP, with no NCCL, so only 'default' ran")
        paths = ["default"]
    rows, all_runs = [], []
    base_text = "(one worker: no all-reduce traffic)"
    one, plain = baseline.WRAPPER_PATH, baseline.PLAIN_PATH
    got, failed = interleaved([(plain, plain_spec(spec), {}), (one, spec.with_(workers=1, path="default"), {})]
                              + [(p, spec.with_(path=p), dict(env={"NCCL_DEBUG": "INFO"}, keep_log=True))
                                 for p in paths], spec.repeats, echo=echo, progress=progress)
    base_runs = got[one] or got[plain]
    for key, text in ((plain, PLAIN_TEXT), (one, base_text)):
        if key in failed:
            rows.append(failure_row(failed[key], path=key, env={}, env_text=text, workers=1))
            notes.append(f"the {'plain one-GPU run' if key == plain else 'one-worker run'} failed"
                         + (", so there are no speedups" if key == plain else "")
                         + f": {str(failed[key]).splitlines()[0]}")
            continue
        row = row_of_repeats(got[key])
        idx = keep_runs(all_runs, got[key])
        rows.append(dict(row, path=key, env={}, env_text=text, transport="-", run=idx[median_run(got[key])], runs=idx,
                         **({"launcher": "none", "plain": True} if key == plain else {})))
    base_ips = rows[0].get("images_per_s") if rows and rows[0].get("plain") else None
    for p in paths:
        shown = {k: v for k, v in nccl_path_env(p).items() if v is not None}
        env_text = " ".join(f"{k}={v}" for k, v in shown.items()) or "(NCCL defaults)"
        if p in failed:
            rows.append(failure_row(failed[p], path=p, env=shown, env_text=env_text, workers=workers))
            notes.append(f"path {p!r} failed: {str(failed[p]).splitlines()[0]}")
            continue
        runs = got[p]
        logs = [r.pop("log", "") for r in runs]
        row = row_of_repeats(runs)
        idx = keep_runs(all_runs, runs)
        mid = median_run(runs)
        row.update(path=p, env=shown, env_text=env_text, run=idx[mid], runs=idx)
        row.update(_transport_of(logs[mid], spec.device, runs[mid]["backend"]))
        rows.append(row)
    if spec.repeats > 1:
        notes.append(interleaved_note(spec.repeats, "the plain one-GPU run, the one-worker run and every path"))
    if not all_runs:
        raise ExperimentError("every run of the NCCL path comparison failed:\n" + "\n".join(notes))
    return ExperimentResult("nccl-paths", rows, "live", run_provenance(
        f"ddlab.training.experiments.nccl_path_comparison({spec.framework!r}, {spec.launcher!r}, model={spec.model!r}, "
        f"paths={list(paths)}, workers={workers})"),
        notes, config_of(spec, (base_runs or all_runs)[0], workers=workers, paths=list(paths),
                       baseline_images_per_s=base_ips, order="interleaved"), all_runs)


def scaling_from_paths(paths_result: ExperimentResult) -> ExperimentResult:
    """The 1 -> N scaling that an NCCL-path comparison already measured: its one-worker
    baseline and its default-path run (saves running the same two trainings again)."""
    if paths_result.name != "nccl-paths":
        raise ValueError("needs an nccl-paths result")
    picked = [r for r in paths_result.rows if r.get("path") in (baseline.PLAIN_PATH, baseline.WRAPPER_PATH, "default")
              and not r.get("error")]
    if len([r for r in picked if r.get("path") != baseline.PLAIN_PATH]) != 2:
        raise ExperimentError("the nccl-paths result has no successful one-worker and default-path run")
    rows, runs = [], []
    for r in picked:
        row = {k: v for k, v in r.items() if k not in ("path", "env", "env_text") or r.get("path") == baseline.PLAIN_PATH}
        row["efficiency"] = None      # set over the plain run (ddlab.training.baseline.rebase)
        take_runs(row, paths_result.runs, runs)
        rows.append(row)
    cfg = dict(paths_result.config, workers=[r["workers"] for r in rows])
    cfg.pop("paths", None)
    notes = ["taken from the nccl-paths runs: the plain one-GPU run (where recorded), the one-worker run and the "
             "default NCCL path"]
    return ExperimentResult("scaling", rows, paths_result.source, paths_result.provenance,
                            notes + list(paths_result.notes), cfg, runs)


def performance_options(base: Optional[RunSpec] = None, options: Optional[Sequence[str]] = None,
                        device: str = "auto", echo: bool = False, progress: Progress = None,
                        **fields) -> ExperimentResult:
    """One process, one GPU, PyTorch: the same training with each speed option of
    :data:`PERF_OPTIONS` (plain fp32 loop, bf16, CUDA graph, channels-last, torch.compile).
    A small model at batch 512 is limited by launching kernels, not by computing them; this
    shows what removing the launches is worth. An option that fails gets a row with its error."""
    options = list(options or PERF_OPTIONS)
    for o in options:
        _check_choice("option", o, tuple(PERF_OPTIONS))
    spec = base_spec(base, device, 1, dict(fields, framework="torch", launcher="none", workers=1))
    notes = []
    if spec.device == "cpu":
        notes.append("CPU: CUDA graphs and bf16 autocast are GPU techniques; only the options that run on a "
                     "CPU were run")
        options = [o for o in options if "cuda-graph" not in o and "compile" not in o]
    rows, all_runs = [], []
    base_ips = None
    for o in options:
        try:
            runs = [train(spec.with_(**PERF_OPTIONS[o]), echo=echo, graph_fallback=False, progress=progress)
                    for _ in range(spec.repeats)]
        except (launch.LaunchError, ExperimentError) as exc:
            rows.append(failure_row(exc, option=o, workers=1))
            notes.append(f"option {o!r} failed: {str(exc).splitlines()[0]}")
            continue
        row = row_of_repeats(runs)
        base_ips = base_ips or (row["images_per_s"] if o == options[0] else None)
        mid = median_run(runs)
        idx = keep_runs(all_runs, runs)
        rows.append(dict(add_speedup(row, base_ips), option=o, compile=runs[mid].get("compile"),
                         cuda_graph_reason=runs[mid].get("cuda_graph_reason"),
                         channels_last=runs[mid].get("channels_last"), run=idx[mid], runs=idx))
    if not all_runs:
        raise ExperimentError("every option failed:\n" + "\n".join(notes))
    return ExperimentResult("perf-options", rows, "live", run_provenance(
        f"ddlab.training.experiments.performance_options(model={spec.model!r}, options={options})"),
        notes, config_of(spec, all_runs[0], options=options), all_runs)


# ----------------------------------------------------------------------------- live or recorded
def run_experiment(experiment: str, framework: str, launcher: str, model: str, workers, device: str, **kw) -> ExperimentResult:
    """Run the named experiment live (``ddlab experiment`` and :func:`run_or_load` call it). On
    GPUs (``device="cuda"``) each configuration runs :data:`LIVE_GPU_REPEATS` times unless ``repeats``
    is given, so that a compared row shows its spread; on CPU processes it runs once."""
    if device == "cuda" and kw.get("repeats") is None:
        kw["repeats"] = LIVE_GPU_REPEATS
    if experiment == "scaling":
        return throughput_scaling(workers=workers or (1, 2), device=device, framework=framework, launcher=launcher,
                                  model=model, **kw)
    if experiment == "nccl-paths":
        return nccl_path_comparison(workers=workers or 2, device=device, framework=framework, launcher=launcher,
                                    model=model, **kw)
    if experiment == "perf-options":
        if framework != "torch":
            raise RunSpecError("perf-options is a PyTorch experiment")
        for k in ("precision", "env", "cuda_graph", "compile", "channels_last"):
            kw.pop(k, None)
        return performance_options(device=device, model=model, **kw)
    raise RunSpecError(f"unknown experiment {experiment!r}; choose one of {', '.join(EXPERIMENTS)}")


def planned_launches(experiment: str, workers=None, repeats: int = LIVE_GPU_REPEATS,
                     paths: Sequence[str] = COMPARED_PATHS, options: Optional[Sequence[str]] = None) -> int:
    """How many training launches :func:`run_experiment` makes on GPUs: every configuration
    ``repeats`` times (scaling: the plain one-GPU run and each worker count; nccl-paths: the plain
    one-GPU run, the one-worker run and each path; perf-options: each option)."""
    _check_choice("experiment", experiment, EXPERIMENTS)
    if experiment == "nccl-paths":
        configs = 2 + len(paths)
    elif experiment == "scaling":
        configs = 1 + len(workers or (1, 2))
    else:
        configs = len(options or PERF_OPTIONS)
    return configs * int(repeats)


def _needed_gpus(experiment: str, workers) -> int:
    if experiment == "nccl-paths":
        return int(workers or 2)
    if experiment == "scaling":
        return max(int(w) for w in (workers or (1, 2)))
    return 1


def _decide(experiment: str, framework: str, launcher: str, workers, source: str, cpu_run: bool, machine) -> tuple:
    """(GPUs needed, the machine, live on GPUs?, why not, whether a CPU run may be added): the one
    decision behind :func:`run_or_load` and :func:`where_it_runs`."""
    from ddlab.system import policy
    need = _needed_gpus(experiment, workers)
    m = machine or policy.Machine.detect()
    decision = policy.decide(policy.Needs(gpus=need, framework=framework, launcher=launcher), m)
    ok, why = decision.live, decision.why
    no_data = data.missing() if source != "recorded" else None
    if no_data:      # nothing runs without the data set: the recording stands in, and the line says why
        ok, why, cpu_run = False, no_data, False
    return need, m, ok, why, cpu_run


def decision(experiment: str, framework: str = "torch", launcher: str = "ddp", workers=None, machine=None):
    """Whether ``experiment`` runs live on GPUs here, as :func:`run_or_load` decides it: a
    :class:`ddlab.system.policy.Decision` (``live``, and ``why`` not)."""
    from ddlab.system import policy
    if experiment == "perf-options":
        launcher = "none"
    _, _, ok, why, _ = _decide(experiment, framework, launcher, workers, "auto", False, machine)
    return policy.Decision(ok, why)


def where_it_runs(experiment: str, framework: str = "torch", launcher: str = "ddp", model: str = "cnn",
                  workers=None, cpu_run: bool = True, machine=None) -> str:
    """What :func:`run_or_load` with the same arguments (``source`` "auto") will show here, in
    a few words, without running anything: "live on the GPUs", "recorded (why)" with or without a
    small CPU run beside it, a CPU run alone where nothing is recorded, or nothing."""
    if experiment == "perf-options":
        launcher = "none"
    need, m, ok, why, cpu_run = _decide(experiment, framework, launcher, workers, "auto", cpu_run, machine)
    if ok:
        return "live on the GPUs"
    try:
        load_recorded(experiment, framework, launcher, model)
        recorded = True
    except reference.ReferenceMissing:
        recorded = False
    cpu = cpu_run and m.software(framework, launcher)[0] and m.gpus_for(framework) < need
    if recorded:
        return f"recorded ({why})" + (", with a small run on CPU processes beside it" if cpu else "")
    if cpu:
        return f"a small run on CPU processes ({why}; no GPU run recorded)"
    return f"not run here ({why}) and not recorded"


def run_or_load(experiment: str, framework: str = "torch", launcher: str = "ddp", model: str = "cnn",
                     workers=None, source: str = "auto", cpu_run: bool = True, missing_ok: bool = False,
                     cuda_graph: bool = False, machine=None, log: Optional[str] = "auto",
                     **fields) -> ExperimentResult:
    """Run ``experiment`` ("scaling", "nccl-paths" or "perf-options") live on GPUs when this
    machine can (:func:`ddlab.system.policy.decide`), otherwise load the result recorded for it; the
    result's notes say which.

    ``source``: "auto", "live" (run it; fail with the reason if this machine cannot) or
    "recorded". With no GPU for the experiment and ``cpu_run``, a small real run on CPU
    processes (gloo) is made too and attached as ``.companion`` (or returned alone when
    nothing was recorded). When this machine cannot run it and nothing is recorded, raise
    ExperimentError, or with ``missing_ok`` return an empty result whose ``source`` is
    "missing" and whose notes say why. ``cuda_graph`` (PyTorch scaling and nccl-paths):
    capture each training step as a CUDA graph; the recorded result is then the "graph"
    variant, and no CPU run is added. ``machine``: a :class:`ddlab.system.policy.Machine` (default:
    this one). ``log``: a file for the live GPU launches' lines, with a progress bar over the
    launches instead of them; "auto": in Jupyter ``scratch/live-<experiment>-...log``
    (:func:`ddlab.base.progress.notebook_log`), elsewhere none (the lines as they come).
    ``fields``: RunSpec fields for a live run (batch, steps, repeats, timeout, ...)."""
    _check_choice("experiment", experiment, EXPERIMENTS)
    _check_choice("source", source, ("auto", "live", "recorded"))
    variant = None
    if cuda_graph:
        if framework != "torch" or experiment == "perf-options" or launcher == "horovod":
            raise RunSpecError("cuda_graph is for PyTorch scaling and nccl-paths with --launcher none or ddp "
                               "(Horovod's all-reduce cannot be captured; perf-options has its own graph rows)")
        fields["cuda_graph"] = "on"
        variant, cpu_run = "graph", False
    if experiment == "perf-options":
        launcher = "none"
    need, m, ok, why, cpu_run = _decide(experiment, framework, launcher, workers, source, cpu_run, machine)
    if source == "live" and not ok:
        raise ExperimentError(f"cannot run {experiment} live here: {why}")
    if source != "recorded" and ok:
        if "progress" in fields:        # the caller follows the launches itself
            log = None
        planned = planned_launches(experiment, workers, fields.get("repeats") or LIVE_GPU_REPEATS,
                                   fields.get("paths") or COMPARED_PATHS, fields.get("options"))
        with launch_bar(planned, f"{experiment}: {model} with {launcher}, on this machine's GPUs", log,
                        name=f"live-{experiment}-{framework}-{launcher}-{model}") as bar:
            if bar is not None:
                fields["progress"] = bar
            res = run_experiment(experiment, framework, launcher, model, workers, "cuda", **fields)
        res.notes.insert(0, f"live: run just now on this machine's {need} GPU(s)")
        return res
    recorded = None
    try:
        recorded = load_recorded(experiment, framework, launcher, model, variant)
    except reference.ReferenceMissing as exc:
        missing = str(exc)
    if recorded is not None:
        if source != "recorded":              # the title says where it was recorded; this says why it is not live
            recorded.notes.insert(0, f"recorded: not live here ({why})")
    can_cpu = cpu_run and m.software(framework, launcher)[0]
    if cpu_run and source != "recorded" and can_cpu and m.gpus_for(framework) < need:
        cpu = run_experiment(experiment, framework, launcher, model, workers, "cpu", **fields)
        if recorded is None:
            cpu.notes.insert(0, f"live on CPU, small: this machine cannot run it on GPUs ({why})")
            note = "no recorded GPU result: " + reference_name(experiment, framework, launcher, model) \
                + (f"-{variant}" if variant else "")
            if framework == "keras":
                note += " (the recording machine had no TensorFlow; on GPUs it runs wherever a GPU TensorFlow is)"
            cpu.notes.append(note)
            return cpu
        recorded.companion = cpu
    if recorded is None:
        if missing_ok:
            return ExperimentResult(experiment, [], source="missing",
                                    notes=[f"no GPU result recorded for this experiment yet, and this machine cannot "
                                           f"run it live ({why}); {missing}"],
                                    config={"framework": framework, "launcher": launcher, "model": model,
                                            "device": "cuda"})
        raise ExperimentError(f"cannot run {experiment} live here ({why}) and nothing is recorded: {missing}")
    return recorded


def launchers_side_by_side(model: str = "wide", framework: str = "torch", launchers: Sequence[str] = ("ddp", "horovod"),
                           source: str = "recorded", **kwargs) -> ExperimentResult:
    """The NCCL-path comparison of each launcher (DDP and Horovod by default) in one table:
    for every path, the images/s and speedup of each launcher, side by side. ``source`` as
    for :func:`run_or_load` (default "recorded")."""
    return combine_launchers({la: run_or_load("nccl-paths", framework, la, model, source=source,
                                                   cpu_run=False, **kwargs) for la in launchers})
