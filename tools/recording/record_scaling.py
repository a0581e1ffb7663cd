"""Record scaling over 1, 2, 4 (and 8) GPUs on a machine with more than two, over the plain one-GPU run.

    python tools/recording/record_scaling.py OUT_DIR JOB ... [--workers 1,2,4,8] [--paths default,shm,socket]
        [--repeats 3] [--timeout S] [--global-batch N] [--tag NAME] [--dry-run]

JOB is launcher:model:mode, e.g. ddp:cnn:weak, horovod:mlp-large:strong (launcher ddp or horovod; mode
weak: the batch per GPU fixed; strong: the global batch fixed, --global-batch, default the live batch
per GPU, split evenly). Each JOB is ddlab.training.gpu_scaling.scaling_sweep: in each of --repeats
interleaved rounds, the plain one-GPU run (no wrapper), the wrapper with one worker, then every worker
count on every path; speedup = images/s over the plain run. Every run is the live GPU default of the
model (ddlab.training.recording.gpu_spec). --workers defaults to 1, 2, 4, ... up to the GPUs torch sees.

Writes OUT_DIR/scaling-torch-<launcher>-<model>-<mode>-<path>-<TAG>.json per path (TAG: the machine's
file name, e.g. 8xh200-nv18, from $NAME or ddlab doctor --slug), after every round (a note says when it
is partial) and when complete; adopt_results.py takes them to source_code/reference/experiments/.
--dry-run prints each launch's command and the launch count, and runs nothing.

Time: (2 + worker counts above one x paths) x repeats launches a JOB; with 1,2,4,8, three paths and
3 repeats, 33 launches of 15-30 s (more processes start more slowly): about 10-15 minutes a JOB.
"""
import argparse
import os
import shlex
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "source_code"))

from ddlab.measure import launch  # noqa: E402
from ddlab.system import frameworks  # noqa: E402
from ddlab.system.nccl import PATHS  # noqa: E402
from ddlab.recording import sets as recording_sets  # noqa: E402
from ddlab.training import gpu_scaling, recording  # noqa: E402
from ddlab.training.runspec import MODELS, RunSpecError, nccl_path_env  # noqa: E402


def say(line: str) -> None:
    print(line, flush=True)


def parse_job(job: str) -> tuple:
    parts = job.split(":")
    if len(parts) != 3 or parts[0] not in ("ddp", "horovod") or parts[1] not in MODELS \
            or parts[2] not in gpu_scaling.MODES:
        raise argparse.ArgumentTypeError(f"bad job {job!r}: expected launcher:model:mode, e.g. ddp:cnn:weak "
                                         f"(launcher ddp or horovod; model one of {', '.join(MODELS)}; mode "
                                         f"{' or '.join(gpu_scaling.MODES)})")
    return tuple(parts)


def _ints(text: str) -> tuple:
    try:
        out = tuple(int(v) for v in text.split(","))
    except ValueError:
        out = ()
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"expected worker counts like 1,2,4,8, got {text!r}")
    return out


def _paths(text: str) -> tuple:
    out = tuple(p.strip() for p in text.split(",") if p.strip())
    bad = [p for p in out if p not in PATHS]
    if not out or bad:
        raise argparse.ArgumentTypeError(f"expected NCCL paths from {', '.join(PATHS)}, got {text!r}")
    return out


def file_name(launcher: str, model: str, mode: str, path: str, tag: str) -> str:
    return f"{recording.reference_name('scaling', 'torch', launcher, model)}-{mode}-{path}-{tag}"


def commands(base, workers, mode, paths, global_batch) -> list:
    """Each launch of one round as a copyable line (environment, launcher, script, flags)."""
    lines = []
    for _, spec, kw in gpu_scaling.configs(base, workers, mode, paths, global_batch):
        env = nccl_path_env(spec.path, kw.get("env")) if spec.workers > 1 else dict(kw.get("env") or {})
        shown = " ".join(f"{k}={v}" for k, v in sorted(env.items()) if v is not None)
        cmd = launch.command_for(spec.process_launcher, spec.workers, spec.script_args(), python="python3")
        lines.append((shown + " " if shown else "") + shlex.join(cmd))
    return lines


def record_job(out: str, job: tuple, a, tag: str) -> dict:
    launcher, model, mode = job
    base = recording.gpu_spec(model, a.repeats, launcher=launcher, timeout=a.timeout)
    if a.device == "cpu":
        base = base.with_(device="cpu", precision="fp32", batch=a.cpu_batch or 16, steps=6, warmup_steps=2,
                          test_samples=500)
    paths = ("default",) if base.device == "cpu" else a.paths
    names = {p: file_name(launcher, model, mode, p, tag) for p in paths}
    n = gpu_scaling.planned_launches(a.workers, paths, base.repeats)
    say(f"\n== {':'.join(job)}: workers {','.join(map(str, a.workers))}, paths {','.join(paths)}, "
        f"batch {base.batch}/GPU{'' if mode == 'weak' else f', global batch {a.global_batch or base.batch}'}, "
        f"{base.precision}, {base.repeats} interleaved rounds: {n} launches")
    if a.dry_run:
        for line in commands(base, a.workers, mode, paths, a.global_batch):
            say("   " + line)
        return {}
    ok, why = frameworks.availability("torch", launcher)
    if not ok:
        return {name: f"skipped: {why}" for name in names.values()}
    os.makedirs(out, exist_ok=True)

    def save(results):
        for p, res in results.items():
            recording.save(res, os.path.join(out, names[p] + ".json"))
    try:
        got = gpu_scaling.scaling_sweep(base, a.workers, mode, paths, a.global_batch, echo=a.echo, progress=say,
                                        partial=save)
    except Exception as exc:  # reported in the summary; the next JOB still runs
        return {"+".join(names.values()): f"{type(exc).__name__}: {exc}"}
    save(got)
    for res in got.values():
        say("\n" + res.table())
    return {names[p]: res for p, res in got.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", help="folder for the result JSON files")
    p.add_argument("jobs", nargs="+", type=parse_job, help="launcher:model:mode, e.g. ddp:cnn:weak")
    p.add_argument("--workers", type=_ints, help="worker counts (default 1,2,4,... up to the GPUs torch sees)")
    p.add_argument("--paths", type=_paths, default=("default", "shm", "socket"), help="NCCL paths (GPUs only)")
    p.add_argument("--repeats", type=int, default=recording.MIN_REPEATS, help="interleaved rounds (at least 3)")
    p.add_argument("--timeout", type=float, help="seconds per launch before it is killed")
    p.add_argument("--global-batch", type=int, help="strong JOBs: the global batch (default the live batch/GPU)")
    p.add_argument("--tag", help="the machine in the file names (default $NAME, else ddlab doctor --slug)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="cpu: a small run on CPU processes (gloo), to try the script without GPUs")
    p.add_argument("--cpu-batch", type=int, help=argparse.SUPPRESS)
    p.add_argument("--echo", action="store_true", help="show the workers' output")
    p.add_argument("--dry-run", action="store_true", help="print each launch's command; run nothing")
    a = p.parse_args(argv)
    if a.repeats < recording.MIN_REPEATS and a.device == "cuda":
        p.error(f"--repeats must be at least {recording.MIN_REPEATS}: a recording shows a median and a spread")
    why = recording.cannot_save()
    if why and not a.dry_run:
        p.error(why)
    gpus = frameworks.gpu_count("torch")
    a.workers = a.workers or gpu_scaling.worker_counts(gpus if a.device == "cuda" else 4)
    if a.device == "cuda" and max(a.workers) > gpus and not a.dry_run:
        say(f"record_scaling: error: --workers {','.join(map(str, a.workers))} needs {max(a.workers)} GPUs; "
            f"torch sees {gpus}")
        return 2
    tag = a.tag or os.environ.get("NAME") or ("dry-run" if a.dry_run else "")
    if not tag:
        from ddlab.system.machine_name import this_machine
        tag = this_machine()[1]
    if not a.dry_run:
        say(f"record_scaling: on {recording.use_hardware_label()}; torch sees {gpus} GPU(s); files tagged {tag}")
    def record(job):
        try:
            return ":".join(job), record_job(a.out, job, a, tag)
        except RunSpecError as exc:
            return ":".join(job), {":".join(job): f"RunSpecError: {exc}"}
    return recording_sets.run_jobs(a.jobs, record, "record_scaling", say)

if __name__ == "__main__":
    sys.exit(main())
