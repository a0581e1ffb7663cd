"""ddlab.training.step_timing: one training step timed on this machine (CPU here)."""
import pytest

from ddlab.training import step_timing

torch = pytest.importorskip("torch")


def test_an_mlp_is_built_from_its_widths():
    net = step_timing.build_mlp([847, 256, 128, 64, 1])
    assert sum(p.numel() for p in net.parameters()) == 847 * 256 + 256 + 256 * 128 + 128 + 128 * 64 + 64 + 65
    assert net(torch.zeros(3, 847)).shape == (3, 1)


@pytest.mark.parametrize("widths", [[10], [10, 0], [10, 2.5], (True, 3)])
def test_bad_widths_are_refused(widths):
    with pytest.raises(ValueError, match="MLP widths"):
        step_timing.check_widths(widths)


def test_a_step_is_timed_for_a_course_model_and_an_mlp():
    t = step_timing.measure("mlp-small", 16, device="cpu", steps=3, warmup=1, repeats=2)
    assert t.device == "cpu" and t.precision == "fp32" and t.batch == 16 and t.repeats == 2
    assert 0 < t.min_s <= t.seconds <= t.max_s
    r = step_timing.measure([20, 8, 1], 4, device="cpu", steps=2, warmup=0, repeats=1)
    assert r.model == "mlp 20-8-1" and "per step" in r.describe()
    with pytest.raises(ValueError, match="batch"):
        step_timing.measure("mlp-small", 0)
