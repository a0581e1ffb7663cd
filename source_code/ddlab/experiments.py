"""Named Fashion-MNIST training experiments, shared by the notebooks and the ``ddlab`` CLI.

One run is :func:`train`: it starts ``source_code/train/fmnist_torch.py`` or
``fmnist_keras.py`` under the right launcher (``python``, ``torchrun`` for DDP,
``horovodrun`` for Horovod) through :func:`ddlab.launch.run`, always with a timeout, and
returns the JSON result the script wrote (rank 0), which includes ``phase_s``: where the
run's seconds went (imports, distributed init, data, model, warm-up, timed loop, test).
Every experiment takes ``progress`` (e.g. ``print``) for a line as each run starts and ends.

The experiments built on it return an :class:`ExperimentResult` (``.table()``, ``.plot()``,
``.to_dict()``):

* :func:`throughput_scaling` - images/s over 1, 2, ... workers, speedup and efficiency;
* :func:`nccl_path_comparison` - the course's central experiment: the same training over
  NCCL's default path (NVLink peer-to-peer where there is NVLink), over shared host memory
  (``NCCL_P2P_LEVEL=LOC``) and over sockets (``NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1``), each
  under ``NCCL_DEBUG=INFO`` so the transport NCCL really chose is read from its log
  (:mod:`ddlab.nccl_log`) and shown beside the images/s and the speedup over one worker;
* :func:`launchers_side_by_side` - DDP and Horovod on each NCCL path in one table;
* :func:`performance_options` - one GPU, the same model with each speed option
  (bf16, CUDA graph, torch.compile, channels-last): where the time of a small model goes.

:func:`live_or_recorded` runs an experiment live when this machine can (enough GPUs, the
framework and launcher installed) and otherwise loads the result recorded on the course's
GPU machine from ``source_code/reference/experiments/``, saying which it did; with no GPU it
also runs the experiment for real, small, on CPU processes with gloo, and puts it beside.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import shlex
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional, Sequence

from . import SOURCE_DIR, launch, nccl, reference, throughput

SCRIPTS = {"torch": os.path.join(SOURCE_DIR, "train", "fmnist_torch.py"),
           "keras": os.path.join(SOURCE_DIR, "train", "fmnist_keras.py")}
FRAMEWORKS = tuple(SCRIPTS)
# the script's --launcher -> the ddlab.launch launcher that starts its workers
LAUNCHERS = {"none": "python", "ddp": "torchrun", "horovod": "horovodrun"}
FRAMEWORK_LAUNCHERS = {"torch": ("none", "ddp", "horovod"), "keras": ("none", "horovod")}
MODELS = ("cnn", "wide", "mlp-small", "mlp-large")
EXPERIMENTS = ("scaling", "nccl-paths", "perf-options")
REFERENCE_KIND = "experiments"

# Run sizes. GPU: batch 512 per GPU as in the course's reference measurements; enough timed
# steps for a stable median, few enough that the slowest path (wide over sockets, ~0.1 s a
# step) stays short. CPU: small, so a 2-core laptop finishes in seconds (the point there is
# the real code path, not the numbers). The wide model's evaluation on CPU is slow (1.5
# TFLOP for 10,000 images), so CPU runs of it evaluate 1,000 test images.
GPU_SIZES = {"batch_size": 512, "steps": 300, "warmup_steps": 50, "precision": "bf16", "test_samples": 10000}
GPU_SIZES_WIDE = dict(GPU_SIZES, steps=150, warmup_steps=30)
CPU_SIZES = {"batch_size": 64, "steps": 20, "warmup_steps": 5, "precision": "fp32", "test_samples": 10000}
CPU_SIZES_WIDE = dict(CPU_SIZES, batch_size=32, steps=8, warmup_steps=2, test_samples=1000)
# A launch on the 2x H200 machine took tens of seconds (seven single-GPU runs, two with
# torch.compile, about 8 minutes); the phase lines of each run say where that time goes. A
# hung collective is killed well before a 10-minute budget is gone (the scripts in
# tools/recording/ use 90 s).
DEFAULT_TIMEOUT = {"cuda": 240.0, "cpu": 600.0}

# Single-GPU speed options for performance_options(): label -> extra script arguments.
PERF_OPTIONS = {
    "plain fp32": ["--precision", "fp32", "--cuda-graph", "off"],
    "bf16": ["--precision", "bf16", "--cuda-graph", "off"],
    "cuda-graph fp32": ["--precision", "fp32", "--cuda-graph", "on"],
    "cuda-graph bf16": ["--precision", "bf16", "--cuda-graph", "on"],
    "cuda-graph bf16 channels-last": ["--precision", "bf16", "--cuda-graph", "on", "--channels-last"],
    "compile bf16": ["--precision", "bf16", "--compile", "default", "--cuda-graph", "off"],
    "compile + cuda-graph bf16": ["--precision", "bf16", "--compile", "default", "--cuda-graph", "on"],
}


class ExperimentError(RuntimeError):
    """An experiment cannot run as asked (bad arguments, missing framework, no result)."""


# ----------------------------------------------------------------------------- machine facts
def gpu_count(framework: str = "torch") -> int:
    """GPUs the framework can use here (TensorFlow is not imported to ask: NVML/nvidia-smi)."""
    if framework == "torch":
        try:
            import torch
        except ImportError:
            return 0
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    from . import hardware
    return hardware.inventory(software=False, dataset=False).gpu_count


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _horovod_extension(framework: str) -> bool:
    """Whether Horovod was built for this framework, found without importing it (importing
    horovod.tensorflow imports TensorFlow, seconds)."""
    spec = importlib.util.find_spec("horovod") if _has_module("horovod") else None
    if spec is None or not spec.submodule_search_locations:
        return False
    sub = "torch" if framework == "torch" else "tensorflow"
    for base in spec.submodule_search_locations:
        d = os.path.join(base, sub)
        if os.path.isdir(d) and any(f.startswith("mpi_lib") and f.endswith((".so", ".pyd")) for f in os.listdir(d)):
            return True
    return False


def availability(framework: str, launcher: str) -> tuple:
    """(True, "") when this Python can run ``framework`` under ``launcher``, else (False, why)."""
    _check_choice("framework", framework, FRAMEWORKS)
    _check_choice("launcher", launcher, FRAMEWORK_LAUNCHERS[framework])
    if framework == "torch" and not _has_module("torch"):
        return False, "PyTorch is not installed"
    if framework == "keras":
        if not _has_module("tensorflow"):
            return False, "TensorFlow is not installed"
        if not _has_module("tf_keras"):
            return False, "tf-keras is not installed (Horovod's Keras API needs it, not Keras 3)"
    if launcher == "horovod":
        if not _horovod_extension(framework):
            return False, f"Horovod is not built for {'PyTorch' if framework == 'torch' else 'TensorFlow'} here"
        if not os.path.exists(launch._bin("horovodrun", sys.executable)):
            return False, "horovodrun is not on PATH"
    return True, ""


def run_provenance(command, torch_facts: bool = True) -> dict:
    """:func:`ddlab.provenance.collect` for one training run, without the slow part of the
    full inventory (``horovodrun --check-build`` imports every framework: seconds per run).
    ``torch_facts=False`` reads torch's version without importing it (the Keras script)."""
    from . import hardware, provenance

    def version(dist):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return None

    inv = hardware.inventory(software=False, dataset=False)
    if torch_facts:
        facts = hardware.torch_facts(inv.notes)
        inv.torch, inv.cuda_runtime, inv.nccl = facts["torch"], facts["cuda_runtime"], facts["nccl"]
    else:
        inv.torch = version("torch")
    inv.tensorflow = hardware.tensorflow_version()
    inv.horovod = version("horovod")
    return provenance.collect(command=command, inventory=inv)


# ----------------------------------------------------------------------------- one run
def _check_choice(what: str, value, choices) -> None:
    if value not in choices:
        raise ValueError(f"unknown {what} {value!r}; choose one of {', '.join(map(str, choices))}")


def resolve_device(framework: str, device: str, workers: int) -> str:
    """"cuda" when asked, or with "auto" when there is one GPU per worker; else "cpu"."""
    _check_choice("device", device, ("auto", "cpu", "cuda"))
    if device != "auto":
        return device
    return "cuda" if gpu_count(framework) >= workers else "cpu"


def default_sizes(device: str, model: str) -> dict:
    if device == "cuda":
        return dict(GPU_SIZES_WIDE if model == "wide" else GPU_SIZES)
    return dict(CPU_SIZES_WIDE if model == "wide" else CPU_SIZES)


# Lines fmnist_torch.py prints (rank 0) around its CUDA-graph capture (its CAPTURE_START and
# CAPTURE_DONE): a failed run whose output has the first was attempting a graph.
CAPTURE_START = "cuda-graph capture: start"


def _describe_run(framework, launcher, workers, model, dev, env, extra_args) -> str:
    nccl = " ".join(f"{k}={v}" for k, v in sorted((env or {}).items())
                    if v is not None and k.startswith("NCCL_") and k != "NCCL_DEBUG")
    return (f"{framework} {launcher}, {workers} worker(s), model {model}, {dev}"
            + (f", {nccl}" if nccl else "") + (f", {' '.join(map(str, extra_args))}" if extra_args else ""))


def _phases_text(result: dict) -> str:
    ph = result.get("phase_s") or {}
    return ", ".join(f"{k} {v:.1f}" for k, v in ph.items())


def train(framework: str = "torch", launcher: str = "none", workers: int = 1, model: str = "cnn",
          batch_size: Optional[int] = None, steps: Optional[int] = None, warmup_steps: Optional[int] = None,
          precision: Optional[str] = None, device: str = "auto", env: Optional[Mapping] = None,
          timeout: Optional[float] = None, extra_args: Sequence[str] = (), echo: bool = False,
          keep_log: bool = False, test_samples: Optional[int] = None, python: str = sys.executable,
          graph_fallback: bool = True, progress: Optional[Callable[[str], None]] = None) -> dict:
    """One training run; returns the script's JSON result.

    ``launcher`` is the script's: "none" (one process), "ddp" (torchrun) or "horovod"
    (horovodrun --gloo controller; the gradients go over NCCL on GPUs). Sizes left as None
    take :func:`default_sizes` for the device. ``env`` adds (None: removes) environment
    variables for the workers. ``keep_log`` adds the workers' combined output as ``"log"``.
    ``progress`` (e.g. ``print``) gets one line when the run starts and one when it ends,
    with its seconds and the worker's phase times (``phase_s``).

    ``graph_fallback``: a one-process GPU run that captured a CUDA graph because that is
    the default (no ``--cuda-graph`` or ``--compile`` in ``extra_args``), and whose process
    then died or hung after starting the capture, is run once more with ``--cuda-graph off``;
    ``progress`` hears about the rerun at once, and the result's ``notes`` and
    ``cuda_graph_failure_log`` say why. (A capture that merely raises is handled inside the
    script, which then runs eagerly.) DDP captures only with an explicit ``--cuda-graph on``,
    which is never rerun. Raises :class:`ddlab.launch.LaunchError` (its message quotes the
    end of the output, and for a timeout where each worker was stuck) when the run fails or
    times out."""
    _check_choice("framework", framework, FRAMEWORKS)
    _check_choice("launcher", launcher, FRAMEWORK_LAUNCHERS[framework])
    _check_choice("model", model, MODELS)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive integer, got {workers!r}")
    if launcher == "none" and workers != 1:
        raise ValueError("launcher 'none' runs one process; use 'ddp' or 'horovod' for more workers")
    dev = resolve_device(framework, device, workers)
    sizes = default_sizes(dev, model)
    for key, value in (("batch_size", batch_size), ("steps", steps), ("warmup_steps", warmup_steps),
                       ("precision", precision), ("test_samples", test_samples)):
        if value is not None:
            sizes[key] = value
    argv = [SCRIPTS[framework], "--launcher", launcher, "--model", model,
            "--batch-size", sizes["batch_size"], "--steps", sizes["steps"],
            "--warmup-steps", sizes["warmup_steps"], "--precision", sizes["precision"],
            "--device", dev, "--test-samples", sizes["test_samples"], *extra_args]
    argv = [str(a) for a in argv]
    run_env = dict(env or {})
    # What the result's provenance shows as the command: the launch itself, reproducible.
    run_env["DDLAB_COMMAND"] = shlex.join(launch.command_for(LAUNCHERS[launcher], workers, argv, python=python))
    say = progress or (lambda line: None)
    limit = timeout or DEFAULT_TIMEOUT[dev]
    what = _describe_run(framework, launcher, workers, model, dev, env, extra_args)
    say(f"[ddlab {time.strftime('%H:%M:%S')}] start: {what} (timeout {limit:.0f} s)")
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ddlab-train-") as tmp:
        out_path = os.path.join(tmp, "result.json")
        try:
            res = launch.run([*argv, "--json", out_path], launcher=LAUNCHERS[launcher], nproc=workers,
                             env=run_env, timeout=limit, echo=echo, python=python)
        except launch.LaunchError as exc:
            kind = "timed out" if isinstance(exc, launch.LaunchTimeout) else "failed"
            say(f"[ddlab {time.strftime('%H:%M:%S')}] {kind} after {time.monotonic() - t0:.1f} s: {what}")
            output = exc.result.output if exc.result is not None else ""
            graph_by_default = (framework == "torch" and launcher == "none" and dev == "cuda"
                                and "--cuda-graph" not in extra_args and "--compile" not in extra_args)
            if not (graph_fallback and graph_by_default and CAPTURE_START in output):
                raise
            tail = exc.result.tail(30)
            stuck = launch.hang_tracebacks(output)
            errors = [ln.strip() for ln in tail.splitlines() if "rror" in ln]
            why = f"{kind}: " + (errors[-1][:300] if errors else str(exc).splitlines()[0])
            say(f"[ddlab {time.strftime('%H:%M:%S')}] note: the run {kind} after starting its CUDA-graph "
                f"capture; running it once more with --cuda-graph off (a second launch)")
            result = train(framework, launcher, workers, model, batch_size, steps, warmup_steps, precision,
                           device, env, timeout, [*extra_args, "--cuda-graph", "off"], echo, keep_log,
                           test_samples, python, graph_fallback=False, progress=progress)
            result.setdefault("notes", []).append(f"the run with a CUDA graph {why}; this is the rerun with "
                                                  "--cuda-graph off")
            result["cuda_graph_failure_log"] = (stuck + "\n" if stuck else "") + tail
            return result
        if not os.path.exists(out_path):
            raise ExperimentError(f"{framework} {launcher} run of {workers} worker(s) exited cleanly but wrote "
                                  f"no result.\nlast output:\n{res.tail()}")
        with open(out_path) as f:
            result = json.load(f)
    result["launch_s"] = res.duration_s
    say(f"[ddlab {time.strftime('%H:%M:%S')}] done in {res.duration_s:.1f} s: {what}: "
        f"{result['images_per_s']:,.0f} img/s; rank 0 took {result.get('wall_s', float('nan')):.1f} s "
        f"({_phases_text(result)})")
    if keep_log:
        result["log"] = res.output
    return result


# ----------------------------------------------------------------------------- results
@dataclass
class ExperimentResult:
    """What an experiment found. ``rows``: one dict per configuration; ``source``: "live"
    (run just now, here) or "recorded" (loaded from source_code/reference/experiments/);
    ``companion``: a second result shown beside this one (the small CPU run next to a
    recorded GPU result)."""
    name: str
    rows: list
    source: str = "live"
    provenance: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    config: dict = field(default_factory=dict)
    runs: list = field(default_factory=list)
    companion: Optional["ExperimentResult"] = None

    # ---- text
    def title(self) -> str:
        c = self.config
        what = {"scaling": "throughput scaling", "nccl-paths": "NCCL paths", "launchers": "NCCL paths by launcher",
                "perf-options": "single-GPU speed options"}.get(self.name, self.name)
        return (f"{what}: {c.get('framework')} {c.get('launcher')}, model {c.get('model')}, "
                f"batch {c.get('batch_size')}/worker, {c.get('device')}")

    def where(self) -> str:
        from . import provenance as prov
        label = prov.label(self.provenance) if self.provenance else "unknown machine"
        if self.source == "missing":
            return "not recorded yet"
        return f"{'recorded on' if self.source == 'recorded' else 'measured now on'} {label}"

    def table(self) -> str:
        cols = _COLUMNS.get(self.name, _COLUMNS["scaling"])
        cells = [[h for h, _ in cols]]
        for row in self.rows:
            if row.get("error"):
                cells.append([_fmt(row.get(cols[0][1]))] + [f"failed: {row['error'][:70]}"] + [""] * (len(cols) - 2))
            else:
                cells.append([_fmt(row.get(key), key) for _, key in cols])
        widths = [max(len(r[i]) for r in cells) for i in range(len(cols))]
        lines = [f"{self.title()} ({self.where()})"]
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells[:1]]
        lines.append("  ".join("-" * w for w in widths))
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells[1:]]
        lines += [f"note: {n}" for n in self.notes]
        if self.companion is not None:
            lines += ["", self.companion.table()]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    # ---- plot
    def plot(self, ax=None):
        """Bar chart of images/s per configuration, speedups written on the bars. With a
        companion and no ``ax``, both are drawn side by side. Returns the axes."""
        import matplotlib.pyplot as plt
        if ax is None:
            n = 2 if self.companion is not None else 1
            fig, axes = plt.subplots(1, n, figsize=(6.4 * n, 4.2), squeeze=False)
            self._plot_one(axes[0][0])
            if self.companion is not None:
                self.companion._plot_one(axes[0][1])
            fig.tight_layout()
            return axes[0][0] if n == 1 else axes[0]
        self._plot_one(ax)
        return ax

    def _plot_one(self, ax):
        ok = [r for r in self.rows if not r.get("error")]
        if not ok:  # nothing measured (e.g. not recorded yet): say so instead of an empty chart
            ax.text(0.5, 0.5, "\n".join([self.where()] + self.notes[:1]), ha="center", va="center",
                    fontsize=8, wrap=True, transform=ax.transAxes)
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(self.title(), fontsize=9)
            return
        labels = [_row_label(self.name, r) for r in ok]
        values = [r["images_per_s"] for r in ok]
        colours = [_BASELINE_COLOUR if r.get("path") == "1 worker" else nccl.colour(r.get("path")) for r in ok]
        bars = ax.bar(range(len(ok)), values, color=colours)
        for bar, r in zip(bars, ok):
            ratio = r.get("speedup")
            text = f"{r['images_per_s']:,.0f}" + (f"\n{ratio:.2f}x" if ratio is not None else "")
            ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom",
                        fontsize=8, xytext=(0, 2), textcoords="offset points")
        base = self.config.get("baseline_images_per_s")
        if base and self.name == "nccl-paths":
            ax.axhline(base, color="grey", linestyle="--", linewidth=1)
            ax.annotate("1 worker", (len(ok) - 0.5, base), ha="right", va="bottom", fontsize=8, color="grey")
        ax.set_xticks(range(len(ok)))
        ax.set_xticklabels(labels, fontsize=8, rotation=15 if len(ok) > 4 else 0)
        ax.set_ylabel("images/s (all workers)")
        ax.set_ylim(0, max(values + [base or 0]) * 1.25 if values else 1)
        ax.set_title(f"{self.title()}\n{self.where()}", fontsize=9)
        return ax

    # ---- persistence
    def to_dict(self) -> dict:
        d = {"experiment": self.name, "source": self.source, "config": self.config, "rows": self.rows,
             "notes": self.notes, "runs": self.runs, "provenance": self.provenance}
        if self.companion is not None:
            d["companion"] = self.companion.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict, source: Optional[str] = None) -> "ExperimentResult":
        for key in ("experiment", "rows", "provenance"):
            if key not in d:
                raise ValueError(f"not an experiment result: no {key!r} field")
        comp = cls.from_dict(d["companion"]) if d.get("companion") else None
        return cls(name=d["experiment"], rows=list(d["rows"]), source=source or d.get("source", "live"),
                   provenance=d["provenance"], notes=list(d.get("notes", [])), config=dict(d.get("config", {})),
                   runs=list(d.get("runs", [])), companion=comp)

    def save(self, path: str) -> str:
        with open(path, "w") as f:
            json.dump(self.to_dict(), f, indent=1)
            f.write("\n")
        return path

    def save_reference(self, name: Optional[str] = None) -> str:
        """Record a live result under source_code/reference/experiments/<name>.json."""
        if self.source != "live":
            raise ExperimentError("only a live result can be recorded as a reference")
        c = self.config
        return reference.save(REFERENCE_KIND, name or reference_name(self.name, c.get("framework"),
                                                                     c.get("launcher"), c.get("model")),
                              self.to_dict())


_COLUMNS = {
    "scaling": [("workers", "workers"), ("images/s", "images_per_s"), ("speedup", "speedup"),
                ("efficiency", "efficiency"), ("step ms median", "step_ms_median"),
                ("p10-p90", "step_ms_spread"), ("global batch", "global_batch"), ("test acc", "test_accuracy")],
    "nccl-paths": [("path", "path"), ("NCCL settings", "env_text"), ("workers", "workers"),
                   ("images/s", "images_per_s"), ("speedup vs 1", "speedup"), ("step ms median", "step_ms_median"),
                   ("p10-p90", "step_ms_spread"), ("transport", "transport"), ("graph", "cuda_graph"),
                   ("test acc", "test_accuracy")],
    "launchers": [("path", "path"), ("launcher", "launcher"), ("images/s", "images_per_s"),
                  ("speedup vs 1", "speedup"), ("step ms median", "step_ms_median"), ("transport", "transport"),
                  ("graph", "cuda_graph")],
    "perf-options": [("option", "option"), ("images/s", "images_per_s"), ("vs plain", "speedup"),
                     ("step ms median", "step_ms_median"), ("p10-p90", "step_ms_spread"),
                     ("cuda graph", "cuda_graph"), ("test acc", "test_accuracy")],
}
_BASELINE_COLOUR = "#8c8c8c"   # the one-worker row; each NCCL path's colour is ddlab.nccl's


def _fmt(v, key: str = "") -> str:
    if v is None:
        return "-"
    if key == "images_per_s":
        return f"{v:,.0f}"
    if key in ("speedup",):
        return f"{v:.2f}x"
    if key in ("efficiency", "test_accuracy"):
        return f"{v:.1%}" if key == "efficiency" else f"{v:.4f}"
    if key == "step_ms_median":
        return f"{v:.3f}"
    if isinstance(v, bool):
        return "yes" if v else "no"
    return str(v)


def _row_label(name: str, r: dict) -> str:
    if name == "nccl-paths":
        return r.get("path", "?")
    if name == "perf-options":
        return r.get("option", "?")
    if name == "launchers":
        return f"{r.get('launcher')}\n{r.get('path')}"
    return f"{r.get('workers')} worker" + ("s" if r.get("workers") != 1 else "")


def _row(run: dict) -> dict:
    """The columns every experiment shows, from one run's result."""
    st = run["step_time_ms"]
    return {"workers": run["workers"], "images_per_s": run["images_per_s"], "global_batch": run["global_batch"],
            "step_ms_median": st["median"], "step_ms_p10": st["p10"], "step_ms_p90": st["p90"],
            "step_ms_spread": f"{st['p10']:.3f}-{st['p90']:.3f}", "test_accuracy": run["test_accuracy"],
            "device": run["device"], "backend": run["backend"], "cuda_graph": run.get("cuda_graph"),
            "ranks_agree": run.get("ranks_agree"), "precision": run.get("precision")}


def _config(framework, launcher, model, run: dict, **more) -> dict:
    c = {"framework": framework, "launcher": launcher, "model": model, "params": run.get("params"),
         "gradient_bytes_per_step": run.get("gradient_bytes_per_step"), "batch_size": run.get("batch_per_worker"),
         "steps": run.get("steps"), "warmup_steps": run.get("warmup_steps"), "precision": run.get("precision"),
         "device": run.get("device"), "device_name": run.get("device_name")}
    c.update(more)
    return c


def _slim(run: dict) -> dict:
    return {k: v for k, v in run.items() if k != "log"}


def _failure_row(exc: Exception, **fields) -> dict:
    """The row of a run that failed: its error, and for a timeout where the workers were stuck."""
    row = dict(fields, error=" ".join(str(exc).split())[:400])
    if isinstance(exc, launch.LaunchTimeout) and exc.result is not None:
        row["hang_traceback"] = launch.hang_tracebacks(exc.result.output)
    return row


def _experiment_provenance(argv_text: str) -> dict:
    return run_provenance(argv_text)


# ----------------------------------------------------------------------------- experiments
def throughput_scaling(framework: str = "torch", launcher: str = "ddp", workers: Sequence[int] = (1, 2),
                       model: str = "cnn", batch_size: Optional[int] = None, steps: Optional[int] = None,
                       warmup_steps: Optional[int] = None, precision: Optional[str] = None, device: str = "auto",
                       env: Optional[Mapping] = None, timeout: Optional[float] = None,
                       extra_args: Sequence[str] = (), echo: bool = False,
                       progress: Optional[Callable[[str], None]] = None) -> ExperimentResult:
    """Images/s of the same training on each number of ``workers`` (batch per worker fixed,
    so the global batch grows with the workers), speedup over the smallest count and
    scaling efficiency. Runs on GPUs when there is one per worker, else on CPU processes.
    ``progress``: as for :func:`train`."""
    workers = sorted({int(w) for w in workers})
    if not workers or workers[0] < 1:
        raise ValueError("workers must be positive integers, e.g. [1, 2]")
    if launcher == "none" and workers != [1]:
        raise ValueError("launcher 'none' is one process; use 'ddp' or 'horovod' to scale")
    dev = resolve_device(framework, device, max(workers))
    runs = [train(framework, launcher, w, model, batch_size, steps, warmup_steps, precision, dev, env, timeout,
                  extra_args, echo, progress=progress) for w in workers]
    base = runs[0]["images_per_s"]
    rows = []
    for run in runs:
        row = _row(run)
        row["speedup"] = throughput.speedup(run["images_per_s"], base)
        row["efficiency"] = throughput.scaling_efficiency(row["speedup"] * workers[0], run["workers"])
        rows.append(row)
    notes = [] if workers[0] == 1 else [f"speedup relative to {workers[0]} workers"]
    if dev == "cpu":
        notes.append("CPU processes with gloo: the workers share this machine's cores, so scaling shows the "
                     "real code path, not what GPUs would do")
    return ExperimentResult("scaling", rows, "live", _experiment_provenance(
        f"ddlab.experiments.throughput_scaling({framework!r}, {launcher!r}, workers={workers}, model={model!r})"),
        notes, _config(framework, launcher, model, runs[0], workers=workers), [_slim(r) for r in runs])


def _transport_of(log_text: str, dev: str, backend: str) -> dict:
    """The transport NCCL reported, via ddlab.nccl_log; the raw NCCL lines when that parser
    is not available."""
    if dev == "cpu" or "gloo" in backend:
        return {"transport": "gloo (TCP, no NCCL)", "transport_counts": {}}
    nccl_lines = [ln for ln in log_text.splitlines() if "NCCL" in ln]
    try:
        from . import nccl_log
    except ImportError:
        return {"transport": "see nccl_log_lines", "transport_counts": {}, "nccl_log_lines": nccl_lines[-400:]}
    parsed = nccl_log.parse(log_text)
    counts = parsed.transport_counts()
    return {"transport": " + ".join(counts) if counts else ("no NCCL connection lines" if not parsed.empty
                                                            else "no NCCL INFO lines"),
            "transport_counts": counts, "transports": parsed.transports(), "nccl_version": parsed.version,
            "nccl_env_reported": parsed.env, "nccl_summary": parsed.summary(),
            "nccl_connection_lines": [ln for ln in nccl_lines if " via " in ln][:64]}


def nccl_path_comparison(framework: str = "torch", launcher: str = "ddp", model: str = "wide",
                         paths: Sequence[str] = ("default", "shm", "socket"), workers: int = 2,
                         batch_size: Optional[int] = None, steps: Optional[int] = None,
                         warmup_steps: Optional[int] = None, precision: Optional[str] = None,
                         device: str = "auto", timeout: Optional[float] = None, extra_args: Sequence[str] = (),
                         echo: bool = False, progress: Optional[Callable[[str], None]] = None) -> ExperimentResult:
    """The same training on ``workers`` GPUs under each NCCL path (``ddlab.nccl.PATHS``:
    default, shm = ``NCCL_P2P_LEVEL=LOC``, socket = ``NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1``),
    plus one worker alone as the baseline. Each path runs under ``NCCL_DEBUG=INFO`` and its
    row says which transport NCCL used. On CPU (gloo) there is no NCCL: only the default path
    runs, and the notes say so. A run that fails, the baseline included, gets a row with its
    error (one that timed out also with ``hang_traceback``: where each worker was stuck) and
    the others still run; without a baseline the speedups are left out. ``progress``: as for
    :func:`train`.

    With DDP on GPUs the step is not captured as a CUDA graph unless ``extra_args`` has
    ``--cuda-graph on`` (see fmnist_torch.py): baseline and paths then all run eagerly, so
    their ratios compare like with like."""
    paths = [nccl.get(p).name for p in paths]
    if launcher == "none":
        raise ValueError("the NCCL paths need several workers: use launcher 'ddp' or 'horovod'")
    if workers < 2:
        raise ValueError("the NCCL paths need at least 2 workers")
    dev = resolve_device(framework, device, workers)
    notes = []
    if dev == "cpu":
        notes.append("CPU processes: gradients are all-reduced by gloo over TCP, not by NCCL, so the NCCL paths "
                     "(NVLink P2P, SHM, socket) do not apply here; only 'default' was run. The recorded GPU "
                     "result shows the paths.")
        paths = ["default"]
    common = dict(framework=framework, launcher=launcher, model=model, batch_size=batch_size, steps=steps,
                  warmup_steps=warmup_steps, precision=precision, device=dev, timeout=timeout,
                  extra_args=extra_args, echo=echo, progress=progress)
    rows, runs = [], []
    base_text = "(one worker: no all-reduce traffic)"
    try:
        base_run = train(workers=1, **common)
    except (launch.LaunchError, ExperimentError) as exc:
        base_run, base = None, None
        rows.append(_failure_row(exc, path="1 worker", env={}, env_text=base_text, workers=1))
        notes.append(f"the one-worker baseline failed, so there are no speedups: {str(exc).splitlines()[0]}")
    else:
        base = base_run["images_per_s"]
        rows.append(dict(_row(base_run), path="1 worker", env={}, env_text=base_text, speedup=1.0, transport="-",
                         run=0))
        runs.append(_slim(base_run))
    for p in paths:
        env = nccl.get(p).environment({"NCCL_DEBUG": "INFO"})
        shown = {k: v for k, v in env.items() if v is not None and k != "NCCL_DEBUG"}
        env_text = " ".join(f"{k}={v}" for k, v in shown.items()) or "(NCCL defaults)"
        try:
            run = train(workers=workers, env=env, keep_log=True, **common)
        except (launch.LaunchError, ExperimentError) as exc:
            rows.append(_failure_row(exc, path=p, env=shown, env_text=env_text, workers=workers))
            notes.append(f"path {p!r} failed: {str(exc).splitlines()[0]}")
            continue
        log = run.pop("log", "")
        row = dict(_row(run), path=p, env=shown, env_text=env_text,
                   speedup=throughput.speedup(run["images_per_s"], base) if base else None, run=len(runs))
        row.update(_transport_of(log, dev, run["backend"]))
        rows.append(row)
        runs.append(_slim(run))
    if not runs:
        raise ExperimentError("every run of the NCCL path comparison failed:\n" + "\n".join(notes))
    return ExperimentResult("nccl-paths", rows, "live", _experiment_provenance(
        f"ddlab.experiments.nccl_path_comparison({framework!r}, {launcher!r}, model={model!r}, "
        f"paths={list(paths)}, workers={workers})"),
        notes, _config(framework, launcher, model, base_run or runs[0], workers=workers, paths=list(paths),
                       baseline_images_per_s=base), runs)


def scaling_from_paths(paths_result: ExperimentResult) -> ExperimentResult:
    """The 1 -> N scaling that an NCCL-path comparison already measured: its one-worker
    baseline and its default-path run (saves running the same two trainings again)."""
    if paths_result.name != "nccl-paths":
        raise ValueError("needs an nccl-paths result")
    picked = [r for r in paths_result.rows if r.get("path") in ("1 worker", "default") and not r.get("error")]
    if len(picked) != 2:
        raise ExperimentError("the nccl-paths result has no successful baseline and default-path run")
    rows = []
    for r in picked:
        row = {k: v for k, v in r.items() if k not in ("path", "env", "env_text")}
        row["efficiency"] = throughput.scaling_efficiency(row["speedup"], row["workers"])
        rows.append(row)
    cfg = dict(paths_result.config, workers=[r["workers"] for r in rows])
    cfg.pop("paths", None)
    runs = [paths_result.runs[r["run"]] for r in picked if r.get("run") is not None and r["run"] < len(paths_result.runs)]
    notes = ["taken from the nccl-paths runs: the one-worker baseline and the default NCCL path"]
    return ExperimentResult("scaling", rows, paths_result.source, paths_result.provenance,
                            notes + list(paths_result.notes), cfg, runs)


def performance_options(model: str = "cnn", options: Optional[Sequence[str]] = None,
                        batch_size: Optional[int] = None, steps: Optional[int] = None,
                        warmup_steps: Optional[int] = None, device: str = "auto", timeout: Optional[float] = None,
                        echo: bool = False, progress: Optional[Callable[[str], None]] = None) -> ExperimentResult:
    """One process, one GPU, PyTorch: the same training with each speed option of
    :data:`PERF_OPTIONS` (plain fp32 loop, bf16, CUDA graph, channels-last, torch.compile).
    A small model at batch 512 is limited by launching kernels, not by computing them; this
    shows what removing the launches is worth. An option that fails gets a row with its error."""
    options = list(options or PERF_OPTIONS)
    for o in options:
        _check_choice("option", o, tuple(PERF_OPTIONS))
    dev = resolve_device("torch", device, 1)
    notes = []
    if dev == "cpu":
        notes.append("CPU: CUDA graphs and bf16 autocast are GPU techniques; only the options that run on a "
                     "CPU were run")
        options = [o for o in options if "cuda-graph" not in o and "compile" not in o]
    rows, runs = [], []
    base = None
    for o in options:
        try:
            run = train("torch", "none", 1, model, batch_size, steps, warmup_steps, None, dev, None, timeout,
                        PERF_OPTIONS[o], echo, graph_fallback=False, progress=progress)
        except (launch.LaunchError, ExperimentError) as exc:
            rows.append(_failure_row(exc, option=o, workers=1))
            notes.append(f"option {o!r} failed: {str(exc).splitlines()[0]}")
            continue
        base = base or (run["images_per_s"] if o == options[0] else None)
        row = dict(_row(run), option=o, compile=run.get("compile"), cuda_graph_reason=run.get("cuda_graph_reason"),
                   channels_last=run.get("channels_last"),
                   speedup=throughput.speedup(run["images_per_s"], base) if base else None)
        rows.append(row)
        runs.append(_slim(run))
    if not runs:
        raise ExperimentError("every option failed:\n" + "\n".join(notes))
    return ExperimentResult("perf-options", rows, "live", _experiment_provenance(
        f"ddlab.experiments.performance_options(model={model!r}, options={options})"),
        notes, _config("torch", "none", model, runs[0], options=options), runs)


# ----------------------------------------------------------------------------- live or recorded
def reference_name(experiment: str, framework: str, launcher: str, model: str) -> str:
    return f"{experiment}-{framework}-{launcher}-{model}"


def load_recorded(experiment: str, framework: str = "torch", launcher: str = "ddp",
                  model: str = "cnn", variant: Optional[str] = None) -> ExperimentResult:
    """The recorded result (raises ddlab.reference.ReferenceMissing when there is none).
    ``variant`` picks a recording made with a non-default option, saved as
    ``<name>-<variant>.json`` (e.g. "graph": DDP with --cuda-graph on)."""
    name = reference_name(experiment, framework, launcher, model) + (f"-{variant}" if variant else "")
    return ExperimentResult.from_dict(reference.load(REFERENCE_KIND, name), source="recorded")


def _run(experiment: str, framework: str, launcher: str, model: str, workers, device: str, **kw) -> ExperimentResult:
    if experiment == "scaling":
        return throughput_scaling(framework, launcher, workers or (1, 2), model, device=device, **kw)
    if experiment == "nccl-paths":
        return nccl_path_comparison(framework, launcher, model, workers=workers or 2, device=device, **kw)
    if experiment == "perf-options":
        if framework != "torch":
            raise ValueError("perf-options is a PyTorch experiment")
        kw.pop("precision", None)
        kw.pop("env", None)
        kw.pop("extra_args", None)
        return performance_options(model, device=device, **kw)
    raise ValueError(f"unknown experiment {experiment!r}; choose one of {', '.join(EXPERIMENTS)}")


def live_or_recorded(experiment: str, framework: str = "torch", launcher: str = "ddp", model: str = "cnn",
                     workers=None, source: str = "auto", cpu_run: bool = True, missing_ok: bool = False,
                     cuda_graph: bool = False, **kwargs) -> ExperimentResult:
    """Run ``experiment`` ("scaling", "nccl-paths" or "perf-options") live on GPUs when this
    machine can, otherwise load the result recorded for it; the result's notes say which.

    ``source``: "auto", "live" (run it; fail with the reason if this machine cannot) or
    "recorded". With no GPU for the experiment and ``cpu_run``, a small real run on CPU
    processes (gloo) is made too and attached as ``.companion`` (or returned alone when
    nothing was recorded). When this machine cannot run it and nothing is recorded, raise
    ExperimentError, or with ``missing_ok`` return an empty result whose ``source`` is
    "missing" and whose notes say why (a notebook then says so instead of stopping).
    ``cuda_graph`` (PyTorch scaling and nccl-paths): capture each training step as a CUDA
    graph (``--cuda-graph on``; opt-in for DDP); the recorded result is then the "graph"
    variant, and no CPU run is added (a CPU has no CUDA graphs).
    Extra keyword arguments go to the experiment function."""
    _check_choice("experiment", experiment, EXPERIMENTS)
    _check_choice("source", source, ("auto", "live", "recorded"))
    variant = None
    if cuda_graph:
        if framework != "torch" or experiment == "perf-options" or launcher == "horovod":
            raise ValueError("cuda_graph is for PyTorch scaling and nccl-paths with --launcher none or ddp "
                             "(Horovod's all-reduce cannot be captured; perf-options has its own graph rows)")
        kwargs["extra_args"] = list(kwargs.get("extra_args", ())) + ["--cuda-graph", "on"]
        variant, cpu_run = "graph", False
    if experiment == "perf-options":
        launcher = "none"
    if experiment == "nccl-paths":
        need = int(workers or 2)
    elif experiment == "scaling":
        need = max(int(w) for w in (workers or (1, 2)))
    else:
        need = 1
    ok, why = availability(framework, launcher)
    gpus = gpu_count(framework) if ok else 0
    if ok and gpus < need:
        ok, why = False, f"it needs {need} GPU(s) and {framework} sees {gpus}"
    if source == "live" and not ok:
        raise ExperimentError(f"cannot run {experiment} live here: {why}")
    if source != "recorded" and ok:
        res = _run(experiment, framework, launcher, model, workers, "cuda", **kwargs)
        res.notes.insert(0, f"live: run just now on this machine's {need} GPU(s)")
        return res
    recorded = None
    try:
        recorded = load_recorded(experiment, framework, launcher, model, variant)
    except reference.ReferenceMissing as exc:
        missing = str(exc)
    if recorded is not None:
        from . import provenance as prov
        reason = "as asked" if source == "recorded" else f"this machine cannot run it live ({why})"
        recorded.notes.insert(0, f"recorded: {reason}; showing the run recorded on {prov.label(recorded.provenance)}")
    can_cpu = cpu_run and availability(framework, launcher)[0]
    if cpu_run and source != "recorded" and can_cpu and gpu_count(framework) < need:
        cpu = _run(experiment, framework, launcher, model, workers, "cpu", **kwargs)
        if recorded is None:
            cpu.notes.insert(0, f"live on CPU, small: this machine cannot run it on GPUs ({why})")
            note = f"no recorded GPU result: {missing}"
            if framework == "keras":
                note += (" (TensorFlow was not installed on the machine the course recorded on, so the Keras path "
                         "is verified on CPU; it runs on GPUs wherever a GPU TensorFlow is installed)")
            cpu.notes.append(note)
            return cpu
        cpu.notes.insert(0, "live on CPU: a small real run with gloo beside the recorded GPU result")
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
    for :func:`live_or_recorded` (default "recorded")."""
    return combine_launchers({la: live_or_recorded("nccl-paths", framework, la, model, source=source,
                                                   cpu_run=False, **kwargs) for la in launchers})


def _paths_in_order(results: Mapping[str, ExperimentResult]) -> list:
    """Every path named in the results' rows, once each, in the order they first appear."""
    paths: list = []
    for res in results.values():
        paths += [r["path"] for r in res.rows if r.get("path") and r["path"] not in paths]
    return paths


def combine_launchers(results: Mapping[str, ExperimentResult]) -> ExperimentResult:
    """{launcher: nccl-paths result} -> one result whose rows pair the launchers path by path."""
    if not results:
        raise ValueError("no results to combine")
    paths = _paths_in_order(results)
    rows = [dict(r, launcher=la) for path in paths for la, res in results.items()
            for r in res.rows if r.get("path") == path]
    first = next(iter(results.values()))
    cfg = dict(first.config, launcher="+".join(results))
    notes = [f"{la}: {res.notes[0]}" for la, res in results.items() if res.notes]
    return ExperimentResult("launchers", rows, first.source, first.provenance, notes, cfg,
                            [run for res in results.values() for run in res.runs])


# ----------------------------------------------------------------------------- the recorded GPU set
GPU_SECTIONS = ("ddp", "horovod", "perf")


def compare_speedups(results: Mapping[str, ExperimentResult]) -> str:
    """{label: nccl-paths result} -> a text table, one row per path and one column per result:
    images/s and the speedup over that result's own one-worker run. A missing or failed run
    shows as "-"; the header says where each result comes from."""
    if not results:
        raise ValueError("no results to compare")
    paths = _paths_in_order(results)
    cells = {}
    for label, res in results.items():
        for r in res.rows:
            if r.get("error") or r.get("images_per_s") is None:
                continue
            sp = r.get("speedup")
            cells[(r.get("path"), label)] = f"{r['images_per_s']:>9,.0f} {(f'{sp:.2f}x' if sp is not None else '-'):>6}"
    width = max(17, *(len(label) for label in results))
    lines = [f"{'path':<10}" + "".join(f"  {label:>{width}}" for label in results),
             f"{'':<10}" + "".join(f"  {'images/s speedup':>{width}}" for _ in results)]
    for path in paths:
        lines.append(f"{path:<10}" + "".join(f"  {cells.get((path, label), '-'):>{width}}" for label in results))
    lines.append("")
    lines += [f"{label}: {res.where()}" for label, res in results.items()]
    return "\n".join(lines)


def record_gpu_set(out_dir: str, sections: Sequence[str] = GPU_SECTIONS,
                   models: Sequence[str] = ("cnn", "wide"), echo: bool = False,
                   progress: Optional[Callable[[str], None]] = None, **sizes) -> dict:
    """The measurements for source_code/reference/experiments/: on 2 GPUs, for each
    model and each of DDP and Horovod (PyTorch), the NCCL path comparison (which includes
    the 1-GPU baseline) and the 1 -> 2 scaling taken from it; on 1 GPU, the speed options.

    ``sections`` ("ddp", "horovod", "perf") run in the order given; the default puts the
    two-GPU comparisons first, because the single-GPU speed options (two of them compile
    with torch.compile) take longest. ``sizes`` go to every experiment (batch_size, steps,
    warmup_steps, and ``timeout`` per launch). Each result is written to ``out_dir`` as soon
    as it exists; a failure is reported and the rest goes on. ``progress``: as for
    :func:`train`. Returns {name: ExperimentResult or error text}."""
    for section in sections:
        _check_choice("section", section, GPU_SECTIONS)
    os.makedirs(out_dir, exist_ok=True)
    done: dict = {}
    gpus = gpu_count("torch")

    def keep(res: ExperimentResult, name: str):
        res.save(os.path.join(out_dir, name + ".json"))
        done[name] = res
        print("\n" + res.table() + "\n", flush=True)

    def attempt(name: str, make):
        try:
            return make()
        except Exception as exc:  # reported in the summary; the other measurements still run
            done[name] = f"{type(exc).__name__}: {exc}"
            return None

    def perf():
        name = reference_name("perf-options", "torch", "none", "cnn")
        perf_sizes = {k: v for k, v in sizes.items() if k in ("batch_size", "steps", "warmup_steps", "timeout")}
        if gpus < 1:
            done[name] = "skipped: no GPU visible to torch"
            return
        res = attempt(name, lambda: performance_options("cnn", device="cuda", echo=echo, progress=progress,
                                                        **perf_sizes))
        if res is not None:
            keep(res, name)

    def paths(launcher: str):
        ok, why = availability("torch", launcher)
        if ok and gpus < 2:
            ok, why = False, f"needs 2 GPUs, torch sees {gpus}"
        for model in models:
            name = reference_name("nccl-paths", "torch", launcher, model)
            if not ok:
                done[name] = f"skipped: {why}"
                continue
            res = attempt(name, lambda: nccl_path_comparison("torch", launcher, model, device="cuda", echo=echo,
                                                             progress=progress, **sizes))
            if res is not None:
                keep(res, name)
                scaling = attempt(reference_name("scaling", "torch", launcher, model), lambda: scaling_from_paths(res))
                if scaling is not None:
                    keep(scaling, reference_name("scaling", "torch", launcher, model))

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


def summary_table(done: Mapping) -> str:
    lines = ["", "summary", f"{'result':<34} {'row':<30} {'images/s':>12} {'speedup':>8}  transport / note"]
    for name, res in done.items():
        if not isinstance(res, ExperimentResult):
            lines.append(f"{name:<34} {str(res).splitlines()[0][:120]}")
            continue
        for r in res.rows:
            label = _row_label(res.name, r)
            if r.get("error"):
                lines.append(f"{name:<34} {label:<30} {'failed':>12}           {r['error'][:80]}")
                # a timed-out run: where its workers were stuck (innermost frames first)
                lines += ["    " + ln for ln in (r.get("hang_traceback") or "").splitlines()[:24]]
                continue
            sp = r.get("speedup")
            lines.append(f"{name:<34} {label:<30} {r['images_per_s']:>12,.0f} "
                         f"{(f'{sp:.2f}x' if sp is not None else '-'):>8}  {r.get('transport', '')}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- CLI
def cli_train(argv: list) -> int:
    """``ddlab train``: one run; arguments it does not know go to the training script."""
    p = argparse.ArgumentParser(prog="ddlab train", description="One Fashion-MNIST training run (through "
                                "ddlab.launch, with a timeout). Unknown options go to the training script, "
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
        result = train(a.framework, a.launcher, a.workers, a.model, a.batch_size, a.steps, a.warmup_steps,
                       a.precision, a.device, None, a.timeout, extra, echo=not a.json, test_samples=a.test_samples)
    except (ValueError, ExperimentError, launch.LaunchError) as exc:
        print(f"ddlab train: {exc}", file=sys.stderr)
        return 1
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
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
    kw = {k: v for k, v in (("batch_size", a.batch_size), ("steps", a.steps), ("warmup_steps", a.warmup_steps),
                            ("timeout", a.timeout)) if v is not None}
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
                kw["extra_args"] = ["--cuda-graph", "on"]
            res = _run(a.name, a.framework, "none" if a.name == "perf-options" else a.launcher, a.model, workers,
                       a.device, **kw)
        else:
            res = live_or_recorded(a.name, a.framework, a.launcher, a.model, workers, a.source,
                                   cpu_run=not a.no_cpu_run, cuda_graph=a.cuda_graph, **kw)
        if a.save_reference:
            print(f"recorded as {res.save_reference(a.save_reference)}", file=sys.stderr)
    except (ValueError, ExperimentError, launch.LaunchError, reference.ReferenceMissing) as exc:
        print(f"ddlab experiment: {exc}", file=sys.stderr)
        return 1
    if a.out:
        res.save(a.out)
    print(json.dumps(res.to_dict(), indent=1) if a.json else res.table())
    return 0
