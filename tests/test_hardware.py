"""ddlab.system.hardware: no GPU here, malformed nvidia-smi text, CUDA_VISIBLE_DEVICES."""
import os
import stat

import pytest

from ddlab.system import hardware


def test_no_gpu_gives_empty_inventory_and_cpu_mode():
    inv = hardware.inventory(software=False)
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
    inv = hardware.inventory(software=False)
    assert inv.source == "nvidia-smi" and inv.gpu_count == 2 and inv.mode == "multi-gpu"


def test_malformed_nvidia_smi_output_is_a_note_not_a_crash(tmp_path, monkeypatch):
    fake_smi(tmp_path, monkeypatch, "echo 'NVIDIA-SMI has failed because it could not communicate'\n")
    inv = hardware.inventory(software=False)
    assert inv.gpu_count == 0 and any("could not read nvidia-smi output" in n for n in inv.notes)


def test_failing_nvidia_smi_is_a_note(tmp_path, monkeypatch):
    fake_smi(tmp_path, monkeypatch, "echo 'No devices were found' >&2; exit 6\n")
    inv = hardware.inventory(software=False)
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
    inv = hardware.inventory(software=False)
    assert any("GPU 5 does not exist" in n for n in inv.notes)


def test_bus_id_normalisation():
    assert hardware.normalise_bus_id("0000:1b:00.0") == "00000000:1B:00.0"
    assert hardware.normalise_bus_id("00000000:1B:00.0") == "00000000:1B:00.0"
    assert hardware.normalise_bus_id("weird") == "weird"
