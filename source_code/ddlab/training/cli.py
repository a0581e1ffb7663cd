"""The training commands: ``ddlab train`` (one run, :func:`ddlab.training.runs.train`) and ``ddlab
experiment`` (a named experiment, :func:`ddlab.training.experiments.run_or_load`)."""
from __future__ import annotations

import argparse
import json
import sys

from ddlab.measure import launch
from ddlab.base import files, reference
from ddlab.training import recording
from ddlab.training.experiments import EXPERIMENTS, run_experiment, run_or_load
from ddlab.training.runs import ExperimentError, spec_for, train
from ddlab.system.frameworks import FRAMEWORKS
from ddlab.training.runspec import MODELS, RunSpecError


def cli_train(argv: list) -> int:
    """``ddlab train``: one run; arguments it does not know go to the training script."""
    p = argparse.ArgumentParser(prog="ddlab train", description="One Fashion-MNIST training run (through "
                                "ddlab.measure.launch, with a timeout). Unknown options go to the training script, "
                                "e.g. --cuda-graph off, --compile default, --lr 0.002, --scale-lr.")
    p.add_argument("--framework", choices=FRAMEWORKS, default="torch")
    p.add_argument("--launcher", choices=("none", "ddp", "horovod"), default="none")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--model", choices=MODELS, default="cnn")
    p.add_argument("--batch-size", type=int)
    p.add_argument("--steps", type=int)
    p.add_argument("--warmup-steps", type=int)
    p.add_argument("--precision", choices=("fp32", "bf16"))
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--test-samples", type=int)
    p.add_argument("--timeout", type=float, help="seconds (default: 240 on GPUs, 600 on CPU)")
    p.add_argument("--json", action="store_true", help="print only the result as JSON")
    p.add_argument("--out", help="also write the result JSON to this file")
    a, extra = p.parse_known_args(argv)
    try:
        spec = spec_for(a.device, a.framework, a.model, a.workers, launcher=a.launcher, batch=a.batch_size,
                        steps=a.steps, warmup_steps=a.warmup_steps, precision=a.precision,
                        test_samples=a.test_samples, timeout=a.timeout, extra_args=tuple(extra))
        result = train(spec, echo=not a.json)
    except (RunSpecError, ExperimentError, launch.LaunchError) as exc:
        print(f"ddlab train: {exc}", file=sys.stderr)
        return 1
    if a.out:                      # whole or not at all; a diverged loss (NaN, not JSON) is written as null
        files.write_json(a.out, files.nan_to_null(result), what="training result")
    if a.json:
        print(json.dumps(result, indent=1))
    return 0


def _int_list(text: str) -> list:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers, got {text!r}") from None
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"expected positive whole numbers, got {text!r}")
    return out


def cli_experiment(argv: list) -> int:
    """``ddlab experiment scaling|nccl-paths|perf-options``."""
    p = argparse.ArgumentParser(prog="ddlab experiment", description="Named training experiments: live when "
                                "this machine can, else the recorded result (--source).")
    p.add_argument("name", choices=EXPERIMENTS)
    p.add_argument("--framework", choices=FRAMEWORKS, default="torch")
    p.add_argument("--launcher", choices=("ddp", "horovod", "none"), default="ddp")
    p.add_argument("--model", choices=MODELS, default="cnn")
    p.add_argument("--workers", type=_int_list, help="scaling: e.g. 1,2 (default); nccl-paths: e.g. 2 (default)")
    p.add_argument("--paths", help="nccl-paths: comma-separated, default default,shm,socket")
    p.add_argument("--batch-size", type=int)
    p.add_argument("--steps", type=int)
    p.add_argument("--warmup-steps", type=int)
    p.add_argument("--precision", choices=("fp32", "bf16"))
    p.add_argument("--repeats", type=int, help="run each configuration this many times (median and min-max; "
                                               "default: 3 for a live run on GPUs, 1 for a small run on CPU "
                                               "processes)")
    p.add_argument("--cuda-graph", action="store_true",
                   help="PyTorch scaling/nccl-paths: capture each step as a CUDA graph (opt-in for DDP); "
                        "with a recorded result, the one recorded so")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="with --source live: where to run (auto: GPUs if there are enough)")
    p.add_argument("--source", choices=("auto", "live", "recorded"), default="auto")
    p.add_argument("--no-cpu-run", action="store_true", help="with no GPU, do not add the small CPU run")
    p.add_argument("--timeout", type=float)
    p.add_argument("--echo", action="store_true", help="show the workers' output while they run")
    p.add_argument("--json", action="store_true", help="print the result as JSON instead of a table")
    p.add_argument("--out", help="write the result JSON to this file")
    p.add_argument("--save-reference", metavar="NAME",
                   help="record a live result as source_code/reference/experiments/NAME.json")
    a = p.parse_args(argv)
    kw = {k: v for k, v in (("batch", a.batch_size), ("steps", a.steps), ("warmup_steps", a.warmup_steps),
                            ("timeout", a.timeout), ("repeats", a.repeats)) if v is not None}
    if a.name != "perf-options" and a.precision:
        kw["precision"] = a.precision
    if a.echo:
        kw["echo"] = True
    if a.paths:
        if a.name != "nccl-paths":
            p.error("--paths is for nccl-paths")
        kw["paths"] = [x.strip() for x in a.paths.split(",") if x.strip()]
    workers = a.workers
    if a.name == "nccl-paths" and workers:
        if len(workers) != 1:
            p.error("nccl-paths takes one worker count, e.g. --workers 2")
        workers = workers[0]
    try:
        if a.source == "live" and a.device != "auto":
            if a.cuda_graph:
                kw["cuda_graph"] = "on"
            res = run_experiment(a.name, a.framework, "none" if a.name == "perf-options" else a.launcher, a.model, workers,
                       a.device, **kw)
        else:
            res = run_or_load(a.name, a.framework, a.launcher, a.model, workers, a.source,
                              cpu_run=not a.no_cpu_run, cuda_graph=a.cuda_graph, **kw)
        if a.save_reference:
            print(f"recorded as {recording.save_reference(res, a.save_reference)}", file=sys.stderr)
    except (RunSpecError, ExperimentError, launch.LaunchError, reference.ReferenceMissing) as exc:
        print(f"ddlab experiment: {exc}", file=sys.stderr)
        return 1
    if a.out:
        recording.save(res, a.out)
    print(json.dumps(res.to_dict(), indent=1) if a.json else res.table())
    return 0
