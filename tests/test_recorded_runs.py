"""The recorded runs the step model is checked against (ddlab.cost.recorded_runs) and the
measured inputs it takes from a step profile."""
from ddlab.cost import recorded_runs as rr
from ddlab.cost.step_model import gradient_buckets


def test_the_recorded_set():
    rec = rr.recorded_points()
    assert {p.launcher for p in rec.points} >= {"ddp", "ddp-graph", "horovod"}
    assert set(rec.fits) == {"default", "shm", "socket"}
    assert rec.missing == []                            # every launcher x model is recorded
    assert any(p.launcher == "horovod" and p.model == "mlp-large" for p in rec.points)
    assert any(p.launcher == "horovod" and p.model == "mlp-small" for p in rec.points)
    assert rec.profiles and rec.channels == {"default": 24, "shm": 4, "socket": 2}
    # every model's GPU time comes from the two-GPU machine's own graph run; the one-GPU graph runs of
    # another machine with the same GPU agree with it
    assert rec.device_elsewhere == {}
    assert set(rec.device_check) == {"cnn", "wide", "mlp-small", "mlp-large"}
    assert all(abs(r - 1) < 0.05 for r in rec.device_check.values())
    # overlap is not free: without the all-reduce's share of the SMs the captured wide NVLink run is
    # predicted faster than with it
    wide = next(p for p in rec.points if (p.launcher, p.model, p.path) == ("ddp-graph", "wide", "default"))
    free = rr.predict_point(wide, rec.fits, profiles=rec.profiles)
    shared = rr.predict_point(wide, rec.fits, profiles=rec.profiles, channels=rec.channels)
    assert shared.speedup < free.speedup
    # counting FLOPs instead puts the wide model's big gradient near the end of the backward pass
    assert gradient_buckets("wide")[0].ready > 0.8 > 0.6 > rec.profiles["wide"].ready["dense1"]


def test_a_run_not_recorded_is_named_missing_not_invented(tmp_path, monkeypatch):
    """Without Horovod's mlp-large recording its rows are not predicted, and the set says what is missing."""
    import os
    import shutil
    from ddlab.base import reference
    shutil.copytree(reference.REFERENCE_DIR, tmp_path / "ref")
    monkeypatch.setattr(reference, "REFERENCE_DIR", str(tmp_path / "ref"))
    os.remove(tmp_path / "ref" / "experiments" / "nccl-paths-torch-horovod-mlp-large.json")
    rec = rr.recorded_points()
    assert rec.missing == [("horovod", "mlp-large")]
    assert not any(p.launcher == "horovod" and p.model == "mlp-large" for p in rec.points)
    assert any(p.launcher == "horovod" and p.model == "mlp-small" for p in rec.points)
    from ddlab.cost import validation
    assert "Not recorded (no prediction checked): mlp-large (horovod)." in " ".join(validation.validate(rec).notes)


def test_measured_inputs_from_a_step_profile():
    from ddlab.training.step_profile import StepProfile
    prof = StepProfile("wide", 512, "GPU", "bf16", 1e-3, 3e-3, 1e-3, {"dense2": 0.0, "dense1": 0.3, "conv2": 0.9,
                                                                     "conv1": 1.0}, 3, sm_count=132)
    # the profile's SM count turns a path's NCCL channels into the all-reduce's share of the GPU
    assert rr.measured_inputs("wide", 512, {"wide": prof}, 24) == {"profile": prof, "comm_sm_share": 24 / 132}
    assert rr.measured_inputs("wide", 256, {"wide": prof}, None) == {}
    assert rr.measured_inputs("cnn", 512, {"wide": prof}, 24) == {}
    # a profile belongs to the device it was measured on
    assert rr.measured_inputs("wide", 512, {"wide": prof}, 24, device="GPU") == {"profile": prof,
                                                                               "comm_sm_share": 24 / 132}
    assert rr.measured_inputs("wide", 512, {"wide": prof}, 24, device="cpu") == {}


def test_runs_at_other_batches_join_the_set_only_from_the_sweeps_machine(tmp_path, monkeypatch):
    """A batch sweep recording (``-b<N>``) made on the sweeps' machine becomes points at its batch;
    one made on another machine is named in ``elsewhere`` with that machine and predicts nothing."""
    import json
    import shutil
    from ddlab.base import reference
    rec = rr.recorded_points()
    at_128 = [p for p in rec.points if p.batch == 128]
    assert {(p.launcher, p.model) for p in at_128} == {("ddp", "mlp-small"), ("ddp", "mlp-large")}
    assert {p.path for p in at_128} == {"default", "shm", "socket"}
    data = reference.load("experiments", "nccl-paths-torch-ddp-mlp-small-b128")
    one = next(r for r in data["rows"] if r["workers"] == 1 and not r.get("plain"))
    small = [p for p in at_128 if p.model == "mlp-small"]
    assert all(abs(p.compute_s - 128 / one["images_per_s"]) < 1e-12 for p in small)
    names = dict(rec.elsewhere)               # the H100 pair's sweeps at the same batches, kept under its name
    assert "nccl-paths-torch-ddp-mlp-small-b128" not in names
    assert names["nccl-paths-torch-ddp-mlp-small-b2048-2xh100-80gb-hbm3-nv18"] == "2x NVIDIA H100 80GB HBM3, NV18"
    # the same runs said to come from another machine leave the set and are named with that machine
    shutil.copytree(reference.REFERENCE_DIR, tmp_path / "ref")
    monkeypatch.setattr(reference, "REFERENCE_DIR", str(tmp_path / "ref"))
    moved = tmp_path / "ref" / "experiments" / "nccl-paths-torch-ddp-mlp-small-b128.json"
    data["provenance"].update(machine="2x Other GPU, NV4", gpu_model="Other GPU")
    moved.write_text(json.dumps(data))
    other = rr.recorded_points()
    assert len(other.points) == len(rec.points) - len(small)
    assert not any(p.batch == 128 and p.model == "mlp-small" for p in other.points)
    assert dict(other.elsewhere)["nccl-paths-torch-ddp-mlp-small-b128"] == "2x Other GPU, NV4"


def test_a_second_machines_sweeps_make_a_set_of_that_machines_runs_only(tmp_path, monkeypatch):
    """Sweeps recorded on another machine (a stand-in: the H200 sweeps relabelled as the H100 pair's)
    give a set of the runs recorded there alone: the H100 batch sweeps and strong-scaling run become its
    points; the H200 runs are named in ``elsewhere``, not counted as missing."""
    import json
    import shutil
    from ddlab.base import reference
    shutil.copytree(reference.REFERENCE_DIR, tmp_path / "ref")
    monkeypatch.setattr(reference, "REFERENCE_DIR", str(tmp_path / "ref"))
    h100 = json.loads((tmp_path / "ref" / "experiments" /
                       "nccl-paths-torch-ddp-mlp-small-b128-2xh100-80gb-hbm3-nv18.json").read_text())
    sweeps = json.loads((tmp_path / "ref" / "allreduce" / "h200x2.json").read_text())
    sweeps["provenance"].update({k: h100["provenance"][k] for k in ("gpu_model", "gpu_count", "driver", "nccl")})
    for s in sweeps["sweeps"]:
        if isinstance(s.get("provenance"), dict):
            s["provenance"].update({k: h100["provenance"][k] for k in ("gpu_model", "gpu_count", "driver", "nccl")})
    (tmp_path / "ref" / "allreduce" / "stand-in-h100.json").write_text(json.dumps(sweeps))
    rec = rr.recorded_points(sweeps="stand-in-h100")
    assert rec.machine.startswith("2x NVIDIA H100 80GB HBM3")
    assert {(p.launcher, p.model, p.batch) for p in rec.points} == {
        ("ddp", "mlp-small", 128), ("ddp", "mlp-small", 2048), ("ddp", "mlp-large", 128), ("ddp", "mlp-large", 2048),
        ("ddp strong", "mlp-small", 2), ("ddp strong", "mlp-small", 16), ("ddp strong", "mlp-small", 64)}
    names = dict(rec.elsewhere)
    assert names["nccl-paths-torch-ddp-cnn"].startswith("2x NVIDIA H200")
    assert names["nccl-paths-torch-horovod-mlp-small"].startswith("2x NVIDIA H200")
    assert rec.missing == []
    assert names["nccl-paths-torch-horovod-mlp-large"].startswith("2x NVIDIA H200")


def test_the_wait_for_the_slower_rank_comes_from_the_one_gpu_runs_step_times():
    from types import SimpleNamespace
    from ddlab.cost.step_model import slower_rank_wait
    res = SimpleNamespace(runs=[{"step_times_ms": [1.0, 2.0]}, {"step_times_ms": [1.0, 1.0, 4.0]},
                                {"step_times_ms": [3.0, 3.0]}, {"no step times": True}])
    got = rr.rank_wait(res, {"runs": [0, 1, 2, 3]}, 2)
    waits = sorted(slower_rank_wait(x, 2) for x in ([1.0, 2.0], [1.0, 1.0, 4.0], [3.0, 3.0]))
    assert got["rank_wait_s"] == waits[1] * 1e-3                     # the median over the runs, ms -> s
    assert "3 run(s) of 2/3 steps" in got["rank_wait_source"] and "2 independent draws" in got["rank_wait_source"]
    assert rr.rank_wait(res, {"runs": [3]}, 2) == {}                   # no step times kept: nothing claimed
    assert rr.rank_wait(res, {}, 2) == {} and rr.rank_wait(res, {"runs": [9]}, 2) == {}
    # every recorded run on the course's machine has it; a prediction adds it only when asked, and then
    # names where it came from
    rec = rr.recorded_points()
    assert all(p.rank_wait_s > 0 and p.rank_wait_source for p in rec.points)
    p = next(p for p in rec.points if p.launcher == "ddp strong")
    plain = rr.predict_point(p, rec.fits, rec.wrappers()[p.framework])
    assert plain.term("slower rank").seconds == 0 and plain.term("slower rank").basis == "assumed"
    pred = rr.predict_point(p, rec.fits, rec.wrappers()[p.framework], rank_wait=True)
    t = pred.term("slower rank")
    assert (t.seconds, t.basis, t.source) == (p.rank_wait_s, "measured", p.rank_wait_source)
    assert pred.total_s == plain.total_s + p.rank_wait_s          # a serial (host-bound) step


def test_a_batch_recording_kept_under_its_machines_name_is_still_that_machines_point(tmp_path, monkeypatch):
    """``adopt_results.py --keep-other-machine`` moved the H100 pair's ``-b<N>`` recordings to
    ``-b<N>-<machine tag>`` when the course machine's took their names: each is still a batch variant at N, a
    point of its own machine's set and named elsewhere in the course's; without the course machine's
    recording at home, the same runs give the same H100 table."""
    import shutil
    from ddlab.base import reference
    from ddlab.cost import validation
    from ddlab.training import recording
    assert recording.batch_variants("nccl-paths", "torch", "ddp", "mlp-small") == \
        [(128, "b128"), (128, "b128-2xh100-80gb-hbm3-nv18"), (2048, "b2048"), (2048, "b2048-2xh100-80gb-hbm3-nv18")]
    names = dict(rr.recorded_points().elsewhere)
    assert names["nccl-paths-torch-ddp-mlp-small-b128-2xh100-80gb-hbm3-nv18"] == "2x NVIDIA H100 80GB HBM3, NV18"
    before = [t.to_dict()["rows"] for t in validation.held_out_other_machines()]
    assert any(r["batch"] == 128 for r in before[0])
    shutil.copytree(reference.REFERENCE_DIR, tmp_path / "ref")
    exp = tmp_path / "ref" / "experiments"
    for b in ("b128", "b2048"):               # the H100 recordings back at their home names, as before adoption
        for model in ("mlp-small", "mlp-large"):
            home = exp / f"nccl-paths-torch-ddp-{model}-{b}.json"
            (exp / f"nccl-paths-torch-ddp-{model}-{b}-2xh100-80gb-hbm3-nv18.json").replace(home)
    monkeypatch.setattr(reference, "REFERENCE_DIR", str(tmp_path / "ref"))
    assert recording.batch_variants("nccl-paths", "torch", "ddp", "mlp-small") == [(128, "b128"), (2048, "b2048")]
    assert [t.to_dict()["rows"] for t in validation.held_out_other_machines()] == before
