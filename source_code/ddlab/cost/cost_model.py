"""The alpha-beta model of communication, and what it predicts for data-parallel training.

Sending a message of ``S`` bytes over a link costs a fixed start-up time ``alpha`` (latency:
software, synchronisation, the first byte crossing the link) plus ``S / beta`` (``beta`` the
bandwidth in bytes per second)::

    t(S) = alpha + S / beta

Small messages are *latency-bound* (alpha dominates), large ones *bandwidth-bound* (S/beta
dominates). The two terms are equal at the crossover size ``S* = alpha * beta``.

Units throughout: seconds, bytes, bytes per second. (A worked example: 64 KiB at 16 GB/s
takes 65536 / 16e9 s = 4.1 us; older material got such examples wrong by 10x.)

The second half predicts a whole data-parallel training step (:func:`predict_step`): the
gradients all-reduced in DDP's buckets, each bucket starting as soon as the backward pass
has produced its gradients (so communication overlaps the rest of the backward pass), plus
the data-parallel wrapper's own fixed cost per step and per bucket, fitted to recorded runs
(:func:`fit_overheads`); :func:`validate` sets the predictions beside the recorded speedups.

Length (about 820 lines): the alpha-beta model, its fit to a sweep, the plots, and the step model
(buckets, overlap, wrapper costs) with its validation against the recordings build on each other;
the step model and its validation are the part to move out next.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, NamedTuple, Optional, Sequence

import numpy as np

from ddlab.base.units import format_bytes, format_rate, format_time


class AlphaBeta(NamedTuple):
    """A fitted link: ``alpha`` in seconds, ``beta`` in bytes per second. Unpacks as
    ``alpha, beta = fit``."""
    alpha: float
    beta: float

    @property
    def crossover_bytes(self) -> float:
        return crossover_bytes(self.alpha, self.beta)

    def predict(self, nbytes):
        return transfer_time(nbytes, self.alpha, self.beta)

    def describe(self) -> str:
        return (f"alpha = {format_time(self.alpha)}, beta = {format_rate(self.beta)}, "
                f"crossover at {format_bytes(self.crossover_bytes)}")


# ----------------------------------------------------------------------------- the model
def transfer_terms(nbytes, alpha_s: float, beta_bytes_per_s: float):
    """The two terms of the model, ``(alpha, nbytes / beta)``: the latency term and the
    bandwidth term, in seconds (the second a number or an array, as ``nbytes``)."""
    _check_link(alpha_s, beta_bytes_per_s)
    nb = np.asarray(nbytes, dtype=float)
    if np.any(nb < 0):
        raise ValueError("message sizes must not be negative")
    bw = nb / beta_bytes_per_s
    return alpha_s, (float(bw) if np.ndim(bw) == 0 else bw)


def transfer_time(nbytes, alpha_s: float, beta_bytes_per_s: float):
    """``alpha + nbytes / beta``: seconds to move ``nbytes`` over one link (numbers or arrays)."""
    latency, bandwidth = transfer_terms(nbytes, alpha_s, beta_bytes_per_s)
    return latency + bandwidth


def crossover_bytes(alpha_s: float, beta_bytes_per_s: float) -> float:
    """The size where latency and bandwidth terms are equal: ``alpha * beta`` bytes."""
    _check_link(alpha_s, beta_bytes_per_s)
    return alpha_s * beta_bytes_per_s


def ring_allreduce_time(nbytes, n: int, alpha_s: float, beta_bytes_per_s: float):
    """Ring all-reduce of ``nbytes`` on ``n`` ranks: ``2(n-1)`` steps (n-1 of reduce-scatter, n-1 of
    all-gather), each sending one ``nbytes/n`` chunk: ``2(n-1) * (alpha + nbytes/(n*beta))``.
    The bandwidth term tends to ``2*nbytes/beta`` as n grows; the latency term grows with n."""
    _check_n(n)
    _check_link(alpha_s, beta_bytes_per_s)
    nb = np.asarray(nbytes, dtype=float)
    t = 2 * (n - 1) * transfer_time(nb / n, alpha_s, beta_bytes_per_s) if n > 1 else nb * 0.0
    return float(t) if np.ndim(t) == 0 else t


def tree_allreduce_time(nbytes, n: int, alpha_s: float, beta_bytes_per_s: float):
    """Idealised pipelined (double binary) tree all-reduce: a reduce up and a broadcast down a tree
    of depth ``ceil(log2 n)``, the message cut into pieces so the levels work at once:
    ``2*ceil(log2 n)*alpha + 2*nbytes/beta``. Latency grows only with log2 n, which is why NCCL
    prefers trees for small messages on many ranks; for large messages the ring's
    ``2(n-1)/n`` bandwidth term is slightly smaller."""
    _check_n(n)
    _check_link(alpha_s, beta_bytes_per_s)
    nb = np.asarray(nbytes, dtype=float)
    depth = math.ceil(math.log2(n)) if n > 1 else 0
    t = (2 * depth * alpha_s + 2 * nb / beta_bytes_per_s) if n > 1 else nb * 0.0
    return float(t) if np.ndim(t) == 0 else t


def allreduce_time(nbytes, n: int, alpha_s: float, beta_bytes_per_s: float, algorithm: str = "ring"):
    if algorithm == "ring":
        return ring_allreduce_time(nbytes, n, alpha_s, beta_bytes_per_s)
    if algorithm == "tree":
        return tree_allreduce_time(nbytes, n, alpha_s, beta_bytes_per_s)
    raise ValueError(f"algorithm must be 'ring' or 'tree', got {algorithm!r}")


def step_time(compute_s: float, comm_s: float, overlap: float = 0.0) -> float:
    """One training step: compute plus communication, of which the fraction ``overlap`` (0..1)
    of the shorter one is hidden behind the other (DDP overlaps gradient all-reduce with the
    backward pass): ``compute + comm - overlap * min(compute, comm)``."""
    if compute_s < 0 or comm_s < 0:
        raise ValueError(f"times must not be negative, got compute {compute_s} and comm {comm_s}")
    if not 0.0 <= overlap <= 1.0:
        raise ValueError(f"overlap is a fraction between 0 and 1, got {overlap}")
    return compute_s + comm_s - overlap * min(compute_s, comm_s)


def predicted_speedup(compute_s_one_gpu: float, grad_bytes: float, n: int, alpha_s: float,
                      beta_bytes_per_s: float, overlap: float = 0.0, algorithm: str = "ring",
                      scaling: str = "weak") -> float:
    """Throughput of ``n`` data-parallel GPUs relative to one.

    ``scaling="weak"`` (the course's experiments): each GPU keeps the one-GPU batch, so a step
    computes for ``compute_s_one_gpu`` and then all-reduces ``grad_bytes``; speedup =
    ``n * t_1 / t_n``. ``scaling="strong"``: the global batch is fixed and split, so each GPU
    computes ``compute_s_one_gpu / n``; speedup = ``t_1 / t_n``. One GPU needs no all-reduce.
    """
    if compute_s_one_gpu <= 0:
        raise ValueError(f"compute time must be positive, got {compute_s_one_gpu}")
    if grad_bytes < 0:
        raise ValueError(f"gradient size must not be negative, got {grad_bytes}")
    _check_n(n)
    if scaling not in ("weak", "strong"):
        raise ValueError(f"scaling must be 'weak' or 'strong', got {scaling!r}")
    compute = compute_s_one_gpu if scaling == "weak" else compute_s_one_gpu / n
    comm = allreduce_time(grad_bytes, n, alpha_s, beta_bytes_per_s, algorithm) if n > 1 else 0.0
    t_n = step_time(compute, comm, overlap)
    return (n if scaling == "weak" else 1) * compute_s_one_gpu / t_n


def scaling_efficiency(compute_s_one_gpu: float, grad_bytes: float, n: int, alpha_s: float,
                       beta_bytes_per_s: float, overlap: float = 0.0, algorithm: str = "ring",
                       scaling: str = "weak") -> float:
    """``predicted_speedup / n``: 1.0 is perfect scaling."""
    return predicted_speedup(compute_s_one_gpu, grad_bytes, n, alpha_s, beta_bytes_per_s,
                             overlap, algorithm, scaling) / n


# ----------------------------------------------------------------------------- fitting
def fit_alpha_beta(sizes: Sequence[float], times: Sequence[float], robust: bool = True) -> AlphaBeta:
    """Fit ``t = alpha + S/beta`` to measured (size in bytes, time in seconds) pairs.

    The model is linear in ``alpha`` and ``1/beta``, so this is a least-squares fit, but of
    the *relative* error ``(model - t) / t``: a plain fit would be decided by the largest sizes
    alone (their times are thousands of times longer) and could return any alpha, even a
    negative one. Weighting by 1/t lets a 10 us point and a 10 ms point count alike. With
    ``robust`` the fit is then repeated with Huber weights (iteratively reweighted least
    squares), so a few outliers (a hiccup, a protocol switch) pull it less.

    alpha is kept >= 0 (a negative start-up time has no meaning: then the fit is redone with
    alpha = 0). Raises ValueError for unusable input: fewer than two distinct sizes, lengths
    that differ, negative sizes, non-positive or non-finite times, or times that do not grow
    with size (no bandwidth can be read from them).
    """
    s = np.asarray(sizes, dtype=float).ravel()
    t = np.asarray(times, dtype=float).ravel()
    if s.size != t.size:
        raise ValueError(f"sizes and times differ in length ({s.size} and {t.size})")
    if s.size < 2 or np.unique(s).size < 2:
        raise ValueError("need at least two different message sizes to fit alpha and beta")
    if not (np.all(np.isfinite(s)) and np.all(np.isfinite(t))):
        raise ValueError("sizes and times must be finite numbers")
    if np.any(s < 0):
        raise ValueError("message sizes must not be negative")
    if np.any(t <= 0):
        raise ValueError("times must be positive (seconds)")

    X = np.column_stack([np.ones_like(s), s])      # t = alpha * 1 + (1/beta) * S
    w = 1.0 / t                                     # relative error
    huber = np.ones_like(t)
    coef = _wls(X, t, w)
    if robust:
        for _ in range(20):
            r = (X @ coef - t) / t
            scale = 1.4826 * np.median(np.abs(r - np.median(r)))
            if scale <= 1e-12:
                break
            k = 1.345 * scale
            huber = np.where(np.abs(r) <= k, 1.0, k / np.maximum(np.abs(r), 1e-300))
            new = _wls(X, t, w * np.sqrt(huber))
            if np.allclose(new, coef, rtol=1e-10, atol=0):
                coef = new
                break
            coef = new
    alpha, inv_beta = coef
    if alpha < 0:
        # Refit through the origin: t = S/beta, same weights.
        ww = w * np.sqrt(huber)
        inv_beta = float(np.sum(ww ** 2 * s * t) / np.sum(ww ** 2 * s * s))
        alpha = 0.0
    if not inv_beta > 0:
        raise ValueError("the times do not grow with message size, so no bandwidth can be fitted "
                         "(are the sizes too small to leave the latency-bound range?)")
    return AlphaBeta(float(alpha), float(1.0 / inv_beta))


def _wls(X, y, w):
    coef, *_ = np.linalg.lstsq(X * w[:, None], y * w, rcond=None)
    return coef


def fit_sweep(result, min_bytes: int = 0, max_bytes: Optional[int] = None) -> AlphaBeta:
    """Fit alpha and beta to a collective sweep (:class:`ddlab.measure.collectives.SweepResult`),
    time per call against the bytes of the operation.

    For an all-reduce, ``beta`` is then the *effective algorithm bandwidth* the collective
    reaches for large messages (``algbw`` in nccl-tests' terms), not the link's: on ``n``
    ranks the link carries ``beta * 2(n-1)/n`` (the bus bandwidth), so for 2 GPUs the two are
    equal. ``alpha`` is the whole per-call overhead: for torch.distributed it includes the
    Python call and kernel launch, not only NCCL's own latency.
    """
    rows = [r for r in result.rows if r["bytes"] >= min_bytes and (max_bytes is None or r["bytes"] <= max_bytes)]
    if len(rows) < 2:
        raise ValueError(f"the sweep has {len(rows)} rows in the chosen size range; need at least two")
    return fit_alpha_beta([r["bytes"] for r in rows], [r["time_us"] * 1e-6 for r in rows])


# ----------------------------------------------------------------------------- plotting
def plot_alpha_beta(sizes, times, ax=None, fit: Optional[AlphaBeta] = None, label: str = "measured",
                    title: Optional[str] = None):
    """Time against size on log-log axes: the measured points, the fitted ``alpha + S/beta``
    line, the crossover ``alpha*beta`` and the latency-bound (left) and bandwidth-bound (right)
    regions shaded and named. Returns the axes."""
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
    """:func:`plot_alpha_beta` for a collective sweep, labelled with its op, path and ranks."""
    fit = fit or fit_sweep(result)
    return plot_alpha_beta([r["bytes"] for r in result.rows], [r["time_us"] * 1e-6 for r in result.rows],
                           ax=ax, fit=fit, label=f"{result.op}, {result.label}",
                           title=f"{result.op} time per call and the alpha-beta fit")


# ----------------------------------------------------------------------------- helpers
def _check_link(alpha_s: float, beta: float) -> None:
    if not (math.isfinite(alpha_s) and alpha_s >= 0):
        raise ValueError(f"alpha (seconds) must be a finite number >= 0, got {alpha_s}")
    if not (math.isfinite(beta) and beta > 0):
        raise ValueError(f"beta (bytes per second) must be a finite positive number, got {beta}")


def _check_n(n: int) -> None:
    if int(n) != n or n < 1:
        raise ValueError(f"the number of ranks must be a whole number >= 1, got {n}")



# ============================================================================= a data-parallel step
# DistributedDataParallel's defaults (torch.nn.parallel.DistributedDataParallel): gradients are
# all-reduced in buckets of bucket_cap_mb=25 MiB, the first bucket closing at 1 MiB so that
# communication starts early. After the first iteration DDP rebuilds its buckets in the order
# the gradients became ready (the reverse of the layer order); a bucket closes as soon as it
# holds at least its limit, and a tensor is never split, so one tensor larger than the cap is a
# bucket of its own.
DDP_FIRST_BUCKET_BYTES = 1024 * 1024
DDP_BUCKET_CAP_MB = 25
# The backward pass does twice the arithmetic of the forward pass (a gradient for the inputs
# and one for the weights): 2/3 of forward + backward. An assumption, not a measurement.
BACKWARD_FRACTION = 2 / 3
READINESS = ("flops", "params")


@dataclass(frozen=True)
class Layer:
    """One layer with parameters, as the step model sees it: its parameter count (its
    gradient is that many values) and its forward FLOPs per sample (its share of the
    backward pass is taken to be proportional to them)."""
    name: str
    params: int
    flops: float


def model_layers(name: str) -> tuple:
    """The layers of one of the course's models (:mod:`ddlab.training.models`), in forward order,
    with their parameter counts and forward FLOPs per sample (a multiply-add counts 2).
    Layers without parameters (ReLU, pooling, dropout) are left out: they produce no
    gradient, and their time is in the measured step."""
    from ddlab.training import models
    models.check(name)
    if name in models.CNN_DENSE:
        # 28x28 -> conv 3x3 (32) -> 26x26 -> conv 3x3 (64) -> 24x24 -> maxpool -> 12x12x64 = 9216
        h = models.CNN_DENSE[name]
        return (Layer("conv1", 32 * 9 + 32, 26 * 26 * 32 * 9 * 2),
                Layer("conv2", 64 * 32 * 9 + 64, 24 * 24 * 64 * 32 * 9 * 2),
                Layer("dense1", 9216 * h + h, 9216 * h * 2),
                Layer("dense2", h * models.NUM_CLASSES + models.NUM_CLASSES, h * models.NUM_CLASSES * 2))
    out, width_in = [], 28 * 28
    for i, width in enumerate(models.MLP_WIDTHS[name] + (models.NUM_CLASSES,)):
        out.append(Layer(f"dense{i + 1}", width_in * width + width, width_in * width * 2))
        width_in = width
    return tuple(out)


def _as_layers(model) -> tuple:
    if isinstance(model, str):
        return model_layers(model)
    if isinstance(model, (int, float)) and not isinstance(model, bool):
        if not model > 0:
            raise ValueError(f"a parameter count must be positive, got {model!r}")
        return (Layer("all parameters", int(model), float(model)),)
    layers = tuple(model)
    if not layers or not all(isinstance(x, Layer) for x in layers):
        raise ValueError("give a model name, a parameter count, or a non-empty sequence of cost_model.Layer")
    if any(x.params < 0 or x.flops < 0 for x in layers) or sum(x.params for x in layers) <= 0:
        raise ValueError("layers need parameter counts and FLOPs >= 0, and some parameters in all")
    return layers


@dataclass(frozen=True)
class Bucket:
    """One all-reduce of DDP: the layers whose gradients it carries (in the order they
    become ready), its size in bytes, and ``ready``: the share of the backward pass done
    when its last gradient is ready (0..1)."""
    layers: tuple
    nbytes: int
    ready: float


def gradient_buckets(model, bucket_cap_mb: float = DDP_BUCKET_CAP_MB,
                     first_bucket_bytes: Optional[int] = DDP_FIRST_BUCKET_BYTES,
                     bytes_per_param: int = 4, readiness: str = "flops") -> tuple:
    """DDP's buckets for ``model`` (a name, a parameter count or :class:`Layer` items), in
    the order they are all-reduced: the gradients in reverse layer order, a bucket closing
    once it holds at least its limit (the first ``first_bucket_bytes``, then
    ``bucket_cap_mb`` MiB; None: every bucket gets the cap). ``readiness`` says how the
    backward pass is shared among the layers: by forward FLOPs ("flops"), by parameter
    count ("params"), or as measured: a mapping {layer name: share of the backward pass done
    when its gradient is ready} (:attr:`ddlab.training.step_profile.StepProfile.ready`)."""
    layers = _as_layers(model)
    measured = None
    if isinstance(readiness, Mapping):
        missing = [x.name for x in layers if x.params and x.name not in readiness]
        if missing:
            raise ValueError(f"the measured readiness has no share for layer(s) {', '.join(missing)}")
        measured = {k: float(v) for k, v in readiness.items()}
    elif readiness not in READINESS:
        raise ValueError(f"readiness must be one of {', '.join(READINESS)} or a mapping of layer to share, "
                         f"got {readiness!r}")
    if not bucket_cap_mb > 0:
        raise ValueError(f"bucket_cap_mb must be positive, got {bucket_cap_mb!r}")
    if int(bytes_per_param) != bytes_per_param or bytes_per_param < 1:
        raise ValueError(f"bytes_per_param must be a whole number >= 1, got {bytes_per_param!r}")
    cap = int(bucket_cap_mb * 1024 * 1024)
    weight = [0.0 if measured else (x.flops if readiness == "flops" else x.params) for x in layers]
    total_w = sum(weight) or 1.0
    limit = cap if first_bucket_bytes is None else int(first_bucket_bytes)
    out, names, size, done = [], [], 0, 0.0
    for layer, w in zip(reversed(layers), reversed(weight)):
        done = max(done, measured[layer.name]) if measured and layer.params else done + w / total_w
        if layer.params == 0:
            continue
        names.append(layer.name)
        size += layer.params * bytes_per_param
        if size >= limit:
            out.append(Bucket(tuple(names), size, min(done, 1.0)))
            names, size, limit = [], 0, cap
    if names:
        out.append(Bucket(tuple(names), size, 1.0))
    return tuple(out)


def bucket_allreduce_time(nbytes: float, n_gpus: int, path, fit_ranks: int = 2) -> float:
    """Seconds to all-reduce one bucket of ``nbytes`` on ``n_gpus`` over ``path``.

    ``path`` is either an :class:`AlphaBeta` fitted to a measured all-reduce sweep on
    ``fit_ranks`` ranks (:func:`fit_sweep`: ``alpha`` the whole per-call cost, ``beta`` the
    algorithm bandwidth), or a link of :mod:`ddlab.system.links` (``latency_s``, ``bandwidth_Bps``),
    for which the ring formula :func:`ring_allreduce_time` applies. A sweep's fit is carried
    to ``n`` ranks by the ring's bandwidth term ``2(n-1)/n`` (its bus bandwidth stays the
    same); its alpha is kept as measured."""
    _check_n(n_gpus)
    if n_gpus == 1:
        return 0.0
    if hasattr(path, "bandwidth_Bps") and hasattr(path, "latency_s"):
        return ring_allreduce_time(nbytes, n_gpus, path.latency_s, path.bandwidth_Bps)
    alpha, beta = path
    _check_link(alpha, beta)
    _check_n(fit_ranks)
    if fit_ranks < 2:
        raise ValueError("a sweep's fit needs at least 2 ranks")
    busbw = beta * 2 * (fit_ranks - 1) / fit_ranks
    return alpha + nbytes * (2 * (n_gpus - 1) / n_gpus) / busbw


@dataclass(frozen=True)
class Overheads:
    """The data-parallel wrapper's own cost on the host, beside the all-reduce itself: a
    fixed time per step and per bucket (hooks, bookkeeping, a background thread's cycle),
    fitted to recorded runs by :func:`fit_overheads`. ``points``: how many runs the fit
    used; ``note``: what it could and could not tell apart."""
    per_step_s: float = 0.0
    per_bucket_s: float = 0.0
    launcher: str = ""
    points: int = 0
    note: str = ""

    def __post_init__(self):
        for name in ("per_step_s", "per_bucket_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a finite number of seconds >= 0, got {v!r}")

    def total_s(self, n_buckets: int) -> float:
        return self.per_step_s + self.per_bucket_s * n_buckets

    def describe(self) -> str:
        who = f"{self.launcher}: " if self.launcher else ""
        return (f"{who}{format_time(self.per_step_s)} per step + {format_time(self.per_bucket_s)} per bucket"
                + (f" (fitted to {self.points} recorded runs)" if self.points else ""))


NO_OVERHEADS = Overheads()


@dataclass(frozen=True)
class StepPrediction:
    """One predicted data-parallel step (weak scaling: every GPU keeps the one-GPU batch).
    ``total_s = compute_s + exposed_comm_s + overhead_s``; ``comm_s`` is all the
    all-reduce time, of which ``hidden_comm_s`` runs during the backward pass."""
    n_gpus: int
    compute_s: float
    comm_s: float
    exposed_comm_s: float
    overhead_s: float
    total_s: float
    buckets: tuple
    bound: str          # "serial", "device" or "host": what decides the step time
    batch: Optional[int] = None

    @property
    def hidden_comm_s(self) -> float:
        return max(0.0, self.comm_s - self.exposed_comm_s)

    @property
    def speedup(self) -> float:
        return self.n_gpus * self.compute_s / self.total_s

    @property
    def efficiency(self) -> float:
        return self.speedup / self.n_gpus

    @property
    def images_per_s(self) -> Optional[float]:
        return self.n_gpus * self.batch / self.total_s if self.batch else None

    def parts(self) -> dict:
        return {"compute": self.compute_s, "exposed communication": self.exposed_comm_s,
                "overhead": self.overhead_s}

    def describe(self) -> str:
        t = self.total_s
        text = (f"{self.n_gpus} GPU(s): step {format_time(t)} = compute {format_time(self.compute_s)} "
                f"+ exposed communication {format_time(self.exposed_comm_s)} "
                f"+ overhead {format_time(self.overhead_s)}; all-reduce {format_time(self.comm_s)} in "
                f"{len(self.buckets)} bucket(s), {format_time(self.hidden_comm_s)} of it hidden behind the "
                f"backward pass; speedup {self.speedup:.2f}x over one GPU (efficiency {100 * self.efficiency:.0f}%)")
        if self.images_per_s:
            text += f", {self.images_per_s:,.0f} images/s"
        return text + "."

    def __str__(self) -> str:
        return self.describe()


def predict_step(model, compute_s: float, path, n_gpus: int = 2, *, batch: Optional[int] = None,
                 device_s: Optional[float] = None, overheads: Optional[Overheads] = None,
                 backward_fraction: float = BACKWARD_FRACTION, optimizer_s: float = 0.0,
                 bucket_cap_mb: float = DDP_BUCKET_CAP_MB,
                 first_bucket_bytes: Optional[int] = DDP_FIRST_BUCKET_BYTES,
                 bytes_per_param: int = 4, readiness="flops", fit_ranks: int = 2,
                 profile=None, comm_sm_share: float = 0.0) -> StepPrediction:
    """Predict one data-parallel training step on ``n_gpus`` (weak scaling).

    * ``model``: a course model's name, a parameter count, or :class:`Layer` items.
    * ``compute_s``: the measured one-GPU step (forward, backward and optimizer) at the
      per-GPU ``batch`` (the batch only turns the result into images/s).
    * ``path``: the all-reduce path: an :class:`AlphaBeta` fitted to a measured sweep (on
      ``fit_ranks`` ranks) or a link of :mod:`ddlab.system.links` (see :func:`bucket_allreduce_time`).
    * ``device_s``: how long the GPU is busy in that step, when known (e.g. the step of a
      CUDA-graph run, where the host does no work per step). Then a step is the longer of
      the device's path (``device_s`` + exposed communication) and the host's path
      (``compute_s`` + the wrapper's ``overheads``): a host-bound step can hide
      communication in the GPU's idle time, and a device-bound one can hide the wrapper's
      host work. Without it the parts simply add up.
    * The gradients go out in :func:`gradient_buckets` (DDP's defaults); each bucket's
      all-reduce starts when its gradients are ready and the previous all-reduce is done (one
      communication stream); the optimizer waits for the last one. The backward pass is
      ``backward_fraction`` of the device step without the optimizer's ``optimizer_s``.
    * ``profile``: a :class:`ddlab.training.step_profile.StepProfile` measured for this model; its
      readiness of each layer, backward fraction and optimizer share of the step replace
      ``readiness``, ``backward_fraction`` and ``optimizer_s``.
    * ``comm_sm_share``: the share of the GPU's multiprocessors (SMs) the all-reduce kernels
      hold while they run (NCCL runs one thread block per channel, so channels / SMs). The
      backward work that overlaps an all-reduce runs that much slower: overlap hides
      communication, but not for free. 0: overlap costs nothing.
    """
    if not (math.isfinite(comm_sm_share) and 0 <= comm_sm_share < 1):
        raise ValueError(f"comm_sm_share is a share of the GPU between 0 and 1, got {comm_sm_share!r}")
    if profile is not None:
        readiness, backward_fraction = profile.ready, profile.backward_fraction
        optimizer_s = profile.optimizer_share * (compute_s if device_s is None else device_s)
    if not (math.isfinite(compute_s) and compute_s > 0):
        raise ValueError(f"the one-GPU step time must be a positive number of seconds, got {compute_s!r}")
    _check_n(n_gpus)
    if device_s is not None and not (math.isfinite(device_s) and device_s > 0):
        raise ValueError(f"device_s must be a positive number of seconds, got {device_s!r}")
    if not 0 < backward_fraction <= 1:
        raise ValueError(f"backward_fraction is a share between 0 and 1, got {backward_fraction!r}")
    dev = compute_s if device_s is None else device_s
    if not 0 <= optimizer_s < dev:
        raise ValueError(f"optimizer_s must be >= 0 and shorter than the step, got {optimizer_s!r}")
    if batch is not None and (int(batch) != batch or batch < 1):
        raise ValueError(f"batch must be a whole number >= 1, got {batch!r}")
    over = overheads or NO_OVERHEADS
    buckets = gradient_buckets(model, bucket_cap_mb, first_bucket_bytes, bytes_per_param, readiness)
    if n_gpus == 1:
        return StepPrediction(1, compute_s, 0.0, 0.0, 0.0, compute_s, buckets, "serial", batch)
    backward = backward_fraction * (dev - optimizer_s)
    comm_total, comm_free, now = 0.0, 0.0, 0.0      # times from the start of the backward pass
    done = [0.0]                                    # backward work done, in seconds of backward alone
    slow = 1.0 / (1.0 - comm_sm_share)              # time per unit of backward work beside an all-reduce

    def work_until(target: float) -> float:
        """Run the backward pass until ``target`` seconds of its work are done; the time then."""
        t = now
        while done[0] < target:
            if t < comm_free:                       # beside an all-reduce: slower
                dt = min(comm_free - t, (target - done[0]) * slow)
                t, done[0] = t + dt, done[0] + dt / slow
            else:
                t, done[0] = t + target - done[0], target
        return t

    for b in buckets:
        now = work_until(b.ready * backward)
        t = bucket_allreduce_time(b.nbytes, n_gpus, path, fit_ranks)
        comm_total += t
        comm_free = max(now, comm_free) + t
    now = work_until(backward)
    # what the step loses: the backward pass slowed beside the all-reduces, and the part of them after it
    exposed = max(now, comm_free) - backward
    overhead = over.total_s(len(buckets))
    if device_s is None:
        total, bound = compute_s + exposed + overhead, "serial"
        shown_exposed, shown_over = exposed, overhead
    else:
        device_path, host_path = dev + exposed, compute_s + overhead
        total = max(device_path, host_path, compute_s)
        bound = "device" if device_path >= host_path else "host"
        extra = total - compute_s
        shown_exposed = min(extra, max(0.0, device_path - compute_s))
        shown_over = extra - shown_exposed
    return StepPrediction(n_gpus, compute_s, comm_total, shown_exposed, shown_over, total, buckets, bound, batch)


# ----------------------------------------------------------------------------- recorded runs
# The recorded NCCL-path comparisons the model is checked against: (launcher label,
# launcher, variant). "-graph" runs capture the whole DDP step in a CUDA graph, so the host
# does no per-step work and their one-GPU step is the GPU's busy time.
RECORDED_RUNS = (("ddp", "ddp", None), ("ddp-graph", "ddp", "graph"), ("horovod", "horovod", None))
TOLERANCE = 0.10


@dataclass(frozen=True)
class RecordedPoint:
    """One recorded 2-GPU run and what the model needs to predict it: the one-GPU step of
    the same recording (``global batch / images/s``, the time behind its speedup column),
    the GPU's busy time when a CUDA-graph recording of the model has it, and the measured
    speedup (the recording's median over its repeats, with its min-max when recorded)."""
    launcher: str
    model: str
    path: str
    n_gpus: int
    batch: int
    compute_s: float
    device_s: Optional[float]
    host_work: bool          # False for a CUDA-graph run: no wrapper work on the host per step
    measured: float
    repeats: int = 1
    measured_min: Optional[float] = None     # the spread of the measured speedup over the repeats
    measured_max: Optional[float] = None


@dataclass
class RecordedSet:
    """Recorded points, the alpha-beta fit of each path's recorded all-reduce sweep, the
    (launcher, model) pairs with no recording, and the machine they came from.
    ``device_elsewhere``: {model: machine} for models whose GPU busy time per step came from
    a one-GPU CUDA-graph recording on another machine with the same GPU (the two-GPU
    machine's own graph run of that model is not recorded); ``device_check``: {model:
    ratio} of that machine's graph step to the two-GPU machine's, for the models recorded
    on both, which shows how well the substitution holds."""
    points: list
    fits: dict
    missing: list = field(default_factory=list)
    machine: str = ""
    device_elsewhere: dict = field(default_factory=dict)
    device_check: dict = field(default_factory=dict)
    profiles: dict = field(default_factory=dict)     # {model: StepProfile} recorded on a GPU
    channels: dict = field(default_factory=dict)     # {path: NCCL channels of its recorded sweep}


def recorded_points(models: Sequence[str] = None, sweeps: str = "h200x2") -> RecordedSet:
    """The recorded NCCL-path comparisons of every model (``ddlab.training.recording``) and the
    recorded all-reduce sweeps ``reference/allreduce/<sweeps>.json``, fitted per path."""
    from ddlab.measure import collectives
    from ddlab.training import models as _models, recording, step_profile
    from ddlab.base.reference import ReferenceMissing
    names = tuple(models) if models is not None else _models.MODELS
    for m in names:
        _models.check(m)
    sweeps_ = collectives.load_recorded(sweeps)
    fits = {p: fit_sweep(s) for p, s in sweeps_.items()}
    channels = {p: c for p, c in ((p, nccl_channels(s)) for p, s in sweeps_.items()) if c}
    points, missing, machine, gpu_model = [], [], "", ""

    loaded = {}   # each recording is read once: the CUDA-graph ones serve every launcher

    def load(launcher, model, variant):
        key = (launcher, model, variant)
        if key not in loaded:
            try:
                loaded[key] = recording.load_recorded("nccl-paths", "torch", launcher, model, variant)
            except ReferenceMissing:
                loaded[key] = None
        return loaded[key]

    def one_gpu_row(res):
        base = [r for r in (res.rows if res else []) if r.get("workers") == 1 and not r.get("error")]
        return base[0] if base else None

    def step_of(row):
        return row["global_batch"] / row["images_per_s"] if row else None

    graph_loaded = {}   # the one-GPU graph recordings, each read once

    def one_gpu_graph(model):
        """(one-GPU row, machine) of the one-GPU CUDA-graph recording of ``model`` (scaling, "graph")."""
        if model not in graph_loaded:
            try:
                res = recording.load_recorded("scaling", "torch", "ddp", model, "graph")
                graph_loaded[model] = (one_gpu_row(res), _machine_text(res.provenance))
            except ReferenceMissing:
                graph_loaded[model] = (None, "")
        return graph_loaded[model]

    device_elsewhere, device_check = {}, {}

    def device_step(model, batch):
        """The GPU's busy time per step of ``model`` at ``batch``: the two-GPU machine's own
        one-GPU graph run, else a one-GPU graph recording of the same batch (same GPU model)."""
        own = one_gpu_row(load("ddp", model, "graph"))
        other, where = one_gpu_graph(model)
        if own is not None:
            if other is not None and where:
                device_check[model] = step_of(other) / step_of(own)
            return step_of(own)
        if other is None or other.get("global_batch") != batch:
            return None
        device_elsewhere[model] = where
        return step_of(other)

    for label, launcher, variant in RECORDED_RUNS:
        for model in names:
            res = load(launcher, model, variant)
            base = one_gpu_row(res)
            if base is None:
                missing.append((label, model))
                continue
            machine = machine or _machine_text(res.provenance)
            gpu_model = gpu_model or (res.provenance or {}).get("gpu_model", "")
            one = step_of(base)
            device = one if variant == "graph" else device_step(model, base["global_batch"])
            for r in res.rows:
                if r.get("workers", 1) < 2 or r.get("error") or r.get("speedup") is None or r.get("path") not in fits:
                    continue
                points.append(RecordedPoint(label, model, r["path"], r["workers"], base["global_batch"], one,
                                            device, variant != "graph", float(r["speedup"]),
                                            int(r.get("repeats", 1)), r.get("speedup_min"), r.get("speedup_max")))
    profiles = {}
    for model in names:
        try:
            prof = step_profile.load_recorded(model)
        except ReferenceMissing:
            continue
        if prof.device != "cpu" and (not gpu_model or prof.device == gpu_model):   # profiled on that GPU
            profiles[model] = prof
    return RecordedSet(points, fits, missing, machine, device_elsewhere, device_check, profiles, channels)


def nccl_channels(sweep) -> Optional[int]:
    """The channels NCCL ran a sweep's collective on (its INFO log says so at start-up), or
    None when the sweep kept no log or the log does not say."""
    log = sweep.nccl_log()
    return log.coll_channels if log is not None else None


def _machine_text(prov: dict) -> str:
    if not prov:
        return ""
    bits = [f"{prov.get('gpu_count', '?')}x {prov.get('gpu_model', '?')}"]
    if prov.get("driver"):
        bits.append(f"driver {prov['driver']}")
    if prov.get("nccl"):
        bits.append(f"NCCL {prov['nccl']}")
    return ", ".join(bits)


def predict_point(p: RecordedPoint, fits: dict, overheads: Optional[Overheads] = None, profiles=None,
                  channels=None, **kwargs) -> StepPrediction:
    """:func:`predict_step` for one recorded run, with the fit of its path and, when
    ``profiles`` ({model: StepProfile}) has one for its model, that measured profile (with
    ``channels``, {path: NCCL channels}, the all-reduce's share of the GPU)."""
    if p.path not in fits:
        raise ValueError(f"no all-reduce fit for path {p.path!r}; have {', '.join(fits) or 'none'}")
    kwargs = dict(measured_inputs(p.model, p.batch, profiles or {}, (channels or {}).get(p.path)), **kwargs)
    return predict_step(p.model, p.compute_s, fits[p.path], p.n_gpus, batch=p.batch, device_s=p.device_s,
                        overheads=overheads if p.host_work else None, **kwargs)


def measured_inputs(model: str, batch: int, profiles: dict, channels: Optional[int] = None,
                    device: Optional[str] = None) -> dict:
    """The :func:`predict_step` arguments that a recorded step profile of ``model``
    (``profiles``: {model: StepProfile}) supplies: the profile itself when it was measured at
    ``batch``, and with the number of NCCL ``channels`` of the path (one thread block each)
    the share of the GPU's SMs the all-reduce holds. ``device``: what the predicted run runs
    on ("cpu" or a GPU's name, None: the profile's own); a profile of another device gives
    nothing."""
    prof = profiles.get(model)
    if prof is None or (device is not None and prof.device != device):
        return {}
    out = {"profile": prof} if prof.batch == batch else {}
    if channels and prof.sm_count:
        out["comm_sm_share"] = min(channels / prof.sm_count, 0.9)
    return out


def _with_profiles(rec: "RecordedSet", kwargs: dict) -> dict:
    """The recorded step profiles and channels, unless the caller chose the readiness or the
    profiles."""
    if "readiness" in kwargs or "profiles" in kwargs:
        return kwargs
    return dict(kwargs, profiles=rec.profiles, channels=rec.channels)


def _rel_errors(points, fits, over, **kwargs):
    return [predict_point(p, fits, over, **kwargs).speedup / p.measured - 1 for p in points]


def fit_overheads(points: Sequence[RecordedPoint], fits: dict, launcher: str = "", **kwargs) -> Overheads:
    """The wrapper's fixed costs (per step, per bucket) that best fit the recorded speedups of
    ``points`` (least squares of the relative error; both >= 0). Only points where the host
    does per-step work count (not CUDA-graph runs). Two free numbers for the whole launcher,
    never one per point. When every point has the same number of buckets the two cannot be
    told apart: then only the per-step cost is fitted and ``note`` says so."""
    pts = [p for p in points if p.host_work and (not launcher or p.launcher == launcher)]
    if not pts:
        raise ValueError(f"no recorded runs with host work per step{' for ' + launcher if launcher else ''} to fit")

    def cost(step, bucket):
        return sum(e * e for e in _rel_errors(pts, fits, Overheads(step, bucket), **kwargs))

    grid = np.concatenate([[0.0], np.geomspace(1e-6, 0.1, 121)])
    n_buckets = {len(gradient_buckets(p.model, **_bucket_kwargs(kwargs))) for p in pts}
    step = min(grid, key=lambda c: cost(c, 0.0))
    bucket, note = 0.0, ""
    if len(n_buckets) > 1:
        step, bucket = min(((a, b) for a in grid[::4] for b in grid[::4]), key=lambda ab: cost(*ab))
    else:
        note = (f"every run has {n_buckets.pop()} bucket(s), so a cost per bucket cannot be told apart from "
                "one per step: only the per-step cost is fitted")
    # refine around the grid's best (a few golden-section-like passes on each)
    for _ in range(2):
        step = _refine(lambda c: cost(c, bucket), step)
        if len(n_buckets) > 1:
            bucket = _refine(lambda c: cost(step, c), bucket)
    return Overheads(float(step), float(bucket), launcher, len(pts), note)


def _bucket_kwargs(kwargs):
    keys = ("bucket_cap_mb", "first_bucket_bytes", "bytes_per_param", "readiness")
    return {k: kwargs[k] for k in keys if k in kwargs}


def _refine(f, x0: float) -> float:
    lo, hi = max(0.0, x0 * 0.8 - 1e-6), x0 * 1.25 + 1e-6
    xs = np.linspace(lo, hi, 41)
    return float(min(xs, key=f))


def fit_all_overheads(rec: RecordedSet, **kwargs) -> dict:
    """{launcher: Overheads} fitted per launcher on all its recorded runs (in-sample), with
    the recorded step profiles unless ``kwargs`` choose the readiness or the profiles."""
    kwargs = _with_profiles(rec, kwargs)
    out = {}
    for label, *_ in RECORDED_RUNS:
        pts = [p for p in rec.points if p.launcher == label and p.host_work]
        if pts:
            out[label] = fit_overheads(pts, rec.fits, label, **kwargs)
    return out


# ----------------------------------------------------------------------------- validation
def _validation_table(rows, title, notes):
    from ddlab.base.tables import Table
    cols = [("launcher", "text"), ("model", "text"), ("path", "text"),
            ("predicted", "ratio", "predicted speedup"), ("measured", "ratio", "measured speedup"),
            ("error_pct", lambda v: f"{v:+.1f}%", "error"), ("within", "text", f"within ±{100 * TOLERANCE:.0f}%"),
            ("bound", "text", "decided by")]
    return Table(cols, rows, title=title, notes=notes)


def _input_notes(rec: RecordedSet, kwargs: dict) -> list:
    """Where the model's inputs other than the recorded runs came from."""
    notes = []
    if rec.device_elsewhere:
        where = sorted(set(rec.device_elsewhere.values()))
        text = (f"The GPU's busy time per step of {', '.join(rec.device_elsewhere)} comes from one-GPU CUDA-graph "
                f"runs on {'; '.join(where)} (the same GPU model), because the two-GPU machine has no graph run of "
                "them recorded.")
        if rec.device_check:
            text += (" For the models both machines recorded, that machine's graph step differs from the two-GPU "
                     "machine's by " + ", ".join(f"{100 * (r - 1):+.1f}% ({m})" for m, r in rec.device_check.items())
                     + ".")
        notes.append(text)
    profiles = kwargs.get("profiles") or {}
    if profiles:
        devices = sorted({p.device for p in profiles.values()})
        others = sorted({p.model for p in rec.points} - set(profiles))
        notes.append(f"When each layer's gradient is ready, and the shares of the backward pass and the optimizer, are "
                     f"measured ({', '.join(profiles)}: ddlab.training.step_profile on {', '.join(devices)})"
                     + (f"; for {', '.join(others)} they are counted by FLOPs." if others else "."))
    elif "readiness" not in kwargs or isinstance(kwargs.get("readiness"), str):
        notes.append(f"Each layer's gradient is taken to be ready in proportion to its "
                     f"{kwargs.get('readiness', 'flops') if kwargs.get('readiness') == 'params' else 'FLOPs'} "
                     "(no measured step profile).")
    return notes


def validate(recorded: Optional[RecordedSet] = None, overheads: Optional[dict] = None, **kwargs):
    """Predicted against measured 2-GPU speedup for every recorded model x path x launcher,
    as a :class:`ddlab.base.tables.Table` (launcher, model, path, predicted, measured, error in
    %, within the ±10% band, what decided the step). ``overheads`` ({launcher:
    :class:`Overheads`}) default to :func:`fit_all_overheads` on the same runs: then the
    comparison is in-sample for the wrapper's cost (see :func:`holdout` for an
    out-of-sample check). Models without a recording are named in the notes."""
    rec = recorded or recorded_points()
    kwargs = _with_profiles(rec, kwargs)
    over = fit_all_overheads(rec, **kwargs) if overheads is None else overheads
    rows = []
    for p in rec.points:
        pred = predict_point(p, rec.fits, over.get(p.launcher), **kwargs)
        err = pred.speedup / p.measured - 1
        rows.append({"launcher": p.launcher, "model": p.model, "path": p.path, "predicted": pred.speedup,
                     "measured": p.measured, "error_pct": 100 * err,
                     "within": "yes" if abs(err) <= TOLERANCE else "no", "bound": pred.bound})
    inside = sum(r["within"] == "yes" for r in rows)
    notes = [f"{inside} of {len(rows)} within ±{100 * TOLERANCE:.0f}%."]
    if over:
        notes.append("Wrapper cost: " + "; ".join(o.describe() + (f" ({o.note})" if o.note else "")
                                                  for o in over.values()) + "."
                     + (" Fitted to these same runs (two numbers per launcher at most): in-sample for that term; "
                        "everything else comes from the one-GPU runs, the step profiles and the all-reduce sweeps."
                        if overheads is None else ""))
    if rec.missing:
        notes.append("Not recorded (no prediction checked): "
                     + ", ".join(f"{m} ({la})" for la, m in rec.missing) + ".")
    reps = sorted({p.repeats for p in rec.points})
    if reps == [1]:
        notes.append("Each recorded point is a single run: its spread between repeats is unknown.")
    notes += _input_notes(rec, kwargs)
    return _validation_table(rows, "Predicted vs measured 2-GPU speedup" + (f" ({rec.machine})" if rec.machine else ""),
                             notes)


def holdout(recorded: Optional[RecordedSet] = None, **kwargs):
    """An out-of-sample check of the wrapper's cost: for each launcher and each recorded
    model, fit the cost on the *other* models' runs and predict this model's. Returns the
    same table as :func:`validate` (rows whose launcher has nothing to fit on are left out)."""
    rec = recorded or recorded_points()
    kwargs = _with_profiles(rec, kwargs)
    rows = []
    for label, *_ in RECORDED_RUNS:
        mine = [p for p in rec.points if p.launcher == label]
        for model in sorted({p.model for p in mine}):
            train = [p for p in mine if p.model != model and p.host_work]
            test = [p for p in mine if p.model == model]
            if test and test[0].host_work and not train:
                continue
            over = fit_overheads(train, rec.fits, label, **kwargs) if train else None
            for p in test:
                pred = predict_point(p, rec.fits, over, **kwargs)
                err = pred.speedup / p.measured - 1
                rows.append({"launcher": label, "model": p.model, "path": p.path, "predicted": pred.speedup,
                             "measured": p.measured, "error_pct": 100 * err,
                             "within": "yes" if abs(err) <= TOLERANCE else "no", "bound": pred.bound})
    inside = sum(r["within"] == "yes" for r in rows)
    return _validation_table(rows, "Held-out check: the wrapper's cost fitted on the other model, predicting this one",
                             f"{inside} of {len(rows)} within ±{100 * TOLERANCE:.0f}%.")


def plot_validation(table=None, ax=None):
    """Predicted against measured speedup (log-log), one marker per run, coloured by
    launcher, with the line predicted = measured and the ±10% band. ``table``: what
    :func:`validate` returned (default: validate()). Returns the axes."""
    import matplotlib.pyplot as plt
    t = table if table is not None else validate()
    rows = t.to_dict()["rows"] if hasattr(t, "to_dict") else list(t)
    if not rows:
        raise ValueError("nothing to plot: the table has no rows")
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 6))
    vals = [r["measured"] for r in rows] + [r["predicted"] for r in rows]
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
    ax.legend(handles=handles, fontsize="small", loc="upper left")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured speedup (2 GPUs over 1)")
    ax.set_ylabel("predicted speedup")
    ax.set_title("Step model: predicted vs measured")
    ax.grid(True, which="both", alpha=0.3)
    return ax
