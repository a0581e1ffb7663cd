"""ddlab.course.mode: one live-or-recorded policy for every part, decided from injected machine facts."""
import os

import pytest

from ddlab.base.paths import REFERENCE_DIR
from ddlab.course import mode
from ddlab.system import policy

OK = lambda framework, launcher: (True, "")  # noqa: E731
NO_GPU = policy.Machine(gpus=0, software=OK)
ONE_GPU = policy.Machine(gpus=1, label="1x NVIDIA L4", software=OK)
TWO_GPUS = policy.Machine(gpus=2, label="2x NVIDIA H200, NV18", nvcc=True, software=OK)
TWO_GPUS_NO_NVCC = policy.Machine(gpus=2, label="2x NVIDIA H200, NV18", nvcc=False, software=OK)


@pytest.mark.parametrize("machine,needs,live,why", [
    (NO_GPU, policy.Needs(gpus=1), False, "it needs 1 GPU(s) and torch sees 0"),
    (ONE_GPU, policy.Needs(gpus=1), True, ""),
    (ONE_GPU, policy.Needs(gpus=2, framework="torch", launcher="ddp"), False, "it needs 2 GPU(s) and torch sees 1"),
    (TWO_GPUS, policy.Needs(gpus=2, framework="torch", launcher="ddp"), True, ""),
    (TWO_GPUS, policy.Needs(gpus=2, nvcc=True), True, ""),
    (TWO_GPUS_NO_NVCC, policy.Needs(gpus=2, nvcc=True), False, "it needs nvcc"),
    (policy.Machine(gpus=2, software=lambda f, la: (False, "PyTorch is not installed")),
     policy.Needs(gpus=2, framework="torch", launcher="ddp"), False, "PyTorch is not installed"),
])
def test_decide(machine, needs, live, why):
    d = policy.decide(needs, machine)
    assert d.live is live and d.why.startswith(why)


@pytest.fixture
def live_parts(monkeypatch):
    """The live measurements, replaced by markers (no GPU here): which one ran."""
    from ddlab.measure import collectives_run, p2p_run
    from ddlab.measure import nccl_capture
    from ddlab.system import topology
    monkeypatch.setattr(topology.Topology, "from_system", classmethod(lambda cls, timeout=30.0: "live topology"))
    monkeypatch.setattr(nccl_capture, "capture_allreduce_log", lambda env=None, **k: "")
    monkeypatch.setattr(p2p_run, "run", lambda *a, **k: "live p2p")
    monkeypatch.setattr(collectives_run, "compare_paths", lambda *a, **k: "live sweeps")


@pytest.mark.parametrize("part", ["topology", "nccl-logs", "p2p", "allreduce"])
def test_no_gpu_shows_each_part_as_recorded_with_one_line(part, live_parts):
    shown = mode.live_or_recorded(part, machine=NO_GPU)
    assert shown.live is False and shown.value is not None
    assert shown.line.startswith("recorded on 2x NVIDIA H200") and "\n" not in shown.line
    assert str(shown) == shown.line


def test_one_gpu_runs_the_topology_live_and_records_the_rest(live_parts):
    shown = mode.live_or_recorded("topology", machine=ONE_GPU)
    assert shown.live and shown.value == "live topology" and shown.line == "measured now on 1x NVIDIA L4"
    for part in ("nccl-logs", "p2p", "allreduce"):
        assert not mode.live_or_recorded(part, machine=ONE_GPU).live, part


def test_two_gpus_run_every_part_live(live_parts):
    for part, value in (("topology", "live topology"), ("p2p", "live p2p"), ("allreduce", "live sweeps")):
        shown = mode.live_or_recorded(part, machine=TWO_GPUS)
        assert shown.live and shown.value == value and shown.line == "measured now on 2x NVIDIA H200, NV18"
    logs = mode.live_or_recorded("nccl-logs", machine=TWO_GPUS)
    assert logs.live and set(logs.value) == {"default", "shm", "socket"}
    # without nvcc our p2p test cannot be built: recorded instead, and asking for live says why
    assert not mode.live_or_recorded("p2p", machine=TWO_GPUS_NO_NVCC).live
    with pytest.raises(mode.NotLiveHere, match="needs nvcc") as ei:
        mode.live_or_recorded("p2p", source="live", machine=TWO_GPUS_NO_NVCC)
    shown = ei.value._render_traceback_()          # a notebook shows the message alone, no frames
    assert len(shown) == 2 and shown[0] == f"\x1b[31mNotLiveHere\x1b[0m: {ei.value}"
    assert str(ei.value).startswith("cannot run p2p live here: ")
    assert not mode.live_or_recorded("topology", source="recorded", machine=TWO_GPUS).live


def test_recorded_nccl_logs_come_from_the_reference_folder_not_the_tests():
    rec = mode.recorded_nccl_logs()
    assert mode.NCCL_LOG_DIR == os.path.join(REFERENCE_DIR, "nccl_logs") and "tests" not in mode.NCCL_LOG_DIR
    assert set(rec["logs"]) == {"default", "shm", "socket"}
    prov = rec["provenance"]
    assert prov["machine"] == "2x NVIDIA H200, NV18" and prov["nccl"].startswith(rec["logs"]["default"].version)
    assert rec["logs"]["default"].transport_counts() and rec["logs"]["socket"].transport_counts()


def test_training_parts_go_through_the_experiments_policy(monkeypatch):
    from ddlab.training import experiments
    shown = mode.live_or_recorded("nccl-paths", machine=NO_GPU, launcher="ddp", model="cnn", cpu_run=False)
    assert not shown.live and shown.line.startswith("recorded on 2x NVIDIA H200")
    assert isinstance(shown.value, experiments.ExperimentResult)
    missing = mode.live_or_recorded("nccl-paths", machine=NO_GPU, framework="keras", launcher="horovod",
                                    model="mlp-large", cpu_run=False, missing_ok=True)
    assert missing.line == "not recorded yet"


def test_bad_requests_get_one_message():
    with pytest.raises(ValueError, match="unknown part 'nvlink'"):
        mode.live_or_recorded("nvlink", machine=NO_GPU)
    with pytest.raises(ValueError, match="unknown source"):
        mode.live_or_recorded("p2p", source="maybe", machine=NO_GPU)
    with pytest.raises(ValueError, match="takes no options"):
        mode.live_or_recorded("p2p", machine=NO_GPU, size="1G")


# ----------------------------------------------------------------------------- the one-GPU parts
def test_the_one_gpu_parts_run_live_on_one_gpu(monkeypatch):
    import _one_gpu_fakes
    _one_gpu_fakes.patch(monkeypatch)
    for part, name in (("host-link", None), ("one-gpu", "one-gpu"), ("wrapper-cost", "wrapper-cost"),
                       ("input-pipeline", "input-pipeline")):
        shown = mode.live_or_recorded(part, machine=ONE_GPU)
        assert shown.live and shown.line == "measured now on 1x NVIDIA L4"
        assert name is None or shown.value.name == name


def test_the_one_gpu_parts_without_a_gpu_say_not_recorded_yet_or_show_the_recording(monkeypatch, tmp_path):
    from ddlab.base import reference
    import json
    import _one_gpu_fakes
    monkeypatch.setattr(reference, "REFERENCE_DIR", str(tmp_path))       # nothing recorded there yet
    for part in ("host-link", "one-gpu", "wrapper-cost", "input-pipeline"):
        shown = mode.live_or_recorded(part, machine=NO_GPU)
        assert shown.value is None and shown.line.startswith("not recorded yet (not live here: it needs 1 GPU(s)")
    (tmp_path / "hostlink").mkdir()
    (tmp_path / "hostlink" / "1xh100.json").write_text(json.dumps(_one_gpu_fakes.host_result().to_dict()))
    shown = mode.live_or_recorded("host-link", machine=NO_GPU)
    assert shown.value.source == "recorded" and shown.line.startswith("recorded on 1x NVIDIA H100 80GB HBM3")


def test_a_gpu_nothing_here_can_measure_falls_back_to_the_recording(monkeypatch):
    from ddlab.measure import host_link

    def cannot(**kw):
        raise host_link.HostLinkNoGPU("skipped: no GPU visible to PyTorch")
    monkeypatch.setattr(host_link, "measure", cannot)
    shown = mode.live_or_recorded("host-link", machine=ONE_GPU)
    assert not shown.live and "no GPU visible to PyTorch" in shown.line


@pytest.mark.parametrize("error,reason", [("P2PBuildError", "'make' was not found"),
                                          ("P2PNoGPU", "nvidia-smi was not found")])
def test_the_p2p_test_that_cannot_be_built_or_run_falls_back_to_the_recording(monkeypatch, error, reason):
    from ddlab.measure import p2p_run

    def cannot(*a, **k):
        raise getattr(p2p_run, error)(reason + "\nmore detail")
    monkeypatch.setattr(p2p_run, "run", cannot)
    shown = mode.live_or_recorded("p2p", machine=TWO_GPUS)
    assert not shown.live and shown.value is not None
    assert shown.line.startswith("recorded on 2x NVIDIA H200") and reason in shown.line and "\n" not in shown.line


def test_a_topology_matrix_that_cannot_be_parsed_falls_back_to_the_recording(monkeypatch):
    from ddlab.system import topology
    from ddlab.system.topology_parse import TopologyParseError

    def garbled(cls, timeout=30.0):
        raise TopologyParseError("line 2 (row GPU0, column GPU1): unknown link label 'NV99X'")
    monkeypatch.setattr(topology.Topology, "from_system", classmethod(garbled))
    shown = mode.live_or_recorded("topology", machine=TWO_GPUS)
    assert not shown.live and shown.value is not None and "\n" not in shown.line
    assert "cannot read" in shown.line and "NV99X" in shown.line and shown.line.startswith("recorded on 2x NVIDIA H200")


def test_the_live_one_gpu_throughput_shows_a_bar_over_its_launches_in_a_notebook(monkeypatch, tmp_path, capsys):
    from ddlab.base import progress
    from ddlab.training import one_gpu, runs
    from ddlab.training.runspec import LIVE_GPU_REPEATS
    got = {}

    def throughput(models, precisions, device, progress):
        got.update(models=models, precisions=precisions, device=device)
        progress(f"one launch{runs.DONE_MARK}8 s")
        return one_gpu.ExperimentResult("one-gpu", [], "live")
    monkeypatch.setattr(one_gpu, "single_gpu_throughput", throughput)
    monkeypatch.setattr(progress, "notebook_log", lambda name: str(tmp_path / f"{name}.log"))
    shown = mode.live_or_recorded("one-gpu", machine=ONE_GPU)
    assert shown.live and got["device"] == "cuda"
    assert list(got["models"]) == ["cnn"] and list(got["precisions"]) == list(one_gpu.PRECISIONS)
    total = len(got["precisions"]) * LIVE_GPU_REPEATS
    assert f"one GPU: the CNN in each precision: 1 of {total} done" in capsys.readouterr().out
    assert "one launch" in (tmp_path / "live-one-gpu.log").read_text()
