"""Evaluations during training (``fmnist_torch.py --eval-every EPOCHS --eval-steps STEP...``):
when they happen, which test images each rank scores, and every rank's sums made into one
record of the result's ``evaluations`` (notebook 9's convergence runs read them).

Framework-free: the script scores the images and gathers every rank's sums; this module
does the bookkeeping. An evaluation scores the held-out test set, all ranks together (each
its slice), and records test accuracy and loss, the training loss since the previous
evaluation, the training seconds so far (evaluations left out of every clock) and, with
``--noise-scale``, the squared gradient norms of the gradient noise scale
(:func:`ddlab.training.convergence.noise_scale`).
"""
from __future__ import annotations

from typing import Iterable, Mapping, Sequence, Set, Tuple


def test_range(rank: int, world: int, test_samples: int, every_rank: bool) -> Tuple[int, int]:
    """The test images (lo, hi) rank ``rank`` scores: its slice of the first ``test_samples``
    when every rank evaluates (evaluations during training); else all of them on rank 0 alone
    (one evaluation at the end), none on the others."""
    if every_rank:
        return rank * test_samples // world, (rank + 1) * test_samples // world
    return 0, (test_samples if rank == 0 else 0)


def evaluation_steps(total: int, steps_per_epoch: int, every_epochs: float, extra_steps: Iterable[int] = ()) -> Set[int]:
    """The optimizer steps after which to evaluate: every ``every_epochs`` epochs (rounded to
    a step, at least 1), the last step, and ``extra_steps`` within the run. Empty when
    ``every_epochs`` is 0 (one evaluation at the end, outside this schedule)."""
    if not every_epochs > 0:
        return set()
    every = every_epochs * steps_per_epoch
    steps = {min(total, max(1, int(round(k * every)))) for k in range(1, int(total / every) + 1)} | {total}
    return steps | {s for s in extra_steps if s <= total}


def combine(every_rank: Sequence[Mapping], *, step: int, steps_per_epoch: int, world: int, train_s: float,
            wall_s: float, lr: float, noise_scale: bool = False) -> dict:
    """One evaluation's record from every rank's sums at optimizer step ``step``.

    Each rank gives ``correct`` and ``test_loss`` (summed over its ``n`` test images),
    ``steps`` (optimizer steps since the previous evaluation), ``loss_sum`` (its training
    loss summed over them) and, for the noise scale, ``small_sq`` (its own gradient's
    squared norm, summed) and ``big_sq`` (the all-reduced gradient's, the same on every rank).
    ``lr``: the rate of the last step before this evaluation."""
    n_test = sum(g["n"] for g in every_rank)
    steps_in = every_rank[0]["steps"]
    entry = {"epoch": round(step / steps_per_epoch, 4), "step": step, "train_s": train_s, "wall_s": wall_s,
             "lr": float(lr),
             "test_accuracy": sum(g["correct"] for g in every_rank) / n_test,
             "test_loss": sum(g["test_loss"] for g in every_rank) / n_test,
             "train_loss": (sum(g["loss_sum"] for g in every_rank) / (steps_in * world)) if steps_in else None}
    if noise_scale and steps_in:
        entry["noise"] = {"steps": steps_in,
                          "small_sq": sum(g["small_sq"] for g in every_rank) / (steps_in * world),
                          "big_sq": every_rank[0]["big_sq"] / steps_in}
    return entry


def eval_line(entry: Mapping) -> str:
    """Rank 0's line for one evaluation."""
    return (f"eval at step {entry['step']} (epoch {entry['epoch']:g}): test accuracy {entry['test_accuracy']:.4f}, "
            f"test loss {entry['test_loss']:.4f}, {entry['train_s']:.2f} s of training")


def left_out_note(eval_s: float) -> str:
    """The result's note on the clocks of a run that evaluated during training."""
    return (f"the test evaluations during training ({eval_s:.2f} s) are left out of the timed "
            "interval and of each evaluation's train_s")
