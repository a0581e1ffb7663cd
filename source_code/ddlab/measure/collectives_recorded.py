"""Sweeps recorded on one of the course's machines (``source_code/reference/allreduce/<name>.json``,
the format of :func:`ddlab.measure.collectives.results_to_json`): :func:`load_recorded` gives one
sweep per NCCL path, :func:`load_recorded_levels` one per ``NCCL_P2P_LEVEL``.
"""
from __future__ import annotations

from ddlab.measure.collectives import check_op, results_from_json
from ddlab.system import nccl


def load_recorded(name: str, op: str = "all_reduce") -> dict:
    """Recorded sweeps of ``op`` from ``source_code/reference/allreduce/<name>.json``, as a dict
    path -> SweepResult with ``source == "recorded"``."""
    from ddlab.base import reference
    check_op(op)
    found = {r.path: r for r in results_from_json(reference.load("allreduce", name), source="recorded")
             if r.op == op}
    if not found:
        raise ValueError(f"reference allreduce/{name} holds no {op} sweep")
    return found


def load_recorded_levels(name: str) -> dict:
    """A recorded level sweep (the sweeps of :func:`ddlab.measure.collectives_run.compare_levels`,
    kept as ``reference/allreduce/<name>.json``) as ``{level: SweepResult}``, in NCCL's order."""
    from ddlab.base import reference
    found = {r.env.get("NCCL_P2P_LEVEL"): r for r in results_from_json(reference.load("allreduce", name),
                                                                         source="recorded")}
    if None in found or not found:
        raise ValueError(f"reference allreduce/{name} is not a level sweep (each sweep needs NCCL_P2P_LEVEL)")
    return {lv: found[lv] for lv in nccl.P2P_LEVELS if lv in found}

