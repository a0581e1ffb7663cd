"""Communication tuning of data-parallel training: the options that change how often, how
much and how the gradients are all-reduced, and the experiment that measures each.

The wide model all-reduces about 302 MB of gradients every step, so two GPUs spend much of
a step communicating. What can be changed, and what each change costs:

* fewer all-reduces per image: a larger batch per GPU (``--batch-size``), or gradient
  accumulation (``--accumulate N``: N micro-batches per optimizer step, the all-reduce only
  after the last; DDP's ``no_sync``, Horovod's ``backward_passes_per_step``). Both change the
  global batch the optimizer sees, so the learning changes too;
* fewer bytes per all-reduce: gradients sent as 16-bit floats (DDP's ``bf16_compress_hook``
  or ``fp16_compress_hook`` communication hooks, ``--comm-hook``; Horovod's
  ``Compression.fp16``, ``--hvd-compression``), rounded before they are averaged;
* fewer, larger all-reduces, or less work around them: DDP's ``bucket_cap_mb``
  (``--bucket-cap-mb``), ``gradient_as_bucket_view`` (``--grad-as-bucket-view``: gradients
  live inside the buckets, no copy in and out), ``static_graph`` (``--static-graph``: DDP
  records the graph once and skips per-step bookkeeping); Horovod's tensor fusion buffer
  (``--hvd-fusion-mb``, HOROVOD_FUSION_THRESHOLD) and its background cycle
  (``--hvd-cycle-ms``, HOROVOD_CYCLE_TIME).

This module holds the flags of ``source_code/train/fmnist_torch.py`` for them (the script
calls :func:`add_arguments`, :func:`check`, :func:`ddp_kwargs`, :func:`register_comm_hook`,
:func:`horovod_env`, :func:`horovod_optimizer_kwargs` and records :func:`config` in its
result), the named configurations :data:`TUNINGS` (each fix alone, and combinations, per
launcher), and :func:`tuning_comparison`, which runs the one-GPU untuned baseline and each
tuning on two workers through :mod:`ddlab.training.runs`. The training script imports this module,
so nothing here imports torch, Horovod or the experiment layer at import time.

Length (about 450 lines): the script's flags and their checks, the named tunings and the
experiment that runs them share one vocabulary; the script-side half (flags, checks, the DDP
and Horovod keyword arguments) is the part to move out next.
"""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Sequence, Type

EXPERIMENT = "tuning"
COMM_HOOKS = ("none", "bf16", "fp16")
HVD_COMPRESSIONS = ("none", "fp16")
MIB = 1024 * 1024   # horovodrun's --fusion-threshold-mb multiplies by this; so does --hvd-fusion-mb
# DDP's no_sync and static_graph fail together in the PyTorch releases the course runs: the
# first backward under no_sync hits an internal assert in DDP's reducer (PyTorch issue 143580).
STATIC_GRAPH_NO_SYNC = ("--static-graph cannot go with --accumulate under DDP: DDP's static_graph does not work "
                        "with no_sync (the first backward under no_sync fails with an internal assert in DDP's "
                        "reducer, PyTorch issue 143580); use one or the other")

# flag -> the launcher it belongs to (the others refuse it)
_DDP_FLAGS = {"bucket_cap_mb": "--bucket-cap-mb", "grad_as_bucket_view": "--grad-as-bucket-view",
              "static_graph": "--static-graph", "comm_hook": "--comm-hook"}
_HVD_FLAGS = {"hvd_compression": "--hvd-compression", "hvd_fusion_mb": "--hvd-fusion-mb",
              "hvd_cycle_ms": "--hvd-cycle-ms"}
_UNSET = {"bucket_cap_mb": None, "grad_as_bucket_view": False, "static_graph": False, "comm_hook": "none",
          "hvd_compression": "none", "hvd_fusion_mb": None, "hvd_cycle_ms": None}


# ----------------------------------------------------------------------------- the script's flags
def add_arguments(p: argparse.ArgumentParser) -> None:
    """The tuning flags of fmnist_torch.py."""
    g = p.add_argument_group("communication tuning (DDP and Horovod)")
    g.add_argument("--accumulate", type=int, default=1, metavar="N",
                   help="N micro-batches of --batch-size per optimizer step, gradients summed locally and "
                        "all-reduced once (DDP: no_sync on the first N-1; Horovod: backward_passes_per_step=N). "
                        "--steps counts optimizer steps; the loss of a step is the mean over its micro-batches; "
                        "the optimizer sees a global batch of batch x N x workers and the learning rate is the one "
                        "for that batch (--lr, scaled for it by --lr-scaling)")
    g.add_argument("--bucket-cap-mb", type=float, default=None, metavar="MB",
                   help="DDP: bucket_cap_mb, the size of the gradient buckets DDP all-reduces (not given: DDP's own 25)")
    g.add_argument("--grad-as-bucket-view", action="store_true",
                   help="DDP: gradient_as_bucket_view=True (gradients are views into the buckets: no copy)")
    g.add_argument("--static-graph", action="store_true",
                   help="DDP: static_graph=True (the same graph every step: DDP records it once)")
    g.add_argument("--comm-hook", choices=COMM_HOOKS, default="none",
                   help="DDP: all-reduce the gradients as bfloat16 or float16 (PyTorch's bf16_compress_hook / "
                        "fp16_compress_hook); bf16 needs a CUDA build of PyTorch with NCCL 2.10+")
    g.add_argument("--hvd-compression", choices=HVD_COMPRESSIONS, default="none",
                   help="Horovod: compression of the all-reduced gradients (fp16: hvd.Compression.fp16)")
    g.add_argument("--hvd-fusion-mb", type=int, default=None, metavar="MB",
                   help="Horovod: tensor fusion buffer in MiB (HOROVOD_FUSION_THRESHOLD, set before hvd.init; "
                        "0 turns fusion off; not given: Horovod's own)")
    g.add_argument("--hvd-cycle-ms", type=float, default=None, metavar="MS",
                   help="Horovod: background cycle time in ms (HOROVOD_CYCLE_TIME, set before hvd.init; not "
                        "given: Horovod's own)")


def check(args: argparse.Namespace, error: Type[SystemExit]) -> argparse.Namespace:
    """Refuse tuning flags that cannot make a run, with one line (``error``, the script's Failure)."""
    if args.accumulate < 1:
        raise error(f"--accumulate must be at least 1, got {args.accumulate}")
    if args.bucket_cap_mb is not None and not args.bucket_cap_mb > 0:
        raise error(f"--bucket-cap-mb must be positive, got {args.bucket_cap_mb:g}")
    if args.hvd_fusion_mb is not None and args.hvd_fusion_mb < 0:
        raise error(f"--hvd-fusion-mb cannot be negative, got {args.hvd_fusion_mb} (0 turns fusion off)")
    if args.hvd_cycle_ms is not None and not args.hvd_cycle_ms > 0:
        raise error(f"--hvd-cycle-ms must be positive, got {args.hvd_cycle_ms:g}")
    for flags, launcher, what in ((_DDP_FLAGS, "ddp", "a DDP option (torch's DistributedDataParallel)"),
                                  (_HVD_FLAGS, "horovod", "a Horovod option")):
        given = [flag for key, flag in flags.items() if getattr(args, key) != _UNSET[key]]
        if given and args.launcher != launcher:
            raise error(f"{given[0]} is {what}: use it with --launcher {launcher}, not --launcher {args.launcher}")
    if args.comm_hook != "none" and getattr(args, "noise_scale", False):
        raise error("--comm-hook and --noise-scale each register a DDP communication hook and DDP takes only "
                    "one: use one or the other")
    if args.accumulate > 1 and getattr(args, "noise_scale", False):
        raise error("--noise-scale compares each rank's gradient of one batch with the all-reduced one: it cannot "
                    "go with --accumulate")
    if args.accumulate > 1 and args.static_graph:
        raise error(STATIC_GRAPH_NO_SYNC)
    if args.comm_hook == "bf16":
        problem = bf16_hook_problem()
        if problem:
            raise error(problem)
    return args


def graph_problems(args: argparse.Namespace) -> list:
    """Why the tuning flags given keep the step from being captured as a CUDA graph (none: [])."""
    problems = []
    if args.accumulate > 1:
        problems.append("--accumulate runs several forward and backward passes per optimizer step (DDP's no_sync "
                        "on all but the last), which the captured step does not")
    if args.comm_hook != "none":
        problems.append("capturing a DDP communication hook (--comm-hook) is not supported here")
    return problems


def bf16_hook_problem() -> Optional[str]:
    """Why DDP would refuse PyTorch's bf16_compress_hook in this PyTorch, or None. DDP checks
    the build, not the backend: it needs CUDA (or ROCm) and NCCL 2.10 or newer, even when
    the all-reduce itself runs over gloo on CPU (gloo all-reduces bfloat16 fine)."""
    import torch
    import torch.distributed as dist
    if torch.version.cuda is None and torch.version.hip is None:
        return (f"--comm-hook bf16: DDP accepts PyTorch's bf16_compress_hook only in a CUDA build of PyTorch with "
                f"NCCL 2.10 or newer, and this PyTorch ({torch.__version__}) is built without CUDA; use "
                f"--comm-hook fp16 here (it works over gloo), or run on GPUs")
    if not dist.is_nccl_available() or tuple(torch.cuda.nccl.version()) < (2, 10):
        return (f"--comm-hook bf16: DDP accepts PyTorch's bf16_compress_hook only with NCCL 2.10 or newer, and this "
                f"PyTorch ({torch.__version__}) has none; use --comm-hook fp16")
    return None


def ddp_kwargs(args: argparse.Namespace) -> dict:
    """The DistributedDataParallel arguments the flags ask for (none: DDP's defaults)."""
    kw = {}
    if args.bucket_cap_mb is not None:
        kw["bucket_cap_mb"] = args.bucket_cap_mb
    if args.grad_as_bucket_view:
        kw["gradient_as_bucket_view"] = True
    if args.static_graph:
        kw["static_graph"] = True
    return kw


def register_comm_hook(net, name: str, error: Type[SystemExit]) -> None:
    """Registers PyTorch's bf16 or fp16 compression hook on the DDP model ``net`` ("none":
    nothing); a refusal by DDP becomes one line (``error``)."""
    if name == "none":
        return
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    hook = {"bf16": default_hooks.bf16_compress_hook, "fp16": default_hooks.fp16_compress_hook}[name]
    try:
        net.register_comm_hook(None, hook)
    except (TypeError, RuntimeError, ValueError) as exc:
        raise error(f"--comm-hook {name}: DDP refused {hook.__name__}: {exc}") from None


def horovod_env(args: argparse.Namespace) -> dict:
    """The Horovod variables the flags set (read by hvd.init, so set before it): the fusion
    threshold in bytes (MiB x 1024 x 1024, as horovodrun's --fusion-threshold-mb) and the
    cycle time in ms."""
    env = {}
    if getattr(args, "hvd_fusion_mb", None) is not None:
        env["HOROVOD_FUSION_THRESHOLD"] = str(args.hvd_fusion_mb * MIB)
    if getattr(args, "hvd_cycle_ms", None) is not None:
        env["HOROVOD_CYCLE_TIME"] = f"{args.hvd_cycle_ms:g}"
    return env


def apply_horovod_env(args: argparse.Namespace, environ=None) -> dict:
    """Sets :func:`horovod_env` in ``environ`` (default os.environ), the flags winning over an
    inherited value; returns what was set."""
    env = horovod_env(args)
    (os.environ if environ is None else environ).update(env)
    return env


def horovod_optimizer_kwargs(args: argparse.Namespace, hvd) -> dict:
    """hvd.DistributedOptimizer's arguments for the flags: accumulation and compression."""
    return {"backward_passes_per_step": args.accumulate,
            "compression": hvd.Compression.fp16 if args.hvd_compression == "fp16" else hvd.Compression.none}


def config(args: argparse.Namespace) -> dict:
    """Every tuning option of the run, for its result (``tuning``): unset ones as None/False/"none"."""
    return {"accumulate": args.accumulate,
            "no_sync": args.launcher == "ddp" and args.accumulate > 1,
            "bucket_cap_mb": args.bucket_cap_mb, "gradient_as_bucket_view": args.grad_as_bucket_view,
            "static_graph": args.static_graph, "comm_hook": args.comm_hook,
            "hvd_compression": args.hvd_compression, "hvd_fusion_mb": args.hvd_fusion_mb,
            "hvd_cycle_ms": args.hvd_cycle_ms, "horovod_env": horovod_env(args)}


def describe(args: argparse.Namespace) -> str:
    """The tuning options given, in a few words ("" when none)."""
    parts = []
    if args.accumulate > 1:
        how = "no_sync" if args.launcher == "ddp" else "backward_passes_per_step" if args.launcher == "horovod" else ""
        parts.append(f"accumulate {args.accumulate}" + (f" ({how})" if how else ""))
    if args.bucket_cap_mb is not None:
        parts.append(f"bucket {args.bucket_cap_mb:g} MB")
    if args.grad_as_bucket_view:
        parts.append("gradient_as_bucket_view")
    if args.static_graph:
        parts.append("static_graph")
    if args.comm_hook != "none":
        parts.append(f"{args.comm_hook} comm hook")
    if args.hvd_compression != "none":
        parts.append(f"{args.hvd_compression} compression")
    parts += [f"{k}={v}" for k, v in horovod_env(args).items()]
    return ", ".join(parts)


# ----------------------------------------------------------------------------- named tunings
@dataclass(frozen=True)
class Tuning:
    """One configuration of the comparison: the script flags it adds to the base run, a batch
    per worker ``batch_factor`` times the base run's, and why it should help."""
    name: str
    launcher: str
    flags: tuple = ()
    why: str = ""
    batch_factor: int = 1

    def spec(self, base):
        """The :class:`ddlab.training.runspec.RunSpec` of this tuning on top of ``base``."""
        return base.with_(batch=base.batch * self.batch_factor, extra_args=tuple(base.extra_args) + self.flags)

    def flags_text(self, base) -> str:
        """The script options this tuning changes, as a learner would type them."""
        words = [f"--batch-size {base.batch * self.batch_factor}"] if self.batch_factor != 1 else []
        return " ".join(words + list(self.flags)) or "(none)"


_BATCH_WHY = "twice the images per GPU per step: each all-reduce of the same gradients serves twice the images"
_ACC_WHY = ("two micro-batches per optimizer step, the gradients all-reduced once: half the all-reduces per image, "
            "the memory of one micro-batch")
_DDP_COMBINED = ("--comm-hook", "bf16", "--bucket-cap-mb", "100", "--grad-as-bucket-view")
_HVD_COMBINED = ("--hvd-compression", "fp16", "--hvd-fusion-mb", "256", "--hvd-cycle-ms", "0.5")


def _table(launcher: str, *rows) -> dict:
    return {name: Tuning(name, launcher, tuple(flags), why, factor) for name, flags, why, factor in rows}


TUNINGS = {
    "ddp": _table(
        "ddp",
        ("untuned", (), "DDP's defaults: 25 MB buckets, float32 gradients, an all-reduce every step", 1),
        ("batch x2", (), _BATCH_WHY + " (the global batch doubles)", 2),
        ("accumulate 2", ("--accumulate", "2"), _ACC_WHY + " (DDP's no_sync on the first; the global batch "
         "doubles)", 1),
        ("bf16 hook", ("--comm-hook", "bf16"), "gradients all-reduced as bfloat16: half the bytes on the link, "
         "rounded before they are averaged", 1),
        ("bucket 100 MB", ("--bucket-cap-mb", "100"), "fewer, larger all-reduces than DDP's 25 MB buckets; the "
         "first one starts later in the backward pass", 1),
        ("grad as bucket view", ("--grad-as-bucket-view",), "gradients live in DDP's buckets: no copy into them "
         "before the all-reduce and out after it, less memory", 1),
        ("static graph", ("--static-graph",), "DDP records the graph once and skips its per-step bookkeeping", 1),
        ("combined", _DDP_COMBINED + ("--static-graph",), "every DDP communication fix that keeps the global "
         "batch: bf16 hook, 100 MB buckets, gradients as bucket views, static graph", 1),
        ("combined + accumulate 2", _DDP_COMBINED + ("--accumulate", "2"), "the combination plus accumulation "
         "(static graph left out: it does not work with no_sync, PyTorch issue 143580; the global batch doubles)", 1),
    ),
    "horovod": _table(
        "horovod",
        ("untuned", (), "Horovod's defaults: its fusion buffer and cycle time, float32 gradients", 1),
        ("batch x2", (), _BATCH_WHY + " (the global batch doubles)", 2),
        ("accumulate 2", ("--accumulate", "2"), _ACC_WHY + " (backward_passes_per_step=2; the global batch "
         "doubles)", 1),
        ("fp16 compression", ("--hvd-compression", "fp16"), "gradients all-reduced as float16: half the bytes on "
         "the link, rounded before they are averaged", 1),
        ("fusion 256 MB", ("--hvd-fusion-mb", "256"), "a fusion buffer larger than Horovod's default: more small "
         "tensors fused into one all-reduce. A tensor larger than the buffer goes alone whatever its size, so the "
         "wide model's one 302 MB dense gradient is not changed by it", 1),
        ("cycle 0.5 ms", ("--hvd-cycle-ms", "0.5"), "a cycle shorter than Horovod's default: its background "
         "thread looks for ready gradients more often, so all-reduces start sooner", 1),
        ("combined", _HVD_COMBINED, "fp16 compression, 256 MB fusion buffer, 0.5 ms cycle: every Horovod "
         "communication fix that keeps the global batch", 1),
        ("combined + accumulate 2", _HVD_COMBINED + ("--accumulate", "2"), "the combination plus accumulation "
         "(the global batch doubles)", 1),
    ),
}
LAUNCHERS = tuple(TUNINGS)
BASELINE = "1 worker, untuned"   # the wrapper with one worker on one GPU (or one CPU process): its own row
PLAIN = "1 GPU, no wrapper"      # one process, no wrapper: the run every speedup is over (ddlab.training.baseline)


def names(launcher: str) -> list:
    """The tunings of ``launcher`` ("ddp" or "horovod"), in the comparison's order."""
    return list(TUNINGS[_launcher(launcher)])


def _launcher(launcher: str) -> str:
    """``launcher`` when it has tunings (RunSpecError naming the ones that do otherwise)."""
    if launcher not in TUNINGS:
        from ddlab.training.runspec import RunSpecError
        raise RunSpecError(f"unknown launcher {launcher!r} for the tuning comparison; choose one of "
                           f"{', '.join(TUNINGS)}")
    return launcher


def tunings_table(launcher: str = "ddp", batch: Optional[int] = None):
    """The tunings of ``launcher`` as a :class:`ddlab.base.tables.Table`: name, flags, why (the
    batch-size flag shown for ``batch`` per GPU, default the live GPU batch)."""
    from ddlab.base import tables
    from ddlab.training.runspec import RunSpec
    base = RunSpec.for_device("cuda", "wide", launcher=launcher, workers=2)
    base = base.with_(batch=batch) if batch else base
    rows = [{"tuning": t.name, "flags": t.flags_text(base), "why": t.why}
            for t in TUNINGS[_launcher(launcher)].values()]
    return tables.Table([("tuning", "text"), ("flags", "text"), ("why", "text")], rows, wrap=("flags", "why"),
                        title=f"{launcher} tunings (the flags fmnist_torch.py adds to the untuned run)")


def reference_name(launcher: str, model: str, path: str) -> str:
    """The recording's name: tuning-torch-<launcher>-<model>-<path>."""
    return f"{EXPERIMENT}-torch-{launcher}-{model}-{path}"


def recorded(launcher: str = "ddp", model: str = "wide", path: str = "default"):
    """The recorded tuning comparison (raises ddlab.base.reference.ReferenceMissing when there is none)."""
    from ddlab.training import recording
    return recording.load_recorded(EXPERIMENT, "torch", launcher, model, variant=path)


# ----------------------------------------------------------------------------- the experiment
def _skip_reason(t: Tuning) -> Optional[str]:
    """Why this machine cannot run ``t`` at all (found without a launch), or None."""
    if "bf16" in t.flags and "--comm-hook" in t.flags:
        return bf16_hook_problem()
    return None


def planned_launches(launcher: str, tunings: Sequence[str], repeats: int) -> int:
    """How many training launches :func:`tuning_comparison` makes for ``tunings``: the plain one-GPU
    run, the one-worker untuned run and each tuning this machine can run, ``repeats`` times each (a
    progress bar's total)."""
    return repeats * (2 + sum(1 for name in tunings if not _skip_reason(TUNINGS[launcher][name])))




@dataclass
class Resumed:
    """Rounds of a comparison that already ran, to continue it (:mod:`ddlab.recording.resume` builds
    them from a partial result): how many, each configuration's runs, the failures, a note saying so."""
    rounds: int
    got: dict
    failed: dict
    note: str


def tuning_comparison(model: str = "wide", launcher: str = "ddp", path: str = "default",
                      tunings: Optional[Sequence[str]] = None, device: str = "auto", repeats: int = 3,
                      base=None, echo: bool = False, progress: Optional[Callable[[str], None]] = None,
                      partial: Optional[Callable[[object], None]] = None,
                      resume: Optional[Callable[..., Resumed]] = None):
    """The plain one-GPU run (no wrapper), the one-worker untuned run and each tuning of ``launcher``
    on two workers over NCCL path ``path``, each ``repeats`` times, as an
    :class:`ddlab.training.results.ExperimentResult` ("tuning"): per row the tuning, its flags,
    images/s median (min-max), the speedup over the plain one-GPU run, the step time, the test
    accuracy and whether the ranks agree.

    ``tunings``: names from :data:`TUNINGS` [launcher] (default all, "untuned" first).
    ``base``: the two-worker run to start from (a :class:`ddlab.training.runspec.RunSpec`; its model,
    launcher, sizes, repeats and timeout are used, and ``model``, ``launcher``, ``device`` and
    ``repeats`` are then ignored); default the live sizes for ``device`` ("auto": GPUs when
    there are two, else small real runs on CPU processes over gloo, where NCCL paths do not
    apply: the path is then "default" and a note says so). A tuning that fails, or that this
    PyTorch cannot run (the bf16 hook without CUDA), gets a row with the reason; the others
    still run. The repeats are interleaved: each of ``repeats`` rounds runs the baseline and every
    tuning once, so a drift of the machine spreads over every row instead of looking like one
    tuning's effect. ``partial``: called with the result so far after each round but the last (a
    note says how many rounds ran), so a caller can save it and a run cut short keeps what finished.
    ``resume``: called with the two-worker spec and the tunings, returns the :class:`Resumed` rounds
    to keep (:func:`ddlab.recording.resume.from_partial` makes it from such a partial result); only
    the rounds left are run."""
    from ddlab.training.experiment_kit import interleaved
    from ddlab.training.experiments import plain_spec
    from ddlab.training.runs import ExperimentError

    spec, launcher, chosen = _checked_spec(model, launcher, tunings, device, repeats, base)
    path, notes = _path_and_notes(spec, path)
    spec = spec.with_(path=path)
    # Interleaved: each round runs the baseline and every tuning once, so a slow drift of the machine
    # (clocks, the host) spreads over every row's min-max instead of looking like one tuning's effect.
    configs = [(PLAIN, plain_spec(spec)), (BASELINE, spec.with_(workers=1, path="default"))]
    skipped: dict = {}    # tuning -> why this machine cannot run it
    for name in chosen:
        why = _skip_reason(TUNINGS[launcher][name])
        if why:
            skipped[name] = why
        else:
            configs.append((name, TUNINGS[launcher][name].spec(spec)))
    c = _Comparison(spec, launcher, path, chosen, skipped, {name: [] for name, _ in configs}, {}, notes)
    resumed = 0 if resume is None else c.take(resume(spec, chosen))

    def hand_out(done: int):
        so_far = c.result(done)
        if so_far is not None:
            partial(so_far)
    interleaved([(name, one, {}) for name, one in configs], spec.repeats, start=resumed, got=c.got, failed=c.failed,
                after_round=hand_out if partial is not None else None, echo=echo, progress=progress)
    res = c.result(spec.repeats)
    if res is None:
        raise ExperimentError("every run of the tuning comparison failed:\n"
                              + "\n".join(f"{name!r} failed: {_first(exc)}" for name, exc in c.failed.items()))
    return res


def _checked_spec(model: str, launcher: str, tunings, device: str, repeats: int, base) -> tuple:
    """(the two-worker run spec, its launcher, the tunings chosen), each checked."""
    from ddlab.training.runs import spec_for
    from ddlab.training.runspec import RunSpecError

    if base is None:
        _launcher(launcher)
        spec = spec_for(device, "torch", model, 2, launcher=launcher, repeats=repeats)
    else:
        spec = base.with_(workers=2) if base.workers != 2 else base
    launcher = spec.launcher
    _launcher(launcher)
    if spec.framework != "torch":
        raise RunSpecError("the tuning comparison runs fmnist_torch.py: framework 'torch'")
    chosen = list(tunings) if tunings is not None else names(launcher)
    if not chosen:
        raise RunSpecError("no tunings to compare")
    for name in chosen:
        if name not in TUNINGS[launcher]:
            raise RunSpecError(f"unknown {launcher} tuning {name!r}; choose from {', '.join(TUNINGS[launcher])}")
    return spec, launcher, chosen


def _path_and_notes(spec, path: str) -> tuple:
    """(the NCCL path the two-worker runs take, the note that says so): on CPU processes always
    "default" (gloo reads no NCCL variable)."""
    from ddlab.measure import launch
    from ddlab.system import nccl
    from ddlab.training.runspec import nccl_path_name

    path = nccl_path_name(path)
    if spec.device == "cpu":
        if path != "default":
            return "default", [f"CPU processes: gradients are all-reduced by gloo over TCP, not by NCCL, so NCCL "
                               f"path {path!r} does not apply here; the default path was run"]
        return "default", ["CPU processes: gradients are all-reduced by gloo over TCP, not by NCCL; the NCCL paths "
                           "apply on GPUs only"]
    path_env = nccl.get(path).environment()
    shown = " ".join(f"{k}={v}" for k, v in path_env.items() if v is not None)
    named = nccl.display_name(path, launch.worker_environment(path_env))   # "NCCL default, NVLS off" if so
    return path, [f"two-worker runs on the path {named} ({shown or 'no NCCL variable set by the path'}); "
                  "the one-GPU baseline has no all-reduce"]


def _first(exc) -> str:
    return str(exc).splitlines()[0]


@dataclass
class _Comparison:
    """A tuning comparison under way: its runs so far (``got``), its failures and its notes."""
    spec: object
    launcher: str
    path: str
    chosen: list
    skipped: dict         # tuning -> why this machine cannot run it
    got: dict             # configuration -> its runs so far
    failed: dict          # configuration -> the error of its first failed launch (its runs are dropped)
    notes: list

    def take(self, resumed: Resumed) -> int:
        """Keep the rounds that already ran (of the configurations this comparison has); returns their count."""
        self.got.update({k: v for k, v in resumed.got.items() if k in self.got})
        self.failed.update({k: v for k, v in resumed.failed.items() if k in self.got})
        self.notes.append(resumed.note)
        return resumed.rounds

    def one_gpu_rows(self, all_runs: list, kept: list) -> tuple:
        """(the plain run's row and the one-worker run's, or their failures; the one-worker runs; the
        plain run's images/s, which every speedup is over)."""
        from ddlab.training import baseline
        from ddlab.training.experiment_kit import keep_runs
        from ddlab.training.results import median_run, row_of_repeats
        from ddlab.training.runs import failure_row

        rows, plain_ips = [], None
        for key, path_key, extra, why in ((PLAIN, baseline.PLAIN_PATH, {"launcher": "none", "plain": True},
                                           "one process, no wrapper: the speedups are over this run"),
                                          (BASELINE, baseline.WRAPPER_PATH, {},
                                           "the wrapper with one worker, no all-reduce: its own cost")):
            if key in self.failed:
                rows.append(failure_row(self.failed[key], tuning=key, flags="(none)", path=path_key, workers=1, **extra))
                kept.append(f"the {key!r} run failed" + (", so there are no speedups" if key == PLAIN else "")
                            + f": {_first(self.failed[key])}")
            elif self.got[key]:
                row = row_of_repeats(self.got[key])
                idx = keep_runs(all_runs, self.got[key])
                rows.append(dict(row, tuning=key, flags="(none)", path=path_key, why=why,
                                 run=idx[median_run(self.got[key])], runs=idx, **extra))
                plain_ips = row["images_per_s"] if key == PLAIN else plain_ips
        base_runs = self.got[BASELINE] if BASELINE not in self.failed else []
        return rows, base_runs, plain_ips

    def tuning_rows(self, all_runs: list, kept: list, base_ips) -> list:
        """One row per tuning chosen: not run here, failed, or its runs' median and speedup."""
        from ddlab.training.experiment_kit import keep_runs
        from ddlab.training.results import median_run, row_of_repeats
        from ddlab.training.runs import failure_row

        rows, spec, path = [], self.spec, self.path
        for name in self.chosen:
            t = TUNINGS[self.launcher][name]
            flags = t.flags_text(spec)
            if name in self.skipped:
                rows.append({"tuning": name, "flags": flags, "path": path, "workers": spec.workers,
                             "error": self.skipped[name], "not_run": True})
            elif name in self.failed:
                rows.append(failure_row(self.failed[name], tuning=name, flags=flags, path=path, workers=spec.workers))
                kept.append(f"{name!r} failed: {_first(self.failed[name])}")
            elif self.got[name]:
                runs = self.got[name]
                row = row_of_repeats(runs)
                idx = keep_runs(all_runs, runs)
                mid = median_run(runs)
                row.update(tuning=name, flags=flags, path=path, why=t.why, run=idx[mid], runs=idx,
                           tuning_config=runs[mid].get("tuning"))
                rows.append(row)
        return rows

    def closing_notes(self, rounds: int) -> list:
        """What was not run here, how the rounds ran, and which tunings train a larger batch."""
        from ddlab.training.experiment_kit import interleaved_note

        by_why: dict = {}
        for name, why in self.skipped.items():
            by_why.setdefault(why, []).append(name)
        kept = [f"not run here ({', '.join(map(repr, these))}): {why}" for why, these in by_why.items()]
        kept.append(interleaved_note(rounds, "the plain one-GPU run, the one-worker run and every tuning"))
        if rounds < self.spec.repeats:
            kept.append(f"partial: {rounds} of {self.spec.repeats} rounds run, so each row has {rounds} repeat(s)")
        tunings = TUNINGS[self.launcher]
        bigger = [n for n in self.chosen if n not in self.skipped
                  and (tunings[n].batch_factor != 1 or "--accumulate" in tunings[n].flags)]
        if bigger:
            kept.append(f"{', '.join(map(repr, bigger))} process more images per optimizer step than the one-worker "
                        "baseline (a larger global batch): their speedup adds the larger batch to the second "
                        "worker, and their test accuracy is that of a different training")
        return kept

    def result(self, rounds: int):
        """The comparison after ``rounds`` rounds as an ExperimentResult (None while no run finished)."""
        from ddlab.system.provenance import run_provenance
        from ddlab.training.experiment_kit import config_of
        from ddlab.training.results import ExperimentResult

        all_runs, kept = [], list(self.notes)
        rows, base_runs, base_ips = self.one_gpu_rows(all_runs, kept)
        rows += self.tuning_rows(all_runs, kept, base_ips)
        kept += self.closing_notes(rounds)
        if not all_runs:
            return None
        spec, path = self.spec, self.path
        return ExperimentResult(EXPERIMENT, rows, "live", run_provenance(
            f"ddlab.course.tuning.tuning_comparison(model={spec.model!r}, launcher={self.launcher!r}, path={path!r}, "
            f"tunings={self.chosen})"), kept,
            config_of(spec, (base_runs or all_runs)[0], workers=spec.workers,
                      path=None if spec.device == "cpu" else path,      # gloo on CPU: no NCCL path to name
                      tunings=self.chosen, baseline_images_per_s=base_ips, order="interleaved", rounds=rounds),
            all_runs)
