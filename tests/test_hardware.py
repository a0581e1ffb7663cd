"""ddlab.system.hardware and `ddlab doctor`: no GPU here, malformed nvidia-smi text, CUDA_VISIBLE_DEVICES."""
import json
import os
import stat

import pytest

from ddlab.system import hardware


def test_no_gpu_gives_empty_inventory_and_cpu_mode():
    inv = hardware.inventory(software=False, dataset=False)
    # This test runs where there is no GPU (CI); on a GPU machine it checks the other branch.
    if inv.gpus:
        assert inv.mode in ("single-gpu", "multi-gpu") and inv.source in ("nvml", "nvidia-smi")
    else:
        assert inv.mode == "cpu" and inv.source == "none" and inv.gpu_count == 0


GOOD = """0, NVIDIA H200, 143771, 9.0, 00000000:00:06.0, 580.159.04
1, NVIDIA H200, 143771, 9.0, 00000000:00:07.0, 580.159.04
"""


def test_parse_smi_query():
    gpus, driver = hardware.parse_smi_query(GOOD)
    assert [g.index for g in gpus] == [0, 1]
    assert gpus[0].name == "NVIDIA H200" and gpus[0].memory_mib == 143771
    assert gpus[1].compute_capability == "9.0" and gpus[1].pci_bus_id == "00000000:00:07.0"
    assert driver == "580.159.04"


@pytest.mark.parametrize("text,match", [
    ("0, NVIDIA H200, 143771\n", "expected 6"),
    ("zero, NVIDIA H200, 1, 9.0, 00000000:00:06.0, 580\n", "not a number"),
])
def test_parse_smi_query_rejects_malformed_text(text, match):
    with pytest.raises(ValueError, match=match):
        hardware.parse_smi_query(text)


def fake_smi(tmp_path, monkeypatch, body):
    exe = tmp_path / "nvidia-smi"
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setattr(hardware, "_nvml_gpus", lambda notes: ([], None, None))


def test_inventory_falls_back_to_nvidia_smi(tmp_path, monkeypatch):
    fake_smi(tmp_path, monkeypatch, f"cat <<'EOF'\n{GOOD}EOF\n")
    inv = hardware.inventory(software=False, dataset=False)
    assert inv.source == "nvidia-smi" and inv.gpu_count == 2 and inv.mode == "multi-gpu"


def test_malformed_nvidia_smi_output_is_a_note_not_a_crash(tmp_path, monkeypatch):
    fake_smi(tmp_path, monkeypatch, "echo 'NVIDIA-SMI has failed because it could not communicate'\n")
    inv = hardware.inventory(software=False, dataset=False)
    assert inv.gpu_count == 0 and any("could not read nvidia-smi output" in n for n in inv.notes)


def test_failing_nvidia_smi_is_a_note(tmp_path, monkeypatch):
    fake_smi(tmp_path, monkeypatch, "echo 'No devices were found' >&2; exit 6\n")
    inv = hardware.inventory(software=False, dataset=False)
    assert inv.gpu_count == 0 and any("exited 6" in n for n in inv.notes)


GPUS2 = [hardware.GPU(0, "A"), hardware.GPU(1, "B")]


@pytest.mark.parametrize("value,expect", [
    (None, None), ("0", None), ("1,0", None), ("GPU-8f1c-22", None),
    ("", "empty"), ("2", "does not exist"), ("0,abc", "neither a GPU index"), ("0,0", "twice"),
])
def test_cuda_visible_devices_check(value, expect):
    msg = hardware.check_visible_devices(value, GPUS2)
    assert (msg is None) if expect is None else (expect in msg)


def test_invalid_visible_devices_appears_in_inventory_notes(tmp_path, monkeypatch):
    fake_smi(tmp_path, monkeypatch, f"cat <<'EOF'\n{GOOD}EOF\n")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5")
    inv = hardware.inventory(software=False, dataset=False)
    assert any("GPU 5 does not exist" in n for n in inv.notes)


def test_parse_check_build():
    text = """Horovod v0.28.1:

Available Frameworks:
    [X] TensorFlow
    [X] PyTorch
    [ ] MXNet

Available Controllers:
    [ ] MPI
    [X] Gloo

Available Tensor Operations:
    [X] NCCL
    [ ] DDL
    [ ] CCL
    [ ] MPI
    [X] Gloo
"""
    assert hardware.parse_check_build(text) == {
        "frameworks": ["TensorFlow", "PyTorch"], "controllers": ["Gloo"], "tensor_operations": ["NCCL", "Gloo"]}


def test_doctor_table_and_json(capsys):
    # One full doctor run (horovodrun --check-build imports every framework: seconds).
    assert hardware.cli(["--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["mode"] in ("cpu", "single-gpu", "multi-gpu") and d["torch"]
    assert d["dataset"].startswith("ok")
    # make test builds Horovod with these; doctor must see them.
    hb = d["horovod_build"]
    assert {"TensorFlow", "PyTorch"} <= set(hb["frameworks"]) and "Gloo" in hb["controllers"]
    inv = hardware.Inventory(**{k: v for k, v in d.items() if k not in ("gpu_count", "mode", "gpus")},
                             gpus=[hardware.GPU(**g) for g in d["gpus"]])
    table = hardware.format_inventory(inv)
    assert f"mode: {d['mode']}" in table and "Fashion-MNIST" in table and f"torch                    {d['torch']}" in table
    assert "horovod built for" in table and "TensorFlow" in table


def test_doctor_says_no_gpu_plainly(capsys, monkeypatch):
    monkeypatch.setattr(hardware, "_nvml_gpus", lambda notes: ([], None, None))
    monkeypatch.setattr(hardware, "_smi_gpus", lambda notes: ([], None))
    assert hardware.cli([]) == 0
    assert "GPUs: none found" in capsys.readouterr().out


def test_bus_id_normalisation():
    assert hardware.normalise_bus_id("0000:1b:00.0") == "00000000:1B:00.0"
    assert hardware.normalise_bus_id("00000000:1B:00.0") == "00000000:1B:00.0"
    assert hardware.normalise_bus_id("weird") == "weird"


def test_provenance_carries_what_a_recorded_result_needs():
    from ddlab.system import provenance
    prov = provenance.collect(["ddlab", "p2p", "--json"], machine="test box")
    for key in ("machine", "gpu_model", "gpu_count", "driver", "cuda_runtime", "nccl", "torch", "tensorflow",
                "horovod", "command", "date"):
        assert key in prov, key
    assert prov["machine"] == "test box" and prov["command"] == "ddlab p2p --json"
    assert prov["date"][:2] == "20" and "T" in prov["date"]
    # the caption names the machine from its hardware fields, not from the free-text label
    assert provenance.label(prov).startswith(hardware.machine_label(prov) + ", 20")
    assert "test box" not in provenance.label(prov)


# ------------------------------------------------------------------------ machine names
TOPO_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "topo")


def test_machine_label_and_slug_name_the_hardware():
    from ddlab.system.topology import Topology
    gpus, driver = hardware.parse_smi_query(GOOD)
    inv = hardware.Inventory(gpus=gpus, driver=driver, hostname="some-host")
    h200 = Topology.from_file(os.path.join(TOPO_DIR, "h200x2.txt"))
    assert hardware.machine_label(inv, h200) == "2x NVIDIA H200, NV18"
    assert hardware.machine_slug(inv, h200) == "2xh200-nv18"
    assert hardware.machine_label(inv) == "2x NVIDIA H200" and hardware.machine_slug(inv) == "2xh200"
    # the same from `ddlab doctor --json` and from a topology record
    assert hardware.machine_label(inv.to_dict(), h200.to_dict()) == "2x NVIDIA H200, NV18"
    assert "some-host" not in hardware.machine_label(inv, h200)


def test_machine_label_lists_mixed_links_best_first_and_mixed_models():
    from ddlab.system.topology import Topology
    dgx1 = Topology.from_file(os.path.join(TOPO_DIR, "p100x8_dgx1_mlx5_soc.txt"))
    inv = hardware.Inventory(gpus=[hardware.GPU(index=i, name="Tesla P100-SXM2-16GB") for i in range(8)])
    assert hardware.machine_label(inv, dgx1) == "8x Tesla P100-SXM2-16GB, NV1/SOC"
    assert hardware.machine_slug(inv, dgx1) == "8xtesla-p100-sxm2-16gb-nv1-soc"
    mixed = hardware.Inventory(gpus=[hardware.GPU(0, "NVIDIA A100-SXM4-80GB"), hardware.GPU(1, "NVIDIA H100 PCIe"),
                                     hardware.GPU(2, "NVIDIA A100-SXM4-80GB")])
    assert hardware.machine_label(mixed) == "2x NVIDIA A100-SXM4-80GB + 1x NVIDIA H100 PCIe"
    assert hardware.machine_slug(mixed) == "2xa100-sxm4-80gb-1xh100-pcie"
    assert hardware.machine_label(hardware.Inventory()) == "CPU only" and hardware.machine_slug(hardware.Inventory()) == "cpu"


def test_recorded_captions_name_the_hardware_not_how_the_machine_was_obtained():
    from ddlab.system import provenance
    from ddlab.base import reference
    prov = reference.load("allreduce", "h200x2")["provenance"]
    cap = provenance.caption(prov)
    assert cap == f"recorded on {prov['gpu_count']}x {prov['gpu_model']}, {prov['date'][:10]}"
    assert prov["machine"] not in cap
    from ddlab.system import topology
    topo = topology.recorded("h200x2")
    text = topology.report(topo)
    assert f"captured on {hardware.machine_label(topo.provenance, topo)}, " in text
    assert topo.provenance["machine"] not in text


def test_doctor_label_and_slug_without_gpu(capsys, monkeypatch):
    monkeypatch.setattr(hardware, "_nvml_gpus", lambda notes: ([], None, None))
    monkeypatch.setattr(hardware, "_smi_gpus", lambda notes: ([], None))
    assert hardware.cli(["--label", "--slug"]) == 0
    assert capsys.readouterr().out.splitlines() == ["CPU only", "cpu"]


def test_gpu_table_lists_each_gpu():
    inv = hardware.Inventory(gpus=[hardware.GPU(0, "NVIDIA H200", 143771, "9.0", "00000000:1B:00.0", 0),
                                   hardware.GPU(1, "NVIDIA H200", None, None, None, None)], source="nvml")
    t = hardware.gpu_table(inv)
    assert t.cells() == [["0", "NVIDIA H200", "140 GiB", "9.0", "00000000:1B:00.0", "0"],
                         ["1", "NVIDIA H200", "?", "?", "?", "?"]]
    text = hardware.format_inventory(inv)
    assert text.startswith("GPUs: 2 (read with nvml)\n#  name") and "mode: multi-gpu" in text
    assert "driver                   not found" in text


# ----------------------------------------------------------------------------- PCIe links
PCIE_SMI = """0, NVIDIA GeForce RTX 4090, 4, 4, 16, 16
1, NVIDIA GeForce RTX 4090, 1, 4, 8, 16
"""


class FakeNVML:
    """A stand-in for pynvml: GPU 1's link runs at Gen3 x8 of Gen4 x16; GPU 0 cannot say its width."""
    class NVMLError(Exception):
        pass

    def __init__(self):
        self.shut = False

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        self.shut = True

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return b"NVIDIA H200"

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return 5 if h == 0 else 3

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return 5

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        if h == 0:
            raise self.NVMLError("Not Supported")
        return 8

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return 16


def test_pcie_links_from_nvml_and_the_downtrained_warning():
    nv = FakeNVML()
    notes = []
    links = hardware.pcie_links(notes, pynvml=nv)
    assert nv.shut and notes == []
    got = [(x.gen_current, x.gen_max, x.width_current, x.width_max) for x in links]
    assert got == [(5, 5, None, 16), (3, 5, 8, 16)]
    assert [x.downtrained for x in links] == [False, True]
    w = hardware.link_warnings(links)
    assert len(w) == 1 and "GPU 1" in w[0] and "Gen3 x8" in w[0] and "Gen5 x16" in w[0] and "under load" in w[0]


def test_pcie_links_from_nvidia_smi_and_the_geforce_warning():
    links = hardware.pcie_links([], smi_text=PCIE_SMI)
    assert [x.downtrained for x in links] == [False, True]
    w = hardware.link_warnings(links)
    assert any("Gen1 x8" in x for x in w)
    assert any("GeForce" in x and "peer-to-peer" in x and "host memory" in x for x in w)
    # one GeForce card alone has no peer to talk to: no P2P warning
    assert not any("GeForce" in x for x in hardware.link_warnings(links[:1]))
    assert hardware.parse_smi_pcie("0, A, [N/A], 4, 16, 16\n")[0].gen_current is None


@pytest.mark.parametrize("text", ["0, A, 4, 4\n", "0, A, four, 4, 16, 16\n", "NVIDIA-SMI has failed\n"])
def test_malformed_pcie_text_is_one_clear_note(text):
    notes = []
    assert hardware.pcie_links(notes, smi_text=text) == []
    assert len(notes) == 1 and notes[0].startswith("PCIe links: could not read nvidia-smi output")


def test_pcie_report_in_doctor(monkeypatch):
    inv = hardware.Inventory(gpus=[hardware.GPU(i, "NVIDIA GeForce RTX 4090") for i in (0, 1)])
    text = hardware.pcie_report(inv, smi_text=PCIE_SMI)
    assert "PCIe now" in text and "Gen1 x8" in text and "below maximum" in text
    assert text.count("warning:") == 2
    assert hardware.pcie_report(hardware.Inventory()) == ""
    # doctor prints it after the inventory when there are GPUs
    monkeypatch.setattr(hardware, "inventory", lambda **kw: inv)
    monkeypatch.setattr(hardware, "pcie_links", lambda notes, *a: hardware.parse_smi_pcie(PCIE_SMI))
    import io
    import contextlib
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert hardware.cli([]) == 0
    assert "PCIe links:" in buf.getvalue() and "GeForce" in buf.getvalue()
# ----------------------------------------------------------------------------- doctor without imports
def _doctor_modules(*args):
    import subprocess
    import sys
    code = ("import json, sys\nfrom ddlab import hardware\nassert hardware.cli(list(sys.argv[1:])) == 0\n"
            "print('MODULES ' + json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'tensorflow', 'horovod', 'keras', 'tf_keras'))))\n")
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert out.returncode == 0, out.stderr[-2000:]
    line = [x for x in out.stdout.splitlines() if x.startswith("MODULES ")][-1]
    return set(json.loads(line[len("MODULES "):])), out.stdout


def test_doctor_imports_no_framework():
    modules, out = _doctor_modules("--json")
    assert not {m for m in modules if m.split(".")[0] in ("tensorflow", "horovod", "keras", "tf_keras")}, modules
    # torch only where it was built with CUDA and its NCCL library is not a file found here
    if hardware.torch_cuda_from_file() is None or hardware.nccl_library():
        assert not modules, modules
    d = json.loads(out[:out.rindex("MODULES ")])
    assert d["torch"] == hardware._version("torch") and d["tensorflow"] == hardware.tensorflow_version()


def test_torch_facts_from_files_match_torch():
    import subprocess
    import sys
    notes = []
    facts = hardware.torch_facts(notes)
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__, torch.version.cuda)"],
                         capture_output=True, text=True, timeout=300)
    version, cuda = out.stdout.split()
    assert facts["torch"] == version and str(facts["cuda_runtime"]) == cuda and not notes


def test_torch_cuda_version_is_read_from_version_py(tmp_path, monkeypatch):
    (tmp_path / "version.py").write_text("from typing import Optional\n__version__ = '2.11.0+cu130'\n"
                                         "cuda: Optional[str] = '13.0'\nhip: Optional[str] = None\n")
    monkeypatch.setattr(hardware, "_torch_dir", lambda: str(tmp_path))
    assert hardware.torch_cuda_from_file() == "13.0"
    (tmp_path / "version.py").write_text("__version__ = '2.13.0+cpu'\ncuda: Optional[str] = None\n")
    assert hardware.torch_cuda_from_file() is None


@pytest.mark.parametrize("code,version", [(22809, "2.28.9"), (21803, "2.18.3"), (2708, "2.7.8")])
def test_nccl_version_code(code, version):
    assert hardware.nccl_version_from_code(code) == version


def test_nccl_library_version_of_a_missing_or_foreign_library(tmp_path):
    assert hardware.nccl_library_version(str(tmp_path / "libnccl.so.2")) is None
    import ctypes.util
    libm = ctypes.util.find_library("m")
    assert libm and hardware.nccl_library_version(libm) is None   # loads, but has no ncclGetVersion


def _fake_horovod(tmp_path, monkeypatch, libs):
    pkg = tmp_path / "horovod"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for sub, body in libs.items():
        (pkg / sub).mkdir()
        (pkg / sub / "mpi_lib.cpython-311-x86_64-linux-gnu.so").write_bytes(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    import sys
    for m in [m for m in sys.modules if m == "horovod" or m.startswith("horovod.")]:
        monkeypatch.delitem(sys.modules, m)


def test_horovod_build_from_files_reads_frameworks_and_rtti_names(tmp_path, monkeypatch):
    body = b"\0junk N7horovod6common14GlooControllerE\0N7horovod6common13GlooAllreduceE\0" \
           b"N7horovod6common13NCCLAllreduceE\0N7horovod6common25NCCLHierarchicalAllreduceE\0"
    _fake_horovod(tmp_path, monkeypatch, {"torch": body, "tensorflow": body})
    assert hardware.horovod_build_from_files([]) == {
        "frameworks": ["TensorFlow", "PyTorch"], "controllers": ["Gloo"], "tensor_operations": ["NCCL", "Gloo"]}


def test_horovod_build_from_files_without_horovod(tmp_path, monkeypatch):
    _fake_horovod(tmp_path, monkeypatch, {})
    assert hardware.horovod_build_from_files([]) == {} and hardware.horovod_extensions() == {}


@pytest.mark.slow
def test_horovod_build_from_files_matches_check_build():
    # The files say what `horovodrun --check-build` says (which imports every framework: seconds).
    notes = []
    checked = hardware.horovod_build(notes, timeout=900)
    assert checked, f"horovodrun --check-build gave nothing: {notes}"
    assert hardware.horovod_build_from_files([]) == checked
