"""The host link drawn: bandwidth against copy size, pinned and pageable, each direction, from
each NUMA node, with the link's raw rate per direction as a line. Takes a
:class:`ddlab.measure.host_link.HostLinkResult` (the data is drawn, never measured here)."""
from __future__ import annotations

from typing import Optional

from ddlab.base import units

COLOURS = {"h2d": "#1f77b4", "d2h": "#d62728", "bidir": "#2ca02c"}
STYLES = {"pinned": "-", "pageable": "--"}
LABELS = {"h2d": "host -> GPU", "d2h": "GPU -> host", "bidir": "both at once"}


def plot(result, ax=None, caption: Optional[str] = None, directions=("h2d", "d2h", "bidir")):
    """GB/s against size for ``result``: the GPU's own NUMA node in full lines (pinned) and
    dashed (pageable), the other nodes' pinned host -> GPU thin and dotted, and the raw rate of
    the link per direction (when known) in grey. Returns the axes."""
    import matplotlib.pyplot as plt
    if ax is None:
        _, ax = plt.subplots(figsize=(7.5, 4.2))
    home = result._node(None)
    for mem in ("pinned", "pageable"):
        for d in directions:
            rows = sorted((r for r in result.rows if r["numa_node"] == home and r["memory"] == mem
                           and r["direction"] == d), key=lambda r: r["bytes"])
            if rows:
                ax.plot([r["bytes"] for r in rows], [r["gbps"] for r in rows], STYLES[mem], color=COLOURS[d],
                        marker="o", markersize=3, label=f"{LABELS[d]}, {mem}")
    for node in result.nodes:
        if node == home:
            continue
        rows = sorted((r for r in result.rows if r["numa_node"] == node and r["memory"] == "pinned"
                       and r["direction"] == "h2d"), key=lambda r: r["bytes"])
        if rows:
            ax.plot([r["bytes"] for r in rows], [r["gbps"] for r in rows], ":", color="black", linewidth=1,
                    label=f"host -> GPU, pinned, from NUMA node {node}")
    peak = result.peak_gbps
    if peak:
        ax.axhline(peak, color="grey", linewidth=1, linestyle="-.",
                   label=f"PCIe Gen{result.link.get('gen')} x{result.link.get('width')} raw, per direction")
    ax.set_xscale("log", base=2)
    sizes = sorted({r["bytes"] for r in result.rows})
    if sizes:
        ax.set_xticks(sizes)
        ax.set_xticklabels([units.format_bytes(s) for s in sizes], rotation=30, fontsize=8)
    ax.set_xlabel("copy size")
    ax.set_ylabel("GB/s (10^9 bytes/s)")
    where = f" from NUMA node {home}" + (" (the GPU's)" if home == result.gpu_node else "") if home is not None else ""
    ax.set_title(f"Host <-> GPU {result.device.get('index', 0)} ({result.device.get('name', '?')}){where}\n"
                 f"{result.method}" + (f"\n{caption}" if caption else ""), fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    return ax
