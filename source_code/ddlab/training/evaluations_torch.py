"""What a PyTorch rank adds up on the device between two evaluations during training
(``fmnist_torch.py --eval-every``), read and reset at each one: the training loss of its
steps and, with ``--noise-scale``, the squared norms of its own gradient (before DDP averages
it, in a DDP communication hook) and of the all-reduced one (after). The records made of
every rank's sums are :mod:`ddlab.training.evaluations`'; the noise scale computed from them
:func:`ddlab.training.convergence.noise_scale`.

Everything stays on the device (no host synchronisation inside the steps) until
:meth:`IntervalSums.take`, at an evaluation.
"""
from __future__ import annotations

import torch

KEYS = ("loss_sum", "small_sq", "big_sq")


class IntervalSums:
    """This rank's sums since the last evaluation: ``loss_sum`` (training loss), ``small_sq``
    (its own gradient's squared norm), ``big_sq`` (the all-reduced gradient's), and ``steps``."""

    def __init__(self, device: torch.device):
        self.sums = {k: torch.zeros((), dtype=torch.float64, device=device) for k in KEYS}
        self.steps = 0
        self._hook_sq = torch.zeros((), dtype=torch.float64, device=device)   # this step's, from the hook

    def local_norm_hook(self, state, bucket):   # no annotations: DDP checks them, and these would be strings
        """DDP communication hook: adds the squared norm of this rank's own gradients in the
        bucket (before they are averaged), then all-reduces the bucket as DDP does by default."""
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        self._hook_sq.add_(bucket.buffer().double().pow(2).sum())
        return default_hooks.allreduce_hook(state, bucket)

    def add_loss(self, loss: torch.Tensor) -> None:
        self.sums["loss_sum"].add_(loss.detach())

    def add_gradient_norms(self, model: torch.nn.Module) -> None:
        """After the all-reduce, before the optimizer step: the gradient all ranks now share
        (DDP averaged it), and this rank's own from the hook."""
        self.sums["big_sq"].add_(torch.stack([p.grad.double().pow(2).sum() for p in model.parameters()]).sum())
        self.sums["small_sq"].add_(self._hook_sq)
        self._hook_sq.zero_()

    def take(self) -> dict:
        """The sums and step count since the last call, as Python numbers (waits for the
        device); all start again from zero."""
        out = {"steps": self.steps, **{k: float(v.item()) for k, v in self.sums.items()}}
        for v in self.sums.values():
            v.zero_()
        self.steps = 0
        return out
