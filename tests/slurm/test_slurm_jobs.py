"""source_code/slurm/ against a real Slurm: a one-node cluster on this machine (Debian's
slurmctld, slurmd and munge; configuration written here), the DDP and Horovod batch
scripts submitted as 2-worker CPU jobs with Gloo, their state, exit code and output checked.

Run with `make slurm-test` (as root: it installs the packages when missing and starts the
daemons, and stops the ones it started at the end)."""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddlab.base import worker_report
from ddlab.base.paths import REPO_ROOT

REPO = Path(REPO_ROOT)
SLURM_DIR = REPO / "source_code" / "slurm"
PACKAGES = ["slurmctld", "slurmd", "slurm-client", "munge"]
SBIN = ["/usr/sbin", "/usr/bin", "/sbin"]
TRAIN_FLAGS = ["--steps", "6", "--warmup-steps", "2", "--batch-size", "32", "--test-samples", "500"]


def _which(name):
    return shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", "")] + SBIN))


def _run(cmd, **kw):
    kw.setdefault("timeout", 120)
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def _install_slurm():
    if all(_which(x) for x in ("slurmctld", "slurmd", "sbatch", "munged")):
        return
    if os.geteuid() != 0:
        pytest.fail(f"Slurm is not installed and this is not root: apt-get install {' '.join(PACKAGES)}")
    # the course's one installer: it waits its turn when the browser test installs Chromium beside this test
    inst = _run(["bash", str(REPO / "tools" / "apt_install.sh"), *PACKAGES], timeout=1100)
    assert inst.returncode == 0, (inst.stdout + inst.stderr)[-2000:]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pid(path):
    try:
        return int(Path(path).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _stop(pidfile):
    pid = _pid(pidfile)
    if pid is None:
        return
    try:
        os.kill(pid, 15)
    except ProcessLookupError:
        return
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(pid, 9)


def _munge_works():
    if not _which("munge"):
        return False
    enc = subprocess.run([_which("munge"), "-n"], capture_output=True, timeout=30)
    if enc.returncode != 0:
        return False
    return subprocess.run([_which("unmunge")], input=enc.stdout, capture_output=True, timeout=30).returncode == 0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.fail("the one-node Slurm cluster needs root (slurmd runs jobs as their user)")
    _install_slurm()
    d = tmp_path_factory.mktemp("slurm")
    for sub in ("state", "spool", "log"):
        (d / sub).mkdir()
    host = socket.gethostname().split(".")[0]
    conf = d / "slurm.conf"
    conf.write_text(f"""ClusterName=ddlabtest
SlurmctldHost={host}
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
MpiDefault=none
ReturnToService=2
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd.log
NodeName={host} CPUs={os.cpu_count()} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=60 State=UP
""")
    env = dict(os.environ, SLURM_CONF=str(conf))
    started = []
    try:
        if not _munge_works():
            Path("/run/munge").mkdir(parents=True, exist_ok=True)
            shutil.chown("/run/munge", "munge", "munge")
            r = _run(["runuser", "-u", "munge", "--", _which("munged")])
            assert r.returncode == 0, f"munged did not start: {r.stderr}"
            started.append("/run/munge/munged.pid")
            assert _munge_works(), "munge -n | unmunge fails after starting munged"
        for daemon in ("slurmctld", "slurmd"):
            r = _run([_which(daemon), "-f", str(conf)], env=env)
            started.append(str(d / f"{daemon}.pid"))
            assert r.returncode == 0, f"{daemon} did not start: {r.stderr}\n{_logs(d)}"
            if daemon == "slurmctld":
                time.sleep(1)
        deadline = time.monotonic() + 60
        state = ""
        while time.monotonic() < deadline:
            state = _run([_which("sinfo"), "-h", "-o", "%T"], env=env).stdout.strip()
            if state == "idle":
                break
            time.sleep(0.5)
        assert state == "idle", f"the node did not become idle (sinfo: {state!r})\n{_logs(d)}"
        yield {"env": env, "dir": d}
    finally:
        for pidfile in reversed(started):
            _stop(pidfile)


def _logs(d):
    out = []
    for f in sorted((Path(d) / "log").glob("*.log")):
        out.append(f"--- {f.name}\n" + f.read_text()[-3000:])
    return "\n".join(out)


def _job_env(cluster, **extra):
    env = dict(cluster["env"], PYTHON=sys.executable,
               COURSE_DIR=str(REPO), TRAIN_TIMEOUT="600", PREFLIGHT="1")
    env.update(extra)
    return env


def submit(cluster, script, sbatch_args, args, env, timeout=900):
    """Submit, wait until the job ends, return (fields of `scontrol show job`, its output)."""
    out_file = cluster["dir"] / f"{Path(script).stem}-%j.out"
    r = _run([_which("sbatch"), "--parsable", f"--output={out_file}", *sbatch_args, str(script), *args],
             env=env, cwd=str(REPO))
    assert r.returncode == 0, f"sbatch failed: {r.stderr}"
    job = r.stdout.strip().split(";")[0]
    deadline = time.monotonic() + timeout
    fields = {}
    while time.monotonic() < deadline:
        text = _run([_which("scontrol"), "show", "job", job], env=env).stdout
        fields = dict(re.findall(r"(\w+)=(\S*)", text))
        if fields.get("JobState") not in (None, "PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
            break
        time.sleep(1)
    else:
        _run([_which("scancel"), job], env=env)
        pytest.fail(f"job {job} still {fields.get('JobState')} after {timeout} s")
    path = Path(str(out_file).replace("%j", job))
    return fields, path.read_text() if path.exists() else f"(no output file {path})"


def _finished_ok(fields, output):
    assert fields["JobState"] == "COMPLETED" and fields["ExitCode"] == "0:0", \
        f"JobState={fields.get('JobState')} ExitCode={fields.get('ExitCode')}\n{output[-4000:]}"


def _smoke_lines(output, check):
    """{rank: its smoke report} of the ranks whose ``check`` passed on 2 ranks."""
    return {r["rank"]: r for r in worker_report.parse(output, kind="smoke")
            if r["check"] == check and r["size"] == 2 and r["ok"] is True}


def _result(path):
    with open(path) as f:
        return json.load(f)


def test_ddp_job_two_cpu_workers(cluster, tmp_path):
    result = tmp_path / "ddp.json"
    fields, output = submit(cluster, SLURM_DIR / "ddp.sbatch",
                            ["--nodes=1", "--ntasks-per-node=1", f"--cpus-per-task={os.cpu_count()}",
                             "--gpus-per-node=0", "--time=00:15:00"],
                            ["--cpu", *TRAIN_FLAGS, "--json", str(result)], _job_env(cluster, PROCS_PER_NODE="2"))
    _finished_ok(fields, output)
    # preflight: both ranks took one DDP step and hold the same weights
    assert sorted(_smoke_lines(output, "ddp-step")) == [0, 1], output[-4000:]
    r = _result(result)
    assert r["launcher"] == "ddp" and r["backend"] == "gloo" and r["workers"] == 2
    # averaged gradients: both ranks trained on different shards and ended with equal weights
    assert len(r["rank_checksums"]) == 2 and r["ranks_agree"] is True
    assert r["steps"] == 6 and r["timed_steps"] == 4
    assert "ranks agree on weights: yes" in output and "ddlab-slurm: done" in output


def test_horovod_job_two_tasks(cluster, tmp_path):
    result = tmp_path / "hvd.json"
    fields, output = submit(cluster, SLURM_DIR / "horovod.sbatch",
                            ["--nodes=1", "--ntasks-per-node=2", "--cpus-per-task=1", "--gpus-per-node=0",
                             "--time=00:15:00"],
                            ["--cpu", *TRAIN_FLAGS, "--json", str(result)], _job_env(cluster))
    _finished_ok(fields, output)
    # preflight: every rank contributed rank+1 and read back the sum 3
    lines = _smoke_lines(output, "hvd-torch")
    assert sorted(lines) == [0, 1] and all(r["value"] == 3.0 for r in lines.values()), output[-4000:]
    r = _result(result)
    assert r["launcher"] == "horovod" and r["backend"] == "horovod-gloo" and r["workers"] == 2
    assert len(r["rank_checksums"]) == 2 and r["ranks_agree"] is True
    assert "ranks agree on weights: yes" in output and "ddlab-slurm: done" in output


def test_a_job_outside_the_course_folder_fails_with_its_reason(cluster, tmp_path):
    fields, output = submit(cluster, SLURM_DIR / "ddp.sbatch",
                            ["--nodes=1", "--ntasks-per-node=1", "--cpus-per-task=1", "--gpus-per-node=0"],
                            ["--cpu"], _job_env(cluster, COURSE_DIR=str(tmp_path)), timeout=120)
    assert fields["JobState"] == "FAILED" and fields["ExitCode"] == "2:0", fields
    assert f"{tmp_path} is not the course folder: submit from the course folder or set COURSE_DIR" in output
