"""The input pipeline over the host link: the same training step fed its batches four ways.

The course's training script keeps Fashion-MNIST on the GPU, so no step waits for the host. A
real input pipeline hands the GPU batches from host memory, and how they cross the host link
(:mod:`ddlab.measure.host_link`) shows in every step:

* ``on the GPU`` - the batches are already on the device (the script's way: the baseline);
* ``pageable`` - each batch sits in ordinary (pageable) host memory; ``.to(device)`` makes CUDA
  copy it into a pinned staging buffer first, then across the link, while the step waits;
* ``pinned`` - the batch is in pinned (page-locked) memory, so the copy engine reads it directly
  at the link's rate, but ``.to(device)`` still waits for it;
* ``pinned + non_blocking`` - pinned, copied with ``.to(device, non_blocking=True)`` (what
  ``DataLoader(pin_memory=True)`` is for): the copy is queued on the stream and the host does not
  wait for it, so the CPU goes on launching the step's kernels while the copy engine works.

:func:`measure` times them in one process on one GPU and returns an
:class:`~ddlab.training.results.ExperimentResult` ("input-pipeline"); notebook 6 asks the learner
to predict the order first (:func:`ddlab.course.checks.check_input_pipeline`). On a CPU only the
first two variants exist (pinned memory is a CUDA thing), and the result says so.
"""
from __future__ import annotations

import statistics
import time
from typing import Optional, Sequence

from ddlab.training.results import ExperimentResult
from ddlab.training.runs import ExperimentError

VARIANTS = ("on the GPU", "pageable", "pinned", "pinned + non_blocking")
BATCHES_KEPT = 8         # distinct batches cycled through (enough that no copy is cached)


def _batches(torch, model_name: str, batch: int, data_dir: Optional[str]):
    from ddlab.training import data
    from ddlab.training.data_torch import normalise
    x, y, _, _ = data.load_fashion_mnist(data_dir)
    n = batch * BATCHES_KEPT
    images = normalise(torch.tensor(x[:n]), torch.contiguous_format)
    return images, torch.from_numpy(y[:n].astype("int64"))


def _time_variant(torch, variant: str, net, opt, images, labels, batch: int, steps: int, warmup: int, dev) -> float:
    """Seconds of ``steps`` timed training steps (after ``warmup``) fed the ``variant`` way."""
    import torch.nn.functional as F
    cuda = dev.type == "cuda"
    if variant == "on the GPU":
        src_x, src_y = images.to(dev), labels.to(dev)
    elif variant == "pageable":
        src_x, src_y = images, labels
    else:
        src_x, src_y = images.pin_memory(), labels.pin_memory()
    non_blocking = variant == "pinned + non_blocking"

    def fetch(i):
        s = (i % BATCHES_KEPT) * batch
        bx, by = src_x[s:s + batch], src_y[s:s + batch]
        return bx.to(dev, non_blocking=non_blocking), by.to(dev, non_blocking=non_blocking)

    def step(bx, by):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(net(bx), by)
        loss.backward()
        opt.step()

    t0 = None
    for i in range(warmup + steps):
        if i == warmup:
            if cuda:
                torch.cuda.synchronize(dev)
            t0 = time.perf_counter()
        step(*fetch(i))
    if cuda:
        torch.cuda.synchronize(dev)
    return time.perf_counter() - t0


def measure(model: str = "mlp-small", batch: int = 512, steps: int = 300, warmup: int = 20,
            variants: Sequence[str] = VARIANTS, device: str = "cuda", data_dir: Optional[str] = None,
            repeats: int = 3) -> ExperimentResult:
    """Images/s of the same training step (``model``, SGD, fp32) fed its batches each of the
    ``variants`` ways, in one process on ``device`` ("cuda": GPU 0; "cpu": the code path only).
    Raises :class:`~ddlab.training.runs.ExperimentError` with one line when there is no such device."""
    import torch
    from ddlab.system.provenance import run_provenance
    from ddlab.training import models_torch
    for v in variants:
        if v not in VARIANTS:
            raise ExperimentError(f"unknown variant {v!r}; choose from {', '.join(VARIANTS)}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ExperimentError("the input pipeline over the host link needs a GPU, and PyTorch sees none")
    dev = torch.device(device)
    notes = [f"one process, the model's step in fp32 with SGD; images/s over the timed steps, the median of "
             f"{repeats} runs each, the variants' runs interleaved"]
    if dev.type != "cuda":
        left = [v for v in variants if v.startswith("pinned")]
        variants = [v for v in variants if not v.startswith("pinned")]
        if left:
            notes.append(f"CPU: {', '.join(left)} left out (pinned memory needs CUDA); no host link is crossed")
    torch.manual_seed(0)
    images, labels = _batches(torch, model, batch, data_dir)
    nets = {}
    for v in variants:
        net = models_torch.build(model).to(dev)
        nets[v] = (net, torch.optim.SGD(net.parameters(), lr=0.01))
    secs = {v: [] for v in variants}
    for _ in range(repeats):            # the variants interleaved, so drift hits them alike
        for v in variants:
            secs[v].append(_time_variant(torch, v, *nets[v], images, labels, batch, steps, warmup, dev))
    rows = []
    for v in variants:
        med = statistics.median(secs[v])
        rows.append({"variant": v, "workers": 1, "images_per_s": steps * batch / med,
                     "images_per_s_min": steps * batch / max(secs[v]), "images_per_s_max": steps * batch / min(secs[v]),
                     "step_ms_median": 1000 * med / steps, "batch_bytes": batch * 28 * 28 * 4,
                     "device": dev.type, "precision": "fp32", "repeats": repeats})
    base = next((r["images_per_s"] for r in rows if r["variant"] == "on the GPU"), None)
    for r in rows:
        r["speedup"] = r["images_per_s"] / base if base else None
    cfg = {"framework": "torch", "launcher": "none", "model": model, "batch_size": batch, "steps": steps, "repeats": repeats,
           "warmup_steps": warmup, "device": dev.type, "precision": "fp32", "variants": list(variants)}
    return ExperimentResult("input-pipeline", rows, "live", run_provenance(
        f"ddlab.training.input_pipeline.measure(model={model!r}, batch={batch}, device={device!r})"), notes, cfg)
