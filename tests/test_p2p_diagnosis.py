"""Reading a p2p matrix (ddlab.measure.p2p_diagnosis): the summary, slow GPUs, asymmetric pairs,
the best ring subset, the diagnosis."""
import numpy as np
import pytest

from _p2p_fixtures import fixture
from ddlab.measure import p2p, p2p_diagnosis, p2p_parse


# ============================================================================ summary
def test_summary_two_gpus_with_link_peak():
    r = p2p_parse.parse(fixture("nvidia_sample_2gpu.txt"))
    s = p2p_diagnosis.summary(r, link_peak_gbps=450.0)
    assert "best 360.0 GB/s (GPU 1 -> 0)" in s and "worst 300.0 GB/s (GPU 0 -> 1)" in s
    assert "80% of the link's peak, 450 GB/s per direction, as measured" in s
    assert "headers" not in s and "CRC" not in s         # what takes the rest was never measured
    assert "Peer access is 10.8x faster" in s  # (300+360)/2 / ((30+31)/2)
    assert "0 <-> 1 (300.0 vs 360.0 GB/s)" in s  # 17% apart: asymmetric
    assert "Outlier" not in s


def test_summary_finds_outlier_gpu_and_missing_peers():
    r = p2p_parse.parse(fixture("nvidia_sample_4gpu_reads.txt"))
    s = p2p_diagnosis.summary(r)
    assert "GPU 3's pairs average" in s
    assert "0 <-> 1 (35.0 vs 50.0 GB/s)" in s
    assert "No peer access for: 0 -> 3, 3 -> 0" in s
    assert "GPU-timed latency: 1.50 us with peer access against 12.00 us host-staged" in s


def test_summary_says_when_p2p_does_not_help():
    text = fixture("nvidia_sample_2gpu.txt").replace(" 300.00 ", "  30.50 ").replace(" 360.00 ", "  31.50 ")
    s = p2p_diagnosis.summary(p2p_parse.parse(text))
    assert "Peer access barely helps" in s


def test_summary_marks_synthetic_results():
    assert p2p_diagnosis.summary(p2p_parse.parse(fixture("ours_format_demo_3gpu.txt"))).startswith("SYNTHETIC")


def test_outlier_and_asymmetry_helpers():
    m = np.array([[0, 10, 5], [10, 0, 5], [5, 5, 0]], dtype=float)
    assert [g for g, _, _ in p2p_diagnosis.outlier_gpus(m, [0, 1, 2])] == [2]
    assert p2p_diagnosis.outlier_gpus(np.full((3, 3), 7.0), [0, 1, 2]) == []
    assert p2p_diagnosis.outlier_gpus(m[:2, :2], [0, 1]) == []  # two GPUs: nobody to compare with
    m[0, 2] = 9.0
    assert [(a, b) for a, b, _, _ in p2p_diagnosis.asymmetric_pairs(m, [0, 1, 2])] == [(0, 2)]


# ============================================================================ diagnosis
def _four_gpus():
    """4 GPUs at 24 GB/s; GPU 3 at a third of that with everyone; 0 -> 1 only 14 GB/s."""
    m = np.full((4, 4), 24.0)
    m[3, :] = m[:, 3] = 8.0
    m[0, 1] = 14.0
    np.fill_diagonal(m, 400.0)
    return m


def test_diagnose_finds_the_slow_gpu_the_asymmetric_pair_and_the_best_ring():
    d = p2p_diagnosis.diagnose(_four_gpus())
    assert d.outlier_labels == [3]
    assert d.asymmetric_labels == [(0, 1)]
    assert d.k == 3 and set(d.best_ring) == {0, 1, 2}
    # the ring must run 1 -> 0 (24 GB/s), never 0 -> 1 (14 GB/s): 0 -> 2 -> 1 -> 0
    assert d.best_ring == (0, 2, 1) and d.ring_bottleneck == pytest.approx(24.0)
    text = str(d)
    assert "Slow GPU: 3" in text and "Asymmetric pair: 0 -> 1 14.0 GB/s but 1 -> 0 24.0 GB/s" in text
    assert "width or generation" in text and "NUMA" in text and "ACS" in text
    # all four: the slow GPU is in every ring, so it sets the slowest hop
    assert p2p_diagnosis.diagnose(_four_gpus(), k=4).ring_bottleneck == pytest.approx(8.0)
    assert p2p_diagnosis.best_ring_subset(_four_gpus(), 2) == ((0, 2), 24.0)


def test_diagnose_of_a_healthy_matrix_and_labels():
    m = np.full((3, 3), 20.0)
    d = p2p_diagnosis.diagnose(m, labels=["a", "b", "c"])
    assert d.outliers == [] and d.asymmetric == [] and d.causes == []
    assert "No GPU stands out" in str(d) and "No asymmetric pair" in str(d)
    assert d.best_ring == ("a", "b", "c")


def test_diagnose_reads_a_p2p_result_and_skips_unmeasured_cells():
    m = _four_gpus()
    m[2, 0] = np.nan
    res = p2p.P2PResult(n=4, labels=[0, 1, 2, 3], variants={"uni_p2p_on": m})
    d = p2p_diagnosis.diagnose(res)
    assert d.outlier_labels == [3] and d.asymmetric_labels == [(0, 1)]


@pytest.mark.parametrize("bad,match", [
    (np.ones((2, 3)), "square"),
    ([[0, "x"], [1, 0]], "numbers"),
    (np.array([[0, -1.0], [1, 0]]), ">= 0"),
    (np.array([[0, np.inf], [1, 0]]), "finite"),
    (np.ones((1, 1)), "two GPUs"),
])
def test_diagnose_rejects_bad_matrices(bad, match):
    with pytest.raises(ValueError, match=match):
        p2p_diagnosis.diagnose(bad)


def test_helpers_check_their_arguments():
    with pytest.raises(ValueError, match="labels"):
        p2p_diagnosis.outlier_gpus(np.ones((3, 3)), [0, 1])
    with pytest.raises(ValueError, match="threshold"):
        p2p_diagnosis.asymmetric_pairs(np.ones((3, 3)), threshold=1.5)
    with pytest.raises(ValueError, match="k must be"):
        p2p_diagnosis.best_ring_subset(np.ones((3, 3)), 4)
    with pytest.raises(ValueError, match="too many"):
        p2p_diagnosis.best_ring_subset(np.ones((16, 16)), 10)


def test_the_live_runs_peaks_come_from_this_machines_topology_and_pcie_links():
    from types import SimpleNamespace
    from ddlab.system import links
    from ddlab.system.topology import parse_topo_matrix
    two = p2p_parse.parse(fixture("nvidia_sample_2gpu.txt"))
    assert two.n == 2
    nv18 = parse_topo_matrix("\tGPU0\tGPU1\nGPU0\t X \tNV18\nGPU1\tNV18\t X \n")
    inv = SimpleNamespace(gpus=[SimpleNamespace(name="NVIDIA H200"), SimpleNamespace(name="NVIDIA H200")])
    peaks = p2p_diagnosis.peaks_here(two, inv, topo=nv18, pcie_link_list=[])
    assert peaks.shape == (2, 2) and peaks[0, 1] == peaks[1, 0] == links.nvlink(4, 18).bandwidth_gbs
    assert np.isnan(peaks[0, 0])
    # a PCIe pair takes the lowest maximum generation of the GPUs' links
    pix = parse_topo_matrix("\tGPU0\tGPU1\nGPU0\t X \tPIX\nGPU1\tPIX\t X \n")
    gen5 = [SimpleNamespace(gen_max=5), SimpleNamespace(gen_max=5)]
    assert p2p_diagnosis.peaks_here(two, inv, topo=pix, pcie_link_list=gen5)[0, 1] == links.pcie_x16_gbs(5)
    assert p2p_diagnosis.peaks_here(two, inv, topo=pix, pcie_link_list=[])[0, 1] == links.pcie_x16_gbs(4)
    # more GPUs in the topology than in the run: one number when every pair has the same label, else None
    four_same = parse_topo_matrix("\tGPU0\tGPU1\tGPU2\nGPU0\t X \tNV12\tNV12\nGPU1\tNV12\t X \tNV12\n"
                                  "GPU2\tNV12\tNV12\t X \n")
    a100 = SimpleNamespace(gpus=[SimpleNamespace(name="NVIDIA A100-SXM4-80GB")])
    assert p2p_diagnosis.peaks_here(two, a100, topo=four_same, pcie_link_list=[]) == links.nvlink(3, 12).bandwidth_gbs
    mixed = parse_topo_matrix("\tGPU0\tGPU1\tGPU2\nGPU0\t X \tNV1\tSYS\nGPU1\tNV1\t X \tSYS\nGPU2\tSYS\tSYS\t X \n")
    assert p2p_diagnosis.peaks_here(two, a100, topo=mixed, pcie_link_list=[]) is None
    # an NVLink whose generation the GPU names do not give: no peak, not a wrong one
    unknown = SimpleNamespace(gpus=[SimpleNamespace(name="Some GPU")])
    assert p2p_diagnosis.peaks_here(two, unknown, topo=nv18, pcie_link_list=[]) is None
    assert links.nvlink_generation_of(["Tesla V100-SXM2-16GB"]) == 2 and links.nvlink_generation_of([]) is None
