"""Fashion-MNIST with DDP: the repaired exercise (one solution of broken_ddp.py).

    torchrun --standalone --nproc-per-node=2 solution_ddp.py --epochs 2 --train-samples 4000

The five fixes are marked "fix:". Other correct fixes exist; ddlab.course.repair.check judges
what a run does, not which lines it has.
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.distributed.nn  # before init_process_group: see the end of this file
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from ddlab.training import data, models_torch
from ddlab.course.repair import probe

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model", default="mlp-small", choices=models_torch.MODELS)
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--lr", type=float, default=0.05, help="the learning rate of one process")
parser.add_argument("--lr-scaling", default="linear", choices=("none", "linear", "sqrt"),
                    help="the rule this script states for N processes: the rate of one process times 1, N or sqrt(N)")
parser.add_argument("--lr-warmup-epochs", type=float, default=0.0,
                    help="reach that rate by a straight ramp from --lr over these epochs (0: none)")
parser.add_argument("--train-samples", type=int, default=60000, help="train on the first N images")
parser.add_argument("--test-samples", type=int, default=10000, help="test on the first N images")
parser.add_argument("--seed", type=int, default=0)
args = parser.parse_args()

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
rank, world_size = dist.get_rank(), dist.get_world_size()
local_rank = int(os.environ["LOCAL_RANK"])
device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
if device.type == "cuda":
    torch.cuda.set_device(device)
torch.manual_seed(args.seed + rank)  # a seed per rank, so that each rank's random draws differ


def tensors(images, labels, n):
    x = torch.tensor(images[:n], dtype=torch.float32).unsqueeze(1) / 255.0
    # The third tensor numbers the images, so that probe() can record which ones a step used.
    return TensorDataset(x, torch.tensor(labels[:n], dtype=torch.long), torch.arange(len(x)))


x_train, y_train, x_test, y_test = data.load_fashion_mnist()
train_set = tensors(x_train, y_train, args.train_samples)
test_set = tensors(x_test, y_test, args.test_samples)
# fix: disjoint shards; the sampler's seed is the same on every rank, so they cut one permutation
sampler = DistributedSampler(train_set, num_replicas=world_size, rank=rank, shuffle=True, seed=args.seed)
train_loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)

model = models_torch.build(args.model).to(device)
# fix: DDP copies rank 0's weights to every rank, then averages the gradients in backward()
model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
# The learning-rate rule this script states (--lr-scaling, --lr-warmup-epochs); the check holds
# the rate the optimizer uses at every step to it.
probe("rule", lr=args.lr, scaling=args.lr_scaling, warmup_epochs=args.lr_warmup_epochs)
# fix: each step averages world_size batches; the rate after the warm-up follows the stated rule
peak = args.lr * {"none": 1, "linear": world_size, "sqrt": world_size ** 0.5}[args.lr_scaling]
warmup = args.lr_warmup_epochs * len(train_loader)  # the warm-up, in optimizer steps
probe("start", model=model)

step = 0
for epoch in range(args.epochs):
    sampler.set_epoch(epoch)  # fix: a new shuffle every epoch
    total, batches = 0.0, 0
    for x, y, idx in train_loader:
        for group in optimizer.param_groups:  # a straight ramp from --lr to peak, then peak
            group["lr"] = peak if step >= warmup else args.lr + (peak - args.lr) * step / warmup
        x, y = x.to(device), y.to(device)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        probe("step", epoch=epoch, indices=idx, model=model, optimizer=optimizer)
        total, batches = total + loss.item(), batches + 1
    # fix: the mean over the ranks (every rank joins the all-reduce)
    mean = torch.tensor([total / batches], dtype=torch.float64, device=device)
    dist.all_reduce(mean)
    epoch_loss = mean.item() / world_size
    probe("loss", epoch=epoch, local=total / batches, reported=epoch_loss)
    if rank == 0:
        print(f"epoch {epoch}: training loss {epoch_loss:.4f}")

model.eval()
x, y, _ = test_set.tensors
with torch.no_grad():
    correct = (model(x.to(device)).argmax(1) == y.to(device)).sum().item()
if rank == 0:
    print(f"test accuracy {correct / len(y):.4f}")
dist.barrier()  # wait until every rank has finished before tearing the group down
# Close the group. First drop what holds it (a DDP model and its optimizer), so that
# destroy_process_group really closes it and stops Gloo's threads now: a group still open
# when Python exits can abort a process whose work is done. For the same reason
# torch.distributed.nn is imported before init_process_group (imported later, by DDP,
# it keeps a reference to the group).
del model, optimizer
dist.destroy_process_group()
