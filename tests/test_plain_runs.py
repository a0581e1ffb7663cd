"""The plain one-GPU runs every speedup divides by (ddlab.training.plain_runs, the plain-baselines JOB of
tools/recording/record_experiments.py) and how a recording without its own plain run finds one
(ddlab.training.baseline). The GPU runs are stood in for by a fake run; one real tiny run goes through the
training script's main() on the CPU (slow)."""
import importlib.util
import json
import os

import pytest

from ddlab.base import reference
from ddlab.training import baseline, plain_runs, recording
from ddlab.training.results import ExperimentResult

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _committed():
    return [ExperimentResult.from_dict(reference.load("experiments", n), source="recorded")
            for n in reference.names("experiments") if n.startswith(plain_runs.PREFIXES)]


def _fake_run(spec):
    """What the training script writes, made up from the spec (images/s grows with the batch)."""
    ips = 1000.0 * spec.batch ** 0.5 * (2 if spec.cuda_graph == "on" else 1)
    return {"workers": 1, "images_per_s": ips, "global_batch": spec.batch, "test_accuracy": 0.8, "device": "cuda",
            "backend": "none", "step_time_ms": {"median": 1e3 * spec.batch / ips, "p10": 1.0, "p90": 2.0},
            "cuda_graph": spec.cuda_graph == "on", "precision": spec.precision}


def test_every_committed_recording_has_its_plain_runs_listed():
    specs = plain_runs.configs_from_recordings()
    have = {(s.model, s.batch, s.precision, s.cuda_graph == "on", s.steps) for s in specs}
    assert all(s.launcher == "none" and s.workers == 1 and s.device == "cuda" for s in specs)
    assert len(have) == len(specs)                                       # each once
    for res in _committed():
        spec = res.spec
        if spec is None:
            continue
        # strong scaling: the one GPU takes the whole global batch; otherwise the batch per GPU
        batches = res.config["global_batches"] if res.name == "strong-scaling" else [spec.batch]
        for b in batches:
            assert (spec.model, b, spec.precision, spec.cuda_graph == "on", spec.steps) in have, (res.name, b)
    # by GPU model: the H100 pair's recordings (MLP batch sweeps, one strong-scaling and one tuning run) need fewer
    h200 = plain_runs.configs_from_recordings("NVIDIA H200")
    h100 = plain_runs.configs_from_recordings("NVIDIA H100 80GB HBM3")
    assert {plain_runs._key(s) for s in h200} <= {plain_runs._key(s) for s in specs}
    assert 0 < len(h100) < len(h200) and {s.model for s in h100} == {"mlp-small", "mlp-large", "wide"}
    assert {plain_runs._key(s) for s in h100} <= {plain_runs._key(s) for s in specs}


def test_the_runs_are_interleaved_and_each_configuration_is_a_row(tmp_path):
    specs = plain_runs.configs_from_recordings()[:3]
    order = []

    def run(spec):
        order.append(spec.batch)
        if spec is specs[1]:
            raise SystemExit("--cuda-graph on is impossible: CUDA graphs need a GPU")   # the script's refusal
        return _fake_run(spec)
    res = plain_runs.record(specs, repeats=3, run=run)
    assert order[:3] == [s.batch for s in specs] and len(order) == 3 + 2 * 2     # the failed one runs once
    ok, failed, other = res.rows
    assert ok["plain"] and ok["launcher"] == "none" and ok["repeats"] == 3 and ok["batch"] == specs[0].batch
    assert ok["images_per_s"] == pytest.approx(_fake_run(specs[0])["images_per_s"])
    assert "CUDA graphs need a GPU" in failed["error"] and other["repeats"] == 3
    assert len(res.runs) == 6 and res.config["order"] == "interleaved"
    path = recording.save(res, str(tmp_path / "plain.json"))             # its schema holds
    back = recording.load(path)
    assert back.rows == res.rows and "plain one-GPU runs" in back.table()


def test_a_recording_without_its_own_plain_run_divides_by_the_recorded_one(tmp_path, monkeypatch):
    """With plain-baselines-torch.json beside the recordings, a recording's speedups are over its plain
    run, and the caption names where it came from; without it, the wrapper-cost recording's plain rows
    serve where they match, and '-' is printed where nothing does."""
    here = os.path.join(ROOT, "source_code", "reference", "experiments")
    monkeypatch.setattr(reference, "REFERENCE_DIR", str(tmp_path))
    os.makedirs(tmp_path / "experiments")
    # the H100 pair's batch sweep, recorded without its own plain run, put at its home name
    kept = {"nccl-paths-torch-ddp-mlp-small-b2048": "nccl-paths-torch-ddp-mlp-small-b2048-2xh100-80gb-hbm3-nv18",
            "wrapper-cost-torch": "wrapper-cost-torch"}
    for n, src in kept.items():
        with open(os.path.join(here, src + ".json")) as f, open(tmp_path / "experiments" / f"{n}.json", "w") as g:
            g.write(f.read())
    before = recording.load_recorded("nccl-paths", "torch", "ddp", "mlp-small", variant="b2048")
    assert all(r["speedup"] is None for r in before.rows if not r.get("error"))   # no plain run at 2048
    assert any(n.startswith("speedup '-': no plain one-GPU run recorded for mlp-small at batch 2048")
               for n in before.table_notes())
    specs = [s for s in plain_runs.configs_from_recordings()
             if s.model == "mlp-small" and s.batch == 2048 and s.cuda_graph == "off"]
    res = plain_runs.record(specs, repeats=3, run=_fake_run)
    res.provenance["gpu_model"] = before.provenance["gpu_model"]          # recorded on that GPU model
    recording.save(res, str(tmp_path / "experiments" / f"{plain_runs.NAME}.json"))
    after = recording.load_recorded("nccl-paths", "torch", "ddp", "mlp-small", variant="b2048")
    plain_ips = res.rows[0]["images_per_s"]
    for r in after.rows:
        if not r.get("error"):
            assert r["speedup"] == pytest.approx(r["images_per_s"] / plain_ips)
    assert any("recorded apart on" in n and plain_runs.NAME in n for n in after.table_notes())
    assert after.shown_rows()[0]["path"] == baseline.PLAIN_PATH               # shown as a row of its own


def _record_experiments():
    spec = importlib.util.spec_from_file_location("record_experiments",
                                                  os.path.join(ROOT, "tools", "recording", "record_experiments.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_plain_baselines_job_dry_runs_on_the_cpu(tmp_path, monkeypatch):
    mod = _record_experiments()
    assert mod.parse_job("plain-baselines") == ("plain-baselines", "all", False)
    ran = []
    monkeypatch.setattr(plain_runs, "run_once", lambda spec: ran.append(spec) or _fake_run(spec))
    monkeypatch.setattr(recording, "use_hardware_label", lambda: "this machine")
    rc = mod.main([str(tmp_path), "plain-baselines", "--dry-run"])
    assert rc == 0
    out = recording.load(str(tmp_path / "dry-run" / f"{plain_runs.NAME}.json"))    # apart from what is adopted
    dry = plain_runs.dry_specs(plain_runs.configs_from_recordings())
    assert len(out.rows) == len(dry) and all(s.device == "cpu" and s.steps <= 6 for s in ran)
    assert {(r["model"], r["batch"]) for r in out.rows} == {(s.model, s.batch) for s in dry}


@pytest.mark.slow
def test_one_tiny_plain_run_goes_through_the_training_script_in_this_process():
    (spec,) = plain_runs.dry_specs([s for s in plain_runs.configs_from_recordings() if s.model == "mlp-small"])[:1]
    result = plain_runs.run_once(spec)
    assert result["workers"] == 1 and result["images_per_s"] > 0 and result["backend"] != "nccl"
    assert json.dumps(result)


def test_the_probe_jobs_parse_and_dry_run_on_cpu_processes(tmp_path, monkeypatch):
    """ddp:probe and horovod:probe are JOBs; --dry-run runs the comparison tiny on CPU processes (gloo:
    the default path only) under OUT/dry-run/, with the launches stood in for."""
    from _experiment_fakes import FakeLaunches, script_result
    from ddlab.training import runs
    mod = _record_experiments()
    assert mod.parse_job("ddp:probe") == ("ddp", "probe", False)
    assert mod.parse_job("horovod:probe") == ("horovod", "probe", False)
    fake = FakeLaunches(*[dict(script_result(100.0 * w, workers=w), device="cpu", backend="gloo")
                          for _ in range(3) for w in (1, 1, 2)])
    monkeypatch.setattr(runs.launch, "run", fake)
    monkeypatch.setattr(recording, "use_hardware_label", lambda: "this machine")
    assert mod.main([str(tmp_path), "ddp:probe", "--dry-run"]) == 0
    res = recording.load(str(tmp_path / "dry-run" / "nccl-paths-torch-ddp-probe.json"))
    assert [r["path"] for r in res.rows] == ["plain", "1 worker", "default"]
    assert all(a[a.index("--model") + 1] == "probe" and a[a.index("--device") + 1] == "cpu" for a in fake.argvs)
    assert [a[a.index("--launcher") + 1] for a in fake.argvs[:3]] == ["none", "ddp", "ddp"]
    assert not os.path.exists(tmp_path / "nccl-paths-torch-ddp-probe.json")     # adopt_results reads OUT only


def test_a_dry_run_at_another_batch_writes_the_gpu_runs_file_name(tmp_path, monkeypatch):
    """--batch N names the comparison -b<N> and writes no scaling file (the batch sweep), in a dry run as on
    the GPU machine, so the dry run checks the names adopt_results will see."""
    from _experiment_fakes import FakeLaunches, script_result
    from ddlab.training import runs
    mod = _record_experiments()
    fake = FakeLaunches(*[dict(script_result(100.0 * w, workers=w), device="cpu", backend="gloo")
                          for _ in range(3) for w in (1, 1, 2)])
    monkeypatch.setattr(runs.launch, "run", fake)
    monkeypatch.setattr(recording, "use_hardware_label", lambda: "this machine")
    assert mod.main([str(tmp_path), "ddp:mlp-small", "--batch", "128", "--dry-run"]) == 0
    assert sorted(os.listdir(tmp_path / "dry-run")) == ["nccl-paths-torch-ddp-mlp-small-b128.json"]
    assert all(a[a.index("--batch-size") + 1] == "128" for a in fake.argvs)


def test_a_wrapper_faster_than_a_plain_run_recorded_apart_is_flagged():
    from ddlab.training import baseline
    apart = baseline.Plain(None, 100.0, 95.0, 105.0, 1.0, 3, "1x GPU, another day")
    own = baseline.Plain(None, 100.0, 95.0, 105.0, 1.0, 3, "this result's own plain run", own=True)
    fast = [{"workers": 1, "images_per_s": 130.0, "speedup": 1.3, "speedup_min": 1.2}]
    slow = [{"workers": 1, "images_per_s": 80.0, "speedup": 0.8, "speedup_min": 0.7}]
    assert len(baseline.wrapper_faster_than_plain(fast, {"k": apart})) == 1
    assert baseline.wrapper_faster_than_plain(slow, {"k": apart}) == []
    assert baseline.wrapper_faster_than_plain(fast, {"k": own}) == []        # measured together: no such note


def test_the_plain_run_of_a_keras_spec_sets_no_pytorch_option():
    from ddlab.training.experiments import plain_spec
    from ddlab.training.runspec import RunSpec
    keras = plain_spec(RunSpec(framework="keras", launcher="horovod", model="cnn", workers=2, device="cpu"))
    assert keras.launcher == "none" and keras.workers == 1 and keras.cuda_graph is None
    keras.script_args()                                   # a valid run description: it builds its command
    torch = plain_spec(RunSpec(framework="torch", launcher="ddp", model="cnn", workers=2, device="cpu"))
    assert torch.cuda_graph == "off"


def test_a_side_by_side_view_divides_each_recording_by_its_own_plain_run():
    """DDP's and Horovod's wide recordings each hold a plain run timed beside them: in the combined view
    each launcher's rows keep the speedups over their own plain run, and the two plain rows are told apart."""
    from ddlab.training import experiments
    from ddlab.training.results import row_label
    res = experiments.launchers_side_by_side("wide", missing_ok=True)
    plain = {r["recorded_with"]: r for r in res.rows if baseline.is_plain(r)}
    assert set(plain) == {"ddp", "horovod"} and plain["ddp"]["images_per_s"] != plain["horovod"]["images_per_s"]
    for r in res.rows:
        if not r.get("error"):
            assert r["speedup"] == pytest.approx(r["images_per_s"] / plain[r["recorded_with"]]["images_per_s"])
    labels = {row_label(res.name, r, res.provenance) for r in plain.values()}
    assert len(labels) == 2


def test_launchers_side_by_side_keeps_each_rows_own_runs_and_command():
    from ddlab.training import experiments
    parts = {la: experiments.run_or_load("nccl-paths", "torch", la, "cnn", source="recorded", cpu_run=False)
             for la in ("ddp", "horovod")}
    joined = experiments.combine_launchers(parts)
    assert len(joined.rows) == sum(len(res.rows) for res in parts.values())
    for row in joined.rows:
        res = parts[row["recorded_with"]]
        src = next(r for r in res.rows if r.get("path") == row.get("path") and r.get("workers") == row.get("workers")
                   and baseline.is_plain(r) == baseline.is_plain(row))
        for field in ("run", "runs"):
            if field in src:      # the same run records, moved to the joined list
                ids = src[field] if field == "runs" else [src[field]]
                got = row[field] if field == "runs" else [row[field]]
                assert [joined.runs[i] for i in got] == [res.runs[i] for i in ids]
        assert joined.row_command(row) == res.row_command(src)
