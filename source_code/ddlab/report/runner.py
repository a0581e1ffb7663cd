"""``ddlab report``: one command that measures what this machine supports and writes a report.

The steps, in order: doctor (:mod:`ddlab.system.hardware`), topology (:mod:`ddlab.system.topology`), our p2p
test (:mod:`ddlab.measure.p2p`), the all-reduce sweep under each NCCL path (:mod:`ddlab.measure.collectives`)
and the Fashion-MNIST NCCL-path experiment (:mod:`ddlab.training.experiments`). What runs here is
decided by :func:`ddlab.course.mode.decide`; a step this machine cannot run is skipped, and its JSON
and the report say why. Each step writes ``<out>/<step>.json`` (with provenance) as soon as it
finishes, so Ctrl-C keeps the finished steps and ``--resume`` skips them. At the end
:mod:`ddlab.report.html_page` writes ``report.html`` (self-contained: plots embedded, CSS inline)
and the terminal gets the same summary and tables as text.

Durations are planned, not hoped for: :func:`ddlab.report.plan.plan` sizes the p2p test and the sweeps from the
GPU count so that a full run on 8 GPUs stays within :data:`FULL_BUDGET_S` and ``--quick`` on 2
GPUs within :data:`QUICK_BUDGET_S` (both in :mod:`ddlab.report.plan`); each step's estimate feeds the progress line's ETA, and the
measured duration is kept in its JSON next to the estimate.

A little over 400 lines: the steps, the runner with --resume and Ctrl-C handling, the progress
line and the command line; the HTML and the time plan already live in report_html and report_plan.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from ddlab.course import mode
from ddlab.report.plan import Plan, plan

FORMAT = 1


# ----------------------------------------------------------------------------- steps
class Skip(Exception):
    """Raised by a step this machine cannot run; its message says why."""


@dataclass
class Step:
    name: str
    title: str
    run: Callable[["Context"], dict]      # returns the step's data (JSON-able); raise Skip to skip


@dataclass
class Context:
    out: str
    machine: mode.Machine
    plan: Plan
    topo_file: Optional[str] = None
    done: dict = field(default_factory=dict)      # step name -> its record (as written)
    _inventory: object = None

    def inventory(self):
        if self._inventory is None:
            from ddlab.system import hardware
            self._inventory = hardware.inventory(dataset=False, horovod_check=False)
        return self._inventory

    def provenance(self, command: str) -> dict:
        from ddlab.system import provenance
        return provenance.collect(command, inventory=self.inventory())

    def data(self, step: str) -> Optional[dict]:
        rec = self.done.get(step)
        return rec.get("data") if rec and rec.get("status") == "done" else None

    def save_plot(self, fig, name: str) -> str:
        import matplotlib.pyplot as plt
        fig.savefig(os.path.join(self.out, name), dpi=110, bbox_inches="tight")
        plt.close(fig)
        return name


def _doctor(ctx: Context) -> dict:
    from ddlab.system import hardware
    # `horovodrun --check-build` imports every framework (seconds to minutes on a busy machine):
    # a preflight leaves it out and says so.
    inv = hardware.inventory(horovod_check=not ctx.plan.quick)
    ctx._inventory = inv
    warnings = list(inv.notes)
    if ctx.plan.quick and inv.horovod:
        warnings.append("Horovod's build was not checked (--quick leaves out `horovodrun --check-build`; "
                        "ddlab doctor runs it)")
    if inv.dataset and not inv.dataset.startswith("ok"):
        warnings.append(f"Fashion-MNIST: {inv.dataset} (get it with: ddlab data)")
    if inv.gpus and not inv.nvcc:
        warnings.append("nvcc (the CUDA compiler) was not found: the p2p test cannot be built")
    if inv.gpus and not inv.torch:
        warnings.append("PyTorch is not installed: the all-reduce sweep and the training cannot run")
    return {"inventory": inv.to_dict(), "warnings": warnings}


def _topology(ctx: Context) -> dict:
    from ddlab.system import topology
    if ctx.topo_file:
        topo = topology.Topology.from_file(ctx.topo_file)
        source = f"read from {ctx.topo_file}"
    else:
        decision = mode.decide(mode.Needs(gpus=1), ctx.machine)
        if not decision.live:
            raise Skip(f"{decision.why}, so there is no nvidia-smi topo -m to read "
                       "(pass --topo-file FILE to read a saved one)")
        try:
            topo = topology.Topology.from_system()
        except topology.NoGPUError as exc:
            raise Skip(str(exc).split(" To explore")[0]) from None
        source = "nvidia-smi topo -m on this machine"
    d = topology_data(topo)
    d["source"] = source
    if len(topo.gpus) >= 1:
        d["plots"] = [ctx.save_plot(topo.draw().figure, "topology.png")]
    return d


def topology_data(topo) -> dict:
    """A topology's facts as the report keeps them: the parsed matrix, ranked pairs and the best
    subset for every k (whatever :meth:`Topology.best_subset` ranks by)."""
    from ddlab.system import topology
    n = len(topo.gpus)
    d = {"topology": topo.to_dict(), "summary": topo.summary(), "text": topology.report(topo)}
    d["ranked_pairs"] = [g.to_dict() for g in topo.ranked_pairs()] if n >= 2 else []
    d["best_subsets"] = {str(k): topo.best_subset(k).to_dict() for k in range(2, n + 1)}
    return d


def nvlink_generation(gpu_names) -> Optional[int]:
    """The NVLink generation of these GPUs, from the catalogue's GPU column in :mod:`ddlab.system.links`
    ("H100/H200" -> 4); None when no catalogue entry names them."""
    from ddlab.system import links
    for g in links.NVLINK_GENERATIONS:
        models = g["gpu"].split("/")
        if any(m in str(name) for name in gpu_names for m in models):
            return int(g["generation"].split()[-1])
    return None


def link_peaks(topo_dict: Optional[dict], gpu_names) -> Optional[list]:
    """Per-pair link peak (GB/s per direction, from :mod:`ddlab.system.links`) from a topology's labels; None when unknown."""
    from ddlab.measure import p2p
    from ddlab.system import topology
    if not topo_dict:
        return None
    topo = topology.Topology.from_dict(topo_dict)
    gpus = topo.gpus
    labels = [["X" if i == j else topo.link(i, j).label for j in gpus] for i in gpus]
    try:
        peaks = p2p.link_peaks(labels, nvlink_generation=nvlink_generation(gpu_names))
    except ValueError:
        return None
    return [[None if x != x else float(x) for x in row] for row in peaks]


def p2p_data(result, peaks) -> dict:
    """The p2p result and its reading: slowest link, asymmetric pairs, outlier GPUs."""
    import numpy as np
    from ddlab.measure import p2p
    m = result.matrices.get("uni_p2p_on", result.matrices.get("uni_p2p_off"))
    d = {"result": result.to_dict(), "link_peak_gbps": peaks,
         "summary": p2p.summary(result, None if peaks is None else np.array(peaks, dtype=float))}
    if m is not None and result.n >= 2:
        worst = p2p._extreme(m, result.labels, best=False)
        best = p2p._extreme(m, result.labels, best=True)
        d["slowest"] = {"gbps": worst[0], "src": worst[1], "dst": worst[2]} if worst else None
        d["fastest"] = {"gbps": best[0], "src": best[1], "dst": best[2]} if best else None
        d["asymmetric"] = [list(a) for a in p2p.asymmetric_pairs(m, result.labels)]
        d["outliers"] = [list(o) for o in p2p.outlier_gpus(m, result.labels)]
    return d


def _p2p(ctx: Context) -> dict:
    import numpy as np
    from ddlab.measure import p2p
    decision = mode.decide(mode.Needs(gpus=2, nvcc=True), ctx.machine)
    if not decision.live:
        raise Skip(decision.why)
    s = ctx.plan.p2p
    topo = ctx.data("topology")
    names = [g["name"] for g in ((ctx.data("doctor") or {}).get("inventory") or {}).get("gpus", [])]
    peaks = link_peaks(topo["topology"] if topo else None, names)
    result = p2p.run(size=s["size"], reps=s["reps"], copy=s["copy"], latency_reps=s["latency_reps"],
                     timeout=max(300.0, 3 * s["seconds"]))
    if peaks is not None and len(peaks) != result.n:     # a --topo-file of another machine
        peaks = None
    d = p2p_data(result, peaks)
    d["sizing"] = s
    fig = p2p.plot_heatmaps(result, link_peak_gbps=None if peaks is None else np.array(peaks, dtype=float),
                            keys=[k for k in ("uni_p2p_on", "bi_p2p_on", "lat_gpu_p2p_on") if k in result.matrices])
    d["plots"] = [ctx.save_plot(fig, "p2p.png")]
    return d


def _allreduce(ctx: Context) -> dict:
    from ddlab.measure import collectives, launch
    pl = ctx.plan
    multi = mode.decide(mode.Needs(gpus=2, framework="torch", launcher="ddp"), ctx.machine)
    ok, why = ctx.machine.software("torch", "ddp")
    if not multi.live and not ok:
        raise Skip(why)
    note = None if multi.live else (f"NCCL paths not measured: {multi.why}; gloo on 2 CPU processes instead "
                                    "(gloo ignores the NCCL variables, so only 'default' applies)")
    sweeps, errors = [], {}
    for path in pl.paths:
        try:
            sweeps.append(collectives.sweep(backend=pl.sweep_backend, path=path, sizes=pl.sweep_sizes,
                                            nproc=None if multi.live else 2, inventory=ctx.inventory()))
        except (launch.LaunchError, collectives.CollectiveValidationError, ValueError) as exc:
            errors[path] = str(exc).splitlines()[0]
    if not sweeps:
        raise RuntimeError("every sweep failed: " + "; ".join(f"{k}: {v}" for k, v in errors.items()))
    topo = ctx.data("topology")
    names = [g["name"] for g in ((ctx.data("doctor") or {}).get("inventory") or {}).get("gpus", [])]
    peaks = link_peaks(topo["topology"] if topo else None, names) if multi.live else None
    d = {"backend": pl.sweep_backend, "sweeps": collectives.results_to_json(sweeps), "errors": errors,
         "note": note, "link_peak_gbps": slowest_peak(peaks)}
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    collectives.plot_sweep({s.label: s for s in sweeps}, ax=ax)
    if d["link_peak_gbps"]:
        ax.axhline(d["link_peak_gbps"], color="grey", linestyle=":", linewidth=1,
                   label="slowest link's peak per direction")
        ax.legend(fontsize="small")
    d["plots"] = [ctx.save_plot(fig, "allreduce.png")]
    return d


def slowest_peak(peaks) -> Optional[float]:
    """The lowest per-pair link peak: what a ring all-reduce's bus bandwidth is bounded by."""
    vals = [x for row in (peaks or []) for x in row if x]
    return min(vals) if vals else None


def _training(ctx: Context) -> dict:
    from ddlab.training import experiments
    pl = ctx.plan
    if pl.train_device is None:
        if pl.quick:
            raise Skip("--quick (a preflight) leaves out the training comparison; run without --quick for it")
        decision = mode.decide(mode.Needs(gpus=0, framework="torch", launcher="ddp"), ctx.machine)
        raise Skip(decision.why or "PyTorch cannot run distributed training here")
    res = experiments.nccl_path_comparison(device=pl.train_device, paths=pl.train_paths, workers=2, repeats=1)
    if pl.train_device == "cpu":
        res.notes.insert(0, "no 2 GPUs here: a small real run on 2 CPU processes with gloo")
    res.notes.append("each configuration run once (ddlab experiment nccl-paths repeats them for a median)")
    d = {"result": res.to_dict(), "device": pl.train_device}
    ax = res.plot()
    d["plots"] = [ctx.save_plot(ax.figure, "training.png")]
    return d


STEPS = [Step("doctor", "Doctor: what this machine has", _doctor),
         Step("topology", "Topology: nvidia-smi topo -m", _topology),
         Step("p2p", "Our p2p test: bandwidth and latency per GPU pair", _p2p),
         Step("allreduce", "All-reduce sweep under each NCCL path", _allreduce),
         Step("training", "Fashion-MNIST training under each NCCL path", _training)]


# ----------------------------------------------------------------------------- progress
class Progress:
    """One status line: the step running now, elapsed time and the estimated time left.
    Redrawn every second on a terminal; one line per step start and end otherwise."""

    def __init__(self, estimates: dict, stream=None):
        self.estimates = dict(estimates)
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.left = set(self.estimates)
        self._stop = threading.Event()
        self._thread = None
        self.current = None
        self.started = 0.0

    def remaining(self, now: Optional[float] = None) -> float:
        now = time.monotonic() if now is None else now
        rest = sum(self.estimates[s] for s in self.left if s != self.current)
        if self.current is not None:
            rest += max(0.0, self.estimates.get(self.current, 0.0) - (now - self.started))
        return rest

    def line(self, index: int, total: int, title: str) -> str:
        el = time.monotonic() - self.started
        return f"[{index}/{total}] {title}  {_clock(el)} elapsed, about {_clock(self.remaining())} left"

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


def _write(path: str, obj: dict) -> None:
    tmp = path + ".part"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, default=str)
        f.write("\n")
    os.replace(tmp, path)          # a step's JSON is whole or absent, never half-written


def load_step(out: str, name: str) -> Optional[dict]:
    p = step_path(out, name)
    if not os.path.exists(p):
        return None
    with open(p) as f:
        return json.load(f)


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


def default_out(machine: mode.Machine) -> str:
    from ddlab.system import hardware
    slug = hardware.this_machine()[1] if machine.gpus else "cpu"
    return os.path.join("results", f"report-{slug}-{_dt.date.today().isoformat()}")


def _p2p_built() -> bool:
    from ddlab.measure import p2p
    exe = p2p.binary_path()
    src = os.path.join(p2p.PROGRAM_DIR, p2p.PROGRAM_NAME + ".cu")
    return os.path.exists(exe) and os.path.getmtime(exe) >= os.path.getmtime(src)


def main(out: Optional[str] = None, quick: bool = False, resume: bool = False, topo_file: Optional[str] = None,
         compare: Optional[str] = None, machine: Optional[mode.Machine] = None, steps=None,
         command: str = "ddlab report", stream=None) -> int:
    """Run the report; returns the exit code (0 done, 1 a step failed, 130 interrupted, 2 bad input)."""
    from ddlab.report import html_page as report_html
    stream = stream or sys.stdout
    machine = machine or mode.Machine.detect()
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
    pl = plan(machine, quick, p2p_built=_p2p_built())
    steps = steps or STEPS
    ctx = Context(out, machine, pl, topo_file=topo_file)
    print(f"ddlab report on {machine.label}{' (--quick)' if quick else ''}: results in {out}; "
          f"estimated {_clock(pl.total_s())}", file=stream)
    try:
        run_steps(ctx, steps, resume=resume, command=command)
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
        description="Measure this machine in one command: doctor, topology, our p2p test, the all-reduce sweep "
                    "under each NCCL path and the Fashion-MNIST NCCL-path training; writes one JSON per step, "
                    "PNG plots and a self-contained report.html. Without GPUs it runs the CPU parts and says "
                    "what it skipped.")
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
