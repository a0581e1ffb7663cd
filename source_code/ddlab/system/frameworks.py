"""Which frameworks and launchers this machine has, and how they are selected.

Asked without importing the frameworks where possible (importing TensorFlow or
``horovod.tensorflow`` takes seconds): :func:`availability` says whether a framework can run
under a launcher here and, if not, why in one line; :func:`gpu_count` how many GPUs a framework
sees; :func:`nvcc_path` where the CUDA compiler is.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from typing import Optional

# The course's frameworks and the launchers each runs under ("none": one plain process).
FRAMEWORK_LAUNCHERS = {"torch": ("none", "ddp", "horovod"), "keras": ("none", "horovod")}
FRAMEWORKS = tuple(FRAMEWORK_LAUNCHERS)


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


def executable(name: str, python: str = sys.executable) -> str:
    """A console script next to ``python`` (the venv's), else on PATH, else the bare name."""
    here = os.path.join(os.path.dirname(python), name)
    return here if os.path.exists(here) else (shutil.which(name) or name)


def nvcc_path() -> Optional[str]:
    """The CUDA compiler: on PATH, else under ``$CUDA_HOME`` (default /usr/local/cuda); None if absent."""
    exe = shutil.which("nvcc")
    if exe:
        return exe
    cand = os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")
    return cand if os.access(cand, os.X_OK) else None


def gpu_count(framework: str = "torch") -> int:
    """GPUs the framework can use here (TensorFlow is not imported to ask: NVML/nvidia-smi)."""
    if framework == "torch":
        try:
            import torch
        except ImportError:
            return 0
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    from ddlab.system import hardware
    return hardware.inventory(software=False).gpu_count


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
        if not horovod_extension(framework):
            return False, f"Horovod is not built for {'PyTorch' if framework == 'torch' else 'TensorFlow'} here"
        if not os.path.exists(executable("horovodrun")):
            return False, "horovodrun is not on PATH"
    return True, ""
