"""ddlab.training.experiments.strong_scaling: a global batch on one worker, then split over
several, as the field reports ran it (launches faked: no GPU or training needed)."""
import pytest

from _experiment_fakes import FakeLaunches, script_result
from ddlab.training import experiments as ex, runs
from ddlab.training.runspec import RunSpec, RunSpecError


def test_each_global_batch_runs_on_one_worker_then_split_in_interleaved_rounds(monkeypatch):
    outcomes = []
    for one, two in ((100.0, 80.0), (98.0, 90.0), (102.0, 85.0)):     # three rounds
        for g in (8, 32):
            # the plain one-GPU run (no wrapper), DDP's one worker, then the batch split over two
            outcomes += [script_result(one, global_batch=g), script_result(0.9 * one, global_batch=g),
                         script_result(two, workers=2, global_batch=g)]
    fake = FakeLaunches(*outcomes)
    monkeypatch.setattr(runs.launch, "run", fake)
    spec = RunSpec.for_device("cuda", "mlp-small", launcher="ddp", repeats=3)
    res = ex.strong_scaling(spec, global_batches=(32, 8), path="shm")
    assert len(fake.argvs) == 18 and len(res.rows) == 6
    batches = [a[a.index("--batch-size") + 1] for a in fake.argvs]
    assert batches == ["8", "8", "4", "32", "32", "16"] * 3      # each round: each global batch, then split in two
    assert [a[a.index("--launcher") + 1] for a in fake.argvs[:3]] == ["none", "ddp", "ddp"]
    # the split runs use the path asked for; the one-GPU runs have no all-reduce
    assert fake.envs[2].get("NCCL_P2P_LEVEL") == "LOC" and "NCCL_P2P_LEVEL" not in fake.envs[1]
    assert res.config["order"] == "interleaved" and any(n.startswith("the repeats were interleaved in 3")
                                                        for n in res.notes)
    plain, one, two = res.rows[:3]
    assert plain["plain"] and (plain["workers"], plain["global_batch"]) == (1, 8)
    assert (one["workers"], one["batch_per_worker"], one["global_batch"]) == (1, 8, 8)
    assert (two["workers"], two["batch_per_worker"], two["global_batch"]) == (2, 4, 8)
    # over the plain run of the same global batch; DDP's one worker has its own ratio
    assert plain["speedup"] == 1.0 and two["speedup"] == pytest.approx(85.0 / 100.0)
    assert one["speedup"] == pytest.approx(0.9)
    assert (two["speedup_min"], two["speedup_max"]) == (pytest.approx(0.8), pytest.approx(0.9))
    assert res.name == "strong-scaling" and res.config["global_batches"] == [8, 32]
    text = res.table()
    assert "global batch 8, 32" in text and "0.85x" in text and "batch/worker" in text


def test_several_paths_share_the_one_worker_runs_of_each_round(monkeypatch):
    outcomes = []
    for one, default, socket in ((100.0, 80.0, 50.0), (98.0, 90.0, 60.0), (102.0, 85.0, 55.0)):
        for g in (4, 128):
            outcomes += [script_result(one, global_batch=g), script_result(one, global_batch=g),
                         script_result(default, workers=2, global_batch=g),
                         script_result(socket, workers=2, global_batch=g)]
    fake = FakeLaunches(*outcomes)
    monkeypatch.setattr(runs.launch, "run", fake)
    spec = RunSpec.for_device("cuda", "mlp-small", launcher="ddp", repeats=3)
    got = ex.strong_scaling_paths(spec, global_batches=(128, 4), paths=("default", "socket"))
    assert len(fake.argvs) == 24 and list(got) == ["default", "socket"]     # 8 a batch, not 10
    batches = [a[a.index("--batch-size") + 1] for a in fake.argvs]
    assert batches == ["4", "4", "2", "2", "128", "128", "64", "64"] * 3
    assert fake.envs[2].get("NCCL_P2P_DISABLE") is None and fake.envs[3].get("NCCL_P2P_DISABLE") == "1"
    default, socket = got["default"], got["socket"]
    # both hold the same one-GPU runs (plain and one worker); each its own path's
    assert default.rows[0]["images_per_s"] == socket.rows[0]["images_per_s"] == 100.0
    assert default.rows[2]["speedup"] == pytest.approx(0.85) and socket.rows[2]["speedup"] == pytest.approx(0.55)
    assert default.config["path"] == "default" and socket.config["path"] == "socket"
    assert [r["workers"] for r in socket.runs] == [1, 1, 1, 1, 1, 1, 2, 2, 2] * 2
    assert any("shared with the 2-worker runs over path(s) socket" in n for n in default.notes)
    assert any("running every global batch plain on one GPU, on 1 worker and on 2 over each path (default, socket) "
               "once" in n for n in socket.notes)
    assert "paths=['default', 'socket']" in socket.provenance["command"]
    # one path alone is strong_scaling, with its notes and command as before
    monkeypatch.setattr(runs.launch, "run", FakeLaunches(*[script_result(100.0), script_result(100.0),
                                                            script_result(90.0, workers=2)] * 3))
    one = ex.strong_scaling(spec, global_batches=(8,), path="socket")
    assert not any("shared" in n for n in one.notes) and "path='socket'" in one.provenance["command"]


def test_a_failed_launch_fails_the_strong_scaling_experiment(monkeypatch):
    monkeypatch.setattr(runs.launch, "run", FakeLaunches(script_result(100.0, global_batch=8),
                                                         script_result(100.0, global_batch=8), "a worker crashed"))
    with pytest.raises(runs.launch.LaunchError, match="launch failed"):   # the launch's own error, as before
        ex.strong_scaling(RunSpec.for_device("cuda", "mlp-small", launcher="ddp", repeats=3), global_batches=(8,))


@pytest.mark.parametrize("kwargs,match", [
    (dict(global_batches=(5,)), "split evenly"),
    (dict(global_batches=(1,)), "split evenly"),
    (dict(workers=1), "2 or more workers"),
    (dict(path="shm", device="cpu"), "NCCL setting"),
    (dict(path="pigeon"), "pigeon"),
])
def test_strong_scaling_refuses_what_it_cannot_run(kwargs, match):
    with pytest.raises(RunSpecError, match=match):
        ex.strong_scaling(RunSpec.for_device("cpu", "mlp-small", launcher="ddp"), **kwargs)
