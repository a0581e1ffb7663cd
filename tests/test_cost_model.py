"""The alpha-beta model: exact arithmetic, the fit, bad input and the plot."""
import math

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from ddlab.cost import cost_model as cm  # noqa: E402
from ddlab.measure.collectives import SweepResult  # noqa: E402


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


# ----------------------------------------------------------------------------- the step model
def test_model_layers_give_the_documented_parameter_counts():
    from ddlab.training import models_torch  # noqa: F401  (the counts in ddlab.models' table)
    counts = {m: sum(x.params for x in cm.model_layers(m)) for m in ("cnn", "wide", "mlp-small", "mlp-large")}
    assert counts == {"cnn": 1_199_882, "wide": 75_606_410, "mlp-small": 242_762, "mlp-large": 2_774_794}
    with pytest.raises(ValueError, match="unknown model"):
        cm.model_layers("resnet")


def test_buckets_follow_ddp_first_1MiB_then_25MiB_in_reverse_layer_order():
    mb = 1024 * 1024
    layers = [cm.Layer("a", 10 * mb // 4, 1.0), cm.Layer("b", 10 * mb // 4, 1.0),
              cm.Layer("c", 20 * mb // 4, 1.0), cm.Layer("d", mb // 8, 1.0)]
    b = cm.gradient_buckets(layers)
    # d (0.5 MiB) is below 1 MiB, so c joins the first bucket; then b + a = 20 MiB < 25 MiB
    assert [x.layers for x in b] == [("d", "c"), ("b", "a")]
    assert [x.nbytes for x in b] == [mb // 2 + 20 * mb, 20 * mb]
    assert [x.ready for x in b] == pytest.approx([0.5, 1.0])
    # a smaller cap splits the second bucket; a tensor larger than the cap stays whole
    assert [x.layers for x in cm.gradient_buckets(layers, bucket_cap_mb=5)] == [("d", "c"), ("b",), ("a",)]
    # readiness by parameters: the big layer c holds most of them
    assert cm.gradient_buckets(layers, readiness="params")[0].ready == pytest.approx((20 + 0.5) / 40.5)
    with pytest.raises(ValueError, match="readiness"):
        cm.gradient_buckets(layers, readiness="time")


def test_overlap_hides_communication_behind_the_rest_of_the_backward_pass():
    layers = [cm.Layer("early", 1000, 3.0), cm.Layer("late", 10_000_000, 1.0)]  # late's grads come first
    link = cm.AlphaBeta(0.0, 40e6 / 1e-3)            # 40 MB in 1 ms
    p = cm.predict_step(layers, 3e-3, link, 2)       # backward 2 ms; "late" ready after 1/4 of it
    first = p.buckets[0]
    assert first.layers == ("late",) and first.ready == pytest.approx(0.25)
    assert p.comm_s == pytest.approx(1e-3 + 4000 / 40e9)
    assert p.exposed_comm_s == pytest.approx(4000 / 40e9)      # only the last (small) bucket shows
    assert p.total_s == pytest.approx(3e-3 + p.exposed_comm_s)
    # one single tensor: nothing to overlap with, everything is exposed
    q = cm.predict_step(10_000_000, 3e-3, link, 2)
    assert q.exposed_comm_s == pytest.approx(q.comm_s) and len(q.buckets) == 1
    assert q.speedup == pytest.approx(2 * 3e-3 / (3e-3 + 1e-3))
    assert q.efficiency == pytest.approx(q.speedup / 2)


def test_serialised_buckets_queue_behind_each_other():
    layers = [cm.Layer("a", 10_000_000, 1.0), cm.Layer("b", 10_000_000, 1.0)]
    link = cm.AlphaBeta(0.0, 40e6 / 1e-3)
    p = cm.predict_step(layers, 3e-3, link, 2, bucket_cap_mb=1, first_bucket_bytes=None)
    # b ready at 1 ms, its all-reduce ends at 2 ms (= end of backward); a's starts then: 1 ms exposed
    assert p.exposed_comm_s == pytest.approx(1e-3)


def test_overheads_and_the_host_device_paths():
    link = cm.AlphaBeta(10e-6, 100e9)
    over = cm.Overheads(per_step_s=1e-3, per_bucket_s=0.5e-3)
    serial = cm.predict_step("cnn", 2e-3, link, 2, overheads=over)
    assert serial.bound == "serial"
    assert serial.overhead_s == pytest.approx(1e-3 + 2 * 0.5e-3)
    assert serial.total_s == pytest.approx(2e-3 + serial.exposed_comm_s + serial.overhead_s)
    # host-bound (the GPU is busy 0.5 ms of a 2 ms step): the wrapper's host work shows in full
    host = cm.predict_step("cnn", 2e-3, link, 2, overheads=over, device_s=0.5e-3)
    assert host.bound == "host" and host.total_s == pytest.approx(2e-3 + 2e-3)
    assert host.exposed_comm_s == 0
    # device-bound with a slow link: the host's work hides behind the GPU's
    slow = cm.AlphaBeta(10e-6, 1e9)
    dev = cm.predict_step("wide", 2.8e-3, slow, 2, overheads=cm.Overheads(1e-4), device_s=2.7e-3)
    assert dev.bound == "device" and dev.overhead_s == pytest.approx(0.0)
    assert dev.total_s == pytest.approx(2.8e-3 + dev.exposed_comm_s)
    assert cm.predict_step("cnn", 2e-3, link, 1).speedup == 1.0


def test_a_link_from_the_catalogue_uses_the_ring_formula():
    from ddlab.system import links
    nv = links.get("nvlink4_x18")
    t = cm.bucket_allreduce_time(1e8, 4, nv)
    assert t == pytest.approx(cm.ring_allreduce_time(1e8, 4, nv.latency_s, nv.bandwidth_Bps))
    # a sweep's fit is carried to more ranks by 2(n-1)/n at the same bus bandwidth
    fit = cm.AlphaBeta(20e-6, 100e9)
    assert cm.bucket_allreduce_time(1e8, 2, fit) == pytest.approx(20e-6 + 1e-3)
    assert cm.bucket_allreduce_time(1e8, 4, fit) == pytest.approx(20e-6 + 1.5e-3)


@pytest.mark.parametrize("bad", [
    lambda: cm.predict_step("cnn", 0, cm.AlphaBeta(1e-6, 1e9)),
    lambda: cm.predict_step("cnn", 1e-3, cm.AlphaBeta(1e-6, 1e9), 0),
    lambda: cm.predict_step("cnn", 1e-3, cm.AlphaBeta(1e-6, 1e9), backward_fraction=1.5),
    lambda: cm.predict_step("cnn", 1e-3, cm.AlphaBeta(1e-6, 1e9), device_s=-1),
    lambda: cm.predict_step("cnn", 1e-3, cm.AlphaBeta(1e-6, 1e9), batch=0),
    lambda: cm.predict_step([], 1e-3, cm.AlphaBeta(1e-6, 1e9)),
    lambda: cm.Overheads(per_step_s=-1.0),
])
def test_step_model_rejects_bad_input(bad):
    with pytest.raises(ValueError):
        bad()


def _synthetic_points(step_s):
    """Runs generated by the model itself with a known wrapper cost: the fit must find it."""
    fits = {"fast": cm.AlphaBeta(20e-6, 300e9), "slow": cm.AlphaBeta(40e-6, 5e9)}
    pts = []
    for model, one in (("cnn", 2e-3), ("wide", 3e-3)):
        for path in fits:
            p = cm.RecordedPoint("x", model, path, 2, 512, one, None, True, 1.0)
            true = cm.predict_point(p, fits, cm.Overheads(step_s)).speedup
            pts.append(cm.RecordedPoint("x", model, path, 2, 512, one, None, True, true))
    return pts, fits


def test_measured_readiness_and_bucket_copies():
    layers = (cm.Layer("a", 10, 1.0), cm.Layer("b", 1000, 100.0), cm.Layer("c", 10, 1.0))
    # measured: b's gradient is ready a fifth into the backward pass, though it has most of the FLOPs
    b_ready = cm.gradient_buckets(layers, bucket_cap_mb=1e-6, first_bucket_bytes=None, readiness={"c": 0.1, "b": 0.2,
                                                                                                   "a": 1.0})
    assert [(b.layers, b.ready) for b in b_ready] == [(("c",), 0.1), (("b",), 0.2), (("a",), 1.0)]
    assert cm.gradient_buckets(layers, bucket_cap_mb=1e-6, first_bucket_bytes=None)[1].ready > 0.9   # by FLOPs
    with pytest.raises(ValueError, match="no share for layer"):
        cm.gradient_buckets(layers, readiness={"a": 1.0})
    link = cm.AlphaBeta(0.0, 1e7)                      # 4 kB in 400 us
    early = cm.predict_step(layers, 1e-3, link, readiness={"c": 0.1, "b": 0.2, "a": 1.0}, bucket_cap_mb=1e-6,
                            first_bucket_bytes=None)
    late = cm.predict_step(layers, 1e-3, link, readiness={"c": 0.1, "b": 0.99, "a": 1.0}, bucket_cap_mb=1e-6,
                           first_bucket_bytes=None)
    assert early.exposed_comm_s < late.exposed_comm_s
    # an all-reduce holding a share of the SMs slows the backward work beside it: 400 us of the
    # early bucket's all-reduce overlap the backward pass, which then runs at half speed
    kw = dict(readiness={"c": 0.1, "b": 0.2, "a": 1.0}, bucket_cap_mb=1e-6, first_bucket_bytes=None)
    half = cm.predict_step(layers, 1e-3, link, comm_sm_share=0.5, **kw)
    assert early.exposed_comm_s == pytest.approx(4e-6)                # only the last, tiny bucket shows
    # the 4 us and 400 us all-reduces of c and b each overlap the backward pass whole, and half of
    # that time is lost; then a's 4 us all-reduce after the end
    assert half.exposed_comm_s == pytest.approx(0.5 * (4e-6 + 400e-6) + 4e-6)
    for bad in (-0.1, 1.0, float("nan")):
        with pytest.raises(ValueError, match="comm_sm_share"):
            cm.predict_step(1000, 1e-3, link, comm_sm_share=bad)


def test_a_step_profile_replaces_the_assumptions():
    from ddlab.training.step_profile import StepProfile
    prof = StepProfile("wide", 512, "GPU", "bf16", 1e-3, 3e-3, 1e-3, {"dense2": 0.0, "dense1": 0.3, "conv2": 0.9,
                                                                     "conv1": 1.0}, 3, sm_count=132)
    assert prof.backward_fraction == pytest.approx(0.75) and prof.optimizer_share == pytest.approx(0.2)
    link = cm.AlphaBeta(1e-5, 300e9)
    with_prof = cm.predict_step("wide", 5e-3, link, profile=prof)
    assert with_prof.buckets[0].ready == pytest.approx(0.3)          # dense1's gradient, from the profile
    assert with_prof.exposed_comm_s < cm.predict_step("wide", 5e-3, link).exposed_comm_s
    # the profile's SM count turns a path's NCCL channels into the all-reduce's share of the GPU
    assert cm.measured_inputs("wide", 512, {"wide": prof}, 24) == {"profile": prof, "comm_sm_share": 24 / 132}
    assert cm.measured_inputs("wide", 256, {"wide": prof}, None) == {}
    assert cm.measured_inputs("cnn", 512, {"wide": prof}, 24) == {}
    # a profile belongs to the device it was measured on
    assert cm.measured_inputs("wide", 512, {"wide": prof}, 24, device="GPU") == {"profile": prof,
                                                                               "comm_sm_share": 24 / 132}
    assert cm.measured_inputs("wide", 512, {"wide": prof}, 24, device="cpu") == {}


def test_fit_overheads_recovers_a_known_cost_and_says_what_it_cannot_separate():
    pts, fits = _synthetic_points(1.5e-3)
    over = cm.fit_overheads(pts, fits, "x")
    assert over.per_step_s == pytest.approx(1.5e-3, rel=0.02)
    assert over.points == 4 and "cannot be told apart" in over.note
    pts0, _ = _synthetic_points(0.0)
    assert cm.fit_overheads(pts0, fits).per_step_s == pytest.approx(0.0, abs=2e-6)
    graph_only = [cm.RecordedPoint("g", "cnn", "fast", 2, 512, 1e-3, 1e-3, False, 1.9)]
    with pytest.raises(ValueError, match="no recorded runs"):
        cm.fit_overheads(graph_only, fits)


def test_validate_on_the_recorded_runs():
    rec = cm.recorded_points()
    assert {p.launcher for p in rec.points} >= {"ddp", "ddp-graph", "horovod"}
    assert set(rec.fits) == {"default", "shm", "socket"}
    assert ("horovod", "mlp-small") in rec.missing      # not recorded yet: named, not invented
    assert ("ddp", "mlp-small") not in rec.missing
    t = cm.validate(rec)
    rows = t.to_dict()["rows"]
    assert len(rows) == len(rec.points)
    for r in rows:
        assert r["error_pct"] == pytest.approx(100 * (r["predicted"] / r["measured"] - 1))
        assert r["within"] == ("yes" if abs(r["error_pct"]) <= 10 else "no")
    notes = " ".join(t.notes)
    assert "Not recorded" in notes and "mlp-small" in notes and "in-sample" in notes
    # with the measured step profiles (when each gradient is ready, the GPU's SMs) and the channels of
    # each recorded path, every DDP run of the wide model, eager and captured, over NVLink and over
    # shared memory, is inside the band
    assert rec.profiles and "measured" in notes and rec.channels == {"default": 24, "shm": 4, "socket": 2}
    assert all(r["within"] == "yes" for r in rows if r["launcher"].startswith("ddp") and r["model"] == "wide"
               and r["path"] in ("default", "shm"))
    # overlap is not free: without the all-reduce's share of the SMs the captured wide NVLink run is
    # predicted faster than with it
    wide = next(p for p in rec.points if (p.launcher, p.model, p.path) == ("ddp-graph", "wide", "default"))
    free = cm.predict_point(wide, rec.fits, profiles=rec.profiles)
    shared = cm.predict_point(wide, rec.fits, profiles=rec.profiles, channels=rec.channels)
    assert shared.speedup < free.speedup
    # the MLPs' GPU time comes from another machine with the same GPU: said, with the check beside it
    assert set(rec.device_elsewhere) == {"mlp-small", "mlp-large"} and "same GPU model" in notes
    assert set(rec.device_check) == {"cnn", "wide"} and all(abs(r - 1) < 0.05 for r in rec.device_check.values())
    # counting FLOPs instead puts the wide model's big gradient near the end of the backward pass
    assert cm.gradient_buckets("wide")[0].ready > 0.8 > 0.6 > rec.profiles["wide"].ready["dense1"]
    assert "in proportion to its FLOPs" in " ".join(cm.validate(rec, readiness="flops").notes)
    h = cm.holdout(rec).to_dict()["rows"]
    assert {(r["launcher"], r["model"]) for r in h} == {(p.launcher, p.model) for p in rec.points}


def test_plot_validation_draws_every_point_and_the_band():
    import matplotlib
    matplotlib.use("Agg")
    from ddlab.base.tables import Table
    rows = [{"launcher": "ddp", "model": "cnn", "path": "default", "predicted": 1.9, "measured": 2.0},
            {"launcher": "horovod", "model": "wide", "path": "socket", "predicted": 0.06, "measured": 0.055}]
    t = Table([("launcher", "text"), ("model", "text"), ("path", "text"), ("predicted", "ratio"),
               ("measured", "ratio")], rows)
    ax = cm.plot_validation(t)
    xs = sorted(x for line in ax.get_lines() if len(line.get_xdata()) == 1 for x in line.get_xdata())
    assert xs == [0.055, 2.0]
    assert len(ax.collections) == 1                      # the ±10% band
    with pytest.raises(ValueError, match="nothing to plot"):
        cm.plot_validation(Table([("predicted", "ratio")], []))
