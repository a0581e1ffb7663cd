"""ddlab.training.one_gpu: single-GPU throughput per model and precision, and the wrapper's
cost on one worker (plain vs DDP vs Horovod), with the training script's launches faked."""
import pytest

from _experiment_fakes import FakeLaunches, script_result
from ddlab.training import one_gpu, runs
from ddlab.training.runspec import RunSpecError


def step(ms, **more):
    return script_result(512 / ms * 1000, step_time_ms={"median": ms, "p10": ms * 0.9, "p90": ms * 1.1}, **more)


def test_single_gpu_throughput_runs_each_model_and_precision_eagerly(monkeypatch):
    fake = FakeLaunches(step(1.0, params=1_199_882), step(0.8), step(0.3, params=242_762), step(0.25),
                        "a crash", step(0.4))
    monkeypatch.setattr(runs.launch, "run", fake)
    res = one_gpu.single_gpu_throughput(device="cuda", repeats=1)
    assert res.name == "one-gpu" and len(fake.argvs) == 6
    assert all("--cuda-graph" in a and a[a.index("--cuda-graph") + 1] == "off" for a in fake.argvs)
    assert all(a[a.index("--launcher") + 1] == "none" for a in fake.argvs)
    assert [(r["model"], r["precision"]) for r in res.rows][:4] == [("cnn", "fp32"), ("cnn", "bf16"),
                                                                   ("mlp-small", "fp32"), ("mlp-small", "bf16")]
    assert res.rows[0]["params"] == 1_199_882 and res.rows[0]["step_ms_median"] == 1.0
    assert res.rows[4]["error"] and res.rows[4]["model"] == "mlp-large"
    assert any("mlp-large fp32 failed" in n for n in res.notes)
    text = res.table()
    assert "one GPU: torch none, models cnn, mlp-small, mlp-large" in text and "1,199,882" in text


def test_single_gpu_throughput_on_a_gpu_repeats_each_run_three_times(monkeypatch):
    fake = FakeLaunches(step(1.0), step(1.2), step(0.9), step(0.5), step(0.6), step(0.4))
    monkeypatch.setattr(runs.launch, "run", fake)
    res = one_gpu.single_gpu_throughput(models=["mlp-small"], device="cuda")
    assert len(fake.argvs) == 6 and [r["precision"] for r in res.rows] == ["fp32", "bf16"]
    assert res.rows[0]["step_ms_median"] == 1.0 and res.rows[1]["step_ms_median"] == 0.5   # median of 3
    assert one_gpu.planned_launches(["mlp-small"]) == len(fake.argvs)        # the plan a progress bar counts


def test_single_gpu_throughput_on_cpu_is_fp32_only(monkeypatch):
    fake = FakeLaunches(step(5.0))
    monkeypatch.setattr(runs.launch, "run", fake)
    res = one_gpu.single_gpu_throughput(models=["mlp-small"], device="cpu")
    assert [r["precision"] for r in res.rows] == ["fp32"] and "fp32 only" in res.notes[0]
    assert "--cuda-graph" not in fake.argvs[0]


def _timed(ms):
    """wrapper_cost_torch.measure's answer: {(batch, wrapper): step ms}."""
    def measure(models, batches, wrappers, **kw):
        return [{"model": m, "batch": b, "wrapper": w, "step_s": ms[(b, w)] / 1e3, "min_s": ms[(b, w)] / 1e3 * 0.9,
                 "max_s": ms[(b, w)] / 1e3 * 1.1, "runs": [ms[(b, w)] / 1e3] * 3}
                for m in models for b in batches for w in wrappers]
    return measure


def test_wrapper_cost_is_the_step_over_the_plain_one(monkeypatch):
    from ddlab.training import wrapper_cost_torch
    ms = {(32, "plain"): 0.20, (32, "ddp"): 0.32, (32, "horovod"): 0.45,
          (128, "plain"): 0.40, (128, "ddp"): 0.50, (128, "horovod"): 0.60}
    monkeypatch.setattr(wrapper_cost_torch, "measure", _timed(ms))
    res = one_gpu.wrapper_cost(models=["mlp-small"], batches=[32, 128], wrappers=["ddp", "horovod"],
                               buckets=lambda m: 2)
    plain, ddp, hvd = res.rows[:3]
    assert [r["wrapper"] for r in res.rows] == ["plain", "ddp", "horovod"] * 2
    assert plain["cost_ms"] == 0 and plain["cost_per_bucket_ms"] is None
    assert ddp["cost_ms"] == pytest.approx(0.12) and ddp["cost_share"] == pytest.approx(0.6)
    assert ddp["buckets"] == 2 and ddp["cost_per_bucket_ms"] == pytest.approx(0.06)
    assert hvd["cost_ms"] == pytest.approx(0.25) and res.rows[4]["cost_ms"] == pytest.approx(0.10)
    assert "one worker, one process: nothing crosses a link" in res.notes[0]
    assert one_gpu.HOROVOD_SIZE_ONE in res.notes          # Horovod's size-1 rows are said to measure nothing
    text = res.table()
    assert "batch 32, 128/worker" in text and "0.120" in text and "60.0%" in text
    # a recording of it carries its run description: DDP, the first model, the largest batch
    spec = res.spec
    assert (spec.launcher, spec.model, spec.batch, spec.device) == ("ddp", "mlp-small", 128, "cuda")
    assert spec.steps == 50 + one_gpu.WRAPPER_WARMUP and spec.warmup_steps == one_gpu.WRAPPER_WARMUP


def test_wrapper_cost_names_what_it_left_out_and_runs_on_the_cpu(monkeypatch):
    monkeypatch.setattr(one_gpu, "availability", lambda fw, la: (False, "Horovod is not installed"))
    assert one_gpu.available_wrappers() == ["plain", "ddp"]
    res = one_gpu.wrapper_cost(models=["mlp-small"], batches=[16], device="cpu", precision="fp32", steps=2,
                               repeats=2)
    assert [r["wrapper"] for r in res.rows] == ["plain", "ddp"] and all(r["step_ms_median"] > 0 for r in res.rows)
    assert "Horovod not measured: Horovod is not installed" in res.notes
    import torch.distributed as dist
    assert not dist.is_initialized()             # the process group made for it is gone again


def test_horovod_hooks_at_size_one_send_every_gradient_through_horovod(monkeypatch):
    """At size 1 Horovod's optimizer registers no hooks; the horovod-hooks variant builds it with them (as
    for an elastic job of one worker), and leaves HOROVOD_ELASTIC as it found it."""
    hvd = pytest.importorskip("horovod.torch", reason="Horovod is part of the course's environment")
    import os
    import torch
    from ddlab.training import wrapper_cost_torch as wct
    hvd.init()
    net = torch.nn.Linear(4, 3)
    monkeypatch.delenv("HOROVOD_ELASTIC", raising=False)
    plain = wct.horovod_optimizer(hvd, torch.optim.SGD(net.parameters(), lr=0.1), net.named_parameters(), hooks=False)
    hooked = wct.horovod_optimizer(hvd, torch.optim.SGD(net.parameters(), lr=0.1), net.named_parameters(), hooks=True)
    assert hvd.size() == 1 and len(plain._requires_update) == 0 and len(hooked._requires_update) == 2
    assert "HOROVOD_ELASTIC" not in os.environ
    monkeypatch.setenv("HOROVOD_ELASTIC", "0")
    other = torch.nn.Linear(4, 3)                  # hooks on a net of its own: one hook per gradient
    wct.horovod_optimizer(hvd, torch.optim.SGD(other.parameters(), lr=0.1), other.named_parameters(), hooks=True)
    assert os.environ["HOROVOD_ELASTIC"] == "0"
    net(torch.randn(2, 4)).sum().backward()
    hooked.step()                                  # the gradients went through Horovod's queue and came back
    assert not hooked._handles and all(p.grad is not None for p in net.parameters())


def test_wrapper_cost_on_the_cpu_times_horovod_with_its_hooks():
    pytest.importorskip("horovod.torch", reason="Horovod is part of the course's environment")
    if not one_gpu.availability("torch", "horovod")[0]:
        pytest.skip("Horovod is installed without PyTorch support here")
    assert one_gpu.available_wrappers()[-2:] == ["horovod", "horovod-hooks"]
    res = one_gpu.wrapper_cost(models=["mlp-small"], batches=[16], device="cpu", precision="fp32", steps=2,
                               repeats=2, wrappers=["horovod", "horovod-hooks"])
    assert [r["wrapper"] for r in res.rows] == ["plain", "horovod", "horovod-hooks"]
    assert all(r["step_ms_median"] > 0 for r in res.rows)
    assert one_gpu.HOROVOD_SIZE_ONE in res.notes and one_gpu.HOROVOD_HOOKS in res.notes


def test_wrapper_cost_without_a_gpu_is_one_line(monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)     # no visible GPU, on any machine
    with pytest.raises(one_gpu.ExperimentError, match="needs one, and PyTorch sees none"):
        one_gpu.wrapper_cost(wrappers=["ddp"])


@pytest.mark.parametrize("kwargs,match", [({"models": ["resnet"]}, "unknown model"), ({"batches": [0]}, "positive"),
                                          ({"wrappers": ["fsdp"]}, "unknown wrapper")])
def test_wrapper_cost_bad_arguments(kwargs, match):
    with pytest.raises(RunSpecError, match=match):
        one_gpu.wrapper_cost(**kwargs)


def test_beside_the_recorded_two_gpu_runs(monkeypatch):
    fake = FakeLaunches(step(0.9, params=242_762))
    monkeypatch.setattr(runs.launch, "run", fake)
    res = one_gpu.single_gpu_throughput(models=["mlp-small"], precisions=["bf16"], repeats=1)
    t = one_gpu.beside_recorded(res)
    row = t.rows[0]
    assert row["here"] == pytest.approx(512 / 0.9 * 1000) and row["one"] > 0 and row["two"] > row["one"]
    assert row["ratio"] == pytest.approx(row["here"] / row["one"])
    assert "recorded on 2x NVIDIA H200" not in t.title and "2x NVIDIA H200" in t.title
    with pytest.raises(ValueError, match="needs a one-gpu result"):
        one_gpu.beside_recorded(type(res)("scaling", []))
