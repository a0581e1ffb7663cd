"""GPU peer-to-peer bandwidth and latency: build, run and read the course's CUDA test.

The measuring is done by a small CUDA program of ours,
``source_code/p2p_bandwidth_latency/p2p_bandwidth_latency.cu`` (see its README). This
module

* :func:`build` compiles it with its Makefile (the GPU architecture is picked there);
* :func:`run` runs it (building first if needed) and returns a :class:`P2PResult`;
* :func:`parse` reads its text output, and also the output of NVIDIA's cuda-samples
  ``p2pBandwidthLatencyTest`` (current and older versions), which many users already have;
* :func:`summary` says in one paragraph what the matrices show;
* :func:`plot_heatmaps` draws them, with the share of the link's peak when it is known
  (a number, or per pair from `nvidia-smi topo -m` labels with :func:`link_peaks`);
* :func:`load_recorded` returns a run recorded on one of the course's machines;
* :func:`cli` is ``ddlab p2p``.

Matrix keys (rows: source GPU, columns: destination GPU; GB/s or microseconds)::

    uni_p2p_off  uni_p2p_on  bi_p2p_off  bi_p2p_on
    lat_gpu_p2p_off  lat_gpu_p2p_on  lat_cpu_p2p_off  lat_cpu_p2p_on

"P2P off" means peer access disabled: the driver stages the copy through host memory.
A table that is absent from the text is absent from ``P2PResult.matrices``; a cell that
was not measured is NaN.

Length (about 1,100 lines): building and running our CUDA test, reading two output formats (ours
and NVIDIA's sample), the heatmaps and the matrix diagnosis all work on one P2PResult. The next
split is the reader of NVIDIA's format and the diagnosis, each into its own module.
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from ddlab.base.paths import SOURCE_DIR
from ddlab.base.tables import Table

PROGRAM_DIR = os.path.join(SOURCE_DIR, "p2p_bandwidth_latency")
PROGRAM_NAME = "p2p_bandwidth_latency"

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

EXIT_NO_GPU = 2          # the program's exit codes (see the .cu file)
EXIT_VALIDATION = 3
ASYMMETRY = 0.10         # i->j and j->i differing by more than this are called asymmetric
OUTLIER = 0.80           # a GPU whose pairs average below this share of the others' is an outlier


class P2PError(RuntimeError):
    """Building or running the p2p test failed."""


class P2PBuildError(P2PError):
    """``make`` failed or there is no ``nvcc``."""


class P2PNoGPU(P2PError):
    """No NVIDIA GPU is visible."""


class P2PRunError(P2PError):
    """The program failed, timed out, or its validation caught wrong data."""


class P2PParseError(ValueError):
    """Text that is not (or not entirely) p2p test output."""


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

    def summary(self, link_peak_gbps=None) -> str:
        return summary(self, link_peak_gbps)

    def table(self) -> str:
        """Every matrix, as text in our program's format (:func:`parse` reads it back)."""
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


# =========================================================================== parsing
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_BW_HEADER = re.compile(r"^\s*(Unidirectional|Bidirectional)\s+P2P=(Enabled|Disabled)\s+Bandwidth"
                        r"(?:\s*\(([^)]*)\))?\s+Matrix\s*\(GB/s\)\s*:?\s*$", re.I)
_LAT_HEADER = re.compile(r"^\s*P2P=(Enabled|Disabled)\s+Latency(?:\s*\(([^)]*)\))?\s+Matrix\s*\(us\)\s*:?\s*$", re.I)
_CONN_HEADER = re.compile(r"^\s*P2P Connectivity Matrix\s*$", re.I)
_DEVICE = re.compile(r"^\s*Device:\s*(\d+),\s*(.*?),\s*pciBusID:\s*([0-9a-fA-F]+),\s*pciDeviceID:\s*([0-9a-fA-F]+),"
                     r"\s*pciDomainID:\s*([0-9a-fA-F]+)(.*)$")
_ACCESS = re.compile(r"^\s*Device=(\d+)\s+(CAN|CANNOT)\s+Access\s+Peer\s+Device=(\d+)", re.I)
_CLIQUE = re.compile(r"^\s*\[([\d\s]+)\]\s*$")
_VERSIONS = re.compile(r"^\s*CUDA driver version:\s*([\w.]+),\s*runtime version:\s*([\w.]+)")
_MISSING = {"n/a", "na", "nan", "-", "--"}


def _variant_suffix(label: Optional[str]) -> str:
    """'P2P Writes, SM copy' -> ':sm:write'; None (old sample) -> ':ce'."""
    method, direction, extra = "ce", None, []
    for tok in (label or "").split(","):
        t = tok.strip().lower()
        if not t:
            continue
        if "write" in t:
            direction = "write"
        elif "read" in t:
            direction = "read"
        elif t.startswith("sm"):
            method = "sm"
        elif t in ("ce", "copy engine"):
            method = "ce"
        else:
            # A label we do not know: keep it in the key, so the table is neither lost nor
            # mistaken for the standard one.
            extra.append(re.sub(r"[^a-z0-9]+", "-", t).strip("-"))
    return f":{method}" + (f":{direction}" if direction else "") + "".join(f":{e}" for e in extra)


def _number(tok: str, lineno: int, line: str) -> float:
    if tok.lower() in _MISSING:
        return float("nan")
    try:
        return float(tok)
    except ValueError:
        raise P2PParseError(f"line {lineno}: {tok!r} is not a number in table row {line.strip()!r}") from None


class _Lines:
    def __init__(self, text: str):
        self.lines = [_ANSI.sub("", ln).rstrip("\r") for ln in text.splitlines()]
        self.i = 0

    def skip_blank(self):
        while self.i < len(self.lines) and not self.lines[self.i].strip():
            self.i += 1

    def peek(self) -> Optional[str]:
        return self.lines[self.i] if self.i < len(self.lines) else None


def _read_table(src: _Lines, what: str, header_lineno: int, integer: bool = False) -> tuple:
    """Read 'CORNER  l0 l1 ...' then one row per label. Returns (corner, labels, matrix)."""
    src.skip_blank()
    line = src.peek()
    toks = line.split() if line is not None else []
    if len(toks) < 2 or toks[0].upper() not in ("D\\D", "GPU", "CPU") or not all(t.isdigit() for t in toks[1:]):
        shown = "end of text" if line is None else repr(line.strip())
        raise P2PParseError(f"table {what!r} (line {header_lineno}) should start with a 'D\\D 0 1 ...' "
                            f"column header, found {shown} at line {src.i + 1}")
    corner, labels = toks[0].upper(), [int(t) for t in toks[1:]]
    src.i += 1
    rows = []
    while len(rows) < len(labels):
        line = src.peek()
        toks = line.split() if line is not None else []
        if not toks or not toks[0].isdigit():
            break
        if int(toks[0]) != labels[len(rows)] or len(toks) != len(labels) + 1:
            raise P2PParseError(f"line {src.i + 1}: row {line.strip()!r} of table {what!r} should be GPU "
                                f"{labels[len(rows)]} followed by {len(labels)} values")
        rows.append([_number(t, src.i + 1, line) for t in toks[1:]])
        src.i += 1
    if len(rows) != len(labels):
        raise P2PParseError(f"table {what!r} (line {header_lineno}) has {len(rows)} row(s) for "
                            f"{len(labels)} GPUs: the text is cut off or garbled")
    m = np.array(rows, dtype=float)
    if integer and not np.all(np.isin(m, (0.0, 1.0))):
        raise P2PParseError(f"table {what!r} (line {header_lineno}) should hold only 0 and 1")
    return corner, labels, m


def parse(text: str) -> P2PResult:
    """Read the output of our program or of NVIDIA's p2pBandwidthLatencyTest.

    Raises :class:`P2PParseError` naming the line when a table is malformed, or when the
    text holds no p2p tables at all."""
    if not isinstance(text, str):
        raise TypeError(f"parse() takes the program's output as a str, got {type(text).__name__}")
    src = _Lines(text)
    variants, where, devices, access, cliques = {}, {}, {}, [], []
    labels = None
    connectivity = None
    source, synthetic = "unknown", False
    versions, parameters, notes, validation = {}, {}, [], None

    def keep(key, lab, m, lineno):
        nonlocal labels
        if key in variants:
            raise P2PParseError(f"table {key!r} appears twice (lines {where[key]} and {lineno}): "
                                "is this two runs pasted together? Parse each run separately.")
        if labels is None:
            labels = lab
        elif lab != labels:
            raise P2PParseError(f"line {lineno}: table {key!r} is for GPUs {lab}, earlier tables for {labels}")
        variants[key], where[key] = m, lineno

    while src.i < len(src.lines):
        line = src.lines[src.i]
        lineno = src.i + 1
        src.i += 1
        if "[ddlab p2p_bandwidth_latency]" in line:
            source = "ddlab"
        elif "P2P (Peer-to-Peer) GPU Bandwidth Latency Test" in line:
            source = "nvidia-sample"
        elif line.startswith("FORMAT DEMO"):
            synthetic = True
        elif m := _BW_HEADER.match(line):
            kind = "uni" if m.group(1).lower() == "unidirectional" else "bi"
            on = m.group(2).lower() == "enabled"
            key = f"{kind}_p2p_{'on' if on else 'off'}" + (_variant_suffix(m.group(3)) if on else "")
            _, lab, mat = _read_table(src, line.strip(), lineno)
            keep(key, lab, mat, lineno)
        elif m := _LAT_HEADER.match(line):
            on = m.group(1).lower() == "enabled"
            suffix = _variant_suffix(m.group(2)) if on else ""
            state = "on" if on else "off"
            seen = []
            # One or two sub-tables: GPU then CPU (current sample and ours), or a single
            # D\D table (older samples; taken as GPU-timed).
            while True:
                save = src.i
                src.skip_blank()
                first = (src.peek() or "").split()[:1]
                corner = first[0].upper() if first else None
                if corner not in ("D\\D", "GPU", "CPU") or corner in seen or (seen and corner == "D\\D"):
                    src.i = save
                    break
                corner, lab, mat = _read_table(src, line.strip(), lineno)
                seen.append(corner)
                keep(f"lat_{'cpu' if corner == 'CPU' else 'gpu'}_p2p_{state}{suffix}", lab, mat, lineno)
                if corner == "D\\D":
                    break
            if not seen:
                _read_table(src, line.strip(), lineno)  # raises the "should start with" error
        elif _CONN_HEADER.match(line):
            _, lab, mat = _read_table(src, "P2P Connectivity Matrix", lineno, integer=True)
            connectivity = (lab, mat.astype(bool))
        elif m := _DEVICE.match(line):
            idx, name, bus, dev, dom, rest = m.groups()
            d = {"index": int(idx), "name": name.strip(),
                 "pci_bus_id": f"{int(dom, 16):08X}:{int(bus, 16):02X}:{int(dev, 16):02X}.0"}
            for k, v in re.findall(r",\s*(busId|cc|memory|SMs):\s*([^,]+)", rest):
                v = v.strip()
                if k == "busId":
                    d["pci_bus_id"] = v
                elif k == "cc":
                    d["compute_capability"] = v
                elif k == "memory":
                    d["memory_mib"] = int(v.split()[0])
                else:
                    d["sm_count"] = int(v)
            devices[d["index"]] = d
        elif m := _ACCESS.match(line):
            access.append((int(m.group(1)), m.group(2).upper() == "CAN", int(m.group(3))))
        elif line.strip().startswith("P2P Cliques"):
            while (nxt := src.peek()) is not None and (c := _CLIQUE.match(nxt)):
                cliques.append([int(t) for t in c.group(1).split()])
                src.i += 1
        elif m := _VERSIONS.match(line):
            versions = {"cuda_driver": m.group(1), "cuda_runtime": m.group(2)}
        elif line.startswith("Parameters:"):
            for k, v in re.findall(r"(\w+)=(\S+)", line):
                parameters[k] = _scalar(v)
        elif line.startswith("Validation:"):
            validation = line.split(":", 1)[1].strip()
        elif line.startswith("Note:"):
            notes.append(line.split(":", 1)[1].strip())

    if labels is None:
        labels = connectivity[0] if connectivity else sorted(devices)
    if not variants and connectivity is None:
        raise P2PParseError("no p2p tables found: expected the output of p2p_bandwidth_latency or of NVIDIA's "
                            "p2pBandwidthLatencyTest (headers such as 'Unidirectional P2P=Enabled Bandwidth ... "
                            "Matrix (GB/s)')")
    n = len(labels)
    conn = _connectivity(labels, connectivity, access, cliques)
    devs = [devices[i] for i in labels if i in devices]
    return P2PResult(n=n, labels=list(labels), variants=variants, connectivity=conn, devices=devs,
                     source=source, synthetic=synthetic, versions=versions, parameters=parameters,
                     notes=notes, validation=validation, text=text)


def _scalar(v: str):
    for cast in (int, float):
        try:
            return cast(v)
        except ValueError:
            pass
    return v


def _connectivity(labels, matrix, access, cliques) -> Optional[np.ndarray]:
    """From the connectivity table, else the 'Device=i CAN Access Peer Device=j' lines,
    else the old 'P2P Cliques' lists; None when the text says nothing about it."""
    n, pos = len(labels), {g: k for k, g in enumerate(labels)}
    if matrix is not None:
        lab, m = matrix
        if list(lab) != list(labels):
            raise P2PParseError(f"the connectivity matrix is for GPUs {lab}, the tables for {labels}")
        return m
    if access or cliques:
        c = np.eye(n, dtype=bool)
        for i, can, j in access:
            if i in pos and j in pos:
                c[pos[i], pos[j]] = can
        if not access:
            for clique in cliques:
                for i in clique:
                    for j in clique:
                        if i in pos and j in pos:
                            c[pos[i], pos[j]] = True
        return c
    return None


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
    """The result as text in our program's format (parse() reads it back)."""
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


# =========================================================================== reading the numbers
def _offdiag(m: np.ndarray) -> np.ndarray:
    mask = ~np.eye(m.shape[0], dtype=bool) & np.isfinite(m)
    return m[mask]


def _extreme(m: np.ndarray, labels, best=True):
    """(value, source label, destination label) of the largest (or smallest) off-diagonal cell."""
    a = np.where(np.eye(m.shape[0], dtype=bool) | ~np.isfinite(m), np.nan, m)
    if np.all(np.isnan(a)):
        return None
    k = int(np.nanargmax(a) if best else np.nanargmin(a))
    i, j = divmod(k, m.shape[0])
    return float(a[i, j]), labels[i], labels[j]


def _peak_scalar(result: P2PResult, link_peak_gbps) -> Optional[float]:
    if link_peak_gbps is None:
        p = result.parameters.get("link_peak_gbps")
        return float(p) if isinstance(p, (int, float)) and p > 0 else None
    if np.isscalar(link_peak_gbps):
        return float(link_peak_gbps) if link_peak_gbps > 0 else None
    vals = _offdiag(np.asarray(link_peak_gbps, dtype=float))
    vals = vals[vals > 0]
    return float(vals.max()) if vals.size else None


def _matrix(m, labels=None) -> tuple:
    """(square float matrix, labels) from a matrix, a nested list or a :class:`P2PResult`
    (its unidirectional P2P-on table); ValueError naming what is wrong otherwise."""
    if isinstance(m, P2PResult):
        labels = m.labels if labels is None else labels
        key = "uni_p2p_on" if "uni_p2p_on" in m.matrices else next(iter(m.matrices), None)
        if key is None:
            raise ValueError("this p2p result holds no bandwidth matrix")
        m = m.matrices[key]
    try:
        a = np.array(m, dtype=float)
    except (TypeError, ValueError):
        raise ValueError("a bandwidth matrix must be numbers, one row per source GPU") from None
    if a.ndim != 2 or a.shape[0] != a.shape[1] or a.shape[0] < 1:
        raise ValueError(f"a bandwidth matrix must be square (n x n), got shape {a.shape}")
    labels = list(range(a.shape[0])) if labels is None else list(labels)
    if len(labels) != a.shape[0]:
        raise ValueError(f"{len(labels)} labels for a {a.shape[0]} x {a.shape[0]} matrix")
    off = a[~np.eye(a.shape[0], dtype=bool)]
    if np.any(np.isinf(off)) or np.any(off[np.isfinite(off)] < 0):
        raise ValueError("bandwidths must be finite and >= 0 (leave an unmeasured cell as NaN)")
    return a, labels


def asymmetric_pairs(m: np.ndarray, labels=None, threshold: float = ASYMMETRY) -> list:
    """[(a, b, m[a->b], m[b->a])] for pairs whose two directions differ by more than
    ``threshold`` (a share of the faster one). Unmeasured (NaN) cells are skipped."""
    m, labels = _matrix(m, labels)
    if not 0 <= threshold < 1:
        raise ValueError(f"threshold is a share between 0 and 1, got {threshold!r}")
    out = []
    for i in range(m.shape[0]):
        for j in range(i + 1, m.shape[0]):
            x, y = m[i, j], m[j, i]
            if np.isfinite(x) and np.isfinite(y) and max(x, y) > 0 and abs(x - y) / max(x, y) > threshold:
                out.append((labels[i], labels[j], float(x), float(y)))
    return out


def outlier_gpus(m: np.ndarray, labels=None, threshold: float = OUTLIER) -> list:
    """[(gpu, its mean, the others' median)] for GPUs whose pairs (row and column) average
    below ``threshold`` times the others'. Needs at least three GPUs. Unmeasured (NaN) cells
    are skipped."""
    m, labels = _matrix(m, labels)
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold is a share between 0 and 1, got {threshold!r}")
    n = m.shape[0]
    if n < 3:
        return []
    means = []
    for k in range(n):
        vals = np.concatenate([np.delete(m[k], k), np.delete(m[:, k], k)])
        vals = vals[np.isfinite(vals)]
        means.append(float(vals.mean()) if vals.size else np.nan)
    out = []
    for k in range(n):
        others = [x for q, x in enumerate(means) if q != k and np.isfinite(x)]
        if others and np.isfinite(means[k]) and means[k] < threshold * float(np.median(others)):
            out.append((labels[k], means[k], float(np.median(others))))
    return out


# =========================================================================== diagnosis
CAUSES = {
    "outlier": (
        "its PCIe link trained at a lower width or generation (x8 or x4 instead of x16, Gen3 instead of Gen4): "
        "compare current and maximum with ddlab doctor or nvidia-smi -q -d PCI, under load (an idle GPU drops "
        "its link generation to save power)",
        "it sits on the other NUMA node / CPU socket, so its traffic crosses the inter-socket link "
        "(nvidia-smi topo -m shows SYS for its pairs)",
        "ACS or the IOMMU sends its peer-to-peer traffic up through the PCIe root complex instead of across "
        "the switch (check ACS on the switch ports and the IOMMU setting in the BIOS/kernel command line)",
    ),
    "asymmetric": (
        "the two directions take different routes: ACS/IOMMU redirection or a root complex that forwards "
        "peer writes and reads at different rates",
        "one end's link trained lower than the other's (width or generation), which caps the direction it "
        "limits",
        "the copy is issued differently in each direction (P2P write vs read, copy engine vs SM): repeat with "
        "the other copy kind before blaming the hardware",
    ),
}


@dataclass
class Diagnosis:
    """What :func:`diagnose` found in a bandwidth matrix: slow GPUs, asymmetric pairs, the
    best subset of ``k`` GPUs for a ring (its order and slowest hop) and typical causes."""
    labels: list
    matrix: np.ndarray = field(repr=False)
    outliers: list                 # [(gpu, its mean, the others' median)]
    asymmetric: list               # [(a, b, a->b, b->a)]
    k: Optional[int] = None
    best_ring: Optional[tuple] = None        # GPUs in ring order
    ring_bottleneck: Optional[float] = None  # slowest hop of that ring, GB/s
    causes: list = field(default_factory=list)

    @property
    def outlier_labels(self) -> list:
        return [g for g, _, _ in self.outliers]

    @property
    def asymmetric_labels(self) -> list:
        return [(a, b) for a, b, _, _ in self.asymmetric]

    def text(self) -> str:
        lines = []
        if self.outliers:
            lines += [f"Slow GPU: {g} (its pairs average {x:.1f} GB/s; the others' {y:.1f} GB/s)."
                      for g, x, y in self.outliers]
        else:
            lines.append("No GPU stands out as slow.")
        if self.asymmetric:
            lines += [f"Asymmetric pair: {a} -> {b} {x:.1f} GB/s but {b} -> {a} {y:.1f} GB/s." for a, b, x, y in
                      self.asymmetric]
        else:
            lines.append("No asymmetric pair.")
        if self.best_ring is not None:
            lines.append(f"Best {self.k} GPUs for a ring all-reduce: {' -> '.join(map(str, self.best_ring))} -> "
                         f"{self.best_ring[0]} (slowest hop {self.ring_bottleneck:.1f} GB/s).")
        if self.causes:
            lines.append("Typical causes to check:")
            lines += [textwrap.fill(c, 100, initial_indent="  - ", subsequent_indent="    ") for c in self.causes]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()


def ring_bottleneck(m, order) -> float:
    """The slowest hop of a ring that sends ``order[0] -> order[1] -> ... -> order[0]``
    (matrix indices). A ring of two uses both directions of the pair."""
    m = np.asarray(m, dtype=float)
    order = list(order)
    if len(order) < 2:
        raise ValueError("a ring needs at least two GPUs")
    hops = [m[a, b] for a, b in zip(order, order[1:] + order[:1])]
    hops = [h if np.isfinite(h) else 0.0 for h in hops]
    return float(min(hops))


MAX_RING_ORDERS = 2_000_000


def best_ring_subset(m, k: int, labels=None) -> tuple:
    """(GPU labels in ring order, slowest hop) of the ``k`` GPUs whose best ring has the
    fastest slowest hop; ties go to the larger sum of hops, then the lower GPU numbers.
    Exact: every subset, each with its best ring from :func:`ddlab.base.rings.best_ring`
    (rings are unidirectional, so i -> j and j -> i are different hops; an unmeasured hop
    counts 0). This searches a measured bandwidth matrix;
    :func:`ddlab.system.topology_ranking.best_subset` ranks the link *kinds* of ``nvidia-smi
    topo -m`` instead."""
    import itertools

    from ddlab.base import rings
    m, labels = _matrix(m, labels)
    n = m.shape[0]
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 2 <= k <= n:
        raise ValueError(f"k must be a whole number from 2 to {n} (the GPUs in the matrix), got {k!r}")
    work = math.comb(n, k) * math.factorial(k - 1)
    if work > MAX_RING_ORDERS:
        raise ValueError(f"{work:,} rings to try for k={k} of {n} GPUs: too many for an exhaustive search")

    def hop(a, b) -> float:
        x = float(m[a, b])
        return x if math.isfinite(x) else 0.0

    best, key = None, None                # the best ring so far and its (slowest hop, sum of hops)
    for subset in itertools.combinations(range(n), k):
        # a later subset wins only with a better ring: the floor skips the rings that cannot
        ring = rings.best_ring(subset, hop, floor=key)
        if ring is not None and (key is None or (ring.bottleneck, ring.total) > key):
            best, key = ring, (ring.bottleneck, ring.total)
    return tuple(labels[i] for i in best.order), float(best.bottleneck)


def diagnose(matrix, labels=None, k: Optional[int] = None, asymmetry: float = ASYMMETRY,
             outlier: float = OUTLIER) -> Diagnosis:
    """Read a p2p bandwidth matrix (GB/s, rows = source GPU; a matrix, nested lists or a
    :class:`P2PResult`): its outlier GPUs (:func:`outlier_gpus`), asymmetric pairs
    (:func:`asymmetric_pairs`), the best ``k`` GPUs for a ring (:func:`best_ring_subset`;
    default: all GPUs but the outliers, at least 2) and the typical causes of what it found."""
    m, labels = _matrix(matrix, labels)
    n = m.shape[0]
    if n < 2:
        raise ValueError("a diagnosis needs at least two GPUs")
    out = outlier_gpus(m, labels, outlier)
    asym = asymmetric_pairs(m, labels, asymmetry)
    if k is None:
        k = max(2, n - len(out))
    ring, bottleneck = best_ring_subset(m, k, labels)
    causes = []
    if out:
        causes += [f"slow GPU: {c}" for c in CAUSES["outlier"]]
    if asym:
        causes += [f"asymmetric pair: {c}" for c in CAUSES["asymmetric"]]
    return Diagnosis(labels, m, out, asym, k, ring, bottleneck, causes)


def summary(result: P2PResult, link_peak_gbps=None) -> str:
    """One paragraph: best and worst pairs, the effect of peer access, asymmetric pairs,
    an outlier GPU, and the share of the link's peak when known."""
    mats, labels, n = result.matrices, result.labels, result.n
    names = sorted({d.get("name", "?") for d in result.devices})
    what = f"{n} GPU{'s' if n != 1 else ''}" + (f" ({', '.join(names)})" if names else "")
    s = []
    if result.synthetic:
        s.append("SYNTHETIC FORMAT DEMO, not a measurement:")
    if n < 2:
        s.append(f"{what}: the tables hold copies within one GPU only; a peer-to-peer reading needs two GPUs.")
        return " ".join(s)
    s.append(f"{what}.")
    peak = _peak_scalar(result, link_peak_gbps)
    on, off = mats.get("uni_p2p_on"), mats.get("uni_p2p_off")
    if on is not None and (b := _extreme(on, labels)):
        w = _extreme(on, labels, best=False)
        share = f" ({100 * b[0] / peak:.0f}% of the link's peak, {peak:g} GB/s per direction, as measured)" \
            if peak else ""
        s.append(f"Unidirectional with peer access: best {b[0]:.1f} GB/s (GPU {b[1]} -> {b[2]}), "
                 f"worst {w[0]:.1f} GB/s (GPU {w[1]} -> {w[2]}){share}.")
    if off is not None and _offdiag(off).size:
        mean_off = float(_offdiag(off).mean())
        s.append(f"Host-staged (P2P off): {mean_off:.1f} GB/s on average.")
        if on is not None and _offdiag(on).size and mean_off > 0:
            ratio = float(_offdiag(on).mean()) / mean_off
            if ratio < 1.3:
                s.append(f"Peer access barely helps ({ratio:.1f}x): P2P is probably not working between these "
                         "GPUs (check the connectivity matrix, the PCIe ACS/IOMMU settings and the driver).")
            else:
                s.append(f"Peer access is {ratio:.1f}x faster on average.")
    bi = mats.get("bi_p2p_on")
    if bi is not None and (b := _extreme(bi, labels)):
        share = f", {100 * b[0] / (2 * peak):.0f}% of the peak in both directions" if peak else ""
        s.append(f"Both directions at once: up to {b[0]:.1f} GB/s (GPU {b[1]} <-> {b[2]}{share}).")
    ce = [v for k, v in result.variants.items() if k.startswith("uni_p2p_on:ce")]
    sm = [v for k, v in result.variants.items() if k.startswith("uni_p2p_on:sm")]
    if ce and sm:
        best_ce = max((x[0] for x in (_extreme(v, labels) for v in ce) if x), default=float("nan"))
        best_sm = max((x[0] for x in (_extreme(v, labels) for v in sm) if x), default=float("nan"))
        s.append(f"Copy engine best {best_ce:.1f} GB/s against SM-kernel copy best {best_sm:.1f} GB/s.")
    lat_on, lat_off = mats.get("lat_gpu_p2p_on"), mats.get("lat_gpu_p2p_off")
    if lat_on is not None and _offdiag(lat_on).size:
        txt = f"GPU-timed latency: {float(np.median(_offdiag(lat_on))):.2f} us with peer access"
        if lat_off is not None and _offdiag(lat_off).size:
            txt += f" against {float(np.median(_offdiag(lat_off))):.2f} us host-staged"
        s.append(txt + " (median over pairs).")
    pp = [v for k, v in result.variants.items() if k.startswith("lat_gpu_p2p_on:sm")]
    if pp and _offdiag(pp[0]).size:
        s.append(f"SM ping-pong one-way latency: {float(np.median(_offdiag(pp[0]))):.2f} us.")
    ref = on if on is not None else off
    if ref is not None:
        asym = asymmetric_pairs(ref, labels)
        if asym:
            s.append("Asymmetric pairs (directions differ by more than 10%): " + ", ".join(
                f"{a} <-> {b} ({x:.1f} vs {y:.1f} GB/s)" for a, b, x, y in asym) + ".")
        else:
            s.append("No pair is asymmetric (both directions within 10%).")
        if n >= 3:
            out = outlier_gpus(ref, labels)
            if out:
                s.append("Outlier: " + "; ".join(
                    f"GPU {g}'s pairs average {x:.1f} GB/s against {y:.1f} GB/s for the others (check its links "
                    f"with nvidia-smi topo -m and nvidia-smi nvlink -s)" for g, x, y in out) + ".")
            else:
                s.append("No GPU stands out as slow.")
    if result.connectivity is not None:
        bad = [(labels[i], labels[j]) for i in range(n) for j in range(n)
               if i != j and not result.connectivity[i, j]]
        if bad:
            s.append("No peer access for: " + ", ".join(f"{a} -> {b}" for a, b in bad)
                     + " (their P2P=Enabled copies are host-staged).")
    return " ".join(s)


# =========================================================================== link peaks
def link_peaks(topo_labels, nvlink_generation: Optional[int] = None, pcie_generation: int = 4) -> np.ndarray:
    """Per-direction peak (GB/s) for each GPU pair from its `nvidia-smi topo -m` label
    ("NV18", "PIX", "SYS", ...; "X" on the diagonal gives NaN), through the link catalogue
    in :mod:`ddlab.system.links`. Pass the result to :func:`plot_heatmaps` as ``link_peak_gbps``."""
    from ddlab.system import links
    lab = np.asarray(topo_labels, dtype=object)
    if lab.ndim != 2 or lab.shape[0] != lab.shape[1]:
        raise ValueError(f"topo_labels must be a square n x n table of labels, got shape {lab.shape}")
    peaks = np.full(lab.shape, np.nan)
    for (i, j), v in np.ndenumerate(lab):
        if i != j and str(v).strip().upper() != "X":
            peaks[i, j] = links.for_label(str(v), nvlink_generation=nvlink_generation,
                                          pcie_generation=pcie_generation).bandwidth_gbs
    return peaks


# =========================================================================== plotting
def plot_heatmaps(result: P2PResult, link_peak_gbps=None, keys: Optional[Sequence[str]] = None, figsize=None):
    """One heatmap per matrix, values written in the cells. ``link_peak_gbps``: the link's peak
    rate per direction, a number or an n x n matrix (per pair); when known (or given to the
    program as --link-peak), bandwidth cells also show their share of it (bidirectional:
    of twice it). The diagonal (copies within one GPU) is grey so it does not set the
    colour scale. Returns the matplotlib Figure (one Axes per matrix)."""
    import matplotlib.pyplot as plt

    keys = list(keys) if keys is not None else [k for k in STANDARD_KEYS if k in result.matrices]
    if not keys:
        raise ValueError("the result holds no matrices to draw")
    for k in keys:
        if k not in result.matrices and k not in result.variants:
            raise KeyError(f"no matrix {k!r}; available: {', '.join(list(result.matrices) + list(result.variants))}")
    n, labels = result.n, result.labels
    if link_peak_gbps is None:
        link_peak_gbps = _peak_scalar(result, None)
    peak = None
    if link_peak_gbps is not None:
        peak = np.full((n, n), float(link_peak_gbps)) if np.isscalar(link_peak_gbps) else \
            np.asarray(link_peak_gbps, dtype=float)
        if peak.shape != (n, n):
            raise ValueError(f"link_peak_gbps is {peak.shape}, expected a number or ({n}, {n})")
    cols = min(4, len(keys))
    rows = -(-len(keys) // cols)
    cell = 0.9 + 0.55 * n
    fig, axes = plt.subplots(rows, cols, figsize=figsize or (cols * cell + 1, rows * cell + 1.2), squeeze=False)
    for ax in axes.flat[len(keys):]:
        ax.remove()
    for ax, key in zip(axes.flat, keys):
        m = result.matrices.get(key, result.variants.get(key))
        base = key.split(":")[0]
        is_bw = not base.startswith("lat_")
        off = np.where(np.eye(n, dtype=bool), np.nan, m)
        finite = off[np.isfinite(off)]
        vmin, vmax = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
        cmap = plt.get_cmap("viridis" if is_bw else "viridis_r").with_extremes(bad="#d9d9d9")
        ax.imshow(np.ma.masked_invalid(off), cmap=cmap, vmin=vmin, vmax=vmax if vmax > vmin else vmin + 1)
        scale = 2.0 if base.startswith("bi_") else 1.0
        for i in range(n):
            for j in range(n):
                x = m[i, j]
                txt = "n/a" if not np.isfinite(x) else (f"{x:.0f}" if is_bw and x >= 100 else f"{x:.1f}" if is_bw
                                                        else f"{x:.2f}")
                if is_bw and base.endswith("p2p_on") and peak is not None and i != j and np.isfinite(x) \
                        and peak[i, j] > 0:
                    txt += f"\n{100 * x / (scale * peak[i, j]):.0f}% pk"
                shade = (x - vmin) / (vmax - vmin) if np.isfinite(x) and vmax > vmin and i != j else 0.5
                dark = shade < 0.5 if is_bw else shade > 0.5
                ax.text(j, i, txt, ha="center", va="center", fontsize=8,
                        color="white" if (i != j and np.isfinite(off[i, j]) and dark) else "black")
        title = TITLES.get(base, base)
        if key != base:
            title += "\n" + key.split(":", 1)[1].replace(":", ", ")
        if is_bw and base.endswith("p2p_on") and peak is not None:
            title += f"\nlink peak {float(np.nanmax(_offdiag(peak))):g} GB/s per direction"
        ax.set_title(title, fontsize=9)
        ax.set_xticks(range(n), [f"GPU {g}" for g in labels], fontsize=8)
        ax.set_yticks(range(n), [f"GPU {g}" for g in labels], fontsize=8)
        ax.set_xlabel("destination", fontsize=8)
        ax.set_ylabel("source", fontsize=8)
    caption = "SYNTHETIC format demo, not a measurement" if result.synthetic else None
    if caption is None and result.provenance:
        from ddlab.system.provenance import label
        caption = "recorded on " + label(result.provenance)
    if caption:
        fig.suptitle(caption, fontsize=10)
    fig.tight_layout()
    return fig


# =========================================================================== build and run
def _nvcc() -> Optional[str]:
    cuda_home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    exe = shutil.which("nvcc")
    if exe:
        return exe
    cand = os.path.join(cuda_home, "bin", "nvcc")
    return cand if os.access(cand, os.X_OK) else None


def binary_path(directory: Optional[str] = None) -> str:
    return os.path.join(directory or PROGRAM_DIR, PROGRAM_NAME)


def build(force: bool = False, *, directory: Optional[str] = None, timeout: float = 900.0) -> str:
    """Compile the program with its Makefile; return the binary's path.

    Without ``force`` an up-to-date binary is reused. Raises :class:`P2PBuildError` when
    ``nvcc`` or ``make`` is missing or the build fails (with the end of the compiler's output)."""
    directory = directory or PROGRAM_DIR
    path = binary_path(directory)
    sources = [os.path.join(directory, f) for f in (PROGRAM_NAME + ".cu", "Makefile")]
    if not force and os.path.exists(path) and all(os.path.getmtime(path) >= os.path.getmtime(s) for s in sources):
        return path
    if not _nvcc():
        raise P2PBuildError("nvcc (the CUDA compiler) was not found on PATH or in $CUDA_HOME/bin: install the "
                            "CUDA toolkit to build the p2p test, or use load_recorded('h200x2') to see a recorded run")
    make = shutil.which("make")
    if not make:
        raise P2PBuildError("'make' was not found: install it (apt-get install make) to build the p2p test")
    cmd = [make] + (["-B"] if force else [])
    try:
        out = subprocess.run(cmd, cwd=directory, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise P2PBuildError(f"building the p2p test took longer than {timeout:.0f} s and was stopped") from None
    if out.returncode != 0 or not os.path.exists(path):
        tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-25:])
        raise P2PBuildError(f"building the p2p test failed (make exited {out.returncode}) in {directory}:\n{tail}")
    return path


def gpu_visible() -> bool:
    """Cheap check, without CUDA: does this machine show an NVIDIA GPU?"""
    try:
        if os.listdir("/proc/driver/nvidia/gpus"):
            return True
    except OSError:
        pass
    from ddlab.system.hardware import inventory
    return inventory(software=False).gpu_count > 0


def program_args(*, copy=None, direction=None, size=None, reps=None, latency_size=None, latency_reps=None,
                 latency_batch=None, ce_api=None, gpus=None, link_peak_gbps=None) -> list:
    """Command-line options for the program from keyword arguments (None = its default)."""
    args = []
    for flag, v in (("--copy", copy), ("--direction", direction), ("--size", size), ("--reps", reps),
                    ("--latency-size", latency_size), ("--latency-reps", latency_reps),
                    ("--latency-batch", latency_batch), ("--ce-api", ce_api), ("--link-peak", link_peak_gbps)):
        if v is not None:
            args += [flag, str(v)]
    if gpus is not None:
        args += ["--gpus", gpus if isinstance(gpus, str) else ",".join(str(g) for g in gpus)]
    return args


def run(args: Sequence[str] = (), *, timeout: float = 900.0, rebuild: bool = False,
        binary: Optional[str] = None, **options) -> P2PResult:
    """Build if needed, run the program, return its result.

    ``args`` go to the program as they are; keyword ``options`` are those of
    :func:`program_args` (copy="ce", size="256M", link_peak_gbps=478.08, ...).
    Raises :class:`P2PNoGPU`, :class:`P2PBuildError` or :class:`P2PRunError` (timeout,
    failure, or validation that caught wrong data) with the end of the program's output."""
    if binary is None and not gpu_visible():
        raise P2PNoGPU("no NVIDIA GPU is visible on this machine, so the p2p test cannot run here; "
                       "load_recorded('h200x2') (or ddlab p2p --recorded h200x2) shows a recorded run")
    exe = binary or build(force=rebuild)
    argv = [str(a) for a in args] + program_args(**options)
    fd, json_path = tempfile.mkstemp(prefix="ddlab-p2p-", suffix=".json")
    os.close(fd)
    try:
        try:
            out = subprocess.run([exe, *argv, "--json", json_path], capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise P2PRunError(f"the p2p test ran longer than {timeout:.0f} s and was stopped; try a smaller --size, "
                              "fewer --reps or fewer --gpus") from None
        except OSError as exc:
            raise P2PRunError(f"could not start {exe}: {exc}") from None
        text = out.stdout
        tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-20:])
        if out.returncode == EXIT_NO_GPU and "no CUDA GPU" in out.stderr:
            raise P2PNoGPU(out.stderr.strip())
        if out.returncode == EXIT_VALIDATION:
            raise P2PRunError(f"the p2p test's validation caught wrong data (exit {out.returncode}):\n{tail}")
        if out.returncode != 0:
            raise P2PRunError(f"the p2p test failed (exit {out.returncode}):\n{tail}")
        with open(json_path) as f:
            result = P2PResult.from_dict(json.load(f))
    finally:
        os.unlink(json_path)
    result.text = text
    result.parameters.setdefault("command", " ".join([os.path.basename(exe), *argv]))
    return result


NVIDIA_SAMPLE = "p2pBandwidthLatencyTest"


def nvidia_sample() -> Optional[str]:
    """The path of NVIDIA's p2pBandwidthLatencyTest (cuda-samples) when it is on PATH, else None."""
    return shutil.which(NVIDIA_SAMPLE)


def run_nvidia_sample(*, timeout: float = 900.0) -> P2PResult:
    """Run NVIDIA's p2pBandwidthLatencyTest from PATH and parse its output (:func:`parse`).
    Raises :class:`P2PError` when it is not on PATH, and :class:`P2PRunError` when it fails."""
    exe = nvidia_sample()
    if exe is None:
        raise P2PError(f"NVIDIA's {NVIDIA_SAMPLE} is not on PATH (it comes with NVIDIA's cuda-samples); "
                       "the course's own test stands in for it")
    try:
        out = subprocess.run([exe], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise P2PRunError(f"{NVIDIA_SAMPLE} ran longer than {timeout:.0f} s and was stopped") from None
    if out.returncode != 0:
        tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-20:])
        raise P2PRunError(f"{NVIDIA_SAMPLE} failed (exit {out.returncode}):\n{tail}")
    result = parse(out.stdout)
    result.text = out.stdout
    return result


# =========================================================================== recorded runs
def record(result: P2PResult, *, name: Optional[str] = None, path: Optional[str] = None,
           command=None) -> str:
    """Save a live result with this machine's provenance: under reference/p2p/<name>.json,
    or at ``path``. Returns the path written."""
    from ddlab.system import provenance
    from ddlab.base import reference
    if result.synthetic:
        raise ValueError("a format-demo result is not a measurement and cannot be recorded")
    obj = {"provenance": provenance.collect(command), "kind": "p2p", "result": result.to_dict(),
           "summary": summary(result), "text": result.text}
    if name:
        return reference.save("p2p", name, obj)
    if not path:
        raise ValueError("record() needs a name or a path")
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")
    return path


def load_recorded(name: str = "h200x2") -> P2PResult:
    """A run recorded on one of the course's machines (source_code/reference/p2p/<name>.json)."""
    from ddlab.base import reference
    obj = reference.load("p2p", name)
    if "result" not in obj:
        raise ValueError(f"recorded p2p result {name!r} has no 'result' object")
    result = P2PResult.from_dict(obj["result"])
    result.provenance = obj["provenance"]
    result.text = obj.get("text")
    return result


# =========================================================================== CLI
def cli(argv: list) -> int:
    import argparse
    p = argparse.ArgumentParser(
        prog="ddlab p2p",
        description="GPU peer-to-peer bandwidth and latency: build and run the course's CUDA test (or read "
                    "existing output, ours or NVIDIA's p2pBandwidthLatencyTest), print the tables and a reading.")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--file", help="parse this output file instead of running ('-' = stdin)")
    src.add_argument("--recorded", metavar="NAME", help="show a recorded run, e.g. h200x2")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--copy", choices=("ce", "sm", "both"), help="copy engine, SM kernel or both (default both)")
    p.add_argument("--direction", choices=("write", "read", "both"), help="P2P writes, reads or both (default write)")
    p.add_argument("--size", help="bandwidth message size, e.g. 1G, 256M (default 1G)")
    p.add_argument("--reps", type=int, help="timed copies per bandwidth figure (default 10)")
    p.add_argument("--latency-size", help="latency message size in bytes (default 4)")
    p.add_argument("--latency-reps", type=int, help="copies per latency figure (default 4096)")
    p.add_argument("--latency-batch", type=int, help="copies queued per GPU-timed latency batch (default 256)")
    p.add_argument("--gpus", help="comma-separated GPU ordinals (default all)")
    p.add_argument("--link-peak", type=float, metavar="GBPS",
                   help="the link's peak per direction (ddlab.system.links; NV18: 450) to show the share of peak")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds before the run is stopped (default 900)")
    p.add_argument("--rebuild", action="store_true", help="rebuild the program first")
    p.add_argument("--record", metavar="PATH", help="also save the live result with provenance to PATH")
    a = p.parse_args(argv)
    try:
        if a.file:
            if a.file == "-":
                text = sys.stdin.read()
            else:
                with open(a.file) as f:
                    text = f.read()
            result = parse(text)
            shown = format_tables(result)
        elif a.recorded:
            result = load_recorded(a.recorded)
            shown = result.text or format_tables(result)
        else:
            result = run(timeout=a.timeout, rebuild=a.rebuild, copy=a.copy, direction=a.direction, size=a.size,
                         reps=a.reps, latency_size=a.latency_size, latency_reps=a.latency_reps,
                         latency_batch=a.latency_batch, gpus=a.gpus,
                         link_peak_gbps=a.link_peak)
            shown = result.text or format_tables(result)
        if a.record:
            if a.file or a.recorded:
                raise ValueError("--record saves a live run; it cannot be combined with --file or --recorded")
            record(result, path=a.record, command=["ddlab", "p2p", *argv])
    except P2PNoGPU as exc:
        print(f"ddlab p2p: {exc}", file=sys.stderr)
        return 2
    except (P2PError, P2PParseError, OSError, ValueError, KeyError) as exc:
        print(f"ddlab p2p: {exc}", file=sys.stderr)
        return 1
    reading = summary(result, a.link_peak)
    if a.json:
        print(json.dumps({"result": result.to_dict(), "summary": reading}, indent=1))
    else:
        print(shown.rstrip("\n"))
        print()
        print("Reading: " + reading)
    return 0
