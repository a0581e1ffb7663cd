"""Capture which path NCCL chooses: run a small all-reduce on this machine's GPUs with
``NCCL_DEBUG=INFO`` (:func:`capture_allreduce_log`), and the ``ddlab nccl-log`` command, which
parses a log file (:mod:`ddlab.system.nccl_log`) or captures one first (``--capture``).
"""
from __future__ import annotations

import json
import re
import sys
from typing import Optional

from ddlab.base import files
from ddlab.measure import launch
from ddlab.system import frameworks, hardware, nccl_log


# The all-reduce that makes NCCL set up (and print) its connections is the smoke check
# ddlab.measure.smoke nccl-allreduce, at 4 MiB per rank.
CAPTURE_ELEMENTS = 1 << 20


def capture_allreduce_log(env: Optional[dict] = None, nproc: int = 2, timeout: float = 300.0) -> str:
    """Run a small NCCL all-reduce on ``nproc`` local GPUs with NCCL_DEBUG=INFO (plus ``env``,
    e.g. ``{"NCCL_P2P_LEVEL": "LOC"}``) through torchrun and return the whole log text.

    Raises RuntimeError (before launching anything) when this machine has fewer GPUs, and
    ddlab.measure.launch.LaunchError when the run fails or hangs."""
    have = hardware.inventory(software=False).gpu_count
    usable = frameworks.gpu_count("torch") if have >= nproc else have     # CUDA_VISIBLE_DEVICES applied
    if usable < nproc:
        where = f"this machine has {have}" if usable == have else f"PyTorch can use {usable} of this machine's {have}"
        raise RuntimeError(f"capturing an NCCL log needs {nproc} GPUs; {where}. "
                           f"Parse a recorded log instead: ddlab nccl-log FILE")
    run_env = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": None}
    run_env.update(env or {})
    result = launch.run(["-m", "ddlab.measure.smoke", "nccl-allreduce", "--elements", str(CAPTURE_ELEMENTS)],
                        launcher="torchrun", nproc=nproc,
                        env=run_env, timeout=timeout)
    return result.output


# ----------------------------------------------------------------------------- CLI
def cli(argv: list) -> int:
    import argparse
    p = argparse.ArgumentParser(prog="ddlab nccl-log", description="Parse an NCCL_DEBUG=INFO log into a "
                                "transport table (which path NCCL used between which ranks).")
    p.add_argument("file", nargs="?", help="the log file ('-' reads standard input)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--capture", metavar="OUT", help="on a GPU machine: run a 2-GPU NCCL all-reduce with "
                   "NCCL_DEBUG=INFO, save its log to OUT, then parse it")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="with --capture: an NCCL setting for the run (repeatable), e.g. NCCL_P2P_LEVEL=LOC")
    p.add_argument("--nproc", type=int, default=2, help="with --capture: number of GPUs (default 2)")
    a = p.parse_args(argv)
    if bool(a.file) == bool(a.capture):
        p.print_usage()
        print("ddlab nccl-log: give a log FILE, or --capture OUT on a GPU machine")
        return 2
    if a.capture:
        env = {}
        for item in a.env:
            name, sep, value = item.partition("=")
            if not sep or not re.fullmatch(r"NCCL_[A-Z0-9_]+", name):
                print(f"ddlab nccl-log: --env expects NCCL_NAME=VALUE, got {item!r}")
                return 2
            env[name] = value
        try:
            text = capture_allreduce_log(env, nproc=a.nproc)
        except RuntimeError as exc:  # includes launch.LaunchError
            print(f"ddlab nccl-log: {exc}")
            if isinstance(exc, launch.LaunchError) and exc.result is not None:
                files.write_text(a.capture, exc.result.output)
                print(f"(the failed run's output is in {a.capture})")
            return 1
        files.write_text(a.capture, text)
        print(f"saved {a.capture}", file=sys.stderr)
        log = nccl_log.parse(text)
    else:
        try:
            log = nccl_log.parse(sys.stdin.read()) if a.file == "-" else nccl_log.parse_file(a.file)
        except OSError as exc:
            print(f"ddlab nccl-log: cannot read {a.file}: {exc.strerror or exc}")
            return 1
    if log.empty:
        print(json.dumps(log.to_dict(), indent=1) if a.json else f"ddlab nccl-log: {nccl_log.NO_NCCL_LINES}")
        return 1
    print(json.dumps(log.to_dict(), indent=1) if a.json else log.table())
    return 0


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
