"""Start N worker processes with an environment, a timeout and full clean-up.

Every multi-process run in the course goes through :func:`run`. It

* builds the command for a launcher: ``python`` (one process), ``torchrun`` (DDP),
  ``horovodrun`` (Horovod, Gloo controller by default) or ``mpirun``;
* merges the given environment (``None`` as a value removes a variable) into this
  process's; it adds no NCCL setting of its own (NVLink multicast included: a caller that
  wants it off passes :data:`ddlab.system.nccl.MULTICAST_OFF`, and a value inherited from the shell
  is kept);
* captures stdout and stderr together (optionally echoing them live);
* enforces a timeout, and on timeout or failure kills the whole process tree: the
  process group, every descendant, and any stray process that carries this launch's
  marker variable ``DDLAB_LAUNCH_ID`` (launchers sometimes start workers in their own
  sessions, out of reach of a process-group kill);
* raises one :class:`LaunchError` whose message starts with the rank that failed first, on
  which host and how (a signal by name, an exit status, or its exception's last line), then
  what the other ranks were doing (:mod:`ddlab.measure.rank_failures` reads that out of the
  launcher's output), then the launcher's own lines and the tail of the output; on a timeout
  it also quotes where each worker was stuck (see below).

Diagnosing a hang. The workers the course launches call :func:`install_hang_traceback`
first thing: on SIGTERM they print every thread's Python traceback to stderr, then die as
they would have anyway. :func:`kill_tree` sends SIGTERM to the workers first, one at a
time (their dumps would interleave in the shared pipe otherwise), while their launcher
(torchrun, horovodrun, which hold or relay the output) still runs, and only then to the
launchers. :func:`hang_tracebacks` picks those dumps out of the output for the
:class:`LaunchTimeout` message, so "timed out" comes with the function each rank was in.

Start-up cost. :class:`PhaseClock` is what a worker uses to print and record how long each
phase of its start-up and run took (imports, distributed init, data, ...), counted from
the start of its process, so a slow launch says where its time went.
"""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

from ddlab.base.errors import CourseError
from ddlab.measure import rank_failures
from ddlab.system import nccl
from ddlab.system.software import executable

LAUNCHERS = ("python", "torchrun", "horovodrun", "mpirun")
TAIL_LINES = 40


class LaunchError(CourseError, RuntimeError):
    """A launch failed (in a notebook: its message alone, which names the failed rank first). ``.result`` holds the captured output and return code; ``.failure``
    (a :class:`ddlab.measure.rank_failures.RankFailure`, or None) the rank that failed first."""

    def __init__(self, message: str, result: "LaunchResult" = None,
                 failure: Optional[rank_failures.RankFailure] = None):
        super().__init__(message)
        self.result = result
        self.failure = failure


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


def command_for(launcher: str, nproc: int, argv: Sequence[str], *, python: str = sys.executable,
                controller: str = "gloo", env_keys: Sequence[str] = (), shell_names: bool = False) -> list:
    """The command line that starts ``nproc`` copies of ``python argv...`` under ``launcher``.
    ``shell_names``: the launchers by the names a shell finds on its PATH (``torchrun``,
    ``horovodrun``, ``mpirun``) instead of this interpreter's own copies; the same launch, as a
    learner would type it."""
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
        start = ["torchrun"] if shell_names else [python, "-m", "torch.distributed.run"]
        return [*start, "--standalone", f"--nproc-per-node={nproc}", *argv]
    if launcher == "horovodrun":
        if controller not in ("gloo", "mpi"):
            raise ValueError(f"horovod controller must be gloo or mpi, got {controller!r}")
        return ["horovodrun" if shell_names else executable("horovodrun", python), "-np", str(nproc),
                "-H", f"localhost:{nproc}", f"--{controller}", python, *argv]
    cmd = ["mpirun" if shell_names else executable("mpirun", python), "-np", str(nproc), "--bind-to", "none",
           "--oversubscribe"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    for k in env_keys:
        cmd += ["-x", k]
    return cmd + [python, *argv]


def shell_line(launcher: str, nproc: int, argv: Sequence[str], env: Optional[Mapping[str, Optional[str]]] = None,
               *, python: str = sys.executable, shell_names: bool = False, unset: bool = True) -> str:
    """The launch as one line to copy into a shell: ``env`` first (``K=V``; a variable set to None
    is removed, ``env -u K``, or left out with ``unset=False``), then :func:`command_for`'s command
    (``shell_names``: the launchers as a shell names them), each word quoted for the shell."""
    import shlex
    gone = [k for k, v in (env or {}).items() if v is None] if unset else []
    words = (["env"] + [w for k in gone for w in ("-u", k)] if gone else [])
    words += [f"{k}={v}" for k, v in (env or {}).items() if v is not None]
    return shlex.join(words + command_for(launcher, nproc, argv, python=python, shell_names=shell_names))

def worker_environment(env: Optional[Mapping[str, Optional[str]]] = None) -> dict:
    """The environment the workers of a launch see: this process's, with unbuffered Python
    and ``env`` applied (``None`` removes a variable). Nothing else is added: what NCCL
    reads is what the shell had plus what ``env`` says (:func:`ddlab.system.nccl.recorded_environment`
    picks it out for a run's record)."""
    full = dict(os.environ)
    full["PYTHONUNBUFFERED"] = "1"
    for k, v in (env or {}).items():
        if v is None:
            full.pop(k, None)
        else:
            full[k] = str(v)
    return full


def _merged_env(env: Optional[Mapping[str, Optional[str]]], launch_id: str) -> dict:
    full = worker_environment(env)
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


def _leaves(victims: dict) -> list:
    """The victims that have no child among the victims: the workers, not their launchers."""
    import psutil
    parents = set()
    for p in victims.values():
        try:
            parents.add(p.ppid())
        except psutil.Error:   # gone already
            continue
    return [p for pid, p in sorted(victims.items()) if pid not in parents]


def _signal_each(procs: list, sig: int) -> None:
    """Sends ``sig`` to each of ``procs`` that is still there."""
    import psutil
    for p in procs:
        try:
            p.send_signal(sig)
        except psutil.Error:
            pass


def kill_tree(proc: subprocess.Popen, launch_id: Optional[str] = None, grace_s: float = 3.0,
              hold_launchers: bool = False) -> None:
    """Terminate ``proc``, its process group, its descendants and marked strays; SIGKILL
    whatever is still alive after ``grace_s``.

    SIGTERM goes first to the workers (the processes without children of their own), one
    after the other with up to a second each, and only then to the launchers: a worker
    that called :func:`install_hang_traceback` prints where it was stuck while the launcher
    that relays its output (horovodrun) is still there to pass it on, and the dumps of
    several workers do not interleave line by line. ``hold_launchers`` (for a launcher that
    relays nothing, torchrun): the launchers are stopped (SIGSTOP) while the workers are
    terminated, so that one does not answer the first worker's end with a SIGTERM of its own
    to the next worker while that one is printing (a second SIGTERM cuts the dump short)."""
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
    deadline = time.monotonic() + grace_s
    leaves = _leaves(victims)
    held = [p for p in victims.values() if p not in leaves] if hold_launchers else []
    _signal_each(held, signal.SIGSTOP)
    for p in leaves:
        try:
            p.terminate()
            p.wait(timeout=max(0.05, min(1.0, deadline - time.monotonic())))
        except (psutil.Error, psutil.TimeoutExpired):
            pass
    _signal_each(held, signal.SIGCONT)
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
    # mpirun forwards only the variables it is told to: the overrides and every NCCL setting
    # the workers will see (inherited ones included), so its ranks read what the record says.
    forwarded = [k for k, v in overrides.items() if v is not None]
    forwarded += [k for k in nccl.recorded_environment(full_env) if k not in forwarded]
    cmd = command_for(launcher, nproc, argv, python=python, controller=controller,
                      env_keys=forwarded + ["DDLAB_LAUNCH_ID", "PYTHONUNBUFFERED"])
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
        kill_tree(proc, launch_id, hold_launchers=(launcher == "torchrun"))
        raise
    # Always sweep: a launcher that exited may have left workers behind.
    kill_tree(proc, launch_id, hold_launchers=(launcher == "torchrun"))
    reader.join(timeout=10)
    result = LaunchResult(command=cmd, returncode=proc.returncode, output="".join(lines),
                          duration_s=time.monotonic() - start, env=overrides, timed_out=timed_out,
                          launch_id=launch_id)
    shown = " ".join(cmd[:8]) + (" ..." if len(cmd) > 8 else "")
    if timed_out:
        stuck = hang_tracebacks(result.output)
        where = (f"where the workers were when killed (Python tracebacks they printed on SIGTERM):\n{stuck}\n"
                 if stuck else "")
        # A rank that died before the others hung: it comes first, as for any failure.
        failure = rank_failures.first_failure(result, launcher) if nproc > 1 else None
        failure = failure if failure is not None and failure.cause else None   # not the ranks it stopped
        first = rank_failures.describe(failure) + "\n" if failure else ""
        raise LaunchTimeout(f"{first}{launcher} launch of {nproc} process(es) timed out after {timeout:.0f} s "
                            f"and was killed (all its processes are gone).\ncommand: {shown}\n"
                            f"{where}last output:\n{result.tail()}", result, failure)
    if check and proc.returncode != 0:
        failure = rank_failures.first_failure(result, launcher)
        first = rank_failures.describe(failure) + "\n" if failure else ""
        raise LaunchError(f"{first}{launcher} launch of {nproc} process(es) failed with exit code "
                          f"{_exit_text(proc.returncode)}.\ncommand: {shown}\nlast output:\n{result.tail()}",
                          result, failure)
    return result


def _exit_text(code: Optional[int]) -> str:
    """"1", or "-9 (SIGKILL)" for a launcher killed by a signal."""
    if code is not None and code < 0:
        return f"{code} ({rank_failures.signal_name(code)})"
    return str(code)


# ----------------------------------------------------------------------------- in the workers
def install_hang_traceback(sig: int = signal.SIGTERM) -> None:
    """On ``sig`` (SIGTERM, what :func:`kill_tree` sends first), print the Python traceback
    of every thread of this process to stderr, then let the signal do what it would have
    done anyway (end the process: ``chain=True`` passes it on to the previous handler).

    Every worker program the course launches calls this first thing, so a launch that
    times out says which function each rank was stuck in (a collective a peer never
    joined, a CUDA-graph capture, a rendezvous) instead of only "timed out". faulthandler
    writes from its C signal handler, so this works while the main thread is blocked
    inside C code (an NCCL wait) and holds no lock Python needs."""
    import faulthandler
    faulthandler.register(sig, file=sys.stderr, all_threads=True, chain=True)


# faulthandler's thread headers ("Current thread 0x... (most recent call first):", "Thread
# 0x...", or "Stack (most recent call first):" without threads) and frame lines ('  File
# "x.py", line 3 in f'), after any launcher prefix such as horovodrun's "[1]<stderr>:".
_DUMP_HEADER = re.compile(r"(?:Current thread|Thread) 0x[0-9a-fA-F]+ .*\(most recent call first\):"
                          r"|Stack \(most recent call first\):")
_DUMP_FRAME = re.compile(r'^\s*(?:File ".*", line \d+ in \S+|<no Python frame>|\.\.\.)\s*$')


# Lines of other processes that may land inside a dump: the workers and the launcher share
# one pipe, and faulthandler writes a dump one line at a time, so torchrun's "Sending
# process ... closing signal SIGTERM" can come between a worker's header and its frames.
_INTERLEAVED_LINES = 4


def hang_tracebacks(output: str, max_lines: int = 80) -> str:
    """The tracebacks :func:`install_hang_traceback` made the workers print, picked out of
    a launch's combined ``output`` (launcher prefixes kept); at most ``max_lines`` lines,
    the first ones (each worker's innermost frames come first in a dump). "" if none.
    A dump's frames are still picked when up to a few other lines were interleaved with it."""
    picked: list = []
    gap = None      # lines since the last line of a dump; None outside a dump
    for line in output.splitlines():
        m = _DUMP_HEADER.search(line)
        if m:
            picked.append(line.rstrip())
            gap = 0
            continue
        if gap is not None:
            frame = line[_prefix_end(line):]
            if _DUMP_FRAME.match(frame):
                picked.append(line.rstrip())
                gap = 0
                continue
            gap += 1
            if gap > _INTERLEAVED_LINES:
                gap = None
    if len(picked) > max_lines:
        picked = picked[:max_lines] + [f"... ({len(picked) - max_lines} more lines in the full output)"]
    return "\n".join(picked)


def _prefix_end(line: str) -> int:
    """Where a worker's own text starts after a launcher prefix ("[1]<stderr>:", "[default0]:")."""
    m = re.match(r"^\[[^\]]*\](?:<\w+>)?:", line)
    return m.end() if m else 0


class PhaseClock:
    """How long each phase of a worker's life took, counted from the start of its process.

    ``clock.done("imports")`` closes the phase that ran since the previous call; ``.phases``
    maps phase name -> seconds, in order. Once :meth:`report_to` has given it a print
    function (rank 0's), every phase is printed as ``phase <name>: <s> s (<t> s since process
    start)``, the ones recorded before too. The process start is the kernel's (psutil), so
    interpreter start-up and the imports before the clock existed count; without psutil it
    is when the clock was made."""

    def __init__(self):
        self.start = time.time()
        try:
            import psutil
            self.start = min(self.start, psutil.Process().create_time())
        except Exception:  # psutil missing or /proc unreadable: count from now
            pass
        self.last = self.start
        self.phases: dict = {}
        self._log: list = []      # (name, seconds, seconds since start), printed by report_to
        self._say = None

    def done(self, name: str) -> float:
        now = time.time()
        took = now - self.last
        self.phases[name] = self.phases.get(name, 0.0) + took
        self.last = now
        self._log.append((name, took, now - self.start))
        if self._say is not None:
            self._print(*self._log[-1])
        return took

    def report_to(self, say) -> None:
        """Print the phases so far with ``say`` and every later one as it ends."""
        self._say = say
        for entry in self._log:
            self._print(*entry)

    def _print(self, name, took, at):
        self._say(f"phase {name}: {took:.2f} s ({at:.2f} s since process start)", flush=True)

    def since_start(self) -> float:
        return time.time() - self.start

    def to_dict(self) -> dict:
        return {k: round(v, 3) for k, v in self.phases.items()}
