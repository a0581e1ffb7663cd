"""Starting training runs: one :class:`~ddlab.training.runspec.RunSpec` in, the script's result out.

:func:`train` starts ``source_code/train/fmnist_torch.py`` or ``fmnist_keras.py`` under the
spec's launcher (``python``, ``torchrun`` for DDP, ``horovodrun`` for Horovod) through
:func:`ddlab.measure.launch.run`, always with a timeout, and returns the JSON result the script wrote
(rank 0), which includes ``phase_s``: where the run's seconds went. What this machine can
run (GPUs, frameworks, Horovod's build) is asked of :mod:`ddlab.system.frameworks`;
:func:`resolve_device` picks the device from it.
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from contextlib import contextmanager
from typing import Callable, Mapping, Optional

from ddlab.base import files, worker_report
from ddlab.measure import launch
from ddlab.system.frameworks import gpu_count
from ddlab.training import data, kept_runs
from ddlab.training.runspec import RunSpec, _check_choice, nccl_path_env
from ddlab.base.errors import CourseError


class ExperimentError(CourseError, RuntimeError):
    """An experiment cannot run as asked (missing framework, no result)."""


# ----------------------------------------------------------------------------- machine facts
def resolve_device(framework: str, device: str, workers: int) -> str:
    """"cuda" when asked, or with "auto" when there is one GPU per worker; else "cpu"."""
    _check_choice("device", device, ("auto", "cpu", "cuda"))
    if device != "auto":
        return device
    return "cuda" if gpu_count(framework) >= workers else "cpu"


def spec_for(device: str = "auto", framework: str = "torch", model: str = "cnn", workers: int = 1,
             **fields) -> RunSpec:
    """:meth:`RunSpec.for_device` with "auto" resolved on this machine."""
    dev = resolve_device(framework, device, workers)
    return RunSpec.for_device(dev, model, framework=framework, workers=workers, **fields)


# ----------------------------------------------------------------------------- one run
# The report fmnist_torch.py's ranks make around their CUDA-graph capture (cuda_graph_torch's
# CAPTURE_KIND, state "start" then "done"): a failed run that reported a start was attempting a graph.
CAPTURE_KIND = "cuda_graph_capture"


def capture_started(output: str) -> bool:
    """Whether a rank reported (:mod:`ddlab.base.worker_report`) that it started a CUDA-graph
    capture, in the output of a run that failed (a line cut short by the failure is passed over)."""
    return any(r.get("state") == "start" for r in worker_report.parse(output, kind=CAPTURE_KIND, strict=False))


def describe(spec: RunSpec, env: Optional[Mapping] = None) -> str:
    nccl = " ".join(f"{k}={v}" for k, v in sorted((env or {}).items())
                    if v is not None and k.startswith("NCCL_") and k != "NCCL_DEBUG")
    opts = spec.option_args()
    return (f"{spec.framework} {spec.launcher}, {spec.workers} worker(s), model {spec.model}, {spec.device}"
            + (f", {nccl}" if nccl else "") + (f", {' '.join(opts)}" if opts else ""))


# ----------------------------------------------------------------------------- its command line
# Variables a run's environment may hold that are not settings of the run: NVIDIA's containers set
# NCCL_VERSION to say which NCCL they ship; the course's own launch marks start with DDLAB_.
NOT_SETTINGS = ("NCCL_VERSION",)


def command_env(env: Optional[Mapping] = None, shell: Optional[Mapping] = None) -> dict:
    """The settings a run's command line shows: the NCCL and NVLink-multicast variables of
    ``shell`` (the environment it inherited; :func:`ddlab.system.nccl.recorded_environment` picks
    them), then ``env`` (what the run set; None removes a variable), without :data:`NOT_SETTINGS`
    and the course's own ``DDLAB_*`` marks."""
    from ddlab.system import nccl
    out = dict(nccl.recorded_environment(shell or {}))
    for k, v in (env or {}).items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = str(v)
    return {k: v for k, v in out.items() if k not in NOT_SETTINGS and not k.startswith("DDLAB_")}


def command_line(spec: RunSpec, env: Optional[Mapping] = None, python: str = "python") -> str:
    """The run of ``spec`` as one line a learner can paste into a shell at the repository's root:
    the variables of ``env`` (None values left out), the launcher as a shell names it (``torchrun``,
    ``horovodrun ... python``, or ``python`` alone), the training script and its flags
    (:meth:`RunSpec.script_args`). Live runs record it as their command (``DDLAB_COMMAND``) and
    result tables print it under each row, recorded ones rebuilt from their spec and environment."""
    from ddlab.base.paths import REPO_ROOT
    argv = spec.script_args()
    argv[0] = os.path.relpath(argv[0], REPO_ROOT)
    return launch.shell_line(spec.process_launcher, spec.workers, argv, env, python=python, shell_names=True,
                             unset=False)


def _phases_text(result: dict) -> str:
    ph = result.get("phase_s") or {}
    return ", ".join(f"{k} {v:.1f}" for k, v in ph.items())


def _stamp() -> str:
    return f"[ddlab {time.strftime('%H:%M:%S')}]"


def train(spec: RunSpec, env: Optional[Mapping] = None, echo: bool = False, keep_log: bool = False,
          python: str = sys.executable, graph_fallback: bool = True,
          progress: Optional[Callable[[str], None]] = None) -> dict:
    """One training run of ``spec``; returns the script's JSON result.

    The workers get the environment of the spec's NCCL path plus ``env`` (None: removes a
    variable). ``keep_log`` adds the workers' combined output as ``"log"``. ``progress``
    (e.g. ``print``) gets one line when the run starts and one when it ends, with its
    seconds and the worker's phase times (``phase_s``).

    ``graph_fallback``: a one-process GPU run that captured a CUDA graph because that is
    the default (:attr:`RunSpec.graph_by_default`), and whose process then died or hung
    after starting the capture, is run once more with ``cuda_graph="off"``; ``progress``
    hears about the rerun at once, and the result's ``notes`` and ``cuda_graph_failure_log``
    say why. (A capture that merely raises is handled inside the script, which then runs
    eagerly.) Raises :class:`ddlab.measure.launch.LaunchError` (its message quotes the end of the
    output, and for a timeout where each worker was stuck) when the run fails or times out, and
    :class:`ddlab.training.data.DatasetError` before launching when Fashion-MNIST is missing.
    In a notebook, :mod:`ddlab.training.kept_runs` may keep the result, or answer with a kept one."""
    if not isinstance(spec, RunSpec):
        raise TypeError(f"train() takes a RunSpec, got {type(spec).__name__}")
    if "--data-dir" not in spec.extra_args:
        data.require()       # missing data: its one message here, not a traceback from every worker
    argv = spec.script_args()
    run_env = nccl_path_env(spec.path, env) if spec.workers > 1 else dict(env or {})
    # What the result's provenance shows as the command: the launch itself, as one line for a shell.
    run_env["DDLAB_COMMAND"] = command_line(spec, command_env(run_env, os.environ))
    say = progress or (lambda line: None)
    what = describe(spec, env)
    say(f"{_stamp()} start: {what} (timeout {spec.limit_s:.0f} s)")
    key = kept_runs.launch_key(argv, spec.process_launcher, spec.workers, run_env, python)
    kept = kept_runs.take(key)
    if kept is not None:
        say(f"{_stamp()}{DONE_MARK}{kept.get('launch_s', 0.0):.1f} s: {what}: {kept['images_per_s']:,.0f} img/s "
            f"(kept: the same launch made earlier in this checkout, not run again)")
        return kept
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ddlab-train-") as tmp:
        out_path = os.path.join(tmp, "result.json")
        try:
            res = launch.run([*argv, "--json", out_path], launcher=spec.process_launcher, nproc=spec.workers,
                             env=run_env, timeout=spec.limit_s, echo=echo, python=python)
        except launch.LaunchError as exc:
            kind = "timed out" if isinstance(exc, launch.LaunchTimeout) else "failed"
            say(f"{_stamp()} {kind} after {time.monotonic() - t0:.1f} s: {what}")
            output = exc.result.output if exc.result is not None else ""
            if not (graph_fallback and spec.graph_by_default and capture_started(output)):
                raise
            tail = exc.result.tail(30)
            stuck = launch.hang_tracebacks(output)
            errors = [ln.strip() for ln in tail.splitlines() if "rror" in ln]
            # the rank that failed first, its host and how (the message's first line), else the last error
            why = f"{kind}: " + (errors[-1] if errors and getattr(exc, "failure", None) is None
                                 else error_first_line(exc))
            say(f"{_stamp()} note: the run {kind} after starting its CUDA-graph "
                f"capture; running it once more with --cuda-graph off (a second launch)")
            result = train(spec.with_(cuda_graph="off"), env, echo, keep_log, python, graph_fallback=False,
                           progress=progress)
            result.setdefault("notes", []).append(f"the run with a CUDA graph {why}; this is the rerun with "
                                                  "--cuda-graph off")
            result["cuda_graph_failure_log"] = (stuck + "\n" if stuck else "") + tail
            return result
        if not os.path.exists(out_path):
            raise ExperimentError(f"{spec.framework} {spec.launcher} run of {spec.workers} worker(s) exited "
                                  f"cleanly but wrote no result.\nlast output:\n{res.tail()}")
        result = files.read_json(out_path, "training run's result")   # one message if it is not whole JSON
    result["launch_s"] = res.duration_s
    say(f"{_stamp()}{DONE_MARK}{res.duration_s:.1f} s: {what}: "
        f"{result['images_per_s']:,.0f} img/s; rank 0 took {result.get('wall_s', float('nan')):.1f} s "
        f"({_phases_text(result)})")
    if keep_log:
        result["log"] = res.output
    kept_runs.keep(key, result)
    return result


def slim(run: dict) -> dict:
    """A run's result without its log (what results keep)."""
    return {k: v for k, v in run.items() if k != "log"}


DONE_MARK = " done in "    # in the line a launch prints when it has finished (progress.Bar.counter counts them)


@contextmanager
def launch_bar(total: int, title: str, log: Optional[str], name: str = "launches"):
    """One progress bar over ``total`` training launches; each launch's own lines go to the file
    ``log`` ("auto": ``scratch/<name>.log`` in Jupyter, none elsewhere: :func:`ddlab.base.progress.notebook_log`).
    Yields the ``progress`` callback to pass to :func:`train` (and the experiments that call it); a
    line with :data:`DONE_MARK` advances the bar. No bar, and None, when there is no log."""
    from ddlab.base import progress
    if log == "auto":
        log = progress.notebook_log(name)
    if log is None:
        yield None
        return
    with progress.Bar(total, title, log=log) as bar:
        yield bar.counter(DONE_MARK)


ERROR_DETAIL_LINES = 40     # at most this many lines of a failure's message after its first


def error_first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message, whole (its type's name when the message is empty)."""
    return (str(exc).strip().splitlines() or [""])[0].strip() or type(exc).__name__


def error_detail(text: str, max_lines: int = ERROR_DETAIL_LINES) -> str:
    """The rest of a failure's message, at most ``max_lines`` lines: when longer, its head up to
    ``last output:`` (the other ranks' state, the launcher's lines: a launch error's summary, at
    most half the lines), a line saying how many lines were left out, and the end of the output."""
    if max_lines < 3:
        raise ValueError(f"max_lines must be at least 3, got {max_lines}")
    lines = text.strip("\n").splitlines()
    if len(lines) <= max_lines:
        return "\n".join(lines).rstrip()
    mark = next((i for i, ln in enumerate(lines) if ln.strip() == "last output:"), -1)
    head = lines[:min(mark + 1, max_lines // 2)]
    tail = lines[len(lines) - (max_lines - len(head) - 1):]
    left_out = len(lines) - len(head) - len(tail)
    return "\n".join(head + [f"... ({left_out} lines left out)"] + tail).rstrip()


def failure_row(exc: Exception, **fields) -> dict:
    """The row of a run that failed. ``error`` is the message's first line, whole: for a failed
    launch, which rank died first, on which host and how (signal name, exit status or its
    exception's last line). ``error_detail`` keeps the rest of the message (the other ranks'
    state, the launcher's lines, the end of the output), at most :data:`ERROR_DETAIL_LINES`
    lines (:func:`error_detail`); for a timeout, ``hang_traceback`` says where the workers were
    stuck. A table shows ``error`` shortened; the row keeps it whole."""
    _, _, rest = str(exc).strip().partition("\n")
    row = dict(fields, error=error_first_line(exc))
    if rest.strip():
        row["error_detail"] = error_detail(rest)
    if isinstance(exc, launch.LaunchTimeout) and exc.result is not None:
        row["hang_traceback"] = launch.hang_tracebacks(exc.result.output)
    return row
