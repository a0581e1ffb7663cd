"""Record the training experiments on a 2-GPU machine, with the live defaults, repeated.

    python tools/recording/record_experiments.py OUT_DIR [JOB ...] [--repeats 3] [--timeout 240] [--batch N]
        [--global-batches 4,8,16,32,64,128]

JOB is launcher:model (ddp:cnn, ddp:wide, horovod:cnn, horovod:wide; ddp:probe and horovod:probe
time the probe model, one small layer at batch 4, whose step is the fixed cost of a step), launcher:model:graph
(DDP with cuda_graph="on", written with a "-graph" suffix beside the eager recording),
"perf" (one GPU, model cnn, each single-GPU speed option), step:model (one GPU: the
model's step captured as a CUDA graph, the GPU's busy time the cost model uses; written as
scaling-torch-ddp-<model>-graph.json; then ddlab.training.step_profile's step-<model>.json, for
source_code/reference/profiles/), or tune:launcher:model[:path]
(the communication tuning comparison, ddlab.course.tuning.tuning_comparison: the one-GPU untuned
run, then every tuning of ddlab.course.tuning.TUNINGS for the launcher on 2 GPUs over NCCL path
path, default "default"; e.g. tune:ddp:wide, tune:horovod:wide:shm), or strong:launcher:model[:path]
(the field reports' experiment, ddlab.training.experiments.strong_scaling: each global batch
of --global-batches on one GPU, then split over two over NCCL path path, default "shm", i.e.
peer-to-peer off as in the reports; written as strong-scaling-torch-<launcher>-<model>-<path>.json;
e.g. strong:ddp:mlp-small; several paths joined by "+", e.g. strong:ddp:mlp-large:default+socket,
run in one experiment whose rounds run the one-GPU run once for all of them, and each path gets
its file), or plain-baselines (one GPU: the plain one-GPU run, launcher none, of every model,
batch per GPU, precision and CUDA-graph setting of the committed nccl-paths, scaling,
strong-scaling and tuning recordings made on this GPU model, strong scaling at its whole global
batch; ddlab.training.plain_runs, each run the training script's main() in one process so the
imports are paid once; written as plain-baselines-torch.json, where ddlab.training.baseline finds
the speedups' baseline; --dry-run makes it tiny on the CPU). Every other JOB records the plain
one-GPU run beside the wrapper's one-worker run in its own file. Default: ddp:cnn
ddp:wide horovod:cnn horovod:wide.

Every run is ddlab.training.recording.gpu_spec(model): the same run description (batch, steps,
warm-up, precision) a live run takes on GPUs (ddlab.training.runspec.RunSpec.for_device("cuda")),
so a recording and a live run are the same experiment; each configuration runs --repeats
times (at least 3) and the result keeps every value, the median and the min-max. The
machine is named by its hardware in the results' provenance (e.g. "2x NVIDIA H200, NV18").

--batch N runs the launcher:model and step:model jobs at N images per GPU instead of the live
default (the batch sweep of notebook 10's first case; step:model at a strong run's share gives the GPU's
busy time there, which ddlab.cost.validation counts as a candidate input) and adds "-bN" to their names.

Writes OUT_DIR/nccl-paths-torch-<launcher>-<model>[-graph][-bN].json and, for an eager
comparison at the default batch, OUT_DIR/scaling-torch-<launcher>-<model>.json; a tune JOB writes
OUT_DIR/tuning-torch-<launcher>-<model>-<path>.json (all ready for
source_code/reference/experiments/), each as soon as it is complete (a tune JOB, whose repeats
are interleaved, also after each round, with a note that says it is partial), so a run cut short
keeps what finished. A tune JOB run again resumes a partial comparison of the same run on the same
GPUs and software (OUT_DIR's, else the committed one; partial_tuning) and runs the rounds left. Every launch prints a start and an end line (seconds, images/s, the
worker's phase times); a launch is killed after --timeout seconds and its row shows where
each worker was stuck.

Time: one comparison is (2 + 3 paths) x repeats launches (the plain one-GPU run, the one-worker
run, each path), 15 with 3 repeats; at tens of seconds a launch (start-up, data, warm-up, the
timed steps, the test pass), plan about 12 minutes a JOB. The wide model over sockets is the
slowest path (about 0.1 s a step). A tune JOB is (2 + 9 DDP or 8 Horovod tunings) x repeats
launches, 33 or 30 with 3 repeats, each about as long as a comparison's: plan a run of about 11
minutes for each tune JOB, and a second one where launches are slower (it resumes). A strong JOB
is (2 + paths) x repeats launches per global batch (the plain run and the one-worker run, then
each path). The plain-baselines JOB is one process: its imports once, then each configuration the
recordings of this GPU model need (ddlab.training.plain_runs.configs_from_recordings) x 3 repeats of a
few seconds each.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "source_code"))

from ddlab.recording import resume as partial_rounds, sets as recording_sets  # noqa: E402
from ddlab.training import plain_runs, recording, runs, step_profile  # noqa: E402
from ddlab.course import field_reports, tuning
from ddlab.system import frameworks  # noqa: E402
from ddlab.system.nccl import PATHS  # noqa: E402
from ddlab.training.runspec import MODELS, TRAINABLE, RunSpec  # noqa: E402

DEFAULT_JOBS = ["ddp:cnn", "ddp:wide", "horovod:cnn", "horovod:wide"]
PLAIN_JOB = "plain-baselines"


def record_plain(out_dir: str, repeats: int, dry_run: bool) -> dict:
    """The plain one-GPU runs the committed recordings divide their speedups by (ddlab.training.plain_runs),
    on this GPU: those of the recordings made on this GPU model (all of them where none was). With
    ``dry_run``: the same code path on the CPU, tiny. Written as OUT_DIR/plain-baselines-torch.json."""
    gpu = None if dry_run else plain_runs.this_gpu_model()
    specs = plain_runs.configs_from_recordings(gpu) or plain_runs.configs_from_recordings()
    if dry_run:
        specs = plain_runs.dry_specs(specs)
    say(f"\n== {PLAIN_JOB}: {len(specs)} plain one-GPU runs x {repeats} repeats, one process"
        + (" (dry run: tiny, on the CPU)" if dry_run else f" on {gpu or 'this GPU'}"))
    name = plain_runs.NAME
    try:
        res = plain_runs.record(specs, repeats, progress=say)
    except Exception as exc:  # reported in the summary
        return {name: f"{type(exc).__name__}: {exc}"}
    os.makedirs(out_dir, exist_ok=True)
    recording.save(res, os.path.join(out_dir, name + ".json"))
    say("\n" + res.table() + "\n")
    return {name: res}


def say(line: str) -> None:
    print(line, flush=True)


def _with_path(job: str, parts: list, launchers, default_path: str, examples: str) -> tuple:
    """A KIND:launcher:model[:path] JOB (strong, tune) as (launcher, model, (KIND, path))."""
    kind = parts[0]
    paths = parts[3].split("+") if len(parts) == 4 else [default_path]
    several = kind == "strong"        # strong:launcher:model:default+socket shares the one-GPU runs
    if len(parts) not in (3, 4) or parts[1] not in launchers or parts[2] not in MODELS \
            or any(p not in PATHS for p in paths) or len(set(paths)) != len(paths) or (len(paths) > 1 and not several):
        raise argparse.ArgumentTypeError(f"bad job {job!r}: expected {kind}:launcher:model[:path], e.g. {examples} "
                                         f"(launcher {' or '.join(launchers)}; model one of {', '.join(MODELS)}; "
                                         f"path one of {', '.join(PATHS)}"
                                         + ("; several joined by +, each once" if several else "") + ")")
    return parts[1], parts[2], (kind, "+".join(paths))


def parse_job(job: str) -> tuple:
    """(launcher, model, variant): variant False, True (graph) or, for a strong or tune JOB, (KIND, path)."""
    if job == "perf":
        return ("perf", "cnn", False)
    if job == PLAIN_JOB:
        return (PLAIN_JOB, "all", False)
    parts = job.split(":")
    if parts[0] == "step":
        if len(parts) != 2 or parts[1] not in MODELS:
            raise argparse.ArgumentTypeError(f"bad job {job!r}: expected step:model, e.g. step:mlp-small "
                                             f"(model one of {', '.join(MODELS)})")
        return "step", parts[1], False
    if parts[0] == "strong":
        return _with_path(job, parts, ("ddp", "horovod"), "shm",
                          "strong:ddp:mlp-small or strong:horovod:mlp-large:default")
    if parts[0] == "tune":
        return _with_path(job, parts, tuning.LAUNCHERS, "default", "tune:ddp:wide or tune:horovod:wide:shm")
    if len(parts) not in (2, 3) or parts[0] not in ("ddp", "horovod") or parts[1] not in TRAINABLE \
            or parts[2:] not in ([], ["graph"]) or (parts[2:] == ["graph"] and parts[0] != "ddp"):
        raise argparse.ArgumentTypeError(f"bad job {job!r}: expected perf or launcher:model[:graph], e.g. ddp:cnn "
                                         f"or ddp:cnn:graph (launcher ddp or horovod, :graph only with ddp; model "
                                         f"one of {', '.join(TRAINABLE)})")
    return parts[0], parts[1], parts[2:] == ["graph"]


def record_tuning(out_dir: str, launcher: str, model: str, path: str, repeats: int, timeout, echo: bool) -> dict:
    """The tuning comparison with the live GPU defaults, written to OUT_DIR as soon as complete."""
    name = tuning.reference_name(launcher, model, path)
    ok, why = frameworks.availability("torch", launcher)
    if not ok:
        return {name: f"skipped: {why}"}
    base = recording.gpu_spec(model, repeats, launcher=launcher, workers=2, timeout=timeout)
    say(f"\n== tune:{launcher}:{model}:{path}: {len(tuning.TUNINGS[launcher])} tunings + the 1-GPU baseline, "
        f"{base.steps} steps ({base.warmup_steps} warm-up), batch {base.batch}/GPU, {base.precision}, "
        f"{base.repeats} repeats")
    os.makedirs(out_dir, exist_ok=True)
    target = os.path.join(out_dir, name + ".json")
    resume = partial_tuning(target, launcher, model, path, base)
    try:     # saved after each round too (a note says it is partial), so a run cut short keeps what finished
        res = tuning.tuning_comparison(base=base, path=path, echo=echo, progress=say,
                                       resume=partial_rounds.from_partial(resume) if resume is not None else None,
                                       partial=lambda part: recording.save(part, target))
    except Exception as exc:  # reported in the summary; the next JOB still runs
        return {name: f"{type(exc).__name__}: {exc}"}
    recording.save(res, target)
    say("\n" + res.table() + "\n")
    return {name: res}


def partial_tuning(target: str, launcher: str, model: str, path: str, base):
    """The partial tuning comparison to continue, or None: the one at ``target`` (a run cut short in
    this output folder), else the committed recording when it is partial; each only when
    ``ddlab.recording.resume.problem`` finds nothing against it (what it finds is printed: a fresh start)."""
    from ddlab.base.reference import ReferenceMissing
    tunings = tuning.names(launcher)
    for where, load in ((target, lambda: recording.load(target)),
                        ("the committed recording", lambda: tuning.recorded(launcher, model, path))):
        try:
            found = load()
        except (ReferenceMissing, OSError, ValueError):
            continue
        why = partial_rounds.problem(found, base.with_(path=path), tunings)
        if why is None:
            say(f"   resuming {where}: {found.config['rounds']} of {base.repeats} rounds ran "
                f"({found.provenance.get('date')})")
            return found
        say(f"   not resuming {where}: {why}")
    return None


def _batches(text: str) -> tuple:
    try:
        out = tuple(int(v) for v in text.split(","))
    except ValueError:
        out = ()
    if not out or min(out) < 2:
        raise argparse.ArgumentTypeError(f"expected global batches like 4,32,128 (each at least 2), got {text!r}")
    return out


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", help="folder for the result JSON files")
    p.add_argument("jobs", nargs="*", type=parse_job, help=f"perf, step:model, launcher:model[:graph] or "
                   f"tune:launcher:model[:path] (default: {' '.join(DEFAULT_JOBS)})")
    p.add_argument("--repeats", type=int, default=recording.MIN_REPEATS,
                   help=f"runs per configuration (at least {recording.MIN_REPEATS})")
    p.add_argument("--timeout", type=float, help="seconds per launch before it is killed (default: the live one)")
    p.add_argument("--echo", action="store_true", help="show the workers' output")
    p.add_argument("--batch", type=int, help="launcher:model jobs: this batch per GPU instead of the live default; "
                   "the result is written with the variant suffix -b<BATCH> (the batch sweep of case 1)")
    p.add_argument("--dry-run", action="store_true", help=f"{PLAIN_JOB} and launcher:model JOBs: the same runs "
                   "made tiny, on CPU processes (gloo: the default path only), written under OUT_DIR/dry-run/ (which "
                   "adopt_results.py does not read): the code path, in minutes, with no GPU")
    p.add_argument("--global-batches", type=_batches, default=field_reports.REPORT_GLOBAL_BATCHES,
                   help="strong JOBs: the global batches, comma-separated (default: the reports' "
                        f"{','.join(map(str, field_reports.REPORT_GLOBAL_BATCHES))})")
    return p


def checked_args(p: argparse.ArgumentParser, argv) -> argparse.Namespace:
    """The parsed arguments, each checked before anything is measured (one message, then exit 2)."""
    a = p.parse_args(argv)
    why = recording.cannot_save()      # asked before any measurement: nothing measured is then lost
    if why:
        p.error(why)
    if a.batch is not None and a.batch < 1:
        p.error("--batch must be a whole number of images per GPU, at least 1")
    if a.repeats < recording.MIN_REPEATS:
        p.error(f"--repeats must be at least {recording.MIN_REPEATS}: a recording shows a median and a spread")
    a.jobs = a.jobs or [parse_job(j) for j in DEFAULT_JOBS]
    if a.dry_run and any(j[0] != PLAIN_JOB and (j[0] not in ("ddp", "horovod") or j[2] is not False) for j in a.jobs):
        p.error("--dry-run is for plain-baselines and launcher:model JOBs")
    return a


def run_job(a: argparse.Namespace, launcher: str, model, graph) -> tuple:
    """(the JOB's name, {file name: its result, or why it has none}) for one JOB."""
    job = launcher if launcher in ("perf", PLAIN_JOB) else f"{launcher}:{model}" + (":graph" if graph is True else "")
    if launcher == PLAIN_JOB:
        return PLAIN_JOB, record_plain(a.out, a.repeats, a.dry_run)
    if isinstance(graph, tuple) and graph[0] == "strong":
        job = f"strong:{job}:{graph[1]}"
        ok, why = frameworks.availability("torch", launcher)
        base = recording.gpu_spec(model, a.repeats, launcher=launcher, workers=2, timeout=a.timeout)
        say(f"\n== {job}: global batches {','.join(map(str, a.global_batches))} on 1 GPU, then split over 2, "
            f"{base.steps} steps ({base.warmup_steps} warm-up), {base.precision}, {base.repeats} repeats")
        paths = graph[1].split("+")
        return job, (recording_sets.record_strong(a.out, base, a.global_batches, paths, a.echo, say) if ok else
                     {f"strong-scaling-torch-{launcher}-{model}-{p}": f"skipped: {why}" for p in paths})
    if isinstance(graph, tuple):
        job = f"tune:{job}:{graph[1]}"
        return job, record_tuning(a.out, launcher, model, graph[1], a.repeats, a.timeout, a.echo)
    if launcher == "step":
        base = recording.gpu_spec(model, a.repeats, launcher="ddp", workers=1, timeout=a.timeout, batch=a.batch)
        say(f"\n== {job}: one GPU, CUDA graph, {base.steps} steps ({base.warmup_steps} warm-up), "
            f"batch {base.batch}/GPU, {base.precision}, {base.repeats} repeats")
        done = recording_sets.record_one_gpu_step(a.out, base, a.echo, say, suffix_batch=a.batch)
        try:   # and where that step's time goes (ddlab.training.step_profile), for the cost model
            step_profile.record(a.out, [model], base.batch)
        except Exception as exc:  # reported; the next JOB still runs
            done[step_profile.reference_name(model, base.batch)] = f"{type(exc).__name__}: {exc}"
        return job, done
    if launcher == "perf":
        return job, recording_sets.record_gpu_set(a.out, sections=("perf",), repeats=a.repeats, timeout=a.timeout,
                                                  echo=a.echo, progress=say)
    # the file's variant: a dry run writes the same names as the GPU run (no graph: --dry-run refuses it)
    variant = "-".join(v for v in ("graph" if graph else "", f"b{a.batch}" if a.batch else "") if v) or None
    if a.dry_run:       # tiny, on CPU processes: gloo all-reduces, so only the default path runs
        base = RunSpec.for_device("cpu", model, launcher=launcher, workers=2, repeats=a.repeats, steps=4,
                                  warmup_steps=1, test_samples=100, timeout=a.timeout, batch=a.batch)
        say(f"\n== {job} (dry run): CPU processes, {base.steps} steps, batch {base.batch}, {base.repeats} repeats")
        return job, recording_sets.record_paths(a.out, base, variant, a.echo, say)
    base = recording.gpu_spec(model, a.repeats, launcher=launcher, workers=2, timeout=a.timeout,
                              cuda_graph="on" if graph else None, batch=a.batch)
    say(f"\n== {job}: {base.steps} steps ({base.warmup_steps} warm-up), batch {base.batch}/GPU, "
        f"{base.precision}, {base.repeats} repeats")
    return job, recording_sets.record_paths(a.out, base, variant, a.echo, say)


def main(argv=None) -> int:
    a = checked_args(parser(), argv)
    machine = recording.use_hardware_label()
    gpus = frameworks.gpu_count("torch")
    say(f"record_experiments: {len(a.jobs)} job(s), {a.repeats} repeats each, on {machine}; torch sees {gpus} GPU(s)")
    need = 1 if all(j[0] in ("perf", "step", PLAIN_JOB) for j in a.jobs) else 2
    if a.dry_run:
        need, a.out = 0, os.path.join(a.out, "dry-run")
    if gpus < need:
        say(f"record_experiments: error: these jobs need {need} GPU(s) visible to torch")
        return 2
    return recording_sets.run_jobs(a.jobs, lambda job: run_job(a, *job), "record_experiments", say)

if __name__ == "__main__":
    sys.exit(main())
