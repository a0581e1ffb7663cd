"""What-if calculators for the notebooks (ipywidgets), each built on a plain function.

The alpha-beta model of one message of n bytes over one link:

    T(n) = alpha + n / beta

alpha (latency) is the fixed cost of any message, however small; beta (bandwidth) is the
rate once data flows. :func:`message_time` computes both terms and says which dominates;
:func:`message_time_calculator` wraps it in sliders. Tests and the notebooks call the
function; the widget only displays what the function returns, so both always agree.

Without ipywidgets the calculator prints a note and the result for its starting values,
so a notebook still runs from top to bottom.

:func:`step_what_if` applies the same idea to a data-parallel training step: the all-reduce
of a model's gradients, read off a *measured* all-reduce sweep (:func:`sweep_time_s`), set
against one GPU's step time, gives the share of the step spent communicating and the
speedup two GPUs can reach on each NCCL path.

A little over 400 lines: each calculator is a plain function plus its widget, kept together so a
learner reading one finds both.
"""
from __future__ import annotations

import dataclasses
import html
import math
from dataclasses import dataclass
from typing import Optional

from ddlab.cost import alpha_beta, step_model
from ddlab.cost import predict as _predict
from ddlab.system import links as _links
from ddlab.base.tables import Table
# Sizes, times and rates are written by ddlab.base.units; widgets.format_bytes, format_time and
# format_rate (names the notebooks use) are those functions themselves, not copies.
from ddlab.base.units import format_bytes, format_rate, format_ratio, format_time  # noqa: F401


# --------------------------------------------------------------------------- the model
@dataclass(frozen=True)
class MessageTime:
    """One message of ``nbytes`` over ``link``: the two terms of the alpha-beta model."""
    nbytes: float
    link: _links.LinkTech
    latency_s: float        # alpha
    bandwidth_s: float      # n / beta

    @property
    def total_s(self) -> float:
        return self.latency_s + self.bandwidth_s

    @property
    def dominant(self) -> str:
        """'latency' or 'bandwidth': the larger term (ties count as bandwidth)."""
        return "latency" if self.latency_s > self.bandwidth_s else "bandwidth"

    @property
    def latency_share(self) -> float:
        return self.latency_s / self.total_s if self.total_s else 0.0

    @property
    def effective_Bps(self) -> float:
        """What a benchmark would report: bytes / total time. Always below the link rate."""
        return self.nbytes / self.total_s if self.total_s else 0.0

    @property
    def crossover_bytes(self) -> float:
        """n at which both terms are equal: alpha x beta. Smaller messages are latency-bound."""
        return alpha_beta.crossover_bytes(self.latency_s, self.link.bandwidth_Bps)

    def explain(self) -> str:
        beta = self.link.bandwidth_Bps
        lines = [
            f"{format_bytes(self.nbytes)} ({self.nbytes:,.0f} bytes) over {self.link.name}",
            f"  latency term   alpha         = {format_time(self.latency_s)}",
            f"  bandwidth term n / beta      = {self.nbytes:,.0f} B / {format_rate(beta)} = "
            f"{format_time(self.bandwidth_s)}",
            f"  transfer time  T = alpha + n/beta = {format_time(self.total_s)}",
            f"  dominant term: {self.dominant} ({self.latency_share:.0%} of the time is latency"
            + ("; the two terms are nearly equal)" if 0.4 <= self.latency_share <= 0.6 else ")"),
            f"  effective bandwidth n / T = {format_rate(self.effective_Bps)} "
            f"({self.effective_Bps / beta:.0%} of the link rate)",
            f"  crossover size alpha x beta = {format_bytes(self.crossover_bytes)}: smaller messages "
            f"are latency-bound, larger ones bandwidth-bound",
        ]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.explain()


def message_time(nbytes: float, link, latency_us: Optional[float] = None,
                 bandwidth_gbs: Optional[float] = None) -> MessageTime:
    """Time to send ``nbytes`` over ``link`` (a catalogue key, name or LinkTech).

    ``latency_us`` and ``bandwidth_gbs`` override the catalogue's figures (what-if)."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, float)) or math.isnan(nbytes) or nbytes < 0:
        raise ValueError(f"message size must be a number of bytes >= 0, got {nbytes!r}")
    tech = _links.get(link)
    alpha_us = tech.latency_us if latency_us is None else latency_us
    beta_gbs = tech.bandwidth_gbs if bandwidth_gbs is None else bandwidth_gbs
    if alpha_us < 0:
        raise ValueError(f"latency must be >= 0 us, got {alpha_us!r}")
    if beta_gbs <= 0:
        raise ValueError(f"bandwidth must be > 0 GB/s, got {beta_gbs!r}")
    if latency_us is not None or bandwidth_gbs is not None:
        tech = dataclasses.replace(tech, latency_us=alpha_us, bandwidth_gbs=beta_gbs,
                                   name=tech.name + " (what-if)")
    latency_s, bandwidth_s = alpha_beta.transfer_terms(nbytes, alpha_us * 1e-6, beta_gbs * _links.GB)
    return MessageTime(nbytes=nbytes, link=tech, latency_s=latency_s, bandwidth_s=bandwidth_s)


def compare_links(nbytes: float, keys=None) -> Table:
    """One message over every link of the catalogue (or ``keys``), as a table."""
    rows = [message_time(nbytes, k) for k in (keys or _links.names())]
    return Table([("link", "text"), ("latency", "time"), ("n/beta", "time"), ("total", "time"),
                  ("dominant", "text")],
                 [[r.link.name, r.latency_s, r.bandwidth_s, r.total_s, r.dominant] for r in rows],
                 title=f"{format_bytes(nbytes)} per message")


# --------------------------------------------------------------------------- widgets
SIZES = [2**k for k in range(0, 31)]   # 1 B .. 1 GiB, powers of two: a log slider


def _ipywidgets():
    try:
        import ipywidgets
        return ipywidgets
    except ImportError:
        return None


def message_time_calculator(nbytes: int = 64 * 1024, link: str = "pcie3_x16"):
    """Slider (message size, log scale) + dropdown (link) -> both terms and the dominant one.

    Returns the widget (Jupyter displays it). Without ipywidgets, prints the result for the
    starting values and returns the :class:`MessageTime`."""
    start = message_time(nbytes, link)
    w = _ipywidgets()
    if w is None:
        print("ipywidgets is not installed, so here is the calculation for the starting values "
              "(install ipywidgets and re-run the cell for the interactive calculator):")
        print(start.explain())
        return start
    sizes = sorted(set(SIZES + [int(nbytes)]))
    size = w.SelectionSlider(options=[(format_bytes(s), s) for s in sizes], value=int(nbytes),
                             description="message", continuous_update=True,
                             layout=w.Layout(width="520px"))
    choice = w.Dropdown(options=[(t.name, k) for k, t in _links.LINKS.items()], value=start.link.key,
                        description="link", layout=w.Layout(width="520px"))
    out = w.HTML()

    def render(*_):
        r = message_time(size.value, choice.value)
        lat_pct = 100 * r.latency_share
        # a two-colour bar: the share of the time that is latency vs transfer
        bar = (f"<div style='display:flex;width:480px;height:14px;border:1px solid #888'>"
               f"<div style='width:{lat_pct:.1f}%;background:#d95f02'></div>"
               f"<div style='width:{100 - lat_pct:.1f}%;background:#1b9e77'></div></div>"
               f"<small><span style='color:#d95f02'>&#9632; latency</span> &nbsp; "
               f"<span style='color:#1b9e77'>&#9632; bandwidth</span></small>")
        out.value = f"<pre>{r.explain()}</pre>{bar}"

    size.observe(render, names="value")
    choice.observe(render, names="value")
    render()
    return w.VBox([size, choice, out])


# --------------------------------------------------------------------------- static plot
def plot_message_times(keys=("pcie3_x16", "pcie5_x16", "nvlink2_x2", "nvlink4_x18", "ib_ndr", "eth_10g"),
                       max_bytes: int = 2**30):
    """Transfer time and effective bandwidth over message size for several links (log-log).

    Left: T(n) = alpha + n/beta, flat (latency-bound) then rising with slope 1. Right: n / T,
    which climbs to the link rate; the dot on each curve marks the crossover alpha x beta,
    where the effective bandwidth is half the link rate. Returns the Figure."""
    import matplotlib.pyplot as plt
    import numpy as np

    techs = [_links.get(k) for k in keys]
    if not techs:
        raise ValueError("give at least one link to plot")
    sizes = np.logspace(0, math.log10(max_bytes), 200)
    fig, (ax_t, ax_b) = plt.subplots(1, 2, figsize=(12, 4.5))
    for t in techs:
        total = alpha_beta.transfer_time(sizes, t.latency_s, t.bandwidth_Bps)
        line, = ax_t.loglog(sizes, total * 1e6, label=t.name)
        ax_b.loglog(sizes, sizes / total / 1e9, color=line.get_color(), label=t.name)
        cross = alpha_beta.crossover_bytes(t.latency_s, t.bandwidth_Bps)
        ax_b.plot([cross], [t.bandwidth_gbs / 2], "o", color=line.get_color(), ms=5)
        ax_t.plot([cross], [2 * t.latency_us], "o", color=line.get_color(), ms=5)
    ax_t.set(xlabel="message size (bytes)", ylabel="transfer time T (us)",
             title="T(n) = alpha + n / beta  (dot: crossover alpha x beta)")
    ax_b.set(xlabel="message size (bytes)", ylabel="effective bandwidth n / T (GB/s)",
             title="effective bandwidth reaches beta only for large messages")
    for ax in (ax_t, ax_b):
        ax.grid(True, which="both", alpha=0.3)
    ax_b.legend(fontsize="small", loc="lower right")
    fig.text(0.5, -0.02, "figures cited from specifications and published measurements (ddlab.system.links.sources()), "
             "not measured here", ha="center", fontsize=8, color="#555555")
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- a training step
# The same model applied to one data-parallel step: each step all-reduces the whole gradient,
# so the communication per step is one all-reduce of `gradient bytes`, and its time can be
# read off a measured all-reduce sweep (ddlab.measure.collectives) instead of guessed from a link.
def sweep_time_s(sweep, nbytes: float) -> float:
    """Seconds for one collective of ``nbytes``, read off a measured sweep (a
    ``ddlab.measure.collectives.SweepResult`` or its ``rows``): interpolated on log-log axes between
    the two measured sizes around ``nbytes``. Outside the measured sizes it raises
    ValueError rather than extrapolate."""
    rows = getattr(sweep, "rows", sweep)
    try:
        pts = sorted((float(r["bytes"]), float(r["time_us"]) * 1e-6) for r in rows)
    except (TypeError, KeyError) as exc:
        raise ValueError(f"a sweep is rows with 'bytes' and 'time_us'; could not read {exc}") from None
    pts = [(b, t) for b, t in pts if b > 0 and t > 0]
    if len(pts) < 2:
        raise ValueError("the sweep needs at least two measured sizes")
    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, float)) or not nbytes > 0:
        raise ValueError(f"message size must be a number of bytes > 0, got {nbytes!r}")
    if not pts[0][0] <= nbytes <= pts[-1][0]:
        raise ValueError(f"{format_bytes(nbytes)} is outside the measured sizes "
                         f"({format_bytes(pts[0][0])} to {format_bytes(pts[-1][0])}); measure it rather than guess")
    for (b0, t0), (b1, t1) in zip(pts, pts[1:]):
        if b0 <= nbytes <= b1:
            if b1 == b0:
                return t0
            f = (math.log(nbytes) - math.log(b0)) / (math.log(b1) - math.log(b0))
            return math.exp(math.log(t0) + f * (math.log(t1) - math.log(t0)))
    raise AssertionError("unreachable: nbytes lies inside the measured range")


# How much the path matters, from the share s = all-reduce / step alone: the predicted speedup
# is n / (1 + s), so s < 0.1 costs under 10%, and s > n - 1 makes n GPUs slower than one.
VERDICT_RULES = (("hardly matters", "(share < 0.1)"), ("noticeable", "(< 0.5)"),
                 ("large", "(< n - 1)"), ("slower than 1 GPU", "(share > n - 1)"))


def step_verdict(share: float, n: int = 2) -> str:
    """How much the path costs a step whose all-reduce takes ``share`` of the compute time."""
    if share < 0:
        raise ValueError(f"a share of the step cannot be negative: {share}")
    if share < 0.1:
        return "hardly matters"
    if share < 0.5:
        return "noticeable"
    if share <= n - 1 or math.isclose(share, n - 1):    # equal (within rounding): n GPUs just match one
        return "large"
    return "slower than 1 GPU"


@dataclass(frozen=True)
class StepCase:
    """One model (or one way of running it) for :func:`step_what_if`: its gradient bytes per
    step and, when known, how long one GPU takes for a training step (compute only), and the
    speedup measured on each path (path -> speedup) of the same configuration."""
    label: str
    grad_bytes: float
    compute_s: Optional[float] = None
    measured: Optional[dict] = None

    @classmethod
    def of_result(cls, label: str, result) -> "StepCase":
        """The case an NCCL-path comparison (:class:`ddlab.training.results.ExperimentResult`)
        measured: its gradient bytes per step, the one-GPU step (the plain one-GPU run's, which the
        measured speedups divide by, where one is recorded; else the result's own one-worker GPU run,
        the same run description as the 2-GPU runs), and each path's measured speedup over the plain
        run. Without either one-GPU row the step is unknown (None)."""
        rows = [r for r in result.rows if not r.get("error")]
        one = [r for r in rows if r.get("workers") == 1 and r.get("device") == "cuda" and r.get("step_ms_median")]
        plain = next((result.plain_run(r) for r in rows if (r.get("workers") or 0) > 1), None)
        grad = result.config.get("gradient_bytes_per_step")
        if not grad:
            raise ValueError(f"{label}: the result does not say its gradient bytes per step")
        step_ms = (plain.step_ms_median if plain is not None and plain.found and plain.step_ms_median else
                   one[0]["step_ms_median"] if one else None)
        return cls(label, grad, step_ms * 1e-3 if step_ms else None,
                   {r["path"]: r["speedup"] for r in rows
                    if (r.get("workers") or 0) > 1 and r.get("speedup") is not None and r.get("device") == "cuda"})


@dataclass
class StepWhatIf:
    """Rows of :func:`step_what_if`, printable as a table."""
    rows: list
    ranks: int
    where: str = ""

    def row(self, label: str, path: str) -> dict:
        for r in self.rows:
            if r["label"] == label and r["path"] == path:
                return r
        raise KeyError(f"no row for {label!r} on path {path!r}")

    def table(self) -> Table:
        def cell(r):
            known = r["compute_s"] is not None
            return {"label": r["label"], "grad_bytes": r["grad_bytes"], "path": r["path"], "comm_s": r["comm_s"],
                    "compute_s": r["compute_s"] if known else "not recorded",
                    "share": r["share"] if known else "-", "speedup": r["speedup"] if known else "-",
                    "verdict": r["verdict"] or "-", "measured": r.get("measured") or "-"}
        cols = [("label", "text", "case"), ("grad_bytes", "bytes", "gradients"), ("path", "text"),
                ("comm_s", _or_text(format_time), "all-reduce"), ("compute_s", _or_text(format_time), "1-GPU step"),
                ("share", _or_text(lambda v: f"{v:.2f}"), "comm / step"),
                ("speedup", _or_text(format_ratio), f"predicted {self.ranks}-GPU speedup")]
        if any(r.get("measured") is not None for r in self.rows):
            cols.append(("measured", _or_text(format_ratio), "measured"))
        cols.append(("verdict", "text"))
        note = (f"predicted speedup = {self.ranks} x step / (step + all-reduce), nothing overlapped. Verdict: "
                + "; ".join(f"{v} {rule}" for v, rule in VERDICT_RULES) + ".")
        return Table(cols, [cell(r) for r in self.rows],
                     align={k: "right" for k in ("grad_bytes", "comm_s", "compute_s", "share", "speedup", "measured")
                            if k in {c[0] for c in cols}},
                     title=f"One step's all-reduce on {self.ranks} GPUs, read off measured sweeps"
                           + (f" ({self.where})" if self.where else ""), notes=note)

    def __str__(self) -> str:
        return str(self.table())

    def _repr_html_(self) -> str:
        return self.table()._repr_html_()


def _or_text(fmt):
    """A column formatter that writes numbers with ``fmt`` and leaves words ("not recorded") as they are."""
    return lambda v: v if isinstance(v, str) else fmt(v)


def step_what_if(cases, sweeps, where: str = "") -> StepWhatIf:
    """What each NCCL path would cost one data-parallel training step.

    ``cases``: :class:`StepCase` items (or ``(label, grad_bytes, compute_s)`` tuples);
    ``sweeps``: path -> measured all-reduce sweep (``ddlab.measure.collectives.SweepResult``), all on
    the same number of ranks. For each case and path: the all-reduce time of the gradients
    (:func:`sweep_time_s`), its share of a one-GPU step ``t``, and the weak-scaling speedup
    the model predicts when nothing overlaps, ``n * t / (t + comm)``. DDP and Horovod start
    all-reducing during the backward pass, so a run can do somewhat better; a small model's
    backward pass is short, so there is little to hide behind."""
    if not sweeps:
        raise ValueError("give at least one measured sweep (path -> SweepResult)")
    ranks = {getattr(s, "nproc", None) for s in sweeps.values()}
    if len(ranks) != 1 or None in ranks:
        raise ValueError(f"the sweeps must all be measured on one known number of ranks; got {sorted(map(str, ranks))}")
    n = ranks.pop()
    rows = []
    for case in cases:
        c = case if isinstance(case, StepCase) else StepCase(*case)
        if c.compute_s is not None and not c.compute_s > 0:
            raise ValueError(f"{c.label}: a step time must be > 0 seconds, got {c.compute_s!r}")
        for path, sweep in sweeps.items():
            comm = sweep_time_s(sweep, c.grad_bytes)
            row = {"label": c.label, "grad_bytes": c.grad_bytes, "path": path, "comm_s": comm,
                   "compute_s": c.compute_s, "share": None, "speedup": None, "verdict": None,
                   "measured": (c.measured or {}).get(path)}
            if c.compute_s is not None:
                t = c.compute_s
                speedup = n * t / step_model.step_time(t, comm, overlap=0.0)
                row.update(share=comm / t, speedup=speedup, verdict=step_verdict(comm / t, n))
            rows.append(row)
    return StepWhatIf(rows, n, where)


# --------------------------------------------------------------------------- a training step
RECORDED_PATH_PREFIX = "recorded:"
WRAPPERS = ("none", "ddp", "horovod")


def _recorded_set():
    """The recorded runs and path fits (:func:`ddlab.cost.predict.recorded_set`, loaded once per session)."""
    return _predict.recorded_set()


def recorded_step_s(model: str):
    """(one-GPU step in seconds, its per-GPU batch) of ``model`` in the recorded DDP runs,
    or None when the model has no recording."""
    for p in _recorded_set().points:
        if p.model == model and p.launcher == "ddp":
            return p.compute_s, p.batch
    return None


def step_link_choices() -> list:
    """(label, key) pairs: the link catalogue, then the recorded all-reduce paths' fits."""
    out = [(t.name, k) for k, t in _links.LINKS.items()]
    rec = _recorded_set()
    out += [(f"recorded all-reduce, path {p} ({rec.machine})", RECORDED_PATH_PREFIX + p) for p in rec.fits]
    return out


def predict_training_step(model: str = "wide", batch: int = 512, n_gpus: int = 2, link: str = "nvlink4_x18",
                          step_ms: Optional[float] = None, wrapper: str = "none") -> "_predict.Prediction":
    """:func:`ddlab.cost.predict.predict` (what ``ddlab predict`` runs) with the choices of
    :func:`step_calculator`: weak scaling, ``batch`` per GPU on ``n_gpus`` (2 or more).

    ``link``: a key of :mod:`ddlab.system.links` (ring formula on the link's alpha and beta) or
    ``"recorded:<path>"`` (the alpha-beta fit of that path's recorded all-reduce sweep).
    ``step_ms``: one GPU's step at ``batch``; by default the recorded one-GPU step of the
    model scaled in proportion to the batch (an assumption: a small model's step is mostly
    fixed launch cost and grows more slowly). ``wrapper``: "none", or the framework whose
    cost is added ("ddp": measured on one worker; "horovod": its fusion and cycle)."""
    from ddlab.training import models as _models
    _models.check(model)
    if isinstance(batch, bool) or int(batch) != batch or batch < 1:
        raise ValueError(f"batch must be a whole number >= 1, got {batch!r}")
    if wrapper not in WRAPPERS:
        raise ValueError(f"wrapper must be one of {', '.join(WRAPPERS)}, got {wrapper!r}")
    if isinstance(link, str) and link.startswith(RECORDED_PATH_PREFIX):
        path, fits = link[len(RECORDED_PATH_PREFIX):], _predict.RECORDED
        if path not in _recorded_set().fits:
            raise ValueError(f"no recorded all-reduce for path {path!r}; have {', '.join(_recorded_set().fits)}")
    else:
        path, fits = link, {link: _links.get(link)}
    if step_ms is None:
        rec = recorded_step_s(model)
        if rec is None:
            raise ValueError(f"{model} has no recorded one-GPU step: give step_ms (measure it with one GPU)")
        step_ms = rec[0] * batch / rec[1] * 1e3
    elif not (isinstance(step_ms, (int, float)) and math.isfinite(step_ms) and step_ms > 0):
        raise ValueError(f"step_ms must be a positive number of milliseconds, got {step_ms!r}")
    return _predict.predict(model, step_ms=step_ms, batch=int(batch), gpus=n_gpus, path=path, fits=fits,
                            framework="ddp" if wrapper == "none" else wrapper,
                            wrapper=step_model.NO_OVERHEADS if wrapper == "none" else None)


def _step_bar(p: "_predict.Prediction") -> str:
    colours = (("compute", p.compute_s, "#1b9e77"), ("exposed communication", p.exposed_comm_s, "#d95f02"),
               ("wrapper", p.wrapper_s, "#7570b3"))
    cells = "".join(f"<div style='width:{100 * v / p.step_s:.1f}%;background:{c}'></div>" for _, v, c in colours)
    keys = " &nbsp; ".join(f"<span style='color:{c}'>&#9632; {name} {format_time(v)}</span>" for name, v, c in colours)
    return (f"<div style='display:flex;width:480px;height:14px;border:1px solid #888'>{cells}</div>"
            f"<small>{keys}</small>")


def step_calculator(model: str = "wide", batch: int = 512, n_gpus: int = 2, link: str = "nvlink4_x18",
                    wrapper: str = "none"):
    """Model, per-GPU batch, GPUs (2 or more), link and wrapper -> the predicted step split into
    compute, exposed communication and the wrapper's cost, where each number came from, and the
    speedup over one GPU (:func:`predict_training_step`, which is ``ddlab predict``). The step-time box starts at the recorded one-GPU step
    (scaled to the batch) and can be overwritten. Without ipywidgets, prints the prediction
    for the starting values and returns it."""
    from ddlab.training import models as _models
    start = predict_training_step(model, batch, n_gpus, link, None if recorded_step_s(model) else 1.0, wrapper)
    w = _ipywidgets()
    if w is None:
        print("ipywidgets is not installed, so here is the prediction for the starting values "
              "(install ipywidgets and re-run the cell for the interactive calculator):")
        print(start.describe())
        return start
    wide = w.Layout(width="520px")
    model_w = w.Dropdown(options=list(_models.MODELS), value=model, description="model", layout=wide)
    batch_w = w.SelectionSlider(options=[2 ** k for k in range(4, 14)], value=batch, description="batch/GPU",
                                layout=wide)
    gpus_w = w.IntSlider(value=n_gpus, min=2, max=16, description="GPUs", layout=wide)
    link_w = w.Dropdown(options=step_link_choices(), value=link, description="link", layout=wide)
    wrapper_w = w.Dropdown(options=list(WRAPPERS), value=wrapper, description="wrapper", layout=wide)
    step_w = w.BoundedFloatText(value=round(start.compute_s * 1e3, 4), min=1e-4, max=1e5, step=0.1,
                                description="1-GPU ms", layout=wide)
    out = w.HTML()

    def default_step(*_):
        rec = recorded_step_s(model_w.value)
        if rec is not None:
            step_w.value = round(rec[0] * batch_w.value / rec[1] * 1e3, 4)

    def render(*_):
        try:
            p = predict_training_step(model_w.value, batch_w.value, gpus_w.value, link_w.value, step_w.value,
                                      wrapper_w.value)
        except ValueError as exc:
            out.value = f"<pre>{html.escape(str(exc))}</pre>"
            return
        out.value = f"<pre>{html.escape(p.describe())}</pre>{_step_bar(p)}"

    model_w.observe(default_step, names="value")
    batch_w.observe(default_step, names="value")
    for x in (model_w, batch_w, gpus_w, link_w, wrapper_w, step_w):
        x.observe(render, names="value")
    render()
    return w.VBox([model_w, batch_w, gpus_w, link_w, wrapper_w, step_w, out])
