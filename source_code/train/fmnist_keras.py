#!/usr/bin/env python3
"""Fashion-MNIST, data-parallel, in tf.keras with Horovod's Keras API (or one process).

    python fmnist_keras.py --launcher none
    horovodrun -np 2 -H localhost:2 --gloo python fmnist_keras.py --launcher horovod
    ddlab train --framework keras --launcher horovod --workers 2     # the same, via ddlab.launch

tf.keras means the ``tf-keras`` package, chosen by ``TF_USE_LEGACY_KERAS=1`` *before*
TensorFlow is imported (below). With Keras 3, Horovod's DistributedOptimizer silently stops
averaging gradients, so this script refuses to run on Keras 3.

The Horovod recipe, as in fmnist_torch.py:
  1. ``hvd.init()``; each worker sees only the GPU of its local rank;
  2. the same model everywhere, rank 0's weights broadcast at the start
     (``BroadcastGlobalVariablesCallback``);
  3. each worker trains on its own shard (``ddlab.data.shard_indices``, reshuffled every
     epoch), with its own seed for dropout;
  4. ``hvd.DistributedOptimizer`` averages the gradients every step; ``MetricAverageCallback``
     averages the reported metrics;
  5. only rank 0 prints and writes the result.

Throughput is honest (``ddlab.throughput``): a callback starts the clock at the first step
after the warm-up and stops it after the last, both times after the device has finished its
work (``tf.test.experimental.sync_devices``) and the workers have met (a Horovod all-reduce
of one number); per-step times are host wall-clock times, which on a GPU include the
waiting Keras does every step to hand the callbacks their logs. Throughput = steps x batch x
workers / elapsed. The result JSON has the same fields as fmnist_torch.py's, ``phase_s``
(seconds per phase of rank 0's run, printed as ``phase ...`` lines) included; on SIGTERM
(a launch timeout) every worker prints its Python tracebacks before it dies.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")   # before TensorFlow is imported, anywhere
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's start-up chatter hides the lines that matter
_SOURCE = Path(__file__).resolve().parents[1]
if str(_SOURCE) not in sys.path:
    sys.path.insert(0, str(_SOURCE))

from ddlab import launch  # noqa: E402

if __name__ == "__main__":
    # Before the heavy imports: a worker stuck even there prints where when it is killed.
    launch.install_hang_traceback()

import numpy as np  # noqa: E402

from ddlab import data as ddata  # noqa: E402
from ddlab import models_keras, throughput  # noqa: E402
from ddlab.models_torch import MODELS  # noqa: E402  (names only; torch itself is not imported)

FMNIST_MEAN, FMNIST_STD = 0.2860, 0.3530


class Failure(SystemExit):
    def __init__(self, msg: str):
        super().__init__(f"fmnist_keras.py: error: {msg}")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--launcher", choices=["none", "horovod"], default="none",
                   help="none: one process; horovod: run under horovodrun")
    p.add_argument("--model", choices=MODELS, default="cnn")
    p.add_argument("--batch-size", type=int, default=128, help="images per worker per step")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--steps", type=int, help="total optimizer steps, warm-up included")
    g.add_argument("--epochs", type=float, help="total steps = epochs x steps per epoch of a shard (default 1)")
    p.add_argument("--warmup-steps", type=int, default=None,
                   help="untimed steps first (default: a fifth of the steps, at most 50)")
    p.add_argument("--lr", type=float, default=1e-3, help="learning rate for one worker")
    p.add_argument("--scale-lr", action="store_true", help="multiply the learning rate by the number of workers")
    p.add_argument("--optimizer", choices=["adam", "sgd"], default="adam", help="sgd: momentum 0.9")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                   help="cpu hides the GPUs from TensorFlow")
    p.add_argument("--cpu-threads", type=int, default=1,
                   help="threads per worker on CPU: 1 makes each worker play one device")
    p.add_argument("--data-dir", help="folder with the four Fashion-MNIST IDX files")
    p.add_argument("--test-samples", type=int, default=10000, help="test images to evaluate at the end")
    p.add_argument("--log-interval", type=int, default=None, help="steps between printed lines")
    p.add_argument("--json", metavar="PATH", help="write the result here (rank 0)")
    a = p.parse_args(argv)
    if a.batch_size < 1:
        raise Failure(f"--batch-size must be at least 1, got {a.batch_size}")
    if a.steps is not None and a.steps < 2:
        raise Failure(f"--steps must be at least 2 (warm-up plus timed steps), got {a.steps}")
    if a.epochs is not None and not a.epochs > 0:
        raise Failure(f"--epochs must be positive, got {a.epochs}")
    if a.warmup_steps is not None and a.warmup_steps < 0:
        raise Failure("--warmup-steps cannot be negative")
    if not a.lr > 0:
        raise Failure(f"--lr must be positive, got {a.lr}")
    if not 1 <= a.test_samples <= 10000:
        raise Failure("--test-samples must be within 1..10000")
    if a.cpu_threads < 1:
        raise Failure("--cpu-threads must be at least 1")
    return a


def rank_seed(seed: int, rank: int) -> int:
    return int(np.random.SeedSequence([seed, rank]).generate_state(1)[0] % (2 ** 31))


def weights_checksum(model) -> dict:
    ws = [np.asarray(w, dtype=np.float64) for w in model.get_weights()]
    return {"sum": float(sum(w.sum() for w in ws)), "sumsq": float(sum((w * w).sum() for w in ws))}


def normalise(x_uint8: np.ndarray) -> np.ndarray:
    return ((x_uint8.astype(np.float32) / 255.0 - FMNIST_MEAN) / FMNIST_STD)[..., None]


def main(argv=None) -> int:
    phases = launch.PhaseClock()       # counts from the start of this process
    args = parse_args(argv)
    env = os.environ
    if args.launcher == "none" and (int(env.get("HOROVOD_SIZE", "1")) > 1 or int(env.get("OMPI_COMM_WORLD_SIZE", "1")) > 1):
        raise Failure("--launcher none runs one process, but this is one of several workers: use --launcher horovod")
    if env.get("TF_USE_LEGACY_KERAS") != "1":
        raise Failure(f"TF_USE_LEGACY_KERAS={env.get('TF_USE_LEGACY_KERAS')!r}: Horovod's Keras API needs "
                      "tf-keras, selected by TF_USE_LEGACY_KERAS=1")
    import tensorflow as tf
    keras = models_keras.keras()   # raises if this is Keras 3
    phases.done("imports")          # python, numpy, TensorFlow, tf-keras

    hvd = hvd_tf = None
    rank, world, local_rank = 0, 1, 0
    if args.launcher == "horovod":
        try:
            import horovod.tensorflow as hvd_tf
            import horovod.tensorflow.keras as hvd
        except ImportError as exc:
            raise Failure(f"--launcher horovod needs Horovod for TensorFlow ({exc}); build it with "
                          "`make horovod` (tools/build_horovod.sh)") from None
        hvd.init()
        rank, world, local_rank = hvd.rank(), hvd.size(), hvd.local_rank()

    gpus = tf.config.list_physical_devices("GPU")
    if args.device == "cuda" and not gpus:
        raise Failure("--device cuda, but TensorFlow sees no GPU (a CPU-only TensorFlow, or no visible GPU)")
    if args.device == "cpu" or not gpus:
        tf.config.set_visible_devices([], "GPU")
        use_gpu = False
        # Must be set before TensorFlow starts its runtime.
        tf.config.threading.set_intra_op_parallelism_threads(args.cpu_threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    else:
        if local_rank >= len(gpus):
            raise Failure(f"local rank {local_rank} has no GPU: only {len(gpus)} visible")
        tf.config.set_visible_devices(gpus[local_rank], "GPU")
        tf.config.experimental.set_memory_growth(gpus[local_rank], True)
        use_gpu = True
    if args.precision == "bf16":
        keras.mixed_precision.set_global_policy("mixed_bfloat16")
    say = print if rank == 0 else (lambda *a, **k: None)
    phases.report_to(say)
    phases.done("device and distributed init")

    # ---- data: this rank's shard, one permutation per epoch (identical on all ranks)
    # One rank per machine verifies the files' SHA-256 (its other ranks read the same files).
    x_train, y_train, x_test, y_test = ddata.load_fashion_mnist(args.data_dir, verify=local_rank == 0)
    n = x_train.shape[0]
    per_rank = n // world
    steps_per_epoch = per_rank // args.batch_size
    if steps_per_epoch < 1:
        raise Failure(f"a shard of {per_rank} images holds no full batch of {args.batch_size}")
    total = args.steps if args.steps is not None else max(2, int(round((args.epochs or 1) * steps_per_epoch)))
    warmup = args.warmup_steps if args.warmup_steps is not None else max(1, min(50, total // 5))
    if total <= warmup:
        raise Failure(f"{total} steps leave no timed step after {warmup} warm-up steps")
    epochs_needed = math.ceil(total / steps_per_epoch)
    used = steps_per_epoch * args.batch_size
    order = np.concatenate([ddata.shard_indices(n, rank, world, args.seed, epoch=e)[:used]
                            for e in range(epochs_needed)])[:total * args.batch_size]
    # uint8 in the pipeline (4x smaller), normalised per batch by the map below.
    ds = (tf.data.Dataset.from_tensor_slices((x_train[order], y_train[order].astype(np.int32)))
          .batch(args.batch_size, drop_remainder=True)
          .map(lambda x, y: ((tf.cast(x, tf.float32)[..., None] / 255.0 - FMNIST_MEAN) / FMNIST_STD, y),
               num_parallel_calls=tf.data.AUTOTUNE)
          .prefetch(tf.data.AUTOTUNE))
    del x_train
    phases.done("data pipeline")

    # ---- model: same initial weights (same seed, then rank 0's broadcast), own dropout seed
    keras.utils.set_random_seed(args.seed)
    model = models_keras.build(args.model)
    n_params = models_keras.count_parameters(model)
    grad_bytes = 4 * n_params   # float32 variables, float32 gradients (also under mixed_bfloat16)
    tf.random.set_seed(rank_seed(args.seed, rank))
    lr = args.lr * (world if args.scale_lr else 1)
    opt = (keras.optimizers.Adam(learning_rate=lr) if args.optimizer == "adam"
           else keras.optimizers.SGD(learning_rate=lr, momentum=0.9))
    callbacks = []
    if hvd is not None:
        opt = hvd.DistributedOptimizer(opt)
        callbacks += [hvd.callbacks.BroadcastGlobalVariablesCallback(0), hvd.callbacks.MetricAverageCallback()]
    model.compile(optimizer=opt, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    start_checksum = weights_checksum(model)
    phases.done("model build")   # rank 0's weights are broadcast at the first step (warm-up)

    def sync_all():
        if use_gpu and hasattr(tf.test.experimental, "sync_devices"):
            tf.test.experimental.sync_devices()
        if hvd_tf is not None:
            hvd_tf.allreduce(tf.constant(0.0), name="ddlab_barrier").numpy()   # a barrier: waits for every worker

    global_batch = args.batch_size * world
    log_every = args.log_interval or max(1, total // 10)

    class StepLog(keras.callbacks.Callback):
        """Times the steps after the warm-up and prints one line per interval (rank 0)."""

        def __init__(self):
            super().__init__()
            self.clock = throughput.StepClock(warmup, sync=sync_all)
            self.t_log, self.step_log, self.mean_log = time.perf_counter(), 0, 0.0
            self.last_loss = float("nan")

        def on_train_batch_begin(self, batch, logs=None):
            self.clock.begin_step(batch)
            if batch == warmup:
                self.t_log = time.perf_counter()
                phases.done("warm-up")   # tf.function tracing, the broadcast, the first steps

        def on_train_batch_end(self, batch, logs=None):
            self.clock.end_step(batch)
            done = batch + 1
            if done % log_every and done != total:
                return
            # Keras reports the running mean of the epoch's loss; recover the interval's mean.
            mean = float(logs["loss"])
            loss = (mean * done - self.mean_log * self.step_log) / (done - self.step_log)
            t = time.perf_counter()
            dt = t - self.t_log
            if rank == 0:
                print(f"step {done:>6}/{total} | loss {loss:.4f} | {1e3 * dt / (done - self.step_log):8.2f} ms/step | "
                      f"{(done - self.step_log) * global_batch / dt:>11,.0f} img/s (all workers, "
                      f"{'warm-up' if done <= warmup else 'timed'})", flush=True)
            self.t_log, self.step_log, self.mean_log, self.last_loss = t, done, mean, loss

        def on_train_end(self, logs=None):
            self.clock.finish()
            phases.done("timed loop")

    steplog = StepLog()
    say(f"fmnist_keras | model {args.model} ({n_params:,} parameters, {grad_bytes / 1e6:.1f} MB of gradients per "
        f"step) | launcher {args.launcher}, {world} worker(s) x batch {args.batch_size} = {global_batch} | "
        f"{'gpu' if use_gpu else 'cpu'} | {args.precision} | {args.optimizer} lr {lr:g} | {total} steps, "
        f"{warmup} warm-up, shard {per_rank} images = {steps_per_epoch} steps/epoch")
    # One Keras "epoch" of all our steps: the data set already holds the per-epoch reshuffles.
    model.fit(ds, epochs=1, steps_per_epoch=total, verbose=0, callbacks=callbacks + [steplog])
    clock = steplog.clock
    if clock.timed_steps != total - warmup:
        raise RuntimeError(f"timed {clock.timed_steps} steps, expected {total - warmup}")
    speed = throughput.summarize(clock.timed_steps, args.batch_size, world, clock.elapsed_s, clock.step_times_ms)

    checksum = weights_checksum(model)
    mine = {"rank": rank, "checksum": checksum, "elapsed_s": clock.elapsed_s}
    gathered = list(hvd_tf.allgather_object(mine)) if hvd_tf is not None else [mine]
    phases.done("rank agreement check")
    if rank == 0:
        xt = normalise(x_test[:args.test_samples])
        _, accuracy = model.evaluate(xt, y_test[:args.test_samples].astype(np.int32), batch_size=1000, verbose=0)
        phases.done("test evaluation")
        sums = [g["checksum"]["sum"] for g in gathered]
        agree = all(g["checksum"] == gathered[0]["checksum"] for g in gathered)
        from ddlab.experiments import run_provenance
        command = os.environ.get("DDLAB_COMMAND") or shlex.join([sys.executable, *sys.argv])
        provenance = run_provenance(command, torch_facts=False)
        phases.done("result and provenance")
        sm = speed["step_time_ms"]
        result = {
            "model": args.model, "params": n_params, "gradient_bytes_per_step": grad_bytes,
            "framework": "keras", "launcher": args.launcher,
            "backend": ("horovod-" + ("nccl" if use_gpu and hvd_tf.nccl_built() else "gloo")) if hvd_tf else "none",
            "workers": world, "batch_per_worker": args.batch_size, "global_batch": global_batch,
            "steps": total, "warmup_steps": warmup, "timed_steps": speed["timed_steps"],
            "epochs": round(total / steps_per_epoch, 4), "steps_per_epoch": steps_per_epoch,
            "images_per_s": speed["images_per_s"], "images_per_s_per_worker": speed["images_per_s_per_worker"],
            "images_timed": speed["images_timed"], "elapsed_s": clock.elapsed_s,
            "step_time_ms": sm, "step_times_ms": [round(v, 5) for v in clock.step_times_ms],
            "test_accuracy": float(accuracy), "test_samples": int(min(args.test_samples, len(y_test))),
            "final_loss": steplog.last_loss,
            "final_loss_note": "mean training loss of rank 0 over the last logging interval",
            "precision": args.precision, "device": "cuda" if use_gpu else "cpu",
            "device_name": None, "cuda_graph": False, "cuda_graph_reason": "not applicable (TensorFlow)",
            "compile": "tf.function", "channels_last": True,
            "optimizer": args.optimizer, "lr": lr, "lr_base": args.lr, "scale_lr": args.scale_lr,
            "seed": args.seed, "cpu_threads": None if use_gpu else args.cpu_threads,
            "checksum": checksum, "start_checksum": start_checksum,
            "rank_checksums": [g["checksum"] for g in gathered],
            "ranks_agree": agree, "rank_checksum_spread": max(sums) - min(sums),
            "rank_elapsed_s": [g["elapsed_s"] for g in gathered],
            "nccl_env": {k: v for k, v in sorted(env.items()) if k.startswith("NCCL_")},
            "framework_env": {k: v for k, v in sorted(env.items())
                              if k.startswith(("HOROVOD_", "TF_", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS"))},
            "tensorflow": tf.__version__, "notes": [],
            # seconds per phase of rank 0, from its process start to here (see the docstring)
            "phase_s": phases.to_dict(),
            "wall_s": phases.since_start(),
            "provenance": provenance,
        }
        print(f"timed {speed['timed_steps']} steps after {warmup} warm-up: {speed['images_per_s']:,.0f} img/s "
              f"({world} worker(s)); step median {sm['median']:.3f} ms (p10 {sm['p10']:.3f}, p90 {sm['p90']:.3f}) "
              f"| test accuracy {accuracy:.4f} on {result['test_samples']:,} images "
              f"| ranks agree on weights: {'yes' if agree else 'NO'} | {result['wall_s']:.1f} s since process start",
              flush=True)
        if args.json:
            tmp = args.json + ".part"
            with open(tmp, "w") as f:
                json.dump(result, f, indent=1)
                f.write("\n")
            os.replace(tmp, args.json)
    if hvd_tf is not None:
        sync_all()   # the others wait while rank 0 evaluates, then all leave together
    phases.done("shutdown")   # printed only: the result was written above
    return 0


if __name__ == "__main__":
    sys.exit(main())
