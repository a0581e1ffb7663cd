"""Heatmaps of a p2p run: :func:`plot_heatmaps` draws the matrices of a
:class:`ddlab.measure.p2p.P2PResult`, one panel each, with the share of the link's peak when it
is known (a number, or per pair from :func:`ddlab.measure.p2p_diagnosis.link_peaks`).
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from ddlab.measure.p2p import STANDARD_KEYS, TITLES, P2PResult
from ddlab.measure.p2p_diagnosis import offdiag, single_link_peak


def plot_heatmaps(result: P2PResult, link_peak_gbps=None, keys: Optional[Sequence[str]] = None, figsize=None):
    """One heatmap per matrix, values written in the cells. ``link_peak_gbps``: the link's peak
    rate per direction, a number or an n x n matrix (per pair); when known (or given to the
    program as --link-peak), bandwidth cells also show their share of it (bidirectional:
    of twice it). The diagonal (copies within one GPU) is grey so it does not set the
    colour scale. Returns the matplotlib Figure (one Axes per matrix)."""
    import matplotlib.pyplot as plt

    keys = list(keys) if keys is not None else [k for k in STANDARD_KEYS if k in result.matrices]
    if not keys:
        raise ValueError("the result holds no matrices to draw")
    for k in keys:
        if k not in result.matrices and k not in result.variants:
            raise KeyError(f"no matrix {k!r}; available: {', '.join(list(result.matrices) + list(result.variants))}")
    n, labels = result.n, result.labels
    if link_peak_gbps is None:
        link_peak_gbps = single_link_peak(result, None)
    peak = None
    if link_peak_gbps is not None:
        peak = np.full((n, n), float(link_peak_gbps)) if np.isscalar(link_peak_gbps) else \
            np.asarray(link_peak_gbps, dtype=float)
        if peak.shape != (n, n):
            raise ValueError(f"link_peak_gbps is {peak.shape}, expected a number or ({n}, {n})")
    cols = min(4, len(keys))
    rows = -(-len(keys) // cols)
    cell = 0.9 + 0.55 * n
    fig, axes = plt.subplots(rows, cols, figsize=figsize or (cols * cell + 1, rows * cell + 1.2), squeeze=False)
    for ax in axes.flat[len(keys):]:
        ax.remove()
    for ax, key in zip(axes.flat, keys):
        m = result.matrices.get(key, result.variants.get(key))
        base = key.split(":")[0]
        is_bw = not base.startswith("lat_")
        off = np.where(np.eye(n, dtype=bool), np.nan, m)
        finite = off[np.isfinite(off)]
        vmin, vmax = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
        cmap = plt.get_cmap("viridis" if is_bw else "viridis_r").with_extremes(bad="#d9d9d9")
        ax.imshow(np.ma.masked_invalid(off), cmap=cmap, vmin=vmin, vmax=vmax if vmax > vmin else vmin + 1)
        scale = 2.0 if base.startswith("bi_") else 1.0
        for i in range(n):
            for j in range(n):
                x = m[i, j]
                txt = "n/a" if not np.isfinite(x) else (f"{x:.0f}" if is_bw and x >= 100 else f"{x:.1f}" if is_bw
                                                        else f"{x:.2f}")
                if is_bw and base.endswith("p2p_on") and peak is not None and i != j and np.isfinite(x) \
                        and peak[i, j] > 0:
                    txt += f"\n{100 * x / (scale * peak[i, j]):.0f}% pk"
                shade = (x - vmin) / (vmax - vmin) if np.isfinite(x) and vmax > vmin and i != j else 0.5
                dark = shade < 0.5 if is_bw else shade > 0.5
                ax.text(j, i, txt, ha="center", va="center", fontsize=8,
                        color="white" if (i != j and np.isfinite(off[i, j]) and dark) else "black")
        title = TITLES.get(base, base)
        if key != base:
            title += "\n" + key.split(":", 1)[1].replace(":", ", ")
        if is_bw and base.endswith("p2p_on") and peak is not None:
            title += f"\nlink peak {float(np.nanmax(offdiag(peak))):g} GB/s per direction"
        ax.set_title(title, fontsize=9)
        ax.set_xticks(range(n), [f"GPU {g}" for g in labels], fontsize=8)
        ax.set_yticks(range(n), [f"GPU {g}" for g in labels], fontsize=8)
        ax.set_xlabel("destination", fontsize=8)
        ax.set_ylabel("source", fontsize=8)
    caption = "SYNTHETIC format demo, not a measurement" if result.synthetic else None
    if caption is None and result.provenance:
        from ddlab.system.provenance import caption as provenance_caption
        caption = provenance_caption(result.provenance)
    if caption:
        fig.suptitle(caption, fontsize=10)
    fig.tight_layout()
    return fig
