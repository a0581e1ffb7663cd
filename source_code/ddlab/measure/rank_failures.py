"""Which rank of a failed launch died first, on which host and how, and what the others were doing.

A multi-process launch that fails ends with its launcher's own lines (torchrun's ChildFailedError
summary, horovodrun's RuntimeError, mpirun's banners), and the first error in its output is often
a survivor's: the rank whose peer died reports "Connection closed by peer" or "Horovod has been
shut down" from the collective it was waiting in. Even the launchers' own verdicts can name the
survivor: torchrun's "Root Cause (first observed failure)" and horovodrun's "The first process to
do so" name the first process *they saw exit*, which may be the one that failed because its peer
had left.

:func:`first_failure` reads a finished launch (its combined output, exit status and command) and
returns a :class:`RankFailure`: the rank that failed of its own accord, its host, how (a signal by
name, an exit status, or the last line of its Python exception) and one line per other rank (the
survivors' state). :func:`describe` writes it as the first lines of the error a learner sees; the
first line is whole and self-contained, so a recorded failure row can keep it alone.

What is read, per launcher (the texts are in tests/fixtures/launch, captured from real runs):

* torchrun: first its own record of a worker's exception, the error file. A worker whose entry
  point is wrapped in ``torch.distributed.elastic.multiprocessing.errors.record`` (the course's
  training script and collective worker are) writes its exception, traceback and time to the file
  torchrun names in ``TORCHELASTIC_ERROR_FILE``; torchrun's "Failures:" and "Root Cause (first
  observed failure):" blocks name that file (``error_file``) and print its traceback. Where the
  file can be read its exception is the rank's error and its time orders the ranks' failures
  (:func:`read_error_file`). What error files do not cover is parsed from the text, as for the
  other launchers: the blocks' rank, host, exitcode and traceback (a worker killed by a signal
  writes no error file), torchrun's "failed (exitcode: -9) local_rank: 1 (pid: ...)" lines, and
  the workers' own tracebacks, which PyTorch prefixes with ``[rank1]:`` once the process group
  exists (``[default1]:`` with ``--tee``);
* horovodrun: the ``[1]<stderr>:`` prefixes, the shell's "Killed"/"Terminated" lines, "Process 1
  exit with status code 137." (a shell's status: 128 + the signal) and its "first process" summary;
* mpirun: "mpirun noticed that process rank 1 with PID ... on node ... exited on signal 9
  (Killed)." and "Process name: [[j,1],1] / Exit code: 1"; without ``--tag-output`` its workers'
  tracebacks carry no rank, and are given to the rank mpirun names.

Horovod and mpirun have no error files: for them everything comes from the text.

Negative exit statuses (a process killed by a signal, as Python and torchrun report it) are named
with the :mod:`signal` module (SIGKILL, SIGSEGV, SIGABRT...).
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
from dataclasses import dataclass, field
from typing import Optional, Sequence

# What a rank whose peer died reports: its own failure is a consequence, not a cause.
PEER_LOST = re.compile(
    r"Connection closed by peer|Connection reset by peer|Broken pipe|remote worker crashing"
    r"|Horovod has been shut down|HorovodInternalError|NCCL communicator was aborted|ncclRemoteError"
    r"|remote process exited|peer process (?:has )?(?:exited|died)|Socket Timeout|recvValue|Connection refused"
    r"|DistNetworkError|failed to recv, got 0 bytes|Timed out waiting .* for client|Timed out waiting \d+ms"
    r"|Some NCCL operations have failed or timed out|Watchdog caught collective operation timeout", re.I)

# The calls a rank waits in for its peers; the outermost one found in a traceback names where it was.
COLLECTIVES = ("init_process_group", "rendezvous", "barrier", "monitored_barrier", "all_reduce", "allreduce",
               "allreduce_", "grouped_allreduce", "broadcast", "broadcast_", "broadcast_parameters",
               "broadcast_object", "broadcast_optimizer_state", "all_gather", "allgather", "allgather_object",
               "all_gather_object", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
               "all_to_all", "alltoall", "all_to_all_single", "reduce", "gather", "scatter", "send", "recv",
               "_sync_module_states", "_verify_param_shape_across_processes", "join")

# What a launcher prints about itself (its own traceback's last line): not a worker's error.
_LAUNCHER_ERRORS = re.compile(r"ChildFailedError|Horovod detected that one or more processes exited"
                              r"|^RuntimeError: Horovod detected")
_LAUNCHER_FRAMES = re.compile(r"torch/distributed/run\.py|torch/distributed/launcher/|horovod/runner/")

# Launcher prefixes on a worker's line: torchrun's "[rank1]:" (or "[default1]:" with --tee),
# horovodrun's "[1]<stderr>:", mpirun --tag-output's "[1,1]<stderr>:".
_PREFIXES = (re.compile(r"^\[rank(\d+)\]:\s?"), re.compile(r"^\[default(\d+)\]:\s?"),
             re.compile(r"^\[(\d+)\]<(?:stdout|stderr)>:"), re.compile(r"^\[\d+,(\d+)\]<(?:stdout|stderr)>:"))

_SHELL_SIGNALS = {"Killed": signal.SIGKILL, "Terminated": signal.SIGTERM, "Segmentation fault": signal.SIGSEGV,
                  "Aborted": signal.SIGABRT, "Bus error": signal.SIGBUS}

# One clause per signal a course run meets, after its name.
SIGNAL_HINTS = {
    signal.SIGKILL: "it cannot be caught: the kernel's out-of-memory killer sends it when memory runs out, "
                    "as does kill -9",
    signal.SIGSEGV: "a segmentation fault, a crash in native code such as a CUDA, NCCL or extension library",
    signal.SIGABRT: "an abort, often a C++ exception nothing caught: 'terminate called after throwing ...'",
    signal.SIGBUS: "a bus error, often shared memory (/dev/shm) too small",
    signal.SIGFPE: "an arithmetic error in native code",
    signal.SIGILL: "an illegal instruction, a binary built for another CPU",
    signal.SIGTERM: "asked to stop",
    signal.SIGINT: "interrupted",
}


def signal_name(number: int) -> str:
    """"SIGKILL" for 9 (or -9); "signal N" for a number the :mod:`signal` module does not name."""
    try:
        return signal.Signals(abs(int(number))).name
    except ValueError:
        return f"signal {abs(int(number))}"


def status_signal(status: Optional[int], shell: bool = False) -> Optional[int]:
    """The signal that ended a process with exit ``status``: a negative status (Python's and
    torchrun's way), or with ``shell`` a status of 128 + N (a shell's way: horovodrun's)."""
    if status is None:
        return None
    if status < 0:
        return -status
    if shell and 128 < status <= 128 + 64:
        return status - 128
    return None


@dataclass
class RankState:
    """What a launch's output says of one rank."""
    rank: int
    host: str = ""
    exitcode: Optional[int] = None      # as reported; see ``signal`` for one that was a signal
    signal: Optional[int] = None
    error: str = ""                     # the last line of its (last) Python exception, or a fatal error line
    where: str = ""                     # the collective its traceback was in
    waiting: str = ""                   # the collective a hang dump (SIGTERM) showed it in
    pid: Optional[int] = None
    seen_at: int = 1 << 30              # the first output line that reported its failure
    failed_at: Optional[int] = None     # when it raised (Unix seconds), from torchrun's error file

    @property
    def failed(self) -> bool:
        return bool(self.error) or self.signal is not None or (self.exitcode not in (None, 0))

    @property
    def consequence(self) -> bool:
        """Failed because a peer was gone (its error says so) or stopped by its launcher (SIGTERM)."""
        if self.error:
            return bool(PEER_LOST.search(self.error))
        return self.signal in (signal.SIGTERM, signal.SIGINT)

    def how(self) -> str:
        """"killed by SIGKILL (...)", "raised ValueError: ...", "exit status 3"."""
        if self.error and self.signal is not None and _is_exception(self.error):
            # Its own Python exception first: the signal came while it was exiting from it (the
            # launcher's SIGTERM, or an abort at exit with its process group still open).
            stopped = self.signal in (signal.SIGTERM, signal.SIGINT)
            return f"raised {self.error} (" + (f"then was stopped by the launcher, {signal_name(self.signal)})"
                                               if stopped else f"its process then ended with {signal_name(self.signal)})")
        if self.signal is not None:
            name = signal_name(self.signal)
            hint = SIGNAL_HINTS.get(self.signal)
            text = f"killed by {name} (signal {self.signal}" + (f"; {hint})" if hint else ")")
            if self.error and not self.error.startswith("Fatal Python error"):
                text += f"; its last error: {self.error}"
            return text
        if self.error:
            return f"raised {self.error}" if _is_exception(self.error) else self.error
        if self.exitcode not in (None, 0):
            return f"exit status {self.exitcode}"
        return "failed"


@dataclass
class RankFailure:
    """The rank that failed first, and one line per other rank."""
    rank: Optional[int]                 # None: the output does not say which rank
    host: str
    how: str
    signal: Optional[str] = None        # "SIGKILL"
    exitcode: Optional[int] = None
    error: str = ""
    launcher: str = ""
    survivors: list = field(default_factory=list)
    single: bool = False                # one process, no ranks (launcher "python")
    cause: bool = True                  # False: every failed rank failed because of another (or was stopped)

    def line(self) -> str:
        """The first line: who, where, how; whole, so it can stand alone in a recorded row."""
        who = ("the process" if self.single else
               f"rank {self.rank}" if self.rank is not None else "a worker (the output does not say which rank)")
        verb = "failed" if self.single else "died first"
        return f"{who} on host {self.host} {verb}: {self.how}"

    def to_dict(self) -> dict:
        return {"rank": self.rank, "host": self.host, "how": self.how, "signal": self.signal,
                "exitcode": self.exitcode, "error": self.error, "launcher": self.launcher,
                "survivors": list(self.survivors)}


# ----------------------------------------------------------------------------- reading an output
def launcher_of(command: Sequence[str]) -> str:
    """"torchrun", "horovodrun", "mpirun" or "python", from a launch's command line."""
    words = [os.path.basename(str(c)) for c in command or ()]
    if "torch.distributed.run" in words or "torchrun" in words[:1]:
        return "torchrun"
    if words and words[0] == "horovodrun":
        return "horovodrun"
    if words and words[0] in ("mpirun", "mpiexec", "orterun", "prterun"):
        return "mpirun"
    return "python"


def world_size(command: Sequence[str]) -> Optional[int]:
    """The number of processes a launch's command asks for (None: not said)."""
    args = [str(c) for c in command or ()]
    for i, a in enumerate(args):
        m = re.match(r"--nproc[-_]per[-_]node=(\d+)$", a)
        if m:
            return int(m.group(1))
        if a in ("--nproc-per-node", "--nproc_per_node", "-np", "-n") and i + 1 < len(args) and args[i + 1].isdigit():
            return int(args[i + 1])
    return None


def _split_prefix(line: str):
    for p in _PREFIXES:
        m = p.match(line)
        if m:
            return int(m.group(1)), line[m.end():]
    return None, line


def _is_exception(text: str) -> bool:
    return bool(re.match(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Failure)\b", text))


_LIBRARY = re.compile(r"site-packages|dist-packages|/torch/|/horovod/|/lib/python\d")


def _outermost_collective(frames: list) -> str:
    """The outermost known collective among traceback frames ((file, function), outermost
    first), a library's own before a function of the script that has the same name."""
    for library_only in (True, False):
        for path, fn in frames:
            if fn in COLLECTIVES and (_LIBRARY.search(path) or not library_only):
                return fn.rstrip("_")
    return ""


@dataclass
class _Stream:
    in_tb: bool = False
    frames: list = field(default_factory=list)
    errors: list = field(default_factory=list)         # (line index, error, collective, launcher's own)
    in_dump: bool = False
    dump: list = field(default_factory=list)
    dumps: list = field(default_factory=list)
    launcher_tb: bool = False


def _read_streams(lines: list) -> dict:
    """Each rank's (and the unprefixed stream's, key None) tracebacks, fatal errors and hang dumps."""
    streams: dict = {}
    for i, raw in enumerate(lines):
        rank, text = _split_prefix(raw.rstrip("\n"))
        s = streams.setdefault(rank, _Stream())
        stripped = text.strip()
        if s.in_dump:
            m = re.match(r'^\s*File "(.*)", line \d+ in (\S+)\s*$', text)
            if m:
                s.dump.append((m.group(1), m.group(2)))
                continue
            s.in_dump = False
            s.dumps.append(list(s.dump))
        if re.search(r"(?:Current thread|Thread) 0x[0-9a-fA-F]+ .*\(most recent call first\):"
                     r"|^Stack \(most recent call first\):", text):
            s.in_dump, s.dump = True, []
            continue
        if stripped == "Traceback (most recent call last):":
            s.in_tb, s.frames = True, []
            s.launcher_tb = False
            continue
        if s.in_tb:
            if not text.strip() or text[:1] in (" ", "\t"):
                m = re.match(r'^\s*File "([^"]*)", line \d+, in (\S+)', text)
                if m:
                    s.frames.append((m.group(1), m.group(2)))
                    if _LAUNCHER_FRAMES.search(m.group(1)):
                        s.launcher_tb = True
                continue
            s.in_tb = False
            own = s.launcher_tb or bool(_LAUNCHER_ERRORS.search(stripped))
            s.errors.append((i, stripped, _outermost_collective(s.frames), own))
            continue
        if stripped.startswith("Fatal Python error:") or stripped.startswith("terminate called"):
            s.errors.append((i, stripped, "", False))
    for s in streams.values():
        if s.in_dump:
            s.dumps.append(list(s.dump))
    return streams


def read_error_file(path: str) -> Optional[tuple]:
    """(the exception's first line, when it was raised in Unix seconds or None) from a torchrun
    error file (what ``torch.distributed.elastic.multiprocessing.errors.record`` writes:
    ``{"message": {"message": "ValueError: ...", "extraInfo": {"timestamp": "..."}}}``); None when
    ``path`` is no such file ("<N/A>" in torchrun's summary, a file gone, another format)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError, TypeError):
        return None
    message = data.get("message") if isinstance(data, dict) else None
    if isinstance(message, str):                 # a non-Python failure's message
        text, when = message, None
    elif isinstance(message, dict) and isinstance(message.get("message"), str):
        text = message["message"]
        stamp = str((message.get("extraInfo") or {}).get("timestamp", ""))
        when = int(stamp) if stamp.isdigit() else None
    else:
        return None
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return (first, when) if first else None


def _torchrun_blocks(lines: list) -> tuple:
    """({rank: RankState}, the root cause's rank or None) from torchrun's summary blocks."""
    states: dict = {}
    root = None
    section = ""
    current: Optional[RankState] = None
    key = ""
    tb: list = []
    error_file = ""

    def close():
        nonlocal current, tb, error_file
        if current is not None:
            err = [t for t in tb if t and not t.startswith("Traceback") and not t.startswith("Signal ")
                   and not t.startswith("To enable traceback")]
            if err:
                current.error = err[-1]
            recorded = read_error_file(error_file) if error_file else None
            if recorded:        # the worker's own record of its exception
                current.error, current.failed_at = recorded
            states[current.rank] = current
            if section == "root":
                nonlocal root
                root = current.rank
        current, tb, error_file = None, [], ""

    for i, raw in enumerate(lines):
        line = raw.rstrip("\n")
        if line.startswith("Failures:"):
            close(); section = "failures"; continue
        if line.startswith("Root Cause (first observed failure):"):
            close(); section = "root"; continue
        if not section:
            continue
        if re.match(r"^[=-]{10,}\s*$", line):
            close()
            if line.startswith("="):
                section = "" if section == "root" else section
            continue
        if re.match(r"^\[\d+\]:\s*$", line):
            close()
            current, key = RankState(rank=-1, seen_at=i), ""
            continue
        if current is None:
            continue
        m = re.match(r"^\s{2}(\w+)\s*:\s?(.*)$", line)
        if m and m.group(1) in ("time", "host", "rank", "exitcode", "error_file", "traceback"):
            key, value = m.group(1), m.group(2).strip()
            if key == "host":
                current.host = value
            elif key == "rank":
                r = re.match(r"(\d+)", value)
                current.rank = int(r.group(1)) if r else -1
            elif key == "exitcode":
                c = re.match(r"(-?\d+)(?:\s*\(pid:\s*(\d+)\))?", value)
                if c:
                    current.exitcode = int(c.group(1))
                    current.signal = status_signal(current.exitcode)
                    current.pid = int(c.group(2)) if c.group(2) else None
            elif key == "traceback":
                tb = [value]
            elif key == "error_file":
                error_file = value
            continue
        if key == "traceback":
            tb.append(line.strip())
    close()
    states.pop(-1, None)
    return states, root


def _merge(states: dict, rank: int, **values) -> RankState:
    s = states.setdefault(rank, RankState(rank=rank))
    for k, v in values.items():
        if v is None or v == "":
            continue
        if k == "seen_at":
            s.seen_at = min(s.seen_at, v)
        elif getattr(s, k) in (None, ""):
            setattr(s, k, v)
    return s


def _launcher_lines(lines: list, states: dict) -> Optional[int]:
    """Fill ``states`` from the per-rank exit lines of torchrun, horovodrun and mpirun; returns
    the rank the launcher names as the first to fail (None when it names none)."""
    first = None
    for i, raw in enumerate(lines):
        line = raw.rstrip("\n")
        m = re.search(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: (\d+)\)", line)
        if m:   # torchrun: the local rank; with --standalone (one node) that is the rank
            code = int(m.group(1))
            _merge(states, int(m.group(2)), exitcode=code, signal=status_signal(code), pid=int(m.group(3)),
                   seen_at=i)
            continue
        m = re.match(r"^Process (\d+) exit with status code (-?\d+)\.", line)
        if m:   # horovodrun, through a shell: 128 + N is signal N
            code = int(m.group(2))
            if code != 0:
                _merge(states, int(m.group(1)), exitcode=code, signal=status_signal(code, shell=True), seen_at=i)
            else:
                _merge(states, int(m.group(1)), exitcode=0)
            continue
        m = re.search(r"noticed that process rank (\d+) with PID (\d+) on node (\S+) exited on signal (\d+)", line)
        if m:   # mpirun
            _merge(states, int(m.group(1)), signal=int(m.group(4)), exitcode=-int(m.group(4)),
                   host=m.group(3).rstrip("."), seen_at=i)
            if first is None:
                first = int(m.group(1))
            continue
        m = re.match(r"^\s*Process name:\s*(?:(\d+)|\[.*,(\d+)\])\s*$", line)
        if m:   # horovodrun's or mpirun's "the first process to do so was"
            rank = int(m.group(1) or m.group(2))
            code = None
            for nxt in lines[i + 1:i + 3]:
                c = re.match(r"^\s*Exit code:\s*(-?\d+)", nxt)
                if c:
                    code = int(c.group(1))
            shell = m.group(1) is not None
            _merge(states, rank, exitcode=code, signal=status_signal(code, shell=shell), seen_at=i)
            first = rank
            continue
        rank, text = _split_prefix(line)
        if rank is not None and text.strip() in _SHELL_SIGNALS:
            sig = int(_SHELL_SIGNALS[text.strip()])
            _merge(states, rank, signal=sig, seen_at=i)
    return first


def _local(host: str) -> str:
    """A host as the launcher named it; this machine's name for localhost or none."""
    if not host or host in ("localhost", "127.0.0.1", "::1", "localhost.localdomain"):
        return socket.gethostname()
    return host


def first_failure(result, launcher: Optional[str] = None) -> Optional[RankFailure]:
    """The rank that failed first in a finished launch (``result`` has ``output``, ``returncode``
    and ``command``, as :class:`ddlab.measure.launch.LaunchResult`), or None when the launch did
    not fail or its output names no failure."""
    output = getattr(result, "output", "") or ""
    returncode = getattr(result, "returncode", None)
    command = getattr(result, "command", []) or []
    launcher = launcher or launcher_of(command)
    lines = output.splitlines()
    streams = _read_streams(lines)
    states, root = _torchrun_blocks(lines)
    named = _launcher_lines(lines, states)
    named = root if root is not None else named
    single = launcher == "python"
    if single:
        states.clear()
        if returncode not in (None, 0):
            _merge(states, 0, exitcode=returncode, signal=status_signal(returncode), seen_at=len(lines))
    # The workers' own tracebacks: a prefixed one is its rank's; the unprefixed ones (mpirun,
    # a rank that failed before its process group existed, one process) are kept aside.
    loose = []
    for rank, s in streams.items():
        for at, error, where, own in s.errors:
            if own:
                continue
            if rank is None or single:
                loose.append((at, error, where))
                continue
            st = _merge(states, rank, seen_at=at)
            st.error, st.where = error, where or st.where   # the last one counts (chained exceptions)
        if rank is not None and s.dumps:
            for dump in s.dumps:
                waiting = _outermost_collective(list(reversed(dump)))
                if waiting:
                    _merge(states, rank, waiting=waiting)
    if not any(s.failed for s in states.values()) and not loose:
        return None
    if not any(s.failed for s in states.values()) and returncode in (None, 0):
        return None
    causes = [s for s in states.values() if s.failed and not s.consequence]
    if named is not None and named in states and states[named] in causes:
        chosen = states[named]
    elif causes:
        # When torchrun's error files timed every cause, the earliest raised first; else the
        # first reported in the output.
        timed = all(s.failed_at is not None for s in causes)
        chosen = min(causes, key=lambda s: ((s.failed_at,) if timed else ()) + (s.seen_at, s.rank))
    elif named is not None and named in states:
        chosen = states[named]
    else:
        failed = [s for s in states.values() if s.failed]
        chosen = min(failed, key=lambda s: (s.seen_at, s.rank)) if failed else None
    own_loose = [e for e in loose if not PEER_LOST.search(e[1])]
    if chosen is not None and not chosen.error and own_loose:
        chosen.error, chosen.where = own_loose[-1][1], own_loose[-1][2]
    if chosen is None:
        at, error, _ = (own_loose or loose)[-1]
        chosen = RankState(rank=-1, error=error, exitcode=returncode, signal=status_signal(returncode))
    size = world_size(command) or 0
    ranks = sorted(set(states) | set(range(size)))
    survivors = [_survivor_line(states.get(r, RankState(rank=r)), chosen.rank)
                 for r in ranks if r != chosen.rank and not single]
    return RankFailure(rank=None if chosen.rank < 0 else chosen.rank, host=_local(chosen.host),
                       how=chosen.how(), signal=signal_name(chosen.signal) if chosen.signal is not None else None,
                       exitcode=chosen.exitcode, error=chosen.error, launcher=launcher, survivors=survivors,
                       single=single, cause=chosen.failed and not chosen.consequence)


def _short(error: str, limit: int = 100) -> str:
    """A survivor's error in a few words: its type and what says its peer was gone."""
    kind = re.match(r"^([A-Za-z_][\w.]*)\s*:\s*", error)
    m = PEER_LOST.search(error[kind.end():] if kind else error)
    if m:
        return (f"{kind.group(1).rsplit('.', 1)[-1]}: " if kind else "") + m.group(0)
    return error if len(error) <= limit else error[:limit - 3] + "..."


def _survivor_line(s: RankState, dead: int) -> str:
    """One line on a rank other than the one that failed first."""
    who = f"rank {s.rank}"
    after = f"rank {dead}" if dead >= 0 else "the failed rank"
    stopped = s.signal in (signal.SIGTERM, signal.SIGINT)
    if s.failed and not s.consequence:
        return f"{who}: also failed: {s.how()}"
    if s.error:
        where = s.where or s.waiting
        text = (f"{who}: was waiting in {where} when {after} died; it failed there ({_short(s.error)})" if where
                else f"{who}: failed because {after} was gone ({_short(s.error)})")
        return text + (f", then was stopped by the launcher ({signal_name(s.signal)})" if stopped else "")
    if s.waiting:
        return f"{who}: still waiting in {s.waiting} when stopped" + (f" ({signal_name(s.signal)})" if stopped else "")
    if stopped:
        return f"{who}: terminated by the launcher ({signal_name(s.signal)}) after {after} died"
    if s.exitcode == 0:
        return f"{who}: finished (exit status 0)"
    if s.signal is not None or s.exitcode is not None:
        return f"{who}: {s.how()}"
    return f"{who}: stopped by the launcher after {after} died (it reported no error of its own)"


def describe(failure: Optional[RankFailure]) -> str:
    """The first line (who, where, how), then one line per other rank; "" for None."""
    if failure is None:
        return ""
    return "\n".join([failure.line(), *failure.survivors])
