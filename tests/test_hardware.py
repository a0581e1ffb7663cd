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
    ("0, NVIDIA H200, 143771\n", "expected 7"),
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


# --------------------------------------------------------------------------- CUDA index -> NVML GPU
U0, U1, U2 = ("GPU-8932f937-d72c-4106-c12f-20bd9faed9f6", "GPU-8932aaaa-0000-4106-c12f-20bd9faed9f7",
              "GPU-1c2d3e4f-0000-4106-c12f-20bd9faed9f8")
INV3 = [hardware.GPU(0, "H100", pci_bus_id="00000000:19:00.0", uuid=U0),
        hardware.GPU(1, "H100", pci_bus_id="00000000:3B:00.0", uuid=U1,
                     mig_uuids=["MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f"]),
        hardware.GPU(2, "H100", pci_bus_id="00000000:4C:00.0", uuid=U2)]


@pytest.mark.parametrize("value,buses", [
    (None, ["19", "3B", "4C"]),
    ("2,0", ["4C", "19"]),
    ("GPU-1c2d", ["4C"]),                                   # the first digits of a UUID name one GPU
    (f"{U1},0", ["3B", "19"]),
    ("MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f", ["3B"]),   # a MIG device: its parent GPU
    (f"MIG-{U2}/1/0", ["4C"]),                              # the older MIG-GPU-<uuid>/<gi>/<ci> form
    ("1,7,0", ["3B"]),                                      # CUDA stops at the first bad entry
])
def test_cuda_indices_map_to_nvml_gpus(value, buses):
    seen = hardware.visible_gpus(value, INV3)
    assert [g.pci_bus_id.split(":")[1] for g in seen.gpus] == buses
    for i, b in enumerate(buses):
        assert hardware.nvml_gpu_for_cuda(i, INV3, value).pci_bus_id.split(":")[1] == b


@pytest.mark.parametrize("value,expect", [("GPU-8932", "start of 2 GPUs"), ("GPU-ffff", "no GPU has a UUID"),
                                          ("", "empty"), ("1,GPU-8932a", "listed twice")])
def test_uuid_entries_that_cuda_cannot_use_are_warned(value, expect):
    assert expect in hardware.visible_gpus(value, INV3).warning
    assert expect in hardware.check_visible_devices(value, INV3)


def test_cuda_device_beyond_the_visible_ones_is_one_clear_error():
    with pytest.raises(ValueError, match="CUDA device 1 does not exist: CUDA sees 1 GPU"):
        hardware.nvml_gpu_for_cuda(1, INV3, "2")
    # a MIG UUID the inventory cannot place (no MIG list from NVML): said, not guessed
    plain = [hardware.GPU(0, "H100", uuid=U0)]
    seen = hardware.visible_gpus("MIG-0000aaaa-1111", plain)
    assert seen.gpus == [None] and seen.warning is None and "cannot tell" in seen.notes[0]
    with pytest.raises(ValueError, match="cannot place"):
        hardware.nvml_gpu_for_cuda(0, plain, "MIG-0000aaaa-1111")


def test_mixed_models_without_pci_bus_order_are_noted():
    mixed = [hardware.GPU(0, "NVIDIA A100"), hardware.GPU(1, "NVIDIA T4")]
    assert "CUDA_DEVICE_ORDER" in hardware.visible_gpus("0,1", mixed).notes[0]
    assert hardware.visible_gpus("0,1", mixed, "PCI_BUS_ID").notes == []


def test_nvml_inventory_reads_uuids_and_mig_devices(monkeypatch):
    class NV:
        NVML_DEVICE_MIG_ENABLE = 1

        def nvmlInit(self): pass
        def nvmlShutdown(self): pass
        def nvmlSystemGetDriverVersion(self): return "580.1"
        def nvmlSystemGetCudaDriverVersion_v2(self): return 13000
        def nvmlDeviceGetCount(self): return 2
        def nvmlDeviceGetHandleByIndex(self, i): return i
        def nvmlDeviceGetPciInfo(self, h): return type("P", (), {"busId": b"00000000:19:00.0" if h == 0 else b"00000000:3B:00.0"})
        def nvmlDeviceGetCudaComputeCapability(self, h): return (9, 0)
        def nvmlDeviceGetName(self, h): return b"NVIDIA H100"
        def nvmlDeviceGetMemoryInfo(self, h): return type("M", (), {"total": 80 << 30})
        def nvmlDeviceGetUUID(self, h): return (U0, U1)[h] if isinstance(h, int) else "MIG-" + h

        def nvmlDeviceGetMigMode(self, h):
            if h == 0:
                raise RuntimeError("Not Supported")
            return (1, 1)

        def nvmlDeviceGetMaxMigDeviceCount(self, h): return 2

        def nvmlDeviceGetMigDeviceHandleByIndex(self, h, j):
            if j == 1:
                raise RuntimeError("Not Found")
            return "c6d4"
    import sys
    monkeypatch.setitem(sys.modules, "pynvml", NV())
    gpus, driver, cuda = hardware._nvml_gpus([])
    assert [g.uuid for g in gpus] == [U0, U1] and [g.mig_uuids for g in gpus] == [[], ["MIG-c6d4"]]
    assert driver == "580.1" and cuda == "13.0"


def test_minus_one_is_read_as_hiding_the_gpus_and_an_empty_inventory_is_not_blamed_on_cuda():
    gpus = [hardware.GPU(i, "NVIDIA H100", uuid=f"GPU-{i}aaa") for i in range(2)]
    seen = hardware.visible_gpus("-1", gpus)
    assert seen.gpus == [] and "hides every GPU" in seen.warning and "CUDA sees 0 GPU(s)" in seen.warning
    assert hardware.visible_gpus("1,-1", gpus).gpus == [gpus[1]]
    with pytest.raises(ValueError, match="lists no GPU"):
        hardware.nvml_gpu_for_cuda(0, [], None)
    with pytest.raises(ValueError, match=r"lists only 2 GPU\(s\), so CUDA and NVML disagree"):
        hardware.nvml_gpu_for_cuda(2, gpus, None)
    with pytest.raises(ValueError, match="does not exist"):
        hardware.nvml_gpu_for_cuda(1, gpus, "0")
