"""How long ``ddlab report`` takes, by design: the duration model, the sizing of the p2p test
and of the all-reduce sweeps from the GPU count, the sizing of the one-GPU steps (host link,
PCIe under load, single-GPU training, the wrapper's cost), and the :class:`Plan` of each step on
a machine.

A full report on 8 GPUs must fit :data:`FULL_BUDGET_S`, a ``--quick`` preflight on 2 GPUs
:data:`QUICK_BUDGET_S`, and a full report on one H100 or H200 :data:`ONE_GPU_BUDGET_S` (three
minutes): :func:`one_gpu_sizing` gives up the optional parts one by one (:data:`TRIMS`) until
the plan fits, and the plan's ``trims`` say what was left out. The estimates also feed the
progress line's ETA; each step's JSON keeps its measured duration beside its estimate, so the
model can be checked against real runs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ddlab.system import policy

FULL_BUDGET_S = 600.0      # a full report on 8 GPUs
QUICK_BUDGET_S = 120.0     # a --quick preflight on 2 GPUs
ONE_GPU_BUDGET_S = 180.0   # a full report on one GPU (an H100 or H200)

# ----------------------------------------------------------------------------- duration model
# Design estimates (seconds), deliberately on the slow side; every step's JSON keeps its
# measured duration beside its estimate, so these can be checked against real runs.
DOCTOR_S = 5.0             # package metadata, NVML, Horovod's build read from its files, the data set's checksums
TOPOLOGY_S = 3.0           # `nvidia-smi topo -m` and a drawing
P2P_BUILD_S = 30.0         # nvcc for two or three architectures, only when the binary is missing
LAUNCH_S = 12.0            # torchrun start, process-group and NCCL set-up, per launch
TRAIN_RUN_S = {"cuda": 45.0, "cpu": 40.0}   # one training launch: start, data, steps, evaluation
# Conservative link speeds for the p2p estimate: host-staged copies (P2P off) and peer copies
# (P2P on) no faster than a PCIe 4.0 x16 link; NVLink machines finish well before the estimate.
STAGED_GBPS = 10.0
PEER_GBPS = 20.0
P2P_LATENCY_PAIR_S = 0.5   # the latency tables of one pair (4 tables x ~4096 small copies)
# Conservative bus bandwidth per NCCL path, for the sweep estimate (GB/s).
PATH_GBPS = {"default": 20.0, "shm": 5.0, "socket": 1.0, "gloo": 0.5}
SWEEP_TARGET_S, SWEEP_MIN_ITERS = 0.2, 5   # collectives.AUTO_ITERS["nccl"]: time per size
P2P_SIZES = (1 << 30, 512 << 20, 256 << 20, 128 << 20, 64 << 20, 32 << 20, 16 << 20)
P2P_REPS = (10, 5, 3)
P2P_BUDGET_S = {"full": 150.0, "quick": 20.0}
# The one-GPU steps. ONE_GPU_LAUNCH_S is one short one-process training launch (interpreter,
# imports, CUDA start, data, 300 steps, evaluation) on a machine whose Python imports torch
# slowly, so the estimate errs long. The wrapper's cost is timed in the report's own process: a
# process group, then per model, batch and wrapper its warm-up and runs.
ONE_GPU_LAUNCH_S = 18.0
WRAPPER_SETUP_S = 8.0
WRAPPER_CONFIG_S = 2.0
HOST_BUILD_S = 15.0        # nvcc for host_bandwidth_latency alone, only when its binary is missing
PCIE_LOAD_S = 5.0          # torch import, CUDA start, PCIE_LOAD_COPY_S of copies, NVML
PCIE_LOAD_COPY_S = 1.5
# Host-link rates for the estimate (GB/s), on the slow side of a PCIe Gen4/Gen5 x16 link, and
# the rates the program guesses when it picks its repeats (so a row takes guess/rate x its time).
HOST_RATE_GBPS = {"pinned": 25.0, "pageable": 6.0}
HOST_GUESS_GBPS = {"pinned": 50.0, "pageable": 10.0}
HOST_SETUP_GBPS = 0.5      # allocating, first-touching and validating the largest buffers
HOST_SIZES = tuple(4096 * 4 ** k for k in range(10))             # 4 KiB ... 1 GiB, the full sweep
HOST_SIZES_SHORT = (4096, 1 << 20, 16 << 20, 256 << 20)         # several GPUs, or --quick
HOST_SECONDS_PER_ROW = 0.1
ONE_GPU_MODELS = ("cnn", "mlp-small", "mlp-large")
WRAPPER_MODELS = ("mlp-small",)        # the smallest seed model: the wrapper's share is largest there
WRAPPER_BATCHES = (32, 128, 512)
# What a plan over its budget gives up, in this order (each a change to the one-GPU sizing).
TRIMS = ("host-link rows of 0.05 s", "no Horovod in the wrapper's cost", "wrapper's cost at batches 32 and 512",
         "host-link sizes 4K, 1M, 16M, 256M", "single-GPU training in bf16 only", "wrapper's cost at batch 32 only")


def p2p_pair_seconds(size_bytes: int, reps: int, copies: int) -> float:
    """Estimated seconds the p2p test spends on one directed pair.

    Per copy kind (copy engine, SM kernel) the program times four bandwidth tables: uni- and
    bidirectional, P2P off and on, each ``reps`` copies after one warm-up. Bidirectional is
    counted as twice the data. So per pair: (reps + 1) x size x 3 x (1/staged + 1/peer) per
    copy kind, plus the latency tables."""
    per_kind = (reps + 1) * size_bytes * 3 * (1 / (STAGED_GBPS * 1e9) + 1 / (PEER_GBPS * 1e9))
    return copies * per_kind + P2P_LATENCY_PAIR_S


def p2p_sizing(gpus: int, quick: bool = False) -> dict:
    """Size and repeats for the p2p test on ``gpus`` GPUs within its time budget.

    The program measures every directed pair: n(n-1) of them, 56 on 8 GPUs. Its default
    (10 copies of 1 GiB, both copy kinds) costs about ``p2p_pair_seconds(1 GiB, 10, 2)``
    = 11 x 1.07 GB x 3 x (1/10 + 1/20) s x 2 + 0.5 = 11 s per pair: 2 GPUs (2 pairs) take
    22 s, 8 GPUs (56 pairs) about 600 s, the whole report's budget. So the budget per pair is
    ``P2P_BUDGET_S / pairs`` (150 s / 56 = 2.7 s on 8 GPUs), and we take the largest size,
    then the most repeats, that fits it (8 GPUs: 512 MiB x 3; 2 GPUs: the default 1 GiB x 10).
    Sizes from 16 MiB up still reach a link's full bandwidth; fewer repeats only widen the
    spread. ``--quick`` times the copy engine only, at most 256 MiB x 5, within a 20 s budget."""
    pairs = max(1, gpus * (gpus - 1))
    copies = 1 if quick else 2
    budget = P2P_BUDGET_S["quick" if quick else "full"] / pairs
    sizes = [s for s in P2P_SIZES if not quick or s <= 256 << 20]
    repeats = [r for r in P2P_REPS if not quick or r <= 5]
    size, reps = sizes[-1], repeats[-1]
    for s in sizes:
        fits = [r for r in repeats if p2p_pair_seconds(s, r, copies) <= budget]
        if fits:
            size, reps = s, fits[0]
            break
    return {"pairs": pairs, "size": size, "reps": reps, "copy": "ce" if quick else "both",
            "latency_reps": 1024 if quick else None, "seconds": pairs * p2p_pair_seconds(size, reps, copies)}


# The message size at which two machines' all-reduce is compared (report.html_page.key_figures): a
# middle size, the first bucket DDP closes. Every sweep the report runs includes it.
COMPARED_BYTES = 1 << 20


def sweep_sizes(backend: str, quick: bool) -> list:
    """Message sizes for the all-reduce sweep: 8 B to 512 MiB by x4 on GPUs (NVLink reaches its
    peak only for large messages), three sizes in a preflight, and 8 B to 16 MiB by x8 on CPU;
    each list holds COMPARED_BYTES, which the x4 and x8 steps from 8 B skip."""
    from ddlab.measure.collectives import message_sizes
    if backend == "nccl":
        sizes = [1 << 10, 64 << 20] if quick else message_sizes("all_reduce", 8, 1 << 30, 2, factor=4)
    else:
        sizes = [1 << 10, 64 << 10] if quick else message_sizes("all_reduce", 8, 16 << 20, 2, factor=8)
    return sorted(set(sizes) | {COMPARED_BYTES})


def sweep_seconds(sizes, gpus: int, path: str) -> float:
    """Estimated seconds of one sweep: a launch, then per size the larger of the auto-iteration
    target and ``min_iters`` calls, plus a warm-up and a validation call."""
    n = max(2, gpus)
    bw = PATH_GBPS.get(path, min(PATH_GBPS.values())) * 1e9
    total = LAUNCH_S
    for s in sizes:
        call = 2 * (n - 1) / n * s / bw
        total += max(SWEEP_TARGET_S, SWEEP_MIN_ITERS * call) + 2 * call
    return total


def host_link_seconds(sizes, seconds_per_row: float, nodes: int = 1, gpus: int = 1,
                      memory=("pinned", "pageable"), latency_reps: int = 200) -> float:
    """Estimated seconds of the host-link test on ``gpus`` GPUs from ``nodes`` NUMA nodes each.
    Per node and memory kind: the buffers of the largest size made, first-touched and validated
    (:data:`HOST_SETUP_GBPS`), then per size three rows (h2d, d2h, both; both moves twice the
    bytes at 1.6x the rate), each the program's repeats for ``seconds_per_row`` at its guessed
    rate, at least 5 copies and a warm-up, at the slow :data:`HOST_RATE_GBPS`; the latency copies."""
    total = 0.0
    for mem in memory:
        rate, guess = HOST_RATE_GBPS[mem] * 1e9, HOST_GUESS_GBPS[mem] * 1e9
        t = 3 * max(sizes) / (HOST_SETUP_GBPS * 1e9) + 2 * latency_reps * 20e-6
        for size in sizes:
            reps = min(2000, max(5, seconds_per_row * guess / size))
            t += 2 * (reps + 1) * size / rate + (reps + 1) * 2 * size / (1.6 * rate)
        total += t
    return total * nodes * gpus


def one_gpu_sizing(gpus: int, nodes: int, horovod: bool, trims: int = 0, quick: bool = False) -> dict:
    """The one-GPU steps' sizes after the first ``trims`` of :data:`TRIMS`: the host-link sizes
    and seconds per row (every GPU; the short sweep on several GPUs or ``--quick``), the
    single-GPU training's models and precisions, the wrapper's cost's models, batches and
    wrappers (None: not run, under ``--quick``), and each one's estimate in seconds."""
    short = quick or gpus > 1 or trims >= 4
    host = {"sizes": list(HOST_SIZES_SHORT if short else HOST_SIZES),
            "seconds_per_row": 0.05 if (quick or trims >= 1) else HOST_SECONDS_PER_ROW,
            "devices": list(range(gpus)), "nodes": nodes}
    host["seconds"] = host_link_seconds(host["sizes"], host["seconds_per_row"], nodes, gpus)
    if quick:
        return {"host_link": host, "one_gpu": None, "wrapper": None}
    one = {"models": list(ONE_GPU_MODELS), "precisions": ["bf16"] if trims >= 5 else ["fp32", "bf16"]}
    one["seconds"] = len(one["models"]) * len(one["precisions"]) * ONE_GPU_LAUNCH_S
    batches = [32] if trims >= 6 else [32, 512] if trims >= 3 else list(WRAPPER_BATCHES)
    wrappers = ["plain", "ddp"] + (["horovod"] if horovod and trims < 2 else [])
    wrap = {"models": list(WRAPPER_MODELS), "batches": batches, "wrappers": wrappers}
    wrap["seconds"] = WRAPPER_SETUP_S + len(WRAPPER_MODELS) * len(batches) * len(wrappers) * WRAPPER_CONFIG_S
    return {"host_link": host, "one_gpu": one, "wrapper": wrap}


# ----------------------------------------------------------------------------- the plan
@dataclass
class Plan:
    """What each step does on this machine, and how long it should take. ``host_link``,
    ``one_gpu``, ``wrapper``: the one-GPU steps' sizes (:func:`one_gpu_sizing`; None: not run);
    ``trims``: what the plan gave up to fit its budget (:data:`TRIMS`)."""
    gpus: int
    quick: bool
    p2p: dict
    sweep_backend: str
    sweep_sizes: list
    paths: list
    train_device: Optional[str]      # "cuda", "cpu" or None (skipped)
    train_paths: list
    estimates: dict = field(default_factory=dict)
    host_link: Optional[dict] = None
    one_gpu: Optional[dict] = None
    wrapper: Optional[dict] = None
    trims: list = field(default_factory=list)
    budget_s: Optional[float] = None

    def total_s(self) -> float:
        return sum(self.estimates.values())


def budget_for(gpus: int, quick: bool) -> Optional[float]:
    """The time a report on ``gpus`` GPUs is planned to fit (None: no GPU, nothing to size)."""
    if gpus == 0:
        return None
    if quick:
        return QUICK_BUDGET_S
    return ONE_GPU_BUDGET_S if gpus == 1 else FULL_BUDGET_S


def plan(machine: policy.Machine, quick: bool = False, p2p_built: bool = True, host_built: bool = True,
         numa_nodes: Optional[int] = None) -> Plan:
    """The report's plan for ``machine`` (GPU count and software), with an estimate per step.
    ``numa_nodes``: the host's NUMA nodes (None: read from sysfs). On one GPU the CPU stand-ins
    of the 2-GPU steps (gloo on 2 CPU processes) are left out: the one-GPU steps measure the GPU."""
    from ddlab.system import nccl
    gpus = machine.gpus
    multi = policy.decide(policy.Needs(gpus=2, framework="torch", launcher="ddp"), machine).live
    torch_ok = machine.software("torch", "ddp")[0]
    cpu_stand_in = gpus == 0 and torch_ok
    backend = "nccl" if multi else "gloo"
    paths = list(nccl.COMPARED) if multi else ["default"]
    sizes = sweep_sizes(backend, quick)
    if multi:
        train_device = None if quick else "cuda"
    else:
        train_device = None if quick or not cpu_stand_in else "cpu"
    train_paths = list(nccl.COMPARED) if train_device == "cuda" else ["default"]
    p = Plan(gpus, quick, p2p_sizing(gpus, quick), backend, sizes, paths, train_device, train_paths)
    p2p_live = policy.decide(policy.Needs(gpus=2, nvcc=True), machine).live
    p.estimates = {
        "doctor": DOCTOR_S,
        "topology": TOPOLOGY_S,
        "p2p": (p.p2p["seconds"] + (0 if p2p_built else P2P_BUILD_S)) if p2p_live else 0.0,
        "allreduce": sum(sweep_seconds(sizes, gpus if multi else 2, x if multi else "gloo") for x in paths)
        if (multi or cpu_stand_in) else 0.0,
        # The plain one-GPU run, the one-worker run and one run per path, each run once.
        "training": (2 + len(train_paths)) * TRAIN_RUN_S[train_device] if train_device else 0.0,
    }
    _plan_one_gpu_steps(p, machine, host_built, numa_nodes)
    return p


def _plan_one_gpu_steps(p: Plan, machine: policy.Machine, host_built: bool, numa_nodes: Optional[int]) -> None:
    """Size the host-link, pcie-load, one-gpu-training and wrapper-cost steps within the
    budget: the fewest :data:`TRIMS` that make the whole plan fit."""
    names = ("host-link", "pcie-load", "one-gpu-training", "wrapper-cost")
    p.estimates.update(dict.fromkeys(names, 0.0))
    if not machine.gpus:
        return
    if numa_nodes is None:
        from ddlab.system import numa
        numa_nodes = len(numa.host_numa().nodes)
    torch_ok = machine.software("torch", "none")[0]
    ddp_ok = machine.software("torch", "ddp")[0]
    horovod = machine.software("torch", "horovod")[0]
    host_ok = machine.nvcc or torch_ok
    p.budget_s = budget_for(machine.gpus, p.quick)
    fixed = p.total_s()
    for trims in range(1 if p.quick else len(TRIMS) + 1):
        sz = one_gpu_sizing(machine.gpus, numa_nodes, horovod, trims, p.quick)
        est = {"host-link": (sz["host_link"]["seconds"] + (0 if host_built or not machine.nvcc else HOST_BUILD_S))
               if host_ok else 0.0,
               "pcie-load": PCIE_LOAD_S if torch_ok else 0.0,
               "one-gpu-training": sz["one_gpu"]["seconds"] if sz["one_gpu"] and torch_ok else 0.0,
               "wrapper-cost": sz["wrapper"]["seconds"] if sz["wrapper"] and ddp_ok else 0.0}
        if p.quick or fixed + sum(est.values()) <= p.budget_s or trims == len(TRIMS):
            break
    p.host_link = dict(sz["host_link"], method="compiled" if machine.nvcc else "torch") if host_ok else None
    p.one_gpu = sz["one_gpu"] if torch_ok else None
    p.wrapper = sz["wrapper"] if ddp_ok else None
    p.trims = list(TRIMS[:trims])
    p.estimates.update(est)
