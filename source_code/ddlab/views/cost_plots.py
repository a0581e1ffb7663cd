"""Plots of the cost model: a measured sweep with its alpha-beta fit
(:mod:`ddlab.cost.alpha_beta`), and the step model's predicted against measured speedups
(:mod:`ddlab.cost.validation`). Each takes the data it draws."""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from ddlab.base.units import format_bytes, format_rate, format_time
from ddlab.cost.alpha_beta import AlphaBeta, fit_alpha_beta, fit_sweep
from ddlab.cost.validation import TOLERANCE


def plot_alpha_beta(sizes, times, ax=None, fit: Optional[AlphaBeta] = None, label: str = "measured",
                    title: Optional[str] = None):
    """Time against size on log-log axes: the measured points, the fitted ``alpha + S/beta``
    line, the crossover ``alpha*beta`` and the latency-bound (left) and bandwidth-bound (right)
    regions shaded and named. ``fit`` defaults to :func:`ddlab.cost.alpha_beta.fit_alpha_beta`
    of the points. Returns the axes."""
    import matplotlib.pyplot as plt
    s = np.asarray(sizes, dtype=float)
    t = np.asarray(times, dtype=float)
    fit = fit or fit_alpha_beta(s, t)
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.5))
    lo, hi = float(np.min(s[s > 0])) / 2, float(np.max(s)) * 2
    cross = fit.crossover_bytes
    left = max(lo, min(cross, hi))
    ax.axvspan(lo, left, color="tab:orange", alpha=0.08, lw=0)
    ax.axvspan(left, hi, color="tab:blue", alpha=0.08, lw=0)
    ax.plot(s, t * 1e6, "o", ms=4, color="black", label=label)
    grid = np.geomspace(lo, hi, 200)
    ax.plot(grid, fit.predict(grid) * 1e6, "-", color="tab:red",
            label=f"fit: alpha = {format_time(fit.alpha)}, beta = {format_rate(fit.beta)}")
    if lo < cross < hi:
        ax.axvline(cross, color="gray", ls=":", label=f"crossover alpha*beta = {format_bytes(cross)}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    # Region names at the top of each shaded side (axes-fraction y, data x).
    trans = ax.get_xaxis_transform()
    if left > lo:
        ax.text(math.sqrt(lo * left), 0.95, "latency-bound\n(alpha dominates)", transform=trans,
                ha="center", va="top", fontsize="small", color="tab:orange")
    if left < hi:
        ax.text(math.sqrt(left * hi), 0.95, "bandwidth-bound\n(S/beta dominates)", transform=trans,
                ha="center", va="top", fontsize="small", color="tab:blue")
    ax.set_xlabel("message size S (bytes)")
    ax.set_ylabel("time (us)")
    ax.set_title(title or "alpha-beta model: t = alpha + S/beta")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small", loc="lower right")
    return ax


def plot_sweep_fit(result, ax=None, fit: Optional[AlphaBeta] = None):
    """:func:`plot_alpha_beta` for a collective sweep (:class:`ddlab.measure.collectives.SweepResult`),
    labelled with its op, path and ranks; ``fit`` defaults to
    :func:`ddlab.cost.alpha_beta.fit_sweep` of it."""
    fit = fit or fit_sweep(result)
    return plot_alpha_beta([r["bytes"] for r in result.rows], [r["time_us"] * 1e-6 for r in result.rows],
                           ax=ax, fit=fit, label=f"{result.op}, {result.label}",
                           title=f"{result.op} time per call and the alpha-beta fit")


def plot_validation(table, ax=None, predicted: str = "predicted", before: Optional[str] = None):
    """Predicted against measured speedup (log-log), one marker per run, coloured by
    launcher, with the line predicted = measured and the ±10% band. ``table``: what
    :func:`ddlab.cost.validation.validate` or :func:`ddlab.cost.validation.held_out` returned
    (then ``predicted="model_pred"``: each model held out), or its rows. ``before``: the key of
    each row's error (in %) under an earlier model, e.g. ``"without_two_workers_err"``; that
    prediction is drawn as a small grey dot joined to the run's marker. Returns the axes."""
    import matplotlib.pyplot as plt
    rows = list(table.rows) if hasattr(table, "rows") else list(table)      # a table's rows keep every key
    # a run whose plain one-GPU run is not recorded has no speedup to place (its table shows "-")
    rows = [dict(r, predicted=r[predicted]) for r in rows if r.get(predicted) is not None
            and r.get("measured") is not None]
    if not rows:
        raise ValueError("nothing to plot: the table has no rows")
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 6))
    # the error is of the predicted images/s, so the earlier prediction is the measured speedup times it
    earlier = [(r["measured"], r["measured"] * (1 + r[before] / 100), r["predicted"]) for r in rows
               if before and r.get(before) is not None]
    for x, was, now in earlier:
        ax.plot([x, x], [was, now], color="gray", lw=0.6, alpha=0.6)
        ax.plot(x, was, ".", color="gray", ms=4)
    vals = [r["measured"] for r in rows] + [r["predicted"] for r in rows] + [was for _, was, _ in earlier]
    lo, hi = min(vals) / 1.5, max(vals) * 1.5
    grid = np.geomspace(lo, hi, 50)
    ax.fill_between(grid, grid * (1 - TOLERANCE), grid * (1 + TOLERANCE), color="tab:green", alpha=0.15,
                    lw=0, label=f"±{100 * TOLERANCE:.0f}%")
    ax.plot(grid, grid, color="tab:green", lw=1)
    markers = {"default": "o", "shm": "s", "socket": "^"}
    colours = {}
    for r in rows:
        c = colours.setdefault(r["launcher"], f"C{len(colours)}")
        ax.plot(r["measured"], r["predicted"], markers.get(r["path"], "D"), color=c, ms=7, mfc="none" if
                r["model"] != "wide" else c)
    from matplotlib.lines import Line2D
    handles = [Line2D([], [], color=c, marker="o", ls="", label=la) for la, c in colours.items()]
    handles += [Line2D([], [], color="gray", marker=m, ls="", label=f"path {p}") for p, m in markers.items()]
    handles += [Line2D([], [], color="gray", marker="o", ls="", mfc="gray", label="filled: wide, open: others")]
    if earlier:
        handles.append(Line2D([], [], color="gray", marker=".", lw=0.6, label="before: " + before.replace("_err", "")
                              .replace("_", " ")))
    ax.legend(handles=handles, fontsize="small", loc="upper left")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured speedup (2 GPUs over the plain one-GPU run)")
    ax.set_ylabel("predicted speedup")
    ax.set_title("Step model: predicted vs measured")
    ax.grid(True, which="both", alpha=0.3)
    return ax
