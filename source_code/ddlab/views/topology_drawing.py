"""Draw a :class:`~ddlab.system.topology.Topology`: the GPUs (boxes) on a ring, NUMA groups
contiguous and shaded, NICs outside it next to their closest GPUs, and every link styled by its
kind and labelled.

    from ddlab.system import topology
    from ddlab.views import topology_drawing
    topology_drawing.draw(topology.recorded("dgx1-v100"))
"""
from __future__ import annotations

from typing import Optional

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


def _line_width(link) -> float:
    return min(1.2 + 0.22 * link.nvlinks, 5.0) if link.kind == "NVLINK" else 1.4


def draw(topo, ax=None, title: Optional[str] = None):
    """Draw the GPUs (boxes), NICs and CPU/NUMA groups of ``topo`` with links styled by kind and
    labelled. Returns the matplotlib Axes (a new figure when ``ax`` is None). GPU boxes carry gid
    ``gpu:<i>``, NIC boxes ``nic:<name>`` and link lines ``link:<i>-<j>`` / ``niclink:<i>-<name>``."""
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

