"""What notebook 9 prints from a convergence sweep's rows, beside its tables: the points whose
learning rate diverged (with the unscaled rate's accuracy at the same batch), 1 vs 2 workers to the
target accuracy at the same global batch, and the points that are one configuration under several
rule names (their spread is run-to-run noise). Each returns lines to print, every number from the rows."""
from __future__ import annotations

import math

from ddlab.course.convergence_sweep import CHANCE, ConvergenceResult, _mm


def unstable_rates(result: ConvergenceResult) -> list:
    """One line per point that ended at chance level: its global batch, learning rate, how many
    seeds diverged (loss NaN), its median test accuracy, beside the unscaled rate's accuracy at
    the same batch and workers (an unstable rate, not the batch, where that one trains)."""
    lines = []
    for r in result.rows:
        if r.get("test_accuracy") is None or r["test_accuracy"] > CHANCE + 0.02:
            continue
        plain = [x for x in result.rows if x["global_batch"] == r["global_batch"] and x["workers"] == r["workers"]
                 and x["rule"] == "none" and x.get("test_accuracy") is not None]
        beside = (f"; at the unscaled lr {plain[0]['lr']:g} the same batch reaches {plain[0]['test_accuracy']:.4f}"
                  if plain else "")
        lines.append(f"{r['label']}: lr {r['lr']:g}, {r['diverged']} of {r['repeats']} seeds diverged (loss NaN), "
                     f"median test accuracy {r['test_accuracy']:.4f}{beside}")
    return lines


def worker_times(result: ConvergenceResult, tie: float = 0.1) -> list:
    """Per global batch run on 1 and on 2+ workers with the same rule: the median seconds to the
    target (min-max over the seeds) of each and their ratio; "about a tie" when the medians are
    within ``tie`` (a fraction) of each other, and whether the seeds' ranges overlap. Needs rows
    summarised against a target (:meth:`ConvergenceResult.with_target`)."""
    lines = []
    for one in (r for r in result.rows if r["workers"] == 1 and r.get("time_to_target") is not None):
        for many in (r for r in result.rows if r["workers"] > 1 and r["global_batch"] == one["global_batch"]
                     and (r["rule"], r["warmup_epochs"]) == (one["rule"], one["warmup_epochs"])
                     and r.get("time_to_target") is not None):
            ratio = many["time_to_target"] / one["time_to_target"]
            overlap = one["time_to_target_min"] <= many["time_to_target_max"] and \
                many["time_to_target_min"] <= one["time_to_target_max"]
            verdict = ("about a tie" if abs(ratio - 1) <= tie else
                       f"{many['workers']} workers reach it {'later' if ratio > 1 else 'sooner'}")
            lines.append(f"global batch {one['global_batch']:,}: 1 worker {_mm(one, 'time_to_target', '{:.2f}')} s, "
                         f"{many['workers']} workers {_mm(many, 'time_to_target', '{:.2f}')} s to "
                         f"{result.config.get('target', 0):.0%}: {verdict} (median ratio {ratio:.2f}; the seeds' "
                         f"ranges {'overlap' if overlap else 'do not overlap'})")
    return lines


def same_configurations(result: ConvergenceResult) -> list:
    """Points whose rules give the same learning rate at every step (same workers and global
    batch, same peak rate, and no warm-up or one that ramps from the peak to itself), one line per
    group: the same configuration run under several names, so their spread is run-to-run noise."""
    base = result.config.get("base_lr")
    groups: dict = {}
    for r in result.rows:       # a warm-up from the base rate to the base rate changes nothing
        warm = r["warmup_epochs"] if base is None or not math.isclose(r["lr"], base) else 0.0
        groups.setdefault((r["workers"], r["global_batch"], r["lr"], warm), []).append(r)
    lines = []
    for (workers, batch, lr, _), rows in groups.items():
        if len(rows) < 2:
            continue
        rules = ", ".join(f"'{r['rule']}" + (f" + {r['warmup_epochs']:g} ep warm-up'" if r["warmup_epochs"] else "'")
                          for r in rows)
        text = f"global batch {batch:,} on {workers} worker(s): {rules} all give lr {lr:g} at every step"
        times = [t for r in rows for t in r.get("time_to_target_runs") or [] if t is not None]
        if times:
            medians = ", ".join(f"{r['time_to_target']:.2f}" for r in rows if r.get("time_to_target") is not None)
            text += (f"; medians to {result.config.get('target', 0):.0%}: {medians} s, single seeds "
                     f"{min(times):.2f}-{max(times):.2f} s")
        lines.append(text)
    return lines
