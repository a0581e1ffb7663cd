"""Reading a p2p bandwidth matrix: which GPUs are slow (:func:`outlier_gpus`), which pairs are
faster one way than the other (:func:`asymmetric_pairs`), the best ``k`` GPUs for a ring
(:func:`best_ring_subset`), all three with their typical causes (:func:`diagnose`); the paragraph
that says what a :class:`ddlab.measure.p2p.P2PResult` shows (:func:`summary`); and the link's
peak per pair from `nvidia-smi topo -m` labels (:func:`link_peaks`), or from this machine's detected
topology and PCIe links (:func:`peaks_here`). A run is kept with its summary: :func:`record` saves
a live result with this machine's provenance, :func:`load_recorded` returns one recorded on a course
machine (``source_code/reference/p2p/<name>.json``) and :func:`load` one saved at a path, each checked
against the ``p2p`` schema (:mod:`ddlab.base.schemas`).
"""
from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ddlab.base import files
from ddlab.measure.p2p import P2PResult

ASYMMETRY = 0.10         # i->j and j->i differing by more than this are called asymmetric
OUTLIER = 0.80           # a GPU whose pairs average below this share of the others' is an outlier


def offdiag(m: np.ndarray) -> np.ndarray:
    """The measured cells between two different GPUs (the diagonal and NaN cells left out), flat."""
    mask = ~np.eye(m.shape[0], dtype=bool) & np.isfinite(m)
    return m[mask]


def extreme(m: np.ndarray, labels, best=True):
    """(value, source label, destination label) of the largest (or smallest) off-diagonal cell."""
    a = np.where(np.eye(m.shape[0], dtype=bool) | ~np.isfinite(m), np.nan, m)
    if np.all(np.isnan(a)):
        return None
    k = int(np.nanargmax(a) if best else np.nanargmin(a))
    i, j = divmod(k, m.shape[0])
    return float(a[i, j]), labels[i], labels[j]


def single_link_peak(result: P2PResult, link_peak_gbps) -> Optional[float]:
    """The link's peak per direction as one number: ``link_peak_gbps`` (a number, or the largest
    of an n x n matrix), else the ``--link-peak`` the program was given; None when unknown."""
    if link_peak_gbps is None:
        p = result.parameters.get("link_peak_gbps")
        return float(p) if isinstance(p, (int, float)) and p > 0 else None
    if np.isscalar(link_peak_gbps):
        return float(link_peak_gbps) if link_peak_gbps > 0 else None
    vals = offdiag(np.asarray(link_peak_gbps, dtype=float))
    vals = vals[vals > 0]
    return float(vals.max()) if vals.size else None


def _uneven(link_peak_gbps) -> bool:
    """Whether a per-pair peak matrix holds more than one peak (a mesh of NV1/NV2 pairs, NVLink and PCIe)."""
    if link_peak_gbps is None or np.isscalar(link_peak_gbps):
        return False
    vals = offdiag(np.asarray(link_peak_gbps, dtype=float))
    return len({float(v) for v in vals[vals > 0]}) > 1


def pair_peak(result: P2PResult, link_peak_gbps, src, dst) -> Optional[float]:
    """The peak per direction of the link from GPU ``src`` to ``dst``: its entry of a per-pair matrix
    where the pairs' peaks differ (on 4 or 8 GPUs the best pair's share is of its own link, not of the
    fastest link of the machine), else :func:`single_link_peak`."""
    if not _uneven(link_peak_gbps):
        return single_link_peak(result, link_peak_gbps)
    v = float(np.asarray(link_peak_gbps, dtype=float)[result.labels.index(src), result.labels.index(dst)])
    return v if v > 0 else None


def _whose(link_peak_gbps) -> str:
    return "its link's" if _uneven(link_peak_gbps) else "the link's"


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
    peak = single_link_peak(result, link_peak_gbps)
    on, off = mats.get("uni_p2p_on"), mats.get("uni_p2p_off")
    if on is not None and (b := extreme(on, labels)):
        w = extreme(on, labels, best=False)
        peak = pair_peak(result, link_peak_gbps, b[1], b[2])
        share = (f"{100 * b[0] / peak:.0f}% of {_whose(link_peak_gbps)} peak, {peak:g} GB/s per direction, "
                 "as measured") if peak else ""
        own = share if _uneven(link_peak_gbps) else ""      # the pairs' peaks differ: the share is the best pair's
        s.append(f"Unidirectional with peer access: best {b[0]:.1f} GB/s (GPU {b[1]} -> {b[2]}"
                 + (f", {own}" if own else "") + f"), worst {w[0]:.1f} GB/s (GPU {w[1]} -> {w[2]})"
                 + (f" ({share})" if share and not own else "") + ".")
    if off is not None and offdiag(off).size:
        mean_off = float(offdiag(off).mean())
        s.append(f"Host-staged (P2P off): {mean_off:.1f} GB/s on average.")
        if on is not None and offdiag(on).size and mean_off > 0:
            ratio = float(offdiag(on).mean()) / mean_off
            if ratio < 1.3:
                s.append(f"Peer access barely helps ({ratio:.1f}x): P2P is probably not working between these "
                         "GPUs (check the connectivity matrix, the PCIe ACS/IOMMU settings and the driver).")
            else:
                s.append(f"Peer access is {ratio:.1f}x faster on average.")
    bi = mats.get("bi_p2p_on")
    if bi is not None and (b := extreme(bi, labels)):
        peak = pair_peak(result, link_peak_gbps, b[1], b[2])
        share = f", {100 * b[0] / (2 * peak):.0f}% of the peak in both directions" if peak else ""
        s.append(f"Both directions at once: up to {b[0]:.1f} GB/s (GPU {b[1]} <-> {b[2]}{share}).")
    ce = [v for k, v in result.variants.items() if k.startswith("uni_p2p_on:ce")]
    sm = [v for k, v in result.variants.items() if k.startswith("uni_p2p_on:sm")]
    if ce and sm:
        best_ce = max((x[0] for x in (extreme(v, labels) for v in ce) if x), default=float("nan"))
        best_sm = max((x[0] for x in (extreme(v, labels) for v in sm) if x), default=float("nan"))
        s.append(f"Copy engine best {best_ce:.1f} GB/s against SM-kernel copy best {best_sm:.1f} GB/s.")
    lat_on, lat_off = mats.get("lat_gpu_p2p_on"), mats.get("lat_gpu_p2p_off")
    if lat_on is not None and offdiag(lat_on).size:
        txt = f"GPU-timed latency: {float(np.median(offdiag(lat_on))):.2f} us with peer access"
        if lat_off is not None and offdiag(lat_off).size:
            txt += f" against {float(np.median(offdiag(lat_off))):.2f} us host-staged"
        s.append(txt + " (median over pairs).")
    pp = [v for k, v in result.variants.items() if k.startswith("lat_gpu_p2p_on:sm")]
    if pp and offdiag(pp[0]).size:
        s.append(f"SM ping-pong one-way latency: {float(np.median(offdiag(pp[0]))):.2f} us.")
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
    in :mod:`ddlab.system.links`. Pass the result to
    :func:`ddlab.views.p2p_plots.plot_heatmaps` as ``link_peak_gbps``."""
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



def topology_peaks(result: P2PResult, topo, gpu_names=(), pcie_generation: int = 4):
    """The peak per direction (GB/s) of each pair of ``result`` from a topology's labels
    (:func:`link_peaks`; NVLink at the GPUs' generation, :func:`ddlab.system.links.nvlink_generation_of`;
    PCIe labels at ``pcie_generation``): an n x n matrix when the topology has the result's number of
    GPUs, one number when it has another number (e.g. CUDA_VISIBLE_DEVICES chose some) but every pair
    has the same label; otherwise, or for an NVLink of a generation the catalogue lacks, None."""
    from ddlab.system import links
    gpus = list(topo.gpus)
    labels = [["X" if a == b else topo.link(a, b).label for b in gpus] for a in gpus]
    try:
        peaks = link_peaks(labels, nvlink_generation=links.nvlink_generation_of(gpu_names),
                           pcie_generation=pcie_generation) if len(gpus) >= 2 else None
    except ValueError:
        return None
    if peaks is None:
        return None
    if len(gpus) == result.n:
        return peaks
    distinct = {labels[i][j] for i in range(len(gpus)) for j in range(len(gpus)) if i != j}
    return float(offdiag(peaks)[0]) if len(distinct) == 1 else None


def peaks_here(result: P2PResult, inventory, topo=None, pcie_link_list=None):
    """:func:`topology_peaks` for a run measured on this machine: its `nvidia-smi topo -m`, its GPUs'
    names and the lowest maximum PCIe generation among its GPUs (:mod:`ddlab.system.pcie`; 4 when none
    is read). ``topo`` and ``pcie_link_list`` stand in for the detected ones (tests). None when the
    topology cannot be read."""
    from ddlab.system import pcie, topology
    if topo is None:
        try:
            topo = topology.Topology.from_system()
        except Exception:  # noqa: BLE001 - no nvidia-smi topology here: no peaks, the caller says so
            return None
    if pcie_link_list is None:
        pcie_link_list = pcie.pcie_links([])
    gens = [ln.gen_max for ln in pcie_link_list if getattr(ln, "gen_max", None)]
    names = [g.name for g in getattr(inventory, "gpus", [])]
    return topology_peaks(result, topo, names, pcie_generation=min(gens) if gens else 4)


# ----------------------------------------------------------------------------- recorded runs
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
    return files.write_json(path, obj, schema="p2p", what="p2p recording")


def load_recorded(name: str = "h200x2") -> P2PResult:
    """A run recorded on one of the course's machines (source_code/reference/p2p/<name>.json)."""
    from ddlab.base import reference
    return _result_of(reference.load("p2p", name))


def load(path: str) -> P2PResult:
    """A run saved by :func:`record` at ``path`` (one clear message when it is missing, corrupt
    or breaks the schema)."""
    return _result_of(files.read_json(path, "p2p recording", schema="p2p"))


def _result_of(obj: dict) -> P2PResult:
    result = P2PResult.from_dict(obj["result"])
    result.provenance = obj["provenance"]
    result.text = obj.get("text")
    return result

