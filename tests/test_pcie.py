"""ddlab.system.pcie: each GPU's PCIe link from NVML or nvidia-smi, and its warnings."""
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
