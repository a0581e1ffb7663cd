"""ddlab.cost.wrapper_cost: the wrapper's cost measured on one worker (DDP fitted per step and per
bucket, Horovod 0 and why), Horovod's fusion buffers and defaults."""
import pytest

from ddlab.cost import wrapper_cost as wc
from ddlab.training.results import ExperimentResult


def _result(rows):
    return ExperimentResult("wrapper-cost", rows, "recorded", {"machine": "1x Test GPU"}, [], {})


def _row(model, batch, wrapper, cost_ms, buckets):
    return {"model": model, "batch": batch, "wrapper": wrapper, "cost_ms": cost_ms, "buckets": buckets, "repeats": 5}


def test_ddp_per_step_and_per_bucket_by_hand():
    # cost = 0.3 ms + 0.1 ms per bucket exactly
    rows = [_row("a", 32, "ddp", 0.4, 1), _row("b", 32, "ddp", 0.5, 2), _row("c", 32, "ddp", 0.6, 3),
            _row("a", 32, "plain", 0.0, 1)]
    o = wc.measured("ddp", result=_result(rows))
    assert o.per_step_s == pytest.approx(0.3e-3) and o.per_bucket_s == pytest.approx(0.1e-3)
    assert o.points == 3 and o.basis == "measured" and "1x Test GPU" in o.source and "least squares" in o.source
    # one bucket count only: a cost per step, said so; leaving rows out
    one = wc.measured("ddp", exclude_models=("b", "c"), result=_result(rows))
    assert one.per_step_s == pytest.approx(0.4e-3) and one.per_bucket_s == 0 and "only a cost per step" in one.note
    with pytest.raises(ValueError, match="no ddp rows besides those left out"):
        wc.measured("ddp", exclude_batches=(32,), result=_result(rows))
    # a negative per-bucket slope is not a cost: per step only
    neg = wc.measured("ddp", result=_result([_row("a", 32, "ddp", 0.6, 1), _row("b", 32, "ddp", 0.4, 2)]))
    assert neg.per_bucket_s == 0 and neg.per_step_s == pytest.approx(0.5e-3)


def test_horovod_is_not_measurable_on_one_worker():
    rows = [_row("a", 32, "horovod", -0.1, 1), _row("a", 128, "horovod", 0.2, 1)]
    o = wc.measured("horovod", result=_result(rows))
    assert o.total_s(3) == 0 and o.basis == "modelled" and "hooks only when its size is above 1" in o.source
    with pytest.raises(ValueError, match="ddp or horovod"):
        wc.measured("keras", result=_result(rows))


def test_horovod_with_its_hooks_at_size_one_is_measured_and_holds_its_cycle():
    rows = [_row("a", 32, "horovod", -0.1, 1), _row("a", 32, "horovod-hooks", 0.8, 1),
            _row("b", 128, "horovod-hooks", 1.2, 1)]
    o = wc.measured("horovod", result=_result(rows))
    assert o.basis == "measured" and o.per_step_s == pytest.approx(1.0e-3) and o.per_bucket_s == 0
    assert o.points == 2 and o.cycle_s == wc.HOROVOD_CYCLE_TIME_S and "hooks on" in o.source and "1x Test GPU" in o.source
    left = wc.measured("horovod", exclude_models=("b",), result=_result(rows))
    assert left.per_step_s == pytest.approx(0.8e-3) and left.points == 1
    # every hooked row left out: back to the size-1 rows without hooks, which measure nothing
    assert wc.measured("horovod", exclude_models=("a", "b"), result=_result(rows + [_row("c", 32, "horovod", 0.1, 1)])
                       ).basis == "modelled"
    slow = ExperimentResult("wrapper-cost", rows, "recorded", {"machine": "1x Test GPU"}, [],
                            {"horovod_env": {"HOROVOD_CYCLE_TIME": "5"}})
    assert wc.measured("horovod", result=slow).cycle_s == pytest.approx(5e-3)
    assert wc.measured("horovod", result=_result(rows[:1])).cycle_s is None      # no hooks: no cycle in it


def test_the_recorded_measurement():
    ddp = wc.measured("ddp")
    assert ddp.basis == "measured" and ddp.points >= 3 and ddp.total_s(2) > 0
    assert "NVIDIA" in ddp.source
    assert wc.over_one_worker_step("ddp").total_s(5) == 0
    assert wc.over_one_worker_step("horovod") == wc.measured("horovod")


def test_fusion_buffers_by_hand():
    t = [("a", 40), ("b", 50), ("c", 200), ("d", 10), ("e", 100)]
    assert [(b.tensors, b.nbytes) for b in wc.fusion_buffers(t, 100)] == [
        (("a", "b"), 90), (("c",), 200), (("d",), 10), (("e",), 100)]
    assert [b.tensors for b in wc.fusion_buffers(t, 0)] == [("a",), ("b",), ("c",), ("d",), ("e",)]
    assert len(wc.fusion_buffers(t)) == 1         # the 128 MiB default holds them all
    assert wc.HOROVOD_FUSION_THRESHOLD_BYTES == 128 * 1024 * 1024 and wc.HOROVOD_CYCLE_TIME_S == 1e-3
    with pytest.raises(ValueError):
        wc.fusion_buffers(t, -1)
    assert "0.28.1" in wc.horovod_source() and wc.horovod_source(1024, 2e-3).startswith("given")
