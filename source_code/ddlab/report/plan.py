"""How long ``ddlab report`` takes, by design: the duration model, the sizing of the p2p test
and of the all-reduce sweeps from the GPU count, and the :class:`Plan` of each step on a machine.

A full report on 8 GPUs must fit :data:`FULL_BUDGET_S` and a ``--quick`` preflight on 2 GPUs
:data:`QUICK_BUDGET_S`. The estimates also feed the progress line's ETA; each step's JSON keeps
its measured duration beside its estimate, so the model can be checked against real runs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ddlab.system import policy

FULL_BUDGET_S = 600.0      # a full report on 8 GPUs
QUICK_BUDGET_S = 120.0     # a --quick preflight on 2 GPUs

# ----------------------------------------------------------------------------- duration model
# Design estimates (seconds), deliberately on the slow side; every step's JSON keeps its
# measured duration beside its estimate, so these can be checked against real runs.
DOCTOR_S = 20.0            # package metadata, NVML, `horovodrun --check-build` (imports the frameworks)
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


def sweep_sizes(backend: str, quick: bool) -> list:
    """Message sizes for the all-reduce sweep: 8 B to 1 GiB by x4 on GPUs (15 sizes; NVLink
    reaches its peak only for large messages), three sizes in a preflight, and small ones on CPU."""
    from ddlab.measure.collectives import message_sizes
    if backend == "nccl":
        return [1 << 10, 1 << 20, 64 << 20] if quick else message_sizes("all_reduce", 8, 1 << 30, 2, factor=4)
    return [1 << 10, 64 << 10, 1 << 20] if quick else message_sizes("all_reduce", 8, 16 << 20, 2, factor=8)


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


# ----------------------------------------------------------------------------- the plan
@dataclass
class Plan:
    """What each step does on this machine, and how long it should take."""
    gpus: int
    quick: bool
    p2p: dict
    sweep_backend: str
    sweep_sizes: list
    paths: list
    train_device: Optional[str]      # "cuda", "cpu" or None (skipped)
    train_paths: list
    estimates: dict = field(default_factory=dict)

    def total_s(self) -> float:
        return sum(self.estimates.values())


def plan(machine: policy.Machine, quick: bool = False, p2p_built: bool = True) -> Plan:
    """The report's plan for ``machine`` (GPU count and software), with an estimate per step."""
    from ddlab.system import nccl
    gpus = machine.gpus
    multi = policy.decide(policy.Needs(gpus=2, framework="torch", launcher="ddp"), machine).live
    torch_ok = machine.software("torch", "ddp")[0]
    backend = "nccl" if multi else "gloo"
    paths = list(nccl.COMPARED) if multi else ["default"]
    sizes = sweep_sizes(backend, quick)
    if multi:
        train_device = None if quick else "cuda"
    else:
        train_device = None if quick or not torch_ok else "cpu"
    train_paths = list(nccl.COMPARED) if train_device == "cuda" else ["default"]
    p = Plan(gpus, quick, p2p_sizing(gpus, quick), backend, sizes, paths, train_device, train_paths)
    p2p_live = policy.decide(policy.Needs(gpus=2, nvcc=True), machine).live
    p.estimates = {
        "doctor": DOCTOR_S,
        "topology": TOPOLOGY_S,
        "p2p": (p.p2p["seconds"] + (0 if p2p_built else P2P_BUILD_S)) if p2p_live else 0.0,
        "allreduce": sum(sweep_seconds(sizes, gpus if multi else 2, x if multi else "gloo") for x in paths)
        if (multi or torch_ok) else 0.0,
        # The baseline (one worker) and one run per path, each run once.
        "training": (1 + len(train_paths)) * TRAIN_RUN_S[train_device] if train_device else 0.0,
    }
    return p
