"""What this machine has: its GPUs (NVML, else nvidia-smi), the CUDA_VISIBLE_DEVICES check, and
the :class:`Inventory` that holds them with the software versions (:mod:`ddlab.system.software`).

NVML (the ``nvidia-ml-py`` package, imported as ``pynvml``) is asked first because it
needs no subprocess and gives NUMA nodes; ``nvidia-smi`` is the fallback. With no GPU
the inventory is simply empty: nothing here raises because hardware is missing.

``ddlab doctor`` prints the inventory (:mod:`ddlab.report.doctor`); the machine's name from its
hardware is :mod:`ddlab.system.machine_name`; each GPU's PCIe link is :mod:`ddlab.system.pcie`.
"""
from __future__ import annotations

import dataclasses
import os
import platform
import re
import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from typing import Optional

from ddlab.system import software as _software

@dataclass
class GPU:
    index: int
    name: str
    memory_mib: Optional[int] = None
    compute_capability: Optional[str] = None
    pci_bus_id: Optional[str] = None
    numa_node: Optional[int] = None


@dataclass
class Inventory:
    gpus: list = field(default_factory=list)
    source: str = "none"              # "nvml", "nvidia-smi" or "none"
    driver: Optional[str] = None
    cuda_driver: Optional[str] = None  # newest CUDA the driver supports
    cuda_runtime: Optional[str] = None  # CUDA that torch was built with
    nccl: Optional[str] = None
    torch: Optional[str] = None
    tensorflow: Optional[str] = None
    horovod: Optional[str] = None
    horovod_build: dict = field(default_factory=dict)
    nvcc: Optional[str] = None
    python: str = platform.python_version()
    hostname: str = socket.gethostname()
    cuda_visible_devices: Optional[str] = None
    notes: list = field(default_factory=list)

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    @property
    def mode(self) -> str:
        """The course's hardware mode: "cpu", "single-gpu" or "multi-gpu"."""
        n = self.gpu_count
        return "cpu" if n == 0 else ("single-gpu" if n == 1 else "multi-gpu")

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["gpu_count"] = self.gpu_count
        d["mode"] = self.mode
        return d




# --------------------------------------------------------------------------- NVML
def _nvml_gpus(notes: list) -> tuple[list, Optional[str], Optional[str]]:
    try:
        import pynvml  # provided by nvidia-ml-py
    except ImportError:
        notes.append("nvidia-ml-py is not installed; NVML not used")
        return [], None, None
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        notes.append(f"NVML unavailable ({exc})")
        return [], None, None
    try:
        driver = nvml_str(pynvml.nvmlSystemGetDriverVersion())
        cuda = None
        try:
            v = pynvml.nvmlSystemGetCudaDriverVersion_v2()
            cuda = f"{v // 1000}.{(v % 1000) // 10}"
        except Exception:
            pass
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            bus = nvml_str(pynvml.nvmlDeviceGetPciInfo(h).busId)
            try:
                major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
                cc = f"{major}.{minor}"
            except Exception:
                cc = None
            gpus.append(GPU(index=i, name=nvml_str(pynvml.nvmlDeviceGetName(h)),
                            memory_mib=int(pynvml.nvmlDeviceGetMemoryInfo(h).total // 2**20),
                            compute_capability=cc, pci_bus_id=normalise_bus_id(bus),
                            numa_node=_numa_node(bus)))
        return gpus, driver, cuda
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def nvml_str(v) -> str:
    """A string NVML returned (bytes in older nvidia-ml-py releases) as text."""
    return v.decode() if isinstance(v, bytes) else str(v)


def normalise_bus_id(bus: str) -> str:
    """NVML prints 00000000:1B:00.0, nvidia-smi 00000000:1B:00.0, sysfs 0000:1b:00.0."""
    bus = bus.strip()
    m = re.fullmatch(r"([0-9A-Fa-f]+):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-7])", bus)
    if not m:
        return bus
    dom, b, d, f = m.groups()
    return f"{int(dom, 16):08X}:{b.upper()}:{d.upper()}.{f}"


def _numa_node(bus: str) -> Optional[int]:
    m = re.fullmatch(r"[0-9A-Fa-f]+:([0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])", bus.strip())
    if not m:
        return None
    path = f"/sys/bus/pci/devices/0000:{m.group(1).lower()}/numa_node"
    try:
        node = int(open(path).read().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


# --------------------------------------------------------------------------- nvidia-smi
SMI_QUERY = "index,name,memory.total,compute_cap,pci.bus_id,driver_version"


def parse_smi_query(text: str) -> tuple[list, Optional[str]]:
    """Parse ``nvidia-smi --query-gpu=<SMI_QUERY> --format=csv,noheader,nounits``.

    Raises ValueError naming the line when the text is not in that format."""
    gpus, driver = [], None
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 6:
            raise ValueError(f"nvidia-smi line {lineno}: expected 6 comma-separated fields "
                             f"({SMI_QUERY}), got {len(parts)}: {line!r}")
        idx, name, mem, cc, bus, drv = parts
        try:
            index = int(idx)
        except ValueError:
            raise ValueError(f"nvidia-smi line {lineno}: GPU index {idx!r} is not a number") from None
        gpus.append(GPU(index=index, name=name,
                        memory_mib=int(float(mem)) if _num(mem) else None,
                        compute_capability=cc if re.fullmatch(r"\d+\.\d+", cc) else None,
                        pci_bus_id=normalise_bus_id(bus), numa_node=_numa_node(bus)))
        driver = drv or driver
    return gpus, driver


def _num(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False


def _smi_gpus(notes: list) -> tuple[list, Optional[str]]:
    exe = shutil.which("nvidia-smi")
    if not exe:
        notes.append("nvidia-smi not found")
        return [], None
    try:
        out = subprocess.run([exe, f"--query-gpu={SMI_QUERY}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        notes.append(f"nvidia-smi failed to run ({exc})")
        return [], None
    if out.returncode != 0:
        notes.append(f"nvidia-smi exited {out.returncode}: {(out.stderr or out.stdout).strip()[:200]}")
        return [], None
    try:
        return parse_smi_query(out.stdout)
    except ValueError as exc:
        notes.append(f"could not read nvidia-smi output: {exc}")
        return [], None


# --------------------------------------------------------------------------- CUDA_VISIBLE_DEVICES
def check_visible_devices(value: Optional[str], gpus: list) -> Optional[str]:
    """Return a warning when CUDA_VISIBLE_DEVICES names GPUs this machine does not have.

    CUDA accepts indices and UUIDs (GPU-...); it silently stops at the first invalid entry,
    which hides GPUs from every framework, so we say it plainly."""
    if value is None:
        return None
    value = value.strip()
    if value == "":
        return "CUDA_VISIBLE_DEVICES is set but empty: CUDA will see no GPU"
    seen = set()
    for entry in value.split(","):
        e = entry.strip()
        if re.fullmatch(r"(GPU|MIG)-[0-9A-Za-z-]+", e):
            continue
        if not re.fullmatch(r"\d+", e):
            return (f"CUDA_VISIBLE_DEVICES={value!r}: entry {e!r} is neither a GPU index nor a UUID; "
                    "CUDA ignores it and every entry after it")
        i = int(e)
        if gpus and i >= len(gpus):
            return (f"CUDA_VISIBLE_DEVICES={value!r}: GPU {i} does not exist (this machine has "
                    f"{len(gpus)}: 0..{len(gpus) - 1}); CUDA ignores it and every entry after it")
        if i in seen:
            return f"CUDA_VISIBLE_DEVICES={value!r}: GPU {i} is listed twice"
        seen.add(i)
    return None


# --------------------------------------------------------------------------- inventory
def inventory(software: bool = True, horovod_check: bool = True, check_build: bool = False) -> Inventory:
    """Collect what this machine has. Never raises for missing hardware or software, and
    imports no framework unless a check needs it (see :func:`ddlab.system.software.torch_facts`).

    ``horovod_check`` reads what Horovod was built with from its libraries (fast);
    ``check_build`` asks ``horovodrun --check-build`` instead (it imports every framework:
    seconds). Provenance records skip both and keep Horovod's version only."""
    inv = Inventory(cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"))
    gpus, driver, cuda = _nvml_gpus(inv.notes)
    if gpus:
        inv.source = "nvml"
    else:
        gpus, driver = _smi_gpus(inv.notes)
        if gpus:
            inv.source = "nvidia-smi"
    inv.gpus, inv.driver, inv.cuda_driver = gpus, driver, cuda
    warn = check_visible_devices(inv.cuda_visible_devices, gpus)
    if warn:
        inv.notes.append(warn)
    if software:
        f = _software.torch_facts(inv.notes)
        inv.torch, inv.cuda_runtime, inv.nccl = f["torch"], f["cuda_runtime"], f["nccl"]
        inv.tensorflow = _software.tensorflow_version()
        inv.horovod = _software.package_version("horovod")
        if check_build:
            inv.horovod_build = _software.horovod_build(inv.notes)
        elif horovod_check:
            inv.horovod_build = _software.horovod_build_from_files(inv.notes)
        inv.nvcc = _software.nvcc_version()
    return inv

