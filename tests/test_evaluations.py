"""ddlab.training.evaluations: when a run evaluates during training, which test images each rank
scores, and every rank's sums made into one record of the result's ``evaluations``."""
import pytest

from ddlab.training import evaluations


def test_every_rank_scores_its_slice_or_rank_0_scores_all():
    slices = [evaluations.test_range(r, 3, 1000, every_rank=True) for r in range(3)]
    assert slices == [(0, 333), (333, 666), (666, 1000)]   # disjoint, together all 1000
    assert evaluations.test_range(0, 3, 1000, every_rank=False) == (0, 1000)
    assert evaluations.test_range(2, 3, 1000, every_rank=False) == (0, 0)   # none on the others


def test_evaluation_steps_every_so_many_epochs_the_last_and_the_extra_ones():
    # 100 steps an epoch, every half epoch, over 230 steps: 50, 100, ..., 200, and the last
    assert evaluations.evaluation_steps(230, 100, 0.5) == {50, 100, 150, 200, 230}
    assert evaluations.evaluation_steps(230, 100, 0.5, [7, 230, 500]) == {7, 50, 100, 150, 200, 230}
    assert evaluations.evaluation_steps(10, 1000, 0.0001) == set(range(1, 11))   # at least one step apart
    assert evaluations.evaluation_steps(230, 100, 0.0) == set()   # only the evaluation at the end


def test_combine_makes_one_record_from_every_rank():
    ranks = [{"correct": 40, "test_loss": 30.0, "n": 50, "steps": 4, "loss_sum": 8.0, "small_sq": 6.0, "big_sq": 2.0},
             {"correct": 35, "test_loss": 20.0, "n": 50, "steps": 4, "loss_sum": 4.0, "small_sq": 10.0, "big_sq": 2.0}]
    e = evaluations.combine(ranks, step=30, steps_per_epoch=40, world=2, train_s=1.5, wall_s=9.0, lr=0.002,
                            noise_scale=True)
    assert list(e) == ["epoch", "step", "train_s", "wall_s", "lr", "test_accuracy", "test_loss", "train_loss", "noise"]
    assert (e["epoch"], e["step"], e["train_s"], e["wall_s"], e["lr"]) == (0.75, 30, 1.5, 9.0, 0.002)
    assert e["test_accuracy"] == 0.75 and e["test_loss"] == 0.5
    assert e["train_loss"] == 1.5   # 12 over 4 steps of 2 ranks
    assert e["noise"] == {"steps": 4, "small_sq": 2.0, "big_sq": 0.5}   # big_sq: the same on every rank
    # no steps since the last evaluation: no training loss, no noise
    idle = [dict(r, steps=0) for r in ranks]
    e = evaluations.combine(idle, step=30, steps_per_epoch=40, world=2, train_s=1.5, wall_s=9.0, lr=0.002,
                            noise_scale=True)
    assert e["train_loss"] is None and "noise" not in e


def test_the_printed_line_and_the_note():
    e = {"step": 30, "epoch": 0.75, "test_accuracy": 0.81234, "test_loss": 0.5, "train_s": 1.5}
    assert evaluations.eval_line(e) == ("eval at step 30 (epoch 0.75): test accuracy 0.8123, test loss 0.5000, "
                                        "1.50 s of training")
    assert evaluations.left_out_note(0.126) == ("the test evaluations during training (0.13 s) are left out of the "
                                                "timed interval and of each evaluation's train_s")


def test_no_framework_is_imported():
    """The bookkeeping is framework-free (the torch side is ddlab.training.evaluations_torch)."""
    import os
    import subprocess
    import sys
    source = os.path.dirname(os.path.dirname(os.path.dirname(evaluations.__file__)))
    code = "import sys, ddlab.training.evaluations; print([m for m in ('torch', 'tensorflow') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": source})
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr


@pytest.mark.parametrize("every", [0.3, 1.0, 2.5])
def test_the_schedule_ends_at_the_last_step_and_stays_inside_the_run(every):
    steps = evaluations.evaluation_steps(500, 117, every)
    assert max(steps) == 500 and min(steps) >= 1
