"""What every step of ``ddlab report`` is given and may raise: the :class:`Context` (the output
folder, the machine, the plan, the steps done so far), :class:`Step` and :class:`Skip`. The steps
themselves are :mod:`ddlab.report.steps` and :mod:`ddlab.report.one_gpu_steps`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Optional

from ddlab.report.plan import Plan
from ddlab.system import policy


def done_data(rec: Optional[dict]) -> Optional[dict]:
    """A step record's data when the step finished, else None (skipped, failed, absent)."""
    return rec.get("data") if rec and rec.get("status") == "done" else None


class Skip(Exception):
    """Raised by a step this machine cannot run; its message says why."""


@dataclass
class Step:
    name: str
    title: str
    run: Callable[["Context"], dict]      # returns the step's data (JSON-able); raise Skip to skip


@dataclass
class Context:
    out: str
    machine: policy.Machine
    plan: Plan
    topo_file: Optional[str] = None
    done: dict = field(default_factory=dict)      # step name -> its record (as written)
    _inventory: object = None

    def inventory(self):
        if self._inventory is None:
            from ddlab.system import hardware
            self._inventory = hardware.inventory(horovod_check=False)
        return self._inventory

    def provenance(self, command: str) -> dict:
        from ddlab.system import provenance
        return provenance.collect(command, inventory=self.inventory())

    def data(self, step: str) -> Optional[dict]:
        return done_data(self.done.get(step))

    def save_plot(self, fig, name: str) -> str:
        import matplotlib.pyplot as plt
        from ddlab.base import files
        files.write_figure(os.path.join(self.out, name), fig, dpi=110, bbox_inches="tight")
        plt.close(fig)
        return name
