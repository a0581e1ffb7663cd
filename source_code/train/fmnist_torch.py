#!/usr/bin/env python3
"""Fashion-MNIST, data-parallel, in PyTorch: one process, DDP or Horovod, one script.

    python fmnist_torch.py --launcher none                          # one process
    torchrun --standalone --nproc-per-node=2 fmnist_torch.py --launcher ddp
    horovodrun -np 2 -H localhost:2 --gloo python fmnist_torch.py --launcher horovod
    ddlab train --framework torch --launcher ddp --workers 2        # the same, via ddlab.measure.launch

What every worker does (the data-parallel recipe of notebooks 7 and 8, DDP's and Horovod's changes):
  1. joins the group (DDP: ``init_process_group``; Horovod: ``hvd.init``) and takes the GPU
     of its local rank (``ddlab.training.workers_torch``);
  2. builds the same model and starts from rank 0's parameters (DDP broadcasts them in its
     constructor; Horovod: ``broadcast_parameters`` and ``broadcast_optimizer_state``);
  3. trains on its own shard of the 60,000 training images (``ddlab.training.data.shard_indices``:
     disjoint and equal across ranks, reshuffled every epoch; kept on the device by
     ``ddlab.training.data_torch``), with its own random seed for dropout;
  4. averages gradients every step (DDP's bucketed all-reduce during backward;
     ``hvd.DistributedOptimizer``), so all ranks take identical optimizer steps;
  5. only rank 0 prints and writes the result.

Throughput is honest (``ddlab.training.throughput``): images all workers processed in the steps
after the warm-up, over the wall time between two points where the GPU has finished its
queued work and all workers have met at a barrier; per-step times from CUDA events read once
at the end. Every ``--log-interval`` steps rank 0 reads the loss, which waits for the GPU
once: all the synchronisation inside the timed steps.

Speed on a GPU (the training set lives on the GPU, nothing waits for the host):
``--precision bf16`` autocasts to bfloat16 (parameters, gradients and the all-reduce stay
float32); ``--cuda-graph`` captures the whole step once as a CUDA graph and replays it, one
launch per step instead of hundreds (``auto``: one process on a GPU; opt-in with DDP; never
Horovod: ``ddlab.training.cuda_graph_torch`` says why and how); ``--compile``
(``torch.compile``); ``--channels-last``.

Where the time of a run goes: rank 0 prints one ``phase <name>: <s> s`` line per phase (the
result's ``phase_s``). On SIGTERM (a launch timeout) every worker prints its Python
tracebacks (``ddlab.measure.launch.install_hang_traceback``), so a hang says where it was.

Convergence runs (notebook 9, ``ddlab.course.convergence_sweep``): ``--lr-scaling linear|sqrt`` with
``--lr-ref-batch`` scales the learning rate for the global batch, ``--lr-warmup-epochs`` ramps
it up from ``--lr`` (``ddlab.training.convergence.lr_at``, before every step); ``--train-samples``
trains on a fixed subset; ``--eval-every EPOCHS`` (and ``--eval-steps``) scores the held-out
test set during training (``ddlab.training.evaluations``); ``--noise-scale`` (DDP) sums each
rank's squared gradient norm before the all-reduce and the averaged gradient's after it
(``ddlab.training.evaluations_torch``). None of these can be captured in a CUDA graph.

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

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.distributed.elastic.multiprocessing.errors import record  # noqa: E402

from ddlab.course import tuning  # noqa: E402
from ddlab.system import software  # noqa: E402
from ddlab.training import convergence, cuda_graph_torch, data_torch, evaluations, evaluations_torch  # noqa: E402
from ddlab.training import data as ddata  # noqa: E402
from ddlab.training import models_torch, speed_options_torch, throughput, train_common, workers_torch  # noqa: E402
from ddlab.training.train_common import rank_seed  # noqa: E402
from ddlab.training.workers_torch import Workers  # noqa: E402


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
    train_common.add_common_arguments(p, launchers=["none", "ddp", "horovod"], models=models_torch.TRAINABLE,
                                      framework_arguments=add_torch_arguments)
    args = train_common.validate_common(p.parse_args(argv), Failure)
    if args.noise_scale and args.launcher != "ddp":
        raise Failure("--noise-scale reads each rank's gradient before DDP averages it (a DDP communication "
                      "hook): use --launcher ddp with 2 or more workers")
    return tuning.check(args, Failure)


# ----------------------------------------------------------------------------- main
@record   # under torchrun, an exception goes to its error file: which rank raised what, and when
def main(argv=None) -> int:
    phases = launch.PhaseClock()       # counts from the start of this process
    phases.done("imports")             # python, numpy, torch, ddlab (module level, above)
    args = parse_args(argv)
    device = workers_torch.resolve_device(args.device, Failure)
    use_cuda = device.type == "cuda"
    use_graph, graph_reason = cuda_graph_torch.decide(args, use_cuda, tuning.graph_problems(args), Failure)
    # Horovod reads its fusion and cycle settings (--hvd-fusion-mb, --hvd-cycle-ms) at init.
    workers = Workers(args.launcher, use_cuda, use_graph, Failure,
                      before_horovod_init=lambda: tuning.apply_horovod_env(args))
    train(args, workers, device, use_graph, graph_reason, phases)
    # Shut down only now, when train()'s model, optimizer and DDP wrapper are gone: while DDP
    # exists it holds the process group, and destroy_process_group cannot close a held group.
    # Gloo's threads would then live until Python exits, and may abort a finished process there.
    # (Workers imports torch.distributed.nn before init_process_group for the same reason.)
    gc.collect()
    workers.shutdown()
    phases.done("shutdown")   # printed only: the result was written above
    return 0


def load_data(args, workers: Workers, device: torch.device, eager_needed: int) -> tuple:
    """The real Fashion-MNIST, this rank's shard, resident on the device: (the step plan, the
    batches by step, the test images and labels this rank scores, the training-set size)."""
    # One rank per machine verifies the files' SHA-256 (its other ranks read the same files).
    x_train, y_train, x_test, y_test = ddata.load_fashion_mnist(args.data_dir, verify=workers.local_rank == 0)
    if args.train_samples is not None:
        # A fixed subset (the same for every seed and every run), then sharded as usual.
        subset = ddata.train_subset(x_train.shape[0], args.train_samples)
        x_train, y_train = x_train[subset], y_train[subset]
    plan = train_common.plan_steps(args, x_train.shape[0], workers.size, Failure, min_warmup=eager_needed,
                                   min_warmup_why=f"the CUDA-graph capture needs {eager_needed} eager steps first")
    memory_format = speed_options_torch.memory_format(args)
    batch_at = data_torch.EpochBatches(x_train, y_train, rank=workers.rank, world=workers.size, seed=args.seed,
                                       epochs=plan.epochs_needed, steps_per_epoch=plan.steps_per_epoch,
                                       step_batch=args.batch_size * args.accumulate, device=device,
                                       memory_format=memory_format)
    # Evaluating during training, every rank scores its slice of the test images; else only
    # rank 0 scores them, at the end.
    lo, hi = evaluations.test_range(workers.rank, workers.size, args.test_samples, every_rank=args.eval_every > 0)
    Xt, Yt = data_torch.test_images(x_test, y_test, lo, hi, device, memory_format)
    return plan, batch_at, Xt, Yt, x_train.shape[0]


def build_model(args, workers: Workers, device: torch.device, lr: float, graph, interval) -> tuple:
    """The same initial weights on every rank (same seed, then rank 0's broadcast), the optimizer
    and the launcher's wrapper: (the model, what the step calls, the DDP wrapper or None, the optimizer)."""
    use_cuda = device.type == "cuda"
    torch.manual_seed(args.seed)
    model = models_torch.build(args.model).to(device=device, memory_format=speed_options_torch.memory_format(args))
    torch.manual_seed(rank_seed(args.seed, workers.rank))   # dropout masks differ per rank
    if args.optimizer == "adam":
        # fused: one kernel updates all parameters; capturable: the step count lives on the GPU.
        opt = torch.optim.Adam(model.parameters(), lr=lr, fused=use_cuda, capturable=graph is not None)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    net = model
    if args.launcher == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        ids = [workers.local_rank] if use_cuda else None
        # For a full-step capture DDP must be built on the side stream the capture will use.
        with (torch.cuda.stream(graph.side) if graph else contextlib.nullcontext()):
            net = DDP(model, device_ids=ids, **tuning.ddp_kwargs(args))   # broadcasts rank 0's parameters
        if args.noise_scale:
            net.register_comm_hook(None, interval.local_norm_hook)
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
    return model, net, ddp, opt


def banner(args, workers: Workers, device: torch.device, model, lr: float, lr_warmup: int, plan,
           graph_reason: str) -> str:
    """The run's first line: model, launcher, batch, device, speed options, learning rate, steps."""
    micro, tuned = args.accumulate, tuning.describe(args)
    return (f"fmnist_torch | model {args.model} ({models_torch.count_parameters(model):,} parameters, "
            f"{models_torch.gradient_bytes(model) / 1e6:.1f} MB of gradients per step) | launcher {args.launcher} "
            f"({workers.backend}), {workers.size} worker(s) x batch {args.batch_size} "
            + (f"x {micro} micro-batches " if micro > 1 else "")
            + f"= {train_common.global_batch(args, workers.size)} | {device.type}"
            + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else "")
            + f" | {args.precision} | cuda-graph {graph_reason} | compile {args.compile} | {args.optimizer} lr {lr:g}"
            + (f" ({args.lr_scaling} scaling of {args.lr:g} for batch {args.lr_ref_batch or args.batch_size})"
               if args.lr_scaling != "none" else "")
            + (f", warm-up {lr_warmup} steps" if lr_warmup else "")
            + (f" | tuning: {tuned}" if tuned else "")
            + f" | {plan.total} steps, {plan.warmup} warm-up, shard {plan.per_rank} images = "
              f"{plan.steps_per_epoch} steps/epoch")


class Run:
    """One worker's training run between the launcher's init and its shutdown: the data, the
    model, the steps (eager or replayed as a CUDA graph), the evaluations and the result."""

    def __init__(self, args, workers: Workers, device: torch.device, use_graph: bool, graph_reason: str,
                 phases: launch.PhaseClock):
        self.args, self.workers, self.phases, self.graph_reason = args, workers, phases, graph_reason
        self.use_cuda = device.type == "cuda"
        self.rank, self.world = workers.rank, workers.size
        self.device = speed_options_torch.set_up(args, device)   # cuDNN's algorithm search; CPU threads
        self.say = print if self.rank == 0 else (lambda *a, **k: None)
        phases.report_to(self.say)
        phases.done("device and distributed init")
        # The step captured as a CUDA graph (--cuda-graph), after a few eager steps of the warm-up.
        self.graph = cuda_graph_torch.CapturedStep(args.launcher, Failure, self.rank) if use_graph else None
        self.eager_needed = self.graph.eager_steps if self.graph else 0
        self.plan, self.batch_at, self.Xt, self.Yt, self.n_train = load_data(args, workers, self.device,
                                                                             self.eager_needed)
        self.notes = list(self.plan.notes)
        self.evaluating = args.eval_every > 0
        phases.done("data to device")
        self.lr = train_common.learning_rate(args, self.world)
        self.lr_warmup = convergence.warmup_steps(args.lr_warmup_epochs, self.plan.steps_per_epoch)
        if args.noise_scale and self.world < 2:
            raise Failure("--noise-scale compares each rank's gradient with the all-reduced one: it needs 2 or "
                          "more workers")
        # Since the last evaluation, on the device: training loss, and (--noise-scale) the squared
        # norms of this rank's own gradient and of the all-reduced one, summed over the steps.
        self.interval = evaluations_torch.IntervalSums(self.device)
        self.model, self.net, self.ddp, self.opt = build_model(args, workers, self.device, self.lr, self.graph,
                                                               self.interval)
        self.start_checksum = models_torch.weights_checksum(self.model)
        phases.done("model build and broadcast")
        self.autocast = speed_options_torch.autocast(args.precision, self.device, capturing=lambda: self.graph is not None)
        self.loss_sum = torch.zeros((), dtype=torch.float32, device=self.device)   # summed on the device, read at log time
        self.history, self.clock = [], {"start": time.perf_counter(), "eval_s": 0.0}
        self.progress = train_common.ProgressLog(self.plan.total, self.plan.warmup,
                                                 train_common.global_batch(args, self.world), args.log_interval)

    def forward_backward_step(self, x, y):
        """One optimizer step of ``--accumulate`` micro-batches: forward, backward (the all-reduce), update."""
        args, micro = self.args, self.args.accumulate
        for i in range(micro):
            # DDP all-reduces only in the last micro-batch's backward (no_sync before it); Horovod
            # counts the backward passes itself (backward_passes_per_step).
            skip_sync = self.ddp is not None and i < micro - 1
            b = args.batch_size
            xs, ys = (x, y) if micro == 1 else (x[i * b:(i + 1) * b], y[i * b:(i + 1) * b])
            with (self.ddp.no_sync() if skip_sync else contextlib.nullcontext()), self.autocast():
                loss = F.cross_entropy(self.net(xs).float(), ys)
            loss = loss / micro if micro > 1 else loss   # the step's loss: the mean over its micro-batches
            loss.backward()
            self.loss_sum.add_(loss.detach())
            if self.evaluating:
                self.interval.add_loss(loss)
        if args.noise_scale:
            self.interval.add_gradient_norms(self.model)   # the all-reduced gradient, before the optimizer uses it
        self.opt.step()

    def eager_step(self, step: int):
        x, y = self.batch_at(step)
        self.opt.zero_grad()   # set_to_none (the default): backward writes fresh gradients
        if self.lr_warmup:
            rate = convergence.lr_at(step, self.args.lr, self.lr, self.lr_warmup)
            for group in self.opt.param_groups:
                group["lr"] = rate
        self.forward_backward_step(x, y)
        self.interval.steps += 1

    def run_step(self, step: int):
        if self.graph is not None:
            self.graph.replay(*self.batch_at(step))
            self.interval.steps += 1
        else:
            self.eager_step(step)

    def log_line(self, step_done: int, force: bool = False):
        if self.rank == 0 and (force or self.progress.due(step_done)):
            self.progress.line(step_done, self.loss_sum.item())   # .item() waits for the GPU (rank 0 only)
            self.loss_sum.zero_()

    def capture(self) -> int:
        """The eager steps the capture needs, then the step captured as a CUDA graph (or, when the
        capture fails, eager steps from here on, and a note); returns the steps done."""
        step = self.graph.warm_up(self.eager_step)   # the first eager steps, on the capture's side stream
        self.log_line(step, force=True)
        self.opt.zero_grad()   # set to None: gradients are then allocated inside the graph's memory pool
        failed = self.graph.capture(self.forward_backward_step, (self.batch_at.step_batch, 1, 28, 28), self.device,
                                    speed_options_torch.memory_format(self.args), self.say)
        if failed is None:
            self.graph_reason += f", captured after {self.eager_needed} eager steps"
        else:
            self.graph_reason = f"off: {failed}"
            self.notes.append("CUDA-graph capture failed, ran eagerly: " + self.graph_reason)
            self.say("note: " + self.notes[-1])
            self.graph = None
        self.loss_sum.zero_()
        self.progress.restart(step)
        return step

    def evaluate_now(self, step_done: int) -> float:
        """Scores the test set at this step (--eval-every: the held-out test set, all ranks
        together); returns the seconds it took (all ranks)."""
        self.workers.sync()
        t = time.perf_counter()
        correct, loss_total = models_torch.evaluate(self.model, self.Xt, self.Yt, 1000, self.autocast)
        mine = {"correct": correct, "test_loss": loss_total, "n": self.Yt.shape[0], **self.interval.take()}
        entry = evaluations.combine(self.workers.allgather(mine), step=step_done,
                                    steps_per_epoch=self.plan.steps_per_epoch, world=self.world,
                                    train_s=t - self.clock["start"] - self.clock["eval_s"],
                                    wall_s=self.phases.since_start(), lr=self.opt.param_groups[0]["lr"],
                                    noise_scale=self.args.noise_scale)
        self.history.append(entry)
        self.say(evaluations.eval_line(entry), flush=True)
        took = time.perf_counter() - t
        self.clock["eval_s"] += took
        return took

    def steps(self) -> tuple:
        """The warm-up, then the timed steps between synchronisations (CUDA events on a GPU, read
        after the last step): (the timed seconds, the step times in ms)."""
        total, warmup, workers = self.plan.total, self.plan.warmup, self.workers
        step = self.capture() if self.graph is not None else 0
        eval_at = evaluations.evaluation_steps(total, self.plan.steps_per_epoch, self.args.eval_every,
                                               self.args.eval_steps)
        workers.sync()
        self.clock["start"] = time.perf_counter()
        while step < warmup:
            self.run_step(step)
            step += 1
            self.log_line(step)
            if step in eval_at:
                self.evaluate_now(step)
        timer = throughput.StepClock(warmup, sync=workers.sync, timed_steps=self.plan.timed,
                                     device_event=(lambda: torch.cuda.Event(enable_timing=True)) if self.use_cuda else None)
        workers.sync()
        self.phases.done("warm-up" + (" and capture" if self.graph is not None else ""))
        timer.start(synced=True)
        while step < total:
            self.run_step(step)
            timer.end_step(step)
            step += 1
            self.log_line(step)
            if step in eval_at and step < total:
                timer.exclude(self.evaluate_now(step))   # not training: left out of the timed interval
        timer.finish()
        self.phases.done("timed loop")
        return timer.elapsed_s, timer.step_times_ms

    def write_result(self, speed: dict, step_ms, checksum: str, gathered: list) -> None:
        """Rank 0: the test accuracy, the provenance and the result, printed and written to --json."""
        args, model, Yt = self.args, self.model, self.Yt
        if self.evaluating:
            accuracy = self.history[-1]["test_accuracy"]   # the whole test set, scored by all ranks just now
        else:
            if not self.use_cuda:
                speed_options_torch.for_cpu_evaluation(model)   # the others wait at the barrier
            accuracy = models_torch.evaluate(model, self.Xt, Yt, 1000, self.autocast)[0] / Yt.shape[0]
        self.phases.done("test evaluation")
        from ddlab.system.provenance import run_provenance
        provenance = run_provenance(train_common.run_command())
        self.phases.done("result and provenance")
        result = train_common.build_result(
            args, framework="torch", params=models_torch.count_parameters(model),
            gradient_bytes=models_torch.gradient_bytes(model), backend=self.workers.backend,
            world=self.world, plan=self.plan, speed=speed, step_times_ms=step_ms, accuracy=accuracy,
            test_samples=args.test_samples if self.evaluating else Yt.shape[0], final_loss=self.progress.last_loss,
            device_fields=speed_options_torch.device_fields(args, self.device, self.graph is not None, self.graph_reason),
            lr=self.lr, on_gpu=self.use_cuda, checksum=checksum, start_checksum=self.start_checksum, gathered=gathered,
            framework_env_prefixes=("TORCH_NCCL_", "HOROVOD_", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS"),
            versions={"torch": torch.__version__,
                      "nccl_version": software.torch_facts([])["nccl"] if self.use_cuda else None},
            notes=self.notes, phase_s=self.phases.to_dict(), wall_s=self.phases.since_start(), provenance=provenance,
            learning={"train_samples": self.n_train, "lr_warmup_epochs": args.lr_warmup_epochs,
                      "lr_warmup_steps": self.lr_warmup, "eval_every": args.eval_every,
                      "noise_scale": args.noise_scale, "evaluations": self.history},
            tuning=tuning.config(args))
        print(train_common.summary_line(result), flush=True)
        if args.json:
            train_common.write_json(args.json, result)


def train(args, workers: Workers, device: torch.device, use_graph: bool, graph_reason: str,
          phases: launch.PhaseClock) -> None:
    """Everything between the launcher's init and its shutdown: data, model, the timed
    steps, the result (printed, and written by rank 0 to --json)."""
    run = Run(args, workers, device, use_graph, graph_reason, phases)
    run.say(banner(args, workers, run.device, run.model, run.lr, run.lr_warmup, run.plan, graph_reason), flush=True)
    for note in run.notes:
        run.say("note: " + note)
    elapsed, step_ms = run.steps()
    if run.evaluating:
        run.notes.append(evaluations.left_out_note(run.clock["eval_s"]))
    speed = throughput.summarize(run.plan.timed, args.batch_size * args.accumulate, workers.size, elapsed,
                                 step_ms)   # images really processed
    # ---- agreement across ranks, test accuracy, result
    checksum = models_torch.weights_checksum(run.model)
    gathered = workers.allgather({"rank": workers.rank, "checksum": checksum, "elapsed_s": elapsed,
                                  "step_time_ms_median": speed["step_time_ms"]["median"]})
    phases.done("rank agreement check")
    if run.evaluating:
        run.evaluate_now(run.plan.total)   # all ranks score their slices; rank 0 reports it as the test accuracy
    if workers.rank == 0:
        run.write_result(speed, step_ms, checksum, gathered)
    workers.barrier()   # rank 0 evaluates while the others wait, then all leave together
    if run.graph is not None:
        run.graph.release()   # before the process group is destroyed (PyTorch issue 115388)


if __name__ == "__main__":
    sys.exit(main())
