#!/usr/bin/env python
"""Write notebooks/2.System-Topology.ipynb from the cells below (outputs empty).

The .ipynb is the source of truth that is committed; this script is how it was written and
the easiest way to change it consistently: edit a cell here, run

    python tools/build_notebook2.py

and commit both files. Markdown cells hold no measured number: measured values are
printed by code cells, and every cited figure names its source.
"""
from __future__ import annotations

import os
import sys

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "notebooks", "2.System-Topology.ipynb")

CELLS: list = []


def md(text: str) -> None:
    CELLS.append(new_markdown_cell(text.strip("\n")))


def code(text: str) -> None:
    CELLS.append(new_code_cell(text.strip("\n")))


# =============================================================================== title
md(r"""
# 2. System Topology: how GPUs talk to each other

Every step of data-parallel training ends with the GPUs exchanging gradients. How long that
exchange takes depends on the path the bytes travel: NVLink between the GPUs, a PCIe switch,
a detour through the CPU and host memory, or a network. This notebook teaches you to read that
path off a machine, to predict what it costs, and to measure it.

**Objectives.** When you finish this notebook you can

1. state the alpha-beta model of a message, compute its two terms with units, and say which one dominates;
2. explain host staging and peer-to-peer copies, and what unified virtual addressing (UVA) adds;
3. read `nvidia-smi topo -m`, name the best and the worst GPU pair, and choose GPUs for a job;
4. read NCCL's `NCCL_DEBUG=INFO` output to find the transport it chose, and steer it with
   `NCCL_P2P_LEVEL`, `NCCL_P2P_DISABLE` and `NCCL_SHM_DISABLE`;
5. explain why the interconnect matters in proportion to a step's gradient bytes against its compute:
   little for a small CNN, a lot for a model with large gradients;
6. measure peer-to-peer bandwidth and latency and an all-reduce sweep, and compare them with the link's peak.

**Time.** About 75 minutes to read and work through. The cells themselves run in a few minutes,
on a laptop CPU as on a multi-GPU server.

**Before you start.** Start_Here (the course's set-up and hardware modes); data parallelism and
all-reduce in outline (notebook 1, being written, will cover them). Every code cell calls the
course's package `ddlab`; the module it calls (`ddlab.links`, `ddlab.topology`, ...) is where its
code lives, under `source_code/ddlab/`.

**Your hardware decides what runs live.** Without a GPU, the experiments run for real on CPU
processes (PyTorch's gloo backend) and the GPU results are shown as *recorded* on a named machine.
With one GPU, the single-GPU parts run live. With two or more, everything runs live. Each figure
and table says which it is: "measured now on ...", "recorded on ..." or, for figures taken from
specifications, "written from published facts". Where this machine cannot run an experiment and
the course has no recording of it, the cell says so rather than show a number.

**Where the numbers come from.** The text of this notebook contains no measured number: every
measurement is printed by a code cell, from a run now or from a recording under
`source_code/reference/`. The figures the text does quote (link rates, latencies) are published
ones, and `ddlab.links.sources()` names the source of each.
""")

code(r"""
%matplotlib inline
from IPython.display import Markdown, display

import ddlab
from ddlab import checks, diagrams, hardware, links, provenance, topology, widgets

inv = hardware.inventory()
MODE = inv.mode                                   # "cpu", "single-gpu" or "multi-gpu"
NOW = provenance.collect(inventory=inv)           # this machine, for "measured now on ..." captions
WHAT_RUNS = {
    "cpu": "no GPU found. Experiments run for real on CPU processes (gloo); GPU results are shown "
           "as recorded on the machine named beside them",
    "single-gpu": "one GPU. Single-GPU parts run live; parts that need two GPUs show results recorded "
                  "on the machine named beside them",
    "multi-gpu": f"{inv.gpu_count} GPUs. Every experiment runs live on this machine",
}
print(f"This notebook runs in {MODE} mode: {WHAT_RUNS[MODE]}.\n")
print(hardware.format_inventory(inv))
caption = provenance.caption                      # "measured now on ..." / "recorded on ..." labels
""")

# =============================================================================== 1
md(r"""
## 1. Latency and bandwidth

Two numbers describe a link, as far as one message is concerned:

* **Latency**, $\alpha$ (alpha): the fixed cost of sending a message at all, however small: the
  time until the first byte arrives. It includes software (a driver call, a copy-engine launch, a
  protocol handshake), not just the wire. Unit: seconds; here usually microseconds (µs).
* **Bandwidth**, $\beta$ (beta): the rate at which bytes flow once they flow. Unit: bytes per
  second. Link specifications quote **GB/s = 10⁹ bytes/s**, while message sizes are usually powers
  of two: **KiB = 2¹⁰ B, MiB = 2²⁰ B, GiB = 2³⁰ B**. Keep the two apart.

The **alpha-beta model** of one message of $n$ bytes:

$$T(n) = \alpha + \frac{n}{\beta}$$

Small messages are *latency-bound* ($\alpha$ dominates); large messages are *bandwidth-bound*
($n/\beta$ dominates). The two terms are equal at the **crossover size** $n^* = \alpha\beta$, where
the effective bandwidth $n/T$ is exactly half the link rate. So a benchmark that reports
"bandwidth" as $n/T$ shows far less than $\beta$ for small messages: that is the model at work,
not a broken link.

### A worked example, with units

Send 64 KiB over a PCIe 3.0 x16 link. Take $\alpha$ = 4 µs (a typical GPU-to-GPU latency over
PCIe; its source is in the table below) and $\beta$ = 15.75 GB/s (16 lanes × 8 GT/s × 128/130
encoding ÷ 8 bits per byte, from the PCIe 3.0 specification).

* $n$ = 64 KiB = 64 × 1024 B = 65,536 B.
* Latency term: $\alpha$ = 4 µs.
* Bandwidth term: $n/\beta$ = 65,536 B ÷ (15.75 × 10⁹ B/s) = 4.16 × 10⁻⁶ s = **4.16 µs**.
* Total: $T$ = 4 µs + 4.16 µs = **8.16 µs**. Effective bandwidth $n/T$ = 65,536 B ÷ 8.16 µs ≈ 8.0 GB/s:
  half the link rate, because 64 KiB is almost exactly this link's crossover size,
  $\alpha\beta$ = 4 × 10⁻⁶ s × 15.75 × 10⁹ B/s ≈ 63,000 B.

A check worth memorising: moving 64 KiB in 4 µs is 65,536 B ÷ (4 × 10⁻⁶ s) ≈ 16.4 × 10⁹ B/s,
about **16 GB/s**, not 1.6 GB/s. Older course material got this factor of ten wrong; carry the
units through every step and it cannot happen.

The cell below does the same arithmetic with `ddlab.widgets.message_time`, and fails if the text
above and the code ever disagree.
""")

code(r"""
example = widgets.message_time(64 * 1024, "pcie3_x16")
print(example)
# The figures quoted in the text above, recomputed: this cell fails if they ever disagree.
assert round(example.bandwidth_s * 1e6, 2) == 4.16 and round(example.total_s * 1e6, 2) == 8.16
print(f"\nsanity check: 64 KiB in 4 us = {64 * 1024 / 4e-6 / 1e9:.1f} GB/s")
""")

md(r"""
### Links: bandwidth, latency and where each figure comes from

`ddlab.links` is the course's catalogue of link technologies. Bandwidths come from the
specifications and are *derived in code* from their signalling facts (lanes × rate × encoding),
so you can check the arithmetic. Latencies are orders of magnitude from published measurements
and vendor documents: they describe the software path as much as the wire, which is why they
hardly change from one generation to the next. Things to notice:

* every NVLink generation from 2 (V100) to 4 (H100/H200) moves 25 GB/s per link per direction;
  newer GPUs are faster because they have *more links*. `nvidia-smi topo -m` prints the bonded
  count: `NV2` is two links, `NV18` eighteen. (`nvidia-smi nvlink --status` prints 26.56 GB/s per
  NVLink-4 link: the raw signalling rate, of which 25 GB/s is data. Section 7's test compares
  against the raw rate; the catalogue says so in its note.)
* network links are quoted in gigabits: 400 Gb/s InfiniBand NDR is 50 GB/s.
* the InfiniBand latency is the adapter's own, with no GPU in the path. A message between GPUs on
  two nodes also crosses PCIe at both ends and runs through NCCL's software, so do not conclude
  from the calculator that InfiniBand beats NVLink for small GPU messages.
* these are latencies of one copy. A collective called from PyTorch pays more per call (launching
  kernels, synchronising the ranks); section 7 measures that per-call cost on a real machine.
""")

code(r"""
print(links.table())
""")

code(r"""
print(links.sources())
""")

md(r"""
### Try it: the message-time calculator

Move the slider (message size, on a log scale) and pick a link. The calculator shows both terms,
which one dominates, and the effective bandwidth. Questions to try:

* Below which size is PCIe 3.0 latency-bound? Is NVLink 4 with 18 links latency-bound at the same size?
* For a 1 KiB message, how much faster is NV18 than PCIe 5.0? For a 1 GiB message?
* Why does 10 GbE lose to every other link for large messages but not by the same factor for small ones?
""")

code(r"""
widgets.message_time_calculator(64 * 1024, "pcie3_x16")
""")

md(r"""
The same comparison for every link at once, for a 4 KiB message and for a 25 MiB message (the size
of the gradient buckets PyTorch DDP all-reduces by default: `bucket_cap_mb=25` in the
`torch.nn.parallel.DistributedDataParallel` documentation):
""")

code(r"""
print(widgets.compare_links(4 * 1024))
print()
print(widgets.compare_links(25 * 2**20))
""")

code(r"""
widgets.plot_message_times();
""")

# =============================================================================== 2
md(r"""
## 2. Host staging versus peer-to-peer

When a process on GPU0 copies a buffer to GPU1 in the same machine, the bytes can take two
routes (the drawing is `ddlab.diagrams.data_paths()`; `make images` writes it to `images/`):

* **Host staging** (peer access off): GPU0 copies the buffer over PCIe into a pinned buffer in host
  memory, then GPU1 copies it from there over PCIe. Two PCIe crossings, a stop in host memory, and
  the CPU's driver orchestrates both copies. This is what happens when the two GPUs cannot access
  each other's memory, for example across CPU sockets on many servers, or when peer access is
  switched off.
* **Peer-to-peer** (peer access on): GPU0 writes straight into GPU1's memory, over NVLink when the
  two are joined by it, otherwise through the PCIe switch (or root complex) above them. One hop;
  host memory is never touched.

CUDA decides per pair: `cudaDeviceCanAccessPeer` says whether peer access is possible, and
`cudaDeviceEnablePeerAccess` switches it on.
""")

code(r"""
diagrams.data_paths();
""")

md(r"""
**UVA in two sentences.** With unified virtual addressing, host memory and the memory of every GPU
in a process share one virtual address space, so a pointer alone tells the driver which device it
lives on. That is what lets one copy call move data between any two devices (taking the
peer-to-peer path when peer access is enabled and host staging when it is not), and lets a kernel
on one GPU read or write a peer GPU's memory, or pinned host memory, through an ordinary pointer.

**Why host staging is slower**, term by term in the alpha-beta model:

* *latency*: two copies instead of one, each with its own start-up cost, and the second can only
  start on data the first has finished writing, so $\alpha$ is at least doubled;
* *bandwidth*: every byte crosses PCIe twice and is written to and read back from host memory. Even
  when the driver pipelines the two hops in chunks, the rate is at best that of one PCIe link, and
  the CPU's memory and root complex are shared with everything else the machine does;
* *the link it gives up*: on a machine whose GPUs are joined by NVLink, host staging leaves the
  NVLink idle. For NVLink 4 with 18 links against PCIe 5.0 x16 (section 1's catalogue), that alone
  is a factor of about seven in bandwidth.

Section 7 measures both paths on a real machine, and section 5 shows NCCL taking either of them.
""")

# =============================================================================== 3
md(r"""
## 3. Reading `nvidia-smi topo -m`

`nvidia-smi topo -m` prints a matrix with one row and one column per GPU (and per network
adapter, NIC). Each cell names the most direct path between the two devices: `NV#` for # bonded
NVLinks, then PCIe paths from the shortest to the longest: `PIX` (one PCIe switch), `PXB`
(several switches), `PHB` (through the CPU's PCIe host bridge), `NODE` (between host bridges of
one CPU socket) and `SYS` (across the link between CPU sockets). The extra columns say which CPU
cores and NUMA node are closest to each GPU.

`ddlab.topology` reads that text in every shape people paste it, ranks the GPU pairs, finds the
best subset of $k$ GPUs, describes the machine in words and draws it. First, this machine:
""")

code(r"""
if inv.gpu_count:
    here = topology.Topology.from_system()
    print(topology.report(here))
    here.draw(title="this machine: " + caption(NOW, live=True));
else:
    here = None
    print("No GPU on this machine, so there is no live matrix to read: the recorded machines below stand in for it.")
""")

md(r"""
Then the recorded machines: a DGX-1 with eight V100 (NVLink *hybrid cube-mesh*: some pairs have
two links, some one, some none), a DGX A100 (every pair twelve links through NVSwitch), a PCIe-only
two-socket server, and the course's 2x H200 machine where it has been captured. Each says where its
matrix comes from: captured on a machine, written from NVIDIA's published system descriptions, or
(the PCIe server) an illustrative example of a common layout.
""")

code(r"""
machines = {name: topology.recorded(name) for name in topology.recorded_names()}
for name, t in machines.items():
    print(f"=== {name}: {t.description}\n    {caption(t.provenance)}"
          + (f"\n    source: {t.provenance['source']}" if t.provenance.get("source") else ""))
    print(t.matrix_table(), "\n")
""")

code(r"""
import matplotlib.pyplot as plt

cols = 2
rows = -(-len(machines) // cols)
fig, axes = plt.subplots(rows, cols, figsize=(8 * cols, 7.5 * rows), squeeze=False)
for ax, (name, t) in zip(axes.flat, machines.items()):
    t.draw(ax=ax, title=f"{name}: {len(t.gpus)} GPUs\n({caption(t.provenance)})")
for ax in axes.flat[len(machines):]:
    ax.remove()
fig.tight_layout()
""")

md(r"""
### The link legend, with typical figures

What each label means, where the data goes, and what to expect of it. The typical figures depend on
the machine's PCIe and NVLink generations; this table assumes a DGX-1 V100 (PCIe 3.0 and NVLink 2,
with `NV2` as its best pairs). Call `links.legend_markdown(pcie_generation=..., nvlink_generation=...,
nvlinks=...)` for another machine.
""")

code(r"""
display(Markdown(links.legend_markdown(pcie_generation=3, nvlink_generation=2, nvlinks=2)))
""")

md(r"""
### Exercise: the best and the worst pair

Look at the `dgx1-v100` matrix and drawing above (an 8-GPU machine, written from NVIDIA's
published description). You have a 2-GPU job: which pair of GPUs would you give it, and which pair
is the worst choice? Replace the two `None` below with your answers (as `(0, 1)` or `"GPU0-GPU1"`)
and run the cell. The check answers right or wrong, and says why; if several pairs are equally
good (or equally bad), any of them counts. Answer before you read on: the cell after it gives the
answer away.
""")

code(r"""
dgx1 = topology.recorded("dgx1-v100")
my_best = None     # edit: the best-connected pair, e.g. (0, 1)
my_worst = None    # edit: the worst-connected pair
checks.check_best_worst_pair(dgx1, my_best, my_worst)
""")

md(r"""
### Ranked pairs and best subsets

`Topology.ranked_pairs()` sorts the pairs from the best link to the worst, ties together, and
`Topology.best_subset(k)` picks the $k$ GPUs whose *weakest* pairwise link is best (a collective is
only as fast as its slowest link), then the best total. `topology.report` prints both, with the
matrix and a summary in words. On the DGX-1, compare the best 4 GPUs with an arbitrary 4 such as
GPU0, 1, 4 and 5: which links would the arbitrary choice put in the ring?
""")

code(r"""
print(topology.report(dgx1))
print()
print("GPU0,1,4,5:", ", ".join(f"GPU{a}-GPU{b} {dgx1.link(a, b).label}"
                              for a, b in [(0, 1), (0, 4), (0, 5), (1, 4), (1, 5), (4, 5)]))
""")

md(r"""
On a machine where every pair has the same link (the DGX A100 through NVSwitch, the 2x H200 with
`NV18`), `ranked_pairs()` has a single group: there is no best pair, and which GPUs a job gets does
not matter for its communication.
""")

# =============================================================================== 4
md(r"""
## 4. Pair experiment: the best pair against the worst

The most direct way to see what a link is worth is to run the same 2-GPU training on two pairs
that differ only in their link. `CUDA_VISIBLE_DEVICES` picks the pair: with
`CUDA_VISIBLE_DEVICES=0,3` the process sees GPU0 and GPU3 as `cuda:0` and `cuda:1`. This needs a
machine whose pairs differ; the cell below checks this machine's topology and says what it can do.
""")

code(r"""
groups = here.ranked_pairs() if here is not None and len(here.gpus) >= 2 else []
if len(groups) >= 2:
    best_pair, worst_pair = groups[0].pairs[0], groups[-1].pairs[0]
    print(f"This machine's pairs differ: best {best_pair} ({groups[0].label}), worst {worst_pair} ({groups[-1].label}).")
    PAIR_LIVE = True
else:
    reason = ("this machine has no GPU" if here is None else
              "this machine has one GPU" if len(here.gpus) < 2 else
              f"every pair of this machine's GPUs has the same link ({groups[0].label}), so the best pair is also the worst")
    print(f"No live pair experiment here: {reason}.")
    PAIR_LIVE = False
""")

md(r"""
What the links predict, for the DGX-1 pairs: the `wide` model of this course all-reduces its whole
gradient every step. For 2 GPUs a ring all-reduce of $n$ bytes takes $2(\alpha + \frac{n/2}{\beta})$
(`ddlab.cost_model.ring_allreduce_time`). With the link rates of `ddlab.links` (cited, not
measured), the communication of one step on the DGX-1's best pair (`NV2`), a one-link pair (`NV1`)
and a `SYS` pair (host staged through PCIe 3.0, so at best its rate) would take:
""")

code(r"""
from ddlab import cost_model, models_torch

grad_bytes = models_torch.gradient_bytes(models_torch.build("wide"))
print(f"wide model: {grad_bytes / 1e6:.0f} MB of fp32 gradients per step "
      f"({models_torch.count_parameters(models_torch.build('wide')):,} parameters)\n")
for label, link in [("NV2", links.nvlink(2, 2)), ("NV1", links.nvlink(2, 1)), ("SYS", links.get("pcie3_x16"))]:
    t = cost_model.ring_allreduce_time(grad_bytes, 2, link.latency_s, link.bandwidth_Bps)
    print(f"{label:<4} {link.name:<32} {t * 1e3:7.1f} ms per step"
          + ("   (at best: host staging crosses PCIe twice)" if label == "SYS" else ""))
print("\npredicted from cited link rates (ddlab.links), not measured")
""")

code(r"""
if PAIR_LIVE:
    from ddlab import experiments
    for which, (a, b) in (("best", best_pair), ("worst", worst_pair)):
        res = experiments.throughput_scaling("torch", "ddp", workers=[2], model="wide",
                                             env={"CUDA_VISIBLE_DEVICES": f"{a},{b}"})
        print(f"{which} pair GPU{a}-GPU{b} ({here.link(a, b).label}), {caption(res.provenance, live=True)}")
        print(res.table(), "\n")
else:
    print("Live pair experiment skipped (the reason is above); the prediction above stands in for it.")
""")

# =============================================================================== 5
md(r"""
## 5. NCCL: which path did it take?

**NCCL** (NVIDIA Collective Communications Library, "nickel") implements the collectives that
data-parallel training needs (all-reduce, all-gather, reduce-scatter, broadcast) between GPUs.
PyTorch DDP uses it as its `nccl` backend, Horovod as its GPU operations, TensorFlow for its
multi-GPU strategies. At start-up NCCL reads the machine's topology (the same facts as
`nvidia-smi topo -m`, plus NVLink and NIC details), builds rings and trees through the GPUs, and for
every connection between two ranks chooses a **transport**:

* `P2P`: peer-to-peer between GPUs, over NVLink or PCIe (printed as `P2P/CUMEM`, `P2P/IPC`,
  `P2P/direct pointer`; `/read` when the receiver reads from the sender);
* `SHM`: through shared host memory (host staging);
* `NET`: through a network transport, `NET/IB` (InfiniBand or RoCE, `GDRDMA` when the NIC reads GPU
  memory directly) or `NET/Socket` (TCP).

With `NCCL_DEBUG=INFO` NCCL prints its choices, one line per connection, like
`Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM`. `ddlab.nccl_log.parse` turns such a log into a
transport table. On a machine with two GPUs the cell below runs a small all-reduce under each of
the three NCCL settings of this course and parses its log; otherwise it parses logs recorded on the
course's 2x H200 machine.
""")

code(r"""
import os

from ddlab import collectives, nccl_log

if inv.gpu_count >= 2:
    logs = {path: nccl_log.parse(nccl_log.capture_allreduce_log(env=collectives.path_env(path)))
            for path in collectives.PATHS}
    logs_where = caption(NOW, live=True)
else:
    fixtures = os.path.join(ddlab.REPO_ROOT, "tests", "fixtures", "nccl")
    logs = {path: nccl_log.parse_file(os.path.join(fixtures, f"h200x2_{path}.log")) for path in collectives.PATHS}
    logs_where = "recorded on the course's 2x H200 machine (logs kept in tests/fixtures/nccl)"
print(logs_where, "\n")
for path, log in logs.items():
    print(f"--- path '{path}'")     # the settings NCCL read are in the table's "set by environment" line
    print(log.table(), "\n")
""")

md(r"""
### Reading the transport names

| printed | what it means |
|---|---|
| `P2P/CUMEM` | P2P between two processes. The receiver's buffer is allocated with CUDA's virtual memory API (`cuMem*`) and handed to the sender as a handle it maps; from then on one GPU writes straight into the other's memory, over NVLink where there is one |
| `P2P/IPC` | the same, with the older CUDA IPC handles (when `NCCL_CUMEM_ENABLE=0`) |
| `P2P/direct pointer` | both GPUs are driven by one process, so a plain device pointer is enough |
| `.../read` | the receiver reads from the sender's buffer instead of the sender writing into the receiver's |
| `.../CE` | a copy engine moves the data instead of NCCL's own GPU kernels |
| `SHM/direct/direct` | shared host memory, i.e. host staging. The two words are the sending and the receiving side: `direct` means NCCL's GPU kernel writes (or reads) the pinned host buffer itself, through a mapped pointer (UVA at work); `CE` would mean a copy engine does it (`NCCL_SHM_USE_CUDA_MEMCPY=1`) |
| `NET/Socket/0` | NCCL's network transport over TCP sockets, on network device 0: GPU to a host buffer, through the kernel's TCP stack, to a host buffer, to the other GPU, even when both GPUs sit in one machine |
| `NET/IB/0/GDRDMA` | InfiniBand or RoCE on device 0, with GPUDirect RDMA: the network adapter reads and writes GPU memory itself |

Source: the lines are printed by NCCL's `src/transport/p2p.cc`, `shm.cc` and `net.cc` (NVIDIA/nccl on
GitHub); the variables are in the NCCL User Guide, "Environment Variables". Compare the *channels*
column too: NCCL opens many more channels (parallel rings, each driven by its own thread block) over
the fast P2P path than over shared memory or sockets.
""")

md(r"""
### Steering NCCL: `NCCL_P2P_LEVEL`, `NCCL_P2P_DISABLE`, `NCCL_SHM_DISABLE`

Source for everything in this subsection: the NVIDIA NCCL User Guide, "Environment Variables".

**`NCCL_P2P_LEVEL` is a maximum distance.** NCCL uses the P2P transport between two GPUs only when
the path between them is *no longer* than the level. The levels, shortest first:

| level | NCCL uses P2P ... |
|---|---|
| `LOC` | never (P2P off) |
| `NVL` | when the GPUs are connected through NVLink |
| `PIX` | also when they are on the same PCI switch |
| `PXB` | also through several PCI switches |
| `PHB` | also through the CPU's host bridge, within one NUMA node |
| `SYS` | also between NUMA nodes, across the SMP interconnect (QPI/UPI) |

NVLink is the shortest path there is, so every level from `NVL` to `SYS` still lets two
NVLink-connected GPUs use P2P over NVLink. **`NCCL_P2P_LEVEL=PIX` does not mean "use PCIe"**: on an
NVLink machine it changes nothing between NVLink pairs (older material labelled it "P2P via PCIe";
that was wrong). Only `LOC` turns P2P off for them. The level is a permission, not a route: a pair
it allows may still be unable to use P2P when the platform offers no peer access (often the case
across CPU sockets).

**`NCCL_P2P_DISABLE=1`** switches the P2P transport off altogether: NCCL falls back to `SHM`
(the course's `shm` path sets `NCCL_P2P_LEVEL=LOC` instead, which has the same effect).
**`NCCL_SHM_DISABLE=1`** switches the shared-memory transport off. With both off, NCCL uses its
network transport even inside one machine, as it would between nodes; the course's `socket` path
also sets `NCCL_IB_DISABLE=1` so that "network" means TCP sockets even on a machine with InfiniBand.

`ddlab.links.nccl_level_table` applies the rule to a topology: which pairs may use P2P at each level.
""")

code(r"""
for name in ("dgx1-v100", "pcie-4gpu"):
    print(f"{name} ({caption(machines[name].provenance)}):")
    print(links.nccl_level_table(machines[name]), "\n")
""")

# =============================================================================== 6
md(r"""
## 6. The NCCL path experiment: Fashion-MNIST under three paths

Now the central experiment of the course: the same data-parallel training of Fashion-MNIST on two
GPUs, under the three NCCL settings of section 5:

| path | settings | what NCCL uses between two GPUs of one machine |
|---|---|---|
| `default` | none | P2P, over NVLink where there is one |
| `shm` | `NCCL_P2P_LEVEL=LOC` | shared host memory: host staging |
| `socket` | `NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1` | TCP sockets, as between two nodes without InfiniBand |

for two models: the classic Fashion-MNIST CNN and `wide`, the same CNN with a much wider dense layer,
so that its gradients are tens of times larger (both sizes are printed further down). It
runs with PyTorch DDP through `torchrun` and with Horovod, and reports images per second (counted
honestly: images actually processed by all workers after the warm-up steps, between device
synchronisations), the speedup over one GPU and the transport NCCL chose, read from its log.

### Exercise: predict before you run

For the `wide` model on two GPUs joined by NVLink, order the three paths from fastest to slowest.
Write your prediction in the cell below *before* running the experiment (for example
`"socket > shm > default"`). Then think about the `cnn`: will the order be as clear?
""")

code(r"""
my_prediction = None   # edit: the three paths fastest first, e.g. "socket > shm > default"
""")

md(r"""
The next cell runs the experiment with PyTorch DDP (`ddlab.experiments.live_or_recorded`):

* on a machine with two GPUs it runs live, both models, all three paths;
* otherwise it shows the result recorded on the course's GPU machine, labelled "recorded on ...",
  **if the course has recorded one**. Where it has not, the cell says "not recorded yet" instead of
  showing numbers, and the prediction further down (from recorded all-reduce measurements) is what
  this notebook can offer;
* on a machine without GPUs it also trains the CNN for real, briefly, on two CPU processes with
  gloo, so you see the same code path run. Gloo does not use NCCL, so only its own path exists
  there, and CPU images/s say nothing about GPU links.
""")

code(r"""
from ddlab import experiments

ddp = {model: experiments.live_or_recorded("nccl-paths", "torch", "ddp", model, cpu_run=(model == "cnn"),
                                          missing_ok=True)
       for model in ("cnn", "wide")}
for model, res in ddp.items():
    print(res.table(), "\n")
""")

code(r"""
# Bar charts of what was measured or recorded; a result with nothing in it gets a line, not an empty chart.
for model, res in ddp.items():
    if any(not r.get("error") for r in res.rows):
        res.plot();
    else:
        print(f"{model}: no chart, {res.where()}")
""")

md(r"""
**Horovod.** The same experiment runs with Horovod's PyTorch API (`ddlab experiment nccl-paths
--launcher horovod` on your machine; running every launcher live would not fit this notebook's few
minutes). The first cell shows the course's recording of it where there is one. The second shows a
record that does exist: Horovod 0.28.1 built for GPUs on the course's 2x H200 machine, each rank
all-reducing a tensor on its GPU under the `default` and the `shm` path, with the transport NCCL
chose. Horovod uses the same NCCL, so the same settings steer it. Horovod with TensorFlow/Keras runs
the same way wherever a GPU TensorFlow is installed; TensorFlow is too large to travel to the course's
lent GPU machine, so the Keras path is verified on CPU processes by the course's tests instead.
""")

code(r"""
hvd = {model: experiments.live_or_recorded("nccl-paths", "torch", "horovod", model, source="recorded",
                                          missing_ok=True)
       for model in ("cnn", "wide")}
for model, res in hvd.items():
    print(res.table() if res.rows else f"Horovod nccl-paths, model {model}: {res.where()}", "\n")
""")

code(r"""
from ddlab import reference

# The record written by tools/record_horovod_smoke.py on the GPU machine (kept as JSON).
hvd_gpu = reference.load("horovod", "h200x2")
build = hvd_gpu["check_build"]
print(f"Horovod GPU build and 2-GPU all-reduce, {caption(hvd_gpu['provenance'])}")
print(f"  built for {', '.join(build['frameworks'])}; tensor operations: {', '.join(build['tensor_operations'])}\n")
print(f"  {'path':<8} {'NCCL settings':<20} {'result on both ranks':<22} transport NCCL chose (connections)")
for path, run in hvd_gpu["smoke"].items():
    settings = " ".join(f"{k}={v}" for k, v in run["env"].items()) or "(defaults)"
    ok = all("ok=True" in line for line in run["lines"]) and len(run["lines"]) == 2
    transports = ", ".join(f"{kind} ({n})" for kind, n in run["transport_counts"].items())
    print(f"  {path:<8} {settings:<20} {'correct sum' if ok else 'WRONG or missing':<22} {transports}")
""")

md(r"""
**DDP and Horovod side by side.** The same models and paths under both launchers, from the course's
recordings (`ddlab.experiments.launchers_side_by_side`). Both hand their gradients to the same NCCL,
so the transport of each path and the ordering of the paths agree. The images/s need not: DDP
all-reduces buckets of gradients from hooks inside the backward pass, while Horovod hands each
gradient to a background thread that agrees with the other ranks which tensors are ready, fuses them
into a buffer and then all-reduces it. That coordination is a cost per step, and a short step shows
it most; `HOROVOD_CYCLE_TIME` and `HOROVOD_FUSION_THRESHOLD` are the knobs to try (Horovod's
documentation explains them).
""")

code(r"""
side_by_side = {model: experiments.launchers_side_by_side(model, missing_ok=True) for model in ("cnn", "wide")}
for model, res in side_by_side.items():
    print(f"model {model}:")
    print(res.table() if res.rows else res.where(), "\n")
if side_by_side["wide"].rows:
    side_by_side["wide"].plot();
""")

md(r"""
Now check your prediction. Where a training measurement of the three paths exists (live or
recorded), the check compares your order with it; otherwise it uses the all-reduce bandwidth of the
three paths recorded on the course's GPU machine (section 7 shows those sweeps in full).
""")

code(r"""
from ddlab import collectives

recorded_sweeps = collectives.load_recorded("h200x2")      # all-reduce sweeps, one per path (section 7)
recorded_where = caption(next(iter(recorded_sweeps.values())).provenance)

if len(checks.measured_rates(ddp["wide"])) >= 2:
    result = checks.check_path_ordering(my_prediction, measured=ddp["wide"])
else:
    at = 256 * 2**20
    if my_prediction is not None:
        print(f"No training measurement of the paths for the wide model here or in the recordings, so the check "
              f"uses the all-reduce bus bandwidth at {widgets.format_bytes(at)}, {recorded_where}.")
    result = checks.check_path_ordering(my_prediction, unit="GB/s all-reduce busbw",
                                        measured={p: r.busbw_at(at) for p, r in recorded_sweeps.items()})
result
""")

md(r"""
### Why the small CNN cares far less than the wide model

Each step all-reduces one full copy of the gradients: as many bytes as the model has fp32
parameters, times four.
""")

code(r"""
from ddlab import models_torch

grad_bytes = {}
for model in ("cnn", "wide"):
    net = models_torch.build(model)
    grad_bytes[model] = models_torch.gradient_bytes(net)
    print(f"{model:<5} {models_torch.count_parameters(net):>12,} parameters   {grad_bytes[model]:>12,} bytes "
          f"({widgets.format_bytes(grad_bytes[model])}) of gradients per step")
print(f"\nthe wide model's gradients are {grad_bytes['wide'] / grad_bytes['cnn']:.0f} times the cnn's")
""")

md(r"""
What does one GPU need for a step of the CNN? The course recorded the CNN on one GPU of its
GPU machine, plain and with the usual speed options (bf16, a CUDA graph, `torch.compile`; the
experiment is `ddlab experiment perf-options`). A model this small spends much of its step launching
small kernels, so options that cut launches (a CUDA graph, `torch.compile`) can matter as much as
cheaper arithmetic; the table shows what each was worth on the recorded GPU. The next cell uses the
step times:
""")

code(r"""
perf = experiments.load_recorded("perf-options", "torch", "none", "cnn")
print(perf.table())
""")

md(r"""
Put the two together with the alpha-beta model: read the time of an all-reduce of each model's
gradients off the recorded sweeps of section 7 (`ddlab.widgets.step_what_if` interpolates between
the measured sizes), divide by the time of one GPU's step, and predict the 2-GPU speedup when
nothing overlaps, $2t/(t + T_{\text{all-reduce}})$. For the wide model the one-GPU step time comes
from the training result above (its one-worker row) when that is a GPU run; without one, its rows
show the communication alone: set it beside the CNN's step to see the scale.
""")

code(r"""
step_ms = {r["option"]: r["step_ms_median"] for r in perf.rows if not r.get("error")}
fastest = min(step_ms, key=step_ms.get)
cases = [(f"cnn, {option}", grad_bytes["cnn"], step_ms[option] * 1e-3) for option in ("plain fp32", fastest)]
# The wide model's one-GPU step, from the one-worker row of a GPU training result above (live or recorded).
one_gpu = [r for r in ddp["wide"].rows if r.get("workers") == 1 and r.get("device") == "cuda"
           and r.get("step_ms_median") and not r.get("error")]
cases.append(("wide", grad_bytes["wide"], one_gpu[0]["step_ms_median"] * 1e-3 if one_gpu else None))
what_if = widgets.step_what_if(cases, recorded_sweeps, where=recorded_where)
print(what_if)
""")

md(r"""
How to read it:

* The predicted speedup depends only on the share $s = T_{\text{all-reduce}}/t$: it is $2/(1+s)$.
  A share under about 0.1 costs less than 10% ("hardly matters" in the verdict column); at a share
  of 1 two GPUs only match one.
* The CNN's gradients are a few MiB. Over NVLink they are a sliver of its step; through host memory
  a modest share; over sockets a large one. So the CNN cares far less about its interconnect than
  the wide model does, and `default` and `shm` should land close together for it. (Measured
  differences of a few percent need repeated runs before you believe them.)
* Make the step faster and the same all-reduce weighs more: the speed options shrink the compute,
  not the communication. Communication matters in proportion to its share of the step, not its
  absolute size.
* The wide model all-reduces tens of times more bytes, so every path's time grows by that factor,
  and the bandwidth term $n/\beta$ decides how it scales. Whether two GPUs still beat one then
  depends on its one-GPU step time (shown when a GPU training result is available): they are slower
  than one as soon as the all-reduce takes longer than a step. Measure it with
  `ddlab experiment nccl-paths --model wide` on two GPUs.
* DDP and Horovod start all-reducing buckets of gradients while the backward pass still runs, so a
  real run can do somewhat better than "no overlap"; a small model's backward pass is short, so
  there is little to hide behind.
""")

md(r"""
### Take the kernel launches away, and the CNN notices the link too

The eager CNN step is mostly the launching of small kernels (the speed-options table above showed
what a CUDA graph is worth on one GPU), so its all-reduce is a small share of the step on every
path. The course also recorded the DDP experiment with each whole training step captured as one CUDA
graph, the all-reduce inside it (`--cuda-graph on`; on a machine with two GPUs run it yourself with
`ddlab experiment nccl-paths --model cnn --cuda-graph on`). The table puts the speedup of every path
beside the eager one (`ddlab.experiments.compare_speedups`):
""")

code(r"""
graph_vs_eager = {}
for model in ("cnn", "wide"):
    graph_vs_eager[f"{model} eager"] = ddp[model]
    graph_vs_eager[f"{model} graph"] = experiments.live_or_recorded("nccl-paths", "torch", "ddp", model,
                                                                    cuda_graph=True, source="recorded",
                                                                    missing_ok=True)
print(experiments.compare_speedups(graph_vs_eager))
""")

md(r"""
Read it with the share $s = T_{\text{all-reduce}}/t$ from above, and compare it with the prediction
table. The eager CNN beats the "no overlap" prediction on the slow paths: its GPU spends much of each
step waiting for the CPU to launch the next small kernel, and DDP's all-reduce, launched on its own
stream during the backward pass, most likely runs in those gaps. The graph removes the gaps and
shrinks $t$, while the all-reduce stays as it was, so $s$ grows on every path: sockets, which the
eager CNN hardly noticed, can now cost most of the second GPU, while a fast path (NVLink, and for
gradients this small also host memory) keeps the speedup near 2.
The wide model changes little: its all-reduce dwarfs its step either way. The lesson for your own
training is the same as the alpha-beta model's: **whether the link matters depends on the
communication's share of the step**, so every speed-up of the compute makes the interconnect more
important.
""")

# =============================================================================== 7
md(r"""
## 7. Measuring the links: our p2p test and an all-reduce sweep

### Peer-to-peer bandwidth and latency

`source_code/p2p_bandwidth_latency/` holds the course's own CUDA test (`ddlab.p2p` builds, runs and
reads it). For every ordered GPU pair it measures unidirectional and bidirectional bandwidth with
peer access off (host staged) and on, and the latency of a small copy, and validates every copied
byte. The cell compiles it when this machine has the CUDA compiler (`nvcc`).
""")

code(r"""
from ddlab import p2p

if inv.nvcc:
    print("built:", p2p.build())
else:
    print("No nvcc on this machine: the test cannot be compiled here (install the CUDA toolkit to build it).")
""")

code(r"""
if inv.gpu_count >= 2:
    p2p_result = p2p.run()
    p2p_where = caption(NOW, live=True)
else:
    p2p_result = p2p.load_recorded("h200x2")
    p2p_where = caption(p2p_result.provenance)
print(p2p_where, "\n")
print(p2p_result.summary())
fig = p2p.plot_heatmaps(p2p_result)
fig.suptitle(p2p_where, fontsize=10);
""")

md(r"""
What to compare, with the alpha-beta model in mind:

* the P2P-on bandwidth with the link's peak. The heatmaps print the share of the peak when the link
  is known; for NVLink 4 that peak is the raw signalling rate of section 1 (18 links x 26.56 GB/s),
  not NVIDIA's 25 GB/s-per-link data rate. A large copy never reaches 100% of the raw rate: packet
  headers, CRCs and flow control take their share of every link;
* the P2P-off (host-staged) bandwidth with one PCIe link of the catalogue (an H100 or H200 SXM
  attaches to the host by PCIe 5.0 x16, NVIDIA's H100 and H200 datasheets): one PCIe link bounds it,
  and in practice it lands below that bound, far from NVLink;
* the latencies (a small copy, $\alpha$) with and without peer access: the host-staged copy pays
  for two copies and the hand-over between them.

### All-reduce bandwidth over message size, under the three paths

`ddlab.collectives.sweep` times an all-reduce from 8 bytes up, as NVIDIA's `nccl-tests` do, and
reports two rates for a size $S$ (for all-reduce, the bytes of each rank's buffer) and a time $t$,
defined as `nccl-tests` define them (its `doc/PERFORMANCE.md`):

* **algbw** $= S/t$, the *algorithm bandwidth*: how fast the operation completes, from the user's
  point of view;
* **busbw** $=$ algbw $\times\, 2(n-1)/n$ for all-reduce on $n$ ranks ($\times\,(n-1)/n$ for
  all-gather and reduce-scatter), the *bus bandwidth*. A ring all-reduce makes every rank send (and
  receive) $2(n-1)/n \cdot S$ bytes, so busbw is the rate each rank's link actually carries, and it
  can be set beside the hardware's link bandwidth whatever the number of ranks. For $n = 2$ the
  all-reduce factor is 1: busbw and algbw are equal.

Without GPUs the sweep runs for real between two CPU processes with gloo; the recorded GPU sweeps
are shown beside it.
""")

code(r"""
if inv.gpu_count >= 2:
    sweeps = collectives.compare_paths(inventory=inv)
    sweeps_where = caption(NOW, live=True)
else:
    sweeps = {"gloo, 2 CPU processes": collectives.sweep(backend="gloo", max_bytes="16M", inventory=inv)}
    sweeps_where = caption(NOW, live=True) + " (CPU processes, gloo)"
print(sweeps_where)
print(collectives.summary(sweeps.values()))
""")

code(r"""
recorded_sweeps = collectives.load_recorded("h200x2")       # the same recording section 6 used
recorded_where = caption(next(iter(recorded_sweeps.values())).provenance)
print(recorded_where)
print(collectives.summary(recorded_sweeps.values()))
""")

md(r"""
The same recording holds all-gather and reduce-scatter sweeps on the default path. On two ranks
their busbw is half their algbw; compare their busbw with the all-reduce's: all three report what
the link carries.
""")

code(r"""
other_ops = [collectives.load_recorded("h200x2", op=op)["default"] for op in ("all_gather", "reduce_scatter")]
print(recorded_where)
print(collectives.summary([recorded_sweeps["default"]] + other_ops))
""")

code(r"""
fig, (ax_live, ax_rec) = plt.subplots(1, 2, figsize=(14, 4.5))
collectives.plot_sweep(sweeps, ax=ax_live)
ax_live.set_title(sweeps_where, fontsize=9)
collectives.plot_sweep(recorded_sweeps, ax=ax_rec)
ax_rec.set_title(recorded_where, fontsize=9);
""")

md(r"""
### The alpha-beta fit

Fit $T(n) = \alpha + n/\beta$ to each sweep (`ddlab.cost_model.fit_sweep`): $\alpha$ is the
all-reduce's fixed cost, $\beta$ its asymptotic rate (an algbw; for two ranks also the busbw). The
plot marks the latency-bound and the bandwidth-bound regions on either side of the crossover
$\alpha\beta$.

Two things to expect. First, this $\alpha$ is the whole cost of one call from Python (launching the
kernel, synchronising the ranks, NCCL's protocol), not the wire's latency: it is far larger than
the link latencies of section 1 and need not follow the order of the links, so compare the links'
own latency in the p2p test above. Second, $\beta$ is where the paths differ most, and that is
the term the gradients of a training step pay.
""")

code(r"""
print(sweeps_where)
for label, res in sweeps.items():
    print(f"  {label:<24} {cost_model.fit_sweep(res).describe()}")
print(recorded_where)
for label, res in recorded_sweeps.items():
    print(f"  {label:<24} {cost_model.fit_sweep(res).describe()}")

fig, (ax_live, ax_rec) = plt.subplots(1, 2, figsize=(14, 4.5))
live_label, live_sweep = next(iter(sweeps.items()))
cost_model.plot_sweep_fit(live_sweep, ax=ax_live)
ax_live.set_title(f"{live_label}: {sweeps_where}", fontsize=9)
cost_model.plot_sweep_fit(recorded_sweeps["default"], ax=ax_rec)
ax_rec.set_title(f"default path: {recorded_where}", fontsize=9);
""")

# =============================================================================== 8
md(r"""
## 8. Summary

The measurements of this notebook, put back into the alpha-beta model: for the recorded machine
(whose links are known: 18 NVLinks between the GPUs, PCIe 5.0 x16 to the host), the fitted $\alpha$
and $\beta$ of each NCCL path, $\beta$ as a share of the link the path uses (cited in
`ddlab.links`), and what one all-reduce of the `wide` model's gradients costs on it.
""")

code(r"""
uses = {"default": links.nvlink(4, 18), "shm": links.get("pcie5_x16"), "socket": None}   # TCP: no single link
print(f"alpha-beta fits of the all-reduce sweeps, {recorded_where}\n")
print(f"{'path':<8} {'alpha':>9} {'beta':>11}   {'link the path uses (cited)':<40} {'beta / link':>11}   "
      f"{'wide all-reduce':>15}")
for path, sweep in recorded_sweeps.items():
    fit = cost_model.fit_sweep(sweep)
    link = uses.get(path)
    share = f"{fit.beta / link.bandwidth_Bps:.0%}" if link else "-"
    wide_t = what_if.row("wide", path)["comm_s"]
    print(f"{path:<8} {widgets.format_time(fit.alpha):>9} {widgets.format_rate(fit.beta):>11}   "
          f"{(f'{link.name}, {link.bandwidth_gbs:.4g} GB/s' if link else 'TCP sockets through the kernel'):<40} "
          f"{share:>11}   {widgets.format_time(wide_t):>15}")
""")

md(r"""
* One message costs $T(n) = \alpha + n/\beta$. Small messages pay the latency, large ones the
  bandwidth; the crossover is $\alpha\beta$. Carry units (GB/s = 10⁹ B/s, KiB = 2¹⁰ B) and a
  64 KiB-in-4-µs link is 16 GB/s, not 1.6.
* Without peer access, a GPU-to-GPU copy is staged through host memory: two PCIe crossings, two
  start-up costs, and an NVLink left idle. With it, the copy takes one hop, over NVLink where there
  is one. UVA lets one pointer-based API cover both.
* `nvidia-smi topo -m` names the path of every pair: `NV#`, then `PIX` < `PXB` < `PHB` < `NODE` <
  `SYS`. A collective is only as fast as its weakest link, so choose GPUs by their weakest pair
  (`best_subset`).
* NCCL reports the transport it chose with `NCCL_DEBUG=INFO` (`P2P/CUMEM`, `SHM/direct/direct`,
  `NET/Socket`). `NCCL_P2P_LEVEL` is a maximum distance for P2P (`PIX` still allows NVLink; only
  `LOC` turns P2P off); `NCCL_P2P_DISABLE=1` and `NCCL_SHM_DISABLE=1` push NCCL to host memory and
  then to the network.
* The table above is the model read off real measurements: $\beta$ drops steeply from NVLink to
  host memory to sockets, while the per-call $\alpha$ of a collective sits far above any wire's
  latency and is of the same order on every path. The fitted $\beta$ stays below the link the path
  uses (headers, flow control, and for `shm` two hops through host memory).
* In training, a path matters in proportion to the all-reduce's share of a step: the gradient bytes
  over $\beta$, against the compute. The small CNN's share is small except over sockets; the wide
  model's gradients are tens of times larger, and its scaling follows the link's bandwidth.

### Self-check quiz

Answer each question and press *Check*; the answer comes with its explanation. (Without ipywidgets,
the cell prints the questions: answer with `checks.check_quiz_answer(question, "a")`.)
""")

code(r"""
checks.quiz()
""")

md(r"""
**Next:** notebook 3, *Hands-on Multi-GPU*, turns a single-GPU Fashion-MNIST script into a Horovod
and a DDP script step by step. Back to [Start Here](../Start_Here.ipynb).
""")


def build() -> nbformat.NotebookNode:
    nb = new_notebook(cells=CELLS)
    for i, cell in enumerate(nb.cells):
        cell.id = f"nb2-{i:03d}"        # stable ids: rebuilding an unchanged notebook changes nothing
    nb.metadata["kernelspec"] = {"name": "ddlab", "display_name": "Python (ddlab)", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    nbformat.validate(nb)
    return nb


def main() -> int:
    nb = build()
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        nbformat.write(nb, f)
    print(f"wrote {OUT} ({len(nb.cells)} cells)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
