"""Collective sweeps drawn over message size: :func:`plot_sweep` takes
:class:`ddlab.measure.collectives.SweepResult` objects (one line each).
"""
from __future__ import annotations

from typing import Mapping, Optional

from ddlab.base.units import format_bytes
from ddlab.measure.collectives import SweepResult


def plot_sweep(results, ax=None, metric: str = "busbw", logy: Optional[bool] = None):
    """Draw one line per sweep over message size (log x). ``results``: a SweepResult, a list of
    them, or a dict label -> SweepResult. ``metric``: "busbw", "algbw" or "time"."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    keys = {"busbw": ("busbw_gbps", "bus bandwidth (GB/s)"), "algbw": ("algbw_gbps", "algorithm bandwidth (GB/s)"),
            "time": ("time_us", "time per call (us)")}
    if metric not in keys:
        raise ValueError(f"metric must be one of {', '.join(keys)}, got {metric!r}")
    if isinstance(results, SweepResult):
        items = [(results.label, results)]
    elif isinstance(results, Mapping):
        # keyed by path name (what load_recorded returns): the sweep's own label, which names the path as it ran
        items = [(v.label if str(k) == v.path else str(k), v) for k, v in results.items()]
    else:
        items = [(r.label, r) for r in results]
    if not items:
        raise ValueError("nothing to plot: no sweep results given")
    key, ylabel = keys[metric]
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    for name, r in items:
        xs = [row["bytes"] for row in r.rows]
        ys = [row[key] for row in r.rows]
        ax.plot(xs, ys, marker="o", ms=3, label=name, linestyle="--" if r.source == "recorded" else "-")
    ax.set_xscale("log", base=2)
    if logy is None:
        peaks = [max(row[key] for row in r.rows) for _, r in items if r.rows]
        logy = metric == "time" or (len(peaks) > 1 and min(peaks) > 0 and max(peaks) / min(peaks) > 10)
    if logy:
        ax.set_yscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: format_bytes(v).replace(" ", "")))
    ax.set_xlabel("message size (bytes, as nccl-tests counts them)")
    ax.set_ylabel(ylabel)
    ops = sorted({r.op for _, r in items})
    ax.set_title(f"{', '.join(ops)} over message size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    return ax
