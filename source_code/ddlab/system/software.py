"""The software this machine has, read without importing the frameworks where possible: torch,
the CUDA it was built with and its NCCL, TensorFlow, Horovod and what it was built with, nvcc.

:func:`ddlab.system.hardware.inventory` puts these into the :class:`~ddlab.system.hardware.Inventory`;
``ddlab doctor`` stays fast because nothing here imports TensorFlow or Horovod, and torch only
when its NCCL is not a file found here (:func:`torch_facts`).
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from typing import Optional


def package_version(dist: str) -> Optional[str]:
    """The installed version of the distribution ``dist`` (its metadata; nothing imported), else None."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def tensorflow_version() -> Optional[str]:
    return package_version("tensorflow") or package_version("tensorflow-cpu")


def nvcc_version() -> Optional[str]:
    exe = shutil.which("nvcc") or (os.path.exists("/usr/local/cuda/bin/nvcc") and "/usr/local/cuda/bin/nvcc")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"release ([\d.]+), V([\d.]+)", out)
    return m.group(2) if m else out.strip().splitlines()[-1] if out.strip() else None


def _torch_dir() -> Optional[str]:
    """torch's package folder, found without importing torch."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def torch_cuda_from_file() -> Optional[str]:
    """The CUDA version torch was built with, read from ``torch/version.py`` (the file
    ``torch.version`` is) without importing torch; None for a CPU-only torch."""
    d = _torch_dir()
    if d is None:
        return None
    try:
        with open(os.path.join(d, "version.py")) as f:
            text = f.read()
    except OSError:
        return None
    m = re.search(r"^cuda\s*(?::[^=\n]*)?=\s*['\"]([^'\"]+)['\"]", text, re.M)
    return m.group(1) if m else None


# The wheels that carry the NCCL a pip-installed torch loads (newest CUDA first).
NCCL_DISTRIBUTIONS = ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11", "nvidia-nccl")


def nccl_library() -> Optional[str]:
    """The path of the NCCL library torch uses, found as a file: the ``nvidia-nccl-cu*``
    wheel's ``libnccl.so.2``, else one in torch's own ``lib`` folder; None when neither."""
    for dist in NCCL_DISTRIBUTIONS:
        try:
            files = importlib.metadata.distribution(dist).files or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for f in files:
            if re.fullmatch(r"libnccl\.so(\.\d+)*", f.name):
                return str(f.locate())
    d = _torch_dir()
    if d and os.path.isdir(os.path.join(d, "lib")):
        for name in sorted(os.listdir(os.path.join(d, "lib"))):
            if re.fullmatch(r"libnccl\.so(\.\d+)*", name):
                return os.path.join(d, "lib", name)
    return None


def nccl_version_from_code(code: int) -> str:
    """NCCL's ``ncclGetVersion`` integer as "major.minor.patch" (2.9 and later encode
    major*10000 + minor*100 + patch; older ones major*1000 + minor*100 + patch)."""
    if code >= 20900:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def nccl_library_version(path: str) -> Optional[str]:
    """Ask the NCCL library at ``path`` its version (``ncclGetVersion``; needs no GPU)."""
    import ctypes
    try:
        lib = ctypes.CDLL(path)
        code = ctypes.c_int()
        if lib.ncclGetVersion(ctypes.byref(code)) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return nccl_version_from_code(code.value)


def torch_facts(notes: list) -> dict:
    """torch version, the CUDA it was built with and NCCL's version.

    Read from files (package metadata, ``torch/version.py``, the NCCL library) so that
    ``ddlab doctor`` stays fast; a process that has imported torch already is asked directly.
    torch is imported only when it was built with CUDA and its NCCL is not a file found here."""
    facts = {"torch": package_version("torch"), "cuda_runtime": None, "nccl": None}
    if not facts["torch"]:
        return facts
    if "torch" not in sys.modules:
        facts["cuda_runtime"] = torch_cuda_from_file()
        if facts["cuda_runtime"] is None:
            return facts
        lib = nccl_library()
        if lib:
            facts["nccl"] = nccl_library_version(lib)
            if facts["nccl"]:
                return facts
    try:
        import torch
        facts["cuda_runtime"] = torch.version.cuda
        if torch.cuda.is_available() or torch.version.cuda:
            try:
                v = torch.cuda.nccl.version()
                facts["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
            except Exception:
                pass
    except Exception as exc:
        notes.append(f"torch failed to import: {exc}")
    return facts


def parse_check_build(text: str) -> dict:
    """Parse ``horovodrun --check-build`` into {"frameworks": [...], "controllers": [...],
    "tensor_operations": [...]} listing what is built ([X])."""
    section, out = None, {"frameworks": [], "controllers": [], "tensor_operations": []}
    for line in text.splitlines():
        s = line.strip().lower()
        if s.startswith("available frameworks"):
            section = "frameworks"
        elif s.startswith("available controllers"):
            section = "controllers"
        elif s.startswith("available tensor operations"):
            section = "tensor_operations"
        else:
            m = re.match(r"\s*\[([ xX])\]\s+(.+?)\s*$", line)
            if m and section and m.group(1).lower() == "x":
                out[section].append(m.group(2))
    return out


# Horovod's extension per framework (as ``horovodrun --check-build`` names them): the
# subpackage and the start of its compiled library's file name.
HOROVOD_EXTENSIONS = {"TensorFlow": ("tensorflow", "mpi_lib"), "PyTorch": ("torch", "mpi_lib"),
                      "MXNet": ("mxnet", "mpi_lib")}
# What --check-build lists, in its order, and the C++ class each one compiles in: a library
# built with it holds the class's RTTI name (e.g. "N7horovod6common14GlooControllerE").
HOROVOD_CONTROLLERS = {"MPI": "MPIController", "Gloo": "GlooController"}
HOROVOD_TENSOR_OPERATIONS = {"NCCL": "NCCLAllreduce", "DDL": "DDLAllreduce", "CCL": "CCLAllreduce",
                             "MPI": "MPIAllreduce", "Gloo": "GlooAllreduce"}


def _rtti_name(cls: str) -> bytes:
    return f"N7horovod6common{len(cls)}{cls}E".encode()


def horovod_extensions() -> dict:
    """{framework: path of Horovod's compiled library for it}, found as files without
    importing Horovod or the framework (importing horovod.tensorflow imports TensorFlow)."""
    try:
        spec = importlib.util.find_spec("horovod")
    except (ImportError, ValueError):
        return {}
    if spec is None or not spec.submodule_search_locations:
        return {}
    out = {}
    for framework, (sub, prefix) in HOROVOD_EXTENSIONS.items():
        for base in spec.submodule_search_locations:
            d = os.path.join(base, sub)
            libs = sorted(f for f in os.listdir(d) if f.startswith(prefix) and f.endswith((".so", ".pyd"))) \
                if os.path.isdir(d) else []
            if libs:
                out[framework] = os.path.join(d, libs[-1])
                break
    return out


def horovod_build_from_files(notes: list) -> dict:
    """What ``horovodrun --check-build`` reports (frameworks, controllers, tensor operations),
    read from Horovod's compiled libraries instead of importing every framework."""
    libs = horovod_extensions()
    if not libs:
        return {}
    import mmap
    path = next(iter(libs.values()))
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            def built(table):
                return [name for name, cls in table.items() if m.find(_rtti_name(cls)) >= 0]
            return {"frameworks": list(libs), "controllers": built(HOROVOD_CONTROLLERS),
                    "tensor_operations": built(HOROVOD_TENSOR_OPERATIONS)}
    except (OSError, ValueError) as exc:
        notes.append(f"could not read Horovod's library {path}: {exc}")
        return {"frameworks": list(libs), "controllers": [], "tensor_operations": []}


def executable(name: str, python: Optional[str] = None) -> str:
    """A console script next to ``python`` (default: this interpreter, so its environment's), else on
    PATH, else the bare name. Next to ``python`` first: a ``horovodrun`` found on PATH may belong to another
    Python (a base install whose script names an interpreter that is gone)."""
    here = os.path.join(os.path.dirname(python or sys.executable), name)
    return here if os.path.exists(here) else (shutil.which(name) or name)


def horovod_build(notes: list, timeout: float = 300) -> dict:
    """``horovodrun --check-build``, parsed (it imports every framework: seconds; ``ddlab
    doctor --check-build``). :func:`horovod_build_from_files` gives the same without that."""
    exe = executable("horovodrun")
    if not package_version("horovod") or not os.path.exists(exe):
        return {}
    try:
        out = subprocess.run([exe, "--check-build"], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        notes.append(f"horovodrun --check-build failed: {exc}")
        return {}
    if out.returncode != 0:
        notes.append(f"horovodrun --check-build exited {out.returncode}: {out.stderr.strip()[-300:]}")
        return {}
    return parse_check_build(out.stdout)

