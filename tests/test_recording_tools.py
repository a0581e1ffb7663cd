"""tools/recording/: the scripts that record reference results on a GPU machine. Without a GPU
the shell scripts are only checked for syntax here; record_horovod_smoke.py runs on a work
folder written below (it needs no GPU), to show the machine is named from its hardware."""
import importlib.util
import json
import os
import re
import shutil
import subprocess

import pytest

from ddlab.base import reference

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORDING = os.path.join(ROOT, "tools", "recording")
FIXTURES = os.path.join(ROOT, "tests", "fixtures")


def load(name):
    spec = importlib.util.spec_from_file_location(name[:-3], os.path.join(RECORDING, name))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(autouse=True)
def machine_label_put_back(monkeypatch):
    """The scripts' main() names the machine in DDLAB_MACHINE (recording.use_hardware_label); recorded
    here first, so that monkeypatch removes it after each test and no later test sees it."""
    monkeypatch.setenv("DDLAB_MACHINE", "")
    monkeypatch.delenv("DDLAB_MACHINE")


@pytest.fixture
def adopt(tmp_path, monkeypatch):
    """adopt_results.py loaded with its homes in ``tmp_path``: (module, reference/ with experiments/ and
    allreduce/, pending/, results/), each folder made."""
    mod = load("adopt_results.py")
    ref, pending, res = tmp_path / "reference", tmp_path / "pending", tmp_path / "results"
    for d in (ref / "experiments", ref / "allreduce", pending, res):
        d.mkdir(parents=True)
    monkeypatch.setattr(mod, "REFERENCE", str(ref))
    monkeypatch.setattr(mod, "PENDING", str(pending))
    return mod, ref, pending, res


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
@pytest.mark.parametrize("script", sorted(f for f in os.listdir(RECORDING) if f.endswith(".sh")))
def test_shell_scripts_parse(script):
    out = subprocess.run(["bash", "-n", os.path.join(RECORDING, script)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_readme_describes_every_script():
    readme = open(os.path.join(RECORDING, "README.md")).read()
    for f in os.listdir(RECORDING):
        if f.endswith((".sh", ".py")):
            assert f"`{f}`" in readme, f"tools/recording/README.md does not describe {f}"


def work_folder(tmp_path, with_topo):
    w = tmp_path / "work"
    w.mkdir()
    gpus = [{"index": i, "name": "NVIDIA H200"} for i in range(2)]
    doc = {"gpus": gpus, "gpu_count": 2, "driver": "1.0", "cuda_driver": "13.0", "cuda_runtime": "13.0",
           "nccl": "2.28.9", "torch": "2.11.0", "tensorflow": None, "python": "3.12.3", "hostname": "box"}
    (w / "doctor.json").write_text(json.dumps(doc))
    (w / "hvd_build.txt").write_text("Available Frameworks:\n    [X] PyTorch\nbuild rc=0 seconds=90\n")
    for path in ("default", "shm"):
        shutil.copy(os.path.join(FIXTURES, "nccl", f"h200x2_{path}.log"), w / f"hvd_smoke_{path}.log")
    if with_topo:
        shutil.copy(os.path.join(FIXTURES, "topo", "h200x2.txt"), w / "topo.txt")
    return w


@pytest.mark.parametrize("with_topo,label,slug", [(True, "2x NVIDIA H200, NV18", "2xh200-nv18"),
                                                  (False, "2x NVIDIA H200", "2xh200")])
def test_record_horovod_smoke_names_the_machine_from_its_hardware(tmp_path, monkeypatch, with_topo, label, slug):
    mod = load("record_horovod_smoke.py")
    monkeypatch.setattr(reference, "REFERENCE_DIR", str(tmp_path / "reference"))
    assert mod.main([str(work_folder(tmp_path, with_topo))]) == 0
    obj = json.load(open(tmp_path / "reference" / "horovod" / f"{slug}.json"))
    assert obj["provenance"]["machine"] == label and obj["build_rc"] == 0
    assert obj["check_build"]["frameworks"] == ["PyTorch"]
    assert "hostname" not in obj["provenance"] and '"box"' not in json.dumps(obj)   # doctor.json's host name


def test_record_horovod_smoke_keeps_no_label_that_is_not_the_hardware(tmp_path, monkeypatch):
    mod = load("record_horovod_smoke.py")
    monkeypatch.setenv("DDLAB_MACHINE", "the lab's spare box")
    monkeypatch.setattr(reference, "REFERENCE_DIR", str(tmp_path / "reference"))
    assert mod.main([str(work_folder(tmp_path, True)), "--name", "x"]) == 0
    assert json.load(open(tmp_path / "reference" / "horovod" / "x.json"))["provenance"]["machine"] == \
        "2x NVIDIA H200, NV18"


def test_record_horovod_smoke_rejects_a_folder_that_is_not_a_work_folder(tmp_path, capsys):
    mod = load("record_horovod_smoke.py")
    with pytest.raises(SystemExit):
        mod.main([str(tmp_path)])
    assert "is not a gpu_record_benchmarks.sh work folder" in capsys.readouterr().err


def test_record_experiments_reads_tune_jobs():
    mod = load("record_experiments.py")
    assert mod.parse_job("tune:ddp:wide") == ("ddp", "wide", ("tune", "default"))
    assert mod.parse_job("tune:horovod:wide:shm") == ("horovod", "wide", ("tune", "shm"))
    assert mod.parse_job("ddp:cnn:graph") == ("ddp", "cnn", True) and mod.parse_job("perf") == ("perf", "cnn", False)
    for bad in ("tune:none:wide", "tune:ddp:huge", "tune:ddp:wide:pigeon", "tune:ddp", "tune:ddp:wide:shm:x"):
        with pytest.raises(Exception, match="expected tune:launcher:model"):
            mod.parse_job(bad)


def test_record_experiments_reads_strong_jobs_with_several_paths():
    mod = load("record_experiments.py")
    assert mod.parse_job("strong:ddp:mlp-small") == ("ddp", "mlp-small", ("strong", "shm"))
    assert mod.parse_job("strong:horovod:mlp-large:default+socket") == ("horovod", "mlp-large",
                                                                       ("strong", "default+socket"))
    for bad in ("strong:ddp:mlp-large:default+pigeon", "strong:ddp:mlp-large:shm+shm", "strong:ddp:mlp-large:+"):
        with pytest.raises(Exception, match="expected strong:launcher:model"):
            mod.parse_job(bad)
    with pytest.raises(Exception, match="expected tune:launcher:model"):     # a tune JOB takes one path
        mod.parse_job("tune:ddp:wide:default+shm")


def test_a_tune_job_records_the_live_gpu_defaults_with_repeats(tmp_path, monkeypatch, capsys):
    from ddlab.system import frameworks
    from ddlab.recording import sets as recording_sets
    from ddlab.training import recording, runs
    from ddlab.course import tuning
    from ddlab.training.results import ExperimentResult
    from ddlab.training.runspec import RunSpec
    mod = load("record_experiments.py")
    monkeypatch.setattr(frameworks, "gpu_count", lambda framework="torch": 2)
    monkeypatch.setattr(frameworks, "availability", lambda framework, launcher: (True, ""))
    monkeypatch.setattr(recording, "use_hardware_label", lambda: "2x Test GPU")
    calls = []

    def comparison(base, path, echo, progress, partial, resume=None):
        calls.append((base, path))
        return ExperimentResult("tuning", [{"tuning": "untuned", "workers": 2, "images_per_s": 1.0}], "live",
                                {"machine": "2x Test GPU"}, [], {"launcher": base.launcher, "path": path})
    monkeypatch.setattr(tuning, "tuning_comparison", comparison)
    assert mod.main([str(tmp_path), "tune:horovod:wide:shm", "--timeout", "90"]) == 0
    (base, path), = calls
    assert path == "shm" and base.launcher == "horovod" and base.workers == 2 and base.timeout == 90
    assert base.sizes() == RunSpec.for_device("cuda", "wide").sizes() and base.repeats >= recording.MIN_REPEATS
    written = json.load(open(tmp_path / "tuning-torch-horovod-wide-shm.json"))
    assert written["experiment"] == "tuning" and written["config"]["path"] == "shm"
    assert "tune:horovod:wide:shm: done in" in capsys.readouterr().out


def test_a_tune_job_cut_short_keeps_the_tunings_it_finished(tmp_path, monkeypatch):
    from ddlab.system import frameworks
    from ddlab.training import recording
    from ddlab.course import tuning
    from ddlab.training.results import ExperimentResult
    mod = load("record_experiments.py")
    monkeypatch.setattr(frameworks, "gpu_count", lambda framework="torch": 2)
    monkeypatch.setattr(frameworks, "availability", lambda framework, launcher: (True, ""))
    monkeypatch.setattr(recording, "use_hardware_label", lambda: "2x Test GPU")

    def comparison(base, path, echo, progress, partial, resume=None):
        partial(ExperimentResult("tuning", [{"tuning": "untuned", "workers": 2, "images_per_s": 1.0}], "live",
                                 {"machine": "2x Test GPU"}, ["partial: 1 of 9 tunings run"], {"path": path}))
        raise KeyboardInterrupt    # what the timeout's signal does to the run mid-way
    monkeypatch.setattr(tuning, "tuning_comparison", comparison)
    with pytest.raises(KeyboardInterrupt):
        mod.main([str(tmp_path), "tune:ddp:wide"])
    kept = json.load(open(tmp_path / "tuning-torch-ddp-wide-default.json"))
    assert kept["rows"][0]["tuning"] == "untuned" and kept["notes"] == ["partial: 1 of 9 tunings run"]


def test_a_tune_job_resumes_the_partial_comparison_in_its_folder_else_the_committed_one(tmp_path, monkeypatch,
                                                                                         capsys):
    from _experiment_fakes import FakeLaunches, script_result
    from ddlab.base.reference import ReferenceMissing
    from ddlab.course import tuning
    from ddlab.training import recording, runs
    mod = load("record_experiments.py")
    base = recording.gpu_spec("wide", 3, launcher="ddp", workers=2)
    monkeypatch.setattr(runs.launch, "run", FakeLaunches(*[script_result(100.0, workers=w) for w in (1,) + (2,) * 9]))
    seen = []
    with pytest.raises(IndexError):       # the fake launches run out in round 2, after round 1 was handed out
        tuning.tuning_comparison(base=base, path="shm", partial=seen.append)
    target = tmp_path / "tuning-torch-ddp-wide-shm.json"
    missing = lambda launcher, model, path: (_ for _ in ()).throw(ReferenceMissing("none"))
    monkeypatch.setattr(tuning, "recorded", missing)
    assert mod.partial_tuning(str(target), "ddp", "wide", "shm", base) is None        # nothing to resume
    recording.save(seen[0], str(target))
    found = mod.partial_tuning(str(target), "ddp", "wide", "shm", base)
    assert found.config["rounds"] == 1 and "resuming " + str(target) + ": 1 of 3 rounds ran" in capsys.readouterr().out
    # another batch: not resumed, and the reason is printed; the committed one is asked next
    monkeypatch.setattr(tuning, "recorded", lambda launcher, model, path: recording.load(str(target)))
    assert mod.partial_tuning(str(tmp_path / "none.json"), "ddp", "wide", "shm", base) is not None
    assert "resuming the committed recording" in capsys.readouterr().out
    assert mod.partial_tuning(str(target), "ddp", "wide", "shm", base.with_(batch=256)) is None
    out = capsys.readouterr().out
    assert out.count("not resuming") == 2 and "describes another run" in out


def test_a_batch_job_records_at_that_batch_under_its_own_name(tmp_path, monkeypatch):
    from ddlab.system import frameworks
    from ddlab.recording import sets as recording_sets
    from ddlab.training import recording, runs
    mod = load("record_experiments.py")
    monkeypatch.setattr(frameworks, "gpu_count", lambda framework="torch": 2)
    monkeypatch.setattr(recording, "use_hardware_label", lambda: "2x Test GPU")
    calls = []
    monkeypatch.setattr(recording_sets, "record_paths", lambda out, base, variant, echo, say: calls.append((base, variant))
                        or {})
    assert mod.main([str(tmp_path), "ddp:mlp-small", "ddp:cnn:graph", "--batch", "128"]) == 0
    (eager, v1), (graph, v2) = calls
    assert eager.batch == 128 and v1 == "b128" and graph.batch == 128 and v2 == "graph-b128"
    assert eager.steps == recording.gpu_spec("mlp-small").steps
    calls.clear()
    assert mod.main([str(tmp_path), "ddp:mlp-small"]) == 0
    assert calls[0][1] is None and calls[0][0].batch == recording.gpu_spec("mlp-small").batch
    with pytest.raises(SystemExit):
        mod.main([str(tmp_path), "ddp:mlp-small", "--batch", "0"])


def test_a_step_job_records_one_gpu_with_a_cuda_graph_under_the_scaling_graph_name(tmp_path, monkeypatch, capsys):
    from ddlab.system import frameworks
    from ddlab.training import experiments, recording, runs, step_profile
    from ddlab.training.results import ExperimentResult
    mod = load("record_experiments.py")
    assert mod.parse_job("step:mlp-small") == ("step", "mlp-small", False)
    for bad in ("step", "step:huge", "step:cnn:graph"):
        with pytest.raises(Exception, match="expected step:model"):
            mod.parse_job(bad)
    monkeypatch.setattr(frameworks, "gpu_count", lambda framework="torch": 1)   # one GPU is enough
    monkeypatch.setattr(recording, "use_hardware_label", lambda: "1x Test GPU")
    calls = []

    def scaling(spec, workers, echo, progress):
        calls.append((spec, workers))
        return ExperimentResult("scaling", [{"workers": 1, "images_per_s": 2.0, "global_batch": spec.batch}], "live",
                                {"machine": "1x Test GPU"}, [], {"model": spec.model})
    monkeypatch.setattr(experiments, "throughput_scaling", scaling)
    profiled = []
    monkeypatch.setattr(step_profile, "record", lambda out, models, batch: profiled.append((models, batch)))
    assert mod.main([str(tmp_path), "step:mlp-large", "step:cnn", "--batch", "128"]) == 0
    assert profiled == [(["mlp-large"], 128), (["cnn"], 128)]     # and where each step's time goes
    assert [(s.model, s.launcher, s.workers, s.cuda_graph, s.batch, w) for s, w in calls] == \
        [("mlp-large", "ddp", 1, "on", 128, (1,)), ("cnn", "ddp", 1, "on", 128, (1,))]
    assert calls[0][0].repeats >= recording.MIN_REPEATS
    assert sorted(os.listdir(tmp_path)) == ["scaling-torch-ddp-cnn-graph-b128.json",
                                            "scaling-torch-ddp-mlp-large-graph-b128.json"]
    calls.clear()
    assert mod.main([str(tmp_path), "step:mlp-small"]) == 0
    assert calls[0][0].batch == recording.gpu_spec("mlp-small").batch
    assert (tmp_path / "scaling-torch-ddp-mlp-small-graph.json").exists()
    assert "step:mlp-small: done in" in capsys.readouterr().out
    monkeypatch.setattr(frameworks, "gpu_count", lambda framework="torch": 0)
    assert mod.main([str(tmp_path), "step:cnn"]) == 2


def test_gpu_batch_runs_tasks_while_time_is_left_and_packs_after_each(tmp_path):
    import subprocess
    import tarfile
    carried = tmp_path / "carried"
    carried.mkdir()
    (carried / "convergence-point-2w-b64-linear.json").write_text("{}")
    env = dict(os.environ, DEADLINE="12", OUT=str(tmp_path / "out"), RESULTS=str(tmp_path / "res"),
               PENDING=str(carried))
    tasks = ["sh echo made", "999@sh echo never", "bogus x", "sh sleep 60", "sh echo late"]
    proc = subprocess.run(["bash", os.path.join(RECORDING, "gpu_batch.sh"), *tasks], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = (tmp_path / "res" / "tasks.txt").read_text().splitlines()
    assert lines[0].startswith("task 1 'sh echo made': exit 0")
    assert "skip 'sh echo never'" in lines[1] and "needs 999" in lines[1]
    assert lines[2].startswith("task 3 'bogus x': exit 1")
    assert lines[3].startswith("task 4 'sh sleep 60': exit 124")          # stopped at the deadline
    assert "skip 'sh echo late'" in lines[4]                                # nothing left for it
    assert "unknown task kind 'bogus'" in (tmp_path / "res" / "task3-bogus.txt").read_text()
    with tarfile.open(tmp_path / "out" / "results.tgz") as tar:
        names = tar.getnames()
        packed = tar.extractfile("res/tasks.txt").read().decode().splitlines()
    assert "res/tasks.txt" in names and "res/convergence-point-2w-b64-linear.json" in names
    assert packed == lines                                                  # the last skip is in the pack too
    assert not (tmp_path / "out" / "results-tmp.tgz").exists()


def _notebook(path, source):
    nb = {"cells": [{"cell_type": "code", "execution_count": None, "id": "c1", "metadata": {}, "outputs": [],
                     "source": source}],
          "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
          "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(nb))
    return str(path)


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_gpu_nbval_keeps_every_notebooks_time_across_runs_into_one_folder(tmp_path):
    """Two runs into one OUT (as two gpu_batch.sh "nb" tasks do): nbval.json holds the notebooks of
    both, each with its time and exit status, and a failing notebook fails the run. The timings
    file gets the notebook that passed, under this machine's name, and only that one."""
    import sys
    from ddlab.system.machine_name import this_machine
    good = _notebook(tmp_path / "good.ipynb", "print(1 + 1)")
    bad = _notebook(tmp_path / "bad.ipynb", "raise ValueError('no')")
    timings = tmp_path / "timings.json"
    timings.write_text(json.dumps({"2x Some GPU": {"notebooks/x.ipynb": {"seconds": 5.0, "sha256": "0" * 64,
                                                                           "date": "2000-01-01T00:00:00Z"}}}))
    env = dict(os.environ, OUT=str(tmp_path / "out"), PYTHON=sys.executable, TIMINGS=str(timings))
    first = subprocess.run(["bash", os.path.join(RECORDING, "gpu_nbval.sh"), good], env=env,
                           capture_output=True, text=True, timeout=240)
    second = subprocess.run(["bash", os.path.join(RECORDING, "gpu_nbval.sh"), bad], env=env,
                            capture_output=True, text=True, timeout=240)
    assert first.returncode == 0, first.stdout + first.stderr
    assert second.returncode == 1, second.stdout + second.stderr
    table = json.loads((tmp_path / "out" / "nbval.json").read_text())
    assert set(table) == {good, bad}
    assert table[good]["exit"] == 0 and table[bad]["exit"] != 0
    assert all(row["seconds"] > 0 for row in table.values())
    kept = json.loads(timings.read_text())
    assert kept["2x Some GPU"] == {"notebooks/x.ipynb": {"seconds": 5.0, "sha256": "0" * 64,
                                                         "date": "2000-01-01T00:00:00Z"}}  # another machine's: kept
    here = kept[this_machine()[0]]
    assert set(here) == {good} and here[good]["seconds"] == table[good]["seconds"]
    assert here[good]["sha256"] == table[good]["sha256"]
    assert json.loads((tmp_path / "out" / "nbval_timings.json").read_text()) == kept
    assert not os.path.exists(str(timings) + ".tmp")
    from ddlab.course import minutes
    assert minutes.timing_is_current(good, table[good]) is True              # the file that ran, by its SHA-256
    _notebook(tmp_path / "good.ipynb", "print(2 + 2)")
    assert minutes.timing_is_current(good, table[good]) is False             # a later version: not that time
    assert "ValueError" in (tmp_path / "out" / "nbval-bad.txt").read_text()
    passed = [ln for ln in (tmp_path / "out" / "nbval-good.txt").read_text().splitlines() if "PASSED" in ln]
    assert passed and all(re.match(r"\[ *\d+s\] ", ln) for ln in passed)      # when each cell finished
    assert not (tmp_path / "out" / "nbval.json.tmp").exists()


def test_pending_points_are_real_convergence_points_and_gpu_batch_takes_them_by_default(tmp_path):
    """tools/recording/pending/ keeps what a recording cut short finished, across runs: each convergence
    point there loads as a one-point convergence result measured on GPUs, with its provenance, and each
    tuning comparison as one with fewer rounds than its repeats; gpu_batch.sh, with no PENDING set, copies
    exactly those files into its results (record_experiments.py resumes a tuning comparison found there)."""
    import subprocess
    import tarfile
    from ddlab.course import convergence_sweep as cs
    from ddlab.training import recording
    pending = os.path.join(RECORDING, "pending")
    assert os.path.isfile(os.path.join(pending, "README.md"))
    points = sorted(f for f in os.listdir(pending) if f.endswith(".json"))
    for f in points:
        if f.startswith("tuning-"):
            res = recording.load(os.path.join(pending, f))
            assert 0 < res.config["rounds"] < res.config["repeats"], f
            assert res.provenance.get("gpu_count", 0) >= 1 and res.provenance.get("date"), f
            continue
        assert f.startswith("convergence-point-"), f"{f}: only what a recording cut short belongs in pending/"
        res = cs.ConvergenceResult.from_dict(json.load(open(os.path.join(pending, f))))
        assert res.provenance.get("gpu_count", 0) >= 1 and res.provenance.get("date"), f
        assert len(res.config.get("points", [])) == 1 and res.config.get("seeds"), f
    env = {k: v for k, v in os.environ.items() if k != "PENDING"}
    env.update(DEADLINE="30", OUT=str(tmp_path / "out"), RESULTS=str(tmp_path / "res"))
    proc = subprocess.run(["bash", os.path.join(RECORDING, "gpu_batch.sh"), "sh true"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    with tarfile.open(tmp_path / "out" / "results.tgz") as tar:
        packed = sorted(os.path.basename(n) for n in tar.getnames() if n.endswith(".json"))
    assert packed == points


def test_record_horovod_smoke_keeps_each_ranks_smoke_report(tmp_path, monkeypatch):
    from ddlab.base import worker_report
    mod = load("record_horovod_smoke.py")
    monkeypatch.setattr(reference, "REFERENCE_DIR", str(tmp_path / "reference"))
    w = work_folder(tmp_path, True)
    reports = [worker_report.encode("smoke", rank=r, check="hvd-torch", size=2, ok=True, value=3.0) for r in (1, 0)]
    with open(w / "hvd_smoke_default.log", "a") as f:       # horovodrun prefixes every worker line
        f.write("".join(f"[1,{r}]<stdout>:{line}\n" for r, line in zip((1, 0), reports)))
        f.write("[1,0]<stdout>:" + worker_report.encode("smoke", rank=0, check="hvd-tf", size=2, ok=True) + "\n")
    assert mod.main([str(w), "--name", "x"]) == 0
    smoke = json.load(open(tmp_path / "reference" / "horovod" / "x.json"))["smoke"]
    assert smoke["default"]["lines"] == reports and smoke["shm"]["lines"] == []


@pytest.mark.parametrize("script, args", [("record_experiments.py", ["ddp:cnn"]), ("record_convergence.py", []),
                                          ("record_host_link.py", [])])
def test_a_recording_script_without_the_validator_stops_before_measuring(script, args, tmp_path, monkeypatch, capsys):
    from ddlab.base import schemas
    from ddlab.system import frameworks
    mod = load(script)
    monkeypatch.setattr(schemas, "validator_missing", lambda: "jsonschema is not installed")
    monkeypatch.setattr(frameworks, "gpu_count", lambda *a: pytest.fail("measured without a validator"))
    with pytest.raises(SystemExit) as stop:
        mod.main([str(tmp_path / "out"), *args])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "jsonschema is not installed" in err and "prepare_offline.sh" in err and ".whl/" in err
    assert not (tmp_path / "out").exists()


def test_the_validator_is_there_here():
    from ddlab.base import schemas
    assert schemas.validator_missing() is None


def test_adopt_results_puts_each_recording_home_and_never_replaces_another_machines(adopt, tmp_path, capsys):
    """A run's results go to their homes (experiments, all-reduce sweeps, pending points); a result whose
    name is taken by another machine's recording is not copied, and the tool names both machines."""
    mod, ref, pending, res = adopt
    h200 = {"machine": "2x NVIDIA H200, NV18", "gpu_model": "NVIDIA H200", "gpu_count": 2, "driver": "580.95.05",
            "cuda_runtime": "13.0", "nccl": "2.28.9", "torch": "2.11.0", "date": "2026-11-23"}
    h100 = dict(h200, machine="2x NVIDIA H100 80GB HBM3, NV18", gpu_model="NVIDIA H100 80GB HBM3",
                driver="580.159.04", date="2026-11-28")

    def put(path, prov, rows=1):
        path.write_text(json.dumps({"experiment": "x", "rows": [{}] * rows, "provenance": prov}))
    put(ref / "experiments" / "nccl-paths-torch-ddp-cnn.json", h200)           # the course machine's
    put(ref / "experiments" / "tuning-torch-ddp-wide-shm.json", h100, rows=2)  # an older run of this machine
    put(res / "nccl-paths-torch-ddp-cnn.json", h100)
    put(res / "tuning-torch-ddp-wide-shm.json", h100, rows=3)
    put(res / "nccl-paths-torch-horovod-mlp-small.json", h100)
    put(res / "reference_allreduce_2xh100-80gb-hbm3-nv18.json", h100)
    put(res / "convergence-point-2w-b64-none.json", h100)
    (res / "tasks.txt").write_text("task 1 ...")
    (res / "notes.json").write_text("{}")                                       # not a recording: left alone
    assert mod.main([str(res), "--dry-run"]) == 1
    assert json.loads((ref / "experiments" / "tuning-torch-ddp-wide-shm.json").read_text())["rows"] == [{}] * 2
    assert not (ref / "experiments" / "nccl-paths-torch-horovod-mlp-small.json").exists()
    capsys.readouterr()
    assert mod.main([str(res)]) == 1
    out, err = capsys.readouterr()
    assert "NOT copied  nccl-paths-torch-ddp-cnn.json" in out and "recorded on 2x NVIDIA H200, NV18" in out
    assert "gpu_model 'NVIDIA H200' there, 'NVIDIA H100 80GB HBM3' here" in out and "1 file(s) not copied" in err
    assert json.loads((ref / "experiments" / "nccl-paths-torch-ddp-cnn.json").read_text())["provenance"] == h200
    assert json.loads((ref / "experiments" / "tuning-torch-ddp-wide-shm.json").read_text())["rows"] == [{}] * 3
    assert (ref / "experiments" / "nccl-paths-torch-horovod-mlp-small.json").exists()
    assert (ref / "allreduce" / "2xh100-80gb-hbm3-nv18.json").exists()
    assert (pending / "convergence-point-2w-b64-none.json").exists()
    assert sorted(os.listdir(ref / "experiments")) == ["nccl-paths-torch-ddp-cnn.json",
                                                      "nccl-paths-torch-horovod-mlp-small.json",
                                                      "tuning-torch-ddp-wide-shm.json"]
    assert mod.main([str(res), "--replace-other-machine"]) == 0
    assert "unchanged" in capsys.readouterr().out
    assert json.loads((ref / "experiments" / "nccl-paths-torch-ddp-cnn.json").read_text())["provenance"] == h100
    (res / "scaling-torch-ddp-cnn.json").write_text("{not json")
    assert mod.main([str(res)]) == 2 and "truncated or corrupt" in capsys.readouterr().err
    assert not (ref / "experiments" / "scaling-torch-ddp-cnn.json").exists()
    (res / "scaling-torch-ddp-cnn.json").write_text(json.dumps({"rows": []}))
    assert mod.main([str(res)]) == 1 and "it has no provenance" in capsys.readouterr().out
    assert not (ref / "experiments" / "scaling-torch-ddp-cnn.json").exists()
    with pytest.raises(SystemExit):
        mod.main([str(tmp_path / "nowhere")])
    assert "is not a folder" in capsys.readouterr().err


def test_adopt_results_never_replaces_a_later_recording_with_a_file_an_earlier_run_left(adopt, capsys):
    """A GPU machine's results folder can hold files of earlier runs: one older than the same machine's
    recording at home is left alone (and named), a later one replaces it, dates with or without a zone."""
    mod, ref, _, res = adopt
    prov = {"machine": "2x NVIDIA H100 80GB HBM3, NV18", "gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 2,
            "driver": "580.159.04", "cuda_runtime": "13.0", "nccl": "2.28.9", "torch": "2.11.0"}
    home = ref / "experiments" / "tuning-torch-ddp-wide-shm.json"

    def put(path, date, rows):
        path.write_text(json.dumps({"rows": [{}] * rows, "provenance": dict(prov, date=date)}))
    put(home, "2026-11-28T03:00:00+00:00", rows=2)
    put(res / "tuning-torch-ddp-wide-shm.json", "2026-11-27T18:40:12Z", rows=3)
    assert mod.main([str(res)]) == 0
    out = capsys.readouterr().out
    assert "older       tuning-torch-ddp-wide-shm.json" in out and "left in the results folder" in out
    assert json.loads(home.read_text())["rows"] == [{}] * 2
    put(res / "tuning-torch-ddp-wide-shm.json", "2026-11-28", rows=3)          # a date alone: midnight UTC
    assert mod.main([str(res)]) == 0 and "older" in capsys.readouterr().out
    put(res / "tuning-torch-ddp-wide-shm.json", "2026-11-28T04:00:00", rows=3)   # no zone: UTC, later
    assert mod.main([str(res)]) == 0 and "replaced" in capsys.readouterr().out
    assert json.loads(home.read_text())["rows"] == [{}] * 3


_FAKE_PYTHON = r'''#!/usr/bin/env bash
# python3 for gpu_setup.sh's Horovod part: "installing" a wheel copies its text (good or broken)
# into $STATE/installed, and "import horovod.torch" works when that text is "good".
echo "python3 $*" >> "$STATE/calls"
case "$*" in
  *"import horovod.torch"*) [ "$(cat "$STATE/installed" 2>/dev/null)" = good ] ;;
  *"-m pip install"*) for a in "$@"; do case $a in *horovod*.whl) cat "$a" > "$STATE/installed" ;; esac; done ;;
  *check_python.py*) echo "Python 3.12: ok" ;;
  -V) echo "Python 3.12.3" ;;
  *"import torch"*) echo "2.11.0 2 GPUs" ;;
esac
'''
_FAKE_BUILD = r'''mkdir -p "$HOROVOD_CACHE/wheels"
head -c 40000000 /dev/zero | tr '\0' g > "$HOROVOD_CACHE/wheels/horovod-0.28.1-cp312-cp312-linux_x86_64.whl"
echo good > "$STATE/installed"
echo "built from $HOROVOD_SDIST" >> "$STATE/calls"
'''


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
@pytest.mark.parametrize("carried, expect", [
    ({"horovod-0.28.1-cp312-cp312-linux_x86_64.whl": "good"}, "wheel"),
    ({"horovod-0.28.1-cp312-cp312-linux_x86_64.whl.partaa": "go",
      "horovod-0.28.1-cp312-cp312-linux_x86_64.whl.partab": "od"}, "wheel"),
    ({"horovod-0.28.1-cp312-cp312-linux_x86_64.whl": "broken", "horovod-0.28.1.tar.gz": "sdist"}, "build"),
    ({"horovod-0.28.1.tar.gz": "sdist"}, "build"),
    ({"horovod-0.28.1-cp312-cp312-linux_x86_64.whl": "broken"}, "none"),
    ({}, "none"),
])
def test_gpu_setup_installs_a_carried_horovod_wheel_only_if_it_imports_else_builds_and_keeps_the_wheel(
        tmp_path, carried, expect):
    """gpu_setup.sh with a stand-in python3: a carried wheel (whole or in parts) is used when Horovod then
    imports; one built for another machine image is not, and the sdist is built instead; a build leaves
    the wheel in $OUT in parts of at most 15 MB that join to it; with neither, HVD_OK=0 and one line says why."""
    repo, state, out, bin_ = (tmp_path / d for d in ("repo", "state", "out", "bin"))
    for d in (repo / "tools" / "recording", repo / "source_code" / "patches", repo / ".offline", state, out, bin_):
        d.mkdir(parents=True)
    shutil.copy(os.path.join(RECORDING, "gpu_setup.sh"), repo / "tools" / "recording")
    (repo / "source_code" / "patches" / "HOROVOD_VERSION").write_text("0.28.1\n")
    (repo / "tools" / "build_horovod.sh").write_text(_FAKE_BUILD)
    (bin_ / "python3").write_text(_FAKE_PYTHON)
    (bin_ / "python3").chmod(0o755)
    for name, text in carried.items():
        (repo / ".offline" / name).write_text(text)
    env = dict(os.environ, PATH=f"{bin_}:{os.environ['PATH']}", STATE=str(state), OUT=str(out),
               DDLAB_SETUP_TMP=str(tmp_path))
    proc = subprocess.run(["bash", "-c", 'source tools/recording/gpu_setup.sh && echo "HVD_OK=$HVD_OK"'], cwd=repo,
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    calls = (state / "calls").read_text()
    parts = sorted(out.glob("horovod-*.whl.part*"))
    if expect == "wheel":
        assert "HVD_OK=1" in proc.stdout and "[gpu_setup] Horovod from horovod-0.28.1-cp312" in proc.stdout
        assert "built from" not in calls and parts == []
    elif expect == "build":
        assert "HVD_OK=1" in proc.stdout and "built from .offline/horovod-0.28.1.tar.gz" in calls
        assert ("does not import here" in proc.stdout) == ("broken" in carried.values())
        built = (tmp_path / "hvdcache" / "wheels" / "horovod-0.28.1-cp312-cp312-linux_x86_64.whl").read_bytes()
        assert len(parts) == 3 and all(p.stat().st_size <= 15 * 2**20 for p in parts)
        assert b"".join(p.read_bytes() for p in parts) == built
    else:
        assert "HVD_OK=0" in proc.stdout and "Horovod's JOBs will be skipped" in proc.stdout
        assert "built from" not in calls and parts == []


def _strong_part(batches, date):
    """The committed Horovod strong-scaling recording cut to ``batches``, as one run of the JOB would
    have written it (its rows' run indices renumbered), dated ``date``."""
    from ddlab.training import recording
    full = recording.load(os.path.join(reference.REFERENCE_DIR, "experiments",
                                       "strong-scaling-torch-horovod-mlp-small-shm.json"))
    rows, runs = [], []
    for r in full.rows:
        if r["global_batch"] in batches:
            rows.append(dict(r, runs=list(range(len(runs), len(runs) + len(r["runs"])))))
            runs += [full.runs[i] for i in r["runs"]]
    prov = dict(full.provenance, date=date)
    prov["command"] = re.sub(r"global_batches=\[[^\]]*\]", f"global_batches={list(batches)}", prov["command"])
    return type(full)(full.name, rows, full.source, prov, list(full.notes[:3]),
                      dict(full.config, global_batches=list(batches)), runs)


def test_a_strong_job_run_again_for_the_batches_left_is_joined_to_the_first_run():
    """Batches 4-16 from one run and 32-64 from a second: one result in batch order, each row's runs its
    own, dated by the later run and a note naming both; overlapping batches, another run description or
    another machine are never joined."""
    from ddlab.recording import sets as rs
    first, second = _strong_part([4, 8, 16], "2026-11-28T11:15:12+00:00"), _strong_part([32, 64], "2026-11-28T11:42:01+00:00")
    joined = rs.join_strong(second, first)                      # either order gives batch order
    assert joined.config["global_batches"] == [4, 8, 16, 32, 64]
    # every row of both parts, in batch order (as many rows a batch as the committed recording has)
    assert [r["global_batch"] for r in joined.rows] == sorted(r["global_batch"] for p in (first, second) for r in p.rows)
    for r in joined.rows:
        part = first if r["global_batch"] < 32 else second
        # a row is its batch, worker count and launcher (the plain one-GPU row and the 1-worker row share a count)
        mine = next(p for p in part.rows if (p["global_batch"], p["workers"], p.get("launcher"))
                    == (r["global_batch"], r["workers"], r.get("launcher")))
        assert [joined.runs[i] for i in r["runs"]] == [part.runs[i] for i in mine["runs"]]
    assert joined.provenance["date"] == "2026-11-28T11:42:01+00:00"
    assert "global_batches=[4, 8, 16, 32, 64]" in joined.provenance["command"]
    assert "global batch(es) 4, 8, 16 recorded 2026-11-28T11:15:12" in joined.notes[-1]
    assert "global batch(es) 32, 64 recorded 2026-11-28T11:42:01" in joined.notes[-1]
    assert rs.holds_runs(joined, first) and rs.holds_runs(joined, second) and not rs.holds_runs(first, second)
    earlier = _strong_part([32, 64], "2026-11-28T10:00:00+00:00")   # the larger batches ran first: dated by the later
    assert rs.join_strong(first, earlier).provenance["date"] == "2026-11-28T11:15:12+00:00"
    assert rs.join_strong(first, _strong_part([16, 32], "2026-11-28T12:00:00+00:00")) is None     # 16 twice
    other = _strong_part([32, 64], "2026-11-28T12:00:00+00:00")
    other.config["repeats"] = 5
    assert rs.join_strong(first, other) is None
    other = _strong_part([32, 64], "2026-11-28T12:00:00+00:00")
    other.provenance["gpu_model"] = "NVIDIA H100 80GB HBM3"
    assert rs.join_strong(first, other) is None


def test_a_batch_between_those_of_a_joined_recording_joins_in_batch_order_and_names_the_earlier_join():
    """4 and 64 recorded in two calls and joined, then 16 from a third: rows in batch order, the runs of each
    row its own, and the last note points at the earlier join instead of dating its parts by the later one."""
    from ddlab.recording import sets as rs
    first = rs.join_strong(_strong_part([4], "2026-11-28T16:40:00+00:00"), _strong_part([64], "2026-11-28T16:55:00+00:00"))
    third = _strong_part([16], "2026-11-28T17:05:00+00:00")
    joined = rs.join_strong(first, third)
    assert [r["global_batch"] for r in joined.rows] == sorted(r["global_batch"] for p in (first, third) for r in p.rows)
    for r in joined.rows:
        part = third if r["global_batch"] == 16 else first
        # a row is its batch, worker count and launcher (the plain one-GPU row and the 1-worker row share a count)
        mine = next(p for p in part.rows if (p["global_batch"], p["workers"], p.get("launcher"))
                    == (r["global_batch"], r["workers"], r.get("launcher")))
        assert [joined.runs[i] for i in r["runs"]] == [part.runs[i] for i in mine["runs"]]
    assert "global batch(es) 4 recorded 2026-11-28T16:40:00" in joined.notes[-2]
    assert "global batch(es) 4, 64 (the join above); global batch(es) 16 recorded 2026-11-28T17:05:00" in joined.notes[-1]


def test_strong_parts_whose_repeats_ran_in_another_order_are_joined_and_the_note_says_which():
    """A part recorded before strong scaling interleaved its repeats joins one recorded after: the joined
    config claims no order and drops the interleaved note, and the note says how each part's repeats ran."""
    from ddlab.recording import sets as rs
    from ddlab.training.experiment_kit import INTERLEAVED_NOTE_START
    old, new = _strong_part([4, 8], "2026-11-27T12:00:00+00:00"), _strong_part([16], "2026-11-28T12:00:00+00:00")
    old.config.pop("order", None)
    old.notes = [n for n in old.notes if not n.startswith(INTERLEAVED_NOTE_START)]
    new.config["order"] = "interleaved"
    new.notes = list(new.notes[:1]) + [f"{INTERLEAVED_NOTE_START}: each of 3 round(s) ran every global batch once"]
    for a, b in ((old, new), (new, old)):
        joined = rs.join_strong(a, b)
        assert joined.config["global_batches"] == [4, 8, 16] and "order" not in joined.config
        assert not any(n.startswith(INTERLEAVED_NOTE_START) for n in joined.notes)
        assert "4, 8 recorded 2026-11-27T12:00:00+00:00, repeats back to back" in joined.notes[-1]
        assert "16 recorded 2026-11-28T12:00:00+00:00, repeats interleaved" in joined.notes[-1]
    both = rs.join_strong(_strong_part([4], "2026-11-27T12:00:00+00:00"), new)    # same order: no word about it
    assert both.config["order"] == "interleaved" and "repeats" not in both.notes[-1].split("):")[-1]


def test_adopt_results_never_replaces_a_strong_recording_with_one_that_drops_its_batches(adopt, tmp_path, capsys):
    """A later strong-scaling result of the same machine that cannot be joined (a batch in both) and lacks
    batches of the one at home is not copied: named, exit 1, the home file unchanged."""
    from ddlab.training import recording
    mod, ref, _, _ = adopt
    name = "strong-scaling-torch-horovod-mlp-small-shm.json"
    home = ref / "experiments" / name
    recording.save(_strong_part([4, 8, 16], "2026-11-28T11:15:12+00:00"), str(home))
    before = home.read_bytes()
    run = tmp_path / "run"
    run.mkdir()
    recording.save(_strong_part([16, 32], "2026-11-28T12:00:00+00:00"), str(run / name))
    assert mod.main([str(run)]) == 1
    out = capsys.readouterr()
    assert f"NOT copied  {name}" in out.out and "it would drop global batch(es) 4, 8 of" in out.out
    assert home.read_bytes() == before
    recording.save(_strong_part([4, 8, 16, 32], "2026-11-28T12:00:00+00:00"), str(run / name))   # holds them all
    assert mod.main([str(run)]) == 0 and f"replaced    {name}" in capsys.readouterr().out
    assert recording.load(str(home)).config["global_batches"] == [4, 8, 16, 32]


def test_adopt_results_joins_a_strong_part_and_leaves_what_is_already_in(adopt, tmp_path, capsys):
    """adopt_results joins a second run's strong-scaling batches to the first's at home; adopting either
    folder again changes nothing ("already in"), and a convergence point an earlier run left, whose runs
    are in the committed sweep, is not put back into pending/."""
    from ddlab.training import recording
    mod, ref, pending, _ = adopt
    name = "strong-scaling-torch-horovod-mlp-small-shm.json"
    run1, run2 = tmp_path / "run1", tmp_path / "run2"
    run1.mkdir(), run2.mkdir()
    recording.save(_strong_part([4, 8, 16], "2026-11-28T11:15:12+00:00"), str(run1 / name))
    recording.save(_strong_part([32, 64], "2026-11-28T11:42:01+00:00"), str(run2 / name))
    sweep = os.path.join(reference.REFERENCE_DIR, "experiments", "convergence-torch-ddp-cnn.json")
    shutil.copy(sweep, ref / "experiments")
    swept = recording.load(sweep)
    point = type(swept)("convergence", [], swept.source, dict(swept.provenance), [], {}, swept.runs[:3])
    recording.save(point, str(run2 / "convergence-point-2w-b64-none.json"))
    assert mod.main([str(run1)]) == 0 and "new" in capsys.readouterr().out
    assert mod.main([str(run2), "--dry-run"]) == 0
    assert recording.load(str(ref / "experiments" / name)).config["global_batches"] == [4, 8, 16]
    out = capsys.readouterr().out
    assert f"joined      {name}" in out and "global batches [4, 8, 16, 32, 64]" in out
    assert "already in  convergence-point-2w-b64-none.json" in out and "convergence-torch-ddp-cnn.json already" in out
    assert mod.main([str(run2)]) == 0
    home = recording.load(str(ref / "experiments" / name))
    parts_runs = sum(len(recording.load(str(run / name)).runs) for run in (run1, run2))
    assert home.config["global_batches"] == [4, 8, 16, 32, 64] and len(home.runs) == parts_runs
    assert os.listdir(pending) == []
    for run in (run1, run2):
        assert mod.main([str(run)]) == 0 and f"already in  {name}" in capsys.readouterr().out
    assert recording.load(str(ref / "experiments" / name)).to_dict() == home.to_dict()


def test_the_job_loop_says_what_each_job_took_and_fails_when_one_did():
    from ddlab.recording import sets as recording_sets
    from ddlab.training.results import ExperimentResult
    good = ExperimentResult("scaling", [{"workers": 1, "images_per_s": 1.0}], "live", {}, [], {}, [])
    bad = ExperimentResult("scaling", [{"workers": 2, "error": "exit 1"}], "live", {}, [], {}, [])
    said = []
    jobs = {"a": {"a-default": good}, "b": {"b-default": bad, "b-shm": "RunSpecError: no such path"}}
    assert recording_sets.run_jobs(["a"], lambda j: (j, jobs[j]), "rec", said.append) == 0
    assert said[0].startswith("== a: done in ") and said[-1].endswith("; no failures")
    said.clear()
    assert recording_sets.run_jobs(["a", "b"], lambda j: (j, jobs[j]), "rec", said.append) == 1
    assert said[1].endswith("; with failures: b-default, b-shm") and said[2] == "   RunSpecError: no such path"
    assert said[-1].endswith("; 1 job(s) with failures")


def test_plain_methods_times_each_way_interleaved_and_writes_their_ratio(tmp_path, monkeypatch, capsys):
    """plain_methods.py runs the same plain run launched and in-process, round by round, and writes
    each way's median and spread and the ratio in-process over launched."""
    mod = load("plain_methods.py")
    order = []

    def fake(way, speeds):
        def run(spec):
            order.append((way, spec.model, spec.launcher, spec.cuda_graph))
            return {"images_per_s": speeds.pop(0), "step_time_ms": 1.0}
        return run
    monkeypatch.setattr(mod.runs, "train", fake("launched", [100.0, 300.0, 200.0, 50.0, 60.0, 70.0]))
    monkeypatch.setattr(mod.plain_runs, "run_once", fake("in-process", [150.0, 150.0, 150.0, 35.0, 35.0, 35.0]))
    monkeypatch.setattr(mod, "run_provenance", lambda command: {"command": command})
    assert mod.main([str(tmp_path), "--models", "cnn", "--repeats", "3", "--dry-run"]) == 0
    assert [w for w, *_ in order] == ["launched", "in-process"] * 3
    assert all(launcher == "none" for _, _, launcher, _ in order)
    with open(tmp_path / "plain-methods.json") as f:
        res = json.load(f)
    (row,) = res["rows"]
    assert row["launched_images_per_s"] == 200.0 and row["launched_min"] == 100.0 and row["launched_max"] == 300.0
    assert row["in_process_over_launched"] == pytest.approx(0.75)
    assert "0.75" in capsys.readouterr().out


def test_adopt_results_keeps_a_tuning_comparison_cut_short_in_pending_until_it_is_finished(adopt, capsys):
    """A tuning comparison with fewer rounds than its repeats waits in pending/ (the next tune JOB resumes
    it); the finished one goes to experiments/ and the partial leaves pending/."""
    mod, ref, pending, res = adopt
    prov = {"machine": "2x NVIDIA H200, NV18", "gpu_model": "NVIDIA H200", "gpu_count": 2, "driver": "580.159.04",
            "cuda_runtime": "13.0", "nccl": "2.28.9", "torch": "2.11.0", "date": "2026-11-30"}
    name = "tuning-torch-ddp-wide-shm.json"

    def put(rounds, date):
        (res / name).write_text(json.dumps({"experiment": "tuning", "rows": [{}] * rounds,
                                            "config": {"rounds": rounds, "repeats": 3},
                                            "provenance": dict(prov, date=date)}))
    put(1, "2026-11-30T19:00:00")
    assert mod.main([str(res)]) == 0
    assert (pending / name).exists() and not (ref / "experiments" / name).exists()
    first = capsys.readouterr().out
    assert first.startswith("new") and "pending" in first
    put(3, "2026-12-01T10:00:00")
    assert mod.main([str(res)]) == 0
    assert (ref / "experiments" / name).exists() and not (pending / name).exists()
    assert "the comparison it began is complete" in capsys.readouterr().out


def test_adopt_results_leaves_a_cut_tuning_comparison_out_of_pending_once_the_finished_one_holds_its_runs(
        adopt, capsys):
    """A results folder that still carries the partial copy a resumed tune JOB began from: once the finished
    comparison in experiments/ holds every run of it, it is "already in" and pending/ stays empty, so the next
    tune JOB does not resume a comparison that is done."""
    mod, ref, pending, res = adopt
    name = "tuning-torch-ddp-wide-shm.json"
    finished = json.loads(open(os.path.join(reference.REFERENCE_DIR, "experiments", name)).read())
    (ref / "experiments" / name).write_text(json.dumps(finished))
    cut = dict(finished, config=dict(finished["config"], rounds=1))
    (res / name).write_text(json.dumps(cut))
    assert mod.main([str(res)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("already in") and "experiments" in out
    assert not list(pending.iterdir())
    cut["runs"] = cut["runs"] + [dict(cut["runs"][0], images_per_s=1.0)]      # a run the finished one lacks
    (res / name).write_text(json.dumps(cut))
    assert mod.main([str(res)]) == 0
    assert (pending / name).exists()


def test_adopt_results_can_keep_another_machines_recording_under_its_machine_name(adopt, capsys):
    """``--keep-other-machine``: the recording of another machine at home moves to ``<name>-<its machine tag>``
    and the new result takes home; a second run changes nothing; a tag name already taken is refused, with
    nothing moved; the flag and --replace-other-machine cannot be given together."""
    mod, ref, _, res = adopt
    h100 = {"machine": "2x NVIDIA H100 80GB HBM3, NV18", "gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 2,
            "driver": "580.159.04", "cuda_runtime": "13.0", "nccl": "2.28.9", "torch": "2.11.0", "date": "2026-11-28"}
    h200 = dict(h100, machine="2x NVIDIA H200, NV18", gpu_model="NVIDIA H200", date="2026-12-01")
    name = "nccl-paths-torch-ddp-mlp-small-b128.json"
    home = ref / "experiments" / name
    aside = ref / "experiments" / "nccl-paths-torch-ddp-mlp-small-b128-2xh100-80gb-hbm3-nv18.json"
    home.write_text(json.dumps({"rows": [{"h100": 1}], "provenance": h100}))
    (res / name).write_text(json.dumps({"rows": [{"h200": 1}], "provenance": h200}))
    assert mod.main([str(res), "--keep-other-machine", "--dry-run"]) == 0
    assert "kept as nccl-paths-torch-ddp-mlp-small-b128-2xh100-80gb-hbm3-nv18.json" in capsys.readouterr().out
    assert not aside.exists() and json.loads(home.read_text())["provenance"] == h100
    assert mod.main([str(res), "--keep-other-machine"]) == 0
    assert json.loads(aside.read_text())["provenance"] == h100 and json.loads(home.read_text())["provenance"] == h200
    capsys.readouterr()
    assert mod.main([str(res), "--keep-other-machine"]) == 0 and "unchanged" in capsys.readouterr().out
    home.write_text(json.dumps({"rows": [{"h100 again": 1}], "provenance": h100}))    # the tag name is taken now
    assert mod.main([str(res), "--keep-other-machine"]) == 1
    assert "exists already" in capsys.readouterr().out
    assert json.loads(home.read_text())["rows"] == [{"h100 again": 1}]
    assert json.loads(aside.read_text())["rows"] == [{"h100": 1}]
    with pytest.raises(SystemExit):
        mod.main([str(res), "--keep-other-machine", "--replace-other-machine"])
