"""Record the NCCL path comparison (DDP and Horovod, cnn and wide) on a 2-GPU machine.

    python tools/recording/gpu_nccl_paths.py OUT_DIR [JOB ...] [--steps-cnn 200] [--steps-wide 80] [--timeout 90]

JOB is launcher:model (default: ddp:cnn ddp:wide horovod:wide horovod:cnn). A third part
":graph" (e.g. ddp:cnn:graph) adds --cuda-graph on (DDP's CUDA-graph capture is opt-in);
its result is written with a "-graph" suffix, beside the eager reference, never over it.

Every run prints a line when it starts and when it ends (seconds, images/s, and the
worker's phase times); each comparison is written to OUT_DIR as soon as it is complete,
so a call cut short keeps what finished. A run that times out is killed after --timeout
seconds and its row shows where each worker was stuck (Python tracebacks the workers print
on SIGTERM). The provenance names the machine by $DDLAB_MACHINE, by default its hardware
(ddlab.hardware.machine_label, e.g. "2x NVIDIA H200, NV18").
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "source_code"))

from ddlab import experiments, hardware  # noqa: E402

DEFAULT_JOBS = ["ddp:cnn", "ddp:wide", "horovod:wide", "horovod:cnn"]


def say(line: str) -> None:
    print(line, flush=True)


def parse_job(job: str) -> tuple:
    parts = job.split(":")
    if len(parts) not in (2, 3) or parts[0] not in ("ddp", "horovod") or parts[1] not in experiments.MODELS \
            or parts[2:] not in ([], ["graph"]) or (parts[2:] == ["graph"] and parts[0] != "ddp"):
        raise argparse.ArgumentTypeError(f"bad job {job!r}: expected launcher:model[:graph], e.g. ddp:cnn or "
                                         f"ddp:cnn:graph (launcher ddp or horovod, :graph only with ddp; model one of "
                                         f"{', '.join(experiments.MODELS)})")
    return parts[0], parts[1], parts[2:] == ["graph"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", help="folder for the result JSON files")
    p.add_argument("jobs", nargs="*", type=parse_job,
                   help=f"launcher:model[:graph] (default: {' '.join(DEFAULT_JOBS)})")
    p.add_argument("--steps-cnn", type=int, default=200, help="steps per cnn run, warm-up included")
    p.add_argument("--warmup-cnn", type=int, default=30)
    p.add_argument("--steps-wide", type=int, default=80, help="steps per wide run, warm-up included")
    p.add_argument("--warmup-wide", type=int, default=20)
    p.add_argument("--timeout", type=float, default=90.0, help="seconds per launch before it is killed")
    p.add_argument("--paths", default="default,shm,socket", help="comma-separated NCCL paths")
    a = p.parse_args(argv)
    jobs = a.jobs or [parse_job(j) for j in DEFAULT_JOBS]
    paths = [x.strip() for x in a.paths.split(",") if x.strip()]
    os.makedirs(a.out, exist_ok=True)
    start = time.monotonic()
    gpus = experiments.gpu_count("torch")
    say(f"gpu_nccl_paths: {len(jobs)} comparison(s), each 1 + {len(paths)} launches, timeout {a.timeout:.0f} s "
        f"per launch; torch sees {gpus} GPU(s)")
    if gpus < 2:
        say("gpu_nccl_paths: error: the NCCL path comparison needs 2 GPUs visible to torch")
        return 2
    if not os.environ.get("DDLAB_MACHINE"):
        os.environ["DDLAB_MACHINE"] = hardware.this_machine()[0]
    say(f"gpu_nccl_paths: machine {os.environ['DDLAB_MACHINE']}")
    failed = 0
    for launcher, model, graph in jobs:
        steps, warm = (a.steps_cnn, a.warmup_cnn) if model != "wide" else (a.steps_wide, a.warmup_wide)
        job = f"{launcher}:{model}" + (":graph" if graph else "")
        t0 = time.monotonic()
        say(f"\n== {job}: {steps} steps ({warm} warm-up) per run, paths {', '.join(paths)}")
        try:
            base = experiments.RunSpec.for_device("cuda", model, launcher=launcher, workers=2, steps=steps,
                                                  warmup_steps=warm, timeout=a.timeout,
                                                  cuda_graph="on" if graph else None)
            res = experiments.nccl_path_comparison(base, paths=paths, progress=say)
        except Exception as exc:  # reported; the next comparison still runs
            failed += 1
            say(f"== {job}: FAILED after {time.monotonic() - t0:.0f} s: {type(exc).__name__}: {exc}")
            continue
        name = experiments.reference_name("nccl-paths", "torch", launcher, model) + ("-graph" if graph else "")
        path = res.save(os.path.join(a.out, name + ".json"))
        say(f"\n== {job}: done in {time.monotonic() - t0:.0f} s, written to {path}\n{res.table()}")
        for row in res.rows:
            if row.get("hang_traceback"):
                say(f"-- path {row['path']} timed out; where the workers were:\n{row['hang_traceback']}")
        failed += any(r.get("error") for r in res.rows)
    say(f"\ngpu_nccl_paths: finished in {time.monotonic() - start:.0f} s"
        + (f"; {failed} comparison(s) with failures" if failed else "; no failures"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
