"""The repair exercise of notebook 7: a DDP script with bugs, and a check that runs it.

``source_code/handson/broken_ddp.py`` runs to the end and prints a loss and an accuracy, yet
it is wrong in five ways. :func:`start_exercise` copies it to a file the learner edits;
:func:`check` runs that file with 2 processes (torchrun, a timeout) and judges each bug **by
what the run did**, never by reading the code:

=========  ===========================================================================
shards     the ranks trained on disjoint samples in every epoch (no overlap)
order      each rank's samples came in a new order every epoch (``set_epoch``)
weights    all ranks held the same weights after the first step and at the end
lr         the optimizer's rate at every step followed the rule the script states
           (``--lr-scaling`` none, linear or sqrt, ``--lr-warmup-epochs``)
loss       the loss rank 0 reports is the mean over the ranks, not its own
=========  ===========================================================================

What the run did is recorded by :func:`probe`, one small call the script makes at a few
places (the samples of a step, the weights, the learning rate, the loss it reports). It
writes each event as a worker report (:mod:`ddlab.base.worker_report`: one JSON line, its
``kind`` the event) to a file per rank in the folder named by ``DDLAB_PROBE_DIR`` when the
check sets it, and does nothing otherwise (a file, not standard output: a run records an event
per step, which the learner's own output need not show). :func:`diagnose` turns those records into verdicts; it is pure, so
the tests give it records directly.

A script that crashes or hangs gets one message with the tail of its output, never a
traceback of the check's own.
"""
from __future__ import annotations

import glob
import html
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from typing import Optional, Sequence

from ddlab.base import worker_report
from ddlab.training import convergence
from ddlab.base.paths import REPO_ROOT, SOURCE_DIR

PROBE_ENV = "DDLAB_PROBE_DIR"
EXERCISE = os.path.join(SOURCE_DIR, "handson", "broken_ddp.py")
SOLUTION = os.path.join(SOURCE_DIR, "handson", "solution_ddp.py")
SCRATCH_DIR = os.path.join(REPO_ROOT, "scratch")
# The sizes the check runs with: small, but two epochs (to see the order change) of several steps.
CHECK_ARGS = {"--epochs": 2, "--batch-size": 50, "--lr": 0.05, "--train-samples": 1000, "--test-samples": 500}
FIXED, WRONG, NOT_YET = "fixed", "still wrong", "not judged yet"


# ----------------------------------------------------------------------------- in the script
def probe(event: str, **values) -> None:
    """Record one event of a training run for :func:`check` (nothing without ``DDLAB_PROBE_DIR``).

    Values are stored as small JSON: a model as the sum of its weights (a checksum), an
    optimizer as the learning rate of its first parameter group, a tensor as a list."""
    folder = os.environ.get(PROBE_ENV)
    if not folder:
        return
    rank = _rank()
    os.makedirs(folder, exist_ok=True)      # a launch copied from the check's printed line may name a gone folder
    record = {}
    for key, value in values.items():
        if hasattr(value, "parameters"):
            value = sum(p.detach().double().sum().item() for p in value.parameters())
        elif hasattr(value, "param_groups"):
            value = value.param_groups[0]["lr"]
        elif hasattr(value, "tolist"):
            value = value.tolist()
        record[key] = value
    with open(os.path.join(folder, f"rank{rank}.jsonl"), "a", encoding="utf-8") as f:
        f.write(worker_report.encode(event, rank=rank, **record) + "\n")


def _rank() -> int:
    for var in ("RANK", "HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 0


# ----------------------------------------------------------------------------- verdicts
BUGS = (
    ("shards", "Each rank trains on its own shard"),
    ("order", "A new order every epoch"),
    ("weights", "The same weights on every rank"),
    ("lr", "The learning rate follows the stated rule"),
    ("loss", "The reported loss is the mean over the ranks"),
)


@dataclass
class Verdict:
    bug: str
    title: str
    status: str          # FIXED, WRONG or NOT_YET
    why: str

    @property
    def fixed(self) -> bool:
        return self.status == FIXED


@dataclass
class Report:
    """The verdict on each bug (``verdicts``), or why the script could not be judged (``failure``)."""
    script: str
    verdicts: list
    failure: str = ""
    output: str = ""

    @property
    def all_fixed(self) -> bool:
        return not self.failure and all(v.fixed for v in self.verdicts)

    def status(self, bug: str) -> str:
        for v in self.verdicts:
            if v.bug == bug:
                return v.status
        raise KeyError(f"no bug {bug!r}; the bugs are {', '.join(b for b, _ in BUGS)}")

    def summary(self) -> str:
        if self.failure:
            return f"{self.script}: could not be judged. {self.failure}"
        if self.all_fixed:
            return f"{self.script}: every bug is fixed. Well done."
        left = sum(1 for v in self.verdicts if not v.fixed)
        return f"{self.script}: {left} of {len(self.verdicts)} still to fix."

    def __str__(self) -> str:
        lines = [self.summary()]
        for v in self.verdicts:
            lines.append(f"  [{v.status}] {v.title}: {v.why}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        colour = {FIXED: "#1b7837", WRONG: "#b2182b", NOT_YET: "#8c6d1f"}
        mark = {FIXED: "&#9989;", WRONG: "&#10060;", NOT_YET: "&#9203;"}
        head = f"<p><b>{html.escape(self.summary())}</b></p>"
        if self.failure:
            return head
        rows = "".join(
            f"<tr><td>{mark[v.status]}</td><td style='text-align:left'><b>{html.escape(v.title)}</b></td>"
            f"<td style='color:{colour[v.status]}'>{v.status}</td>"
            f"<td style='text-align:left'>{html.escape(v.why)}</td></tr>" for v in self.verdicts)
        return head + f"<table>{rows}</table>"


def _close(a: float, b: float, rel: float = 1e-5) -> bool:
    return abs(a - b) <= rel * max(1.0, abs(a), abs(b))


def _by_rank(events: Sequence[dict], event: str) -> dict:
    out: dict = {}
    for e in events:
        if e.get("kind") == event:
            out.setdefault(int(e["rank"]), []).append(e)
    return out


def _missing(what: str, call: str) -> str:
    return (f"the run recorded no {what}; keep the line `{call}` of the exercise where it was "
            "(the check reads what it records).")


def diagnose(events: Sequence[dict], world: int, base_lr: float, train_samples: int) -> list:
    """The :class:`Verdict` on each of :data:`BUGS` from the probe records (worker reports,
    their ``kind`` the event) of one run of
    ``world`` processes started with learning rate ``base_lr`` on ``train_samples`` images."""
    titles = dict(BUGS)
    steps = _by_rank(events, "step")
    epochs = _samples_by_epoch(steps)
    verdict = {}
    verdict["shards"], shards_ok = _shards_verdict(steps, epochs, world, train_samples)
    verdict["order"] = _order_verdict(epochs, shards_ok)
    verdict["weights"] = _weights_verdict(steps, events, world)
    verdict["lr"] = lr_verdict(steps, events, world, base_lr)
    verdict["loss"] = _loss_verdict(events, world, shards_ok)
    return [Verdict(key, titles[key], *verdict[key]) for key, _ in BUGS]


def _samples_by_epoch(steps: dict) -> dict:
    """epochs[epoch][rank]: the sample indices that rank trained on in that epoch, in order."""
    epochs: dict = {}
    for rank, evs in steps.items():
        for e in evs:
            epochs.setdefault(int(e["epoch"]), {}).setdefault(rank, []).extend(int(i) for i in e["indices"])
    return epochs


def _shards_verdict(steps: dict, epochs: dict, world: int, train_samples: int) -> tuple:
    """((status, why), shards_ok) for the shards: in every epoch no sample on two ranks, and the
    ranks together on most of the data. ``shards_ok`` is None when the run recorded too little
    to judge."""
    if len(steps) < world or not epochs:
        return (NOT_YET, _missing("samples per step for every rank",
                                  'probe("step", epoch=epoch, indices=idx, model=model, optimizer=optimizer)')), None
    problem = ""
    for ep in sorted(epochs):
        sets = {r: set(v) for r, v in epochs[ep].items()}
        ranks = sorted(sets)
        shared = set.intersection(*sets.values()) if len(sets) == world else set()
        overlap = {(a, b): len(sets[a] & sets[b]) for i, a in enumerate(ranks) for b in ranks[i + 1:]}
        worst = max(overlap.items(), key=lambda kv: kv[1]) if overlap else None
        union = set().union(*sets.values())
        if worst and worst[1] > 0:
            (a, b), n = worst
            same = " (every one of them: the same data)" if len(shared) == len(union) else ""
            problem = (f"in epoch {ep} ranks {a} and {b} both trained on {n} of the same images{same}; "
                       f"each rank saw {len(sets[a])} images of {train_samples}. Give each rank its own shard "
                       "(DistributedSampler, with the same seed on every rank).")
            break
        if len(union) < 0.9 * train_samples:
            problem = (f"in epoch {ep} the ranks together trained on only {len(union)} of the "
                       f"{train_samples} images: the shards leave data out.")
            break
    if problem:
        return (WRONG, problem), False
    return (FIXED, f"disjoint shards in every epoch, together {len(union)} of {train_samples} images."), True


def _order_verdict(epochs: dict, shards_ok: Optional[bool]) -> tuple:
    """(status, why) for the order: each rank's sequence of samples changes from one epoch to
    the next (judged only once the shards are right)."""
    if shards_ok is None:
        return NOT_YET, "needs the samples per step (see above)."
    if len(epochs) < 2:
        return NOT_YET, "the run had fewer than 2 epochs; run it with --epochs 2 or more."
    if not shards_ok:
        return NOT_YET, ("judged once the shards are right: with a DistributedSampler, call "
                         "sampler.set_epoch(epoch) at the start of every epoch.")
    repeats = [(r, ep) for ep in sorted(epochs)[1:] for r in sorted(epochs[ep])
               if epochs[ep][r] == epochs.get(ep - 1, {}).get(r)]
    if repeats:
        r, ep = repeats[0]
        return WRONG, (f"rank {r} trained on the same images in the same order in epochs {ep - 1} "
                       f"and {ep}: the sampler shuffles by its epoch number, so call "
                       "sampler.set_epoch(epoch) at the start of every epoch.")
    return FIXED, "every rank's samples came in a new order each epoch."


def _weights_verdict(steps: dict, events: Sequence[dict], world: int) -> tuple:
    """(status, why) for the weights: the checksum after the first step and after the last one
    equal on every rank; when they differ after the first step, the ``start`` records tell
    weights never broadcast from gradients never averaged."""
    first = {r: evs[0]["model"] for r, evs in steps.items() if evs and "model" in evs[0]}
    last = {r: evs[-1]["model"] for r, evs in steps.items() if evs and "model" in evs[-1]}
    start = {r: evs[0]["model"] for r, evs in _by_rank(events, "start").items() if "model" in evs[0]}
    if len(first) < world:
        return NOT_YET, _missing("weights after a step for every rank", 'probe("step", ..., model=model, ...)')

    def spread(d):
        return max(d.values()) - min(d.values())
    same_first = all(_close(v, first[0], 1e-6) for v in first.values())
    same_last = all(_close(v, last[0], 1e-6) for v in last.values())
    if same_first and same_last:
        return FIXED, "all ranks held the same weights after the first step and at the end."
    if not same_first:
        started_apart = len(start) == world and not all(_close(v, start[0], 1e-6) for v in start.values())
        cause = ("they started from different random weights and nothing copied rank 0's to the others: "
                 "broadcast them (DDP does when it wraps the model), or seed the model's initialisation "
                 "alike on every rank" if started_apart else
                 "they started alike, so their gradients were not averaged before the step")
        return WRONG, f"after the first step the ranks' weights differ (checksums spread {spread(first):.3g}): {cause}."
    return WRONG, (f"equal after the first step, but different at the end (checksums "
                   f"spread {spread(last):.3g}): some later steps were not averaged.")


def _loss_problem(losses: dict) -> tuple:
    """(problem, all_equal): what is wrong with the loss rank 0 reported against the mean of the
    ranks' own losses in the first epoch where they disagree ("" when none), and whether every
    rank had the same loss in the epochs looked at."""
    problem, all_equal = "", True
    for e0 in losses[0]:
        ep = e0["epoch"]
        locals_ = [next((e["local"] for e in losses[r] if e["epoch"] == ep), None) for r in sorted(losses)]
        if any(v is None for v in locals_):
            return f"not every rank recorded its loss in epoch {ep}.", all_equal
        mean = sum(locals_) / len(locals_)
        all_equal = all_equal and all(_close(v, locals_[0]) for v in locals_)
        reported = e0["reported"]
        if _close(reported, mean):
            continue
        if _close(reported, locals_[0]):
            problem = (f"in epoch {ep} rank 0 reported its own loss {reported:.4f}; the mean over the "
                       f"ranks is {mean:.4f}. Average it (all_reduce, then divide by the world size).")
        elif _close(reported, sum(locals_)):
            problem = (f"in epoch {ep} rank 0 reported {reported:.4f}, the sum over the ranks: divide it "
                       f"by the world size (the mean is {mean:.4f}).")
        else:
            problem = f"in epoch {ep} rank 0 reported {reported:.4f}; the mean over the ranks is {mean:.4f}."
        return problem, all_equal
    return problem, all_equal


def _loss_verdict(events: Sequence[dict], world: int, shards_ok: Optional[bool]) -> tuple:
    """(status, why) for the loss: what rank 0 reports is the mean of the ranks' own losses in
    every epoch (equal losses on every rank are judged only once the shards differ)."""
    losses = _by_rank(events, "loss")
    if len(losses) < world or 0 not in losses:
        return NOT_YET, _missing("loss for every rank", 'probe("loss", epoch=epoch, local=..., reported=...)')
    problem, all_equal = _loss_problem(losses)
    if problem:
        return WRONG, problem
    if all_equal and not shards_ok:
        return NOT_YET, ("every rank had the same loss, so the mean and rank 0's own agree: "
                         "judged once the ranks train on different shards.")
    return FIXED, "rank 0 reported the mean of the ranks' losses in every epoch."


def _rule_text(rule: str, warmup_epochs: float, warm_steps: int) -> str:
    warm = f" after a warm-up of {warmup_epochs:g} epoch(s) ({warm_steps} steps)" if warm_steps else ", no warm-up"
    return f"--lr-scaling {rule}{warm}"


def lr_verdict(steps: dict, events: Sequence[dict], world: int, base_lr: float) -> tuple:
    """(status, why) for the learning rate: the rate recorded at every step of the lowest rank
    against the rule the script states in its ``rule`` record (``scaling``: none, linear or sqrt,
    the rate of one process ``lr`` times 1, ``world`` or sqrt(``world``); ``warmup_epochs``: a
    straight ramp from ``lr`` to that rate, :func:`ddlab.training.convergence.lr_at`). A script
    that states no rule is held to the linear rule without warm-up. A rate one step ahead of
    the schedule (a scheduler stepped before the probe) counts as following it."""
    rank = min(steps) if steps else None
    used = [e["optimizer"] for e in steps.get(rank, []) if "optimizer" in e]
    if not used:
        return NOT_YET, _missing("learning rate", 'probe("step", ..., optimizer=optimizer)')
    stated = next((e for e in events if e.get("kind") == "rule"), None)
    rule = (stated or {}).get("scaling", "linear")
    base = float((stated or {}).get("lr", base_lr))
    warmup_epochs = float((stated or {}).get("warmup_epochs") or 0.0)
    if rule not in convergence.LR_RULES:
        return WRONG, f"the script states --lr-scaling {rule!r}; the rules are {', '.join(convergence.LR_RULES)}."
    first_epoch = steps[rank][0].get("epoch")
    per_epoch = sum(1 for e in steps[rank] if e.get("epoch") == first_epoch)
    warm = convergence.warmup_steps(warmup_epochs, per_epoch)
    peak = convergence.peak_lr(base, rule, world, 1)
    claim = (f"the script states {_rule_text(rule, warmup_epochs, warm)}" if stated else
             'the script states no rule (keep its probe("rule", ...) line), so the linear rule applies')
    want = [convergence.lr_at(s, base, peak, warm) for s in range(len(used) + 1)]
    bad = next((s for s, lr in enumerate(used) if not (_close(lr, want[s], 1e-9) or _close(lr, want[s + 1], 1e-9))),
               None)
    if bad is None:
        ramp = (f"from {base:g} to {peak:.4g} over {warm} steps, then {peak:.4g}" if warm else
                f"{peak:.4g} at every step")
        note = (" (the one-process rate, as stated; notebook 9 measures what each rule does to the model)"
                if rule == "none" else "")
        return FIXED, f"{claim}, and the optimizer used {ramp}{note}."
    lr = used[bad]
    others = [r for r in convergence.LR_RULES if r != rule and _close(lr, convergence.peak_lr(base, r, world, 1), 1e-9)]
    hint = (f" That is the rate --lr-scaling {others[0]} gives: apply the rule the script states, or state the one "
            "it follows." if others else "")
    return WRONG, (f"{claim}: with --lr {base:g} and {world} processes the rate at step {bad} "
                   f"is {want[bad]:.4g}, but the optimizer used {lr:.4g}.{hint}")


# ----------------------------------------------------------------------------- the exercise
def start_exercise(folder: Optional[str] = None, name: str = "my_ddp.py", reset: bool = False) -> str:
    """Copy the broken script to ``folder/name`` (default: the course's ``scratch/`` folder)
    for the learner to edit, and return its path. An existing copy is kept (your edits are
    never overwritten) unless ``reset``."""
    folder = folder or SCRATCH_DIR
    os.makedirs(folder, exist_ok=True)
    target = os.path.join(folder, name)
    if reset or not os.path.exists(target):
        shutil.copyfile(EXERCISE, target)
    return target


def _args(values: dict) -> list:
    out = []
    for k, v in values.items():
        out += [k, str(v)]
    return out


_ERROR_LINE = re.compile(r"^\s*(?:\[[^\]]*\](?:<\w+>)?:)?\s*((?:[A-Za-z_][\w.]*(?:Error|Exception)|SystemExit)\b.*)$")


def worker_error(output: str, script: str) -> str:
    """': <the last error a worker printed> (<file>, line <n>: <code>)' from a failed run's
    output, or "" when there is none: the launcher's own summary comes last and hides it."""
    lines = output.splitlines()
    error, where = "", ""
    base = os.path.basename(str(script))
    for i, line in enumerate(lines):
        m = _ERROR_LINE.match(line)
        if m and "ChildFailedError" not in m.group(1):      # torchrun's own summary is not the worker's error
            error = m.group(1).strip()
        f = re.search(r'File "([^"]+)", line (\d+)', line)
        if f and os.path.basename(f.group(1)) == base:
            # the next line without its launcher prefix ("[1]<stderr>:", "[rank1]:")
            code = re.sub(r"^\[[^\]]*\](?:<\w+>)?:", "", lines[i + 1]).strip() if i + 1 < len(lines) else ""
            where = f" ({base}, line {f.group(2)}: {code})"
    return f": {error}{where}" if error else ""


def check(script: str, timeout: float = 240.0, nproc: int = 2, plan_=None, show_command: bool = True) -> Report:
    """Run ``script`` with ``nproc`` processes under torchrun and judge each bug by what it did
    (``show_command``: print the launch first, as one line to copy into a shell).

    Returns a :class:`Report` (shown as a table in Jupyter). A script that cannot be found,
    crashes or hangs gets a report whose ``failure`` says so with the tail of its output."""
    from ddlab.course import handson
    from ddlab.measure import launch, rank_failures
    name = os.path.basename(str(script))
    if not isinstance(script, (str, os.PathLike)) or not os.path.isfile(script):
        return Report(name, [], failure=f"there is no file {script!r}; start_exercise() makes your copy.")
    p = plan_ or handson.plan()
    with tempfile.TemporaryDirectory(prefix="ddlab-probe-") as probe_dir:
        env = dict(p.env)
        env[PROBE_ENV] = probe_dir
        env["PYTHONPATH"] = handson.python_path()
        argv = [os.path.abspath(script), *_args(CHECK_ARGS)]
        if show_command:     # what runs, as one line to copy into a shell (the probe folder is made if missing)
            print(launch.shell_line("torchrun", nproc, argv, env, python=sys.executable), flush=True)
        try:
            res = launch.run(argv, launcher="torchrun", nproc=nproc,
                             env=env, timeout=timeout, check=False, python=sys.executable)
        except launch.LaunchTimeout as exc:
            tail = exc.result.tail(15) if exc.result else ""
            return Report(name, [], output=exc.result.output if exc.result else "",
                          failure=f"it did not finish within {timeout:.0f} s and was stopped (a rank waiting in a "
                                  f"collective the others never reached?). Last lines of its output:\n{tail}")
        except launch.LaunchError as exc:
            return Report(name, [], failure=f"it could not be started: {str(exc).splitlines()[0]}")
        if not res.ok:
            first = rank_failures.describe(rank_failures.first_failure(res))   # which rank died, where, how
            return Report(name, [], output=res.output,
                          failure=(f"{first}\n" if first else "") +
                                  f"it stopped with exit code {res.returncode}{worker_error(res.output, script)}. "
                                  f"Last lines of its output:\n{res.tail(15)}")
        events = []
        for f in sorted(glob.glob(os.path.join(probe_dir, "rank*.jsonl"))):
            with open(f, encoding="utf-8") as fh:
                events += worker_report.parse(fh.read())
    verdicts = diagnose(events, nproc, CHECK_ARGS["--lr"], CHECK_ARGS["--train-samples"])
    return Report(name, verdicts, output=res.output)
