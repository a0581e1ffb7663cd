"""ddlab.measure.host_link_torch: the torch measurement's loop run end to end on the CPU, with
torch.cuda's streams, events and properties stood in (the copies are real CPU copies), NUMA
binding from a fake sysfs tree, the out-of-memory skip, validation, and the one line without a GPU."""
import contextlib
import os
import time
import types

import pytest
import torch

from ddlab.measure import host_link, host_link_torch as hlt

from test_numa import sysfs


class FakeCuda:
    """torch.cuda as the measurement uses it; copies happen on the CPU, synchronously."""
    def __init__(self):
        self.slept = 0
        self.props = types.SimpleNamespace(name="Fake GPU", clock_rate=1_500_000, pci_domain_id=0, pci_bus_id=0x19,
                                           pci_device_id=0, uuid="1234")

    def is_available(self): return True
    def device_count(self): return 1
    def get_device_properties(self, d): return self.props
    def synchronize(self, d=None): pass
    def _sleep(self, cycles): self.slept += 1

    def stream(self, s): return contextlib.nullcontext()

    class Stream:
        def __init__(self, device=None): pass
        def synchronize(self): pass
        def wait_event(self, e): pass

    class Event:
        def __init__(self, enable_timing=False): self.t = None
        def record(self, stream=None): self.t = time.perf_counter()
        def synchronize(self): pass
        def elapsed_time(self, other): return max(1e-6, (other.t - self.t) * 1000.0)


class FakeTorch:
    """Real torch for the tensors (on the CPU), fake torch.cuda; pinned buffers above
    ``pin_limit`` bytes fail as cudaHostAlloc does when the host has no memory."""
    uint8, int64 = torch.uint8, torch.int64
    arange, equal = staticmethod(torch.arange), staticmethod(torch.equal)

    def __init__(self, pin_limit=None):
        self.cuda = FakeCuda()
        self.pin_limit = pin_limit
        self.emptied = 0
        self._C = types.SimpleNamespace(_host_emptyCache=self._empty)

    def _empty(self):
        self.emptied += 1

    def device(self, kind, index=0):
        return f"{kind}:{index}"

    def empty(self, n, dtype=None, device=None, pin_memory=False):
        if pin_memory and self.pin_limit is not None and n > self.pin_limit:
            raise RuntimeError("CUDA error: out of memory")
        return torch.empty(n, dtype=dtype)


SIZES = [4096, 65536, 1 << 20]


def test_the_whole_loop_per_numa_node_on_the_cpu(tmp_path, monkeypatch):
    fake = FakeTorch(pin_limit=65536)
    monkeypatch.setattr(hlt, "_torch", lambda: fake)
    root = sysfs(tmp_path, {0: "0", 1: "0"}, {"0000:19:00.0": "1"})
    before = os.sched_getaffinity(0)
    obj = hlt.measure(0, sizes=SIZES, reps=3, latency_reps=5, sysfs=root)
    assert os.sched_getaffinity(0) == before                 # the thread's CPUs are given back
    assert obj["format"] == "ddlab-hostlink/1" and obj["method"] == hlt.METHOD
    assert obj["device"]["pci_bus_id"] == "00000000:19:00.0" and obj["numa"]["gpu_node"] == 1
    rows = obj["rows"]
    # pinned: 1 MiB had no host memory, so 4 KiB and 64 KiB; pageable: all three; 3 directions each
    assert len(rows) == 2 * (2 + 3) * 3
    assert {(s["numa_node"], s["bytes"], s["memory"]) for s in obj["skipped"]} == {(0, 1 << 20, "pinned"),
                                                                                  (1, 1 << 20, "pinned")}
    assert all(r["gbps"] > 0 and r["reps"] == 3 for r in rows)
    assert [r["gpu_node"] for r in rows if r["numa_node"] == 1][0] is True
    assert len(obj["latency"]) == 2 * 2 * 2 and fake.emptied == 2 and fake.cuda.slept > 0
    r = host_link.HostLinkResult.from_json(obj, source="torch")
    assert r.nodes == [0, 1] and r.gpu_node == 1 and r.best("pageable", "bidir", 0)["bytes"] == 1 << 20


def test_no_numa_in_the_kernel_measures_one_unbound_node(tmp_path, monkeypatch):
    monkeypatch.setattr(hlt, "_torch", lambda: FakeTorch())
    obj = hlt.measure(0, sizes=[4096], reps=2, latency_reps=3, memory=("pinned",), sysfs=sysfs(tmp_path))
    assert obj["numa"]["supported"] is False and {r["numa_node"] for r in obj["rows"]} == {0}
    assert "no NUMA information" in obj["notes"][0]


def test_wrong_data_stops_the_measurement(tmp_path, monkeypatch):
    monkeypatch.setattr(hlt, "_torch", lambda: FakeTorch())
    monkeypatch.setattr(hlt, "_validate", lambda *a: ["d2h"])
    with pytest.raises(RuntimeError, match="validation caught wrong data: node 0, pinned memory, 4096 bytes: d2h"):
        hlt.measure(0, sizes=[4096], reps=2, memory=("pinned",), sysfs=sysfs(tmp_path, {0: "0"}))


def test_validation_compares_both_directions():
    a, b = torch.empty(1000, dtype=torch.uint8), torch.empty(1000, dtype=torch.uint8)
    da, db = torch.empty(1000, dtype=torch.uint8), torch.empty(1000, dtype=torch.uint8)
    fake = FakeTorch()
    fake.equal = torch.equal
    assert hlt._validate(fake, a, b, da, db, 1000) == []
    assert a[300] == 300 % 251 and b[999] == 999 % 251


@pytest.mark.parametrize("kwargs,match", [({"nodes": [3]}, "no NUMA node 3"), ({"memory": ("huge",)}, "pinned"),
                                          ({"device_index": 2}, "CUDA device 2 does not exist")])
def test_bad_arguments(tmp_path, monkeypatch, kwargs, match):
    monkeypatch.setattr(hlt, "_torch", lambda: FakeTorch())
    with pytest.raises(ValueError, match=match):
        hlt.measure(sizes=[4096], sysfs=sysfs(tmp_path, {0: "0"}), **kwargs)


def test_without_a_gpu_one_line(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)     # no visible GPU, on any machine
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    with pytest.raises(hlt.NoGPU, match="^skipped: no GPU visible to PyTorch$"):
        hlt.measure()
    with pytest.raises(hlt.NoGPU):
        hlt.copy_load()


def test_reps_fill_about_the_time_asked():
    assert hlt.reps_for(1 << 30, 0.1, 50.0) == 5 and hlt.reps_for(4096, 0.1, 50.0) == 2000
    assert hlt.reps_for(16 << 20, 0.1, 50.0) == 298


def test_the_gpus_bus_id_from_its_uuid_when_torch_has_no_pci_ids():
    from ddlab.system import hardware
    fake = FakeTorch()
    fake.cuda.props = types.SimpleNamespace(name="X", uuid="8932f937-d72c")
    gpus = [hardware.GPU(0, "X", pci_bus_id="00000000:3B:00.0", uuid="GPU-8932f937-d72c")]
    assert hlt.cuda_bus_id(fake, 0, gpus) == ("00000000:3B:00.0", "UUID matched in NVML")
    gpus[0].uuid = None
    assert hlt.cuda_bus_id(fake, 0, gpus)[1] == "CUDA_VISIBLE_DEVICES applied to NVML's list"


def test_the_pcie_check_loads_the_gpus_torch_sees(monkeypatch):
    from ddlab.system import hardware, pcie
    fake = FakeTorch()
    monkeypatch.setattr(hlt, "_torch", lambda: fake)
    monkeypatch.setattr(hardware, "inventory", lambda **k: hardware.Inventory(gpus=[
        hardware.GPU(0, "A", pci_bus_id="00000000:05:00.0"), hardware.GPU(1, "B", pci_bus_id="00000000:19:00.0")]))
    seen = {}

    def fake_links(load, indices=None, pynvml=None):
        load()
        seen["indices"] = indices
        return pcie.LoadCheck([])
    monkeypatch.setattr(pcie, "links_under_load", fake_links)
    hlt.pcie_under_load(seconds=0.01, nbytes=4096)
    assert seen["indices"] == [1]          # CUDA device 0 is the GPU at 19:00.0: NVML's GPU 1


def test_a_cuda_device_nvml_does_not_list_is_named_with_the_reason(monkeypatch):
    """NVML lists fewer GPUs than CUDA sees (a driver and library mismatch): the link check reads the
    GPU it can match and says, for the other, which CUDA device and why, in one line."""
    from ddlab.system import hardware, pcie
    fake = FakeTorch()
    fake.cuda.device_count = lambda: 2
    fake.cuda.props = types.SimpleNamespace(name="X", uuid="")          # no PCI ids, no UUID from torch
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    monkeypatch.setattr(hlt, "_torch", lambda: fake)
    monkeypatch.setattr(hardware, "inventory", lambda **k: hardware.Inventory(gpus=[
        hardware.GPU(0, "A", pci_bus_id="00000000:05:00.0")]))
    seen = {}

    def fake_links(load, indices=None, pynvml=None):
        seen["indices"] = indices
        return pcie.LoadCheck([])
    monkeypatch.setattr(pcie, "links_under_load", fake_links)
    monkeypatch.setattr(hlt, "copy_load", lambda seconds, nbytes: (lambda: None))
    check = hlt.pcie_under_load(seconds=0.01, nbytes=4096)
    assert seen["indices"] == [0]
    assert check.notes == ["CUDA device 1 could not be matched to an NVML GPU, so its link is not read: CUDA device 1: "
                           "the GPU inventory (NVML) lists only 1 GPU(s), so CUDA and NVML disagree about this machine "
                           "(a driver and library mismatch, or GPUs NVML cannot read)"]
