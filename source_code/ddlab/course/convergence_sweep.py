"""The convergence sweep: the training script run over global batches, learning-rate rules and
worker counts, several seeds each, scored on the held-out test set during training.

A sweep is a list of :class:`Point` (workers, global batch, learning-rate rule, warm-up) and
the sizes of :data:`SIZES` for the device (model, training images, epochs, base learning
rate and the batch it is right for, evaluation interval, seeds, target accuracy). Every run is
a :class:`ddlab.training.runspec.RunSpec` started by :func:`ddlab.training.runs.train` (``fmnist_torch.py``
with ``--lr-scaling``, ``--lr-warmup-epochs``, ``--eval-every``, ``--noise-scale``), so the
live sweep, the recorded one and a hand-typed command are the same experiment.

Seeds: seed ``s`` makes the initial weights (identical on every rank: the same seed, then
rank 0's broadcast by DDP), the per-epoch shuffle (one permutation from (s, epoch), cut into
disjoint shards by rank) and, through ``rank_seed(s, rank)``, each rank's own dropout masks (not
required: the ranks already see different images; it draws the masks as one process would for the
whole global batch).

:func:`run_sweep` returns a :class:`ConvergenceResult`: one row per point with the median and
min-max over the seeds (final test accuracy and loss, time to the target accuracy, the noise
scale), its table (:mod:`ddlab.base.tables`) and plots. :func:`run_or_load` is the one policy:
live on 2 GPUs when present, else the recording (``reference/experiments/convergence-torch-ddp-cnn.json``)
or "not recorded yet".

The sweep's configurations for CPU and GPU, its runner, the summaries (median, spread, time to
accuracy) and their tables and plots live together: they read the same rows.
"""
from __future__ import annotations

import math
import statistics
import warnings
from dataclasses import asdict, dataclass
from typing import Callable, Mapping, Optional, Sequence

from ddlab.training import convergence
from ddlab.base import files, tables
from ddlab.training.runspec import RunSpec, RunSpecError, nccl_path_env

RECORDED_NAME = "convergence-torch-ddp-cnn"
SCHEMA = "experiments"              # a sweep is recorded beside the other experiments (ddlab.base.schemas)
CHANCE = 0.1   # test accuracy of a guess among Fashion-MNIST's 10 balanced classes
MIN_SEEDS = 3

# The sizes of a sweep per device. CPU: the small MLP on a fixed fifth of the training set, so
# a 2-core laptop runs every point three times in a few minutes; GPU: the course's CNN on all
# 60,000 images. SGD with momentum 0.9: the optimizer the linear scaling rule was stated for.
SIZES = {
    "cpu": {"model": "mlp-small", "train_samples": 12000, "epochs": 4, "base_lr": 0.02, "ref_batch": 32,
            "eval_every": 0.5, "test_samples": 10000, "seeds": (1, 2, 3), "target": None, "timeout": 300.0},
    "cuda": {"model": "cnn", "train_samples": 60000, "epochs": 10, "base_lr": 0.02, "ref_batch": 64,
             "eval_every": 1.0, "test_samples": 10000, "seeds": (1, 2, 3), "target": 0.88, "timeout": 300.0},
}


@dataclass(frozen=True)
class Point:
    """One configuration of the sweep. ``rule``: how the learning rate follows the global batch
    ("none", "linear", "sqrt"); ``warmup_epochs``: the linear warm-up to it."""
    workers: int
    global_batch: int
    rule: str = "linear"
    warmup_epochs: float = 0.0

    def __post_init__(self):
        if self.workers < 1 or self.global_batch < self.workers or self.global_batch % self.workers:
            raise RunSpecError(f"global batch {self.global_batch} cannot be split evenly over {self.workers} "
                               "worker(s)")
        convergence.lr_factor(self.rule, 1, 1)   # an unknown rule fails here
        if self.warmup_epochs < 0:
            raise RunSpecError("warm-up epochs cannot be negative")

    @property
    def label(self) -> str:
        warm = f" + {self.warmup_epochs:g} ep warm-up" if self.warmup_epochs else ""
        return f"{self.workers}w B={self.global_batch} lr {self.rule}{warm}"


# The points. "batch": global batch vs accuracy at a fixed number of epochs, with and without
# the linear rule and its warm-up (one worker on CPU, two GPUs on a GPU machine); "workers":
# the same global batch on 1 and 2 workers (time to accuracy, noise scale), each with a recipe
# that trains: the CNN at global batch 1,024 under the linear rule without warm-up (learning
# rate 0.32) ends at chance level in most seeds on 1 and 2 GPUs (the batch part keeps that point,
# as the rule's failure), so the workers part takes 1,024 with the 2 warm-up epochs (that 2-GPU
# point is the batch part's too). On CPU the one-worker
# point of both parts is the same run (measured once: start-up dominates a small CPU run).
POINTS = {
    "cpu": {"batch": [Point(1, 64), Point(1, 512, "none"), Point(1, 512, "linear"), Point(1, 512, "linear", 1.0)],
            "workers": [Point(1, 64), Point(2, 64)]},
    "cuda": {"batch": [Point(2, b, r, w) for b in (64, 256, 1024, 4096, 16384)
                       for r, w in (("none", 0.0), ("linear", 0.0), ("linear", 2.0))],
             "workers": [Point(1, 256), Point(2, 256), Point(1, 1024, "linear", 2.0), Point(2, 1024, "linear", 2.0)]},
}
# What runs live on a 2-GPU machine: a subset of the recorded points, each the same run
# description as its recorded twin, few enough that the notebook's Run All fits its stated
# minutes (a point is three seeds, most of each run process start-up); the small-batch
# reference is the workers part's 2-GPU point (it trains: B=256 under the linear rule), shared,
# not run twice.
LIVE_GPU = {"batch": [Point(2, 256, "linear"), Point(2, 16384, "none"), Point(2, 16384, "linear", 2.0)],
            "workers": [Point(1, 256), Point(2, 256)]}


def points_for(device: str, part: Optional[str] = None, live: bool = False) -> list:
    """The sweep's points on ``device`` ("cpu" or "cuda"): one ``part`` ("batch" or "workers")
    or both; ``live`` picks the GPU subset a notebook runs."""
    if device not in POINTS:
        raise RunSpecError(f"unknown device {device!r}; choose cpu or cuda")
    table = LIVE_GPU if (live and device == "cuda") else POINTS[device]
    parts = [part] if part else list(table)
    for p in parts:
        if p not in table:
            raise RunSpecError(f"unknown part {p!r}; choose one of {', '.join(table)}")
    out = []
    for p in parts:
        out += [pt for pt in table[p] if pt not in out]
    return out


def steps_of(point: Point, sizes: Mapping) -> int:
    """Optimizer steps of ``sizes[epochs]`` epochs of the training subset at this point."""
    per_worker = point.global_batch // point.workers
    shard = sizes["train_samples"] // point.workers
    steps_per_epoch = shard // per_worker
    if steps_per_epoch < 1:
        raise RunSpecError(f"{point.label}: a shard of {shard} images holds no batch of {per_worker}")
    return max(2, int(round(sizes["epochs"] * steps_per_epoch)))


def fixed_steps(points: Sequence[Point], sizes: Mapping) -> int:
    """The step count every point reaches: the steps of the point with the fewest (the largest
    global batch). Every run is scored there too, so batches compare at equal steps."""
    return min(steps_of(p, sizes) for p in points)


def spec_of(point: Point, sizes: Mapping, device: str, seed: int, eval_steps: Sequence[int] = ()) -> RunSpec:
    """The RunSpec of one run: ``sizes[epochs]`` epochs of the training subset, the test set
    scored every ``eval_every`` epochs and after each of ``eval_steps``, the gradient norms
    logged with 2+ workers."""
    per_worker = point.global_batch // point.workers
    steps = steps_of(point, sizes)
    extra = ["--optimizer", "sgd", "--lr", sizes["base_lr"], "--lr-ref-batch", sizes["ref_batch"],
             "--lr-scaling", point.rule, "--lr-warmup-epochs", point.warmup_epochs,
             "--train-samples", sizes["train_samples"], "--eval-every", sizes["eval_every"],
             "--log-interval", steps]
    if eval_steps:
        extra += ["--eval-steps", *eval_steps]
    if point.workers > 1:
        extra.append("--noise-scale")
    return RunSpec(framework="torch", launcher="ddp" if point.workers > 1 else "none", model=sizes["model"],
                   batch=per_worker, steps=steps, warmup_steps=1, precision="fp32", workers=point.workers,
                   device=device, test_samples=sizes["test_samples"], seed=seed, timeout=sizes.get("timeout"),
                   cuda_graph="off" if device == "cuda" else None, extra_args=tuple(str(a) for a in extra))


# ----------------------------------------------------------------------------- summaries
def spread(values: Sequence) -> dict:
    """Median, min, max and every value of ``values`` (None values are left out; all None: None)."""
    vals = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not vals:
        return {"median": None, "min": None, "max": None, "runs": list(values)}
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "runs": list(values)}


def accuracy_at_step(evaluations: Sequence[Mapping], step: int) -> Optional[dict]:
    """The last evaluation at or before optimizer step ``step`` (None when there is none)."""
    before = [ev for ev in evaluations if ev["step"] <= step]
    return before[-1] if before else None


def row_of_seeds(point: Point, runs: Sequence[Mapping], target: Optional[float]) -> dict:
    """One row from the seeds of one point: final test accuracy and loss, time to ``target``
    (training seconds; a seed that never reaches it counts as missing and ``reached`` says how
    many did), and for 2+ workers the noise scale pooled over the seeds' second half."""
    if not runs:
        raise ValueError(f"{point.label}: no runs to summarise")
    first = runs[0]
    row = {"label": point.label, **asdict(point), "batch_per_worker": first["batch_per_worker"],
           "lr": first["lr"], "steps": first["steps"], "epochs": first["epochs"], "seeds": [r["seed"] for r in runs],
           "repeats": len(runs)}
    for key in ("test_accuracy", "final_test_loss", "train_s"):
        values = [r["evaluations"][-1]["test_loss"] if key == "final_test_loss" else
                  r["evaluations"][-1]["train_s"] if key == "train_s" else r[key] for r in runs]
        s = spread(values)
        row.update({key: s["median"], f"{key}_min": s["min"], f"{key}_max": s["max"], f"{key}_runs": s["runs"]})
    row["diverged"] = sum(1 for r in runs if not math.isfinite(r["evaluations"][-1]["test_loss"]))
    if target is not None:
        times = [convergence.time_to_accuracy(r["evaluations"], target) for r in runs]
        s = spread(times)
        row.update(target=target, time_to_target=s["median"] if None not in times else None,
                   time_to_target_min=s["min"], time_to_target_max=s["max"], time_to_target_runs=times,
                   reached=sum(t is not None for t in times))
    if point.workers > 1:
        pooled = convergence.pooled_noise_scale(runs, from_epoch=first["epochs"] / 2)
        row["b_simple"] = pooled.b_simple if pooled else None
    return row


def cpu_target(rows: Sequence[Mapping], fraction: float = 0.98) -> float:
    """A target every compared row reaches in its median run: ``fraction`` of the lowest median
    final accuracy among ``rows``, rounded down to a whole percent."""
    lowest = min(r["test_accuracy"] for r in rows if r.get("test_accuracy") is not None)
    return math.floor(100 * fraction * lowest) / 100


# ----------------------------------------------------------------------------- the result
# The columns of ConvergenceResult.table, by key.
TABLE_COLUMNS = ("label", "global_batch", "lr", "steps", "acc", "loss", "ttt", "train", "bsimple")

@dataclass
class ConvergenceResult:
    """What a sweep found. ``rows``: one per point (:func:`row_of_seeds`); ``runs``: every
    run's result without its log, with ``point`` (its label); ``source``: "live", "recorded"
    or "missing"; ``config``: the sizes, the device and the seeds."""
    rows: list
    runs: list
    source: str = "live"
    provenance: Optional[dict] = None
    config: Optional[dict] = None
    notes: Optional[list] = None

    def __post_init__(self):
        self.provenance = self.provenance or {}
        self.config = self.config or {}
        self.notes = list(self.notes or [])

    # ---- where it comes from
    def where(self, with_versions: bool = True) -> str:
        from ddlab.system import provenance as prov
        return prov.caption(self.provenance, source=self.source, with_versions=with_versions)

    def row(self, label: str) -> dict:
        for r in self.rows:
            if r["label"] == label:
                return r
        raise KeyError(f"no point {label!r}; the points are: {', '.join(r['label'] for r in self.rows)}")

    def runs_of(self, label: str) -> list:
        return [r for r in self.runs if r.get("point") == label]

    def with_target(self, target: float) -> "ConvergenceResult":
        """The same runs, rows summarised again against ``target`` (time to accuracy)."""
        rows = [row_of_seeds(Point(r["workers"], r["global_batch"], r["rule"], r["warmup_epochs"]),
                             self.runs_of(r["label"]), target) for r in self.rows]
        return ConvergenceResult(rows, self.runs, self.source, self.provenance, dict(self.config, target=target),
                                 self.notes)

    # ---- tables
    def table(self, labels: Optional[Sequence[str]] = None, columns: Optional[Sequence[str]] = None) -> tables.Table:
        """Median (min-max) over the seeds per point: final test accuracy and loss, training
        seconds, time to the target (with how many seeds reached it), the noise scale. ``columns``
        (keys of :data:`TABLE_COLUMNS`) keeps only those, for a narrow page; the notes then explain only
        the columns shown."""
        unknown = [k for k in columns or () if k not in TABLE_COLUMNS]
        if unknown:
            raise ValueError(f"no column {unknown[0]!r}; choose from {', '.join(TABLE_COLUMNS)}")
        rows = [r for r in self.rows if labels is None or r["label"] in labels]
        target = self.config.get("target")
        cols = [("label", "text", "point"), ("global_batch", "int", "global batch"), ("lr", "number", "peak lr"),
                ("steps", "int", "steps"), ("acc", "text", "test acc., median (min-max)"),
                ("loss", "text", "test loss")]
        if target is not None:
            cols.append(("ttt", "text", f"s to {target:.0%} acc. (seeds)"))
        cols += [("train", "text", "training s"), ("bsimple", "text", "B_simple")]
        out = []
        for r in rows:
            ttt = "-"
            if target is not None and r.get("reached") is not None:
                ttt = (_mm(r, "time_to_target", "{:.2f}") if r["reached"] == r["repeats"] else "not reached") \
                    + f" ({r['reached']}/{r['repeats']})"
            out.append({"label": r["label"], "global_batch": r["global_batch"], "lr": r["lr"], "steps": r["steps"],
                        "acc": _mm(r, "test_accuracy", "{:.4f}"), "loss": _mm(r, "final_test_loss", "{:.3f}"),
                        "ttt": ttt, "train": _mm(r, "train_s", "{:.1f}"),
                        "bsimple": "-" if r.get("b_simple") is None else f"{r['b_simple']:.0f}"})
        c = self.config
        title = (f"convergence: {c.get('model')}, {c.get('train_samples'):,} training images, {c.get('epochs')} epochs, "
                 f"SGD lr {c.get('base_lr')} for batch {c.get('ref_batch')}, {len(c.get('seeds') or [])} seeds "
                 f"({self.where()})") if c else f"convergence ({self.where()})"
        by_key = {c[0]: c for c in cols}
        shown = list(by_key) if columns is None else [k for k in columns if k in by_key]
        cols = [by_key[k] for k in shown]
        notes = ["; ".join(self.notes)] if self.notes else []      # where it comes from, one line
        if "train" in shown:
            notes.append("training s: the training loop's seconds, test evaluations left out")
        if "bsimple" in shown:
            notes.append("B_simple: gradient noise scale from the 2-worker gradients, second half of training")
        if "ttt" in shown:
            notes.append(f"s to {target:.0%} acc.: training seconds until the test accuracy first reached {target:.0%}, "
                         "median (min-max) over the seeds (how many seeds reached it)")
        diverged = [r["label"] for r in rows if r.get("diverged")]
        chance = [r["label"] for r in rows if r.get("test_accuracy") is not None and r["test_accuracy"] <= CHANCE + 0.02]
        if diverged and diverged == chance:
            notes.append("diverged (loss NaN in some seed) and at chance level (about 10% test accuracy): "
                         + ", ".join(diverged))
        else:
            if diverged:
                notes.append("the loss became NaN or infinite (diverged) in: " + ", ".join(diverged))
            if chance:
                notes.append("at chance level (10 classes: about 10% test accuracy), the model learned nothing: "
                             + ", ".join(chance))
        return tables.Table(cols, out, title=title, notes=notes)

    def _repr_html_(self) -> str:
        return self.table()._repr_html_()

    def __str__(self) -> str:
        return str(self.table())

    def fixed_steps_table(self, labels: Optional[Sequence[str]] = None) -> tables.Table:
        """Test accuracy of each point after the same number of optimizer steps (the sweep's
        ``fixed_steps``: as many as the largest global batch takes), median (min-max)."""
        at = self.config.get("fixed_steps")
        out = []
        for r in self.rows:
            if labels is not None and r["label"] not in labels:
                continue
            evs = [accuracy_at_step(run["evaluations"], at) for run in self.runs_of(r["label"])]
            accs = spread([e["test_accuracy"] if e and e["step"] == at else None for e in evs])
            row = {"test_accuracy": accs["median"], "test_accuracy_min": accs["min"],
                   "test_accuracy_max": accs["max"], "repeats": len(evs)}
            out.append({"label": r["label"], "global_batch": r["global_batch"], "lr": r["lr"],
                        "epochs": at * r["global_batch"] / max(1, self.config.get("train_samples") or 1),
                        "acc": _mm(row, "test_accuracy", "{:.4f}")})
        return tables.Table([("label", "text", "point"), ("global_batch", "int", "global batch"),
                             ("lr", "number", "peak lr"), ("epochs", "number", "epochs seen"),
                             ("acc", "text", f"test accuracy after {at} steps, median (min-max)")], out,
                            title=f"the same number of optimizer steps ({self.where()})")

    def accuracy_falls(self, tolerance: float = 0.01) -> dict:
        """Where the final test accuracy starts to fall with the global batch: per batch the best
        median over the rules and worker counts, ``kept``: the largest batch within
        ``tolerance`` of the best of all, ``falls``: the next larger batch (None if none)."""
        best: dict = {}
        for r in self.rows:
            if r.get("test_accuracy") is not None:
                best[r["global_batch"]] = max(best.get(r["global_batch"], 0.0), r["test_accuracy"])
        if not best:
            raise ValueError("no measured rows")
        top = max(best.values())
        batches = sorted(best)
        kept = max(b for b in batches if best[b] >= top - tolerance)
        larger = [b for b in batches if b > kept]
        return {"best_by_batch": best, "kept": kept, "falls": larger[0] if larger else None, "tolerance": tolerance}

    def batch_limit(self, tolerance: float = 0.01) -> list:
        """What the sweep says about the largest useful global batch, as lines to print: the best
        median final test accuracy per batch (:meth:`accuracy_falls`), the largest batch within
        ``tolerance`` of the best and the next one, and where the median noise scale B_simple of the
        2-worker points (second half of training) lies between them."""
        falls = self.accuracy_falls(tolerance)
        best = ", ".join(f"{b:,}: {a:.4f}" for b, a in sorted(falls["best_by_batch"].items()))
        nxt = f"{falls['falls']:,}" if falls["falls"] else "none in this sweep"
        lines = [f"best median final test accuracy per global batch: {best}",
                 f"the largest batch within {100 * tolerance:g} percentage point(s) of the best: {falls['kept']:,}; "
                 f"the next one, where accuracy falls: {nxt}"]
        late = [r["b_simple"] for r in self.rows if r.get("b_simple") is not None]
        if late:
            b = statistics.median(late)
            side = ("at or below the batch that kept its accuracy" if b <= falls["kept"] else
                    "above every batch of this sweep" if falls["falls"] is None else
                    "between those two batches" if b < falls["falls"] else "at or above the batch where accuracy falls")
            lines.append(f"B_simple (median of the 2-worker points): {b:,.0f} images, {side}")
        return lines

    def noise_table(self) -> tables.Table:
        """The noise scale per evaluation interval of every point with 2+ workers: median over
        the seeds of B_simple, |G|^2 and tr(Sigma) (an interval with |G|^2 <= 0 gives no ratio)."""
        out = []
        for r in self.rows:
            if r["workers"] < 2:
                continue
            per_seed = [convergence.noise_scales(run) for run in self.runs_of(r["label"])]
            for i in range(min(len(p) for p in per_seed)):
                ests = [p[i] for p in per_seed]
                out.append({"label": r["label"], "epoch": self.runs_of(r["label"])[0]["evaluations"][i]["epoch"],
                            "grad_sq": statistics.median(e.grad_sq for e in ests),
                            "trace": statistics.median(e.trace for e in ests),
                            "b_simple": spread([e.b_simple for e in ests])["median"]})
        return tables.Table([("label", "text", "point"), ("epoch", "number", "up to epoch"),
                             ("grad_sq", "number", "|G|^2"), ("trace", "number", "tr(Sigma)"),
                             ("b_simple", "number", "B_simple (median over seeds)")], out,
                            title=f"gradient noise scale per interval ({self.where()})",
                            notes="each interval averages the squared norms of its steps before the ratio")

    # ---- plots
    def plot_curves(self, labels: Optional[Sequence[str]] = None, x: str = "epoch", metric: str = "test_accuracy",
                    ax=None):
        """Median over the seeds of ``metric`` ("test_accuracy", "test_loss", "train_loss")
        against ``x`` ("epoch", "step" or "train_s"), the min-max band shaded."""
        import matplotlib.pyplot as plt
        import numpy as np
        if ax is None:
            _, ax = plt.subplots(figsize=(6.4, 4.0))
        for r in self.rows:
            if labels is not None and r["label"] not in labels:
                continue
            curves = [run["evaluations"] for run in self.runs_of(r["label"])]
            n = min(len(c) for c in curves)
            xs = np.median([[ev[x] for ev in c[:n]] for c in curves], axis=0)
            ys = np.array([[_finite(ev.get(metric)) for ev in c[:n]] for c in curves], dtype=float)
            with warnings.catch_warnings():    # an evaluation where every seed had diverged (NaN) is left out
                warnings.simplefilter("ignore", RuntimeWarning)
                mid, low, high = np.nanmedian(ys, axis=0), np.nanmin(ys, axis=0), np.nanmax(ys, axis=0)
            line, = ax.plot(xs, mid, marker="o", markersize=3, label=r["label"])
            ax.fill_between(xs, low, high, color=line.get_color(), alpha=0.2)
        ax.set_xlabel({"epoch": "epochs", "step": "optimizer steps", "train_s": "training seconds"}.get(x, x))
        ax.set_ylabel(metric.replace("_", " ") + " (median, min-max band)")
        if x == "step":
            ax.set_xscale("log")
        if metric.endswith("loss"):
            ax.set_yscale("log")
        ax.set_title(self.where(with_versions=False), fontsize=9)
        ax.legend(fontsize=7)
        return ax

    def plot_batch(self, ax=None):
        """Final test accuracy (median, min-max bars) against the global batch, one line per
        learning-rate rule, with the noise scale of the run marked when measured."""
        import matplotlib.pyplot as plt
        if ax is None:
            _, ax = plt.subplots(figsize=(6.4, 4.0))
        groups: dict = {}
        several = len({x["workers"] for x in self.rows}) > 1
        for r in self.rows:
            key = (f"{r['workers']}w " if several else "") + f"lr {r['rule']}" \
                + (f" + {r['warmup_epochs']:g} ep warm-up" if r["warmup_epochs"] else "")
            groups.setdefault(key, []).append(r)
        for key, rows in groups.items():
            rows = sorted(rows, key=lambda r: r["global_batch"])
            xs = [r["global_batch"] for r in rows]
            ys = [r["test_accuracy"] for r in rows]
            err = [[y - r["test_accuracy_min"] for y, r in zip(ys, rows)],
                   [r["test_accuracy_max"] - y for y, r in zip(ys, rows)]]
            ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=key)
        noise = [r["b_simple"] for r in self.rows if r.get("b_simple")]
        if noise:
            b = statistics.median(noise)
            ax.axvline(b, color="grey", linestyle="--", linewidth=1)
            ax.annotate("B_simple (median)", (b, ax.get_ylim()[0]), rotation=90, fontsize=7, color="grey",
                        va="bottom", ha="right")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("global batch")
        ax.set_ylabel("final test accuracy (median, min-max)")
        ax.set_title(self.where(with_versions=False), fontsize=9)
        ax.legend(fontsize=7)
        return ax

    # ---- persistence
    def to_dict(self) -> dict:
        return {"experiment": "convergence", "source": self.source, "config": self.config, "rows": self.rows,
                "notes": self.notes, "runs": self.runs, "provenance": self.provenance}

    @classmethod
    def from_dict(cls, d: Mapping, source: Optional[str] = None) -> "ConvergenceResult":
        if d.get("experiment") != "convergence":
            raise ValueError("not a convergence result")
        return cls(list(d["rows"]), [_nan_back(r) for r in d.get("runs", [])], source or d.get("source", "live"),
                   dict(d.get("provenance") or {}), dict(d.get("config") or {}), list(d.get("notes") or []))



def _nan_back(run: Mapping) -> dict:
    """A run read back from JSON: the losses and noise a diverged run saved as null are NaN again."""
    run = dict(run)
    evs = []
    for ev in run.get("evaluations") or []:
        ev = dict(ev)
        if "test_loss" in ev and ev["test_loss"] is None:
            ev["test_loss"] = float("nan")
        if ev.get("noise"):
            ev["noise"] = {k: float("nan") if v is None else v for k, v in ev["noise"].items()}
        evs.append(ev)
    if "evaluations" in run:
        run["evaluations"] = evs
    return run


def _finite(v):
    return float(v) if v is not None and math.isfinite(v) else float("nan")


def _mm(row: Mapping, key: str, fmt: str) -> str:
    if row.get(key) is None:
        return "-"
    text = fmt.format(row[key])
    if row.get("repeats", 1) > 1 and row.get(f"{key}_min") is not None:
        text += f" ({fmt.format(row[f'{key}_min'])}-{fmt.format(row[f'{key}_max'])})"
    return text


# ----------------------------------------------------------------------------- running it
def run_sweep(points: Sequence[Point], device: str = "cpu", seeds: Optional[Sequence[int]] = None,
              sizes: Optional[Mapping] = None, progress: Optional[Callable[[str], None]] = None,
              train: Optional[Callable] = None, fixed_at: Optional[int] = None,
              score_at: Sequence[int] = (), done: Optional[Callable[[str], None]] = None) -> ConvergenceResult:
    """Every point once per seed (at least :data:`MIN_SEEDS`), through :func:`ddlab.training.runs.train`
    (``train`` replaces it in tests). ``sizes`` override :data:`SIZES` for the device.
    ``fixed_at``: the step every run is also scored at (default :func:`fixed_steps` of
    ``points``); a sweep run one point at a time passes its whole sweep's value. ``score_at``:
    further steps to score every run at (a point shared by two sweeps with different fixed
    steps serves both). The config's ``scored_steps`` lists them all. ``progress`` gets each
    launch's lines; ``done`` is called after each run with "point, seed N" (a
    :class:`ddlab.base.progress.Bar` takes both: ``progress=bar.log, done=bar.advance``)."""
    from ddlab.system.provenance import run_provenance
    if device not in SIZES:
        raise RunSpecError(f"unknown device {device!r}; choose cpu or cuda")
    sz = dict(SIZES[device], **(sizes or {}))
    seeds = list(seeds if seeds is not None else sz["seeds"])
    if len(set(seeds)) < MIN_SEEDS:
        raise RunSpecError(f"a comparison needs at least {MIN_SEEDS} different seeds, got {seeds}")
    if not points:
        raise RunSpecError("no points to run")
    if train is None:
        from ddlab.training.runs import train
    runs, rows = [], []
    at, scored = _scored_steps(points, sz, fixed_at, score_at)
    for point in points:
        mine = []
        for seed in seeds:
            result = train(spec_of(point, sz, device, seed, eval_steps=scored), progress=progress)
            result = {k: v for k, v in result.items() if k not in ("log", "step_times_ms")}
            result["point"] = point.label
            mine.append(result)
            if done is not None:
                done(f"{point.label}, seed {seed}")
        runs += mine
        rows.append(row_of_seeds(point, mine, sz.get("target")))
    config = {k: (list(v) if isinstance(v, tuple) else v) for k, v in sz.items()}
    config.update(device=device, seeds=seeds, points=[asdict(p) for p in points], fixed_steps=at,
                  scored_steps=sorted(scored))
    call = (f"ddlab.course.convergence_sweep.run_sweep({[p.label for p in points]}, device={device!r}, "
            f"seeds={seeds})")
    return ConvergenceResult(rows, runs, "live", run_provenance(call), config)


def _scored_steps(points: Sequence[Point], sizes: Mapping, fixed_at: Optional[int], score_at: Sequence[int]) -> tuple:
    at = fixed_at if fixed_at is not None else fixed_steps(points, sizes)
    return at, [at] + sorted(set(score_at) - {at})


def commands(points: Sequence[Point], device: str = "cpu", seed: Optional[int] = None,
             sizes: Optional[Mapping] = None) -> list:
    """The launch of each point as :func:`run_sweep` starts it, one shell line each (environment,
    launcher, script, flags): with ``seed`` (default the first of the sweep's seeds); the other
    seeds' launches differ only in ``--seed``."""
    from ddlab.measure import launch
    sz = dict(SIZES[device], **(sizes or {}))
    _, scored = _scored_steps(points, sz, None, ())
    specs = [spec_of(p, sz, device, seed if seed is not None else sz["seeds"][0], eval_steps=scored) for p in points]
    return [launch.shell_line(s.process_launcher, s.workers, s.script_args(),
                              nccl_path_env(s.path, None) if s.workers > 1 else {}) for s in specs]


def save(result: ConvergenceResult, path: str) -> str:
    """Write a sweep's result to ``path``, whole or not at all, checked against its schema. JSON
    has no NaN: a diverged run's loss is written as null, and :func:`load` reads it back as NaN."""
    return files.write_json(path, files.nan_to_null(result.to_dict()), schema=SCHEMA, what="convergence result")


def load(path: str) -> ConvergenceResult:
    """A sweep's result saved at ``path`` (one clear message when it is missing, corrupt, or
    not a convergence sweep's)."""
    obj = files.read_json(path, "convergence result", schema=SCHEMA)
    if obj.get("experiment") != "convergence":
        raise files.ResultFileError(f"{path} holds the experiment {obj.get('experiment')!r}, not a convergence "
                                    "sweep: give a file written by ddlab.course.convergence_sweep.save")
    return ConvergenceResult.from_dict(obj)


def load_recorded(name: str = RECORDED_NAME) -> ConvergenceResult:
    """The recorded GPU sweep (raises :class:`ddlab.base.reference.ReferenceMissing` when there is none)."""
    from ddlab.base import reference
    return ConvergenceResult.from_dict(reference.load("experiments", name), source="recorded")


# What the GPU sweep needs to run live: two GPUs that PyTorch's DDP can use.
LIVE_NEEDS = {"gpus": 2, "framework": "torch", "launcher": "ddp"}


def sweep(points: Sequence[Point], device: str = "cpu", log: Optional[str] = "auto", **kwargs) -> ConvergenceResult:
    """:func:`run_sweep` under one progress bar over its runs; each launch's own lines go to the file
    ``log`` ("auto": ``scratch/convergence-<device>.log`` in Jupyter, none elsewhere, where the
    lines are printed as they come). ``kwargs`` go to :func:`run_sweep`."""
    from ddlab.base import progress
    if log == "auto":
        log = progress.notebook_log(f"convergence-{device}")
    if log is None or device not in SIZES or not points:     # run_sweep says what is wrong with the rest
        return run_sweep(points, device, **kwargs)
    seeds = kwargs.get("seeds") or dict(SIZES[device], **(kwargs.get("sizes") or {}))["seeds"]
    with progress.Bar(len(points) * len(seeds), f"convergence sweep on {device}", log=log) as bar:
        return run_sweep(points, device, progress=bar.log, done=bar.advance, **kwargs)


def run_or_load(source: str = "auto", machine=None, log: Optional[str] = "auto") -> ConvergenceResult:
    """The GPU sweep, as the course's one policy (:func:`ddlab.system.policy.decide`) says: live
    (the :data:`LIVE_GPU` points, through :func:`sweep` with ``log``) on a machine with 2 GPUs and
    DDP, else the recording, else an empty result whose ``where()`` is "not recorded yet" and whose
    note says why. ``source``: "auto", "live" or "recorded". Notebooks call it through
    :func:`ddlab.course.mode.live_or_recorded` ("convergence")."""
    from ddlab.system import policy
    if source not in ("auto", "live", "recorded"):
        raise ValueError(f"unknown source {source!r}; choose one of auto, live, recorded")
    m = machine or policy.Machine.detect()
    needs = policy.Needs(**LIVE_NEEDS)
    decision = policy.decide(needs, m) if source != "recorded" else policy.Decision(False, "as asked")
    if source == "live" and not decision.live:
        raise RuntimeError(f"cannot run convergence live here: {decision.why}")
    if decision.live:
        return sweep(points_for("cuda", live=True), "cuda", log=log)
    try:
        res = load_recorded()
    except FileNotFoundError:
        why = policy.decide(needs, m).why
        return ConvergenceResult([], [], "missing", notes=[f"no GPU sweep recorded yet, and this machine cannot "
                                                           f"run it live ({why})"])
    res.notes.insert(0, "the recorded full sweep, shown whatever this machine runs live" if source == "recorded"
                     else "recorded: this machine cannot run it live")
    return res
