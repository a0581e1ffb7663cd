"""ddlab.training.gpu_scaling: 1 -> 2 -> 4 -> 8 GPUs, weak and strong, under NCCL paths, over the plain
one-GPU run (launches faked as on a machine of 8 GPUs), and for real on 1, 2 and 4 CPU processes (gloo)."""
import os

import pytest

from ddlab.training import data, gpu_scaling, recording, runs
from ddlab.training.runspec import RunSpec, RunSpecError

from _experiment_fakes import FakeLaunches, script_result


def test_weak_sweep_on_eight_gpus_interleaves_and_divides_by_the_plain_run(monkeypatch, tmp_path):
    base = RunSpec.for_device("cuda", "cnn", launcher="ddp", repeats=3)
    order = [(1, 1), (1, 1)] + [(w, 1) for w in (2, 4, 8) for _ in ("default", "shm")]
    outcomes, nprocs = [], []
    for k in range(3):          # three rounds, a drift of +1 % a round
        outcomes += [script_result(v * (1 + k / 100), workers=w, batch_per_worker=512) for (w, _), v in
                     zip(order, [1000, 900, 1900, 1000, 3800, 1500, 7600, 1700])]
    fake = FakeLaunches(*outcomes)
    monkeypatch.setattr(data, "require", lambda: str(tmp_path))
    monkeypatch.setattr(runs.launch, "run",
                        lambda argv, nproc, **kw: nprocs.append(nproc) or fake(argv, nproc=nproc, **kw))
    partials = []
    got = gpu_scaling.scaling_sweep(base, workers=(1, 2, 4, 8), mode="weak", paths=("default", "shm"),
                                    partial=partials.append)
    assert nprocs == [1, 1, 2, 2, 4, 4, 8, 8] * 3          # every configuration once per round
    assert len(partials) == 2 and "partial" in " ".join(partials[0]["default"].notes)
    res = got["default"]
    assert [r["workers"] for r in res.rows] == [1, 1, 2, 4, 8]
    assert [r["launcher"] for r in res.rows] == ["none", "ddp", "ddp", "ddp", "ddp"]
    plain, one, two, four, eight = res.rows
    assert plain["speedup"] == pytest.approx(1.0) and one["speedup"] == pytest.approx(0.9)
    assert eight["speedup"] == pytest.approx(7.6) and eight["efficiency"] == pytest.approx(0.95)
    assert eight["images_per_s_runs"] == pytest.approx([7600, 7676, 7752])
    assert got["shm"].rows[-1]["speedup"] == pytest.approx(1.7) and got["shm"].rows[0] == plain
    assert res.config["workers"] == [1, 2, 4, 8] and res.config["order"] == "interleaved"
    assert res.config["baseline_images_per_s"] == pytest.approx(1010)
    # the plain run is one eager process; the others are DDP on 2, 4, 8 workers, NCCL's log kept
    assert "--cuda-graph" in fake.argvs[0] and fake.argvs[0][fake.argvs[0].index("--cuda-graph") + 1] == "off"
    assert fake.envs[2]["NCCL_DEBUG"] == "INFO" and fake.envs[3].get("NCCL_P2P_LEVEL") == "LOC"
    recording.save(res, str(tmp_path / "scaling.json"))          # the recording's schema holds
    assert recording.load(str(tmp_path / "scaling.json")).rows[-1]["workers"] == 8


def test_strong_sweep_splits_one_global_batch(monkeypatch, tmp_path):
    base = RunSpec.for_device("cuda", "mlp-small", launcher="horovod", repeats=1)
    cfgs = gpu_scaling.configs(base, (1, 2, 4, 8), "strong", ("default",), global_batch=512)
    assert [(s.launcher, s.workers, s.batch) for _, s, _ in cfgs] == [
        ("none", 1, 512), ("horovod", 1, 512), ("horovod", 2, 256), ("horovod", 4, 128), ("horovod", 8, 64)]
    fake = FakeLaunches(*[script_result(v, workers=w, batch_per_worker=512 // w, global_batch=512)    # as the script
                          for v, w in ((100, 1), (95, 1), (180, 2), (300, 4), (400, 8))])             # reports it
    monkeypatch.setattr(data, "require", lambda: str(tmp_path))
    monkeypatch.setattr(runs.launch, "run", fake)
    res = gpu_scaling.scaling_sweep(base, mode="strong", global_batch=512)["default"]
    assert res.name == "strong-scaling" and res.rows[-1]["speedup"] == pytest.approx(4.0)
    assert gpu_scaling.planned_launches((1, 2, 4, 8), ("default", "shm", "socket"), 3) == (2 + 9) * 3


def test_a_failed_launch_keeps_its_row_and_the_others_run(monkeypatch, tmp_path):
    base = RunSpec.for_device("cuda", "cnn", launcher="ddp", repeats=1)
    fake = FakeLaunches(script_result(100), script_result(90), script_result(190, workers=2), "rank 3 died")
    monkeypatch.setattr(data, "require", lambda: str(tmp_path))
    monkeypatch.setattr(runs.launch, "run", fake)
    res = gpu_scaling.scaling_sweep(base, workers=(1, 2, 4))["default"]
    assert res.rows[2]["speedup"] == pytest.approx(1.9) and res.rows[3]["workers"] == 4 and res.rows[3]["error"]


@pytest.mark.parametrize("kw", [dict(workers=(1,)), dict(mode="both"), dict(mode="strong", global_batch=6),
                                dict(paths=("shm",), device="cpu")])
def test_sweeps_that_cannot_run_are_refused(kw):
    device = kw.pop("device", "cuda")
    base = RunSpec.for_device(device, "cnn", launcher="ddp")
    with pytest.raises(RunSpecError):
        gpu_scaling.configs(base, kw.pop("workers", (1, 2, 4)), **kw)
    with pytest.raises(RunSpecError):
        gpu_scaling.configs(base.with_(launcher="none"), (1, 2))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_real_gloo_sweep_on_one_and_two_cpu_processes():
    """The sweep with real launches: the plain run, then DDP on 1 and 2 CPU processes over gloo, the
    global batch split between them (more workers: test_a_failed_launch_keeps_its_row_and_the_others_run
    with faked launches; notebook 1 trains DDP on 4 CPU processes for real)."""
    if data.missing():
        pytest.skip(data.missing())
    base = RunSpec(model="mlp-small", launcher="ddp", batch=8, steps=4, warmup_steps=1, device="cpu",
                   test_samples=200, timeout=240, repeats=1)
    env_threads = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"      # one thread per process on a small machine
    try:
        got = gpu_scaling.scaling_sweep(base, workers=(1, 2), mode="strong", global_batch=16)
    finally:
        if env_threads is None:
            os.environ.pop("OMP_NUM_THREADS")
        else:
            os.environ["OMP_NUM_THREADS"] = env_threads
    res = got["default"]
    assert [(r["workers"], r.get("error")) for r in res.rows] == [(1, None), (1, None), (2, None)]
    two = res.runs[res.rows[-1]["run"]]
    assert two["workers"] == 2 and two["batch_per_worker"] == 8 and two["ranks_agree"] is True
    assert two["backend"] == "gloo" and len(two["rank_checksums"]) == 2
    assert res.rows[0]["speedup"] == pytest.approx(1.0) and all(r["speedup"] > 0 for r in res.rows)
