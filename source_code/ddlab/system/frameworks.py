"""Which frameworks and launchers this machine has, and how they are selected.

Asked without importing the frameworks where possible (importing TensorFlow or
``horovod.tensorflow`` takes seconds): :func:`availability` says whether a framework can run
under a launcher here and, if not, why in one line; :func:`gpu_count` how many GPUs a framework
can use (TensorFlow is asked in a child Python); :func:`nvcc_path` where the CUDA compiler is.
"""
from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import sys
from typing import Optional

# The course's frameworks and the launchers each runs under ("none": one plain process).
FRAMEWORK_LAUNCHERS = {"torch": ("none", "ddp", "horovod"), "keras": ("none", "horovod")}
FRAMEWORKS = tuple(FRAMEWORK_LAUNCHERS)
# What a learner reads: the framework that runs each one's code.
FRAMEWORK_NAMES = {"torch": "PyTorch", "keras": "TensorFlow"}


def check_choice(what: str, value, choices, error=ValueError) -> None:
    """Raise ``error`` naming the bad value and the choices when ``value`` is not one of them."""
    if value not in choices:
        raise error(f"unknown {what} {value!r}; choose one of {', '.join(map(str, choices))}")


def has_module(name: str) -> bool:
    """Whether ``name`` can be imported here (found, not imported)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def nvcc_path() -> Optional[str]:
    """The CUDA compiler: on PATH, else under ``$CUDA_HOME`` (default /usr/local/cuda); None if absent."""
    exe = shutil.which("nvcc")
    if exe:
        return exe
    cand = os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")
    return cand if os.access(cand, os.X_OK) else None


def gpu_count(framework: str = "torch") -> int:
    """GPUs the framework can use here (CUDA_VISIBLE_DEVICES applied): PyTorch's own count;
    TensorFlow's from :func:`tensorflow_gpu_count`."""
    if framework == "torch":
        try:
            import torch
        except ImportError:
            return 0
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    return tensorflow_gpu_count()


# Asked in a child Python: importing TensorFlow takes seconds and it would stay in this process.
_TF_GPUS = ("import os; os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3'); import tensorflow as tf; "
            "print('GPUS', len(tf.config.list_physical_devices('GPU')))")


def tensorflow_gpu_count(timeout: float = 180.0) -> int:
    """GPUs TensorFlow can use here: 0 without TensorFlow, with ``tensorflow-cpu``, or on a
    machine with no NVIDIA GPU (nothing imported to know); else TensorFlow is asked in a child
    Python, once per CUDA_VISIBLE_DEVICES (a TensorFlow wheel without its CUDA libraries, e.g.
    ``pip install tensorflow`` without ``[and-cuda]``, sees none and runs on the CPU)."""
    if not has_module("tensorflow"):
        return 0
    from ddlab.system import hardware, software
    if software.package_version("tensorflow-cpu") or not hardware.inventory(software=False).gpu_count:
        return 0
    return _ask_tensorflow(os.environ.get("CUDA_VISIBLE_DEVICES"), sys.executable, timeout)


@functools.lru_cache(maxsize=8)
def _ask_tensorflow(visible: Optional[str], python: str, timeout: float) -> int:
    import subprocess
    try:
        out = subprocess.run([python, "-c", _TF_GPUS], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    counts = [int(ln.split()[1]) for ln in out.stdout.splitlines() if ln.startswith("GPUS ")]
    return counts[-1] if out.returncode == 0 and counts else 0


def horovod_extension(framework: str) -> bool:
    """Whether Horovod was built for this framework, found without importing it (importing
    horovod.tensorflow imports TensorFlow, seconds): :func:`ddlab.system.software.horovod_extensions`."""
    from ddlab.system import software
    return ("PyTorch" if framework == "torch" else "TensorFlow") in software.horovod_extensions()


def availability(framework: str, launcher: str, error=ValueError) -> tuple:
    """(True, "") when this Python can run ``framework`` under ``launcher``, else (False, why).
    An unknown framework or launcher raises ``error``."""
    check_choice("framework", framework, FRAMEWORKS, error)
    check_choice("launcher", launcher, FRAMEWORK_LAUNCHERS[framework], error)
    if framework == "torch" and not has_module("torch"):
        return False, "PyTorch is not installed"
    if framework == "keras":
        if not has_module("tensorflow"):
            return False, "TensorFlow is not installed"
        if not has_module("tf_keras"):
            return False, "tf-keras is not installed (Horovod's Keras API needs it, not Keras 3)"
    if launcher == "horovod":
        if not has_module("horovod"):
            return False, "Horovod is not installed (`make horovod` builds it)"
        if not horovod_extension(framework):
            return False, (f"Horovod is installed but not built for {FRAMEWORK_NAMES[framework]} "
                           f"(`make horovod` rebuilds it against this Python's frameworks)")
        from ddlab.system import software
        if not os.path.exists(software.executable("horovodrun")):
            return False, "horovodrun is not on PATH"
    return True, ""


# TensorFlow reads these when it is imported: Horovod's Keras API needs tf.keras from the tf-keras
# package (Keras 2), not Keras 3, and the course wants no INFO lines from TensorFlow's C++ side.
TF_ENVIRONMENT = {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}


def use_tf_keras() -> None:
    """Set :data:`TF_ENVIRONMENT` in this process, keeping values the caller already set.
    Call it before TensorFlow is imported; afterwards it changes nothing TensorFlow reads."""
    for k, v in TF_ENVIRONMENT.items():
        os.environ.setdefault(k, v)
