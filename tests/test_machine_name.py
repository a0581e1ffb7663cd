"""ddlab.system.machine_name: a machine named by its hardware, never by how it was obtained."""
import os

from ddlab.system import hardware, provenance, topology, topology_report
from ddlab.system.machine_name import machine_label, machine_slug
from ddlab.system.topology import Topology

from test_hardware import GOOD

TOPO_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "topo")


def test_machine_label_and_slug_name_the_hardware():
    gpus, driver = hardware.parse_smi_query(GOOD)
    inv = hardware.Inventory(gpus=gpus, driver=driver, hostname="some-host")
    h200 = Topology.from_file(os.path.join(TOPO_DIR, "h200x2.txt"))
    assert machine_label(inv, h200) == "2x NVIDIA H200, NV18"
    assert machine_slug(inv, h200) == "2xh200-nv18"
    assert machine_label(inv) == "2x NVIDIA H200" and machine_slug(inv) == "2xh200"
    # the same from `ddlab doctor --json` and from a topology record
    assert machine_label(inv.to_dict(), h200.to_dict()) == "2x NVIDIA H200, NV18"
    assert "some-host" not in machine_label(inv, h200)


def test_machine_label_lists_mixed_links_best_first_and_mixed_models():
    dgx1 = Topology.from_file(os.path.join(TOPO_DIR, "p100x8_dgx1_mlx5_soc.txt"))
    inv = hardware.Inventory(gpus=[hardware.GPU(index=i, name="Tesla P100-SXM2-16GB") for i in range(8)])
    assert machine_label(inv, dgx1) == "8x Tesla P100-SXM2-16GB, NV1/SOC"
    assert machine_slug(inv, dgx1) == "8xtesla-p100-sxm2-16gb-nv1-soc"
    mixed = hardware.Inventory(gpus=[hardware.GPU(0, "NVIDIA A100-SXM4-80GB"), hardware.GPU(1, "NVIDIA H100 PCIe"),
                                     hardware.GPU(2, "NVIDIA A100-SXM4-80GB")])
    assert machine_label(mixed) == "2x NVIDIA A100-SXM4-80GB + 1x NVIDIA H100 PCIe"
    assert machine_slug(mixed) == "2xa100-sxm4-80gb-1xh100-pcie"
    assert machine_label(hardware.Inventory()) == "CPU only" and machine_slug(hardware.Inventory()) == "cpu"


def test_recorded_captions_name_the_hardware_not_how_the_machine_was_obtained():
    from ddlab.base import reference
    prov = reference.load("allreduce", "h200x2")["provenance"]
    cap = provenance.caption(prov)
    assert cap == (f"recorded on {prov['gpu_count']}x {prov['gpu_model']}, {prov['date'][:10]} "
                   f"({provenance.versions(prov)})")
    assert prov["machine"] == machine_label(prov)           # the record names the hardware too
    topo = topology.recorded("h200x2")
    text = topology_report.report(topo)
    assert f"captured on {machine_label(topo.provenance, topo)}, " in text
    assert topo.provenance["machine"] == machine_label(topo.provenance, topo) == "2x NVIDIA H200, NV18"


def test_a_provenance_names_its_machine_as_a_file_tag():
    from ddlab.system.machine_name import provenance_slug
    h100 = {"machine": "2x NVIDIA H100 80GB HBM3, NV18", "gpu_count": 2, "gpu_model": "NVIDIA H100 80GB HBM3"}
    assert provenance_slug(h100) == "2xh100-80gb-hbm3-nv18"
    v100 = {"machine": "8x Tesla V100-SXM2-16GB, NV2/NV1/SYS", "gpu_count": 8, "gpu_model": "Tesla V100-SXM2-16GB"}
    assert provenance_slug(v100) == "8xtesla-v100-sxm2-16gb-nv2-nv1-sys"
    assert provenance_slug({"gpu_count": 1, "gpu_model": "NVIDIA H200"}) == "1xh200"        # no links named
    assert provenance_slug({}) == "cpu"
