"""What this machine has: its GPUs (NVML, else nvidia-smi), the CUDA_VISIBLE_DEVICES check, and
the :class:`Inventory` that holds them with the software versions (:mod:`ddlab.system.software`).

NVML (the ``nvidia-ml-py`` package, imported as ``pynvml``) is asked first because it
needs no subprocess and gives NUMA nodes; ``nvidia-smi`` is the fallback. With no GPU
the inventory is simply empty: nothing here raises because hardware is missing.

``ddlab doctor`` prints the inventory (:mod:`ddlab.report.doctor`); the machine's name from its
hardware is :mod:`ddlab.system.machine_name`; each GPU's PCIe link is :mod:`ddlab.system.pcie`;
each GPU's NUMA node comes from :mod:`ddlab.system.numa`.

CUDA and NVML number the GPUs differently once ``CUDA_VISIBLE_DEVICES`` is set (CUDA device 0 is
the first GPU the variable names, by index or by UUID): :func:`visible_gpus` maps each CUDA
index to its NVML GPU, and :func:`check_visible_devices` says what is wrong with the variable.
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

from ddlab.system import numa as _numa
from ddlab.system import software as _software

@dataclass
class GPU:
    index: int
    name: str
    memory_mib: Optional[int] = None
    compute_capability: Optional[str] = None
    pci_bus_id: Optional[str] = None
    numa_node: Optional[int] = None
    uuid: Optional[str] = None          # "GPU-8932f937-d72c-..." (NVML, nvidia-smi)
    mig_uuids: list = field(default_factory=list)   # its MIG devices' UUIDs, when MIG is on
    numa_why: Optional[str] = None      # when numa_node is None: why (e.g. "none reported (VM?)")

    @property
    def numa_text(self) -> str:
        """The NUMA node as ``ddlab doctor`` shows it: the node, or why there is none."""
        return str(self.numa_node) if self.numa_node is not None else (self.numa_why or _numa.NONE_REPORTED)


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
                            uuid=_nvml_optional(pynvml, "nvmlDeviceGetUUID", h), mig_uuids=_nvml_migs(pynvml, h)))
        return gpus, driver, cuda
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _nvml_optional(pynvml, fn: str, *args) -> Optional[str]:
    try:
        return nvml_str(getattr(pynvml, fn)(*args))
    except Exception:  # noqa: BLE001 - NVMLError_NotSupported and kin: not known
        return None


def _nvml_migs(pynvml, h) -> list:
    """The UUIDs of the MIG devices on GPU handle ``h`` ([] when MIG is off or unknown)."""
    try:
        current, _pending = pynvml.nvmlDeviceGetMigMode(h)
        if current != getattr(pynvml, "NVML_DEVICE_MIG_ENABLE", 1):
            return []
        count = pynvml.nvmlDeviceGetMaxMigDeviceCount(h)
    except Exception:  # noqa: BLE001 - no MIG on this GPU or this driver
        return []
    out = []
    for j in range(count):
        try:
            out.append(nvml_str(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, j))))
        except Exception:  # noqa: BLE001 - an empty MIG slot
            continue
    return out


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


def _fill_numa(gpus: list, root: str = _numa.SYSFS, topo: Optional[str] = None) -> None:
    """Each GPU's NUMA node (:func:`ddlab.system.numa.gpus_numa`: sysfs, else nvidia-smi topo -m)."""
    found = _numa.gpus_numa({g.index: g.pci_bus_id for g in gpus}, root, topo)
    for g in gpus:
        g.numa_node, g.numa_why = found[g.index].node, found[g.index].why


# --------------------------------------------------------------------------- nvidia-smi
SMI_QUERY = "index,name,memory.total,compute_cap,pci.bus_id,driver_version,uuid"


def parse_smi_query(text: str) -> tuple[list, Optional[str]]:
    """Parse ``nvidia-smi --query-gpu=<SMI_QUERY> --format=csv,noheader,nounits`` (a capture
    without the last field, uuid, is read too). NUMA nodes are not filled in here.

    Raises ValueError naming the line when the text is not in that format."""
    gpus, driver = [], None
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) not in (6, 7):
            raise ValueError(f"nvidia-smi line {lineno}: expected 7 comma-separated fields "
                             f"({SMI_QUERY}), got {len(parts)}: {line!r}")
        idx, name, mem, cc, bus, drv = parts[:6]
        uuid = parts[6] if len(parts) == 7 and parts[6].startswith(("GPU-", "MIG-")) else None
        try:
            index = int(idx)
        except ValueError:
            raise ValueError(f"nvidia-smi line {lineno}: GPU index {idx!r} is not a number") from None
        gpus.append(GPU(index=index, name=name,
                        memory_mib=int(float(mem)) if _num(mem) else None,
                        compute_capability=cc if re.fullmatch(r"\d+\.\d+", cc) else None,
                        pci_bus_id=normalise_bus_id(bus), uuid=uuid))
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
@dataclass
class VisibleGPUs:
    """What CUDA sees under a ``CUDA_VISIBLE_DEVICES`` value: ``gpus[i]`` is the NVML GPU that
    is CUDA device ``i`` (None where the inventory cannot tell which one, e.g. a MIG UUID
    without NVML's MIG list); ``warning``: what is wrong with the value (CUDA silently stops at
    the first bad entry); ``notes``: where the mapping is a best guess."""
    gpus: list
    warning: Optional[str] = None
    notes: list = field(default_factory=list)


def _by_uuid(entry: str, gpus: list, value: str) -> tuple:
    """(GPU or None, warning) for a GPU-... or MIG-... entry. CUDA accepts a GPU UUID's first
    digits when they name one GPU; MIG-GPU-<uuid>/<gi>/<ci> (older drivers) names its parent
    GPU, MIG-<uuid> a MIG device that NVML lists under its parent."""
    e = entry.lower()
    if e.startswith("mig-gpu-"):
        e, kind = e[4:].split("/")[0], "GPU"
    elif e.startswith("mig-"):
        hits = [g for g in gpus if any(m.lower().startswith(e) for m in g.mig_uuids)]
        if len(hits) == 1:
            return hits[0], None
        return None, None           # no MIG list in the inventory: which GPU is unknown, not wrong
    else:
        kind = "GPU"
    known = [g for g in gpus if g.uuid]
    if not known:
        return None, None           # the inventory has no UUIDs (an old nvidia-smi capture)
    hits = [g for g in known if g.uuid.lower().startswith(e)]
    if len(hits) > 1:
        return None, (f"CUDA_VISIBLE_DEVICES={value!r}: {entry!r} is the start of {len(hits)} GPUs' UUIDs; "
                      "give enough digits to name one")
    if not hits:
        return None, (f"CUDA_VISIBLE_DEVICES={value!r}: no {kind} has a UUID starting {entry!r} (nvidia-smi -L "
                      "lists them); CUDA ignores it and every entry after it")
    return hits[0], None


def visible_gpus(value: Optional[str], gpus: list, device_order: Optional[str] = None) -> VisibleGPUs:
    """Map CUDA's device indices to the NVML GPUs of ``gpus`` (the inventory) under
    ``CUDA_VISIBLE_DEVICES=value`` (None: not set) and ``CUDA_DEVICE_ORDER=device_order``.

    CUDA reads the entries in order (an index, a GPU UUID or its first digits, or a MIG
    UUID) and stops at the first it cannot use: the GPUs before it are visible, the rest not.
    An index counts in CUDA's own order: PCI bus order (NVML's) with
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID``; otherwise the fastest GPU first, which is the same
    order when all GPUs are the same model (a note says when it may not be)."""
    ordered = sorted(gpus, key=lambda g: g.index)
    notes = []
    models = sorted({g.name for g in ordered})
    if len(models) > 1 and (device_order or "").strip().upper() != "PCI_BUS_ID":
        notes.append(f"the GPUs are of different models ({', '.join(models)}) and CUDA_DEVICE_ORDER is not "
                     "PCI_BUS_ID: CUDA numbers the fastest GPU first, so a CUDA index may not be the NVML GPU of "
                     "the same number; set CUDA_DEVICE_ORDER=PCI_BUS_ID to make them agree")
    if value is None:
        return VisibleGPUs(list(ordered), None, notes)
    value = value.strip()
    if value == "":
        return VisibleGPUs([], "CUDA_VISIBLE_DEVICES is set but empty: CUDA will see no GPU", notes)
    out, seen, warning = [], set(), None
    for entry in value.split(","):
        e = entry.strip()
        if re.fullmatch(r"(GPU|MIG)-[0-9A-Za-z/-]+", e, re.I):
            gpu, warning = _by_uuid(e, ordered, value)
            if warning:
                break
            key = e.lower() if gpu is None else gpu.index
        elif re.fullmatch(r"\d+", e):
            i = int(e)
            if ordered and i >= len(ordered):
                warning = (f"CUDA_VISIBLE_DEVICES={value!r}: GPU {i} does not exist (this machine has "
                           f"{len(ordered)}: 0..{len(ordered) - 1}); CUDA ignores it and every entry after it")
                break
            gpu, key = (ordered[i] if ordered else None), i
        elif re.fullmatch(r"-\d+", e):
            warning = (f"CUDA_VISIBLE_DEVICES={value!r}: entry {e!r} hides every GPU from there on (the usual way "
                       f"to keep CUDA off the GPUs); CUDA sees {len(out)} GPU(s)")
            break
        else:
            warning = (f"CUDA_VISIBLE_DEVICES={value!r}: entry {e!r} is neither a GPU index nor a UUID; "
                       "CUDA ignores it and every entry after it")
            break
        if key in seen:
            warning = f"CUDA_VISIBLE_DEVICES={value!r}: GPU {e} is listed twice"
            break
        seen.add(key)
        if gpu is None and ordered:
            notes.append(f"CUDA_VISIBLE_DEVICES entry {e!r}: the inventory cannot tell which GPU it is "
                         "(no UUIDs or MIG devices read from NVML)")
        out.append(gpu)
    return VisibleGPUs(out, warning, notes)


def check_visible_devices(value: Optional[str], gpus: list) -> Optional[str]:
    """Return a warning when CUDA_VISIBLE_DEVICES names GPUs this machine does not have
    (:func:`visible_gpus`'s warning).

    CUDA accepts indices and UUIDs (GPU-...); it silently stops at the first invalid entry,
    which hides GPUs from every framework, so we say it plainly."""
    return visible_gpus(value, gpus, "PCI_BUS_ID").warning


def nvml_gpu_for_cuda(index: int, gpus: list, value: Optional[str] = None,
                      device_order: Optional[str] = None) -> GPU:
    """The NVML GPU (with its PCI bus id) that is CUDA device ``index`` under
    ``CUDA_VISIBLE_DEVICES=value`` (see :func:`visible_gpus`). Raises ValueError with one line
    when CUDA has no such device or the inventory cannot tell which GPU it is."""
    seen = visible_gpus(value, gpus, device_order)
    if index >= 0 and not gpus:
        raise ValueError(f"CUDA device {index}: the GPU inventory (NVML, nvidia-smi) lists no GPU, so it cannot say "
                         "which GPU that is (nvidia-smi missing or not answering?)")
    if 0 <= index and value is None and index >= len(gpus):
        raise ValueError(f"CUDA device {index}: the GPU inventory (NVML) lists only {len(gpus)} GPU(s), so CUDA and "
                         "NVML disagree about this machine (a driver and library mismatch, or GPUs NVML cannot read)")
    if not 0 <= index < len(seen.gpus):
        why = f" ({seen.warning})" if seen.warning else ""
        raise ValueError(f"CUDA device {index} does not exist: CUDA sees {len(seen.gpus)} GPU(s) under "
                         f"CUDA_VISIBLE_DEVICES={value!r}{why}")
    gpu = seen.gpus[index]
    if gpu is None:
        raise ValueError(f"CUDA device {index} is {value.split(',')[index].strip()!r}, which the GPU inventory "
                         "cannot place (no UUIDs or MIG devices read from NVML)")
    return gpu


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
    _fill_numa(gpus)
    inv.gpus, inv.driver, inv.cuda_driver = gpus, driver, cuda
    seen = visible_gpus(inv.cuda_visible_devices, gpus, os.environ.get("CUDA_DEVICE_ORDER"))
    inv.notes += ([seen.warning] if seen.warning else []) + seen.notes
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

