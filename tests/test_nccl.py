"""ddlab.system.nccl: the one home of the NCCL paths (environments, aliases, levels, multicast)."""
import json
import os
import subprocess
import sys

import pytest

from ddlab.course import checks
from ddlab.measure import collectives, collectives_cli, launch
from ddlab.system import links, nccl
from ddlab.system.topology import parse_topo_matrix


def test_paths_are_complete_environments():
    assert list(nccl.PATHS) == ["default", "shm", "socket", "LOC", "NVL", "PIX", "PXB", "PHB", "SYS"]
    assert nccl.COMPARED == ("default", "shm", "socket")
    assert dict(nccl.PATHS["default"].env) == {}
    assert dict(nccl.PATHS["shm"].env) == {"NCCL_P2P_LEVEL": "LOC", "NCCL_NET_DISABLE_INTRA": "1"}
    assert dict(nccl.PATHS["socket"].env) == {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1",
                                              "NCCL_IB_DISABLE": "1"}
    for level in nccl.P2P_LEVELS:
        assert dict(nccl.PATHS[level].env) == {"NCCL_P2P_LEVEL": level}
    assert set(nccl.VARIABLES) == {"NCCL_P2P_LEVEL", "NCCL_NET_DISABLE_INTRA", "NCCL_P2P_DISABLE",
                                   "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE"}
    # A variable left in the user's shell cannot turn "default" into another path.
    env = nccl.get("default").environment()
    assert all(env[k] is None for k in nccl.VARIABLES)
    env = nccl.get("shm").environment({"NCCL_DEBUG": "WARN"})
    assert env["NCCL_P2P_LEVEL"] == "LOC" and env["NCCL_P2P_DISABLE"] is None and env["NCCL_DEBUG"] == "WARN"
    with pytest.raises(ValueError, match="unknown NCCL path"):
        nccl.get("nvlnk")


def test_every_path_says_why_has_a_colour_and_a_transport():
    colours = [p.colour for p in nccl.PATHS.values()]
    assert len(set(colours)) == len(colours) and all(c.startswith("#") and len(c) == 7 for c in colours)
    for p in nccl.PATHS.values():
        assert len(p.why) > 20 and p.transport and p.multicast in nccl.MULTICAST_TEXT
    assert nccl.PATHS["shm"].transport == "SHM" and nccl.PATHS["socket"].transport == "NET/Socket"
    assert nccl.colour("shm") == nccl.PATHS["shm"].colour and nccl.colour("1 worker", "#000000") == "#000000"


@pytest.mark.parametrize("alias, name", [
    ("p2p", "default"), ("NVLink", "default"), ("p2p-off", "shm"), ("P2P off", "shm"), ("shared memory", "shm"),
    ("host", "shm"), ("sockets", "socket"), ("net", "socket"), ("TCP", "socket"), ("net/socket", "socket"),
    (" shm ", "shm"), ("pix", "PIX"), ("Sys", "SYS")])
def test_aliases(alias, name):
    assert nccl.get(alias).name == name
    assert nccl.get(nccl.PATHS[name]) is nccl.PATHS[name]


def test_a_typo_lists_the_choices():
    with pytest.raises(ValueError) as ei:
        nccl.get("shmm")
    msg = str(ei.value)
    assert "'shmm'" in msg and all(name in msg for name in nccl.PATHS) and "tcp" in msg and "0-5" in msg
    for bad in (None, True, 2.5, -1):
        with pytest.raises(ValueError):
            nccl.get(bad)


def test_legacy_integer_levels():
    # NCCL User Guide, "Integer Values (Legacy)": LOC 0, PIX 1, PXB 2, PHB 3, SYS 4; greater than 4: SYS
    assert [nccl.get(i).name for i in range(6)] == ["LOC", "PIX", "PXB", "PHB", "SYS", "SYS"]
    assert nccl.get(17).name == "SYS" and nccl.get("3").name == "PHB"
    assert "NVL" not in nccl.LEGACY_LEVELS.values()


class _Link:
    def __init__(self, label, kind, nvlinks=0, rank=0):
        self.label, self.kind, self.nvlinks, self.rank = label, kind, nvlinks, rank


# level -> the link kinds it allows P2P over (NODE counts as PHB)
ALLOWED = {
    "LOC": set(),
    "NVL": {"NVLINK"},
    "PIX": {"NVLINK", "PIX"},
    "PXB": {"NVLINK", "PIX", "PXB"},
    "PHB": {"NVLINK", "PIX", "PXB", "PHB", "NODE"},
    "SYS": {"NVLINK", "PIX", "PXB", "PHB", "NODE", "SYS"},
}


@pytest.mark.parametrize("level", nccl.P2P_LEVELS)
def test_p2p_level_is_a_maximum_distance(level):
    for kind in ("NVLINK", "PIX", "PXB", "PHB", "NODE", "SYS"):
        link = _Link(kind if kind != "NVLINK" else "NV4", kind, 4 if kind == "NVLINK" else 0)
        assert nccl.get(level).allows_p2p(link) is (kind in ALLOWED[level]), (level, kind)
        assert nccl.get(level).allows_p2p(kind.lower()) is (kind in ALLOWED[level])


def test_p2p_for_the_compared_paths():
    nv = _Link("NV4", "NVLINK", 4, 104)
    # PIX still allows NVLink: the level is a distance cap, not a choice of link
    assert nccl.get("PIX").allows_p2p(nv) and not nccl.get("LOC").allows_p2p(nv)
    assert nccl.get("shm").allows_p2p(nv) is False and nccl.get("socket").allows_p2p(nv) is False
    assert nccl.get("default").allows_p2p(nv) is None          # NCCL picks the level itself
    with pytest.raises(ValueError, match="unknown link kind"):
        nccl.get("PIX").allows_p2p(_Link("QPI", "QPI"))


def test_level_table_on_a_topology():
    topo = parse_topo_matrix("\tGPU0\tGPU1\tGPU2\nGPU0\t X \tNV2\tSYS\nGPU1\tNV2\t X \tPIX\nGPU2\tSYS\tPIX\t X \n")
    lt = nccl.level_table(topo)
    assert lt.total_pairs == 3 and [r["level"] for r in lt.rows] == list(nccl.P2P_LEVELS)
    assert lt.rows[3] == {"level": "PXB", "labels": ["NV2", "PIX"], "pairs": 2}
    table = str(lt).splitlines()                      # the text of lt.table(): header, rule, a row per level
    assert table[0].split() == ["NCCL_P2P_LEVEL", "P2P", "allowed", "over", "pairs", "(of", "3)"]
    assert table[2].split() == ["LOC", "none:", "P2P", "off", "0"]
    assert table[3].split() == ["NVL", "NV2", "1"]
    assert table[4].split() == ["PIX", "NV2,", "PIX", "2"]
    assert table[7].split() == ["SYS", "NV2,", "PIX,", "SYS", "3"]
    t = lt.table()
    assert t.column("labels")[2] == "NV2, PIX" and t.column("pairs") == [0, 1, 2, 2, 2, 3]
    assert "<table" in lt._repr_html_() and "none: P2P off" in lt._repr_html_()
    with pytest.raises(ValueError, match="fewer than two GPUs"):
        nccl.level_table(parse_topo_matrix("\tGPU0\nGPU0\t X \n"))


def test_environment_removes_stray_variables_and_keeps_inherited_multicast(monkeypatch):
    monkeypatch.setenv("NCCL_P2P_DISABLE", "1")         # left in the shell from an earlier experiment
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "0")         # set by a shared machine's administrators
    monkeypatch.delenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", raising=False)
    seen = launch.worker_environment(nccl.get("default").environment())
    assert "NCCL_P2P_DISABLE" not in seen and seen["NCCL_NVLS_ENABLE"] == "0"
    assert nccl.recorded_environment(seen) == {k: v for k, v in seen.items() if k.startswith("NCCL_")}
    assert nccl.recorded_environment(seen)["NCCL_NVLS_ENABLE"] == "0"
    # a path that does not turn multicast off never mentions it
    for name in ("default", "PIX", "LOC"):
        env = nccl.get(name).environment()
        assert not set(env) & set(nccl.MULTICAST_OFF), name
    # shm and socket turn it off (so NVLS cannot bypass the path); anyone may ask for it
    for name in ("shm", "socket"):
        assert {k: nccl.get(name).environment()[k] for k in nccl.MULTICAST_OFF} == dict(nccl.MULTICAST_OFF)
    env = nccl.get("default").environment({"NCCL_DEBUG": "INFO"}, multicast_off=True)
    assert env["NCCL_NVLS_ENABLE"] == "0" and env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    seen = launch.worker_environment(env)
    assert nccl.recorded_environment(seen)["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"


def test_multicast_is_stated_in_words():
    assert "NCCL decides" in nccl.get("default").describe()
    assert "NVLink multicast (NVLS) off" in nccl.get("default").describe(multicast_off=True)
    text = nccl.get("shm").describe()
    assert text.startswith("shm (NCCL_P2P_LEVEL=LOC NCCL_NET_DISABLE_INTRA=1)") and "NVLS) off" in text
    assert nccl.get("default").env_text() == "NCCL defaults"


def test_consumers_ask_nccl():
    assert checks.PATHS is nccl.COMPARED
    assert checks.parse_ordering("p2p > host > tcp") == nccl.COMPARED
    assert links.LINK_KINDS["NODE"]["nccl_p2p_level"] == nccl.KIND_LEVEL["NODE"] == "PHB"
    assert collectives_cli.cli_plan(2)[1] == list(nccl.COMPARED)
    for gone in ("PATHS", "PATH_VARIABLES", "path_env"):
        assert not hasattr(collectives, gone), gone
    for gone in ("p2p_allowed", "nccl_level_table", "NCCL_P2P_LEVELS", "NCCL_LEVEL_MEANING"):
        assert not hasattr(links, gone), gone
    for gone in ("PATH_ALIASES", "PATH_WHY"):
        assert not hasattr(checks, gone), gone


def test_importing_ddlab_changes_no_environment_variable():
    code = ("import json, os; before = dict(os.environ); import ddlab, ddlab.system.nccl, ddlab.measure.launch, "
            "ddlab.measure.collectives_run, ddlab.system.links, ddlab.system.topology, ddlab.course.checks, ddlab.training.models_keras; "
            "after = dict(os.environ); print(json.dumps({k: [before.get(k), after.get(k)] "
            "for k in set(before) | set(after) if before.get(k) != after.get(k)}))")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NCCL_", "TF_")) and k != "TORCH_SYMM_MEM_DISABLE_MULTICAST"}
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(nccl.__file__))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {}


def test_cli_gives_shell_scripts_the_settings(capsys):
    assert nccl.cli(["env", "shm"]) == 0
    words = capsys.readouterr().out.split()
    assert words == ["NCCL_P2P_LEVEL=LOC", "NCCL_NET_DISABLE_INTRA=1", "NCCL_NVLS_ENABLE=0",
                     "TORCH_SYMM_MEM_DISABLE_MULTICAST=1"]
    assert nccl.cli(["env", "default"]) == 0 and capsys.readouterr().out.strip() == ""
    assert nccl.cli(["env", "2", "--multicast-off"]) == 0
    assert capsys.readouterr().out.split() == ["NCCL_P2P_LEVEL=PXB", "NCCL_NVLS_ENABLE=0",
                                               "TORCH_SYMM_MEM_DISABLE_MULTICAST=1"]
    assert nccl.cli(["env", "shmm"]) == 2 and "unknown NCCL path 'shmm'" in capsys.readouterr().err
    assert nccl.cli(["list"]) == 0 and len(capsys.readouterr().out.splitlines()) == len(nccl.PATHS)


DGX1 = ("\tGPU0\tGPU1\tGPU2\tGPU3\nGPU0\t X \tNV1\tNV1\tSYS\nGPU1\tNV1\t X \tSYS\tSYS\n"
        "GPU2\tNV1\tSYS\t X \tPIX\nGPU3\tSYS\tSYS\tPIX\t X \n")


def test_level_table_routes_pairs_through_an_nvlinked_gpu():
    # GPU1-GPU2: no NVLink of their own, both NVLinked to GPU0 -> NCCL's NVB route; GPU2-GPU3 (PIX) and
    # GPU0-GPU3, GPU1-GPU3 (SYS, GPU3 has no NVLink) have no such route.
    topo = parse_topo_matrix(DGX1)
    assert nccl.nvb_via(topo, 1, 2) == 0 and nccl.nvb_via(topo, 0, 1) is None and nccl.nvb_via(topo, 0, 3) is None
    assert nccl.path_kind(topo, 1, 2) == "NVB" and nccl.path_kind(topo, 1, 2, nvb=False) == "SYS"
    assert nccl.path_kind(topo, 2, 3) == "PIX" and nccl.path_kind(topo, 0, 1) == "NVL"
    # NCCL sees only the job's GPUs: the relay must be a rank of the same job, so a 2-GPU job has none
    assert nccl.nvb_via(topo, 1, 2, job=(1, 2)) is None and nccl.path_kind(topo, 1, 2, job=(1, 2)) == "SYS"
    assert nccl.nvb_via(topo, 1, 2, job=(0, 1, 2)) == 0 and nccl.path_kind(topo, 1, 2, job=(1, 2, 3)) == "SYS"
    assert not nccl.level_allows("NVL", "NVB") and nccl.level_allows("PIX", "NVB")
    assert not nccl.level_allows("LOC", "NVL") and nccl.level_allows("SYS", "SYS")
    lt = nccl.level_table(topo)
    by_level = {r["level"]: r for r in lt.rows}
    assert by_level["NVL"] == {"level": "NVL", "labels": ["NV1"], "pairs": 2}
    assert by_level["PIX"] == {"level": "PIX", "labels": ["NV1", "SYS via NVB", "PIX"], "pairs": 4}
    assert by_level["PHB"]["pairs"] == 4 and by_level["SYS"]["pairs"] == 6 and lt.nvb_pairs == 1
    text = str(lt)
    assert "SYS via NVB" in text and "NCCL_NVB_DISABLE=1" in text and "channels" in text
    # Without NVB (NCCL_NVB_DISABLE=1) the pair is judged by its own SYS link, and the table says so.
    off = nccl.level_table(topo, nvb=False)
    assert {r["level"]: r["pairs"] for r in off.rows} == {"LOC": 0, "NVL": 2, "PIX": 3, "PXB": 3, "PHB": 3, "SYS": 6}
    assert "as with NCCL_NVB_DISABLE=1" in str(off) and off.nvb_pairs == 0
    # A machine where every pair has its own NVLink has no NVB route, and the note says so.
    assert "does not arise here" in str(nccl.level_table(parse_topo_matrix(
        "\tGPU0\tGPU1\nGPU0\t X \tNV18\nGPU1\tNV18\t X \n")))


def test_display_name_says_what_default_was():
    assert nccl.display_name("default", {"NCCL_NVLS_ENABLE": "0"}) == "NCCL default, NVLS off"
    assert nccl.display_name("default", {"NCCL_NVLS_ENABLE": "1"}) == "NCCL default"
    assert nccl.display_name("p2p") == "NCCL default" and nccl.display_name("default", None) == "NCCL default"
    assert nccl.display_name("shm", {"NCCL_NVLS_ENABLE": "0"}) == "shm" and nccl.display_name("PIX") == "PIX"
    assert nccl.display_name("1 worker") == "1 worker" and nccl.display_name("gloo") == "gloo"
    assert nccl.multicast_was_off({"NCCL_NVLS_ENABLE": " 0"}) and not nccl.multicast_was_off({})
    # under every recorded table: one short clause (notebook 4 explains NVLS once)
    assert "NCCL_NVLS_ENABLE=0" in nccl.MULTICAST_OFF_WHY and len(nccl.MULTICAST_OFF_WHY.split()) <= 15


def test_pair_levels_predict_each_kind_of_pair_under_each_level():
    # a PCIe machine: a PIX pair, a PHB (NODE) pair and SYS pairs; no NVLink anywhere
    topo = parse_topo_matrix("\tGPU0\tGPU1\tGPU2\nGPU0\t X \tPIX\tSYS\nGPU1\tPIX\t X \tNODE\nGPU2\tSYS\tNODE\t X \n")
    t = nccl.pair_levels(topo)
    assert t.column("link") == ["PIX", "NODE", "SYS"] and t.column("kind") == ["PIX", "PHB", "SYS"]
    assert t.column("pairs") == ["0-1", "1-2", "0-2"]
    assert [r["PIX"] for r in t.rows] == ["P2P", "no P2P", "no P2P"]
    assert [r["PHB"] for r in t.rows] == ["P2P", "P2P", "no P2P"] and {r["SYS"] for r in t.rows} == {"P2P"}
    assert {r["LOC"] for r in t.rows} == {r["NVL"] for r in t.rows} == {"no P2P"}
    # an NVLink pair: every level but LOC allows P2P; a measurement goes in as the last row
    pair = parse_topo_matrix("\tGPU0\tGPU1\nGPU0\t X \tNV18\nGPU1\tNV18\t X \n")
    m = nccl.pair_levels(pair, measured={"LOC": "SHM", "NVL": "P2P"})
    assert [m.rows[0][lvl] for lvl in nccl.P2P_LEVELS] == ["no P2P"] + ["P2P"] * 5
    assert m.rows[1]["pairs"] == "measured" and m.rows[1]["LOC"] == "SHM" and m.rows[1]["SYS"] == "-"
    assert "what NCCL reported" in m.text()
    # unset, NCCL starts from PXB: the PIX pair gets P2P, the NODE (PHB) and SYS pairs do not
    assert nccl.DEFAULT_LEVEL == "PXB" and [r["unset"] for r in t.rows] == ["P2P", "no P2P", "no P2P"]
    # a pair NCCL can route through a third GPU: one row for a job on every GPU, one for a 2-GPU job
    d = nccl.pair_levels(parse_topo_matrix(DGX1))
    nvb = [r for r in d.rows if r["pairs"] == "1-2"]
    assert [r["kind"] for r in nvb] == ["NVB", "SYS"] and [r["PIX"] for r in nvb] == ["P2P", "no P2P"]
    assert [r["unset"] for r in nvb] == ["P2P", "no P2P"] and nvb[1]["SYS"] == "P2P"
    # many pairs of one kind are counted, not listed
    eight = parse_topo_matrix("\t" + "\t".join(f"GPU{i}" for i in range(5)) + "\n" + "".join(
        f"GPU{i}\t" + "\t".join(" X " if i == j else "SYS" for j in range(5)) + "\n" for i in range(5)))
    assert nccl.pair_levels(eight).column("pairs") == ["0-1, 0-2, 0-3 and 7 more"]
    with pytest.raises(ValueError, match="fewer than two GPUs"):
        nccl.pair_levels(parse_topo_matrix("\tGPU0\nGPU0\t X \n"))
