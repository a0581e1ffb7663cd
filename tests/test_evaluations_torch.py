"""ddlab.training.evaluations_torch: what a rank sums on the device between two evaluations (its
training loss, and the squared gradient norms of the noise scale, the rank's own from a DDP hook)."""
import pytest
import torch

from ddlab.training import evaluations_torch


def test_sums_are_taken_as_numbers_and_start_again_from_zero():
    sums = evaluations_torch.IntervalSums(torch.device("cpu"))
    for loss in (0.5, 0.25):
        sums.add_loss(torch.tensor(loss, requires_grad=True) * 1.0)   # detached before it is summed
        sums.steps += 1
    assert sums.take() == {"steps": 2, "loss_sum": 0.75, "small_sq": 0.0, "big_sq": 0.0}
    assert sums.take() == {"steps": 0, "loss_sum": 0.0, "small_sq": 0.0, "big_sq": 0.0}


class FakeBucket:
    def __init__(self, values):
        self._buffer = torch.tensor(values)

    def buffer(self):
        return self._buffer


def test_the_hook_sums_this_ranks_gradient_before_the_all_reduce(monkeypatch):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    reduced = []
    monkeypatch.setattr(default_hooks, "allreduce_hook", lambda state, bucket: reduced.append(bucket) or "future")
    sums = evaluations_torch.IntervalSums(torch.device("cpu"))
    # a step of two buckets: this rank's own gradient, before DDP averages it
    assert sums.local_norm_hook(None, FakeBucket([3.0, 4.0])) == "future"
    sums.local_norm_hook(None, FakeBucket([1.0]))
    assert len(reduced) == 2   # every bucket is still all-reduced, as DDP does by default
    # after the all-reduce: the gradient all ranks share
    model = torch.nn.Linear(2, 1)
    for p in model.parameters():
        p.grad = torch.full_like(p, 2.0)   # 3 values of 2: squared norm 12
    sums.add_gradient_norms(model)
    sums.steps += 1
    sums.add_gradient_norms(model)   # the next step: the hook added nothing for it
    sums.steps += 1
    assert sums.take() == {"steps": 2, "loss_sum": 0.0, "small_sq": pytest.approx(26.0), "big_sq": pytest.approx(24.0)}


def test_the_hook_has_the_signature_ddp_checks():
    """DDP reads the hook's parameter annotations: a string (from postponed annotations) is refused."""
    import inspect
    sig = inspect.signature(evaluations_torch.IntervalSums(torch.device("cpu")).local_norm_hook)
    assert list(sig.parameters) == ["state", "bucket"]
    assert sig.parameters["bucket"].annotation is inspect.Parameter.empty
    assert sig.return_annotation is inspect.Signature.empty
