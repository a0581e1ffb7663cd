"""Each GPU's PCIe link: the generation and width it runs at now and at most (NVML, else
nvidia-smi), and the warnings ``ddlab doctor`` adds: a link below its maximum, GeForce cards
without peer-to-peer.
"""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from typing import Optional

from ddlab.base.tables import Table
from ddlab.system.hardware import nvml_str

SMI_PCIE_QUERY = "index,name,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max"


@dataclass
class PcieLink:
    """One GPU's PCIe link: the generation and lane width it runs at now and the most it
    (with this slot and system) can do."""
    index: int
    name: str
    gen_current: Optional[int]
    gen_max: Optional[int]
    width_current: Optional[int]
    width_max: Optional[int]

    @property
    def downtrained(self) -> bool:
        """Running below its maximum generation or width (when both are known)."""
        return any(c is not None and m is not None and c < m for c, m in
                   ((self.gen_current, self.gen_max), (self.width_current, self.width_max)))


def _int_or_none(v: str):
    v = v.strip()
    if v in ("", "[N/A]", "N/A", "[Not Supported]"):
        return None
    return int(v)


def parse_smi_pcie(text: str) -> list:
    """Parse ``nvidia-smi --query-gpu=<SMI_PCIE_QUERY> --format=csv,noheader,nounits``.
    Raises ValueError naming the line when the text is not in that format."""
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = [x.strip() for x in line.split(",")]
        if len(parts) != 6:
            raise ValueError(f"nvidia-smi line {lineno}: expected 6 comma-separated fields "
                             f"({SMI_PCIE_QUERY}), got {len(parts)}: {line!r}")
        try:
            idx, rest = int(parts[0]), [_int_or_none(x) for x in parts[2:]]
        except ValueError:
            raise ValueError(f"nvidia-smi line {lineno}: the index, generations and widths must be whole "
                             f"numbers (or [N/A]): {line!r}") from None
        out.append(PcieLink(idx, parts[1], *rest))
    return out


def _nvml_pcie(pynvml) -> list:
    """The PCIe links through NVML (``pynvml`` given, so tests can pass a stand-in)."""
    pynvml.nvmlInit()
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)

            def ask(fn):
                try:
                    return int(getattr(pynvml, fn)(h))
                except Exception:  # noqa: BLE001 - NVML raises NVMLError_NotSupported and kin: value unknown
                    return None
            out.append(PcieLink(i, nvml_str(pynvml.nvmlDeviceGetName(h)), ask("nvmlDeviceGetCurrPcieLinkGeneration"),
                                ask("nvmlDeviceGetMaxPcieLinkGeneration"), ask("nvmlDeviceGetCurrPcieLinkWidth"),
                                ask("nvmlDeviceGetMaxPcieLinkWidth")))
        return out
    finally:
        pynvml.nvmlShutdown()


def pcie_links(notes: list, pynvml=None, smi_text: Optional[str] = None) -> list:
    """Each GPU's PCIe link, from NVML or else ``nvidia-smi``; failures become ``notes``.
    ``pynvml`` and ``smi_text`` stand in for the real ones (tests)."""
    if smi_text is None:
        try:
            if pynvml is None:
                import pynvml  # provided by nvidia-ml-py
            links = _nvml_pcie(pynvml)
            if links:
                return links
        except Exception as exc:  # noqa: BLE001 - no NVML here: fall back to nvidia-smi
            notes.append(f"PCIe links: NVML not usable ({type(exc).__name__})")
        exe = shutil.which("nvidia-smi")
        if not exe:
            return []
        try:
            r = subprocess.run([exe, f"--query-gpu={SMI_PCIE_QUERY}", "--format=csv,noheader,nounits"],
                               capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            notes.append(f"PCIe links: nvidia-smi failed to run ({exc})")
            return []
        if r.returncode != 0:
            notes.append(f"PCIe links: nvidia-smi exited {r.returncode}")
            return []
        smi_text = r.stdout
    try:
        return parse_smi_pcie(smi_text)
    except ValueError as exc:
        notes.append(f"PCIe links: could not read nvidia-smi output: {exc}")
        return []


def is_geforce(name: str) -> bool:
    return "geforce" in str(name).lower()


def link_warnings(links: list, gpu_names=()) -> list:
    """Warnings about the GPUs' links: a PCIe link below its maximum generation or width,
    and GeForce cards (peer-to-peer between them is disabled by the driver)."""
    out = []
    for x in links:
        if x.downtrained:
            out.append(f"GPU {x.index} ({x.name}) runs its PCIe link at Gen{x.gen_current} x{x.width_current}, "
                       f"below its maximum Gen{x.gen_max} x{x.width_max}. GPUs lower the link generation when "
                       "idle to save power: check again under load (while training, nvidia-smi -q -d PCI). If it "
                       "stays low, reseat the card or move it to a full x16 slot, and check the BIOS PCIe settings.")
    names = list(gpu_names) or [x.name for x in links]
    geforce = [n for n in names if is_geforce(n)]
    if len(names) >= 2 and geforce:
        out.append(f"{len(geforce)} of the {len(names)} GPUs are GeForce cards ({', '.join(sorted(set(geforce)))}): "
                   "the NVIDIA driver does not enable peer-to-peer (P2P) access between GeForce GPUs over PCIe, "
                   "so NCCL stages every transfer through host memory (check: nvidia-smi topo -p2p r).")
    return out


def pcie_table(links: list) -> Table:
    rows = [{"index": x.index, "name": x.name,
             "now": f"Gen{x.gen_current} x{x.width_current}" if x.gen_current and x.width_current else "?",
             "max": f"Gen{x.gen_max} x{x.width_max}" if x.gen_max and x.width_max else "?",
             "state": "below maximum" if x.downtrained else "at maximum"} for x in links]
    return Table([("index", "int", "#"), ("name", "text"), ("now", "text", "PCIe now"),
                  ("max", "text", "PCIe max"), ("state", "text")], rows)


def pcie_report(inv, pynvml=None, smi_text: Optional[str] = None) -> str:
    """What ``ddlab doctor`` adds about the links of the GPUs of ``inv`` (an
    :class:`~ddlab.system.hardware.Inventory`): each GPU's PCIe generation and width (now and
    maximum) and the warnings of :func:`link_warnings`. Empty without GPUs."""
    if not inv.gpus:
        return ""
    notes: list = []
    links = pcie_links(notes, pynvml, smi_text)
    lines = []
    if links:
        lines += ["PCIe links:", str(pcie_table(links))]
    lines += [f"warning: {w}" for w in link_warnings(links, [g.name for g in inv.gpus])]
    lines += [f"note: {n}" for n in notes]
    return "\n".join(lines)

