"""ddlab.system.provenance: the commit a result names says whether the code had changes beyond it."""
import shutil
import subprocess

import pytest

from ddlab.system import provenance
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
    assert prov["machine"] == "test box" and prov["command"] == "ddlab p2p --json"
    assert prov["date"][:2] == "20" and "T" in prov["date"]
    # the caption names the machine from its hardware fields, not from the free-text label
    assert provenance.label(prov).startswith(machine_label(prov) + ", 20")
    assert "test box" not in provenance.label(prov)
