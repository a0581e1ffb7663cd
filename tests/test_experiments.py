"""ddlab.experiments: results (table, plot, JSON), live-or-recorded, the CPU experiments and the CLI."""
import json

import matplotlib
import pytest

matplotlib.use("Agg")

from ddlab import cli, experiments as ex, reference  # noqa: E402


def fake_paths_result():
    """An nccl-paths result shaped like a recorded GPU one (for the formatting and loading logic)."""
    def row(path, workers, ips, speedup, transport, run):
        return {"path": path, "workers": workers, "images_per_s": ips, "speedup": speedup, "env": {},
                "env_text": path, "step_ms_median": 1.0, "step_ms_p10": 0.9, "step_ms_p90": 1.1,
                "step_ms_spread": "0.900-1.100", "global_batch": 512 * workers, "test_accuracy": 0.8,
                "transport": transport, "run": run}
    rows = [row("1 worker", 1, 100.0, 1.0, "-", 0), row("default", 2, 185.0, 1.85, "P2P", 1),
            row("shm", 2, 86.0, 0.86, "SHM", 2),
            {"path": "socket", "workers": 2, "env": {}, "env_text": "socket", "error": "timed out after 300 s"}]
    prov = {"machine": "h200x2", "gpu_model": "NVIDIA H200", "gpu_count": 2, "date": "2026-11-22T00:00:00+00:00"}
    cfg = {"framework": "torch", "launcher": "ddp", "model": "wide", "batch_size": 512, "device": "cuda",
           "baseline_images_per_s": 100.0}
    runs = [{"workers": 1}, {"workers": 2, "path": "default"}, {"workers": 2, "path": "shm"}]
    return ex.ExperimentResult("nccl-paths", rows, "live", prov, ["a note"], cfg, runs)


def test_result_table_plot_and_json_round_trip(tmp_path):
    res = fake_paths_result()
    text = res.table()
    assert "NCCL paths: torch ddp, model wide" in text and "measured now on h200x2 (2x NVIDIA H200), 2026-11-22" in text
    assert "185" in text and "1.85x" in text and "failed: timed out after 300 s" in text and "note: a note" in text
    ax = res.plot()
    assert len(ax.patches) == 3   # the failed path has no bar
    back = ex.ExperimentResult.from_dict(json.loads(json.dumps(res.to_dict())))
    assert back.rows == res.rows and back.config == res.config and back.provenance == res.provenance
    with pytest.raises(ValueError, match="no 'rows'"):
        ex.ExperimentResult.from_dict({"experiment": "x", "provenance": {}})


def test_scaling_taken_from_the_path_runs():
    s = ex.scaling_from_paths(fake_paths_result())
    assert s.name == "scaling" and [r["workers"] for r in s.rows] == [1, 2]
    assert s.rows[1]["speedup"] == 1.85 and s.rows[1]["efficiency"] == pytest.approx(0.925)
    assert s.runs == [{"workers": 1}, {"workers": 2, "path": "default"}]


@pytest.fixture
def recorded(tmp_path, monkeypatch):
    monkeypatch.setattr(reference, "REFERENCE_DIR", str(tmp_path))
    res = fake_paths_result()
    res.save_reference(ex.reference_name("nccl-paths", "torch", "ddp", "mlp-small"))
    return tmp_path


def test_recorded_result_is_loaded_and_labelled(recorded):
    res = ex.live_or_recorded("nccl-paths", "torch", "ddp", "mlp-small", source="recorded", cpu_run=False)
    assert res.source == "recorded" and res.companion is None
    assert res.notes[0].startswith("recorded: as asked; showing the run recorded on h200x2")
    assert "recorded on h200x2" in res.table()
    with pytest.raises(ex.ExperimentError, match="nothing is recorded"):
        ex.live_or_recorded("scaling", "torch", "ddp", "mlp-large", source="recorded", cpu_run=False)


def test_missing_record_is_an_honest_empty_result_when_asked():
    if ex.gpu_count("torch") >= 2:
        pytest.skip("this machine has GPUs: the experiment would run live on them")
    res = ex.live_or_recorded("nccl-paths", "torch", "horovod", "mlp-large", source="recorded", cpu_run=False,
                              missing_ok=True)
    assert res.source == "missing" and res.rows == []
    assert "not recorded yet" in res.table() and "no GPU result recorded" in res.notes[0]
    ax = res.plot()
    assert any("not recorded yet" in t.get_text() for t in ax.texts)


def test_live_refused_without_gpus_says_why():
    if ex.gpu_count("torch") >= 2:
        pytest.skip("this machine has GPUs")
    with pytest.raises(ex.ExperimentError, match="needs 2 GPU"):
        ex.live_or_recorded("nccl-paths", "torch", "ddp", "cnn", source="live")


@pytest.mark.slow
def test_no_gpu_runs_the_cpu_experiment_beside_the_recording(recorded):
    """Item 5 of the issue: with no GPU the experiment still runs for real (gloo, 2 processes)."""
    if ex.gpu_count("torch") >= 2:
        pytest.skip("this machine has GPUs: the experiment would run live on them")
    res = ex.live_or_recorded("nccl-paths", "torch", "ddp", "mlp-small", batch_size=16, steps=5, warmup_steps=1)
    assert res.source == "recorded" and "cannot run it live" in res.notes[0]
    cpu = res.companion
    assert cpu.source == "live" and cpu.config["device"] == "cpu"
    assert [r["path"] for r in cpu.rows] == ["1 worker", "default"]
    base, two = cpu.rows
    assert base["workers"] == 1 and two["workers"] == 2 and two["transport"] == "gloo (TCP, no NCCL)"
    assert two["speedup"] == pytest.approx(two["images_per_s"] / base["images_per_s"])
    assert two["ranks_agree"] is True and two["env"] == {}   # default path: every NCCL path variable removed
    assert any("do not apply" in n for n in cpu.notes)
    assert len(cpu.runs) == 2 and cpu.runs[1]["nccl_env"].get("NCCL_DEBUG") == "INFO"
    text = res.table()
    assert "recorded on h200x2" in text and "measured now on" in text
    axes = res.plot()
    assert len(axes) == 2


def test_train_rejects_bad_requests():
    with pytest.raises(ValueError, match="launcher 'none' runs one process"):
        ex.train("torch", "none", 2)
    with pytest.raises(ValueError, match="unknown model"):
        ex.train("torch", "ddp", 2, model="resnet")
    with pytest.raises(ValueError, match="unknown launcher"):
        ex.train("keras", "ddp", 2)
    with pytest.raises(ValueError, match="unknown NCCL path"):
        ex.nccl_path_comparison(paths=["nvlink"])


@pytest.mark.slow
def test_cli_train_json(capsys):
    rc = cli.main(["train", "--launcher", "none", "--model", "mlp-small", "--batch-size", "16", "--steps", "4",
                   "--warmup-steps", "1", "--device", "cpu", "--test-samples", "200", "--json", "--lr", "0.002"])
    assert rc == 0
    r = json.loads(capsys.readouterr().out)
    assert r["launcher"] == "none" and r["timed_steps"] == 3 and r["lr"] == 0.002 and r["test_samples"] == 200


def test_cli_train_failure_is_one_message(capsys):
    assert cli.main(["train", "--launcher", "none", "--workers", "2"]) == 1
    assert "launcher 'none' runs one process" in capsys.readouterr().err


def test_cli_experiment_recorded_json_and_out(recorded, capsys, tmp_path):
    out = tmp_path / "r.json"
    rc = cli.main(["experiment", "nccl-paths", "--model", "mlp-small", "--source", "recorded", "--json",
                   "--out", str(out)])
    assert rc == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["source"] == "recorded" and printed["rows"][1]["transport"] == "P2P"
    assert json.loads(out.read_text())["experiment"] == "nccl-paths"
    assert cli.main(["experiment", "nccl-paths", "--model", "mlp-large", "--source", "recorded"]) == 1
    assert "nothing is recorded" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["experiment", "scaling", "--workers", "1,x"])


def test_record_gpu_set_skips_what_this_machine_cannot_run(tmp_path, capsys):
    if ex.gpu_count("torch"):
        pytest.skip("this machine has a GPU")
    done = ex.record_gpu_set(str(tmp_path), sections=("ddp",), models=("mlp-small",), steps=4, warmup_steps=1,
                             batch_size=16)
    assert done["nccl-paths-torch-ddp-mlp-small"] == "skipped: needs 2 GPUs, torch sees 0"
    assert "skipped: needs 2 GPUs" in capsys.readouterr().out and list(tmp_path.iterdir()) == []


def test_record_gpu_set_reports_a_failure_and_goes_on(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(ex, "gpu_count", lambda framework="torch": 2)
    calls = []

    def fake(framework, launcher, model, **kw):
        calls.append(model)
        if model == "cnn":
            raise ex.launch.LaunchError("torchrun launch of 2 process(es) failed with exit code 1.")
        return fake_paths_result()
    monkeypatch.setattr(ex, "nccl_path_comparison", fake)
    done = ex.record_gpu_set(str(tmp_path), sections=("ddp",), models=("cnn", "wide"))
    assert calls == ["cnn", "wide"]
    assert done["nccl-paths-torch-ddp-cnn"].startswith("LaunchError: torchrun launch")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nccl-paths-torch-ddp-wide.json", "scaling-torch-ddp-wide.json"]
    out = capsys.readouterr().out
    assert "summary" in out and "185" in out and "LaunchError" in out


@pytest.mark.gpu
def test_gpu_graph_run_single_and_ddp():
    """On a GPU machine: the CUDA-graph paths (run with `pytest -m gpu`)."""
    n = ex.gpu_count("torch")
    if n < 1:
        pytest.skip("no GPU")
    r = ex.train("torch", "none", 1, "cnn", steps=60, warmup_steps=10, graph_fallback=False)
    assert r["cuda_graph"] is True and r["ranks_agree"] and r["test_accuracy"] > 0.5
    if n >= 2:
        r = ex.train("torch", "ddp", 2, "cnn", steps=60, warmup_steps=25, graph_fallback=False)
        assert r["cuda_graph"] is True and r["ranks_agree"] is True


def test_launchers_side_by_side(recorded):
    hvd = fake_paths_result()
    hvd.config["launcher"] = "horovod"
    for r in hvd.rows:
        if "images_per_s" in r:
            r["images_per_s"] *= 0.9
    hvd.save_reference(ex.reference_name("nccl-paths", "torch", "horovod", "mlp-small"))
    both = ex.launchers_side_by_side("mlp-small")
    assert [(r["path"], r["launcher"]) for r in both.rows][:4] == [
        ("1 worker", "ddp"), ("1 worker", "horovod"), ("default", "ddp"), ("default", "horovod")]
    assert both.rows[3]["images_per_s"] == pytest.approx(0.9 * both.rows[2]["images_per_s"])
    text = both.table()
    assert "NCCL paths by launcher" in text and "horovod" in text and "recorded on h200x2" in text
    assert len(both.plot().patches) == 6
