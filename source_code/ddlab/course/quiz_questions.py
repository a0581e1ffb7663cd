"""The self-check quiz questions of every notebook, each with its answer and why the other
choices are wrong.

:data:`QUIZ` holds the questions that notebooks 2 to 6 share, the named questions below it
those one notebook asks, and :data:`QUIZZES` each notebook's quiz in the order it asks them.
:mod:`ddlab.course.checks` checks an answer and shows a quiz (``checks.quiz(3)``).
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Question:
    """One multiple-choice question: the right choice's index, the explanation shown with
    every answer, and for a wrong choice why it is wrong."""
    prompt: str
    choices: tuple
    answer: int                      # index into choices
    explanation: str
    why_not: dict = field(default_factory=dict)   # index -> why that choice is wrong


# Questions that notebooks 2 to 6 share (QUIZZES says which notebook asks which).
QUIZ = (
    Question(
        "A link has latency alpha = 4 us and bandwidth beta = 16 GB/s. For a 64 KiB message, how do the two "
        "terms of T = alpha + n/beta compare?",
        ("the latency term is about ten times the bandwidth term",
         "the bandwidth term is about ten times the latency term",
         "they are within a few percent of each other"), 2,
        "64 KiB = 65,536 bytes; 65,536 B / 16e9 B/s = 4.1 us, 2.4% more than alpha = 4 us: the bandwidth term "
        "is the larger, but only just. The crossover size alpha x beta = 4e-6 s x 16e9 B/s = 64,000 bytes sits "
        "just below 64 KiB = 65,536 bytes.",
        {0: "A factor of ten means a slip of units: 65,536 B / 16e9 B/s is 4.1 us, not 0.41 us.",
         1: "Check the units: 65,536 B / 16e9 B/s is 4.1 us, not 41 us."}),
    Question(
        "Two GPUs are joined by NVLink. You set NCCL_P2P_LEVEL=PIX. What does NCCL use between them?",
        ("PCIe through one switch", "still NVLink", "shared host memory"), 1,
        "NCCL_P2P_LEVEL is a maximum distance for using P2P (LOC < NVL < PIX < PXB < PHB < SYS). NVLink "
        "(NVL) is closer than PIX, so P2P over NVLink stays allowed. Only LOC switches P2P off.",
        {0: "The level does not choose a path; it caps how far apart two GPUs may be for P2P.",
         2: "P2P off (NCCL_P2P_LEVEL=LOC or NCCL_P2P_DISABLE=1) gives shared host memory, or NCCL's network "
            "transport where a NIC close to the GPUs looks faster to it; PIX keeps P2P."}),
    Question(
        "`nvidia-smi topo -m` shows SYS between GPU0 and GPU5. What does that tell you?",
        ("they share a PCIe switch", "the path crosses the interconnect between NUMA nodes",
         "they are joined by a system NVSwitch"), 1,
        "SYS: the path traverses PCIe and the SMP interconnect between NUMA nodes (QPI/UPI). It is the "
        "slowest label; peer access is often unavailable there and data is staged through host memory.",
        {0: "Sharing one PCIe switch is PIX.", 2: "NVSwitch connections show as NV# (e.g. NV12, NV18)."}),
    Question(
        "Host staging copies GPU0 -> GPU1 without peer access. How many times does the data cross PCIe?",
        ("once", "twice", "never"), 1,
        "Twice: GPU0 -> PCIe -> host memory is one copy, host memory -> PCIe -> GPU1 a second one, with a "
        "stop in host memory between them, and the CPU's driver orchestrates both. A peer-to-peer copy over "
        "PCIe is a single transfer from GPU0 to GPU1 through a PCIe switch or the host bridge, never landing "
        "in host memory; over NVLink it does not touch PCIe at all.",
        {0: "Once would be a peer-to-peer copy over PCIe; host staging makes two copies, each across PCIe.",
         2: "Never is NVLink peer-to-peer; host staging needs host memory, which sits behind PCIe."}),
    Question(
        "Which settings make two GPUs in one machine talk as if they were on different nodes without InfiniBand?",
        ("NCCL_P2P_LEVEL=SYS", "NCCL_P2P_DISABLE=1",
         "NCCL_P2P_DISABLE=1, NCCL_SHM_DISABLE=1 and NCCL_IB_DISABLE=1"), 2,
        "With P2P and shared memory off NCCL uses its network transport; on a machine with an InfiniBand or "
        "RoCE adapter that would be NET/IB, so NCCL_IB_DISABLE=1 keeps it on TCP sockets (NET/Socket). The "
        "course's socket path sets all three.",
        {0: "SYS is the widest level: it allows P2P at every distance.",
         1: "With only P2P off, NCCL falls back to shared host memory (SHM), unless an InfiniBand or RoCE "
            "adapter close to the GPUs makes it judge its network faster: then it takes NET/IB inside the "
            "machine (NCCL_NET_DISABLE_INTRA=1 or NCCL_IB_DISABLE=1 prevents that). The course's recordings ran "
            "on a machine without an InfiniBand device (NCCL's log: 'NET/IB : No device found'), so their P2P-off "
            "runs used SHM. The training runs' shm path also set NCCL_NET_DISABLE_INTRA=1; the all-reduce and "
            "level sweeps did not. On your machine, read the transport in NCCL_DEBUG=INFO's log."}),
    Question(
        "Why does the small CNN (about 1.2M parameters) barely notice whether NCCL uses NVLink or shared host "
        "memory, while the wide model (about 76M) slows down a lot through host memory?",
        ("its gradients are small, so all-reducing them is a small part of each step",
         "NCCL compresses its gradients", "it does not all-reduce gradients"), 0,
        "About 1.2M fp32 parameters are about 4.8 MB of gradients per step; even at the tens of GB/s that host "
        "memory (one PCIe link) allows, that is a fraction of a millisecond. The wide model's gradients are "
        "tens of times larger, so the bandwidth term n/beta takes over its step. Over TCP sockets, far slower "
        "still, even the CNN's all-reduce can grow comparable with a short step: the share is what matters.",
        {1: "NCCL does not compress; it moves the bytes you give it.",
         2: "Every data-parallel step all-reduces the gradients, whatever the model."}),
    Question(
        "An all-reduce of S bytes on 2 GPUs takes t seconds; nccl-tests reports algbw = S/t. What is its bus "
        "bandwidth busbw?",
        ("the same as algbw", "twice algbw", "half of algbw"), 0,
        "For all-reduce busbw = algbw x 2(n-1)/n: in a ring every rank sends (and receives) 2(n-1)/n x S bytes, so "
        "busbw is the rate each rank's link carries and can be set beside the link's bandwidth. For n = 2 the "
        "factor is 1; for 8 ranks it is 1.75.",
        {1: "The factor 2(n-1)/n approaches 2 only for many ranks; for n = 2 it is 1.",
         2: "Half is the factor of all-gather or reduce-scatter on 2 ranks ((n-1)/n), not of all-reduce."}),
)

# The self-check of notebook 1 (data-parallel training): show it with quiz(DATA_PARALLEL_QUIZ).
DATA_PARALLEL_QUIZ = (
    Question(
        "Four workers each compute the gradient of the mean loss over their own equal shard of a batch. Why do "
        "DDP and Horovod average the four gradients rather than add them?",
        ("the average is the gradient of the mean loss over the whole batch",
         "averaging sends fewer bytes than adding", "adding would overflow float32"), 0,
        "The mean loss of the batch is the mean of the shards' mean losses (equal shards), and the gradient of a "
        "mean is the mean of the gradients. So every worker takes exactly the step one worker would take on the "
        "whole batch; the sum would be a step n times too long.",
        {1: "Adding and averaging send the same bytes: the division by n happens on each rank after the all-reduce.",
         2: "Overflow is not the issue: the sum is simply n times the full-batch gradient, a step n times too long."}),
    Question(
        "A ring all-reduce of a buffer of S bytes runs on n ranks. How many bytes does each rank send?",
        ("S", "2(n-1)/n x S", "(n-1) x S"), 1,
        "The buffer is cut into n chunks of S/n. In each of the n-1 reduce-scatter steps every rank sends one chunk, "
        "and again in each of the n-1 all-gather steps: 2(n-1) x S/n. The factor 2(n-1)/n is 1 for two ranks, 1.5 "
        "for four, 1.75 for eight, and never reaches 2, so adding ranks hardly adds traffic per link.",
        {0: "Only for n = 2, where 2(n-1)/n = 1. For more ranks each sends more than one buffer.",
         2: "(n-1) x S is what the root of the naive reduce-then-broadcast carries, and every rank of all-to-all."}),
    Question(
        "Eight ranks all-reduce by sending everything to rank 0, which adds and sends the sum back. How many "
        "buffers does rank 0's link carry in each direction?",
        ("1", "1.75", "7"), 2,
        "Seven ranks each send rank 0 a whole buffer, and rank 0 sends the sum to each of the seven: 7 buffers in, "
        "7 out, through one link, while the other links carry 1. The time grows with the number of ranks; the "
        "ring spreads the same work over every link.",
        {0: "1 buffer is what each of the other seven ranks sends; the root receives all seven.",
         1: "1.75 = 2(n-1)/n is what each rank sends in a ring all-reduce of eight ranks."}),
    Question(
        "Four workers train 20 steps of batch 64 each; the first 5 are warm-up, and the 15 timed steps take 3 s "
        "between two synchronisations. What is the honest throughput?",
        ("15 x 64 x 4 / 3 = 1,280 images/s", "20 x 64 x 4 / 3 = about 1,707 images/s",
         "60,000 / 3 = 20,000 images/s"), 0,
        "Count only the images processed in the timed interval, by all workers: 15 steps x 64 images x 4 workers, "
        "divided by the 3 s between the synchronisations that bound those steps.",
        {1: "The 5 warm-up steps ran before the clock started; counting them overstates the throughput.",
         2: "The data set size over the time is the mistake older material made: far fewer images ran."}),
    Question(
        "On a machine with 2 CPU cores, each worker uses one thread. What do you expect of 4 workers against 1?",
        ("a speedup close to 4", "a speedup of at most about 2 (efficiency at most about 50%)",
         "the same throughput as 1 worker"), 1,
        "Four workers share two cores: at best two run at once, so the speedup is bounded by about 2 and the "
        "efficiency (speedup / workers) by about 50%, less what the all-reduce and the switching between "
        "processes cost. The workers oversubscribe the cores.",
        {0: "A speedup of 4 needs 4 cores (or GPUs), one per worker.",
         2: "Two cores still run two workers at once; the throughput can rise up to about twice one worker's."}),
)


# Questions that only one notebook's quiz asks (the shared ones are in QUIZ above).
ALPHA_OF_A_CALL = Question(
    "You fit T = alpha + n/beta to an all-reduce sweep and get an alpha far larger than the link's own latency. "
    "Why?",
    ("the link is faulty", "alpha of a collective call also pays for software: launching the operation, "
     "synchronising the ranks, the library's protocol", "the fit cannot be trusted below the crossover size"), 1,
    "A collective called from Python pays a fixed cost per call on top of the wire's latency: the call itself, "
    "the kernel or thread that runs it, the handshake between the ranks. That per-call cost is the alpha the fit "
    "measures; the link's latency is only part of it.",
    {0: "A faulty link shows in beta (the rate), and in errors, not in a large fixed cost per call.",
     2: "Small messages are exactly where alpha is measured best: there the time is almost all alpha."})
RING_BOTTLENECK = Question(
    "An all-reduce on 4 GPUs runs around a ring through them. Which property of the 4 GPUs sets its bandwidth?",
    ("the fastest link among them", "the slowest link on the best ring through them",
     "the sum of all their NVLinks"), 1,
    "Every byte crosses every link of the ring, so the ring runs at the rate of its slowest link. Choose GPUs whose "
    "best ring has the fastest bottleneck; a slow pair that the ring does not use does not matter.",
    {0: "A ring is as fast as its slowest hop, not its fastest.",
     2: "Links the ring does not use carry none of its traffic."})
NODE_LABEL = Question(
    "`nvidia-smi topo -m` shows NODE between two GPUs. What does their path cross?",
    ("the interconnect between two NUMA nodes", "PCIe host bridges within one NUMA node",
     "one PCIe switch"), 1,
    "NODE: the path goes through PCIe and between the PCIe host bridges of one NUMA node. SYS is the label for "
    "crossing between NUMA nodes. NCCL_P2P_LEVEL counts NODE like PHB.",
    {0: "Crossing between NUMA nodes is SYS.", 2: "One PCIe switch is PIX."})
LEVEL_UNSET = Question(
    "NCCL_P2P_LEVEL is not set, on a machine with Intel CPUs. Up to which distance does NCCL use P2P?",
    ("SYS: P2P everywhere", "PXB: through PCIe switches, but not through the CPU",
     "LOC: P2P is off until you set a level"), 1,
    "NCCL starts from PXB (ncclTopoCheckP2p in NCCL's src/graph/paths.cc: by default no P2P across CPU host "
    "bridges and further apart); current NCCL raises it to SYS on AMD CPUs for jobs of at most two GPUs. So a "
    "PHB, NODE or SYS pair gets SHM with nothing set. NCCL_DEBUG=INFO shows what it chose.",
    {0: "Unset, NCCL does not go through the CPU: PHB, NODE and SYS pairs get SHM.",
     2: "Unset, P2P is on up to PXB: the course's default path uses it over NVLink."})
SUPERLINEAR = Question(
    "Two GPUs train at 2.1 times the images/s of one GPU on the same model. What do you conclude first?",
    ("data parallelism can beat linear scaling", "something differs between the runs: check steps, warm-up, "
     "batch sizes and clocks before believing it", "NVLink adds compute"), 1,
    "Two GPUs do at most twice the work of one. A speedup above 2.0x means the two runs are not alike: a "
    "different number of timed steps, a warm-up left in one timing, a per-GPU batch that runs more efficiently, "
    "clocks or caches that differ, or noise in a single run. Repeat the runs and compare like with like.",
    {0: "Each GPU still does its share of the work; dividing work cannot more than double the rate of two.",
     2: "NVLink moves data; it computes nothing."})
BIDIRECTIONAL = Question(
    "A DGX A100's NVLink is quoted as 600 GB/s per GPU. How much is that per direction?",
    ("600 GB/s", "300 GB/s", "1200 GB/s"), 1,
    "NVIDIA's total counts both directions of all twelve links: 12 x 25 GB/s = 300 GB/s each way. A one-way copy "
    "can approach 300 GB/s; only traffic in both directions at once adds up to 600.",
    {0: "The quoted total adds both directions together.", 2: "That would count both directions twice."})
HOST_STAGED_BOUND = Question(
    "Peer access is off between two NVLink-connected GPUs. What bounds the bandwidth of a copy between them?",
    ("the NVLink between them", "one PCIe link between a GPU and the host", "the GPU's memory bandwidth"), 1,
    "Without peer access the copy is staged through host memory: GPU to host over PCIe, host to GPU over PCIe. "
    "The NVLink stays idle, and at best the copy runs at one PCIe link's rate.",
    {0: "Without peer access the NVLink is not used at all.",
     2: "GPU memory is far faster than the PCIe hops the staged copy has to take."})

SOCKET_LOOPBACK = Question(
    "The course's socket path joins two GPUs of ONE machine through NCCL's TCP sockets. What does that traffic "
    "cross?",
    ("a network link, as between two nodes", "the kernel's TCP stack of that one host (loopback), whichever "
     "interface NCCL names", "the NVLink between the GPUs"), 1,
    "Both processes run on one host, so the sockets join the host to itself: GPU to a host buffer, through the "
    "kernel's TCP stack, to a host buffer, to the other GPU. No packet leaves the machine, whether NCCL uses lo or "
    "the machine's own address on eth0 (the kernel delivers a packet for its own address locally). The path "
    "shows what NCCL's network transport and its host copies cost, not what a network adds between nodes.",
    {0: "No packet leaves the machine: both ends of every socket are on it.",
     2: "P2P is off on this path, so the NVLink carries nothing."})
GRAPH_SHARE = Question(
    "Capturing the training step as a CUDA graph halves one GPU's step time; the gradients, and so the all-reduce, "
    "stay the same. How much does the NCCL path matter now?",
    ("just as much: the all-reduce did not change", "more: the same all-reduce is a larger share of a shorter "
     "step", "less: the graph speeds up the all-reduce too"), 1,
    "The speedup depends on the share s = T_all-reduce / t: 2/(1+s) on two GPUs when nothing overlaps. Halving t "
    "doubles s, so a slow path takes more of the second GPU. Every speed-up of the compute makes the interconnect "
    "more important.",
    {0: "The all-reduce takes as long as before, but it is weighed against a shorter step.",
     2: "The graph removes the gaps between kernel launches; the bytes NCCL moves and the link's rate stay the same."})

# Notebook 7 (hands-on: DDP).
NO_SAMPLER = Question(
    "Two processes train with DDP, but the DataLoader has no `DistributedSampler` (`shuffle=True`, the same "
    "seed on both). What does each process train on?",
    ("its own half of the data", "all of the data, in the same order as the other", "nothing: DDP refuses to start"), 1,
    "DDP averages gradients; it does not split the data. Without a sampler every rank iterates the whole data "
    "set, and with the same seed in the same order: two processes do one process's work twice.",
    {0: "Only a DistributedSampler (or your own slicing by rank) gives each rank its own part.",
     2: "DDP starts and trains happily; nothing checks what data each rank reads."})
WHY_BROADCAST = Question(
    "Why does a Horovod script call `hvd.broadcast_parameters`, while a DDP script has no such line?",
    ("DDP copies rank 0's weights to every rank when it wraps the model; Horovod's DistributedOptimizer only "
     "averages gradients", "Horovod initialises weights differently on each rank", "DDP does not need the "
     "ranks to agree"), 0,
    "Averaged gradients give every rank the same update, which keeps equal models equal but never makes "
    "different ones equal. DDP broadcasts in its constructor; with Horovod you broadcast the weights (and the "
    "optimizer state) yourself.",
    {1: "Both build the model with the framework's usual initialisation; what differs is whether it gets "
        "synchronised at the start.",
     2: "Every data-parallel scheme needs identical models on every rank."})
NO_SET_EPOCH = Question(
    "A script uses `DistributedSampler` but never calls `sampler.set_epoch(epoch)`. What happens?",
    ("every epoch repeats the first epoch's order and shards", "the shards overlap", "it fails in epoch 2"), 0,
    "The sampler draws its permutation from its seed plus the epoch number it was told. Never told, it uses "
    "epoch 0 every time: each rank sees the same images in the same order every epoch.",
    {1: "The shards stay disjoint (one permutation, cut by rank); they just never change.",
     2: "Nothing fails: the run is only less random than it should be."})
LINEAR_SCALING = Question(
    "A learning rate of 0.05 was tuned for batch 64 on one process. You now train on 4 processes with batch 64 "
    "each. What does the linear scaling rule give?",
    ("0.05", "0.2", "0.0125"), 1,
    "Each step averages 4 x 64 = 256 images, a 4 times larger batch, so the rule takes a 4 times larger step: "
    "0.2. Large factors usually need a warm-up (notebook 8's Keras script adds one with LearningRateWarmupCallback) "
    "and fail beyond some batch size; notebook 9 measures where.",
    {0: "Unchanged, each step of 256 images moves as far as one of 64 did: training slows down per image.",
     2: "That divides where the rule multiplies."})
# The self-check of notebook 7, in the order it asks them.
HANDSON_QUIZ = (NO_SAMPLER, NO_SET_EPOCH, LINEAR_SCALING)

# Notebook 8 (hands-on: Horovod with PyTorch and tf.keras).
HOROVOD_WRAPS_OPTIMIZER = Question(
    "In a Horovod script for PyTorch, where are the gradients averaged over the ranks?",
    ("in `hvd.DistributedOptimizer`, which all-reduces each gradient as soon as the backward pass has it",
     "in the model, which `horovodrun` wraps as DDP wraps it", "by `horovodrun`, once at the end of every epoch"), 0,
    "Horovod wraps the optimizer, not the model: `hvd.DistributedOptimizer` hooks every parameter's gradient, "
    "starts its averaging all-reduce as soon as the backward pass produces it, and `optimizer.step()` waits for "
    "them. The model stays a plain module.",
    {1: "That is DDP's split of the work; with Horovod the model is not wrapped at all.",
     2: "`horovodrun` only starts the processes and tells each its rank and size; the averaging happens in "
        "every step."})
NO_METRIC_AVERAGE = Question(
    "A Horovod tf.keras script has every callback but `MetricAverageCallback`. What loss and accuracy does "
    "rank 0 print at the end of each epoch?",
    ("those of rank 0's own batches only", "the average over the ranks, because the gradients are averaged",
     "none: Keras stops logging without it"), 0,
    "Keras computes an epoch's metrics from the batches this process trained on. Averaged gradients keep the "
    "weights equal but say nothing about the logged numbers; `MetricAverageCallback` all-reduces them at the "
    "end of each epoch, and without it each rank logs its own shard's values.",
    {1: "The averaged gradient makes the update common; each rank's loss is still measured on its own batches.",
     2: "Keras logs as usual; the numbers are just one rank's."})
# The self-check of notebook 8, in the order it asks them.
HOROVOD_QUIZ = (HOROVOD_WRAPS_OPTIMIZER, WHY_BROADCAST, NO_METRIC_AVERAGE)


# The self-check of notebook 9 (convergence at scale).
CONVERGENCE_QUIZ = (
    Question(
        "SGD trains well at learning rate 0.1 with a global batch of 256. You move to 8 workers of 256 images "
        "each. What learning rate does the linear scaling rule give?",
        ("0.1", "0.8", "0.28"), 1,
        "The global batch grows 8x (256 -> 2,048), so the rule multiplies the learning rate by 8: 0.8. "
        "It keeps the update per epoch about the same, because there are 8x fewer steps.",
        {0: "Unscaled, 8x fewer steps of the same size move the weights far less per epoch.",
         2: "0.28 is the square-root rule (0.1 x sqrt 8), not the linear one."}),
    Question(
        "Why does the linear rule usually need a warm-up at large batches?",
        ("the first steps have large, fast-changing gradients, and the full scaled rate from step 0 can make "
         "the loss diverge", "warm-up makes each step faster", "warm-up keeps the ranks' weights identical"), 0,
        "The rule assumes that k small steps move the weights like one step k times larger; early in training "
        "the gradient changes quickly, the assumption fails, and a large rate overshoots. A ramp from the "
        "reference rate to the scaled one over a few epochs gets past that phase.",
        {1: "The step costs the same at any learning rate.",
         2: "The ranks agree because they apply the same averaged gradient; the rate plays no part in that."}),
    Question(
        "The gradient noise scale B_simple = tr(Sigma) / |G|^2 is measured as 500 images. What happens to the "
        "number of optimizer steps needed if you go from a global batch of 4,000 to 8,000?",
        ("it halves", "it hardly falls: far above B_simple, a bigger batch mostly averages noise that was "
         "already small", "it doubles"), 1,
        "Below the noise scale, doubling the batch nearly halves the steps (perfect scaling); well above it, "
        "the gradient is already accurate, so more images per step buy little and cost twice the compute "
        "per step. At a fixed number of epochs that shows as fewer, barely better steps: lower accuracy.",
        {0: "Halving holds only for batches well below the noise scale.",
         2: "The steps needed never grow with the batch; it is the images (epochs) needed that grow."}),
    Question(
        "In a data-parallel run, which of these must be IDENTICAL on every rank?",
        ("the initial weights", "the images of each step", "the dropout masks"), 0,
        "Every rank must start from the same weights (same seed, or rank 0's broadcast) so that applying the "
        "same averaged gradient keeps them identical. The images must differ (disjoint shards from one shared "
        "shuffle), or the ranks repeat each other's work. The dropout masks may be equal or not: on different "
        "images they repeat nothing; the course's script seeds them per rank, as one process would draw a new "
        "mask for every image of the global batch.",
        {1: "Identical images on every rank waste N-1 workers: the shards must be disjoint.",
         2: "Masks need not be identical: the ranks apply them to different images, and nothing requires them "
            "to agree. The course's script draws them per rank."}),
    Question(
        "Two workers process 1.9x the images per second of one, at twice the global batch. Is the time to 88% "
        "test accuracy surely 1.9x shorter?",
        ("yes, throughput decides it", "no: the larger global batch may need more epochs to reach 88%, which "
         "eats into the speedup", "no: two workers always take longer"), 1,
        "Time to accuracy = epochs needed x time per epoch. Throughput shrinks the second factor; a larger "
        "global batch can raise the first. Only measuring the held-out accuracy over time tells which wins.",
        {0: "Throughput alone ignores how many epochs the larger batch needs.",
         2: "Below the noise scale two workers do reach the target sooner; it depends on the batch."}),
)

# The self-check of notebook 10 (case studies).
CASE_STUDIES_QUIZ = (
    Question(
        "A model's one-GPU step takes 2 ms. All-reducing its gradients over the link takes 6 ms, and the "
        "backward pass (about 1.3 ms of the step) is all the all-reduce can hide behind. Two GPUs, same "
        "batch per GPU: faster or slower than one?",
        ("faster, close to 2x: each GPU does half the work", "slower: the 2-GPU step is at least about "
         "2 + (6 - 1.3) = 6.7 ms for twice the images, about 0.6x", "the same: communication and compute overlap "
         "completely"), 1,
        "Speedup = 2 x (plain one-GPU step) / (two-GPU step). The two-GPU step is the compute plus the part of the "
        "all-reduce nothing hides: 2 + 4.7 = 6.7 ms, so 2 x 2 / 6.7 = 0.6x. Two GPUs lose when what the step "
        "gains (the exposed all-reduce, plus the wrapper's own cost) is longer than the step itself; on n GPUs, "
        "longer than n - 1 steps.",
        {0: "Each GPU keeps its own batch (weak scaling); the all-reduce is what the second GPU adds.",
         2: "Only the backward pass can hide the all-reduce; the rest of it is exposed."}),
    Question(
        "Over NVLink a tiny model's gradients all-reduce in microseconds, yet its 2-GPU step (each GPU with the "
        "same batch) still takes longer than its 1-GPU step. What does the step model add to explain it?",
        ("the data-parallel wrapper's own fixed cost per step (hooks, bucket bookkeeping, launching and "
         "waiting for the collective)", "NVLink's bandwidth", "the optimizer's learning rate"), 0,
        "A fixed cost per step does not shrink with the model: for a step of a few milliseconds it is a visible "
        "share, for a long step a small one. Against the plain one-GPU run (no wrapper), which every speedup "
        "divides by, the two-GPU step carries it: DDP pays it already with one worker (its one-worker run is "
        "slower than the plain run by it), Horovod only from two workers on. The step model adds the cost "
        "measured on one worker, unless the one-GPU step it starts from ran under DDP and holds it already. It "
        "keeps a small model's speedup a little under 2x even over NVLink, and it is what makes the model lose "
        "when a tiny batch per GPU shortens the step further.",
        {1: "The link's bandwidth is what makes the all-reduce itself cheap here.",
         2: "The learning rate changes what a step does, not how long it takes."}),
    Question(
        "In a p2p bandwidth matrix one GPU is slow with every partner; all other pairs are fast. What do you "
        "check first?",
        ("its PCIe link under load: current vs maximum generation and width (ddlab doctor, nvidia-smi -q -d PCI), "
         "and which NUMA node it sits on", "NCCL_P2P_LEVEL", "the learning rate of the job"), 0,
        "A GPU slow with everyone points at what only that GPU has: its own link (trained at x8 or Gen3), its "
        "place on the other NUMA node, or ACS/IOMMU sending its peer traffic through the root complex.",
        {1: "NCCL_P2P_LEVEL changes how NCCL routes, not what the copy test measures between two GPUs.",
         2: "The p2p test runs no training at all."}),
    Question(
        "The 4x V100 report gives about 21 GB/s between GPU1 and GPU2. A Tesla V100-PCIE's link is PCIe 3.0 x16, "
        "which carries at most 15.75 GB/s in one direction. What do you conclude about that figure?",
        ("those two GPUs must be joined by NVLink", "it most likely adds both directions of a bidirectional copy: "
         "compare it with twice the one-way peak, and ask how the report measured before trusting its other "
         "figures", "the link ran faster than its specification"), 1,
        "No copy in one direction can beat its link's peak. Both directions of a Gen3 x16 link together carry up to "
        "twice 15.75 GB/s, which fits 21 GB/s; the report does not say which it measured. Its own topology rules "
        "NVLink out: every pair is SYS, PCIe through the CPUs. Read a report's method before its numbers.",
        {0: "The report's topology has every pair SYS: PCIe and the CPUs' interconnect, no NVLink.",
         2: "A link's signalling rate caps one direction; a figure above it measured something else."}),
    Question(
        "Gradient accumulation over 4 micro-batches, with DDP's no_sync on the first 3. What changes?",
        ("one all-reduce per 4 micro-batches: the communication per image falls 4x, and the optimizer sees a "
         "4x larger global batch (revisit the learning rate)", "nothing: DDP all-reduces every backward pass "
         "anyway", "each step all-reduces 4x more bytes"), 0,
        "no_sync skips the all-reduce while gradients accumulate locally; the fourth backward pass all-reduces "
        "the sum once. The bytes per all-reduce stay the same, there are 4x fewer of them per image, and the "
        "update now averages 4x more images: convergence has to be checked on held-out data.",
        {1: "Inside no_sync, DDP's hooks do not launch the all-reduce.",
         2: "The gradient has the model's size whatever the number of micro-batches."}),
)

# Each notebook's quiz, in the order it asks them.
QUIZZES = {
    1: DATA_PARALLEL_QUIZ,
    2: (QUIZ[0], QUIZ[3], ALPHA_OF_A_CALL),
    3: (QUIZ[2], NODE_LABEL, RING_BOTTLENECK),
    4: (QUIZ[1], LEVEL_UNSET, QUIZ[4], SOCKET_LOOPBACK),
    5: (QUIZ[5], GRAPH_SHARE, SUPERLINEAR),
    6: (QUIZ[6], HOST_STAGED_BOUND, BIDIRECTIONAL),
    7: HANDSON_QUIZ,
    8: HOROVOD_QUIZ,
    9: CONVERGENCE_QUIZ,
    10: CASE_STUDIES_QUIZ,
}
