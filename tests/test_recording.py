"""ddlab.training.recording: recordings are loaded with their run description, and the GPU set is recorded
with the live defaults and repeats, each result written as soon as it exists."""
import pytest

from _experiment_fakes import fake_paths_result
from ddlab.system import frameworks
from ddlab.recording import sets as recording_sets
from ddlab.training import experiments, recording, runs
from ddlab.base import reference
from ddlab.training.runspec import RunSpec


def test_every_committed_recording_carries_a_run_description():
    from ddlab.course import convergence_sweep as cs
    for name in reference.names(recording.REFERENCE_KIND):
        if name == cs.RECORDED_NAME:      # a sweep of many runs: each run names its own command
            sweep = cs.load_recorded(name)
            assert sweep.runs and len(sweep.runs) == sum(r["repeats"] for r in sweep.rows), name
            assert all("train/fmnist_torch.py" in r["provenance"]["command"] and "--device cuda" in
                       r["provenance"]["command"] for r in sweep.runs), name
            continue
        res = recording.ExperimentResult.from_dict(reference.load(recording.REFERENCE_KIND, name), "recorded")
        if res.name == "plain-baselines":     # many plain runs, one per configuration: each names its own command
            assert res.runs and len(res.runs) == sum(r["repeats"] for r in res.rows), name
            assert all("train/fmnist_torch.py --launcher none" in r["provenance"]["command"] and "--device cuda" in
                       r["provenance"]["command"] for r in res.runs), name
            continue
        assert res.spec is not None and res.spec.device == "cuda", name
        assert (res.live_default_note() is None) == (res.live_default_differences() == {}), name


def test_only_live_results_are_recorded(tmp_path, monkeypatch):
    monkeypatch.setattr(reference, "REFERENCE_DIR", str(tmp_path))
    res = fake_paths_result()
    path = recording.save_reference(res, recording.reference_name("nccl-paths", "torch", "ddp", "mlp-small"))
    assert path.endswith("experiments/nccl-paths-torch-ddp-mlp-small.json")
    back = recording.load_recorded("nccl-paths", "torch", "ddp", "mlp-small")
    assert back.source == "recorded" and back.rows == res.rows and back.provenance == res.provenance
    res.source = "recorded"
    with pytest.raises(runs.ExperimentError, match="only a live result"):
        recording.save_reference(res, "y")


@pytest.mark.parametrize("gpus", [0, 1])
def test_record_gpu_set_skips_what_this_machine_cannot_run(tmp_path, capsys, monkeypatch, gpus):
    monkeypatch.setattr(frameworks, "gpu_count", lambda framework="torch": gpus)      # on any machine
    monkeypatch.setattr(frameworks, "availability", lambda framework, launcher: (True, ""))
    done = recording_sets.record_gpu_set(str(tmp_path), sections=("ddp",), models=("mlp-small",), steps=4,
                                    warmup_steps=1, batch=16)
    assert done["nccl-paths-torch-ddp-mlp-small"] == f"skipped: needs 2 GPUs, torch sees {gpus}"
    assert "skipped: needs 2 GPUs" in capsys.readouterr().out and list(tmp_path.iterdir()) == []


def test_record_gpu_set_runs_the_two_gpu_comparisons_before_the_slow_perf_options(tmp_path, monkeypatch):
    monkeypatch.setattr(frameworks, "gpu_count", lambda framework="torch": 2)
    monkeypatch.setattr(frameworks, "availability", lambda framework, launcher: (True, ""))
    calls = []

    def paths(base, **kw):
        calls.append((base.launcher, base.model, base.timeout, kw["progress"], base))
        return fake_paths_result()

    def perf(base, **kw):
        calls.append(("perf", base.model, base.timeout, kw["progress"], base))
        raise runs.ExperimentError("every option failed")
    monkeypatch.setattr(experiments, "nccl_path_comparison", paths)
    monkeypatch.setattr(experiments, "performance_options", perf)
    done = recording_sets.record_gpu_set(str(tmp_path), models=("cnn",), timeout=90, progress=print)
    assert [c[:3] for c in calls] == [("ddp", "cnn", 90), ("horovod", "cnn", 90), ("perf", "cnn", 90)]
    assert all(c[3] is print for c in calls)
    # the live defaults, repeated: a recording is the same experiment as a live run
    for c in calls:
        base = c[4]
        assert base.sizes() == RunSpec.for_device("cuda", "cnn").sizes() and base.repeats >= 3
    assert calls[0][4].workers == 2
    assert done["perf-options-torch-none-cnn"] == "ExperimentError: every option failed"
    calls.clear()
    recording_sets.record_gpu_set(str(tmp_path), sections=("perf", "ddp"), models=("cnn",))
    assert [c[0] for c in calls] == ["perf", "ddp"]   # an explicit order is kept
    calls.clear()
    recording_sets.record_gpu_set(str(tmp_path), sections=("ddp",), models=("wide",), graph=True)
    assert [(c[0], c[4].cuda_graph) for c in calls] == [("ddp", None), ("ddp", "on")]
    assert (tmp_path / "nccl-paths-torch-ddp-wide-graph.json").exists()
    with pytest.raises(ValueError, match="unknown section"):
        recording_sets.record_gpu_set(str(tmp_path), sections=("nvlink",))


def test_record_gpu_set_reports_a_failure_and_goes_on(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(frameworks, "gpu_count", lambda framework="torch": 2)
    monkeypatch.setattr(frameworks, "availability", lambda framework, launcher: (True, ""))
    calls = []

    def fake(base, **kw):
        calls.append(base.model)
        if base.model == "cnn":
            raise runs.launch.LaunchError("torchrun launch of 2 process(es) failed with exit code 1.")
        return fake_paths_result()
    monkeypatch.setattr(experiments, "nccl_path_comparison", fake)
    done = recording_sets.record_gpu_set(str(tmp_path), sections=("ddp",), models=("cnn", "wide"))
    assert calls == ["cnn", "wide"]
    assert done["nccl-paths-torch-ddp-cnn"].startswith("LaunchError: torchrun launch")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nccl-paths-torch-ddp-wide.json", "scaling-torch-ddp-wide.json"]
    out = capsys.readouterr().out
    assert "summary" in out and "185" in out and "LaunchError" in out


def test_use_hardware_label_names_the_machine_by_its_hardware(monkeypatch):
    from ddlab.system import machine_name
    monkeypatch.setattr(machine_name, "this_machine", lambda: ("2x NVIDIA H200, NV18", "2xh200-nv18"))
    monkeypatch.setenv("DDLAB_MACHINE", "")     # recorded first, so that monkeypatch removes what the code sets
    monkeypatch.delenv("DDLAB_MACHINE")
    assert recording.use_hardware_label() == "2x NVIDIA H200, NV18"
    import os
    assert os.environ["DDLAB_MACHINE"] == "2x NVIDIA H200, NV18"


def test_strong_scaling_is_written_after_each_global_batch_and_merged(tmp_path, monkeypatch):
    from ddlab.recording import sets as recording_sets
    from ddlab.training import experiments, recording
    from ddlab.training.results import ExperimentResult
    from ddlab.training.runspec import RunSpec
    calls = []

    def fake(base, global_batches, workers, paths, echo, progress):
        (g,) = global_batches
        (path,) = paths
        calls.append(g)
        if g == 128:
            raise RuntimeError("cut short")
        rows = [{"workers": 1, "global_batch": g, "images_per_s": 10.0 * g, "runs": [0]},
                {"workers": 2, "global_batch": g, "images_per_s": 9.0 * g, "runs": [1], "speedup": 0.9}]
        return {path: ExperimentResult("strong-scaling", rows, "live",
                                       {"command": f"strong_scaling(global_batches=[{g}], path={path!r})"},
                                       ["note"], {"global_batches": [g], "model": "mlp-small"},
                                       [{"global_batch": g, "workers": 1}, {"global_batch": g, "workers": 2}])}
    monkeypatch.setattr(experiments, "strong_scaling_paths", fake)
    written = []
    monkeypatch.setattr(recording_sets, "_write", lambda out, name, res, done: written.append((name, res)))
    spec = RunSpec.for_device("cpu", "mlp-small", launcher="ddp", workers=2)
    done = recording_sets.record_strong(str(tmp_path), spec, (32, 4, 128), path="shm")
    assert calls == [4, 32, 128] and len(written) == 2
    # the job is reported as failed, and what finished before the cut was written
    assert done["strong-scaling-torch-ddp-mlp-small-shm"] == "RuntimeError: cut short"
    name, res = written[-1]
    assert name == "strong-scaling-torch-ddp-mlp-small-shm"
    # the merged result written before the cut holds the two finished batches, each row pointing at its own runs
    assert [r["global_batch"] for r in res.rows] == [4, 4, 32, 32] and res.config["global_batches"] == [4, 32]
    assert [res.runs[i]["global_batch"] for r in res.rows for i in r["runs"]] == [4, 4, 32, 32]
    assert "global_batches=[4, 32]" in res.provenance["command"]


def test_strong_scaling_over_several_paths_writes_each_paths_file_after_each_batch(tmp_path, monkeypatch):
    from ddlab.recording import sets as recording_sets
    from ddlab.training import experiments
    from ddlab.training.results import ExperimentResult
    from ddlab.training.runspec import RunSpec
    calls = []

    def fake(base, global_batches, workers, paths, echo, progress):
        (g,) = global_batches
        calls.append((g, tuple(paths)))
        if g == 128:
            raise RuntimeError("cut short")
        return {p: ExperimentResult("strong-scaling", [{"workers": 1, "global_batch": g, "runs": [0]},
                                                        {"workers": 2, "global_batch": g, "runs": [1]}], "live",
                                    {"command": f"x(global_batches=[{g}])"}, [], {"global_batches": [g], "path": p},
                                    [{"global_batch": g}, {"global_batch": g, "path": p}]) for p in paths}
    monkeypatch.setattr(experiments, "strong_scaling_paths", fake)
    written = []
    monkeypatch.setattr(recording_sets, "_write", lambda out, name, res, done: written.append((name, res)))
    spec = RunSpec.for_device("cpu", "mlp-small", launcher="ddp", workers=2)
    done = recording_sets.record_strong(str(tmp_path), spec, (4, 32, 128), path=["default", "socket"])
    assert calls == [(4, ("default", "socket")), (32, ("default", "socket")), (128, ("default", "socket"))]
    assert [n for n, _ in written] == ["strong-scaling-torch-ddp-mlp-small-default",
                                       "strong-scaling-torch-ddp-mlp-small-socket"] * 2
    last = dict(written[-2:])
    assert last["strong-scaling-torch-ddp-mlp-small-socket"].config == {"global_batches": [4, 32], "path": "socket"}
    assert done["strong-scaling-torch-ddp-mlp-small-default+strong-scaling-torch-ddp-mlp-small-socket"] == \
        "RuntimeError: cut short"


def _strong_part(g, path="shm"):
    from ddlab.training.results import ExperimentResult
    return ExperimentResult("strong-scaling", [{"workers": 1, "global_batch": g, "runs": [0]},
                                               {"workers": 2, "global_batch": g, "runs": [1], "speedup": 0.9}],
                            "live", {"command": f"x(global_batches=[{g}])", "date": "2026-11-28"}, [],
                            {"global_batches": [g], "path": path}, [{"global_batch": g}, {"global_batch": g}])


def _record_strong_over(tmp_path, monkeypatch, earlier, batches):
    """record_strong for ``batches`` into tmp_path, where a file read as ``earlier`` is already saved."""
    from ddlab.recording import sets as recording_sets
    from ddlab.training import experiments
    from ddlab.training.runspec import RunSpec
    monkeypatch.setattr(experiments, "strong_scaling_paths",
                        lambda base, global_batches, workers, paths, echo, progress:
                        {p: _strong_part(global_batches[0], p) for p in paths})
    (tmp_path / "strong-scaling-torch-ddp-mlp-small-shm.json").write_text("{}")
    monkeypatch.setattr(recording_sets, "load", lambda path: earlier)
    written = []
    monkeypatch.setattr(recording_sets, "_write", lambda out, name, res, done: written.append((name, res)))
    spec = RunSpec.for_device("cpu", "mlp-small", launcher="ddp", workers=2)
    recording_sets.record_strong(str(tmp_path), spec, batches, path="shm")
    return written


def test_strong_scaling_joins_a_file_of_other_global_batches_already_in_the_folder(tmp_path, monkeypatch):
    from ddlab.recording import sets as recording_sets
    earlier = recording_sets.merge_strong([_strong_part(4), _strong_part(128)])
    written = _record_strong_over(tmp_path, monkeypatch, earlier, (32,))
    name, res = written[-1]
    # the batches run before (4 and 128) are kept, the new one joined between them, and the join is noted
    assert res.config["global_batches"] == [4, 32, 128]
    assert [r["global_batch"] for r in res.rows] == [4, 4, 32, 32, 128, 128]
    assert any(n.startswith(recording_sets.JOIN_NOTE_START) for n in res.notes)
    assert not list(tmp_path.glob("replaced-*"))


def test_strong_scaling_sets_aside_a_file_it_cannot_join(tmp_path, monkeypatch, capsys):
    written = _record_strong_over(tmp_path, monkeypatch, _strong_part(32), (32,))
    # the same global batch again: the new recording is written alone, the earlier file kept under another name
    assert written[-1][1].config["global_batches"] == [32]
    assert (tmp_path / "replaced-strong-scaling-torch-ddp-mlp-small-shm.json").read_text() == "{}"
    assert not (tmp_path / "strong-scaling-torch-ddp-mlp-small-shm.json").exists()
    assert "kept as" in capsys.readouterr().out


def test_strong_scaling_sets_aside_a_file_it_cannot_read(tmp_path, capsys):
    from ddlab.recording import sets as recording_sets
    (tmp_path / "replaced-strong-scaling-torch-ddp-mlp-small-shm.json").write_text("first")
    (tmp_path / "strong-scaling-torch-ddp-mlp-small-shm.json").write_text("cut write {")
    assert recording_sets._earlier(str(tmp_path), "strong-scaling-torch-ddp-mlp-small-shm") is None
    # kept under another name, an earlier set-aside file not overwritten (the next one gets a number)
    assert (tmp_path / "replaced-strong-scaling-torch-ddp-mlp-small-shm.json").read_text() == "first"
    assert (tmp_path / "replaced-strong-scaling-torch-ddp-mlp-small-shm-2.json").read_text() == "cut write {"
    assert not (tmp_path / "strong-scaling-torch-ddp-mlp-small-shm.json").exists()
    assert "cannot be read" in capsys.readouterr().out
    assert recording_sets._earlier(str(tmp_path), "strong-scaling-torch-ddp-mlp-small-shm") is None   # none there


def test_a_result_that_cannot_be_saved_is_kept_aside_and_the_next_still_runs(tmp_path, monkeypatch, capsys):
    import json
    from ddlab.base import schemas
    from ddlab.training import recording
    monkeypatch.setattr(frameworks, "gpu_count", lambda framework="torch": 2)
    monkeypatch.setattr(frameworks, "availability", lambda framework, launcher: (True, ""))
    monkeypatch.setattr(experiments, "nccl_path_comparison", lambda base, **kw: fake_paths_result())

    def no_validator(obj, name):      # as on a machine where jsonschema is not installed
        raise ModuleNotFoundError("No module named 'jsonschema'")
    monkeypatch.setattr(schemas, "first_error", no_validator)
    done = recording_sets.record_gpu_set(str(tmp_path), sections=("ddp",), models=("cnn", "wide"))
    # both models were measured; neither was saved as a recording, each was kept whole beside it
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "nccl-paths-torch-ddp-cnn.unsaved.json", "nccl-paths-torch-ddp-wide.unsaved.json",
        "scaling-torch-ddp-cnn.unsaved.json", "scaling-torch-ddp-wide.unsaved.json"]
    msg = done["nccl-paths-torch-ddp-wide"]
    assert msg.startswith("not saved: ModuleNotFoundError: No module named 'jsonschema'")
    assert str(tmp_path / "nccl-paths-torch-ddp-wide.unsaved.json") in msg
    kept = json.loads((tmp_path / "nccl-paths-torch-ddp-wide.unsaved.json").read_text())
    assert kept["rows"] == fake_paths_result().to_dict()["rows"]
    monkeypatch.undo()
    # once the cause is mended, the kept file loads as the recording it is
    assert recording.load(str(tmp_path / "nccl-paths-torch-ddp-wide.unsaved.json")).rows == kept["rows"]
    assert "not saved" in capsys.readouterr().out
