"""Link technologies between GPUs and between nodes: bandwidth per direction and latency.

This is the catalogue behind the alpha-beta calculator of notebook 2 and behind the link
legend of the topology drawings: :data:`LINK_KINDS` says what each ``nvidia-smi topo -m`` label
means (ddlab.system.topology parses the labels and imports this module, never the other way round;
how far each kind is for ``NCCL_P2P_LEVEL`` comes from ddlab.system.nccl). Every figure carries its
source:

* bandwidth comes from a specification or a vendor document and is *derived* here in code
  from the signalling facts (lanes x rate x encoding), so a learner can check the arithmetic;
* latency is the fixed cost of one small message *as a program sees it* (driver, copy
  engine, switch hops, protocol), which is why it barely changes between generations of a
  link. Those figures are published measurements or vendor figures, named below, and they
  are orders of magnitude, not properties of your machine: measure yours in section 7.

Units: GB/s means 10**9 bytes per second (how link specs are quoted); KiB, MiB, GiB are
powers of two (how message sizes are usually chosen). Mixing the two is a classic source
of small errors; the calculator keeps them apart.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from ddlab.system import nccl as _nccl
from ddlab.base.tables import Table
from ddlab.base.units import significant

GB = 1e9  # link rates are decimal


@dataclass(frozen=True)
class LinkTech:
    """One link technology. ``bandwidth_gbs`` is per direction, in GB/s (10**9 B/s)."""
    key: str
    name: str
    family: str               # "PCIe", "NVLink", "InfiniBand", "Ethernet"
    bandwidth_gbs: float
    latency_us: float
    derivation: str           # how the bandwidth follows from the specification
    bandwidth_source: str
    latency_source: str
    links: int = 1            # bonded NVLinks (NV<links> in nvidia-smi topo -m)
    note: str = ""
    raw_gbs: Optional[float] = None   # signalling rate per direction, where a source gives it (NVLink 4)

    @property
    def latency_measures(self) -> str:
        """What the latency figure measures (its source says where it comes from)."""
        return LATENCY_MEASURES[self.family]

    @property
    def bandwidth_Bps(self) -> float:
        return self.bandwidth_gbs * GB

    @property
    def latency_s(self) -> float:
        return self.latency_us * 1e-6

    def __str__(self) -> str:
        return f"{self.name}: {self.bandwidth_gbs:.4g} GB/s per direction, ~{self.latency_us:g} us"


# --------------------------------------------------------------------------- sources
# Specifications and vendor documents (bandwidth).
PCIE_SPEC = {
    3: "PCI-SIG, PCI Express Base Specification Revision 3.0 (2010): 8.0 GT/s per lane, 128b/130b encoding",
    4: "PCI-SIG, PCI Express Base Specification Revision 4.0 (2017): 16.0 GT/s per lane, 128b/130b encoding",
    5: "PCI-SIG, PCI Express Base Specification Revision 5.0 (2019): 32.0 GT/s per lane, 128b/130b encoding",
}
# Per-link NVLink rates as NVIDIA publishes them (per direction; "total" is both directions
# summed over all links of one GPU, which is how NVIDIA states it).
NVLINK_GENERATIONS = [
    {"generation": "NVLink 1", "gpu": "P100", "links_per_gpu": 4, "GB_s_per_link_per_direction": 20,
     "total_GB_s": 160, "source": "NVIDIA Tesla P100 whitepaper (WP-08019-001, 2016): four NVLinks, "
                                  "160 GB/s total bidirectional"},
    {"generation": "NVLink 2", "gpu": "V100", "links_per_gpu": 6, "GB_s_per_link_per_direction": 25,
     "total_GB_s": 300, "source": "NVIDIA DGX-1 with Tesla V100 System Architecture whitepaper "
                                  "(WP-08437-002): six NVLinks per V100, each 25 GB/s in each direction"},
    {"generation": "NVLink 3", "gpu": "A100", "links_per_gpu": 12, "GB_s_per_link_per_direction": 25,
     "total_GB_s": 600, "source": "NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020) and "
                                  "NVIDIA's NVLink page: twelve third-generation NVLinks, 600 GB/s total"},
    {"generation": "NVLink 4", "gpu": "H100/H200", "links_per_gpu": 18, "GB_s_per_link_per_direction": 25,
     "total_GB_s": 900, "source": "NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022) and "
                                  "NVIDIA's NVLink page: eighteen fourth-generation NVLinks, 900 GB/s total"},
    {"generation": "NVLink 5", "gpu": "B200", "links_per_gpu": 18, "GB_s_per_link_per_direction": 50,
     "total_GB_s": 1800, "source": "NVIDIA's NVLink page (nvidia.com/data-center/nvlink): fifth "
                                   "generation, 18 links, 1.8 TB/s total per GPU"},
]
_GEN = {int(g["generation"].split()[-1]): g for g in NVLINK_GENERATIONS}
NVLINK4_SIGNALLING = ("`nvidia-smi nvlink --status` reports 26.562 GB/s per NVLink-4 link on H100 (shown in "
                      "stas00/ml-engineering, 'Troubleshooting NVIDIA GPUs'): the raw signalling rate, of which "
                      "25 GB/s is the data rate NVIDIA quotes")
IB_SPEC = {
    "HDR": ("InfiniBand Trade Association roadmap; NVIDIA ConnectX-6 VPI user manual: HDR, 4 lanes x 50 Gb/s "
            "= 200 Gb/s per port"),
    "NDR": ("InfiniBand Trade Association roadmap; NVIDIA ConnectX-7 user manual: NDR, 4 lanes x 100 Gb/s "
            "= 400 Gb/s per port"),
}
ETH_SPEC = {
    10: "IEEE 802.3ae (10 Gigabit Ethernet): 10 Gb/s data rate",
    100: "IEEE 802.3ba / 802.3bj (100 Gigabit Ethernet): 100 Gb/s data rate",
}
# Published measurements and vendor figures (latency): each names its document, where in it the
# figure stands, and what it measures. They measure different things (a copy between two GPUs
# through the CUDA driver, a kernel reading a peer's memory, an adapter on its own, a TCP round
# trip between hosts), so compare them as orders of magnitude, never as like for like.
LAT_NVLINK = ("NVIDIA/cuda-samples issue #230 (github.com/NVIDIA/cuda-samples/issues/230), its description: the "
              "'P2P=Enabled Latency (P2P Writes) Matrix (us)', GPU rows, of p2pBandwidthLatencyTest on 4 "
              "NVLink-connected GPUs: 1.81-2.31 us between two GPUs ('P2P=Disabled', host staged: 11-20 us)")
LAT_PCIE = ("lukealonso/p2pmark README (github.com/lukealonso/p2pmark), 'Example Output', 'Latency': 'P2P LATENCY: "
            "4.10 us (best pair, isolated)' on PCIe 5.0 GPUs, rounded to 4 here; the README's 'Latency' mode says it "
            "is a CUDA kernel reading one 128-byte line from the peer. No figure of their own is cited for PCIe 3.0 "
            "and 4.0: they carry this one")
LAT_IB = ("NVIDIA ConnectX-6 adapter cards user manual, 'Introduction' (docs.nvidia.com/networking/display/"
          "ConnectX6EN/Introduction), second paragraph: ConnectX-6 VPI cards give 'up to two ports of 200Gb/s for "
          "InfiniBand and Ethernet connectivity, sub-600ns latency'. A vendor figure for the adapter itself (the "
          "manual does not say how it was measured): no GPU, no PCIe crossing at either end and no NCCL software "
          "are in it, so it is not comparable with the GPU-to-GPU figures of NVLink and PCIe")
LAT_IB_NDR = (LAT_IB + ". No figure is cited for NDR (ConnectX-7's manual introduction gives none): the NDR row "
              "carries the HDR adapter's figure")
LAT_TCP = ("Server Fault question 'Higher TCP latencies in the latest versions of Linux' "
           "(serverfault.com/questions/791539), the question's first paragraph: a TCP round trip of 100-byte messages between two Linux hosts through Intel 1 GbE NICs "
           "took about 110 us (Linux 2.6) and 220 us (Linux 3.x); the figure here is half the 110 us, one way. It "
           "was not measured through a 10 or 100 GbE NIC: at 100 bytes the wire adds under a microsecond even at "
           "1 Gb/s (800 bits / 1e9 bit/s), so the hosts' TCP stacks set it. Measure yours: `ddlab allreduce "
           "--paths socket`")
# What each latency measures, in a few words for the catalogue's table (the source says more).
LATENCY_MEASURES = {
    "PCIe": "GPU to GPU: a kernel reads 128 B from the peer (PCIe 5.0 GPUs)",
    "NVLink": "GPU to GPU: a CUDA peer copy, p2pBandwidthLatencyTest",
    "InfiniBand": "the adapter alone, vendor figure: no GPU, PCIe or NCCL",
    "Ethernet": "half a host-to-host TCP round trip of 100 B, 1 GbE NICs",
}


# --------------------------------------------------------------------------- derivations
# PCIe generation -> (GT/s per lane, the share of the line rate that carries data), from the
# PCI-SIG base specifications: Gen1 and Gen2 use 8b/10b encoding, Gen3 to Gen5 128b/130b. Gen6
# (64 GT/s, PAM4) drops the line code and always runs in FLIT mode: 256-byte FLITs of 236 bytes
# of TLPs, 6 of DLLP, 8 of CRC and 6 of FEC. We take 242/256 (TLP and DLLP bytes per FLIT),
# counting as data what the older generations count as data after their encoding; the same
# factor tools/bench_host_link.py uses.
PCIE_GENERATIONS = {1: (2.5, 8 / 10), 2: (5.0, 8 / 10), 3: (8.0, 128 / 130), 4: (16.0, 128 / 130),
                    5: (32.0, 128 / 130), 6: (64.0, 242 / 256)}


def pcie_x16_gbs(generation: int, lanes: int = 16) -> float:
    """Per-direction raw data rate of a PCIe link in GB/s: lanes x GT/s x line-code
    efficiency (:data:`PCIE_GENERATIONS`) / 8 bits. Gen5 x16: 63.0 GB/s."""
    if generation not in PCIE_GENERATIONS:
        raise ValueError(f"PCIe generation {generation!r} is not in the catalogue; choose 1 to 6")
    if isinstance(lanes, bool) or not isinstance(lanes, int) or lanes < 1:
        raise ValueError(f"a PCIe link has a whole number of lanes (x1 to x32), got {lanes!r}")
    gts, efficiency = PCIE_GENERATIONS[generation]
    return lanes * gts * efficiency / 8


NVLINK_PER_LINK_GBS = 25.0          # data rate per direction, every generation from 2 to 4
NVLINK4_RAW_PER_LINK_GBS = 26.5625  # what `nvidia-smi nvlink --status` prints per NVLink-4 link
NVLINK_LINKS_PER_GPU = {n: _GEN[n]["links_per_gpu"] for n in (2, 3, 4)}
# The generations this catalogue builds links for (2-4: V100, A100, H100/H200), read off the table.
NVLINK_SPEC = {n: _GEN[n]["source"] for n in (2, 3, 4)}
NVLINK_GPUS = {n: _GEN[n]["gpu"] for n in (2, 3, 4)}


def _pcie(gen: int) -> LinkTech:
    bw = pcie_x16_gbs(gen)
    rate = {3: 8, 4: 16, 5: 32}[gen]
    return LinkTech(
        key=f"pcie{gen}_x16", name=f"PCIe {gen}.0 x16", family="PCIe", bandwidth_gbs=bw, latency_us=4.0,
        derivation=f"16 lanes x {rate} GT/s x 128/130 / 8 = {bw:.2f} GB/s per direction",
        bandwidth_source=PCIE_SPEC[gen], latency_source=LAT_PCIE,
        note="peer-to-peer through a PCIe switch or the CPU; protocol overhead leaves roughly 80-90% usable")


def nvlink(generation: int, links: int = 1) -> LinkTech:
    """``links`` bonded NVLinks of one generation (``NV<links>`` in ``nvidia-smi topo -m``)."""
    if generation not in NVLINK_SPEC:
        raise ValueError(f"NVLink generation {generation!r} is not in the catalogue; choose 2 (V100), "
                         f"3 (A100) or 4 (H100/H200)")
    most = NVLINK_LINKS_PER_GPU[generation]
    if not isinstance(links, int) or not 1 <= links <= most:
        raise ValueError(f"NVLink {generation} has 1 to {most} links per GPU ({NVLINK_GPUS[generation]}); "
                         f"got {links!r}")
    bw = links * NVLINK_PER_LINK_GBS
    label = "1 link" if links == 1 else f"NV{links}, {links} links"
    note, raw = "", None
    if generation == 4:
        raw = links * NVLINK4_RAW_PER_LINK_GBS
        note = f"signalling rate {links} x 26.5625 = {raw:.1f} GB/s per direction; " + NVLINK4_SIGNALLING
    return LinkTech(
        key=f"nvlink{generation}_x{links}", name=f"NVLink {generation} ({NVLINK_GPUS[generation]}), {label}",
        family="NVLink", bandwidth_gbs=bw, latency_us=2.0, links=links,
        derivation=f"{links} x {NVLINK_PER_LINK_GBS:g} GB/s per link = {bw:g} GB/s per direction",
        bandwidth_source=NVLINK_SPEC[generation], latency_source=LAT_NVLINK, note=note, raw_gbs=raw)


def _ib(name: str, gbit: int, latency_source: str) -> LinkTech:
    return LinkTech(
        key=f"ib_{name.lower()}", name=f"InfiniBand {name} ({gbit} Gb/s)", family="InfiniBand",
        bandwidth_gbs=gbit / 8, latency_us=0.6,
        derivation=f"{gbit} Gb/s / 8 = {gbit / 8:g} GB/s per direction",
        bandwidth_source=IB_SPEC[name], latency_source=latency_source,
        note="between nodes; NCCL's NET/IB transport, with GPUDirect RDMA when the NIC and GPU share a PCIe switch")


TCP_ROUND_TRIP_US = 110.0   # LAT_TCP: the round trip reported there (Linux 2.6); one way is half of it


def _eth(gbit: int) -> LinkTech:
    return LinkTech(
        key=f"eth_{gbit}g", name=f"{gbit} GbE (TCP sockets)", family="Ethernet", bandwidth_gbs=gbit / 8,
        latency_us=TCP_ROUND_TRIP_US / 2, derivation=f"{gbit} Gb/s / 8 = {gbit / 8:g} GB/s per direction",
        bandwidth_source=ETH_SPEC[gbit], latency_source=LAT_TCP,
        note="NCCL's NET/Socket transport; RDMA over Ethernet (RoCE) behaves like InfiniBand instead")


def _catalogue() -> dict:
    items = [_pcie(3), _pcie(4), _pcie(5)]
    for gen in (2, 3, 4):
        items.append(nvlink(gen, 1))
        if gen == 2:
            items.append(nvlink(2, 2))      # the NV2 pairs of a DGX-1 V100
        items.append(nvlink(gen, NVLINK_LINKS_PER_GPU[gen]))
    items += [_ib("HDR", 200, LAT_IB), _ib("NDR", 400, LAT_IB_NDR), _eth(10), _eth(100)]
    return {t.key: t for t in items}


LINKS = _catalogue()


def names() -> list:
    """Catalogue keys, in the order the calculator lists them."""
    return list(LINKS)


def get(link) -> LinkTech:
    """A :class:`LinkTech` from itself, its key (``"pcie4_x16"``) or its name (any case)."""
    if isinstance(link, LinkTech):
        return link
    if isinstance(link, str):
        want = link.strip().lower()
        for t in LINKS.values():
            if want in (t.key.lower(), t.name.lower()):
                return t
    raise ValueError(f"unknown link {link!r}; choose one of: {', '.join(LINKS)} "
                     f"(or build one with ddlab.system.links.nvlink(generation, links))")


def table(keys=None) -> Table:
    """The catalogue as a table (name, GB/s per direction to four digits, latency and what it measures)."""
    rows = [get(k) for k in (keys or LINKS)]
    return Table([("link", "text"), ("bandwidth_gbs", lambda v: significant(v, 4), "GB/s per direction"),
                  ("latency_us", "time:us", "latency"), ("measures", "text", "the latency measures")],
                 [[t.name, t.bandwidth_gbs, t.latency_us, t.latency_measures] for t in rows],
                 align={"bandwidth_gbs": "right"},
                 notes="The latencies measure different things (see each link's source, links.sources()): orders "
                       "of magnitude, not like for like. An adapter's own latency is not a GPU-to-GPU latency.")


_URL = re.compile(r"\s*\(((?:[\w-]+\.)+(?:com|org|io|net)(?:/[^)\s]*)?)\)")


def source_rows(keys=None) -> list:
    """One dict per source behind the catalogue's figures: ``source`` (its name), ``supports``
    (which figures: "bandwidth: PCIe 3.0 x16; ..."), ``reference`` (its address, or "the document named
    the source" when it has none) and ``says`` (what the course takes from it, in full)."""
    rows: dict = {}
    for t in (get(k) for k in (keys or LINKS)):
        for what, text in (("bandwidth", t.bandwidth_source), ("latency", t.latency_source)):
            name, _, says = text.partition(": ")
            url = _URL.search(name) or _URL.search(text)
            row = rows.setdefault(text, {"source": _URL.sub("", name).strip(), "supports": {},
                                         "reference": url.group(1) if url else "the document named (no web address)",
                                         "says": says or text})
            short = t.name.split(",")[0]          # "NVLink 2 (V100)" for each bond of that generation
            if short not in row["supports"].setdefault(what, []):
                row["supports"][what].append(short)
    return [dict(r, supports="; ".join(f"{what} of {', '.join(names)}" for what, names in r["supports"].items()))
            for r in rows.values()]


def sources(keys=None):
    """Where each figure comes from, as a table: source, what it supports, reference (HTML in
    Jupyter, aligned text in a terminal; ``print`` it or leave it last in a cell). What each
    source says in full is in :func:`source_rows` (``says``)."""
    from ddlab.base.tables import Table
    return Table([("source", "text"), ("supports", "text", "figures it supports"), ("reference", "text")],
                 source_rows(keys), title="Sources of the link figures", wrap=("source", "supports", "reference"),
                 notes="Bandwidth is derived from the specification (see each link's derivation in "
                       "ddlab.system.links.LINKS); latency figures are published measurements or vendor figures, "
                       "each source naming where in it the figure stands and what it measures "
                       "(source_rows()'s 'says'): orders of magnitude.")


# --------------------------------------------------------------------------- topology link kinds
# What each `nvidia-smi topo -m` label means; ddlab.system.topology parses the labels, this table explains them.
_PCIE_X16 = ("PCIe x16, per direction: 15.75 GB/s Gen3, 31.5 GB/s Gen4, 63 GB/s Gen5 "
             "(16 lanes x 8/16/32 GT/s with 128b/130b encoding)")
_PCIE_SOURCE = ("PCI-SIG, PCI Express Base Specification 3.0 / 4.0 / 5.0: 8, 16 and 32 GT/s per "
                "lane with 128b/130b encoding (x16 per direction = rate x 16 x 128/130 / 8 bits)")
_SMI_LEGEND_SOURCE = "the legend printed by `nvidia-smi topo -m` (NVIDIA driver)"


# What each kind means, what bounds its bandwidth, and how far the data travels. Latency is
# given as a path description, not a number: vendors publish no per-hop latency, so the
# course measures it (`ddlab p2p`) instead of quoting one.
LINK_KINDS = {
    "NVLINK": {
        "labels": "NV1 .. NV18 (NV<n>)",
        "legend": "Connection traversing a bonded set of # NVLinks",
        "path": "GPU to GPU over n bonded NVLinks (directly, or through an NVSwitch); no PCIe, no CPU",
        "typical_bandwidth": ("n x the per-link rate of the generation, per direction: 20 GB/s (NVLink 1, "
                              "P100), 25 GB/s (NVLink 2-4: V100, A100, H100/H200), 50 GB/s (NVLink 5, "
                              "B200); e.g. NV18 on H100/H200 = 450 GB/s per direction. `nvidia-smi "
                              "nvlink -s` prints the raw per-link rate of your machine."),
        "typical_latency": "the shortest path there is: one GPU-to-GPU hop (or GPU-switch-GPU)",
        "sources": [g["source"] for g in NVLINK_GENERATIONS] + [_SMI_LEGEND_SOURCE],
    },
    "PIX": {
        "labels": "PIX",
        "legend": "Connection traversing at most a single PCIe bridge",
        "path": "both devices hang off the same PCIe switch; traffic turns around in that switch",
        "typical_bandwidth": "bounded by the devices' PCIe links: " + _PCIE_X16,
        "typical_latency": "one PCIe switch hop; the CPU is not on the path",
        "sources": [_PCIE_SOURCE, _SMI_LEGEND_SOURCE, _nccl.SOURCE],
    },
    "PXB": {
        "labels": "PXB",
        "legend": "Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
        "path": "through several PCIe switches, but below the CPU's host bridge",
        "typical_bandwidth": "bounded by the narrowest PCIe link on the path: " + _PCIE_X16,
        "typical_latency": "several PCIe switch hops; the CPU is not on the path",
        "sources": [_PCIE_SOURCE, _SMI_LEGEND_SOURCE, _nccl.SOURCE],
    },
    "PHB": {
        "labels": "PHB",
        "legend": "Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
        "path": "up to the CPU's PCIe host bridge (root complex) and back down",
        "typical_bandwidth": ("at most the PCIe link rate (" + _PCIE_X16 + "); peer-to-peer through a "
                              "root complex is often slower or unsupported, and then data is staged "
                              "through host memory"),
        "typical_latency": "PCIe hops plus the CPU's root complex",
        "sources": [_PCIE_SOURCE, _SMI_LEGEND_SOURCE, _nccl.SOURCE],
    },
    "NODE": {
        "labels": "NODE",
        "legend": ("Connection traversing PCIe as well as the interconnect between PCIe Host Bridges "
                   "within a NUMA node"),
        "path": "between two PCIe host bridges within one NUMA node (through the CPU's on-chip fabric)",
        "typical_bandwidth": "at most the PCIe link rate (" + _PCIE_X16 + "), often less",
        "typical_latency": "PCIe hops plus the on-chip fabric between root complexes",
        "sources": [_PCIE_SOURCE, _SMI_LEGEND_SOURCE, _nccl.SOURCE],
    },
    "SYS": {
        "labels": "SYS (older drivers: SOC)",
        "legend": ("Connection traversing PCIe as well as the SMP interconnect between NUMA nodes "
                   "(e.g., QPI/UPI)"),
        "path": "across NUMA nodes, over the SMP interconnect between them (QPI/UPI, Infinity Fabric)",
        "typical_bandwidth": ("at most the PCIe link rate (" + _PCIE_X16 + "); GPU peer-to-peer across "
                              "NUMA nodes is frequently unsupported, so data goes through host memory"),
        "typical_latency": "the longest path in one machine: PCIe, both root complexes and the SMP interconnect",
        "sources": [_PCIE_SOURCE, _SMI_LEGEND_SOURCE, _nccl.SOURCE],
    },
}
# How far each kind is on NCCL_P2P_LEVEL's scale: ddlab.system.nccl owns that mapping.
for _kind, _info in LINK_KINDS.items():
    _info["nccl_p2p_level"] = _nccl.KIND_LEVEL[_kind]


# --------------------------------------------------------------------------- topology legend
# The legend table: LINK_KINDS' wording with the typical figures of the catalogue above.
LEGEND_ORDER = ("NVLINK", "PIX", "PXB", "PHB", "NODE", "SYS")


def legend_rows(pcie_generation: int = 4, nvlink_generation: int = 4, nvlinks: int = 1) -> list:
    """Rows for the link legend table: label, meaning, data path, typical bandwidth and latency.

    The typical figures depend on the machine, so the caller says which PCIe and NVLink
    generations to assume (a DGX-1 V100 is PCIe 3 + NVLink 2; a DGX A100 PCIe 4 + NVLink 3)."""
    key = f"pcie{pcie_generation}_x16"
    if key not in LINKS:
        raise ValueError(f"PCIe generation {pcie_generation!r} is not in the catalogue; choose 3, 4 or 5")
    pcie, nv = LINKS[key], nvlink(nvlink_generation, nvlinks)
    typical = {
        "NVLINK": (f"{NVLINK_PER_LINK_GBS:g} GB/s per link per direction (NV{nvlinks}: {nv.bandwidth_gbs:g} GB/s)",
                   f"~{nv.latency_us:g} us"),
        "PIX": (f"up to {pcie.bandwidth_gbs:.1f} GB/s ({pcie.name})", f"~{pcie.latency_us:g} us"),
        "PXB": (f"up to {pcie.bandwidth_gbs:.1f} GB/s ({pcie.name})", f"~{pcie.latency_us:g} us"),
        "PHB": (f"up to {pcie.bandwidth_gbs:.1f} GB/s, often less through the CPU", f"~{pcie.latency_us:g} us or more"),
        "NODE": (f"up to {pcie.bandwidth_gbs:.1f} GB/s, often less through the CPU", f"~{pcie.latency_us:g} us or more"),
        "SYS": (f"below {pcie.bandwidth_gbs:.1f} GB/s: two PCIe trips and the SMP interconnect",
                "10-25 us when host staged"),
    }
    return [{"label": LINK_KINDS[k]["labels"], "meaning": LINK_KINDS[k]["legend"], "path": LINK_KINDS[k]["path"],
             "bandwidth": typical[k][0], "latency": typical[k][1]} for k in LEGEND_ORDER]


def legend_markdown(pcie_generation: int = 4, nvlink_generation: int = 4, nvlinks: int = 1) -> str:
    """The legend as a Markdown table (display it with IPython.display.Markdown)."""
    rows = legend_rows(pcie_generation, nvlink_generation, nvlinks)
    out = ["| label | nvidia-smi's legend | data path | typical bandwidth | typical latency |",
           "|---|---|---|---|---|"]
    cells = lambda r: [r[k].replace("<", "&lt;") for k in ("label", "meaning", "path", "bandwidth", "latency")]  # noqa: E731
    out += ["| " + " | ".join(cells(r)) + " |" for r in rows]
    out.append("")
    out.append(f"Bandwidth: {LINKS[f'pcie{pcie_generation}_x16'].bandwidth_source}; "
               f"{NVLINK_SPEC[nvlink_generation]}. Latency: {LAT_NVLINK}; {LAT_PCIE}.")
    return "\n".join(out)


def nvlink_generation_of(gpu_names) -> Optional[int]:
    """The NVLink generation of these GPUs from :data:`NVLINK_GENERATIONS`' GPU column ("NVIDIA H200"
    -> 4, "Tesla V100-SXM2-16GB" -> 2); None when no generation names them."""
    for g in NVLINK_GENERATIONS:
        models = g["gpu"].split("/")
        if any(m in str(name) for name in gpu_names for m in models):
            return int(g["generation"].split()[-1])
    return None


def for_label(label: str, nvlink_generation: Optional[int] = None, pcie_generation: int = 4) -> LinkTech:
    """The catalogue entry that best describes a `nvidia-smi topo -m` label on a given machine.

    ``NV<n>`` needs the NVLink generation (2, 3 or 4). PCIe labels map to the PCIe link of the
    given generation; ``SYS`` and ``NODE`` get it too, as an upper bound."""
    lab = label.strip().upper()
    if lab.startswith("NV") and lab[2:].isdigit():
        if nvlink_generation is None:
            raise ValueError(f"{label!r} is NVLink: say which generation (2 = V100, 3 = A100, 4 = H100/H200)")
        return nvlink(nvlink_generation, int(lab[2:]))
    if lab in ("PIX", "PXB", "PHB", "NODE", "SYS", "SOC"):
        return get(f"pcie{pcie_generation}_x16")
    raise ValueError(f"unknown topology label {label!r}; expected NV<n>, PIX, PXB, PHB, NODE or SYS")
