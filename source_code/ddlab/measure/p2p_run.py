"""Building and running the course's CUDA p2p test
(``source_code/p2p_bandwidth_latency/``): :func:`build` compiles it with its Makefile (the
Makefile picks the GPU architecture), :func:`run` runs it (building first if needed) and returns
a :class:`ddlab.measure.p2p.P2PResult`; :func:`run_nvidia_sample` runs NVIDIA's
p2pBandwidthLatencyTest instead when it is on PATH.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from typing import Optional, Sequence

from ddlab.base.errors import CourseError
from ddlab.base import files
from ddlab.base.paths import SOURCE_DIR
from ddlab.measure.p2p import P2PResult
from ddlab.measure.p2p_parse import parse
from ddlab.system import frameworks

PROGRAM_DIR = os.path.join(SOURCE_DIR, "p2p_bandwidth_latency")
PROGRAM_NAME = "p2p_bandwidth_latency"

EXIT_NO_GPU = 2          # the program's exit codes (see the .cu file)
EXIT_VALIDATION = 3


class P2PError(CourseError, RuntimeError):
    """Building or running the p2p test failed."""


class P2PBuildError(P2PError):
    """``make`` failed or there is no ``nvcc``."""


class P2PNoGPU(P2PError):
    """No NVIDIA GPU is visible."""


class P2PRunError(P2PError):
    """The program failed, timed out, or its validation caught wrong data."""



def binary_path(directory: Optional[str] = None, program: str = PROGRAM_NAME) -> str:
    return os.path.join(directory or PROGRAM_DIR, program)


def build(force: bool = False, *, directory: Optional[str] = None, timeout: float = 900.0,
          program: str = PROGRAM_NAME) -> str:
    """Compile ``program`` (the p2p test, or ``host_bandwidth_latency``: the host-link test of
    :mod:`ddlab.measure.host_link`) with the folder's Makefile (``make <program>``); return the
    binary's path.

    Without ``force`` an up-to-date binary is reused. Raises :class:`P2PBuildError` when
    ``nvcc`` or ``make`` is missing or the build fails (with the end of the compiler's output)."""
    directory = directory or PROGRAM_DIR
    path = binary_path(directory, program)
    sources = [os.path.join(directory, f) for f in (program + ".cu", "Makefile")]
    if not force and os.path.exists(path) and all(os.path.getmtime(path) >= os.path.getmtime(s) for s in sources):
        return path
    if not frameworks.nvcc_path():
        raise P2PBuildError("nvcc (the CUDA compiler) was not found on PATH or in $CUDA_HOME/bin: install the "
                            "CUDA toolkit to build the p2p test, or use load_recorded('h200x2') to see a recorded run")
    make = shutil.which("make")
    if not make:
        raise P2PBuildError("'make' was not found: install it (apt-get install make) to build the p2p test")
    cmd = [make] + (["-B"] if force else []) + [program]
    try:
        out = subprocess.run(cmd, cwd=directory, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise P2PBuildError(f"building the p2p test took longer than {timeout:.0f} s and was stopped") from None
    if out.returncode != 0 or not os.path.exists(path):
        tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-25:])
        raise P2PBuildError(f"building the p2p test failed (make exited {out.returncode}) in {directory}:\n{tail}")
    return path


def gpu_visible() -> bool:
    """Cheap check, without CUDA: does this machine show an NVIDIA GPU?"""
    try:
        if os.listdir("/proc/driver/nvidia/gpus"):
            return True
    except OSError:
        pass
    from ddlab.system.hardware import inventory
    return inventory(software=False).gpu_count > 0


def program_args(*, copy=None, direction=None, size=None, reps=None, latency_size=None, latency_reps=None,
                 latency_batch=None, ce_api=None, gpus=None, link_peak_gbps=None) -> list:
    """Command-line options for the program from keyword arguments (None = its default)."""
    args = []
    for flag, v in (("--copy", copy), ("--direction", direction), ("--size", size), ("--reps", reps),
                    ("--latency-size", latency_size), ("--latency-reps", latency_reps),
                    ("--latency-batch", latency_batch), ("--ce-api", ce_api), ("--link-peak", link_peak_gbps)):
        if v is not None:
            args += [flag, str(v)]
    if gpus is not None:
        args += ["--gpus", gpus if isinstance(gpus, str) else ",".join(str(g) for g in gpus)]
    return args


def run(args: Sequence[str] = (), *, timeout: float = 900.0, rebuild: bool = False,
        binary: Optional[str] = None, **options) -> P2PResult:
    """Build if needed, run the program, return its result.

    ``args`` go to the program as they are; keyword ``options`` are those of
    :func:`program_args` (copy="ce", size="256M", link_peak_gbps=478.08, ...).
    Raises :class:`P2PNoGPU`, :class:`P2PBuildError` or :class:`P2PRunError` (timeout,
    failure, or validation that caught wrong data) with the end of the program's output."""
    if binary is None and not gpu_visible():
        raise P2PNoGPU("no NVIDIA GPU is visible on this machine, so the p2p test cannot run here; "
                       "load_recorded('h200x2') (or ddlab p2p --recorded h200x2) shows a recorded run")
    exe = binary or build(force=rebuild)
    argv = [str(a) for a in args] + program_args(**options)
    fd, json_path = tempfile.mkstemp(prefix="ddlab-p2p-", suffix=".json")
    os.close(fd)
    try:
        try:
            out = subprocess.run([exe, *argv, "--json", json_path], capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise P2PRunError(f"the p2p test ran longer than {timeout:.0f} s and was stopped; try a smaller --size, "
                              "fewer --reps or fewer --gpus") from None
        except OSError as exc:
            raise P2PRunError(f"could not start {exe}: {exc}") from None
        text = out.stdout
        tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-20:])
        if out.returncode == EXIT_NO_GPU and "no CUDA GPU" in out.stderr:
            raise P2PNoGPU(out.stderr.strip())
        if out.returncode == EXIT_VALIDATION:
            raise P2PRunError(f"the p2p test's validation caught wrong data (exit {out.returncode}):\n{tail}")
        if out.returncode != 0:
            raise P2PRunError(f"the p2p test failed (exit {out.returncode}):\n{tail}")
        result = P2PResult.from_dict(files.read_json(json_path, "p2p test's JSON output"))
    finally:
        os.unlink(json_path)
    result.text = text
    result.parameters.setdefault("command", " ".join([os.path.basename(exe), *argv]))
    return result


NVIDIA_SAMPLE = "p2pBandwidthLatencyTest"


def nvidia_sample() -> Optional[str]:
    """The path of NVIDIA's p2pBandwidthLatencyTest (cuda-samples) when it is on PATH, else None."""
    return shutil.which(NVIDIA_SAMPLE)


def run_nvidia_sample(*, timeout: float = 900.0) -> P2PResult:
    """Run NVIDIA's p2pBandwidthLatencyTest from PATH and parse its output (:func:`ddlab.measure.p2p_parse.parse`).
    Raises :class:`P2PError` when it is not on PATH, and :class:`P2PRunError` when it fails."""
    exe = nvidia_sample()
    if exe is None:
        raise P2PError(f"NVIDIA's {NVIDIA_SAMPLE} is not on PATH (it comes with NVIDIA's cuda-samples); "
                       "the course's own test stands in for it")
    try:
        out = subprocess.run([exe], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise P2PRunError(f"{NVIDIA_SAMPLE} ran longer than {timeout:.0f} s and was stopped") from None
    if out.returncode != 0:
        tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-20:])
        raise P2PRunError(f"{NVIDIA_SAMPLE} failed (exit {out.returncode}):\n{tail}")
    result = parse(out.stdout)
    result.text = out.stdout
    return result

