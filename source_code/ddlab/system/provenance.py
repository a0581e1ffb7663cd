"""Provenance: where and how a result was measured. Every recorded result carries one.

:func:`collect` describes this machine and run; :func:`run_provenance` is the quicker form a
training script calls for its own result; :func:`label` and :func:`caption` turn a provenance
into the one line a figure or table shows.

A provenance names the machine by its hardware (:func:`hardware_label`, e.g. "2x NVIDIA H200,
NV18") and gives the command as anyone can run it from a checkout (:func:`portable_command`:
paths relative to the repository, the output folder as ``$OUT``, executables by name), so a
recording says nothing about the machine's host name or folders.
"""
from __future__ import annotations

import datetime as _dt
import os
import re
import shlex
import subprocess
import tempfile
from typing import Optional, Sequence, Union

from ddlab.base.paths import REPO_ROOT

# An absolute path in a command line: a "/" that starts no URL's "//" and is not inside a word
# or a relative path; it ends at a space, a quote or a separator (":" of a path list included).
_ABS_PATH = re.compile(r"(?<![\w.~$/-])/(?!/)[^\s'\"=,;:)(\]\[]*")


def _under(path: str, root: Optional[str]) -> Optional[str]:
    """``path`` relative to ``root`` ("" for the root itself), None when it is not under it."""
    if not root or not os.path.isabs(root):
        return None
    root = os.path.normpath(root)
    path = os.path.normpath(path)
    if path == root:
        return ""
    if path.startswith(root.rstrip("/") + "/"):
        return path[len(root.rstrip("/")) + 1:]
    return None


def portable_path(path: str, out: Optional[str] = None) -> str:
    """One absolute path of a command as it reads on any machine: under the repository, relative
    to it ("source_code/train/fmnist_torch.py", "." for the root); under ``out`` (default
    ``$OUT``, the folder a recording script writes to), "$OUT/..."; an executable in a ``bin``
    folder, its name ("python3", "horovodrun"); under the temporary folder or the home folder,
    "$TMPDIR/..." or "~/...". Any other path (e.g. under /usr) is kept."""
    out = os.environ.get("OUT") if out is None else out
    for root, name in ((REPO_ROOT, None), (out, "$OUT")):
        rest = _under(path, root)
        if rest is not None:
            return (rest or ".") if name is None else (f"{name}/{rest}" if rest else name)
    if os.path.basename(os.path.dirname(path)) == "bin":
        return os.path.basename(path)
    for root, name in ((tempfile.gettempdir(), "$TMPDIR"), (os.path.expanduser("~"), "~")):
        rest = _under(path, root)
        if rest is not None and root != "/":
            return f"{name}/{rest}" if rest else name
    return path


def portable_command(command: Union[str, Sequence[str], None], out: Optional[str] = None) -> Optional[str]:
    """``command`` (a string or an argument list) with every absolute path made
    :func:`portable_path`; the rest of the text is kept as it is."""
    if command is None:
        return None
    if not isinstance(command, str):
        command = shlex.join(str(c) for c in command)
    return _ABS_PATH.sub(lambda m: portable_path(m.group(), out), command)


def hardware_label(inventory, given: Optional[str] = None) -> str:
    """The machine's name in a provenance: its hardware, :func:`ddlab.system.machine_name.machine_label`
    of ``inventory`` ("2x NVIDIA H200"). ``given`` (a caller's label or $DDLAB_MACHINE) is kept
    only when it names the same GPUs and adds to them, e.g. the links "2x NVIDIA H200, NV18" that
    ``ddlab doctor --label`` reads once for a whole recording; any other label (a host name, how
    the machine was obtained) gives way to the hardware."""
    from ddlab.system.machine_name import machine_label
    base = machine_label(inventory)
    if given and (given == base or given.startswith(base + ",")):
        return given
    return base


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
    """Describe this machine and run. The machine is named by its hardware (:func:`hardware_label`
    of this machine's GPUs, e.g. "2x NVIDIA H200"; ``machine`` or $DDLAB_MACHINE may add the GPU
    links, "2x NVIDIA H200, NV18"); the command is :func:`portable_command`. No host name."""
    from ddlab.system import hardware
    inv = inventory or hardware.inventory(horovod_check=False)
    names = sorted({g.name for g in inv.gpus})
    prov = {
        "machine": hardware_label(inv, machine or os.environ.get("DDLAB_MACHINE")),
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
        "command": portable_command(command),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "ddlab_commit": _git_commit(),
        "nccl_env": {k: v for k, v in os.environ.items() if k.startswith("NCCL_")},
    }
    # On a machine of more than two GPUs a run often uses some of them: which, as CUDA numbered them.
    if os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
        prov["cuda_visible_devices"] = os.environ["CUDA_VISIBLE_DEVICES"]
    return prov


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


# What two measurements must share to be joined into one result or compared as the same machine's.
SAME_MACHINE = ("gpu_model", "gpu_count", "driver", "cuda_runtime", "nccl", "torch")


def differences(there: Optional[dict], here: Optional[dict], keys: Sequence[str] = SAME_MACHINE) -> list:
    """One phrase per key of ``keys`` whose value differs between two provenances, e.g.
    "gpu_model 'NVIDIA H200' there, 'NVIDIA H100 80GB HBM3' here"; empty when they agree."""
    there, here = there or {}, here or {}
    return [f"{k} {there.get(k)!r} there, {here.get(k)!r} here" for k in keys if there.get(k) != here.get(k)]


def machine_of(prov: Optional[dict]) -> str:
    """The machine a recording names in its provenance (``2x NVIDIA H200, NV18``), else its GPU
    count and model (``2x NVIDIA H200``)."""
    prov = prov or {}
    return prov.get("machine") or f"{prov.get('gpu_count', '?')}x {prov.get('gpu_model', '?')}"


def label(prov: dict) -> str:
    """The machine and date for a caption: '2x NVIDIA H200, 2026-11-22'. The machine is named
    from the recorded hardware fields (gpu_count, gpu_model), so every caption has one form
    whatever a record's ``machine`` field adds."""
    from ddlab.system.machine_name import machine_label
    return f"{machine_label(prov)}, {str(prov.get('date', ''))[:10]}"


def caption(prov: Optional[dict], live: bool = False, source: Optional[str] = None, with_versions: bool = True) -> str:
    """Where a figure or table comes from, the one line the course labels it with everywhere:
    "measured now on ...", "recorded on ... (driver ..., CUDA ..., NCCL ..., torch ...)" (:func:`versions`:
    "not recorded" for a version the recording lacks), "not recorded yet" (``source="missing"``), or,
    for figures not measured, what they are instead. ``source`` ("live", "recorded",
    "missing") is a result's own word for it and overrides ``live``. ``with_versions=False`` leaves the
    versions out (a plot beside another, whose table gives them in full)."""
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
    return "recorded on " + where + (f" ({versions(prov)})" if prov and with_versions else "")


# What a recorded result's caption says it ran on, in this order; "not recorded" where a field is missing.
VERSION_FIELDS = (("driver", ("driver",)), ("CUDA", ("cuda_runtime", "cuda_driver")), ("NCCL", ("nccl",)),
                  ("torch", ("torch",)))


def versions(prov: dict) -> str:
    """'driver 580.159.04, CUDA 13.0, NCCL 2.28.9, torch 2.11.0' from a provenance: the software a
    recorded result ran on, each field "not recorded" where the recording lacks it."""
    parts = []
    for name, keys in VERSION_FIELDS:
        value = next((prov.get(k) for k in keys if prov.get(k)), None)
        parts.append(f"{name} {value}" if value else f"{name} not recorded")
    return ", ".join(parts)
