"""The workers of a PyTorch training run: which device each takes, and the group they form
under their launcher (one process, DDP under torchrun, Horovod under horovodrun).

``source_code/train/fmnist_torch.py`` asks :func:`resolve_device` for the device and makes one
:class:`Workers`; the training loop then needs only what every launcher gives: rank, size,
local rank, a barrier, an all-gather of small Python objects, and a shutdown at the end.

What each launcher's init does (joining the group: the first changes of notebook 7's DDP script
and notebook 8's Horovod one):

* one process (``--launcher none``): nothing to join; refused when the environment says this
  process is one of several workers;
* DDP: ``init_process_group`` (NCCL on GPUs, Gloo on CPUs) with the GPU of the local rank,
  started by torchrun (which sets LOCAL_RANK and WORLD_SIZE);
* Horovod: ``hvd.init()`` (after the script's Horovod settings are in the environment: Horovod
  reads its fusion and cycle settings there), then the GPU of the local rank.

Teardown: :meth:`Workers.shutdown` closes the group, and it can close it only once nothing
holds it. The script calls it after ``train(...)`` returned and ``gc.collect()`` ran, when
its DDP model (which holds the process group) is gone; torch.distributed.nn is imported
before ``init_process_group`` (below) for the same reason. Otherwise Gloo's threads live
until Python exits and may abort a finished process there (tests/test_train_cpu.py and
tests/test_handson.py check this).
"""
from __future__ import annotations

import os
from typing import Callable, Optional, Type

import torch

from ddlab.training.train_common import Failure

# What a launcher sets in each worker's environment: a process started with one of these
# above 1 is one of several workers.
WORLD_SIZE_VARIABLES = ("WORLD_SIZE", "HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE")


def resolve_device(choice: str, error: Type[Failure] = Failure) -> torch.device:
    """--device auto|cpu|cuda as a torch device ("auto": the GPU where torch sees one)."""
    if choice == "cuda" or (choice == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise error("--device cuda, but torch sees no CUDA GPU (CPU-only torch, or no visible GPU)")
        return torch.device("cuda")
    return torch.device("cpu")


class Workers:
    """What the training loop needs from the launcher: rank, size, local rank, a barrier
    and an all-gather of small Python objects. One class, three launchers.

    ``plan_graph``: the step will be captured as a CUDA graph (DDP then needs NCCL's async
    error handling off before the group exists). ``before_horovod_init`` is called right
    before ``hvd.init()`` (the script sets Horovod's variables there)."""

    def __init__(self, launcher: str, use_cuda: bool, plan_graph: bool, error: Type[Failure] = Failure,
                 before_horovod_init: Optional[Callable[[], object]] = None):
        self.launcher = launcher
        self.use_cuda = use_cuda
        self.error = error
        self.hvd = None
        env = os.environ
        if launcher == "none":
            if any(int(env.get(name, "1")) > 1 for name in WORLD_SIZE_VARIABLES):
                raise error("--launcher none runs one process, but this was started as one of several "
                            "workers: use --launcher ddp under torchrun or --launcher horovod under horovodrun")
            self.rank, self.size, self.local_rank, self.local_size = 0, 1, 0, 1
            self.backend = "none"
        elif launcher == "ddp":
            if "LOCAL_RANK" not in env or "WORLD_SIZE" not in env:
                raise error("--launcher ddp must be started by torchrun, e.g. `torchrun --standalone "
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
                raise error(f"--launcher horovod needs Horovod for PyTorch ({exc}); build it with "
                            "`make horovod` (tools/build_horovod.sh)") from None
            if before_horovod_init is not None:
                before_horovod_init()
            hvd.init()
            self.hvd = hvd
            self.rank, self.size = hvd.rank(), hvd.size()
            self.local_rank, self.local_size = hvd.local_rank(), hvd.local_size()
            if use_cuda:
                self._pin_gpu()
            self.backend = "horovod-" + ("nccl" if use_cuda and hvd.nccl_built() else "gloo")
        else:
            raise error(f"unknown launcher {launcher!r}")

    def _pin_gpu(self):
        n = torch.cuda.device_count()
        if self.local_rank >= n:
            raise self.error(f"local rank {self.local_rank} has no GPU: only {n} visible "
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

    def sync(self) -> None:
        """The point every clock starts and stops at: this GPU has finished its queued work
        and every worker has arrived (then the GPU once more, for work queued meanwhile)."""
        if self.use_cuda:
            torch.cuda.synchronize()
        self.barrier()
        if self.use_cuda:
            torch.cuda.synchronize()

    def shutdown(self):
        if self.launcher == "ddp":
            self.dist.destroy_process_group()
        elif self.launcher == "horovod":
            self.hvd.shutdown()
