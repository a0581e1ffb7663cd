"""GPU peer-to-peer bandwidth and latency: :class:`P2PResult`, the matrices of one run of the
course's CUDA test (or of NVIDIA's p2pBandwidthLatencyTest), and their text form.

The measuring is done by a small CUDA program of ours,
``source_code/p2p_bandwidth_latency/p2p_bandwidth_latency.cu`` (see its README). Around the
result, each module taking or giving a P2PResult:

* :mod:`ddlab.measure.p2p_run` builds the program (:func:`~ddlab.measure.p2p_run.build`) and
  runs it (:func:`~ddlab.measure.p2p_run.run`), or runs NVIDIA's sample when it is on PATH;
* :mod:`ddlab.measure.p2p_parse` reads the text output of ours and of NVIDIA's
  ``p2pBandwidthLatencyTest`` (current and older versions), which many users already have;
* :mod:`ddlab.measure.p2p_diagnosis` reads the numbers: :func:`~ddlab.measure.p2p_diagnosis.summary`
  says in one paragraph what the matrices show, :func:`~ddlab.measure.p2p_diagnosis.diagnose` finds
  slow GPUs, asymmetric pairs and the best GPUs for a ring, and
  :func:`~ddlab.measure.p2p_diagnosis.link_peaks` gives each pair's link peak from
  `nvidia-smi topo -m` labels; it also saves a live run (:func:`~ddlab.measure.p2p_diagnosis.record`)
  and loads one recorded on a course machine (:func:`~ddlab.measure.p2p_diagnosis.load_recorded`);
* :mod:`ddlab.measure.p2p_cli` is ``ddlab p2p``;
* :func:`ddlab.views.p2p_plots.plot_heatmaps` draws the matrices.

Matrix keys (rows: source GPU, columns: destination GPU; GB/s or microseconds)::

    uni_p2p_off  uni_p2p_on  bi_p2p_off  bi_p2p_on
    lat_gpu_p2p_off  lat_gpu_p2p_on  lat_cpu_p2p_off  lat_cpu_p2p_on

"P2P off" means peer access disabled: the driver stages the copy through host memory.
A table that is absent from the text is absent from ``P2PResult.matrices``; a cell that
was not measured is NaN.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ddlab.base.tables import Table

STANDARD_KEYS = ("uni_p2p_off", "uni_p2p_on", "bi_p2p_off", "bi_p2p_on",
                 "lat_gpu_p2p_off", "lat_gpu_p2p_on", "lat_cpu_p2p_off", "lat_cpu_p2p_on")

# Which variant of a table stands for the standard key when a run has several (copy
# engine first: it is what NVIDIA's sample and most applications use; writes before reads).
_PREFERENCE = (":ce:write", ":ce", ":ce:read", ":sm:write", ":sm", ":sm:read")

TITLES = {
    "uni_p2p_off": "Unidirectional, P2P off (GB/s)",
    "uni_p2p_on": "Unidirectional, P2P on (GB/s)",
    "bi_p2p_off": "Bidirectional, P2P off (GB/s)",
    "bi_p2p_on": "Bidirectional, P2P on (GB/s)",
    "lat_gpu_p2p_off": "Latency GPU-timed, P2P off (µs)",
    "lat_gpu_p2p_on": "Latency GPU-timed, P2P on (µs)",
    "lat_cpu_p2p_off": "Latency CPU-initiated, P2P off (µs)",
    "lat_cpu_p2p_on": "Latency CPU-initiated, P2P on (µs)",
}


# =========================================================================== the result
@dataclass
class P2PResult:
    n: int
    labels: list                                   # CUDA device ordinals, in matrix order
    variants: dict                                 # every table: "uni_p2p_on:ce:write" -> n x n
    connectivity: Optional[np.ndarray] = None      # n x n bool: can access peer (diagonal True)
    devices: list = field(default_factory=list)    # [{"index", "name", "pci_bus_id", ...}]
    source: str = "unknown"                        # "ddlab", "nvidia-sample" or "unknown"
    synthetic: bool = False                        # --format-demo output: NOT a measurement
    versions: dict = field(default_factory=dict)
    parameters: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    validation: Optional[str] = None
    provenance: Optional[dict] = None
    text: Optional[str] = field(default=None, repr=False)
    matrices: dict = field(init=False)             # standard key -> n x n (see module doc)
    chosen: dict = field(init=False)               # standard key -> the variant it came from

    def __post_init__(self):
        from ddlab.system.hardware import normalise_bus_id
        for d in self.devices:
            if d.get("pci_bus_id"):
                d["pci_bus_id"] = normalise_bus_id(str(d["pci_bus_id"]))
        self.variants = {k: _square(v, self.n, k) for k, v in self.variants.items()}
        self.matrices, self.chosen = _standardise(self.variants)
        if self.connectivity is not None:
            self.connectivity = np.asarray(self.connectivity, dtype=bool)
            if self.connectivity.shape != (self.n, self.n):
                raise ValueError(f"connectivity is {self.connectivity.shape}, expected ({self.n}, {self.n})")

    # ---------------------------------------------------------------- conversion
    def to_dict(self) -> dict:
        """JSON-ready (NaN becomes null)."""
        return {
            "format": "ddlab-p2p/1", "source": self.source, "synthetic": self.synthetic,
            "n": self.n, "labels": list(self.labels), "devices": self.devices,
            "connectivity": None if self.connectivity is None else self.connectivity.tolist(),
            "matrices": {k: _jsonable(v) for k, v in self.matrices.items()},
            "chosen": dict(self.chosen),
            "variants": {k: _jsonable(v) for k, v in self.variants.items()},
            "versions": self.versions, "parameters": self.parameters, "notes": self.notes,
            "validation": self.validation, "provenance": self.provenance,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "P2PResult":
        """Inverse of :meth:`to_dict`; also reads the JSON the program writes with --json."""
        try:
            n = int(d["n"])
            labels = list(d.get("labels") or range(n))
            variants = d.get("variants") or d.get("matrices") or {}
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a p2p result dictionary ({exc!r}); expected keys n, labels, variants") from None
        return cls(n=n, labels=labels, variants={k: _from_json(v) for k, v in variants.items()},
                   connectivity=d.get("connectivity"), devices=d.get("devices") or [],
                   source=d.get("source", "unknown"), synthetic=bool(d.get("synthetic", False)),
                   versions=d.get("versions") or {}, parameters=d.get("parameters") or {},
                   notes=d.get("notes") or [], validation=d.get("validation"),
                   provenance=d.get("provenance"), text=d.get("text"))

    def table(self) -> str:
        """Every matrix, as text in our program's format (:func:`ddlab.measure.p2p_parse.parse` reads
        it back)."""
        return format_tables(self)

    def matrix_table(self, key: str = "uni_p2p_on") -> Table:
        """One matrix (a standard key such as ``"uni_p2p_on"`` or a variant such as
        ``"uni_p2p_on:sm:read"``) as a table: rows are source GPUs, columns destinations."""
        m = self.matrices.get(key, self.variants.get(key))
        if m is None:
            have = list(self.matrices) + [k for k in self.variants if k not in self.matrices]
            raise KeyError(f"no matrix {key!r} in this result; it has {', '.join(have)}")
        two = lambda v: f"{v:.2f}"  # noqa: E731  (the program's own precision)
        cols = [("src", "int", "src \\ dst")] + [(f"gpu{g}", two, str(g)) for g in self.labels]
        rows = [[g] + [float(x) if np.isfinite(x) else None for x in row] for g, row in zip(self.labels, m)]
        title = TITLES.get(key, f"{key} (GB/s or us)")
        return Table(cols, rows, title=title, align={f"gpu{g}": "right" for g in self.labels})


def _square(m, n: int, key: str) -> np.ndarray:
    a = np.asarray(m, dtype=float)
    if a.shape != (n, n):
        raise ValueError(f"matrix {key!r} is {a.shape}, expected ({n}, {n})")
    return a


def _standardise(variants: dict) -> tuple:
    matrices, chosen = {}, {}
    for key in STANDARD_KEYS:
        if key in variants:
            matrices[key], chosen[key] = variants[key], key
            continue
        for suffix in _PREFERENCE:
            if key + suffix in variants:
                matrices[key], chosen[key] = variants[key + suffix], key + suffix
                break
    return matrices, chosen


def _jsonable(a: np.ndarray) -> list:
    return [[None if not np.isfinite(x) else float(x) for x in row] for row in np.asarray(a, dtype=float)]


def _from_json(m) -> np.ndarray:
    return np.array([[np.nan if x is None else float(x) for x in row] for row in m], dtype=float)

# =========================================================================== rendering
def _variant_header(key: str) -> tuple:
    """'uni_p2p_on:sm:read' -> ('Unidirectional P2P=Enabled Bandwidth (P2P Reads, SM copy) Matrix (GB/s)', None)
    latency keys -> (header, 'GPU'|'CPU')."""
    base, _, rest = key.partition(":")
    method, _, direction = rest.partition(":")
    on = base.endswith("p2p_on")
    label = ""
    if on and rest:
        parts = []
        if direction:
            parts.append("P2P Writes" if direction == "write" else "P2P Reads")
        if method == "sm":
            parts.append("SM kernel" if base.startswith("lat_") else "SM copy")
        label = f" ({', '.join(parts)})" if parts else ""
    state = "Enabled" if on else "Disabled"
    if base.startswith("uni_"):
        return f"Unidirectional P2P={state} Bandwidth{label} Matrix (GB/s)", None
    if base.startswith("bi_"):
        return f"Bidirectional P2P={state} Bandwidth{label} Matrix (GB/s)", None
    return f"P2P={state} Latency{label} Matrix (us)", ("CPU" if base.startswith("lat_cpu") else "GPU")


def _rows(labels, corner, m) -> list:
    out = ["   " + corner + "".join(f"{g:6d} " for g in labels)]
    for g, row in zip(labels, m):
        out.append(f"{g:6d} " + "".join(f"{x:6.2f} " if np.isfinite(x) else f"{'n/a':>6} " for x in row))
    return out


def _order(key: str) -> tuple:
    """Print order: the sample's block order; within a block copy engine before SM, writes before reads."""
    base, _, rest = key.partition(":")
    group = ("uni_p2p_off", "uni_p2p_on", "bi_p2p_off", "bi_p2p_on", "lat_p2p_off", "lat_p2p_on")
    b = base.replace("lat_gpu_", "lat_").replace("lat_cpu_", "lat_")
    suffix = ":" + rest if rest else ""
    rank = _PREFERENCE.index(suffix) if suffix in _PREFERENCE else len(_PREFERENCE)
    return (group.index(b) if b in group else 99, rank, rest, "cpu" in base)


def format_tables(result: P2PResult) -> str:
    """The result as text in our program's format (:func:`ddlab.measure.p2p_parse.parse` reads it
    back)."""
    lines = ["[ddlab p2p_bandwidth_latency] tables re-printed by ddlab.measure.p2p"
             + (f" from {result.source} output" if result.source != "ddlab" else "")]
    if result.synthetic:
        lines.append("FORMAT DEMO: synthetic numbers from --format-demo, NOT a measurement")
    for d in result.devices:
        bus = str(d.get("pci_bus_id") or "")
        m = re.fullmatch(r"([0-9A-Fa-f]+):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.\d", bus)
        dom, b, dv = (int(x, 16) for x in m.groups()) if m else (0, 0, 0)
        extra = "".join(f", {label}: {d[k]}" + (" MiB" if k == "memory_mib" else "")
                        for k, label in (("compute_capability", "cc"), ("memory_mib", "memory"), ("sm_count", "SMs"))
                        if d.get(k) is not None)
        lines.append(f"Device: {d['index']}, {d.get('name', '?')}, pciBusID: {b:x}, pciDeviceID: {dv:x}, "
                     f"pciDomainID:{dom:x}" + (f", busId: {bus}" if bus else "") + extra)
    if result.connectivity is not None:
        lines.append("P2P Connectivity Matrix")
        lines.append("     D\\D" + "".join(f"{g:6d}" for g in result.labels))
        for g, row in zip(result.labels, result.connectivity):
            lines.append(f"{g:6d}" + "".join(f"{int(x):6d}" for x in row))
    done_headers = set()
    for key in sorted(result.variants, key=_order):
        header, corner = _variant_header(key)
        if header not in done_headers:
            lines.append(header)
            done_headers.add(header)
        elif corner:
            lines.append("")
        lines += _rows(result.labels, corner or "D\\D", result.variants[key])
    if result.validation:
        lines.append(f"Validation: {result.validation}")
    return "\n".join(lines) + "\n"

