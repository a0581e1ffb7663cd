"""What the two training scripts share: their common flags, their checks, the step plan,
the per-rank seed, the printed lines (:class:`ProgressLog` paces the step lines) and the
result JSON.

``source_code/train/fmnist_torch.py`` and ``fmnist_keras.py`` run the same experiment in two
frameworks, so everything here is framework-free: no torch, no TensorFlow (each script must
import only its own framework). What differs between the frameworks (the launcher, the device,
the model, the step itself) stays in the scripts; PyTorch's machinery behind its script is in
the ``ddlab.training.*_torch`` modules (workers_torch, data_torch, models_torch,
cuda_graph_torch, speed_options_torch, evaluations_torch).

The result of a run (``--json PATH``) is the dict :func:`build_result` makes: the fields and
their meaning are listed there, once for both scripts.
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional, Sequence, Type

import numpy as np

from ddlab.training.convergence import LR_RULES

FMNIST_MEAN, FMNIST_STD = 0.2860, 0.3530   # of the 60,000 training images, pixels in [0, 1]
TEST_IMAGES = 10000                        # Fashion-MNIST's test set
TRAIN_IMAGES = 60000                       # and its training set

# What each launcher means, for --help: a script offers the ones its framework supports.
LAUNCHER_HELP = {"none": "one process", "ddp": "run under torchrun", "horovod": "run under horovodrun"}

FINAL_LOSS_NOTE = "mean training loss of rank 0 over the last logging interval"


class Failure(SystemExit):
    """A clear one-line error for bad input or an impossible setting (exit status 2's kind:
    SystemExit with a message prints it without a traceback). Each script subclasses it with
    its own ``script`` name, so the message says which script refused."""

    script = "train"

    def __init__(self, msg: str):
        super().__init__(f"{self.script}: error: {msg}")


# ----------------------------------------------------------------------------- flags
def add_common_arguments(parser: argparse.ArgumentParser, *, launchers: Sequence[str], models: Sequence[str],
                         device_help: Optional[str] = None,
                         framework_arguments: Optional[Callable[[argparse.ArgumentParser], None]] = None) -> None:
    """The flags both scripts take, in the order --help lists them. ``framework_arguments``
    adds the script's own flags right after ``--device`` (where they belong in --help)."""
    unknown = [name for name in launchers if name not in LAUNCHER_HELP]
    if unknown:
        raise ValueError(f"unknown launcher(s) {unknown}; known: {list(LAUNCHER_HELP)}")
    p = parser
    p.add_argument("--launcher", choices=list(launchers), default="none",
                   help="; ".join(f"{name}: {LAUNCHER_HELP[name]}" for name in launchers))
    p.add_argument("--model", choices=models, default="cnn")
    p.add_argument("--batch-size", type=int, default=128, help="images per worker per step")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--steps", type=int, help="total optimizer steps, warm-up included")
    g.add_argument("--epochs", type=float, help="total steps = epochs x steps per epoch of a shard (default 1)")
    p.add_argument("--warmup-steps", type=int, default=None,
                   help="untimed steps first (default: a fifth of the steps, at most 50)")
    p.add_argument("--lr", type=float, default=1e-3, help="learning rate for one worker")
    p.add_argument("--scale-lr", action="store_true",
                   help="multiply the learning rate by the number of workers (the same as --lr-scaling linear)")
    p.add_argument("--lr-scaling", choices=list(LR_RULES), default=None,
                   help="scale --lr for the global batch: linear (x global/reference batch), sqrt, or none "
                        "(default: none, or linear with --scale-lr)")
    p.add_argument("--lr-ref-batch", type=int, default=None,
                   help="the global batch --lr is right for (default: --batch-size, so linear scaling multiplies "
                        "by the number of workers)")
    p.add_argument("--optimizer", choices=["adam", "sgd"], default="adam", help="sgd: momentum 0.9")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto", help=device_help)
    if framework_arguments is not None:
        framework_arguments(p)
    p.add_argument("--cpu-threads", type=int, default=1,
                   help="threads per worker on CPU: 1 makes each worker play one device, so 1 vs 2 workers "
                        "compares 1 vs 2 cores")
    p.add_argument("--data-dir", help="folder with the four Fashion-MNIST IDX files (default: ddlab.training.data's search)")
    p.add_argument("--test-samples", type=int, default=TEST_IMAGES, help="test images to evaluate at the end")
    p.add_argument("--log-interval", type=int, default=None, help="steps between printed lines (default: ~10 lines)")
    p.add_argument("--json", metavar="PATH", help="write the result here (rank 0)")


def validate_common(args: argparse.Namespace, error: Type[Failure] = Failure) -> argparse.Namespace:
    """Refuse values of the common flags that cannot make a run, with one line (``error``)."""
    if args.batch_size < 1:
        raise error(f"--batch-size must be at least 1, got {args.batch_size}")
    if args.steps is not None and args.steps < 2:
        raise error(f"--steps must be at least 2 (warm-up plus timed steps), got {args.steps}")
    if args.epochs is not None and not args.epochs > 0:
        raise error(f"--epochs must be positive, got {args.epochs}")
    if args.warmup_steps is not None and args.warmup_steps < 0:
        raise error("--warmup-steps cannot be negative")
    if not args.lr > 0:
        raise error(f"--lr must be positive, got {args.lr}")
    if not 1 <= args.test_samples <= TEST_IMAGES:
        raise error(f"--test-samples must be within 1..{TEST_IMAGES}")
    if args.cpu_threads < 1:
        raise error("--cpu-threads must be at least 1")
    if args.scale_lr:
        if args.lr_scaling not in (None, "linear"):
            raise error(f"--scale-lr is --lr-scaling linear; it cannot go with --lr-scaling {args.lr_scaling}")
        args.lr_scaling = "linear"
    args.lr_scaling = args.lr_scaling or "none"
    if args.lr_ref_batch is not None and args.lr_ref_batch < 1:
        raise error(f"--lr-ref-batch must be at least 1, got {args.lr_ref_batch}")
    if getattr(args, "lr_warmup_epochs", 0) < 0:
        raise error(f"--lr-warmup-epochs cannot be negative, got {args.lr_warmup_epochs}")
    if getattr(args, "eval_every", 0) < 0:
        raise error(f"--eval-every cannot be negative, got {args.eval_every}")
    if any(step < 1 for step in getattr(args, "eval_steps", [])):
        raise error(f"--eval-steps must be at least 1, got {args.eval_steps}")
    if getattr(args, "eval_steps", []) and not args.eval_every:
        raise error("--eval-steps adds evaluations to those of --eval-every: give --eval-every too")
    train = getattr(args, "train_samples", None)
    if train is not None and not 1 <= train <= TRAIN_IMAGES:
        raise error(f"--train-samples must be within 1..{TRAIN_IMAGES}, got {train}")
    if getattr(args, "noise_scale", False) and not args.eval_every:
        raise error("--noise-scale reports the gradient noise per evaluation interval: give --eval-every too")
    return args


def add_convergence_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of a convergence run (PyTorch): learning-rate warm-up, a smaller training
    set, the held-out test set evaluated during training, the gradient norms of the noise scale."""
    p.add_argument("--lr-warmup-epochs", type=float, default=0.0,
                   help="raise the learning rate linearly from --lr to the scaled rate over this many epochs")
    p.add_argument("--train-samples", type=int, default=None,
                   help="train on this many images (a fixed subset, the same for every seed; default all 60,000)")
    p.add_argument("--eval-every", type=float, default=0.0,
                   help="evaluate test accuracy and loss every this many epochs (and at the end), recording "
                        "the training seconds so far (0: only at the end)")
    p.add_argument("--eval-steps", type=int, nargs="+", default=[], metavar="STEP",
                   help="evaluate after these optimizer steps too (e.g. the same step count across batch sizes)")
    p.add_argument("--noise-scale", action="store_true",
                   help="log each rank's gradient norm and the all-reduced one per step (DDP, 2+ workers), "
                        "for the gradient noise scale (ddlab.training.convergence)")


def micro_batches(args: argparse.Namespace) -> int:
    """Micro-batches of --batch-size per optimizer step (--accumulate; 1 for a script without it)."""
    return getattr(args, "accumulate", 1)


def global_batch(args: argparse.Namespace, world: int) -> int:
    """The batch the optimizer sees in one step: batch per worker x micro-batches x ``world``."""
    return args.batch_size * micro_batches(args) * world


def learning_rate(args: argparse.Namespace, world: int) -> float:
    """The learning rate after any warm-up: --lr scaled by --lr-scaling for the global batch
    the optimizer sees (:func:`global_batch`) over --lr-ref-batch (default: the batch per worker)."""
    from ddlab.training.convergence import peak_lr
    ref = args.lr_ref_batch or args.batch_size
    return peak_lr(args.lr, args.lr_scaling, global_batch(args, world), ref)


# ----------------------------------------------------------------------------- the run's shape
@dataclass
class StepPlan:
    """How many steps a run takes and how many of them are warm-up (untimed)."""
    per_rank: int          # training images in each rank's shard
    steps_per_epoch: int   # full batches in a shard
    total: int             # optimizer steps, warm-up included
    warmup: int            # untimed steps first
    notes: list = field(default_factory=list)

    @property
    def timed(self) -> int:
        return self.total - self.warmup

    @property
    def epochs_needed(self) -> int:
        """Per-epoch shuffles the run reaches into (the last one perhaps only in part)."""
        return -(-self.total // self.steps_per_epoch)


def plan_steps(args: argparse.Namespace, n_train: int, world: int, error: Type[Failure] = Failure,
               min_warmup: int = 0, min_warmup_why: str = "") -> StepPlan:
    """Steps from --steps or --epochs (default one epoch of a shard) and warm-up steps from
    --warmup-steps (default a fifth, 1..50). ``min_warmup`` raises the warm-up where the
    framework needs that many untimed steps (a CUDA-graph capture), noting why. A step takes
    --batch-size x --accumulate images of each rank's shard."""
    per_rank = n_train // world
    n = micro_batches(args)
    steps_per_epoch = per_rank // (args.batch_size * n)
    if steps_per_epoch < 1:
        raise error(f"a shard of {per_rank} images ({n_train:,} / {world} workers) holds no full batch "
                    f"of {args.batch_size}" + (f" x {n} micro-batches" if n > 1 else ""))
    total = args.steps if args.steps is not None else max(2, int(round((args.epochs or 1) * steps_per_epoch)))
    warmup = args.warmup_steps if args.warmup_steps is not None else max(1, min(50, total // 5))
    notes = []
    if warmup < min_warmup:
        notes.append(f"warm-up raised from {warmup} to {min_warmup} steps: {min_warmup_why}")
        warmup = min_warmup
    if total <= warmup:
        raise error(f"{total} steps leave no timed step after {warmup} warm-up steps: raise --steps "
                    f"or lower --warmup-steps")
    return StepPlan(per_rank, steps_per_epoch, total, warmup, notes)


def rank_seed(seed: int, rank: int, bits: int = 32) -> int:
    """A distinct, reproducible seed per rank (each rank then draws its own dropout masks, as one
    process draws a mask per image of the global batch; the shards, not the masks, must differ),
    below ``2 ** bits``. The same (seed, rank) always gives the same value."""
    if not 1 <= bits <= 32:
        raise ValueError(f"bits must be within 1..32, got {bits}")
    return int(np.random.SeedSequence([seed, rank]).generate_state(1)[0]) % (2 ** bits)


# ----------------------------------------------------------------------------- printed lines
def step_line(step: int, total: int, loss: float, seconds: float, steps: int, global_batch: int,
              warmup: int) -> str:
    """Rank 0's progress line for the ``steps`` steps that ended at ``step`` and took ``seconds``."""
    steps = max(1, steps)
    rate = steps * global_batch / seconds if seconds > 0 else float("nan")
    phase = "warm-up" if step <= warmup else "timed"
    return (f"step {step:>6}/{total} | loss {loss:.4f} | {1e3 * seconds / steps:8.2f} ms/step | "
            f"{rate:>11,.0f} img/s (all workers, {phase})")


class ProgressLog:
    """Rank 0's progress lines: one :func:`step_line` every ``log_every`` optimizer steps
    (default: about ten lines a run) and at the last step, each over the steps since the
    line before. ``last_loss`` is the loss of the latest line (the result's ``final_loss``)."""

    def __init__(self, total: int, warmup: int, global_batch: int, log_every: Optional[int] = None,
                 say: Callable = print, now: Callable[[], float] = time.perf_counter):
        self.total, self.warmup, self.global_batch = total, warmup, global_batch
        self.every = log_every or max(1, total // 10)
        self.say, self.now = say, now
        self.t_log, self.step_log, self.last_loss = now(), 0, float("nan")

    def due(self, step: int) -> bool:
        """Is a line due after optimizer step ``step``?"""
        return step % self.every == 0 or step == self.total

    def line(self, step: int, loss_sum: float) -> None:
        """Prints the line of the steps since the previous one, which ended at ``step``;
        ``loss_sum``: their training losses summed."""
        loss = loss_sum / max(1, step - self.step_log)
        t = self.now()
        self.say(step_line(step, self.total, loss, t - self.t_log, step - self.step_log, self.global_batch,
                           self.warmup), flush=True)
        self.t_log, self.step_log, self.last_loss = t, step, loss

    def restart(self, step: int) -> None:
        """The next line counts the steps after ``step``, from now (after a pause that is no step's)."""
        self.t_log, self.step_log = self.now(), step


def summary_line(result: Mapping) -> str:
    """Rank 0's last line: the run in one line, from its result (:func:`build_result`)."""
    sm = result["step_time_ms"]
    return (f"timed {result['timed_steps']} steps after {result['warmup_steps']} warm-up: "
            f"{result['images_per_s']:,.0f} img/s ({result['workers']} worker(s)); step median "
            f"{sm['median']:.3f} ms (p10 {sm['p10']:.3f}, p90 {sm['p90']:.3f}) "
            f"| test accuracy {result['test_accuracy']:.4f} on {result['test_samples']:,} images "
            f"| ranks agree on weights: {'yes' if result['ranks_agree'] else 'NO'} "
            f"| {result['wall_s']:.1f} s since process start")


# ----------------------------------------------------------------------------- the result
def env_with(prefixes: Sequence[str], env: Optional[Mapping[str, str]] = None) -> dict:
    """The environment variables whose names start with one of ``prefixes``, sorted: what a
    run records of the settings that can change its speed (NCCL_*, HOROVOD_*, ...)."""
    env = os.environ if env is None else env
    return {k: v for k, v in sorted(env.items()) if k.startswith(tuple(prefixes))}


def run_command() -> str:
    """The command that started this run: ddlab.measure.launch passes the whole launch line (torchrun
    or horovodrun included) as DDLAB_COMMAND; started by hand, this process's own."""
    return os.environ.get("DDLAB_COMMAND") or shlex.join([sys.executable, *sys.argv])


def rank_agreement(gathered: Sequence[Mapping]) -> dict:
    """From every rank's {"checksum": {"sum", "sumsq"}, "elapsed_s"}: whether all ranks hold
    the same weights (data parallelism's promise) and how far apart they are."""
    if not gathered:
        raise ValueError("no rank reported")
    sums = [g["checksum"]["sum"] for g in gathered]
    return {"rank_checksums": [g["checksum"] for g in gathered],
            "ranks_agree": all(g["checksum"] == gathered[0]["checksum"] for g in gathered),
            "rank_checksum_spread": max(sums) - min(sums),
            "rank_elapsed_s": [g["elapsed_s"] for g in gathered]}


def build_result(args: argparse.Namespace, *, framework: str, params: int, gradient_bytes: int, backend: str,
                 world: int, plan: StepPlan, speed: Mapping, step_times_ms: Sequence[float], accuracy: float,
                 test_samples: int, final_loss: float, device_fields: Mapping, lr: float, on_gpu: bool,
                 checksum: Mapping, start_checksum: Mapping, gathered: Sequence[Mapping],
                 framework_env_prefixes: Sequence[str], versions: Mapping, notes: Sequence[str],
                 phase_s: Mapping, wall_s: float, provenance: Mapping,
                 learning: Optional[Mapping] = None, tuning: Optional[Mapping] = None) -> dict:
    """The result JSON of one run (rank 0), the same fields from both scripts, in this order:

    * the model (``params``, ``gradient_bytes_per_step``: what every step all-reduces) and who
      ran it (``framework``, ``launcher``, ``backend``);
    * the run's shape: ``workers``, ``batch_per_worker`` (one micro-batch), ``global_batch``
      (what the optimizer sees: batch x micro-batches x workers), ``steps`` (optimizer steps),
      ``warmup_steps``, ``timed_steps``, ``epochs``, ``steps_per_epoch``;
    * the speed (``ddlab.training.throughput.summarize``): ``images_per_s`` over the timed steps,
      ``elapsed_s`` between the synchronised start and end, ``step_time_ms`` (median, p10,
      p90) and every step's time ``step_times_ms``;
    * the learning: ``test_accuracy``, ``final_loss``, then ``learning`` when the script
      gives it (a convergence run: ``train_samples``, ``lr_warmup_steps``, ``evaluations``,
      one per ``--eval-every``: epoch, step, test accuracy and loss, training loss, seconds);
    * the setup: ``precision``, then the script's ``device_fields`` (device, CUDA graph,
      compile...), then the optimizer, learning rate (``lr`` = ``lr_base`` scaled by
      ``lr_scaling`` for the global batch over ``lr_ref_batch``), ``seed``, ``cpu_threads``
      (CPU runs only), then ``tuning`` when the script gives it (every communication tuning
      option, :func:`ddlab.course.tuning.config`: ``accumulate``, DDP's buckets, hook and graph,
      Horovod's compression, fusion and cycle);
    * the agreement: rank 0's weight ``checksum`` now and at the start, every rank's
      (:func:`rank_agreement`);
    * the environment: ``nccl_env``, ``framework_env``, the script's ``versions``;
    * ``notes``, ``phase_s`` (rank 0's seconds per phase), ``wall_s`` and ``provenance``."""
    step_times_ms = list(step_times_ms)
    if speed["timed_steps"] != plan.timed:
        raise ValueError(f"speed covers {speed['timed_steps']} steps, the plan {plan.timed} timed steps")
    result = {
        "model": args.model, "params": params, "gradient_bytes_per_step": gradient_bytes,
        "framework": framework, "launcher": args.launcher, "backend": backend,
        "workers": world, "batch_per_worker": args.batch_size, "global_batch": global_batch(args, world),
        "steps": plan.total, "warmup_steps": plan.warmup, "timed_steps": speed["timed_steps"],
        "epochs": round(plan.total / plan.steps_per_epoch, 4), "steps_per_epoch": plan.steps_per_epoch,
        "images_per_s": speed["images_per_s"], "images_per_s_per_worker": speed["images_per_s_per_worker"],
        "images_timed": speed["images_timed"], "elapsed_s": speed["elapsed_s"],
        "step_time_ms": speed["step_time_ms"],
        "step_times_ms": [round(v, 5) for v in step_times_ms],
        "test_accuracy": float(accuracy), "test_samples": int(test_samples),
        "final_loss": final_loss, "final_loss_note": FINAL_LOSS_NOTE,
        **dict(learning or {}),
        "precision": args.precision,
        **device_fields,
        "optimizer": args.optimizer, "lr": lr, "lr_base": args.lr, "scale_lr": args.scale_lr,
        "lr_scaling": args.lr_scaling, "lr_ref_batch": args.lr_ref_batch or args.batch_size,
        "seed": args.seed, "cpu_threads": None if on_gpu else args.cpu_threads,
        **({"tuning": dict(tuning)} if tuning is not None else {}),
        "checksum": checksum, "start_checksum": start_checksum,
        **rank_agreement(gathered),
        "nccl_env": env_with(("NCCL_",)),
        "framework_env": env_with(framework_env_prefixes),
        **versions,
        "notes": list(notes),
        # seconds per phase of rank 0, from its process start to here (see ddlab.measure.launch.PhaseClock)
        "phase_s": dict(phase_s),
        "wall_s": wall_s,
        "provenance": provenance,
    }
    return result


def write_json(path: str, result: Mapping) -> None:
    """Write the result whole or not at all (:func:`ddlab.base.files.write_json`): a reader never
    sees half a file. This file goes from the worker to its parent (:func:`ddlab.training.runs.train`)
    only, which reads NaN back: a diverged run's loss stays NaN here, and what records it
    (a recording, a convergence sweep) decides how JSON holds it."""
    from ddlab.base import files
    files.write_json(path, result, allow_nan=True)
