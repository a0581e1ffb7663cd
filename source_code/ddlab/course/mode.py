"""Live or recorded: the one policy every notebook part follows.

Given what this machine has (:class:`Machine`: GPUs, the framework and launcher, ``nvcc``)
and what a part needs (:class:`Needs`), :func:`decide` says whether it runs live; and
:func:`live_or_recorded` runs it or loads what was recorded on the course's GPU machine, and
says which in ONE line: "measured now on 2x NVIDIA H200, NV18", "recorded on 2x NVIDIA H200,
NV18, 2026-11-22" or "not recorded yet". It covers the topology (``nvidia-smi topo -m``), the
NCCL logs, our CUDA p2p test, the all-reduce sweeps, the training experiments and the
convergence sweep. Recorded data lives under ``source_code/reference/`` with its provenance.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from ddlab.base.paths import REFERENCE_DIR

# The recording of the course's GPU machine each part loads when it cannot run live.
RECORDED = "h200x2"
NCCL_LOG_DIR = os.path.join(REFERENCE_DIR, "nccl_logs")
PARTS = ("topology", "nccl-logs", "p2p", "allreduce", "scaling", "nccl-paths", "perf-options", "convergence")


@dataclass(frozen=True)
class Needs:
    """What a part needs to run live: GPUs, and optionally a framework under a launcher, nvcc."""
    gpus: int = 0
    framework: Optional[str] = None
    launcher: Optional[str] = None
    nvcc: bool = False


def _software(framework: str, launcher: str) -> tuple:
    from ddlab.training import runs
    return runs.availability(framework, launcher)


@dataclass(frozen=True)
class Machine:
    """What this machine has. :meth:`detect` asks the machine; tests build one by hand.
    ``software(framework, launcher)`` -> (ok, why), as :func:`ddlab.training.runs.availability`."""
    gpus: int
    label: str = "CPU only"
    nvcc: bool = False
    software: Callable[[str, str], tuple] = field(default=_software, compare=False)

    @classmethod
    def detect(cls) -> "Machine":
        from ddlab.system import hardware
        from ddlab.measure import p2p
        from ddlab.training import runs
        n = runs.gpu_count("torch") if runs._has_module("torch") else \
            hardware.inventory(software=False, dataset=False).gpu_count
        label = hardware.this_machine()[0] if n else "CPU only"
        return cls(gpus=n, label=label, nvcc=p2p._nvcc() is not None)


@dataclass(frozen=True)
class Decision:
    live: bool
    why: str = ""          # when not live: what is missing


def decide(needs: Needs, machine: Optional[Machine] = None) -> Decision:
    """Whether ``machine`` (default: this one) can run a part with these needs live."""
    m = machine or Machine.detect()
    gpus = m.gpus
    if needs.framework:
        ok, why = m.software(needs.framework, needs.launcher or "none")
        if not ok:
            return Decision(False, why)
    if gpus < needs.gpus:
        who = needs.framework or "this machine"
        return Decision(False, f"it needs {needs.gpus} GPU(s) and {who} sees {gpus}")
    if needs.nvcc and not m.nvcc:
        return Decision(False, "it needs nvcc (the CUDA compiler) to build the p2p test")
    return Decision(True)


@dataclass
class Shown:
    """What a notebook part shows: the ``value`` (a result), whether it ran ``live``, and
    ``line``, the one line that says where it comes from."""
    value: Any
    live: bool
    line: str

    def __str__(self) -> str:
        return self.line


def measured_line(machine: Machine) -> str:
    return f"measured now on {machine.label}"


def recorded_line(provenance: dict) -> str:
    from ddlab.system import provenance as prov
    return prov.caption(provenance)


# ----------------------------------------------------------------------------- each part
def recorded_nccl_logs(name: str = RECORDED) -> dict:
    """{path: NcclLog} recorded on the course's GPU machine, and their provenance."""
    from ddlab.system import nccl_log
    with open(os.path.join(NCCL_LOG_DIR, f"{name}.json")) as f:
        meta = json.load(f)
    logs = {path: nccl_log.parse_file(os.path.join(NCCL_LOG_DIR, fname)) for path, fname in meta["logs"].items()}
    return {"logs": logs, "provenance": meta["provenance"]}


def _topology(live: bool, machine: Machine):
    from ddlab.system import topology
    if live:
        return topology.Topology.from_system(), None
    t = topology.recorded(RECORDED)
    return t, t.provenance


def _nccl_logs(live: bool, machine: Machine):
    from ddlab.system import nccl, nccl_log
    if live:
        return {p: nccl_log.parse(nccl_log.capture_allreduce_log(env=nccl.get(p).environment()))
                for p in nccl.COMPARED}, None
    rec = recorded_nccl_logs()
    return rec["logs"], rec["provenance"]


def _p2p(live: bool, machine: Machine):
    from ddlab.measure import p2p
    if live:
        return p2p.run(), None
    r = p2p.load_recorded(RECORDED)
    return r, r.provenance


def _allreduce(live: bool, machine: Machine):
    from ddlab.measure import collectives
    if live:
        return collectives.compare_paths(), None
    sweeps = collectives.load_recorded(RECORDED)
    return sweeps, next(iter(sweeps.values())).provenance


def _convergence(live: bool, machine: Machine):
    from ddlab.course import convergence_sweep
    if live:
        return convergence_sweep.run_sweep(convergence_sweep.points_for("cuda", live=True), "cuda"), None
    r = convergence_sweep.load_recorded()
    return r, r.provenance


_PARTS = {"topology": (Needs(gpus=1), _topology),
          "nccl-logs": (Needs(gpus=2, framework="torch", launcher="ddp"), _nccl_logs),
          "p2p": (Needs(gpus=2, nvcc=True), _p2p),
          "allreduce": (Needs(gpus=2, framework="torch", launcher="ddp"), _allreduce),
          "convergence": (Needs(gpus=2, framework="torch", launcher="ddp"), _convergence)}


def live_or_recorded(part: str, source: str = "auto", machine: Optional[Machine] = None, **kwargs) -> Shown:
    """Run notebook part ``part`` live when this machine can, else load its recording.

    ``part``: "topology", "nccl-logs", "p2p", "allreduce", or a training experiment
    ("scaling", "nccl-paths", "perf-options": ``kwargs`` go to
    :func:`ddlab.training.experiments.live_or_recorded`). ``source``: "auto", "live" or "recorded".
    Returns a :class:`Shown` whose ``line`` says which it did."""
    if part not in PARTS:
        raise ValueError(f"unknown part {part!r}; choose one of {', '.join(PARTS)}")
    if source not in ("auto", "live", "recorded"):
        raise ValueError(f"unknown source {source!r}; choose one of auto, live, recorded")
    m = machine or Machine.detect()
    if part not in _PARTS:
        from ddlab.training import experiments
        res = experiments.live_or_recorded(part, source=source, machine=m, **kwargs)
        return Shown(res, res.source == "live", res.where())
    if kwargs:
        raise ValueError(f"{part} takes no options ({', '.join(kwargs)} given)")
    needs, load = _PARTS[part]
    decision = decide(needs, m) if source != "recorded" else Decision(False, "as asked")
    if source == "live" and not decision.live:
        raise RuntimeError(f"cannot run {part} live here: {decision.why}")
    try:
        value, prov = load(decision.live, m)
    except FileNotFoundError:
        return Shown(None, False, "not recorded yet")
    return Shown(value, decision.live, measured_line(m) if decision.live else recorded_line(prov))
