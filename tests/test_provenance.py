"""ddlab.system.provenance: the commit a result names says whether the code had changes beyond it."""
import shutil
import subprocess

import pytest

from ddlab.system import provenance


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
