"""How the GPUs of a machine are connected: read ``nvidia-smi topo -m``, rank the pairs,
pick the best subset of k GPUs, describe it in words, and draw it.

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

Quick use::

    from ddlab.system import topology
    topo = topology.Topology.from_system()        # this machine (raises NoGPUError without one)
    topo = topology.recorded("dgx1-v100")          # a recorded machine, see recorded_names()
    topo.link(0, 1).label, topo.ranked_pairs(), topo.best_subset(4), print(topo.summary())
    topo.draw()

Link quality is one number, ``Link.rank``: ``100 + n`` for ``NV<n>`` (more bonded NVLinks is
better), then PIX 50 > PXB 40 > PHB 30 > NODE 20 > SYS 10. The order is the one nvidia-smi's
legend describes (each step adds a longer PCIe/CPU path) and the one NCCL_P2P_LEVEL uses.

Length (about 1,200 lines), on purpose for now: the parser of every `nvidia-smi topo -m` variant, the
Topology it builds, the ring search behind best_subset and the drawing all share the link model
above. The drawing is the part to move out next (it needs only Topology's public methods).
"""
from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import warnings as _warnings
from dataclasses import dataclass, field
from typing import Optional, Union

# What each `nvidia-smi topo -m` link kind means, and the link catalogue: ddlab.system.links (below this module).
from ddlab.system.links import LINK_KINDS
from ddlab.base.tables import Table

REFERENCE_KIND = "topologies"  # source_code/reference/topologies/<name>.json


class TopologyParseError(ValueError):
    """The text is not a ``nvidia-smi topo -m`` matrix; the message names the line and what
    was expected there."""


class TopologyWarning(UserWarning):
    """The text was read, but part of it was missing (a paste cut off after the GPU rows)."""


class NoGPUError(RuntimeError):
    """This machine has no usable NVIDIA GPU or no ``nvidia-smi``."""


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
_GPU = re.compile(r"GPU(\d+)")
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


def parse_topo_matrix(text: str) -> "Topology":
    """Parse the text of ``nvidia-smi topo -m`` into a :class:`Topology`.

    Raises :class:`TopologyParseError` naming the line and what was expected when the text
    has no header, ragged rows, unknown labels, missing GPU rows, extra rows, or an asymmetric
    matrix. A paste cut off after its GPU rows (NIC rows missing, the last one cut short, or
    the ``NIC Legend`` missing) is read with a :class:`TopologyWarning` instead: the GPU matrix
    and the GPU-NIC links (from the GPU rows) are complete, the NIC-NIC links are unknown."""
    if not isinstance(text, str):
        raise TypeError(f"parse_topo_matrix needs the text of `nvidia-smi topo -m`, got {type(text).__name__}")
    lines = _clean(text)
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
    gpu_cols = [d for d in devices if _GPU.fullmatch(d)]
    if not gpu_cols:
        raise TopologyParseError(f"line {hl}: the header names no GPU column (expected GPU0 ...)")
    keys = [_AFFINITY_KEYS.get(t, t) for t in trailing]
    n = len(devices)

    cells: dict = {}        # (row device, column device) -> label
    row_line: dict = {}     # device -> line number (1-based) of its row
    extras: dict = {}       # GPU device -> {key: value or None}
    notes: list = []        # what a truncated paste lacked (becomes Topology.warnings)
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
            if _GPU.fullmatch(label) or (len(words) > 1 and _looks_like_label(words[1])):
                raise TopologyParseError(f"line {i + 1}: row {label!r} is not a column of the header "
                                         f"(line {hl}: {' '.join(devices)})")
            break  # the matrix ended (legend, prompt, other text)
        if label in row_line:
            raise TopologyParseError(f"line {i + 1}: a second row for {label} (the first is line {row_line[label]})")
        vals = words[1:]
        good = 0
        while good < min(n, len(vals)) and _looks_like_label(vals[good]):
            good += 1
        if good < n and label not in gpu_cols and last_line and good == len(vals):
            # The paste ends inside this NIC row: read it as missing (the warning says so).
            notes.append(f"line {i + 1}: row {label} is cut off after {good} of its {n} link cells")
            i += 1
            break
        if good < n:
            if good < len(vals) and not re.fullmatch(_CPU_LIST, vals[good]):
                col = devices[good]
                raise TopologyParseError(f"line {i + 1} (row {label}, column {col}): unknown link label "
                                         f"{vals[good]!r}; expected {_LABEL_HELP}")
            cut = "; the text ends here, so the paste looks cut off: copy every GPU row" if last_line else ""
            raise TopologyParseError(f"line {i + 1}: row {label} has {good} link cells, expected {n} "
                                     f"(one per column: {' '.join(devices)}){cut}")
        for col, lab in zip(devices, vals[:n]):
            cells[(label, col)] = lab
        rest = vals[n:]
        if label in gpu_cols:
            if len(rest) > len(keys):
                raise TopologyParseError(f"line {i + 1}: row {label} has {len(rest)} values after its {n} link "
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
                raise TopologyParseError(f"line {i + 1}: row {label}: cannot match the values {rest} to the "
                                         f"columns {trailing}")
            extras[label] = {k: (None if v in (None, "", "N/A") else v) for k, v in zip(keys, placed)}
        row_line[label] = i + 1
        i += 1
    j = i
    while j < len(lines) and not lines[j].split():
        j += 1
    if j < len(lines) and len(row_line) == n:
        words = lines[j].split()
        if _GPU.fullmatch(words[0]) or (len(words) > 1 and _looks_like_label(words[1])):
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
            if b in missing:
                try:
                    links[(a, b)] = links[(b, a)] = parse_link(lab)
                except ValueError as exc:
                    raise TopologyParseError(f"line {row_line[a]} (row {a}, column {b}): {exc}") from None
                continue
            if cells[(b, a)] != lab:
                raise TopologyParseError(f"line {row_line[a]} (row {a}): {a}-{b} is {lab!r} but line {row_line[b]} "
                                         f"(row {b}) says {b}-{a} is {cells[(b, a)]!r}; expected a symmetric "
                                         f"matrix")
            try:
                links[(a, b)] = parse_link(lab)
            except ValueError as exc:
                raise TopologyParseError(f"line {row_line[a]} (row {a}, column {b}): {exc}") from None

    legend = {}
    for ln in lines[i:]:
        m = _NIC_LEGEND.match(ln)
        if m:
            legend[m.group(1)] = m.group(2)
    unnamed = [c for c in devices if re.fullmatch(r"NIC\d+", c) and c not in legend]
    if unnamed:
        keep = "they keep their column names" if len(unnamed) > 1 else "it keeps its column name"
        notes.append(f"no NIC Legend for {', '.join(unnamed)}: the text ends before the lines 'NIC0: <device>' "
                     f"that name the NICs, so {keep}")
    for note in notes:
        _warnings.warn(f"`nvidia-smi topo -m` text looks cut off: {note}", TopologyWarning, stacklevel=2)
    return Topology(text=text, devices=devices, links=links, extras=extras, nic_legend=legend,
                    affinity_columns=list(trailing), warnings=notes)


# ----------------------------------------------------------------------------- results
@dataclass
class PairGroup:
    """Pairs whose links are equally good. ``place`` 1 is the best group."""
    place: int
    label: str
    kind: str
    rank: int
    pairs: list

    def to_dict(self) -> dict:
        return {"place": self.place, "label": self.label, "kind": self.kind, "rank": self.rank,
                "pairs": [list(p) for p in self.pairs]}


@dataclass
class Subset:
    """k GPUs scored for a ring all-reduce.

    ``ring`` is the order of the best ring over them (it closes from the last GPU back to the
    first) and ``ring_links`` its links in that order: ``ring[i]`` to ``ring[i + 1]``, the last
    one back to ``ring[0]`` (one link for 2 GPUs, none for 1). The best ring is the one whose
    slowest link is fastest, then the one with the largest sum of link ranks. ``weakest`` is
    the weakest link between *any* two of the GPUs and ``total_rank`` the sum of all their
    pairwise link ranks: a ring never uses most of those pairs, so they only break ties."""
    gpus: tuple
    weakest: Optional[Link]
    total_rank: int
    ring: tuple = ()
    ring_links: tuple = ()

    @property
    def ring_bottleneck(self) -> Optional[Link]:
        """The ring's slowest link: it sets the bandwidth of a ring all-reduce."""
        return min(self.ring_links, key=lambda ln: ln.rank) if self.ring_links else None

    @property
    def ring_total(self) -> int:
        """The sum of the ring's link ranks (the tie-break between rings with one bottleneck)."""
        return sum(ln.rank for ln in self.ring_links)

    def ring_text(self) -> str:
        """'0 -NV2- 3 -NV2- 2 -NV1- 0': the ring, each link labelled, back to its start
        (two GPUs: '0 -NV2- 1', the one link used both ways)."""
        stops = list(self.ring) + ([self.ring[0]] if len(self.ring) > 2 else [])
        return " ".join([str(stops[0])] + [f"-{ln.label}- {g}" for ln, g in zip(self.ring_links, stops[1:])])

    def to_dict(self) -> dict:
        bn = self.ring_bottleneck
        return {"gpus": list(self.gpus), "weakest": self.weakest.label if self.weakest else None,
                "total_rank": self.total_rank, "ring": list(self.ring),
                "ring_links": [ln.label for ln in self.ring_links],
                "ring_bottleneck": bn.label if bn else None, "ring_total": self.ring_total}


_NO_LINK = 10 ** 9   # "no link yet" in the searches below: above every rank


def _best_ring(members: list, rank: dict, stats: Optional[dict] = None, floor: Optional[tuple] = None) -> tuple:
    """(bottleneck rank, sum of ranks, order) of the best ring over ``members`` (sorted):
    the Hamiltonian cycle whose slowest link is fastest, then whose rank sum is largest, then
    the first in ascending order. Branch and bound from the lowest GPU; at most (k-1)! leaves
    (5040 for 8 GPUs), far fewer in practice: a partial ring stops when its optimistic key
    (its slowest link so far; every GPU still to visit needing two links among the GPUs it can
    still reach) cannot beat the best ring found, or falls below ``floor`` (bottleneck, sum),
    a key the caller already has elsewhere. (None, None, None) when no ring reaches ``floor``."""
    k = len(members)
    start = members[0]
    if k == 2:
        r = rank[(members[0], members[1])]
        return (r, r, tuple(members)) if floor is None or (r, r) >= floor else (None, None, None)
    best = [(-1, -1) if floor is None else floor, None]
    path, visited = [start], {start}

    def extend(cur_min: int, cur_sum: int):
        if stats is not None:
            stats["ring_nodes"] = stats.get("ring_nodes", 0) + 1
        end = path[-1]
        if len(path) == k:
            r = rank[(end, start)]
            key = (min(cur_min, r), cur_sum + r)
            if key > best[0] or (best[1] is None and key == best[0]):
                best[0], best[1] = key, tuple(path)
            return
        left = [u for u in members if u not in visited]
        end_best = max(rank[(end, u)] for u in left)
        start_best = max(rank[(start, u)] for u in left)
        bn_ub, sum2_ub = min(cur_min, end_best, start_best), 2 * cur_sum + end_best + start_best
        # A GPU still to visit has two ring links, to other such GPUs or to the path's two ends.
        for u in left:
            reach = [rank[(u, w)] for w in left if w != u] + [rank[(u, end)], rank[(u, start)]]
            two = sorted(reach, reverse=True)[:2]
            bn_ub = min(bn_ub, two[1])
            sum2_ub += two[0] + two[1]
        # Each link still to add counts at both its ends, hence twice the sum.
        target = (best[0][0], 2 * best[0][1])
        if (bn_ub, sum2_ub) < target or (best[1] is not None and (bn_ub, sum2_ub) == target):
            return
        for u in left:
            r = rank[(end, u)]
            path.append(u)
            visited.add(u)
            extend(min(cur_min, r), cur_sum + r)
            path.pop()
            visited.discard(u)

    extend(_NO_LINK, 0)
    if best[1] is None:
        return None, None, None
    return best[0][0], best[0][1], best[1]


def _widest_connection(members: list, pool: list, rank: dict) -> int:
    """The best rank t such that links of rank >= t join all of ``members`` through GPUs of
    ``pool``. A ring over them contains such a path between any two, so its bottleneck is at
    most t: a subset that spans two CPU sockets, say, cannot have a ring faster than SYS."""
    if len(members) < 2:
        return _NO_LINK
    for t in sorted({rank[(a, b)] for a in pool for b in pool if a != b}, reverse=True):
        seen, todo = {members[0]}, [members[0]]
        while todo:
            a = todo.pop()
            for b in pool:
                if b not in seen and rank[(a, b)] >= t:
                    seen.add(b)
                    todo.append(b)
        if all(v in seen for v in members):
            return t
    return min(rank[(a, b)] for a in pool for b in pool if a != b)


def _subset_bound(members: list, candidates: list, pair_min: int, pair_total: int, rank: dict, k: int,
                  deg: int) -> tuple:
    """An upper bound, item by item, of the key (ring bottleneck, 2 x ring sum, weakest pair,
    2 x pair sum) of any k-subset made of ``members`` and k - len(members) of ``candidates``.
    Each GPU of the subset has ``deg`` ring links and k - 1 partners: the members and, of the
    candidates, only as many as are still to pick; so the best links it can have among those
    bound what it contributes (for the GPUs still to pick, the best of those bounds). And the
    ring's bottleneck cannot beat the weakest link needed to join the members at all."""
    need = k - len(members)

    def best_links(v):
        known = [rank[(v, u)] for u in members if u != v]
        extra = sorted((rank[(v, c)] for c in candidates if c != v), reverse=True)
        return sorted(known + extra[:need - (0 if v in members else 1)], reverse=True)

    mine = {v: best_links(v) for v in members + candidates}
    bn = [_widest_connection(members, members + candidates, rank)] + [mine[v][deg - 1] for v in members]
    weak = [pair_min] + [mine[v][k - 2] for v in members]
    ring2 = sum(sum(mine[v][:deg]) for v in members)
    total2 = 2 * pair_total
    if need:
        bn.append(sorted((mine[c][deg - 1] for c in candidates), reverse=True)[need - 1])
        ring2 += sum(sorted((sum(mine[c][:deg]) for c in candidates), reverse=True)[:need])
        # A GPU still to pick links to every member (known) and to need - 1 other picks.
        gains = []
        for c in candidates:
            to_picks = sorted((rank[(c, u)] for u in candidates if u != c), reverse=True)[:need - 1]
            gains.append(2 * sum(rank[(c, u)] for u in members) + sum(to_picks))
        total2 += sum(sorted(gains, reverse=True)[:need])
    return (min(bn), ring2, min(weak), total2)


def _search_best_subset(gpus: list, rank: dict, k: int, stats: Optional[dict] = None) -> tuple:
    """The k of ``gpus`` with the best key (ring bottleneck, ring sum, weakest pair, sum of all
    pair ranks); ties go to the lowest GPU numbers. Branch and bound over subsets in ascending
    order: a partial subset stops when even its optimistic key (:func:`_subset_bound`) cannot
    beat the best found. Returns (members, key, ring order). ``stats`` counts the nodes.

    On at most 8 GPUs no search costs more than the exhaustive C(8, k) subsets x (k-1)! rings
    (a few thousand nodes, well under a second for every k). On larger machines an all-equal
    fabric (NVSwitch) stays at a few nodes per GPU, but a 12-16 GPU PCIe tree with rings that
    must cross sockets can take seconds for large k: the bounds leave many rings to try.""" 
    deg = 2 if k >= 3 else 1          # links per GPU in the ring
    best = [None, None, None]         # members, key, ring

    def grow(members: list, pair_min: int, pair_total: int, candidates: list):
        if stats is not None:
            stats["subset_nodes"] = stats.get("subset_nodes", 0) + 1
        m = len(members)
        if m == k:
            # Only a ring at least as good as the best subset's can make this subset win.
            bn, ring_sum, order = _best_ring(members, rank, stats, floor=best[1][:2] if best[1] else None)
            if order is None:
                return
            key = (bn, ring_sum, pair_min, pair_total)
            if best[1] is None or key > best[1]:
                best[0], best[1], best[2] = list(members), key, order
            return
        if m + len(candidates) < k:
            return
        if best[1] is not None and _subset_bound(members, candidates, pair_min, pair_total, rank, k, deg) <= \
                (best[1][0], 2 * best[1][1], best[1][2], 2 * best[1][3]):
            return
        for idx, v in enumerate(candidates):
            links = [rank[(v, u)] for u in members]
            grow(members + [v], min([pair_min] + links), pair_total + sum(links), candidates[idx + 1:])

    grow([], _NO_LINK, 0, list(gpus))
    return best[0], best[1], best[2]


def _ranges(nums: list) -> str:
    """[0, 1, 2, 5] -> 'GPU0-2, GPU5' for summaries."""
    out, nums = [], sorted(nums)
    start = prev = None
    for x in nums + [None]:
        if start is None:
            start = prev = x
        elif x is not None and x == prev + 1:
            prev = x
        else:
            out.append(f"GPU{start}" if start == prev else f"GPU{start}-{prev}")
            start = prev = x
    return ", ".join(out)


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
        return sorted(int(_GPU.fullmatch(d).group(1)) for d in self.devices if _GPU.fullmatch(d))

    @property
    def nic_columns(self) -> list:
        """NIC columns as the matrix prints them (``NIC0`` or ``mlx5_0``)."""
        return [d for d in self.devices if not _GPU.fullmatch(d)]

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

    def pairs(self) -> list:
        return list(itertools.combinations(self.gpus, 2))

    # -- analysis
    def ranked_pairs(self) -> list:
        """GPU pairs from best link to worst, ties kept together: a list of :class:`PairGroup`
        (``place``, ``label``, ``kind``, ``rank``, ``pairs``), best first."""
        by_rank: dict = {}
        for i, j in self.pairs():
            by_rank.setdefault(self.link(i, j).rank, []).append((i, j))
        groups = []
        for place, r in enumerate(sorted(by_rank, reverse=True), 1):
            ps = sorted(by_rank[r])
            labels = sorted({self.link(i, j).label for i, j in ps})
            first = self.link(*ps[0])
            groups.append(PairGroup(place, "/".join(labels), first.kind, r, ps))
        return groups

    def best_subset(self, k: int) -> Subset:
        """The k GPUs that make the best ring for an all-reduce, with that ring.

        All-reduce runs on rings (reduce-scatter then all-gather, each GPU sending to the next),
        so its bandwidth is set by the slowest link *on the ring*, not by the weakest pair
        among the k GPUs. Subsets are ranked by, in order: the bottleneck link of their best
        ring, that ring's sum of link ranks, the weakest pair among them, the sum of all their
        pair ranks, and the lowest GPU numbers. On a DGX-1 V100 (hybrid cube-mesh), GPUs 0, 1,
        4 and 5 have a SYS pair (0-5) but the all-NVLink ring 0-1-5-4.

        Exact (branch and bound, see :func:`_search_best_subset`); an 8-GPU machine scores at
        most C(8, k) subsets of at most (k-1)!/2 rings each, and pruning cuts most of them."""
        gpus = self.gpus
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= len(gpus):
            raise ValueError(f"k must be a whole number from 1 to {len(gpus)} (the GPUs in this topology), got {k!r}")
        if k == 1:
            return Subset((gpus[0],), None, 0, ring=(gpus[0],))
        rank = {(i, j): self.link(i, j).rank for i in gpus for j in gpus if i != j}
        members, _, order = _search_best_subset(gpus, rank, k)
        return self._subset(members, order)

    def subset(self, gpus) -> Subset:
        """Score GPUs of your choice the way :meth:`best_subset` does: their best ring and its
        bottleneck, their weakest pair. ``topo.subset([0, 1, 4, 5]).ring_text()``."""
        try:
            chosen = sorted({int(g) for g in gpus})
        except (TypeError, ValueError):
            raise ValueError(f"give GPU numbers, like [0, 1, 4, 5]; got {gpus!r}") from None
        unknown = [g for g in chosen if g not in self.gpus]
        if unknown or not chosen:
            raise ValueError(f"GPU{unknown[0] if unknown else '?'} is not on this machine; its GPUs are "
                             f"{', '.join(map(str, self.gpus))}")
        if len(chosen) == 1:
            return Subset((chosen[0],), None, 0, ring=(chosen[0],))
        rank = {(i, j): self.link(i, j).rank for i in chosen for j in chosen if i != j}
        _, _, order = _best_ring(chosen, rank)
        return self._subset(chosen, order)

    def _subset(self, members: list, order: tuple) -> Subset:
        pair_links = [self.link(a, b) for a, b in itertools.combinations(members, 2)]
        hops = list(zip(order, order[1:])) + ([(order[-1], order[0])] if len(order) > 2 else [])
        return Subset(tuple(members), min(pair_links, key=lambda ln: ln.rank), sum(ln.rank for ln in pair_links),
                      ring=tuple(order), ring_links=tuple(self.link(a, b) for a, b in hops))

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

    def summary(self) -> str:
        """A few plain sentences describing the machine."""
        gpus = self.gpus
        n = len(gpus)
        out = [f"{n} GPU{'s' if n != 1 else ''}" + (f" ({self.name})" if self.name else "") + "."]
        if n >= 2:
            groups = self.ranked_pairs()
            npairs = n * (n - 1) // 2
            if len(groups) == 1:
                g = groups[0]
                if g.kind == "NVLINK":
                    what = (f"all {npairs} pairs {g.label} ({self.link(*g.pairs[0]).description} each): every GPU "
                            f"reaches every other at the same NVLink bandwidth, as through an NVSwitch "
                            f"(NVSwitch-class)") if n > 2 else (
                        f"the pair GPU{gpus[0]}-GPU{gpus[1]} is {g.label} ({self.link(*g.pairs[0]).description})")
                else:
                    what = (f"all {npairs} pairs {g.label}: no NVLink, every pair goes "
                            f"{LINK_KINDS[g.kind]['path']}") if n > 2 else (
                        f"the pair GPU{gpus[0]}-GPU{gpus[1]} is {g.label}: no NVLink; it goes {LINK_KINDS[g.kind]['path']}")
                out.append(what[0].upper() + what[1:] + ".")
            else:
                parts = [f"{len(g.pairs)} pair{'s' if len(g.pairs) != 1 else ''} {g.label}" for g in groups]
                out.append(f"Links between GPU pairs, best first: {', '.join(parts)}.")
                best, worst = groups[0], groups[-1]
                out.append(f"Best: {self._pair_list(best.pairs)} ({best.label}, "
                           f"{self.link(*best.pairs[0]).description}). Worst: {self._pair_list(worst.pairs)} "
                           f"({worst.label}, {self.link(*worst.pairs[0]).description}).")
                nv = [p for g in groups if g.kind == "NVLINK" for p in g.pairs]
                if nv and len(nv) < npairs:
                    out.append(f"{npairs - len(nv)} of {npairs} pairs have no NVLink: traffic between them "
                               f"takes PCIe (or is relayed by NCCL through another GPU).")
        numa = [grp for grp in self.numa_groups() if grp[0] is not None]
        if len(numa) > 1:
            out.append("CPU/NUMA locality: " + "; ".join(f"{_ranges(gs)} on {key}" for key, gs in numa) + ".")
        elif len(numa) == 1:
            out.append(f"All GPUs are local to {numa[0][0]}.")
        for col, name in zip(self.nic_columns, self.nics):
            ranked = sorted(((self.links[(f"GPU{g}", col)], g) for g in gpus), key=lambda t: -t[0].rank)
            best_rank = ranked[0][0].rank
            near = [g for ln, g in ranked if ln.rank == best_rank]
            ln = ranked[0][0]
            if ln.kind == "PIX":
                rel = "share a PCIe switch with" if len(near) > 1 else "shares a PCIe switch with"
            elif ln.kind == "PXB":
                rel = "sit below the same PCIe switches as" if len(near) > 1 else "sits below the same PCIe switches as"
            else:
                rel = "are closest to" if len(near) > 1 else "is closest to"
            out.append(f"{_ranges(near).replace(', ', ' and ')} {rel} {name} ({ln.label}).")
        return " ".join(out)

    @staticmethod
    def _pair_list(pairs: list, limit: int = 6) -> str:
        shown = ", ".join(f"GPU{i}-GPU{j}" for i, j in pairs[:limit])
        return shown + (f" and {len(pairs) - limit} more" if len(pairs) > limit else "")

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
            row += [ex.get(k) or ("-" if _GPU.fullmatch(r) else "") for k, _ in extra_titles]
            rows.append(row)
        return Table([(f"c{i}", "text", head) for i, head in enumerate(rows[0])], rows[1:], missing="")

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
        if not any(_is_header(ln) for ln in _clean(out.stdout)):
            raise NoGPUError("`nvidia-smi topo -m` lists no GPU on this machine"
                             + (f" ({said[0]})" if said else "") + "." + hint)
        topo = parse_topo_matrix(out.stdout)
        topo.name = "this machine"
        topo.gpu_names = _gpu_names()
        return topo

    # -- drawing
    def draw(self, ax=None, title: Optional[str] = None):
        """Draw the GPUs (boxes), NICs and CPU/NUMA groups with links styled by kind and
        labelled. Returns the matplotlib Axes. GPU boxes carry gid ``gpu:<i>``, NIC boxes
        ``nic:<name>`` and link lines ``link:<i>-<j>`` / ``niclink:<i>-<name>``."""
        return _draw(self, ax=ax, title=title)


def _gpu_names() -> dict:
    """GPU model names by index from ddlab.system.hardware (NVML, else nvidia-smi); empty when unknown.
    Only a label for drawings and summaries, so a failure here must not stop the topology."""
    try:
        from ddlab.system import hardware
        inv = hardware.inventory(software=False, dataset=False)
    except Exception:  # noqa: BLE001 - decoration only; the matrix itself is already read
        return {}
    return {g.index: g.name for g in inv.gpus}


# ----------------------------------------------------------------------------- drawing
# One colour and dash per kind, so a figure reads without its labels: solid green NVLink
# (thicker with more links), blue dashes within PCIe switches, orange through the CPU's
# host bridge, red dots across CPU sockets.
KIND_STYLE = {
    "NVLINK": {"color": "#2e8b57", "linestyle": "-"},
    "PIX": {"color": "#1f77b4", "linestyle": "--"},
    "PXB": {"color": "#5b8fd0", "linestyle": "--"},
    "PHB": {"color": "#e08a00", "linestyle": "-."},
    "NODE": {"color": "#c8652a", "linestyle": "-."},
    "SYS": {"color": "#b22222", "linestyle": ":"},
}
_GROUP_COLORS = ("#dbe9f6", "#fde2cf", "#dff0d8", "#eadcf0", "#fff3bf", "#e0e0e0", "#f6d6dc", "#d5f1ee")


def _line_width(link: Link) -> float:
    return min(1.2 + 0.22 * link.nvlinks, 5.0) if link.kind == "NVLINK" else 1.4


def _draw(topo: Topology, ax=None, title: Optional[str] = None):
    import math

    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import FancyBboxPatch, Patch, Wedge

    gpus = topo.gpus
    n = len(gpus)
    if ax is None:
        size = 5.5 if n <= 2 else (6.5 if n <= 4 else 8.0)
        _, ax = plt.subplots(figsize=(size + 1.5, size))
    # GPUs on one circle, NUMA groups contiguous: chords between points of a circle never cross
    # another GPU's box, and each group gets its own arc of the ring.
    groups = topo.numa_groups()
    order = [g for _, members in groups for g in members]
    radius = 2.0 if n <= 2 else max(2.2, 0.6 * n)
    angle = {}
    for pos, g in enumerate(order):
        a = math.pi if n == 1 else (math.pi / 2 - 2 * math.pi * pos / n + (math.pi / n if n == 2 else 0))
        angle[g] = a
    xy = {g: ((0.0, 0.0) if n == 1 else (radius * math.cos(angle[g]), radius * math.sin(angle[g]))) for g in gpus}
    box_w, box_h = 1.15, 0.62
    placed_labels: list = []
    boxes: list = [(x, y, box_w, box_h) for x, y in xy.values()]  # centre and size of every box

    def free_spot(p0, p1):
        # Try points along the line until one is clear of the boxes and of earlier labels. A
        # chord that passes near the centre of the ring crosses the other long chords there
        # (on a DGX-1 four of them meet in the middle), so its label goes near one end, where
        # the lines fan out and each label sits clearly on its own line.
        dx, dy = p1[0] - p0[0], p1[1] - p0[1]
        off_centre = abs(p0[0] * dy - p0[1] * dx) / max(math.hypot(dx, dy), 1e-9)
        if n >= 4 and off_centre < 0.45 * radius:
            spots = (0.24, 0.76, 0.3, 0.7, 0.2, 0.8, 0.36, 0.64)
        else:
            spots = (0.5, 0.38, 0.62, 0.3, 0.7, 0.44, 0.56, 0.25, 0.75)
        for t in spots:
            x, y = p0[0] + t * (p1[0] - p0[0]), p0[1] + t * (p1[1] - p0[1])
            # Labels are wider than tall: keep them apart by a box, not a circle.
            if all(abs(x - u) > 1.1 or abs(y - v) > 0.4 for u, v in placed_labels) and \
                    all(abs(x - bx) > bw / 2 + 0.3 or abs(y - by) > bh / 2 + 0.15 for bx, by, bw, bh in boxes):
                return x, y
        return p0[0] + 0.5 * (p1[0] - p0[0]), p0[1] + 0.5 * (p1[1] - p0[1])

    def label_at(p0, p1, text, color):
        x, y = free_spot(p0, p1)
        placed_labels.append((x, y))
        ax.text(x, y, text, ha="center", va="center", fontsize=8, color=color, zorder=6,
                bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.9})

    # CPU / NUMA groups: a shaded band along the ring behind the group's GPUs, named in the legend.
    known_groups = [(k, m) for k, m in groups if k is not None]
    group_handles = []
    if known_groups:
        step = 360.0 / max(n, 1)
        for gi, (key, members) in enumerate(known_groups):
            color = _GROUP_COLORS[gi % len(_GROUP_COLORS)]
            if n == 1:
                band = FancyBboxPatch((-0.95, -0.6), 1.9, 1.2, boxstyle="round,pad=0.05", fc=color, ec="none", zorder=0)
            else:
                degs = [math.degrees(angle[g]) for g in members]
                lo, hi = min(degs) - step / 2.2, max(degs) + step / 2.2
                if len(members) == n:
                    lo, hi = 0.0, 360.0
                band = Wedge((0, 0), radius + 0.85, lo, hi, width=1.7, facecolor=color, edgecolor="none",
                             alpha=0.85, zorder=0)
            band.set_gid(f"numa:{key}")
            ax.add_patch(band)
            group_handles.append(Patch(facecolor=color, edgecolor="none", label=key))

    kinds_used = set()
    pair_links = {(i, j): topo.link(i, j) for i, j in topo.pairs()}
    labels = {ln.label for ln in pair_links.values()}
    all_same_nv = n >= 3 and len(labels) == 1 and next(iter(pair_links.values())).kind == "NVLINK"
    any_nv = any(ln.kind == "NVLINK" for ln in pair_links.values())
    if all_same_nv:
        # Every pair equal over NVLink: draw the fabric as a hub instead of n(n-1)/2 chords.
        ln = next(iter(pair_links.values()))
        kinds_used.add("NVLINK")
        st = KIND_STYLE["NVLINK"]
        for g in gpus:
            line, = ax.plot([0, xy[g][0]], [0, xy[g][1]], color=st["color"], linestyle=st["linestyle"],
                            linewidth=_line_width(ln), zorder=2)
            line.set_gid(f"link:{g}-hub")
        hub = FancyBboxPatch((-1.3, -0.42), 2.6, 0.84, boxstyle="round,pad=0.05", fc="#e8f5ec", ec=st["color"], zorder=5)
        hub.set_gid("nvlink-hub")
        ax.add_patch(hub)
        ax.text(0, 0, f"NVLink all-to-all\nevery pair {ln.label}", ha="center", va="center", fontsize=8, zorder=6)
    else:
        for (i, j), ln in sorted(pair_links.items(), key=lambda kv: kv[1].rank):
            st = KIND_STYLE[ln.kind]
            kinds_used.add(ln.kind)
            faint = any_nv and ln.kind != "NVLINK"
            line, = ax.plot([xy[i][0], xy[j][0]], [xy[i][1], xy[j][1]], color=st["color"], linestyle=st["linestyle"],
                            linewidth=0.9 if faint else _line_width(ln), alpha=0.45 if faint else 0.95,
                            zorder=1.5 if faint else 2)
            line.set_gid(f"link:{i}-{j}")
            # Label every NVLink; label PCIe-class pairs too unless NVLink pairs would be buried.
            if not faint or n <= 4:
                label_at(xy[i], xy[j], ln.label, st["color"])

    # NICs outside the ring, next to the GPUs they are closest to.
    nic_r = radius + 2.3
    used_angles: list = []
    for col, name in zip(topo.nic_columns, topo.nics):
        lk = {g: topo.links[(f"GPU{g}", col)] for g in gpus}
        best = max(ln.rank for ln in lk.values())
        near = [g for g in gpus if lk[g].rank == best]
        if n == 1:
            a = -math.pi / 2
        else:
            a = math.atan2(sum(math.sin(angle[g]) for g in near), sum(math.cos(angle[g]) for g in near))
            if len(near) == n:
                a = -math.pi / 2
        for _ in range(24):  # step aside from NICs already placed at this angle
            if all(abs(math.atan2(math.sin(a - u), math.cos(a - u))) >= 0.22 for u in used_angles):
                break
            a += 0.24
        used_angles.append(a)
        p = (nic_r * math.cos(a), nic_r * math.sin(a)) if n > 1 else (2.2 * len(used_angles) - 2.2, -2.2)
        boxes.append((p[0], p[1], 1.0, 0.4))
        nb = FancyBboxPatch((p[0] - 0.5, p[1] - 0.2), 1.0, 0.4, boxstyle="round,pad=0.04", fc="#f4f4f4",
                            ec="#666666", zorder=5)
        nb.set_gid(f"nic:{name}")
        ax.add_patch(nb)
        ax.text(p[0], p[1], name, ha="center", va="center", fontsize=7.5, zorder=6)
        for g in near:
            ln = lk[g]
            st = KIND_STYLE[ln.kind]
            kinds_used.add(ln.kind)
            line, = ax.plot([p[0], xy[g][0]], [p[1], xy[g][1]], color=st["color"], linestyle=st["linestyle"],
                            linewidth=1.0, alpha=0.8, zorder=1.8)
            line.set_gid(f"niclink:{g}-{name}")
            label_at(p, xy[g], ln.label, st["color"])

    for g in gpus:
        x, y = xy[g]
        gb = FancyBboxPatch((x - box_w / 2, y - box_h / 2), box_w, box_h, boxstyle="round,pad=0.04",
                            fc="#76b900", ec="#2f4f00", zorder=7)
        gb.set_gid(f"gpu:{g}")
        ax.add_patch(gb)
        model = topo.gpu_names.get(g, "")
        short = model.replace("NVIDIA ", "").split()[0] if model else ""
        ax.text(x, y, f"GPU{g}" + (f"\n{short}" if short else ""), ha="center", va="center", fontsize=9,
                fontweight="bold", color="white", zorder=8)

    handles = []
    for kind in ("NVLINK", "PIX", "PXB", "PHB", "NODE", "SYS"):
        if kind in kinds_used:
            st = KIND_STYLE[kind]
            name = "NV# (NVLink)" if kind == "NVLINK" else ("SYS/SOC" if kind == "SYS" else kind)
            handles.append(Line2D([], [], color=st["color"], linestyle=st["linestyle"], linewidth=2, label=name))
    if handles or group_handles:
        ax.legend(handles=handles + group_handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8,
                  frameon=False, title="link kind / CPU-NUMA group", title_fontsize=8)
    extent = (nic_r + 0.8) if topo.nic_columns else (radius + 1.2)
    if n == 1:
        extent = 2.5 if not topo.nic_columns else 3.5
    ax.set_xlim(-extent, extent)
    ax.set_ylim(-extent, extent)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(title or f"{topo.name or 'topology'}: {n} GPU{'s' if n != 1 else ''}"
                 + (f", {len(topo.nics)} NIC{'s' if len(topo.nics) != 1 else ''}" if topo.nics else ""))
    return ax


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


# ----------------------------------------------------------------------------- report and CLI
def report(topo: Topology) -> str:
    """What ``ddlab topo`` prints: matrix, ranked pairs, best subsets, summary."""
    lines = []
    title = topo.name or "topology"
    lines.append(f"== {title}" + (f": {topo.description}" if topo.description else ""))
    prov = topo.provenance or {}
    if prov.get("cited"):
        lines.append(f"   (written from published facts, not measured: {prov.get('source')})")
    elif prov.get("illustrative"):
        lines.append(f"   (illustrative example, not a measurement: {prov.get('note', '')})")
    elif prov.get("date"):
        from ddlab.system.hardware import machine_label  # named from the recorded hardware, not the free-text label
        lines.append(f"   (captured on {machine_label(prov, topo)}, {str(prov.get('date'))[:10]})")
    lines += ["", topo.matrix_table(), ""]
    gpus = topo.gpus
    if len(gpus) >= 2:
        lines += ["GPU pairs, best link first (ties on one line):", ranked_pairs_table(topo), ""]
    if len(gpus) >= 3:
        lines += ["Best k GPUs for a ring all-reduce (the ring's slowest link first, then its sum of link ranks; "
                  "k = all GPUs is the best ring over the whole machine):", best_subsets_table(topo), ""]
    lines.append(topo.summary())
    return "\n".join(map(str, lines))


def ranked_pairs_table(topo: Topology) -> Table:
    """The GPU pairs grouped by link, best link first (``topo.ranked_pairs()``)."""
    return Table([("place", "int", "#"), ("label", "text", "link"), ("pairs", "text")],
                 [[g.place, g.label, topo._pair_list(g.pairs, limit=12)] for g in topo.ranked_pairs()])


def best_subsets_table(topo: Topology) -> Table:
    """For k = 2 .. the number of GPUs: the best k GPUs for a ring all-reduce, their best ring,
    its slowest link and the weakest pair among them (``topo.best_subset(k)``)."""
    rows = []
    for k in range(2, len(topo.gpus) + 1):
        s = topo.best_subset(k)
        rows.append([k, ",".join(map(str, s.gpus)), s.ring_text(), s.ring_bottleneck.label, s.weakest.label])
    return Table([("k", "int"), ("gpus", "text", "GPUs"), ("ring", "text", "best ring"),
                  ("slowest", "text", "ring's slowest link"), ("weakest", "text", "weakest pair")], rows)


def _report_dict(topo: Topology) -> dict:
    d = topo.to_dict()
    d["ranked_pairs"] = [g.to_dict() for g in topo.ranked_pairs()] if len(topo.gpus) >= 2 else []
    d["best_subsets"] = {str(k): topo.best_subset(k).to_dict() for k in range(2, len(topo.gpus) + 1)}
    d["summary"] = topo.summary()
    return d


def cli(argv: list) -> int:
    import argparse
    p = argparse.ArgumentParser(prog="ddlab topo", description="Read `nvidia-smi topo -m` (this machine, a file "
                                "or a recorded machine): matrix, ranked GPU pairs, best subsets, summary.")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--file", metavar="F", help="a saved `nvidia-smi topo -m` output")
    src.add_argument("--recorded", metavar="NAME", help="a recorded machine (see --list)")
    p.add_argument("--list", action="store_true", help="list the recorded machines and exit")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--save", metavar="NAME", help="record this machine's topology (with provenance) as "
                   "reference/topologies/NAME.json")
    a = p.parse_args(argv)
    if a.list:
        rows = []
        for name in recorded_names():
            try:
                t = recorded(name)
                rows.append([name, len(t.gpus), t.description or ""])
            except (ValueError, OSError) as exc:
                rows.append([name, None, f"unreadable: {exc}"])
        print(Table([("name", "text", "recorded machine"), ("gpus", "int", "GPUs"), ("description", "text")],
                    rows, missing=""))
        return 0
    if a.save and (a.file or a.recorded):
        print("ddlab topo: --save records this machine's live topology; it cannot be combined with --file or "
              "--recorded")
        return 2
    try:
        if a.file:
            topo = Topology.from_file(a.file)
        elif a.recorded:
            topo = recorded(a.recorded)
        else:
            topo = Topology.from_system()
    except NoGPUError as exc:
        print(f"ddlab topo: {exc}")
        print(f"Recorded machines: {', '.join(recorded_names()) or 'none'} "
              f"(e.g. ddlab topo --recorded {(recorded_names() or ['NAME'])[0]})")
        return 1
    except TopologyParseError as exc:
        print(f"ddlab topo: {a.file or a.recorded or 'nvidia-smi output'}: {exc}")
        return 1
    except (OSError, ValueError) as exc:  # missing file, unknown recorded name, bad record
        print(f"ddlab topo: {exc}")
        return 1
    if a.save:
        from ddlab.system import provenance
        prov = provenance.collect(command="nvidia-smi topo -m")
        prov["kind"] = "measured"
        path = save_recorded(a.save, topo, prov, description=f"{prov.get('gpu_count')}x {prov.get('gpu_model')}")
        print(f"saved {path}", file=sys.stderr)
    print(json.dumps(_report_dict(topo), indent=1) if a.json else report(topo))
    return 0
