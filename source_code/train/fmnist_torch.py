#!/usr/bin/env python3
"""Fashion-MNIST, data-parallel, in PyTorch: one process, DDP or Horovod, one script.

    python fmnist_torch.py --launcher none                          # one process
    torchrun --standalone --nproc-per-node=2 fmnist_torch.py --launcher ddp
    horovodrun -np 2 -H localhost:2 --gloo python fmnist_torch.py --launcher horovod
    ddlab train --framework torch --launcher ddp --workers 2        # the same, via ddlab.measure.launch

What every worker does (the data-parallel recipe of notebook 3):
  1. joins the group (DDP: ``init_process_group``; Horovod: ``hvd.init``) and takes the GPU
     of its local rank;
  2. builds the same model and starts from rank 0's parameters (DDP broadcasts them in its
     constructor; Horovod: ``broadcast_parameters`` and ``broadcast_optimizer_state``);
  3. trains on its own shard of the 60,000 training images (``ddlab.training.data.shard_indices``:
     disjoint and equal across ranks, reshuffled every epoch), with its own random seed for
     dropout;
  4. averages gradients every step (DDP's bucketed all-reduce during backward;
     ``hvd.DistributedOptimizer``), so all ranks take identical optimizer steps;
  5. only rank 0 prints and writes the result.

Throughput is honest (``ddlab.training.throughput``): images all workers processed in the steps
after the warm-up, divided by the wall time between two points where the GPU has finished
its queued work and all workers have met at a barrier. Per-step times come from CUDA events
recorded after every step and read once at the end, so timing adds no host synchronisation.
Every ``--log-interval`` steps rank 0 reads the loss, which waits for the GPU once; that is
all the synchronisation inside the timed steps.

Speed on a GPU (the training set lives on the GPU, batches are slices of a per-epoch
shuffled copy there, nothing waits for the host):
  * ``--precision bf16``: autocast to bfloat16 (parameters, gradients and the all-reduce
    stay float32);
  * ``--cuda-graph``: the whole step (forward, backward, the fused Adam update; with DDP
    also its all-reduce) is captured once as a CUDA graph and replayed: one launch per step
    instead of hundreds, which is what a small CNN at batch 512 is limited by. ``auto`` (the
    default) captures only one process on a GPU (``--launcher none``). With DDP it is
    opt-in (``--cuda-graph on``), so the course's NCCL path comparison runs the eager loop a
    learner writes first; the captured DDP step (PyTorch's recipe, NCCL all-reduce inside the
    graph) runs on the course's 2x H200 machine (reference/experiments/*-graph.json). The
    graph is released before the process group is destroyed: NCCL's destroy waits for every
    graph that captured its kernels (PyTorch issue 115388). Horovod cannot be captured (its all-reduce runs in a
    background thread and the optimizer waits on the host);
  * ``--compile``: ``torch.compile`` (fuses element-wise kernels); ``--channels-last``.

Where the time of a run goes: rank 0 prints one ``phase <name>: <s> s`` line per phase
(imports, device and distributed init, data to device, model build and broadcast, warm-up
with the capture, timed loop, test evaluation, result) and the result holds them as
``phase_s``. On SIGTERM (a launch timeout) every worker prints its Python tracebacks
(``ddlab.measure.launch.install_hang_traceback``), so a hang says where it was.

Convergence runs (notebook 7, ``ddlab.course.convergence_sweep``): ``--lr-scaling linear|sqrt`` with
``--lr-ref-batch`` scales the learning rate for the global batch, ``--lr-warmup-epochs`` ramps
it up from ``--lr`` (``ddlab.training.convergence.lr_at`` sets it before every step); ``--train-samples``
trains on a fixed subset; ``--eval-every EPOCHS`` (and ``--eval-steps``) scores the held-out
test set during training, every rank its slice, and records test accuracy and loss, training
loss and the training seconds so far (evaluations left out of every clock) in the result's
``evaluations``; ``--noise-scale`` (DDP) adds up each rank's squared gradient norm in a DDP
communication hook before the all-reduce and the averaged gradient's after it, per evaluation
interval, for the gradient noise scale. None of these can be captured in a CUDA graph.

Communication tuning (the flags and their checks live in ``ddlab.course.tuning``): ``--accumulate N``
(N micro-batches per optimizer step, one all-reduce: DDP's ``no_sync``, Horovod's
``backward_passes_per_step``); DDP's ``--bucket-cap-mb``, ``--grad-as-bucket-view``,
``--static-graph``, ``--comm-hook bf16|fp16``; Horovod's ``--hvd-compression fp16``,
``--hvd-fusion-mb``, ``--hvd-cycle-ms``. The result's ``tuning`` records them all.

The result (``--json PATH``) is one JSON object: ``ddlab.training.train_common.build_result`` lists its
fields (the same in fmnist_keras.py); the flags, checks and printed lines both scripts share
are there too.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import os
import sys
import time
from pathlib import Path

# The script runs as a file (torchrun/horovodrun start it by path); find the ddlab package.
_SOURCE = Path(__file__).resolve().parents[1]
if str(_SOURCE) not in sys.path:
    sys.path.insert(0, str(_SOURCE))

from ddlab.measure import launch  # noqa: E402

if __name__ == "__main__":
    # Before the heavy imports: a worker stuck even there prints where when it is killed.
    launch.install_hang_traceback()

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from ddlab.training import data as ddata  # noqa: E402
from ddlab.training import convergence, models_torch, throughput, train_common  # noqa: E402
from ddlab.course import tuning
from ddlab.training.train_common import FMNIST_MEAN, FMNIST_STD, rank_seed  # noqa: E402
DDP_EAGER_BEFORE_CAPTURE = 20  # PyTorch's CUDA-graph notes: >= 11 DDP iterations before capture;
# DDP also times iterations 1-10 and every 100th with CUDA events, which must not fall in a capture.
EAGER_BEFORE_CAPTURE = 3       # one process: warm cuDNN, cuBLAS and the optimizer state first
# Printed (rank 0) right before and after the capture: ddlab.training.runs reads them to tell a
# run that failed or hung inside the capture from one that failed elsewhere.
CAPTURE_START, CAPTURE_DONE = "cuda-graph capture: start", "cuda-graph capture: done"


class Failure(train_common.Failure):
    """A clear one-line error for bad input or an impossible setting (exit status 2)."""
    script = "fmnist_torch.py"


def add_torch_arguments(p: argparse.ArgumentParser) -> None:
    """The flags only PyTorch has: how the step runs on a GPU."""
    p.add_argument("--cuda-graph", choices=["auto", "on", "off"], default="auto",
                   help="capture the whole step as a CUDA graph (auto: on for one process on a GPU without "
                        "--compile; off for ddp, where capture is opt-in)")
    p.add_argument("--compile", choices=["none", "default", "reduce-overhead", "max-autotune-no-cudagraphs"],
                   default="none", help="torch.compile mode")
    p.add_argument("--channels-last", action="store_true", help="NHWC memory format for the convolutions")
    p.add_argument("--cudnn-benchmark", choices=["on", "off"], default="on",
                   help="let cuDNN time its convolution algorithms at the first steps (costs warm-up time; "
                        "the phase lines show how much)")
    train_common.add_convergence_arguments(p)
    tuning.add_arguments(p)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    train_common.add_common_arguments(p, launchers=["none", "ddp", "horovod"], models=models_torch.MODELS,
                                      framework_arguments=add_torch_arguments)
    args = train_common.validate_common(p.parse_args(argv), Failure)
    if args.noise_scale and args.launcher != "ddp":
        raise Failure("--noise-scale reads each rank's gradient before DDP averages it (a DDP communication "
                      "hook): use --launcher ddp with 2 or more workers")
    return tuning.check(args, Failure)


# ----------------------------------------------------------------------------- workers
class Workers:
    """What the training loop needs from the launcher: rank, size, local rank, a barrier
    and an all-gather of small Python objects. One class, three launchers."""

    def __init__(self, launcher: str, use_cuda: bool, plan_graph: bool, args=None):
        self.launcher = launcher
        self.hvd = None
        env = os.environ
        if launcher == "none":
            if int(env.get("WORLD_SIZE", "1")) > 1 or int(env.get("HOROVOD_SIZE", "1")) > 1 \
                    or int(env.get("OMPI_COMM_WORLD_SIZE", "1")) > 1:
                raise Failure("--launcher none runs one process, but this was started as one of several "
                              "workers: use --launcher ddp under torchrun or --launcher horovod under horovodrun")
            self.rank, self.size, self.local_rank, self.local_size = 0, 1, 0, 1
            self.backend = "none"
        elif launcher == "ddp":
            if "LOCAL_RANK" not in env or "WORLD_SIZE" not in env:
                raise Failure("--launcher ddp must be started by torchrun, e.g. `torchrun --standalone "
                              "--nproc-per-node=2 fmnist_torch.py --launcher ddp` (or `ddlab train --launcher ddp`)")
            import torch.distributed as dist
            # Before init_process_group: DDP imports torch.distributed.nn later otherwise, and its
            # functions, defined after the group exists, then hold a reference to it for good.
            import torch.distributed.nn  # noqa: F401
            self.dist = dist
            self.local_rank = int(env["LOCAL_RANK"])
            self.local_size = int(env.get("LOCAL_WORLD_SIZE", env["WORLD_SIZE"]))
            kw = {}
            if use_cuda:
                self._pin_gpu()
                kw["device_id"] = torch.device("cuda", self.local_rank)
                if plan_graph:
                    # PyTorch's CUDA-graph notes: DDP capture needs NCCL's async error
                    # handling off, set before the process group exists.
                    env.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "0")
                    env.setdefault("NCCL_ASYNC_ERROR_HANDLING", "0")
            self.backend = "nccl" if use_cuda else "gloo"
            dist.init_process_group(backend=self.backend, **kw)
            self.rank, self.size = dist.get_rank(), dist.get_world_size()
        elif launcher == "horovod":
            try:
                import horovod.torch as hvd
            except ImportError as exc:
                raise Failure(f"--launcher horovod needs Horovod for PyTorch ({exc}); build it with "
                              "`make horovod` (tools/build_horovod.sh)") from None
            if args is not None:
                tuning.apply_horovod_env(args)   # Horovod reads its fusion and cycle settings at init
            hvd.init()
            self.hvd = hvd
            self.rank, self.size = hvd.rank(), hvd.size()
            self.local_rank, self.local_size = hvd.local_rank(), hvd.local_size()
            if use_cuda:
                self._pin_gpu()
            self.backend = "horovod-" + ("nccl" if use_cuda and hvd.nccl_built() else "gloo")
        else:
            raise Failure(f"unknown launcher {launcher!r}")

    def _pin_gpu(self):
        n = torch.cuda.device_count()
        if self.local_rank >= n:
            raise Failure(f"local rank {self.local_rank} has no GPU: only {n} visible "
                          f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r})")
        torch.cuda.set_device(self.local_rank)

    def barrier(self):
        if self.launcher == "ddp":
            self.dist.barrier()
        elif self.launcher == "horovod":
            self.hvd.barrier()

    def allgather(self, obj) -> list:
        if self.launcher == "ddp":
            out = [None] * self.size
            self.dist.all_gather_object(out, obj)
            return out
        if self.launcher == "horovod":
            return list(self.hvd.allgather_object(obj))
        return [obj]

    def shutdown(self):
        if self.launcher == "ddp":
            self.dist.destroy_process_group()
        elif self.launcher == "horovod":
            self.hvd.shutdown()


# ----------------------------------------------------------------------------- helpers
def resolve_device(choice: str) -> torch.device:
    if choice == "cuda" or (choice == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise Failure("--device cuda, but torch sees no CUDA GPU (CPU-only torch, or no visible GPU)")
        return torch.device("cuda")
    return torch.device("cpu")


def graph_decision(args, use_cuda: bool):
    """(use a CUDA graph?, why) from --cuda-graph, the device, the launcher and --compile."""
    if args.cuda_graph == "off":
        return False, "off (--cuda-graph off)"
    problems = []
    if not use_cuda:
        problems.append("CUDA graphs need a GPU")
    if args.launcher == "horovod":
        problems.append("Horovod all-reduces in a background thread and its optimizer waits on the host, "
                        "which a CUDA graph cannot capture")
    if args.compile == "reduce-overhead":
        problems.append("--compile reduce-overhead already uses CUDA graphs")
    if args.compile != "none" and args.launcher == "ddp":
        problems.append("capturing a compiled DDP model is not supported here")
    if args.lr_warmup_epochs > 0:
        problems.append("the learning-rate warm-up changes the rate every step, which a captured step would not see")
    if args.noise_scale:
        problems.append("--noise-scale reads every rank's gradient outside the captured step")
    problems += tuning.graph_problems(args)
    if args.cuda_graph == "on":
        if problems:
            raise Failure("--cuda-graph on is impossible: " + "; ".join(problems))
        return True, "on (--cuda-graph on)"
    if problems:
        return False, "off: " + problems[0]
    if args.launcher == "ddp":
        # Opt-in for DDP: the eager loop is what the course compares across NCCL paths;
        # capturing DDP's NCCL all-reduce (PyTorch's recipe, see DDP_EAGER_BEFORE_CAPTURE)
        # is the speed option on top.
        return False, "off (auto: DDP capture is opt-in; --cuda-graph on captures it)"
    if args.compile != "none":
        return False, "off: --compile given (add --cuda-graph on to capture the compiled step too)"
    return True, "on (auto: one process on a GPU)"


def weights_checksum(model: torch.nn.Module) -> dict:
    """float64 sum and sum of squares of all parameters: equal on every rank when the ranks
    agree (they take identical steps), different as soon as one rank drifts."""
    with torch.no_grad():
        s = sum(p.detach().sum(dtype=torch.float64) for p in model.parameters())
        q = sum(torch.linalg.vector_norm(p.detach(), dtype=torch.float64) ** 2 for p in model.parameters())
    return {"sum": float(s), "sumsq": float(q)}


def nccl_version() -> str:
    v = torch.cuda.nccl.version()
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


@torch.no_grad()
def evaluate(model, x, y, batch: int, autocast) -> float:
    model.eval()
    correct = torch.zeros((), dtype=torch.int64, device=x.device)
    for i in range(0, x.shape[0], batch):
        with autocast():
            logits = model(x[i:i + batch])
        correct += (logits.argmax(dim=1) == y[i:i + batch]).sum()
    model.train()
    return correct.item() / x.shape[0]


@torch.no_grad()
def evaluate_sums(model, x, y, batch: int, autocast) -> tuple:
    """(correct predictions, summed cross-entropy) over the images ``x`` (this rank's part of the test set)."""
    model.eval()
    correct = torch.zeros((), dtype=torch.int64, device=x.device)
    loss = torch.zeros((), dtype=torch.float64, device=x.device)
    for i in range(0, x.shape[0], batch):
        with autocast():
            logits = model(x[i:i + batch]).float()
        correct += (logits.argmax(dim=1) == y[i:i + batch]).sum()
        loss += F.cross_entropy(logits, y[i:i + batch], reduction="sum").double()
    model.train()
    return int(correct.item()), float(loss.item())


def normalise(images_uint8: torch.Tensor, memory_format) -> torch.Tensor:
    """uint8 images (N, 28, 28) -> normalised float32 (N, 1, 28, 28), on their device."""
    x = images_uint8.float().div_(255).sub_(FMNIST_MEAN).div_(FMNIST_STD).unsqueeze(1)
    return x.contiguous(memory_format=memory_format)


# ----------------------------------------------------------------------------- main
def main(argv=None) -> int:
    phases = launch.PhaseClock()       # counts from the start of this process
    phases.done("imports")             # python, numpy, torch, ddlab (module level, above)
    args = parse_args(argv)
    device = resolve_device(args.device)
    use_cuda = device.type == "cuda"
    use_graph, graph_reason = graph_decision(args, use_cuda)
    workers = Workers(args.launcher, use_cuda, use_graph, args)
    train(args, workers, device, use_graph, graph_reason, phases)
    # Shut down only now, when train()'s model, optimizer and DDP wrapper are gone: while DDP
    # exists it holds the process group, and destroy_process_group cannot close a held group.
    # Gloo's threads would then live until Python exits, and may abort a finished process there.
    gc.collect()
    workers.shutdown()
    phases.done("shutdown")   # printed only: the result was written above
    return 0


def train(args, workers: Workers, device: torch.device, use_graph: bool, graph_reason: str,
          phases: launch.PhaseClock) -> None:
    """Everything between the launcher's init and its shutdown: data, model, the timed
    steps, the result (printed, and written by rank 0 to --json)."""
    use_cuda = device.type == "cuda"
    rank, world = workers.rank, workers.size
    if use_cuda:
        device = torch.device("cuda", torch.cuda.current_device())
        # Fixed shapes: let cuDNN time its algorithms once and keep the fastest (warm-up time).
        torch.backends.cudnn.benchmark = args.cudnn_benchmark == "on"
    else:
        torch.set_num_threads(args.cpu_threads)
    say = print if rank == 0 else (lambda *a, **k: None)
    phases.report_to(say)
    phases.done("device and distributed init")
    notes = []

    # ---- data: the real Fashion-MNIST, this rank's shard, resident on the device
    # One rank per machine verifies the files' SHA-256 (its other ranks read the same files);
    # only rank 0 needs the test images on its device.
    x_train, y_train, x_test, y_test = ddata.load_fashion_mnist(args.data_dir, verify=workers.local_rank == 0)
    if args.train_samples is not None:
        # A fixed subset (the same for every seed and every run), then sharded as usual.
        subset = ddata.train_subset(x_train.shape[0], args.train_samples)
        x_train, y_train = x_train[subset], y_train[subset]
    n = x_train.shape[0]
    eager_needed = (DDP_EAGER_BEFORE_CAPTURE if args.launcher == "ddp" else EAGER_BEFORE_CAPTURE) if use_graph else 0
    plan = train_common.plan_steps(args, n, world, Failure, min_warmup=eager_needed,
                                   min_warmup_why=f"the CUDA-graph capture needs {eager_needed} eager steps first")
    notes += plan.notes
    per_rank, steps_per_epoch, total, warmup = plan.per_rank, plan.steps_per_epoch, plan.total, plan.warmup
    epochs_needed = plan.epochs_needed
    # One permutation per epoch, identical on all ranks, cut into disjoint equal shards.
    order = np.stack([ddata.shard_indices(n, rank, world, args.seed, epoch=e) for e in range(epochs_needed)])
    order_t = torch.from_numpy(order).to(device)
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
    # The training images stay uint8 on the device (4x smaller than float32, one 47 MB copy);
    # each epoch's shard is gathered and normalised once, when the epoch begins.
    X = torch.tensor(x_train).to(device)   # a copy: the loader's arrays are read-only
    Y = torch.from_numpy(y_train.astype(np.int64)).to(device)
    Xt = Yt = None
    evaluating = args.eval_every > 0
    if evaluating:
        # Evaluations during training: every rank scores its own slice of the test images.
        lo, hi = rank * args.test_samples // world, (rank + 1) * args.test_samples // world
    else:
        lo, hi = 0, (args.test_samples if rank == 0 else 0)   # only rank 0 evaluates, at the end
    if hi > lo:
        Xt = normalise(torch.tensor(x_test[lo:hi]).to(device), memory_format)
        Yt = torch.from_numpy(y_test[lo:hi].astype(np.int64)).to(device)
    del x_train, y_train, x_test, y_test
    phases.done("data to device")

    epoch_data = {"epoch": -1}
    micro = args.accumulate                     # micro-batches of args.batch_size per optimizer step
    step_batch = args.batch_size * micro

    def batch_at(step: int):
        """Views of this rank's images for ``step`` (all its micro-batches); the shard is gathered once per epoch."""
        epoch, pos = divmod(step, steps_per_epoch)
        if epoch != epoch_data["epoch"]:
            idx = order_t[epoch]
            epoch_data.update(epoch=epoch, x=normalise(X.index_select(0, idx), memory_format),
                              y=Y.index_select(0, idx))
        s = pos * step_batch
        return epoch_data["x"][s:s + step_batch], epoch_data["y"][s:s + step_batch]

    # ---- model: same initial weights everywhere (same seed, then rank 0's broadcast)
    torch.manual_seed(args.seed)
    model = models_torch.build(args.model).to(device=device, memory_format=memory_format)
    n_params = models_torch.count_parameters(model)
    grad_bytes = models_torch.gradient_bytes(model)
    torch.manual_seed(rank_seed(args.seed, rank))   # dropout masks differ per rank
    lr = train_common.learning_rate(args, world)
    lr_warmup = convergence.warmup_steps(args.lr_warmup_epochs, steps_per_epoch)
    if args.noise_scale and world < 2:
        raise Failure("--noise-scale compares each rank's gradient with the all-reduced one: it needs 2 or more "
                      "workers")
    hook_sq = torch.zeros((), dtype=torch.float64, device=device)

    def local_norm_hook(state, bucket):
        """DDP communication hook: adds the squared norm of this rank's own gradients in the
        bucket (before they are averaged), then all-reduces the bucket as DDP does by default."""
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        hook_sq.add_(bucket.buffer().double().pow(2).sum())
        return default_hooks.allreduce_hook(state, bucket)
    if args.optimizer == "adam":
        # fused: one kernel updates all parameters; capturable: the step count lives on the GPU.
        opt = torch.optim.Adam(model.parameters(), lr=lr, fused=use_cuda, capturable=use_graph)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)

    side = torch.cuda.Stream() if use_graph else None
    net = model
    if args.launcher == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        ids = [workers.local_rank] if use_cuda else None
        # For a full-step capture DDP must be built on the side stream the capture will use.
        with (torch.cuda.stream(side) if use_graph else contextlib.nullcontext()):
            net = DDP(model, device_ids=ids, **tuning.ddp_kwargs(args))   # broadcasts rank 0's parameters
        if args.noise_scale:
            net.register_comm_hook(None, local_norm_hook)
        tuning.register_comm_hook(net, args.comm_hook, Failure)
    elif args.launcher == "horovod":
        hvd = workers.hvd
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(), op=hvd.Average,
                                       **tuning.horovod_optimizer_kwargs(args, hvd))
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(opt, root_rank=0)
    ddp = net if args.launcher == "ddp" else None   # the DDP model itself (no_sync), before any compile
    if args.compile != "none":
        net = torch.compile(net, mode=args.compile)   # compiles at the first step (warm-up)
    start_checksum = weights_checksum(model)
    phases.done("model build and broadcast")

    def autocast():
        if args.precision == "bf16":
            # cache_enabled=False: autocast's weight-cast cache must not outlive a graph capture.
            return torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=not use_graph)
        return contextlib.nullcontext()

    loss_sum = torch.zeros((), dtype=torch.float32, device=device)   # summed on the device, read at log time
    # Since the last evaluation, on the device: training loss, and (--noise-scale) the squared
    # norms of this rank's own gradient and of the all-reduced one, summed over the steps.
    interval = {k: torch.zeros((), dtype=torch.float64, device=device) for k in ("loss_sum", "small_sq", "big_sq")}
    interval_steps = [0]

    def forward_backward_step(x, y):
        for i in range(micro):
            # DDP all-reduces only in the last micro-batch's backward (no_sync before it); Horovod
            # counts the backward passes itself (backward_passes_per_step).
            skip_sync = ddp is not None and i < micro - 1
            b = args.batch_size
            xs, ys = (x, y) if micro == 1 else (x[i * b:(i + 1) * b], y[i * b:(i + 1) * b])
            with (ddp.no_sync() if skip_sync else contextlib.nullcontext()), autocast():
                loss = F.cross_entropy(net(xs).float(), ys)
            loss = loss / micro if micro > 1 else loss   # the step's loss: the mean over its micro-batches
            loss.backward()
            loss_sum.add_(loss.detach())
            if evaluating:
                interval["loss_sum"].add_(loss.detach())
        if args.noise_scale:
            # the gradient all ranks now share (DDP averaged it), before the optimizer uses it
            interval["big_sq"].add_(torch.stack([p.grad.double().pow(2).sum() for p in model.parameters()]).sum())
            interval["small_sq"].add_(hook_sq)
            hook_sq.zero_()
        opt.step()

    def eager_step(step: int):
        x, y = batch_at(step)
        opt.zero_grad()   # set_to_none (the default): backward writes fresh gradients
        if lr_warmup:
            rate = convergence.lr_at(step, args.lr, lr, lr_warmup)
            for group in opt.param_groups:
                group["lr"] = rate
        forward_backward_step(x, y)
        interval_steps[0] += 1

    global_batch = train_common.global_batch(args, world)
    log_every = args.log_interval or max(1, total // 10)
    tuned = tuning.describe(args)
    say(f"fmnist_torch | model {args.model} ({n_params:,} parameters, {grad_bytes / 1e6:.1f} MB of gradients "
        f"per step) | launcher {args.launcher} ({workers.backend}), {world} worker(s) x batch {args.batch_size} "
        + (f"x {micro} micro-batches " if micro > 1 else "") + f"= {global_batch} | {device.type}"
        + (f" ({torch.cuda.get_device_name(device)})" if use_cuda else "")
        + f" | {args.precision} | cuda-graph {graph_reason} | compile {args.compile} | {args.optimizer} lr {lr:g}"
        + (f" ({args.lr_scaling} scaling of {args.lr:g} for batch {args.lr_ref_batch or args.batch_size})"
           if args.lr_scaling != "none" else "")
        + (f", warm-up {lr_warmup} steps" if lr_warmup else "")
        + (f" | tuning: {tuned}" if tuned else "")
        + f" | {total} steps, {warmup} warm-up, shard {per_rank} images = {steps_per_epoch} steps/epoch", flush=True)
    for note in notes:
        say("note: " + note)

    # ---- the step loop
    state = {"t_log": time.perf_counter(), "step_log": 0, "last_loss": float("nan")}

    def log_line(step_done: int, force: bool = False):
        if rank != 0 or not (force or step_done % log_every == 0 or step_done == total):
            return
        loss = loss_sum.item() / max(1, step_done - state["step_log"])   # waits for the GPU (rank 0 only)
        loss_sum.zero_()
        t = time.perf_counter()
        dt = t - state["t_log"]
        print(train_common.step_line(step_done, total, loss, dt, step_done - state["step_log"], global_batch, warmup),
              flush=True)
        state.update(t_log=t, step_log=step_done, last_loss=loss)

    graph = None
    static_x = static_y = None
    step = 0
    if use_graph:
        # Eager warm-up on the side stream (PyTorch's whole-network capture recipe), then one capture.
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for step in range(eager_needed):
                eager_step(step)
        torch.cuda.current_stream().wait_stream(side)
        step = eager_needed
        log_line(step, force=True)
        static_x = torch.empty((step_batch, 1, 28, 28), device=device).contiguous(memory_format=memory_format)
        static_y = torch.empty((step_batch,), dtype=torch.int64, device=device)
        opt.zero_grad()   # set to None: gradients are then allocated inside the graph's memory pool
        if args.launcher == "ddp":
            say("note: capturing DDP's NCCL all-reduce in the CUDA graph (--cuda-graph on); "
                "a hang would be killed by the launch timeout, with tracebacks.")
        say(f"{CAPTURE_START} after {eager_needed} eager steps", flush=True)
        try:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=side):
                forward_backward_step(static_x, static_y)
            graph = g
            graph_reason += f", captured after {eager_needed} eager steps"
            say(CAPTURE_DONE, flush=True)
        except Exception as exc:  # the reason is printed and recorded; the run goes on uncaptured
            if args.launcher == "ddp":
                # DDP's reducer is left mid-iteration by a failed capture: stop with the reason.
                raise Failure(f"CUDA-graph capture of the DDP step failed ({type(exc).__name__}: {exc}); "
                              "rerun with --cuda-graph off") from None
            torch.cuda.synchronize()
            graph_reason = f"off: capture failed ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})"
            notes.append("CUDA-graph capture failed, ran eagerly: " + graph_reason)
            say("note: " + notes[-1])
            use_graph = False
        loss_sum.zero_()
        state.update(t_log=time.perf_counter(), step_log=step)

    def run_step(step: int):
        if graph is not None:
            x, y = batch_at(step)
            static_x.copy_(x)
            static_y.copy_(y)
            graph.replay()
            interval_steps[0] += 1
        else:
            eager_step(step)

    # ---- evaluations during training (--eval-every): the held-out test set, all ranks together
    def sync_all():
        if use_cuda:
            torch.cuda.synchronize()
        workers.barrier()
        if use_cuda:
            torch.cuda.synchronize()

    eval_at = set()
    if evaluating:
        every = args.eval_every * steps_per_epoch
        eval_at = {min(total, max(1, int(round(k * every)))) for k in range(1, int(total / every) + 1)} | {total}
        eval_at |= {s for s in args.eval_steps if s <= total}
    evaluations = []
    clock = {"start": time.perf_counter(), "eval_s": 0.0}

    def evaluate_now(step_done: int) -> float:
        """Scores the test set at this step; returns the seconds it took (all ranks)."""
        sync_all()
        t = time.perf_counter()
        correct, loss_total = evaluate_sums(model, Xt, Yt, 1000, autocast)
        mine = {"correct": correct, "test_loss": loss_total, "n": Yt.shape[0], "steps": interval_steps[0],
                **{k: float(v.item()) for k, v in interval.items()}}
        for v in interval.values():
            v.zero_()
        interval_steps[0] = 0
        every_rank = workers.allgather(mine)
        n_test = sum(g["n"] for g in every_rank)
        steps_in = every_rank[0]["steps"]
        entry = {"epoch": round(step_done / steps_per_epoch, 4), "step": step_done,
                 "train_s": t - clock["start"] - clock["eval_s"], "wall_s": phases.since_start(),
                 "lr": float(opt.param_groups[0]["lr"]),   # the rate of the last step before this evaluation
                 "test_accuracy": sum(g["correct"] for g in every_rank) / n_test,
                 "test_loss": sum(g["test_loss"] for g in every_rank) / n_test,
                 "train_loss": (sum(g["loss_sum"] for g in every_rank) / (steps_in * world)) if steps_in else None}
        if args.noise_scale and steps_in:
            entry["noise"] = {"steps": steps_in,
                              "small_sq": sum(g["small_sq"] for g in every_rank) / (steps_in * world),
                              "big_sq": every_rank[0]["big_sq"] / steps_in}
        evaluations.append(entry)
        say(f"eval at step {step_done} (epoch {entry['epoch']:g}): test accuracy {entry['test_accuracy']:.4f}, "
            f"test loss {entry['test_loss']:.4f}, {entry['train_s']:.2f} s of training", flush=True)
        took = time.perf_counter() - t
        clock["eval_s"] += took
        return took

    sync_all()
    clock["start"] = time.perf_counter()
    while step < warmup:
        run_step(step)
        step += 1
        log_line(step)
        if step in eval_at:
            evaluate_now(step)

    # ---- timed steps, between synchronisations

    # One CUDA event per step boundary, created up front; read only after the last step.
    events = [torch.cuda.Event(enable_timing=True) for _ in range(total - warmup + 1)] if use_cuda else []
    resumed = {}     # step boundary -> the event recorded after an evaluation there (not timed)
    host_times = []
    timed_eval_s = 0.0
    sync_all()
    phases.done("warm-up" + (" and capture" if graph is not None else ""))
    t0 = time.perf_counter()
    if use_cuda:
        events[0].record()
    t_prev = t0
    while step < total:
        run_step(step)
        step += 1
        if use_cuda:
            events[step - warmup].record()
        else:
            t = time.perf_counter()
            host_times.append((t - t_prev) * 1e3)
            t_prev = t
        log_line(step)
        if step in eval_at and step < total:
            timed_eval_s += evaluate_now(step)   # not training: left out of the timed interval
            if use_cuda:
                resumed[step - warmup] = torch.cuda.Event(enable_timing=True)
                resumed[step - warmup].record()
            t_prev = time.perf_counter()
    sync_all()
    elapsed = time.perf_counter() - t0 - timed_eval_s
    phases.done("timed loop")
    step_ms = [resumed.get(i, events[i]).elapsed_time(events[i + 1]) for i in range(len(events) - 1)] \
        if use_cuda else host_times
    if evaluating:
        notes.append(f"the test evaluations during training ({clock['eval_s']:.2f} s) are left out of the timed "
                     "interval and of each evaluation's train_s")
    speed = throughput.summarize(plan.timed, step_batch, world, elapsed, step_ms)   # images really processed

    # ---- agreement across ranks, test accuracy, result
    checksum = weights_checksum(model)
    gathered = workers.allgather({"rank": rank, "checksum": checksum, "elapsed_s": elapsed,
                                  "step_time_ms_median": speed["step_time_ms"]["median"]})
    phases.done("rank agreement check")
    if evaluating:
        evaluate_now(total)   # all ranks score their slices; rank 0 reports it as the test accuracy
    if rank == 0:
        if evaluating:
            accuracy = evaluations[-1]["test_accuracy"]   # the whole test set, scored by all ranks just now
        else:
            if not use_cuda:
                torch.set_num_threads(os.cpu_count() or 1)   # the others wait at the barrier: use every core
                # oneDNN's CPU convolutions run about 1.7x faster with channels-last weights; the
                # training is over, so this changes only the speed of the evaluation.
                model.to(memory_format=torch.channels_last)
            accuracy = evaluate(model, Xt, Yt, 1000, autocast)
        phases.done("test evaluation")
        from ddlab.system.provenance import run_provenance
        provenance = run_provenance(train_common.run_command())
        phases.done("result and provenance")
        result = train_common.build_result(
            args, framework="torch", params=n_params, gradient_bytes=grad_bytes, backend=workers.backend,
            world=world, plan=plan, speed=speed, step_times_ms=step_ms, accuracy=accuracy,
            test_samples=args.test_samples if evaluating else Yt.shape[0], final_loss=state["last_loss"],
            device_fields={
                "device": device.type,
                "device_name": torch.cuda.get_device_name(device) if use_cuda else None,
                "cuda_graph": graph is not None, "cuda_graph_reason": graph_reason,
                "compile": args.compile, "channels_last": args.channels_last,
                "cudnn_benchmark": use_cuda and args.cudnn_benchmark == "on"},
            lr=lr, on_gpu=use_cuda, checksum=checksum, start_checksum=start_checksum, gathered=gathered,
            framework_env_prefixes=("TORCH_NCCL_", "HOROVOD_", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS"),
            versions={"torch": torch.__version__, "nccl_version": nccl_version() if use_cuda else None},
            notes=notes, phase_s=phases.to_dict(), wall_s=phases.since_start(), provenance=provenance,
            learning={"train_samples": n, "lr_warmup_epochs": args.lr_warmup_epochs, "lr_warmup_steps": lr_warmup,
                      "eval_every": args.eval_every, "noise_scale": args.noise_scale,
                      "evaluations": evaluations},
            tuning=tuning.config(args))
        print(train_common.summary_line(result), flush=True)
        if args.json:
            train_common.write_json(args.json, result)
    workers.barrier()   # rank 0 evaluates while the others wait, then all leave together
    if graph is not None:
        # A CUDA graph that captured NCCL work holds a reference on the communicator, and NCCL's
        # destroy waits for it to drop: destroying the process group first hangs (PyTorch issue
        # 115388; it hung so on the 2x H200 machine). Release the graph before shutting down.
        torch.cuda.synchronize()
        graph.reset()
        graph = None
        torch.cuda.synchronize()


if __name__ == "__main__":
    sys.exit(main())
