"""ddlab.system.pcie: each GPU's PCIe link from NVML or nvidia-smi, and its warnings."""
import threading
import time

import pytest

from ddlab.system import hardware, pcie


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
    links = pcie.pcie_links(notes, pynvml=nv)
    assert nv.shut and notes == []
    got = [(x.gen_current, x.gen_max, x.width_current, x.width_max) for x in links]
    assert got == [(5, 5, None, 16), (3, 5, 8, 16)]
    assert [x.downtrained for x in links] == [False, True]
    w = pcie.link_warnings(links)
    assert len(w) == 1 and "GPU 1" in w[0] and "Gen3 x8" in w[0] and "Gen5 x16" in w[0] and "under load" in w[0]


def test_pcie_links_from_nvidia_smi_and_the_geforce_warning():
    links = pcie.pcie_links([], smi_text=PCIE_SMI)
    assert [x.downtrained for x in links] == [False, True]
    w = pcie.link_warnings(links)
    assert any("Gen1 x8" in x for x in w)
    assert any("GeForce" in x and "peer-to-peer" in x and "host memory" in x for x in w)
    # one GeForce card alone has no peer to talk to: no P2P warning
    assert not any("GeForce" in x for x in pcie.link_warnings(links[:1]))
    assert pcie.parse_smi_pcie("0, A, [N/A], 4, 16, 16\n")[0].gen_current is None


@pytest.mark.parametrize("text", ["0, A, 4, 4\n", "0, A, four, 4, 16, 16\n", "NVIDIA-SMI has failed\n"])
def test_malformed_pcie_text_is_one_clear_note(text):
    notes = []
    assert pcie.pcie_links(notes, smi_text=text) == []
    assert len(notes) == 1 and notes[0].startswith("PCIe links: could not read nvidia-smi output")


def test_pcie_report(monkeypatch):
    inv = hardware.Inventory(gpus=[hardware.GPU(i, "NVIDIA GeForce RTX 4090") for i in (0, 1)])
    text = pcie.pcie_report(inv, smi_text=PCIE_SMI)
    assert "PCIe now" in text and "Gen1 x8" in text and "below maximum" in text
    assert text.count("warning:") == 2
    assert pcie.pcie_report(hardware.Inventory()) == ""


# --------------------------------------------------------------------------- under load
class LoadNVML(FakeNVML):
    """Links that train up when a copy starts: GPU 0 idles at Gen1 and reaches Gen5 x16 (its
    maximum) under load; GPU 1 idles at Gen1 and never gets past Gen4 x16 of Gen5 x16."""
    def __init__(self, loaded):
        super().__init__()
        self.loaded = loaded            # a threading.Event the load sets while it runs

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        if not self.loaded.is_set():
            return 1
        return 5 if h == 0 else 4

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return 16

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return 16


def _load(event, seconds=0.15):
    def load():
        event.set()
        time.sleep(seconds)
        event.clear()
    return load


def test_a_link_that_stays_below_its_maximum_under_load_is_flagged():
    ev = threading.Event()
    nv = LoadNVML(ev)
    check = pcie.links_under_load(_load(ev), pynvml=nv, interval_s=0.005)
    assert nv.shut and check.error is None and check.seconds >= 0.15
    g0, g1 = check.links
    assert (g0.gen_idle, g0.gen_load, g0.gen_max) == (1, 5, 5) and not g0.stays_below
    assert (g1.gen_idle, g1.gen_load, g1.gen_max) == (1, 4, 5) and g1.stays_below and g1.samples >= 3
    flagged = check.flagged()
    assert len(flagged) == 1 and flagged[0].startswith("GPU 1 (NVIDIA H200): PCIe link stayed at Gen4 x16 under load")
    assert "below its maximum Gen5 x16" in flagged[0] and "31.5 of 63.0 GB/s" in flagged[0]
    assert "its maximum" in g0.line() and "Gen1 x16" in check.table().text()
    again = pcie.LoadCheck.from_dict(check.to_dict())
    assert again.flagged() == flagged and check.to_dict()["flagged"] == flagged


def test_only_the_loaded_gpus_are_read_and_a_failing_load_is_reported():
    ev = threading.Event()

    def broken():
        time.sleep(0.02)
        raise RuntimeError("CUDA out of memory\nmore")
    check = pcie.links_under_load(broken, indices=[1, 5], pynvml=LoadNVML(ev), interval_s=0.005)
    assert [x.index for x in check.links] == [1] and check.error == "RuntimeError: CUDA out of memory"
    assert "[5] not read" in check.notes[0]


def test_a_load_too_short_to_read_is_said():
    class Never(LoadNVML):
        def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
            raise self.NVMLError("Not Supported")

        def nvmlDeviceGetCurrPcieLinkWidth(self, h):
            raise self.NVMLError("Not Supported")
    check = pcie.links_under_load(lambda: None, pynvml=Never(threading.Event()))
    assert all(x.samples == 0 and not x.stays_below for x in check.links)
    assert "give it longer" in check.notes[0] and "no reading" in check.links[0].line()


def test_no_nvml_is_one_clear_error():
    class Broken(FakeNVML):
        def nvmlInit(self):
            raise self.NVMLError("NVML Shared Library Not Found")
    with pytest.raises(RuntimeError, match="NVML unavailable"):
        pcie.links_under_load(lambda: None, pynvml=Broken())
