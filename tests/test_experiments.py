"""ddlab.training.experiments: the named experiments, live-or-recorded for them, and `ddlab experiment`."""
import json
import os
import re

import matplotlib
import pytest

matplotlib.use("Agg")

from _experiment_fakes import STUCK_IN_CAPTURE, FakeLaunches, fake_paths_result, script_result  # noqa: E402
from ddlab.base.paths import SOURCE_DIR  # noqa: E402
from ddlab import cli
from ddlab.training import experiments as ex, recording, result_views, results, runs, cli as training_cli
from ddlab.system import policy
from ddlab.base import reference
from ddlab.training.runspec import RunSpec  # noqa: E402

NO_GPU = policy.Machine(gpus=0, software=lambda framework, launcher: (True, ""))
ONE_GPU = policy.Machine(gpus=1, label="1x NVIDIA L4", software=lambda framework, launcher: (True, ""))
TWO_GPUS = policy.Machine(gpus=2, label="2x NVIDIA H200, NV18", nvcc=True,
                        software=lambda framework, launcher: (True, ""))


def test_scaling_taken_from_the_path_runs():
    s = ex.scaling_from_paths(fake_paths_result())
    paths = fake_paths_result()
    assert s.name == "scaling" and [r["workers"] for r in s.rows] == [1, 1, 2]
    assert s.rows[0]["plain"] and s.rows[0]["speedup"] == 1.0        # the plain run, then DDP's one worker
    plain_ips = paths.rows[0]["images_per_s"]
    assert s.rows[1]["speedup"] == pytest.approx(paths.rows[1]["images_per_s"] / plain_ips)
    assert s.rows[2]["speedup"] == pytest.approx(paths.rows[2]["images_per_s"] / plain_ips)
    assert s.rows[2]["efficiency"] == pytest.approx(s.rows[2]["speedup"] / 2)
    for row, before in zip(s.rows, paths.rows[:3]):              # each row keeps its own runs
        assert s.runs[row["run"]] == paths.runs[before["run"]]
        assert [s.runs[i] for i in row.get("runs", [row["run"]])] == \
            [paths.runs[i] for i in before.get("runs", [before["run"]])]
    assert s.table()                                               # its commands are rebuilt from its own runs


@pytest.fixture
def recorded(tmp_path, monkeypatch):
    monkeypatch.setattr(reference, "REFERENCE_DIR", str(tmp_path))
    res = fake_paths_result()
    recording.save_reference(res, ex.reference_name("nccl-paths", "torch", "ddp", "mlp-small"))
    return tmp_path


def test_recorded_result_is_loaded_and_labelled(recorded):
    res = ex.run_or_load("nccl-paths", "torch", "ddp", "mlp-small", source="recorded", cpu_run=False)
    assert res.source == "recorded" and res.companion is None
    assert not any(n.startswith("recorded:") for n in res.notes)       # asked for: no reason to give
    assert "recorded on 2x NVIDIA H200" in res.table().splitlines()[0]    # the title says where it was recorded
    with pytest.raises(ex.ExperimentError, match="nothing is recorded"):
        ex.run_or_load("scaling", "torch", "ddp", "mlp-large", source="recorded", cpu_run=False)


def test_missing_record_is_an_honest_empty_result_when_asked():
    res = ex.run_or_load("nccl-paths", "keras", "horovod", "mlp-large", source="recorded", cpu_run=False,
                              missing_ok=True, machine=NO_GPU)
    assert res.source == "missing" and res.rows == []
    assert "not recorded yet" in res.table() and "no GPU result recorded" in res.notes[0]
    ax = res.plot()
    assert any("not recorded yet" in t.get_text() for t in ax.texts)


def test_live_refused_without_gpus_says_why():
    with pytest.raises(ex.ExperimentError, match="needs 2 GPU"):
        ex.run_or_load("nccl-paths", "torch", "ddp", "cnn", source="live", machine=NO_GPU)


@pytest.mark.slow
def test_no_gpu_runs_the_cpu_experiment_beside_the_recording(recorded, monkeypatch):
    """With no GPU the experiment still runs for real (gloo, 2 processes). Forced on any machine:
    the policy is told there is no GPU, and the workers see none."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    res = ex.run_or_load("nccl-paths", "torch", "ddp", "mlp-small", batch=16, steps=5, warmup_steps=1,
                              machine=NO_GPU)
    assert res.source == "recorded" and res.notes[0].startswith("recorded: not live here (it needs 2 GPU")
    cpu = res.companion
    assert cpu.source == "live" and cpu.config["device"] == "cpu"
    assert [r["path"] for r in cpu.rows] == ["plain", "1 worker", "default"]
    plain, base, two = cpu.rows
    assert plain["launcher"] == "none" and plain["backend"] != base["backend"]     # one process, no wrapper
    assert base["workers"] == 1 and two["workers"] == 2 and two["transport"] == "gloo (TCP, no NCCL)"
    assert two["speedup"] == pytest.approx(two["images_per_s"] / plain["images_per_s"])    # over the plain run
    assert base["speedup"] == pytest.approx(base["images_per_s"] / plain["images_per_s"])  # the wrapper's own row
    assert two["ranks_agree"] is True and two["env"] == {}   # default path: every NCCL path variable removed
    assert any("only 'default' ran" in n for n in cpu.notes)        # NCCL paths do not apply to gloo
    assert len(cpu.runs) == 3 and cpu.runs[2]["nccl_env"].get("NCCL_DEBUG") == "INFO"
    text = res.table()
    assert "recorded on 2x NVIDIA H200" in text and "measured now on" in text
    axes = res.plot()
    assert len(axes) == 2


def test_cli_experiment_recorded_json_and_out(recorded, capsys, tmp_path):
    out = tmp_path / "r.json"
    rc = cli.main(["experiment", "nccl-paths", "--model", "mlp-small", "--source", "recorded", "--json",
                   "--out", str(out)])
    assert rc == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["source"] == "recorded" and printed["rows"][2]["transport"] == "P2P"
    assert json.loads(out.read_text())["experiment"] == "nccl-paths"
    assert cli.main(["experiment", "nccl-paths", "--model", "mlp-large", "--source", "recorded"]) == 1
    assert "nothing is recorded" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["experiment", "scaling", "--workers", "1,x"])


def test_a_timed_out_path_keeps_where_the_workers_were_stuck(monkeypatch):
    base = script_result(100.0)
    fake = FakeLaunches(dict(base, backend="none"), base, "timeout\n" + STUCK_IN_CAPTURE)
    monkeypatch.setattr(runs.launch, "run", fake)
    res = ex.nccl_path_comparison(paths=["default"], device="cuda", model="cnn")
    row = res.rows[2]
    assert row["path"] == "default" and "launch failed" in row["error"]
    assert "line 460 in main" in row["hang_traceback"]
    assert "line 460 in main" in result_views.summary_table({"nccl-paths-torch-ddp-cnn": res})
    # a failed plain run costs the speedups (nothing stands in for it), not the paths
    fake = FakeLaunches("timeout\n" + STUCK_IN_CAPTURE, base, dict(base, workers=2))
    monkeypatch.setattr(runs.launch, "run", fake)
    res = ex.nccl_path_comparison(RunSpec.for_device("cuda", "cnn", launcher="ddp", workers=2), paths=["default"])
    assert [r["path"] for r in res.rows] == ["plain", "1 worker", "default"] and "hang_traceback" in res.rows[0]
    assert res.rows[2]["images_per_s"] == 100.0 and res.rows[2]["speedup"] is None
    assert res.rows[1]["speedup"] is None            # the wrapper's one-worker run is no stand-in
    assert res.config["baseline_images_per_s"] is None and "no speedups" in res.notes[0]


def test_each_configuration_runs_repeats_times_interleaved_and_keeps_every_value(monkeypatch):
    # the repeats run in rounds: the baseline, then each path, once per round
    outcomes = [script_result(v, workers=w) for triple in ((100.0, 90.0, 210.0), (98.0, 91.0, 190.0),
                                                           (102.0, 89.0, 205.0))
                for v, w in zip(triple, (1, 1, 2))]
    fake = FakeLaunches(*outcomes)
    nprocs = []
    monkeypatch.setattr(runs.launch, "run", lambda argv, nproc, **kw: nprocs.append(nproc)
                        or fake(argv, nproc=nproc, **kw))
    res = ex.nccl_path_comparison(RunSpec.for_device("cuda", "cnn", launcher="ddp", workers=2, repeats=3),
                                  paths=["default"])
    assert nprocs == [1, 1, 2] * 3
    assert len(fake.argvs) == 9 and len(res.runs) == 9
    assert [a[a.index("--launcher") + 1] for a in fake.argvs[:3]] == ["none", "ddp", "ddp"]
    plain, base, default = res.rows
    assert plain["images_per_s"] == 100.0 and plain["images_per_s_runs"] == [100.0, 98.0, 102.0]
    assert base["speedup"] == pytest.approx(90.0 / 100.0)     # DDP's one worker: its own ratio to plain
    assert default["images_per_s"] == 205.0 and (default["images_per_s_min"], default["images_per_s_max"]) == (190.0, 210.0)
    assert default["speedup"] == pytest.approx(2.05) and default["above_linear"] is True
    assert default["runs"] == [6, 7, 8] and res.runs[default["run"]]["images_per_s"] == 205.0
    assert res.config["repeats"] == 3 and RunSpec.from_dict(res.config["spec"]).repeats == 3
    assert res.spec.repeats == 3 and res.live_default_differences() == {}
    text = res.table()
    assert "205 (190-210)" in text and "2.05x (!)" in text and "above linear" in text
    assert res.config["order"] == "interleaved"
    assert any(n.startswith("the repeats were interleaved in 3 round(s), each running the plain one-GPU run, the "
                            "one-worker run and every path once") for n in res.notes)


def test_launchers_side_by_side(recorded):
    hvd = fake_paths_result()
    hvd.config["launcher"] = "horovod"
    for r in hvd.rows:
        if "images_per_s" in r:
            r["images_per_s"] *= 0.9
    recording.save_reference(hvd, ex.reference_name("nccl-paths", "torch", "horovod", "mlp-small"))
    both = ex.launchers_side_by_side("mlp-small")
    assert [(r["path"], r["launcher"]) for r in both.rows][:6] == [
        ("plain", "none"), ("plain", "none"), ("1 worker", "ddp"), ("1 worker", "horovod"), ("default", "ddp"),
        ("default", "horovod")]
    assert both.rows[5]["images_per_s"] == pytest.approx(0.9 * both.rows[4]["images_per_s"])
    text = both.table()
    assert "NCCL paths by launcher" in text and "horovod" in text and "recorded on 2x NVIDIA H200" in text
    assert len(both.plot().patches) == 8


def test_graph_variant_is_its_own_recording(recorded):
    """cuda_graph=True loads the '-graph' recording, never the eager one, and adds no CPU run."""
    eager = fake_paths_result()
    graphed = fake_paths_result()
    for r in graphed.rows:
        if "images_per_s" in r:
            r["images_per_s"] *= 2
    recording.save_reference(graphed, ex.reference_name("nccl-paths", "torch", "ddp", "mlp-small") + "-graph")
    res = ex.run_or_load("nccl-paths", "torch", "ddp", "mlp-small", cuda_graph=True, source="recorded")
    assert res.companion is None
    assert [r.get("images_per_s") for r in res.rows] == [2 * r["images_per_s"] if "images_per_s" in r else None
                                                          for r in eager.rows]
    # Without a graph recording for a model, the answer is "missing", not the eager numbers.
    res = ex.run_or_load("nccl-paths", "torch", "ddp", "mlp-large", cuda_graph=True, source="recorded",
                              missing_ok=True)
    assert res.source == "missing" and res.rows == []
    with pytest.raises(ValueError, match="Horovod's all-reduce cannot be captured"):
        ex.run_or_load("nccl-paths", "torch", "horovod", "mlp-small", cuda_graph=True, source="recorded")


def test_cli_experiment_cuda_graph_reads_the_graph_recording(recorded, capsys):
    g = fake_paths_result()
    g.rows[1]["images_per_s"] = 777.0
    recording.save_reference(g, ex.reference_name("nccl-paths", "torch", "ddp", "mlp-small") + "-graph")
    assert training_cli.cli_experiment(["nccl-paths", "--model", "mlp-small", "--source", "recorded", "--cuda-graph"]) == 0
    assert "777" in capsys.readouterr().out
    assert training_cli.cli_experiment(["nccl-paths", "--model", "mlp-small", "--source", "recorded"]) == 0
    out = capsys.readouterr().out
    assert "777" not in out and "185" in out


@pytest.fixture
def fake_run(monkeypatch):
    calls = []

    def run(experiment, framework, launcher, model, workers, device, **kw):
        calls.append((experiment, launcher, device))
        return ex.ExperimentResult(experiment, [], source="live", config={"device": device})
    monkeypatch.setattr(ex, "run_experiment", run)
    return calls


def test_one_gpu_machine_runs_single_gpu_parts_live_and_shows_recorded_multi_gpu_parts(recorded, fake_run):
    """The notebooks' single-GPU mode: with one GPU, perf-options (one process) runs live on it;
    nccl-paths (two GPUs) shows the recording, with the reason, and runs nothing on the GPU."""
    res = ex.run_or_load("perf-options", "torch", model="cnn", machine=ONE_GPU)
    assert fake_run == [("perf-options", "none", "cuda")] and res.source == "live"
    assert res.notes[0].startswith("live: run just now on this machine's 1 GPU(s)")
    fake_run.clear()
    res = ex.run_or_load("nccl-paths", "torch", "ddp", "mlp-small", cpu_run=False, machine=ONE_GPU)
    assert fake_run == [] and res.source == "recorded"
    assert "it needs 2 GPU(s) and torch sees 1" in res.notes[0]
    # With cpu_run, the small real run goes to CPU processes, never to the single GPU.
    res = ex.run_or_load("nccl-paths", "torch", "ddp", "mlp-small", machine=ONE_GPU)
    assert fake_run == [("nccl-paths", "ddp", "cpu")] and res.companion is not None
    with pytest.raises(ex.ExperimentError, match="it needs 2 GPU"):
        ex.run_or_load("nccl-paths", "torch", "ddp", "mlp-small", source="live", machine=ONE_GPU)


def test_each_hardware_mode_decides_for_the_training_experiments(recorded, fake_run):
    """No GPU: recorded plus a CPU run; 1 GPU: recorded for two-GPU experiments; 2 GPUs: live."""
    res = ex.run_or_load("nccl-paths", "torch", "ddp", "mlp-small", machine=NO_GPU)
    assert res.source == "recorded" and fake_run == [("nccl-paths", "ddp", "cpu")]
    assert "torch sees 0" in res.notes[0]
    fake_run.clear()
    res = ex.run_or_load("nccl-paths", "torch", "ddp", "mlp-small", machine=TWO_GPUS)
    assert res.source == "live" and fake_run == [("nccl-paths", "ddp", "cuda")]
    fake_run.clear()
    missing_framework = policy.Machine(gpus=2, software=lambda framework, launcher: (False, "Horovod is not built"))
    res = ex.run_or_load("nccl-paths", "torch", "horovod", "mlp-small", machine=missing_framework,
                              missing_ok=True)
    assert fake_run == [] and res.source == "missing" and "Horovod is not built" in res.notes[0]


def test_no_training_script_imports_the_experiment_layer():
    """The training scripts import only from below them (train_common, models, data, throughput,
    provenance, launch), never from the experiments that start them."""
    above = ("experiments", "runs", "recording", "results", "mode")
    train_dir = os.path.join(SOURCE_DIR, "train")
    scripts = [f for f in os.listdir(train_dir) if f.endswith(".py")]
    assert scripts
    for name in scripts:
        with open(os.path.join(train_dir, name)) as f:
            text = f.read()
        imported = set(re.findall(r"^\s*from ddlab(?:\.(\w+))? import ([\w, ]+)", text, re.M))
        modules = {m for m, _ in imported if m} | {n.strip() for m, names in imported if not m
                                                   for n in names.split(",")}
        assert "provenance" in text and not modules & set(above), (name, modules & set(above))
        assert "ddlab.training.experiments" not in text, name


@pytest.fixture
def fake_experiments(monkeypatch):
    """The experiments run_experiment dispatches to, faked: each call's device and fields."""
    calls = []

    def fake(name):
        def run(**kw):
            calls.append(kw)
            return ex.ExperimentResult(name, [], source="live", config={"device": kw.get("device")})
        return run
    monkeypatch.setattr(ex, "nccl_path_comparison", fake("nccl-paths"))
    monkeypatch.setattr(ex, "throughput_scaling", fake("scaling"))
    return calls


def test_live_gpu_comparisons_repeat_three_times_unless_told(recorded, fake_experiments):
    ex.run_or_load("nccl-paths", "torch", "ddp", "mlp-small", machine=TWO_GPUS)
    assert fake_experiments[-1]["repeats"] == ex.LIVE_GPU_REPEATS == 3
    ex.run_or_load("nccl-paths", "torch", "ddp", "mlp-small", machine=TWO_GPUS, repeats=5)
    assert fake_experiments[-1]["repeats"] == 5
    # the small CPU run beside a recording stays a single run (its notes say so)
    ex.run_or_load("nccl-paths", "torch", "ddp", "mlp-small", machine=NO_GPU)
    assert fake_experiments[-1]["device"] == "cpu" and "repeats" not in fake_experiments[-1]


def test_the_experiment_command_repeats_live_gpu_runs_three_times_unless_told(fake_experiments, capsys):
    from ddlab.training import cli as training_cli
    for extra in ([], ["--repeats", "5"]):
        assert training_cli.cli_experiment(["scaling", "--source", "live", "--device", "cuda", *extra]) == 0
    assert training_cli.cli_experiment(["scaling", "--source", "live", "--device", "cpu"]) == 0
    assert [(c["device"], c.get("repeats")) for c in fake_experiments] == [("cuda", 3), ("cuda", 5), ("cpu", None)]


# ----------------------------------------------------------------------------- progress of live GPU runs
def test_planned_launches_count_every_configuration_times_its_repeats():
    # the plain one-GPU run is a configuration of its own, beside the wrapper's one-worker run
    assert ex.planned_launches("nccl-paths") == (2 + len(ex.COMPARED_PATHS)) * ex.LIVE_GPU_REPEATS
    assert ex.planned_launches("nccl-paths", repeats=2, paths=("default",)) == 6
    assert ex.planned_launches("scaling", workers=(1, 2, 4), repeats=1) == 4
    assert ex.planned_launches("perf-options", repeats=3) == 3 * len(ex.PERF_OPTIONS)
    with pytest.raises(ex.RunSpecError, match="unknown experiment"):
        ex.planned_launches("nccl-path")


def test_a_live_gpu_run_in_a_notebook_shows_one_bar_and_keeps_the_launch_lines_in_its_log(recorded, monkeypatch,
                                                                                          tmp_path, capsys):
    """Live on two GPUs with a log (what "auto" picks in Jupyter): the launches' lines go to the log,
    and the bar counts the finished launches; with no log (a terminal) no progress is passed on."""
    seen = []

    def run(experiment, framework, launcher, model, workers, device, **kw):
        seen.append(kw.get("progress"))
        if kw.get("progress"):
            for i in range(4):
                kw["progress"](f"launch {i} started")
                kw["progress"](f"launch {i}{runs.DONE_MARK}9.1 s")
        return ex.ExperimentResult(experiment, [], source="live", config={"device": device})
    monkeypatch.setattr(ex, "run_experiment", run)
    log = tmp_path / "live.log"
    res = ex.run_or_load("nccl-paths", "torch", "ddp", "wide", machine=TWO_GPUS, repeats=1, log=str(log))
    assert res.source == "live" and callable(seen[0])
    assert "launch 3 started" in log.read_text()
    out = capsys.readouterr().out
    assert "nccl-paths: wide with ddp, on this machine's GPUs: 4 of 5 done" in out and str(log) in out
    assert "launch 0 started" not in out
    seen.clear()
    ex.run_or_load("nccl-paths", "torch", "ddp", "wide", machine=TWO_GPUS, repeats=1)   # "auto", no Jupyter here
    assert seen == [None]
    mine = []
    seen.clear()
    ex.run_or_load("nccl-paths", "torch", "ddp", "wide", machine=TWO_GPUS, repeats=1, progress=mine.append,
                        log=str(log))
    assert seen == [mine.append] and len(mine) == 8        # the caller's own callback, no bar over it


def test_notebook_log_is_a_scratch_file_in_jupyter_only(monkeypatch):
    from ddlab.base import paths, progress
    assert progress.notebook_log("live-x") is None
    monkeypatch.setattr(progress, "in_notebook", lambda: True)
    assert progress.notebook_log("live-x") == os.path.join(paths.REPO_ROOT, "scratch", "live-x.log")
