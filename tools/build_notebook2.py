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
5. explain why a small CNN barely notices the interconnect while a model with large gradients does;
6. measure peer-to-peer bandwidth and latency and an all-reduce sweep, and compare them with the link's peak.

**Time.** About 75 minutes to read and work through. The cells themselves run in a few minutes,
on a laptop CPU as on a multi-GPU server.

**Before you start.** Notebook 1 (data parallelism and all-reduce). Every code cell calls the
course's package `ddlab`; the module it calls (`ddlab.links`, `ddlab.topology`, ...) is where its
code lives, under `source_code/ddlab/`.

**Your hardware decides what runs live.** Without a GPU, the experiments run for real on CPU
processes (PyTorch's gloo backend) and the GPU results are shown as *recorded* on a named machine.
With one GPU, the single-GPU parts run live. With two or more, everything runs live. Each figure
says which it is: "measured now on ..." or "recorded on ...".
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


def caption(prov, live=False):
    # Where a figure comes from: measured now, recorded on a named machine, or written from published facts.
    if live:
        return "measured now on " + provenance.label(prov)
    if prov.get("cited"):
        return "written from published facts, not measured"
    if prov.get("illustrative"):
        return "illustrative example, not a measurement"
    return "recorded on " + provenance.label(prov)
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
hardly change from one generation to the next. Two things to notice:

* every NVLink generation from 2 (V100) to 4 (H100/H200) moves 25 GB/s per link per direction;
  newer GPUs are faster because they have *more links*. `nvidia-smi topo -m` prints the bonded
  count: `NV2` is two links, `NV18` eighteen;
* network links are quoted in gigabits: 400 Gb/s InfiniBand NDR is 50 GB/s.
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
on one GPU read or write a peer GPU's memory through an ordinary pointer.

In alpha-beta terms, host staging pays at least two latencies instead of one, and its bandwidth is
at best that of one PCIe link (when the driver pipelines the two hops), usually less. Section 7
measures both paths on a real machine.
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
matrix comes from: captured on a machine, or written from NVIDIA's published system descriptions.
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

Look at the `dgx1-v100` matrix and drawing above. You have a 2-GPU job: which pair of GPUs would you
give it, and which pair is the worst choice? Write your answer in the cell below (as `(0, 1)` or
`"GPU0-GPU1"`) and run it. The check answers right or wrong, and says why. Try it before you
read on: the next cell gives the answer away.
""")

code(r"""
dgx1 = topology.recorded("dgx1-v100")
my_best = (0, 1)    # edit: the best-connected pair
my_worst = (0, 4)   # edit: the worst-connected pair
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

**`NCCL_P2P_DISABLE=1`** switches the P2P transport off altogether: NCCL falls back to `SHM`.
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

for two models: the classic Fashion-MNIST CNN (about 1.2 million parameters) and `wide`, the same
CNN with a much wider dense layer (tens of millions of parameters, so its gradients are tens of
times larger). It runs with PyTorch DDP through `torchrun` and with Horovod, and reports images per
second (counted honestly: images actually processed by all workers after the warm-up steps, between
device synchronisations), the speedup over one GPU and the transport NCCL chose, read from its log.

### Exercise: predict before you run

For the `wide` model on two GPUs joined by NVLink, order the three paths from fastest to slowest.
Write your prediction in the cell below *before* running the experiment. Then think about the `cnn`:
will the order be as clear?
""")

code(r"""
my_prediction = "shm > default > socket"   # edit: fastest first, using default, shm and socket
""")

md(r"""
The cell below runs the experiment with PyTorch DDP (`ddlab.experiments.live_or_recorded`): live
on this machine's GPUs when it has two, otherwise the result recorded on the course's 2x H200
machine. On a machine without GPUs it also trains the CNN for real, briefly, on two CPU processes
with gloo, so you see the same code path run; gloo does not use NCCL, so only the default path
exists there.
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
for model, res in ddp.items():
    res.plot();
""")

md(r"""
The same experiment with Horovod's PyTorch API, as recorded on the course's GPU machine (running
every launcher live would not fit this notebook's few minutes; `ddlab experiment nccl-paths
--launcher horovod` runs it on yours). Horovod with TensorFlow/Keras runs the same way wherever a
GPU TensorFlow is installed; the course's lent GPU machine cannot hold TensorFlow, so its Keras path
is verified on CPU processes by the course's tests instead.
""")

code(r"""
hvd = {model: experiments.live_or_recorded("nccl-paths", "torch", "horovod", model, source="recorded",
                                          missing_ok=True)
       for model in ("cnn", "wide")}
for model, res in hvd.items():
    print(res.table(), "\n")
""")

code(r"""
checks.check_path_ordering(my_prediction, measured=ddp["wide"])
""")

md(r"""
**Why the small CNN barely notices.** Each step all-reduces one full copy of the gradients, as many
bytes as the model has fp32 parameters times four:
""")

code(r"""
for model in ("cnn", "wide"):
    net = models_torch.build(model)
    print(f"{model:<5} {models_torch.count_parameters(net):>12,} parameters   "
          f"{models_torch.gradient_bytes(net) / 1e6:7.1f} MB of gradients per step")
""")

md(r"""
For the CNN that is a few megabytes: even a path of a few GB/s moves it in a few milliseconds, and
DDP and Horovod overlap much of it with the backward pass, so the step time is mostly compute and
the three paths land close together (within run-to-run noise: repeat a run before believing a
difference of a few percent). The `wide` model's gradients are tens of times larger; the bandwidth
term $n/\beta$ then dominates the step, and the link's bandwidth shows directly in images per
second: over NVLink two GPUs beat one, through host memory they can fall to about one GPU's speed
or below, and over sockets far below. That is the alpha-beta model of section 1, applied to a
training step.
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
Compare the P2P-on matrices with the link's peak (the heatmaps print the share when the link is
known), the P2P-off matrices with one PCIe link, and the latencies with the catalogue of section 1.
A large copy never reaches 100% of the raw link rate: packet headers, CRCs and flow control take
their share of every link.

### All-reduce bandwidth over message size, under the three paths

`ddlab.collectives.sweep` times an all-reduce from 8 bytes up, as NVIDIA's `nccl-tests` do, and
reports the *bus bandwidth* (busbw): the rate each rank's link must carry, comparable with the
hardware's link bandwidth whatever the number of ranks. Without GPUs, the sweep runs for real
between two CPU processes with gloo; the recorded GPU sweeps are shown beside it.
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
recorded_sweeps = collectives.load_recorded("h200x2")
recorded_where = caption(next(iter(recorded_sweeps.values())).provenance)
print(recorded_where)
print(collectives.summary(recorded_sweeps.values()))
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
all-reduce's fixed cost, $\beta$ its asymptotic rate. The plot marks the latency-bound and the
bandwidth-bound regions on either side of the crossover $\alpha\beta$.
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

* One message costs $T(n) = \alpha + n/\beta$. Small messages pay the latency, large ones the
  bandwidth; the crossover is $\alpha\beta$. Carry units (GB/s = 10⁹ B/s, KiB = 2¹⁰ B) and a
  64 KiB-in-4-µs link is 16 GB/s, not 1.6.
* Without peer access, a GPU-to-GPU copy is staged through host memory: two PCIe crossings and more
  latency. With it, the copy takes one hop, over NVLink where there is one. UVA makes both look the
  same to the program.
* `nvidia-smi topo -m` names the path of every pair: `NV#`, then `PIX` < `PXB` < `PHB` < `NODE` <
  `SYS`. A collective is only as fast as its weakest link, so choose GPUs by their weakest pair
  (`best_subset`).
* NCCL reports the transport it chose with `NCCL_DEBUG=INFO`. `NCCL_P2P_LEVEL` is a maximum
  distance for P2P (`PIX` still allows NVLink; only `LOC` turns P2P off); `NCCL_P2P_DISABLE=1` and
  `NCCL_SHM_DISABLE=1` push NCCL to host memory and then to the network.
* In training, the interconnect matters in proportion to the gradient bytes per step against the
  compute per step: the small CNN barely notices, the wide model's throughput follows the link.
* The measured matrices and sweeps above come close to, but never reach, the links' raw peaks; the
  alpha-beta fit of a sweep gives you $\alpha$ and $\beta$ for your own machine.

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
