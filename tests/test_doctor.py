"""ddlab.report.doctor (`ddlab doctor`): the table, --json, --label/--slug, the PCIe report, and
no framework imported."""
import contextlib
import io
import json
import os

from ddlab.report import doctor
from ddlab.system import hardware, pcie, software

from test_pcie import PCIE_SMI


def test_doctor_table_and_json(capsys):
    # One full doctor run (horovodrun --check-build imports every framework: seconds).
    assert doctor.cli(["--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["mode"] in ("cpu", "single-gpu", "multi-gpu") and d["torch"]
    assert d["dataset"].startswith("ok")
    assert list(d)[list(d).index("dataset") + 1] == "notes"     # where ddlab doctor --json has always had it
    # make test builds Horovod with these; doctor must see them.
    hb = d["horovod_build"]
    assert {"TensorFlow", "PyTorch"} <= set(hb["frameworks"]) and "Gloo" in hb["controllers"]
    inv = hardware.Inventory(**{k: v for k, v in d.items() if k not in ("gpu_count", "mode", "gpus", "dataset")},
                             gpus=[hardware.GPU(**g) for g in d["gpus"]])
    table = doctor.format_inventory(inv, d["dataset"])
    assert f"mode: {d['mode']}" in table and "Fashion-MNIST" in table and f"torch                    {d['torch']}" in table
    assert "horovod built for" in table and "TensorFlow" in table


def test_doctor_says_no_gpu_plainly(capsys, monkeypatch):
    monkeypatch.setattr(hardware, "_nvml_gpus", lambda notes: ([], None, None))
    monkeypatch.setattr(hardware, "_smi_gpus", lambda notes: ([], None))
    assert doctor.cli([]) == 0
    out = capsys.readouterr().out
    assert "GPUs: none found" in out and "Fashion-MNIST" in out


def test_doctor_label_and_slug_without_gpu(capsys, monkeypatch):
    monkeypatch.setattr(hardware, "_nvml_gpus", lambda notes: ([], None, None))
    monkeypatch.setattr(hardware, "_smi_gpus", lambda notes: ([], None))
    assert doctor.cli(["--label", "--slug"]) == 0
    assert capsys.readouterr().out.splitlines() == ["CPU only", "cpu"]


def test_gpu_table_lists_each_gpu():
    inv = hardware.Inventory(gpus=[hardware.GPU(0, "NVIDIA H200", 143771, "9.0", "00000000:1B:00.0", 0),
                                   hardware.GPU(1, "NVIDIA H200", None, None, None, None)], source="nvml")
    t = doctor.gpu_table(inv)
    assert t.cells() == [["0", "NVIDIA H200", "140 GiB", "9.0", "00000000:1B:00.0", "0"],
                         ["1", "NVIDIA H200", "?", "?", "?", "none reported (VM?)"]]
    assert "?" not in t.column("numa") and t.columns[-1].label == "NUMA node"
    text = doctor.format_inventory(inv, "MISSING or CORRUPT: a test")
    assert text.startswith("GPUs: 2 (read with nvml)\n#  name") and "mode: multi-gpu" in text
    assert "driver                   not found" in text
    assert "Fashion-MNIST            MISSING or CORRUPT: a test" in text


def test_doctor_prints_the_pcie_report_after_the_inventory(monkeypatch):
    inv = hardware.Inventory(gpus=[hardware.GPU(i, "NVIDIA GeForce RTX 4090") for i in (0, 1)])
    monkeypatch.setattr(hardware, "inventory", lambda **kw: inv)
    monkeypatch.setattr(pcie, "pcie_links", lambda notes, *a: pcie.parse_smi_pcie(PCIE_SMI))
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert doctor.cli([]) == 0
    assert "PCIe links:" in buf.getvalue() and "GeForce" in buf.getvalue()


# ----------------------------------------------------------------------------- doctor without imports
def _doctor_modules(*args):
    import subprocess
    import sys
    code = ("import json, sys\nfrom ddlab.report import doctor\nassert doctor.cli(list(sys.argv[1:])) == 0\n"
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
    if software.torch_cuda_from_file() is None or software.nccl_library():
        assert not modules, modules
    d = json.loads(out[:out.rindex("MODULES ")])
    assert d["torch"] == software.package_version("torch") and d["tensorflow"] == software.tensorflow_version()


def test_doctor_load_reads_the_links_under_load_and_flags_one_below_its_maximum(monkeypatch, capsys):
    from ddlab.measure import host_link_torch
    from ddlab.system import pcie
    check = pcie.LoadCheck([pcie.LinkUnderLoad(0, "NVIDIA H100", 5, 16, 1, 16, 4, 16, samples=40)], seconds=1.5)
    monkeypatch.setattr(host_link_torch, "pcie_under_load", lambda seconds: check)
    text = doctor.load_report()
    assert "PCIe under load" in text and "Gen1 x16" in text
    assert "warning: GPU 0 (NVIDIA H100): PCIe link stayed at Gen4 x16 under load, below its maximum Gen5 x16" in text


def test_doctor_load_without_a_gpu_is_one_line(monkeypatch, capsys):
    from ddlab.measure import host_link_torch

    def no_gpu(seconds):
        raise host_link_torch.NoGPU("skipped: no GPU visible to PyTorch")
    monkeypatch.setattr(host_link_torch, "pcie_under_load", no_gpu)
    monkeypatch.setattr(hardware, "_nvml_gpus", lambda notes: ([], None, None))
    monkeypatch.setattr(hardware, "_smi_gpus", lambda notes: ([], None))
    assert doctor.cli(["--load"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "PCIe under load: skipped: no GPU visible to PyTorch"


def test_the_horovod_line_names_its_build_or_says_it_is_missing():
    from ddlab.system.hardware import Inventory
    from ddlab.report import doctor
    inv = Inventory(torch="2.13.0+cpu", horovod="0.28.1",
                    horovod_build={"frameworks": ["PyTorch"], "controllers": ["Gloo"], "tensor_operations": ["Gloo"]})
    assert doctor.horovod_line(inv) == ("Horovod 0.28.1, built for PyTorch; controllers Gloo; tensor operations Gloo "
                                        "(torch 2.13.0+cpu, NCCL none: no CUDA)")
    assert doctor.horovod_line(Inventory()).startswith("Horovod not installed (torch not installed")
