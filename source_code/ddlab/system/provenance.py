"""Provenance: where and how a result was measured. Every recorded result carries one.

:func:`collect` describes this machine and run; :func:`run_provenance` is the quicker form a
training script calls for its own result; :func:`label` and :func:`caption` turn a provenance
into the one line a figure or table shows.
"""
from __future__ import annotations

import datetime as _dt
import os
import shlex
import subprocess
from typing import Optional, Sequence, Union

from ddlab.base.paths import REPO_ROOT


def _git_commit() -> Optional[str]:
    """The checkout's commit, with "+changes" when tracked files differ from it (the code that
    ran was then not that commit alone); None outside a git checkout."""
    try:
        out = subprocess.run(["git", "-C", REPO_ROOT, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10)
        commit = out.stdout.strip()
        if out.returncode != 0 or not commit:
            return None
        status = subprocess.run(["git", "-C", REPO_ROOT, "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=30)
        return commit + ("+changes" if status.returncode == 0 and status.stdout.strip() else "")
    except (OSError, subprocess.TimeoutExpired):
        return None


def collect(command: Union[str, Sequence[str], None] = None, machine: Optional[str] = None,
            inventory=None) -> dict:
    """Describe this machine and run. ``machine`` labels it (default: $DDLAB_MACHINE, else
    :func:`ddlab.system.machine_name.machine_label` of this machine's GPUs, e.g. "2x NVIDIA H200")."""
    from ddlab.system import hardware
    from ddlab.system.machine_name import machine_label
    inv = inventory or hardware.inventory(horovod_check=False)
    names = sorted({g.name for g in inv.gpus})
    if command is not None and not isinstance(command, str):
        command = shlex.join(str(c) for c in command)
    return {
        "machine": machine or os.environ.get("DDLAB_MACHINE") or machine_label(inv),
        "gpu_model": ", ".join(names) if names else None,
        "gpu_count": inv.gpu_count,
        "driver": inv.driver,
        "cuda_driver": inv.cuda_driver,
        "cuda_runtime": inv.cuda_runtime,
        "nccl": inv.nccl,
        "torch": inv.torch,
        "tensorflow": inv.tensorflow,
        "horovod": inv.horovod,
        "python": inv.python,
        "hostname": inv.hostname,
        "command": command,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "ddlab_commit": _git_commit(),
        "nccl_env": {k: v for k, v in os.environ.items() if k.startswith("NCCL_")},
    }


def run_provenance(command, torch_facts: bool = True) -> dict:
    """:func:`collect` for one training run, without the slow part of the full inventory
    (``horovodrun --check-build`` imports every framework: seconds per run).
    ``torch_facts=False`` reads torch's version without importing it (the Keras script)."""
    from ddlab.system import hardware, software

    inv = hardware.inventory(software=False)
    if torch_facts:
        facts = software.torch_facts(inv.notes)
        inv.torch, inv.cuda_runtime, inv.nccl = facts["torch"], facts["cuda_runtime"], facts["nccl"]
    else:
        inv.torch = software.package_version("torch")
    inv.tensorflow = software.tensorflow_version()
    inv.horovod = software.package_version("horovod")
    return collect(command=command, inventory=inv)


def label(prov: dict) -> str:
    """The machine and date for a caption: '2x NVIDIA H200, 2026-11-22'. The machine is named
    from the recorded hardware fields (gpu_count, gpu_model), never from the free-text
    ``machine`` field, which older records filled with how the machine was obtained."""
    from ddlab.system.machine_name import machine_label
    return f"{machine_label(prov)}, {str(prov.get('date', ''))[:10]}"


def caption(prov: Optional[dict], live: bool = False, source: Optional[str] = None) -> str:
    """Where a figure or table comes from, the one line the course labels it with everywhere:
    "measured now on ...", "recorded on ...", "not recorded yet" (``source="missing"``), or,
    for figures not measured, what they are instead. ``source`` ("live", "recorded",
    "missing") is a result's own word for it and overrides ``live``."""
    if source == "missing":
        return "not recorded yet"
    live = live if source is None else source == "live"
    where = label(prov) if prov else "unknown machine"
    if live:
        return "measured now on " + where
    if prov and prov.get("cited"):
        return "written from published facts, not measured"
    if prov and prov.get("illustrative"):
        return "illustrative example, not a measurement"
    return "recorded on " + where
