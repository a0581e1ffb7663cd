"""The step model against the recorded runs (ddlab.cost.validation): every term measured, modelled
or assumed, nothing fitted to the 2-GPU runs; the held-out table, its counts and why its misses miss."""
import json

import pytest

from ddlab.cost import validation as val
from ddlab.cost import wrapper_cost
from ddlab.cost.alpha_beta import AlphaBeta
from ddlab.cost.recorded_runs import RecordedPoint, RecordedSet, predict_point, recorded_points


def test_validate_on_the_recorded_runs():
    rec = recorded_points()
    t = val.validate(rec)
    rows = t.to_dict()["rows"]
    assert len(rows) == len(rec.points)
    for r, p in zip(rows, rec.points):
        # the speedups are over the plain one-GPU run ("-" where it is missing); the error is the 2-GPU images/s'
        assert (r["measured"] is None) == (p.plain_ratio is None) == (r["predicted"] is None)
        if r["measured"] is not None:
            assert r["error_pct"] == pytest.approx(100 * (r["predicted"] / r["measured"] - 1))
            assert r["measured"] == pytest.approx(p.measured * p.plain_ratio)
        assert r["within"] == ("yes" if abs(r["error_pct"]) <= 10 else "no")
    notes = " ".join(t.notes)
    assert ("Not recorded" in notes) == bool(rec.missing)
    assert "mlp-small" in notes and "no term is fitted to these runs" in notes
    inside = sum(r["within"] == "yes" for r in rows)
    assert notes.startswith(f"{inside} of {len(rows)} within")
    # with the measured step profiles and each path's channels, every DDP run of the wide model, eager and
    # captured, over NVLink and over shared memory, is inside the band
    assert all(r["within"] == "yes" for r in rows if r["launcher"].startswith("ddp") and r["model"] == "wide"
               and r["path"] in ("default", "shm"))
    assert "same GPU model" not in notes      # every graph run is the two-GPU machine's own
    assert "in proportion to its FLOPs" in " ".join(val.validate(rec, readiness="flops").notes)
    assert t.title.startswith("Predicted vs measured")


def test_held_out_on_the_recorded_runs():
    rec = recorded_points()
    t = val.held_out(rec)
    rows = t.to_dict()["rows"]
    assert [(r["launcher"], r["model"], r["path"], r["batch"]) for r in rows] == \
        [(p.launcher, p.model, p.path, p.batch) for p in rec.points]
    keys = {c.key for c in t.columns}
    assert {"model_err", "path_matters", "bound", "spread"} <= keys
    assert "in_sample" not in keys           # nothing fitted
    # the strong-scaling runs add per-GPU batches beside 512 (global batches 4 to 128 split over two), so a
    # batch can be held out too
    assert {r["batch"] for r in rows if r["launcher"] == "ddp strong"} == {2, 16, 64}
    assert {r["batch"] for r in rows if r["launcher"] == "horovod strong"} == {2, 4, 8, 16, 32, 64}
    assert {r["model"] for r in rows if r["launcher"].endswith("strong")} == {"mlp-small", "mlp-large"}
    # Horovod's host cost is measured per model and batch on one worker, and the two-worker term measured on the
    # probe is taken with the same measurement, so its per-step part cancels: leaving a model, a path or a batch
    # out gives the same prediction for every row, and one column shows them (the rows keep each scheme's)
    assert all(r["model_pred"] == pytest.approx(r["path_pred"]) == pytest.approx(r["batch_pred"]) for r in t.rows)
    assert [c.heading for c in t.columns if c.key.endswith(("_pred", "_err"))] == [
        "model, path or batch out", "error"]
    assert "gives the same prediction for every row, so one column shows them" in " ".join(t.notes)
    assert val.first_scheme(t) is t          # one column already: nothing to narrow
    rows = t.rows
    notes = " ".join(t.notes)
    assert notes.startswith("Held out: leaving each model out, ") and "leaving each batch out, " in notes
    assert "no in-sample count" in notes and "the field reports' experiment" in notes
    # the recordings kept under another machine's name (the reports' experiment over shm, the MLPs' batch
    # sweeps on the H100 pair) are named under their machine, not predicted from this machine's sweeps
    elsewhere = next(n for n in t.notes if n.startswith("Not predicted here"))
    h100 = elsewhere.split("2x NVIDIA H100 80GB HBM3, NV18: ")[1]
    for name in ("strong-scaling-torch-ddp-mlp-small-shm-2xh100-80gb-hbm3-nv18",
                 "nccl-paths-torch-ddp-mlp-small-b128-2xh100-80gb-hbm3-nv18",
                 "nccl-paths-torch-ddp-mlp-large-b2048-2xh100-80gb-hbm3-nv18"):
        assert name in h100
    # this machine's own batch sweeps (128 and 2048 per GPU) are predicted beside the 512 runs
    assert {p.batch for p in rec.points} == {512, 128, 2048, 2, 4, 8, 16, 32, 64}
    assert {p.model for p in rec.points if p.batch in (128, 2048)} == {"mlp-small", "mlp-large"}
    for by in ("model", "path", "batch"):             # the counts in the notes are the rows' own
        k, m = val.hits(rows, f"{by}_err")
        assert f"leaving each {by} out, {k} of {m} within" in notes
    flat = sum(r["path_matters"] == "NO" for r in rows)
    assert flat and f"{flat} of {len(rows)} predictions do not depend on the path" in notes
    assert all(r["path_matters"] == "yes" for r in rows if r["model"] == "wide" and r["path"] != "default")
    # every miss is named in the notes, with its error
    k, m = val.hits(rows, "model_err")
    out = [r for r in rows if abs(r["model_err"]) > 10]
    assert len(out) == m - k and (not out or f"Misses ({len(out)} of {len(rows)}" in notes)
    runs = [(r["launcher"], r["model"], r["path"]) for r in rows]
    for r in out:       # a run recorded at several batches per GPU is named with its batch
        at = f" at {r['batch']}/GPU" if runs.count((r["launcher"], r["model"], r["path"])) > 1 else ""
        assert f"{r['launcher']} {r['model']} {r['path']}{at} ({r['model_err']:+.1f}%)" in notes
    # the two-worker term, measured on the probe per launcher and path, is in the model; the notes count the
    # table without it beside the count with it
    assert set(rec.two_workers) == {(f, path) for f in ("ddp", "horovod") for path in ("default", "shm", "socket")}
    without = val.held_out_speedups(rec, "model", two_worker=False)
    k0, m0 = val.hits([{"e": val._err(w, r["m1"])} for w, r in zip(without, rows)], "e")
    assert (k0, m0) == val.hits(rows, "without_two_workers_err")
    assert f"leaving each model out, {k0} of {m0} within ±10% without it, {k} of {m} with it" in notes
    graph = [i for i, p in enumerate(rec.points) if not p.host_work]     # a CUDA-graph step never gets it
    assert graph and all(without[i] == pytest.approx(rows[i]["model_p1"]) for i in graph)
    # the terms and how each is known
    assert "all-reduce (measured)" in notes and "grows with the batch (assumed)" in notes
    assert "cycle wait (modelled)" in notes
    import matplotlib
    matplotlib.use("Agg")
    from ddlab.views import cost_plots
    ax = cost_plots.plot_validation(t, predicted="model_pred")
    assert len(ax.lines) >= len([r for r in rows if r["measured"] is not None])    # '-' rows have no place


def test_a_strong_scaling_point_is_predicted_as_a_split_batch():
    """A strong point's speedup is the one-GPU step over the 2-GPU step (the global batch is the same),
    where a weak point's is twice that; the step model's prediction is the same for both."""
    fits = {"default": AlphaBeta(20e-6, 100e9)}
    weak = RecordedPoint("ddp", "mlp-small", "default", 2, 16, 2e-3, None, True, 0.9, wrapper_in_step=True)
    strong = RecordedPoint("ddp strong", "mlp-small", "default", 2, 16, 2e-3, None, True, 0.9,
                           wrapper_in_step=True, strong=True)
    pred = predict_point(strong, fits, readiness="flops")
    assert pred.total_s == predict_point(weak, fits, readiness="flops").total_s
    assert strong.framework == "ddp" and strong.images_factor == 1 and weak.images_factor == 2
    assert strong.speedup(pred) == pytest.approx(2e-3 / pred.total_s)
    assert weak.speedup(pred) == pytest.approx(2 * 2e-3 / pred.total_s) == pytest.approx(pred.speedup)
    rows = val.held_out(RecordedSet([weak, strong], fits), readiness="flops").rows
    assert rows[1]["all_pred"] == pytest.approx(rows[0]["all_pred"] / 2)
    # the gap behind a miss: the measured 2-GPU step is the one-GPU step over the measured speedup
    assert val._gap_ms(dict(rows[1], m1=0.5)) == pytest.approx(1e3 * (2e-3 / 0.5 - pred.total_s))


def _points(fits, in_step=True):
    """Runs made by the model itself (measured = its own prediction) at two batches per GPU."""
    pts = []
    for model, one in (("cnn", 2e-3), ("mlp-large", 3e-3)):
        for batch, scale in ((256, 0.6), (512, 1.0)):
            for path in fits:
                p = RecordedPoint("ddp", model, path, 2, batch, one * scale, None, True, 1.0,
                                  wrapper_in_step=in_step)
                true = predict_point(p, fits, wrapper_cost.measured("ddp"), readiness="flops").speedup
                pts.append(RecordedPoint("ddp", model, path, 2, batch, one * scale, None, True, true,
                                         wrapper_in_step=in_step))
    return pts


def test_held_out_leaves_out_models_paths_and_batches_and_what_was_measured_on_them():
    fits = {"fast": AlphaBeta(20e-6, 300e9), "slow": AlphaBeta(40e-6, 5e9)}
    rec = RecordedSet(_points(fits), fits)
    t = val.held_out(rec, readiness="flops")
    assert "model_err" in {c.key for c in t.columns}
    assert [c.heading for c in t.columns if c.key == "model_pred"] == ["model, path or batch out"]
    for by in ("model", "path", "batch"):
        assert all(abs(r[f"{by}_err"]) < 1e-9 for r in t.rows), by      # the wrapper is in the one-GPU step
    assert "changes no prediction here" in " ".join(t.notes)
    # a plain one-GPU step adds the wrapper measured on one worker: leaving cnn out refits it without cnn's rows
    plain = RecordedSet(_points(fits, in_step=False), fits)
    held = val.held_out_speedups(plain, "model", readiness="flops")
    i = next(i for i, p in enumerate(plain.points) if p.model == "cnn")
    p = plain.points[i]
    without = wrapper_cost.measured("ddp", exclude_models=("cnn",))
    assert without != wrapper_cost.measured("ddp")
    assert held[i] == pytest.approx(predict_point(p, fits, without, readiness="flops").speedup)
    assert held[i] != pytest.approx(p.measured, rel=1e-6)
    with pytest.raises(ValueError, match="held out by one of"):
        val.held_out_speedups(plain, "machine")


def test_miss_notes_say_by_how_much_and_why_by_hand():
    base = {"n_gpus": 2, "compute_s": 2e-3, "measured_min": None, "measured_max": None, "comm_s": 0.0}
    rows = [dict(base, launcher="ddp", model="cnn", path="shm", measured=2.15, model_err=-7.0, model_pred=2.0,
                 step_s=2e-3, bound="host"),                                        # inside the band
            dict(base, launcher="ddp", model="cnn", path="x", measured=2.4, model_err=-16.7, model_pred=2.0,
                 step_s=2e-3, bound="host"),                                        # above 2x
            dict(base, launcher="ddp", model="mlp", path="y", measured=1.5, model_err=20.0, model_pred=1.8,
                 step_s=2e-3 * 2 / 1.8, bound="device", measured_min=1.4, measured_max=1.9),   # inside the spread
            # measured step 2 * 2 ms / 1.0 = 4 ms, predicted 3 ms: 1 ms missing on the host
            dict(base, launcher="horovod", model="cnn", path="default", measured=1.0, model_err=33.3,
                 model_pred=4 / 3, step_s=3e-3, bound="host"),
            # measured step 4 ms, predicted 5 ms, 4 ms of it the all-reduce: predicted too slow by 1 ms
            dict(base, launcher="horovod", model="wide", path="socket", measured=1.0, model_err=-20.0,
                 model_pred=0.8, step_s=5e-3, comm_s=4e-3, bound="host"),
            # the same run, but the path's own sweeps predict 0.7x to 1.1x: the measured 1.0x lies between
            dict(base, launcher="ddp", model="wide", path="socket", measured=1.0, model_err=-20.0,
                 model_pred=0.8, step_s=5e-3, comm_s=4e-3, bound="host", path_range=(0.7, 1.1))]
    # m1...: the same ratios over the one-worker run, which the model predicts from (here the same numbers)
    rows = [dict(r, m1=r["measured"], model_p1=r["model_pred"], m1_min=r.get("measured_min"),
                 m1_max=r.get("measured_max")) for r in rows]
    notes = "\n".join(val.miss_notes(rows, "model"))
    assert notes.startswith("Misses (5 of 6 with each model held out)")
    assert "within what the path's own all-reduce varies by: ddp wide socket (-20.0%)" in notes
    assert "ddp cnn shm" not in notes
    assert "measured above 2x" in notes and "ddp cnn x (-16.7%)" in notes
    assert "inside the min-max of the measured repeats" in notes and "ddp mlp y (+20.0%)" in notes
    assert "Horovod, host-bound: horovod cnn default (+33.3%); the measured step is longer than predicted by 1 ms" \
        in notes
    assert "predicted too slow: horovod wide socket (-20.0%)" in notes and "by 1 ms, with the all-reduce 80%" in notes
    assert val.miss_notes(rows[:1], "model") == ["Every held-out prediction is within the band."]
    # a host-bound DDP miss: without the probe's term nothing of two workers is in the prediction, so the
    # note names the probe JOBs; with it, what is missing grows with the model and a timeline would measure it
    host = dict(rows[3], launcher="ddp")
    without = "\n".join(val.miss_notes([host], "model"))
    with_term = "\n".join(val.miss_notes([host], "model", two_workers=True))
    assert "ddp:probe" in without and "ddp:probe" not in with_term
    assert "Missing term: a two-worker cost per bucket" in with_term and "torch.profiler" in with_term
    horovod = "\n".join(val.miss_notes(rows[3:4], "model", two_workers=True))
    assert "the two-worker term on the probe" in horovod and "HOROVOD_TIMELINE" in horovod
    slow = "\n".join(val.miss_notes(rows[4:5], "model"))
    assert "Missing term: how much of the all-reduce overlaps the host's own work" in slow


def test_link_effect_says_whether_the_path_decides_the_prediction():
    fits = {"fast": AlphaBeta(20e-6, 300e9), "slow": AlphaBeta(40e-6, 5e9)}
    rec = RecordedSet([], fits)
    hidden = RecordedPoint("ddp", "cnn", "fast", 2, 512, 2e-3, 0.5e-3, True, 1.9)   # host-bound: the GPU idles
    exposed = RecordedPoint("ddp", "wide", "slow", 2, 512, 3e-3, 3e-3, True, 0.3)
    assert val.link_effect(rec, hidden, readiness="flops") < val.PATH_INDEPENDENT
    assert val.link_effect(rec, exposed, readiness="flops") > 1


def test_the_candidate_wait_for_the_slower_rank_is_counted_beside_the_model_not_in_it():
    rec = recorded_points()
    t = val.held_out(rec)
    note = next(n for n in t.notes if n.startswith("A candidate term, not in the model"))
    rows = t.rows
    # the model's own count, and the count with the term, each computed from predictions
    k0, m0 = val.hits(rows, "model_err")
    waited = val.held_out_speedups(rec, "model", profiles=rec.profiles, channels=rec.channels, rank_wait=True)
    k, m = val.hits([{"e": 100 * (w / r["m1"] - 1)} for w, r in zip(waited, rows)], "e")
    assert f"{k} of {m} would be within ±10% ({k0} of {m0} without it)" in note
    assert "validation.held_out_other_machines()" in note
    # it lengthens every predicted step that the host decides, so no speedup rises
    assert all(w <= r["model_p1"] + 1e-12 for w, r in zip(waited, rows))
    assert any(w < r["model_p1"] for w, r in zip(waited, rows))
    assert val.term_bases(rec)["slower rank"] == "assumed"              # the model itself leaves it at 0
    for other in val.held_out_other_machines():                        # runs it was not built on
        assert any(n.startswith("A candidate term") and "these runs are ones it was not built on" in n
                   for n in other.notes)


def test_the_gpu_time_at_a_strong_runs_share_is_a_candidate_counted_beside_the_model_not_in_it():
    """The step JOB's one-GPU CUDA-graph runs at a strong run's share (mlp-large and mlp-small at 2, 16 and 64 per
    GPU, same GPU model) reach the strong points as a candidate: the model's own predictions do not use it, and
    a note counts the table with it and names each run it moves across the band, each from predictions."""
    from ddlab.training import recording
    rec = recorded_points()
    strong = [p for p in rec.points if p.strong and p.share_device_s]
    assert {(p.model, p.batch) for p in strong} == {(m, b) for m in ("mlp-small", "mlp-large") for b in (2, 16, 64)}
    p = next(p for p in strong if p.model == "mlp-large" and p.batch == 2)
    graph = recording.load_recorded("scaling", "torch", "ddp", "mlp-large", "graph-b2")
    one = next(r for r in graph.rows if r.get("launcher") != "none")
    assert p.share_device_s == pytest.approx(one["global_batch"] / one["images_per_s"])
    assert "batch 2" in p.share_device_source and p.device_s is None
    # not in the model: the same point predicted with and without it differs only when asked for
    plain = predict_point(p, rec.fits, two_workers=rec.two_workers)
    given = predict_point(p, rec.fits, two_workers=rec.two_workers, share_device=True)
    assert plain.bound == "serial" and given.bound in ("host", "device") and given.total_s != plain.total_s
    t = val.held_out(rec)
    note = next(n for n in t.notes if n.startswith("A candidate input, not in the model"))
    rows = t.rows
    k0, m0 = val.hits(rows, "model_err")
    with_it = val.held_out_speedups(rec, "model", profiles=rec.profiles, channels=rec.channels, share_device=True)
    errs = [100 * (w / r["m1"] - 1) for w, r in zip(with_it, rows)]
    k, m = val.hits([{"e": e} for e in errs], "e")
    assert f"{k} of {m} would be within ±10% ({k0} of {m0} without it)" in note
    came_in = [r for r, e in zip(rows, errs) if abs(e) <= 10 < abs(r["model_err"])]
    assert all(f"{r['launcher']} {r['model']} {r['path']} {r['batch']}/GPU" in note.split("Out:")[0].split("In:")[1]
               for r in came_in)
    # the weak runs, and every Horovod run, predict the same either way
    assert all(w == pytest.approx(r["model_p1"]) for w, r in zip(with_it, rows)
               if not r["launcher"].startswith("ddp strong"))


def test_a_gpu_time_at_the_share_is_taken_only_from_the_same_gpu_model(tmp_path, monkeypatch):
    import shutil
    from ddlab.base import reference
    from ddlab.cost import recorded_runs
    shutil.copytree(reference.REFERENCE_DIR, tmp_path / "ref")
    path = tmp_path / "ref" / "experiments" / "scaling-torch-ddp-mlp-large-graph-b16.json"
    data = json.loads(path.read_text())
    data["provenance"]["gpu_model"] = "NVIDIA A100-SXM4-80GB"
    path.write_text(json.dumps(data))
    monkeypatch.setattr(reference, "REFERENCE_DIR", str(tmp_path / "ref"))
    rec = recorded_runs.recorded_points()
    got = {(p.model, p.batch): p.share_device_s for p in rec.points if p.strong and p.launcher == "ddp strong"}
    assert got[("mlp-large", 16)] is None and got[("mlp-large", 2)] is not None


def test_term_bases_name_how_each_term_is_known():
    bases = val.term_bases(recorded_points())
    assert bases["all-reduce"] == "measured" and bases["grows with the batch"] == "assumed"
    assert bases["cycle wait"] == "modelled" and "measured" in bases["one-GPU step"]


def test_missed_picks_the_rows_outside_the_band_or_above_2x():
    ok = {"measured": 1.9, "model_err": 4.0, "path_err": -9.9, "in_sample": 2.0, "model_pred": 1.8}
    assert not val.missed(ok)
    assert val.missed(dict(ok, path_err=-10.5))
    assert val.missed(dict(ok, in_sample=12.0))
    assert val.missed(dict(ok, measured=2.01))
    assert not val.missed(dict(ok, model_err=None))          # not held out: no miss
    table = val.held_out()
    shown = table.where(val.missed)
    assert 0 < len(shown) < len(table) and all(val.missed(r) for r in shown.rows)


def test_recorded_terms_of_one_run():
    t = val.recorded_terms("horovod", "cnn", "default")
    names = [r["name"] for r in t.rows]
    assert names[0] == "one-GPU step" and "cycle wait" in names and "grows with the batch" in names
    assert all(r["source"] and r["basis"] in ("measured", "modelled", "assumed") for r in t.rows)
    assert "predicted" in t.title and "measured" in t.title
    with pytest.raises(ValueError, match="no recorded run"):
        val.recorded_terms("ddp", "resnet", "default")


def test_a_gpu_time_from_another_machine_is_named():
    from ddlab.cost.recorded_runs import RecordedSet
    rec = RecordedSet([], {}, device_elsewhere={"mlp-small": "1x NVIDIA H200"}, device_check={"cnn": 1.02})
    text = " ".join(val._input_notes(rec, {}))
    assert "mlp-small comes from one-GPU CUDA-graph runs on 1x NVIDIA H200 (the same GPU model)" in text
    assert "+2.0% (cnn)" in text


def test_each_other_machine_with_its_own_sweeps_gets_its_own_held_out_table(tmp_path, monkeypatch):
    """The H100 pair's all-reduce sweeps are recorded: its runs (the MLPs' batch sweeps and the shm
    strong-scaling run) get a table of their own, predicted from those sweeps, and none of them enters the
    course's table. Without those sweeps there is no second table and the course's table is the same."""
    import os
    import shutil
    from ddlab.base import reference
    from ddlab.cost import recorded_runs
    assert [rec.sweeps for rec in recorded_runs.recorded_sets()] == ["h200x2", "2xh100-80gb-hbm3-nv18"]
    assert [rec.sweeps for rec in recorded_runs.recorded_sets(others_only=True)] == ["2xh100-80gb-hbm3-nv18"]
    first = val.held_out().to_dict()["rows"]
    assert {r["batch"] for r in first} == {512, 128, 2048, 2, 4, 8, 16, 32, 64}
    (other,) = val.held_out_other_machines()
    assert "2x NVIDIA H100 80GB HBM3" in other.title
    rows = other.to_dict()["rows"]
    assert {r["batch"] for r in rows} == {128, 2048, 2, 16, 64}
    assert {r["model"] for r in rows} == {"mlp-small", "mlp-large"}
    shutil.copytree(reference.REFERENCE_DIR, tmp_path / "ref")
    os.remove(tmp_path / "ref" / "allreduce" / "2xh100-80gb-hbm3-nv18.json")
    monkeypatch.setattr(reference, "REFERENCE_DIR", str(tmp_path / "ref"))
    assert [rec.sweeps for rec in recorded_runs.recorded_sets()] == ["h200x2"]
    assert val.held_out_other_machines() == []
    assert val.held_out().to_dict()["rows"] == first


def test_the_horovod_miss_says_what_the_one_worker_measurement_reaches(monkeypatch):
    from ddlab.cost import validation, wrapper_cost
    # the recording holds the hooks rows, so the note says what two workers add beyond them
    assert validation._horovod_host_gap().startswith("Horovod's host work is measured on one worker with its hooks on")
    monkeypatch.setattr(wrapper_cost, "measured", lambda framework: wrapper_cost.Overheads(
        0.0, launcher="horovod", basis="modelled"))
    assert "its hooks, the negotiation" in validation._horovod_host_gap()       # no hooks row: modelled as 0
    monkeypatch.setattr(wrapper_cost, "measured", lambda framework: wrapper_cost.Overheads(
        1e-3, launcher="horovod", basis="measured", cycle_s=1e-3))
    assert validation._horovod_host_gap().startswith("Horovod's host work is measured on one worker with its hooks on")



def test_the_module_prints_the_held_out_table_from_the_command_line():
    """`python -m ddlab.cost.validation`, as the README gives it: runs the module as a script, where every
    helper the notes call must be defined before its `__main__` block runs."""
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, "-m", "ddlab.cost.validation"], capture_output=True, text=True,
                          timeout=120, cwd=os.path.join(root, "source_code"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("Held out:") and "Misses (" in done.stdout
    assert "within what the path's own all-reduce varies by" in done.stdout


def test_a_path_measured_again_brackets_each_prediction_over_it(tmp_path, monkeypatch):
    """allreduce/h200x2-repeats holds the course machine's sweeps measured again: each row is also
    predicted with every sweep of its path, and the range holds the model's own prediction; the notes
    quote how far the sweeps differ. Without the file nothing of it shows and the table is the same."""
    import os
    import shutil
    from ddlab.base import reference
    rec = recorded_points()
    assert len(rec.path_fits["socket"]) >= 3 and rec.path_fits["socket"][0] is rec.fits["socket"]
    table = val.held_out(rec)
    rows = table.rows
    for r in rows:
        lo, hi = r["path_range"]
        assert lo * (1 - 1e-9) <= r["all_pred"] <= hi * (1 + 1e-9)
    socket = [r["path_range"][1] / r["path_range"][0] for r in rows if r["path"] == "socket"]
    assert max(socket) > 1.1                              # the socket sweeps differ enough to matter
    assert any(n.startswith("The same all-reduce sweeps measured again") and "socket" in n for n in table.notes)
    shutil.copytree(reference.REFERENCE_DIR, tmp_path / "ref")
    os.remove(tmp_path / "ref" / "allreduce" / "h200x2-repeats.json")
    monkeypatch.setattr(reference, "REFERENCE_DIR", str(tmp_path / "ref"))
    without = val.held_out(recorded_points())
    assert all(r["path_range"] is None for r in without.rows)
    assert not any(n.startswith("The same all-reduce sweeps measured again") for n in without.notes)
    assert [r["all_pred"] for r in without.rows] == [r["all_pred"] for r in rows]
