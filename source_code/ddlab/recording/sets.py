"""The course's recorded training sets, run on a GPU machine by tools/recording/record_experiments.py.

:func:`record_gpu_set` records the set on a 2-GPU machine with the live defaults
(:func:`ddlab.training.recording.gpu_spec`) and at least
:data:`ddlab.training.recording.MIN_REPEATS` repeats, so a recording and a live run are the same
experiment; :func:`record_paths` one NCCL path comparison (and the scaling taken from it);
:func:`record_one_gpu_step` one GPU's CUDA-graph step; :func:`record_strong` the field reports'
strong scaling. Each result is written (by
:func:`ddlab.training.recording.save`) as soon as it exists.
"""
from __future__ import annotations

import os
import re
from typing import Callable, Optional, Sequence

from ddlab.base import files
from ddlab.system import frameworks, provenance
from ddlab.training import experiments
from ddlab.training.experiment_kit import INTERLEAVED_NOTE_START
from ddlab.training.recording import MIN_REPEATS, gpu_spec, load, reference_name, save
from ddlab.training.result_views import combine_launchers, summary_table
from ddlab.training.results import ExperimentResult
from ddlab.training.runspec import RunSpec, _check_choice

GPU_SECTIONS = ("ddp", "horovod", "perf")


def _write(out_dir: str, name: str, res: ExperimentResult, done: dict) -> None:
    """Saves ``res`` as ``<name>.json``, checked by its schema. If that fails (a missing validator,
    a full disk, a result the schema refuses) the measurement is not lost: it is kept unchecked as
    ``<name>.unsaved.json`` and ``done[name]`` says why, so the next measurements still run."""
    try:
        save(res, os.path.join(out_dir, name + ".json"))
        done[name], head = res, ""
    except Exception as exc:  # reported in the summary, the measurement kept aside
        done[name] = f"not saved: {type(exc).__name__}: {exc}" + _kept_aside(out_dir, name, res)
        head = f"{name}: {done[name]}\n"
    print("\n" + head + res.table() + "\n", flush=True)


def _kept_aside(out_dir: str, name: str, res: ExperimentResult) -> str:
    """Writes ``res`` without its schema check as ``<name>.unsaved.json``; says where, or why not."""
    aside = os.path.join(out_dir, name + ".unsaved.json")
    try:
        files.write_json(aside, files.nan_to_null(res.to_dict()), default=str)
    except Exception as exc:  # nothing more to try: the table printed next is what is left
        return f"; could not keep it aside either ({type(exc).__name__}: {exc}): its table follows"
    return (f"; what was measured is kept, unchecked, in {aside} (once the cause is mended, "
            "ddlab.training.recording.load checks it; then rename it without .unsaved)")


def _attempt(done: dict, name: str, make):
    try:
        return make()
    except Exception as exc:  # reported in the summary; the other measurements still run
        done[name] = f"{type(exc).__name__}: {exc}"
        return None


def record_paths(out_dir: str, base: RunSpec, variant: Optional[str] = None, echo: bool = False,
                 progress: Optional[Callable[[str], None]] = None, done: Optional[dict] = None) -> dict:
    """Records the NCCL path comparison of ``base`` (2 workers) in ``out_dir``, and the 1 -> 2
    scaling taken from it (not for a ``variant``, e.g. "graph"). Returns ``done`` with
    {name: ExperimentResult or error text}."""
    done = {} if done is None else done
    os.makedirs(out_dir, exist_ok=True)
    name = reference_name("nccl-paths", base.framework, base.launcher, base.model) + (f"-{variant}" if variant else "")
    res = _attempt(done, name, lambda: experiments.nccl_path_comparison(base, echo=echo, progress=progress))
    if res is None:
        return done
    _write(out_dir, name, res, done)
    if variant is None:
        sname = reference_name("scaling", base.framework, base.launcher, base.model)
        scaling = _attempt(done, sname, lambda: experiments.scaling_from_paths(res))
        if scaling is not None:
            _write(out_dir, sname, scaling, done)
    return done


def record_one_gpu_step(out_dir: str, base: RunSpec, echo: bool = False,
                        progress: Optional[Callable[[str], None]] = None, done: Optional[dict] = None,
                        suffix_batch: Optional[int] = None) -> dict:
    """Records ``base`` on one GPU with its whole step captured as a CUDA graph (DDP, one
    worker): the GPU's busy time per step, with no host work in it, which the cost model
    (:mod:`ddlab.cost.step_model`) uses to tell a host-bound step from a device-bound one. Written
    as the "graph" variant of the scaling result (``scaling-<framework>-ddp-<model>-graph``,
    one row: 1 worker, with ``-b<suffix_batch>`` added for a batch other than the live
    default); it needs one GPU, not two. Returns ``done`` as :func:`record_paths`."""
    done = {} if done is None else done
    spec = base.with_(launcher="ddp", workers=1, cuda_graph="on")
    name = reference_name("scaling", spec.framework, "ddp", spec.model) + "-graph" + (f"-b{suffix_batch}"
                                                                                    if suffix_batch else "")
    res = _attempt(done, name, lambda: experiments.throughput_scaling(spec, workers=(1,), echo=echo,
                                                                      progress=progress))
    if res is not None:
        _write(out_dir, name, res, done)
    return done


def record_strong(out_dir: str, base: RunSpec, global_batches: Sequence[int], path="shm",
                  echo: bool = False, progress: Optional[Callable[[str], None]] = None,
                  done: Optional[dict] = None) -> dict:
    """Records strong scaling as the field reports ran it (:func:`ddlab.training.experiments.strong_scaling`):
    each of ``global_batches`` on one GPU, then split over ``base.workers`` GPUs over NCCL path
    ``path``, ``base.repeats`` times each. ``path`` may be a list of paths: one experiment then
    runs them all, sharing the one-GPU runs (:func:`ddlab.training.experiments.strong_scaling_paths`),
    and each path gets its file. Written as ``strong-scaling-<framework>-<launcher>-<model>-<path>``,
    again after each global batch (:func:`merge_strong`), so a run cut short keeps the batches it finished.
    A file of that name already in ``out_dir`` (the same JOB run before for other global batches) is
    joined with the new batches (:func:`join_strong`); one that cannot be joined is kept aside as
    ``replaced-<name>.json``. Returns ``done`` as :func:`record_paths`."""
    done = {} if done is None else done
    os.makedirs(out_dir, exist_ok=True)
    paths = [path] if isinstance(path, str) else list(path)
    stem = reference_name("strong-scaling", base.framework, base.launcher, base.model)
    names = {p: f"{stem}-{p}" for p in paths}
    parts = {p: [] for p in paths}
    earlier = {p: _earlier(out_dir, names[p]) for p in paths}
    for g in sorted(set(global_batches)):      # written after each batch, so a run cut short keeps what finished
        got = _attempt(done, "+".join(names.values()), lambda: experiments.strong_scaling_paths(
            base, global_batches=(g,), workers=base.workers, paths=paths, echo=echo, progress=progress))
        if got is None:
            break
        for p in paths:
            parts[p].append(got[p])
            res = merge_strong(parts[p])
            if earlier[p] is not None:
                joined = join_strong(earlier[p], res)
                if joined is None:     # another machine, or a global batch in both: the earlier file is kept aside
                    _set_aside(out_dir, names[p], "holds a recording that cannot be joined with this one")
                    earlier[p] = None
                else:
                    res = joined
            _write(out_dir, names[p], res, done)
    return done


def _earlier(out_dir: str, name: str) -> Optional[ExperimentResult]:
    """The result already saved as ``<name>.json`` in ``out_dir``, or None when there is none. One
    that cannot be read is set aside (:func:`_set_aside`), so the new recording does not overwrite it."""
    path = os.path.join(out_dir, name + ".json")
    if not os.path.exists(path):
        return None
    try:
        return load(path)
    except Exception as exc:  # a cut write or another format: kept aside, named in the log
        _set_aside(out_dir, name, f"cannot be read ({type(exc).__name__}: {exc})")
        return None


def _set_aside(out_dir: str, name: str, why: str) -> None:
    """Keeps ``<name>.json`` as ``replaced-<name>.json`` (:func:`ddlab.base.files.set_aside`) and says
    ``why``, so a recording about to be written in its place does not lose it."""
    src = os.path.join(out_dir, name + ".json")
    dst = files.set_aside(src, "replaced-")
    print(f"{src} {why}: kept as {dst}", flush=True)


def merge_strong(parts: Sequence[ExperimentResult]) -> ExperimentResult:
    """One strong-scaling result from several (each of other global batches, same run description):
    rows in global-batch order, runs in the parts' order, each row's run indices moved to the merged
    list; the provenance of the latest part (by date: the last one, for parts recorded in order), its
    command naming every global batch."""
    rows, runs = [], []
    for part in parts:
        offset = len(runs)
        runs += part.runs
        rows += [dict(r, runs=[i + offset for i in r.get("runs", [])]) for r in part.rows]
    rows.sort(key=lambda r: (r.get("global_batch", 0), r.get("workers", 0)))      # batch order, whatever the parts'
    batches = sorted({g for part in parts for g in part.config.get("global_batches", [])})
    last = max(reversed(parts), key=lambda part: str((part.provenance or {}).get("date", "")))   # a tie: the last
    prov = dict(last.provenance)
    prov["command"] = re.sub(r"global_batches=\[[^\]]*\]", f"global_batches={batches}", prov.get("command", ""))
    return ExperimentResult(last.name, rows, last.source, prov, list(parts[0].notes),
                            dict(parts[0].config, global_batches=batches), runs)


def join_strong(there: ExperimentResult, here: ExperimentResult) -> Optional[ExperimentResult]:
    """Two recordings of one strong-scaling JOB that hold different global batches (a JOB cut short and
    run again for the batches left, e.g. ``--global-batches 32,64,128``) as one result, or None when they
    are not that: another experiment or run description (a config that differs beyond its global
    batches and the order of its repeats), another machine or software
    (:data:`ddlab.system.provenance.SAME_MACHINE`), or a global batch in both. The parts are joined in
    batch order (:func:`merge_strong`, dated by the later), and a note names each part's batches and
    date (and how its repeats ran, where the parts differ: the joined config then has no ``order``);
    every run keeps its own provenance."""
    def batches(r):
        return sorted(r.config.get("global_batches", []))

    def rest(r):                       # the repeats' order may differ: the note names each part's
        return {k: v for k, v in r.config.items() if k not in ("global_batches", "order")}
    if (there.name != here.name or not there.name.startswith("strong-scaling") or rest(there) != rest(here)
            or provenance.differences(there.provenance, here.provenance)
            or not batches(there) or not batches(here) or set(batches(there)) & set(batches(here))):
        return None
    parts = sorted([there, here], key=lambda r: batches(r)[0])
    joined = merge_strong(parts)       # dated by the later part
    orders = {p.config.get("order") for p in parts}
    if len(orders) > 1:                # the config's order and note hold only when every part ran so
        joined.config.pop("order", None)
        joined.notes = [n for n in joined.notes if not n.startswith(INTERLEAVED_NOTE_START)]

    def order_of(part):
        return ("" if len(orders) == 1 else
                ", repeats interleaved" if part.config.get("order") == "interleaved" else ", repeats back to back")

    def when(part):                    # a part joined before is dated by its own note, above
        return ("(the join above)" if any(n.startswith(JOIN_NOTE_START) for n in part.notes)
                else f"recorded {part.provenance.get('date', '?')}")
    said = "; ".join(f"global batch(es) {', '.join(map(str, batches(p)))} {when(p)}{order_of(p)}" for p in parts)
    joined.notes.append(f"{JOIN_NOTE_START} {len(parts)} runs of the same JOB on "
                        f"{provenance.machine_of(joined.provenance)} (each ran global batches the other did not): {said}")
    return joined


JOIN_NOTE_START = "joined from"


def holds_runs(there: ExperimentResult, here: ExperimentResult) -> bool:
    """Whether every run of ``here`` is already in ``there`` (e.g. a part already joined into it)."""
    return bool(here.runs) and all(run in there.runs for run in here.runs)


def record_gpu_set(out_dir: str, sections: Sequence[str] = GPU_SECTIONS,
                   models: Sequence[str] = ("cnn", "wide"), echo: bool = False,
                   progress: Optional[Callable[[str], None]] = None, repeats: int = MIN_REPEATS,
                   timeout: Optional[float] = None, graph: bool = False, **sizes) -> dict:
    """The course's recorded training set, for source_code/reference/experiments/: on 2
    GPUs, for each model and each of DDP and Horovod (PyTorch), the NCCL path comparison
    (which includes the 1-GPU baseline) and the 1 -> 2 scaling taken from it; on 1 GPU, the
    speed options. Every run is the live default (:func:`gpu_spec`) with ``repeats``
    repeats; ``sizes`` (RunSpec fields) change it, for tests only: a recording with other
    sizes no longer matches the live default and says so. ``graph`` adds DDP with
    ``cuda_graph="on"`` as the "-graph" variant.

    ``sections`` ("ddp", "horovod", "perf") run in the order given; the default puts the
    two-GPU comparisons first, because the single-GPU speed options take longest. Each
    result is written to ``out_dir`` as soon as it exists; a failure is reported and the
    rest goes on. Returns {name: ExperimentResult or error text}."""
    for section in sections:
        _check_choice("section", section, GPU_SECTIONS)
    os.makedirs(out_dir, exist_ok=True)
    done: dict = {}
    gpus = frameworks.gpu_count("torch")

    def perf():
        name = reference_name("perf-options", "torch", "none", "cnn")
        if gpus < 1:
            done[name] = "skipped: no GPU visible to torch"
            return
        spec = gpu_spec("cnn", repeats, timeout=timeout, **sizes)
        res = _attempt(done, name, lambda: experiments.performance_options(spec, echo=echo, progress=progress))
        if res is not None:
            _write(out_dir, name, res, done)

    def paths(launcher: str):
        ok, why = frameworks.availability("torch", launcher)
        if ok and gpus < 2:
            ok, why = False, f"needs 2 GPUs, torch sees {gpus}"
        variants = [None, "graph"] if graph and launcher == "ddp" else [None]
        for model in models:
            for variant in variants:
                if not ok:
                    name = reference_name("nccl-paths", "torch", launcher, model) + (f"-{variant}" if variant else "")
                    done[name] = f"skipped: {why}"
                    continue
                base = gpu_spec(model, repeats, launcher=launcher, workers=2, timeout=timeout,
                                cuda_graph="on" if variant else None, **sizes)
                record_paths(out_dir, base, variant, echo, progress, done)

    for section in sections:
        if section == "perf":
            perf()
        else:
            paths(section)
    for model in models:
        pair = {la: done.get(reference_name("nccl-paths", "torch", la, model)) for la in ("ddp", "horovod")}
        if all(isinstance(v, ExperimentResult) for v in pair.values()):
            print("\n" + combine_launchers(pair).table(), flush=True)
    print(summary_table(done), flush=True)
    return done


# ----------------------------------------------------------------------------- the recording scripts' job loop
def failures(done: dict) -> list:
    """The keys of a job's outcomes (``{key: ExperimentResult or a message}``) that failed: a message
    in place of a result, or a result with a failed row."""
    return [k for k, v in done.items() if not isinstance(v, ExperimentResult) or any(r.get("error") for r in v.rows)]


def run_jobs(jobs: Sequence, record: Callable, name: str, say: Callable = print) -> int:
    """Runs each of ``jobs`` through ``record(job)`` (it returns ``(label, {key: result or message})``),
    saying after each what it took and what failed, and at the end how the whole went. Returns the
    exit status of a recording script: 1 when any job had a failure, else 0."""
    import time
    start, failed = time.monotonic(), 0
    for job in jobs:
        t0 = time.monotonic()
        label, done = record(job)
        bad = failures(done)
        failed += bool(bad)
        say(f"== {label}: done in {time.monotonic() - t0:.0f} s" + (f"; with failures: {', '.join(bad)}" if bad else ""))
        for v in done.values():
            if isinstance(v, str):
                say(f"   {v}")
    say(f"\n{name}: finished in {time.monotonic() - start:.0f} s"
        + (f"; {failed} job(s) with failures" if failed else "; no failures"))
    return 1 if failed else 0
