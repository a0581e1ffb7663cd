"""NUMA: the host's memory nodes and their CPUs, and the node each GPU hangs off.

A host with two CPU sockets has (at least) two NUMA nodes: each socket reaches its own memory
directly and the other socket's memory over the inter-socket link (UPI, Infinity Fabric). A GPU
sits on the PCIe lanes of one socket, so a host <-> GPU copy from memory on the other node
crosses that link too. Linux describes both in sysfs, which is all this module reads (no
libnuma, no subprocess unless asked):

* ``/sys/devices/system/node/node<N>/cpulist``: the nodes and their CPUs ("0-31,64-95"). A
  kernel built without NUMA has no such folder: one node is assumed, and :class:`HostNuma`
  says so in ``note``.
* ``/sys/bus/pci/devices/<domain:bus:device.function>/numa_node``: the node of a PCI device,
  the GPU included; ``-1`` means the platform reports none (common in virtual machines).

When sysfs has no entry for the GPU's PCI device (a container without ``/sys/bus/pci``), the
``NUMA Affinity`` column of ``nvidia-smi topo -m`` (read by :mod:`ddlab.system.topology_parse`)
is the fallback: :func:`numa_from_topo`.

    from ddlab.system import numa
    numa.host_numa().nodes                  # [NumaNode(node=0, cpus=[0, 1, ...]), ...]
    numa.gpu_numa_node("00000000:19:00.0")  # GpuNuma(node=0, why=None)
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Optional

SYSFS = "/sys"
NODE_DIR = ("devices", "system", "node")
PCI_DIR = ("bus", "pci", "devices")
NONE_REPORTED = "none reported (VM?)"
NO_SYSFS_ENTRY = "not in sysfs (no /sys/bus/pci entry for the GPU)"


def parse_cpulist(text: str) -> list:
    """The CPUs of a sysfs cpulist ("0-3,8-11" -> [0, 1, 2, 3, 8, 9, 10, 11]); "" -> [].
    Raises ValueError naming the text when it is not a cpulist."""
    cpus = []
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise ValueError(f"not a CPU list: {text.strip()!r} (expected e.g. '0-3,8-11')")
        a, b = int(m.group(1)), int(m.group(2) or m.group(1))
        if b < a:
            raise ValueError(f"not a CPU list: {text.strip()!r} (range {part} runs backwards)")
        cpus.extend(range(a, b + 1))
    return cpus


@dataclass(frozen=True)
class NumaNode:
    node: int
    cpus: tuple


@dataclass
class HostNuma:
    """The host's NUMA nodes. ``supported`` False: the kernel reports no NUMA (one node, 0,
    holding every CPU, is assumed and ``note`` says so)."""
    supported: bool
    nodes: list = field(default_factory=list)
    note: Optional[str] = None

    def cpus_of(self, node: int) -> tuple:
        for n in self.nodes:
            if n.node == node:
                return n.cpus
        raise ValueError(f"this host has no NUMA node {node} (it has {', '.join(str(n.node) for n in self.nodes)})")

    @property
    def node_ids(self) -> list:
        return [n.node for n in self.nodes]

    def to_dict(self) -> dict:
        return {"supported": self.supported, "nodes": self.node_ids, "note": self.note,
                "cpus": {str(n.node): _cpulist_text(n.cpus) for n in self.nodes}}


def _cpulist_text(cpus) -> str:
    """[0, 1, 2, 5] -> "0-2,5"."""
    out, cpus = [], sorted(cpus)
    i = 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        out.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ",".join(out)


def _read(path: str) -> Optional[str]:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def host_numa(root: str = SYSFS) -> HostNuma:
    """The host's NUMA nodes and their CPUs from sysfs under ``root`` (tests pass a fake tree)."""
    base = os.path.join(root, *NODE_DIR)
    try:
        names = os.listdir(base)
    except OSError:
        names = None
    ids = sorted(int(m.group(1)) for n in names or () if (m := re.fullmatch(r"node(\d+)", n)))
    if not ids:
        try:
            cpus = tuple(sorted(os.sched_getaffinity(0)))
        except (AttributeError, OSError):
            cpus = tuple(range(os.cpu_count() or 1))
        why = ("/sys/devices/system/node is absent" if names is None
               else "/sys/devices/system/node lists no node")
        return HostNuma(False, [NumaNode(0, cpus)],
                        f"no NUMA information in this kernel ({why}): one node assumed, memory placement not measured")
    nodes = []
    for i in ids:
        text = _read(os.path.join(base, f"node{i}", "cpulist"))
        try:
            cpus = tuple(parse_cpulist(text or ""))
        except ValueError:
            cpus = ()
        nodes.append(NumaNode(i, cpus))
    return HostNuma(True, nodes)


def sysfs_bus_id(bus_id: str) -> Optional[str]:
    """A PCI address as sysfs names it: lower case, the domain in at least 4 hex digits.
    NVML and nvidia-smi write "00000000:19:00.0", CUDA "0000:19:00.0": both -> "0000:19:00.0".
    None when ``bus_id`` is not a PCI address."""
    m = re.fullmatch(r"([0-9A-Fa-f]{1,8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-7])", str(bus_id).strip())
    if not m:
        return None
    dom, b, d, f = m.groups()
    return f"{int(dom, 16):04x}:{b.lower()}:{d.lower()}.{f}"


@dataclass(frozen=True)
class GpuNuma:
    """A GPU's NUMA node; ``node`` None with ``why`` saying why (:data:`NONE_REPORTED`: the
    platform reports -1, e.g. a VM; :data:`NO_SYSFS_ENTRY`: sysfs has no such device)."""
    node: Optional[int]
    why: Optional[str] = None
    source: str = "sysfs"

    @property
    def text(self) -> str:
        """What ``ddlab doctor`` shows: the node, or why there is none (never "?")."""
        return str(self.node) if self.node is not None else (self.why or NONE_REPORTED)


def gpu_numa_node(bus_id: Optional[str], root: str = SYSFS) -> GpuNuma:
    """The NUMA node of the GPU at PCI address ``bus_id``, from
    ``<root>/bus/pci/devices/<address>/numa_node``."""
    addr = sysfs_bus_id(bus_id or "")
    if addr is None:
        return GpuNuma(None, f"not reported (no PCI bus id: {bus_id!r})")
    text = _read(os.path.join(root, *PCI_DIR, addr, "numa_node"))
    if text is None:
        return GpuNuma(None, NO_SYSFS_ENTRY)
    try:
        node = int(text.strip())
    except ValueError:
        return GpuNuma(None, f"not reported (sysfs numa_node reads {text.strip()!r})")
    return GpuNuma(node) if node >= 0 else GpuNuma(None, NONE_REPORTED)


def numa_from_topo(text: str) -> dict:
    """{GPU index: GpuNuma} from the ``NUMA Affinity`` column of ``nvidia-smi topo -m`` (GPU
    indices are NVML's, as in the inventory). "N/A" -> none reported; a range of nodes (the
    GPU equally near several) -> None with the range in ``why``. {} without that column."""
    import warnings
    from ddlab.system.topology_parse import read_matrix
    with warnings.catch_warnings():        # a paste cut off after its GPU rows still has the column
        warnings.simplefilter("ignore")
        matrix = read_matrix(text)
    out = {}
    for dev, extra in matrix.extras.items():
        m = re.fullmatch(r"GPU(\d+)", dev)
        if not m or "numa_affinity" not in extra:
            continue
        v = extra.get("numa_affinity")
        if v is None:
            out[int(m.group(1))] = GpuNuma(None, NONE_REPORTED, "nvidia-smi topo -m")
        elif re.fullmatch(r"\d+", v):
            out[int(m.group(1))] = GpuNuma(int(v), None, "nvidia-smi topo -m")
        else:
            out[int(m.group(1))] = GpuNuma(None, f"several nodes ({v})", "nvidia-smi topo -m")
    return out


def topo_text() -> Optional[str]:
    """``nvidia-smi topo -m``'s text, or None when it cannot be had (a subprocess: only when
    sysfs could not say)."""
    import shutil
    import subprocess
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        r = subprocess.run([exe, "topo", "-m"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout if r.returncode == 0 else None


def gpus_numa(bus_ids: dict, root: str = SYSFS, topo: Optional[str] = None) -> dict:
    """{GPU index: GpuNuma} for {GPU index: PCI bus id}: sysfs first; for the GPUs sysfs has
    no entry for, ``nvidia-smi topo -m``'s NUMA Affinity (``topo``: its text; None runs it)."""
    out = {i: gpu_numa_node(b, root) for i, b in bus_ids.items()}
    missing = [i for i, g in out.items() if g.why == NO_SYSFS_ENTRY]
    if missing:
        text = topo if topo is not None else topo_text()
        if text:
            try:
                from_topo = numa_from_topo(text)
            except ValueError:       # TopologyParseError is a ValueError: keep what sysfs said
                from_topo = {}
            for i in missing:
                if i in from_topo:
                    out[i] = from_topo[i]
    return out
