"""How the GPUs of a machine are connected: :class:`Topology`, the model of one
``nvidia-smi topo -m``, and the ways to get one.

Quick use::

    from ddlab.system import topology
    topo = topology.Topology.from_system()        # this machine (raises NoGPUError without one)
    topo = topology.recorded("dgx1-v100")          # a recorded machine, see recorded_names()
    topo = topology.parse_topo_matrix(text)        # a pasted `nvidia-smi topo -m`
    topo.link(0, 1).label, topo.gpus, topo.nics, topo.numa_groups(), topo.matrix_table()

The text is read by :mod:`ddlab.system.topology_parse` (every shape people paste; the link model
:class:`Link` and its ranks). Built on this model, each taking a Topology: pairs ranked and the
best k GPUs for a ring in :mod:`ddlab.system.topology_ranking`, the summary in words and the
``ddlab topo`` command in :mod:`ddlab.system.topology_report`, the drawing in
:mod:`ddlab.views.topology_drawing`.
"""
from __future__ import annotations

import dataclasses
import itertools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Optional, Union

from ddlab.base.tables import Table
from ddlab.base.errors import CourseError
# parse_topo_matrix raises and warns with these, and Topology.link gives Links: importable from here too.
from ddlab.system.topology_parse import (GPU_COLUMN, Link, TopologyParseError, TopologyWarning,  # noqa: F401
                                         has_header, read_matrix)

REFERENCE_KIND = "topologies"  # source_code/reference/topologies/<name>.json


class NoGPUError(CourseError, RuntimeError):
    """This machine has no usable NVIDIA GPU or no ``nvidia-smi``."""


def parse_topo_matrix(text: str) -> "Topology":
    """Parse the text of ``nvidia-smi topo -m`` into a :class:`Topology`
    (:func:`ddlab.system.topology_parse.read_matrix` reads it: it says what raises
    :class:`TopologyParseError` and what gives a :class:`TopologyWarning`)."""
    m = read_matrix(text)
    return Topology(text=text, devices=m.devices, links=m.links, extras=m.extras, nic_legend=m.nic_legend,
                    affinity_columns=m.affinity_columns, warnings=m.warnings)


@dataclass
class Topology:
    """A parsed ``nvidia-smi topo -m``. Build it with :func:`parse_topo_matrix`,
    :meth:`from_system`, :meth:`from_file`, :meth:`from_dict` or :func:`recorded`."""
    text: str
    devices: list
    links: dict
    extras: dict = field(default_factory=dict)
    nic_legend: dict = field(default_factory=dict)
    affinity_columns: list = field(default_factory=list)
    name: Optional[str] = None
    description: Optional[str] = None
    provenance: Optional[dict] = None
    gpu_names: dict = field(default_factory=dict)
    warnings: list = field(default_factory=list)  # what the text lacked (see TopologyWarning)

    # -- what is in it
    @property
    def gpus(self) -> list:
        return sorted(int(GPU_COLUMN.fullmatch(d).group(1)) for d in self.devices if GPU_COLUMN.fullmatch(d))

    @property
    def nic_columns(self) -> list:
        """NIC columns as the matrix prints them (``NIC0`` or ``mlx5_0``)."""
        return [d for d in self.devices if not GPU_COLUMN.fullmatch(d)]

    @property
    def nics(self) -> list:
        """NIC names: the legend's device name where a ``NIC Legend`` maps ``NICn``."""
        return [self.nic_legend.get(c, c) for c in self.nic_columns]

    def _extra(self, key: str) -> dict:
        return {g: self.extras.get(f"GPU{g}", {}).get(key) for g in self.gpus}

    @property
    def cpu_affinity(self) -> dict:
        return self._extra("cpu_affinity")

    @property
    def numa_affinity(self) -> dict:
        return self._extra("numa_affinity")

    @property
    def gpu_numa_id(self) -> dict:
        return self._extra("gpu_numa_id")

    def _gpu_col(self, i: int) -> str:
        col = f"GPU{int(i)}"
        if col not in self.devices:
            raise KeyError(f"no GPU {i} in this topology (GPUs: {self.gpus})")
        return col

    def _nic_col(self, nic: Union[str, int]) -> str:
        cols = self.nic_columns
        if isinstance(nic, int) and not isinstance(nic, bool):
            if not 0 <= nic < len(cols):
                raise KeyError(f"no NIC number {nic}; this topology has {len(cols)} NICs: {self.nics}")
            return cols[nic]
        if nic in cols:
            return nic
        for c in cols:
            if self.nic_legend.get(c) == nic:
                return c
        raise KeyError(f"no NIC {nic!r} in this topology (NICs: {', '.join(self.nics) or 'none'})")

    def link(self, i: int, j: int) -> Link:
        """The link between GPU ``i`` and GPU ``j``."""
        a, b = self._gpu_col(i), self._gpu_col(j)
        if a == b:
            raise ValueError(f"GPU{i} and GPU{j} are the same GPU; a link joins two different GPUs")
        return self.links[(a, b)]

    def nic_link(self, gpu: int, nic: Union[str, int]) -> Link:
        """The link between GPU ``gpu`` and a NIC (its name, ``NICn`` or its position in ``nics``)."""
        return self.links[(self._gpu_col(gpu), self._nic_col(nic))]

    def only(self, gpus) -> "Topology":
        """This topology with only the GPUs ``gpus`` (their numbers kept) and every NIC, e.g. the GPUs
        ``CUDA_VISIBLE_DEVICES`` names on a larger machine; ``text`` stays the whole matrix, and
        :meth:`to_dict` lists the GPUs kept, which :meth:`from_dict` keeps again."""
        keep = {f"GPU{int(g)}" for g in gpus}
        unknown = keep - set(self.devices)
        if unknown:
            raise ValueError(f"no {', '.join(sorted(unknown))} in this topology (GPUs: {self.gpus})")
        gpu_columns = {f"GPU{g}" for g in self.gpus}
        devices = [d for d in self.devices if d in keep or d not in gpu_columns]
        return dataclasses.replace(self, devices=devices,
                                   links={k: v for k, v in self.links.items() if k[0] in devices and k[1] in devices},
                                   extras={k: v for k, v in self.extras.items() if k in devices},
                                   gpu_names={g: n for g, n in self.gpu_names.items() if f"GPU{g}" in keep},
                                   warnings=list(self.warnings))

    def pairs(self) -> list:
        return list(itertools.combinations(self.gpus, 2))

    def numa_groups(self) -> list:
        """GPUs grouped by NUMA node (NUMA Affinity, else identical CPU Affinity): a list of
        (label, [gpu indices]); one group with label None when the matrix does not say."""
        groups: dict = {}
        for g in self.gpus:
            numa, cpu = self.numa_affinity[g], self.cpu_affinity[g]
            if numa is not None:
                key = f"NUMA {numa}" + (f" (CPUs {cpu})" if cpu else "")
            elif cpu is not None:
                key = f"CPUs {cpu}"
            else:
                key = None
            groups.setdefault(key, []).append(g)
        return list(groups.items())

    # -- output
    def matrix_table(self) -> Table:
        """The matrix as a table with aligned columns (NIC names from the legend)."""
        names = {c: self.nic_legend.get(c, c) for c in self.devices}
        cols = [names[c] for c in self.devices]
        has = {k: any(v is not None for v in self._extra(k).values()) for k in ("cpu_affinity", "numa_affinity",
                                                                               "gpu_numa_id")}
        extra_titles = [("cpu_affinity", "CPU Affinity"), ("numa_affinity", "NUMA Affinity"),
                        ("gpu_numa_id", "GPU NUMA ID")]
        extra_titles = [(k, t) for k, t in extra_titles if has[k]]
        rows = [[""] + cols + [t for _, t in extra_titles]]
        for r in self.devices:
            row = [names[r]] + ["X" if r == c else self.links[(r, c)].label if (r, c) in self.links else "?"
                                for c in self.devices]  # "?": a NIC-NIC cell of a cut-off paste
            ex = self.extras.get(r, {})
            row += [ex.get(k) or ("-" if GPU_COLUMN.fullmatch(r) else "") for k, _ in extra_titles]
            rows.append(row)
        return Table([(f"c{i}", "text", head) for i, head in enumerate(rows[0])], rows[1:], missing="", compact=True)

    def to_dict(self) -> dict:
        """Everything needed to rebuild it (the raw text) plus the parsed facts for readers."""
        gp = self.gpus
        return {
            "name": self.name,
            "description": self.description,
            "provenance": self.provenance,
            "text": self.text,
            "gpus": gp,
            "nics": self.nics,
            "gpu_names": {str(k): v for k, v in self.gpu_names.items()},
            "links": {f"{i}-{j}": self.link(i, j).label for i, j in self.pairs()},
            "nic_links": {str(g): {name: self.nic_link(g, col).label for col, name in zip(self.nic_columns, self.nics)}
                          for g in gp} if self.nic_columns else {},
            "cpu_affinity": {str(g): v for g, v in self.cpu_affinity.items()},
            "numa_affinity": {str(g): v for g, v in self.numa_affinity.items()},
            "gpu_numa_id": {str(g): v for g, v in self.gpu_numa_id.items()},
        }

    @classmethod
    def from_dict(cls, d: dict) -> "Topology":
        """Rebuild from :meth:`to_dict` output (or a recorded JSON): the raw ``text`` is parsed
        again, and the parsed links are checked against the stored ones when present."""
        if not isinstance(d, dict) or not isinstance(d.get("text"), str):
            raise ValueError("a topology record needs the raw `nvidia-smi topo -m` text under 'text'")
        topo = parse_topo_matrix(d["text"])
        topo.name, topo.description, topo.provenance = d.get("name"), d.get("description"), d.get("provenance")
        topo.gpu_names = {int(k): v for k, v in (d.get("gpu_names") or {}).items()}
        if d.get("gpus") is not None and sorted(d["gpus"]) != topo.gpus:    # some GPUs of the matrix (Topology.only)
            topo = topo.only(d["gpus"])
        stored = d.get("links") or {}
        for key, label in stored.items():
            i, j = (int(x) for x in key.split("-"))
            if topo.link(i, j).label != label:
                raise ValueError(f"topology record {d.get('name')!r}: link {key} is stored as {label!r} but its "
                                 f"text says {topo.link(i, j).label!r}")
        return topo

    @classmethod
    def from_file(cls, path: str) -> "Topology":
        with open(path, encoding="utf-8", errors="replace") as f:
            topo = parse_topo_matrix(f.read())
        topo.name = os.path.splitext(os.path.basename(path))[0]
        return topo

    @classmethod
    def from_system(cls, timeout: float = 30.0) -> "Topology":
        """This machine's topology from ``nvidia-smi topo -m``. Raises :class:`NoGPUError`
        with a plain message when there is no ``nvidia-smi``, no driver or no GPU."""
        exe = shutil.which("nvidia-smi")
        hint = (" To explore without a GPU, load a recorded machine: ddlab.system.topology.recorded(NAME) with NAME one "
                f"of {', '.join(recorded_names()) or '(none recorded)'}, or parse a saved file with "
                "Topology.from_file(PATH).")
        if not exe:
            raise NoGPUError("nvidia-smi was not found, so this machine has no NVIDIA driver (and no usable NVIDIA "
                             "GPU)." + hint)
        try:
            out = subprocess.run([exe, "topo", "-m"], capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise NoGPUError(f"`nvidia-smi topo -m` did not answer within {timeout:.0f} s (a hung driver or a "
                             f"GPU in a bad state)." + hint) from None
        except OSError as exc:
            raise NoGPUError(f"`nvidia-smi topo -m` could not be started ({exc})." + hint) from None
        said = (out.stderr or out.stdout or "").strip().splitlines()
        if out.returncode != 0:
            raise NoGPUError(f"`nvidia-smi topo -m` failed (exit code {out.returncode}): "
                             f"{said[0] if said else 'no message'}." + hint)
        if not has_header(out.stdout):
            raise NoGPUError("`nvidia-smi topo -m` lists no GPU on this machine"
                             + (f" ({said[0]})" if said else "") + "." + hint)
        topo = parse_topo_matrix(out.stdout)
        topo.name = "this machine"
        topo.gpu_names = _gpu_names()
        return topo


def _gpu_names() -> dict:
    """GPU model names by index from ddlab.system.hardware (NVML, else nvidia-smi); empty when unknown.
    Only a label for drawings and summaries, so a failure here must not stop the topology."""
    try:
        from ddlab.system import hardware
        inv = hardware.inventory(software=False)
    except Exception:  # noqa: BLE001 - decoration only; the matrix itself is already read
        return {}
    return {g.index: g.name for g in inv.gpus}


# ----------------------------------------------------------------------------- recorded machines
def recorded_names() -> list:
    """Names of the recorded machines under source_code/reference/topologies/."""
    from ddlab.base import reference
    return reference.names(REFERENCE_KIND)


def recorded(name: str) -> Topology:
    """A recorded machine by name (see :func:`recorded_names`), with its provenance."""
    from ddlab.base import reference
    obj = reference.load(REFERENCE_KIND, name)
    obj.setdefault("name", name)
    return Topology.from_dict(obj)


def save_recorded(name: str, topo: Topology, provenance: dict, description: Optional[str] = None) -> str:
    """Store ``topo`` (its raw text and parsed facts) as reference/topologies/<name>.json."""
    from ddlab.base import reference
    if not re.fullmatch(r"[A-Za-z0-9][\w.-]*", name):
        raise ValueError(f"recorded names are letters, digits, '-', '_' and '.', got {name!r}")
    topo.name, topo.provenance = name, provenance
    if description:
        topo.description = description
    return reference.save(REFERENCE_KIND, name, topo.to_dict())

