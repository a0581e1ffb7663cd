"""Horovod under Slurm's ``srun``, one task per GPU, with Gloo: what the batch scripts in
``source_code/slurm/`` call.

``horovodrun --gloo`` does two things: it runs an HTTP rendezvous server that knows the
plan (which rank sits on which host, its local and cross ranks), and it starts every worker
itself (over ssh on other hosts) with ``HOROVOD_*`` variables pointing at that server. Under
Slurm, ``srun`` starts the workers, so this module does the rest:

* ``python -m ddlab.measure.slurm rendezvous --hosts node1:4,node2:4 --port-file F`` runs Horovod's
  own rendezvous server on the first node with the plan of those hosts (Horovod's own
  ``get_host_assignments``: ranks fill a host before the next, as ``srun``'s default block
  distribution places tasks) and writes its port to ``F``; it stops after ``--timeout``
  seconds or when killed;
* ``python -m ddlab.measure.slurm horovod-worker --hosts ... --rendezvous ADDR:PORT -- CMD ...``,
  started by ``srun`` once per task, sets this task's ``HOROVOD_*`` variables from
  ``SLURM_PROCID`` and the same plan (refusing a task that ``srun`` placed elsewhere than the
  plan says), then replaces itself with ``CMD``.

With an MPI build of Horovod none of this is needed: ``srun --mpi=pmix`` starts the ranks
and Horovod's MPI controller reads them from MPI.
"""
from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import time
from typing import Mapping, Optional

from ddlab.base import files
from ddlab.base.errors import CourseError


class SlurmSetupError(CourseError, RuntimeError):
    """The job's layout or environment cannot run this launch; the message says why."""


def expand_tasks_per_node(value: str) -> list:
    """Slurm's compressed task counts (``SLURM_TASKS_PER_NODE``, e.g. "2(x3),1") as a list."""
    out = []
    for part in value.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not m:
            raise SlurmSetupError(f"cannot read the task counts {value!r} (expected e.g. '4(x2)' or '4,2')")
        out += [int(m.group(1))] * int(m.group(2) or 1)
    return out


def hosts_spec(hostnames: list, tasks_per_node: list) -> str:
    """Horovod's host list ("node1:4,node2:4") from the job's hosts and their task counts."""
    if len(hostnames) != len(tasks_per_node):
        raise SlurmSetupError(f"{len(hostnames)} hosts but {len(tasks_per_node)} task counts")
    return ",".join(f"{h}:{n}" for h, n in zip(hostnames, tasks_per_node))


def job_hosts_spec(env: Optional[Mapping[str, str]] = None) -> str:
    """:func:`hosts_spec` of the running job (``scontrol show hostnames`` and
    ``SLURM_TASKS_PER_NODE``)."""
    env = os.environ if env is None else env
    nodelist, tasks = env.get("SLURM_JOB_NODELIST"), env.get("SLURM_TASKS_PER_NODE")
    if not nodelist or not tasks:
        raise SlurmSetupError("SLURM_JOB_NODELIST or SLURM_TASKS_PER_NODE is not set: run this inside a Slurm job")
    out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise SlurmSetupError(f"scontrol show hostnames {nodelist} failed: {out.stderr.strip()}")
    return hosts_spec(out.stdout.split(), expand_tasks_per_node(tasks))


def plan(hosts: str) -> list:
    """Horovod's slot plan for a host list: one SlotInfo (hostname, rank, local_rank,
    cross_rank, size, local_size, cross_size) per rank, in rank order."""
    from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
    parsed = parse_hosts(hosts)
    return get_host_assignments(parsed, sum(h.slots for h in parsed))


def worker_env(hosts: str, rendezvous: str, env: Optional[Mapping[str, str]] = None) -> dict:
    """The ``HOROVOD_*`` variables of this ``srun`` task (from ``SLURM_PROCID``), as
    ``horovodrun --gloo`` would set them for the same rank."""
    env = os.environ if env is None else env
    if "SLURM_PROCID" not in env:
        raise SlurmSetupError("SLURM_PROCID is not set: start the workers with srun")
    rank = int(env["SLURM_PROCID"])
    slots = plan(hosts)
    if not 0 <= rank < len(slots):
        raise SlurmSetupError(f"task {rank} is outside the plan of {len(slots)} ranks ({hosts})")
    slot = slots[rank]
    node = env.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    if node != slot.hostname:
        raise SlurmSetupError(f"task {rank} runs on {node}, but the plan ({hosts}) puts rank {rank} on "
                              f"{slot.hostname}: keep srun's default block distribution")
    addr, _, port = rendezvous.rpartition(":")
    if not addr or not port.isdigit():
        raise SlurmSetupError(f"--rendezvous {rendezvous!r} is not ADDR:PORT")
    ip = socket.gethostbyname(addr)
    out = {
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": ip, "HOROVOD_GLOO_RENDEZVOUS_PORT": port,
        "HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo",
        "HOROVOD_HOSTNAME": slot.hostname,
        "HOROVOD_RANK": str(slot.rank), "HOROVOD_SIZE": str(slot.size),
        "HOROVOD_LOCAL_RANK": str(slot.local_rank), "HOROVOD_LOCAL_SIZE": str(slot.local_size),
        "HOROVOD_CROSS_RANK": str(slot.cross_rank), "HOROVOD_CROSS_SIZE": str(slot.cross_size),
    }
    iface = env.get("HOROVOD_GLOO_IFACE") or route_interface(ip)
    if iface:
        out["HOROVOD_GLOO_IFACE"] = iface
    return out


def route_interface(ip: str) -> Optional[str]:
    """The network interface this host reaches ``ip`` through (``ip route get``), else None."""
    try:
        out = subprocess.run(["ip", "-o", "route", "get", ip], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"\bdev\s+(\S+)", out)
    return m.group(1) if m else None


def serve_rendezvous(hosts: str, port_file: str, timeout: float) -> int:
    """Run Horovod's rendezvous server for ``hosts``; write its port to ``port_file``."""
    from horovod.runner.http.http_server import RendezvousServer
    server = RendezvousServer()
    port = server.start()
    server.init(plan(hosts))
    files.write_text(port_file, f"{port}\n")        # whole: the workers poll for it
    print(f"ddlab.measure.slurm: Horovod rendezvous for {hosts} on port {port} (for at most {timeout:.0f} s)", flush=True)
    try:
        time.sleep(timeout)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m ddlab.measure.slurm", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("hosts", help="print this job's Horovod host list (node1:4,node2:4)")
    r = sub.add_parser("rendezvous", help="run Horovod's Gloo rendezvous server for the job")
    r.add_argument("--hosts", required=True, help="node1:4,node2:4 (python -m ddlab.measure.slurm hosts)")
    r.add_argument("--port-file", required=True, help="write the port here once listening")
    r.add_argument("--timeout", type=float, default=3600, help="stop after this many seconds")
    w = sub.add_parser("horovod-worker", help="set this srun task's HOROVOD_* variables, then run CMD")
    w.add_argument("--hosts", required=True)
    w.add_argument("--rendezvous", required=True, help="ADDR:PORT of the rendezvous server")
    w.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    a = p.parse_args(argv)
    try:
        if a.command == "hosts":
            print(job_hosts_spec())
            return 0
        if a.command == "rendezvous":
            return serve_rendezvous(a.hosts, a.port_file, a.timeout)
        cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
        if not cmd:
            raise SlurmSetupError("horovod-worker needs a command after --")
        env = dict(os.environ)
        env.update(worker_env(a.hosts, a.rendezvous, env))
        os.execvpe(cmd[0], cmd, env)
    except (SlurmSetupError, ValueError) as exc:
        print(f"ddlab.measure.slurm: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
