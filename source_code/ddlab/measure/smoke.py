"""Tiny worker programs that prove a distributed stack works, run as
``python -m ddlab.measure.smoke CHECK`` under a launcher (see :mod:`ddlab.measure.launch`).

Checks:
  hvd-torch   Horovod + PyTorch all-reduce: every rank contributes rank+1; the sum must be
              n(n+1)/2 on every rank (on the GPU when one is assigned, else the CPU).
  hvd-tf      the same with Horovod + TensorFlow.
  ddp-step    one DDP training step with torch.distributed (gloo on CPU, NCCL on GPUs);
              ranks start from different weights, DDP broadcasts rank 0's, and after the
              step every rank prints a checksum of its weights: they must be equal.
  nccl-allreduce  a torch.distributed NCCL all-reduce on GPUs (one per rank), to read NCCL's
              transport choice with NCCL_DEBUG=INFO (``ddlab nccl-log --capture`` runs it);
              every rank contributes rank+1 and checks the sum. Without a GPU for the rank it
              reports ok=False and initialises nothing.
  hang        rank 0 waits forever in a collective that rank 1 never joins (for testing
              that a launch timeout kills everything).
Each rank reports one line (:mod:`ddlab.base.worker_report`, kind ``smoke``):
``{"ddlab": "report/1", "rank": r, "kind": "smoke", "check": ..., "size": n, "ok": bool, ...details}``.
``--elements N`` sets the tensor length of the all-reduce checks (hvd-torch, hvd-tf,
nccl-allreduce).
"""
from __future__ import annotations

import gc
import os
import sys
import time

from ddlab.base import worker_report

KIND = "smoke"


def _line(check, rank, size, ok, **kw):
    worker_report.emit(KIND, rank=rank, check=check, size=size, ok=ok, **kw)


def hvd_torch(n_elems: int = 1 << 20) -> bool:
    import torch
    import horovod.torch as hvd
    hvd.init()
    dev = "cpu"
    if torch.cuda.is_available():
        torch.cuda.set_device(hvd.local_rank())
        dev = f"cuda:{hvd.local_rank()}"
    t = torch.full((n_elems,), float(hvd.rank() + 1), device=dev)
    out = hvd.allreduce(t, op=hvd.Sum, name="smoke")
    expect = hvd.size() * (hvd.size() + 1) / 2
    ok = bool(torch.all(out == expect).item())
    _line("hvd-torch", hvd.rank(), hvd.size(), ok, device=dev, value=float(out[0]), expected=expect,
          nccl_built=hvd.nccl_built(), gloo_built=hvd.gloo_built())
    return ok


def hvd_tf(n_elems: int = 1 << 16) -> bool:
    from ddlab.system.frameworks import use_tf_keras
    use_tf_keras()                      # before TensorFlow is imported
    import tensorflow as tf
    import horovod.tensorflow as hvd
    hvd.init()
    t = tf.fill([n_elems], float(hvd.rank() + 1))
    out = hvd.allreduce(t, op=hvd.Sum, name="smoke")
    expect = hvd.size() * (hvd.size() + 1) / 2
    ok = bool(tf.reduce_all(tf.equal(out, expect)).numpy())
    _line("hvd-tf", hvd.rank(), hvd.size(), ok, value=float(out[0].numpy()), expected=expect)
    return ok


def _init_torch_dist():
    import torch
    import torch.distributed as dist
    import torch.distributed.nn  # noqa: F401  imported before the group exists, so it holds no reference to it
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group(backend)
    dev = torch.device(f"cuda:{torch.cuda.current_device()}") if backend == "nccl" else torch.device("cpu")
    return dist, dev


def ddp_step() -> bool:
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP
    dist, dev = _init_torch_dist()
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1000 + rank)  # deliberately different initial weights per rank
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(dev)
    ddp = DDP(model, device_ids=[dev.index] if dev.type == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)  # each rank its own batch
    x = torch.randn(8, 16, generator=g).to(dev)
    y = torch.randint(0, 4, (8,), generator=g).to(dev)
    loss = torch.nn.functional.cross_entropy(ddp(x), y)
    loss.backward()
    opt.step()
    with torch.no_grad():
        flat = torch.cat([p.detach().double().flatten() for p in model.parameters()])
        checksum = torch.stack([flat.sum(), (flat * flat).sum()])
        gathered = [torch.zeros_like(checksum) for _ in range(size)]
        dist.all_gather(gathered, checksum)
    ok = all(torch.equal(gathered[0], c) for c in gathered)
    _line("ddp-step", rank, size, ok, checksum=float(checksum[0]), loss=float(loss.item()),
          backend=dist.get_backend())
    dist.barrier()                 # every rank done before the group goes
    # Drop what holds the group (the DDP wrapper, its optimizer and the graph of the loss) so that
    # destroy_process_group really closes it: a group still held when Python exits leaves Gloo's
    # threads running, and a finished process can then abort ("terminate called without an active
    # exception"), as the training scripts learned.
    del ddp, opt, loss, model
    gc.collect()
    dist.destroy_process_group()
    return ok


def nccl_allreduce(n_elems: int = 1 << 24) -> bool:
    import torch
    import torch.distributed as dist
    rank, local = int(os.environ.get("RANK", 0)), int(os.environ.get("LOCAL_RANK", 0))
    size = int(os.environ.get("WORLD_SIZE", 1))
    if not torch.cuda.is_available() or torch.cuda.device_count() <= local:
        _line("nccl-allreduce", rank, size, False, reason="no-gpu", local_rank=local,
              cuda_devices=torch.cuda.device_count())
        return False
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank, size = dist.get_rank(), dist.get_world_size()
    t = torch.full((n_elems,), float(rank + 1), device="cuda")
    dist.all_reduce(t)
    torch.cuda.synchronize()
    expect = size * (size + 1) / 2
    ok = bool(torch.all(t == expect).item())
    _line("nccl-allreduce", rank, size, ok, backend=dist.get_backend(), value=float(t[0]), expected=expect)
    dist.destroy_process_group()
    return ok


def hang() -> bool:
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    worker_report.emit(KIND, rank=rank, check="hang", size=dist.get_world_size(), started=True, pid=os.getpid())
    if rank == 0:
        dist.all_reduce(torch.ones(1))  # rank 1 never joins: blocks until killed
    else:
        while True:
            time.sleep(1)
    return False


CHECKS = {"hvd-torch": hvd_torch, "hvd-tf": hvd_tf, "ddp-step": ddp_step,
          "nccl-allreduce": nccl_allreduce, "hang": hang}


SIZED = ("hvd-torch", "hvd-tf", "nccl-allreduce")     # checks that take --elements


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    usage = f"usage: python -m ddlab.measure.smoke {{{','.join(CHECKS)}}} [--elements N]"
    kwargs = {}
    if len(argv) == 3 and argv[1] == "--elements" and argv[0] in SIZED and argv[2].isdigit() and int(argv[2]) > 0:
        kwargs["n_elems"] = int(argv[2])
        argv = argv[:1]
    if len(argv) != 1 or argv[0] not in CHECKS:
        print(usage, file=sys.stderr)
        return 2
    from ddlab.measure.launch import install_hang_traceback
    install_hang_traceback()  # a worker killed for hanging says where it was
    return 0 if CHECKS[argv[0]](**kwargs) else 1


if __name__ == "__main__":
    sys.exit(main())
