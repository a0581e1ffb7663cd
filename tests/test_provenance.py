"""ddlab.provenance: the commit a result names says whether the code had changes beyond it."""
import shutil
import subprocess

import pytest

from ddlab import provenance


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


def test_machine_label_names_the_hardware_from_the_hardware():
    from ddlab import hardware, topology
    two = hardware.Inventory(gpus=[hardware.GPU(0, "NVIDIA H200"), hardware.GPU(1, "NVIDIA H200")])
    assert provenance.machine_label(two, topology.recorded("h200x2")) == "2x NVIDIA H200, NV18"
    one = hardware.Inventory(gpus=[hardware.GPU(0, "NVIDIA L4")])
    assert provenance.machine_label(one) == "1x NVIDIA L4"
    assert provenance.machine_label(hardware.Inventory()) == "CPU only"
    four = hardware.Inventory(gpus=[hardware.GPU(i, "Tesla V100-SXM2-16GB") for i in range(8)])
    label = provenance.machine_label(four, topology.recorded("dgx1-v100"))
    assert label.startswith("8x Tesla V100-SXM2-16GB, NV") and "/" in label    # several kinds of link


def test_label_shows_the_hardware_never_how_a_machine_was_obtained():
    prov = {"machine": "2x NVIDIA H200, NV18", "gpu_model": "NVIDIA H200", "gpu_count": 2, "date": "2026-11-22T01:00"}
    assert provenance.label(prov) == "2x NVIDIA H200, NV18, 2026-11-22"
    assert provenance.caption(prov) == "recorded on 2x NVIDIA H200, NV18, 2026-11-22"
    older = dict(prov, machine="lent nvidia-h200-x2")
    assert provenance.label(older) == "2x NVIDIA H200, 2026-11-22"
    assert provenance.label(dict(prov, machine="box")) == "box (2x NVIDIA H200), 2026-11-22"


def test_run_provenance_is_collect_without_the_slow_checks(monkeypatch):
    seen = {}
    monkeypatch.setattr(provenance, "collect", lambda command=None, machine=None, inventory=None:
                        seen.update(command=command, inventory=inventory) or {"command": command})
    assert provenance.run_provenance("python x.py", torch_facts=False) == {"command": "python x.py"}
    assert seen["inventory"] is not None and seen["inventory"].horovod_build == {}
