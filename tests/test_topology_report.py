"""ddlab.system.topology_report: the summary in words, the tables and the `ddlab topo` command."""
import json
import os

from ddlab import cli as ddlab_cli
from ddlab.system import topology, topology_report
from ddlab.system.topology import Topology

from test_topology import TOPO_DIR, fixture


def test_summary_in_plain_language():
    a100 = topology_report.summary(fixture("a100x8_nic_legend_tabs.txt"))
    assert a100.startswith("8 GPUs")
    assert "All 28 pairs NV12" in a100 and "NVSwitch" in a100
    assert "GPU0-1 sit below the same PCIe switches as mlx5_0 (PXB)" in a100
    assert "GPU0-3 on NUMA 0 (CPUs 0-31,64-95)" in a100
    dgx1 = topology_report.summary(topology.recorded("dgx1-v100"))
    assert "8 pairs NV2, 8 pairs NV1, 12 pairs SYS" in dgx1
    assert "GPU0-1 share a PCIe switch with mlx5_0 (PIX)" in dgx1
    assert "12 of 28 pairs have no NVLink" in dgx1
    two = topology_report.summary(fixture("vm2x_na_affinity.txt"))
    assert "GPU0-GPU1 is PHB: no NVLink" in two


def test_cli_file_prints_matrix_pairs_subsets_and_summary(capsys):
    assert topology_report.cli(["--file", os.path.join(TOPO_DIR, "pcie8x_two_switch_levels.txt")]) == 0
    out = capsys.readouterr().out
    assert "GPU0    X     PIX   PXB" in out
    assert "1  PIX   GPU0-GPU1, GPU2-GPU3, GPU4-GPU5, GPU6-GPU7" in out
    topo = Topology.from_file(os.path.join(TOPO_DIR, "pcie8x_two_switch_levels.txt"))
    assert topology_report.ranked_pairs_table(topo).rows[0] == {
        "place": 1, "label": "PIX", "pairs": "GPU0-GPU1, GPU2-GPU3, GPU4-GPU5, GPU6-GPU7"}
    subsets = topology_report.best_subsets_table(topo)
    assert subsets.column("k") == list(range(2, 9))                 # k = 2 .. 8 (8: the whole machine)
    assert subsets.rows[0] == {"k": 2, "gpus": "0,1", "ring": "0 -PIX- 1", "slowest": "PIX", "weakest": "PIX"}
    # All 8 GPUs: both PCIe switches' pairs, then across the sockets twice: the slowest link is SYS.
    assert subsets.rows[-1]["gpus"] == "0,1,2,3,4,5,6,7" and subsets.rows[-1]["slowest"] == "SYS"
    assert "k=" not in out and "best ring" in out and "0 -PIX- 1" in out
    assert "GPU0-1 share a PCIe switch with mlx5_0 (PIX)" in out


def test_cli_json(capsys):
    assert topology_report.cli(["--recorded", "dgx1-v100", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["links"]["0-3"] == "NV2" and d["best_subsets"]["4"]["weakest"] == "NV1"
    assert d["best_subsets"]["5"]["weakest"] == "SYS" and d["best_subsets"]["5"]["ring_bottleneck"] == "NV1"
    assert d["best_subsets"]["8"]["ring_links"] == ["NV2"] * 8
    assert d["ranked_pairs"][0]["label"] == "NV2" and d["provenance"]["cited"] is True
    assert d["summary"].startswith("8 GPUs")


def test_cli_without_gpu_says_so_and_lists_recorded_machines(capsys, monkeypatch):
    monkeypatch.setattr(topology.shutil, "which", lambda name: None)
    assert topology_report.cli([]) == 1
    out = capsys.readouterr().out
    assert "nvidia-smi was not found" in out
    assert "Recorded machines:" in out and "dgx1-v100" in out and "pcie-4gpu" in out
    assert "Traceback" not in out


def test_cli_errors_are_one_line_not_tracebacks(capsys, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("\tGPU0\tGPU1\nGPU0\t X \tNV2\nGPU1\tPIX\t X \n")
    assert topology_report.cli(["--file", str(bad)]) == 1
    assert "expected a symmetric matrix" in capsys.readouterr().out
    assert topology_report.cli(["--file", str(tmp_path / "missing.txt")]) == 1
    assert "missing.txt" in capsys.readouterr().out
    assert topology_report.cli(["--recorded", "nope"]) == 1
    assert "available: " in capsys.readouterr().out
    assert topology_report.cli(["--file", str(bad), "--save", "x"]) == 2


def test_cli_list_and_dispatch_through_ddlab(capsys):
    assert topology_report.cli(["--list"]) == 0
    assert "dgx-a100" in capsys.readouterr().out
    assert ddlab_cli.main(["topo", "--recorded", "pcie-4gpu"]) == 0
    assert "illustrative example, not a measurement" in capsys.readouterr().out


def test_subset_lesson_is_computed_from_the_matrix():
    dgx1 = topology.recorded("dgx1-v100")
    text = topology_report.subset_lesson(dgx1, [0, 1, 4, 5])
    # the ring avoids the two SYS pairs and has the best 4's bottleneck (NV1); the best wins on the tie-break
    assert "0 -NV1- 1 -NV2- 5 -NV1- 4 -NV2- 0" in text and "same slowest link, NV1" in text
    assert "GPU0-GPU5, GPU1-GPU4: SYS" in text and "not on the ring" in text
    assert "span 2 NUMA nodes" in text
    assert "GPU0 mlx5_0 (PIX), GPU1 mlx5_0 (PIX), GPU4 mlx5_2 (PIX), GPU5 mlx5_2 (PIX), 2 of the machine's 4 NICs" in text
    worse = topology_report.subset_lesson(dgx1, [0, 5])
    assert "ring at NV2" in worse and "SYS link sets a slower pace" in worse
    best = topology_report.subset_lesson(dgx1, [0, 1, 2, 3])
    assert "This is the best set of 4." in best and "NUMA" not in best and "not on the ring" not in best


def test_subset_lesson_without_nics_says_nothing_of_them():
    h200 = topology.recorded("h200x2")
    text = topology_report.subset_lesson(h200, h200.gpus[:2])
    assert "This is the best set of 2." in text and "NIC" not in text
