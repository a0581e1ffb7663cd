"""Start N worker processes with an environment, a timeout and full clean-up.

Every multi-process run in the course goes through :func:`run`. It

* builds the command for a launcher: ``python`` (one process), ``torchrun`` (DDP),
  ``horovodrun`` (Horovod, Gloo controller by default) or ``mpirun``;
* merges the given environment (``None`` as a value removes a variable), always keeping
  NVLink multicast off (``NCCL_NVLS_ENABLE=0``);
* captures stdout and stderr together (optionally echoing them live);
* enforces a timeout, and on timeout or failure kills the whole process tree: the
  process group, every descendant, and any stray process that carries this launch's
  marker variable ``DDLAB_LAUNCH_ID`` (launchers sometimes start workers in their own
  sessions, out of reach of a process-group kill);
* raises one :class:`LaunchError` whose message quotes the tail of the output.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

LAUNCHERS = ("python", "torchrun", "horovodrun", "mpirun")
TAIL_LINES = 40


class LaunchError(RuntimeError):
    """A launch failed. ``.result`` holds the captured output and return code."""

    def __init__(self, message: str, result: "LaunchResult" = None):
        super().__init__(message)
        self.result = result


class LaunchTimeout(LaunchError):
    """A launch ran past its timeout (a hung collective, a dead peer...)."""


@dataclass
class LaunchResult:
    command: list
    returncode: Optional[int]
    output: str
    duration_s: float
    env: dict = field(default_factory=dict)
    timed_out: bool = False
    launch_id: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def tail(self, n: int = TAIL_LINES) -> str:
        return "\n".join(self.output.splitlines()[-n:])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _bin(name: str, python: str) -> str:
    """A console script next to ``python`` (the venv's), else on PATH."""
    here = os.path.join(os.path.dirname(python), name)
    return here if os.path.exists(here) else (shutil.which(name) or name)


def command_for(launcher: str, nproc: int, argv: Sequence[str], *, python: str = sys.executable,
                controller: str = "gloo", env_keys: Sequence[str] = ()) -> list:
    """The command line that starts ``nproc`` copies of ``python argv...`` under ``launcher``."""
    argv = [str(a) for a in argv]
    if launcher not in LAUNCHERS:
        raise ValueError(f"unknown launcher {launcher!r}; choose one of {', '.join(LAUNCHERS)}")
    if nproc < 1:
        raise ValueError(f"nproc must be at least 1, got {nproc}")
    if launcher == "python":
        if nproc != 1:
            raise ValueError("launcher 'python' starts one process; use torchrun, horovodrun or mpirun for more")
        return [python, *argv]
    if launcher == "torchrun":
        # --standalone: a local rendezvous on a free port, so parallel courses do not collide.
        return [python, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", *argv]
    if launcher == "horovodrun":
        if controller not in ("gloo", "mpi"):
            raise ValueError(f"horovod controller must be gloo or mpi, got {controller!r}")
        return [_bin("horovodrun", python), "-np", str(nproc), "-H", f"localhost:{nproc}",
                f"--{controller}", python, *argv]
    cmd = [_bin("mpirun", python), "-np", str(nproc), "--bind-to", "none", "--oversubscribe"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    for k in env_keys:
        cmd += ["-x", k]
    return cmd + [python, *argv]


def _merged_env(env: Optional[Mapping[str, Optional[str]]], launch_id: str) -> dict:
    full = dict(os.environ)
    full.setdefault("NCCL_NVLS_ENABLE", "0")
    full.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    full["PYTHONUNBUFFERED"] = "1"
    for k, v in (env or {}).items():
        if v is None:
            full.pop(k, None)
        else:
            full[k] = str(v)
    full["NCCL_NVLS_ENABLE"] = full.get("NCCL_NVLS_ENABLE") or "0"
    full["DDLAB_LAUNCH_ID"] = launch_id
    return full


def _marked_processes(launch_id: str) -> list:
    import psutil
    found = []
    me = os.getpid()
    for p in psutil.process_iter(["pid"]):
        if p.pid == me:
            continue
        try:
            if p.environ().get("DDLAB_LAUNCH_ID") == launch_id:
                found.append(p)
        except (psutil.Error, OSError):
            continue
    return found


def kill_tree(proc: subprocess.Popen, launch_id: Optional[str] = None, grace_s: float = 3.0) -> None:
    """Terminate ``proc``, its process group, its descendants and marked strays; SIGKILL
    whatever is still alive after ``grace_s``."""
    import psutil
    victims = {}
    try:
        root = psutil.Process(proc.pid)
        for p in [root, *root.children(recursive=True)]:
            victims[p.pid] = p
    except psutil.Error:
        pass
    if launch_id:
        for p in _marked_processes(launch_id):
            victims[p.pid] = p
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass
    for p in victims.values():
        try:
            p.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(list(victims.values()), timeout=grace_s)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=grace_s)
    # A second sweep: a launcher may have started workers while we were killing it.
    if launch_id:
        late = _marked_processes(launch_id)
        for p in late:
            try:
                p.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(late, timeout=grace_s)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass


def run(argv: Sequence[str], *, launcher: str = "python", nproc: int = 1,
        env: Optional[Mapping[str, Optional[str]]] = None, timeout: float = 600.0,
        cwd: Optional[str] = None, check: bool = True, echo: bool = False,
        python: str = sys.executable, controller: str = "gloo") -> LaunchResult:
    """Run ``python argv...`` as ``nproc`` workers under ``launcher``.

    Returns a :class:`LaunchResult`. With ``check`` (the default) a non-zero exit raises
    :class:`LaunchError`; a timeout always raises :class:`LaunchTimeout`. In every case no
    process of the launch is left running afterwards.
    """
    launch_id = uuid.uuid4().hex
    full_env = _merged_env(env, launch_id)
    overrides = {k: v for k, v in (env or {}).items()}
    cmd = command_for(launcher, nproc, argv, python=python, controller=controller,
                      env_keys=[k for k, v in overrides.items() if v is not None] + ["NCCL_NVLS_ENABLE", "DDLAB_LAUNCH_ID", "PYTHONUNBUFFERED"])
    lines: list = []
    start = time.monotonic()
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=full_env, cwd=cwd, start_new_session=True)
    except OSError as exc:
        raise LaunchError(f"could not start {cmd[0]!r}: {exc}") from None

    def pump():
        for raw in iter(proc.stdout.readline, b""):
            line = raw.decode("utf-8", errors="replace")
            lines.append(line)
            if echo:
                sys.stdout.write(line)
                sys.stdout.flush()
        proc.stdout.close()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
    except BaseException:  # KeyboardInterrupt in a notebook: still clean up
        kill_tree(proc, launch_id)
        raise
    # Always sweep: a launcher that exited may have left workers behind.
    kill_tree(proc, launch_id)
    reader.join(timeout=10)
    result = LaunchResult(command=cmd, returncode=proc.returncode, output="".join(lines),
                          duration_s=time.monotonic() - start, env=overrides, timed_out=timed_out,
                          launch_id=launch_id)
    shown = " ".join(cmd[:8]) + (" ..." if len(cmd) > 8 else "")
    if timed_out:
        raise LaunchTimeout(f"{launcher} launch of {nproc} process(es) timed out after {timeout:.0f} s "
                            f"and was killed (all its processes are gone).\ncommand: {shown}\n"
                            f"last output:\n{result.tail()}", result)
    if check and proc.returncode != 0:
        raise LaunchError(f"{launcher} launch of {nproc} process(es) failed with exit code "
                          f"{proc.returncode}.\ncommand: {shown}\nlast output:\n{result.tail()}", result)
    return result
