"""Where one training step's time goes on one device: the forward pass, the backward pass
with the moment each layer's gradient is ready, and the optimizer step.

The step model (:mod:`ddlab.cost.step_model`) needs this to know how much of a bucket's
all-reduce can hide behind the rest of the backward pass. Counting FLOPs gets it wrong for
a model whose layers run at very different speeds: in the wide model the 8192-wide dense
layer holds nearly all of the gradient (99.87% of its parameters) and most of the FLOPs, but its large matrix products run
far faster per FLOP than the small convolutions before it, so its gradient is ready early
in the backward pass, not near its end. :func:`measure` times it instead:

* on a GPU with CUDA events, one recorded when each parameter's gradient has been
  accumulated (``register_post_accumulate_grad_hook``, the moment DDP's own hook launches a
  bucket), and the whole step queued behind a GPU sleep so that the host's launch speed
  does not show up in the GPU's times;
* on a CPU with the host clock (the work runs as it is called there).

On a GPU it also keeps the number of multiprocessors (SMs): an all-reduce that overlaps the
backward pass holds some of them (NCCL runs one thread block per channel), and the cost
model slows the overlapped work by that share.

:func:`record` writes the profiles of the course's models to ``reference/profiles/``;
:func:`load_recorded` reads one.
"""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Optional, Sequence

REFERENCE_KIND = "profiles"
SLEEP_S = 0.05          # GPU: the sleep queued before each profiled step (longer than its host work)


@dataclass(frozen=True)
class StepProfile:
    """Median times of one step of ``model`` at ``batch`` on ``device`` (seconds) and, per
    layer with parameters (the names of :func:`ddlab.training.models.model_layers`), the share
    of the backward pass done when all its gradients are ready (0..1)."""
    model: str
    batch: int
    device: str
    precision: str
    forward_s: float
    backward_s: float
    optimizer_s: float
    ready: dict
    repeats: int
    provenance: dict = field(default_factory=dict)
    sm_count: Optional[int] = None     # the GPU's multiprocessors (None on a CPU)

    def __post_init__(self):
        for name in ("forward_s", "backward_s", "optimizer_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and v >= 0):
                raise ValueError(f"{name} must be a number of seconds >= 0, got {v!r}")
        if not self.backward_s > 0:
            raise ValueError("the backward pass must take some time")
        bad = {k: v for k, v in self.ready.items() if not (isinstance(v, (int, float)) and 0 <= v <= 1)}
        if not self.ready or bad:
            raise ValueError(f"ready needs a share between 0 and 1 for each layer, got {bad or self.ready!r}")

    @property
    def step_s(self) -> float:
        return self.forward_s + self.backward_s + self.optimizer_s

    @property
    def backward_fraction(self) -> float:
        """The backward pass's share of forward + backward (what the cost model calls
        ``backward_fraction``)."""
        return self.backward_s / (self.forward_s + self.backward_s)

    @property
    def optimizer_share(self) -> float:
        return self.optimizer_s / self.step_s

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "StepProfile":
        try:
            return cls(**{k: d[k] for k in ("model", "batch", "device", "precision", "forward_s", "backward_s",
                                             "optimizer_s", "ready", "repeats")}, provenance=d.get("provenance", {}),
                       sm_count=d.get("sm_count"))
        except KeyError as exc:
            raise ValueError(f"a step profile needs the field {exc.args[0]!r}") from None

    def table(self):
        """The profile as a :class:`ddlab.base.tables.Table`: one row per layer, in the order its
        gradient becomes ready."""
        from ddlab.base.tables import Table
        rows = [{"layer": k, "ready": v, "at": v * self.backward_s} for k, v in sorted(self.ready.items(),
                                                                                       key=lambda kv: kv[1])]
        from ddlab.base.units import format_time
        notes = (f"{self.model}, batch {self.batch}, {self.precision} on {self.device}: forward "
                 f"{format_time(self.forward_s)}, backward {format_time(self.backward_s)}, optimizer "
                 f"{format_time(self.optimizer_s)}" + (f"; {self.sm_count} SMs" if self.sm_count else "")
                 + f" (medians of {self.repeats}).")
        return Table([("layer", "text"), ("ready", lambda v: f"{100 * v:.0f}%", "gradient ready after"),
                      ("at", "time", "time into the backward pass")], rows,
                     title=f"When each layer's gradient is ready: {self.model}", notes=notes)


def _layer_of_parameter(model, name: str) -> dict:
    """{parameter: layer name} with the layers named as :func:`ddlab.training.models.model_layers`."""
    from ddlab.training.models import model_layers
    names = [layer.name for layer in model_layers(name)]
    holders = [m for m in model.modules() if not list(m.children()) and list(m.parameters(recurse=False))]
    if len(holders) != len(names):
        raise ValueError(f"{name}: {len(holders)} layers with parameters, the cost model has {len(names)}")
    return {p: n for m, n in zip(holders, names) for p in m.parameters(recurse=False)}


def measure(model_name: str, batch: int = 512, device: str = "auto", precision: Optional[str] = None,
            warmup: int = 5, repeats: int = 20, seed: int = 0) -> StepProfile:
    """Profile ``repeats`` training steps (forward, cross-entropy, backward, Adam) of one of
    the course's models on random images; the medians are returned. ``precision``: "bf16"
    (autocast, the GPU default of the training script) or "fp32" (the CPU default)."""
    import torch
    from ddlab.training import models_torch
    if int(batch) != batch or batch < 1:
        raise ValueError(f"batch must be a whole number >= 1, got {batch!r}")
    if repeats < 1 or warmup < 0:
        raise ValueError("repeats must be >= 1 and warmup >= 0")
    dev = torch.device("cuda" if device == "auto" and torch.cuda.is_available() else
                       ("cpu" if device == "auto" else device))
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' asked for, but torch sees no GPU here")
    precision = precision or ("bf16" if dev.type == "cuda" else "fp32")
    if precision not in ("bf16", "fp32"):
        raise ValueError(f"precision is bf16 or fp32, got {precision!r}")
    torch.manual_seed(seed)
    model = models_torch.build(model_name).to(dev)
    layer_of = _layer_of_parameter(model, model_name)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=dev.type == "cuda")
    x = torch.randn(batch, 1, 28, 28, device=dev)
    y = torch.randint(0, 10, (batch,), device=dev)
    cuda = dev.type == "cuda"

    def mark():
        if cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        import time
        return time.perf_counter()

    def seconds(a, b):
        return a.elapsed_time(b) / 1e3 if cuda else b - a

    marks: dict = {}
    hooks = [p.register_post_accumulate_grad_hook(lambda p: marks.__setitem__(p, mark()))
             for p in model.parameters()]
    autocast = torch.autocast(dev.type, dtype=torch.bfloat16, enabled=precision == "bf16")
    samples = []
    try:
        for i in range(warmup + repeats):
            opt.zero_grad(set_to_none=True)
            marks.clear()
            if cuda:
                torch.cuda._sleep(int(SLEEP_S * 1.5e9))    # the GPU waits; the host queues the whole step
            t0 = mark()
            with autocast:
                loss = torch.nn.functional.cross_entropy(model(x), y)
            t1 = mark()
            loss.backward()
            t2 = mark()
            opt.step()
            t3 = mark()
            if cuda:
                torch.cuda.synchronize()
            if i < warmup:
                continue
            bwd = seconds(t1, t2)
            ready: dict = {}
            for p, m in marks.items():
                layer = layer_of[p]
                ready[layer] = max(ready.get(layer, 0.0), min(1.0, max(0.0, seconds(t1, m) / bwd)))
            samples.append((seconds(t0, t1), bwd, seconds(t2, t3), ready))
    finally:
        for h in hooks:
            h.remove()
    med = statistics.median
    layers = samples[0][3].keys()
    from ddlab.system.provenance import run_provenance
    return StepProfile(model_name, int(batch), torch.cuda.get_device_name(dev) if cuda else "cpu", precision,
                       med(s[0] for s in samples), med(s[1] for s in samples), med(s[2] for s in samples),
                       {k: med(s[3][k] for s in samples) for k in layers}, repeats,
                       run_provenance(f"ddlab.training.step_profile.measure({model_name!r}, batch={batch}, "
                                      f"precision={precision!r}, repeats={repeats})"),
                       torch.cuda.get_device_properties(dev).multi_processor_count if cuda else None)


def reference_name(model: str, batch: int = 512) -> str:
    return f"step-{model}" + ("" if batch == 512 else f"-b{batch}")


def record(out_dir: str, models: Sequence[str] = None, batch: int = 512, **kwargs) -> dict:
    """Measure and write ``<out_dir>/step-<model>.json`` for each model (whole, checked against
    the ``profiles`` schema); {model: profile}."""
    import os
    from ddlab.base import files
    from ddlab.training.models import MODELS
    done = {}
    for m in models or MODELS:
        prof = measure(m, batch, **kwargs)
        files.write_json(os.path.join(out_dir, reference_name(m, batch) + ".json"), prof.to_dict(),
                         schema=REFERENCE_KIND, what="step profile")
        print(prof.table(), flush=True)
        done[m] = prof
    return done


def load_recorded(model: str, batch: int = 512) -> StepProfile:
    """The recorded profile (raises :class:`ddlab.base.reference.ReferenceMissing` if none)."""
    from ddlab.base import reference
    return StepProfile.from_dict(reference.load(REFERENCE_KIND, reference_name(model, batch)))
