"""The course's sequence of notebooks and what each runs live in each hardware mode.

Each notebook opens with one line, printed by :func:`live_here`, that says what it runs on
the machine in front of the learner; Start_Here lists the same facts for every mode. The
modes are those of :attr:`ddlab.system.hardware.Inventory.mode`: "cpu", "single-gpu", "multi-gpu".
"""
from __future__ import annotations

import os
from typing import Optional

MODES = ("cpu", "single-gpu", "multi-gpu")

# notebook number -> (title, {mode: what runs live there})
NOTEBOOKS = {
    1: ("Data-parallel training", {
        "cpu": "Fashion-MNIST training on 1, 2 and 4 CPU worker processes (Gloo), live; the GPU scaling is recorded",
        "single-gpu": "Fashion-MNIST training on CPU worker processes (Gloo), and single-GPU training of the CNN "
                      "in fp32 and bf16 on this GPU, live; the multi-GPU scaling is recorded",
        "multi-gpu": "Fashion-MNIST training on CPU worker processes (Gloo), single-GPU training and the GPU "
                     "scaling, all live",
    }),
    2: ("Latency and bandwidth", {
        "cpu": "the calculator, a timed all-reduce loop and an all-reduce sweep between 2 CPU processes (Gloo), "
               "fitted to the alpha-beta model",
        "single-gpu": "the calculator, this GPU's host link (the cost of host staging), and a timed all-reduce loop "
                      "and sweep between 2 CPU processes (Gloo): one GPU has no peer to exchange data with",
        "multi-gpu": "the calculator, GPU 0's host link (the cost of host staging), a timed all-reduce loop on 2 CPU "
                     "processes (Gloo) and an NCCL all-reduce sweep across this machine's GPUs, fitted to the "
                     "alpha-beta model",
    }),
    3: ("System topology", {
        "cpu": "no GPU to read: the recorded machines' topologies are parsed, ranked and drawn",
        "single-gpu": "this GPU's `nvidia-smi topo -m` (no pair to compare) beside the recorded machines",
        "multi-gpu": "this machine's `nvidia-smi topo -m`, parsed, ranked and drawn, and the pair experiment where "
                     "its pairs differ",
    }),
    4: ("NCCL transports and NCCL_P2P_LEVEL", {
        "cpu": "the level predictions for the recorded topologies; NCCL acts only between GPUs, so its logs, the "
               "level sweep and the all-reduce under each NCCL path are recorded",
        "single-gpu": "the level predictions for the recorded topologies; NCCL needs two GPUs, so its logs, the "
                      "level sweep and the all-reduce under each NCCL path are recorded",
        "multi-gpu": "NCCL's logs, the level sweep and the all-reduce under each NCCL path on this machine's GPUs, "
                     "beside the level predictions for its topology and the recorded ones",
    }),
    5: ("Training under each NCCL path with Horovod and DDP", {
        "cpu": "Horovod (PyTorch and Keras) and DDP training on 2 CPU processes over Gloo; NCCL acts only on GPUs, "
               "so the training under each NCCL path is the recording, and so are the predictions' runs",
        "single-gpu": "Horovod (PyTorch and Keras) and DDP training on 2 CPU processes over Gloo; the path "
                      "comparison needs two GPUs, so it is the recording, and so are the predictions' runs",
        "multi-gpu": "DDP and Horovod training of the wide model under each NCCL path, and Keras where "
                     "TensorFlow sees the GPUs; both CNN comparisons, the DDP-Horovod table and the runs the "
                     "predictions use are the recordings",
    }),
    6: ("The compiled p2p bandwidth/latency test", {
        "cpu": "nothing of the GPU test: the compile command is shown and the recorded run drawn; the all-reduce "
               "sweep runs on 2 CPU processes (Gloo)",
        "single-gpu": "the compile (with nvcc), this GPU's host link, its PCIe link under load and the input "
                      "pipeline (pageable vs pinned batches); the p2p test needs two GPUs, so its run is recorded; "
                      "the all-reduce sweep runs on 2 CPU processes (Gloo)",
        "multi-gpu": "the compile, the p2p test on every GPU pair, GPU 0's host link, the PCIe links under load, "
                     "the input pipeline and the all-reduce sweep under the three NCCL paths, live",
    }),
    7: ("Hands-on: from one device to DDP", {
        "cpu": "the single-device script on the CPU, every DDP script on 2 CPU processes over Gloo, and the "
               "repair check",
        "single-gpu": "the single-device script on the GPU; two processes cannot share one GPU under NCCL, so the "
                      "DDP scripts and the repair check run on 2 CPU processes over Gloo",
        "multi-gpu": "the single-device script on one GPU, the DDP scripts and the repair check on 2 GPUs over "
                     "NCCL, one process per GPU",
    }),
    8: ("Hands-on: Horovod with PyTorch and tf.keras", {
        "cpu": "the finished DDP script and the Horovod scripts (PyTorch and tf.keras) on 2 CPU processes over Gloo",
        "single-gpu": "two processes cannot share one GPU under NCCL, so the finished DDP script and the Horovod "
                      "scripts run on 2 CPU processes over Gloo",
        "multi-gpu": "the finished DDP script and the Horovod script for PyTorch on 2 GPUs over NCCL, one process "
                     "per GPU; the Keras script on the GPUs where TensorFlow sees them",
    }),
    9: ("Convergence at scale", {
        "cpu": "a small convergence sweep (the MLP on a subset of Fashion-MNIST, 1 and 2 CPU worker processes over "
               "Gloo, 3 seeds each); the 2-GPU sweep of the CNN is recorded",
        "single-gpu": "a small convergence sweep on CPU worker processes (Gloo), 3 seeds each: the sweep compares "
                      "1 and 2 GPUs, so its GPU part is recorded",
        "multi-gpu": "the convergence sweep of the CNN on 2 GPUs (a subset of the recorded points, 3 seeds each), "
                     "live, with the full recorded sweep beside it",
    }),
    10: ("Case studies", {
        "cpu": "the field reports' strong-scaling experiment (the small MLP) on 2 CPU processes (Gloo); the 2-GPU "
               "results are recorded",
        "single-gpu": "the small MLP's one-GPU step on this GPU with the step model's prediction of a second GPU "
                      "over the recorded links, doctor's PCIe check of this GPU, and the reports' strong-scaling "
                      "experiment on 2 CPU processes (Gloo); the 2-GPU results are recorded",
        "multi-gpu": "the reports' strong-scaling experiment (the small MLP) on two GPUs with P2P off, the step "
                     "model against a live NCCL-path comparison of the small MLP and doctor's PCIe check, live on "
                     "this machine's GPUs; the wide model untuned and tuned runs live when asked (LIVE_TUNING)",
    }),
}


def _usable_here(inventory, usable: Optional[int]) -> tuple:
    """(the inventory's mode, the GPUs PyTorch can use: ``usable``, else asked where the inventory
    lists any, else the inventory's count)."""
    mode = inventory.mode
    if mode not in MODES:
        raise ValueError(f"unknown hardware mode {mode!r}; expected one of {', '.join(MODES)}")
    if inventory.gpu_count and usable is None:
        from ddlab.system import frameworks
        usable = frameworks.gpu_count("torch")
    return mode, inventory.gpu_count if usable is None else usable


def live_here(notebook: int, inventory, usable: Optional[int] = None) -> str:
    """One sentence for the top of ``notebook``: the mode of this machine and what runs live.
    ``usable``: the GPUs PyTorch can use here (default: asked, where the inventory lists any);
    the notebook runs in the mode of those, so where CUDA_VISIBLE_DEVICES hides some of the GPUs
    the inventory lists, or PyTorch is a CPU-only build, the sentence says so."""
    if notebook not in NOTEBOOKS:
        raise ValueError(f"the course's notebooks are {', '.join(map(str, NOTEBOOKS))}; got {notebook!r}")
    mode, usable = _usable_here(inventory, usable)
    n = inventory.gpu_count
    machine = _gpus(mode, n)
    if usable >= n:
        return f"This machine has {machine}, so this notebook runs live: {NOTEBOOKS[notebook][1][mode]}."
    runs_as = MODES[min(usable, 2)]
    seen = {0: "none of them", 1: "one of them"}.get(usable, f"{usable} of them")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    why = (f"CUDA_VISIBLE_DEVICES={visible!r} hides the others" if visible is not None else
           "a CPU-only PyTorch, or a driver PyTorch cannot use" if usable == 0 else "CUDA leaves it no more")
    return (f"This machine has {machine}, but PyTorch can use {seen} ({why}), so this notebook runs as with "
            f"{_gpus(runs_as, usable)}: {NOTEBOOKS[notebook][1][runs_as]}.")


def here_table(inventory, usable: Optional[int] = None):
    """Every notebook and what it runs live on this machine, as :func:`live_here` says it (the mode of
    the GPUs PyTorch can use): a :class:`ddlab.base.tables.Table` for Start_Here."""
    from ddlab.base.tables import Table
    mode, usable = _usable_here(inventory, usable)
    runs_as = mode if usable >= inventory.gpu_count else MODES[min(usable, 2)]
    n = inventory.gpu_count if runs_as == mode else usable
    rows = [{"notebook": f"{k}. {title}", "live": what[runs_as]} for k, (title, what) in NOTEBOOKS.items()]
    return Table([("notebook", "text"), ("live", "text", f"runs live here ({_gpus(runs_as, n)})")],
                 rows, wrap=("live",))


def _gpus(mode: str, n: int) -> str:
    """A mode's GPUs in words: "no GPU", "one GPU", "4 GPUs"."""
    return {"cpu": "no GPU", "single-gpu": "one GPU", "multi-gpu": f"{n} GPUs"}[mode]
