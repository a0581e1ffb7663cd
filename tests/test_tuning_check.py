"""The step model against the recorded communication tunings (ddlab.cost.tuning_check): each tuning's
setting becomes the model's input, tunings it cannot predict are named, the counts are the rows' own."""
import pytest

from ddlab.cost import tuning_check as tc
from ddlab.cost import wrapper_cost
from ddlab.cost.alpha_beta import AlphaBeta
from ddlab.cost.recorded_runs import RecordedPoint, RecordedSet, predict_point, recorded_points
from ddlab.training.results import ExperimentResult

UNTUNED = {"accumulate": 1, "bucket_cap_mb": None, "gradient_as_bucket_view": False, "static_graph": False,
           "comm_hook": "none", "hvd_compression": "none", "hvd_fusion_mb": None, "hvd_cycle_ms": None}


def test_each_setting_becomes_the_model_input_it_changes():
    assert tc.model_inputs(UNTUNED) == ({}, [], [], None)
    kw, modelled, left, why = tc.model_inputs(dict(UNTUNED, bucket_cap_mb=100.0, comm_hook="bf16",
                                                   gradient_as_bucket_view=True, static_graph=True))
    assert kw == {"bucket_cap_mb": 100.0, "bytes_per_param": 2} and why is None
    assert modelled[0] == "buckets of 100 MB" and left == ["gradients as bucket views", "static graph"]
    kw, modelled, _, _ = tc.model_inputs(dict(UNTUNED, hvd_compression="fp16", hvd_fusion_mb=256, hvd_cycle_ms=0.5))
    assert kw == {"bytes_per_param": 2, "fusion_threshold_bytes": 256 * 1024 * 1024, "cycle_s": 0.5e-3}
    assert modelled[1:] == ["fusion buffer 256 MB", "cycle 0.5 ms"]
    assert tc.model_inputs(dict(UNTUNED, accumulate=2))[3].startswith("accumulation")
    assert tc.model_inputs(None) == ({}, [], [], None)


def _comparison(fits, measured_by_tuning):
    """A recorded DDP comparison whose 2-GPU speedups are given per tuning config (None: the model's own)."""
    one_s = 3e-3
    # the plain one-GPU run at the one-worker run's speed: the speedups over either are then the same numbers
    rows = [{"tuning": "1 GPU, no wrapper", "path": "plain", "launcher": "none", "workers": 1, "global_batch": 512,
             "images_per_s": 512 / one_s},
            {"tuning": "1 worker, untuned", "workers": 1, "global_batch": 512, "images_per_s": 512 / one_s}]
    for name, config, measured in measured_by_tuning:
        if measured is None:
            kw = tc.model_inputs(config)[0]
            p = RecordedPoint("ddp", "mlp-large", "default", 2, 512, one_s, None, True, 1.0, wrapper_in_step=True)
            measured = predict_point(p, fits, wrapper_cost.measured("ddp"), readiness="flops", **kw).speedup
        ips = measured * 512 / one_s
        rows.append({"tuning": name, "workers": 2, "global_batch": 1024 * config.get("accumulate", 1),
                     "images_per_s": ips, "images_per_s_min": 0.9 * ips, "images_per_s_max": ips, "repeats": 3,
                     "tuning_config": config})
    return ExperimentResult("tuning", rows, "recorded", {}, [],
                            {"launcher": "ddp", "model": "mlp-large", "path": "default"})


def test_a_prediction_set_beside_its_measurement_counts_and_names_what_it_cannot_predict(monkeypatch):
    fits = {"default": AlphaBeta(2e-3, 5e9)}      # a latency this large makes the number of buckets count
    rec = RecordedSet([], fits)
    res = _comparison(fits, [("untuned", UNTUNED, None),
                             ("bucket 1 MB", dict(UNTUNED, bucket_cap_mb=1.0), None),
                             ("bf16 hook", dict(UNTUNED, comm_hook="bf16"), 0.7),
                             ("accumulate 2", dict(UNTUNED, accumulate=2), 1.5)])
    monkeypatch.setattr(tc, "recorded_comparisons", lambda r, elsewhere=None: [res])
    monkeypatch.setattr(tc, "recorded_points", lambda: pytest.fail("the set given is used"))
    t = tc.tuning_check(rec)
    assert [r["tuning"] for r in t.rows] == ["untuned", "bucket 1 MB", "bf16 hook"]
    untuned, bucket, hook = t.rows
    assert abs(untuned["error_pct"]) < 1e-9 and abs(bucket["error_pct"]) < 1e-9
    assert bucket["predicted"] != pytest.approx(untuned["predicted"], rel=1e-6)   # the bucket cap reached the model
    assert hook["predicted"] > 0.8 and hook["sixteen_bit"] and hook["error_pct"] > 10
    notes = "\n".join(t.notes)
    assert notes.startswith("2 of 3 within ±10%") and "nothing in the model changed for them" in notes
    assert f"16-bit gradients, predicted too fast: ddp bf16 hook ({hook['error_pct']:+.1f}%)" in notes
    assert hook["slower_than_untuned"] and "Each ran slower than its launcher's untuned run" in notes
    assert "Not predicted: ddp accumulate 2 (accumulation" in notes
    text = str(t)
    assert "buckets of 1 MB" in text and "2 bytes per gradient on the link" in text


def test_nothing_recorded_says_so(monkeypatch):
    monkeypatch.setattr(tc, "recorded_comparisons", lambda r, elsewhere=None: [])
    t = tc.tuning_check(RecordedSet([], {"default": AlphaBeta(1e-5, 1e10)}))
    assert t.rows == [] and "No tuning comparison is recorded on this machine yet." in t.notes


def test_the_recorded_tunings_of_the_wide_model():
    rec = recorded_points()
    t = tc.tuning_check(rec)
    got = {(r["launcher"], r["tuning"]) for r in t.rows}
    assert {("ddp", "untuned"), ("ddp", "bucket 100 MB"), ("horovod", "fusion 256 MB"),
            ("horovod", "cycle 0.5 ms")} <= got
    assert not any(name in ("batch x2", "accumulate 2") for _, name in got)
    inside = sum(abs(r["error_pct"]) <= 10 for r in t.rows)
    assert t.notes[0].startswith(f"{inside} of {len(t.rows)} within ±10%")
    misses = [r for r in t.rows if abs(r["error_pct"]) > 10]
    notes = "\n".join(t.notes)
    assert all(f"{r['launcher']} {r['tuning']} ({r['error_pct']:+.1f}%)" in notes for r in misses)
    # the note on steps predicted too fast names Horovod's part only when a Horovod row is among them
    slow = [r for r in misses if not r["sixteen_bit"] and r["gap_s"] > 0]
    slow_note = next((n for n in t.notes if n.startswith("Predicted too fast")), "")
    assert bool(slow_note) == bool(slow)
    assert ("for Horovod, what two workers add" in slow_note) == any(r["launcher"] == "horovod" for r in slow)
    # a not-modelled setting is predicted as the untuned run of its launcher
    by = {(r["launcher"], r["tuning"]): r for r in t.rows}
    assert by[("ddp", "static graph")]["predicted"] == pytest.approx(by[("ddp", "untuned")]["predicted"])
    assert "static graph: not modelled" in by[("ddp", "static graph")]["modelled"]
    # a comparison recorded on another machine is named, not checked against this machine's links
    from ddlab.training import recording
    other = [(n, r.provenance["machine"]) for n, r in recording.recorded_with_prefix(tc.PREFIX)
             if not rec.made_here(r.provenance)]
    assert all(f"{n} ({m})" in t.notes[-1] for n, m in other) and (not other or "another machine" in t.notes[-1])
    assert len(tc.recorded_comparisons(rec)) + len(other) == len(recording.recorded_with_prefix(tc.PREFIX))


def test_another_machines_tunings_are_checked_against_its_own_sweeps():
    """The H100 pair's recorded tuning comparison (the wide model over shm, kept under a name with its
    machine) is not in the course's table, which has the course machine's own comparison of the same
    JOB; it gets a table of its own, predicted from that pair's all-reduce sweeps and its own one-GPU run."""
    from ddlab.training import recording
    course = tc.tuning_check()
    (other,) = tc.tuning_check_other_machines()
    assert "2x NVIDIA H100 80GB HBM3" in other.title and "2x NVIDIA H100" not in course.title
    rows = other.rows
    assert rows and {(r["launcher"], r["path"]) for r in rows} == {("ddp", "shm")}
    found = dict(recording.recorded_with_prefix(tc.PREFIX))
    res = found["tuning-torch-ddp-wide-shm-2xh100-80gb-hbm3-nv18"]
    assert res.provenance["gpu_model"] == "NVIDIA H100 80GB HBM3"
    assert found["tuning-torch-ddp-wide-shm"].provenance["gpu_model"] != res.provenance["gpu_model"]
    # no plain one-GPU run is recorded on that GPU: its speedups show as "-" and the notes say which run is
    # missing; the errors (of the 2-GPU images/s) are still there
    assert all(r["measured"] is None and r["predicted"] is None for r in rows)
    assert all(r.get("speedup") is None for r in res.rows if r.get("workers") == 2)
    assert "no plain one-GPU run recorded for wide at batch 512, bf16, on NVIDIA H100 80GB HBM3" in " ".join(other.notes)
    assert all(r["error_pct"] is not None for r in rows)
    inside = sum(abs(r["error_pct"]) <= 10 for r in rows)
    assert other.notes[0].startswith(f"{inside} of {len(rows)} within ±10%")
