"""The alpha-beta message-time calculator: the function and the widget around it."""
import builtins
import sys

import pytest

from ddlab.system import links
from ddlab.course import widgets


def test_worked_example_64KiB_over_pcie3():
    # the notebook's worked example: 64 KiB over PCIe 3.0 x16 (15.754 GB/s, 4 us)
    r = widgets.message_time(64 * 1024, "pcie3_x16")
    assert r.latency_s == pytest.approx(4e-6)
    assert r.bandwidth_s == pytest.approx(65536 / 15.7538e9, rel=1e-4)     # 4.16 us
    assert r.total_s == pytest.approx(8.16e-6, rel=1e-3)
    assert r.crossover_bytes == pytest.approx(4e-6 * 15.7538e9, rel=1e-4)  # ~63 kB: both terms equal there
    assert r.effective_Bps == pytest.approx(65536 / 8.16e-6, rel=1e-3)
    text = r.explain()
    assert "4.16 us" in text and "8.16 us" in text and "nearly equal" in text


def test_64KiB_in_4us_is_16_GBps_not_1_6():
    # the mistake older material made: 64 KiB / 4 us is about 16 GB/s
    r = widgets.message_time(64 * 1024, "pcie3_x16", latency_us=0.0, bandwidth_gbs=65536 / 4e-6 / 1e9)
    assert r.total_s == pytest.approx(4e-6)
    assert r.effective_Bps / 1e9 == pytest.approx(16.384)


def test_dominant_term_switches_at_the_crossover():
    link = links.get("nvlink4_x18")
    small = widgets.message_time(1024, link)
    big = widgets.message_time(2**30, link)
    assert small.dominant == "latency" and small.latency_share > 0.99
    assert big.dominant == "bandwidth" and big.latency_share < 0.001
    cross = small.crossover_bytes                 # 2 us x 450 GB/s = 900 kB
    assert cross == pytest.approx(900e3)
    assert widgets.message_time(cross * 0.9, link).dominant == "latency"
    assert widgets.message_time(cross * 1.1, link).dominant == "bandwidth"


def test_what_if_overrides_and_bad_input():
    r = widgets.message_time(1e6, "eth_10g", latency_us=1, bandwidth_gbs=100)
    assert r.total_s == pytest.approx(1e-6 + 1e6 / 100e9)
    assert "what-if" in r.link.name
    for bad in (-1, "64KiB", None, float("nan"), True):
        with pytest.raises(ValueError, match="message size"):
            widgets.message_time(bad, "pcie3_x16")
    with pytest.raises(ValueError, match="unknown link"):
        widgets.message_time(10, "pcie7")
    with pytest.raises(ValueError, match="bandwidth must be > 0"):
        widgets.message_time(10, "pcie3_x16", bandwidth_gbs=0)


def test_formatting_units():
    assert widgets.format_bytes(65536) == "64 KiB"
    assert widgets.format_bytes(1.5 * 2**20) == "1.5 MiB"
    assert widgets.format_bytes(3) == "3 B"
    assert widgets.format_time(4.16e-6) == "4.16 us"
    assert widgets.format_time(2.5e-3) == "2.5 ms"
    assert widgets.format_rate(16.384e9) == "16.4 GB/s"


def test_compare_links_lists_every_link():
    text = str(widgets.compare_links(2**20))
    for t in links.LINKS.values():
        assert t.name in text
    assert "1 MiB" in text


def test_widget_updates_when_the_slider_moves():
    ipywidgets = pytest.importorskip("ipywidgets")
    box = widgets.message_time_calculator(64 * 1024, "pcie3_x16")
    assert isinstance(box, ipywidgets.VBox)
    size, choice, out = box.children
    assert "8.16 us" in out.value
    size.value = 2**30
    assert "1 GiB" in out.value and "dominant term: bandwidth" in out.value
    choice.value = "nvlink4_x18"
    assert "NVLink 4" in out.value


def test_without_ipywidgets_it_prints_and_returns_the_result(monkeypatch, capsys):
    real_import = builtins.__import__

    def no_ipywidgets(name, *args, **kwargs):
        if name == "ipywidgets":
            raise ImportError("no ipywidgets here")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "ipywidgets", raising=False)
    monkeypatch.setattr(builtins, "__import__", no_ipywidgets)
    r = widgets.message_time_calculator(64 * 1024, "pcie3_x16")
    assert isinstance(r, widgets.MessageTime)
    out = capsys.readouterr().out
    assert "ipywidgets is not installed" in out and "8.16 us" in out


def test_agrees_with_the_cost_model():
    from ddlab.cost import alpha_beta
    for key in links.names():
        t = links.get(key)
        for n in (1, 4096, 2**20, 2**30):
            assert widgets.message_time(n, t).total_s == pytest.approx(
                alpha_beta.transfer_time(n, t.latency_s, t.bandwidth_Bps))


def test_plot_message_times_marks_each_crossover():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig = widgets.plot_message_times(["pcie3_x16", "nvlink4_x18"])
    ax_t, ax_b = fig.axes
    assert len(ax_t.lines) == 4 and len(ax_b.lines) == 4          # a curve and a crossover dot per link
    dot = ax_b.lines[1]
    assert dot.get_xdata()[0] == pytest.approx(4e-6 * links.pcie_x16_gbs(3) * 1e9)
    assert dot.get_ydata()[0] == pytest.approx(links.pcie_x16_gbs(3) / 2)
    assert "not measured" in " ".join(t.get_text() for t in fig.texts)
    plt.close(fig)
    with pytest.raises(ValueError):
        widgets.plot_message_times([])


class _Sweep:
    """The shape of ddlab.measure.collectives.SweepResult that the step what-if reads."""
    def __init__(self, points, nproc=2):
        self.rows = [{"bytes": b, "time_us": t} for b, t in points]
        self.nproc = nproc


def test_sweep_time_is_read_off_the_measured_points():
    sweep = _Sweep([(1024, 10.0), (4096, 40.0), (16384, 1000.0)])
    assert widgets.sweep_time_s(sweep, 4096) == pytest.approx(40e-6)          # a measured size: exact
    assert widgets.sweep_time_s(sweep.rows, 1024) == pytest.approx(10e-6)     # rows work too
    # halfway on a log scale between 1 KiB and 4 KiB (2 KiB): the geometric mean of the two times
    assert widgets.sweep_time_s(sweep, 2048) == pytest.approx((10e-6 * 40e-6) ** 0.5)
    with pytest.raises(ValueError, match="outside the measured sizes"):
        widgets.sweep_time_s(sweep, 2**20)
    with pytest.raises(ValueError, match="outside the measured sizes"):
        widgets.sweep_time_s(sweep, 512)
    with pytest.raises(ValueError, match="at least two"):
        widgets.sweep_time_s(_Sweep([(1024, 10.0)]), 1024)
    with pytest.raises(ValueError, match="bytes > 0"):
        widgets.sweep_time_s(sweep, 0)
    with pytest.raises(ValueError, match="'bytes' and 'time_us'"):
        widgets.sweep_time_s([{"size": 1}], 1)


def test_step_what_if_predicts_speedup_from_the_share_of_the_step():
    fast = _Sweep([(1e6, 10.0), (1e9, 10_000.0)])          # 1 GB in 10 ms
    slow = _Sweep([(1e6, 1000.0), (1e9, 1_000_000.0)])     # 1 GB in 1 s
    res = widgets.step_what_if([("small", 1e6, 1e-3), ("big", 1e9, None)], {"fast": fast, "slow": slow},
                               where="a test")
    small_fast, small_slow = res.row("small", "fast"), res.row("small", "slow")
    assert small_fast["comm_s"] == pytest.approx(10e-6) and small_fast["share"] == pytest.approx(0.01)
    assert small_fast["speedup"] == pytest.approx(2 * 1e-3 / (1e-3 + 10e-6))
    assert small_fast["verdict"] == "hardly matters"
    # a 1 ms all-reduce against a 1 ms step: two GPUs only match one
    assert small_slow["share"] == pytest.approx(1.0) and small_slow["speedup"] == pytest.approx(1.0)
    assert small_slow["verdict"] == "large"
    big = res.row("big", "slow")
    assert big["comm_s"] == pytest.approx(1.0) and big["speedup"] is None and big["verdict"] is None
    text = str(res.table())
    assert "a test" in text and "not recorded" in text and "hardly matters" in text and "1.98x" in text
    with pytest.raises(KeyError):
        res.row("small", "nvlink")


def test_step_what_if_rejects_bad_input():
    sweep = _Sweep([(1e6, 10.0), (1e9, 10_000.0)])
    with pytest.raises(ValueError, match="one known number of ranks"):
        widgets.step_what_if([("m", 1e6, 1e-3)], {"a": sweep, "b": _Sweep([(1e6, 1.0), (1e9, 2.0)], nproc=4)})
    with pytest.raises(ValueError, match="at least one measured sweep"):
        widgets.step_what_if([("m", 1e6, 1e-3)], {})
    with pytest.raises(ValueError, match="step time must be > 0"):
        widgets.step_what_if([("m", 1e6, 0.0)], {"a": sweep})
    with pytest.raises(ValueError, match="outside the measured sizes"):
        widgets.step_what_if([("m", 1e12, 1e-3)], {"a": sweep})


def test_step_verdicts_follow_the_speedup_formula():
    assert widgets.step_verdict(0.05) == "hardly matters"       # n/(1+s) within 10% of n
    assert widgets.step_verdict(0.3) == "noticeable"
    assert widgets.step_verdict(0.9) == "large"
    assert widgets.step_verdict(1.2) == "slower than 1 GPU"     # 2/(1+1.2) < 1
    assert widgets.step_verdict(1.2, n=4) == "large"            # 4/(1+1.2) > 1
    with pytest.raises(ValueError):
        widgets.step_verdict(-0.1)


def test_step_what_if_on_the_recorded_sweeps():
    from ddlab.measure import collectives
    sweeps = collectives.load_recorded("h200x2")
    res = widgets.step_what_if([("cnn", 4 * 1_199_882, 2e-3)], sweeps)
    t = {p: res.row("cnn", p)["comm_s"] for p in sweeps}
    assert t["default"] < t["shm"] < t["socket"]                # the order the bandwidths give


# ----------------------------------------------------------------------------- the step calculator
def test_predict_training_step_uses_the_recorded_step_and_the_chosen_link():
    from ddlab.cost import wrapper_cost
    rec = widgets.recorded_step_s("wide")
    assert rec is not None and rec[1] == 512
    p = widgets.predict_training_step("wide", 512, 2, "recorded:default")
    assert p.compute_s == pytest.approx(rec[0])
    assert p.step_s == pytest.approx(p.compute_s + p.exposed_comm_s + p.wrapper_s + p.two_worker_s)
    assert p.two_worker_s > 0          # the recorded machine's paths carry the cost of two workers (the probe)
    # the calculator is `ddlab predict` with the same inputs
    from ddlab.cost import predict
    same = predict.predict("wide", step_ms=rec[0] * 1e3, batch=512, path="default", fits="h200x2",
                           wrapper=predict.Overheads())
    assert same.to_dict() == p.to_dict()
    slow = widgets.predict_training_step("wide", 512, 2, "recorded:socket")
    assert slow.exposed_comm_s > 10 * p.exposed_comm_s and slow.speedup < p.speedup
    # a catalogue link goes through the ring formula; batch scales the step in proportion
    q = widgets.predict_training_step("wide", 1024, 4, "pcie4_x16")
    assert q.compute_s == pytest.approx(2 * rec[0]) and q.gpus == 4
    # the wrapper's measured cost adds overhead (Horovod's: 0, not measurable on one worker)
    h = widgets.predict_training_step("cnn", 512, 2, "recorded:default", wrapper="ddp")
    over = wrapper_cost.measured("ddp")
    assert h.wrapper_s == pytest.approx(over.total_s(len(h.step.buckets))) and h.wrapper_s > 0
    assert widgets.predict_training_step("mlp-small", 64, 2, "pcie3_x16", step_ms=0.5).compute_s == pytest.approx(5e-4)


@pytest.mark.parametrize("kwargs,match", [
    (dict(model="resnet"), "unknown model"),
    (dict(batch=0), "batch"),
    (dict(link="warp"), "unknown link"),
    (dict(link="recorded:ib"), "no recorded all-reduce"),
    (dict(wrapper="deepspeed"), "wrapper"),
    (dict(step_ms=-1.0), "step_ms"),
    (dict(n_gpus=1), "2 or more"),
])
def test_predict_training_step_rejects_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        widgets.predict_training_step(**kwargs)


def test_predict_training_step_asks_for_a_step_time_when_the_model_has_no_recording(monkeypatch):
    from ddlab.cost import recorded_runs
    rec = recorded_runs.recorded_points()
    rec.points = [p for p in rec.points if p.model != "mlp-large"]
    monkeypatch.setattr(widgets, "_recorded_set", lambda: rec)
    with pytest.raises(ValueError, match="no recorded one-GPU step"):
        widgets.predict_training_step(model="mlp-large")
    assert widgets.predict_training_step(model="mlp-large", step_ms=2.0).compute_s == pytest.approx(2e-3)


def test_step_calculator_updates_when_a_value_changes():
    ipywidgets = pytest.importorskip("ipywidgets")
    box = widgets.step_calculator("wide", 512, 2, "recorded:default")
    assert isinstance(box, ipywidgets.VBox)
    model_w, batch_w, gpus_w, link_w, wrapper_w, step_w, out = box.children
    first = out.value
    assert "speedup" in first and "exposed communication" in first
    link_w.value = "recorded:socket"
    assert out.value != first and "speedup 0.0" in out.value
    before = out.value
    gpus_w.value = 4
    assert out.value != before and "4 GPUs" in out.value
    assert gpus_w.min == 2                 # one GPU has nothing to predict
    step_ms = step_w.value
    batch_w.value = 1024
    assert step_w.value == pytest.approx(2 * step_ms, rel=1e-3)     # the step follows the batch
    wrapper_w.value = "horovod"
    gpus_w.value = 2
    assert "gradient hooks on" in out.value and "fused buffer(s)" in out.value     # its measured host cost
    model_w.value = "mlp-small"            # not recorded: keeps the typed step time, still predicts
    assert "speedup" in out.value


def test_step_calculator_without_ipywidgets_prints_the_prediction(monkeypatch, capsys):
    real_import = builtins.__import__

    def no_ipywidgets(name, *args, **kwargs):
        if name == "ipywidgets":
            raise ImportError("no ipywidgets here")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "ipywidgets", raising=False)
    monkeypatch.setattr(builtins, "__import__", no_ipywidgets)
    p = widgets.step_calculator("cnn", 512, 2, "recorded:shm")
    assert p.gpus == 2 and p.speedup > 1
    assert "ipywidgets is not installed" in capsys.readouterr().out


def test_a_case_of_a_result_predicts_with_its_own_one_worker_step_beside_what_it_measured():
    from ddlab.training.results import ExperimentResult
    rows = [{"path": "1 worker", "workers": 1, "device": "cuda", "step_ms_median": 2.0, "speedup": 1.0},
            {"path": "fast", "workers": 2, "device": "cuda", "step_ms_median": 2.1, "speedup": 1.9},
            {"path": "slow", "workers": 2, "device": "cuda", "error": "timed out"}]
    res = ExperimentResult("nccl-paths", rows, "recorded", {}, [], {"gradient_bytes_per_step": 1e6})
    case = widgets.StepCase.of_result("m", res)
    assert case.compute_s == pytest.approx(2e-3) and case.grad_bytes == 1e6 and case.measured == {"fast": 1.9}
    sweeps = {"fast": _Sweep([(1e6, 10.0), (1e9, 10_000.0)]), "slow": _Sweep([(1e6, 1000.0), (1e9, 1e6)])}
    what = widgets.step_what_if([case], sweeps)
    assert what.row("m", "fast")["measured"] == 1.9 and what.row("m", "slow")["measured"] is None
    assert what.row("m", "fast")["speedup"] == pytest.approx(2 * 2e-3 / (2e-3 + 10e-6))
    assert "measured" in [c.key for c in what.table().columns] and "1.90x" in str(what.table())
    # a result with no one-worker GPU run gives no step, and nothing measured shows no column
    gpu_less = ExperimentResult("nccl-paths", rows[1:], "recorded", {}, [], {"gradient_bytes_per_step": 1e6})
    assert widgets.StepCase.of_result("m", gpu_less).compute_s is None
    assert "measured" not in [c.key for c in widgets.step_what_if([("m", 1e6, 2e-3)], sweeps).table().columns]
    with pytest.raises(ValueError, match="gradient bytes"):
        widgets.StepCase.of_result("m", ExperimentResult("nccl-paths", rows, "recorded", {}, [], {}))
