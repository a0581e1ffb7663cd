"""The GPU pairs a machine of any size offers to the recording scripts, read from its topology.

On two GPUs there is one pair; on four or eight the pairs may differ (a DGX-1's hybrid cube-mesh
has NV1, NV2 and SYS pairs; a PCIe box has PIX and SYS pairs), and what holds for one pair need
not hold for another:

* :func:`level_pair` - the pair whose transport changes across the most ``NCCL_P2P_LEVEL`` values
  (the farthest link on NCCL's distance scale), so a level sweep on it shows the levels apart;
  where every pair is NVLink each level treats every pair alike, and the answer says so;
* :func:`uniform_nvlink` - every pair joined by the same NVLink count: each GPU reaches every other
  at the same rate, as through an NVSwitch, so one link peak holds for every pair (on a mesh the sum
  of GPU 0's NVLinks is not any one pair's peak);
* :func:`facts` - both, and the GPU count, as a dict; ``python -m ddlab.system.gpu_pairs`` prints
  it as JSON for a shell script (``nvidia-smi topo -m`` of this machine, or ``--topo-file``).
"""
from __future__ import annotations

import json
import sys
from typing import Optional

from ddlab.system import nccl
from ddlab.system.topology import Topology


def _level_index(link) -> int:
    """How far a link is on NCCL's scale (NVL 1 ... SYS 5)."""
    return nccl.P2P_LEVELS.index(nccl.KIND_LEVEL[link.kind])


def levels_allowing_p2p(link) -> list:
    """The ``NCCL_P2P_LEVEL`` values under which NCCL may use P2P over ``link``."""
    return [lv for lv in nccl.P2P_LEVELS if nccl.get(lv).allows_p2p(link)]


def level_pair(topo: Topology) -> tuple:
    """(i, j, why): the GPU pair for the ``NCCL_P2P_LEVEL`` sweep. The pair with the farthest link
    (first in GPU order among equals), since the levels between NVL and its distance differ
    there; where every pair is NVLink, GPUs 0 and 1 and a ``why`` that says every pair is NVLink
    (each level then treats every pair alike: LOC no P2P, NVL and above P2P)."""
    pairs = topo.pairs()
    if not pairs:
        raise ValueError("the level sweep needs a GPU pair; this topology has fewer than 2 GPUs")
    i, j = max(pairs, key=lambda p: (_level_index(topo.link(*p)), -p[0], -p[1]))
    link = topo.link(i, j)
    if link.kind == "NVLINK":
        return pairs[0][0], pairs[0][1], ("every GPU pair is NVLink, so each NCCL_P2P_LEVEL treats every pair "
                                          "alike; the sweep runs on GPUs "
                                          f"{pairs[0][0]} and {pairs[0][1]}")
    allow = levels_allowing_p2p(link)
    return i, j, (f"GPUs {i} and {j} are joined by {link.label}, the farthest pair: P2P is allowed from "
                  f"NCCL_P2P_LEVEL={allow[0]} up and not below")


def uniform_nvlink(topo: Topology) -> bool:
    """Whether every GPU pair is NVLink with the same label (e.g. NV12 everywhere: an NVSwitch
    machine, or two GPUs); False for a mesh, a PCIe machine or a single GPU."""
    labels = {topo.link(i, j).label for i, j in topo.pairs()}
    return len(labels) == 1 and topo.link(*topo.pairs()[0]).kind == "NVLINK"


def nvswitch_like(topo: Topology) -> bool:
    """More than two GPUs, every pair the same NVLink: the GPUs meet in an NVSwitch, where NVLink
    multicast (NVLS) may apply. (Two GPUs joined directly have no NVLS; ``nvidia-smi topo -m``
    shows no switch, so a uniform matrix of three or more GPUs is the sign of one. A board whose GPUs
    are all joined directly, with as many links per pair, reads the same: NCCL then finds no NVLS, and an
    NVLS-on sweep reads as the NVLS-off one, its NCCL log saying no NVLS was set up.)"""
    return len(topo.gpus) > 2 and uniform_nvlink(topo)


def restrict(topo: Topology, gpus) -> Topology:
    """``topo`` with only the GPUs ``gpus`` (:meth:`ddlab.system.topology.Topology.only`)."""
    return topo.only(gpus)


def visible_topology(topo: Topology, value: Optional[str] = None, inventory=None) -> Topology:
    """This machine's topology as the GPUs CUDA may use see it: under ``CUDA_VISIBLE_DEVICES`` (``value``;
    default the environment's) only the GPUs it names, with their ``nvidia-smi`` numbers, so that a pair
    picked from it is one of them (on 8 GPUs with two named, a pair experiment then runs on those two,
    not on GPUs the learner hid). Unchanged when the variable is not set or names a GPU the inventory
    cannot place (a MIG UUID)."""
    import os
    from ddlab.system import hardware
    value = os.environ.get("CUDA_VISIBLE_DEVICES") if value is None else value
    if value is None:
        return topo
    inv = inventory or hardware.inventory(software=False)
    seen = hardware.visible_gpus(value, inv.gpus, os.environ.get("CUDA_DEVICE_ORDER")).gpus
    if any(g is None for g in seen) or any(g.index not in topo.gpus for g in seen):
        return topo
    return restrict(topo, [g.index for g in seen])


def facts(topo: Topology) -> dict:
    """What a recording script needs to know of the GPU pairs: the count, whether one link peak
    holds for every pair, whether NVLS may apply, and the level sweep's pair."""
    d = {"gpus": len(topo.gpus), "pairs": len(topo.pairs()), "uniform_nvlink": False, "nvswitch": False,
         "level_pair": None, "level_pair_why": "fewer than 2 GPUs: no pair"}
    if topo.pairs():
        i, j, why = level_pair(topo)
        d.update(uniform_nvlink=uniform_nvlink(topo), nvswitch=nvswitch_like(topo), level_pair=[i, j],
                 level_pair_why=why, labels=sorted({topo.link(a, b).label for a, b in topo.pairs()}))
    return d


def _read(path: str) -> Topology:
    """A saved topology: a recorded one (JSON, as under source_code/reference/topologies/) or the text."""
    if path.endswith(".json"):
        with open(path, encoding="utf-8") as f:
            return Topology.from_dict(json.load(f))
    return Topology.from_file(path)


def main(argv: Optional[list] = None) -> int:
    import argparse
    p = argparse.ArgumentParser(prog="python -m ddlab.system.gpu_pairs",
                                description="The GPU pairs of this machine (or of a saved topology) as JSON.")
    p.add_argument("--topo-file", help="a saved `nvidia-smi topo -m` (text) or a recorded topology (JSON)")
    a = p.parse_args(argv)
    try:
        topo = _read(a.topo_file) if a.topo_file else Topology.from_system()
    except Exception as exc:  # no nvidia-smi, a matrix it cannot read: one line, and the script goes on
        print(json.dumps({"gpus": 0, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0]}"}))
        return 1
    print(json.dumps(facts(topo)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
