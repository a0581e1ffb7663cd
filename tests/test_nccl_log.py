"""ddlab.system.nccl_log: NCCL_DEBUG=INFO logs from every launcher and NCCL generation, the transport
table and the `ddlab nccl-log` command."""
import glob
import json
import os

import pytest

from ddlab.system import nccl_log
from ddlab.system.nccl_log import parse, transport_kind

HERE = os.path.dirname(os.path.abspath(__file__))
NCCL_DIR = os.path.join(HERE, "fixtures", "nccl")


def path(name):
    return os.path.join(NCCL_DIR, name)


# name -> (version, nranks, transport_counts, env subset, transports as printed)
EXPECTED = {
    "torchrun_p2p_cumem_interleaved.log": ("2.28.9", 2, {"P2P": 12}, {"NCCL_NVLS_ENABLE": "0"},
                                           {"P2P/CUMEM": 8, "P2P/CUMEM/read": 4}),
    "horovod_mpirun_shm_p2p_level_loc.log": ("2.21.5", 2, {"SHM": 4}, {"NCCL_P2P_LEVEL": "LOC"},
                                             {"SHM/direct/direct": 4}),
    "horovod_gloo_socket_disabled_p2p_shm.log": ("2.19.3", 2, {"NET/Socket": 8},
                                                 {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1",
                                                  "NCCL_SOCKET_IFNAME": "eno1"}, {"NET/Socket/0": 8}),
    "old_ring_nccl23_single_process.log": ("2.3.7", 4, {"P2P": 4, "SHM": 4}, {},
                                           {"P2P/direct pointer": 4, "direct shared memory": 4}),
    "multinode_ib_gdrdma_ipc_read.log": ("2.18.6", 4, {"P2P": 4, "NET/IB": 6},
                                         {"NCCL_IB_HCA": "mlx5_0,mlx5_1", "NCCL_NET_GDR_LEVEL": "PHB"},
                                         {"NET/IB/0/GDRDMA": 2, "NET/IB/1/GDRDMA": 2, "NET/IB/1": 2,
                                          "P2P/IPC/read": 2, "P2P/IPC": 2}),
    "efa_libfabric_busid_comm_suffix.log": ("2.16.2", 16, {"P2P": 2, "NET/other": 1}, {},
                                            {"P2P/IPC/read": 2, "NET/AWS Libfabric/0/GDRDMA": 1}),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_parses_to_the_expected_facts(name):
    version, nranks, counts, env, transports = EXPECTED[name]
    log = nccl_log.parse_file(path(name))
    assert log.version == version
    assert log.nranks == nranks
    assert log.transport_counts() == counts
    assert {k: log.env.get(k) for k in env} == env
    assert log.transports() == transports
    assert not log.empty


@pytest.mark.parametrize("p", sorted(glob.glob(os.path.join(NCCL_DIR, "*.log"))), ids=os.path.basename)
def test_every_nccl_fixture_parses_consistently(p):
    """Runs over every file in tests/fixtures/nccl, including captures added later."""
    log = nccl_log.parse_file(p)
    assert sum(log.transport_counts().values()) == len(log.connections)
    for c in log.connections:
        assert c.kind == transport_kind(c.transport) and c.kind in nccl_log.KINDS
        assert c.src_rank != c.dst_rank
        assert log.nranks is None or max(c.src_rank, c.dst_rank) < log.nranks
    json.dumps(log.to_dict())


H200 = [("h200x2_default.log", "P2P"), ("h200x2_shm.log", "SHM"), ("h200x2_socket.log", "NET/Socket")]
# NCCL's channels per collective on that machine (one GPU thread block each): NVLink gets many
H200_CHANNELS = {"P2P": 24, "SHM": 4, "NET/Socket": 2}


@pytest.mark.parametrize("name,kind", H200, ids=[h[0] for h in H200])
def test_h200x2_captures_show_the_expected_path(name, kind):
    p = path(name)
    assert os.path.exists(p), (f"{p} is committed (captured from a 2-GPU NCCL_DEBUG=INFO run on the 2x H200 "
                               f"machine, ddlab nccl-log --capture): restore it from git")
    log = nccl_log.parse_file(p)
    assert log.connections, "the capture has no connection lines"
    assert log.transport_counts() == {kind: len(log.connections)}
    assert log.nranks == 2
    ranks = {(c.src_rank, c.dst_rank) for c in log.connections}
    assert ranks == {(0, 1), (1, 0)}
    assert log.coll_channels == H200_CHANNELS[kind]
    if kind == "SHM":
        assert log.env.get("NCCL_P2P_LEVEL") == "LOC"
    if kind == "NET/Socket":
        assert log.env.get("NCCL_P2P_DISABLE") == "1" and log.env.get("NCCL_SHM_DISABLE") == "1"


def test_the_socket_interface_is_read_and_shown_only_for_socket_connections():
    both = "h:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:192.0.2.2<0> [1]ib0:10.0.0.1<0>\n"
    assert parse(both).socket_interfaces == ["eth0", "ib0"] and parse(both).to_dict()["socket_interfaces"]
    assert parse("h:1:1 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>").socket_interfaces == ["lo"]
    sock = both + "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/Socket/0\n"
    assert "NET/Socket ran over interface eth0, ib0" in parse(sock).table()
    p2p = both + "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n"
    assert "interface" not in parse(p2p).table()                  # no socket traffic: nothing to say
    recorded = nccl_log.parse_file(path("h200x2_socket.log"))
    assert recorded.socket_interfaces and "NET/Socket ran over interface" in recorded.table()


# ------------------------------------------------------------------------ line formats
def test_collective_channels_are_read_from_the_init_line():
    line = "h:1:1 [0] NCCL INFO 24 coll channels, 24 collnet channels, 0 nvls channels, 32 p2p channels, 32 p2p"
    assert parse(line).coll_channels == 24
    assert parse("h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC").coll_channels is None
    assert parse(line + "\n" + line.replace("24 coll", "8 coll")).to_dict()["coll_channels"] == 24


def test_launcher_prefixes_and_interleaving():
    text = ("[1,1]<stdout>:h:2:2 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/IPC\n"
            "[1,0]<stdout>:h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n"
            "[0]<stdout>:h:1:1 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/IPC/read\n"
            "2025-01-01 10:00:00,123 INFO h:2:2 [1] NCCL INFO Channel 01/0 : 1[1] -> 0[0] via P2P/IPC/read\n")
    log = parse(text)
    got = [(c.channel, c.src_rank, c.dst_rank, c.transport, c.source, c.line) for c in log.connections]
    assert got == [(0, 1, 0, "P2P/IPC", "h:2", 1), (0, 0, 1, "P2P/IPC", "h:1", 2),
                   (1, 0, 1, "P2P/IPC/read", "h:1", 3), (1, 1, 0, "P2P/IPC/read", "h:2", 4)]


def test_channel_and_ring_forms_with_all_details():
    log = parse("x:1:1 [0] NCCL INFO Channel 02/1 : 3[2] -> 0[0] [receive] via NET/IB/0/GDRDMA\n"
                "x:1:1 [0] NCCL INFO Ring 05 : 0[0] -> 1[1] via P2P/IPC\n"
                "x:1:1 [0] NCCL INFO Channel 07 : 0[1b000] -> 1[1c000] via SHM/direct/direct comm 0x55aa nRanks 02\n")
    a, b, c = log.connections
    assert (a.form, a.channel, a.conn_index, a.src_rank, a.dst_rank, a.src_device, a.direction, a.kind) == \
        ("Channel", 2, 1, 3, 0, "2", "receive", "NET/IB")
    assert (b.form, b.channel, b.conn_index, b.kind) == ("Ring", 5, None, "P2P")
    assert (c.transport, c.src_device, c.dst_device, c.kind) == ("SHM/direct/direct", "1b000", "1c000", "SHM")
    assert log.nranks == 2  # from the "nRanks 02" suffix


def test_ring_descriptions_and_trees_are_not_connections():
    log = parse("h:1:1 [0] NCCL INFO Channel 00/02 :    0   1\n"
                "h:1:1 [0] NCCL INFO Ring 00 :    0   1   2   3\n"
                "h:1:1 [0] NCCL INFO Trees [0] 1/-1/-1->0->-1 [1] 1/-1/-1->0->-1\n"
                "h:1:1 [0] NCCL INFO Connected all rings\n")
    assert log.connections == [] and not log.empty
    assert "no connection lines" in log.summary()


@pytest.mark.parametrize("transport,kind", [
    ("P2P/CUMEM", "P2P"), ("P2P/CUMEM/read", "P2P"), ("P2P/IPC", "P2P"), ("P2P/IPC/read", "P2P"),
    ("P2P/direct pointer", "P2P"), ("P2P/direct pointer/read", "P2P"), ("SHM/direct/direct", "SHM"),
    ("SHM/direct/CE", "SHM"), ("direct shared memory", "SHM"), ("NET/Socket/0", "NET/Socket"),
    ("NET/IB/0/GDRDMA", "NET/IB"), ("NET/IB/1", "NET/IB"), ("NET/IBext_v8/0/GDRDMA", "NET/IB"),
    ("NET/AWS Libfabric/0/GDRDMA", "NET/other"), ("NET/Libfabric/0", "NET/other"), ("CollNet/0", "other"),
])
def test_transport_kinds(transport, kind):
    assert transport_kind(transport) == kind


def test_env_version_nranks_and_warnings():
    log = parse("a:1:1 [0] NCCL INFO NCCL_SHM_DISABLE set by environment to 1.\n"
                "a:1:1 [0] NCCL INFO NCCL_P2P_LEVEL set by environment to PIX\n"
                "a:1:1 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to =eth0\n"
                "a:1:1 [0] NCCL INFO NCCL version 2.28.9+cuda13.0\n"
                "a:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 8 cudaDev 0 busId 1000 - Init COMPLETE\n"
                "a:1:1 [0] NCCL WARN Cuda failure 'out of memory'\n")
    assert log.env == {"NCCL_SHM_DISABLE": "1", "NCCL_P2P_LEVEL": "PIX", "NCCL_SOCKET_IFNAME": "=eth0"}
    assert (log.version, log.version_full, log.nranks) == ("2.28.9", "2.28.9+cuda13.0", 8)
    assert log.warnings == ["Cuda failure 'out of memory'"]


def test_text_without_nccl_lines_is_an_empty_log():
    with open(path("no_nccl_training_output.log")) as f:
        training_output = f.read()
    for text in ("", "Epoch 1/3\nloss: 0.5\n", training_output):
        log = parse(text)
        assert log.empty and log.connections == [] and log.version is None and log.nranks is None
        assert log.table() == nccl_log.NO_NCCL_LINES == "no NCCL INFO lines found; run with NCCL_DEBUG=INFO"
    with pytest.raises(TypeError):
        parse(None)


def test_table_is_readable():
    table = nccl_log.parse_file(path("multinode_ib_gdrdma_ipc_read.log")).table()
    lines = table.splitlines()
    assert lines[0] == "NCCL 2.18.6, 4 ranks: 4 P2P, 6 NET/IB"
    assert "set by environment: NCCL_IB_HCA=mlx5_0,mlx5_1, NCCL_NET_GDR_LEVEL=PHB" in table
    assert any(ln.split()[:2] == ["NET/IB", "6"] for ln in lines)
    assert any(ln.startswith("0 -> 1") for ln in lines)
    assert "counted twice" in table and "port error" in table
    log = nccl_log.parse_file(path("multinode_ib_gdrdma_ipc_read.log"))
    assert log.kind_table().rows[1] == {"kind": "NET/IB", "connections": 6,
                                        "printed": "NET/IB/0/GDRDMA (2), NET/IB/1/GDRDMA (2), NET/IB/1 (2)"}
    assert log.pair_table().column("ranks") == ["0 -> 1", "1 -> 2", "2 -> 3", "3 -> 0"]
    html = log._repr_html_()                                  # Jupyter: the two tables as HTML tables
    assert html.count("<table") == 2 and "port error" in html
    single = nccl_log.parse_file(path("horovod_mpirun_shm_p2p_level_loc.log"))
    assert single.summary() == "NCCL 2.21.5, 2 ranks: all 4 connections SHM"


def test_to_dict_is_json():
    d = json.loads(json.dumps(nccl_log.parse_file(path("torchrun_p2p_cumem_interleaved.log")).to_dict()))
    assert d["transport_counts"] == {"P2P": 12} and d["version"] == "2.28.9" and d["empty"] is False
    assert d["connections"][0]["transport"] == "P2P/CUMEM" and d["connections"][0]["kind"] == "P2P"


def test_key_lines_are_the_lines_that_show_nccls_choice_as_printed():
    from ddlab.course import mode
    logs = mode.recorded_nccl_logs()
    for path, lines in logs["lines"].items():
        log = logs["logs"][path]
        # each variable NCCL read, once, and the first connection lines of each kind, verbatim
        assert sum("set by environment" in ln for ln in lines) == len(log.env)
        kinds = {nccl_log.transport_kind(ln.split(" via ")[1].strip()) for ln in lines if " via " in ln}
        assert kinds == set(log.transport_counts()) and all(ln == ln.rstrip() for ln in lines)
        assert sum(" via " in ln for ln in lines) == 2 * len(kinds)
    shm = logs["lines"]["shm"]
    assert any("NCCL_P2P_LEVEL set by environment to LOC" in ln for ln in shm)
    assert nccl_log.key_lines("no nccl here\n") == []
