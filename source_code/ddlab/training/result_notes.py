"""What a result's own numbers say about a surprising row, in a line under its table
(:meth:`ddlab.training.results.ExperimentResult.table_notes` adds them):

* :func:`above_linear`: N workers more than N times as fast as one. The note reads the repeats
  of the one-worker baseline: if the speedup falls back within perfect scaling against the
  baseline's fastest repeat, the excess is inside the baseline's own run-to-run spread; if it does
  not, the runs differ in something to find; a baseline without repeats makes the comparison a
  single run, not conclusive either way.
* :func:`speed_options`: a speed option that ran slower than plain fp32 (bf16 autocast, or
  ``torch.compile`` without a CUDA graph), set beside the same option with the step captured as a
  CUDA graph, and whether the options were repeated at all.

Every figure is printed from the rows; nothing here is typed in.
"""
from __future__ import annotations

from typing import Optional, Sequence

from ddlab.base import units


def _base_row(rows: Sequence[dict]) -> Optional[dict]:
    """The row every speedup divides by: the plain one-GPU run (ddlab.training.baseline) when the rows hold
    one, else the row of the fewest workers."""
    plain = [r for r in rows if not r.get("error") and (r.get("path") == "plain" or r.get("plain") is True)]
    if plain:
        return plain[0]
    ok = [r for r in rows if not r.get("error") and r.get("workers")]
    if not ok:
        return None
    fewest = min(r["workers"] for r in ok)
    return next(r for r in ok if r["workers"] == fewest)


def above_linear(name: str, rows: Sequence[dict], row: dict, label: str, base: Optional[dict] = None) -> str:
    """One note on ``row`` (flagged above linear), read from the baseline's repeats and the step times.
    ``base``: the baseline row (default: the rows' plain one-GPU run, else their fewest workers)."""
    base = base or _base_row(rows) or {"workers": 1}
    b, w = base["workers"], row["workers"]
    perfect = w / b
    label = label.replace(chr(10), " ")
    text = ("above linear: " + ("" if label.endswith(" workers") else f"{label}, ")
            + f"{w} workers ran {row['speedup']:.2f}x as fast as {b}, "
            f"more than the {perfect:.1f}x of perfect scaling (marked (!))")
    runs = [v for v in (base.get("images_per_s_runs") or []) if v]
    if len(runs) < 2 or not base.get("images_per_s"):
        return text + ". The baseline is a single run, so this is not conclusive: repeat both first"
    same_share = (base.get("global_batch") and row.get("global_batch")
                  and row["global_batch"] * b == base["global_batch"] * w)
    if same_share and base.get("step_ms_median") and row.get("step_ms_median"):
        text += (f". Each worker's median step took {row['step_ms_median']:.3f} ms against "
                 f"{base['step_ms_median']:.3f} ms for the baseline, on the same images per worker")
    lo, hi = min(runs), max(runs)
    vs_best = row["images_per_s"] / hi
    text += (f". The baseline's {len(runs)} repeats spread from {units.format_count(lo)} to "
             f"{units.format_count(hi)} images/s ({(hi - lo) / base['images_per_s']:.0%} of their median); "
             f"against the fastest of them the speedup is {vs_best:.2f}x")
    if vs_best <= perfect + 1e-9:
        text += (", within perfect scaling: the excess lies inside the baseline's run-to-run spread, "
                 "not a gain from the extra GPU")
    else:
        text += (", still above perfect scaling: beyond the baseline's spread, so something differs between "
                 "the runs (timed steps, warm-up, clocks, the per-GPU batch); find it before trusting the row")
    return text


def _find(rows, **want) -> Optional[dict]:
    for r in rows:
        if not r.get("error") and all(r.get(k) == v for k, v in want.items()):
            return r
    return None


def speed_options(rows: Sequence[dict], config: dict) -> list:
    """Notes under a perf-options table: how often each option ran, and why an option that should
    speed the step up ran slower than plain fp32, from the rows' step times."""
    ok = [r for r in rows if not r.get("error") and r.get("images_per_s")]
    if not ok:
        return []
    notes = []
    repeats = max([r.get("repeats") or 1 for r in ok] + [config.get("repeats") or 1])
    if repeats < 2:
        notes.append("each option ran once (no repeats): every comparison in this table is one run against one "
                     "run and is not conclusive; differences of a few percent may be noise")
    plain = _find(ok, option="plain fp32") or ok[0]

    def step(r):
        return f"{r['step_ms_median']:.3f} ms (p10-p90 {r.get('step_ms_spread', '-')})"

    for r in ok:
        if r is plain or (r.get("speedup") or 1.0) >= 1.0 or r.get("cuda_graph"):
            continue
        what = (f"{r.get('option')} ran at {r['speedup']:.2f}x of {plain.get('option')}: median step {step(r)} "
                f"against {step(plain)}")
        graph = _find(ok, precision=r.get("precision"), compile=r.get("compile"), cuda_graph=True,
                      channels_last=r.get("channels_last"))
        if r.get("compile") not in (None, "none"):
            eager = _find(ok, precision=r.get("precision"), compile="none", cuda_graph=False,
                          channels_last=r.get("channels_last"))
            why = (". torch.compile in its default mode fuses kernels but still launches them from the host on "
                   "every step, after checking its guards, and captures no CUDA graph (its 'reduce-overhead' mode "
                   "would)" + (f"; the same step eager took {eager['step_ms_median']:.3f} ms" if eager else ""))
        elif r.get("precision") == "bf16":
            why = (". In eager mode every kernel is launched from the host one by one, and bf16 autocast adds "
                   "kernels (casts of weights and inputs) each step: for a model this small the launches, not "
                   "the arithmetic, set the step")
        else:
            why = ""
        if graph:
            twin = _find(ok, precision=plain.get("precision"), compile="none", cuda_graph=True,
                         channels_last=plain.get("channels_last"))
            why += (f". Captured as a CUDA graph (the whole step launched at once) it took "
                    f"{graph['step_ms_median']:.3f} ms" + (f", against {twin['step_ms_median']:.3f} ms for "
                                                          f"{twin.get('option')}" if twin and twin is not graph else ""))
        notes.append(what + why)
    return notes


def faster_than_on_gpu(rows: Sequence[dict]) -> list:
    """Notes under an input-pipeline table: a way of feeding batches from host memory that ran faster
    than the baseline whose batches are already on the GPU. A copy over the host link adds work to a
    step, it cannot remove any, so such a row is flagged, with whether the two ranges of repeats overlap."""
    base = _find(rows, variant="on the GPU")
    if not base or not base.get("images_per_s"):
        return []
    notes = []
    for r in rows:
        if r is base or r.get("error") or not r.get("images_per_s") or r["images_per_s"] <= base["images_per_s"]:
            continue
        lo, hi = r.get("images_per_s_min"), base.get("images_per_s_max")
        text = (f"{r['variant']} ran {r['images_per_s'] / base['images_per_s']:.2f}x the baseline with its batches "
                f"already on the GPU, though it copies each batch over the host link: the copy cannot have made it faster")
        if lo is not None and hi is not None and lo <= hi:
            text += (f". Its repeats ({units.format_count(lo)}-{units.format_count(r['images_per_s_max'])} images/s)"
                     f" overlap the baseline's ({units.format_count(base['images_per_s_min'])}-"
                     f"{units.format_count(hi)}): within the run-to-run spread")
        elif lo is not None and hi is not None:
            text += (f". Its slowest repeat ({units.format_count(lo)} images/s) beat the baseline's fastest "
                     f"({units.format_count(hi)}): beyond the spread")
        text += (". The cause was not measured; candidates vary from run to run (GPU clocks, when the host "
                 "launches each kernel)")
        notes.append(text)
    return notes
