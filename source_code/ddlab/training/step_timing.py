"""One training step on one device, timed as the training loop sees it: forward, loss,
backward and the optimizer (Adam, the training script's default), from the host's clock
with the device synchronised, so launch costs count as they do in a run.

:func:`measure` times a course model (:mod:`ddlab.training.models_torch`) or a plain MLP
given by its layer widths (:func:`build_mlp`) at one batch: ``repeats`` timed runs of
``steps`` steps each after a warm-up, on random inputs of the model's shape (a step's time
does not depend on the values). ``ddlab predict --measure`` (:mod:`ddlab.cost.predict`)
takes its one-device step from here. Where the time goes inside a step (when each layer's
gradient is ready) is :mod:`ddlab.training.step_profile`'s job.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Optional, Sequence, Union


@dataclass(frozen=True)
class StepTiming:
    """The median step time of ``repeats`` timed runs (each the mean over its steps), with
    the fastest and slowest run, in seconds."""
    model: str
    batch: int
    device: str            # "cpu" or the GPU's name
    precision: str
    seconds: float
    min_s: float
    max_s: float
    steps: int
    repeats: int

    def describe(self) -> str:
        from ddlab.base.units import format_time
        return (f"{self.model} at batch {self.batch} on {self.device} ({self.precision}): "
                f"{format_time(self.seconds)} per step, median of {self.repeats} runs of {self.steps} steps "
                f"(fastest {format_time(self.min_s)}, slowest {format_time(self.max_s)})")


def check_widths(widths: Sequence[int]) -> tuple:
    """The widths as a tuple of whole numbers >= 1, at least two (inputs and outputs)."""
    out = tuple(widths)
    if len(out) < 2 or not all(isinstance(w, int) and not isinstance(w, bool) and w >= 1 for w in out):
        raise ValueError(f"MLP widths are whole numbers >= 1, the inputs first and the outputs last (at least two), "
                         f"got {list(out)!r}")
    return out


def build_mlp(widths: Sequence[int]):
    """``torch.nn.Sequential`` of Linear layers with ReLU between them: ``widths[0]`` inputs,
    ``widths[-1]`` outputs."""
    from torch import nn
    w = check_widths(widths)
    layers: list = []
    for i, (a, b) in enumerate(zip(w, w[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(w) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def measure(model: Union[str, Sequence[int]], batch: int, device: str = "auto", precision: Optional[str] = None,
            steps: int = 20, warmup: int = 5, repeats: int = 3, seed: int = 0) -> StepTiming:
    """Time one training step of ``model`` (a course model's name, or MLP widths) at
    ``batch`` on ``device`` ("auto": the first GPU torch sees, else the CPU). ``precision``:
    "bf16" (autocast, the GPU default of the training script) or "fp32" (the CPU default)."""
    import torch
    from ddlab.training import models_torch
    if isinstance(batch, bool) or int(batch) != batch or batch < 1:
        raise ValueError(f"batch must be a whole number >= 1, got {batch!r}")
    if steps < 1 or warmup < 0 or repeats < 1:
        raise ValueError("steps and repeats must be >= 1 and warmup >= 0")
    dev = torch.device("cuda" if device == "auto" and torch.cuda.is_available() else
                       ("cpu" if device == "auto" else device))
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' asked for, but torch sees no GPU here")
    precision = precision or ("bf16" if dev.type == "cuda" else "fp32")
    if precision not in ("bf16", "fp32"):
        raise ValueError(f"precision is bf16 or fp32, got {precision!r}")
    torch.manual_seed(seed)
    batch = int(batch)
    if isinstance(model, str):
        net, label = models_torch.build(model).to(dev), model
        x = torch.randn(batch, *models_torch.IMAGE_SHAPE, device=dev)
        y = torch.randint(0, models_torch.NUM_CLASSES, (batch,), device=dev)
        loss_of = torch.nn.functional.cross_entropy
    else:
        widths = check_widths(model)
        net, label = build_mlp(widths).to(dev), "mlp " + "-".join(map(str, widths))
        x = torch.randn(batch, widths[0], device=dev)
        if widths[-1] > 1:
            y = torch.randint(0, widths[-1], (batch,), device=dev)
            loss_of = torch.nn.functional.cross_entropy
        else:
            y = torch.randn(batch, 1, device=dev)
            loss_of = torch.nn.functional.mse_loss
    opt = torch.optim.Adam(net.parameters(), lr=1e-3, fused=dev.type == "cuda")
    autocast = torch.autocast(dev.type, dtype=torch.bfloat16, enabled=precision == "bf16")
    cuda = dev.type == "cuda"

    def step():
        opt.zero_grad(set_to_none=True)
        with autocast:
            loss = loss_of(net(x), y)
        loss.backward()
        opt.step()

    def sync():
        if cuda:
            torch.cuda.synchronize(dev)

    for _ in range(warmup):
        step()
    runs = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        runs.append((time.perf_counter() - t0) / steps)
    return StepTiming(label, batch, torch.cuda.get_device_name(dev) if cuda else "cpu", precision,
                      statistics.median(runs), min(runs), max(runs), steps, repeats)
