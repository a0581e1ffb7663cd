"""What this machine has: GPUs, driver, CUDA, NCCL, frameworks, Horovod, nvcc.

NVML (the ``nvidia-ml-py`` package, imported as ``pynvml``) is asked first because it
needs no subprocess and gives NUMA nodes; ``nvidia-smi`` is the fallback. With no GPU
the inventory is simply empty: nothing here raises because hardware is missing.

Length (about 760 lines): NVML, nvidia-smi and package-metadata readers, each with the parsing of
its own malformed outputs, plus the PCIe link report and doctor's text; they fill one Inventory.
"""
from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Optional

from ddlab.base.tables import Table


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
    dataset: Optional[str] = None
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
        driver = _s(pynvml.nvmlSystemGetDriverVersion())
        cuda = None
        try:
            v = pynvml.nvmlSystemGetCudaDriverVersion_v2()
            cuda = f"{v // 1000}.{(v % 1000) // 10}"
        except Exception:
            pass
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            bus = _s(pynvml.nvmlDeviceGetPciInfo(h).busId)
            try:
                major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
                cc = f"{major}.{minor}"
            except Exception:
                cc = None
            gpus.append(GPU(index=i, name=_s(pynvml.nvmlDeviceGetName(h)),
                            memory_mib=int(pynvml.nvmlDeviceGetMemoryInfo(h).total // 2**20),
                            compute_capability=cc, pci_bus_id=normalise_bus_id(bus),
                            numa_node=_numa_node(bus)))
        return gpus, driver, cuda
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _s(v) -> str:
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


# --------------------------------------------------------------------------- software
def _version(dist: str) -> Optional[str]:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def tensorflow_version() -> Optional[str]:
    return _version("tensorflow") or _version("tensorflow-cpu")


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
    facts = {"torch": _version("torch"), "cuda_runtime": None, "nccl": None}
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


def horovod_build(notes: list, timeout: float = 300) -> dict:
    """``horovodrun --check-build``, parsed (it imports every framework: seconds; ``ddlab
    doctor --check-build``). :func:`horovod_build_from_files` gives the same without that."""
    exe = shutil.which("horovodrun") or os.path.join(os.path.dirname(sys.executable), "horovodrun")
    if not _version("horovod") or not os.path.exists(exe):
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


# --------------------------------------------------------------------------- inventory
def inventory(software: bool = True, dataset: bool = True, horovod_check: bool = True,
              check_build: bool = False) -> Inventory:
    """Collect what this machine has. Never raises for missing hardware or software, and
    imports no framework unless a check needs it (see :func:`torch_facts`).

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
        f = torch_facts(inv.notes)
        inv.torch, inv.cuda_runtime, inv.nccl = f["torch"], f["cuda_runtime"], f["nccl"]
        inv.tensorflow = tensorflow_version()
        inv.horovod = _version("horovod")
        if check_build:
            inv.horovod_build = horovod_build(inv.notes)
        elif horovod_check:
            inv.horovod_build = horovod_build_from_files(inv.notes)
        inv.nvcc = nvcc_version()
    if dataset:
        from ddlab.training import data
        inv.dataset = data.dataset_status()
    return inv


# --------------------------------------------------------------------------- machine names
def _gpu_groups(inventory) -> list:
    """[(count, model)] in order of first appearance, from an :class:`Inventory`, its
    ``to_dict()`` (``ddlab doctor --json``) or a provenance record (``gpu_count``, ``gpu_model``)."""
    if isinstance(inventory, dict) and "gpus" not in inventory:  # a provenance record
        n = inventory.get("gpu_count") or 0
        if not n:
            return []
        return [(n, inventory.get("gpu_model") or "unknown GPU")]
    gpus = inventory["gpus"] if isinstance(inventory, dict) else inventory.gpus
    names = [g["name"] if isinstance(g, dict) else g.name for g in gpus]
    return [(names.count(m), m) for m in dict.fromkeys(names)]


def _gpu_link_labels(topology) -> list:
    """The GPU-to-GPU link labels of a topology (a :class:`ddlab.system.topology.Topology` or its
    ``to_dict()``), each once, best first."""
    if topology is None:
        return []
    from ddlab.system.topology import parse_link
    if isinstance(topology, dict):
        labels = list((topology.get("links") or {}).values())
    else:
        labels = [topology.link(i, j).label for i, j in topology.pairs()]
    return sorted(dict.fromkeys(labels), key=lambda lab: -parse_link(lab).rank)


def machine_label(inventory, topology=None) -> str:
    """A machine named by its hardware: "2x NVIDIA H200, NV18" (GPU count and model, then the
    GPU-to-GPU links best first, e.g. "8x Tesla V100-SXM2-16GB, NV2/NV1/SYS"), "CPU only"
    without GPUs. ``inventory`` is an :class:`Inventory`, its ``to_dict()`` or a provenance
    record; ``topology`` (optional) a parsed ``nvidia-smi topo -m`` or its ``to_dict()``."""
    groups = _gpu_groups(inventory)
    if not groups:
        return "CPU only"
    parts = [" + ".join(f"{n}x {model}" for n, model in groups)]
    links = _gpu_link_labels(topology)
    if links:
        parts.append("/".join(links))
    return ", ".join(parts)


def _slug(text: str) -> str:
    text = re.sub(r"^nvidia\s+", "", text.strip(), flags=re.I)
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def machine_slug(inventory, topology=None) -> str:
    """:func:`machine_label` as a file name: "2xh200-nv18" ("cpu" without GPUs)."""
    groups = _gpu_groups(inventory)
    if not groups:
        return "cpu"
    parts = [f"{n}x{_slug(model)}" for n, model in groups] + [_slug(lab) for lab in _gpu_link_labels(topology)]
    return "-".join(p for p in parts if p)


def this_machine() -> tuple:
    """(:func:`machine_label`, :func:`machine_slug`) of this machine, its links read from
    ``nvidia-smi topo -m`` when it answers (else the label has no link part)."""
    from ddlab.system import topology as topo_mod
    inv = inventory(software=False, dataset=False)
    topo = None
    if inv.gpus:
        try:
            topo = topo_mod.Topology.from_system()
        except (topo_mod.NoGPUError, topo_mod.TopologyParseError) as exc:
            print(f"machine name without its links: {exc}", file=sys.stderr)
    return machine_label(inv, topo), machine_slug(inv, topo)


def gpu_table(inv: Inventory) -> Table:
    """The GPUs: index, name, memory, compute capability, PCI bus id, NUMA node."""
    return Table([("index", "int", "#"), ("name", "text"), ("memory_mib", "bytes:MiB", "memory"),
                  ("compute_capability", "text", "CC"), ("pci_bus_id", "text", "PCI bus id"),
                  ("numa_node", "int", "NUMA")],
                 [dataclasses.asdict(g) for g in inv.gpus], missing="?")


def software_table(inv: Inventory) -> Table:
    """Driver, CUDA, NCCL, frameworks, Horovod's build, host and data set, one per line."""
    rows = [("driver", inv.driver), ("CUDA (driver supports)", inv.cuda_driver),
            ("CUDA (torch built with)", inv.cuda_runtime), ("NCCL (torch's)", inv.nccl),
            ("torch", inv.torch), ("tensorflow", inv.tensorflow), ("horovod", inv.horovod)]
    if inv.horovod_build:
        hb = inv.horovod_build
        rows.append(("horovod built for", ", ".join(hb.get("frameworks", [])) or "-"))
        rows.append(("horovod controllers", ", ".join(hb.get("controllers", [])) or "-"))
        rows.append(("horovod tensor ops", ", ".join(hb.get("tensor_operations", [])) or "-"))
    rows += [("nvcc", inv.nvcc), ("python", inv.python), ("host", inv.hostname),
             ("CUDA_VISIBLE_DEVICES", inv.cuda_visible_devices), ("Fashion-MNIST", inv.dataset)]
    return Table([("item", "text"), ("value", "text")], rows, header=False, missing="not found")


def format_inventory(inv: Inventory) -> str:
    """What ``ddlab doctor`` prints: the GPUs (:func:`gpu_table`), the mode, the software
    (:func:`software_table`) and any notes."""
    lines = []
    if inv.gpus:
        lines.append(f"GPUs: {inv.gpu_count} (read with {inv.source})")
        lines.append(str(gpu_table(inv)))
    else:
        lines.append("GPUs: none found. The course runs in CPU mode: real gloo runs on CPU "
                     "processes, and recorded GPU results shown as recorded.")
    lines.append(f"mode: {inv.mode}")
    lines.append(str(software_table(inv)))
    for n in inv.notes:
        lines.append(f"note: {n}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- PCIe links
SMI_PCIE_QUERY = "index,name,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max"


@dataclass
class PcieLink:
    """One GPU's PCIe link: the generation and lane width it runs at now and the most it
    (with this slot and system) can do."""
    index: int
    name: str
    gen_current: Optional[int]
    gen_max: Optional[int]
    width_current: Optional[int]
    width_max: Optional[int]

    @property
    def downtrained(self) -> bool:
        """Running below its maximum generation or width (when both are known)."""
        return any(c is not None and m is not None and c < m for c, m in
                   ((self.gen_current, self.gen_max), (self.width_current, self.width_max)))


def _int_or_none(v: str):
    v = v.strip()
    if v in ("", "[N/A]", "N/A", "[Not Supported]"):
        return None
    return int(v)


def parse_smi_pcie(text: str) -> list:
    """Parse ``nvidia-smi --query-gpu=<SMI_PCIE_QUERY> --format=csv,noheader,nounits``.
    Raises ValueError naming the line when the text is not in that format."""
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = [x.strip() for x in line.split(",")]
        if len(parts) != 6:
            raise ValueError(f"nvidia-smi line {lineno}: expected 6 comma-separated fields "
                             f"({SMI_PCIE_QUERY}), got {len(parts)}: {line!r}")
        try:
            idx, rest = int(parts[0]), [_int_or_none(x) for x in parts[2:]]
        except ValueError:
            raise ValueError(f"nvidia-smi line {lineno}: the index, generations and widths must be whole "
                             f"numbers (or [N/A]): {line!r}") from None
        out.append(PcieLink(idx, parts[1], *rest))
    return out


def _nvml_pcie(pynvml) -> list:
    """The PCIe links through NVML (``pynvml`` given, so tests can pass a stand-in)."""
    pynvml.nvmlInit()
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)

            def ask(fn):
                try:
                    return int(getattr(pynvml, fn)(h))
                except Exception:  # noqa: BLE001 - NVML raises NVMLError_NotSupported and kin: value unknown
                    return None
            out.append(PcieLink(i, _s(pynvml.nvmlDeviceGetName(h)), ask("nvmlDeviceGetCurrPcieLinkGeneration"),
                                ask("nvmlDeviceGetMaxPcieLinkGeneration"), ask("nvmlDeviceGetCurrPcieLinkWidth"),
                                ask("nvmlDeviceGetMaxPcieLinkWidth")))
        return out
    finally:
        pynvml.nvmlShutdown()


def pcie_links(notes: list, pynvml=None, smi_text: Optional[str] = None) -> list:
    """Each GPU's PCIe link, from NVML or else ``nvidia-smi``; failures become ``notes``.
    ``pynvml`` and ``smi_text`` stand in for the real ones (tests)."""
    if smi_text is None:
        try:
            if pynvml is None:
                import pynvml  # provided by nvidia-ml-py
            links = _nvml_pcie(pynvml)
            if links:
                return links
        except Exception as exc:  # noqa: BLE001 - no NVML here: fall back to nvidia-smi
            notes.append(f"PCIe links: NVML not usable ({type(exc).__name__})")
        exe = shutil.which("nvidia-smi")
        if not exe:
            return []
        try:
            r = subprocess.run([exe, f"--query-gpu={SMI_PCIE_QUERY}", "--format=csv,noheader,nounits"],
                               capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            notes.append(f"PCIe links: nvidia-smi failed to run ({exc})")
            return []
        if r.returncode != 0:
            notes.append(f"PCIe links: nvidia-smi exited {r.returncode}")
            return []
        smi_text = r.stdout
    try:
        return parse_smi_pcie(smi_text)
    except ValueError as exc:
        notes.append(f"PCIe links: could not read nvidia-smi output: {exc}")
        return []


def is_geforce(name: str) -> bool:
    return "geforce" in str(name).lower()


def link_warnings(links: list, gpu_names=()) -> list:
    """Warnings about the GPUs' links: a PCIe link below its maximum generation or width,
    and GeForce cards (peer-to-peer between them is disabled by the driver)."""
    out = []
    for x in links:
        if x.downtrained:
            out.append(f"GPU {x.index} ({x.name}) runs its PCIe link at Gen{x.gen_current} x{x.width_current}, "
                       f"below its maximum Gen{x.gen_max} x{x.width_max}. GPUs lower the link generation when "
                       "idle to save power: check again under load (while training, nvidia-smi -q -d PCI). If it "
                       "stays low, reseat the card or move it to a full x16 slot, and check the BIOS PCIe settings.")
    names = list(gpu_names) or [x.name for x in links]
    geforce = [n for n in names if is_geforce(n)]
    if len(names) >= 2 and geforce:
        out.append(f"{len(geforce)} of the {len(names)} GPUs are GeForce cards ({', '.join(sorted(set(geforce)))}): "
                   "the NVIDIA driver does not enable peer-to-peer (P2P) access between GeForce GPUs over PCIe, "
                   "so NCCL stages every transfer through host memory (check: nvidia-smi topo -p2p r).")
    return out


def pcie_table(links: list) -> Table:
    rows = [{"index": x.index, "name": x.name,
             "now": f"Gen{x.gen_current} x{x.width_current}" if x.gen_current and x.width_current else "?",
             "max": f"Gen{x.gen_max} x{x.width_max}" if x.gen_max and x.width_max else "?",
             "state": "below maximum" if x.downtrained else "at maximum"} for x in links]
    return Table([("index", "int", "#"), ("name", "text"), ("now", "text", "PCIe now"),
                  ("max", "text", "PCIe max"), ("state", "text")], rows)


def pcie_report(inv: Inventory, pynvml=None, smi_text: Optional[str] = None) -> str:
    """What ``ddlab doctor`` adds about the links: each GPU's PCIe generation and width (now
    and maximum) and the warnings of :func:`link_warnings`. Empty without GPUs."""
    if not inv.gpus:
        return ""
    notes: list = []
    links = pcie_links(notes, pynvml, smi_text)
    lines = []
    if links:
        lines += ["PCIe links:", str(pcie_table(links))]
    lines += [f"warning: {w}" for w in link_warnings(links, [g.name for g in inv.gpus])]
    lines += [f"note: {n}" for n in notes]
    return "\n".join(lines)


def cli(argv: list) -> int:
    import argparse
    import json
    p = argparse.ArgumentParser(prog="ddlab doctor", description="What this machine has, for the course.")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--check-build", action="store_true",
                   help="ask `horovodrun --check-build` what Horovod was built with (imports every framework: "
                        "seconds) instead of reading it from Horovod's files")
    p.add_argument("--label", action="store_true",
                   help='print only the name of this machine from its hardware, e.g. "2x NVIDIA H200, NV18"')
    p.add_argument("--slug", action="store_true", help='print only that name as a file name, e.g. "2xh200-nv18"')
    a = p.parse_args(argv)
    if a.label or a.slug:
        label, slug = this_machine()
        if a.label:
            print(label)
        if a.slug:
            print(slug)
        return 0
    inv = inventory(check_build=a.check_build)
    print(json.dumps(inv.to_dict(), indent=2) if a.json else format_inventory(inv))
    if not a.json and inv.gpus:
        print(pcie_report(inv))
    return 0
