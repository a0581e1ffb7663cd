"""The alpha-beta model: exact arithmetic, the fit, bad input and the plot."""
import math

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from ddlab import cost_model as cm  # noqa: E402
from ddlab.collectives import SweepResult  # noqa: E402


def test_transfer_time_and_crossover():
    assert cm.transfer_time(1e6, 1e-5, 1e10) == pytest.approx(1e-5 + 1e-4, rel=1e-12)
    assert cm.transfer_time(0, 2e-6, 1e9) == pytest.approx(2e-6)
    np.testing.assert_allclose(cm.transfer_time([0, 1e9], 1e-6, 1e9), [1e-6, 1 + 1e-6])
    assert cm.crossover_bytes(1e-5, 1e10) == pytest.approx(1e5)
    # At the crossover the two terms are equal: time is twice alpha.
    assert cm.transfer_time(cm.crossover_bytes(3e-6, 5e10), 3e-6, 5e10) == pytest.approx(6e-6)
    # The worked example older material got wrong by 10x: 64 KiB at 16 GB/s is about 4.1 us.
    assert cm.transfer_time(65536, 0, 16e9) == pytest.approx(4.096e-6)


def test_ring_and_tree_allreduce():
    # 2(n-1) * (alpha + S/(n beta)) = 6 * (1e-5 + 1e-4)
    assert cm.ring_allreduce_time(4e6, 4, 1e-5, 1e10) == pytest.approx(6.6e-4)
    assert cm.ring_allreduce_time(4e6, 1, 1e-5, 1e10) == 0.0
    # 2 ranks: 2 steps of half the message each.
    assert cm.ring_allreduce_time(1e9, 2, 0.0, 1e9) == pytest.approx(1.0)
    # tree: 2*ceil(log2 n)*alpha + 2S/beta
    assert cm.tree_allreduce_time(4e6, 8, 1e-5, 1e10) == pytest.approx(6e-5 + 8e-4)
    assert cm.tree_allreduce_time(4e6, 5, 1e-5, 1e10) == pytest.approx(6e-5 + 8e-4)
    assert cm.tree_allreduce_time(4e6, 1, 1e-5, 1e10) == 0.0
    # Small message on many ranks: the tree's log2 n latency wins; large on few: the ring wins.
    assert cm.tree_allreduce_time(8, 64, 1e-5, 1e10) < cm.ring_allreduce_time(8, 64, 1e-5, 1e10)
    assert cm.ring_allreduce_time(1e9, 4, 1e-5, 1e10) < cm.tree_allreduce_time(1e9, 4, 1e-5, 1e10)
    with pytest.raises(ValueError, match="algorithm"):
        cm.allreduce_time(1, 2, 0, 1, algorithm="butterfly")


def test_step_time_speedup_efficiency():
    assert cm.step_time(10, 4) == 14
    assert cm.step_time(10, 4, overlap=1) == 10
    assert cm.step_time(10, 4, overlap=0.5) == 12
    assert cm.step_time(2, 8, overlap=1) == 8
    # weak scaling: 0.1 s compute, 1e8 B gradients, 2 GPUs, 10 GB/s: all-reduce 0.01 s
    s = cm.predicted_speedup(0.1, 1e8, 2, 0.0, 1e10)
    assert s == pytest.approx(2 * 0.1 / 0.11)
    assert cm.scaling_efficiency(0.1, 1e8, 2, 0.0, 1e10) == pytest.approx(0.1 / 0.11)
    assert cm.predicted_speedup(0.1, 1e8, 2, 0.0, 1e10, overlap=1) == pytest.approx(2.0)
    # strong scaling: the same global batch split over 2 GPUs
    assert cm.predicted_speedup(0.1, 1e8, 2, 0.0, 1e10, scaling="strong") == pytest.approx(0.1 / 0.06)
    assert cm.predicted_speedup(0.1, 1e8, 1, 1e-5, 1e10) == 1.0
    # A slow link makes two GPUs slower than one (the seeds' negative scaling).
    assert cm.predicted_speedup(0.001, 3e8, 2, 1e-5, 3.5e9) < 1


@pytest.mark.parametrize("call", [
    lambda: cm.step_time(1, 1, overlap=1.5),
    lambda: cm.step_time(-1, 1),
    lambda: cm.transfer_time(10, -1e-6, 1e9),
    lambda: cm.transfer_time(10, 1e-6, 0),
    lambda: cm.transfer_time(-10, 1e-6, 1e9),
    lambda: cm.ring_allreduce_time(10, 0, 1e-6, 1e9),
    lambda: cm.ring_allreduce_time(10, 2.5, 1e-6, 1e9),
    lambda: cm.predicted_speedup(0, 10, 2, 1e-6, 1e9),
    lambda: cm.predicted_speedup(1, 10, 2, 1e-6, 1e9, scaling="sideways"),
])
def test_model_rejects_bad_input(call):
    with pytest.raises(ValueError):
        call()


SIZES = np.array([2.0 ** k for k in range(3, 31)])


def test_fit_recovers_exact_parameters():
    t = 20e-6 + SIZES / 300e9
    fit = cm.fit_alpha_beta(SIZES, t)
    assert fit.alpha == pytest.approx(20e-6, rel=1e-9)
    assert fit.beta == pytest.approx(300e9, rel=1e-9)
    alpha, beta = fit                      # unpacks as a pair
    assert fit.crossover_bytes == pytest.approx(alpha * beta)


def test_fit_recovers_parameters_from_noisy_points():
    rng = np.random.default_rng(7)
    t = (8e-6 + SIZES / 25e9) * rng.lognormal(0.0, 0.05, SIZES.size)
    fit = cm.fit_alpha_beta(SIZES, t)
    assert fit.alpha == pytest.approx(8e-6, rel=0.1)
    assert fit.beta == pytest.approx(25e9, rel=0.1)


def test_relative_weighting_keeps_alpha_meaningful():
    # An unweighted fit is decided by the largest sizes; 2% noise on them would swamp a
    # 10 us alpha. The relative fit still finds it.
    rng = np.random.default_rng(1)
    t = (10e-6 + SIZES / 100e9) * (1 + 0.02 * rng.standard_normal(SIZES.size))
    fit = cm.fit_alpha_beta(SIZES, t)
    assert fit.alpha == pytest.approx(10e-6, rel=0.15)
    A = np.column_stack([np.ones_like(SIZES), SIZES])
    plain_alpha = np.linalg.lstsq(A, t, rcond=None)[0][0]
    assert abs(plain_alpha - 10e-6) > abs(fit.alpha - 10e-6)


def test_robust_fit_resists_an_outlier():
    t = 10e-6 + SIZES / 100e9
    t[5] *= 8                               # one hiccup
    robust = cm.fit_alpha_beta(SIZES, t)
    plain = cm.fit_alpha_beta(SIZES, t, robust=False)
    assert robust.alpha == pytest.approx(10e-6, rel=0.05)
    assert robust.beta == pytest.approx(100e9, rel=0.05)
    assert abs(plain.alpha - 10e-6) > abs(robust.alpha - 10e-6)


def test_fit_keeps_alpha_non_negative():
    # Pure bandwidth with times slightly below the line at small sizes -> negative intercept.
    s = np.array([1e6, 2e6, 4e6, 8e6])
    t = s / 1e10 - np.array([5e-6, 4e-6, 0, 0])
    fit = cm.fit_alpha_beta(s, t)
    assert fit.alpha == 0.0
    assert fit.beta == pytest.approx(1e10, rel=0.1)


@pytest.mark.parametrize("sizes, times, match", [
    ([1, 2, 3], [1, 2], "length"),
    ([8, 8, 8], [1, 1, 1], "two different"),
    ([8], [1], "two different"),
    ([8, 16], [1, 0], "positive"),
    ([8, 16], [1, -1], "positive"),
    ([8, float("nan")], [1, 2], "finite"),
    ([-8, 16], [1, 2], "negative"),
    ([8, 16, 32], [3e-3, 2e-3, 1e-3], "do not grow"),
])
def test_fit_rejects_bad_input(sizes, times, match):
    with pytest.raises(ValueError, match=match):
        cm.fit_alpha_beta(sizes, times)


def _synthetic_sweep(alpha=15e-6, beta=300e9):
    rows = []
    for b in SIZES.astype(int):
        t = alpha + b / beta
        rows.append({"bytes": int(b), "count": int(b) // 4, "time_us": t * 1e6, "time_us_max": t * 1e6,
                     "algbw_gbps": b / t / 1e9, "busbw_gbps": b / t / 1e9, "iters": 10})
    return SweepResult(op="all_reduce", backend="nccl", path="default", env={}, nproc=2, rows=rows,
                       provenance={"cited": False, "machine": "synthetic"})


def test_fit_sweep():
    fit = cm.fit_sweep(_synthetic_sweep())
    assert fit.alpha == pytest.approx(15e-6, rel=1e-6)
    assert fit.beta == pytest.approx(300e9, rel=1e-6)
    # Restricting the range to the large sizes still finds beta.
    assert cm.fit_sweep(_synthetic_sweep(), min_bytes=1 << 20).beta == pytest.approx(300e9, rel=1e-6)
    with pytest.raises(ValueError, match="at least two"):
        cm.fit_sweep(_synthetic_sweep(), min_bytes=1 << 40)


def test_plot_alpha_beta_draws_points_fit_and_regions():
    import matplotlib.pyplot as plt
    t = 20e-6 + SIZES / 300e9
    ax = cm.plot_alpha_beta(SIZES, t)
    labels = [ln.get_label() for ln in ax.get_lines()]
    assert labels[0] == "measured"
    assert labels[1].startswith("fit: alpha = 20 us, beta = 300 GB/s")
    assert labels[2].startswith("crossover")
    # The crossover line sits at alpha*beta = 6 MB.
    assert ax.get_lines()[2].get_xdata()[0] == pytest.approx(20e-6 * 300e9)
    texts = " ".join(tx.get_text() for tx in ax.texts)
    assert "latency-bound" in texts and "bandwidth-bound" in texts
    assert len(ax.patches) == 2               # the two shaded regions
    # Measured points are drawn in microseconds.
    np.testing.assert_allclose(ax.get_lines()[0].get_ydata(), t * 1e6)
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    plt.close(ax.figure)


def test_plot_sweep_fit_uses_given_axes():
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots()
    out = cm.plot_sweep_fit(_synthetic_sweep(), ax=ax)
    assert out is ax
    assert "all_reduce" in ax.get_lines()[0].get_label()
    plt.close(fig)
    assert math.isclose(cm.AlphaBeta(1e-6, 1e9).predict(1e9), 1 + 1e-6)
