"""The data-parallel wrapper's own cost, timed in one process on one device: the same training
step (forward, loss, backward, Adam) of a plain model, of the model under PyTorch DDP with world
size 1, and under Horovod with size 1, on the same inputs.

With one worker nothing crosses a link, so what the wrapper adds to a step is its own fixed
cost: DDP's autograd hooks, bucketing the gradients and launching an all-reduce (NCCL on a GPU,
gloo on a CPU) on one rank; Horovod's hooks, its background thread and its collective call. One
process, alternating the variants run by run, keeps everything else equal: the same GPU clocks,
the same inputs, no process start between them (separate launches differ by more than the cost
being measured). :func:`ddlab.training.one_gpu.wrapper_cost` turns the timings into a result.

Horovod's optimizer registers its gradient hooks only when its size is above 1, or when
``HOROVOD_ELASTIC=1`` (an elastic job may shrink to one worker; horovod/torch/optimizer.py in
0.28.1). So "horovod" times a plain step, and "horovod-hooks" builds the same optimizer with that
variable set for the constructor only (it is read there, and Horovod is already initialised): every
gradient then goes through Horovod as on two workers (its hook, its background thread's next cycle,
a one-rank all-reduce, ``synchronize``), with no link to cross.

The process group is made in this process with a file store (world size 1, no port to find)
and destroyed afterwards; Horovod is initialised only when asked for.
"""
from __future__ import annotations

import os
import statistics
import tempfile
import time
from typing import Sequence

WRAPPERS = ("plain", "ddp", "horovod", "horovod-hooks")


def horovod_optimizer(hvd, opt, named_parameters, hooks: bool):
    """``hvd.DistributedOptimizer(opt, named_parameters)``; with ``hooks`` its gradient hooks are
    registered also at size 1 (``HOROVOD_ELASTIC=1`` during the constructor, then put back as it was)."""
    if not hooks:
        return hvd.DistributedOptimizer(opt, named_parameters=named_parameters)
    before = os.environ.get("HOROVOD_ELASTIC")
    os.environ["HOROVOD_ELASTIC"] = "1"
    try:
        return hvd.DistributedOptimizer(opt, named_parameters=named_parameters)
    finally:
        if before is None:
            del os.environ["HOROVOD_ELASTIC"]
        else:
            os.environ["HOROVOD_ELASTIC"] = before


def _group(dist, backend: str, tmp: str) -> None:
    if not dist.is_initialized():
        store = dist.FileStore(os.path.join(tmp, "store"), 1)
        dist.init_process_group(backend, store=store, rank=0, world_size=1)


def measure(models: Sequence[str], batches: Sequence[int], wrappers: Sequence[str] = ("plain", "ddp"),
            device: str = "cuda", precision: str = "bf16", steps: int = 50, warmup: int = 10,
            repeats: int = 5) -> list:
    """Seconds per step of each model at each batch under each wrapper: a list of
    {"model", "batch", "wrapper", "step_s", "min_s", "max_s", "runs"}, the step the median of
    ``repeats`` timed runs of ``steps`` steps (the wrappers' runs interleaved). ``device``:
    "cuda" (GPU 0, NCCL) or "cpu" (gloo; the code path). Raises RuntimeError with one line when
    the device or a wrapper cannot be had."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from ddlab.training import models_torch
    unknown = [w for w in wrappers if w not in WRAPPERS]
    if unknown:
        raise ValueError(f"unknown wrapper {unknown[0]!r}; choose from {', '.join(WRAPPERS)}")
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("the wrapper's cost on a GPU needs one, and PyTorch sees none")
    dev = torch.device("cuda", 0) if device == "cuda" else torch.device("cpu")
    cuda = dev.type == "cuda"
    if cuda:
        torch.cuda.set_device(dev)
    autocast = torch.autocast(dev.type, dtype=torch.bfloat16, enabled=precision == "bf16")
    hvd = None
    if any(w.startswith("horovod") for w in wrappers):
        import horovod.torch as hvd
        hvd.init()
    made_group = False
    out = []
    with tempfile.TemporaryDirectory(prefix="ddlab-wrapper-") as tmp:
        if "ddp" in wrappers:
            made_group = not dist.is_initialized()
            _group(dist, "nccl" if cuda else "gloo", tmp)
        try:
            for model in models:
                for batch in batches:
                    x = torch.randn(batch, *models_torch.IMAGE_SHAPE, device=dev)
                    y = torch.randint(0, models_torch.NUM_CLASSES, (batch,), device=dev)
                    steppers = {}
                    for w in wrappers:
                        torch.manual_seed(0)
                        net = models_torch.build(model).to(dev)
                        opt = torch.optim.Adam(net.parameters(), lr=1e-3, fused=cuda)
                        if w == "ddp":
                            net = DDP(net, device_ids=[dev.index] if cuda else None)
                        elif w.startswith("horovod"):
                            opt = horovod_optimizer(hvd, opt, net.named_parameters(), hooks=w == "horovod-hooks")

                        def step(net=net, opt=opt, hvd_opt=w.startswith("horovod")):
                            # Horovod's optimizer takes no set_to_none (it keeps its own gradient handles)
                            opt.zero_grad() if hvd_opt else opt.zero_grad(set_to_none=True)
                            with autocast:
                                loss = torch.nn.functional.cross_entropy(net(x), y)
                            loss.backward()
                            opt.step()
                        for _ in range(warmup):
                            step()
                        steppers[w] = step
                    runs = {w: [] for w in wrappers}
                    for _ in range(repeats):
                        for w, step in steppers.items():
                            if cuda:
                                torch.cuda.synchronize(dev)
                            t0 = time.perf_counter()
                            for _ in range(steps):
                                step()
                            if cuda:
                                torch.cuda.synchronize(dev)
                            runs[w].append((time.perf_counter() - t0) / steps)
                    for w in wrappers:
                        out.append({"model": model, "batch": batch, "wrapper": w,
                                    "step_s": statistics.median(runs[w]), "min_s": min(runs[w]),
                                    "max_s": max(runs[w]), "runs": runs[w]})
        finally:
            if made_group:
                dist.destroy_process_group()
    return out
