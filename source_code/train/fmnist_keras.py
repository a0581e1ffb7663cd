#!/usr/bin/env python3
"""Fashion-MNIST, data-parallel, in tf.keras with Horovod's Keras API (or one process).

    python fmnist_keras.py --launcher none
    horovodrun -np 2 -H localhost:2 --gloo python fmnist_keras.py --launcher horovod
    ddlab train --framework keras --launcher horovod --workers 2     # the same, via ddlab.measure.launch

tf.keras means the ``tf-keras`` package, chosen by ``TF_USE_LEGACY_KERAS=1`` *before*
TensorFlow is imported (below). With Keras 3, Horovod's DistributedOptimizer silently stops
averaging gradients, so this script refuses to run on Keras 3.

The Horovod recipe, as in fmnist_torch.py:
  1. ``hvd.init()``; each worker sees only the GPU of its local rank;
  2. the same model everywhere, rank 0's weights broadcast at the start
     (``BroadcastGlobalVariablesCallback``);
  3. each worker trains on its own shard (``ddlab.training.data.shard_indices``, reshuffled every
     epoch), with its own seed for dropout;
  4. ``hvd.DistributedOptimizer`` averages the gradients every step; ``MetricAverageCallback``
     averages the reported metrics;
  5. only rank 0 prints and writes the result.

Throughput is honest (``ddlab.training.throughput``): a callback starts the clock at the first step
after the warm-up and stops it after the last, both times after the device has finished its
work (``tf.test.experimental.sync_devices``) and the workers have met (a Horovod all-reduce
of one number); per-step times are host wall-clock times, which on a GPU include the
waiting Keras does every step to hand the callbacks their logs. Throughput = steps x batch x
workers / elapsed. The result JSON has the same fields as fmnist_torch.py's
(``ddlab.training.train_common.build_result`` lists them, with the flags both scripts share), ``phase_s``
(seconds per phase of rank 0's run, printed as ``phase ...`` lines) included; on SIGTERM
(a launch timeout) every worker prints its Python tracebacks before it dies.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")   # before TensorFlow is imported, anywhere
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's start-up chatter hides the lines that matter
_SOURCE = Path(__file__).resolve().parents[1]
if str(_SOURCE) not in sys.path:
    sys.path.insert(0, str(_SOURCE))

from ddlab.measure import launch  # noqa: E402

if __name__ == "__main__":
    # Before the heavy imports: a worker stuck even there prints where when it is killed.
    launch.install_hang_traceback()

import numpy as np  # noqa: E402

from ddlab.training import data as ddata  # noqa: E402
from ddlab.training import models_keras, throughput, train_common  # noqa: E402
from ddlab.training.models import MODELS  # noqa: E402  (names only: no framework is imported)
from ddlab.training.train_common import FMNIST_MEAN, FMNIST_STD  # noqa: E402


class Failure(train_common.Failure):
    """A clear one-line error for bad input or an impossible setting (exit status 2)."""
    script = "fmnist_keras.py"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    train_common.add_common_arguments(p, launchers=["none", "horovod"], models=MODELS,
                                      device_help="cpu hides the GPUs from TensorFlow")
    return train_common.validate_common(p.parse_args(argv), Failure)


def rank_seed(seed: int, rank: int) -> int:
    # Below 2**31, as this script's seeds have always been: another range would give the
    # Keras runs other dropout masks than before.
    return train_common.rank_seed(seed, rank, bits=31)


def weights_checksum(model) -> dict:
    ws = [np.asarray(w, dtype=np.float64) for w in model.get_weights()]
    return {"sum": float(sum(w.sum() for w in ws)), "sumsq": float(sum((w * w).sum() for w in ws))}


def normalise(x_uint8: np.ndarray) -> np.ndarray:
    return ((x_uint8.astype(np.float32) / 255.0 - FMNIST_MEAN) / FMNIST_STD)[..., None]


def check_environment(args) -> None:
    """One process or Horovod workers as the launcher says, and tf-keras selected (Horovod's Keras API needs it)."""
    env = os.environ
    if args.launcher == "none" and (int(env.get("HOROVOD_SIZE", "1")) > 1 or int(env.get("OMPI_COMM_WORLD_SIZE", "1")) > 1):
        raise Failure("--launcher none runs one process, but this is one of several workers: use --launcher horovod")
    if env.get("TF_USE_LEGACY_KERAS") != "1":
        raise Failure(f"TF_USE_LEGACY_KERAS={env.get('TF_USE_LEGACY_KERAS')!r}: Horovod's Keras API needs "
                      "tf-keras, selected by TF_USE_LEGACY_KERAS=1")


def join_workers(args, tf, keras) -> tuple:
    """Join the Horovod group (--launcher horovod) and take this rank's GPU, or the CPU:
    (hvd, hvd_tf or None, rank, world size, local rank, whether on a GPU)."""
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
    return hvd, hvd_tf, rank, world, local_rank, use_gpu


def input_pipeline(args, tf, x_train, y_train, plan, rank: int, world: int):
    """This rank's shard as a tf.data pipeline, one permutation per epoch (identical on all ranks)."""
    n = x_train.shape[0]
    used = plan.steps_per_epoch * args.batch_size
    order = np.concatenate([ddata.shard_indices(n, rank, world, args.seed, epoch=e)[:used]
                            for e in range(plan.epochs_needed)])[:plan.total * args.batch_size]
    # uint8 in the pipeline (4x smaller), normalised per batch by the map below.
    return (tf.data.Dataset.from_tensor_slices((x_train[order], y_train[order].astype(np.int32)))
            .batch(args.batch_size, drop_remainder=True)
            .map(lambda x, y: ((tf.cast(x, tf.float32)[..., None] / 255.0 - FMNIST_MEAN) / FMNIST_STD, y),
                 num_parallel_calls=tf.data.AUTOTUNE)
            .prefetch(tf.data.AUTOTUNE))


def build_model(args, tf, keras, hvd, rank: int, lr: float) -> tuple:
    """The same initial weights (same seed, then rank 0's broadcast at the first step), this
    rank's own dropout seed, the optimizer (Horovod's wrapped): (the compiled model, its callbacks)."""
    keras.utils.set_random_seed(args.seed)
    model = models_keras.build(args.model)
    tf.random.set_seed(rank_seed(args.seed, rank))
    opt = (keras.optimizers.Adam(learning_rate=lr) if args.optimizer == "adam"
           else keras.optimizers.SGD(learning_rate=lr, momentum=0.9))
    callbacks = []
    if hvd is not None:
        opt = hvd.DistributedOptimizer(opt)
        callbacks += [hvd.callbacks.BroadcastGlobalVariablesCallback(0), hvd.callbacks.MetricAverageCallback()]
    model.compile(optimizer=opt, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model, callbacks


def step_log(keras, plan, global_batch: int, log_every: int, rank: int, sync_all, phases: launch.PhaseClock):
    """A Keras callback that times the steps after the warm-up and prints one line per interval (rank 0)."""
    warmup, total = plan.warmup, plan.total

    class StepLog(keras.callbacks.Callback):
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
                print(train_common.step_line(done, total, loss, dt, done - self.step_log, global_batch, warmup),
                      flush=True)
            self.t_log, self.step_log, self.mean_log, self.last_loss = t, done, mean, loss

        def on_train_end(self, logs=None):
            self.clock.finish()
            phases.done("timed loop")
    return StepLog()


def main(argv=None) -> int:
    phases = launch.PhaseClock()       # counts from the start of this process
    args = parse_args(argv)
    check_environment(args)
    import tensorflow as tf
    keras = models_keras.keras()   # raises if this is Keras 3
    phases.done("imports")          # python, numpy, TensorFlow, tf-keras
    hvd, hvd_tf, rank, world, local_rank, use_gpu = join_workers(args, tf, keras)
    say = print if rank == 0 else (lambda *a, **k: None)
    phases.report_to(say)
    phases.done("device and distributed init")

    # One rank per machine verifies the files' SHA-256 (its other ranks read the same files).
    x_train, y_train, x_test, y_test = ddata.load_fashion_mnist(args.data_dir, verify=local_rank == 0)
    plan = train_common.plan_steps(args, x_train.shape[0], world, Failure)
    ds = input_pipeline(args, tf, x_train, y_train, plan, rank, world)
    del x_train
    phases.done("data pipeline")

    lr = train_common.learning_rate(args, world)
    model, callbacks = build_model(args, tf, keras, hvd, rank, lr)
    n_params = models_keras.count_parameters(model)
    grad_bytes = 4 * n_params   # float32 variables, float32 gradients (also under mixed_bfloat16)
    start_checksum = weights_checksum(model)
    phases.done("model build")   # rank 0's weights are broadcast at the first step (warm-up)

    def sync_all():
        if use_gpu and hasattr(tf.test.experimental, "sync_devices"):
            tf.test.experimental.sync_devices()
        if hvd_tf is not None:
            hvd_tf.allreduce(tf.constant(0.0), name="ddlab_barrier").numpy()   # a barrier: waits for every worker

    total, warmup, global_batch = plan.total, plan.warmup, args.batch_size * world
    steplog = step_log(keras, plan, global_batch, args.log_interval or max(1, total // 10), rank, sync_all, phases)
    say(f"fmnist_keras | model {args.model} ({n_params:,} parameters, {grad_bytes / 1e6:.1f} MB of gradients per "
        f"step) | launcher {args.launcher}, {world} worker(s) x batch {args.batch_size} = {global_batch} | "
        f"{'gpu' if use_gpu else 'cpu'} | {args.precision} | {args.optimizer} lr {lr:g} | {total} steps, "
        f"{warmup} warm-up, shard {plan.per_rank} images = {plan.steps_per_epoch} steps/epoch")
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
        from ddlab.system.provenance import run_provenance
        provenance = run_provenance(train_common.run_command(), torch_facts=False)
        phases.done("result and provenance")
        result = train_common.build_result(
            args, framework="keras", params=n_params, gradient_bytes=grad_bytes,
            backend=("horovod-" + ("nccl" if use_gpu and hvd_tf.nccl_built() else "gloo")) if hvd_tf else "none",
            world=world, plan=plan, speed=speed, step_times_ms=clock.step_times_ms, accuracy=accuracy,
            test_samples=min(args.test_samples, len(y_test)), final_loss=steplog.last_loss,
            device_fields={
                "device": "cuda" if use_gpu else "cpu",
                "device_name": None, "cuda_graph": False, "cuda_graph_reason": "not applicable (TensorFlow)",
                "compile": "tf.function", "channels_last": True},
            lr=lr, on_gpu=use_gpu, checksum=checksum, start_checksum=start_checksum, gathered=gathered,
            framework_env_prefixes=("HOROVOD_", "TF_", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS"),
            versions={"tensorflow": tf.__version__}, notes=plan.notes,
            phase_s=phases.to_dict(), wall_s=phases.since_start(), provenance=provenance)
        print(train_common.summary_line(result), flush=True)
        if args.json:
            train_common.write_json(args.json, result)
    if hvd_tf is not None:
        sync_all()   # the others wait while rank 0 evaluates, then all leave together
    phases.done("shutdown")   # printed only: the result was written above
    return 0


if __name__ == "__main__":
    sys.exit(main())
