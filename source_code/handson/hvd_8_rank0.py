"""Fashion-MNIST with Horovod (PyTorch), step 8: print and save on rank 0 only.

    horovodrun -np 2 -H localhost:2 python hvd_8_rank0.py --epochs 2 --train-samples 6000
"""
import argparse
import time

import horovod.torch as hvd
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from ddlab.base import worker_report
from ddlab.training import data, models_torch

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model", default="mlp-small", choices=models_torch.MODELS)
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--train-samples", type=int, default=60000, help="train on the first N images")
parser.add_argument("--test-samples", type=int, default=10000, help="test on the first N images")
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--save", default="", help="write the trained weights to this file")
args = parser.parse_args()

# horovodrun starts the processes; hvd.init() connects them (NCCL between GPUs, Gloo or MPI
# between CPU processes) and tells each its rank and the number of processes.
hvd.init()
rank, world_size = hvd.rank(), hvd.size()
torch.manual_seed(args.seed)
# hvd.local_rank() numbers the processes on this machine: process i takes GPU i.
if torch.cuda.is_available():
    device = torch.device("cuda", hvd.local_rank())
    torch.cuda.set_device(device)
else:
    device = torch.device("cpu")


def tensors(images, labels, n):
    x = torch.tensor(images[:n], dtype=torch.float32).unsqueeze(1) / 255.0
    return TensorDataset(x, torch.tensor(labels[:n], dtype=torch.long))


def mean_over_ranks(value, name):
    return hvd.allreduce(torch.tensor([value], dtype=torch.float64), name=name, op=hvd.Average).item()


x_train, y_train, x_test, y_test = data.load_fashion_mnist()
train_set = tensors(x_train, y_train, args.train_samples)
test_set = tensors(x_test, y_test, args.test_samples)
# Every epoch the sampler shuffles all indices the same way on every rank (same seed) and
# gives rank r every world_size-th one: disjoint shards of equal size.
sampler = DistributedSampler(train_set, num_replicas=world_size, rank=rank, shuffle=True, seed=args.seed)
train_loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)

model = models_torch.build(args.model).to(device)
# One step now averages world_size batches: a world_size times larger batch takes a
# world_size times larger step (the linear scaling rule; --lr is the one-process rate).
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * world_size, momentum=0.9)
# Averages the gradients over all ranks (an all-reduce per tensor, started as soon as its
# gradient is ready in the backward pass) before each optimizer step.
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
# Averaged gradients keep equal models equal; these make them equal at the start: rank 0's
# weights and optimizer state (e.g. from a checkpoint only it loaded) go to every rank.
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)

start, seen = time.perf_counter(), 0
for epoch in range(args.epochs):
    sampler.set_epoch(epoch)  # a new shuffle each epoch (without it every epoch repeats the first)
    total, batches = 0.0, 0
    for x, y in train_loader:
        x, y = x.to(device), y.to(device)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total, batches, seen = total + loss.item(), batches + 1, seen + len(y)
    epoch_loss = mean_over_ranks(total / batches, "loss")  # every rank must take part in the all-reduce
    if rank == 0:
        print(f"epoch {epoch}: training loss {epoch_loss:.4f}")
elapsed = time.perf_counter() - start

model.eval()
x, y = test_set.tensors
x, y = x[rank::world_size], y[rank::world_size]  # each rank tests its own share
with torch.no_grad():
    correct = (model(x.to(device)).argmax(1) == y.to(device)).sum().item()
accuracy = mean_over_ranks(correct, "correct") / mean_over_ranks(len(y), "tested")
if rank == 0:
    print(f"test accuracy {accuracy:.4f}, {seen * world_size / elapsed:.0f} images/s on {world_size} processes")
if rank == 0 and args.save:  # the weights are the same on every rank: save them once
    torch.save(model.state_dict(), args.save)

# For the notebook's table, one line per process: its rank, the images it trained on, a
# checksum of its final weights (equal on all ranks when they hold the same model), test
# accuracy and images/s.
checksum = sum(p.double().sum().item() for p in model.parameters())
worker_report.emit("result", rank=rank, samples=seen, checksum=checksum,
                   test_acc=accuracy, img_s=seen / elapsed)
