"""Drawings of the data path between two GPUs, for notebook 2 and ``make images``.

* :func:`host_staging` - peer access off: GPU0 -> PCIe -> CPU -> host memory, then host
  memory -> CPU -> PCIe -> GPU1. Two PCIe crossings and a stop in host memory; the NVLink
  between the GPUs, if there is one, sits idle.
* :func:`peer_to_peer` - peer access on: GPU0 -> NVLink -> GPU1, or without NVLink
  GPU0 -> PCIe switch -> GPU1. One hop, host memory untouched.
* :func:`data_paths` - both side by side.

Both panels draw the same machine (two GPUs under one PCIe switch, the switch under the
CPU, host memory beside the CPU, an NVLink bridge between the GPUs) so that only the path
changes. Each function takes an optional matplotlib ``ax`` and returns the Figure.
Nothing random, fixed sizes: the PNGs ``tools/make_images.py`` writes are reproducible.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

# Colours: a colour-blind-safe palette (ColorBrewer Dark2).
STAGED = "#d95f02"    # host staging path
NVLINK = "#1b9e77"    # NVLink path
PCIE = "#7570b3"      # PCIe peer-to-peer path
HW = "#4d4d4d"        # hardware outlines and wires
FADED = "#bdbdbd"

# The machine, in axis units (10 x 6.4): x, y, width, height, label.
BOXES = {
    "mem": (0.3, 4.6, 3.0, 1.1, "Host memory (DRAM)\npinned staging buffer"),
    "cpu": (4.3, 4.6, 2.0, 1.1, "CPU\nPCIe root complex"),
    "sw": (4.3, 2.6, 2.0, 0.8, "PCIe switch"),
    "gpu0": (0.3, 0.3, 2.6, 1.4, "GPU0\nHBM"),
    "gpu1": (7.1, 0.3, 2.6, 1.4, "GPU1\nHBM"),
}
# The wires between them (end points on the box edges).
WIRES = {
    "bus": ((3.3, 5.15), (4.3, 5.15)),
    "up": ((5.3, 3.4), (5.3, 4.6)),
    "left": ((2.3, 1.7), (4.3, 2.75)),
    "right": ((7.7, 1.7), (6.3, 2.75)),
    "nvlink": ((2.9, 0.8), (7.1, 0.8)),
}


def _box(ax, key, faded=False):
    x, y, w, h, text = BOXES[key]
    colour = FADED if faded else HW
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02,rounding_size=0.12",
                                linewidth=1.6, edgecolor=colour, facecolor="white", zorder=2))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=9.5,
            color=FADED if faded else "black", zorder=3)


def _wire(ax, key, label=None, faded=False, side=-1.0):
    """A physical link: a thick grey line, its label on the ``side`` opposite the data arrows."""
    a, b = WIRES[key]
    ax.plot([a[0], b[0]], [a[1], b[1]], color=FADED if faded else "#969696", linewidth=5,
            solid_capstyle="butt", zorder=1, alpha=0.6)
    if label:
        (x, y), (nx, ny) = _mid(a, b), _normal(a, b)
        ax.text(x + side * 0.32 * nx, y + side * 0.32 * ny, label, fontsize=8.5,
                color=FADED if faded else "#525252", ha="center", va="center", zorder=3)


def _normal(a, b):
    dx, dy = b[0] - a[0], b[1] - a[1]
    n = (dx * dx + dy * dy) ** 0.5
    return (-dy / n, dx / n)


def _mid(a, b):
    return ((a[0] + b[0]) / 2, (a[1] + b[1]) / 2)


def _along(key, offset, reverse=False, trim=0.12):
    """A segment parallel to wire ``key``, ``offset`` to its left (negative: right)."""
    a, b = WIRES[key]
    if reverse:
        a, b = b, a
        offset = -offset
    nx, ny = _normal(a, b)
    dx, dy = b[0] - a[0], b[1] - a[1]
    n = (dx * dx + dy * dy) ** 0.5
    tx, ty = dx / n * trim, dy / n * trim
    return ((a[0] + nx * offset + tx, a[1] + ny * offset + ty), (b[0] + nx * offset - tx, b[1] + ny * offset - ty))


def _arrows(ax, segments, colour, step=None, dashed=False):
    """The data path, one arrow per wire it crosses, a numbered marker at its start."""
    for a, b in segments:
        ax.add_patch(FancyArrowPatch(a, b, arrowstyle="-|>", mutation_scale=14, linewidth=2.2, color=colour,
                                     linestyle="--" if dashed else "-", shrinkA=0, shrinkB=0, zorder=4))
    if step is not None:
        (x, y), _ = segments[0]
        ax.text(x, y, str(step), ha="center", va="center", fontsize=9, fontweight="bold", color="white",
                zorder=5, bbox=dict(boxstyle="circle,pad=0.25", facecolor=colour, edgecolor="none"))


def _machine(ax, fade_host=False, fade_nvlink=False):
    for key in BOXES:
        _box(ax, key, faded=fade_host and key in ("mem", "cpu"))
    _wire(ax, "bus", faded=fade_host)
    _wire(ax, "up", "PCIe", faded=fade_host, side=-2.4)
    _wire(ax, "left", "PCIe", side=-1.0)
    _wire(ax, "right", "PCIe", side=1.0)
    # Without peer access even an NVLink between the two GPUs carries nothing: say so on the wire.
    _wire(ax, "nvlink", "NVLink (idle: no peer access)" if fade_nvlink else "NVLink", faded=fade_nvlink, side=-1.0)
    ax.set_xlim(0, 10)
    ax.set_ylim(-0.9, 6.0)
    ax.set_aspect("equal")
    ax.axis("off")


def _new_ax(ax, size=(8.0, 5.6)):
    if ax is None:
        fig, ax = plt.subplots(figsize=size, dpi=100)
        return fig, ax
    return ax.figure, ax


def host_staging(ax=None):
    """Peer access off: the copy goes through host memory (two PCIe crossings)."""
    fig, ax = _new_ax(ax)
    _machine(ax, fade_nvlink=True)
    # 1: GPU0 -> PCIe -> switch -> CPU -> host memory
    _arrows(ax, [_along("left", 0.25), _along("up", 0.25), _along("bus", 0.2, reverse=True)], STAGED, step=1)
    # 2: host memory -> CPU -> switch -> PCIe -> GPU1
    _arrows(ax, [_along("bus", -0.2), _along("up", -0.25, reverse=True), _along("right", -0.25, reverse=True)],
            STAGED, step=2, dashed=True)
    ax.set_title("Host staging (peer access off)", fontsize=11, fontweight="bold")
    ax.text(5.0, -0.25, "1: GPU0 to host memory over PCIe.  2: host memory to GPU1 over PCIe.\n"
            "Two PCIe crossings, a stop in host memory, and the CPU drives both copies.",
            ha="center", va="top", fontsize=8.5, color=STAGED)
    return fig


def peer_to_peer(ax=None):
    """Peer access on: GPU0 writes straight into GPU1's memory, over NVLink or a PCIe switch."""
    fig, ax = _new_ax(ax)
    _machine(ax, fade_host=True)
    _arrows(ax, [_along("nvlink", 0.25)], NVLINK, step=1)
    _arrows(ax, [_along("left", 0.25), _along("right", -0.25, reverse=True)], PCIE, step=2, dashed=True)
    ax.text(6.5, 5.15, "not on the path", fontsize=8.5, color=FADED, ha="left", va="center", style="italic")
    ax.set_title("Peer-to-peer (peer access on)", fontsize=11, fontweight="bold")
    ax.text(5.0, -0.25, "1: over NVLink, GPU to GPU directly.\n"
            "2: without NVLink, through the PCIe switch; host memory is never touched.",
            ha="center", va="top", fontsize=8.5, color="#333333")
    return fig


def data_paths():
    """Host staging and peer-to-peer side by side, on the same machine."""
    fig, axes = plt.subplots(1, 2, figsize=(12.8, 5.0), dpi=100)
    host_staging(axes[0])
    peer_to_peer(axes[1])
    fig.suptitle("How data gets from GPU0 to GPU1", fontsize=13, fontweight="bold")
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- ring all-reduce
REDUCE = "#d95f02"    # reduce-scatter: the receiver adds the chunk
GATHER = "#1b9e77"    # all-gather: the receiver copies the complete chunk


def _contributors(value: int, n: int) -> list:
    """Rank r starts with 2**r in every chunk, so a chunk's value names who has been added in."""
    return [r for r in range(n) if int(value) >> r & 1]


def _ring_panel(ax, state, n, title, transfers=(), colour=None):
    """One step: rows are ranks (0 at the top), columns chunks; each cell says which ranks'
    contributions it holds; an arrow per transfer from the sender's chunk to the receiver's."""
    w, h, gap = 1.5, 0.8, 0.6
    top = lambda r: -r * (h + gap)
    shade = plt.get_cmap("Blues")

    def cell(r, c, **kw):
        ax.add_patch(FancyBboxPatch((c * w + 0.07, top(r) - h), w - 0.14, h,
                                    boxstyle="round,pad=0,rounding_size=0.08", **kw))

    def arrow(a, b):
        ax.add_patch(FancyArrowPatch(a, b, arrowstyle="-|>", mutation_scale=12, linewidth=2.0, color=colour,
                                     shrinkA=0, shrinkB=0, zorder=5))

    for r in range(n):
        for c in range(n):
            who = _contributors(state[r][c], n)
            full = len(who) == n
            face = "#08519c" if full else shade(0.1 + 0.5 * (len(who) - 1) / max(n - 1, 1))
            cell(r, c, facecolor=face, edgecolor=HW, linewidth=0.8, zorder=2)
            ax.text(c * w + w / 2, top(r) - h / 2, "sum" if full else "+".join(map(str, who)), ha="center",
                    va="center", fontsize=9, color="white" if full else "black",
                    fontweight="bold" if full else "normal", zorder=3)
        ax.text(-0.12, top(r) - h / 2, f"rank {r}", ha="right", va="center", fontsize=9)
    for t in transfers:
        c, src = t.chunk, t.src
        cell(src, c, facecolor="none", edgecolor=colour, linewidth=2.6, zorder=4)
        x = c * w + w / 2
        if t.dst == src + 1:            # the next row down
            arrow((x, top(src) - h - 0.03), (x, top(t.dst) + 0.03))
        else:                           # round the ring: out of the bottom, back in at the top
            arrow((x, top(src) - h - 0.03), (x, top(src) - h - 0.5))
            ax.text(x + 0.12, top(src) - h - 0.3, f"to rank {t.dst}", ha="left", va="center", fontsize=8,
                    color=colour)
            arrow((x, top(t.dst) + 0.5), (x, top(t.dst) + 0.03))
            ax.text(x + 0.12, top(t.dst) + 0.3, f"from rank {src}", ha="left", va="center", fontsize=8,
                    color=colour)
    for c in range(n):
        ax.text(c * w + w / 2, top(n - 1) - h - 0.6, f"chunk {c}", ha="center", va="top", fontsize=8,
                color="#525252")
    ax.set_title(title, fontsize=10, fontweight="normal" if transfers else "bold", pad=2)
    ax.set_xlim(-1.1, n * w + 0.05)
    ax.set_ylim(top(n - 1) - h - 1.0, top(0) + 0.65)
    ax.set_aspect("equal")
    ax.axis("off")


def ring_allreduce(n: int = 4):
    """The ring all-reduce of n ranks, step by step, drawn from the simulator
    (:func:`ddlab.cost.allreduce_algorithms.ring_allreduce`): the top row is the reduce-scatter,
    the bottom row the all-gather. Each rank's buffer is cut into n chunks; a cell says
    whose contributions it holds ("sum": all n). Returns the Figure."""
    import numpy as np
    from ddlab.cost import allreduce_algorithms as ar

    if isinstance(n, bool) or not isinstance(n, int) or not 2 <= n <= 8:
        raise ValueError(f"draw a ring of 2 to 8 ranks, got {n!r}")
    start = [np.full(n, 2 ** r, dtype=np.int64) for r in range(n)]
    run = ar.ring_allreduce(start, keep_states=True)
    steps = run.steps
    fig, axes = plt.subplots(2, n, figsize=(3.6 * n, 1.6 + 1.45 * n), dpi=100, squeeze=False)
    for i, s in enumerate(steps):
        row, col = (0, i) if s.phase == "reduce-scatter" else (1, i - (n - 1))
        colour = REDUCE if s.phase == "reduce-scatter" else GATHER
        verb = "adds it in" if s.phase == "reduce-scatter" else "copies it"
        _ring_panel(axes[row][col], s.before, n, f"{s.phase} step {s.number} of {n - 1}\n"
                    f"each rank sends 1 chunk, the next {verb}", s.transfers, colour)
    _ring_panel(axes[0][n - 1], steps[n - 1].before if n > 1 else run.results, n,
                "after reduce-scatter:\neach rank owns one summed chunk")
    _ring_panel(axes[1][n - 1], run.results, n, "after all-gather:\nevery rank has the whole sum")
    factor = ar.ring_traffic_factor(n)
    fig.suptitle(f"Ring all-reduce on {n} ranks (ring 0 \u2192 1 \u2192 \u2026 \u2192 {n - 1} \u2192 0)",
                 fontsize=13, fontweight="bold")
    fig.text(0.5, 0.005, f"Each rank sends one chunk of S/{n} in each of the {n - 1} reduce-scatter steps and the "
             f"{n - 1} all-gather steps: 2({n}-1) \u00d7 S/{n} = {factor.numerator}/{factor.denominator} S "
             f"= {float(factor):.3g} S sent per rank (and as much received). For any n, 2(n-1)/n stays below 2.",
             ha="center", va="bottom", fontsize=9.5)
    fig.tight_layout(rect=(0, 0.04, 1, 0.96), h_pad=2.5)
    return fig
