"""Live or recorded: the one policy every notebook part, experiment and report step follows.

Given what this machine has (:class:`Machine`: GPUs, the frameworks and launchers, ``nvcc``)
and what a part needs (:class:`Needs`), :func:`decide` says whether it runs live, and if not,
why. The policy imports no experiment: an experiment (or a notebook part) asks it, then runs or
loads its recording. :class:`Shown` carries what a part shows with the ONE line that says where
it came from: "measured now on 2x NVIDIA H200, NV18", or the recording's caption.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from ddlab.system import frameworks, hardware, provenance
from ddlab.system.machine_name import this_machine


@dataclass(frozen=True)
class Needs:
    """What a part needs to run live: GPUs, and optionally a framework under a launcher, nvcc."""
    gpus: int = 0
    framework: Optional[str] = None
    launcher: Optional[str] = None
    nvcc: bool = False


@dataclass(frozen=True)
class Machine:
    """What this machine has. :meth:`detect` asks the machine; tests build one by hand.
    ``software(framework, launcher)`` -> (ok, why), as :func:`ddlab.system.frameworks.availability`."""
    gpus: int
    label: str = "CPU only"
    nvcc: bool = False
    software: Callable[[str, str], tuple] = field(default=frameworks.availability, compare=False)
    # framework -> the GPUs it can use, for a framework other than PyTorch (None: ``gpus``).
    framework_gpus: Optional[Callable[[str], int]] = field(default=None, compare=False)
    counted_by: str = "torch"     # who counted ``gpus``: PyTorch, or nvidia-smi where PyTorch is missing

    @classmethod
    def detect(cls) -> "Machine":
        # The GPUs PyTorch can use (CUDA_VISIBLE_DEVICES applied); without PyTorch, NVML's count.
        has_torch = frameworks.has_module("torch")
        n = frameworks.gpu_count("torch") if has_torch else hardware.inventory(software=False).gpu_count
        label = this_machine()[0] if n else "CPU only"
        return cls(gpus=n, label=label, nvcc=frameworks.nvcc_path() is not None,
                   framework_gpus=frameworks.gpu_count, counted_by="torch" if has_torch else "nvidia-smi")

    def gpus_for(self, framework: Optional[str]) -> int:
        """The GPUs ``framework`` can use here: ``gpus`` (PyTorch's count), or TensorFlow's own
        count for "keras" where the machine knows it (a CPU-only TensorFlow sees none)."""
        if framework in (None, "torch") or self.framework_gpus is None:
            return self.gpus
        return self.framework_gpus(framework)


@dataclass(frozen=True)
class Decision:
    live: bool
    why: str = ""          # when not live: what is missing


def decide(needs: Needs, machine: Optional[Machine] = None) -> Decision:
    """Whether ``machine`` (default: this one) can run a part with these needs live."""
    m = machine or Machine.detect()
    if needs.framework:
        ok, why = m.software(needs.framework, needs.launcher or "none")
        if not ok:
            return Decision(False, why)
    seen = m.gpus_for(needs.framework) if needs.gpus else m.gpus
    if seen < needs.gpus:
        # every part decides from the GPUs PyTorch can use (CUDA_VISIBLE_DEVICES applied; none for a CPU-only build)
        who = {"keras": "TensorFlow"}.get(needs.framework, needs.framework or m.counted_by)
        why = f"it needs {needs.gpus} GPU(s) and {who} sees {seen}"
        if seen < m.gpus:
            why += (f" of the {m.gpus} PyTorch sees: this TensorFlow has no GPU support (tensorflow-cpu, or no "
                    f"CUDA libraries: `pip install tensorflow[and-cuda]` adds them)")
        return Decision(False, why)
    if needs.nvcc and not m.nvcc:
        return Decision(False, "it needs nvcc (the CUDA compiler) to build the p2p test")
    return Decision(True)


@dataclass
class Shown:
    """What a notebook part shows: the ``value`` (a result), whether it ran ``live``, and
    ``line``, the one line that says where it comes from (and, recorded, why not live)."""
    value: Any
    live: bool
    line: str
    why: str = ""          # when not live: what is missing here (the policy's Decision.why)

    def __str__(self) -> str:
        return self.line


def measured_line(machine: Machine) -> str:
    return f"measured now on {machine.label}"


def recorded_line(prov: dict) -> str:
    return provenance.caption(prov)
