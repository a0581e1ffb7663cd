"""ddlab.system.numa: the host's NUMA nodes and each GPU's node, read from a fake sysfs tree."""
import os

import pytest

from ddlab.system import hardware, numa

HERE = os.path.dirname(os.path.abspath(__file__))
TOPO = os.path.join(HERE, "fixtures", "topo")


def sysfs(tmp_path, nodes=None, gpus=None):
    """A fake /sys: ``nodes`` {node: cpulist}, ``gpus`` {sysfs PCI address: numa_node text}."""
    root = tmp_path / "sys"
    (root / "devices" / "system").mkdir(parents=True)
    if nodes is not None:
        base = root / "devices" / "system" / "node"
        base.mkdir()
        (base / "online").write_text("0-1\n")
        for n, cpus in nodes.items():
            (base / f"node{n}").mkdir()
            (base / f"node{n}" / "cpulist").write_text(cpus + "\n")
    for addr, text in (gpus or {}).items():
        d = root / "bus" / "pci" / "devices" / addr
        d.mkdir(parents=True)
        (d / "numa_node").write_text(text + "\n")
    return str(root)


@pytest.mark.parametrize("text,cpus", [("0-3,8-11", [0, 1, 2, 3, 8, 9, 10, 11]), ("5", [5]), ("", []),
                                       ("0-1,4\n", [0, 1, 4])])
def test_parse_cpulist(text, cpus):
    assert numa.parse_cpulist(text) == cpus


@pytest.mark.parametrize("text", ["a-b", "3-1", "0-3;5"])
def test_parse_cpulist_rejects_other_text(text):
    with pytest.raises(ValueError, match="not a CPU list"):
        numa.parse_cpulist(text)


def test_two_nodes_from_sysfs(tmp_path):
    h = numa.host_numa(sysfs(tmp_path, {0: "0-31,64-95", 1: "32-63,96-127"}))
    assert h.supported and h.note is None and h.node_ids == [0, 1]
    assert h.cpus_of(1)[:2] == (32, 33) and len(h.cpus_of(0)) == 64
    assert h.to_dict()["cpus"] == {"0": "0-31,64-95", "1": "32-63,96-127"}
    with pytest.raises(ValueError, match="no NUMA node 2"):
        h.cpus_of(2)


def test_no_numa_in_the_kernel_assumes_one_node_and_says_so(tmp_path):
    h = numa.host_numa(sysfs(tmp_path))
    assert not h.supported and h.node_ids == [0] and h.cpus_of(0)
    assert "no NUMA information" in h.note and "one node assumed" in h.note


@pytest.mark.parametrize("bus,addr", [("00000000:19:00.0", "0000:19:00.0"), ("0000:1B:00.0", "0000:1b:00.0"),
                                      ("00010000:C1:00.0", "10000:c1:00.0"), ("weird", None)])
def test_sysfs_bus_id(bus, addr):
    assert numa.sysfs_bus_id(bus) == addr


def test_gpu_numa_node_from_sysfs_vm_and_missing(tmp_path):
    root = sysfs(tmp_path, {0: "0-1"}, {"0000:19:00.0": "1", "0000:1a:00.0": "-1"})
    assert numa.gpu_numa_node("00000000:19:00.0", root) == numa.GpuNuma(1)
    vm = numa.gpu_numa_node("00000000:1A:00.0", root)
    assert vm.node is None and vm.text == "none reported (VM?)"
    gone = numa.gpu_numa_node("00000000:1C:00.0", root)
    assert gone.node is None and gone.why == numa.NO_SYSFS_ENTRY and "?" not in gone.text


def test_numa_affinity_column_of_nvidia_smi_topo():
    with open(os.path.join(TOPO, "h200x2.txt")) as f:
        got = numa.numa_from_topo(f.read())
    assert {i: g.node for i, g in got.items()} == {0: 0, 1: 0} and got[0].source == "nvidia-smi topo -m"
    with open(os.path.join(TOPO, "vm2x_na_affinity.txt")) as f:
        vm = numa.numa_from_topo(f.read())
    assert [g.text for g in vm.values()] == ["none reported (VM?)"] * 2
    with open(os.path.join(TOPO, "gh200x1_gpu_numa_id.txt")) as f:       # NUMA Affinity, not GPU NUMA ID
        assert numa.numa_from_topo(f.read())[0].node == 0


def test_topo_is_asked_only_for_gpus_sysfs_does_not_know(tmp_path):
    root = sysfs(tmp_path, {0: "0-1"}, {"0000:19:00.0": "1"})
    with open(os.path.join(TOPO, "h200x2.txt")) as f:
        topo = f.read()
    got = numa.gpus_numa({0: "00000000:19:00.0", 1: "00000000:2A:00.0"}, root, topo)
    assert got[0] == numa.GpuNuma(1) and got[1].node == 0 and got[1].source == "nvidia-smi topo -m"
    # no topo to read: the reason stays, never "?"
    got = numa.gpus_numa({1: "00000000:2A:00.0"}, root, topo="")
    assert got[1].why == numa.NO_SYSFS_ENTRY


def test_inventory_fills_each_gpus_numa_node(tmp_path):
    root = sysfs(tmp_path, {0: "0-1"}, {"0000:19:00.0": "0", "0000:1a:00.0": "-1"})
    gpus = [hardware.GPU(0, "H100", pci_bus_id="00000000:19:00.0"), hardware.GPU(1, "H100", pci_bus_id="00000000:1A:00.0")]
    hardware._fill_numa(gpus, root, topo="")
    assert [g.numa_text for g in gpus] == ["0", "none reported (VM?)"]
