"""ddlab.launch: real multi-process launches on CPU (Gloo), failures, and timeouts."""
import os
import re
import sys
import time

import psutil
import pytest

from ddlab import launch

SMOKE = ["-m", "ddlab.smoke"]


def smoke_lines(output, check):
    # launchers prefix worker lines (horovodrun: "[1]<stdout>:"), so look anywhere in the line
    return [dict(re.findall(r"(\w+)=(\S+)", line[line.index("SMOKE "):])) for line in output.splitlines()
            if f"SMOKE {check} " in line]


def test_command_for_each_launcher():
    assert launch.command_for("python", 1, ["x.py"], python="py") == ["py", "x.py"]
    tr = launch.command_for("torchrun", 4, ["x.py", "--a"], python="py")
    assert tr[:3] == ["py", "-m", "torch.distributed.run"] and "--nproc-per-node=4" in tr and tr[-2:] == ["x.py", "--a"]
    hv = launch.command_for("horovodrun", 2, ["x.py"], python="py")
    assert hv[1:5] == ["-np", "2", "-H", "localhost:2"] and "--gloo" in hv and hv[-2:] == ["py", "x.py"]
    mp = launch.command_for("mpirun", 2, ["x.py"], python="py", env_keys=["NCCL_P2P_LEVEL"])
    assert "-np" in mp and ["-x", "NCCL_P2P_LEVEL"] == mp[mp.index("-x"):mp.index("-x") + 2]


@pytest.mark.parametrize("bad", [("nope", 1), ("python", 2), ("torchrun", 0)])
def test_command_for_rejects_bad_requests(bad):
    with pytest.raises(ValueError):
        launch.command_for(bad[0], bad[1], ["x.py"])


def test_environment_is_passed_and_removed(monkeypatch):
    monkeypatch.setenv("DDLAB_TEST_REMOVE_ME", "1")
    code = "import os; print(os.environ.get('NCCL_P2P_LEVEL'), os.environ.get('DDLAB_TEST_REMOVE_ME'), os.environ['NCCL_NVLS_ENABLE'])"
    r = launch.run(["-c", code], env={"NCCL_P2P_LEVEL": "LOC", "DDLAB_TEST_REMOVE_ME": None}, timeout=60)
    assert r.output.strip() == "LOC None 0"
    assert r.ok and r.returncode == 0


def test_failure_raises_one_error_quoting_the_output():
    code = "import sys; print('worker says: disk on fire'); sys.exit(3)"
    with pytest.raises(launch.LaunchError) as ei:
        launch.run(["-c", code], timeout=60)
    msg = str(ei.value)
    assert "exit code 3" in msg and "disk on fire" in msg
    assert ei.value.result.returncode == 3


def test_failure_without_check_returns_result():
    r = launch.run(["-c", "raise SystemExit(5)"], timeout=60, check=False)
    assert r.returncode == 5 and not r.ok


def test_missing_program_is_a_launch_error():
    with pytest.raises(launch.LaunchError, match="could not start"):
        launch.run(["x"], python="/nonexistent/python", timeout=10)


def _alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.slow
def test_hung_collective_is_killed_within_timeout_and_nothing_is_left():
    t0 = time.monotonic()
    with pytest.raises(launch.LaunchTimeout) as ei:
        launch.run(SMOKE + ["hang"], launcher="torchrun", nproc=2, timeout=25, env={"CUDA_VISIBLE_DEVICES": ""})
    elapsed = time.monotonic() - t0
    res = ei.value.result
    assert res.timed_out and "timed out after 25 s" in str(ei.value)
    # Killing takes a few seconds of grace at most; the launch must not hang on.
    assert elapsed < 25 + 30, elapsed
    pids = [int(p) for p in re.findall(r"SMOKE hang rank=\d+ pid=(\d+)", res.output)]
    assert len(pids) == 2, res.output  # both workers really started before the timeout
    time.sleep(0.5)
    assert not [p for p in pids if _alive(p)]
    assert launch._marked_processes(res.launch_id) == []


@pytest.mark.slow
def test_torchrun_ddp_step_gives_equal_weights_on_both_ranks():
    r = launch.run(SMOKE + ["ddp-step"], launcher="torchrun", nproc=2, timeout=300,
                   env={"CUDA_VISIBLE_DEVICES": ""})
    lines = smoke_lines(r.output, "ddp-step")
    assert len(lines) == 2, r.output
    assert {l["rank"] for l in lines} == {"0", "1"}
    assert all(l["ok"] == "True" and l["backend"] == "gloo" for l in lines)
    assert lines[0]["checksum"] == lines[1]["checksum"]


@pytest.mark.slow
def test_horovod_torch_allreduce_on_two_cpu_processes():
    r = launch.run(SMOKE + ["hvd-torch"], launcher="horovodrun", nproc=2, timeout=300,
                   env={"CUDA_VISIBLE_DEVICES": ""})
    lines = smoke_lines(r.output, "hvd-torch")
    assert len(lines) == 2, r.output
    assert all(l["ok"] == "True" and float(l["value"]) == 3.0 and l["gloo_built"] == "True" for l in lines)


@pytest.mark.slow
def test_horovod_tensorflow_allreduce_on_two_cpu_processes():
    r = launch.run(SMOKE + ["hvd-tf"], launcher="horovodrun", nproc=2, timeout=300,
                   env={"CUDA_VISIBLE_DEVICES": ""})
    lines = smoke_lines(r.output, "hvd-tf")
    assert len(lines) == 2, r.output
    assert all(l["ok"] == "True" and float(l["value"]) == 3.0 for l in lines)
