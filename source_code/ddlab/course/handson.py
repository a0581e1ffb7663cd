"""The hands-on conversions of notebooks 7 and 8: a single-device Fashion-MNIST script turned, one
change at a time, into a DDP script, a Horovod (PyTorch) script and a Horovod (tf.keras) script.

Every version is a real, runnable file under ``source_code/handson/``; :data:`CONVERSIONS`
lists them in order with a one-line reason per step. :func:`show` displays a script,
:func:`step` the diff that one step makes, :func:`run` launches a script with the launcher its
conversion needs (through :func:`ddlab.measure.launch.run`, with a timeout) and reads the one
``result`` report each rank makes (:mod:`ddlab.base.worker_report`), and :func:`table` shows runs side by side: samples
per rank, whether the ranks ended with the same weights, test accuracy, images/s.

:func:`plan` decides how the scripts run on this machine from its GPU count: two processes
with one GPU each over NCCL where there are two GPUs or more, else two CPU processes over Gloo.
:func:`run_or_skip` asks the course's policy first: a script whose framework or Horovod build is
missing here is a :class:`Skipped` (one line: which, and that the notebook goes on), not an error.
"""
from __future__ import annotations

import difflib
import html
import os
import sys
from dataclasses import dataclass, field
from typing import Optional, Sequence

from ddlab.base import worker_report
from ddlab.base.paths import SOURCE_DIR
from ddlab.measure import launch
from ddlab.base.errors import CourseError
from ddlab.base.tables import code_listing

HANDSON_DIR = os.path.join(SOURCE_DIR, "handson")


class HandsOnError(CourseError, RuntimeError):
    """A hands-on script could not run or printed no result; the message says why."""


@dataclass(frozen=True)
class Step:
    script: str          # file name under source_code/handson, without .py
    reason: str          # one line: what this step changes and why


@dataclass(frozen=True)
class Conversion:
    title: str
    framework: str       # "torch" or "keras" (ddlab.training.experiments' names)
    launcher: str        # "ddp" or "horovod"
    steps: tuple         # Step, the single-device script first

    @property
    def final(self) -> str:
        return self.steps[-1].script


_SHARD = ("Shard the data: each rank trains on its own part of every epoch, so two processes do "
          "twice the work of one instead of the same work twice.")
_LR = ("Scale the learning rate by the number of processes: each step now averages that many "
       "batches (the linear scaling rule, one rule of several; notebook 9 measures where it holds).")
_METRICS = ("Average the metrics over the ranks: each rank's loss and accuracy describe only its "
            "own shard; the model's are the mean over all ranks.")
_RANK0 = ("Print and save on rank 0 only: the ranks hold the same model, so one copy of the "
          "output and of the checkpoint is enough (every rank still joins the all-reduces).")

CONVERSIONS = {
    "ddp": Conversion("PyTorch DDP (torchrun)", "torch", "ddp", (
        Step("single_device", "The starting point: one process, one device."),
        Step("ddp_1_init", "Join the process group: torchrun starts the processes, init_process_group "
                           "connects them (NCCL between GPUs, Gloo between CPU processes); at the end "
                           "destroy_process_group closes the group, once nothing holds it."),
        Step("ddp_2_device", "Pin one device per process: process i of a machine (its local rank) takes GPU i."),
        Step("ddp_3_shard", _SHARD + " DistributedSampler deals the shards; set_epoch reshuffles every epoch."),
        Step("ddp_4_wrap", "Wrap the model in DDP: it broadcasts rank 0's weights once, then averages the "
                           "gradients during every backward pass, so all ranks take the same step."),
        Step("ddp_5_lr", _LR),
        Step("ddp_6_metrics", _METRICS),
        Step("ddp_7_rank0", _RANK0),
    )),
    "horovod": Conversion("Horovod with PyTorch (horovodrun)", "torch", "horovod", (
        Step("single_device", "The starting point: one process, one device."),
        Step("hvd_1_init", "Start Horovod: horovodrun starts the processes, hvd.init() connects them."),
        Step("hvd_2_device", "Pin one device per process: process i of a machine (hvd.local_rank()) takes GPU i."),
        Step("hvd_3_shard", _SHARD + " DistributedSampler deals the shards; set_epoch reshuffles every epoch."),
        Step("hvd_4_optimizer", "Wrap the optimizer in hvd.DistributedOptimizer: it averages the gradients "
                                "over the ranks before every step."),
        Step("hvd_5_broadcast", "Broadcast rank 0's parameters and optimizer state: equal steps keep models "
                                "equal only if they start equal (Horovod, unlike DDP, does not do it for you)."),
        Step("hvd_6_lr", _LR),
        Step("hvd_7_metrics", _METRICS),
        Step("hvd_8_rank0", _RANK0),
    )),
    "keras": Conversion("Horovod with tf.keras (horovodrun)", "keras", "horovod", (
        Step("keras_single_device", "The starting point: one process, one device, tf.keras from tf-keras."),
        Step("keras_hvd_1_init", "Start Horovod: horovodrun starts the processes, hvd.init() connects them."),
        Step("keras_hvd_2_device", "Pin one device per process: process i of a machine sees only GPU i."),
        Step("keras_hvd_3_shard", _SHARD + " Rank r keeps every n-th image; shuffle() reshuffles each epoch."),
        Step("keras_hvd_4_optimizer", "Wrap the optimizer in hvd.DistributedOptimizer: it averages the "
                                      "gradients over the ranks before every step."),
        Step("keras_hvd_5_broadcast", "Broadcast rank 0's weights and optimizer state before the first step "
                                      "(BroadcastGlobalVariablesCallback)."),
        Step("keras_hvd_6_lr", _LR + " LearningRateWarmupCallback ramps up to it over the first epoch."),
        Step("keras_hvd_7_metrics", _METRICS + " MetricAverageCallback does it for the epoch's logs."),
        Step("keras_hvd_8_rank0", _RANK0),
    )),
}


def _all_scripts() -> dict:
    """script name -> the conversion it belongs to (the single-device scripts: the first that lists them)."""
    out: dict = {}
    for key, conv in CONVERSIONS.items():
        for s in conv.steps:
            out.setdefault(s.script, key)
    return out


def path(name: str) -> str:
    """The file of a hands-on script, given its name (``"ddp_3_shard"``) or a path to a .py file."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"give a hands-on script's name (e.g. 'single_device') or a .py file; got {name!r}")
    if name.endswith(".py") or os.sep in name:
        if not os.path.isfile(name):
            raise ValueError(f"no such file: {name}")
        return os.path.abspath(name)
    p = os.path.join(HANDSON_DIR, name + ".py")
    if not os.path.isfile(p):
        known = ", ".join(sorted(n[:-3] for n in os.listdir(HANDSON_DIR) if n.endswith(".py")))
        raise ValueError(f"no hands-on script {name!r}; the scripts are: {known}")
    return p


def source(name: str) -> str:
    with open(path(name), encoding="utf-8") as f:
        return f.read()


def _title(name: str) -> str:
    return os.path.basename(path(name))


# ----------------------------------------------------------------------------- showing code
@dataclass
class Code:
    """A script to display: highlighted HTML in Jupyter, the plain text in a terminal."""
    name: str
    text: str

    def __str__(self) -> str:
        return f"# {self.name}\n{self.text}"

    def _repr_html_(self) -> str:
        try:
            from pygments import highlight
            from pygments.formatters import HtmlFormatter
            from pygments.lexers import PythonLexer
        except ImportError:
            return f"<b>{html.escape(self.name)}</b>" + code_listing(f"<pre>{html.escape(self.text)}</pre>")
        fmt = HtmlFormatter(noclasses=True, linenos="inline", style="default")
        return f"<b>{html.escape(self.name)}</b>" + code_listing(highlight(self.text, PythonLexer(), fmt))


def show(name: str) -> Code:
    """A hands-on script (by name, or a .py file) shown whole."""
    return Code(_title(name), source(name))


@dataclass
class Diff:
    """The changes from one script to the next: a coloured unified diff in Jupyter, the
    unified diff text in a terminal. ``added``/``removed`` count the changed lines."""
    old: str
    new: str
    lines: list
    reason: str = ""

    @property
    def added(self) -> int:
        return sum(1 for ln in self.lines if ln.startswith("+") and not ln.startswith("+++"))

    @property
    def removed(self) -> int:
        return sum(1 for ln in self.lines if ln.startswith("-") and not ln.startswith("---"))

    def __str__(self) -> str:
        head = f"{self.reason}\n" if self.reason else ""
        return head + "\n".join(self.lines)

    def _repr_html_(self) -> str:
        rows = []
        for ln in self.lines:
            style = "color:#555"
            if ln.startswith("+++") or ln.startswith("---"):
                style = "font-weight:bold"
            elif ln.startswith("@@"):
                style = "color:#6a3d9a"
            elif ln.startswith("+"):
                style = "background:#e6ffec;color:#1b5e20"
            elif ln.startswith("-"):
                style = "background:#ffebe9;color:#b71c1c"
            rows.append(f"<span style='{style}'>{html.escape(ln) or ' '}</span>")
        reason = f"<p><b>Why:</b> {html.escape(self.reason)}</p>" if self.reason else ""
        return (reason + code_listing("<pre style='line-height:1.3;font-size:90%'>" + "\n".join(rows) + "</pre>")
                + f"<p style='font-size:85%'>{self.added} line(s) added, {self.removed} removed</p>")


def diff(old: str, new: str, reason: str = "", context: int = 2) -> Diff:
    """The unified diff from script ``old`` to script ``new`` (names or .py files)."""
    a, b = source(old).splitlines(), source(new).splitlines()
    lines = list(difflib.unified_diff(a, b, _title(old), _title(new), n=context, lineterm=""))
    return Diff(_title(old), _title(new), lines, reason)


def _conversion(key: str) -> Conversion:
    if key not in CONVERSIONS:
        raise ValueError(f"unknown conversion {key!r}; choose one of {', '.join(CONVERSIONS)}")
    return CONVERSIONS[key]


def step(conversion: str, number: int) -> Diff:
    """Step ``number`` (1 = the first change) of a conversion: its reason and its diff."""
    conv = _conversion(conversion)
    last = len(conv.steps) - 1
    if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= last:
        raise ValueError(f"the {conversion} conversion has steps 1 to {last}; got {number!r}")
    before, after = conv.steps[number - 1], conv.steps[number]
    return diff(before.script, after.script, reason=f"Step {number}. {after.reason}")


# ----------------------------------------------------------------------------- how to run here
@dataclass(frozen=True)
class Plan:
    """How the hands-on scripts run on a machine with ``gpu_count`` GPUs."""
    gpu_count: int
    nproc: int = 2
    device: str = "cpu"                  # what the distributed PyTorch scripts use: "cuda" or "cpu"
    env: dict = field(default_factory=dict)
    args: tuple = ()                     # script arguments (data sizes) for this machine
    timeout: float = 300.0

    @property
    def backend(self) -> str:
        return "nccl" if self.device == "cuda" else "gloo"

    def describe(self) -> str:
        if self.gpu_count >= 2:
            return (f"This machine has {self.gpu_count} GPUs: each distributed PyTorch script runs as "
                    f"{self.nproc} processes, one GPU each, over NCCL. The Keras scripts use the GPUs where "
                    "TensorFlow sees them (a CPU-only TensorFlow runs them on the CPU over Gloo).")
        if self.gpu_count == 1:
            return (f"This machine has one GPU: the single-device scripts use it. Two processes cannot share "
                    f"one GPU under NCCL, so the distributed scripts run as {self.nproc} CPU processes over Gloo.")
        return (f"This machine has no GPU: every distributed script runs as {self.nproc} CPU processes over "
                "Gloo, the same code that uses NCCL on GPUs.")


CPU_ARGS = ("--train-samples", "4000", "--test-samples", "1000", "--epochs", "2")
GPU_ARGS = ("--train-samples", "60000", "--test-samples", "10000", "--epochs", "2")


def plan(gpu_count: Optional[int] = None) -> Plan:
    """The plan for this machine (``gpu_count`` None: count the GPUs PyTorch sees), or for a
    machine with ``gpu_count`` GPUs (tests pass it)."""
    if gpu_count is None:
        from ddlab.training import experiments
        gpu_count = experiments.gpu_count("torch")
    if isinstance(gpu_count, bool) or not isinstance(gpu_count, int) or gpu_count < 0:
        raise ValueError(f"gpu_count must be a whole number >= 0, got {gpu_count!r}")
    if gpu_count >= 2:
        return Plan(gpu_count, device="cuda", args=GPU_ARGS, timeout=180.0)
    # One process per CPU core (two processes on two cores), and on a one-GPU machine the
    # workers see no GPU, so they take the Gloo path instead of two ranks on one GPU.
    env = {"OMP_NUM_THREADS": "1"}
    if gpu_count == 1:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return Plan(gpu_count, device="cpu", env=env, args=CPU_ARGS)


# ----------------------------------------------------------------------------- running
RESULT_KIND = "result"      # the report each rank of a hands-on script makes at its end


def parse_results(output: str) -> list:
    """The ``result`` reports of a run's output (launcher prefixes allowed), by rank. A
    malformed report line raises :class:`ddlab.base.worker_report.WorkerReportError` naming it."""
    return sorted(worker_report.parse(output, kind=RESULT_KIND), key=lambda r: r["rank"])


@dataclass
class Run:
    script: str
    launcher: str            # "python", "torchrun" or "horovodrun"
    nproc: int
    device: str
    ranks: list              # the result report of each rank
    output: str
    seconds: float
    command: str = ""        # the launch as one shell line (environment, launcher, script, flags)

    def samples(self) -> list:
        return [r.get("samples") for r in self.ranks]

    def weight_spread(self) -> float:
        """Largest difference between two ranks' weight checksums (0: the same weights)."""
        sums = [r["checksum"] for r in self.ranks]
        return max(sums) - min(sums) if sums else float("nan")

    def same_weights(self, rel: float = 1e-6) -> bool:
        sums = [r["checksum"] for r in self.ranks]
        return self.weight_spread() <= rel * max(1.0, max(abs(s) for s in sums))

    def row(self) -> dict:
        r0 = self.ranks[0] if self.ranks else {}
        return {"script": self.script, "processes": f"{self.nproc} x {self.device}",
                "samples": " / ".join(f"{s:,}" for s in self.samples()),
                "same": ("yes" if self.same_weights() else "no") if self.nproc > 1 else "-",
                "checksum": r0.get("checksum"),
                "spread": self.weight_spread() if self.nproc > 1 else None,
                "acc": r0.get("test_acc"), "img_s": sum(r.get("img_s", 0.0) for r in self.ranks),
                "seconds": self.seconds}


def launcher_for(name: str) -> tuple:
    """(framework, launcher) that runs a hands-on script: its conversion's, or one process
    for the single-device scripts. A .py file of the learner's counts as a DDP script."""
    conv_key = _all_scripts().get(name)
    if conv_key is None:
        return "torch", "ddp"
    conv = CONVERSIONS[conv_key]
    if name == conv.steps[0].script:
        return conv.framework, "none"
    return conv.framework, conv.launcher


@dataclass
class Skipped:
    """A hands-on script this machine cannot run (:func:`run_or_skip`): which, and why, in one line."""
    script: str
    why: str

    @property
    def line(self) -> str:
        return (f"{self.script} is not run here: {self.why}. The steps above show its code; "
                "the notebook goes on without its run.")

    def __str__(self) -> str:
        return self.line

    def _repr_html_(self) -> str:
        return f"<p>{html.escape(self.line)}</p>"


def can_run(name: str, machine=None):
    """The course's policy (:func:`ddlab.system.policy.decide`) on whether script ``name`` can run
    here: its framework under its launcher (no GPU needed: the plan runs it on CPU processes
    where there are too few GPUs). ``machine``: a :class:`ddlab.system.policy.Machine` (tests)."""
    from ddlab.system import policy
    from ddlab.training import experiments
    framework, launcher = launcher_for(name)
    m = machine or policy.Machine(gpus=0, software=lambda f, la: experiments.availability(f, la))
    return policy.decide(policy.Needs(framework=framework, launcher=launcher), m)


def run_or_skip(name: str, plan_: Optional[Plan] = None, machine=None, **kw):
    """:func:`run` where the policy says the script can run here, else a :class:`Skipped` that says
    which framework or build is missing (Horovod not installed, or built without PyTorch or
    TensorFlow), so the notebook goes on. ``kw`` go to :func:`run`."""
    decision = can_run(name, machine)
    if not decision.live:
        return Skipped(os.path.basename(path(name)), decision.why)
    return run(name, plan_, **kw)


def run(name: str, plan_: Optional[Plan] = None, args: Sequence[str] = (), timeout: Optional[float] = None,
        show_command: bool = True) -> Run:
    """Run a hands-on script the way this machine's :func:`plan` says; returns its :class:`Run`.
    ``show_command``: print the launch first, environment, launcher, script and flags, as one line
    to copy into a shell (the Run keeps it as ``command``).
    Raises :class:`HandsOnError` (with the tail of the output) when it fails, hangs, lacks a
    framework here, or makes no result report for every rank, and
    :class:`ddlab.training.data.DatasetError` before launching when Fashion-MNIST is missing."""
    from ddlab.training import data, experiments
    from ddlab.system.frameworks import TF_ENVIRONMENT
    p = plan_ or plan()
    framework, launcher = launcher_for(name)
    decision = can_run(name)
    if not decision.live:
        raise HandsOnError(f"{name} cannot run here: {decision.why}.")
    data.require()      # missing data: its one message (make data, DDLAB_DATA_DIR), not each rank's traceback
    file = path(name)
    nproc = 1 if launcher == "none" else p.nproc
    env = dict(p.env)
    env["PYTHONPATH"] = python_path()
    if framework == "keras" or launcher == "horovod":
        # tf-keras and no INFO lines; horovodrun may load TensorFlow too (a Horovod built
        # without the course's patch does, before each launch)
        env.update(TF_ENVIRONMENT)
    device = p.device if launcher != "none" else ("cuda" if p.gpu_count >= 1 else "cpu")
    if framework == "keras" and device == "cuda" and experiments.gpu_count("keras") < 1:
        device = "cpu"          # a TensorFlow without GPU support runs the Keras scripts on the CPU
    if launcher == "none" and p.gpu_count == 1:
        env.pop("CUDA_VISIBLE_DEVICES", None)     # one process: it may use the one GPU
    launch_name = {"none": "python", "ddp": "torchrun", "horovod": "horovodrun"}[launcher]
    argv = [file, *p.args, *map(str, args)]
    command = launch.shell_line(launch_name, nproc, argv, env, python=sys.executable)
    if show_command:
        print(command, flush=True)     # what runs, as one line to copy into a shell
    res = _launch(file, argv, launch_name, nproc, env, timeout or p.timeout)
    ranks = parse_results(res.output)
    if sorted(r["rank"] for r in ranks) != list(range(nproc)):
        raise HandsOnError(f"{os.path.basename(file)} ran, but not every rank reported its result "
                           f"(got ranks {[r['rank'] for r in ranks]} of {nproc}). Last output:\n{res.tail()}")
    return Run(os.path.basename(file), launch_name, nproc, device, ranks, res.output, res.duration_s, command)


def _launch(file: str, argv: list, launcher: str, nproc: int, env: dict, timeout: float) -> "launch.LaunchResult":
    """One launch of a hands-on script. Inside a notebook kernel with ``DDLAB_KEPT_RUNS`` set,
    :mod:`ddlab.training.kept_runs` keeps its output and seconds, and answers the same launch made
    again in the same checkout where reuse is on (it says so)."""
    from ddlab.training import kept_runs
    # The script's own content is part of the key: it may be a file outside the hashed sources.
    key = kept_runs.launch_key([*argv, kept_runs.file_digest(file)], launcher, nproc, env, sys.executable)
    kept = kept_runs.take(key)
    if kept is not None:
        print(f"({kept['notes'][-1]})", flush=True)
        return launch.LaunchResult([launcher, *argv], 0, kept["output"], kept["seconds"])
    try:
        res = launch.run(argv, launcher=launcher, nproc=nproc, env=env, timeout=timeout, check=True,
                         python=sys.executable)
    except launch.LaunchError as exc:
        raise HandsOnError(f"{os.path.basename(file)} did not finish: {exc}") from None
    kept_runs.keep(key, {"output": res.output, "seconds": res.duration_s})
    return res


def python_path() -> str:
    """The scripts' PYTHONPATH: the course's source folder first, then this process's own entries,
    each once."""
    parts = [SOURCE_DIR] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join(dict.fromkeys(parts))


def table(runs: Sequence, title: str = "Hands-on runs"):
    """The runs side by side as a :class:`ddlab.base.tables.Table`; a :class:`Skipped` among them
    is a note saying why it did not run."""
    from ddlab.base.tables import Table
    skipped = [r for r in runs if isinstance(r, Skipped)]
    runs = [r for r in runs if not isinstance(r, Skipped)]
    cols = [("script", "text"), ("processes", "text", "processes"),
            ("samples", "text", "images/rank"),
            ("same", "text", "ranks agree?"),
            ("checksum", lambda v: "-" if v is None else f"{v:.6f}", "checksum"),
            ("spread", "number", "spread"),
            ("acc", "percent", "test acc"), ("img_s", "count", "images/s"),
            ("seconds", "time", "launch, wall")]
    notes = ["checksum: the sum of rank 0's final weights (runs that trained alike agree); spread: the largest "
             "difference between two ranks' checksums (0: identical)",
             "images/s: summed over the ranks, the loop's first steps included (indicative only); launch, wall: "
             "start-up and imports included"]
    notes = [s.line for s in skipped] + notes
    return Table(cols, [r.row() for r in runs], title=title, notes=notes)
