"""ddlab.course.field_reports: the field reports' strong-scaling experiment, their cited figures, the
step model's prediction, the course's recordings and a live run (the runs faked where they would launch)."""
import json

import pytest

from ddlab.base import reference
from ddlab.cost import recorded_runs, wrapper_cost
from ddlab.course import case_studies as cs
from ddlab.course import field_reports as fr
from ddlab.training.results import ExperimentResult


def test_cited_tables_name_their_source_and_refuse_uncited_files(tmp_path, monkeypatch):
    t = fr.cited()
    text = str(t)
    assert text.startswith("Cited, not measured by this course") and "Source: https://github.com/" in text
    # every row names its section of the source: the report's technical appendix, at a fixed revision
    rows = reference.load(fr.CITED_KIND, fr.REPORTS)["rows"]
    assert len(t.to_dict()["rows"]) == len(rows) and all(r["section"].endswith("- Detailed Results") for r in rows)
    # the sections are named once, in a note, when the table has no section column
    assert "section" not in [c.key for c in t.columns]
    assert sum(all(f"'{s}'" in n for s in {r["section"] for r in rows}) for n in t.notes) == 1
    assert {r["course_model"] for r in rows} == set(fr.REPORT_MLPS)
    assert sorted({r["batch"] for r in rows}) == list(fr.REPORT_GLOBAL_BATCHES)   # 4..128 over both networks
    assert all(r["speedup"] == f"{r['speedup_value']:.2f}x" for r in rows)      # the number and its text agree
    assert "/blob/3d0ea83411d7487aeeef00d8cd3666418535072c/" in text and "global batch" in text
    for gone in ("ViT-Large", "ResNet", "MobileNetV2", "45 min", "10M"):
        assert gone not in text
    monkeypatch.setattr(reference, "REFERENCE_DIR", str(tmp_path))
    (tmp_path / "cited").mkdir()
    (tmp_path / "cited" / "mine.json").write_text(json.dumps(
        {"columns": [["a", "text"]], "rows": [{"a": "x"}], "provenance": {"machine": "mine"}}))
    with pytest.raises(ValueError, match="must say it is cited and name its source"):
        fr.cited("mine")
    (tmp_path / "cited" / "placed.json").write_text(json.dumps(
        {"columns": [["a", "text"], ["section", "text"]], "rows": [{"a": "x", "section": "Results"}, {"a": "y"}],
         "provenance": {"cited": True, "source": "https://example.org", "machine": "theirs"}}))
    with pytest.raises(ValueError, match=r"row\(s\) 1 name no section"):
        fr.cited("placed")


def test_the_prediction_is_ddlab_predict_with_a_global_batch():
    from ddlab.cost import predict
    t = fr.predicted()
    rows = t.to_dict()["rows"]
    assert {(r["model"], r["path"]) for r in rows} == {(m, p) for m in fr.REPORT_MLPS for p in fr.REPORT_PATHS}
    one = next(p for p in recorded_runs.recorded_points().points if p.model == "mlp-small" and p.launcher == "ddp")
    # the recorded one-GPU step ran DDP with world size 1: the wrapper's cost is in it, not added again, and
    # the speedup divides by the plain step (that step less DDP's one-worker cost)
    same = predict.predict("mlp-small", step_ms=one.compute_s * 1e3, global_batch=32, path="shm",
                           step_has_wrapper=True)
    row = next(r for r in rows if (r["model"], r["path"]) == ("mlp-small", "shm"))
    assert row["speedup"] == pytest.approx(same.speedup) and row["global"] == "4-128 (each)"
    assert row["speedup"] < 1 and "bound" not in [c.key for c in t.columns]   # no "bound by" beside a host-bound step
    text = str(t)
    assert "wrapper" not in [c.key for c in t.columns] and "--step-has-wrapper" in text and "no wrapper column" in text
    assert "field_reports.recorded()" in text and "python -m ddlab predict --model mlp-small" in text
    assert "--global-batch" in text and "busy" in text


def test_the_recording_shows_each_split_with_its_one_gpu_step_and_names_what_is_missing():
    recs = fr.recordings()
    assert recs, "the recorded strong-scaling run of the small MLP is committed"
    t = fr.recorded()
    rows = t.to_dict()["rows"]
    assert rows and all(r["per_gpu"] * 2 == r["global"] for r in rows)          # only the 2-GPU rows
    res = recs[0]
    two = [r for r in res.rows if r["workers"] == 2]
    assert [r["speedup"] for r in rows[:len(two)]] == [r["speedup"] for r in two]
    one = {r["global_batch"]: r["step_ms_median"] for r in res.rows if r["workers"] == 1}
    assert all(r["one"] == one[r["global"]] for r in rows[:len(two)])
    text = str(t)
    assert res.provenance["machine"] in text
    done = {(r.config["model"], r.config["launcher"], r.config["path"]) for r in recs}
    missing = next((line for line in text.splitlines() if line.startswith("Not recorded yet:")), "")
    assert bool(missing) == (len(done) < 12)      # said only while something is missing
    for model in ("mlp-small", "mlp-large"):
        for launcher in ("ddp", "horovod"):
            for path in ("default", "shm", "socket"):
                assert (f"{model} {launcher} {path}" in missing) == ((model, launcher, path) not in done)
    assert "MirroredStrategy" in text
    # one provenance line per machine, software and date, naming each recording it covers
    _each_named_once(t.notes, done)


def _each_named_once(notes, done):
    """The provenance notes: one line for all when every recording shares machine, software and date
    ("Every row: ..."), else one per group, naming each of ``done`` (model, launcher, path) exactly once."""
    lines = [line for line in notes if "repeats, recorded" in line]
    assert lines
    if lines[0].startswith("Every row:"):
        assert len(lines) == 1
        return
    for model, launcher, path in done:
        assert sum(f"{model} {launcher} {path}" in line.split(":")[0].split(", ") for line in lines) == 1


def test_recordings_of_two_machines_get_a_provenance_line_each(monkeypatch):
    from ddlab.training import recording
    own = [(n, r) for n, r in recording.recorded_with_prefix(recorded_runs.STRONG_PREFIX) if n == fr._own_name(r)]
    name, first = own[0]
    moved = ExperimentResult("strong-scaling", first.rows, "recorded",
                             dict(first.provenance, machine="2x Test GPU, PIX"), [], dict(first.config))
    monkeypatch.setattr(recording, "recorded_with_prefix", lambda prefix: [(name, moved)] + own[1:])
    notes = fr.recorded().notes
    lines = [line for line in notes if "repeats, recorded" in line]
    assert len(lines) >= 2 and not any(line.startswith("Every row:") for line in lines)
    assert [line for line in lines if "2x Test GPU, PIX" in line] == [
        next(line for line in lines if line.startswith(f"{first.config['model']} {first.config['launcher']} "
                                                        f"{fr._path_of(first)}: 2x Test GPU, PIX"))]
    _each_named_once(notes, {(r.config["model"], r.config["launcher"], fr._path_of(r)) for _, r in own})


def test_the_grid_holds_one_row_per_recording_and_each_cell_is_that_batchs_speedup():
    recs = fr.recordings()
    t = fr.recorded_grid(global_batches=(4, 32, 128))
    rows = t.to_dict()["rows"]
    assert [(r["model"], r["launcher"], r["path"]) for r in rows] == \
        [(r.config["model"], r.config["launcher"], r.config["path"]) for r in recs]
    others = []
    for res, row in zip(recs, rows):
        two = {r["global_batch"]: r for r in res.rows if r["workers"] == 2}
        for g in (4, 32, 128):
            want = (f"{two[g]['speedup']:.2f}x ({two[g]['speedup_min']:.2f}-{two[g]['speedup_max']:.2f})"
                    if g in two and two[g].get("speedup") is not None else "-")     # no plain run of it: "-"
            assert row[f"g{g}"] == want
        others += [f"{res.config['model']} {res.config['launcher']} {res.config['path']} at" for g in two
                   if g not in (4, 32, 128)]
    also = next((n for n in t.notes if n.startswith("Also recorded")), "")
    assert all(o in also for o in others) and bool(also) == bool(others)
    assert "n/a" not in str(t)
    # the grid says what its cells and paths mean; the reports' framework is said once, under recorded()
    assert "socket = TCP through the host" in str(t) and "MirroredStrategy" not in str(t)


def test_without_recordings_the_table_recordings_lists_everything_as_not_recorded(monkeypatch):
    from ddlab.base import reference
    monkeypatch.setattr(reference, "names", lambda kind: [])
    t = fr.recorded(models=("mlp-small",), launchers=("ddp",), paths=("shm",))
    assert t.to_dict()["rows"] == [] and "Not recorded yet: mlp-small ddp shm." in str(t)


def test_the_live_run_runs_the_two_mlps_on_two_cpu_processes(monkeypatch):
    from ddlab.system import policy
    from ddlab.training import experiments
    calls = []

    def fake(spec, global_batches, device, path, echo=False, progress=None):
        calls.append((spec.model, spec.repeats, spec.steps, tuple(global_batches), device, path, spec.limit_s))
        g = global_batches[0]
        # the plain one-GPU run (launcher none), DDP's one worker, two workers
        rows = [{"workers": w, "global_batch": g, "batch_per_worker": g // w, "images_per_s": ips,
                 "images_per_s_min": ips * 0.9, "images_per_s_max": ips * 1.1, "step_ms_median": 1.0, **more}
                for w, ips, more in ((1, 1000.0, {"path": "plain", "launcher": "none"}), (1, 900.0, {}),
                                     (2, 700.0, {}))]
        return ExperimentResult("strong-scaling", rows, "live", {}, [], {})
    monkeypatch.setattr(experiments, "strong_scaling", fake)
    t = fr.live(models=fr.REPORT_MLPS, machine=policy.Machine(gpus=0))
    assert [c[:6] for c in calls] == [(m, 3, 20, (32,), "cpu", "default") for m in fr.REPORT_MLPS]
    assert all(c[6] == fr.CPU_LAUNCH_TIMEOUT_S for c in calls)   # each launch keeps its timeout
    rows = t.to_dict()["rows"]
    assert [(r["model"], r["run"], r["per_worker"]) for r in rows] == [
        ("mlp-small", "1 GPU, no wrapper", 32), ("mlp-small", "DDP, 1 worker", 32), ("mlp-small", "DDP", 16),
        ("mlp-large", "1 GPU, no wrapper", 32), ("mlp-large", "DDP, 1 worker", 32), ("mlp-large", "DDP", 16)]
    assert rows[2]["speedup"] == pytest.approx(0.7) and rows[2]["spread"] == "0.63-0.77"   # over the plain run
    assert rows[1]["speedup"] == pytest.approx(0.9)                                       # DDP's one worker
    calls.clear()
    fr.live(machine=policy.Machine(gpus=0))                      # by default: the exercise's MLP only
    assert [c[0] for c in calls] == list(fr.LIVE_MLPS) == ["mlp-small"]
    assert "gloo" in str(t) and "MirroredStrategy" in str(t)


def test_the_live_cases_show_one_bar_per_cell_and_log_each_launch(monkeypatch, tmp_path, capsys):
    """With ``log``, each live case counts its launches on one progress bar (the lines go to the file)
    and ends with one summary line; without it, nothing changes."""
    from ddlab.course import tuning
    from ddlab.system import policy
    from ddlab.training import experiments
    from ddlab.training.runs import DONE_MARK
    launched = []

    def fake(spec, global_batches, device, path, echo=False, progress=None):
        for w in (0, 1, 2):          # the plain one-GPU run, then 1 and 2 workers
            for i in range(spec.repeats):
                launched.append((spec.model, w))
                if progress is not None:
                    progress(f"[t] launch {spec.model} on {w} worker(s)")
                    progress(f"[t]{DONE_MARK}1.0 s: {spec.model}, {w} worker(s), repeat {i + 1}")
        return ExperimentResult("strong-scaling", [], "live", {}, [], {})
    monkeypatch.setattr(experiments, "strong_scaling", fake)
    log = tmp_path / "strong.log"
    fr.live(models=fr.REPORT_MLPS, machine=policy.Machine(gpus=0), log=str(log))
    out = capsys.readouterr().out
    assert len(launched) == 18 and "mlp-small, mlp-large plain, on 1 and on 2 workers: 18 of 18 done" in out
    assert log.read_text().count(DONE_MARK) == 18 and "launch mlp-large on 2 worker(s)" in log.read_text()
    assert "launch mlp" not in out                          # the launches' lines are in the log, not on screen
    fr.live(machine=policy.Machine(gpus=0))
    assert "18 of 18" not in capsys.readouterr().out      # no log: no bar
    # the tuning bar counts only what runs here: the plain one-GPU run, the one-worker run and each tuning
    # this PyTorch can run, 3 times
    monkeypatch.setattr(tuning, "_skip_reason", lambda t: "needs CUDA" if "bf16" in t.flags else None)
    assert tuning.planned_launches("ddp", cs.CPU_TUNINGS, 3) == 3 * 4
    monkeypatch.setattr(tuning, "_skip_reason", lambda t: None)
    assert tuning.planned_launches("ddp", cs.CPU_TUNINGS, 3) == 3 * 5

def test_the_reports_figures_sit_beside_the_prediction_and_the_recording():
    t = fr.beside_cited()
    rows = t.to_dict()["rows"]
    cited = reference.load(fr.CITED_KIND, fr.REPORTS)["rows"]
    assert [(r["model"], r["global"], r["cited"]) for r in rows] == [(c["course_model"], c["batch"], c["speedup"])
                                                                     for c in cited]
    rec = recorded_runs.recorded_points()
    one = next(p for p in rec.points if p.model == "mlp-large" and p.launcher == "ddp")
    from ddlab.cost import predict
    same = predict.predict("mlp-large", step_ms=one.compute_s * 1e3, global_batch=16, path="shm",
                           step_has_wrapper=True)
    row = next(r for r in rows if (r["model"], r["global"]) == ("mlp-large", 16))
    assert row["predicted"] == pytest.approx(same.speedup) and row["per_gpu"] == 8
    # each recorded DDP split on shm appears where its model and global batch are ones the reports published
    recorded = {(res.config["model"], r["global_batch"]): r for res in fr.recordings()
                if res.config.get("path") == "shm" and res.config.get("launcher") == "ddp"
                for r in res.rows if r["workers"] == 2}
    for r in rows:
        if (r["model"], r["global"]) in recorded:
            assert r["measured"] == recorded[(r["model"], r["global"])]["speedup"]
            assert (r["spread"] != "-") == (r["measured"] is not None)    # '-': no plain run of that batch
        else:
            assert r["measured"] is None and r["spread"] == "-"
    assert any(r["measured"] is not None for r in rows) and any(r["measured"] is None for r in rows)
    text = str(t)
    assert "not checked by them" in text and "RTX 4070 Ti SUPER" in text
    machines = {}
    for res in fr.recordings():
        if res.config.get("path") == "shm" and res.config.get("launcher") == "ddp":
            machines.setdefault(res.provenance["machine"], []).append(res.config["model"])
    for machine, models in machines.items():             # the note names each machine once, with its models
        assert f"{' and '.join(models)} on {machine}" in text


def test_the_prediction_checks_the_measurement_only_where_both_are_of_one_machine():
    rec = recorded_runs.recorded_points()
    same = {"gpu_count": 2, "gpu_model": "NVIDIA H200", "driver": "580.159.04", "nccl": "2.28.9"}
    assert rec.made_here(same)                          # the course's sweeps' machine, as _machine_text writes it
    other = dict(same, gpu_model="NVIDIA H100 80GB HBM3")
    assert "so they do check each other" in fr._beside_said(rec, [same, same])
    for measured_on in ([same, other], [other], []):     # one row elsewhere, or none measured: side by side only
        said = fr._beside_said(rec, measured_on)
        assert "not checked against each other" in said and "check each other (" not in said


def test_the_live_run_on_two_gpus_splits_each_batch_over_them_with_peer_to_peer_off(monkeypatch):
    from ddlab.system import policy
    from ddlab.training import experiments
    calls = []

    def fake(spec, global_batches, device, path, echo=False, progress=None):
        calls.append((spec.model, spec.repeats, spec.device, tuple(global_batches), device, path))
        g = global_batches[0]
        rows = [{"workers": w, "global_batch": g, "batch_per_worker": g // w, "images_per_s": ips,
                 "images_per_s_min": ips, "images_per_s_max": ips, "step_ms_median": 1.0, **more}
                for w, ips, more in ((1, 1000.0, {"path": "plain", "launcher": "none"}), (1, 950.0, {}),
                                     (2, 850.0, {}))]
        return ExperimentResult("strong-scaling", rows, "live", {}, [], {})
    monkeypatch.setattr(experiments, "strong_scaling", fake)
    t = fr.live(machine=policy.Machine(gpus=2, software=lambda framework, launcher: (True, "")))
    assert calls == [("mlp-small", 3, "cuda", (32,), "cuda", "shm")]      # on GPUs the recorded MLP only
    assert fr.LIVE_MLPS == ("mlp-small",)
    assert "two GPUs, NCCL path shm (peer-to-peer off)" in str(t) and "gloo" not in str(t)
    assert [r["speedup"] for r in t.to_dict()["rows"] if r["workers"] == 2] == pytest.approx([0.85])
    calls.clear()
    fr.live(models=fr.REPORT_MLPS, machine=policy.Machine(gpus=2, software=lambda framework, launcher: (True, "")))
    assert [c[0] for c in calls] == list(fr.REPORT_MLPS)                     # both, when asked


def test_recordings_come_in_the_reports_order_launcher_model_then_path():
    """The recorded table reads like the reports: per launcher the small MLP first, and P2P off (shm) before
    the other paths of the same model; a file name's alphabetical order would put mlp-large first."""
    recs = fr.recordings()
    keys = [(r.config["launcher"], fr.REPORT_MLPS.index(r.config["model"]),
             fr.RECORDED_PATHS.index(r.config.get("path") or "default")) for r in recs]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    assert len({k[1] for k in keys}) == 2             # both MLPs recorded, so the order is tested


def test_a_recording_kept_under_a_machine_name_is_left_to_its_machines_check(monkeypatch):
    """The same JOB recorded on another machine is kept as strong-scaling-...-<path>-<machine>: the course's
    tables show the one under the JOB's own name and a note names the other; validation still reads it."""
    from ddlab.training import recording
    own = {n: r for n, r in recording.recorded_with_prefix(recorded_runs.STRONG_PREFIX) if n == fr._own_name(r)}
    name = "strong-scaling-torch-ddp-mlp-small-shm"
    other = ExperimentResult("strong-scaling", own[name].rows, "recorded",
                             dict(own[name].provenance, machine="2x Test GPU, PIX"), [], dict(own[name].config))
    monkeypatch.setattr(recording, "recorded_with_prefix",
                        lambda prefix: list(own.items()) + [(name + "-2xtest-pix", other)])
    assert len(fr.recordings()) == len(own)
    assert all(r.provenance.get("machine") != "2x Test GPU, PIX" for r in fr.recordings())
    assert [n for n, _ in fr.recorded_elsewhere()] == [name + "-2xtest-pix"]
    notes = fr.recorded(paths=("shm",)).notes
    assert any("Recorded on another machine too" in n and "mlp-small ddp shm on 2x Test GPU, PIX" in n for n in notes)
    assert not any("another machine too" in n for n in fr.recorded(paths=("socket",)).notes)   # not its path
    grid = [(r["model"], r["launcher"], r["path"]) for r in fr.recorded_grid().to_dict()["rows"]]
    assert len(grid) == len(set(grid)) == len(own)      # one row per model, framework and path


def test_the_reports_own_step_times_show_their_batch_is_split():
    t = fr.samples_per_step()
    cited = [r for r in reference.load(fr.CITED_KIND, fr.REPORTS)["rows"] if r.get("step_ms_one")]
    rows = t.to_dict()["rows"]
    assert [r["batch"] for r in rows] == [r["batch"] for r in cited]
    for r, c in zip(rows, cited):
        assert r["one"] == pytest.approx(fr._number(c["one_gpu"]) * c["step_ms_one"] / 1e3)
        assert r["two"] == pytest.approx(fr._number(c["two_gpus"]) * c["step_ms_two"] / 1e3)
        assert r["one"] == pytest.approx(r["batch"], rel=0.05) and r["two"] == pytest.approx(r["batch"], rel=0.05)


def test_the_course_mlps_and_the_reports_networks_are_set_side_by_side_with_both_counts():
    from ddlab.training import models
    rows = {r["model"]: r for r in fr.model_sizes().to_dict()["rows"]}
    cited = {r["course_model"]: int(r["parameters"].replace(",", ""))
             for r in reference.load(fr.CITED_KIND, fr.REPORTS)["rows"]}
    for m in fr.REPORT_MLPS:
        ours = sum(layer.params for layer in models.model_layers(m))
        assert rows[m]["ours"] == ours and rows[m]["ours_bytes"] == 4 * ours
        assert rows[m]["theirs"] == cited[m] and rows[m]["theirs_bytes"] == 4 * cited[m]
    recorded = fr.recording("mlp-large", "ddp", "shm")
    if recorded is not None:          # the recording's own gradient bytes agree with the count
        assert recorded.config["gradient_bytes_per_step"] == rows["mlp-large"]["ours_bytes"]


def test_every_cited_file_names_a_section_for_each_row():
    for name in reference.names(fr.CITED_KIND):
        t = fr.cited(name)
        assert t.rows and t.notes[0].startswith("Source: ")


def test_a_table_mixing_own_and_apart_plain_runs_says_which_recording_divides_by_which(monkeypatch):
    from ddlab.training import baseline, recording
    own = [(n, r) for n, r in recording.recorded_with_prefix(recorded_runs.STRONG_PREFIX) if n == fr._own_name(r)]
    name, first = next((n, r) for n, r in own if any(p.own for p in r.plain.values()))
    # the same recording without its plain rows divides by the plain runs recorded apart
    stripped = ExperimentResult("strong-scaling", [r for r in first.rows if not baseline.is_plain(r)], "recorded",
                                dict(first.provenance), [], dict(first.config, path="socket-apart"))
    assert stripped.plain and not any(p.own for p in stripped.plain.values())
    # and on a GPU no plain run is recorded for, it has none at all
    unmatched = ExperimentResult("strong-scaling", stripped.rows, "recorded",
                                 dict(first.provenance, gpu_model="Test GPU"), [], dict(first.config, path="none-found"))
    assert unmatched.plain and not any(p.found for p in unmatched.plain.values())
    label = f"{first.config['model']} {first.config['launcher']}"
    monkeypatch.setattr(recording, "recorded_with_prefix",
                        lambda prefix: [(name, first), (name, stripped), (name, unmatched)])
    monkeypatch.setattr(fr, "_own_name", lambda res: name)
    paths = (fr._path_of(first), "socket-apart", "none-found")
    for table in (fr.recorded(paths=paths), fr.recorded_grid(paths=paths)):
        notes = [n for n in table.notes if n.startswith("speedup") and "'-'" not in n]
        assert len(notes) == 2, notes
        own_line = next(n for n in notes if "own plain one-GPU run" in n)
        apart_line = next(n for n in notes if "recorded apart" in n)
        assert f"{label} {fr._path_of(first)}" in own_line
        assert "socket-apart" not in own_line and "none-found" not in own_line
        assert apart_line.endswith(f"for {label} socket-apart")
    # a table whose recordings all divide the same way keeps the one line
    monkeypatch.setattr(recording, "recorded_with_prefix", lambda prefix: [(name, stripped)])
    assert not any("own plain" in n for n in fr.recorded(paths=("socket-apart",)).notes)
