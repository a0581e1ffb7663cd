"""ddlab.measure.launch: real multi-process launches on CPU (Gloo), failures, and timeouts."""
import os
import sys
import time

import psutil
import pytest

from ddlab.base import worker_report
from ddlab.measure import launch

SMOKE = ["-m", "ddlab.measure.smoke"]


def smoke_lines(output, check):
    """The smoke reports of ``check`` in a launch's output, by rank (launchers' prefixes allowed)."""
    return sorted((r for r in worker_report.parse(output, kind="smoke") if r["check"] == check),
                  key=lambda r: r["rank"])


def test_nccl_allreduce_check_needs_a_gpu_and_says_so():
    # The one small all-reduce worker (also what `ddlab nccl-log --capture` runs): without a GPU
    # for its rank it reports ok=False and exits 1, before any process group is set up.
    r = launch.run(SMOKE + ["nccl-allreduce", "--elements", "8"], nproc=1, timeout=120, check=False,
                   env={"CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 1, r.output
    [line] = smoke_lines(r.output, "nccl-allreduce")
    assert line["ok"] is False and line["reason"] == "no-gpu" and line["cuda_devices"] == 0 and line["rank"] == 0


def test_smoke_usage():
    from ddlab.measure import smoke
    assert smoke.main(["no-such-check"]) == 2
    assert smoke.main(["ddp-step", "--elements", "8"]) == 2          # ddp-step has no tensor length
    assert smoke.main(["nccl-allreduce", "--elements", "0"]) == 2


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
    monkeypatch.delenv("NCCL_NVLS_ENABLE", raising=False)
    code = ("import os; print(os.environ.get('NCCL_P2P_LEVEL'), os.environ.get('DDLAB_TEST_REMOVE_ME'), "
            "os.environ.get('NCCL_NVLS_ENABLE'))")
    r = launch.run(["-c", code], env={"NCCL_P2P_LEVEL": "LOC", "DDLAB_TEST_REMOVE_ME": None}, timeout=60)
    # launch adds no NCCL setting of its own: NVLink multicast stays NCCL's choice
    assert r.output.strip() == "LOC None None"
    assert r.ok and r.returncode == 0


def test_inherited_nccl_settings_reach_the_workers(monkeypatch):
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "0")         # as a shared machine's administrators may set it
    r = launch.run(["-c", "import os; print(os.environ.get('NCCL_NVLS_ENABLE'))"], timeout=60)
    assert r.output.strip() == "0"
    assert launch.worker_environment()["NCCL_NVLS_ENABLE"] == "0"
    monkeypatch.delenv("NCCL_NVLS_ENABLE")
    assert "NCCL_NVLS_ENABLE" not in launch.worker_environment()


def test_failure_raises_one_error_quoting_the_output():
    code = "import sys; print('worker says: disk on fire'); sys.exit(3)"
    with pytest.raises(launch.LaunchError) as ei:
        launch.run(["-c", code], timeout=60)
    msg = str(ei.value)
    assert "exit code 3" in msg and "disk on fire" in msg
    assert ei.value.result.returncode == 3


def test_a_process_killed_by_a_signal_says_which_first():
    import socket
    code = "import os, signal; print('working', flush=True); os.kill(os.getpid(), signal.SIGSEGV)"
    with pytest.raises(launch.LaunchError) as ei:
        launch.run(["-c", code], timeout=60)
    first = str(ei.value).splitlines()[0]
    assert first.startswith(f"the process on host {socket.gethostname()} failed: killed by SIGSEGV (signal 11;")
    assert "failed with exit code -11 (SIGSEGV)" in str(ei.value) and ei.value.failure.signal == "SIGSEGV"


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
        # 30 s: room for torchrun and two workers to import torch on a busy 2-core machine (both must start)
        launch.run(SMOKE + ["hang"], launcher="torchrun", nproc=2, timeout=30, env={"CUDA_VISIBLE_DEVICES": ""})
    elapsed = time.monotonic() - t0
    res = ei.value.result
    assert res.timed_out and "timed out after 30 s" in str(ei.value)
    # Killing takes a few seconds of grace at most; the launch must not hang on.
    assert elapsed < 30 + 30, elapsed
    pids = [r["pid"] for r in smoke_lines(res.output, "hang") if r["started"]]
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
    assert [l["rank"] for l in lines] == [0, 1] and all(l["size"] == 2 for l in lines)
    assert all(l["ok"] is True and l["backend"] == "gloo" for l in lines)
    assert lines[0]["checksum"] == lines[1]["checksum"]


@pytest.mark.slow
def test_horovod_torch_allreduce_on_two_cpu_processes():
    r = launch.run(SMOKE + ["hvd-torch"], launcher="horovodrun", nproc=2, timeout=300,
                   env={"CUDA_VISIBLE_DEVICES": ""})
    lines = smoke_lines(r.output, "hvd-torch")
    assert len(lines) == 2, r.output
    assert all(l["ok"] is True and l["value"] == 3.0 and l["gloo_built"] is True for l in lines)


@pytest.mark.slow
def test_horovod_tensorflow_allreduce_on_two_cpu_processes():
    r = launch.run(SMOKE + ["hvd-tf"], launcher="horovodrun", nproc=2, timeout=300,
                   env={"CUDA_VISIBLE_DEVICES": ""})
    lines = smoke_lines(r.output, "hvd-tf")
    assert len(lines) == 2, r.output
    assert all(l["ok"] is True and l["value"] == 3.0 for l in lines)


# ----------------------------------------------------------------------------- diagnosing hangs
HANGING_WORKER = '''
import sys, time
sys.path.insert(0, {source!r})
from ddlab.measure import launch
launch.install_hang_traceback()

def waiting_for_a_peer_that_never_comes():
    print("worker ready", flush=True)
    time.sleep(600)

waiting_for_a_peer_that_never_comes()
'''

# A stand-in for horovodrun: it starts the worker with its output on a pipe and relays each
# line with a rank prefix. Killed before its worker, it would take the worker's traceback with it.
RELAYING_LAUNCHER = '''
import subprocess, sys
child = subprocess.Popen([sys.executable, {worker!r}], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
for raw in child.stdout:
    sys.stdout.write("[0]<stderr>:" + raw.decode())
    sys.stdout.flush()
'''


def _hanging_worker(tmp_path):
    from ddlab.base.paths import SOURCE_DIR
    path = tmp_path / "hanging_worker.py"
    path.write_text(HANGING_WORKER.format(source=SOURCE_DIR))
    return path


def test_timeout_message_says_where_the_worker_was_stuck(tmp_path):
    worker = _hanging_worker(tmp_path)
    t0 = time.monotonic()
    with pytest.raises(launch.LaunchTimeout) as ei:
        launch.run([str(worker)], timeout=3)
    msg = str(ei.value)
    assert "timed out after 3 s" in msg and "worker ready" in msg
    where = msg[msg.index("where the workers were"):msg.index("last output:")]
    assert "in waiting_for_a_peer_that_never_comes" in where and "(most recent call first)" in where
    assert time.monotonic() - t0 < 3 + 10


def test_workers_are_terminated_before_the_launcher_that_relays_their_output(tmp_path):
    worker = _hanging_worker(tmp_path)
    relay = tmp_path / "relay.py"
    relay.write_text(RELAYING_LAUNCHER.format(worker=str(worker)))
    with pytest.raises(launch.LaunchTimeout) as ei:
        launch.run([str(relay)], timeout=4)
    res = ei.value.result
    assert "[0]<stderr>:worker ready" in res.output
    stuck = launch.hang_tracebacks(res.output)
    assert "[0]<stderr>:" in stuck and "in waiting_for_a_peer_that_never_comes" in stuck
    assert launch._marked_processes(res.launch_id) == []


def test_hang_tracebacks_picks_the_dumps_out_of_mixed_output():
    out = "\n".join([
        "step 10 | loss 1.2",
        "[1]<stderr>:Thread 0x00007f01 (most recent call first):",
        '[1]<stderr>:  File "/x/threading.py", line 320 in wait',
        "[1]<stderr>:",
        "[1]<stderr>:Current thread 0x00007f02 (most recent call first):",
        '[1]<stderr>:  File "/x/train.py", line 88 in sync_all',
        '[1]<stderr>:  File "/x/train.py", line 120 in main',
        "torchrun: Received 15 death signal",
        "Traceback (most recent call last):",
        '  File "run.py", line 9, in <module>',
        "Stack (most recent call first):",
        '  File "/y/w.py", line 3 in f',
    ])
    got = launch.hang_tracebacks(out).splitlines()
    assert got == [out.splitlines()[i] for i in (1, 2, 4, 5, 6, 10, 11)]
    assert launch.hang_tracebacks("no dumps here\nTraceback (most recent call last):") == ""
    assert launch.hang_tracebacks(out, max_lines=2).splitlines()[-1] == "... (5 more lines in the full output)"


def test_hang_tracebacks_keeps_a_dump_whose_frames_came_after_a_launcher_line():
    # Two workers and torchrun share one pipe: torchrun's line came between the second
    # worker's header and its frames (a CI run lost that worker's frames this way).
    out = "\n".join([
        "Current thread 0x00007f01 (most recent call first):",
        '  File "/w/hang.py", line 9 in waiting',
        "Current thread 0x00007f02 (most recent call first):",
        "W1127 08:00:00.000 torch/distributed/elastic/multiprocessing/api.py:900] Sending process 7 closing signal SIGTERM",
        '  File "/w/hang.py", line 9 in waiting',
        '  File "/w/hang.py", line 11 in <module>',
        "one", "two", "three", "four", "five",
        '  File "/w/late.py", line 1 in not_a_dump_any_more',
    ])
    got = launch.hang_tracebacks(out)
    assert got.count("in waiting") == 2 and "Sending process" not in got
    assert "not_a_dump_any_more" not in got


def test_phase_clock_counts_from_process_start_and_reports(capsys):
    clock = launch.PhaseClock()
    before = clock.since_start()
    assert before >= 0
    clock.done("first")
    time.sleep(0.05)
    clock.done("second")
    clock.done("second")          # a phase may be closed twice: the seconds add up
    assert list(clock.phases) == ["first", "second"] and clock.phases["second"] >= 0.05
    clock.report_to(print)        # prints what happened before it was given a printer ...
    clock.done("third")           # ... and what happens afterwards
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split(":")[0] for ln in lines] == ["phase first", "phase second", "phase second", "phase third"]
    assert "since process start" in lines[-1]
    assert sum(clock.phases.values()) == pytest.approx(clock.last - clock.start)
    assert clock.to_dict() == {k: round(v, 3) for k, v in clock.phases.items()}


@pytest.mark.slow
def test_torchrun_timeout_shows_each_rank_stuck(tmp_path):
    worker = _hanging_worker(tmp_path)
    with pytest.raises(launch.LaunchTimeout) as ei:
        launch.run([str(worker)], launcher="torchrun", nproc=2, timeout=10, env={"CUDA_VISIBLE_DEVICES": ""})
    res = ei.value.result
    assert res.output.count("worker ready") == 2, res.output
    where = str(ei.value).split("where the workers were", 1)[1].split("last output:", 1)[0]
    assert where.count("in waiting_for_a_peer_that_never_comes") == 2
