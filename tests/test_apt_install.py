"""tools/apt_install.sh, the one installer of system packages (Chromium for the browser test, Slurm for
the Slurm test, which CI runs side by side), against stand-ins for apt-get, dpkg-query and sudo on PATH
that log what they are asked; the lock is the real flock(1) on a file in tmp_path."""
import os
import stat
import subprocess
import time

import pytest

from ddlab.base.paths import REPO_ROOT

SCRIPT = os.path.join(REPO_ROOT, "tools", "apt_install.sh")

APT_GET = r"""#!/usr/bin/env bash
log="$STUBS/log"
case "$*" in
  *" update "*|*" update")
    echo "update" >> "$log"
    if [ -s "$STUBS/lists_locked" ]; then
      n=$(cat "$STUBS/lists_locked"); echo $((n - 1)) > "$STUBS/lists_locked"
      [ "$n" -gt 0 ] && { echo "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 1 (apt-get)" >&2; exit 100; }
    fi
    [ -e "$STUBS/offline" ] && { echo "E: Failed to fetch the package lists" >&2; exit 100; }
    exit 0;;
  *" install "*)
    pkgs=$(printf '%s\n' "$@" | grep -v -- '^-' | grep -v -e '^install$' -e '^DPkg::' | tr '\n' ' ')
    echo "install-start $pkgs" >> "$log"
    sleep 0.5
    printf '%s\n' $pkgs >> "$STUBS/installed"
    echo "install-end $pkgs" >> "$log"
    exit 0;;
esac
echo "unexpected apt-get $*" >> "$log"; exit 3
"""

DPKG_QUERY = r"""#!/usr/bin/env bash
pkg="${!#}"
grep -qx "$pkg" "$STUBS/installed" 2>/dev/null && { echo "install ok installed"; exit 0; }
exit 1
"""

SUDO = """#!/usr/bin/env bash
exec "$@"
"""


@pytest.fixture
def stubs(tmp_path):
    """A folder of stand-ins first on PATH; ``env`` runs the script against them with its lock in tmp_path."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("apt-get", APT_GET), ("dpkg-query", DPKG_QUERY), ("sudo", SUDO)):
        path = bin_dir / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "installed").write_text("")
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", STUBS=str(tmp_path),
               APT_LOCK_FILE=str(tmp_path / "apt.lock"), APT_LOCK_WAIT="60")
    env.pop("DDLAB_APT_LOCKED", None)
    return tmp_path, env


def _log(tmp_path):
    path = tmp_path / "log"
    return path.read_text().split("\n")[:-1] if path.exists() else []


def _run(env, *packages):
    return subprocess.run(["bash", SCRIPT, *packages], env=env, capture_output=True, text=True, timeout=60)


def test_two_installs_side_by_side_take_turns(stubs):
    tmp_path, env = stubs
    procs = [subprocess.Popen(["bash", SCRIPT, pkg], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for pkg in ("chromium", "slurmd")]
    try:
        outs = [p.communicate(timeout=60) for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [0, 0], outs
    log = _log(tmp_path)
    # each install's update and install run inside its own turn: never interleaved with the other's
    kinds = [line.split()[0] for line in log]
    assert kinds == ["update", "install-start", "install-end"] * 2, log
    assert {log[1].split()[1], log[4].split()[1]} == {"chromium", "slurmd"}
    assert set((tmp_path / "installed").read_text().split()) == {"chromium", "slurmd"}


def test_only_the_missing_packages_are_installed(stubs):
    tmp_path, env = stubs
    (tmp_path / "installed").write_text("munge\n")
    r = _run(env, "munge", "slurmd")
    assert r.returncode == 0, r.stderr
    assert _log(tmp_path) == ["update", "install-start slurmd ", "install-end slurmd "]
    r = _run(env, "munge", "slurmd")       # all there now: apt is not asked at all
    assert r.returncode == 0, r.stderr
    assert len(_log(tmp_path)) == 3


def test_an_update_waits_while_another_apt_holds_the_lists(stubs):
    tmp_path, env = stubs
    (tmp_path / "lists_locked").write_text("1")
    start = time.monotonic()
    r = _run(env, "chromium")
    assert r.returncode == 0, r.stderr
    assert [line.split()[0] for line in _log(tmp_path)] == ["update", "update", "install-start", "install-end"]
    assert time.monotonic() - start >= 4     # it waited before asking again


def test_a_failed_update_stops_with_apts_message_and_installs_nothing(stubs):
    tmp_path, env = stubs
    (tmp_path / "offline").write_text("")
    r = _run(env, "chromium")
    assert r.returncode == 1
    assert "Failed to fetch the package lists" in r.stderr and "apt_install: apt-get update failed" in r.stderr
    assert _log(tmp_path) == ["update"]


@pytest.mark.parametrize("args, wait, message", [((), "60", "usage:"),
                                                  (("chromium",), "soon", "APT_LOCK_WAIT must be a whole number")])
def test_bad_input_gets_one_message_and_runs_no_apt(stubs, args, wait, message):
    tmp_path, env = stubs
    r = _run(dict(env, APT_LOCK_WAIT=wait), *args)
    assert r.returncode == 2 and message in r.stderr
    assert _log(tmp_path) == []
