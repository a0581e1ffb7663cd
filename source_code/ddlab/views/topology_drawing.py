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


class _Drawing:
    """One topology drawing: where each GPU sits on the ring, the boxes and labels placed so far,
    and the link kinds drawn (for the legend)."""

    BOX_W, BOX_H = 1.15, 0.62

    def __init__(self, topo, ax):
        import math
        self.topo, self.ax = topo, ax
        gpus = topo.gpus
        n = self.n = len(gpus)
        # GPUs on one circle, NUMA groups contiguous: chords between points of a circle never cross
        # another GPU's box, and each group gets its own arc of the ring.
        self.groups = topo.numa_groups()
        order = [g for _, members in self.groups for g in members]
        self.radius = 2.0 if n <= 2 else max(2.2, 0.6 * n)
        self.angle = {g: math.pi if n == 1 else (math.pi / 2 - 2 * math.pi * pos / n + (math.pi / n if n == 2 else 0))
                      for pos, g in enumerate(order)}
        self.xy = {g: ((0.0, 0.0) if n == 1 else (self.radius * math.cos(self.angle[g]),
                                                  self.radius * math.sin(self.angle[g]))) for g in gpus}
        self.placed_labels: list = []
        self.boxes: list = [(x, y, self.BOX_W, self.BOX_H) for x, y in self.xy.values()]  # centre and size
        self.kinds_used: set = set()
        self.nic_r = self.radius + 2.3

    def free_spot(self, p0, p1):
        """A point on the line p0-p1 clear of the boxes and of earlier labels."""
        import math
        # A chord that passes near the centre of the ring crosses the other long chords there
        # (on a DGX-1 four of them meet in the middle), so its label goes near one end, where
        # the lines fan out and each label sits clearly on its own line.
        dx, dy = p1[0] - p0[0], p1[1] - p0[1]
        off_centre = abs(p0[0] * dy - p0[1] * dx) / max(math.hypot(dx, dy), 1e-9)
        if self.n >= 4 and off_centre < 0.45 * self.radius:
            spots = (0.24, 0.76, 0.3, 0.7, 0.2, 0.8, 0.36, 0.64)
        else:
            spots = (0.5, 0.38, 0.62, 0.3, 0.7, 0.44, 0.56, 0.25, 0.75)
        for t in spots:
            x, y = p0[0] + t * (p1[0] - p0[0]), p0[1] + t * (p1[1] - p0[1])
            # Labels are wider than tall: keep them apart by a box, not a circle.
            if all(abs(x - u) > 1.1 or abs(y - v) > 0.4 for u, v in self.placed_labels) and \
                    all(abs(x - bx) > bw / 2 + 0.3 or abs(y - by) > bh / 2 + 0.15 for bx, by, bw, bh in self.boxes):
                return x, y
        return p0[0] + 0.5 * (p1[0] - p0[0]), p0[1] + 0.5 * (p1[1] - p0[1])

    def label_at(self, p0, p1, text, color):
        x, y = self.free_spot(p0, p1)
        self.placed_labels.append((x, y))
        self.ax.text(x, y, text, ha="center", va="center", fontsize=8, color=color, zorder=6,
                     bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.9})

    def numa_bands(self) -> list:
        """CPU / NUMA groups: a shaded band along the ring behind the group's GPUs; their legend handles."""
        import math

        from matplotlib.patches import FancyBboxPatch, Patch, Wedge
        handles = []
        step = 360.0 / max(self.n, 1)
        for gi, (key, members) in enumerate([(k, m) for k, m in self.groups if k is not None]):
            color = _GROUP_COLORS[gi % len(_GROUP_COLORS)]
            if self.n == 1:
                band = FancyBboxPatch((-0.95, -0.6), 1.9, 1.2, boxstyle="round,pad=0.05", fc=color, ec="none", zorder=0)
            else:
                degs = [math.degrees(self.angle[g]) for g in members]
                lo, hi = min(degs) - step / 2.2, max(degs) + step / 2.2
                if len(members) == self.n:
                    lo, hi = 0.0, 360.0
                band = Wedge((0, 0), self.radius + 0.85, lo, hi, width=1.7, facecolor=color, edgecolor="none",
                             alpha=0.85, zorder=0)
            band.set_gid(f"numa:{key}")
            self.ax.add_patch(band)
            handles.append(Patch(facecolor=color, edgecolor="none", label=key))
        return handles

    def gpu_links(self):
        """The GPU-GPU links: chords styled by kind, or one hub when every pair is the same NVLink."""
        from matplotlib.patches import FancyBboxPatch
        topo, ax, xy, n = self.topo, self.ax, self.xy, self.n
        pair_links = {(i, j): topo.link(i, j) for i, j in topo.pairs()}
        labels = {ln.label for ln in pair_links.values()}
        any_nv = any(ln.kind == "NVLINK" for ln in pair_links.values())
        if n >= 3 and len(labels) == 1 and next(iter(pair_links.values())).kind == "NVLINK":
            # Every pair equal over NVLink: draw the fabric as a hub instead of n(n-1)/2 chords.
            ln = next(iter(pair_links.values()))
            self.kinds_used.add("NVLINK")
            st = KIND_STYLE["NVLINK"]
            for g in topo.gpus:
                line, = ax.plot([0, xy[g][0]], [0, xy[g][1]], color=st["color"], linestyle=st["linestyle"],
                                linewidth=_line_width(ln), zorder=2)
                line.set_gid(f"link:{g}-hub")
            hub = FancyBboxPatch((-1.3, -0.42), 2.6, 0.84, boxstyle="round,pad=0.05", fc="#e8f5ec", ec=st["color"],
                                 zorder=5)
            hub.set_gid("nvlink-hub")
            ax.add_patch(hub)
            ax.text(0, 0, f"NVLink all-to-all\nevery pair {ln.label}", ha="center", va="center", fontsize=8, zorder=6)
            return
        for (i, j), ln in sorted(pair_links.items(), key=lambda kv: kv[1].rank):
            st = KIND_STYLE[ln.kind]
            self.kinds_used.add(ln.kind)
            faint = any_nv and ln.kind != "NVLINK"
            line, = ax.plot([xy[i][0], xy[j][0]], [xy[i][1], xy[j][1]], color=st["color"], linestyle=st["linestyle"],
                            linewidth=0.9 if faint else _line_width(ln), alpha=0.45 if faint else 0.95,
                            zorder=1.5 if faint else 2)
            line.set_gid(f"link:{i}-{j}")
            # Label every NVLink; label PCIe-class pairs too unless NVLink pairs would be buried.
            if not faint or n <= 4:
                self.label_at(xy[i], xy[j], ln.label, st["color"])

    def nic_angle(self, near: list, used_angles: list) -> float:
        """Where a NIC goes on the outer ring: towards the GPUs ``near`` it, clear of NICs placed."""
        import math
        if self.n == 1 or len(near) == self.n:
            a = -math.pi / 2
        else:
            a = math.atan2(sum(math.sin(self.angle[g]) for g in near), sum(math.cos(self.angle[g]) for g in near))
        for _ in range(24):  # step aside from NICs already placed at this angle
            if all(abs(math.atan2(math.sin(a - u), math.cos(a - u))) >= 0.22 for u in used_angles):
                break
            a += 0.24
        return a

    def nics(self):
        """NICs outside the ring, next to the GPUs they are closest to, linked to those GPUs."""
        import math

        from matplotlib.patches import FancyBboxPatch
        topo, ax, xy = self.topo, self.ax, self.xy
        used_angles: list = []
        for col, name in zip(topo.nic_columns, topo.nics):
            lk = {g: topo.links[(f"GPU{g}", col)] for g in topo.gpus}
            best = max(ln.rank for ln in lk.values())
            near = [g for g in topo.gpus if lk[g].rank == best]
            a = self.nic_angle(near, used_angles)
            used_angles.append(a)
            p = (self.nic_r * math.cos(a), self.nic_r * math.sin(a)) if self.n > 1 else (2.2 * len(used_angles) - 2.2, -2.2)
            self.boxes.append((p[0], p[1], 1.0, 0.4))
            nb = FancyBboxPatch((p[0] - 0.5, p[1] - 0.2), 1.0, 0.4, boxstyle="round,pad=0.04", fc="#f4f4f4",
                                ec="#666666", zorder=5)
            nb.set_gid(f"nic:{name}")
            ax.add_patch(nb)
            ax.text(p[0], p[1], name, ha="center", va="center", fontsize=7.5, zorder=6)
            for g in near:
                ln = lk[g]
                st = KIND_STYLE[ln.kind]
                self.kinds_used.add(ln.kind)
                line, = ax.plot([p[0], xy[g][0]], [p[1], xy[g][1]], color=st["color"], linestyle=st["linestyle"],
                                linewidth=1.0, alpha=0.8, zorder=1.8)
                line.set_gid(f"niclink:{g}-{name}")
                self.label_at(p, xy[g], ln.label, st["color"])

    def gpu_boxes(self):
        from matplotlib.patches import FancyBboxPatch
        w, h = self.BOX_W, self.BOX_H
        for g in self.topo.gpus:
            x, y = self.xy[g]
            gb = FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.04",
                                fc="#76b900", ec="#2f4f00", zorder=7)
            gb.set_gid(f"gpu:{g}")
            self.ax.add_patch(gb)
            model = self.topo.gpu_names.get(g, "")
            short = model.replace("NVIDIA ", "").split()[0] if model else ""
            self.ax.text(x, y, f"GPU{g}" + (f"\n{short}" if short else ""), ha="center", va="center", fontsize=9,
                         fontweight="bold", color="white", zorder=8)

    def legend_and_frame(self, group_handles: list, title: Optional[str]):
        from matplotlib.lines import Line2D
        topo, ax, n = self.topo, self.ax, self.n
        handles = []
        for kind in ("NVLINK", "PIX", "PXB", "PHB", "NODE", "SYS"):
            if kind in self.kinds_used:
                st = KIND_STYLE[kind]
                name = "NV# (NVLink)" if kind == "NVLINK" else ("SYS/SOC" if kind == "SYS" else kind)
                handles.append(Line2D([], [], color=st["color"], linestyle=st["linestyle"], linewidth=2, label=name))
        if handles or group_handles:
            ax.legend(handles=handles + group_handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8,
                      frameon=False, title="link kind / CPU-NUMA group", title_fontsize=8)
        extent = (self.nic_r + 0.8) if topo.nic_columns else (self.radius + 1.2)
        if n == 1:
            extent = 2.5 if not topo.nic_columns else 3.5
        ax.set_xlim(-extent, extent)
        ax.set_ylim(-extent, extent)
        ax.set_aspect("equal")
        ax.axis("off")
        ax.set_title(title or f"{topo.name or 'topology'}: {n} GPU{'s' if n != 1 else ''}"
                     + (f", {len(topo.nics)} NIC{'s' if len(topo.nics) != 1 else ''}" if topo.nics else ""))


def draw(topo, ax=None, title: Optional[str] = None):
    """Draw the GPUs (boxes), NICs and CPU/NUMA groups of ``topo`` with links styled by kind and
    labelled. Returns the matplotlib Axes (a new figure when ``ax`` is None). GPU boxes carry gid
    ``gpu:<i>``, NIC boxes ``nic:<name>`` and link lines ``link:<i>-<j>`` / ``niclink:<i>-<name>``."""
    import matplotlib.pyplot as plt

    n = len(topo.gpus)
    if ax is None:
        size = 5.5 if n <= 2 else (6.5 if n <= 4 else 8.0)
        _, ax = plt.subplots(figsize=(size + 1.5, size))
    d = _Drawing(topo, ax)
    group_handles = d.numa_bands()
    d.gpu_links()
    d.nics()
    d.gpu_boxes()
    d.legend_and_frame(group_handles, title)
    return ax

