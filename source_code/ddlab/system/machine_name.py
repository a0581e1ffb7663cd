"""A machine named by its hardware: "2x NVIDIA H200, NV18" (:func:`machine_label`), as a file
name "2xh200-nv18" (:func:`machine_slug`), and both for this machine (:func:`this_machine`).

The name comes from the GPUs (an :class:`~ddlab.system.hardware.Inventory`, its ``to_dict()`` or
a provenance record) and the GPU-to-GPU links of a :class:`~ddlab.system.topology.Topology`, never
from a host name or a free-text label.
"""
from __future__ import annotations

import re
import sys

from ddlab.system import hardware
from ddlab.system.topology import NoGPUError, Topology, TopologyParseError
from ddlab.system.topology_parse import parse_link


def _gpu_groups(inventory) -> list:
    """[(count, model)] in order of first appearance, from an Inventory, its
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
    if isinstance(topology, dict):
        labels = list((topology.get("links") or {}).values())
    else:
        labels = [topology.link(i, j).label for i, j in topology.pairs()]
    return sorted(dict.fromkeys(labels), key=lambda lab: -parse_link(lab).rank)


def machine_label(inventory, topology=None) -> str:
    """A machine named by its hardware: "2x NVIDIA H200, NV18" (GPU count and model, then the
    GPU-to-GPU links best first, e.g. "8x Tesla V100-SXM2-16GB, NV2/NV1/SYS"), "CPU only"
    without GPUs. ``inventory`` is an :class:`~ddlab.system.hardware.Inventory`, its ``to_dict()``
    or a provenance record; ``topology`` (optional) a parsed ``nvidia-smi topo -m`` or its
    ``to_dict()``."""
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


def provenance_slug(prov: dict) -> str:
    """:func:`machine_slug` of the machine a provenance record names: its GPUs (``gpu_count``, ``gpu_model``)
    and the links its label (``machine``) carries after them, e.g. "2x NVIDIA H100 80GB HBM3, NV18" ->
    "2xh100-80gb-hbm3-nv18"; the name a recording of that machine is kept under beside the course's."""
    label = str(prov.get("machine") or "")
    links = label.split(", ", 1)[1].split("/") if ", " in label else []
    return "-".join([machine_slug(prov)] + [s for s in (_slug(link) for link in links) if s])


def this_machine() -> tuple:
    """(:func:`machine_label`, :func:`machine_slug`) of this machine, its links read from
    ``nvidia-smi topo -m`` when it answers (else the label has no link part)."""
    inv = hardware.inventory(software=False)
    topo = None
    if inv.gpus:
        try:
            topo = Topology.from_system()
        except (NoGPUError, TopologyParseError) as exc:
            print(f"machine name without its links: {exc}", file=sys.stderr)
    return machine_label(inv, topo), machine_slug(inv, topo)
