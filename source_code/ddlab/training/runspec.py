"""The description of one training run: :class:`RunSpec`.

Every experiment takes a RunSpec (or a base RunSpec and what it varies) instead of a long
list of parameters, and the live defaults and the recording script take theirs from the same
place, :meth:`RunSpec.for_device`, so a recorded run and a live one are the same experiment.

A RunSpec says what to run (framework, launcher, model, batch per worker, steps, warm-up,
precision, NCCL path, workers, device, repeats, and the few speed options) and turns itself
into the training script's argv (:meth:`RunSpec.script_args`). It knows nothing about this
machine: "auto" device choice and launching live in :mod:`ddlab.training.runs`.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields, replace
from typing import Mapping, Optional

from ddlab.base.paths import SOURCE_DIR
from ddlab.system.frameworks import FRAMEWORK_LAUNCHERS, FRAMEWORKS, check_choice
from ddlab.training.models import MODELS, PROBE, PROBE_BATCH, TRAINABLE  # the one list of the course's models
from ddlab.base.errors import CourseError

SCRIPTS = {"torch": os.path.join(SOURCE_DIR, "train", "fmnist_torch.py"),
           "keras": os.path.join(SOURCE_DIR, "train", "fmnist_keras.py")}
# the script's --launcher -> the ddlab.measure.launch launcher that starts its workers
LAUNCHERS = {"none": "python", "ddp": "torchrun", "horovod": "horovodrun"}
DEVICES = ("cpu", "cuda")
PRECISIONS = ("fp32", "bf16")
CUDA_GRAPH = ("auto", "on", "off")
COMPILE = ("none", "default", "reduce-overhead", "max-autotune-no-cudagraphs")

# Run sizes: the one place live runs and recordings take them from. GPU: batch 512 per GPU;
# enough timed steps for a stable median, few enough that the slowest path (wide over
# sockets, ~0.1 s a step) stays short. CPU: small, so a 2-core laptop finishes in seconds
# (the point there is the real code path, not the numbers). The wide model's evaluation on
# CPU is slow (1.5 TFLOP for 10,000 images), so CPU runs of it evaluate 1,000 test images.
GPU_SIZES = {"batch": 512, "steps": 300, "warmup_steps": 50, "precision": "bf16", "test_samples": 10000}
GPU_SIZES_WIDE = dict(GPU_SIZES, steps=150, warmup_steps=30)
CPU_SIZES = {"batch": 64, "steps": 20, "warmup_steps": 5, "precision": "fp32", "test_samples": 10000}
CPU_SIZES_WIDE = dict(CPU_SIZES, batch=32, steps=8, warmup_steps=2, test_samples=1000)
# A hung collective is killed well before a 10-minute budget is gone.
DEFAULT_TIMEOUT = {"cuda": 240.0, "cpu": 600.0}
# Live GPU runs that a table compares (speedups, paths, precisions) repeat this many times unless
# told otherwise, so that each row shows its spread. The small CPU runs beside a recording stay
# single runs (they show the code path, on cores the workers share) and their notes say so.
LIVE_GPU_REPEATS = 3
# The fields that make two runs "the same experiment" (what a recording is compared on).
SIZE_FIELDS = ("batch", "steps", "warmup_steps", "precision")


class RunSpecError(CourseError, ValueError):
    """A run description that cannot be run (one message, naming the bad value)."""


def _check_choice(what: str, value, choices) -> None:
    check_choice(what, value, choices, RunSpecError)


def _positive_int(what: str, value, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise RunSpecError(f"{what} must be a whole number >= {minimum}, got {value!r}")


def default_sizes(device: str, model: str) -> dict:
    """The sizes a run of ``model`` on ``device`` ("cpu" or "cuda") takes unless told otherwise."""
    _check_choice("device", device, DEVICES)
    if model == PROBE:                 # a tiny batch: the step is its fixed cost
        return dict(GPU_SIZES if device == "cuda" else CPU_SIZES, batch=PROBE_BATCH)
    if device == "cuda":
        return dict(GPU_SIZES_WIDE if model == "wide" else GPU_SIZES)
    return dict(CPU_SIZES_WIDE if model == "wide" else CPU_SIZES)


@dataclass(frozen=True)
class RunSpec:
    """One training run. ``batch`` is per worker; ``steps`` include ``warmup_steps``;
    ``path`` names an NCCL path of :data:`ddlab.system.nccl.PATHS` (an alias becomes its name); ``repeats``: how many times an
    experiment runs it (the result keeps each run plus median and min-max). ``cuda_graph``
    and ``compile`` None leave the script's own default; ``seed`` None too. ``timeout``
    None: :data:`DEFAULT_TIMEOUT` for the device. ``extra_args``: further script options
    passed through as given (e.g. ``("--lr", "0.002")``)."""
    framework: str = "torch"
    launcher: str = "none"
    model: str = "cnn"
    batch: int = CPU_SIZES["batch"]
    steps: int = CPU_SIZES["steps"]
    warmup_steps: int = CPU_SIZES["warmup_steps"]
    precision: str = CPU_SIZES["precision"]
    path: str = "default"
    workers: int = 1
    device: str = "cpu"
    repeats: int = 1
    cuda_graph: Optional[str] = None
    compile: Optional[str] = None
    channels_last: bool = False
    test_samples: int = CPU_SIZES["test_samples"]
    seed: Optional[int] = None
    timeout: Optional[float] = None
    extra_args: tuple = ()

    def __post_init__(self):
        _check_choice("framework", self.framework, FRAMEWORKS)
        _check_choice("launcher", self.launcher, FRAMEWORK_LAUNCHERS[self.framework])
        _check_choice("model", self.model, TRAINABLE)
        if self.model == PROBE and self.framework != "torch":
            raise RunSpecError("the probe model is a PyTorch model (fmnist_torch.py)")
        _check_choice("device", self.device, DEVICES)
        _check_choice("precision", self.precision, PRECISIONS)
        object.__setattr__(self, "path", nccl_path_name(self.path))
        _positive_int("workers", self.workers)
        _positive_int("batch", self.batch)
        _positive_int("steps", self.steps)
        _positive_int("warmup_steps", self.warmup_steps, minimum=0)
        _positive_int("repeats", self.repeats)
        _positive_int("test_samples", self.test_samples)
        if self.warmup_steps >= self.steps:
            raise RunSpecError(f"warmup_steps ({self.warmup_steps}) must be fewer than steps ({self.steps}): "
                               "steps count the warm-up too")
        if self.launcher == "none" and self.workers != 1:
            raise RunSpecError("launcher 'none' runs one process; use 'ddp' or 'horovod' for more workers")
        if self.cuda_graph is not None:
            _check_choice("cuda_graph", self.cuda_graph, CUDA_GRAPH)
        if self.compile is not None:
            _check_choice("compile", self.compile, COMPILE)
        if self.framework == "keras" and (self.cuda_graph or self.compile or self.channels_last):
            raise RunSpecError("cuda_graph, compile and channels_last are PyTorch options")
        if self.timeout is not None and not self.timeout > 0:
            raise RunSpecError(f"timeout must be a positive number of seconds, got {self.timeout!r}")
        object.__setattr__(self, "extra_args", tuple(str(a) for a in self.extra_args))

    @classmethod
    def for_device(cls, device: str, model: str = "cnn", **fields_) -> "RunSpec":
        """The default run of ``model`` on ``device`` ("cpu" or "cuda"), with ``fields_``
        overriding any field (None values are ignored, so optional arguments pass through)."""
        given = {k: v for k, v in fields_.items() if v is not None}
        unknown = set(given) - {f.name for f in fields(cls)}
        if unknown:
            raise RunSpecError(f"unknown RunSpec field(s) {', '.join(sorted(unknown))}")
        return cls(**{**default_sizes(device, model), "device": device, "model": model, **given})

    def with_(self, **changes) -> "RunSpec":
        """A copy with ``changes`` (validated again)."""
        return replace(self, **changes)

    @property
    def script(self) -> str:
        return SCRIPTS[self.framework]

    @property
    def process_launcher(self) -> str:
        """The :mod:`ddlab.measure.launch` launcher that starts the workers (python, torchrun, horovodrun)."""
        return LAUNCHERS[self.launcher]

    @property
    def limit_s(self) -> float:
        return self.timeout or DEFAULT_TIMEOUT[self.device]

    @property
    def graph_by_default(self) -> bool:
        """A one-process GPU PyTorch run that captures a CUDA graph only because that is the
        script's default (nothing asked for or against it)."""
        return (self.framework == "torch" and self.launcher == "none" and self.device == "cuda"
                and self.cuda_graph is None and self.compile is None and "--cuda-graph" not in self.extra_args
                and "--compile" not in self.extra_args)

    def option_args(self) -> list:
        """The speed options and pass-through arguments, as script options."""
        argv = []
        if self.seed is not None:
            argv += ["--seed", self.seed]
        if self.cuda_graph is not None:
            argv += ["--cuda-graph", self.cuda_graph]
        if self.compile is not None:
            argv += ["--compile", self.compile]
        if self.channels_last:
            argv.append("--channels-last")
        return [str(a) for a in [*argv, *self.extra_args]]

    def script_args(self) -> list:
        """The training script's argv (without the interpreter and without ``--json``)."""
        argv = [self.script, "--launcher", self.launcher, "--model", self.model, "--batch-size", self.batch,
                "--steps", self.steps, "--warmup-steps", self.warmup_steps, "--precision", self.precision,
                "--device", self.device, "--test-samples", self.test_samples]
        return [str(a) for a in argv] + self.option_args()

    def sizes(self) -> dict:
        return {k: getattr(self, k) for k in SIZE_FIELDS}

    def differences(self, other: "RunSpec") -> dict:
        """{field: (this, other)} for the size fields where the two runs differ."""
        return {k: (getattr(self, k), getattr(other, k)) for k in SIZE_FIELDS if getattr(self, k) != getattr(other, k)}

    def to_dict(self) -> dict:
        d = asdict(self)
        d["extra_args"] = list(self.extra_args)
        return d

    @classmethod
    def from_dict(cls, d: Mapping) -> "RunSpec":
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise RunSpecError(f"not a RunSpec: unknown field(s) {', '.join(sorted(unknown))}")
        return cls(**{k: (tuple(v) if k == "extra_args" else v) for k, v in d.items()})

    @classmethod
    def from_config(cls, config: Mapping, **more) -> "RunSpec":
        """The RunSpec of a result's ``config`` (what experiments write, recordings included:
        batch_size, steps, warmup_steps, precision, device, framework, launcher, model)."""
        workers = config.get("workers")
        if isinstance(workers, (list, tuple)):
            workers = max(workers) if workers else None
        launcher = config.get("launcher") or "none"
        if "+" in launcher:           # a combination of launchers: describe the first
            launcher = launcher.split("+")[0]
        spec = {"framework": config.get("framework"), "launcher": launcher,
                "batch": config.get("batch_size"), "steps": config.get("steps"),
                "warmup_steps": config.get("warmup_steps"), "precision": config.get("precision"),
                "workers": workers, "repeats": config.get("repeats")}
        spec.update(more)
        return cls.for_device(config.get("device") or "cuda", config.get("model") or "cnn", **spec)


# ----------------------------------------------------------------------------- NCCL paths
# The NCCL paths are ddlab.system.nccl's; a RunSpec names one (aliases become the path's name).
def nccl_path_name(path) -> str:
    """The path's name for a name, alias or legacy NCCL_P2P_LEVEL integer (RunSpecError if unknown)."""
    from ddlab.system import nccl
    try:
        return nccl.get(path).name
    except ValueError as exc:
        raise RunSpecError(str(exc)) from None


def nccl_path_env(path: str, extra: Optional[Mapping] = None) -> dict:
    """The environment of NCCL path ``path`` plus ``extra`` (None removes a variable)."""
    from ddlab.system import nccl
    return nccl.get(path).environment(extra)
