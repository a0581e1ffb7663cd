"""ddlab.measure.rank_failures: the rank that failed first, read from real launchers' output
(tests/fixtures/launch, captured on this machine), and real 2-process launches on CPU (Gloo) whose
rank 1 is killed or raises: the error's first line names rank 1, its host and how, and no process
of the launch is left."""
import json
import os
import re
import signal
import socket
import sys
import time
from types import SimpleNamespace

import psutil
import pytest

from ddlab.measure import launch, rank_failures

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "launch")
HOST = socket.gethostname()
COMMANDS = {
    "torchrun": ["py", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "w.py"],
    "horovodrun": ["/venv/bin/horovodrun", "-np", "2", "-H", "localhost:2", "--gloo", "py", "w.py"],
    "mpirun": ["/usr/bin/mpirun", "-np", "2", "--bind-to", "none", "--oversubscribe", "py", "w.py"],
}


def captured(name, returncode=1):
    """A fixture as a launch result (its '# ' header lines, which say how it was captured, left out)."""
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as f:
        text = "".join(line for line in f if not line.startswith("# "))
    return SimpleNamespace(output=text, returncode=returncode, command=COMMANDS[name.split("_")[0]])


# ----------------------------------------------------------------------------- the captured texts
@pytest.mark.parametrize("name, how", [
    ("torchrun_sigkill.txt", "killed by SIGKILL (signal 9;"),
    ("torchrun_sigsegv.txt", "killed by SIGSEGV (signal 11;"),
    ("torchrun_exception.txt", "raised ValueError: batch 3 has 17 labels for 16 images"),
    ("torchrun_exception_record.txt", "raised ValueError: batch 3 has 17 labels for 16 images"),
    ("torchrun_import_error.txt", "raised ModuleNotFoundError: No module named 'no_such_module_xyz'"),
    ("torchrun_exit_status.txt", "exit status 3"),
    ("torchrun_exception_then_sigabrt.txt", "raised ValueError: shard 3 is empty (its process then ended with SIGABRT)"),
    ("horovodrun_sigkill.txt", "killed by SIGKILL (signal 9;"),
    ("horovodrun_exception.txt", "raised ValueError: batch 3 has 17 labels for 16 images"),
    ("mpirun_sigkill.txt", "killed by SIGKILL (signal 9;"),
    ("mpirun_exception.txt", "raised ValueError: batch 3 has 17 labels for 16 images"),
])
def test_the_first_line_names_the_rank_that_failed_its_host_and_how(name, how):
    failure = rank_failures.first_failure(captured(name))
    first = rank_failures.describe(failure).splitlines()[0]
    # torchrun says "localhost", horovodrun names no host for -H localhost, mpirun says "vm":
    # all are this machine, which had the name vm when they were captured.
    assert first.startswith(f"rank 1 on host {HOST if 'mpirun' not in name else 'vm'} died first: {how}"), first
    assert failure.rank == 1 and failure.cause
    assert failure.launcher == name.split("_")[0]


def test_a_survivor_is_not_taken_for_the_cause_when_the_launcher_names_it():
    # torchrun's own "Root Cause (first observed failure)" names rank 0 (SIGTERM, after its
    # barrier failed); horovodrun's "first process to do so" names process 0 likewise.
    for name in ("torchrun_exit_status.txt", "horovodrun_exception.txt"):
        out = captured(name).output
        assert re.search(r"Root Cause \(first observed failure\):\n\[\d\]:\n.*\n.*\n  rank      : 0", out) or \
            "Process name: 0" in out
        failure = rank_failures.first_failure(captured(name))
        assert failure.rank == 1, rank_failures.describe(failure)


@pytest.mark.parametrize("name, state", [
    ("torchrun_sigkill.txt", "rank 0: was waiting in all_reduce when rank 1 died; it failed there "
                             "(RuntimeError: Connection closed by peer), then was stopped by the launcher (SIGTERM)"),
    ("torchrun_exit_status.txt", "rank 0: was waiting in barrier when rank 1 died; it failed there "
                                 "(RuntimeError: Connection closed by peer), then was stopped by the launcher (SIGTERM)"),
    ("torchrun_import_error.txt", "rank 0: terminated by the launcher (SIGTERM) after rank 1 died"),
    ("horovodrun_sigkill.txt", "rank 0: was waiting in allreduce when rank 1 died; it failed there "
                               "(HorovodInternalError: Horovod has been shut down), then was stopped by the launcher "
                               "(SIGTERM)"),
    ("horovodrun_exception.txt", "rank 0: was waiting in allreduce when rank 1 died; it failed there "
                                 "(HorovodInternalError: Horovod has been shut down)"),
    ("mpirun_sigkill.txt", "rank 0: stopped by the launcher after rank 1 died (it reported no error of its own)"),
])
def test_the_survivors_state_follows(name, state):
    assert rank_failures.describe(rank_failures.first_failure(captured(name))).splitlines()[1:] == [state]


def test_an_nccl_error_of_a_survivor_is_a_consequence():
    # Written from NCCL's error string for ncclRemoteError and PyTorch's DistBackendError (no GPU
    # here to capture one): rank 0's NCCL error follows rank 1's out-of-memory error.
    out = "\n".join([
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "/site-packages/torch/distributed/distributed_c10d.py", line 2501, in all_reduce',
        "[rank0]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote process "
        "exited or there was a network error, NCCL version 2.21.5",
        "[rank1]: Traceback (most recent call last):",
        '[rank1]:   File "train.py", line 40, in step',
        "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "E1125 api.py:1002] failed (exitcode: 1) local_rank: 0 (pid: 11) of binary: python",
    ])
    failure = rank_failures.first_failure(SimpleNamespace(output=out, returncode=1, command=COMMANDS["torchrun"]))
    assert failure.line() == (f"rank 1 on host {HOST} died first: raised torch.OutOfMemoryError: CUDA out of memory. "
                              "Tried to allocate 2.00 GiB")
    assert failure.survivors == ["rank 0: was waiting in all_reduce when rank 1 died; it failed there "
                                 "(DistBackendError: remote process exited)"]


def test_signal_names_and_exit_statuses():
    assert rank_failures.signal_name(-9) == "SIGKILL" and rank_failures.signal_name(6) == "SIGABRT"
    assert rank_failures.signal_name(11) == "SIGSEGV" and rank_failures.signal_name(200) == "signal 200"
    assert rank_failures.status_signal(-6) == signal.SIGABRT and rank_failures.status_signal(1) is None
    assert rank_failures.status_signal(137) is None                    # a plain exit status 137 ...
    assert rank_failures.status_signal(137, shell=True) == 9           # ... from a shell: SIGKILL
    assert rank_failures.status_signal(None) is None


def test_one_process_and_a_negative_exit_status():
    res = SimpleNamespace(output="working\n", returncode=-6, command=["py", "x.py"])
    failure = rank_failures.first_failure(res)
    assert failure.line() == (f"the process on host {HOST} failed: killed by SIGABRT (signal 6; an abort, often a "
                              "C++ exception nothing caught: 'terminate called after throwing ...')")
    tb = 'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\nKeyError: \'lr\'\n'
    assert rank_failures.first_failure(SimpleNamespace(output=tb, returncode=1, command=["py", "x.py"])).line() == \
        f"the process on host {HOST} failed: raised KeyError: 'lr'"


def test_nothing_failed_is_none():
    ok = SimpleNamespace(output="rank 0 done\n", returncode=0, command=COMMANDS["torchrun"])
    assert rank_failures.first_failure(ok) is None and rank_failures.describe(None) == ""


def test_an_unknown_rank_is_said_so():
    out = 'Traceback (most recent call last):\n  File "w.py", line 3, in <module>\nOSError: disk full\n'
    failure = rank_failures.first_failure(SimpleNamespace(output=out, returncode=1, command=COMMANDS["mpirun"]))
    assert failure.line() == (f"a worker (the output does not say which rank) on host {HOST} died first: "
                              "raised OSError: disk full")


def test_launcher_and_world_size_from_the_command():
    assert [rank_failures.launcher_of(c) for c in COMMANDS.values()] == ["torchrun", "horovodrun", "mpirun"]
    assert [rank_failures.world_size(c) for c in COMMANDS.values()] == [2, 2, 2]
    assert rank_failures.launcher_of(["py", "x.py"]) == "python" and rank_failures.world_size(["py"]) is None


# ----------------------------------------------------------------------------- real launches
WORKER = '''
import os, signal, sys
sys.path.insert(0, {source!r})
from ddlab.measure import launch
launch.install_hang_traceback()
import torch
mode, framework = sys.argv[1], sys.argv[2]
if framework == "horovod":
    import horovod.torch as hvd
    hvd.init()
    rank = hvd.rank()
    def reduce():
        hvd.allreduce(torch.ones(1), name="x")
else:
    import torch.distributed as dist
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    def reduce():
        dist.all_reduce(torch.ones(1))
print(f"WORKER rank={{rank}} pid={{os.getpid()}}", flush=True)
reduce()                      # both ranks are up
if rank == 1:
    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    def read_shard():
        raise ValueError("shard 3 is empty")
    read_shard()
reduce()                      # rank 0 waits here for rank 1
'''


def _alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["torchrun", "horovodrun"])
@pytest.mark.parametrize("mode, how", [("kill", "killed by SIGKILL (signal 9;"),
                                       # (followed, about one run in five, by "(its process then ended with SIGABRT)")
                                       ("raise", "raised ValueError: shard 3 is empty")])
def test_a_dead_rank_is_named_first(tmp_path, launcher, mode, how):
    from ddlab.base.paths import SOURCE_DIR
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER.format(source=SOURCE_DIR))
    framework = "horovod" if launcher == "horovodrun" else "ddp"
    t0 = time.monotonic()
    with pytest.raises(launch.LaunchError) as ei:
        launch.run([str(worker), mode, framework], launcher=launcher, nproc=2, timeout=60,
                   env={"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "TF_CPP_MIN_LOG_LEVEL": "3"})
    took = time.monotonic() - t0
    assert not isinstance(ei.value, launch.LaunchTimeout), str(ei.value)
    lines = str(ei.value).splitlines()
    assert lines[0].startswith(f"rank 1 on host {HOST} died first: {how}"), str(ei.value)
    assert lines[1].startswith("rank 0: ") and "in reduce " not in lines[1], str(ei.value)   # the library's name
    assert lines[2].startswith(f"{launcher} launch of 2 process(es) failed"), str(ei.value)
    assert ei.value.failure.rank == 1
    res = ei.value.result
    pids = [int(p) for p in re.findall(r"WORKER rank=\d pid=(\d+)", res.output)]
    assert len(pids) == 2, res.output
    time.sleep(0.2)
    assert not [p for p in pids if _alive(p)] and launch._marked_processes(res.launch_id) == []
    assert took < 60, took
    # The row a failed run leaves in a recording keeps that first line whole, the rest beside it.
    from ddlab.training import runs
    row = runs.failure_row(ei.value, path="default", workers=2)
    assert row["error"] == lines[0] and "rank 0: " in row["error_detail"]
    assert f"{launcher} launch of 2 process(es) failed" in row["error_detail"]


# ----------------------------------------------------------------------------- torchrun's error files
def _error_file(path, message, timestamp):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"message": {"message": message, "extraInfo": {"py_callstack": "Traceback ...",
                                                                               "timestamp": str(timestamp)}}}))
    return str(path)


def _summary_block(index, rank, error_file):
    return [f"[{index}]:", "  time      : 2026-01-01_00:00:00", "  host      : localhost",
            f"  rank      : {rank} (local_rank: {rank})", f"  exitcode  : 1 (pid: {100 + rank})",
            f"  error_file: {error_file}",
            "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"]


def test_torchrun_error_files_give_the_exception_and_which_rank_raised_first(tmp_path):
    """Each worker's error file (what @record writes) holds its exception and when it was raised:
    the rank that raised first is named, with its own exception, though torchrun lists it second."""
    late = _error_file(tmp_path / "0" / "error.json", "RuntimeError: the learning rate is NaN", 1700000200)
    early = _error_file(tmp_path / "1" / "error.json", "ValueError: shard 3 is empty\nmore text", 1700000100)
    output = "\n".join(["x.py FAILED", "-" * 60, "Failures:"] + _summary_block(0, 0, late) + ["-" * 60]
                       + _summary_block(1, 1, early) + ["=" * 60])
    result = SimpleNamespace(output=output, returncode=1, command=["torchrun", "--nproc-per-node=2", "x.py"])
    failure = rank_failures.first_failure(result)
    assert failure.rank == 1 and failure.how == "raised ValueError: shard 3 is empty"
    assert failure.survivors and failure.survivors[0].startswith("rank 0: ")
    # without the files (another machine, or gone) the text alone decides: the first listed
    for f in (late, early):
        os.remove(f)
    failure = rank_failures.first_failure(result)
    assert failure.rank == 0 and failure.how == "exit status 1"


def test_an_error_file_that_is_not_one_is_ignored(tmp_path):
    assert rank_failures.read_error_file("<N/A>") is None
    bad = tmp_path / "e.json"
    bad.write_text("not json")
    assert rank_failures.read_error_file(str(bad)) is None
    bad.write_text(json.dumps({"message": "NCCL error: unhandled system error"}))
    assert rank_failures.read_error_file(str(bad)) == ("NCCL error: unhandled system error", None)
