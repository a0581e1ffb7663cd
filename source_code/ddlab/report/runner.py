"""``ddlab report``: one command that measures what this machine supports and writes a report.

The steps, in order: doctor (:mod:`ddlab.report.doctor`), topology (:mod:`ddlab.system.topology`), the host
link per NUMA node and the PCIe links under load (:mod:`ddlab.report.one_gpu_steps`), our p2p test
(:mod:`ddlab.measure.p2p_run`), the all-reduce sweep under each NCCL path (:mod:`ddlab.measure.collectives_run`),
the Fashion-MNIST NCCL-path experiment (:mod:`ddlab.training.experiments`), and one GPU's training
throughput and the data-parallel wrapper's own cost (:mod:`ddlab.report.one_gpu_steps`). What runs here is
decided by :func:`ddlab.system.policy.decide`; a step this machine cannot run is skipped, and its JSON
and the report say why. Each step writes ``<out>/<step>.json`` (with provenance) as soon as it
finishes, so Ctrl-C keeps the finished steps and ``--resume`` skips them. At the end
:mod:`ddlab.report.html_page` writes ``report.html`` (self-contained: plots embedded, CSS inline)
and the terminal gets the same summary and tables as text.

Durations are planned, not hoped for: :func:`ddlab.report.plan.plan` sizes the p2p test and the sweeps from the
GPU count so that a full run on 8 GPUs stays within :data:`FULL_BUDGET_S`, ``--quick`` on 2
GPUs within :data:`QUICK_BUDGET_S` and a full run on one GPU within :data:`ONE_GPU_BUDGET_S` (all in
:mod:`ddlab.report.plan`); each step's estimate feeds the progress line's ETA, and the
measured duration is kept in its JSON next to the estimate.

This module holds the runner with --resume and Ctrl-C handling, the progress line and the
command line; the steps are :mod:`ddlab.report.steps`, the HTML :mod:`ddlab.report.html_page`, the
time plan :mod:`ddlab.report.plan`.
"""
from __future__ import annotations

import datetime as _dt
import os
import sys
import threading
import time
from typing import Optional

from ddlab.base import files
from ddlab.report.plan import plan
from ddlab.report.context import Context, Skip
from ddlab.report.steps import STEPS
from ddlab.system import policy

FORMAT = 1
STEP_SCHEMA = "report-step"           # ddlab.base.schemas


# ----------------------------------------------------------------------------- progress
class Progress:
    """One status line: the step running now, the time since the report began and the estimated
    time left. Redrawn every second on a terminal; one line per step start and end otherwise."""

    def __init__(self, estimates: dict, stream=None):
        self.estimates = dict(estimates)
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.left = set(self.estimates)
        self._stop = threading.Event()
        self._thread = None
        self.current = None
        self.started = 0.0
        self.begun = time.monotonic()

    def remaining(self, now: Optional[float] = None) -> float:
        now = time.monotonic() if now is None else now
        rest = sum(self.estimates[s] for s in self.left if s != self.current)
        if self.current is not None:
            rest += max(0.0, self.estimates.get(self.current, 0.0) - (now - self.started))
        return rest

    def line(self, index: int, total: int, title: str, now: Optional[float] = None) -> str:
        now = time.monotonic() if now is None else now
        return (f"[{index}/{total}] {title}  {_clock(now - self.begun)} elapsed, "
                f"about {_clock(self.remaining(now))} left")

    def start(self, name: str, index: int, total: int, title: str) -> None:
        self.current, self.started = name, time.monotonic()
        if not self.tty:
            print(self.line(index, total, title), file=self.stream, flush=True)
            return
        self._stop.clear()

        def tick():
            while not self._stop.wait(1.0):
                self.stream.write("\r\033[K" + self.line(index, total, title))
                self.stream.flush()
        self.stream.write(self.line(index, total, title))
        self._thread = threading.Thread(target=tick, daemon=True)
        self._thread.start()

    def end(self, name: str, message: str) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            self.stream.write("\r\033[K")
        self.left.discard(name)
        self.current = None
        print(message, file=self.stream, flush=True)


def _clock(s: float) -> str:
    s = int(round(s))
    return f"{s // 60}:{s % 60:02d}"


# ----------------------------------------------------------------------------- running
class ReportInterrupted(Exception):
    """Ctrl-C during a step: the steps before it are kept."""


def step_path(out: str, name: str) -> str:
    return os.path.join(out, f"{name}.json")


def _write(path: str, rec: dict) -> None:
    """A step's JSON, whole or absent (never half-written), checked against the ``report-step``
    schema. A figure that could not be measured (NaN, which JSON cannot hold) is written as null
    and shown as missing; data that breaks the schema fails the step with that reason, not the report."""
    try:
        files.write_json(path, files.nan_to_null(rec), schema=STEP_SCHEMA, what="report step", default=str)
    except files.ResultFileError as exc:
        if rec.get("status") != "done":
            raise
        failed = {k: v for k, v in rec.items() if k != "data"}
        failed.update(status="failed", why=f"its result could not be saved: {exc}")
        rec.clear()
        rec.update(failed)
        files.write_json(path, rec, schema=STEP_SCHEMA, what="report step", default=str)


def load_step(out: str, name: str) -> Optional[dict]:
    """A step's JSON (None when it has none); a corrupt or malformed one raises
    :class:`ddlab.base.files.ResultFileError` naming it."""
    p = step_path(out, name)
    if not os.path.exists(p):
        return None
    return files.read_json(p, "report step", schema=STEP_SCHEMA)


def run_steps(ctx: Context, steps, resume: bool = False, progress: Optional[Progress] = None,
              command: str = "ddlab report") -> dict:
    """Run ``steps`` in order, writing each one's JSON when it finishes. With ``resume`` a step
    whose JSON says it finished (done or skipped) is read back instead of run. A step that
    fails is recorded as failed and the others still run. Ctrl-C raises :class:`ReportInterrupted`
    naming the step it stopped, after the earlier steps' JSON is on disk."""
    progress = progress or Progress({s.name: ctx.plan.estimates.get(s.name, 0.0) for s in steps})
    for i, step in enumerate(steps, 1):
        if resume:
            rec = load_step(ctx.out, step.name)
            if rec and rec.get("status") in ("done", "skipped"):
                ctx.done[step.name] = rec
                progress.left.discard(step.name)
                print(f"[{i}/{len(steps)}] {step.title}: kept from the earlier run ({rec['status']})",
                      file=progress.stream)
                continue
        progress.start(step.name, i, len(steps), step.title)
        t0 = time.monotonic()
        rec = {"format": FORMAT, "step": step.name, "title": step.title,
               "estimate_s": ctx.plan.estimates.get(step.name)}
        try:
            data = step.run(ctx)
            rec.update(status="done", data=data)
        except Skip as exc:
            rec.update(status="skipped", why=str(exc))
        except KeyboardInterrupt:
            progress.end(step.name, f"stopped during: {step.title}")
            raise ReportInterrupted(step.title) from None
        except Exception as exc:           # recorded in the report: one step's failure keeps the rest
            rec.update(status="failed", why=f"{type(exc).__name__}: {exc}")
        rec["seconds"] = round(time.monotonic() - t0, 2)
        rec["provenance"] = ctx.provenance(f"{command} (step {step.name})")
        _write(step_path(ctx.out, step.name), rec)
        ctx.done[step.name] = rec
        what = {"done": "done", "skipped": "skipped: " + str(rec.get("why")),
                "failed": "FAILED: " + str(rec.get("why")).splitlines()[0]}[rec["status"]]
        progress.end(step.name, f"[{i}/{len(steps)}] {step.title}: {what} ({rec['seconds']:.0f} s)")
    return ctx.done


def default_out(machine: policy.Machine) -> str:
    from ddlab.system.machine_name import this_machine
    slug = this_machine()[1] if machine.gpus else "cpu"
    return os.path.join("results", f"report-{slug}-{_dt.date.today().isoformat()}")


def _built(program: Optional[str] = None) -> bool:
    """Whether a compiled test of the p2p folder (the p2p test; or ``program``) is built and up to date."""
    from ddlab.measure import p2p_run
    program = program or p2p_run.PROGRAM_NAME
    exe = p2p_run.binary_path(program=program)
    src = os.path.join(p2p_run.PROGRAM_DIR, program + ".cu")
    return os.path.exists(exe) and os.path.getmtime(exe) >= os.path.getmtime(src)


def main(out: Optional[str] = None, quick: bool = False, resume: bool = False, topo_file: Optional[str] = None,
         compare: Optional[str] = None, machine: Optional[policy.Machine] = None, steps=None,
         command: str = "ddlab report", stream=None) -> int:
    """Run the report; returns the exit code (0 done, 1 a step failed, 130 interrupted, 2 bad input)."""
    from ddlab.report import html_page as report_html
    stream = stream or sys.stdout
    machine = machine or policy.Machine.detect()
    out = out or default_out(machine)
    if compare:
        try:
            other = report_html.load_other(compare)
        except (OSError, ValueError) as exc:
            print(f"ddlab report: --compare {compare}: {exc}", file=sys.stderr)
            return 2
    if os.path.isdir(out) and not resume and any(f.endswith(".json") for f in os.listdir(out)):
        print(f"ddlab report: {out} already holds a report; pass --resume to keep its finished steps, "
              "or choose another --out", file=sys.stderr)
        return 2
    os.makedirs(out, exist_ok=True)
    from ddlab.measure.host_link import PROGRAM_NAME as HOST_PROGRAM
    pl = plan(machine, quick, p2p_built=_built(), host_built=_built(HOST_PROGRAM))
    steps = steps or STEPS
    ctx = Context(out, machine, pl, topo_file=topo_file)
    print(f"ddlab report on {machine.label}{' (--quick)' if quick else ''}: results in {out}; "
          f"estimated {_clock(pl.total_s())}", file=stream)
    try:
        run_steps(ctx, steps, resume=resume, command=command)
    except files.ResultFileError as exc:          # --resume found a step's JSON it cannot read
        print(f"ddlab report: {exc}", file=sys.stderr)
        return 2
    except ReportInterrupted as exc:
        print(f"\nddlab report: interrupted during {exc}. The finished steps are kept in {out}; "
              f"rerun with --resume to skip them.", file=sys.stderr)
        return 130
    page = report_html.write(out, ctx.done, machine_label=machine.label, plan=pl, command=command,
                             other=other if compare else None)
    print(report_html.terminal_text(ctx.done, other=other if compare else None), file=stream)
    print(f"\nreport: {page}", file=stream)
    return 1 if any(r.get("status") == "failed" for r in ctx.done.values()) else 0


def cli(argv: list) -> int:
    import argparse
    p = argparse.ArgumentParser(
        prog="ddlab report",
        description="Measure this machine in one command: doctor, topology, the host link per NUMA node and the "
                    "PCIe links under load, our p2p test, the all-reduce sweep "
                    "under each NCCL path, the Fashion-MNIST NCCL-path training, and one GPU's training throughput "
                    "and the data-parallel wrapper's own cost; writes one JSON per step, PNG plots and a "
                    "self-contained report.html (about 3 minutes on one GPU). Without GPUs it runs the CPU parts "
                    "and says what it skipped.")
    p.add_argument("--out", metavar="DIR", help="results folder (default results/report-<machine>-<date>)")
    p.add_argument("--quick", action="store_true", help="a short preflight: small p2p test, three sweep sizes, "
                   "no training (about 2 minutes on 2 GPUs)")
    p.add_argument("--resume", action="store_true", help="keep the finished steps in --out and run the rest")
    p.add_argument("--topo-file", metavar="FILE", help="a saved `nvidia-smi topo -m` to use for the topology")
    p.add_argument("--compare", metavar="DIR_OR_NAME",
                   help="another report folder, or a recorded machine (e.g. h200x2), side by side")
    a = p.parse_args(argv)
    if a.topo_file and not os.path.isfile(a.topo_file):
        print(f"ddlab report: --topo-file {a.topo_file}: no such file", file=sys.stderr)
        return 2
    return main(out=a.out, quick=a.quick, resume=a.resume, topo_file=a.topo_file, compare=a.compare,
                command="ddlab report " + " ".join(argv))
