"""Reading p2p test output into a :class:`ddlab.measure.p2p.P2PResult`: the text our CUDA test
prints (and :func:`ddlab.measure.p2p.format_tables` writes), and the output of NVIDIA's
cuda-samples ``p2pBandwidthLatencyTest``, current and older versions (one latency table or two,
``P2P Cliques`` or ``CAN Access Peer`` lines instead of a connectivity matrix).
"""
from __future__ import annotations

import re
from typing import Optional

import numpy as np

from ddlab.measure.p2p import P2PResult


class P2PParseError(ValueError):
    """Text that is not (or not entirely) p2p test output."""



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


class _Found:
    """What :func:`parse` has read so far."""

    def __init__(self):
        self.variants, self.where, self.devices, self.access, self.cliques = {}, {}, {}, [], []
        self.labels = self.connectivity = self.validation = None
        self.source, self.synthetic = "unknown", False
        self.versions, self.parameters, self.notes = {}, {}, []

    def keep(self, key, lab, m, lineno):
        """Keep table ``key`` (its GPU labels ``lab``, matrix ``m``): each table once, all for the same GPUs."""
        if key in self.variants:
            raise P2PParseError(f"table {key!r} appears twice (lines {self.where[key]} and {lineno}): "
                                "is this two runs pasted together? Parse each run separately.")
        if self.labels is None:
            self.labels = lab
        elif lab != self.labels:
            raise P2PParseError(f"line {lineno}: table {key!r} is for GPUs {lab}, earlier tables for {self.labels}")
        self.variants[key], self.where[key] = m, lineno


def _latency_tables(src: _Lines, line: str, lineno: int, m, found: _Found) -> None:
    """The latency tables under header ``line``: one or two sub-tables, GPU then CPU (current
    sample and ours), or a single D\\D table (older samples; taken as GPU-timed)."""
    on = m.group(1).lower() == "enabled"
    suffix = _variant_suffix(m.group(2)) if on else ""
    state = "on" if on else "off"
    seen = []
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
        found.keep(f"lat_{'cpu' if corner == 'CPU' else 'gpu'}_p2p_{state}{suffix}", lab, mat, lineno)
        if corner == "D\\D":
            break
    if not seen:
        _read_table(src, line.strip(), lineno)  # raises the "should start with" error


def _device(m) -> dict:
    """One "Device: ..." line: index, name, PCI bus id and, where given, compute capability, memory, SMs."""
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
    return d


def _table_line(src: _Lines, line: str, lineno: int, found: _Found) -> bool:
    """Read the table whose header is ``line`` (bandwidth, latency or connectivity); False when it is none."""
    if m := _BW_HEADER.match(line):
        kind = "uni" if m.group(1).lower() == "unidirectional" else "bi"
        on = m.group(2).lower() == "enabled"
        key = f"{kind}_p2p_{'on' if on else 'off'}" + (_variant_suffix(m.group(3)) if on else "")
        _, lab, mat = _read_table(src, line.strip(), lineno)
        found.keep(key, lab, mat, lineno)
    elif m := _LAT_HEADER.match(line):
        _latency_tables(src, line, lineno, m, found)
    elif _CONN_HEADER.match(line):
        _, lab, mat = _read_table(src, "P2P Connectivity Matrix", lineno, integer=True)
        found.connectivity = (lab, mat.astype(bool))
    else:
        return False
    return True


def _info_line(src: _Lines, line: str, found: _Found) -> None:
    """Keep what a line outside the tables says: a device, peer access, cliques, versions,
    parameters, the validation verdict, a note."""
    if m := _DEVICE.match(line):
        d = _device(m)
        found.devices[d["index"]] = d
    elif m := _ACCESS.match(line):
        found.access.append((int(m.group(1)), m.group(2).upper() == "CAN", int(m.group(3))))
    elif line.strip().startswith("P2P Cliques"):
        while (nxt := src.peek()) is not None and (c := _CLIQUE.match(nxt)):
            found.cliques.append([int(t) for t in c.group(1).split()])
            src.i += 1
    elif m := _VERSIONS.match(line):
        found.versions = {"cuda_driver": m.group(1), "cuda_runtime": m.group(2)}
    elif line.startswith("Parameters:"):
        for k, v in re.findall(r"(\w+)=(\S+)", line):
            found.parameters[k] = _scalar(v)
    elif line.startswith("Validation:"):
        found.validation = line.split(":", 1)[1].strip()
    elif line.startswith("Note:"):
        found.notes.append(line.split(":", 1)[1].strip())


def parse(text: str) -> P2PResult:
    """Read the output of our program or of NVIDIA's p2pBandwidthLatencyTest.

    Raises :class:`P2PParseError` naming the line when a table is malformed, or when the
    text holds no p2p tables at all."""
    if not isinstance(text, str):
        raise TypeError(f"parse() takes the program's output as a str, got {type(text).__name__}")
    src = _Lines(text)
    found = _Found()
    while src.i < len(src.lines):
        line = src.lines[src.i]
        lineno = src.i + 1
        src.i += 1
        if "[ddlab p2p_bandwidth_latency]" in line:
            found.source = "ddlab"
        elif "P2P (Peer-to-Peer) GPU Bandwidth Latency Test" in line:
            found.source = "nvidia-sample"
        elif line.startswith("FORMAT DEMO"):
            found.synthetic = True
        elif not _table_line(src, line, lineno, found):
            _info_line(src, line, found)

    labels, connectivity, devices = found.labels, found.connectivity, found.devices
    if labels is None:
        labels = connectivity[0] if connectivity else sorted(devices)
    if not found.variants and connectivity is None:
        raise P2PParseError("no p2p tables found: expected the output of p2p_bandwidth_latency or of NVIDIA's "
                            "p2pBandwidthLatencyTest (headers such as 'Unidirectional P2P=Enabled Bandwidth ... "
                            "Matrix (GB/s)')")
    conn = _connectivity(labels, connectivity, found.access, found.cliques)
    devs = [devices[i] for i in labels if i in devices]
    return P2PResult(n=len(labels), labels=list(labels), variants=found.variants, connectivity=conn, devices=devs,
                     source=found.source, synthetic=found.synthetic, versions=found.versions,
                     parameters=found.parameters, notes=found.notes, validation=found.validation, text=text)


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

