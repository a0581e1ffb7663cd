"""The host link: every byte a training step feeds a GPU crosses it first (PCIe to the CPU, or
NVLink-C2C on Grace machines). Host <-> GPU bandwidth and latency, pinned and pageable host
memory, from each NUMA node of the host.

Two measurements write the same JSON (``"format": "ddlab-hostlink/1"``): the course's compiled
CUDA test (``source_code/p2p_bandwidth_latency/host_bandwidth_latency.cu``, copy engine, CUDA
events; built by the p2p test's Makefile, ``make host``) and, where there is no ``nvcc``, the
same loop in PyTorch (:mod:`ddlab.measure.host_link_torch`), labelled as such.
:class:`HostLinkResult` holds either; :func:`measure` picks the compiled test when ``nvcc`` is
here, else PyTorch, else raises :class:`HostLinkNoGPU` with one line.

Each figure is also shown as a share of the link's raw rate per direction
(:func:`link_peak_gbps`: PCIe generation x lanes, :func:`ddlab.system.links.pcie_x16_gbs`).
Host staging (GPU -> host -> GPU, what a transfer without peer access does) costs one
device-to-host plus one host-to-device copy: :func:`staging`.

    from ddlab.measure import host_link
    r = host_link.measure()                  # compiled, else torch; HostLinkNoGPU without a GPU
    host_link.table(r); host_link.summary(r)
"""
from __future__ import annotations

import json
import math
import os
import subprocess
from dataclasses import dataclass, field
from typing import Optional, Sequence

from ddlab.base import reference, units
from ddlab.base.errors import CourseError
from ddlab.base.tables import Table
from ddlab.measure import host_link_torch, p2p_run
from ddlab.system import frameworks

FORMAT = host_link_torch.FORMAT
PROGRAM_NAME = "host_bandwidth_latency"
RECORDED_KIND = "hostlink"          # source_code/reference/hostlink/<machine>.json
DIRECTIONS = ("h2d", "d2h", "bidir")
MEMORY = ("pinned", "pageable")
DEFAULT_SIZES = host_link_torch.DEFAULT_SIZES
EXIT_NO_GPU, EXIT_VALIDATION = 2, 3       # the program's exit codes (see the .cu file)
LARGE = 256 << 20                         # sizes from here up show the link's full rate
_ROW_KEYS = {"numa_node": int, "memory": str, "direction": str, "bytes": int, "gbps": (int, float)}
_LAT_KEYS = {"numa_node": int, "memory": str, "direction": str, "bytes": int, "us_median": (int, float)}


class HostLinkError(CourseError, RuntimeError):
    """The host-link test could not be built or run, or caught wrong data (one message)."""


class HostLinkNoGPU(HostLinkError):
    """No GPU to measure: the message is the one line a report or notebook shows."""


class HostLinkParseError(CourseError, ValueError):
    """Text that is not the host-link test's JSON."""


# ----------------------------------------------------------------------------- the result
@dataclass
class HostLinkResult:
    """One host-link measurement: ``rows`` (bandwidth per NUMA node, memory kind, direction and
    size), ``latency`` (small copies), ``device`` (index, name, PCI bus id, NUMA node), ``numa``
    (the host's nodes, whether they were bound, the GPU's node), ``method`` (how it was
    measured), ``source`` ("compiled", "torch" or "recorded"), ``link`` (the PCIe generation
    and width, maximum, when known), ``skipped`` (sizes the host had no memory for) and ``notes``."""
    rows: list
    latency: list
    device: dict
    numa: dict
    method: str
    source: str = "compiled"
    provenance: dict = field(default_factory=dict)
    skipped: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    link: Optional[dict] = None

    @classmethod
    def from_json(cls, obj, source: Optional[str] = None) -> "HostLinkResult":
        """A result from the program's JSON (text or the parsed object) or from :meth:`to_dict`.
        Raises :class:`HostLinkParseError` with one line when it is not that."""
        if isinstance(obj, (str, bytes)):
            return parse_output(obj if isinstance(obj, str) else obj.decode(), source=source)
        if not isinstance(obj, dict) or obj.get("format") != FORMAT:
            got = obj.get("format") if isinstance(obj, dict) else type(obj).__name__
            raise HostLinkParseError(f"not the host-link test's JSON: expected \"format\": \"{FORMAT}\", got {got!r}")
        for key in ("rows", "latency", "device", "method"):
            if key not in obj:
                raise HostLinkParseError(f"the host-link JSON has no {key!r}")
        _check_items(obj["rows"], _ROW_KEYS, "rows")
        _check_items(obj["latency"], _LAT_KEYS, "latency")
        return cls(rows=[dict(r) for r in obj["rows"]], latency=[dict(x) for x in obj["latency"]],
                   device=dict(obj["device"]), numa=dict(obj.get("numa") or {}), method=str(obj["method"]),
                   source=source or obj.get("source") or "compiled", provenance=dict(obj.get("provenance") or {}),
                   skipped=list(obj.get("skipped") or []), notes=list(obj.get("notes") or []), link=obj.get("link"))

    def to_dict(self) -> dict:
        return {"format": FORMAT, "source": self.source, "method": self.method, "device": self.device,
                "numa": self.numa, "link": self.link, "rows": self.rows, "latency": self.latency,
                "skipped": self.skipped, "notes": self.notes, "provenance": self.provenance}

    @property
    def nodes(self) -> list:
        """The NUMA nodes measured from, in order."""
        return sorted({r["numa_node"] for r in self.rows})

    @property
    def gpu_node(self) -> Optional[int]:
        return self.numa.get("gpu_node", self.device.get("numa_node"))

    def gbps(self, memory: str, direction: str, nbytes: int, node: Optional[int] = None) -> Optional[float]:
        """The GB/s of one row (``node`` None: the GPU's own node, else the first measured)."""
        node = self._node(node)
        for r in self.rows:
            if (r["numa_node"], r["memory"], r["direction"], r["bytes"]) == (node, memory, direction, nbytes):
                return r["gbps"]
        return None

    def best(self, memory: str, direction: str, node: Optional[int] = None) -> Optional[dict]:
        """The fastest row from ``LARGE`` bytes up (or at the largest size measured)."""
        node = self._node(node)
        mine = [r for r in self.rows if r["numa_node"] == node and r["memory"] == memory and r["direction"] == direction]
        if not mine:
            return None
        big = [r for r in mine if r["bytes"] >= LARGE] or [max(mine, key=lambda r: r["bytes"])]
        return max(big, key=lambda r: r["gbps"])

    def latency_us(self, memory: str, direction: str, node: Optional[int] = None) -> Optional[float]:
        node = self._node(node)
        for x in self.latency:
            if (x["numa_node"], x["memory"], x["direction"]) == (node, memory, direction):
                return x["us_median"]
        return None

    def _node(self, node: Optional[int]) -> Optional[int]:
        if node is not None:
            return node
        nodes = self.nodes
        return self.gpu_node if self.gpu_node in nodes else (nodes[0] if nodes else None)

    @property
    def peak_gbps(self) -> Optional[float]:
        """The link's raw rate per direction (None: unknown, e.g. not a PCIe link)."""
        if not self.link:
            return None
        return link_peak_gbps(self.link.get("gen"), self.link.get("width"))


def _check_items(items, keys: dict, what: str) -> None:
    if not isinstance(items, list):
        raise HostLinkParseError(f"the host-link JSON's {what!r} is not a list")
    for i, item in enumerate(items):
        for k, kind in keys.items():
            if not isinstance(item, dict) or not isinstance(item.get(k), kind) or isinstance(item.get(k), bool):
                raise HostLinkParseError(f"the host-link JSON's {what}[{i}] has no valid {k!r}: {item!r}"[:300])


def parse_output(text: str, source: Optional[str] = None) -> HostLinkResult:
    """The program's ``--json -`` output (one JSON object; text before it, e.g. a build line,
    is skipped). Raises :class:`HostLinkParseError` with one line on anything else."""
    start = text.find("{")
    if start < 0:
        raise HostLinkParseError("no JSON object in the host-link test's output: "
                                 f"{text.strip()[:120]!r} (run it with --json -)")
    try:
        obj = json.loads(text[start:])
    except json.JSONDecodeError as exc:
        raise HostLinkParseError(f"the host-link test's output is not whole JSON ({exc.msg} at line {exc.lineno}): "
                                 "was the run cut short?") from None
    return HostLinkResult.from_json(obj, source=source)


# ----------------------------------------------------------------------------- the link's raw rate
def link_peak_gbps(generation: Optional[int], width: Optional[int]) -> Optional[float]:
    """The raw rate per direction in GB/s of a PCIe link of ``generation`` (1-6) and ``width``
    lanes: lanes x GT/s x line-code efficiency / 8 (the table and the Gen6 FLIT factor are
    :data:`ddlab.system.links.PCIE_GENERATIONS`). None when either is unknown."""
    from ddlab.system.links import pcie_x16_gbs
    if not generation or not width:
        return None
    return pcie_x16_gbs(int(generation), int(width))


def link_of(bus_id: Optional[str]) -> Optional[dict]:
    """The PCIe link (maximum generation and width, and now) of the GPU at ``bus_id``, from
    NVML or nvidia-smi; None when it cannot be read (no NVML, or not a PCIe link)."""
    from ddlab.system import hardware, pcie
    if not bus_id:
        return None
    inv = hardware.inventory(software=False)
    want = hardware.normalise_bus_id(bus_id)
    index = next((g.index for g in inv.gpus if g.pci_bus_id == want), None)
    if index is None:
        return None
    for x in pcie.pcie_links([]):
        if x.index == index and x.gen_max and x.width_max:
            return {"gen": x.gen_max, "width": x.width_max, "gen_now": x.gen_current, "width_now": x.width_current}
    return None


def share(gbps: Optional[float], peak: Optional[float], direction: str = "h2d") -> Optional[float]:
    """A figure as a fraction of the raw rate (both directions at once: of twice the rate)."""
    if gbps is None or not peak:
        return None
    return gbps / (peak * (2 if direction == "bidir" else 1))


# ----------------------------------------------------------------------------- reading it
def table(result: HostLinkResult, memory: Sequence[str] = MEMORY, every: int = 1) -> Table:
    """One row per NUMA node, memory kind and size: GB/s host-to-device, device-to-host and
    both at once, and each as a % of the link's raw rate (both: of twice the rate). ``every``: show
    every n-th size from the smallest, and the largest (a plot of :mod:`ddlab.views.host_link_plots`
    shows them all)."""
    if every < 1:
        raise ValueError(f"every must be a whole number >= 1, got {every!r}")
    peak = result.peak_gbps
    rows = []
    for node in result.nodes:
        for mem in memory:
            sizes = sorted({r["bytes"] for r in result.rows if r["numa_node"] == node and r["memory"] == mem})
            for nbytes in sorted(set(sizes[::every] + sizes[-1:])):
                row = {"node": f"{node}" + (" (GPU's)" if node == result.gpu_node else ""), "memory": mem,
                       "bytes": nbytes}
                for d in DIRECTIONS:
                    row[d] = result.gbps(mem, d, nbytes, node)
                    row[d + "_pct"] = share(row[d], peak, d)
                rows.append(row)
    cols = [("node", "text", "NUMA node"), ("memory", "text"), ("bytes", "bytes", "size"),
            ("h2d", "rate:GB/s", "host->GPU"), ("d2h", "rate:GB/s", "GPU->host"), ("bidir", "rate:GB/s", "both")]
    if peak:
        cols += [("h2d_pct", "percent", "h2d % raw"), ("d2h_pct", "percent", "d2h % raw"),
                 ("bidir_pct", "percent", "both % 2x raw")]
    what = link_text(result)
    return Table(cols, rows, title=f"Host <-> GPU {result.device.get('index', 0)} ({result.device.get('name', '?')}): "
                                   f"{result.method}",
                 notes=(f"raw rate: {what}. " if peak else "") + "GB/s = 10^9 bytes/s; both: the two directions "
                       "together.")


def link_text(result: HostLinkResult) -> str:
    """"PCIe Gen5 x16, 63.0 GB/s per direction" (or what is known)."""
    if not result.link:
        return "link rate unknown"
    peak = result.peak_gbps
    return (f"PCIe Gen{result.link.get('gen')} x{result.link.get('width')}"
            + (f", {peak:.1f} GB/s per direction" if peak else ""))


def latency_table(result: HostLinkResult) -> Table:
    rows = [dict(x, node=x["numa_node"]) for x in result.latency]
    return Table([("node", "int", "NUMA node"), ("memory", "text"), ("direction", "text"), ("bytes", "bytes", "size"),
                  ("us_median", "time:us", "median"), ("reps", "int", "copies")], rows,
                 title="Latency of one small copy (median)")


def summary(result: HostLinkResult) -> list:
    """The findings in a few lines: pinned and pageable rates on the GPU's node (with the share
    of the raw rate), small-copy latency, the other NUMA nodes against the GPU's, what was
    skipped, and the notes."""
    peak = result.peak_gbps
    out = []
    home = result._node(None)
    for mem in MEMORY:
        parts = []
        for d in DIRECTIONS:
            r = result.best(mem, d, home)
            if r:
                pct = share(r["gbps"], peak, d)
                parts.append(f"{d} {r['gbps']:.1f} GB/s" + (f" ({units.format_percent(pct)})" if pct is not None else ""))
        if parts:
            where = f"NUMA node {home}" + (" (the GPU's)" if home == result.gpu_node else "")
            out.append(f"{mem}, {where}, from 256 MiB up: " + ", ".join(parts))
    lat = [f"{mem} {d} {v:.1f} us" for mem in MEMORY for d in ("h2d", "d2h")
           if (v := result.latency_us(mem, d, home)) is not None]
    if lat:
        size = units.format_bytes(result.latency[0]["bytes"])
        out.append(f"one {size} copy: " + ", ".join(lat))
    if peak:
        out.append(f"% of the raw rate: {link_text(result)} (both directions: of twice that)")
    base = result.best("pinned", "h2d", home)
    for node in result.nodes:
        if node == home or not base:
            continue
        other = result.best("pinned", "h2d", node)
        if other:
            ratio = other["gbps"] / base["gbps"]
            flag = "  <-- slower: memory on the other node crosses the socket link" if ratio < 0.9 else ""
            out.append(f"pinned h2d from NUMA node {node}: {other['gbps']:.1f} GB/s, {ratio:.2f}x node {home}'s{flag}")
    out += [f"skipped: node {s['numa_node']}, {s['memory']}, {units.format_bytes(s['bytes'])}: {s['why']}"
            for s in result.skipped]
    out += [f"note: {n}" for n in result.notes]
    return out


SLOWER = 0.9      # a GPU whose pinned rate is below this share of the fastest GPU's stands out


def gpus_table(results: Sequence[HostLinkResult]) -> Table:
    """Several GPUs' host links side by side (one result per GPU): each GPU's NUMA node, its
    link, the best pinned rates from its own node (and % of raw), from the farthest other node,
    and pageable; a GPU whose pinned host -> GPU rate is below :data:`SLOWER` of the fastest
    GPU's, or measured from no node of its own, is marked."""
    rows = []
    for r in results:
        home = r._node(None)
        h2d, d2h, pg = r.best("pinned", "h2d", home), r.best("pinned", "d2h", home), r.best("pageable", "h2d", home)
        others = [x for n in r.nodes if n != home and (x := r.best("pinned", "h2d", n))]
        rows.append({"gpu": r.device.get("index"), "name": r.device.get("name"), "bus": r.device.get("pci_bus_id"),
                     "node": r.gpu_node if r.gpu_node is not None else "none reported",
                     "link": link_text(r).split(",")[0], "h2d": h2d and h2d["gbps"], "d2h": d2h and d2h["gbps"],
                     "h2d_pct": share(h2d and h2d["gbps"], r.peak_gbps), "other": min((x["gbps"] for x in others),
                                                                                        default=None),
                     "pageable": pg and pg["gbps"]})
    fastest = max((x["h2d"] for x in rows if x["h2d"]), default=None)
    for x in rows:
        marks = []
        if fastest and x["h2d"] and x["h2d"] < SLOWER * fastest:
            marks.append(f"slower: {x['h2d'] / fastest:.0%} of the fastest GPU")
        if x["node"] == "none reported":
            marks.append("NUMA node not reported")
        x["flag"] = "; ".join(marks) or "-"
    return Table([("gpu", "int", "GPU"), ("name", "text"), ("bus", "text", "PCI bus id"), ("node", "text", "NUMA node"),
                  ("link", "text"), ("h2d", "rate:GB/s", "pinned h2d"), ("d2h", "rate:GB/s", "pinned d2h"),
                  ("h2d_pct", "percent", "h2d % raw"), ("other", "rate:GB/s", "h2d, other node"),
                  ("pageable", "rate:GB/s", "pageable h2d"), ("flag", "text")], rows,
                 title="Each GPU's host link (best from 256 MiB up, from the GPU's own NUMA node)",
                 notes="other node: host memory and thread on the NUMA node farthest from the GPU, where there is one")


def staging(result: HostLinkResult, nbytes: int, memory: str = "pinned", node: Optional[int] = None) -> dict:
    """What host staging (GPU -> host -> GPU) of ``nbytes`` costs by the measured figures: one
    device-to-host plus one host-to-device copy, each at the rate measured at the nearest size
    (in log scale). Returns {"bytes", "at_bytes", "d2h_s", "h2d_s", "total_s", "gbps"}."""
    node = result._node(node)
    sizes = sorted({r["bytes"] for r in result.rows if r["numa_node"] == node and r["memory"] == memory})
    if not sizes:
        raise ValueError(f"no {memory} rows measured from NUMA node {node}")
    at = min(sizes, key=lambda s: abs(math.log(s) - math.log(max(nbytes, 1))))
    d2h, h2d = result.gbps(memory, "d2h", at, node), result.gbps(memory, "h2d", at, node)
    t_d2h, t_h2d = nbytes / (d2h * 1e9), nbytes / (h2d * 1e9)
    return {"bytes": nbytes, "at_bytes": at, "d2h_s": t_d2h, "h2d_s": t_h2d, "total_s": t_d2h + t_h2d,
            "gbps": nbytes / (t_d2h + t_h2d) / 1e9}


def staging_line(result: HostLinkResult, nbytes: int, peer_gbps: Optional[float] = None) -> str:
    """One line: what host staging of ``nbytes`` costs by ``result``'s pinned figures (one
    GPU -> host plus one host -> GPU copy, :func:`staging`), and beside it one peer-to-peer copy
    at ``peer_gbps`` (e.g. an NVLink's rate per direction) when given."""
    s = staging(result, nbytes)
    line = (f"host staging of {units.format_bytes(nbytes)}: GPU->host {units.format_time(s['d2h_s'])} + host->GPU "
            f"{units.format_time(s['h2d_s'])} = {units.format_time(s['total_s'])}, {s['gbps']:.1f} GB/s end to end "
            f"(measured at {units.format_bytes(s['at_bytes'])})")
    if peer_gbps:
        peer = nbytes / (peer_gbps * 1e9)
        line += f"; one peer-to-peer copy at {peer_gbps:g} GB/s: {units.format_time(peer)}, {s['total_s'] / peer:.0f}x less"
    return line


# ----------------------------------------------------------------------------- measuring
def _with_provenance(result: HostLinkResult, command: str) -> HostLinkResult:
    from ddlab.system.provenance import run_provenance
    result.provenance = run_provenance(command, torch_facts=result.source == "torch")
    if result.link is None:
        result.link = link_of(result.device.get("pci_bus_id"))
    return result


def program_args(*, device: int = 0, sizes: Optional[Sequence[int]] = None, numa="all",
                 seconds_per_row: Optional[float] = None, latency_reps: Optional[int] = None) -> list:
    """The compiled program's options (None: its default). ``numa``: "all", "none" or node ids."""
    args = ["--device", str(device)]
    if sizes:
        args += ["--sizes", ",".join(str(int(s)) for s in sizes)]
    if numa != "all":
        args += ["--numa", numa if isinstance(numa, str) else ",".join(str(int(n)) for n in numa)]
    if seconds_per_row is not None:
        args += ["--seconds", str(seconds_per_row)]
    if latency_reps is not None:
        args += ["--latency-reps", str(latency_reps)]
    return args


def run_compiled(device: int = 0, sizes: Optional[Sequence[int]] = None, numa="all",
                 seconds_per_row: Optional[float] = None, latency_reps: Optional[int] = None,
                 timeout: float = 600.0, rebuild: bool = False, binary: Optional[str] = None) -> HostLinkResult:
    """Build the compiled test if needed (``make host`` through :func:`ddlab.measure.p2p_run.build`),
    run it on CUDA ``device`` and return its result. Raises :class:`HostLinkNoGPU` without a
    GPU, :class:`HostLinkError` when building or running fails or validation caught wrong data."""
    if binary is None and not p2p_run.gpu_visible():
        raise HostLinkNoGPU("skipped: no NVIDIA GPU is visible on this machine")
    if binary is None:
        try:
            binary = p2p_run.build(force=rebuild, program=PROGRAM_NAME)
        except p2p_run.P2PBuildError as exc:
            raise HostLinkError(str(exc).replace("the p2p test", "the host-link test")) from None
    argv = [binary, *program_args(device=device, sizes=sizes, numa=numa, seconds_per_row=seconds_per_row,
                                  latency_reps=latency_reps), "--json", "-"]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise HostLinkError(f"the host-link test ran longer than {timeout:.0f} s and was stopped") from None
    except OSError as exc:
        raise HostLinkError(f"could not start {binary}: {exc}") from None
    tail = "\n".join(out.stderr.strip().splitlines()[-15:])
    if out.returncode == EXIT_NO_GPU and "no CUDA GPU" in out.stderr:
        raise HostLinkNoGPU("skipped: " + out.stderr.strip().splitlines()[-1].removeprefix("host_bandwidth_latency: "))
    if out.returncode == EXIT_VALIDATION:
        raise HostLinkError(f"the host-link test's validation caught wrong data (exit 3):\n{tail}")
    if out.returncode != 0:
        raise HostLinkError(f"the host-link test failed (exit {out.returncode}):\n{tail}")
    result = parse_output(out.stdout, source="compiled")
    cmd = " ".join([os.path.basename(binary), *argv[1:]])
    return _with_provenance(result, cmd)


def measure_torch(device_index: int = 0, sizes: Sequence[int] = DEFAULT_SIZES, reps: Optional[int] = None,
                  seconds_per_row: float = 0.1, nodes: Optional[Sequence[int]] = None) -> HostLinkResult:
    """The same measurement with PyTorch (:func:`ddlab.measure.host_link_torch.measure`: pinned
    and pageable host tensors, ``copy_(non_blocking=True)``, CUDA events; h2d, d2h and both
    at once on two streams; the thread bound to each NUMA node and the host tensors made after
    binding), labelled "torch copy_ with CUDA events (no nvcc here)". Raises
    :class:`HostLinkNoGPU` when PyTorch sees no GPU."""
    try:
        obj = host_link_torch.measure(device_index, sizes=sizes, reps=reps, seconds_per_row=seconds_per_row,
                                      nodes=nodes)
    except host_link_torch.NoGPU as exc:
        raise HostLinkNoGPU(str(exc)) from None
    except RuntimeError as exc:
        raise HostLinkError(str(exc)) from None
    result = HostLinkResult.from_json(obj, source="torch")
    return _with_provenance(result, f"ddlab.measure.host_link.measure_torch(device_index={device_index})")


def measure(device_index: int = 0, sizes: Optional[Sequence[int]] = None, nodes: Optional[Sequence[int]] = None,
            seconds_per_row: float = 0.1, prefer: Optional[str] = None, timeout: float = 600.0) -> HostLinkResult:
    """The host link of CUDA device ``device_index`` from each NUMA node (``nodes`` None: all):
    the compiled test when ``nvcc`` is here (or its binary is built), else PyTorch (its result
    says so), else :class:`HostLinkNoGPU` with one line. ``prefer``: "compiled" or "torch"
    to choose. A compiled build that fails falls back to PyTorch, with a note."""
    if prefer not in (None, "compiled", "torch"):
        raise ValueError(f"prefer must be 'compiled' or 'torch', got {prefer!r}")
    sizes = list(sizes or DEFAULT_SIZES)
    built = os.path.exists(p2p_run.binary_path(program=PROGRAM_NAME))
    note = None
    if prefer != "torch" and (frameworks.nvcc_path() or built or prefer == "compiled"):
        try:
            return run_compiled(device_index, sizes, "all" if nodes is None else nodes, seconds_per_row,
                                timeout=timeout)
        except HostLinkNoGPU:
            raise
        except HostLinkError as exc:
            if prefer == "compiled" or "validation" in str(exc):
                raise
            note = f"the compiled test could not run ({str(exc).splitlines()[0]}): measured with PyTorch instead"
    result = measure_torch(device_index, sizes, seconds_per_row=seconds_per_row, nodes=nodes)
    if note:
        result.notes.insert(0, note)
    return result


# ----------------------------------------------------------------------------- recorded
def recorded_names() -> list:
    return reference.names(RECORDED_KIND)


def load_recorded(name: str) -> HostLinkResult:
    """A recorded result (``source_code/reference/hostlink/<name>.json``). Raises
    :class:`ddlab.base.reference.ReferenceMissing` naming what is recorded."""
    return HostLinkResult.from_json(reference.load(RECORDED_KIND, name), source="recorded")


def save(result: HostLinkResult, path: str) -> str:
    """Write ``result`` as JSON, whole or not at all, checked against the ``hostlink`` schema."""
    from ddlab.base import files
    return files.write_json(path, result.to_dict(), schema=RECORDED_KIND, what="host-link result")


def load(path: str) -> HostLinkResult:
    """A result saved by :func:`save` (one clear message when it is missing, corrupt or breaks the schema)."""
    from ddlab.base import files
    return HostLinkResult.from_json(files.read_json(path, "host-link result", schema=RECORDED_KIND))

