"""ddlab.system.topology and ddlab.system.topology_parse: parsing every shape of `nvidia-smi topo -m`,
the Topology model, recorded machines and the live path."""
import glob
import json
import os
import stat
import warnings

import pytest

from ddlab.base import reference
from ddlab.system import links, topology, topology_ranking
from ddlab.system.topology import NoGPUError, Topology, TopologyParseError, parse_topo_matrix
from ddlab.system.topology_parse import parse_link

HERE = os.path.dirname(os.path.abspath(__file__))
TOPO_DIR = os.path.join(HERE, "fixtures", "topo")
H200_TOPO = os.path.join(TOPO_DIR, "h200x2.txt")


def fixture(name):
    return Topology.from_file(os.path.join(TOPO_DIR, name))


# ------------------------------------------------------------------------ every fixture variation
# name -> (gpus, nics, {pair: label}, gpu0 cpu affinity, gpu0 numa affinity, gpu0 GPU NUMA ID)
EXPECTED = {
    "a100x8_nic_legend_tabs.txt": (8, ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_6", "mlx5_bond_0"],
                                   {(0, 7): "NV12", (3, 4): "NV12"}, "0-31,64-95", "0", None),
    "rtx2x_nv4_ansi_header.txt": (2, [], {(0, 1): "NV4"}, "0-23", "0", None),
    "p100x8_dgx1_mlx5_soc.txt": (8, ["mlx5_0", "mlx5_2", "mlx5_1", "mlx5_3"],
                                 {(0, 1): "NV1", (0, 4): "NV1", (0, 5): "SOC", (3, 7): "NV1"}, "0-19,40-59", None, None),
    "k80x4_spaces_mlx4_oldest_legend.txt": (4, ["mlx4_0"], {(0, 1): "PIX", (0, 2): "PHB", (2, 3): "PIX"},
                                            "0-11", None, None),
    "pcie4x_spaces_node_sys_no_legend.txt": (4, [], {(0, 1): "NODE", (1, 2): "SYS"}, "0-15,32-47", "0", None),
    "gh200x1_gpu_numa_id.txt": (1, [], {}, "0-71", "0", "1"),
    "v100x16_nv6_all_pairs.txt": (16, [], {(0, 15): "NV6", (7, 8): "NV6"}, "0-23,48-71", "0", None),
    "pcie3x_no_affinity_crlf.txt": (3, [], {(0, 1): "PIX", (1, 2): "PXB", (0, 2): "PHB"}, None, None, None),
    "h100x2_forum_paste_double_spaced.txt": (2, ["mlx5_0", "mlx5_1"], {(0, 1): "NV18"}, "0-63", "0", None),
    "v100x4_glued_header.txt": (4, ["mlx5_0"], {(0, 1): "NV2", (1, 2): "SYS"}, "0-9,20-29", None, None),
    "vm2x_na_affinity.txt": (2, [], {(0, 1): "PHB"}, "0-7", None, None),
    "pcie8x_two_switch_levels.txt": (8, ["mlx5_0", "mlx5_1"], {(0, 1): "PIX", (0, 3): "PXB", (3, 4): "SYS"},
                                     "0-23,48-71", "0", None),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_parses_to_the_expected_facts(name):
    n, nics, links, cpu, numa, gpu_numa = EXPECTED[name]
    t = fixture(name)
    assert t.gpus == list(range(n))
    assert t.nics == nics
    for (i, j), label in links.items():
        assert t.link(i, j).label == label
        assert t.link(j, i).label == label
    assert t.cpu_affinity[0] == cpu
    assert t.numa_affinity[0] == numa
    assert t.gpu_numa_id[0] == gpu_numa


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(TOPO_DIR, "*.txt"))),
                         ids=lambda p: os.path.basename(p))
def test_every_topo_fixture_is_consistent(path):
    """Runs over every file in tests/fixtures/topo, including captures added later. Files named
    *_cut_* are pastes cut off after their GPU rows: they warn; every other file must not."""
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        t = Topology.from_file(path)
    said = [str(w.message) for w in rec if issubclass(w.category, topology.TopologyWarning)]
    assert bool(said) == ("_cut_" in os.path.basename(path)), said
    assert t.warnings == [m.split("cut off: ", 1)[1] for m in said]
    assert t.gpus, "a topology has at least one GPU"
    pairs = [p for g in topology_ranking.ranked_pairs(t) for p in g.pairs]
    assert sorted(pairs) == t.pairs()  # every pair ranked exactly once
    ranks = [g.rank for g in topology_ranking.ranked_pairs(t)]
    assert ranks == sorted(ranks, reverse=True) and len(set(ranks)) == len(ranks)
    for col in t.nic_columns:
        for g in t.gpus:
            assert t.nic_link(g, col).kind in links.LINK_KINDS


def test_h200x2_capture_shows_nv18():
    assert os.path.exists(H200_TOPO), (f"{H200_TOPO} is committed (captured with `nvidia-smi topo -m` on the "
                                       "2x H200 machine): restore it from git")
    t = Topology.from_file(H200_TOPO)
    assert t.gpus == [0, 1]
    link = t.link(0, 1)
    assert (link.label, link.kind, link.nvlinks) == ("NV18", "NVLINK", 18)


def test_nic_legend_maps_nic_columns_and_nic_link_accepts_every_name():
    t = fixture("a100x8_nic_legend_tabs.txt")
    assert t.nic_columns == ["NIC0", "NIC1", "NIC2", "NIC3", "NIC4", "NIC5"]
    assert t.nic_link(0, "mlx5_0").label == "PXB"
    assert t.nic_link(0, "NIC0").label == "PXB"
    assert t.nic_link(0, 0).label == "PXB"
    assert t.nic_link(5, "mlx5_bond_0").label == "NODE"
    assert t.nic_link(0, "mlx5_bond_0").label == "SYS"
    with pytest.raises(KeyError, match="mlx5_9"):
        t.nic_link(0, "mlx5_9")


def test_mlx5_columns_without_legend_keep_their_printed_names():
    t = fixture("p100x8_dgx1_mlx5_soc.txt")
    assert t.nic_columns == t.nics == ["mlx5_0", "mlx5_2", "mlx5_1", "mlx5_3"]
    assert t.nic_link(0, "mlx5_0").label == "PIX"
    assert t.nic_link(4, "mlx5_0").kind == "SYS"  # SOC is the old name of SYS


def test_ansi_codes_are_stripped_also_when_the_escape_byte_was_lost():
    with_esc = "\t\x1b[4mGPU0\tGPU1\tCPU Affinity\x1b[0m\nGPU0\t X \tNV8\t0-7\nGPU1\tNV8\t X \t0-7\n"
    lost_esc = "\t[4mGPU0\tGPU1\tCPU Affinity[0m\nGPU0\t X \tNV8\t0-7\nGPU1\tNV8\t X \t0-7\n"
    for text in (with_esc, lost_esc):
        t = parse_topo_matrix(text)
        assert t.link(0, 1).label == "NV8" and t.cpu_affinity == {0: "0-7", 1: "0-7"}


def test_tab_cells_keep_position_when_a_value_is_empty():
    # Three trailing cells for three columns: the empty first one is an empty CPU Affinity.
    text = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \tSYS\t\t0\tN/A\nGPU1\tSYS\t X \t\t1\tN/A\n"
    t = parse_topo_matrix(text)
    assert t.cpu_affinity == {0: None, 1: None}
    assert t.numa_affinity == {0: "0", 1: "1"}
    assert t.gpu_numa_id == {0: None, 1: None}


def test_nvidia_smi_extra_tab_before_gpu_numa_id_is_not_an_empty_column():
    text = "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t0-23\t1\t\t3\n"
    t = parse_topo_matrix(text)
    assert (t.cpu_affinity[0], t.numa_affinity[0], t.gpu_numa_id[0]) == ("0-23", "1", "3")


def test_space_separated_row_missing_a_value_is_placed_by_pattern():
    # Spaces hide empty cells: values are placed in order into the columns they fit, the
    # earliest column first, and a column no value fits stays None.
    text = "GPU0 GPU1 CPU Affinity NUMA Affinity\nGPU0 X PHB 0-7\nGPU1 PHB X 0-7\n"
    t = parse_topo_matrix(text)
    assert t.cpu_affinity == {0: "0-7", 1: "0-7"} and t.numa_affinity == {0: None, 1: None}
    text = "GPU0 CPU Affinity GPU NUMA ID\nGPU0 X N/A 2\n"
    assert parse_topo_matrix(text).gpu_numa_id == {0: "2"}


def test_markdown_table_paste():
    text = ("| | GPU0 | GPU1 | NIC0 |\n|---|---|---|---|\n| GPU0 | X | NV18 | PIX |\n"
            "| GPU1 | NV18 | X | SYS |\n| NIC0 | PIX | SYS | X |\n")
    with pytest.warns(topology.TopologyWarning, match="no NIC Legend for NIC0:"):  # the paste stops at the matrix
        t = parse_topo_matrix(text)
    assert t.link(0, 1).label == "NV18" and t.nic_link(1, "NIC0").label == "SYS"


def test_header_phrases_are_recognised_without_tabs():
    t = fixture("pcie4x_spaces_node_sys_no_legend.txt")
    assert t.affinity_columns == ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]
    assert t.numa_affinity == {0: "0", 1: "0", 2: "1", 3: "1"}


def test_prompt_lines_legend_and_crlf_are_ignored():
    t = fixture("pcie3x_no_affinity_crlf.txt")
    assert t.gpus == [0, 1, 2] and t.affinity_columns == []
    with open(os.path.join(TOPO_DIR, "pcie3x_no_affinity_crlf.txt"), newline="") as f:
        assert "\r\n" in f.read()  # the fixture really has Windows line ends


def test_text_is_kept_verbatim():
    path = os.path.join(TOPO_DIR, "rtx2x_nv4_ansi_header.txt")
    with open(path) as f:
        raw = f.read()
    assert Topology.from_file(path).text == raw


# ------------------------------------------------------------------------ links and ranks
def test_link_kinds_and_rank_order():
    labels = ["NV18", "NV12", "NV2", "NV1", "PIX", "PXB", "PHB", "NODE", "SYS"]
    ranks = [parse_link(x).rank for x in labels]
    assert ranks == sorted(ranks, reverse=True) and len(set(ranks)) == len(ranks)
    assert parse_link("SOC").rank == parse_link("SYS").rank
    assert parse_link("SOC").kind == "SYS" and parse_link("SOC").label == "SOC"
    nv = parse_link("NV12")
    assert (nv.kind, nv.nvlinks) == ("NVLINK", 12)
    assert parse_link("PXB").nvlinks == 0
    with pytest.raises(ValueError, match="unknown link label"):
        parse_link("QPI")
    with pytest.raises(ValueError):
        parse_link("NV0")


def test_link_errors():
    t = fixture("rtx2x_nv4_ansi_header.txt")
    with pytest.raises(ValueError, match="same GPU"):
        t.link(0, 0)
    with pytest.raises(KeyError, match="no GPU 5"):
        t.link(0, 5)


# ------------------------------------------------------------------------ malformed input
BAD = [
    ("no header at all", "hello\nworld\n", r"no line starts with GPU0"),
    ("rows without a header", "GPU0\t X \tNV1\nGPU1\tNV1\t X \n", r"line 1 .*no header row"),
    ("ragged row", "\tGPU0\tGPU1\tGPU2\nGPU0\t X \tPIX\tPIX\nGPU1\tPIX\t X \nGPU2\tPIX\tPIX\t X \n",
     r"line 3: row GPU1 has 2 link cells, expected 3"),
    ("ragged row before affinity", "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \t0-7\nGPU1\tPIX\t X \t0-7\n",
     r"line 2: row GPU0 has 1 link cells, expected 2"),
    ("unknown label", "\tGPU0\tGPU1\nGPU0\t X \tQPI\nGPU1\tQPI\t X \n",
     r"line 2 \(row GPU0, column GPU1\): unknown link label 'QPI'"),
    ("asymmetric", "\tGPU0\tGPU1\nGPU0\t X \tNV2\nGPU1\tPIX\t X \n",
     r"line 2 \(row GPU0\): GPU0-GPU1 is 'NV2' but line 3 \(row GPU1\) says GPU1-GPU0 is 'PIX'; expected a symmetric"),
    ("missing GPU row", "\tGPU0\tGPU1\tGPU2\tNIC0\nGPU0\t X \tPIX\tPIX\tPIX\nGPU1\tPIX\t X \tPIX\tPIX\n\nLegend:\n",
     r"without the GPU row GPU2 \(the header on line 1 names 3 GPUs: GPU0 GPU1 GPU2\)"),
    ("duplicate row", "\tGPU0\tGPU1\nGPU0\t X \tPIX\nGPU0\t X \tPIX\nGPU1\tPIX\t X \n",
     r"line 3: a second row for GPU0 \(the first is line 2\)"),
    ("row not in header", "\tGPU0\tGPU1\nGPU0\t X \tPIX\nGPU2\tPIX\t X \n",
     r"line 3: row 'GPU2' is not a column of the header"),
    ("extra row after the matrix", "\tGPU0\tGPU1\nGPU0\t X \tPIX\nGPU1\tPIX\t X \nGPU2\tPIX\tPIX\t X \n",
     r"line 4: row 'GPU2' is not a column of the header"),
    ("X off the diagonal", "\tGPU0\tGPU1\nGPU0\t X \t X \nGPU1\t X \t X \n", r"may appear only on the diagonal"),
    ("diagonal not X", "\tGPU0\tGPU1\nGPU0\tPIX\tPIX\nGPU1\tPIX\t X \n", r"line 2 \(row GPU0\): the diagonal cell must"),
    ("too many values", "\tGPU0\tCPU Affinity\nGPU0\t X \t0-7\t0\t5\n", r"line 2: row GPU0 has 3 values after"),
    ("empty", "", r"no line starts with GPU0"),
]


@pytest.mark.parametrize("what,text,message", BAD, ids=[b[0] for b in BAD])
def test_malformed_text_raises_a_clear_error(what, text, message):
    with pytest.raises(TopologyParseError, match=message):
        parse_topo_matrix(text)


# ------------------------------------------------------------------------ pastes cut off
A100 = os.path.join(TOPO_DIR, "a100x8_nic_legend_tabs.txt")


def test_paste_cut_after_the_gpu_rows_reads_the_gpu_matrix_with_a_warning():
    full = fixture("a100x8_nic_legend_tabs.txt")
    with pytest.warns(topology.TopologyWarning) as rec:
        t = fixture("a100x8_cut_after_gpu_rows.txt")
    said = [str(w.message) for w in rec]
    assert len(said) == 2, said
    assert "cut off: the text ends without the NIC rows NIC0, NIC1, NIC2, NIC3, NIC4, NIC5" in said[0]
    assert "no NIC Legend for NIC0, NIC1, NIC2, NIC3, NIC4, NIC5" in said[1]
    assert len(t.warnings) == 2 and "NIC rows" in t.warnings[0] and "NIC Legend" in t.warnings[1]
    assert t.gpus == full.gpus
    assert {p: t.link(*p).label for p in t.pairs()} == {p: full.link(*p).label for p in full.pairs()}
    # the GPU-NIC links are in the GPU rows, so they are kept; without the legend NICs keep their column names
    assert t.nics == ["NIC0", "NIC1", "NIC2", "NIC3", "NIC4", "NIC5"]
    assert [t.nic_link(g, 0).label for g in t.gpus] == [full.nic_link(g, 0).label for g in full.gpus]
    assert t.cpu_affinity == full.cpu_affinity
    assert "?" in str(t.matrix_table())  # NIC-NIC links are unknown, not invented


def test_paste_cut_inside_a_nic_row_reads_the_rest_with_a_warning():
    full = fixture("h100x2_forum_paste_double_spaced.txt")
    with pytest.warns(topology.TopologyWarning) as rec:
        t = fixture("h100x2_cut_in_nic_rows.txt")
    said = [str(w.message) for w in rec]
    assert any("row NIC1 is cut off after 2 of its 4 link cells" in m for m in said), said
    assert any("without the NIC row NIC1" in m for m in said), said
    assert t.link(0, 1).label == "NV18" and t.nic_link(1, "NIC1").label == full.nic_link(1, "mlx5_1").label
    assert t.nic_link(0, "NIC0").label == "PIX"


def test_paste_cut_before_the_nic_legend_warns_that_nics_keep_their_column_names():
    with pytest.warns(topology.TopologyWarning, match="no NIC Legend for NIC0, NIC1, NIC2, NIC3, NIC4, NIC5"):
        t = fixture("a100x8_cut_before_nic_legend.txt")
    assert t.nics == t.nic_columns and t.link(3, 4).label == "NV12"
    assert len(t.warnings) == 1


@pytest.mark.parametrize("keep", [1, 6, 8])
def test_paste_cut_inside_the_gpu_rows_fails_naming_the_missing_gpu_rows(keep):
    lines = open(A100).read().splitlines()[:1 + keep]  # header and the first `keep` GPU rows
    missing = [f"GPU{g}" for g in range(keep, 8)]
    if not missing:  # the last GPU row cut short in the middle
        lines[-1] = "\t".join(lines[-1].split("\t")[:5])
        with pytest.raises(TopologyParseError, match=r"line 9: row GPU7 has 4 link cells, expected 14 .*cut off"):
            parse_topo_matrix("\n".join(lines))
        return
    with pytest.raises(TopologyParseError) as ei:
        parse_topo_matrix("\n".join(lines))
    assert f"without the GPU rows {', '.join(missing)} (the header on line 1 names 8 GPUs" in str(ei.value)


def test_a_complete_paste_gives_no_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = fixture("a100x8_nic_legend_tabs.txt")
    assert t.warnings == []


def test_parse_error_is_a_value_error_and_needs_text():
    assert issubclass(TopologyParseError, ValueError)
    with pytest.raises(TypeError):
        parse_topo_matrix(None)


def test_matrix_table_realigns_and_names_nics():
    table = str(fixture("a100x8_nic_legend_tabs.txt").matrix_table()).splitlines()
    assert table[0].split()[:9] == ["GPU0", "GPU1", "GPU2", "GPU3", "GPU4", "GPU5", "GPU6", "GPU7", "mlx5_0"]
    assert set(table[1].replace(" ", "")) == {"-"}
    assert table[2].split()[:3] == ["GPU0", "X", "NV12"]
    assert any(line.startswith("mlx5_bond_0") for line in table)


# ------------------------------------------------------------------------ dict round trip and recorded machines
def test_to_dict_from_dict_round_trip_through_json():
    t = fixture("a100x8_nic_legend_tabs.txt")
    d = json.loads(json.dumps(t.to_dict()))
    assert d["links"]["0-1"] == "NV12" and d["nic_links"]["0"]["mlx5_0"] == "PXB"
    back = Topology.from_dict(d)
    assert back.text == t.text and back.nics == t.nics and back.link(2, 6).label == "NV12"
    d["links"]["0-1"] = "PIX"
    with pytest.raises(ValueError, match="stored as 'PIX'"):
        Topology.from_dict(d)
    with pytest.raises(ValueError, match="raw"):
        Topology.from_dict({"name": "x"})


def test_recorded_machines_exist_with_provenance():
    names = topology.recorded_names()
    assert {"dgx1-v100", "dgx-a100", "pcie-4gpu"} <= set(names)
    for name in names:
        t = topology.recorded(name)
        assert t.provenance, name
        assert t.text.strip(), name


def test_recorded_dgx1_is_a_hybrid_cube_mesh_and_cited():
    t = topology.recorded("dgx1-v100")
    assert t.provenance["cited"] is True and "white paper" in t.provenance["source"]
    assert len(t.gpus) == 8 and len(t.nics) == 4
    for g in t.gpus:  # six NVLinks per V100, as the white paper says
        assert sum(t.link(g, h).nvlinks for h in t.gpus if h != g) == 6
    nv_pairs = [(a, b) for a, b in t.pairs() if t.link(a, b).kind == "NVLINK"]
    assert len(nv_pairs) == 16  # twelve cube edges plus four face diagonals


def test_recorded_dgx_a100_and_pcie_box():
    a100 = topology.recorded("dgx-a100")
    assert a100.provenance["cited"] is True and a100.provenance["source"]
    assert {a100.link(a, b).label for a, b in a100.pairs()} == {"NV12"}
    assert a100.nics == [f"mlx5_{i}" for i in range(8)]
    assert a100.nic_link(0, "mlx5_0").label == "PXB" and a100.nic_link(0, "mlx5_7").label == "SYS"
    box = topology.recorded("pcie-4gpu")
    assert box.provenance["illustrative"] is True and box.provenance["cited"] is False
    labels = {box.link(a, b).label for a, b in box.pairs()} | {box.nic_link(g, n).label for g in box.gpus
                                                                for n in box.nics}
    assert labels == {"PIX", "PXB", "NODE", "SYS"}
    assert all(box.link(a, b).kind != "NVLINK" for a, b in box.pairs())


def test_recorded_unknown_name_lists_the_known_ones():
    with pytest.raises(reference.ReferenceMissing, match="dgx1-v100"):
        topology.recorded("no-such-machine")


def test_recorded_loads_any_json_in_the_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(reference, "REFERENCE_DIR", str(tmp_path))
    t = fixture("rtx2x_nv4_ansi_header.txt")
    path = topology.save_recorded("my-box", t, {"cited": False, "source": "a test"}, description="two GPUs")
    assert path == str(tmp_path / "topologies" / "my-box.json")
    assert topology.recorded_names() == ["my-box"]
    back = topology.recorded("my-box")
    assert back.link(0, 1).label == "NV4" and back.provenance == {"cited": False, "source": "a test"}
    assert back.description == "two GPUs"
    with pytest.raises(ValueError, match="names are letters"):
        topology.save_recorded("../evil", t, {"cited": False})


# ------------------------------------------------------------------------ this machine
def fake_smi(tmp_path, monkeypatch, script):
    exe = tmp_path / "nvidia-smi"
    exe.write_text("#!/bin/sh\n" + script)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")


def test_from_system_without_nvidia_smi(monkeypatch):
    monkeypatch.setattr(topology.shutil, "which", lambda name: None)
    with pytest.raises(NoGPUError, match="nvidia-smi was not found") as err:
        Topology.from_system()
    assert isinstance(err.value, RuntimeError)
    assert "dgx1-v100" in str(err.value)


def test_from_system_driver_failure_is_a_clear_message(tmp_path, monkeypatch):
    fake_smi(tmp_path, monkeypatch, "echo \"NVIDIA-SMI has failed because it couldn't communicate with the "
                                    "NVIDIA driver.\" >&2\nexit 9\n")
    with pytest.raises(NoGPUError, match=r"exit code 9\): NVIDIA-SMI has failed"):
        Topology.from_system()


def test_from_system_times_out_cleanly(tmp_path, monkeypatch):
    fake_smi(tmp_path, monkeypatch, "exec sleep 5\n")
    with pytest.raises(NoGPUError, match="did not answer within 1 s"):
        Topology.from_system(timeout=1)


def test_from_system_reads_the_matrix(tmp_path, monkeypatch):
    src = os.path.join(TOPO_DIR, "a100x8_nic_legend_tabs.txt")
    fake_smi(tmp_path, monkeypatch, f'if [ "$1" = topo ]; then cat "{src}"; else exit 6; fi\n')
    t = Topology.from_system()
    assert t.gpus == list(range(8)) and t.link(0, 1).label == "NV12" and t.name == "this machine"


def test_from_system_with_no_gpu_listed(tmp_path, monkeypatch):
    fake_smi(tmp_path, monkeypatch, "echo 'No devices were found'\n")
    with pytest.raises(NoGPUError, match="lists no GPU"):
        Topology.from_system()
