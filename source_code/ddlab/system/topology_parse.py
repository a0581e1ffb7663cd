"""Read the text of ``nvidia-smi topo -m`` into its devices and links (the parser behind
:func:`ddlab.system.topology.parse_topo_matrix`), and the link model: :class:`Link`, one cell.

The input is the text ``nvidia-smi topo -m`` prints, in any of the shapes people paste:

* cells separated by tabs (what nvidia-smi writes) or by spaces (after a copy from a web
  page or a terminal), CRLF line ends, blank lines between rows, a shell prompt above;
* the header row underlined with ANSI escape codes (nvidia-smi does that on a terminal);
* NIC rows and columns, named either directly (``mlx5_0``) or ``NIC0`` .. ``NICn`` with a
  ``NIC Legend`` block below that maps them to device names;
* with or without the ``CPU Affinity``, ``NUMA Affinity`` and ``GPU NUMA ID`` columns, whose
  cells may be ``N/A`` or empty (nvidia-smi pads some of them with an extra tab);
* with or without the legend; 1 to 16 GPUs (more also works);
* cut off after the GPU rows (NIC rows or the ``NIC Legend`` missing): the GPU matrix is
  read, with a :class:`TopologyWarning` that says what was missing (also kept in
  ``Topology.warnings``); a paste that lacks GPU rows is an error naming them;
* the link labels ``X``, ``NV<n>``, ``PIX``, ``PXB``, ``PHB``, ``NODE``, ``SYS`` and the old
  ``SOC`` (drivers before about 2017), which means what ``SYS`` means now.

Link quality is one number, ``Link.rank``: ``100 + n`` for ``NV<n>`` (more bonded NVLinks is
better), then PIX 50 > PXB 40 > PHB 30 > NODE 20 > SYS 10. The order is the one nvidia-smi's
legend describes (each step adds a longer PCIe/CPU path) and the one NCCL_P2P_LEVEL uses.
"""
from __future__ import annotations

import itertools
import re
import warnings as _warnings
from dataclasses import dataclass
from typing import Optional

# What each `nvidia-smi topo -m` link kind means, and the link catalogue: ddlab.system.links (below this module).
from ddlab.system.links import LINK_KINDS
from ddlab.base.errors import CourseError


class TopologyParseError(CourseError, ValueError):
    """The text is not a ``nvidia-smi topo -m`` matrix; the message names the line and what
    was expected there."""


class TopologyWarning(UserWarning):
    """The text was read, but part of it was missing (a paste cut off after the GPU rows)."""


_BASE_RANK = {"PIX": 50, "PXB": 40, "PHB": 30, "NODE": 20, "SYS": 10}
_LABEL_HELP = "X, NV<n>, PIX, PXB, PHB, NODE, SYS or SOC"


@dataclass(frozen=True)
class Link:
    """One cell of the matrix: ``label`` as printed, ``kind`` (NVLINK, PIX, PXB, PHB, NODE,
    SYS), ``nvlinks`` (bonded NVLinks, 0 when not NVLink) and ``rank`` (higher is better)."""
    label: str
    kind: str
    nvlinks: int
    rank: int

    @property
    def description(self) -> str:
        if self.kind == "NVLINK":
            return f"{self.nvlinks} bonded NVLink{'s' if self.nvlinks != 1 else ''}"
        return LINK_KINDS[self.kind]["path"]

    def __str__(self) -> str:
        return self.label


def parse_link(label: str) -> Link:
    """The :class:`Link` for one printed label (not ``X``). Raises ValueError when unknown."""
    m = re.fullmatch(r"NV(\d+)", label)
    if m:
        n = int(m.group(1))
        if n < 1:
            raise ValueError(f"link label {label!r}: an NVLink bond has at least one link")
        return Link(label, "NVLINK", n, 100 + n)
    kind = "SYS" if label == "SOC" else label
    if kind in _BASE_RANK:
        return Link(label, kind, 0, _BASE_RANK[kind])
    raise ValueError(f"unknown link label {label!r}; expected {_LABEL_HELP}")


# ----------------------------------------------------------------------------- parsing
_ANSI = re.compile(r"(?:\x1b|\^\[)?\[[0-9;]*m|\x1b\][^\x07]*\x07|\x1b[()][A-Za-z0-9]")
GPU_COLUMN = re.compile(r"GPU(\d+)")   # a GPU's column name; the group is its index
_NIC_LEGEND = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")
# A device column name is one word; "CPU Affinity" etc. start with these reserved words.
_RESERVED_WORDS = {"CPU", "NUMA", "GPU", "Affinity", "ID"}
_KNOWN_PHRASES = (("GPU", "NUMA", "ID"), ("CPU", "Affinity"), ("NUMA", "Affinity"))
_AFFINITY_KEYS = {"CPU Affinity": "cpu_affinity", "NUMA Affinity": "numa_affinity", "NUMA": "numa_affinity",
                  "GPU NUMA ID": "gpu_numa_id"}
_CPU_LIST = r"N/A|\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*"
_COLUMN_PATTERNS = {"cpu_affinity": re.compile(rf"(?:{_CPU_LIST})"),
                    "numa_affinity": re.compile(rf"(?:{_CPU_LIST})"),
                    "gpu_numa_id": re.compile(r"N/A|\d+")}


def _clean(text: str) -> list:
    text = _ANSI.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))
    out = []
    for ln in text.split("\n"):
        # A matrix pasted as a Markdown table: "| GPU0 | X | NV18 |" and a "|---|---|" rule.
        if re.fullmatch(r"\s*\|.*\|\s*", ln):
            if re.fullmatch(r"[\s|:-]*", ln):
                continue
            ln = "\t".join(c.strip() for c in ln.strip().strip("|").split("|"))
        out.append(ln.rstrip())
    return out


_GLUED_PART = r"(?:GPU|NIC)\d+|mlx\d+_(?:bond_)?\d+"


def _split_glued_gpus(tok: str) -> list:
    # A header whose tabs were lost in a Markdown paste reads "GPU0GPU1GPU2mlx5_0".
    if tok.startswith("GPU") and re.fullmatch(rf"(?:{_GLUED_PART}){{2,}}", tok):
        return re.findall(_GLUED_PART, tok)
    return [tok]


def _header_columns(line: str) -> tuple:
    """(device column names, trailing column names) of a header line."""
    if "\t" in line:
        raw = [c.strip() for c in line.split("\t") if c.strip()]
        toks = [t for c in raw for t in (_split_glued_gpus(c) if " " not in c else [c])]
    else:
        words = [t for w in line.split() for t in _split_glued_gpus(w)]
        toks, i = [], 0
        while i < len(words):
            for phrase in _KNOWN_PHRASES:
                if tuple(words[i:i + len(phrase)]) == phrase:
                    toks.append(" ".join(phrase))
                    i += len(phrase)
                    break
            else:
                toks.append(words[i])
                i += 1
    devices = []
    for t in toks:
        if " " in t or t in _RESERVED_WORDS or not re.fullmatch(r"[A-Za-z][\w.:-]*", t):
            break
        devices.append(t)
    return devices, toks[len(devices):]


def _is_header(line: str) -> bool:
    words = line.split()
    if not words:
        return False
    first = _split_glued_gpus(words[0])
    if not re.fullmatch(r"GPU\d+", first[0]):
        return False
    rest = first[1:] + words[1:]
    return not rest or not _looks_like_label(rest[0])


def has_header(text: str) -> bool:
    """Whether the text has a header row naming GPU columns (``nvidia-smi topo -m`` lists a GPU)."""
    return any(_is_header(ln) for ln in _clean(text))


def _looks_like_label(tok: str) -> bool:
    return tok == "X" or re.fullmatch(r"NV\d+|PIX|PXB|PHB|NODE|SYS|SOC", tok) is not None


def _assign_trailing(tokens: list, keys: list) -> Optional[list]:
    """Place ``tokens`` (in order) into ``keys`` so that each value fits its column's pattern;
    the earliest columns win when several placements fit. None when nothing fits."""
    for chosen in itertools.combinations(range(len(keys)), len(tokens)):
        ok = all(keys[c] not in _COLUMN_PATTERNS or _COLUMN_PATTERNS[keys[c]].fullmatch(t)
                 for c, t in zip(chosen, tokens))
        if ok:
            out = [None] * len(keys)
            for c, t in zip(chosen, tokens):
                out[c] = t
            return out
    return None


@dataclass
class Matrix:
    """What :func:`read_matrix` reads from the text: the device columns, the links between them
    ({(row device, column device): Link}), each GPU row's affinity columns, the NIC legend, the
    names of the affinity columns and what a cut-off paste lacked."""
    devices: list
    links: dict
    extras: dict
    nic_legend: dict
    affinity_columns: list
    warnings: list


def _header(lines: list) -> tuple:
    """(index of the header line, its device columns, its trailing columns, the GPU columns),
    each checked."""
    head = next((i for i, ln in enumerate(lines) if _is_header(ln)), None)
    if head is None:
        first_row = next((i for i, ln in enumerate(lines) if ln.split() and re.fullmatch(r"GPU\d+", ln.split()[0])), None)
        where = (f"line {first_row + 1} ({lines[first_row].strip()[:40]!r}) is a matrix row, but no header row "
                 f"came before it" if first_row is not None else "no line starts with GPU0")
        raise TopologyParseError(f"not `nvidia-smi topo -m` output: {where}; expected a header row naming the "
                                 f"columns, such as 'GPU0  GPU1  CPU Affinity'")
    devices, trailing = _header_columns(lines[head])
    hl = head + 1
    if not devices:
        raise TopologyParseError(f"line {hl}: the header names no device columns (expected GPU0 GPU1 ...)")
    dup = sorted({d for d in devices if devices.count(d) > 1})
    if dup:
        raise TopologyParseError(f"line {hl}: the header names {', '.join(dup)} twice")
    gpu_cols = [d for d in devices if GPU_COLUMN.fullmatch(d)]
    if not gpu_cols:
        raise TopologyParseError(f"line {hl}: the header names no GPU column (expected GPU0 ...)")
    return head, devices, trailing, gpu_cols


def _gpu_row_extras(ln: str, lineno: int, label: str, rest: list, n: int, keys: list, trailing: list) -> dict:
    """The values after a GPU row's link cells (CPU and NUMA affinity, ...), by column."""
    if len(rest) > len(keys):
        raise TopologyParseError(f"line {lineno}: row {label} has {len(rest)} values after its {n} link "
                                 f"cells but the header has {len(keys)} more columns "
                                 f"({', '.join(trailing) or 'none'})")
    placed = None
    if "\t" in ln:
        # nvidia-smi separates cells by tabs; when the count matches the header exactly,
        # an empty cell is a real empty value and position decides.
        raw = [c.strip() for c in ln.split("\t")]
        raw = raw[1 + n:] if raw and raw[0] == label else None
        while raw and raw[-1] == "":
            raw.pop()
        if raw is not None and len(raw) == len(keys):
            placed = [c or None for c in raw]
    if placed is None:
        placed = _assign_trailing(rest, keys)
    if placed is None:
        raise TopologyParseError(f"line {lineno}: row {label}: cannot match the values {rest} to the "
                                 f"columns {trailing}")
    return {k: (None if v in (None, "", "N/A") else v) for k, v in zip(keys, placed)}


def _link_cells(lineno: int, label: str, vals: list, devices: list, last_line: bool) -> int:
    """How many of a row's values are link labels; raises when fewer than the columns (a NIC
    row on the text's last line, cut short, is the caller's to note)."""
    n = len(devices)
    good = 0
    while good < min(n, len(vals)) and _looks_like_label(vals[good]):
        good += 1
    if good < n and good < len(vals) and not re.fullmatch(_CPU_LIST, vals[good]):
        raise TopologyParseError(f"line {lineno} (row {label}, column {devices[good]}): unknown link label "
                                 f"{vals[good]!r}; expected {_LABEL_HELP}")
    return good


def _rows(lines: list, head: int, devices: list, trailing: list, gpu_cols: list, notes: list) -> tuple:
    """Read the matrix rows after the header: (cells {(row, column): label}, row_line {device:
    line number}, extras {GPU: {column: value}}, index of the first line after the rows)."""
    n, hl = len(devices), head + 1
    keys = [_AFFINITY_KEYS.get(t, t) for t in trailing]
    cells, row_line, extras = {}, {}, {}
    i = head + 1
    while i < len(lines) and len(row_line) < n:
        ln = lines[i]
        words = ln.split()
        if not words:
            i += 1
            continue
        label = words[0]
        last_line = not any(x.split() for x in lines[i + 1:])
        if label not in devices:
            if GPU_COLUMN.fullmatch(label) or (len(words) > 1 and _looks_like_label(words[1])):
                raise TopologyParseError(f"line {i + 1}: row {label!r} is not a column of the header "
                                         f"(line {hl}: {' '.join(devices)})")
            break  # the matrix ended (legend, prompt, other text)
        if label in row_line:
            raise TopologyParseError(f"line {i + 1}: a second row for {label} (the first is line {row_line[label]})")
        vals = words[1:]
        good = _link_cells(i + 1, label, vals, devices, last_line)
        if good < n and label not in gpu_cols and last_line and good == len(vals):
            # The paste ends inside this NIC row: read it as missing (the warning says so).
            notes.append(f"line {i + 1}: row {label} is cut off after {good} of its {n} link cells")
            i += 1
            break
        if good < n:
            cut = "; the text ends here, so the paste looks cut off: copy every GPU row" if last_line else ""
            raise TopologyParseError(f"line {i + 1}: row {label} has {good} link cells, expected {n} "
                                     f"(one per column: {' '.join(devices)}){cut}")
        for col, lab in zip(devices, vals[:n]):
            cells[(label, col)] = lab
        if label in gpu_cols:
            extras[label] = _gpu_row_extras(ln, i + 1, label, vals[n:], n, keys, trailing)
        row_line[label] = i + 1
        i += 1
    return cells, row_line, extras, i


def _missing_rows(lines: list, i: int, hl: int, devices: list, gpu_cols: list, row_line: dict, notes: list) -> list:
    """The devices without a row: none may be a GPU; NIC rows a cut-off paste lacks are noted."""
    n = len(devices)
    j = i
    while j < len(lines) and not lines[j].split():
        j += 1
    if j < len(lines) and len(row_line) == n:
        words = lines[j].split()
        if GPU_COLUMN.fullmatch(words[0]) or (len(words) > 1 and _looks_like_label(words[1])):
            raise TopologyParseError(f"line {j + 1}: row {words[0]!r} is not a column of the header "
                                     f"(line {hl}: {' '.join(devices)})")
    missing = [d for d in devices if d not in row_line]
    missing_gpus = [d for d in missing if d in gpu_cols]
    if missing_gpus:
        plural = "s" if len(missing_gpus) > 1 else ""
        raise TopologyParseError(f"line {i + 1 if i < len(lines) else len(lines)}: the matrix ended without the "
                                 f"GPU row{plural} {', '.join(missing_gpus)} (the header on line {hl} names "
                                 f"{len(gpu_cols)} GPUs: {' '.join(gpu_cols)}); copy the whole output of "
                                 f"`nvidia-smi topo -m`, every GPU row included")
    if missing:
        notes.append(f"the text ends without the NIC row{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                     f"(the header on line {hl} names {'them' if len(missing) > 1 else 'it'}): the GPU matrix and "
                     f"the GPU-NIC links are read from the GPU rows; the links between NICs are unknown")
    return missing


def _links(devices: list, cells: dict, row_line: dict, missing: list) -> dict:
    """{(a, b): Link} of every pair, the matrix checked: X on the diagonal only, symmetric."""
    links: dict = {}
    for a in devices:
        for b in devices:
            if a in missing:
                continue  # a NIC row the text lacks: its links come from the GPU rows (NIC-NIC stays unknown)
            lab = cells[(a, b)]
            if a == b:
                if lab != "X":
                    raise TopologyParseError(f"line {row_line[a]} (row {a}): the diagonal cell must be 'X' "
                                             f"(a device to itself), found {lab!r}")
                continue
            if lab == "X":
                raise TopologyParseError(f"line {row_line[a]} (row {a}, column {b}): 'X' means self and may "
                                         f"appear only on the diagonal")
            if b not in missing and cells[(b, a)] != lab:
                raise TopologyParseError(f"line {row_line[a]} (row {a}): {a}-{b} is {lab!r} but line {row_line[b]} "
                                         f"(row {b}) says {b}-{a} is {cells[(b, a)]!r}; expected a symmetric "
                                         f"matrix")
            try:
                links[(a, b)] = parse_link(lab)
            except ValueError as exc:
                raise TopologyParseError(f"line {row_line[a]} (row {a}, column {b}): {exc}") from None
            if b in missing:
                links[(b, a)] = links[(a, b)]
    return links


def _nic_legend(lines: list, devices: list, notes: list) -> dict:
    """{NIC column: device name} from the "NIC0: mlx5_0" lines; NICs without one are noted."""
    legend = {}
    for ln in lines:
        m = _NIC_LEGEND.match(ln)
        if m:
            legend[m.group(1)] = m.group(2)
    unnamed = [c for c in devices if re.fullmatch(r"NIC\d+", c) and c not in legend]
    if unnamed:
        keep = "they keep their column names" if len(unnamed) > 1 else "it keeps its column name"
        notes.append(f"no NIC Legend for {', '.join(unnamed)}: the text ends before the lines 'NIC0: <device>' "
                     f"that name the NICs, so {keep}")
    return legend


def read_matrix(text: str) -> Matrix:
    """Read the text of ``nvidia-smi topo -m`` (:func:`ddlab.system.topology.parse_topo_matrix`
    makes the :class:`~ddlab.system.topology.Topology` of it).

    Raises :class:`TopologyParseError` naming the line and what was expected when the text
    has no header, ragged rows, unknown labels, missing GPU rows, extra rows, or an asymmetric
    matrix. A paste cut off after its GPU rows (NIC rows missing, the last one cut short, or
    the ``NIC Legend`` missing) is read with a :class:`TopologyWarning` instead: the GPU matrix
    and the GPU-NIC links (from the GPU rows) are complete, the NIC-NIC links are unknown."""
    if not isinstance(text, str):
        raise TypeError(f"parse_topo_matrix needs the text of `nvidia-smi topo -m`, got {type(text).__name__}")
    lines = _clean(text)
    head, devices, trailing, gpu_cols = _header(lines)
    notes: list = []        # what a truncated paste lacked (becomes Topology.warnings)
    cells, row_line, extras, i = _rows(lines, head, devices, trailing, gpu_cols, notes)
    missing = _missing_rows(lines, i, head + 1, devices, gpu_cols, row_line, notes)
    links = _links(devices, cells, row_line, missing)
    legend = _nic_legend(lines[i:], devices, notes)
    for note in notes:
        # stacklevel 3: the warning names the line that called parse_topo_matrix
        _warnings.warn(f"`nvidia-smi topo -m` text looks cut off: {note}", TopologyWarning, stacklevel=3)
    return Matrix(devices=devices, links=links, extras=extras, nic_legend=legend,
                  affinity_columns=list(trailing), warnings=notes)

