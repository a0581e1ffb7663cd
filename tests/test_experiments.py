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
    assert "NCCL paths: torch ddp, model wide" in text and "measured now on 2x NVIDIA H200 (2x NVIDIA H200), 2026-11-22" in text
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
    assert res.notes[0].startswith("recorded: as asked; showing the run recorded on 2x NVIDIA H200")
    assert "recorded on 2x NVIDIA H200" in res.table()
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
    assert "recorded on 2x NVIDIA H200" in text and "measured now on" in text
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
        ex.nccl_path_comparison(paths=["nvlnk"])


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


def test_record_gpu_set_runs_the_two_gpu_comparisons_before_the_slow_perf_options(tmp_path, monkeypatch):
    monkeypatch.setattr(ex, "gpu_count", lambda framework="torch": 2)
    monkeypatch.setattr(ex, "availability", lambda framework, launcher: (True, ""))
    calls = []

    def paths(framework, launcher, model, **kw):
        calls.append((launcher, model, kw.get("timeout"), kw["progress"]))
        return fake_paths_result()

    def perf(model, **kw):
        calls.append(("perf", model, kw.get("timeout"), kw["progress"]))
        raise ex.ExperimentError("every option failed")
    monkeypatch.setattr(ex, "nccl_path_comparison", paths)
    monkeypatch.setattr(ex, "performance_options", perf)
    done = ex.record_gpu_set(str(tmp_path), models=("cnn",), timeout=90, progress=print)
    assert [c[:3] for c in calls] == [("ddp", "cnn", 90), ("horovod", "cnn", 90), ("perf", "cnn", 90)]
    assert all(c[3] is print for c in calls)
    assert done["perf-options-torch-none-cnn"] == "ExperimentError: every option failed"
    calls.clear()
    ex.record_gpu_set(str(tmp_path), sections=("perf", "ddp"), models=("cnn",))
    assert [c[0] for c in calls] == ["perf", "ddp"]   # an explicit order is kept
    with pytest.raises(ValueError, match="unknown section"):
        ex.record_gpu_set(str(tmp_path), sections=("nvlink",))


# ----------------------------------------------------------------------------- the CUDA-graph rerun
STUCK_IN_CAPTURE = ("cuda-graph capture: start after 3 eager steps\n"
                    "Current thread 0x00007f00 (most recent call first):\n"
                    '  File "fmnist_torch.py", line 460 in main\n')


class FakeLaunches:
    """Stands in for ddlab.launch.run: each call pops the next outcome (an output text to fail
    with, "timeout" prefixed for a LaunchTimeout, or a result dict to write as the JSON)."""

    def __init__(self, *outcomes):
        self.outcomes, self.argvs = list(outcomes), []

    def __call__(self, argv, launcher, nproc, env, timeout, echo, python):
        self.argvs.append(list(argv))
        outcome = self.outcomes.pop(0)
        res = ex.launch.LaunchResult(command=list(argv), returncode=0, output="", duration_s=1.5)
        if isinstance(outcome, dict):
            with open(argv[argv.index("--json") + 1], "w") as f:
                json.dump(outcome, f)
            return res
        timed_out = outcome.startswith("timeout")
        res.output, res.returncode, res.timed_out = outcome, None if timed_out else -11, timed_out
        raise (ex.launch.LaunchTimeout if timed_out else ex.launch.LaunchError)("launch failed", res)


def test_a_run_stuck_in_its_default_capture_is_rerun_once_without_it_and_says_so(monkeypatch):
    fake = FakeLaunches("timeout\n" + STUCK_IN_CAPTURE, {"images_per_s": 5.0, "notes": [], "phase_s": {"imports": 1.0}})
    monkeypatch.setattr(ex.launch, "run", fake)
    lines = []
    r = ex.train("torch", "none", 1, "cnn", device="cuda", progress=lines.append)
    assert len(fake.argvs) == 2 and "--cuda-graph" not in fake.argvs[0]
    assert fake.argvs[1][fake.argvs[1].index("--cuda-graph") + 1] == "off"
    assert "rerun with --cuda-graph off" in r["notes"][-1] and "timed out" in r["notes"][-1]
    assert "in main" in r["cuda_graph_failure_log"]   # where it hung travels with the result
    assert any("running it once more with --cuda-graph off" in ln for ln in lines)   # said at once
    assert "done in 1.5 s" in lines[-1] and "imports 1.0" in lines[-1]


@pytest.mark.parametrize("launcher,extra,output", [
    ("none", (), "timeout\nphase data to device: 1.0 s\n"),   # died before any capture: no rerun
    ("none", ("--cuda-graph", "on"), "timeout\n" + STUCK_IN_CAPTURE),   # asked for explicitly
    ("ddp", ("--cuda-graph", "on"), "timeout\n" + STUCK_IN_CAPTURE),    # DDP capture is never rerun
])
def test_other_failures_are_not_rerun(monkeypatch, launcher, extra, output):
    fake = FakeLaunches(output)
    monkeypatch.setattr(ex.launch, "run", fake)
    with pytest.raises(ex.launch.LaunchTimeout):
        ex.train("torch", launcher, 2 if launcher == "ddp" else 1, "cnn", device="cuda", extra_args=extra)
    assert len(fake.argvs) == 1


def test_a_timed_out_path_keeps_where_the_workers_were_stuck(monkeypatch):
    base = {"workers": 1, "images_per_s": 100.0, "global_batch": 512, "test_accuracy": 0.8, "device": "cuda",
            "backend": "nccl", "step_time_ms": {"median": 1.0, "p10": 0.9, "p90": 1.1}, "params": 1,
            "batch_per_worker": 512}
    fake = FakeLaunches(base, "timeout\n" + STUCK_IN_CAPTURE)
    monkeypatch.setattr(ex.launch, "run", fake)
    res = ex.nccl_path_comparison("torch", "ddp", "cnn", paths=["default"], device="cuda")
    row = res.rows[1]
    assert row["path"] == "default" and "launch failed" in row["error"]
    assert "line 460 in main" in row["hang_traceback"]
    assert "line 460 in main" in ex.summary_table({"nccl-paths-torch-ddp-cnn": res})
    # a failed baseline costs the speedups, not the paths
    fake = FakeLaunches("timeout\n" + STUCK_IN_CAPTURE, dict(base, workers=2))
    monkeypatch.setattr(ex.launch, "run", fake)
    res = ex.nccl_path_comparison("torch", "ddp", "cnn", paths=["default"], device="cuda")
    assert [r["path"] for r in res.rows] == ["1 worker", "default"] and "hang_traceback" in res.rows[0]
    assert res.rows[1]["images_per_s"] == 100.0 and res.rows[1]["speedup"] is None
    assert res.config["baseline_images_per_s"] is None and "no speedups" in res.notes[0]
    assert "-" in res.table().splitlines()[-2]


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
def test_gpu_graph_run_single():
    """On a GPU machine: one process captures its step by default (run with `pytest -m gpu`)."""
    if ex.gpu_count("torch") < 1:
        pytest.skip("no GPU")
    r = ex.train("torch", "none", 1, "cnn", steps=60, warmup_steps=10, graph_fallback=False, timeout=90)
    assert r["cuda_graph"] is True and r["ranks_agree"] and r["test_accuracy"] > 0.5


@pytest.mark.gpu
def test_gpu_ddp_is_eager_by_default_and_captures_when_asked():
    """On 2 GPUs: DDP runs eagerly unless --cuda-graph on; the opt-in capture must finish well
    within its timeout, shutdown included (NCCL's destroy hangs while a graph that captured its
    all-reduce is alive, PyTorch issue 115388), or the LaunchTimeout message shows where each
    rank was stuck."""
    if ex.gpu_count("torch") < 2:
        pytest.skip("needs 2 GPUs")
    r = ex.train("torch", "ddp", 2, "cnn", steps=60, warmup_steps=25, timeout=90)
    assert r["cuda_graph"] is False and "opt-in" in r["cuda_graph_reason"] and r["ranks_agree"] is True
    r = ex.train("torch", "ddp", 2, "cnn", steps=60, warmup_steps=25, extra_args=["--cuda-graph", "on"], timeout=90)
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
    assert "NCCL paths by launcher" in text and "horovod" in text and "recorded on 2x NVIDIA H200" in text
    assert len(both.plot().patches) == 6


def test_graph_variant_is_its_own_recording(recorded):
    """cuda_graph=True loads the '-graph' recording, never the eager one, and adds no CPU run."""
    eager = fake_paths_result()
    graphed = fake_paths_result()
    for r in graphed.rows:
        if "images_per_s" in r:
            r["images_per_s"] *= 2
    graphed.save_reference(ex.reference_name("nccl-paths", "torch", "ddp", "mlp-small") + "-graph")
    res = ex.live_or_recorded("nccl-paths", "torch", "ddp", "mlp-small", cuda_graph=True, source="recorded")
    assert res.companion is None
    assert [r.get("images_per_s") for r in res.rows] == [2 * r["images_per_s"] if "images_per_s" in r else None
                                                          for r in eager.rows]
    # Without a graph recording for a model, the answer is "missing", not the eager numbers.
    res = ex.live_or_recorded("nccl-paths", "torch", "ddp", "mlp-large", cuda_graph=True, source="recorded",
                              missing_ok=True)
    assert res.source == "missing" and res.rows == []
    with pytest.raises(ValueError, match="Horovod's all-reduce cannot be captured"):
        ex.live_or_recorded("nccl-paths", "torch", "horovod", "mlp-small", cuda_graph=True, source="recorded")


def test_compare_speedups_lines_up_paths_and_marks_gaps():
    a = fake_paths_result()
    b = fake_paths_result()
    b.rows = [r for r in b.rows if r["path"] != "shm"]
    text = ex.compare_speedups({"eager": a, "graph": b})
    lines = text.splitlines()
    assert lines[0].split() == ["path", "eager", "graph"]
    shm = next(ln for ln in lines if ln.startswith("shm"))
    assert shm.split() == ["shm", "86", "0.86x", "-"]
    socket = next(ln for ln in lines if ln.startswith("socket"))
    assert socket.split() == ["socket", "-", "-"]          # the failed run shows as a gap, not a number
    default = next(ln for ln in lines if ln.startswith("default"))
    assert default.split() == ["default", "185", "1.85x", "185", "1.85x"]
    assert "eager: recorded on 2x NVIDIA H200" in text or "eager: measured now on 2x NVIDIA H200" in text
    with pytest.raises(ValueError):
        ex.compare_speedups({})


def test_cli_experiment_cuda_graph_reads_the_graph_recording(recorded, capsys):
    g = fake_paths_result()
    g.rows[1]["images_per_s"] = 777.0
    g.save_reference(ex.reference_name("nccl-paths", "torch", "ddp", "mlp-small") + "-graph")
    assert ex.cli_experiment(["nccl-paths", "--model", "mlp-small", "--source", "recorded", "--cuda-graph"]) == 0
    assert "777" in capsys.readouterr().out
    assert ex.cli_experiment(["nccl-paths", "--model", "mlp-small", "--source", "recorded"]) == 0
    out = capsys.readouterr().out
    assert "777" not in out and "185" in out


def test_one_gpu_machine_runs_single_gpu_parts_live_and_shows_recorded_multi_gpu_parts(recorded, monkeypatch):
    """The notebooks' single-GPU mode: with one GPU, perf-options (one process) runs live on it;
    nccl-paths (two GPUs) shows the recording, with the reason, and runs nothing on the GPU."""
    monkeypatch.setattr(ex, "gpu_count", lambda framework="torch": 1)
    monkeypatch.setattr(ex, "availability", lambda framework, launcher: (True, ""))
    calls = []

    def fake_run(experiment, framework, launcher, model, workers, device, **kw):
        calls.append((experiment, launcher, device))
        return ex.ExperimentResult(experiment, [], source="live", config={"device": device})
    monkeypatch.setattr(ex, "_run", fake_run)
    res = ex.live_or_recorded("perf-options", "torch", model="cnn")
    assert calls == [("perf-options", "none", "cuda")] and res.source == "live"
    assert res.notes[0].startswith("live: run just now on this machine's 1 GPU(s)")
    calls.clear()
    res = ex.live_or_recorded("nccl-paths", "torch", "ddp", "mlp-small", cpu_run=False)
    assert calls == [] and res.source == "recorded"
    assert "it needs 2 GPU(s) and torch sees 1" in res.notes[0]
    # With cpu_run, the small real run goes to CPU processes, never to the single GPU.
    res = ex.live_or_recorded("nccl-paths", "torch", "ddp", "mlp-small")
    assert calls == [("nccl-paths", "ddp", "cpu")] and res.companion is not None
    with pytest.raises(ex.ExperimentError, match="it needs 2 GPU"):
        ex.live_or_recorded("nccl-paths", "torch", "ddp", "mlp-small", source="live")
