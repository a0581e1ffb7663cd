"""Fashion-MNIST with Horovod (tf.keras), step 6: scale the learning rate, with a warm-up.

    horovodrun -np 2 -H localhost:2 python keras_hvd_6_lr.py --epochs 2 --train-samples 6000
"""
import argparse
import time

import numpy as np

from ddlab.base import worker_report
from ddlab.training import data, models_keras

keras = models_keras.keras()  # tf.keras from tf-keras: sets TF_USE_LEGACY_KERAS=1, then imports TensorFlow
import tensorflow as tf  # noqa: E402  (after the line above, which chooses tf.keras)
import horovod.tensorflow.keras as hvd  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model", default="mlp-small", choices=models_keras.MODELS)
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--train-samples", type=int, default=60000, help="train on the first N images")
parser.add_argument("--test-samples", type=int, default=10000, help="test on the first N images")
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--save", default="", help="write the trained weights to this file (.weights.h5)")
args = parser.parse_args()

# horovodrun starts the processes; hvd.init() connects them (NCCL between GPUs, Gloo or MPI
# between CPU processes) and tells each its rank and the number of processes.
hvd.init()
rank, world_size = hvd.rank(), hvd.size()
# hvd.local_rank() numbers the processes on this machine: process i sees only GPU i.
gpus = tf.config.list_physical_devices("GPU")
if gpus:
    tf.config.set_visible_devices(gpus[hvd.local_rank()], "GPU")
keras.utils.set_random_seed(args.seed)

x_train, y_train, x_test, y_test = data.load_fashion_mnist()
x_train = x_train[:args.train_samples, :, :, None].astype("float32") / 255.0
y_train = y_train[:args.train_samples].astype("int64")
x_test = x_test[:args.test_samples, :, :, None].astype("float32") / 255.0
y_test = y_test[:args.test_samples].astype("int64")
# Rank r keeps every world_size-th image: disjoint shards of equal size. shuffle() below
# reshuffles the shard every epoch (what set_epoch does for a PyTorch sampler).
x_train, y_train = x_train[rank::world_size], y_train[rank::world_size]
train = tf.data.Dataset.from_tensor_slices((x_train, y_train))
train = train.shuffle(len(x_train), seed=args.seed).batch(args.batch_size)

model = models_keras.build(args.model)
# One step now averages world_size batches: a world_size times larger batch takes a
# world_size times larger step (the linear scaling rule; --lr is the one-process rate).
optimizer = keras.optimizers.SGD(learning_rate=args.lr * world_size, momentum=0.9)
# Averages the gradients over all ranks (all-reduce) before each optimizer step.
optimizer = hvd.DistributedOptimizer(optimizer)
model.compile(optimizer=optimizer, metrics=["accuracy"],
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
# Averaged gradients keep equal models equal; this makes them equal at the start: rank 0's
# weights and optimizer state go to every rank before the first step.
callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0),
             # start near the one-process rate and reach the scaled one after the first epoch
             # (momentum_correction needs a momentum variable, which tf-keras 2.16+ optimizers lack)
             hvd.callbacks.LearningRateWarmupCallback(initial_lr=args.lr * world_size, warmup_epochs=1,
                                                      momentum_correction=False)]

start = time.perf_counter()
model.fit(train, epochs=args.epochs, callbacks=callbacks, verbose=2)
elapsed = time.perf_counter() - start
seen = len(x_train) * args.epochs

correct = int(np.sum(model.predict(x_test, batch_size=1000, verbose=0).argmax(1) == y_test))
accuracy = correct / len(y_test)
print(f"test accuracy {accuracy:.4f}, {seen / elapsed:.0f} images/s")
if args.save:
    model.save_weights(args.save)

# For the notebook's table, one line per process: its rank, the images it trained on, a
# checksum of its final weights (equal on all ranks when they hold the same model), test
# accuracy and images/s.
checksum = sum(float(np.sum(w, dtype=np.float64)) for w in model.get_weights())
worker_report.emit("result", rank=rank, samples=seen, checksum=checksum,
                   test_acc=accuracy, img_s=seen / elapsed)
