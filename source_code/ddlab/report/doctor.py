"""``ddlab doctor``: what this machine has, for the course. The GPUs (with each one's NUMA node,
:mod:`ddlab.system.numa`), the mode, the software (:mod:`ddlab.system.hardware` and
:mod:`ddlab.system.software`), whether the Fashion-MNIST data set is present and verified
(:func:`ddlab.training.data.dataset_status`), and each GPU's PCIe link (:mod:`ddlab.system.pcie`).
``ddlab doctor --load`` also reads the PCIe links while a host <-> GPU copy runs
(:func:`load_report`): an idle link trains down, so only a reading under load can flag one that
stays below its maximum. Without ``--load`` the doctor starts no GPU work and stays fast.

    from ddlab.report import doctor
    from ddlab.system import hardware
    print(doctor.format_inventory(hardware.inventory()))
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from ddlab.base.tables import Table
from ddlab.system import hardware, pcie
from ddlab.system.hardware import Inventory
from ddlab.training import data


def gpu_table(inv: Inventory) -> Table:
    """The GPUs: index, name, memory, compute capability, PCI bus id, NUMA node (the node, or
    why there is none: "none reported (VM?)", see :mod:`ddlab.system.numa`)."""
    return Table([("index", "int", "#"), ("name", "text"), ("memory_mib", "bytes:MiB", "memory"),
                  ("compute_capability", "text", "CC"), ("pci_bus_id", "text", "PCI bus id"),
                  ("numa", "text", "NUMA node")],
                 [dict(dataclasses.asdict(g), numa=g.numa_text) for g in inv.gpus], missing="?")


def horovod_line(inv: Inventory) -> str:
    """One line on what Horovod runs on here: its version, the frameworks it was built for, its
    controllers and tensor operations, and the torch and NCCL beside it."""
    hb = inv.horovod_build or {}
    built = (f", built for {', '.join(hb.get('frameworks', [])) or '-'}; controllers "
             f"{', '.join(hb.get('controllers', [])) or '-'}; tensor operations "
             f"{', '.join(hb.get('tensor_operations', [])) or '-'}") if hb else ""
    return (f"Horovod {inv.horovod or 'not installed'}{built} (torch {inv.torch or 'not installed'}, "
            f"NCCL {inv.nccl or 'none: no CUDA'})")


def software_table(inv: Inventory, dataset: Optional[str]) -> Table:
    """Driver, CUDA, NCCL, frameworks, Horovod's build, host and the data set's status
    (``dataset``, as :func:`ddlab.training.data.dataset_status` says it), one per line."""
    rows = [("driver", inv.driver), ("CUDA (driver supports)", inv.cuda_driver),
            ("CUDA (torch built with)", inv.cuda_runtime), ("NCCL (torch's)", inv.nccl),
            ("torch", inv.torch), ("tensorflow", inv.tensorflow), ("horovod", inv.horovod)]
    if inv.horovod_build:
        hb = inv.horovod_build
        rows.append(("horovod built for", ", ".join(hb.get("frameworks", [])) or "-"))
        rows.append(("horovod controllers", ", ".join(hb.get("controllers", [])) or "-"))
        rows.append(("horovod tensor ops", ", ".join(hb.get("tensor_operations", [])) or "-"))
    rows += [("nvcc", inv.nvcc), ("python", inv.python), ("host", inv.hostname),
             ("CUDA_VISIBLE_DEVICES", inv.cuda_visible_devices), ("Fashion-MNIST", dataset)]
    return Table([("item", "text"), ("value", "text")], rows, header=False, missing="not found")


def format_inventory(inv: Inventory, dataset: Optional[str] = None) -> str:
    """What ``ddlab doctor`` prints: the GPUs (:func:`gpu_table`), the mode, the software and
    the data set (:func:`software_table`; ``dataset`` is checked now when not given) and any notes."""
    lines = []
    if inv.gpus:
        lines.append(f"GPUs: {inv.gpu_count} (read with {inv.source})")
        lines.append(str(gpu_table(inv)))
    else:
        lines.append("GPUs: none found. The course runs in CPU mode: real gloo runs on CPU "
                     "processes, and recorded GPU results shown as recorded.")
    lines.append(f"mode: {inv.mode}")
    lines.append(str(software_table(inv, data.dataset_status() if dataset is None else dataset)))
    for n in inv.notes:
        lines.append(f"note: {n}")
    return "\n".join(lines)


def doctor_dict(inv: Inventory, dataset: Optional[str]) -> dict:
    """What ``ddlab doctor --json`` prints (and the report's doctor step records as its
    inventory): ``inv.to_dict()`` with the data set's status under "dataset"."""
    out = {}
    for key, value in inv.to_dict().items():
        if key == "notes":
            out["dataset"] = dataset   # where ddlab doctor --json has always printed it
        out[key] = value
    return out


def load_report(seconds: float = 1.5) -> str:
    """What ``ddlab doctor --load`` adds: each GPU's PCIe link read while a copy runs
    (:func:`ddlab.measure.host_link_torch.pcie_under_load`), a warning for each link that stays
    below its maximum; without a GPU (or NVML) one line saying it was skipped and why."""
    from ddlab.measure import host_link_torch
    try:
        check = host_link_torch.pcie_under_load(seconds=seconds)
    except host_link_torch.NoGPU as exc:
        return f"PCIe under load: {exc}"
    except RuntimeError as exc:
        return f"PCIe under load: skipped: {str(exc).splitlines()[0]}"
    lines = [str(check.table())]
    lines += [f"warning: {w}" for w in check.flagged()]
    if check.error:
        lines.append(f"warning: the copy that loads the links failed: {check.error}")
    lines += [f"note: {n}" for n in check.notes]
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
    p.add_argument("--load", action="store_true",
                   help="also read each GPU's PCIe link while a host <-> GPU copy runs (an idle link trains down; "
                        "about 2 s, needs PyTorch and a GPU)")
    a = p.parse_args(argv)
    if a.label or a.slug:
        from ddlab.system.machine_name import this_machine
        label, slug = this_machine()
        if a.label:
            print(label)
        if a.slug:
            print(slug)
        return 0
    inv = hardware.inventory(check_build=a.check_build)
    dataset = data.dataset_status()
    print(json.dumps(doctor_dict(inv, dataset), indent=2) if a.json else format_inventory(inv, dataset))
    if not a.json and inv.gpus:
        print(pcie.pcie_report(inv))
    if a.load:
        print(load_report())
    return 0
