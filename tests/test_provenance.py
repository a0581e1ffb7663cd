"""ddlab.system.provenance: the commit a result names says whether the code had changes beyond it."""
import json
import os
import re
import shutil
import subprocess
import tempfile

import pytest

from ddlab.system import hardware, provenance
from ddlab.system.machine_name import machine_label


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_commit_marks_uncommitted_changes(tmp_path, monkeypatch):
    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)
    monkeypatch.setattr(provenance, "REPO_ROOT", str(tmp_path))
    assert provenance._git_commit() is None                      # not a checkout
    git("init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("add", "code.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    head = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert provenance._git_commit() == head
    (tmp_path / "notes.txt").write_text("untracked files do not count\n")
    assert provenance._git_commit() == head
    (tmp_path / "code.py").write_text("x = 2\n")
    assert provenance._git_commit() == head + "+changes"


def test_run_provenance_is_collect_without_the_slow_checks(monkeypatch):
    seen = {}
    monkeypatch.setattr(provenance, "collect", lambda command=None, machine=None, inventory=None:
                        seen.update(command=command, inventory=inventory) or {"command": command})
    assert provenance.run_provenance("python x.py", torch_facts=False) == {"command": "python x.py"}
    assert seen["inventory"] is not None and seen["inventory"].horovod_build == {}


def test_provenance_carries_what_a_recorded_result_needs():
    prov = provenance.collect(["ddlab", "p2p", "--json"], machine="test box")
    for key in ("machine", "gpu_model", "gpu_count", "driver", "cuda_runtime", "nccl", "torch", "tensorflow",
                "horovod", "command", "date"):
        assert key in prov, key
    assert prov["command"] == "ddlab p2p --json"
    assert prov["date"][:2] == "20" and "T" in prov["date"]
    # a free-text label gives way to the hardware; the caption names the same hardware
    assert prov["machine"] == machine_label(prov)
    assert provenance.label(prov).startswith(machine_label(prov) + ", 20")
    assert "test box" not in json.dumps(prov)


H200S = hardware.Inventory(gpus=[hardware.GPU(i, "NVIDIA H200") for i in range(2)], hostname="gpu-box-17")


def test_the_machine_is_named_by_its_hardware_never_by_a_host_or_how_it_was_obtained(monkeypatch):
    assert provenance.hardware_label(H200S) == "2x NVIDIA H200"
    assert provenance.hardware_label(H200S, "2x NVIDIA H200, NV18") == "2x NVIDIA H200, NV18"   # links added
    for other in ("cloud instance gpu-2", "gpu-box-17", "2x NVIDIA H2000", "1x NVIDIA H200, NV18", ""):
        assert provenance.hardware_label(H200S, other) == "2x NVIDIA H200", other
    assert provenance.hardware_label(hardware.Inventory(), "my laptop") == "CPU only"
    monkeypatch.setenv("DDLAB_MACHINE", "cloud instance gpu-2")
    prov = provenance.collect("python3 x.py", inventory=H200S)
    assert prov["machine"] == "2x NVIDIA H200"
    assert "hostname" not in prov and "gpu-box-17" not in json.dumps(prov)
    monkeypatch.setenv("DDLAB_MACHINE", "2x NVIDIA H200, NV18")       # what tools/recording/machine_name.sh sets
    assert provenance.collect("python3 x.py", inventory=H200S)["machine"] == "2x NVIDIA H200, NV18"


def test_a_command_reads_the_same_on_every_machine(monkeypatch, tmp_path):
    repo, home, tmp = provenance.REPO_ROOT, os.path.expanduser("~"), tempfile.gettempdir()
    monkeypatch.delenv("OUT", raising=False)
    run = [f"{tmp_path}/venv/bin/python3", "-m", "torch.distributed.run", "--nproc-per-node=2",
           f"{repo}/source_code/train/fmnist_torch.py", "--data-dir", f"{repo}/.cache/fashion-mnist"]
    assert provenance.portable_command(run) == ("python3 -m torch.distributed.run --nproc-per-node=2 "
                                                "source_code/train/fmnist_torch.py --data-dir .cache/fashion-mnist")
    hvd = f"/opt/env/bin/horovodrun -np 2 -H localhost:2 --gloo /opt/env/bin/python3 {repo}/source_code/x.py"
    assert provenance.portable_command(hvd) == "horovodrun -np 2 -H localhost:2 --gloo python3 source_code/x.py"
    # the folder a recording script writes to ($OUT), scratch and home folders, the repository itself
    out = f"{home}/out/work/allreduce"
    cmd = f"ddlab allreduce --log-dir {out} --out {out}/allreduce_2xh200-nv18.json"
    assert provenance.portable_command(cmd, out=out) == "ddlab allreduce --log-dir $OUT --out $OUT/allreduce_2xh200-nv18.json"
    monkeypatch.setenv("OUT", out)
    assert provenance.collect(cmd, inventory=H200S)["command"] == provenance.portable_command(cmd, out=out)
    monkeypatch.delenv("OUT")
    assert provenance.portable_command(f"ddlab p2p --record {tmp}/w/p2p/x.json") == "ddlab p2p --record $TMPDIR/w/p2p/x.json"
    assert provenance.portable_command(f"x --log {home}/logs/a.txt") == "x --log ~/logs/a.txt"
    assert provenance.portable_command(f"PYTHONPATH={repo}/source_code:{tmp}/site make -C {repo}") == \
        "PYTHONPATH=source_code:$TMPDIR/site make -C ."
    # what is the same everywhere is kept: system paths, URLs, relative paths, Python calls
    for same in ("ls /usr/share/datasets/fashion-mnist", "curl https://github.com/NVIDIA/nccl-tests",
                 "tools/build_horovod.sh; python3 -m ddlab doctor", "ddlab.step_profile.measure('cnn', batch=512)"):
        assert provenance.portable_command(same) == same
    assert provenance.portable_command(None) is None


def test_a_training_runs_provenance_gives_its_launch_relative_to_the_checkout(monkeypatch):
    """What a recorded training run shows as its command: the launch that ddlab.training.runs
    passes as DDLAB_COMMAND (torchrun with this interpreter and the script's absolute path)."""
    import shlex
    import sys
    from ddlab.measure import launch
    script = os.path.join(provenance.REPO_ROOT, "source_code", "train", "fmnist_torch.py")
    cmd = shlex.join(launch.command_for("torchrun", 2, [script, "--launcher", "ddp"], python=sys.executable))
    monkeypatch.setattr(hardware, "inventory", lambda **kw: H200S)
    prov = provenance.run_provenance(cmd, torch_facts=False)
    assert prov["command"].endswith("-m torch.distributed.run --standalone --nproc-per-node=2 "
                                    "source_code/train/fmnist_torch.py --launcher ddp")
    assert not re.search(r"(?<![\w.~$/-])/\w", prov["command"]), prov["command"]     # no absolute path
    assert prov["machine"] == "2x NVIDIA H200" and "hostname" not in prov


def test_a_recorded_caption_names_driver_cuda_nccl_and_torch_or_says_not_recorded():
    from ddlab.system import provenance as p
    prov = {"gpu_model": "NVIDIA H200", "gpu_count": 2, "date": "2026-11-22T01:00:00+00:00", "driver": "580.159.04",
            "cuda_runtime": "13.0", "cuda_driver": "13.1", "nccl": "2.28.9", "torch": "2.11.0"}
    assert p.caption(prov) == ("recorded on 2x NVIDIA H200, 2026-11-22 (driver 580.159.04, CUDA 13.0, NCCL 2.28.9, "
                               "torch 2.11.0)")
    older = {k: v for k, v in prov.items() if k not in ("nccl", "cuda_runtime", "driver")}
    assert p.caption(older).endswith("(driver not recorded, CUDA 13.1, NCCL not recorded, torch 2.11.0)")
    assert "driver" not in p.caption(prov, live=True)                  # a live result: this machine, now
    assert p.caption({"cited": True}) == "written from published facts, not measured"
    assert p.caption(prov, with_versions=False) == "recorded on 2x NVIDIA H200, 2026-11-22"   # a plot beside its table


def test_machine_of_names_the_recorded_machine_else_its_gpus():
    from ddlab.system.provenance import machine_of
    assert machine_of({"machine": "2x NVIDIA H200, NV18", "gpu_count": 2, "gpu_model": "NVIDIA H200"}) == \
        "2x NVIDIA H200, NV18"
    assert machine_of({"gpu_count": 2, "gpu_model": "NVIDIA H100 80GB HBM3"}) == "2x NVIDIA H100 80GB HBM3"
    assert machine_of(None) == "?x ?"
