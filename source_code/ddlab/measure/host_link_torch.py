"""The host <-> GPU link measured with PyTorch, for machines without ``nvcc``: the same
measurement as the compiled test (``source_code/p2p_bandwidth_latency/host_bandwidth_latency.cu``),
written as the same JSON (``ddlab-hostlink/1``), which :mod:`ddlab.measure.host_link` reads.

* bandwidth: ``reps`` copies of one size (``Tensor.copy_(src, non_blocking=True)``) between a
  pair of CUDA events on one stream, after one untimed warm-up copy; host-to-device (h2d),
  device-to-host (d2h), and both at once on two streams (bidir, the bytes of both directions
  counted). The copies are queued behind a short GPU sleep (``torch.cuda._sleep``) so that
  Python's time to issue them is not timed: the GPU then runs them back to back, as the
  compiled loop does.
* pinned host memory (``torch.empty(..., pin_memory=True)``: ``cudaHostAlloc``, what a
  ``DataLoader(pin_memory=True)`` gives) and pageable memory (plain ``torch.empty``; CUDA stages
  it through its own pinned buffers).
* per NUMA node of the host: this thread is bound to the node's CPUs with
  ``os.sched_setaffinity`` (a Linux thread's own affinity) before the host buffers are made,
  and their pages are first written by this thread: Linux places a page on the node of the CPU
  that first touches it, so the buffers land on that node without libnuma. ``cudaHostAlloc``
  touches its pages itself, in the calling thread, so pinned buffers land there too; PyTorch's
  cache of pinned blocks is emptied between nodes so that no node reuses another's pages.
  Without NUMA in the kernel: one node, unbound, and the result says so.
* latency: one copy of ``latency_size`` bytes between two events, the median of
  ``latency_reps`` copies, per direction and memory kind.
* validation: at the largest size of each node and memory kind, a pattern is copied each way
  and compared, so a wrong copy is not timed as a fast one.

:func:`copy_load` is a load for :func:`ddlab.system.pcie.links_under_load`, and
:func:`pcie_under_load` reads the PCIe links of the GPUs PyTorch sees while it runs.
"""
from __future__ import annotations

import contextlib
import os
import statistics
import time
from typing import Optional, Sequence

from ddlab.system import hardware, numa

FORMAT = "ddlab-hostlink/1"
METHOD = "torch copy_ with CUDA events (no nvcc here)"
DEFAULT_SIZES = tuple(4096 * 4 ** k for k in range(10))      # 4 KiB, 16 KiB, ... 1 GiB
GUESS_GBPS = {"pinned": 50.0, "pageable": 10.0}             # for choosing the repeats only


class NoGPU(RuntimeError):
    """PyTorch sees no GPU (or is not installed): the message is the one line to show."""


def _torch():
    try:
        import torch
    except ImportError:
        raise NoGPU("skipped: PyTorch is not installed, so there is no torch measurement of the host link") from None
    if not torch.cuda.is_available():
        raise NoGPU("skipped: no GPU visible to PyTorch")
    return torch


def reps_for(nbytes: int, seconds: float, guess_gbps: float) -> int:
    """Copies to time at ``nbytes`` so that a row takes about ``seconds`` (5 to 2000)."""
    return int(min(2000, max(5, seconds * guess_gbps * 1e9 / nbytes)))


# ----------------------------------------------------------------------------- the GPU's place
def cuda_bus_id(torch, index: int, gpus: Optional[list] = None) -> tuple:
    """(PCI bus id or None, how it was found) of CUDA device ``index``: from PyTorch's device
    properties (``pci_domain_id``/``pci_bus_id``/``pci_device_id``), else its UUID matched
    in the NVML inventory ``gpus``, else :func:`ddlab.system.hardware.nvml_gpu_for_cuda`
    (``CUDA_VISIBLE_DEVICES`` applied)."""
    props = torch.cuda.get_device_properties(index)
    dom, bus, dev = (getattr(props, k, None) for k in ("pci_domain_id", "pci_bus_id", "pci_device_id"))
    if bus is not None and dev is not None:
        return f"{int(dom or 0):08X}:{int(bus):02X}:{int(dev):02X}.0", "torch device properties"
    if gpus is None:
        gpus = hardware.inventory(software=False).gpus
    uuid = str(getattr(props, "uuid", "") or "").lower()
    for g in gpus:
        if uuid and g.uuid and g.uuid.lower().removeprefix("gpu-") == uuid.removeprefix("gpu-"):
            return g.pci_bus_id, "UUID matched in NVML"
    try:
        g = hardware.nvml_gpu_for_cuda(index, gpus, os.environ.get("CUDA_VISIBLE_DEVICES"),
                                       os.environ.get("CUDA_DEVICE_ORDER"))
    except ValueError as exc:           # NVML lists fewer GPUs than CUDA sees, or none: the reason, one line
        return None, str(exc).splitlines()[0]
    return g.pci_bus_id, "CUDA_VISIBLE_DEVICES applied to NVML's list"


# ----------------------------------------------------------------------------- NUMA binding
@contextlib.contextmanager
def bound_to(node: int, host: numa.HostNuma):
    """Run the body on the CPUs of NUMA ``node`` (this thread only); yields a note when the
    binding could not be made (None when it was). Restores the thread's CPUs after."""
    before = os.sched_getaffinity(0)
    note = None
    try:
        cpus = set(host.cpus_of(node)) & set(range(os.cpu_count() or 1))
        if not cpus:
            note = f"node {node}: no CPUs listed, thread not bound"
        else:
            try:
                os.sched_setaffinity(0, cpus)
            except OSError as exc:
                note = f"node {node}: could not bind the thread to its CPUs ({exc.strerror})"
        yield note
    finally:
        try:
            os.sched_setaffinity(0, before)
        except OSError:
            pass


def _empty_host_cache(torch) -> None:
    """Give PyTorch's cached pinned blocks back, so the next node's pinned buffers are new pages."""
    for fn in (getattr(getattr(torch, "accelerator", None), "empty_host_cache", None),
               getattr(torch._C, "_host_emptyCache", None)):
        if fn is not None:
            fn()
            return


# ----------------------------------------------------------------------------- timing
class _Timer:
    """Times queued copies with CUDA events, the copies held behind a GPU sleep while Python
    issues them (so the host's issue rate is not what is timed)."""

    def __init__(self, torch, device):
        self.torch = torch
        self.device = device
        self.s1 = torch.cuda.Stream(device)
        self.s2 = torch.cuda.Stream(device)
        clock_khz = getattr(torch.cuda.get_device_properties(device), "clock_rate", 0) or 2_000_000
        self.cycles_per_us = clock_khz / 1e3
        self.can_hold = hasattr(torch.cuda, "_sleep")
        self.hold = True        # off for pageable memory: CUDA waits for the stream before such a copy

    def _hold(self, stream, us: float) -> None:
        if self.can_hold and self.hold:
            with self.torch.cuda.stream(stream):
                self.torch.cuda._sleep(int(us * self.cycles_per_us))

    def event(self):
        return self.torch.cuda.Event(enable_timing=True)

    def one_way(self, copy, reps: int) -> float:
        """Seconds for ``reps`` calls of ``copy`` on one stream."""
        t, s = self.torch, self.s1
        with t.cuda.stream(s):
            copy()
        s.synchronize()
        self._hold(s, 20.0 * reps + 500)
        a, b = self.event(), self.event()
        with t.cuda.stream(s):
            a.record(s)
            for _ in range(reps):
                copy()
            b.record(s)
        b.synchronize()
        return a.elapsed_time(b) / 1e3

    def both_ways(self, h2d, d2h, reps: int) -> float:
        """Seconds for ``reps`` h2d copies on one stream and ``reps`` d2h copies on another,
        started together."""
        t, s1, s2 = self.torch, self.s1, self.s2
        with t.cuda.stream(s1):
            h2d()
        with t.cuda.stream(s2):
            d2h()
        t.cuda.synchronize(self.device)
        self._hold(s1, 40.0 * reps + 500)
        a, mid, b = self.event(), self.event(), self.event()
        a.record(s1)
        s2.wait_event(a)
        for _ in range(reps):
            with t.cuda.stream(s1):
                h2d()
            with t.cuda.stream(s2):
                d2h()
        mid.record(s2)
        s1.wait_event(mid)
        b.record(s1)
        b.synchronize()
        return a.elapsed_time(b) / 1e3

    def latency_us(self, copy, reps: int) -> float:
        """Median microseconds of one ``copy`` between two events."""
        t, s = self.torch, self.s1
        with t.cuda.stream(s):
            copy()
        s.synchronize()
        self._hold(s, 30.0 * reps + 500)
        pairs = [(self.event(), self.event()) for _ in range(reps)]
        with t.cuda.stream(s):
            for a, b in pairs:
                a.record(s)
                copy()
                b.record(s)
        pairs[-1][1].synchronize()
        return statistics.median(1000.0 * a.elapsed_time(b) for a, b in pairs)


def _host_pair(torch, nbytes: int, pinned: bool):
    """Two host buffers of ``nbytes``, first written by this thread (their pages land on the
    node this thread runs on). Raises RuntimeError when the host has no memory for them."""
    a = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)
    b = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)
    a.numpy().fill(0)          # numpy writes in this (bound) thread; torch's fill_ may use its pool
    b.numpy().fill(0)
    return a, b


def _fill_pattern(torch, t, n: int) -> None:
    """Bytes 0, 1, ... 250, 0, 1, ... in the first ``n`` of ``t`` (doubling copies: no buffer
    as large as ``t`` is made)."""
    k = min(251, n)
    t[:k].copy_(torch.arange(k, dtype=torch.uint8))
    done = k
    while done < n:
        k = min(done, n - done)
        t[done:done + k].copy_(t[:k])
        done += k


def _validate(torch, a, b, dev_a, dev_b, n: int) -> list:
    """Copy a pattern host -> GPU and GPU -> host at ``n`` bytes; the directions that were wrong."""
    wrong = []
    _fill_pattern(torch, a, n)
    _fill_pattern(torch, dev_b, n)
    dev_a[:n].fill_(255)
    dev_a[:n].copy_(a[:n])
    if not torch.equal(dev_a[:n], dev_b[:n]):
        wrong.append("h2d")
    b[:n].fill_(255)
    b[:n].copy_(dev_b[:n])
    torch.cuda.synchronize(dev_a.device)
    if not torch.equal(a[:n], b[:n]):
        wrong.append("d2h")
    return wrong


def _checked_sizes(torch, device_index: int, memory: Sequence[str], sizes: Sequence[int]) -> list:
    """The sizes sorted and without repeats, after checking the device, memory kinds and sizes."""
    count = torch.cuda.device_count()
    if not 0 <= device_index < count:
        raise ValueError(f"CUDA device {device_index} does not exist: PyTorch sees {count} GPU(s)")
    for m in memory:
        if m not in GUESS_GBPS:
            raise ValueError(f"memory must be 'pinned' or 'pageable', got {m!r}")
    sizes = sorted({int(s) for s in sizes})
    if not sizes or sizes[0] < 4:
        raise ValueError("sizes must be byte counts of at least 4")
    return sizes


def _checked_nodes(nodes: Optional[Sequence[int]], host) -> list:
    """The NUMA nodes to measure from: ``nodes`` (each one of the host's), or every node."""
    if nodes is None:
        return host.node_ids
    nodes = [int(n) for n in nodes]
    unknown = [n for n in nodes if n not in host.node_ids]
    if unknown:
        raise ValueError(f"this host has no NUMA node {unknown[0]} (it has {host.node_ids})")
    return nodes


def _largest_host_pair(torch, sizes: list, latency_size: int, node: int, mem: str, skipped: list) -> tuple:
    """(a, b, bytes): the two host buffers of the largest size the host can give (each size it
    cannot, largest first, appended to ``skipped``); (None, None, 0) when it can give none."""
    for size in reversed(sizes):
        try:
            a, b = _host_pair(torch, max(size, latency_size), mem == "pinned")
            return a, b, size
        except RuntimeError:           # out of host memory (or of pinnable memory)
            skipped.append({"numa_node": node, "bytes": size, "memory": mem, "why": "out of host memory"})
    return None, None, 0


def _bandwidth_rows(timer, a, b, dev_a, dev_b, sizes: list, have: int, reps: Optional[int],
                    seconds_per_row: float, node: int, gpu_node, mem: str) -> list:
    """One row per size up to ``have`` and direction (h2d, d2h, both at once) between the host
    buffers a, b and the device buffers dev_a, dev_b."""
    rows = []
    for size in sizes:
        if size > have:
            continue
        n = reps or reps_for(size, seconds_per_row, GUESS_GBPS[mem])

        def h2d(size=size):
            dev_a[:size].copy_(a[:size], non_blocking=True)

        def d2h(size=size):
            b[:size].copy_(dev_b[:size], non_blocking=True)
        for direction, secs, moved in (("h2d", timer.one_way(h2d, n), 1), ("d2h", timer.one_way(d2h, n), 1),
                                       ("bidir", timer.both_ways(h2d, d2h, n), 2)):
            rows.append({"numa_node": node, "gpu_node": node == gpu_node, "memory": mem,
                         "direction": direction, "bytes": size, "reps": n, "seconds": secs,
                         "gbps": moved * size * n / secs / 1e9})
    return rows


def _latency_rows(timer, a, b, dev_a, dev_b, latency_size: int, latency_reps: int, node: int, mem: str) -> list:
    """The median time of one small copy each way (h2d, d2h)."""
    def small_h2d():
        dev_a[:latency_size].copy_(a[:latency_size], non_blocking=True)

    def small_d2h():
        b[:latency_size].copy_(dev_b[:latency_size], non_blocking=True)
    return [{"numa_node": node, "memory": mem, "direction": direction, "bytes": latency_size,
             "us_median": timer.latency_us(copy, latency_reps), "reps": latency_reps}
            for direction, copy in (("h2d", small_h2d), ("d2h", small_d2h))]


def measure(device_index: int = 0, sizes: Sequence[int] = DEFAULT_SIZES, reps: Optional[int] = None,
            seconds_per_row: float = 0.1, nodes: Optional[Sequence[int]] = None,
            memory: Sequence[str] = ("pinned", "pageable"), latency_size: int = 4096,
            latency_reps: int = 200, sysfs: str = numa.SYSFS) -> dict:
    """Measure the host link of CUDA device ``device_index`` from each NUMA node in ``nodes``
    (None: every node of the host); returns the ``ddlab-hostlink/1`` JSON object (as a dict).
    ``reps`` None: as many copies as fill about ``seconds_per_row`` per row. Raises
    :class:`NoGPU` (one line) when PyTorch sees no GPU, ValueError for a bad argument."""
    torch = _torch()
    sizes = _checked_sizes(torch, device_index, memory, sizes)
    dev = torch.device("cuda", device_index)
    props = torch.cuda.get_device_properties(dev)
    bus, how = cuda_bus_id(torch, device_index)
    gpu_numa = numa.gpu_numa_node(bus, sysfs)
    host = numa.host_numa(sysfs)
    notes = [] if host.supported else [host.note]
    if gpu_numa.node is None and host.supported:
        notes.append(f"the GPU's NUMA node: {gpu_numa.text}")
    nodes = _checked_nodes(nodes, host)
    biggest = max(sizes[-1], latency_size)
    dev_a = torch.empty(biggest, dtype=torch.uint8, device=dev)
    dev_b = torch.empty(biggest, dtype=torch.uint8, device=dev)
    timer = _Timer(torch, dev)
    if not timer.can_hold:
        notes.append("torch.cuda._sleep is missing: Python's time to issue each copy is in the small sizes' figures")
    rows, lats, skipped, failures = [], [], [], []
    for node in nodes:
        with bound_to(node, host) if host.supported else contextlib.nullcontext(None) as bind_note:
            if bind_note:
                notes.append(bind_note)
            for mem in memory:
                a, b, have = _largest_host_pair(torch, sizes, latency_size, node, mem, skipped)
                if not have:
                    continue
                bad = _validate(torch, a, b, dev_a, dev_b, have)
                if bad:
                    failures.append(f"node {node}, {mem} memory, {have} bytes: {' and '.join(bad)} copied wrong data")
                    continue
                timer.hold = mem == "pinned"
                rows += _bandwidth_rows(timer, a, b, dev_a, dev_b, sizes, have, reps, seconds_per_row, node,
                                        gpu_numa.node, mem)
                lats += _latency_rows(timer, a, b, dev_a, dev_b, latency_size, latency_reps, node, mem)
                del a, b
                torch.cuda.synchronize(dev)
            _empty_host_cache(torch)
    if failures:
        raise RuntimeError("the torch host-link measurement's validation caught wrong data: " + "; ".join(failures))
    return {"format": FORMAT,
            "device": {"index": device_index, "name": props.name, "pci_bus_id": bus, "numa_node": gpu_numa.node,
                       "bus_id_from": how},
            "method": METHOD,
            "numa": {"supported": host.supported, "bound": host.supported, "nodes": host.node_ids,
                     "gpu_node": gpu_numa.node},
            "rows": rows, "latency": lats, "skipped": skipped, "notes": notes}


# ----------------------------------------------------------------------------- a load for the PCIe check
def copy_load(devices: Optional[Sequence[int]] = None, seconds: float = 1.0, nbytes: int = 256 << 20):
    """A callable that keeps the host links of CUDA ``devices`` (None: all PyTorch sees) busy
    for about ``seconds``: pinned copies host -> GPU and back, on every device at once. Raises
    :class:`NoGPU` at once (not when called) when PyTorch sees no GPU."""
    torch = _torch()
    devices = list(range(torch.cuda.device_count())) if devices is None else list(devices)

    def load():
        bufs = []
        for i in devices:
            d = torch.device("cuda", i)
            bufs.append((torch.empty(nbytes, dtype=torch.uint8, pin_memory=True),
                         torch.empty(nbytes, dtype=torch.uint8, device=d), torch.cuda.Stream(d)))
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for host, gpu, stream in bufs:
                with torch.cuda.stream(stream):
                    gpu.copy_(host, non_blocking=True)
                    host.copy_(gpu, non_blocking=True)
            for _, _, stream in bufs:
                stream.synchronize()
    return load


def pcie_under_load(seconds: float = 1.0, nbytes: int = 256 << 20, pynvml=None):
    """Read the PCIe links of the GPUs PyTorch sees while :func:`copy_load` runs on all of
    them (:func:`ddlab.system.pcie.links_under_load`); CUDA devices are matched to NVML's by
    PCI bus id, so ``CUDA_VISIBLE_DEVICES`` does not mix them up. Raises :class:`NoGPU` (one
    line) without a GPU, RuntimeError (one line) without NVML."""
    from ddlab.system import pcie
    torch = _torch()
    gpus = hardware.inventory(software=False).gpus
    by_bus = {g.pci_bus_id: g.index for g in gpus}
    indices, unmatched = [], []
    for i in range(torch.cuda.device_count()):
        bus, how = cuda_bus_id(torch, i, gpus)
        (indices.append(by_bus[bus]) if bus in by_bus else unmatched.append((i, how)))
    check = pcie.links_under_load(copy_load(seconds=seconds, nbytes=nbytes), indices=indices or None, pynvml=pynvml)
    for i, how in unmatched:      # its link is not read: say which device and why
        check.notes.append(f"CUDA device {i} could not be matched to an NVML GPU, so its link is not read: {how}")
    return check
