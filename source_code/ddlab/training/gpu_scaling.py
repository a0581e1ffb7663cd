"""Scaling over 1, 2, 4 and 8 GPUs in one experiment, for a machine with more than two GPUs.

:func:`scaling_sweep` runs, in interleaved rounds (:func:`ddlab.training.experiment_kit.interleaved`,
so a drift of the machine spreads over every row), the plain one-GPU run of the model (no wrapper,
one process), the wrapper with one worker (DDP or Horovod, its own row: what the wrapper costs before
any communication), then the wrapper on each larger worker count under each NCCL path:

* ``mode="weak"``: the batch per GPU fixed (the global batch grows with the GPUs);
* ``mode="strong"``: the global batch fixed, split evenly over the GPUs.

Every speedup is images/s over the plain one-GPU run at the same per-GPU batch (weak) or the same
global batch (strong), same model and dtype; efficiency is speedup / GPUs. The plain run is eager, as
the wrapper's runs are (a one-process GPU run would otherwise capture a CUDA graph by default). Each
path's result is an :class:`~ddlab.training.results.ExperimentResult` ("scaling" or
"strong-scaling"); on CPU processes (gloo) only the default path applies.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

from ddlab.system.provenance import run_provenance
from ddlab.training import throughput
from ddlab.training.experiment_kit import config_of, interleaved, interleaved_note, keep_runs
from ddlab.training.results import ExperimentResult, add_speedup, median_run, row_of_repeats
from ddlab.training.runs import ExperimentError, failure_row
from ddlab.training.runspec import RunSpec, RunSpecError, nccl_path_name

MODES = ("weak", "strong")


def worker_counts(gpus: int) -> tuple:
    """The worker counts of a sweep on ``gpus`` GPUs: 1, 2, 4, ... up to ``gpus``, and ``gpus`` itself
    when it is not a power of two (1, 2, 4, 6 on six)."""
    out, w = [1], 2
    while w <= gpus:
        out.append(w)
        w *= 2
    return tuple(out + ([gpus] if gpus > out[-1] else []))
WORKERS = (1, 2, 4, 8)
PLAIN, WRAPPER_ONE = "plain 1 GPU", "wrapper, 1 worker"
Progress = Optional[Callable[[str], None]]


def check(base: RunSpec, workers: Sequence[int], mode: str, paths: Sequence[str],
          global_batch: Optional[int] = None) -> tuple:
    """(worker counts above one, paths, the plain run's batch, {workers: batch per worker}) for a sweep,
    or RunSpecError naming what cannot run: a launcher of one process, a mode, a global batch that does
    not split evenly, an NCCL path on CPU processes."""
    if mode not in MODES:
        raise RunSpecError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if base.launcher == "none":
        raise RunSpecError("launcher 'none' is one process; scale with 'ddp' or 'horovod'")
    counts = sorted({int(w) for w in workers})
    if not counts or counts[0] < 1 or counts[-1] < 2:
        raise RunSpecError(f"name worker counts of at least 1 with one of 2 or more, e.g. 1,2,4,8; got {list(workers)}")
    paths = list(dict.fromkeys(nccl_path_name(p) for p in ([paths] if isinstance(paths, str) else paths)))
    if base.device == "cpu" and paths != ["default"]:
        raise RunSpecError("the NCCL paths apply to GPUs; CPU processes all-reduce with gloo: use path 'default'")
    many = [w for w in counts if w >= 2]
    if mode == "weak":
        return many, paths, base.batch, {w: base.batch for w in many}
    g = int(global_batch or base.batch)
    bad = [w for w in many if g % w or g < w]
    if bad:
        raise RunSpecError(f"global batch {g} does not split evenly over {bad[0]} workers")
    return many, paths, g, {w: g // w for w in many}


def configs(base: RunSpec, workers: Sequence[int], mode: str = "weak", paths: Sequence[str] = ("default",),
            global_batch: Optional[int] = None) -> list:
    """The launches of one round, [(key, spec, train keywords)]: the plain one-GPU run, the wrapper
    with one worker, then each larger worker count under each path (NCCL's log kept on GPUs, so the
    row says which transport NCCL chose)."""
    many, paths, one_batch, per = check(base, workers, mode, paths, global_batch)
    plain = base.with_(launcher="none", workers=1, batch=one_batch, path="default")
    if base.device == "cuda" and base.framework == "torch" and base.cuda_graph is None:
        plain = plain.with_(cuda_graph="off")      # eager, as the wrapper's runs are
    log = dict(env={"NCCL_DEBUG": "INFO"}, keep_log=True) if base.device == "cuda" else {}
    out = [(PLAIN, plain, {}), (WRAPPER_ONE, base.with_(workers=1, batch=one_batch, path="default"), {})]
    out += [((w, p), base.with_(workers=w, batch=per[w], path=p), dict(log)) for w in many for p in paths]
    return out


def planned_launches(workers: Sequence[int], paths: Sequence[str], repeats: int) -> int:
    """Launches of one sweep: (plain + one worker + each larger count on each path) x repeats."""
    return (2 + len([w for w in set(workers) if w >= 2]) * len(paths)) * repeats


def scaling_sweep(base: RunSpec, workers: Sequence[int] = WORKERS, mode: str = "weak",
                  paths: Sequence[str] = ("default",), global_batch: Optional[int] = None, echo: bool = False,
                  progress: Progress = None, partial: Optional[Callable[[dict], None]] = None) -> dict:
    """The sweep of the module docstring, ``base.repeats`` interleaved rounds. Returns {path:
    ExperimentResult}; ``partial(results)`` gets the same after every round but the last (a run cut
    short keeps the rounds it finished). A failed launch is not run again: its row holds the error.
    Raises ExperimentError when every launch failed."""
    cfgs = configs(base, workers, mode, paths, global_batch)
    many, paths, _, _ = check(base, workers, mode, paths, global_batch)
    got, failed = {}, {}

    def results(rounds: int) -> dict:
        return {p: _result(base, mode, many, p, paths, got, failed, rounds) for p in paths}
    interleaved(cfgs, base.repeats, got=got, failed=failed, echo=echo, progress=progress,
                after_round=(lambda done: partial(results(done))) if partial else None)
    if not any(got.values()):
        raise ExperimentError("every launch of the scaling sweep failed: "
                              + "; ".join(f"{k}: {str(e).splitlines()[0]}" for k, e in failed.items()))
    return results(base.repeats)


def _row(key, runs: list, failed: dict, base_ips: Optional[float], all_runs: list, **fields) -> dict:
    """One row: the median of ``runs`` with its speedup over ``base_ips``, or the failure of ``key``."""
    if key in failed or not runs:
        return failure_row(failed[key], **fields) if key in failed else dict(fields, error="not run")
    logs = [r.get("log", "") for r in runs]      # kept in ``got`` for the next round's partial result
    row = add_speedup(row_of_repeats(runs), base_ips)
    idx = keep_runs(all_runs, runs)
    mid = median_run(runs)
    row.pop("log", None)
    row.update(fields, run=idx[mid], runs=idx)
    if row.get("speedup") is not None:
        row["efficiency"] = throughput.scaling_efficiency(row["speedup"], row["workers"])
    if logs[mid]:
        from ddlab.training.experiments import _transport_of
        row.update(_transport_of(logs[mid], runs[mid].get("device", "cuda"), runs[mid].get("backend", "nccl")))
    return row


def _result(base: RunSpec, mode: str, many: list, path: str, paths: list, got: dict, failed: dict,
            rounds: int) -> ExperimentResult:
    all_runs, rows = [], []
    plain_runs = got.get(PLAIN, [])
    base_ips = row_of_repeats(plain_runs)["images_per_s"] if plain_runs and PLAIN not in failed else None
    rows.append(_row(PLAIN, list(plain_runs), failed, base_ips, all_runs, workers=1, launcher="none", path=None))
    rows.append(_row(WRAPPER_ONE, list(got.get(WRAPPER_ONE, [])), failed, base_ips, all_runs, workers=1,
                     launcher=base.launcher, path=None))
    for w in many:
        rows.append(_row((w, path), list(got.get((w, path), [])), failed, base_ips, all_runs, workers=w,
                         launcher=base.launcher, path=path))
    for r in rows:
        r["mode"] = mode
    notes = [f"{mode} scaling: speedup = images/s over the plain one-GPU run (no wrapper, one process) at the "
             + ("same batch per GPU" if mode == "weak" else "same global batch")
             + f"; rows: the plain run, then {base.launcher} on 1 worker (the wrapper's own cost), then "
             + ", ".join(map(str, many)) + " workers; efficiency = speedup / GPUs",
             interleaved_note(rounds, "the plain run, the one-worker wrapper and every worker count on every path")]
    if rounds < base.repeats:
        notes.append(f"partial: {rounds} of {base.repeats} rounds ran")
    if base_ips is None:
        notes.append("the plain one-GPU run failed, so there are no speedups")
    if base.device == "cpu":
        notes.append("CPU processes with gloo: the workers share this machine's cores, so scaling shows the real "
                     "code path, not what GPUs would do")
    others = [p for p in paths if p != path]
    if others:
        notes.append(f"the one-GPU rows are shared with path(s) {', '.join(others)} of the same sweep "
                     "(their own files)")
    name = "scaling" if mode == "weak" else "strong-scaling"
    first = all_runs[0] if all_runs else {}
    global_batches = sorted({r["global_batch"] for r in rows if r.get("global_batch")})
    cfg = config_of(base, first, workers=[1, *many], mode=mode, path=None if base.device == "cpu" else path,
                    paths=list(paths), order="interleaved", rounds=rounds, baseline="plain one-GPU run",
                    baseline_images_per_s=base_ips,
                    **({"global_batches": global_batches[:1], "batch_size": None} if mode == "strong" else {}))
    cfg["repeats"] = base.repeats
    return ExperimentResult(name, rows, "live", run_provenance(
        f"ddlab.training.gpu_scaling.scaling_sweep({base.framework!r}, {base.launcher!r}, model={base.model!r}, "
        f"workers={[1, *many]}, mode={mode!r}, paths={list(paths)})"), notes, cfg, all_runs)
