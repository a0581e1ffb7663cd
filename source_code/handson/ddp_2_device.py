"""Fashion-MNIST with DDP, step 2: one GPU per process.

    torchrun --standalone --nproc-per-node=2 ddp_2_device.py --epochs 2 --train-samples 6000
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.distributed.nn  # before init_process_group: see the end of this file
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

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

# torchrun starts the processes and tells each its rank and the world size (environment
# variables); this call connects them: NCCL between GPUs, Gloo between CPU processes.
dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
rank, world_size = dist.get_rank(), dist.get_world_size()
torch.manual_seed(args.seed)
# LOCAL_RANK (from torchrun) numbers the processes on this machine: process i takes GPU i.
local_rank = int(os.environ["LOCAL_RANK"])
if torch.cuda.is_available():
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
else:
    device = torch.device("cpu")


def tensors(images, labels, n):
    x = torch.tensor(images[:n], dtype=torch.float32).unsqueeze(1) / 255.0
    return TensorDataset(x, torch.tensor(labels[:n], dtype=torch.long))


x_train, y_train, x_test, y_test = data.load_fashion_mnist()
train_set = tensors(x_train, y_train, args.train_samples)
test_set = tensors(x_test, y_test, args.test_samples)
train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)

model = models_torch.build(args.model).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

start, seen = time.perf_counter(), 0
for epoch in range(args.epochs):
    total, batches = 0.0, 0
    for x, y in train_loader:
        x, y = x.to(device), y.to(device)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total, batches, seen = total + loss.item(), batches + 1, seen + len(y)
    print(f"epoch {epoch}: training loss {total / batches:.4f}")
elapsed = time.perf_counter() - start

model.eval()
x, y = test_set.tensors
with torch.no_grad():
    correct = (model(x.to(device)).argmax(1) == y.to(device)).sum().item()
accuracy = correct / len(y)
print(f"test accuracy {accuracy:.4f}, {seen / elapsed:.0f} images/s")
if args.save:
    torch.save(model.state_dict(), args.save)

# For the notebook's table, one line per process: its rank, the images it trained on, a
# checksum of its final weights (equal on all ranks when they hold the same model), test
# accuracy and images/s.
checksum = sum(p.double().sum().item() for p in model.parameters())
worker_report.emit("result", rank=rank, samples=seen, checksum=checksum,
                   test_acc=accuracy, img_s=seen / elapsed)
dist.barrier()  # wait until every rank has finished before tearing the group down
# Close the group. First drop what holds it (a DDP model and its optimizer), so that
# destroy_process_group really closes it and stops Gloo's threads now: a group still open
# when Python exits can abort a process whose work is done. For the same reason
# torch.distributed.nn is imported before init_process_group (imported later, by DDP,
# it keeps a reference to the group).
del model, optimizer
dist.destroy_process_group()
