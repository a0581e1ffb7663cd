"""Each GPU's PCIe link: the generation and width it runs at now and at most (NVML, else
nvidia-smi), and the warnings ``ddlab doctor`` adds: a link below its maximum, GeForce cards
without peer-to-peer.

An idle GPU trains its link down to save power (Gen1 when nothing moves), so a reading at rest
proves nothing. :func:`links_under_load` reads the links *while* a copy runs (the load is a
callable, e.g. :func:`ddlab.measure.host_link_torch.copy_load`): a link that stays below its
maximum generation or width under load is a real fault (a slot wired x8, a riser that cannot
run the generation, a BIOS setting, a card not fully seated), one of the causes of a slow GPU.
``ddlab doctor --load`` and the report's pcie-load step show it.
"""
from __future__ import annotations

import shutil
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Optional, Sequence

from ddlab.base.tables import Table
from ddlab.system.hardware import nvml_str
from ddlab.system.links import PCIE_GENERATIONS, pcie_x16_gbs

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
    and GeForce cards (recent GeForce GPUs without an NVLink bridge get no peer-to-peer from the driver)."""
    out = []
    for x in links:
        if x.downtrained:
            out.append(f"GPU {x.index} ({x.name}) runs its PCIe link at Gen{x.gen_current} x{x.width_current}, "
                       f"below its maximum Gen{x.gen_max} x{x.width_max}. GPUs lower the link generation when "
                       "idle to save power: check again under load (ddlab doctor --load reads it while a copy runs). If it "
                       "stays low, reseat the card or move it to a full x16 slot, and check the BIOS PCIe settings.")
    names = list(gpu_names) or [x.name for x in links]
    geforce = [n for n in names if is_geforce(n)]
    if len(names) >= 2 and geforce:
        out.append(f"{len(geforce)} of the {len(names)} GPUs are GeForce cards ({', '.join(sorted(set(geforce)))}): "
                   "between recent GeForce GPUs without an NVLink bridge the NVIDIA driver does not enable "
                   "peer-to-peer (P2P) access over PCIe, so NCCL stages every transfer through host memory "
                   "(check what this machine allows: nvidia-smi topo -p2p r).")
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



# --------------------------------------------------------------------------- under load
@dataclass
class LinkUnderLoad:
    """One GPU's PCIe link read before and while a load ran: the maximum it can do, the
    generation and width at rest, and the highest it reached under load (None: not known)."""
    index: int
    name: str
    gen_max: Optional[int]
    width_max: Optional[int]
    gen_idle: Optional[int]
    width_idle: Optional[int]
    gen_load: Optional[int] = None
    width_load: Optional[int] = None
    samples: int = 0

    @property
    def stays_below(self) -> bool:
        """Under load, still below its maximum generation or width (when both are known)."""
        return self.samples > 0 and any(c is not None and m is not None and c < m for c, m in
                                        ((self.gen_load, self.gen_max), (self.width_load, self.width_max)))

    def line(self) -> str:
        """One line: what the link did under load, flagged when it stayed below its maximum."""
        now = _gen_width(self.gen_load, self.width_load)
        most = _gen_width(self.gen_max, self.width_max)
        if not self.samples:
            return f"GPU {self.index} ({self.name}): no reading while the load ran"
        if not self.stays_below:
            return f"GPU {self.index} ({self.name}): PCIe {now} under load, its maximum"
        cap = ""
        if self.gen_load in PCIE_GENERATIONS and self.gen_max in PCIE_GENERATIONS and self.width_load and self.width_max:
            cap = (f"; the host link is capped at {pcie_x16_gbs(self.gen_load, self.width_load):.1f} of "
                   f"{pcie_x16_gbs(self.gen_max, self.width_max):.1f} GB/s per direction")
        return (f"GPU {self.index} ({self.name}): PCIe link stayed at {now} under load, below its maximum "
                f"{most}{cap}. Check the slot (a full x16 slot, no riser that cannot run the generation), "
                "that the card is seated, and the BIOS PCIe settings")


def _gen_width(gen, width) -> str:
    return f"Gen{gen if gen is not None else '?'} x{width if width is not None else '?'}"


@dataclass
class LoadCheck:
    """:func:`links_under_load`'s result: each GPU's link, how long the load ran, and what went
    wrong (``error``: the load's own failure; ``notes``)."""
    links: list = field(default_factory=list)
    seconds: float = 0.0
    error: Optional[str] = None
    notes: list = field(default_factory=list)

    def flagged(self) -> list:
        """The lines of the GPUs whose link stayed below its maximum under load."""
        return [x.line() for x in self.links if x.stays_below]

    def table(self) -> Table:
        rows = [{"index": x.index, "name": x.name, "idle": _gen_width(x.gen_idle, x.width_idle),
                 "load": _gen_width(x.gen_load, x.width_load) if x.samples else "no reading",
                 "max": _gen_width(x.gen_max, x.width_max), "samples": x.samples,
                 "state": "BELOW MAXIMUM" if x.stays_below else ("at maximum" if x.samples else "?")}
                for x in self.links]
        return Table([("index", "int", "#"), ("name", "text"), ("idle", "text", "PCIe at rest"),
                      ("load", "text", "PCIe under load"), ("max", "text", "PCIe max"), ("samples", "int"),
                      ("state", "text")], rows, missing="?",
                     title=f"PCIe links read while a host <-> GPU copy ran ({self.seconds:.1f} s)",
                     notes="under load: the highest generation and width read during the copy; at rest the "
                           "link may train down to save power")

    def to_dict(self) -> dict:
        return {"links": [asdict(x) for x in self.links], "seconds": self.seconds, "error": self.error,
                "notes": list(self.notes), "flagged": self.flagged()}

    @classmethod
    def from_dict(cls, d: dict) -> "LoadCheck":
        return cls([LinkUnderLoad(**x) for x in d.get("links", [])], d.get("seconds", 0.0), d.get("error"),
                   list(d.get("notes", [])))


def _ask(pynvml, fn: str, h) -> Optional[int]:
    try:
        return int(getattr(pynvml, fn)(h))
    except Exception:  # noqa: BLE001 - NVMLError_NotSupported and kin: not known
        return None


def links_under_load(load: Callable[[], object], indices: Optional[Sequence[int]] = None, pynvml=None,
                     interval_s: float = 0.02) -> LoadCheck:
    """Run ``load()`` in a thread and read the PCIe links of the NVML GPUs ``indices`` (None:
    all) every ``interval_s`` while it runs: NVML's current generation and width
    (``nvmlDeviceGetCurrPcieLinkGeneration``/``Width``) beside their maxima (``...Max...``).
    The highest reading under load is kept. ``pynvml`` stands in for the real module (tests).
    Raises RuntimeError with one line when NVML cannot be used (no driver, no nvidia-ml-py)."""
    if pynvml is None:
        try:
            import pynvml  # provided by nvidia-ml-py
        except ImportError:
            raise RuntimeError("nvidia-ml-py (pynvml) is not installed: the PCIe links cannot be read") from None
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded, ...
        raise RuntimeError(f"NVML unavailable ({exc}): the PCIe links cannot be read") from None
    try:
        count = pynvml.nvmlDeviceGetCount()
        wanted = list(range(count)) if indices is None else [i for i in indices if 0 <= i < count]
        handles = {i: pynvml.nvmlDeviceGetHandleByIndex(i) for i in wanted}
        links = {i: LinkUnderLoad(i, nvml_str(pynvml.nvmlDeviceGetName(h)),
                                  _ask(pynvml, "nvmlDeviceGetMaxPcieLinkGeneration", h),
                                  _ask(pynvml, "nvmlDeviceGetMaxPcieLinkWidth", h),
                                  _ask(pynvml, "nvmlDeviceGetCurrPcieLinkGeneration", h),
                                  _ask(pynvml, "nvmlDeviceGetCurrPcieLinkWidth", h)) for i, h in handles.items()}
        failure: list = []

        def run():
            try:
                load()
            except Exception as exc:  # noqa: BLE001 - reported in the result, not raised in a thread
                failure.append(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        t0 = time.monotonic()
        worker = threading.Thread(target=run, name="ddlab-pcie-load", daemon=True)
        worker.start()
        while worker.is_alive():
            for i, h in handles.items():
                x = links[i]
                gen = _ask(pynvml, "nvmlDeviceGetCurrPcieLinkGeneration", h)
                width = _ask(pynvml, "nvmlDeviceGetCurrPcieLinkWidth", h)
                if gen is None and width is None:
                    continue
                x.samples += 1
                x.gen_load = max(v for v in (x.gen_load, gen) if v is not None) if gen is not None else x.gen_load
                x.width_load = (max(v for v in (x.width_load, width) if v is not None) if width is not None
                                else x.width_load)
            worker.join(interval_s)
        seconds = time.monotonic() - t0
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass
    check = LoadCheck(list(links.values()), round(seconds, 3), failure[0] if failure else None)
    if indices is not None and len(wanted) < len(indices):
        check.notes.append(f"NVML has {count} GPU(s): {sorted(set(indices) - set(wanted))} not read")
    if any(x.samples == 0 for x in check.links) and not failure:
        check.notes.append("the load ended before a reading could be taken: give it longer")
    return check
