"""ddlab.course.case_studies: the tables of notebook 10 from recorded, cited and live results."""
import json

import numpy as np
import pytest

from ddlab.course import case_studies as cs
from ddlab.course import checks
from ddlab.cost import alpha_beta, recorded_runs, step_model, wrapper_cost
from ddlab.measure import p2p_diagnosis
from ddlab.base import reference
from ddlab.training.results import ExperimentResult


def test_second_gpu_table_puts_prediction_beside_the_recorded_median_and_spread():
    rec = recorded_runs.recorded_points()
    t = cs.second_gpu_table("ddp", recorded=rec)
    rows = t.to_dict()["rows"]
    ddp = [p for p in rec.points if p.launcher == "ddp"]
    assert len(rows) == len(ddp) and {r["model"] for r in rows} >= {"cnn", "wide"}
    for r in rows:
        assert r["ratio"] == pytest.approx(r["compute"] / r["allreduce"])
        assert r["error_pct"] == pytest.approx(100 * (r["predicted"] / r["measured"] - 1))
        lo, hi = (float(x) for x in r["spread"].split("-"))
        assert lo <= round(r["measured"], 2) + 0.01 and round(r["measured"], 2) - 0.01 <= hi
    # the same model all-reduces more slowly on a slower path: the ratio falls from default to socket
    wide = {r["path"]: r["ratio"] for r in rows if r["model"] == "wide"}
    assert wide["default"] > wide["shm"] > wide["socket"]
    assert "ratio: step (1) / all-reduce" in str(t) and "Wrapper cost" in " ".join(t.notes)


def test_second_gpu_table_rejects_a_launcher_without_recordings():
    with pytest.raises(ValueError, match="no recorded 2-GPU runs for launcher 'nobody'"):
        cs.second_gpu_table("nobody")


def _scaling_result(model="mlp-small", one=1000.0, two=1500.0):
    rows = [{"workers": 1, "images_per_s": one, "global_batch": 32, "speedup": 1.0, "repeats": 3,
             "speedup_min": 0.9, "speedup_max": 1.1},
            {"workers": 2, "images_per_s": two, "global_batch": 64, "speedup": two / one, "repeats": 3,
             "speedup_min": 1.4, "speedup_max": 1.6}]
    return ExperimentResult("scaling", rows, "live", {}, [], {"model": model, "launcher": "ddp"})


def test_predicted_vs_measured_uses_the_one_worker_step_and_the_fit():
    fit = alpha_beta.AlphaBeta(1e-3, 1e9)
    t = cs.predicted_vs_measured(_scaling_result(), fit)
    (row,) = t.to_dict()["rows"]
    compute = 32 / 1000.0
    # with what the recorded step profile of the model supplies: nothing at another batch than its
    # own, and a fit that is not the recorded machine's gets no channel count
    measured = recorded_runs.measured_inputs("mlp-small", 32, recorded_runs.recorded_points().profiles)
    assert measured == {}
    pred = step_model.predict_step("mlp-small", compute, fit, 2, batch=32, **measured)
    assert row["compute"] == pytest.approx(compute) and row["predicted"] == pytest.approx(pred.speedup)
    assert row["measured"] == pytest.approx(1.5) and row["spread"] == "1.40-1.60" and row["batch"] == 32
    # a slower link predicts a lower speedup for the same measurement
    slow = cs.predicted_vs_measured(_scaling_result(), alpha_beta.AlphaBeta(1e-3, 1e7)).to_dict()["rows"][0]
    assert slow["predicted"] < row["predicted"]


def test_a_gpu_step_profile_is_not_applied_to_a_cpu_run():
    # at the profile's own batch, a run on CPU processes is predicted without the GPU's profile
    rec = recorded_runs.recorded_points()
    fit = alpha_beta.AlphaBeta(1e-3, 1e6)      # slow: when the first bucket is ready shows in the step
    res = _scaling_result("mlp-large")
    for r in res.rows:
        r["global_batch"] *= 16                                   # 512 per worker, the profile's batch
    res.config["device"] = "cpu"
    (row,) = cs.predicted_vs_measured(res, fit, recorded=rec).to_dict()["rows"]
    plain = step_model.predict_step("mlp-large", 512 / 1000.0, fit, 2, batch=512)
    assert row["predicted"] == pytest.approx(plain.speedup)
    res.config.update(device="cuda", device_name=rec.profiles["mlp-large"].device)
    (gpu,) = cs.predicted_vs_measured(res, fit, recorded=rec).to_dict()["rows"]
    profiled = step_model.predict_step("mlp-large", 512 / 1000.0, fit, 2, batch=512,
                                       profile=rec.profiles["mlp-large"])
    assert gpu["predicted"] == pytest.approx(profiled.speedup)
    assert abs(profiled.speedup - plain.speedup) > 1e-3


def test_predicted_vs_measured_needs_a_baseline_and_a_fit_per_path():
    res = _scaling_result()
    res.rows = res.rows[1:]
    with pytest.raises(ValueError, match="no one-worker row"):
        cs.predicted_vs_measured(res, alpha_beta.AlphaBeta(1e-3, 1e9))
    paths = _scaling_result()
    paths.rows[1]["path"] = "socket"
    with pytest.raises(ValueError, match="no row with 2 or more workers and a fit"):
        cs.predicted_vs_measured(paths, {"default": alpha_beta.AlphaBeta(1e-3, 1e9)})


def test_exercise_matrix_has_one_slow_gpu_and_one_asymmetric_pair_and_the_check_agrees():
    m, labels, desc = cs.exercise_matrix()
    assert "not a measurement" in desc
    assert np.isnan(np.diag(m)).all()
    d = p2p_diagnosis.diagnose(m, labels)
    assert d.outlier_labels == [1] and d.asymmetric_labels == [(2, 3)]
    assert checks.check_p2p_diagnosis(m, 1, (3, 2))
    assert not checks.check_p2p_diagnosis(m, 2, (2, 3))
    table = str(cs.exercise_table())
    assert "GPU3" in table and "not a measurement" in table


def test_second_gpu_live_on_cpu_predicts_each_batch_from_a_gloo_sweep(monkeypatch):
    """The CPU branch, with the multi-process runs replaced by recorded-shaped results."""
    from ddlab.measure import collectives_run
    from ddlab.training import experiments
    from ddlab.system.hardware import Inventory
    calls = []

    def fake_scaling(spec, workers, device, echo=False, progress=None):
        calls.append((spec.batch, spec.repeats, spec.test_samples, tuple(workers), device))
        return _scaling_result(two=1200.0 + spec.batch)

    class Sweep:
        pass
    monkeypatch.setattr(experiments, "throughput_scaling", fake_scaling)
    monkeypatch.setattr(collectives_run, "sweep", lambda **kw: Sweep())
    monkeypatch.setattr(alpha_beta, "fit_sweep", lambda s: alpha_beta.AlphaBeta(1e-3, 5e8))
    from ddlab.system import policy
    t = cs.second_gpu_live(Inventory(), batches=(16, 64), machine=policy.Machine(gpus=0))
    assert calls == [(16, 3, 1000, (1, 2), "cpu"), (64, 3, 1000, (1, 2), "cpu")]
    rows = t.to_dict()["rows"]
    assert [r["measured"] for r in rows] == pytest.approx([1.216, 1.264])
    assert "gloo" in t.title and any("No wrapper cost" in n for n in t.notes)


def test_second_gpu_live_on_one_gpu_measures_the_step_and_predicts_each_recorded_path(monkeypatch):
    """The one-GPU branch: one configuration measured on the GPU (DDP, one worker, 3 repeats),
    the second GPU predicted over every path of the recorded machine, with no measured column."""
    from ddlab.training import experiments
    from ddlab.system import policy
    from ddlab.system.hardware import Inventory
    calls = []

    def fake_scaling(spec, workers, device, echo=False, progress=None):
        calls.append((spec.model, spec.launcher, spec.workers, spec.repeats, spec.device, tuple(workers), device))
        row = {"workers": 1, "images_per_s": 250000.0, "images_per_s_min": 240000.0, "images_per_s_max": 260000.0,
               "global_batch": 512, "speedup": 1.0, "repeats": 3}
        return ExperimentResult("scaling", [row], "live", {}, [], {"model": spec.model, "launcher": "ddp",
                                                                    "device_name": "NVIDIA H100 80GB HBM3"})
    monkeypatch.setattr(experiments, "throughput_scaling", fake_scaling)
    one_gpu = policy.Machine(gpus=1, software=lambda framework, launcher: (True, ""))
    t = cs.second_gpu_live(Inventory(), machine=one_gpu)
    assert calls == [("mlp-small", "ddp", 1, 3, "cuda", (1,), "cuda")]
    rec = recorded_runs.recorded_points()
    over = wrapper_cost.over_one_worker_step("ddp")      # DDP at world size 1: its cost is in the step
    rows = {r["path"]: r for r in t.to_dict()["rows"]}
    assert set(rows) == set(rec.fits) == {"default", "shm", "socket"}
    for path, fit in rec.fits.items():
        pred = step_model.predict_step("mlp-small", 512 / 250000.0, fit, 2, batch=512, overheads=over,
                                       **recorded_runs.measured_inputs("mlp-small", 512, rec.profiles,
                                                                    rec.channels[path], "NVIDIA H100 80GB HBM3"))
        assert rows[path]["predicted"] == pytest.approx(pred.speedup)
        assert rows[path]["compute"] == pytest.approx(512 / 250000.0) and rows[path]["batch"] == 512
    # the slower the recorded link, the lower the predicted speedup
    assert rows["default"]["predicted"] > rows["shm"]["predicted"] > rows["socket"]["predicted"]
    shown = [c.key for c in t.columns]
    assert "measured" not in shown and "error_pct" not in shown and "predicted" in shown
    text = str(t)
    assert "Predicted, not measured" in text and "NVIDIA H100 80GB HBM3" in text and "250,000" in text
    assert "240,000-260,000" in text and "this machine has one" in text


def test_recorded_tunings_name_what_is_missing(monkeypatch):
    from ddlab.course import tuning
    from ddlab.base.reference import ReferenceMissing
    fake = ExperimentResult("tuning", [], "recorded", {}, [], {"launcher": "ddp"})

    def recorded(launcher, model, path):
        if (launcher, path) == ("ddp", "default"):
            return fake
        raise ReferenceMissing("no")
    monkeypatch.setattr(tuning, "recorded", recorded)
    found, line = cs.recorded_tunings()
    assert found == [fake]
    assert line.startswith("Not recorded yet") and "\n  ddp over shm" in line and "horovod over default" in line
    assert "ddp over default" not in line
    monkeypatch.setattr(tuning, "recorded", lambda *a: fake)
    assert cs.recorded_tunings()[1] == "Every tuning comparison is recorded."
    # one cut short after 2 of 3 rounds is named with what it holds
    cut = ExperimentResult("tuning", [{"tuning": "untuned", "repeats": 2}], "recorded", {}, [],
                           {"launcher": "ddp", "path": "shm", "repeats": 3})
    monkeypatch.setattr(tuning, "recorded",
                        lambda launcher, model, path: cut if (launcher, path) == ("ddp", "shm") else fake)
    line = cs.recorded_tunings()[1]
    assert line == "Every tuning comparison is recorded.\nCut short, fewer repeats than planned:\n  ddp over shm (2 of 3 repeats)"


def test_tuning_live_picks_the_gpu_or_the_small_cpu_comparison(monkeypatch):
    from ddlab.course import tuning
    from ddlab.system import policy
    calls = []
    monkeypatch.setattr(tuning, "tuning_comparison", lambda *a, **kw: calls.append((a, kw)) or "result")
    assert cs.tuning_live(machine=policy.Machine(gpus=0)) == "result"
    (args, kw), = calls
    assert kw["tunings"] == cs.CPU_TUNINGS and kw["base"].model == cs.CPU_MODEL and kw["base"].device == "cpu"
    assert kw["base"].workers == 2 and kw["base"].repeats == 3 and kw["base"].test_samples == 1000
    calls.clear()
    cs.tuning_live(machine=policy.Machine(gpus=2, software=lambda framework, launcher: (True, "")))
    (args, kw), = calls
    assert args[:3] == ("wide", "ddp", "default") and kw["tunings"] == cs.GPU_LIVE_TUNINGS and kw["device"] == "cuda"


def test_tuning_here_runs_on_two_gpus_only_when_asked_and_on_cpu_processes_always(monkeypatch):
    from ddlab.system import policy
    calls = []
    monkeypatch.setattr(cs, "tuning_live", lambda launcher, **kw: calls.append((launcher, kw)) or "result")
    two = policy.Machine(gpus=2, software=lambda framework, launcher: (True, ""))
    res, line = cs.tuning_here(machine=two)
    assert res is None and not calls
    from ddlab.course import tuning
    launches = tuning.planned_launches("ddp", cs.GPU_LIVE_TUNINGS, 3)      # 9 where every tuning can run
    assert "set LIVE_GPU_TUNING = True" in line and f"{launches} launches" in line and "wide" in line
    res, line = cs.tuning_here(True, machine=two)
    assert res == "result" and calls[-1][0] == "ddp" and line == "Measured now: two GPUs, the wide model on NCCL's default path."
    res, line = cs.tuning_here(machine=policy.Machine(gpus=0))
    assert res == "result" and len(calls) == 2 and "two CPU processes over gloo, mlp-large" in line


def _fake_batch_sweep(monkeypatch, machine_b128=None):
    """The default-batch recording of mlp-small as the only one, plus a fake ``b128`` variant made
    from it (a quarter of the batch, a third of the rate), recorded on ``machine_b128`` if given."""
    from ddlab.training import recording
    from ddlab.base import reference
    real = recording.load_recorded
    name = "nccl-paths-torch-ddp-mlp-small"
    others = [n for n in reference.names(recording.REFERENCE_KIND) if not n.startswith(name + "-b")]

    def load(experiment, framework, launcher, model, variant=None):
        if variant not in (None, "b128"):
            raise reference.ReferenceMissing(variant)
        res = real(experiment, framework, launcher, model)
        if variant == "b128":
            res.rows = [dict(r, global_batch=r["global_batch"] // 4, images_per_s=r["images_per_s"] / 3)
                        for r in res.rows]
            if machine_b128:
                res.provenance = dict(res.provenance, machine=machine_b128, gpu_model="Other GPU")
        return res
    monkeypatch.setattr(recording, "load_recorded", load)
    return lambda with_b128: monkeypatch.setattr(
        reference, "names", lambda kind: others + ([name + "-b128"] if with_b128 else []))


def test_recorded_batch_sweep_joins_the_batch_variants_of_one_machine(monkeypatch):
    names = _fake_batch_sweep(monkeypatch)
    names(False)   # only the default batch: no table, and the line says the sweep is missing
    t, line = cs.recorded_batch_sweep("mlp-small")
    assert t is None and "not recorded yet" in line and "512" in line
    names(True)
    t, line = cs.recorded_batch_sweep("mlp-small")
    rows = t.to_dict()["rows"]
    assert sorted({r["batch"] for r in rows}) == [128, 512] and "128, 512" in line
    assert "model" not in [c.key for c in t.columns] and "mlp-small" in t.title and "2x NVIDIA H200" in t.title
    assert not any("not swept" in n for n in t.notes)
    small = [r for r in rows if r["batch"] == 128 and r["path"] == "default"][0]
    big = [r for r in rows if r["batch"] == 512 and r["path"] == "default"][0]
    assert small["compute"] < big["compute"] and small["ratio"] < big["ratio"]


def test_recorded_batch_sweep_never_joins_batches_of_two_machines(monkeypatch):
    names = _fake_batch_sweep(monkeypatch, machine_b128="2x Other GPU, NV4")
    names(True)
    t, line = cs.recorded_batch_sweep("mlp-small")
    assert t is None and "not recorded yet on one machine" in line
    assert "512 on 2x NVIDIA H200, NV18" in line and "128 on 2x Other GPU, NV4" in line


def test_recorded_batch_sweep_of_another_machine_says_whose_links_predict_it():
    # the recorded MLP sweeps at batch 128 and 2048 ran on another machine than the all-reduce sweeps
    from ddlab.training import recording
    res = recording.load_recorded("nccl-paths", "torch", "ddp", "mlp-small", "b128")
    machine = res.provenance["machine"]
    t, line = cs.recorded_batch_sweep("mlp-small")
    assert machine in t.title and f"on {machine}" in line
    assert {r["batch"] for r in t.to_dict()["rows"]} == {128, 2048}
    assert any("not swept" in n and machine in n for n in t.notes)
    above = [r for r in t.to_dict()["rows"] if r["measured"] > 2]
    note = [n for n in t.notes if n.startswith("Measured above 2x (linear) at ")]
    assert len(note) == bool(above) and all(f"batch {r['batch']} over " in note[0] for r in above)


def test_the_ratio_note_states_overlap_and_the_ring_factor():
    t = cs.second_gpu_table("ddp")
    assert cs.RATIO_NOTE in t.notes and "2(n-1)/n" in cs.RATIO_NOTE and "(n-1) steps" in cs.RATIO_NOTE


def test_a_wrapper_column_of_zeros_is_left_out_with_a_note_and_kept_otherwise():
    t = cs.second_gpu_table("ddp")          # DDP: the wrapper's cost is in the one-worker step
    assert "overhead" not in [c.key for c in t.columns]
    assert any(n.startswith("wrapper: 0 s in every row") for n in t.notes)
    rows = [{"model": "m", "path": "shm", "overhead": 0.0}, {"model": "m", "path": "shm", "overhead": 1e-4}]
    kept = cs._case_table(list(cs._COLUMNS), rows, "t", [])
    assert "overhead" in [c.key for c in kept.columns] and kept.notes == []


def test_second_gpu_live_on_two_gpus_compares_the_paths_and_predicts_each_from_a_live_sweep(monkeypatch, tmp_path,
                                                                                             capsys):
    """The two-GPU branch, with the launches and the sweeps replaced: DDP's mlp-small under each NCCL
    path (mode.TWO_GPU_LIVE_REPEATS repeats, one bar over all its launches), each 2-GPU row predicted
    from that path's live sweep, beside its measured speedup; a path that failed keeps its failure out
    of the predictions."""
    from ddlab.course import mode
    from _experiment_fakes import fake_paths_result
    from ddlab.measure import collectives, collectives_run
    from ddlab.training import experiments, runs
    from ddlab.system import policy
    from ddlab.system.hardware import Inventory
    calls = []

    def fake_paths(spec, echo=False, progress=None):
        calls.append((spec.model, spec.launcher, spec.repeats, spec.device))
        for i in range(launches):
            progress(f"launch {i}{runs.DONE_MARK}15 s")
        res = fake_paths_result()
        res.config["model"] = spec.model
        return res
    launches = (1 + len(experiments.COMPARED_PATHS)) * mode.TWO_GPU_LIVE_REPEATS
    assert mode.TWO_GPU_LIVE_REPEATS == 2 and launches == 8
    sweeps = collectives.load_recorded("h200x2")      # stand-ins for the live sweeps
    monkeypatch.setattr(experiments, "nccl_path_comparison", fake_paths)
    monkeypatch.setattr(collectives_run, "compare_paths", lambda **kw: sweeps)
    two = policy.Machine(gpus=2, software=lambda framework, launcher: (True, ""))
    t = cs.second_gpu_live(Inventory(), machine=two, log=str(tmp_path / "live.log"))
    assert calls == [("mlp-small", "ddp", 2, "cuda")]
    assert "8 of 8 done" in capsys.readouterr().out and "launch 7" in (tmp_path / "live.log").read_text()
    rows = {r["path"]: r for r in t.to_dict()["rows"]}
    assert set(rows) == {"default", "shm"}                  # the socket run failed in the stand-in
    assert rows["default"]["measured"] == pytest.approx(1.85) and rows["shm"]["measured"] == pytest.approx(0.86)
    assert rows["default"]["predicted"] > rows["shm"]["predicted"] > 0
    assert any(n.startswith("Wrapper cost:") for n in t.notes)
