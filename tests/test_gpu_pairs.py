"""ddlab.system.gpu_pairs on the recorded 2-, 4- and 8-GPU topologies: the level sweep's pair, one link
peak for every pair or not, and NVLS only where the GPUs meet in a switch."""
import json
import os
import subprocess
import sys

import pytest

from ddlab.system import gpu_pairs, nccl
from ddlab.system.topology import Topology

HERE = os.path.dirname(os.path.abspath(__file__))
TOPOLOGIES = os.path.join(HERE, "..", "source_code", "reference", "topologies")


def recorded(name):
    with open(os.path.join(TOPOLOGIES, name + ".json")) as f:
        return Topology.from_dict(json.load(f))


def test_level_pair_is_the_farthest_and_the_levels_differ_on_it():
    for name in ("dgx1-v100", "pcie-4gpu"):
        topo = recorded(name)
        i, j, _ = gpu_pairs.level_pair(topo)
        far = max(nccl.P2P_LEVELS.index(nccl.KIND_LEVEL[topo.link(a, b).kind]) for a, b in topo.pairs())
        assert nccl.P2P_LEVELS.index(nccl.KIND_LEVEL[topo.link(i, j).kind]) == far
        allowed = gpu_pairs.levels_allowing_p2p(topo.link(i, j))
        # on the chosen pair some levels allow P2P and more than LOC refuse it
        assert allowed and len(allowed) < len(nccl.P2P_LEVELS) - 1


def test_all_nvlink_machines_sweep_gpus_0_and_1():
    for name in ("dgx-a100", "h200x2"):
        i, j, why = gpu_pairs.level_pair(recorded(name))
        assert (i, j) == (0, 1) and why


def test_one_link_peak_only_where_every_pair_is_the_same_nvlink():
    assert gpu_pairs.uniform_nvlink(recorded("dgx-a100"))
    assert gpu_pairs.uniform_nvlink(recorded("h200x2"))
    assert not gpu_pairs.uniform_nvlink(recorded("dgx1-v100"))      # NV1, NV2 and SYS pairs
    assert not gpu_pairs.uniform_nvlink(recorded("pcie-4gpu"))


def test_nvls_only_behind_a_switch():
    assert gpu_pairs.nvswitch_like(recorded("dgx-a100"))
    assert not gpu_pairs.nvswitch_like(recorded("h200x2"))         # two GPUs joined directly
    assert not gpu_pairs.nvswitch_like(recorded("dgx1-v100"))


def test_facts_cli_reads_a_recorded_topology():
    out = subprocess.run([sys.executable, "-m", "ddlab.system.gpu_pairs", "--topo-file",
                          os.path.join(TOPOLOGIES, "dgx1-v100.json")], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=os.path.join(HERE, "..", "source_code")))
    d = json.loads(out.stdout)
    assert out.returncode == 0 and d["gpus"] == 8 and d["pairs"] == 28 and not d["nvswitch"]
    assert d["level_pair"] == list(gpu_pairs.level_pair(recorded("dgx1-v100"))[:2])


def test_one_gpu_has_no_pair():
    text = "\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t0-7\t0\n"
    from ddlab.system.topology import parse_topo_matrix
    topo = parse_topo_matrix(text)
    assert gpu_pairs.facts(topo)["level_pair"] is None
    with pytest.raises(ValueError):
        gpu_pairs.level_pair(topo)


def test_the_live_topology_keeps_the_gpus_cuda_visible_devices_names(monkeypatch):
    """On 8 GPUs with two named, the pairs a notebook may pick from are of those two, numbered as
    nvidia-smi numbers them (what a child's CUDA_VISIBLE_DEVICES then names)."""
    from ddlab.system import hardware
    from ddlab.system.topology_ranking import ranked_pairs
    topo = recorded("dgx1-v100")
    inv = hardware.Inventory(gpus=[hardware.GPU(index=i, name="Tesla V100-SXM2-16GB") for i in range(8)])
    assert gpu_pairs.visible_topology(topo, None, inv) is topo or "CUDA_VISIBLE_DEVICES" in os.environ
    two = gpu_pairs.visible_topology(topo, "5,0", inv)
    assert two.gpus == [0, 5] and two.pairs() == [(0, 5)] and two.link(0, 5).label == topo.link(0, 5).label
    assert [g.pairs for g in ranked_pairs(two)] == [[(0, 5)]]
    assert len(two.nics) == len(topo.nics) and "GPU3" not in str(two.matrix_table())
    four = gpu_pairs.visible_topology(topo, "0,1,2,3", inv)
    assert four.gpus == [0, 1, 2, 3] and len(four.pairs()) == 6
    assert gpu_pairs.visible_topology(topo, "MIG-abc", inv).gpus == topo.gpus      # cannot place it: all kept


def test_the_topology_part_of_a_notebook_shows_the_visible_gpus(monkeypatch):
    from ddlab.course import mode
    from ddlab.system import hardware, policy
    topo = recorded("dgx-a100")
    monkeypatch.setattr(Topology, "from_system", classmethod(lambda cls: recorded("dgx-a100")))
    monkeypatch.setattr(hardware, "inventory", lambda **kw: hardware.Inventory(
        gpus=[hardware.GPU(index=i, name="NVIDIA A100-SXM4-40GB") for i in range(8)]))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,6")
    shown = mode.live_or_recorded("topology", machine=policy.Machine(gpus=2, label="8x NVIDIA A100-SXM4-40GB, NV12"))
    assert shown.live and shown.value.gpus == [2, 6] and len(topo.gpus) == 8
