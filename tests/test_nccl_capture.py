"""ddlab.measure.nccl_capture: the ``ddlab nccl-log`` command (parse a log file, or capture one on GPUs)."""
import io
import json
import os

import pytest

from ddlab import cli as ddlab_cli
from ddlab.measure import nccl_capture

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "fixtures", "nccl")


def path(name):
    return os.path.join(FIX, name)


# ------------------------------------------------------------------------ ddlab nccl-log
def test_cli_table_and_json(capsys):
    assert nccl_capture.cli([path("horovod_gloo_socket_disabled_p2p_shm.log")]) == 0
    out = capsys.readouterr().out
    assert "all 8 connections NET/Socket" in out and "NET/Socket/0 (8)" in out
    assert nccl_capture.cli([path("old_ring_nccl23_single_process.log"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["transport_counts"] == {"P2P": 4, "SHM": 4}


def test_cli_no_nccl_lines(capsys):
    assert nccl_capture.cli([path("no_nccl_training_output.log")]) == 1
    assert capsys.readouterr().out.strip() == "ddlab nccl-log: no NCCL INFO lines found; run with NCCL_DEBUG=INFO"


def test_cli_errors(capsys, tmp_path, monkeypatch):
    assert nccl_capture.cli([str(tmp_path / "missing.log")]) == 1
    assert "cannot read" in capsys.readouterr().out
    assert nccl_capture.cli([]) == 2
    assert nccl_capture.cli(["--capture", str(tmp_path / "x.log"), "--env", "P2P_LEVEL=LOC"]) == 2
    assert "NCCL_NAME=VALUE" in capsys.readouterr().out
    monkeypatch.setattr("sys.stdin", io.StringIO("h:1:1 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct\n"))
    assert nccl_capture.cli(["-"]) == 0
    assert "SHM/direct/direct" in capsys.readouterr().out


def test_capture_needs_gpus_and_says_so(capsys, tmp_path, monkeypatch):
    from ddlab.system import hardware
    monkeypatch.setattr(hardware, "inventory", lambda **kw: hardware.Inventory())
    with pytest.raises(RuntimeError, match="needs 2 GPUs; this machine has 0"):
        nccl_capture.capture_allreduce_log()
    out = tmp_path / "cap.log"
    assert nccl_capture.cli(["--capture", str(out), "--env", "NCCL_P2P_LEVEL=LOC"]) == 1
    assert "needs 2 GPUs" in capsys.readouterr().out and not out.exists()


def test_capture_runs_the_smoke_all_reduce_under_torchrun(monkeypatch):
    from ddlab.system import hardware
    from ddlab.measure import launch
    monkeypatch.setattr(hardware, "inventory", lambda **kw: hardware.Inventory(gpus=[hardware.GPU(0, "g"),
                                                                                   hardware.GPU(1, "g")]))
    from ddlab.system import frameworks
    monkeypatch.setattr(frameworks, "gpu_count", lambda framework="torch": 2)     # both usable by PyTorch
    calls = []

    def fake_run(argv, **kw):
        calls.append((argv, kw))
        return launch.LaunchResult(command=argv, returncode=0, output="the log", duration_s=0.1)
    monkeypatch.setattr(launch, "run", fake_run)
    assert nccl_capture.capture_allreduce_log({"NCCL_P2P_LEVEL": "LOC"}) == "the log"
    [(argv, kw)] = calls
    assert argv == ["-m", "ddlab.measure.smoke", "nccl-allreduce", "--elements", str(nccl_capture.CAPTURE_ELEMENTS)]
    assert kw["launcher"] == "torchrun" and kw["nproc"] == 2 and kw["timeout"] > 0
    assert kw["env"]["NCCL_DEBUG"] == "INFO" and kw["env"]["NCCL_P2P_LEVEL"] == "LOC"


def test_dispatch_through_ddlab(capsys):
    assert ddlab_cli.main(["nccl-log", path("torchrun_p2p_cumem_interleaved.log")]) == 0
    assert "P2P/CUMEM (8), P2P/CUMEM/read (4)" in capsys.readouterr().out
