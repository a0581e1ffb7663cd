"""What a learner meets when the machine lacks something: each case is forced here (a mocked
machine, framework, Horovod build or data folder), the notebook's own cell or helper runs, and the
cell ends with one line saying what is missing and how the course goes on, or one course error
(rendered as its message alone, tests/test_errors.py), never a traceback or an undefined name."""
import json
import os
import re

import matplotlib
import pytest

matplotlib.use("Agg")

from ddlab.base.errors import CourseError  # noqa: E402
from ddlab.base.paths import REPO_ROOT  # noqa: E402
from ddlab.course import handson, mode  # noqa: E402
from ddlab.system import frameworks, hardware, policy, software, topology  # noqa: E402
from ddlab.training import data, experiments, runs  # noqa: E402
from ddlab.training.runspec import RunSpec  # noqa: E402

OK = lambda framework, launcher: (True, "")  # noqa: E731
NO_GPU = policy.Machine(gpus=0, software=OK)
TWO_GPUS = policy.Machine(gpus=2, label="2x NVIDIA H200, NV18", nvcc=True, software=OK)
TWO_GPUS_NO_NVCC = policy.Machine(gpus=2, label="2x NVIDIA H200, NV18", nvcc=False, software=OK)
# Two GPUs for PyTorch, none for a TensorFlow without GPU support.
TWO_GPUS_CPU_TF = policy.Machine(gpus=2, label="2x NVIDIA H200, NV18", nvcc=True, software=OK,
                                 framework_gpus=lambda framework: 0)


# ----------------------------------------------------------------------------- running notebook cells
def cell_source(notebook: str, cell_id: str) -> str:
    """A code cell's source with IPython's % and ! lines left out (they need a kernel)."""
    with open(os.path.join(REPO_ROOT, notebook), encoding="utf-8") as f:
        nb = json.load(f)
    (cell,) = [c for c in nb["cells"] if c.get("id") == cell_id]
    return "\n".join(ln for ln in "".join(cell["source"]).splitlines() if not ln.lstrip().startswith(("%", "!")))


def run_cells(notebook: str, cell_ids, ns: dict) -> dict:
    for cid in cell_ids:
        exec(compile(cell_source(notebook, cid), f"{notebook}:{cid}", "exec"), ns)
    return ns


@pytest.fixture
def machine(monkeypatch):
    """Makes policy.Machine.detect() answer the machine a test sets (``machine(NO_GPU)``); NVML's
    inventory is an empty one, so nothing asks the real hardware."""
    monkeypatch.setattr(hardware, "inventory", lambda *a, **k: hardware.Inventory())

    def use(m):
        monkeypatch.setattr(policy.Machine, "detect", classmethod(lambda cls: m))
        return m
    return use


@pytest.fixture
def no_data(monkeypatch, tmp_path):
    """Fashion-MNIST nowhere: DDLAB_DATA_DIR an empty folder, the cache and Debian's folder absent."""
    (tmp_path / "offline").mkdir()
    monkeypatch.setenv("DDLAB_DATA_DIR", str(tmp_path / "offline"))
    monkeypatch.setenv("DDLAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(data, "DEBIAN_DIR", str(tmp_path / "debian"))
    return tmp_path


def one_message(exc: CourseError) -> str:
    """What the notebook shows for a course error: its message (and the %tb hint), no frames."""
    lines = exc._render_traceback_()
    assert len(lines) == 2 and "Traceback" not in lines[0]
    return lines[0]


# ----------------------------------------------------------------------------- Fashion-MNIST missing
def test_start_here_without_the_data_ends_with_make_data_and_ddlab_data_dir(no_data):
    with pytest.raises(data.DatasetError) as ei:
        run_cells("Start_Here.ipynb", ["1a60d166"], {})
    shown = one_message(ei.value)
    assert "make data" in shown and "DDLAB_DATA_DIR" in shown and str(no_data / "offline") in shown


def test_the_inventory_row_without_the_data_names_the_folders_and_the_fix_on_one_line(no_data):
    """The Fashion-MNIST row of every notebook's inventory (and of ddlab doctor) is one line that still says
    where it looked and what to do, not the first line of the multi-line error."""
    from ddlab.report import doctor
    row = data.dataset_status()
    assert row == (f"MISSING: Fashion-MNIST not found in {no_data / 'offline'}, {no_data / 'cache'}, "
                   f"{no_data / 'debian'}; run `make data`, or set DDLAB_DATA_DIR to a folder holding the four "
                   "IDX files")
    shown = doctor.format_inventory(hardware.Inventory())
    assert f"Fashion-MNIST            {row}" in shown.splitlines()


def test_an_empty_ddlab_data_dir_is_named_when_another_copy_stands_in(monkeypatch, tmp_path):
    """DDLAB_DATA_DIR pointing at an empty folder: the search goes on to the next folder (every copy
    is checked against the same checksums) and the data cell's first line says so."""
    real = data.find_dataset()
    assert real is not None, "the tests need Fashion-MNIST: run `make data`"
    monkeypatch.setenv("DDLAB_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("DDLAB_CACHE_DIR", real)
    line = data.where()
    assert line == f"Fashion-MNIST from {real} (DDLAB_DATA_DIR={tmp_path} does not hold the four files, so this copy is used)"
    monkeypatch.setenv("DDLAB_DATA_DIR", real)
    assert data.where() == f"Fashion-MNIST from {real}"


def test_a_training_run_without_the_data_stops_before_launching(no_data, monkeypatch):
    monkeypatch.setattr(runs.launch, "run", lambda *a, **k: pytest.fail("launched without the data"))
    with pytest.raises(data.DatasetError, match="make data"):
        runs.train(RunSpec())
    with pytest.raises(data.DatasetError, match="DDLAB_DATA_DIR"):
        handson.run("ddp_7_rank0", handson.plan(gpu_count=0), )


def test_an_experiment_without_the_data_shows_its_recording_and_says_why(no_data, monkeypatch):
    monkeypatch.setattr(experiments, "run_experiment", lambda *a, **k: pytest.fail("ran without the data"))
    res = experiments.run_or_load("nccl-paths", "torch", "ddp", "cnn", machine=TWO_GPUS)
    assert res.source == "recorded" and res.companion is None
    assert "Fashion-MNIST is not on this machine (run `make data`" in res.notes[0]
    from ddlab.base import reference
    monkeypatch.setattr(reference, "REFERENCE_DIR", str(no_data / "nothing-recorded"))
    res = experiments.run_or_load("scaling", "torch", "ddp", "cnn", machine=NO_GPU, missing_ok=True)
    assert res.source == "missing" and "make data" in res.notes[0]       # nothing recorded: the empty result says why


# ----------------------------------------------------------------------------- notebook 5: TensorFlow without GPUs
def test_tensorflow_without_gpu_support_is_not_live_on_a_two_gpu_machine():
    d = policy.decide(policy.Needs(gpus=2, framework="keras", launcher="horovod"), TWO_GPUS_CPU_TF)
    assert not d.live
    assert d.why.startswith("it needs 2 GPU(s) and TensorFlow sees 0 of the 2 PyTorch sees: this TensorFlow has "
                            "no GPU support")
    assert "tensorflow[and-cuda]" in d.why
    assert policy.decide(policy.Needs(gpus=2, framework="torch", launcher="ddp"), TWO_GPUS_CPU_TF).live


def test_notebook_5_runs_keras_on_cpu_processes_and_says_why(machine, monkeypatch):
    machine(TWO_GPUS_CPU_TF)
    runs_asked = []

    def run(experiment, framework, launcher, model, workers, device, **kw):
        runs_asked.append((framework, device, kw))
        return experiments.ExperimentResult(experiment, [{"path": "default", "images_per_s": 1.0}], source="live",
                                            config={"device": device})
    monkeypatch.setattr(experiments, "run_experiment", run)
    shown = []
    ns = run_cells("notebooks/5.NCCL-Paths-with-Horovod-and-DDP.ipynb", ["a6537ccd"],
                   {"experiments": experiments, "mode": mode, "display": shown.append})
    assert runs_asked == [("keras", "cpu", {"test_samples": 1000})]          # TensorFlow on CPU, small
    (view,) = shown                                                          # shown as its narrow tables
    res = view.result
    assert res is ns["keras"] and res.config["device"] == "cpu"
    assert res.notes[0].startswith("live on CPU, small: this machine cannot run it on GPUs (it needs 2 GPU(s) and "
                                   "TensorFlow sees 0 of the 2 PyTorch sees")
    (missing,) = [n for n in res.notes if n.startswith("no recorded GPU result: ")]
    assert "nccl-paths-keras-horovod-cnn" in missing and "available" not in missing     # not every other recording


def test_notebook_5_says_first_what_each_section_will_show(machine, monkeypatch):
    """The opening cell's line for each part is what the part's own cell then does (where_it_runs asks
    the same decision as live_or_recorded, and runs nothing)."""
    monkeypatch.setattr(experiments, "run_experiment", lambda *a, **k: pytest.fail("where_it_runs runs nothing"))
    machine(TWO_GPUS_CPU_TF)
    keras = experiments.where_it_runs("nccl-paths", "keras", "horovod", "cnn")
    assert keras.startswith("a small run on CPU processes (it needs 2 GPU(s) and TensorFlow sees 0 of the 2 PyTorch "
                            "sees") and keras.endswith("; no GPU run recorded)")
    assert experiments.where_it_runs("nccl-paths", "torch", "ddp", "wide", cpu_run=False) == "live on the GPUs"
    machine(NO_GPU)
    assert experiments.where_it_runs("nccl-paths", "torch", "ddp", "cnn") == (
        "recorded (it needs 2 GPU(s) and torch sees 0), with a small run on CPU processes beside it")
    assert experiments.where_it_runs("nccl-paths", "torch", "ddp", "wide", cpu_run=False) == (
        "recorded (it needs 2 GPU(s) and torch sees 0)")
    machine(policy.Machine(gpus=0, software=lambda framework, launcher: (False, "Horovod is not installed")))
    assert experiments.where_it_runs("nccl-paths", "keras", "horovod", "cnn").startswith("not run here (")
    source = cell_source("notebooks/5.NCCL-Paths-with-Horovod-and-DDP.ipynb", "nb5-001")
    # the opening cell says what runs here through the course's one summary of every part (sequence.live_here)
    assert "sequence.live_here(5" in source and "recorded ({decision.why})" not in source


def test_tensorflow_gpu_count_asks_tensorflow_only_where_it_can_matter(monkeypatch, tmp_path):
    monkeypatch.setattr(frameworks, "has_module", lambda name: False)
    assert frameworks.gpu_count("keras") == 0                              # no TensorFlow
    monkeypatch.setattr(frameworks, "has_module", lambda name: True)
    monkeypatch.setattr(software, "package_version", lambda dist: "2.21.0" if dist == "tensorflow-cpu" else None)
    assert frameworks.gpu_count("keras") == 0                              # tensorflow-cpu
    monkeypatch.setattr(software, "package_version", lambda dist: None)
    monkeypatch.setattr(hardware, "inventory", lambda *a, **k: hardware.Inventory())
    assert frameworks.gpu_count("keras") == 0                              # no NVIDIA GPU at all
    # A GPU machine: TensorFlow itself is asked, in a child Python (here a fake one).
    monkeypatch.setattr(hardware, "inventory", lambda *a, **k: hardware.Inventory(gpus=[{}, {}]))
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'some TensorFlow warning'\necho 'GPUS 0'\n")
    fake.chmod(0o755)
    monkeypatch.setattr(frameworks.sys, "executable", str(fake))
    frameworks._ask_tensorflow.cache_clear()
    assert frameworks.gpu_count("keras") == 0
    fake.write_text("#!/bin/sh\necho 'GPUS 2'\n")
    frameworks._ask_tensorflow.cache_clear()
    assert frameworks.gpu_count("keras") == 2
    fake.write_text("#!/bin/sh\necho 'ImportError: libcudnn' >&2\nexit 1\n")
    frameworks._ask_tensorflow.cache_clear()
    assert frameworks.gpu_count("keras") == 0
    frameworks._ask_tensorflow.cache_clear()


def test_the_detected_machine_counts_each_frameworks_gpus(monkeypatch):
    monkeypatch.setattr(frameworks, "gpu_count", lambda framework="torch": {"torch": 2, "keras": 0}[framework])
    monkeypatch.setattr(frameworks, "has_module", lambda name: True)
    monkeypatch.setattr(policy, "this_machine", lambda: ("2x NVIDIA H200, NV18", "h200x2"))
    m = policy.Machine.detect()
    assert (m.gpus, m.gpus_for("torch"), m.gpus_for("keras"), m.gpus_for(None)) == (2, 2, 0, 2)


# ----------------------------------------------------------------------------- notebook 3: no GPU
def _notebook_3(monkeypatch):
    from ddlab.base import tables
    from ddlab.system import provenance, topology_ranking, topology_report
    from ddlab.views import topology_drawing
    printed = []
    ns = {"topology": topology, "topology_report": topology_report, "topology_ranking": topology_ranking,
          "topology_drawing": topology_drawing, "tables": tables, "caption": provenance.caption,
          "NOW": provenance.collect(inventory=hardware.Inventory()), "display": printed.append,
          "print": lambda *a, **k: printed.append(" ".join(map(str, a)))}
    return ns, printed


def test_notebook_3_without_a_gpu_skips_the_pair_experiment_in_one_line(machine, monkeypatch):
    machine(NO_GPU)
    monkeypatch.setattr(topology.Topology, "from_system", classmethod(lambda cls, timeout=30.0: pytest.fail("read")))
    ns, printed = _notebook_3(monkeypatch)
    run_cells("notebooks/3.System-Topology.ipynb", ["e95c5e66", "245beeae", "6470f158"], ns)
    assert ns["here"] is None and ns["PAIR_LIVE"] is False
    assert printed == [
        "No live matrix to read here (it needs 1 GPU(s) and torch sees 0): the recorded machines below "
        "stand in for it.",
        "No live pair experiment here: it needs 2 GPU(s) and torch sees 0.",
        "Live pair experiment skipped (the reason is above); the prediction above stands in for it."]


def test_notebook_3_where_nvidia_smi_cannot_read_the_gpus_goes_on_recorded(machine, monkeypatch):
    """PyTorch sees two GPUs but `nvidia-smi topo -m` fails (NoGPUError): the topology part falls back
    to the recording and says why; the pair experiment is skipped in one line."""
    machine(TWO_GPUS)

    def fails(cls, timeout=30.0):
        raise topology.NoGPUError("nvidia-smi was not found, so this machine has no NVIDIA driver\nmore")
    monkeypatch.setattr(topology.Topology, "from_system", classmethod(fails))
    ns, printed = _notebook_3(monkeypatch)
    run_cells("notebooks/3.System-Topology.ipynb", ["e95c5e66", "245beeae", "6470f158"], ns)
    assert ns["here"] is None and ns["PAIR_LIVE"] is False
    assert printed[0] == ("No live matrix to read here (nvidia-smi was not found, so this machine has no NVIDIA "
                          "driver): the recorded machines below stand in for it.")
    assert printed[1] == "No live pair experiment here: nvidia-smi was not found, so this machine has no NVIDIA driver."


# ----------------------------------------------------------------------------- notebook 6: no nvcc, hidden GPUs
def _notebook_5(monkeypatch):
    from ddlab.base import tables
    from ddlab.measure import collectives, collectives_run, p2p_diagnosis, p2p_run
    from ddlab.system import links, provenance
    from ddlab.views import p2p_plots
    printed = []
    ns = {"topology": topology, "links": links, "p2p_run": p2p_run, "p2p_diagnosis": p2p_diagnosis,
          "p2p_plots": p2p_plots, "collectives": collectives, "collectives_run": collectives_run,
          "collectives": collectives, "tables": tables,
          "mode": mode,                                       # imported by the p2p cell
          "inv": hardware.Inventory(), "caption": provenance.caption,
          "NOW": provenance.collect(inventory=hardware.Inventory()),
          "print": lambda *a, **k: printed.append(" ".join(map(str, a)))}
    return ns, printed


def test_notebook_5_on_two_gpus_without_nvcc_shows_the_recorded_run_in_one_line(machine, monkeypatch):
    from ddlab.measure import p2p_run
    machine(TWO_GPUS_NO_NVCC)
    monkeypatch.setattr(p2p_run, "run", lambda *a, **k: pytest.fail("tried to build and run without nvcc"))
    monkeypatch.setattr(p2p_run, "nvidia_sample", lambda: None)
    ns, printed = _notebook_5(monkeypatch)
    run_cells("notebooks/6.P2P-Bandwidth-Latency-Test.ipynb", ["f25d05d7"], ns)
    line = printed[0].strip()
    assert re.fullmatch(r"recorded on 2x NVIDIA H200[^()]*, 20\d\d-\d\d-\d\d \(driver [^()]*\) \(not live here: it needs nvcc \(the "
                        r"CUDA compiler\) to build the p2p test\)", line), line
    assert ns["p2p_result"].provenance and ns["peak"] > 0
    import matplotlib.pyplot as plt
    plt.close("all")


def test_notebook_5_decides_from_the_gpus_pytorch_can_use_not_nvml(machine, monkeypatch):
    """NVML sees two GPUs, CUDA_VISIBLE_DEVICES leaves PyTorch one: the all-reduce sweep is the CPU
    (gloo) one, said in one line, not an NCCL sweep that would fall back and fail."""
    from ddlab.measure import collectives, collectives_run
    monkeypatch.setattr(frameworks, "gpu_count", lambda framework="torch": 1)
    monkeypatch.setattr(frameworks, "has_module", lambda name: True)
    monkeypatch.setattr(frameworks, "nvcc_path", lambda: "/usr/bin/nvcc")
    monkeypatch.setattr(policy, "this_machine", lambda: ("1x NVIDIA H200", "h200x1"))
    monkeypatch.setattr(hardware, "inventory", lambda *a, **k: hardware.Inventory(gpus=[{}, {}]))   # NVML: 2
    monkeypatch.setattr(collectives_run, "compare_paths", lambda *a, **k: pytest.fail("NCCL sweep on one visible GPU"))
    monkeypatch.setattr(collectives_run, "sweep", lambda **k: ("gloo sweep", k["backend"]))
    monkeypatch.setattr(collectives, "summary", lambda sweeps: list(sweeps))
    ns, printed = _notebook_5(monkeypatch)
    ns["tables"] = type("T", (), {"show": staticmethod(lambda t: None)})
    run_cells("notebooks/6.P2P-Bandwidth-Latency-Test.ipynb", ["043f6ea8"], ns)
    assert ns["sweeps"] == {"gloo, 2 CPU processes": ("gloo sweep", "gloo")}
    assert printed[0] == "No NCCL sweep here (it needs 2 GPU(s) and torch sees 1): 2 CPU processes over gloo instead."


def test_nvidia_sample_and_p2p_parts_follow_the_same_policy():
    assert mode.live_or_recorded("p2p", machine=TWO_GPUS_NO_NVCC).why == \
        "it needs nvcc (the CUDA compiler) to build the p2p test"
    shown = mode.live_or_recorded("p2p", source="recorded", machine=TWO_GPUS_NO_NVCC)
    assert "not live here" not in shown.line                  # recorded as asked: no reason to give


# ----------------------------------------------------------------------------- notebook 8: Horovod missing
class _Run:
    script = "ddp_7_rank0.py"

    def row(self):
        return {"script": self.script, "processes": "2 x cpu", "samples": "1 / 1", "same": "yes", "spread": 0.0,
                "acc": 0.5, "img_s": 1.0, "seconds": 1.0}


NOT_INSTALLED = "Horovod is not installed (`make horovod` builds it)"
NOT_FOR = "Horovod is installed but not built for {} (`make horovod` rebuilds it against this Python's frameworks)"


@pytest.mark.parametrize("installed,built,hvd_why,keras_why", [
    (False, {}, NOT_INSTALLED, NOT_INSTALLED),
    (True, {"TensorFlow": "x.so"}, NOT_FOR.format("PyTorch"), None),
    (True, {"PyTorch": "x.so"}, None, NOT_FOR.format("TensorFlow")),
], ids=["not-installed", "without-pytorch", "without-tensorflow"])
def test_notebook_8_without_horovod_says_which_and_goes_on(monkeypatch, installed, built, hvd_why, keras_why):
    """Horovod missing or built without a framework: the Horovod cell and the Keras cell after it
    run what this build can, and each script it cannot is one line (no error, no undefined name)."""
    from test_handson import _FakeLaunch
    real_has = frameworks.has_module
    monkeypatch.setattr(frameworks, "has_module",          # TensorFlow and tf-keras there: Horovod is what is missing
                        lambda name: installed if name == "horovod" else name in ("tensorflow", "tf_keras") or
                        real_has(name))
    monkeypatch.setattr(software, "executable", lambda name, python=None: __file__)        # horovodrun "found"
    monkeypatch.setattr(software, "horovod_extensions", lambda: built)
    monkeypatch.setattr(handson.launch, "run", _FakeLaunch())
    ns = {"handson": handson, "PLAN": handson.plan(gpu_count=0), "ddp_run": _Run(), "display": print}
    run_cells("notebooks/8.Hands-On-Horovod.ipynb", ["nb6-020", "nb6-024"], ns)
    for name, why in (("hvd_run", hvd_why), ("keras_run", keras_why)):
        if why is None:
            assert isinstance(ns[name], handson.Run), name
            continue
        script = "hvd_8_rank0.py" if name == "hvd_run" else "keras_hvd_8_rank0.py"
        line = f"{script} is not run here: {why}. The steps above show its code; the notebook goes on without its run."
        assert isinstance(ns[name], handson.Skipped) and str(ns[name]) == line
    if hvd_why:
        table = handson.table([ns["ddp_run"], ns["hvd_run"]])
        assert len(table.rows) == 1 and table.notes[0].startswith("hvd_8_rank0.py is not run here")
        with pytest.raises(handson.HandsOnError, match=re.escape(hvd_why)):
            handson.run("hvd_8_rank0", ns["PLAN"])


def test_run_or_skip_runs_what_the_policy_allows(monkeypatch):
    from test_handson import _FakeLaunch
    fake = _FakeLaunch()
    monkeypatch.setattr(handson.launch, "run", fake)
    monkeypatch.setattr(experiments, "availability", OK)
    run = handson.run_or_skip("hvd_8_rank0", handson.plan(gpu_count=0))
    assert isinstance(run, handson.Run) and fake.calls[0]["launcher"] == "horovodrun"
    no_tf = policy.Machine(gpus=0, software=lambda f, la: (False, "TensorFlow is not installed") if f == "keras"
                           else (True, ""))
    skipped = handson.run_or_skip("keras_hvd_8_rank0", machine=no_tf)
    assert skipped.why == "TensorFlow is not installed" and len(fake.calls) == 1


def test_notebook_4_without_two_gpus_shows_the_recorded_level_sweep_and_why(machine, monkeypatch):
    from ddlab.measure import collectives, collectives_run
    from ddlab.system import nccl, provenance, topology
    machine(NO_GPU)
    monkeypatch.setattr(collectives_run, "compare_levels", lambda *a, **k: pytest.fail("level sweep without 2 GPUs"))
    printed, shown = [], []
    ns = {"policy": policy, "collectives": collectives, "collectives_run": collectives_run, "nccl": nccl,
          "topology": topology, "display": shown.append,
          "NCCL_LIVE": mode.decision("nccl-logs"),             # the first cell's
          "collectives": collectives, "inv": hardware.Inventory(), "caption": provenance.caption,
          "NOW": provenance.collect(inventory=hardware.Inventory()),
          "tables": type("T", (), {"show": staticmethod(shown.append)}),
          "print": lambda *a, **k: printed.append(" ".join(map(str, a)))}
    run_cells("notebooks/4.NCCL-Transports-and-P2P-Level.ipynb", ["a551901b"], ns)
    assert printed[0].startswith("recorded on 2x NVIDIA H200") and \
        printed[0].endswith("(not live here: it needs 2 GPU(s) and torch sees 0)")
    assert ns["NCCL_LIVE"].live is False and len(shown) == 2          # the sweep, then the pair's path
    predicted, measured = shown[1].rows
    assert predicted["link"] == "NV18" and predicted["LOC"] == "no P2P" and predicted["PIX"] == "P2P"
    assert measured["pairs"] == "measured" and measured["LOC"] == "SHM" and measured["SYS"] == "P2P"
    assert printed[1].endswith("levels that gave others: LOC")           # on the recorded pair only LOC differs


def test_notebook_5_runs_the_wide_model_live_on_two_gpus_twice_per_configuration(machine, monkeypatch):
    """On two GPUs, notebook 5's Horovod and DDP cells train the wide model live with
    mode.TWO_GPU_LIVE_REPEATS repeats (the launch count sets the notebook's wait) and show the CNN
    recorded; nothing is cut to the CPU run's 1,000 test images."""
    machine(TWO_GPUS)
    runs_asked = []

    def run(experiment, framework, launcher, model, workers, device, **kw):
        runs_asked.append((launcher, model, device, kw.get("repeats"), kw.get("test_samples")))
        return experiments.ExperimentResult(experiment, [{"path": "default", "images_per_s": 1.0}], source="live",
                                            config={"device": device})
    monkeypatch.setattr(experiments, "run_experiment", run)
    nb = "notebooks/5.NCCL-Paths-with-Horovod-and-DDP.ipynb"
    ns = {"experiments": experiments, "policy": policy, "mode": mode, "display": lambda *a: None,
          "NCCL_LIVE": mode.decision("nccl-paths")}
    run_cells(nb, ["079ba659", "72335a75"], ns)
    assert runs_asked == [("horovod", "wide", "cuda", mode.TWO_GPU_LIVE_REPEATS, None),
                          ("ddp", "wide", "cuda", mode.TWO_GPU_LIVE_REPEATS, None)]
    assert mode.TWO_GPU_LIVE_REPEATS == 2
    assert all(ns[name]["cnn"].source == "recorded" for name in ("hvd", "ddp"))


@pytest.mark.parametrize("m, live", [(NO_GPU, False), (TWO_GPUS, True)])
def test_notebook_5_trains_both_launchers_shows_each_paths_settings_once_and_flags_superlinear_rows(
        machine, monkeypatch, capsys, m, live):
    """The Horovod and DDP cells ask for the CNN (with its CPU run) and the wide model; on two GPUs the CNN is
    the recording and the wide model runs live. The first table shows each path's NCCL settings, the
    others leave them out; the red-flag cell names a row whose speedup exceeds its workers."""
    machine(m)
    asked = []

    def fake(experiment, framework, launcher, model, cpu_run=True, source="auto", missing_ok=False, **kw):
        asked.append((launcher, model, cpu_run, source, kw))
        res = experiments.ExperimentResult(experiment, [{"path": "default", "workers": 2, "images_per_s": 3.0}],
                                           source="live" if source == "auto" and live and model == "wide"
                                           else "recorded", config={"device": "cuda"})
        res.rows[0]["speedup"] = 2.5 if model == "wide" else 1.5          # as over a plain run of the recording
        return res
    monkeypatch.setattr(experiments, "run_or_load", fake)
    shown = []
    ns = {"experiments": experiments, "policy": policy, "mode": mode, "display": shown.append,
          "NCCL_LIVE": mode.decision("nccl-paths")}
    run_cells("notebooks/5.NCCL-Paths-with-Horovod-and-DDP.ipynb", ["079ba659", "72335a75", "51e97f05"], ns)
    assert [(a[0], a[1], a[2]) for a in asked] == [("horovod", "cnn", True), ("horovod", "wide", False),
                                                   ("ddp", "cnn", True), ("ddp", "wide", False)]
    assert [a[3] for a in asked] == (["recorded", "auto"] * 2 if live else ["auto"] * 4)
    assert all(("repeats" in a[4]) == live and ("test_samples" in a[4]) != live for a in asked)
    # Horovod's recorded wide model stands beside DDP's further down; a live one is shown here
    assert [(v.result.source, v.settings) for v in shown] == [("recorded", True)] + [("live", False)] * live \
        + [("recorded", False), ("live" if live else "recorded", False)]
    out = capsys.readouterr().out
    assert ("Horovod, wide: recorded" in out) != live
    flags = [ln for ln in out.splitlines() if ln.startswith("red flag:")]
    assert flags == ["red flag: DDP wide, path default: speedup 2.50 on 2 workers",
                     "red flag: Horovod wide, path default: speedup 2.50 on 2 workers"]
