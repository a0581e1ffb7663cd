"""ddlab.course.case_studies: the tables of notebook 10 from recorded, cited and live results."""
import json

import numpy as np
import pytest

from ddlab.course import case_studies as cs
from ddlab.course import field_reports as fr
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
    for r, p in zip(rows, sorted(ddp, key=lambda p: (["mlp-small", "cnn", "mlp-large", "wide"].index(p.model),
                                                       p.batch, p.path))):
        assert (r["model"], r["batch"], r["path"]) == (p.model, p.batch, p.path)
        assert r["ratio"] == pytest.approx(r["compute"] / r["allreduce"])
        # shown over the plain one-GPU run where one is recorded, else "-"; the error is the 2-GPU images/s'
        assert (r["measured"] is None) == (p.plain_ratio is None)
        if r["measured"] is None:
            continue
        assert r["measured"] == pytest.approx(p.measured_plain)
        assert r["error_pct"] == pytest.approx(100 * (r["predicted"] / r["measured"] - 1))
        lo, hi = (float(x) for x in r["spread"].split("-"))
        assert lo <= round(r["measured"], 2) + 0.01 and round(r["measured"], 2) - 0.01 <= hi
    # the same model all-reduces more slowly on a slower path: the ratio falls from default to socket
    wide = {r["path"]: r["ratio"] for r in rows if r["model"] == "wide"}
    assert wide["default"] > wide["shm"] > wide["socket"]
    assert "ratio: step (1) / all-reduce" in str(t) and any(n.startswith("wrapper: 0 s") for n in t.notes)


def test_second_gpu_table_rejects_a_launcher_without_recordings():
    with pytest.raises(ValueError, match="no recorded 2-GPU runs for launcher 'nobody'"):
        cs.second_gpu_table("nobody")


def _scaling_result(model="mlp-small", one=1000.0, two=1500.0):
    """A scaling result: the plain one-GPU run at the one-worker run's speed (so a ratio over either is the
    same number), DDP's one worker, two workers."""
    rows = [{"workers": 1, "images_per_s": one, "global_batch": 32, "repeats": 3, "path": "plain", "launcher": "none"},
            {"workers": 1, "images_per_s": one, "global_batch": 32, "repeats": 3, "images_per_s_min": 0.9 * one,
             "images_per_s_max": 1.1 * one},
            {"workers": 2, "images_per_s": two, "global_batch": 64, "repeats": 3, "images_per_s_min": 1.4 * one,
             "images_per_s_max": 1.6 * one}]
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
    res = ExperimentResult.from_dict(res.to_dict())        # a result of that GPU (its plain run keyed by it)
    (gpu,) = cs.predicted_vs_measured(res, fit, recorded=rec).to_dict()["rows"]
    profiled = step_model.predict_step("mlp-large", 512 / 1000.0, fit, 2, batch=512,
                                       profile=rec.profiles["mlp-large"])
    assert gpu["predicted"] == pytest.approx(profiled.speedup)
    assert abs(profiled.speedup - plain.speedup) > 1e-3


def test_predicted_vs_measured_needs_a_baseline_and_a_fit_per_path():
    res = _scaling_result()
    res.rows = [r for r in res.rows if r["workers"] == 2 or r.get("path") == "plain"]    # no wrapper's one worker
    with pytest.raises(ValueError, match="no one-worker row"):
        cs.predicted_vs_measured(res, alpha_beta.AlphaBeta(1e-3, 1e9))
    paths = _scaling_result()
    paths.rows[2]["path"] = "socket"
    with pytest.raises(ValueError, match="no row with 2 or more workers and a fit"):
        cs.predicted_vs_measured(paths, {"default": alpha_beta.AlphaBeta(1e-3, 1e9)})


def test_the_report_matrix_has_the_reports_slow_gpu_and_asymmetric_pair_and_the_check_agrees():
    m, labels, desc = cs.report_matrix()
    assert np.isnan(np.diag(m)).all() and labels == [0, 1, 2, 3]
    d = p2p_diagnosis.diagnose(m, labels)
    assert d.outlier_labels == [0] and d.asymmetric_labels == [(2, 3)]
    assert checks.check_p2p_diagnosis(m, 0, (3, 2))
    assert not checks.check_p2p_diagnosis(m, 1, (2, 3))
    table = str(cs.report_table())
    assert "GPU2 <-> GPU3" in table and "Cited, not measured" in table


def test_run_command_puts_the_runs_nccl_variables_before_its_launch():
    run = {"nccl_env": {"NCCL_VERSION": "2.0", "NCCL_P2P_LEVEL": "LOC", "NCCL_NVLS_ENABLE": "0"},
           "provenance": {"command": "python3 -m torch.distributed.run --nproc-per-node=2 train.py"}}
    assert fr.run_command(run) == ("NCCL_NVLS_ENABLE=0 NCCL_P2P_LEVEL=LOC python3 -m torch.distributed.run "
                                   "--nproc-per-node=2 train.py")
    assert fr.run_command({}) == "not recorded"
    # a command that sets a variable itself: the variable is not put before it a second time
    given = {"nccl_env": {"NCCL_NVLS_ENABLE": "0", "NCCL_P2P_LEVEL": "LOC"},
             "provenance": {"command": "NCCL_NVLS_ENABLE=0 torchrun --nproc-per-node=2 fmnist_torch.py"}}
    assert fr.run_command(given) == ("NCCL_P2P_LEVEL=LOC NCCL_NVLS_ENABLE=0 torchrun --nproc-per-node=2 "
                                     "fmnist_torch.py")


def test_the_tuning_effects_compare_each_setting_with_the_untuned_two_gpu_run():
    found, _ = cs.recorded_tunings()
    t = cs.tuning_effects(found)
    rows = t.to_dict()["rows"]
    assert len(rows) == len(found)
    for res, row in zip(found, rows):
        by = {r["tuning"]: r for r in res.rows}
        base = by["untuned"]
        for head, name in zip(cs._TUNING_HEADS, cs.TUNING_SHOWN[res.config["launcher"]]):
            r = by[name]
            ratio = r["images_per_s"] / base["images_per_s"]
            assert row[head].startswith(f"{ratio:.2f}x ")
            if r["images_per_s_min"] > base["images_per_s_max"]:
                assert row[head].endswith("faster")
            elif r["images_per_s_max"] < base["images_per_s_min"]:
                assert row[head].endswith("slower")
            else:
                assert row[head].endswith("overlap")
    text = cs.tuning_commands("ddp", "default", found)
    res = next(r for r in found if (r.config["launcher"], r.config["path"]) == ("ddp", "default"))
    by = {r["tuning"]: r for r in res.rows}
    tuned = fr.run_command(res.runs[by["bf16 hook"]["runs"][0]])
    plain = fr.run_command(res.runs[by["untuned"]["runs"][0]])
    assert f"bf16 hook: {tuned}" in text and tuned.endswith("--comm-hook bf16")
    # the untuned run is named "the same without" the flags only where it is exactly that
    assert ("(untuned: the same without --comm-hook bf16)" in text) == (tuned == plain + " --comm-hook bf16")
    assert ("(untuned: the same" in text) != (f"untuned: {plain}" in text)
    assert cs.tuning_commands("ddp", "nowhere", found) == "ddp over nowhere: not recorded."


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
               "global_batch": 512, "repeats": 3}
        plain = dict(row, images_per_s=300000.0, path="plain", launcher="none")     # the plain run, measured too
        return ExperimentResult("scaling", [plain, row], "live", {}, [], {"model": spec.model, "launcher": "ddp",
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
                                       two_worker_s=rec.two_workers[("ddp", path)][0],     # measured on the probe
                                       **recorded_runs.measured_inputs("mlp-small", 512, rec.profiles,
                                                                    rec.channels[path], "NVIDIA H100 80GB HBM3"))
        # over the plain run measured now: the prediction's 2-GPU images/s over the plain run's
        assert rows[path]["predicted"] == pytest.approx(pred.speedup * 250000.0 / 300000.0)
        assert rows[path]["compute"] == pytest.approx(512 / 250000.0) and rows[path]["batch"] == 512
    # each path's prediction carries that path's two-worker cost, measured on the probe
    assert {r["path"]: r["two_workers"] for r in t.rows} == {path: rec.two_workers[("ddp", path)][0] for path in rows}
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


def test_tuning_here_runs_only_when_asked_on_gpus_and_on_cpu_processes(monkeypatch):
    from ddlab.course import tuning
    from ddlab.system import policy
    calls = []
    monkeypatch.setattr(cs, "tuning_live", lambda launcher, **kw: calls.append((launcher, kw)) or "result")
    two = policy.Machine(gpus=2, software=lambda framework, launcher: (True, ""))
    res, line = cs.tuning_here(machine=two)
    assert res is None and not calls
    launches = tuning.planned_launches("ddp", cs.GPU_LIVE_TUNINGS, 3)
    assert "LIVE_TUNING = True" in line and f"{launches} launches" in line and "wide" in line
    res, line = cs.tuning_here(True, machine=two)
    assert res == "result" and calls[-1][0] == "ddp" and line == "Measured now: two GPUs, the wide model on NCCL's default path."
    res, line = cs.tuning_here(machine=policy.Machine(gpus=0))
    assert res is None and len(calls) == 1 and cs.CPU_MODEL in line
    res, line = cs.tuning_here(True, machine=policy.Machine(gpus=0))
    assert res == "result" and len(calls) == 2 and "two CPU processes over gloo, mlp-large" in line


def test_second_gpu_here_runs_on_a_gpu_and_on_cpu_processes_only_when_asked(monkeypatch):
    from ddlab.system import policy
    calls = []
    monkeypatch.setattr(cs, "second_gpu_live", lambda inv, **kw: calls.append(kw) or "table")
    table, line = cs.second_gpu_here(machine=policy.Machine(gpus=0))
    assert table is None and not calls and "LIVE_CPU = True" in line
    table, line = cs.second_gpu_here(asked=True, machine=policy.Machine(gpus=0))
    assert table == "table" and calls[-1]["batches"] == (512,)
    one = policy.Machine(gpus=1, software=lambda framework, launcher: (True, ""))
    table, line = cs.second_gpu_here(machine=one)
    assert table == "table" and len(calls) == 2


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


def test_recorded_batch_sweep_shows_the_held_out_checks_runs_and_predictions():
    # the course machine has the most batches recorded: its table, with the predictions of second_gpu_table
    t, line = cs.recorded_batch_sweep("mlp-small")
    rows = t.to_dict()["rows"]
    assert "2x NVIDIA H200" in t.title and {r["batch"] for r in rows} == {128, 512, 2048}
    assert "on 2x NVIDIA H200, NV18" in line and "on 2x NVIDIA H100 80GB HBM3, NV18" in line
    same = [{k: v for k, v in r.items() if k != "model"}      # the title names the model
            for r in cs.second_gpu_table("ddp", ("mlp-small",)).to_dict()["rows"]]
    key = lambda r: (r["batch"], r["path"])                                   # noqa: E731
    assert sorted(rows, key=key) == sorted(same, key=key) and rows == sorted(rows, key=key)
    assert any(n.startswith("In each prediction, what two workers cost") for n in t.notes)
    above = [r for r in rows if (r["measured"] or 0) > 2]
    note = [n for n in t.notes if n.startswith("Measured above 2x (linear) at ")]
    assert len(note) == bool(above) and all(f"batch {r['batch']} over " in note[0] for r in above)


def test_recorded_batch_sweep_of_another_machine_says_whose_links_predict_it(tmp_path, monkeypatch):
    # without the course machine's batch sweep, the H100 pair's (two batches) is the table, predicted
    # from that machine's own recorded all-reduce sweeps
    import shutil
    from ddlab.training import recording
    shutil.copytree(reference.REFERENCE_DIR, tmp_path / "ref")
    for b in ("b128", "b2048"):
        (tmp_path / "ref" / "experiments" / f"nccl-paths-torch-ddp-mlp-small-{b}.json").unlink()
    monkeypatch.setattr(reference, "REFERENCE_DIR", str(tmp_path / "ref"))
    res = recording.load_recorded("nccl-paths", "torch", "ddp", "mlp-small", "b128-2xh100-80gb-hbm3-nv18")
    machine = res.provenance["machine"]
    t, line = cs.recorded_batch_sweep("mlp-small")
    assert machine in t.title and f"on {machine}" in line and "512 on 2x NVIDIA H200, NV18" in line
    assert {r["batch"] for r in t.to_dict()["rows"]} == {128, 2048}
    own = next(r for r in recorded_runs.recorded_sets(others_only=True) if r.made_here(res.provenance))
    assert any(n.startswith("Link fits:") and own.machine in n for n in t.notes)
    assert not any("not swept" in n for n in t.notes)
    # the same runs as that machine's held-out table, with the same predictions
    h100 = cs.second_gpu_table("ddp", ("mlp-small",), own).to_dict()["rows"]
    assert sorted(r["predicted"] or 0 for r in t.to_dict()["rows"]) == sorted(r["predicted"] or 0 for r in h100)
    assert sorted(r["error_pct"] for r in t.to_dict()["rows"]) == sorted(r["error_pct"] for r in h100)


def test_the_weak_scaling_table_says_only_what_its_rows_hold():
    t = cs.second_gpu_table("ddp", models=("mlp-small", "mlp-large"))
    rows = t.to_dict()["rows"]
    assert {r["model"] for r in rows} == {"mlp-small", "mlp-large"}
    points = {(p.model, p.batch, p.path): p for p in recorded_runs.recorded_points().points if p.launcher == "ddp"}
    assert len(rows) == len([k for k in points if k[0] in ("mlp-small", "mlp-large")])
    # more than one batch per GPU recorded: a batch column tells the rows apart
    assert "batch" in [c.key for c in t.columns] and len({(r["model"], r["batch"], r["path"]) for r in rows}) == len(rows)
    for r in rows:          # over the plain one-GPU run: the one-worker speedup times that run's ratio to plain
        p = points[(r["model"], r["batch"], r["path"])]
        assert r["measured"] == (p.measured * p.plain_ratio if p.plain_ratio else None)
    # the wrapper's source is named only where a wrapper cost is added
    assert not any(n.startswith("Wrapper cost:") for n in t.notes)


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
    # the plain one-GPU run, DDP's one worker and each path, each repeated
    launches = (2 + len(experiments.COMPARED_PATHS)) * mode.TWO_GPU_LIVE_REPEATS
    assert mode.TWO_GPU_LIVE_REPEATS == 2 and launches == 10
    sweeps = collectives.load_recorded("h200x2")      # stand-ins for the live sweeps
    monkeypatch.setattr(experiments, "nccl_path_comparison", fake_paths)
    monkeypatch.setattr(collectives_run, "compare_paths", lambda **kw: sweeps)
    two = policy.Machine(gpus=2, software=lambda framework, launcher: (True, ""))
    t = cs.second_gpu_live(Inventory(), machine=two, log=str(tmp_path / "live.log"))
    assert calls == [("mlp-small", "ddp", 2, "cuda")]
    assert "10 of 10 done" in capsys.readouterr().out and "launch 9" in (tmp_path / "live.log").read_text()
    rows = {r["path"]: r for r in t.to_dict()["rows"]}
    assert set(rows) == {"default", "shm"}                  # the socket run failed in the stand-in
    assert rows["default"]["measured"] == pytest.approx(1.85) and rows["shm"]["measured"] == pytest.approx(0.86)
    assert rows["default"]["predicted"] > rows["shm"]["predicted"] > 0
    assert any(n.startswith("Wrapper cost:") for n in t.notes)


def _tuning(launcher, gpu_model, images: dict, path="default"):
    """A recorded tuning comparison of ``launcher``: the plain run, the one-worker run and ``images``
    ({tuning: 2-GPU images/s}), with the provenance of ``gpu_model``."""
    rows = [{"tuning": "1 GPU, no wrapper", "path": "plain", "launcher": "none", "plain": True, "workers": 1,
             "images_per_s": 100.0, "global_batch": 512},
            {"tuning": "1 worker, untuned", "path": "1 worker", "workers": 1, "images_per_s": 90.0,
             "global_batch": 512}]
    rows += [{"tuning": name, "path": path, "workers": 2, "images_per_s": v, "global_batch": 1024}
             for name, v in images.items()]
    prov = {"machine": f"2x {gpu_model}", "gpu_model": gpu_model, "gpu_count": 2}
    return ExperimentResult("tuning", rows, "recorded", prov, [], {"launcher": launcher, "path": path,
                                                                    "device": "cuda"})


def test_ddp_and_horovod_are_set_side_by_side_by_images_per_second_untuned_and_tuned():
    ddp = _tuning("ddp", "NVIDIA H200", {"untuned": 180.0, "bf16 hook": 170.0, "bucket 100 MB": 190.0,
                                          "combined": 185.0, "accumulate 2": 300.0})
    hvd = _tuning("horovod", "NVIDIA H200", {"untuned": 150.0, "fp16 compression": 160.0,
                                              "fusion 256 MB": 155.0, "combined": 170.0})
    table, line = cs.tunings_side_by_side([ddp, hvd], "default")
    rows = {r["what"]: r for r in table.rows}
    assert list(rows) == ["1 GPU, no wrapper", "1 worker (each wrapper's own)", "untuned", "16-bit grads",
                          "buckets / fusion", "combined"]            # a setting that grows the batch is left out
    assert (rows["16-bit grads"]["v0"], rows["16-bit grads"]["v1"]) == (170.0, 160.0)   # bf16 hook beside fp16
    assert rows["untuned"]["r1"] == pytest.approx(150.0 / 180.0)
    assert "NVIDIA H200" in line
    other = _tuning("horovod", "NVIDIA H100 80GB HBM3", {"untuned": 150.0})
    table, line = cs.tunings_side_by_side([ddp, other], "default")
    assert table is None and "NVIDIA H200" in line and "NVIDIA H100 80GB HBM3" in line
    table, line = cs.tunings_side_by_side([ddp], "default")
    assert table is None and "horovod" in line
    assert cs.tunings_side_by_side([ddp, hvd], "shm")[0] is None
