"""Live or recorded, per notebook part: :func:`live_or_recorded`, the one entry point notebooks call,
asks the course's one policy (:func:`ddlab.system.policy.decide`) whether a part runs live here
(:func:`decision` answers that alone), then runs it or loads what was
recorded on a course GPU machine, and says which in ONE line: "measured now on 2x NVIDIA
H200, NV18", "recorded on 2x NVIDIA H200, NV18, 2026-11-22 (not live here: it needs nvcc (the
CUDA compiler) to build the p2p test)" or "not recorded yet". It covers the topology
(``nvidia-smi topo -m``), the NCCL logs, our CUDA p2p test, the all-reduce sweeps, the training
experiments and the convergence sweep. Recorded data lives under ``source_code/reference/`` with
its provenance.
"""
from __future__ import annotations

import os
from typing import Optional

from ddlab.base import reference
from ddlab.base.errors import CourseError
from ddlab.base.paths import REFERENCE_DIR
from ddlab.system.policy import Decision, Machine, Needs, Shown, decide, measured_line, recorded_line
from ddlab.system.topology import NoGPUError

# The recording of the course's GPU machine each part loads when it cannot run live.
RECORDED = "h200x2"
NCCL_LOG_DIR = os.path.join(REFERENCE_DIR, "nccl_logs")
PARTS = ("topology", "nccl-logs", "p2p", "allreduce", "scaling", "nccl-paths", "perf-options", "convergence",
         "host-link", "one-gpu", "wrapper-cost", "input-pipeline")


class NotLiveHere(CourseError, RuntimeError):
    """A part asked for live (``source="live"``) that this machine cannot run: one line, no frames."""


# ----------------------------------------------------------------------------- each part
def recorded_nccl_logs(name: str = RECORDED) -> dict:
    """{path: NcclLog} recorded on the course's GPU machine (``"logs"``), the lines of each that show
    NCCL's choice as printed (``"lines"``, :func:`ddlab.system.nccl_log.key_lines`), and their provenance."""
    from ddlab.system import nccl_log
    meta = reference.load("nccl_logs", name)
    texts = {}
    for path, fname in meta["logs"].items():
        with open(os.path.join(NCCL_LOG_DIR, fname), encoding="utf-8", errors="replace") as f:
            texts[path] = f.read()
    return {"logs": {p: nccl_log.parse(t) for p, t in texts.items()},
            "lines": {p: nccl_log.key_lines(t) for p, t in texts.items()}, "provenance": meta["provenance"]}


def _topology(live: bool, machine: Machine):
    from ddlab.system import topology
    from ddlab.system.topology_parse import TopologyParseError
    if live:
        from ddlab.system import gpu_pairs
        try:     # the GPUs CUDA_VISIBLE_DEVICES names, so a pair chosen from it is one this notebook may use
            return gpu_pairs.visible_topology(topology.Topology.from_system()), None
        except TopologyParseError as exc:    # nvidia-smi printed something this parser cannot read
            raise NoGPUError("`nvidia-smi topo -m` printed a matrix this course cannot read: "
                             + str(exc).splitlines()[0]) from None
    t = topology.recorded(RECORDED)
    return t, t.provenance


def _nccl_logs(live: bool, machine: Machine):
    from ddlab.measure import nccl_capture
    from ddlab.system import nccl, nccl_log
    if live:
        return {p: nccl_log.parse(nccl_capture.capture_allreduce_log(env=nccl.get(p).environment()))
                for p in nccl.COMPARED}, None
    rec = recorded_nccl_logs()
    return rec["logs"], rec["provenance"]


def _p2p(live: bool, machine: Machine):
    from ddlab.measure import p2p_diagnosis, p2p_run
    if live:
        try:
            return p2p_run.run(), None
        except (p2p_run.P2PBuildError, p2p_run.P2PNoGPU) as exc:   # no make, no nvcc, no nvidia-smi: recorded
            raise NoGPUError(str(exc).splitlines()[0]) from None
    r = p2p_diagnosis.load_recorded(RECORDED)
    return r, r.provenance


def _allreduce(live: bool, machine: Machine):
    from ddlab.measure import collectives, collectives_run
    if live:
        return collectives_run.compare_paths(), None
    sweeps = collectives.load_recorded(RECORDED)
    return sweeps, next(iter(sweeps.values())).provenance


def _host_link(live: bool, machine: Machine):
    """The host link of GPU 0 (compiled where nvcc is, else torch), or the first recorded one."""
    from ddlab.measure import host_link
    if live:
        try:
            return host_link.measure(seconds_per_row=0.05), None
        except host_link.HostLinkNoGPU as exc:       # a GPU NVML sees but nothing here can measure
            raise NoGPUError(str(exc).removeprefix("skipped: ")) from None
    names = host_link.recorded_names()
    if not names:
        raise FileNotFoundError("no host-link recording under source_code/reference/hostlink/")
    r = host_link.load_recorded(names[0])
    return r, r.provenance


def _recorded_experiment(name: str):
    from ddlab.base import reference
    from ddlab.training.results import ExperimentResult
    res = ExperimentResult.from_dict(reference.load("experiments", name), source="recorded")
    return res, res.provenance


# Live, notebook 1 trains its own model, the CNN, in each precision, three times each: six launches.
# The recording holds the two MLPs too. All three models live would be 18 launches, more than the
# notebook's stated minutes leave for its Run All on a two-GPU machine.
ONE_GPU_LIVE_MODELS = ("cnn",)

# Live on two GPUs, a notebook's comparison over the NCCL paths (notebook 5's Horovod and DDP cells,
# notebook 10's second GPU) runs each configuration twice, so the row still shows a spread. A launch is
# mostly process start-up, so the launch count sets the wait: three repeats (LIVE_GPU_REPEATS, what the
# recordings use) put notebook 5's Run All past its stated minutes on a two-GPU machine. On CPU
# processes the callers keep their own counts.
TWO_GPU_LIVE_REPEATS = 2


def _one_gpu(live: bool, machine: Machine):
    from ddlab.training import one_gpu
    if live:
        from ddlab.training.runs import launch_bar
        launches = one_gpu.planned_launches(ONE_GPU_LIVE_MODELS, one_gpu.PRECISIONS)
        with launch_bar(launches, "one GPU: the CNN in each precision", "auto", name="live-one-gpu") as bar:
            return one_gpu.single_gpu_throughput(models=ONE_GPU_LIVE_MODELS, precisions=one_gpu.PRECISIONS,
                                                 device="cuda", progress=bar), None
    return _recorded_experiment("one-gpu-torch-none")


def _wrapper_cost(live: bool, machine: Machine):
    from ddlab.cost import step_model
    from ddlab.training import one_gpu
    if live:
        return one_gpu.wrapper_cost(models=one_gpu.ONE_GPU_MODELS, device="cuda", buckets=step_model.bucket_count), None
    return _recorded_experiment("wrapper-cost-torch")


def _input_pipeline(live: bool, machine: Machine):
    from ddlab.training import input_pipeline
    if live:
        return input_pipeline.measure(device="cuda"), None
    return _recorded_experiment("input-pipeline-torch-none")


_PARTS = {"topology": (Needs(gpus=1), _topology),
          "host-link": (Needs(gpus=1), _host_link),
          "one-gpu": (Needs(gpus=1, framework="torch", launcher="none"), _one_gpu),
          "wrapper-cost": (Needs(gpus=1, framework="torch", launcher="ddp"), _wrapper_cost),
          "input-pipeline": (Needs(gpus=1, framework="torch", launcher="none"), _input_pipeline),
          "nccl-logs": (Needs(gpus=2, framework="torch", launcher="ddp"), _nccl_logs),
          "p2p": (Needs(gpus=2, nvcc=True), _p2p),
          "allreduce": (Needs(gpus=2, framework="torch", launcher="ddp"), _allreduce)}


EXPERIMENT_PARTS = ("scaling", "nccl-paths", "perf-options")


def decision(part: str, machine: Optional[Machine] = None, **kwargs) -> Decision:
    """Whether ``part`` runs live on this machine, and if not, why (a
    :class:`ddlab.system.policy.Decision`), decided as :func:`live_or_recorded` decides it, without
    running or loading anything. For a training experiment ``kwargs`` name it (``framework``,
    ``launcher``, ``workers``; :func:`ddlab.training.experiments.decision`)."""
    _check(part, "auto")
    m = machine or Machine.detect()
    if part in EXPERIMENT_PARTS:
        from ddlab.training import experiments
        return experiments.decision(part, machine=m, **kwargs)
    if kwargs:
        raise ValueError(f"{part} takes no options ({', '.join(kwargs)} given)")
    if part == "convergence":
        from ddlab.course import convergence_sweep
        return decide(Needs(**convergence_sweep.LIVE_NEEDS), m)
    return decide(_PARTS[part][0], m)


def _check(part: str, source: str) -> None:
    if part not in PARTS:
        raise ValueError(f"unknown part {part!r}; choose one of {', '.join(PARTS)}")
    if source not in ("auto", "live", "recorded"):
        raise ValueError(f"unknown source {source!r}; choose one of auto, live, recorded")


def live_or_recorded(part: str, source: str = "auto", machine: Optional[Machine] = None, **kwargs) -> Shown:
    """Run notebook part ``part`` live when this machine can, else load its recording: the course's
    one entry point for live or recorded, whatever the part.

    ``part``: "topology", "nccl-logs", "p2p", "allreduce", "host-link" (GPU 0's host link),
    "one-gpu" (single-GPU training throughput), "wrapper-cost" (a step under DDP and Horovod
    with one worker against the plain step), "input-pipeline" (pageable vs pinned batches),
    "convergence" (the GPU convergence sweep; ``kwargs``: ``log``, :func:`ddlab.course.convergence_sweep.run_or_load`)
    or a training experiment ("scaling", "nccl-paths", "perf-options": ``kwargs`` go to
    :func:`ddlab.training.experiments.run_or_load`). ``source``: "auto", "live" or "recorded".
    Returns a :class:`Shown`: its ``value`` (the result), ``live``, ``line`` (where it came from)
    and ``why`` (what is missing to run it live here)."""
    _check(part, source)
    m = machine or Machine.detect()
    if part == "convergence" or part in EXPERIMENT_PARTS:
        if part == "convergence":
            from ddlab.course import convergence_sweep
            res = convergence_sweep.run_or_load(source=source, machine=m, **kwargs)
        else:
            from ddlab.training import experiments
            res = experiments.run_or_load(part, source=source, machine=m, **kwargs)
        why = "" if res.source == "live" else decision(part, m, **_naming(part, kwargs)).why
        return Shown(res, res.source == "live", res.where(), why)
    if kwargs:
        raise ValueError(f"{part} takes no options ({', '.join(kwargs)} given)")
    needs, load = _PARTS[part]
    decided = decide(needs, m) if source != "recorded" else Decision(False, "as asked")
    if source == "live" and not decided.live:
        raise NotLiveHere(f"cannot run {part} live here: {decided.why}")
    try:
        try:
            value, prov = load(decided.live, m)
        except NoGPUError as exc:        # PyTorch sees a GPU, nvidia-smi cannot read it: the recording stands in
            decided = Decision(False, str(exc).splitlines()[0])
            value, prov = load(False, m)
    except FileNotFoundError:
        return Shown(None, False, "not recorded yet" + _because(decided), decided.why)
    if decided.live:
        return Shown(value, True, measured_line(m))
    return Shown(value, False, recorded_line(prov) + _because(decided), decided.why)


def _naming(part: str, kwargs: dict) -> dict:
    """The arguments of a live_or_recorded call that :func:`decision` takes for ``part``."""
    return {k: v for k, v in kwargs.items() if part in EXPERIMENT_PARTS and k in ("framework", "launcher", "workers")}


def _because(decision: Decision) -> str:
    """Why a part is not live, appended to its one line ("": live, or recorded as asked)."""
    return "" if decision.live or decision.why == "as asked" else f" (not live here: {decision.why})"


def commands(value) -> list:
    """The command lines behind a live or recorded result, each once, in the order they ran: every
    launched run's own (the whole launch line, launcher and flags, that the training script records
    in its provenance), else the result's provenance command (for an in-process measurement, the call).
    Printed under a result so that the learner sees what ran and can run it again."""
    runs = getattr(value, "runs", None) or []
    lines = [(r.get("provenance") or {}).get("command") for r in runs if isinstance(r, dict)]
    lines = [c for c in lines if c] or [(getattr(value, "provenance", None) or {}).get("command")]
    return list(dict.fromkeys(c for c in lines if c))


def what_ran(value, most: int = 3, env: Optional[dict] = None) -> str:
    """"what ran:" and :func:`commands` of ``value``, one a line, each prefixed by ``env`` (``K=V``, the
    variables the launch set); past ``most`` lines, how many more there are and the call that lists them."""
    lines = commands(value)
    if not lines:
        return "what ran: no command recorded"
    prefix = "".join(f"{k}={v} " for k, v in (env or {}).items())
    shown = [prefix + c for c in lines[:most]]
    more = len(lines) - len(shown)
    return "\n  ".join(["what ran:", *shown]
                       + ([f"... and {more} more like them: mode.commands(...)"] if more > 0 else []))
