"""The alpha-beta model (ddlab.cost.alpha_beta): exact arithmetic, the fit and bad input."""
import math

import numpy as np
import pytest

from ddlab.cost import alpha_beta as ab
from ddlab.measure.collectives import SweepResult


def test_transfer_time_and_crossover():
    assert ab.transfer_time(1e6, 1e-5, 1e10) == pytest.approx(1e-5 + 1e-4, rel=1e-12)
    assert ab.transfer_time(0, 2e-6, 1e9) == pytest.approx(2e-6)
    np.testing.assert_allclose(ab.transfer_time([0, 1e9], 1e-6, 1e9), [1e-6, 1 + 1e-6])
    assert ab.crossover_bytes(1e-5, 1e10) == pytest.approx(1e5)
    # At the crossover the two terms are equal: time is twice alpha.
    assert ab.transfer_time(ab.crossover_bytes(3e-6, 5e10), 3e-6, 5e10) == pytest.approx(6e-6)
    # The worked example older material got wrong by 10x: 64 KiB at 16 GB/s is about 4.1 us.
    assert ab.transfer_time(65536, 0, 16e9) == pytest.approx(4.096e-6)
    assert math.isclose(ab.AlphaBeta(1e-6, 1e9).predict(1e9), 1 + 1e-6)


def test_ring_allreduce():
    # 2(n-1) * (alpha + S/(n beta)) = 6 * (1e-5 + 1e-4)
    assert ab.ring_allreduce_time(4e6, 4, 1e-5, 1e10) == pytest.approx(6.6e-4)
    assert ab.ring_allreduce_time(4e6, 1, 1e-5, 1e10) == 0.0
    # 2 ranks: 2 steps of half the message each.
    assert ab.ring_allreduce_time(1e9, 2, 0.0, 1e9) == pytest.approx(1.0)


@pytest.mark.parametrize("call", [
    lambda: ab.transfer_time(10, -1e-6, 1e9),
    lambda: ab.transfer_time(10, 1e-6, 0),
    lambda: ab.transfer_time(-10, 1e-6, 1e9),
    lambda: ab.ring_allreduce_time(10, 0, 1e-6, 1e9),
    lambda: ab.ring_allreduce_time(10, 2.5, 1e-6, 1e9),
])
def test_model_rejects_bad_input(call):
    with pytest.raises(ValueError):
        call()


SIZES = np.array([2.0 ** k for k in range(3, 31)])


def test_fit_recovers_exact_parameters():
    t = 20e-6 + SIZES / 300e9
    fit = ab.fit_alpha_beta(SIZES, t)
    assert fit.alpha == pytest.approx(20e-6, rel=1e-9)
    assert fit.beta == pytest.approx(300e9, rel=1e-9)
    alpha, beta = fit                      # unpacks as a pair
    assert fit.crossover_bytes == pytest.approx(alpha * beta)


def test_fit_recovers_parameters_from_noisy_points():
    rng = np.random.default_rng(7)
    t = (8e-6 + SIZES / 25e9) * rng.lognormal(0.0, 0.05, SIZES.size)
    fit = ab.fit_alpha_beta(SIZES, t)
    assert fit.alpha == pytest.approx(8e-6, rel=0.1)
    assert fit.beta == pytest.approx(25e9, rel=0.1)


def test_relative_weighting_keeps_alpha_meaningful():
    # An unweighted fit is decided by the largest sizes; 2% noise on them would swamp a
    # 10 us alpha. The relative fit still finds it.
    rng = np.random.default_rng(1)
    t = (10e-6 + SIZES / 100e9) * (1 + 0.02 * rng.standard_normal(SIZES.size))
    fit = ab.fit_alpha_beta(SIZES, t)
    assert fit.alpha == pytest.approx(10e-6, rel=0.15)
    A = np.column_stack([np.ones_like(SIZES), SIZES])
    plain_alpha = np.linalg.lstsq(A, t, rcond=None)[0][0]
    assert abs(plain_alpha - 10e-6) > abs(fit.alpha - 10e-6)


def test_robust_fit_resists_an_outlier():
    t = 10e-6 + SIZES / 100e9
    t[5] *= 8                               # one hiccup
    robust = ab.fit_alpha_beta(SIZES, t)
    plain = ab.fit_alpha_beta(SIZES, t, robust=False)
    assert robust.alpha == pytest.approx(10e-6, rel=0.05)
    assert robust.beta == pytest.approx(100e9, rel=0.05)
    assert abs(plain.alpha - 10e-6) > abs(robust.alpha - 10e-6)


def test_fit_keeps_alpha_non_negative():
    # Pure bandwidth with times slightly below the line at small sizes -> negative intercept.
    s = np.array([1e6, 2e6, 4e6, 8e6])
    t = s / 1e10 - np.array([5e-6, 4e-6, 0, 0])
    fit = ab.fit_alpha_beta(s, t)
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
        ab.fit_alpha_beta(sizes, times)


def synthetic_sweep(alpha=15e-6, beta=300e9):
    rows = []
    for b in SIZES.astype(int):
        t = alpha + b / beta
        rows.append({"bytes": int(b), "count": int(b) // 4, "time_us": t * 1e6, "time_us_max": t * 1e6,
                     "algbw_gbps": b / t / 1e9, "busbw_gbps": b / t / 1e9, "iters": 10})
    return SweepResult(op="all_reduce", backend="nccl", path="default", env={}, nproc=2, rows=rows,
                       provenance={"cited": False, "machine": "synthetic"})


def test_fit_sweep():
    fit = ab.fit_sweep(synthetic_sweep())
    assert fit.alpha == pytest.approx(15e-6, rel=1e-6)
    assert fit.beta == pytest.approx(300e9, rel=1e-6)
    # Restricting the range to the large sizes still finds beta.
    assert ab.fit_sweep(synthetic_sweep(), min_bytes=1 << 20).beta == pytest.approx(300e9, rel=1e-6)
    with pytest.raises(ValueError, match="at least two"):
        ab.fit_sweep(synthetic_sweep(), min_bytes=1 << 40)
