"""The repair exercise: the verdicts from probe records (fast), and the check running real
scripts with 2 CPU processes (slow): the broken script, a partly and wrongly fixed one, a
sampler seeded per rank, the solution, and a script that crashes."""
import json
import os

import pytest

from ddlab.base import worker_report
from ddlab.course import handson, repair
from ddlab.training import convergence

CPU = handson.plan(gpu_count=0)
WORLD, LR, N = 2, 0.05, 8


# ----------------------------------------------------------------------------- diagnose, from records
def steps(shards_by_epoch, model=(1.0, 1.0), lr=LR * WORLD, start=None):
    """Probe records of a run: shards_by_epoch[epoch][rank] = the indices that rank trained on
    (one step per epoch), ``model[rank]`` its weight checksum at every step."""
    ev = []
    for r in range(WORLD):
        ev.append({"kind": "start", "rank": r, "model": (start or model)[r]})
        for ep, shards in enumerate(shards_by_epoch):
            ev.append({"kind": "step", "rank": r, "epoch": ep, "indices": shards[r], "model": model[r],
                       "optimizer": lr})
    return ev


GOOD_SHARDS = [[[0, 2, 4, 6], [1, 3, 5, 7]], [[6, 1, 3, 0], [2, 7, 4, 5]]]


def losses(local=(0.9, 0.7), reported=None):
    rep = sum(local) / len(local) if reported is None else reported
    return [{"kind": "loss", "rank": r, "epoch": 0, "local": local[r], "reported": rep} for r in range(WORLD)]


def verdicts(events):
    return {v.bug: v for v in repair.diagnose(events, WORLD, LR, N)}


def test_a_correct_run_is_fixed_on_every_count():
    v = verdicts(steps(GOOD_SHARDS) + losses())
    assert {k: x.status for k, x in v.items()} == {b: repair.FIXED for b, _ in repair.BUGS}


def test_identical_shards_are_wrong_and_the_order_waits_for_them():
    same = [[[0, 1, 2, 3, 4, 5, 6, 7]] * 2, [[7, 6, 5, 4, 3, 2, 1, 0]] * 2]
    v = verdicts(steps(same) + losses())
    assert v["shards"].status == repair.WRONG and "the same data" in v["shards"].why
    assert v["order"].status == repair.NOT_YET


def test_partly_overlapping_shards_are_wrong():
    overlap = [[[0, 1, 2, 3], [2, 3, 4, 5]], [[4, 5, 6, 7], [0, 1, 6, 7]]]
    v = verdicts(steps(overlap) + losses())
    assert v["shards"].status == repair.WRONG and "2 of the same images" in v["shards"].why


def test_shards_that_leave_data_out_are_wrong():
    v = verdicts(steps([[[0, 2], [1, 3]], [[2, 0], [3, 1]]]) + losses())
    assert v["shards"].status == repair.WRONG and "only 4 of the 8" in v["shards"].why


def test_the_same_order_every_epoch_is_wrong():
    repeat = [GOOD_SHARDS[0], GOOD_SHARDS[0]]
    v = verdicts(steps(repeat) + losses())
    assert v["shards"].status == repair.FIXED
    assert v["order"].status == repair.WRONG and "set_epoch" in v["order"].why


def test_weights_that_start_apart_and_weights_never_averaged():
    apart = verdicts(steps(GOOD_SHARDS, model=(1.0, 2.0), start=(0.5, 0.7)) + losses())["weights"]
    assert apart.status == repair.WRONG and "started from different random weights" in apart.why
    drift = verdicts(steps(GOOD_SHARDS, model=(1.0, 2.0), start=(0.5, 0.5)) + losses())["weights"]
    assert drift.status == repair.WRONG and "not averaged" in drift.why


def rule(scaling, warmup_epochs=0.0, lr=LR):
    """The record a script makes of the learning-rate rule it states."""
    return [{"kind": "rule", "rank": r, "lr": lr, "scaling": scaling, "warmup_epochs": warmup_epochs}
            for r in range(WORLD)]


def ramp_steps(rates, per_epoch):
    """Good shards and weights, ``rates[s]`` the optimizer's rate at step s, ``per_epoch`` steps an epoch."""
    return [{"kind": "step", "rank": r, "epoch": s // per_epoch, "indices": GOOD_SHARDS[min(s // per_epoch, 1)][r],
             "model": 1.0, "optimizer": lr} for r in range(WORLD) for s, lr in enumerate(rates)]


@pytest.mark.parametrize("scaling,rate", [("none", LR), ("linear", LR * WORLD), ("sqrt", LR * WORLD ** 0.5)])
def test_a_rate_that_follows_the_stated_rule_is_accepted(scaling, rate):
    v = verdicts(rule(scaling) + steps(GOOD_SHARDS, lr=rate) + losses())["lr"]
    assert v.status == repair.FIXED, v.why


@pytest.mark.parametrize("scaling,rate,named", [("linear", LR, "none"), ("none", LR * WORLD, "linear"),
                                                ("sqrt", LR * WORLD, "linear"), ("linear", LR * 3, None)])
def test_a_rate_that_breaks_the_stated_rule_is_rejected_and_named(scaling, rate, named):
    v = verdicts(rule(scaling) + steps(GOOD_SHARDS, lr=rate) + losses())["lr"]
    assert v.status == repair.WRONG
    assert f"{convergence.peak_lr(LR, scaling, WORLD, 1):.4g}" in v.why and f"{rate:.4g}" in v.why   # wanted, used
    assert (f"--lr-scaling {named} gives" in v.why) if named else "gives:" not in v.why


def test_a_warm_up_is_judged_step_by_step():
    per_epoch, peak = 4, LR * WORLD
    ramp = [convergence.lr_at(s, LR, peak, per_epoch) for s in range(2 * per_epoch)]
    assert verdicts(rule("linear", 1.0) + ramp_steps(ramp, per_epoch) + losses())["lr"].status == repair.FIXED
    ahead = ramp[1:] + [peak]                    # a scheduler stepped before the probe: one step ahead
    assert verdicts(rule("linear", 1.0) + ramp_steps(ahead, per_epoch) + losses())["lr"].status == repair.FIXED
    no_ramp = verdicts(rule("linear", 1.0) + ramp_steps([peak] * 2 * per_epoch, per_epoch) + losses())["lr"]
    assert no_ramp.status == repair.WRONG and "at step 0" in no_ramp.why
    stated_none = verdicts(rule("linear") + ramp_steps(ramp, per_epoch) + losses())["lr"]   # ramps, states none
    assert stated_none.status == repair.WRONG and "at step 0" in stated_none.why


def test_a_script_that_states_no_rule_is_held_to_the_linear_rule():
    assert verdicts(steps(GOOD_SHARDS, lr=LR * WORLD) + losses())["lr"].status == repair.FIXED
    assert verdicts(steps(GOOD_SHARDS, lr=LR) + losses())["lr"].status == repair.WRONG
    assert verdicts(rule("cosine") + steps(GOOD_SHARDS) + losses())["lr"].status == repair.WRONG


def test_loss_of_rank_0_alone_or_summed_is_wrong():
    own = verdicts(steps(GOOD_SHARDS) + losses(reported=0.9))["loss"]
    assert own.status == repair.WRONG and "its own loss" in own.why
    summed = verdicts(steps(GOOD_SHARDS) + losses(reported=1.6))["loss"]
    assert summed.status == repair.WRONG and "the sum" in summed.why


def test_equal_losses_are_judged_only_once_the_shards_differ():
    same = [[[0, 1, 2, 3, 4, 5, 6, 7]] * 2, [[7, 6, 5, 4, 3, 2, 1, 0]] * 2]
    assert verdicts(steps(same) + losses(local=(0.8, 0.8)))["loss"].status == repair.NOT_YET
    assert verdicts(steps(GOOD_SHARDS) + losses(local=(0.8, 0.8)))["loss"].status == repair.FIXED


def test_missing_probes_say_which_line_to_keep():
    v = verdicts(losses())
    assert v["shards"].status == v["weights"].status == v["lr"].status == repair.NOT_YET
    assert 'probe("step"' in v["shards"].why
    assert verdicts(steps(GOOD_SHARDS))["loss"].status == repair.NOT_YET


def test_probe_writes_one_line_per_call_only_when_asked(tmp_path, monkeypatch):
    class Optim:
        param_groups = [{"lr": 0.25}]
    monkeypatch.delenv(repair.PROBE_ENV, raising=False)
    repair.probe("step", epoch=0)                     # no folder: nothing happens, nothing fails
    monkeypatch.setenv(repair.PROBE_ENV, str(tmp_path))
    monkeypatch.setenv("RANK", "1")
    repair.probe("step", epoch=0, optimizer=Optim(), local=1.5)
    repair.probe("loss", epoch=0, local=1.5, reported=1.25)
    lines = (tmp_path / "rank1.jsonl").read_text().splitlines()
    # each call one worker report, the event its kind: what check() reads back
    assert [json.loads(x) for x in lines] == [
        {"ddlab": "report/1", "rank": 1, "kind": "step", "epoch": 0, "optimizer": 0.25, "local": 1.5},
        {"ddlab": "report/1", "rank": 1, "kind": "loss", "epoch": 0, "local": 1.5, "reported": 1.25}]
    assert worker_report.parse("\n".join(lines)) == [json.loads(x) for x in lines]


def test_start_exercise_keeps_the_learners_edits(tmp_path):
    p = repair.start_exercise(str(tmp_path))
    assert open(p).read() == open(repair.EXERCISE).read()
    with open(p, "a") as f:
        f.write("# my edit\n")
    assert repair.start_exercise(str(tmp_path)).endswith("my_ddp.py")
    assert open(p).read().endswith("# my edit\n")
    repair.start_exercise(str(tmp_path), reset=True)
    assert open(p).read() == open(repair.EXERCISE).read()


def test_a_missing_file_gets_a_message_not_a_traceback(tmp_path):
    r = repair.check(str(tmp_path / "nope.py"), plan_=CPU)
    assert r.failure and "start_exercise" in r.failure and not r.all_fixed


# ----------------------------------------------------------------------------- the check, for real
def variant(tmp_path, *edits, name="my_ddp.py"):
    """The broken script with ``edits`` (old, new) applied; each must apply exactly once."""
    text = open(repair.EXERCISE).read()
    for old, new in edits:
        assert text.count(old) == 1, f"the exercise no longer has {old!r}"
        text = text.replace(old, new)
    p = tmp_path / name
    p.write_text(text)
    return str(p)


LOADER = "train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)\n"
SAMPLER = ("from torch.utils.data.distributed import DistributedSampler\n"
           "sampler = DistributedSampler(train_set, num_replicas=world_size, rank=rank, seed={seed})\n"
           "train_loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)\n")
SET_EPOCH = ("for epoch in range(args.epochs):\n",
             "for epoch in range(args.epochs):\n    sampler.set_epoch(epoch)\n")
LR_SCALED = ("peak = args.lr  # the rate after the warm-up", "peak = args.lr * world_size")


def statuses(report):
    assert not report.failure, report.failure
    return {v.bug: v.status for v in report.verdicts}


@pytest.mark.slow
def test_the_broken_script_has_every_bug():
    s = statuses(repair.check(repair.EXERCISE, plan_=CPU))
    assert s == {"shards": repair.WRONG, "order": repair.NOT_YET, "weights": repair.WRONG,
                 "lr": repair.WRONG, "loss": repair.WRONG}


@pytest.mark.slow
def test_a_partial_fix_with_a_sampler_but_no_set_epoch(tmp_path):
    script = variant(tmp_path, (LOADER, SAMPLER.format(seed="args.seed")), LR_SCALED)
    s = statuses(repair.check(script, plan_=CPU))
    assert s == {"shards": repair.FIXED, "order": repair.WRONG, "weights": repair.WRONG,
                 "lr": repair.FIXED, "loss": repair.WRONG}


@pytest.mark.slow
def test_a_sampler_seeded_per_rank_deals_overlapping_shards(tmp_path):
    script = variant(tmp_path, (LOADER, SAMPLER.format(seed="args.seed + rank")), SET_EPOCH)
    report = repair.check(script, plan_=CPU)
    assert statuses(report)["shards"] == repair.WRONG
    assert "of the same images" in next(v.why for v in report.verdicts if v.bug == "shards")


@pytest.mark.slow
def test_the_solution_passes():
    report = repair.check(repair.SOLUTION, plan_=CPU)
    assert report.all_fixed, str(report)


@pytest.mark.slow
def test_the_solution_with_a_warm_up_and_another_stated_rule_passes(tmp_path):
    """One launch for both: each is judged on its own, without a launch, by the rate tests above."""
    text = open(repair.SOLUTION).read()
    for old, new in (('type=float, default=0.0,', 'type=float, default=1.0,'),
                     ('default="linear", choices', 'default="sqrt", choices')):
        assert text.count(old) == 1
        text = text.replace(old, new)
    p = tmp_path / "my_ddp.py"
    p.write_text(text)
    report = repair.check(str(p), plan_=CPU)
    assert report.all_fixed, str(report)


@pytest.mark.slow
def test_a_crashing_script_gets_one_message_with_its_output(tmp_path):
    script = variant(tmp_path, ("rank, world_size = dist.get_rank(), dist.get_world_size()\n",
                                "rank, world_size = dist.get_rank(), dist.get_wrld_size()\n"))
    report = repair.check(script, plan_=CPU)
    assert report.verdicts == [] and "exit code" in report.failure and "get_wrld_size" in report.failure
    assert "could not be judged" in str(report)


def test_the_workers_error_is_picked_out_of_the_launchers_summary():
    out = ("Traceback (most recent call last):\n"
           '  File "/tmp/x/my_ddp.py", line 33, in <module>\n'
           "    rank, world_size = dist.get_rank(), dist.get_wrld_size()\n"
           "AttributeError: module 'torch.distributed' has no attribute 'get_wrld_size'\n"
           "E1123 torch.distributed.elastic.multiprocessing.api: failed (exitcode: 1)\n"
           "  error_file: <N/A>\n")
    got = repair.worker_error(out, "/tmp/x/my_ddp.py")
    assert got == (": AttributeError: module 'torch.distributed' has no attribute 'get_wrld_size' "
                   "(my_ddp.py, line 33: rank, world_size = dist.get_rank(), dist.get_wrld_size())")
    assert repair.worker_error("all fine\n", "my_ddp.py") == ""
