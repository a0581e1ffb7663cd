"""ddlab.base.schemas: every recording checked against its JSON Schema on saving and on loading.

Every committed recording validates through its own loader; a truncated file and a file that
breaks its schema get one message from every loader (the file, the first bad field, what to do);
NaN is refused on saving (or, where a result keeps a diverged value on purpose, written as null).
"""
import json
import math
import os
import shutil

import pytest

from ddlab.base import files, reference, schemas
from ddlab.base.paths import REFERENCE_DIR
from ddlab.course import field_reports, mode
from ddlab.course import convergence_sweep as cs
from ddlab.cost import predict
from ddlab.measure import collectives, host_link, p2p_diagnosis
from ddlab.report import html_page, runner
from ddlab.system import topology
from ddlab.training import recording, step_profile
from ddlab.training.results import ExperimentResult


def _path(kind, name):
    return os.path.join(REFERENCE_DIR, kind, name + ".json")


# Each kind of recording under source_code/reference/ and the course's loader of one file of it.
LOADERS = {
    "experiments": lambda name: (cs.load(_path("experiments", name)) if name.startswith("convergence")
                                 else recording.load(_path("experiments", name))),
    "allreduce": lambda name: collectives.read_json(_path("allreduce", name)),
    "p2p": lambda name: (p2p_diagnosis.load(_path("p2p", name)), p2p_diagnosis.load_recorded(name)),
    "hostlink": lambda name: (host_link.load(_path("hostlink", name)), host_link.load_recorded(name)),
    "profiles": lambda name: step_profile.StepProfile.from_dict(reference.load("profiles", name)),
    "topologies": topology.recorded,
    "horovod": lambda name: reference.load("horovod", name),
    "nccl_logs": mode.recorded_nccl_logs,
    "cited": field_reports.cited,
}


def test_every_kind_of_recording_has_a_schema_and_a_loader():
    kinds = sorted(d for d in os.listdir(REFERENCE_DIR) if os.path.isdir(os.path.join(REFERENCE_DIR, d)))
    assert kinds and set(kinds) <= set(schemas.SCHEMAS) and set(kinds) == set(LOADERS)
    assert "report-step" in schemas.SCHEMAS


def test_every_committed_recording_loads_through_its_loader_and_fits_its_schema():
    loaded = 0
    for kind in sorted(LOADERS):
        for name in reference.names(kind):
            with open(_path(kind, name)) as f:
                assert schemas.first_error(json.load(f), kind) is None, f"{kind}/{name}"
            assert LOADERS[kind](name) is not None
            loaded += 1
    on_disk = sum(f.endswith(".json") for _, _, fs in os.walk(REFERENCE_DIR) for f in fs)
    assert loaded == on_disk and loaded >= 30


# ----------------------------------------------------------------------------- the first bad field
def test_first_error_names_the_field_nearest_the_top():
    rec = reference.load("experiments", "scaling-torch-ddp-cnn")
    assert schemas.first_error(rec, "experiments") is None
    rec["rows"][1]["images_per_s"] = "fast"
    assert schemas.first_error(rec, "experiments") == ("rows[1].images_per_s", "'fast' is not of type 'number', 'null'")
    del rec["provenance"]
    assert schemas.first_error(rec, "experiments")[0] == "provenance"
    assert schemas.first_error([1], "allreduce")[0] == "(top)"
    assert schemas.first_error({"experiment": "convergence", "rows": [{"label": "a", "workers": 1, "rule": "none",
                                                                       "warmup_epochs": 0}], "provenance": {}},
                               "experiments")[0] == "rows[0].global_batch"
    assert schemas.first_error({"format": 1, "step": "p2p", "status": "skipped"}, "report-step")[0] == "why"
    assert schemas.first_error({"format": 1, "step": "p2p", "status": "finished", "data": {}}, "report-step")[0] \
        == "status"                                   # the field itself, before what a condition on it asks
    with pytest.raises(KeyError, match="no schema 'nope'"):
        schemas.first_error({}, "nope")


def test_a_failed_row_may_carry_its_error_detail():
    rec = reference.load("experiments", "scaling-torch-ddp-cnn")
    rec["rows"].append({"workers": 2, "error": "crashed", "error_detail": "rank 1: CUDA error", "images_per_s": None})
    assert schemas.first_error(rec, "experiments") is None
    rec["rows"][-1]["error_detail"] = ["not", "text"]
    assert schemas.first_error(rec, "experiments")[0] == f"rows[{len(rec['rows']) - 1}].error_detail"


# ----------------------------------------------------------------------------- every loader, one message
def _copy_to(tmp_path, kind, name, dest=None):
    p = tmp_path / (dest or f"{name}.json")
    shutil.copy(_path(kind, name), p)
    return p


def _report_step(tmp_path):
    d = tmp_path / "rep"
    d.mkdir(exist_ok=True)
    p = d / "p2p.json"
    p.write_text(json.dumps({"format": runner.FORMAT, "step": "p2p", "title": "p2p", "status": "done",
                             "data": {"x": 1}, "provenance": {}}))
    return p


# loader name: (a valid file for it, how to load it, how to break its schema)
def _cases(tmp_path):
    conv = tmp_path / "convergence.json"
    cs.save(_diverged_sweep(), str(conv))
    return {
        "recording.load": (_copy_to(tmp_path, "experiments", "scaling-torch-ddp-cnn"), recording.load,
                           lambda d: d["rows"][0].update(images_per_s="fast"), "rows[0].images_per_s"),
        "convergence_sweep.load": (conv, cs.load, lambda d: d["rows"][0].pop("label"), "rows[0].label"),
        "collectives.read_json": (_copy_to(tmp_path, "allreduce", "h200x2", "sweeps.json"), collectives.read_json,
                                  lambda d: d["sweeps"][1]["rows"][2].pop("busbw_gbps"), "sweeps[1].rows[2].busbw_gbps"),
        "p2p_diagnosis.load": (_copy_to(tmp_path, "p2p", "h200x2", "p2p-result.json"), p2p_diagnosis.load,
                              lambda d: d["result"].update(n="two"), "result.n"),
        "host_link.load": (_copy_to(tmp_path, "hostlink", "1xh100-80gb-hbm3"), host_link.load,
                           lambda d: d["latency"][0].pop("us_median"), "latency[0].us_median"),
        "runner.load_step": (_report_step(tmp_path), lambda p: runner.load_step(os.path.dirname(p), "p2p"),
                             lambda d: d.update(status="finished"), "status"),
        "html_page.read_folder": (_report_step(tmp_path), lambda p: html_page.read_folder(os.path.dirname(p)),
                                  lambda d: d.pop("data"), "data"),
    }


LOADER_NAMES = ["recording.load", "convergence_sweep.load", "collectives.read_json", "p2p_diagnosis.load",
                "host_link.load", "runner.load_step", "html_page.read_folder"]


@pytest.mark.parametrize("loader", LOADER_NAMES)
def test_a_truncated_recording_gets_one_message_from_its_loader(loader, tmp_path):
    path, load, _, _ = _cases(tmp_path)[loader]
    assert load(str(path)) is not None
    text = path.read_text()
    path.write_text(text[: len(text) // 2])
    with pytest.raises(files.ResultFileError) as err:
        load(str(path))
    msg = str(err.value)
    assert f"{path} is truncated or corrupt" in msg and "record it again" in msg and "git checkout -- " in msg
    assert err.value.__cause__ is None and err.value.__suppress_context__      # no JSONDecodeError behind it


@pytest.mark.parametrize("loader", LOADER_NAMES)
def test_a_recording_that_breaks_its_schema_gets_one_message_naming_the_field(loader, tmp_path):
    path, load, spoil, field = _cases(tmp_path)[loader]
    d = json.loads(path.read_text())
    spoil(d)
    path.write_text(json.dumps(d))
    with pytest.raises(files.ResultFileError) as err:
        load(str(path))
    msg = str(err.value)
    assert str(path) in msg and f"recording format at {field} (" in msg
    assert "record it again, or restore it from git (git checkout -- " in msg and len(msg.splitlines()) == 1


def test_a_recording_under_reference_is_checked_on_loading(tmp_path, monkeypatch):
    monkeypatch.setattr(reference, "REFERENCE_DIR", str(tmp_path))
    (tmp_path / "hostlink").mkdir()
    p = _copy_to(tmp_path / "hostlink", "hostlink", "1xh100-80gb-hbm3", "x.json")
    d = json.loads(p.read_text())
    d["rows"][4]["gbps"] = "57"
    p.write_text(json.dumps(d))
    with pytest.raises(files.ResultFileError, match=r"x\.json does not match .* at rows\[4\]\.gbps"):
        host_link.load_recorded("x")
    p.write_text(p.read_text()[:100])
    with pytest.raises(files.ResultFileError, match=r"x\.json is truncated or corrupt"):
        host_link.load_recorded("x")


def test_predict_reads_a_sweep_file_through_its_loader(tmp_path):
    p = _copy_to(tmp_path, "allreduce", "h200x2")
    assert predict.file_fits(str(p))
    p.write_text(p.read_text()[:500])
    with pytest.raises(predict.PredictError, match="not a sweep file .* is truncated or corrupt"):
        predict.file_fits(str(p))


# ----------------------------------------------------------------------------- NaN and bad data on saving
def _refused(save, path, field):
    """``save()`` raises one message naming ``field``; the file at ``path`` is as it was."""
    before = path.read_bytes() if path.exists() else None
    with pytest.raises(files.ResultFileError, match=r"not writing .*" + field.replace("[", r"\[").replace("]", r"\]")):
        save()
    assert (path.read_bytes() if path.exists() else None) == before
    assert not path.parent.exists() or [f for f in os.listdir(path.parent) if f.endswith(".tmp")] == []


def test_nan_is_refused_by_every_saver(tmp_path, monkeypatch):
    res = recording.load_recorded("scaling", "torch", "ddp", "cnn")
    res.rows[1]["images_per_s"] = float("nan")
    _refused(lambda: recording.save(res, str(tmp_path / "e.json")), tmp_path / "e.json", "rows[1].images_per_s is NaN")
    sweeps = collectives.read_json(_path("allreduce", "h200x2"))
    sweeps[0].rows[3]["busbw_gbps"] = float("inf")
    _refused(lambda: collectives.write_json(sweeps, str(tmp_path / "a.json")), tmp_path / "a.json",
             "sweeps[0].rows[3].busbw_gbps is NaN")
    hl = host_link.load_recorded("1xh100-80gb-hbm3")
    hl.rows[0]["gbps"] = float("nan")
    _refused(lambda: host_link.save(hl, str(tmp_path / "h.json")), tmp_path / "h.json", "rows[0].gbps is NaN")
    monkeypatch.setattr(reference, "REFERENCE_DIR", str(tmp_path))
    prof = step_profile.StepProfile.from_dict(json.load(open(_path("profiles", "step-cnn"))))
    d = prof.to_dict()
    d["forward_s"] = float("nan")
    _refused(lambda: reference.save("profiles", "step-cnn", d), tmp_path / "profiles" / "step-cnn.json",
             "forward_s is NaN")


def test_a_p2p_recording_with_nan_is_refused(tmp_path, monkeypatch):
    from ddlab.system import provenance
    monkeypatch.setattr(provenance, "collect", lambda command=None, **kw: {"command": str(command)})
    r = p2p_diagnosis.load_recorded("h200x2")
    r.source = "live"
    path = tmp_path / "p.json"
    assert p2p_diagnosis.record(r, path=str(path)) == str(path)
    assert p2p_diagnosis.load(str(path)).n == r.n
    r.parameters = dict(r.parameters, link_peak_gbps=float("nan"))
    _refused(lambda: p2p_diagnosis.record(r, path=str(path)), path, "result.parameters.link_peak_gbps is NaN")


def test_a_result_that_breaks_its_schema_is_not_written(tmp_path):
    res = recording.load_recorded("scaling", "torch", "ddp", "cnn")
    res.rows[0]["workers"] = "two"
    _refused(lambda: recording.save(res, str(tmp_path / "e.json")), tmp_path / "e.json",
             r"e.json: it does not match the experiments recording format at rows[0].workers")


# ----------------------------------------------------------------------------- a diverged value on purpose
def _diverged_sweep():
    """A convergence sweep of one point, three seeds; seed 3's loss diverged (NaN)."""
    from ddlab.course.convergence_sweep import Point

    def train(spec, progress=None):
        loss = float("nan") if spec.seed == 3 else 0.5
        evs = [{"epoch": 1.0, "step": 10, "train_s": 1.0, "wall_s": 2.0, "lr": 0.1, "test_accuracy": 0.8,
                "test_loss": loss, "train_loss": loss, "noise": {"steps": 10, "small_sq": loss, "big_sq": 1.0}}]
        return {"seed": spec.seed, "batch_per_worker": spec.batch, "global_batch": spec.batch * spec.workers,
                "workers": spec.workers, "lr": 0.1, "steps": spec.steps, "epochs": 1.0, "test_accuracy": 0.8,
                "evaluations": evs}
    return cs.run_sweep([Point(2, 64)], "cpu", seeds=[1, 2, 3], train=train)


def test_a_convergence_sweep_writes_a_diverged_loss_as_null_and_reads_it_back_as_nan(tmp_path):
    res = _diverged_sweep()
    assert res.rows[0]["diverged"] == 1
    path = tmp_path / "c.json"
    cs.save(res, str(path))
    text = path.read_text()
    assert "NaN" not in text and "Infinity" not in text
    json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in the file"))
    back = cs.load(str(path))
    diverged = back.runs_of(res.rows[0]["label"])[2]["evaluations"][0]
    assert math.isnan(diverged["test_loss"]) and math.isnan(diverged["noise"]["small_sq"])
    assert back.with_target(0.5).rows[0]["diverged"] == 1
    other = tmp_path / "e.json"
    shutil.copy(_path("experiments", "scaling-torch-ddp-cnn"), other)
    with pytest.raises(files.ResultFileError, match="not a convergence sweep"):
        cs.load(str(other))


def test_a_report_step_writes_nan_as_null_and_a_bad_step_fails_alone(tmp_path):
    path = tmp_path / "p2p.json"
    rec = {"format": runner.FORMAT, "step": "p2p", "title": "p2p", "status": "done", "data": {"busbw": float("nan")}}
    runner._write(str(path), rec)
    assert runner.load_step(str(tmp_path), "p2p")["data"] == {"busbw": None}
    assert math.isnan(rec["data"]["busbw"])           # what this run keeps in memory is unchanged
    bad = {"format": runner.FORMAT, "step": "p2p", "title": "p2p", "status": "done", "data": ["not", "an", "object"]}
    runner._write(str(path), bad)
    back = runner.load_step(str(tmp_path), "p2p")
    assert back["status"] == bad["status"] == "failed" and "data" not in back
    assert back["why"].startswith("its result could not be saved: not writing the report step")


def test_experiment_result_round_trips_through_save_and_load(tmp_path):
    res = recording.load_recorded("nccl-paths", "torch", "ddp", "cnn")
    back = recording.load(recording.save(res, str(tmp_path / "r.json")))
    assert isinstance(back, ExperimentResult) and back.rows == res.rows and back.provenance == res.provenance


def test_checking_a_recording_leaves_out_the_slow_iri_checker_and_does_not_block_it():
    """A fresh process that loads a recording imports jsonschema without rfc3987-syntax (it
    builds its parsers on import, seconds per process), and may still import it afterwards."""
    import subprocess
    import sys
    code = ("import sys\n"
            "from ddlab.base import reference\n"
            "reference.load('horovod', 'h200x2')\n"
            "print('jsonschema' in sys.modules, 'rfc3987_syntax' in sys.modules)\n")
    source_code = os.path.dirname(os.path.dirname(os.path.dirname(schemas.__file__)))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=source_code))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False"]
