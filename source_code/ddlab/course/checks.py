"""Exercise checks for the notebooks: each answers right or wrong *and says why*.

* :func:`check_best_worst_pair` - notebook 2, section 3: name the best and the worst GPU
  pair of a machine from its ``nvidia-smi topo -m`` matrix.
* :func:`check_path_ordering` - notebook 2, section 6: predict the order of the three NCCL
  paths (default, shm, socket) before running the experiment.
* :data:`QUIZ`, :func:`check_quiz_answer` and :func:`quiz` - the self-check quiz at the end
  of notebooks; :data:`QUIZZES` holds each notebook's questions (``quiz(3)`` shows notebook 3's,
  ``quiz(DATA_PARALLEL_QUIZ)`` a tuple of questions).
* :func:`check_p2p_diagnosis` - name the slow GPU and the asymmetric pair of a p2p
  bandwidth matrix (answers that name no GPU of the matrix get the valid choices, not an error).

Every check returns a :class:`CheckResult`; it is truthy when the answer is right and
prints as a sentence (in Jupyter: a coloured box that starts "Right" or "Not yet"). A
learner's typo (a GPU that is not on the machine, an unknown path name) is an answer too: the
result says what was wrong and lists the valid choices, and never raises. The parsers below
(:func:`parse_pair`, :func:`parse_ordering`) still raise ``ValueError`` for library callers.

Length (about 760 lines): about half is data, the quiz questions of every notebook with their
explanations; the checks themselves are short. The quiz data is the part to move out next.
"""
from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from typing import Optional

from ddlab.system import nccl

from ddlab.base.units import format_count


# --------------------------------------------------------------------------- results
def inline_html(text: str) -> str:
    """The inline Markdown the checks and the quiz use, as HTML: `code`, **bold**, *italic*;
    everything else escaped. Widgets (ipywidgets.HTML) do not render Markdown themselves."""
    out = []
    for i, part in enumerate(re.split(r"`([^`]*)`", text)):
        if i % 2:
            out.append(f"<code>{html.escape(part)}</code>")
            continue
        part = html.escape(part, quote=False)
        part = re.sub(r"\*\*(\S(?:.*?\S)?)\*\*", r"<b>\1</b>", part)
        part = re.sub(r"(?<![\w*])\*(\S(?:.*?\S)?)\*(?![\w*])", r"<i>\1</i>", part)
        out.append(part)
    return "".join(out)


# Plain words and colours, no emoji: an emoji glyph shows as an empty box on a machine
# without an emoji font.
_VERDICT_STYLE = {True: ("Right", "#1b7837", "#eef7ee"), False: ("Not yet", "#b2182b", "#fbeeee")}


def verdict_html(correct: bool, message: str) -> str:
    """A check's message as a small box: a bold coloured "Right" / "Not yet", then the text."""
    word, colour, background = _VERDICT_STYLE[bool(correct)]
    message = re.sub(r"^(?:Right|Not quite)[.:]\s*", "", message)   # the label says it already
    return (f"<div style='border-left:4px solid {colour};background:{background};padding:4px 8px'>"
            f"<b style='color:{colour}'>{word}:</b> {inline_html(message)}</div>")


@dataclass
class CheckResult:
    correct: bool
    message: str

    def __bool__(self) -> bool:
        return self.correct

    def __str__(self) -> str:
        return self.message

    def _repr_html_(self) -> str:
        return verdict_html(self.correct, self.message)


# --------------------------------------------------------------------------- GPU pairs
# Link quality, best first, as `ddlab.system.topology` ranks it: more NVLinks beat fewer beat PIX
# beat PXB beat PHB beat NODE beat SYS. Kept here as a key on `.kind` and `.nvlinks` so the
# check explains itself with the same words the legend uses.
KIND_ORDER = {"NVLINK": 6, "PIX": 5, "PXB": 4, "PHB": 3, "NODE": 2, "SYS": 1}

KIND_WORDS = {
    "PIX": "no NVLink; both GPUs sit under one PCIe switch, so peer-to-peer stays inside that switch",
    "PXB": "no NVLink; the path crosses several PCIe switches but not the CPU",
    "PHB": "no NVLink; the path goes up to the CPU's PCIe host bridge and back down",
    "NODE": "no NVLink; the path crosses two PCIe host bridges within one NUMA node",
    "SYS": ("no NVLink; the path crosses the SMP interconnect between NUMA nodes (QPI/UPI), where peer "
            "access is often unavailable and data is staged through host memory"),
}


def _quality(link) -> tuple:
    kind = str(link.kind).upper()
    if kind not in KIND_ORDER:
        raise ValueError(f"unknown link kind {link.kind!r} (label {getattr(link, 'label', '?')!r})")
    return (KIND_ORDER[kind], int(link.nvlinks or 0) if kind == "NVLINK" else 0)


def describe_link(link) -> str:
    """'NV2: two bonded NVLinks' / 'SYS: no NVLink; the path crosses ...'."""
    kind = str(link.kind).upper()
    if kind == "NVLINK":
        n = int(link.nvlinks)
        count = {1: "one NVLink", 2: "two bonded NVLinks", 3: "three bonded NVLinks",
                 4: "four bonded NVLinks"}.get(n, f"{n} bonded NVLinks")
        return f"{link.label} ({count}, {n} x 25 GB/s per direction on V100 to H200)"
    return f"{link.label} ({KIND_WORDS.get(kind, kind)})"


def parse_pair(pair) -> tuple:
    """(0, 3) from (0, 3), [3, 0], "0-3", "GPU0-GPU3", "0,3" or "GPU0 GPU3"."""
    if isinstance(pair, str):
        nums = re.findall(r"\d+", pair)
        if len(nums) != 2 or re.sub(r"(?i)gpu|\d+|[\s,\-–—/:&]|and", "", pair):
            raise ValueError(f"a GPU pair is two GPU numbers, like (0, 3) or 'GPU0-GPU3'; got {pair!r}")
        a, b = int(nums[0]), int(nums[1])
    else:
        try:
            a, b = pair
            a, b = int(a), int(b)
        except (TypeError, ValueError):
            raise ValueError(f"a GPU pair is two GPU numbers, like (0, 3) or 'GPU0-GPU3'; got {pair!r}") from None
    if a == b:
        raise ValueError(f"a pair needs two different GPUs; got GPU{a} twice")
    return (min(a, b), max(a, b))


def _name(pair) -> str:
    return f"GPU{pair[0]}–GPU{pair[1]}"


def _all_pairs(topology) -> list:
    gpus = list(topology.gpus)
    return [(gpus[i], gpus[j]) for i in range(len(gpus)) for j in range(i + 1, len(gpus))]


def _list(pairs, limit: int = 6) -> str:
    names = [_name(p) for p in pairs]
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def check_best_worst_pair(topology, best, worst) -> CheckResult:
    """Is ``best`` one of the best-connected GPU pairs of ``topology`` and ``worst`` one of
    the worst? Ties count as right. The message gives the links and the reason. ``None`` for
    either answer means "not answered yet": the result says so and gives nothing away."""
    pairs = _all_pairs(topology)
    if not pairs:
        raise ValueError("this topology has fewer than two GPUs: there is no pair to choose")
    if best is None and worst is None:
        # The exercise cell starts empty so that running it does not give the answer away.
        return CheckResult(False, "No answer yet: set my_best and my_worst to a pair each, for example (0, 1) "
                                  "or 'GPU0-GPU1', and run the cell again.")
    gpus = ", ".join(f"GPU{g}" for g in topology.gpus)
    answers = {}
    for name, given in (("my_best", best), ("my_worst", worst)):
        if given is None:
            continue
        try:
            pair = parse_pair(given)
        except ValueError as exc:
            return CheckResult(False, f"{name} = {given!r} is not a GPU pair: {exc}. This machine's GPUs are "
                                      f"{gpus}.")
        missing = [g for g in pair if g not in topology.gpus]
        if missing:
            return CheckResult(False, f"{name} = {given!r} names GPU{missing[0]}, which is not on this machine. "
                                      f"Choose two of {gpus}, for example ({topology.gpus[0]}, "
                                      f"{topology.gpus[1]}) or 'GPU{topology.gpus[0]}-GPU{topology.gpus[1]}'.")
        answers[name] = pair
    q = {p: _quality(topology.link(*p)) for p in pairs}
    top, bottom = max(q.values()), min(q.values())
    best_pairs = [p for p in pairs if q[p] == top]
    worst_pairs = [p for p in pairs if q[p] == bottom]
    link = lambda p: topology.link(*p)  # noqa: E731 - a short alias keeps the sentences readable

    if top == bottom:
        ok = True
        msgs = [f"Every pair on this machine has the same link, {describe_link(link(pairs[0]))}, so any pair is "
                f"both the best and the worst: on such a machine, which GPUs you pick does not matter."]
        return CheckResult(ok, " ".join(msgs))

    def verdict(label: str, pick: tuple, right_pairs: list, quality: int, extreme: str, alike: str,
                beaten: str) -> tuple:
        """(right?, sentence) for one answer: the best or the worst pair."""
        if q[pick] == quality:
            others = [p for p in right_pairs if p != pick]
            return True, (f"{label}: right. {_name(pick)} is {describe_link(link(pick))}, {extreme}"
                          + (f" ({alike}: {_list(others)})." if others else "."))
        r = right_pairs[0]
        return False, (f"{label}: not quite. {_name(pick)} is {describe_link(link(pick))}, but {_name(r)} is "
                       f"{describe_link(link(r))}, which is {beaten}"
                       + (f"; the {label.lower()} pairs are {_list(right_pairs)}." if len(right_pairs) > 1 else "."))

    msgs, oks = [], []
    if "my_best" in answers:
        ok, msg = verdict("Best", answers["my_best"], best_pairs, top, "the best link on this machine",
                          "equally good", "better")
        msgs.append(msg)
        oks.append(ok)
    if "my_worst" in answers:
        ok, msg = verdict("Worst", answers["my_worst"], worst_pairs, bottom, "the slowest path here",
                          "equally slow", "slower")
        msgs.append(msg)
        oks.append(ok)
    missing = [n for n in ("my_best", "my_worst") if n not in answers]
    if missing:
        # Half an answer: feedback on the half given, nothing about the other half.
        msgs.append(f"Still missing: {missing[0]} (the {missing[0][3:]} pair). Set it and run the cell again.")
        return CheckResult(False, " ".join(msgs))
    return CheckResult(all(oks), " ".join(msgs))


# --------------------------------------------------------------------------- NCCL paths
# The three paths the course compares, their names, aliases and reasons: ddlab.system.nccl.
PATHS = nccl.COMPARED


def _compared(name) -> Optional[str]:
    """The compared path a name or alias means (``"tcp"`` -> ``"socket"``), or None."""
    try:
        key = nccl.get(str(name).strip()).name
    except ValueError:
        return None
    return key if key in PATHS else None


def parse_ordering(prediction) -> tuple:
    """('default', 'shm', 'socket') from a sequence of path names or 'default > shm > socket'."""
    if isinstance(prediction, str):
        parts = [p for p in re.split(r"\s*(?:>|,|;)\s*", prediction.strip()) if p]
    else:
        try:
            parts = list(prediction)
        except TypeError:
            parts = None
    if parts is None or not all(isinstance(p, str) for p in parts):
        raise ValueError(f"give the three paths fastest first, e.g. 'default > shm > socket'; got {prediction!r}")
    names = []
    for p in parts:
        key = _compared(p)
        if key is None:
            raise ValueError(f"unknown path {p!r}; the paths are default, shm and socket")
        names.append(key)
    if sorted(names) != sorted(PATHS):
        raise ValueError(f"name each of default, shm and socket exactly once, fastest first; got {prediction!r}")
    return tuple(names)


def measured_rates(measured) -> dict:
    """path -> images/s from a dict, or from an experiment result whose ``rows`` carry
    ``path`` and ``images_per_s`` (ddlab.training.experiments.nccl_path_comparison). Rows that are not
    an NCCL path (the one-worker baseline) or that failed are left out."""
    if hasattr(measured, "rows"):
        measured = {r["path"]: r["images_per_s"] for r in measured.rows
                    if r.get("path") in PATHS and not r.get("error") and r.get("images_per_s") is not None}
    if not isinstance(measured, dict):
        raise ValueError(f"measured must map path -> images/s, or be an experiment result; got {type(measured).__name__}")
    unknown = [k for k in measured if _compared(k) is None]
    if unknown:
        raise ValueError(f"measured results name unknown paths {unknown}; expected default, shm, socket")
    return {_compared(k): float(v) for k, v in measured.items()}


def check_path_ordering(prediction, measured=None, noise: float = 0.05, unit: str = "images/s") -> CheckResult:
    """Check a prediction of the NCCL path ordering (fastest first) for a communication-heavy
    model on GPUs joined by NVLink, and set it beside a measurement when one is given.

    ``measured`` maps path -> images/s (or any higher-is-better rate, named by ``unit``), or
    is the result of ddlab.training.experiments.nccl_path_comparison. Differences smaller than
    ``noise`` (5%) are called a tie: a single run cannot order them. ``prediction=None``
    means "not predicted yet": the result says so and reveals nothing."""
    if prediction is None:
        return CheckResult(False, "No prediction yet: write the three paths fastest first in my_prediction "
                                  "(for example 'socket > shm > default'), run that cell, then this one.")
    try:
        order = parse_ordering(prediction)
    except ValueError as exc:
        return CheckResult(False, f"my_prediction = {prediction!r} is not an ordering of the three paths: {exc}. "
                                  f"The paths are default, shm and socket; write them fastest first, for example "
                                  f"'socket > shm > default'.")
    right = order == PATHS
    if right:
        msg = ["Right: default > shm > socket."]
    else:
        msg = [f"Not quite: you predicted {' > '.join(order)}, but the bandwidth of the three paths orders "
               f"them default > shm > socket."]
    msg.append("Why: " + "; ".join(f"{p} ({nccl.PATHS[p].env_text()}): {nccl.PATHS[p].why}" for p in PATHS) + ".")
    rates = measured_rates(measured) if measured is not None else {}
    if measured is not None and not rates:
        msg.append("No measurement of the paths is available on this machine or in the recordings yet: "
                   "run `ddlab experiment nccl-paths --model wide` on two GPUs to see it.")
    elif measured is not None and len(rates) < 2:
        msg.append(f"The measurement has {' and '.join(rates) or 'no path'} only (CPU processes use gloo, not "
                   f"NCCL, so the paths cannot be compared there): compare with a GPU result.")
    elif rates:
        seen = sorted(rates, key=rates.get, reverse=True)
        fast, slow = rates[seen[0]], rates[seen[-1]]
        spread = (fast - slow) / fast if fast else 0.0
        # images/s are large whole numbers; a bandwidth in GB/s needs its significant digits
        listing = ", ".join(f"{p} {format_count(rates[p])}" for p in seen)
        if spread < noise:
            msg.append(f"Measured ({unit}): {listing}. These are within {noise:.0%} of each other: for this model "
                       f"communication is a small part of each step, so the path hardly matters and a single "
                       f"run cannot order them.")
        else:
            agrees = tuple(seen) == tuple(p for p in order if p in rates)
            msg.append(f"Measured ({unit}): {listing} (fastest first), which "
                       + ("matches your prediction." if agrees else "differs from your prediction."))
    return CheckResult(right, " ".join(msg))


# --------------------------------------------------------------------------- quiz
@dataclass(frozen=True)
class Question:
    prompt: str
    choices: tuple
    answer: int                      # index into choices
    explanation: str
    why_not: dict = field(default_factory=dict)   # index -> why that choice is wrong


QUIZ = (
    Question(
        "A link has latency alpha = 4 us and bandwidth beta = 16 GB/s. For a 64 KiB message, how do the two "
        "terms of T = alpha + n/beta compare?",
        ("the latency term is about ten times the bandwidth term",
         "the bandwidth term is about ten times the latency term",
         "they are within a few percent of each other"), 2,
        "64 KiB = 65,536 bytes; 65,536 B / 16e9 B/s = 4.1 us, 2.4% more than alpha = 4 us: the bandwidth term "
        "is the larger, but only just. The crossover size alpha x beta = 4e-6 s x 16e9 B/s = 64,000 bytes sits "
        "just below 64 KiB = 65,536 bytes.",
        {0: "A factor of ten means a slip of units: 65,536 B / 16e9 B/s is 4.1 us, not 0.41 us.",
         1: "Check the units: 65,536 B / 16e9 B/s is 4.1 us, not 41 us."}),
    Question(
        "Two GPUs are joined by NVLink. You set NCCL_P2P_LEVEL=PIX. What does NCCL use between them?",
        ("PCIe through one switch", "still NVLink", "shared host memory"), 1,
        "NCCL_P2P_LEVEL is a maximum distance for using P2P (LOC < NVL < PIX < PXB < PHB < SYS). NVLink "
        "(NVL) is closer than PIX, so P2P over NVLink stays allowed. Only LOC switches P2P off.",
        {0: "The level does not choose a path; it caps how far apart two GPUs may be for P2P.",
         2: "Shared memory is what NCCL_P2P_LEVEL=LOC (or NCCL_P2P_DISABLE=1) gives."}),
    Question(
        "`nvidia-smi topo -m` shows SYS between GPU0 and GPU5. What does that tell you?",
        ("they share a PCIe switch", "the path crosses the interconnect between NUMA nodes",
         "they are joined by a system NVSwitch"), 1,
        "SYS: the path traverses PCIe and the SMP interconnect between NUMA nodes (QPI/UPI). It is the "
        "slowest label; peer access is often unavailable there and data is staged through host memory.",
        {0: "Sharing one PCIe switch is PIX.", 2: "NVSwitch connections show as NV# (e.g. NV12, NV18)."}),
    Question(
        "Host staging copies GPU0 -> GPU1 without peer access. How many times does the data cross PCIe?",
        ("once", "twice", "never"), 1,
        "Twice: GPU0 -> PCIe -> host memory is one copy, host memory -> PCIe -> GPU1 a second one, with a "
        "stop in host memory between them, and the CPU's driver orchestrates both. A peer-to-peer copy over "
        "PCIe is a single transfer from GPU0 to GPU1 through a PCIe switch or the host bridge, never landing "
        "in host memory; over NVLink it does not touch PCIe at all.",
        {0: "Once would be a peer-to-peer copy over PCIe; host staging makes two copies, each across PCIe.",
         2: "Never is NVLink peer-to-peer; host staging needs host memory, which sits behind PCIe."}),
    Question(
        "Which settings make two GPUs in one machine talk as if they were on different nodes without InfiniBand?",
        ("NCCL_P2P_LEVEL=SYS", "NCCL_P2P_DISABLE=1", "NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1"), 2,
        "With both P2P and shared memory off, NCCL falls back to its network transport (sockets here).",
        {0: "SYS is the widest level: it allows P2P at every distance.",
         1: "With only P2P off, NCCL still uses shared host memory (SHM)."}),
    Question(
        "Why does the small CNN (about 1.2M parameters) barely notice whether NCCL uses NVLink or shared host "
        "memory, while the wide model (about 76M) slows down a lot through host memory?",
        ("its gradients are small, so all-reducing them is a small part of each step",
         "NCCL compresses its gradients", "it does not all-reduce gradients"), 0,
        "About 1.2M fp32 parameters are about 4.8 MB of gradients per step; even at the tens of GB/s that host "
        "memory (one PCIe link) allows, that is a fraction of a millisecond. The wide model's gradients are "
        "tens of times larger, so the bandwidth term n/beta takes over its step. Over TCP sockets, far slower "
        "still, even the CNN's all-reduce can grow comparable with a short step: the share is what matters.",
        {1: "NCCL does not compress; it moves the bytes you give it.",
         2: "Every data-parallel step all-reduces the gradients, whatever the model."}),
    Question(
        "An all-reduce of S bytes on 2 GPUs takes t seconds; nccl-tests reports algbw = S/t. What is its bus "
        "bandwidth busbw?",
        ("the same as algbw", "twice algbw", "half of algbw"), 0,
        "For all-reduce busbw = algbw x 2(n-1)/n: in a ring every rank sends (and receives) 2(n-1)/n x S bytes, so "
        "busbw is the rate each rank's link carries and can be set beside the link's bandwidth. For n = 2 the "
        "factor is 1; for 8 ranks it is 1.75.",
        {1: "The factor 2(n-1)/n approaches 2 only for many ranks; for n = 2 it is 1.",
         2: "Half is the factor of all-gather or reduce-scatter on 2 ranks ((n-1)/n), not of all-reduce."}),
)

# The self-check of notebook 1 (data-parallel training): show it with quiz(DATA_PARALLEL_QUIZ).
DATA_PARALLEL_QUIZ = (
    Question(
        "Four workers each compute the gradient of the mean loss over their own equal shard of a batch. Why do "
        "DDP and Horovod average the four gradients rather than add them?",
        ("the average is the gradient of the mean loss over the whole batch",
         "averaging sends fewer bytes than adding", "adding would overflow float32"), 0,
        "The mean loss of the batch is the mean of the shards' mean losses (equal shards), and the gradient of a "
        "mean is the mean of the gradients. So every worker takes exactly the step one worker would take on the "
        "whole batch; the sum would be a step n times too long.",
        {1: "Adding and averaging send the same bytes: the division by n happens on each rank after the all-reduce.",
         2: "Overflow is not the issue: the sum is simply n times the full-batch gradient, a step n times too long."}),
    Question(
        "A ring all-reduce of a buffer of S bytes runs on n ranks. How many bytes does each rank send?",
        ("S", "2(n-1)/n x S", "(n-1) x S"), 1,
        "The buffer is cut into n chunks of S/n. In each of the n-1 reduce-scatter steps every rank sends one chunk, "
        "and again in each of the n-1 all-gather steps: 2(n-1) x S/n. The factor 2(n-1)/n is 1 for two ranks, 1.5 "
        "for four, 1.75 for eight, and never reaches 2, so adding ranks hardly adds traffic per link.",
        {0: "Only for n = 2, where 2(n-1)/n = 1. For more ranks each sends more than one buffer.",
         2: "(n-1) x S is what the root of the naive reduce-then-broadcast carries, and every rank of all-to-all."}),
    Question(
        "Eight ranks all-reduce by sending everything to rank 0, which adds and sends the sum back. How many "
        "buffers does rank 0's link carry in each direction?",
        ("1", "1.75", "7"), 2,
        "Seven ranks each send rank 0 a whole buffer, and rank 0 sends the sum to each of the seven: 7 buffers in, "
        "7 out, through one link, while the other links carry 1. The time grows with the number of ranks; the "
        "ring spreads the same work over every link.",
        {0: "1 buffer is what each of the other seven ranks sends; the root receives all seven.",
         1: "1.75 = 2(n-1)/n is what each rank sends in a ring all-reduce of eight ranks."}),
    Question(
        "Four workers train 20 steps of batch 64 each; the first 5 are warm-up, and the 15 timed steps take 3 s "
        "between two synchronisations. What is the honest throughput?",
        ("15 x 64 x 4 / 3 = 1,280 images/s", "20 x 64 x 4 / 3 = about 1,707 images/s",
         "60,000 / 3 = 20,000 images/s"), 0,
        "Count only the images processed in the timed interval, by all workers: 15 steps x 64 images x 4 workers, "
        "divided by the 3 s between the synchronisations that bound those steps.",
        {1: "The 5 warm-up steps ran before the clock started; counting them overstates the throughput.",
         2: "The data set size over the time is the mistake older material made: far fewer images ran."}),
    Question(
        "On a machine with 2 CPU cores, each worker uses one thread. What do you expect of 4 workers against 1?",
        ("a speedup close to 4", "a speedup of at most about 2 (efficiency at most about 50%)",
         "the same throughput as 1 worker"), 1,
        "Four workers share two cores: at best two run at once, so the speedup is bounded by about 2 and the "
        "efficiency (speedup / workers) by about 50%, less what the all-reduce and the switching between "
        "processes cost. The workers oversubscribe the cores.",
        {0: "A speedup of 4 needs 4 cores (or GPUs), one per worker.",
         2: "Two cores still run two workers at once; the throughput can rise up to about twice one worker's."}),
)


# Questions that only one notebook's quiz asks (the shared ones are in QUIZ above).
ALPHA_OF_A_CALL = Question(
    "You fit T = alpha + n/beta to an all-reduce sweep and get an alpha far larger than the link's own latency. "
    "Why?",
    ("the link is faulty", "alpha of a collective call also pays for software: launching the operation, "
     "synchronising the ranks, the library's protocol", "the fit cannot be trusted below the crossover size"), 1,
    "A collective called from Python pays a fixed cost per call on top of the wire's latency: the call itself, "
    "the kernel or thread that runs it, the handshake between the ranks. That per-call cost is the alpha the fit "
    "measures; the link's latency is only part of it.",
    {0: "A faulty link shows in beta (the rate), and in errors, not in a large fixed cost per call.",
     2: "Small messages are exactly where alpha is measured best: there the time is almost all alpha."})
RING_BOTTLENECK = Question(
    "An all-reduce on 4 GPUs runs around a ring through them. Which property of the 4 GPUs sets its bandwidth?",
    ("the fastest link among them", "the slowest link on the best ring through them",
     "the sum of all their NVLinks"), 1,
    "Every byte crosses every link of the ring, so the ring runs at the rate of its slowest link. Choose GPUs whose "
    "best ring has the fastest bottleneck; a slow pair that the ring does not use does not matter.",
    {0: "A ring is as fast as its slowest hop, not its fastest.",
     2: "Links the ring does not use carry none of its traffic."})
NODE_LABEL = Question(
    "`nvidia-smi topo -m` shows NODE between two GPUs. What does their path cross?",
    ("the interconnect between two NUMA nodes", "PCIe host bridges within one NUMA node",
     "one PCIe switch"), 1,
    "NODE: the path goes through PCIe and between the PCIe host bridges of one NUMA node. SYS is the label for "
    "crossing between NUMA nodes. NCCL_P2P_LEVEL counts NODE like PHB.",
    {0: "Crossing between NUMA nodes is SYS.", 2: "One PCIe switch is PIX."})
LEVEL_UNSET = Question(
    "NCCL_P2P_LEVEL is not set. Up to which distance does NCCL use P2P?",
    ("always SYS: P2P everywhere", "a level NCCL chooses itself from the architecture and environment",
     "LOC: P2P is off until you set a level"), 1,
    "NCCL's documentation: if NCCL_P2P_LEVEL is not specified, NCCL attempts to select a value optimally based "
    "on the architecture and the environment it runs in. Read NCCL_DEBUG=INFO to see what it chose.",
    {0: "NCCL does not promise P2P at every distance; it decides per machine.",
     2: "Unset, P2P is on where NCCL judges it worthwhile: the default path of this course uses it."})
SUPERLINEAR = Question(
    "Two GPUs train at 2.1 times the images/s of one GPU on the same model. What do you conclude first?",
    ("data parallelism can beat linear scaling", "something differs between the runs: check steps, warm-up, "
     "batch sizes and clocks before believing it", "NVLink adds compute"), 1,
    "Two GPUs do at most twice the work of one. A speedup above 2.0x means the two runs are not alike: a "
    "different number of timed steps, a warm-up left in one timing, a per-GPU batch that runs more efficiently, "
    "clocks or caches that differ, or noise in a single run. Repeat the runs and compare like with like.",
    {0: "Each GPU still does its share of the work; dividing work cannot more than double the rate of two.",
     2: "NVLink moves data; it computes nothing."})
BIDIRECTIONAL = Question(
    "A DGX A100's NVLink is quoted as 600 GB/s per GPU. How much is that per direction?",
    ("600 GB/s", "300 GB/s", "1200 GB/s"), 1,
    "NVIDIA's total counts both directions of all twelve links: 12 x 25 GB/s = 300 GB/s each way. A one-way copy "
    "can approach 300 GB/s; only traffic in both directions at once adds up to 600.",
    {0: "The quoted total adds both directions together.", 2: "That would count both directions twice."})
HOST_STAGED_BOUND = Question(
    "Peer access is off between two NVLink-connected GPUs. What bounds the bandwidth of a copy between them?",
    ("the NVLink between them", "one PCIe link between a GPU and the host", "the GPU's memory bandwidth"), 1,
    "Without peer access the copy is staged through host memory: GPU to host over PCIe, host to GPU over PCIe. "
    "The NVLink stays idle, and at best the copy runs at one PCIe link's rate.",
    {0: "Without peer access the NVLink is not used at all.",
     2: "GPU memory is far faster than the PCIe hops the staged copy has to take."})

# Notebook 6 (hands-on).
NO_SAMPLER = Question(
    "Two processes train with DDP, but the DataLoader has no `DistributedSampler` (`shuffle=True`, the same "
    "seed on both). What does each process train on?",
    ("its own half of the data", "all of the data, in the same order as the other", "nothing: DDP refuses to start"), 1,
    "DDP averages gradients; it does not split the data. Without a sampler every rank iterates the whole data "
    "set, and with the same seed in the same order: two processes do one process's work twice.",
    {0: "Only a DistributedSampler (or your own slicing by rank) gives each rank its own part.",
     2: "DDP starts and trains happily; nothing checks what data each rank reads."})
WHY_BROADCAST = Question(
    "Why does a Horovod script call `hvd.broadcast_parameters`, while a DDP script has no such line?",
    ("DDP copies rank 0's weights to every rank when it wraps the model; Horovod's DistributedOptimizer only "
     "averages gradients", "Horovod initialises weights differently on each rank", "DDP does not need the "
     "ranks to agree"), 0,
    "Averaged gradients give every rank the same update, which keeps equal models equal but never makes "
    "different ones equal. DDP broadcasts in its constructor; with Horovod you broadcast the weights (and the "
    "optimizer state) yourself.",
    {1: "Both build the model with the framework's usual initialisation; what differs is whether it gets "
        "synchronised at the start.",
     2: "Every data-parallel scheme needs identical models on every rank."})
NO_SET_EPOCH = Question(
    "A script uses `DistributedSampler` but never calls `sampler.set_epoch(epoch)`. What happens?",
    ("every epoch repeats the first epoch's order and shards", "the shards overlap", "it fails in epoch 2"), 0,
    "The sampler draws its permutation from its seed plus the epoch number it was told. Never told, it uses "
    "epoch 0 every time: each rank sees the same images in the same order every epoch.",
    {1: "The shards stay disjoint (one permutation, cut by rank); they just never change.",
     2: "Nothing fails: the run is only less random than it should be."})
LINEAR_SCALING = Question(
    "A learning rate of 0.05 was tuned for batch 64 on one process. You now train on 4 processes with batch 64 "
    "each. What does the linear scaling rule give?",
    ("0.05", "0.2", "0.0125"), 1,
    "Each step averages 4 x 64 = 256 images, a 4 times larger batch, so the rule takes a 4 times larger step: "
    "0.2. Large factors usually need a warm-up (the Keras script's LearningRateWarmupCallback) and fail beyond "
    "some batch size; notebook 7 measures where.",
    {0: "Unchanged, each step of 256 images moves as far as one of 64 did: training slows down per image.",
     2: "That divides where the rule multiplies."})
# The self-check of notebook 6, in the order it asks them.
HANDSON_QUIZ = (NO_SAMPLER, WHY_BROADCAST, NO_SET_EPOCH, LINEAR_SCALING)


# The self-check of notebook 7 (convergence at scale).
CONVERGENCE_QUIZ = (
    Question(
        "SGD trains well at learning rate 0.1 with a global batch of 256. You move to 8 workers of 256 images "
        "each. What learning rate does the linear scaling rule give?",
        ("0.1", "0.8", "0.28"), 1,
        "The global batch grows 8x (256 -> 2,048), so the rule multiplies the learning rate by 8: 0.8. "
        "It keeps the update per epoch about the same, because there are 8x fewer steps.",
        {0: "Unscaled, 8x fewer steps of the same size move the weights far less per epoch.",
         2: "0.28 is the square-root rule (0.1 x sqrt 8), not the linear one."}),
    Question(
        "Why does the linear rule usually need a warm-up at large batches?",
        ("the first steps have large, fast-changing gradients, and the full scaled rate from step 0 can make "
         "the loss diverge", "warm-up makes each step faster", "warm-up keeps the ranks' weights identical"), 0,
        "The rule assumes that k small steps move the weights like one step k times larger; early in training "
        "the gradient changes quickly, the assumption fails, and a large rate overshoots. A ramp from the "
        "reference rate to the scaled one over a few epochs gets past that phase.",
        {1: "The step costs the same at any learning rate.",
         2: "The ranks agree because they apply the same averaged gradient; the rate plays no part in that."}),
    Question(
        "The gradient noise scale B_simple = tr(Sigma) / |G|^2 is measured as 500 images. What happens to the "
        "number of optimizer steps needed if you go from a global batch of 4,000 to 8,000?",
        ("it halves", "it hardly falls: far above B_simple, a bigger batch mostly averages noise that was "
         "already small", "it doubles"), 1,
        "Below the noise scale, doubling the batch nearly halves the steps (perfect scaling); well above it, "
        "the gradient is already accurate, so more images per step buy little and cost twice the compute "
        "per step. At a fixed number of epochs that shows as fewer, barely better steps: lower accuracy.",
        {0: "Halving holds only for batches well below the noise scale.",
         2: "The steps needed never grow with the batch; it is the images (epochs) needed that grow."}),
    Question(
        "In a data-parallel run, which of these must be IDENTICAL on every rank?",
        ("the initial weights", "the images of each step", "the dropout masks"), 0,
        "Every rank must start from the same weights (same seed, or rank 0's broadcast) so that applying the "
        "same averaged gradient keeps them identical. The images (disjoint shards from one shared shuffle) "
        "and the dropout masks (a seed per rank) must differ, or the ranks repeat each other's work.",
        {1: "Identical images on every rank waste N-1 workers: the shards must be disjoint.",
         2: "Identical masks make the ranks' gradients more alike than the data warrants; each rank seeds its own."}),
    Question(
        "Two workers process 1.9x the images per second of one, at twice the global batch. Is the time to 88% "
        "test accuracy surely 1.9x shorter?",
        ("yes, throughput decides it", "no: the larger global batch may need more epochs to reach 88%, which "
         "eats into the speedup", "no: two workers always take longer"), 1,
        "Time to accuracy = epochs needed x time per epoch. Throughput shrinks the second factor; a larger "
        "global batch can raise the first. Only measuring the held-out accuracy over time tells which wins.",
        {0: "Throughput alone ignores how many epochs the larger batch needs.",
         2: "Below the noise scale two workers do reach the target sooner; it depends on the batch."}),
)

CASE_STUDIES_QUIZ = (
    Question(
        "A model's one-GPU step takes 2 ms. All-reducing its gradients over the link takes 6 ms, and the "
        "backward pass (about 1.3 ms of the step) is all the all-reduce can hide behind. Two GPUs, same "
        "batch per GPU: faster or slower than one?",
        ("faster, close to 2x: each GPU does half the work", "slower: the 2-GPU step is at least about "
         "2 + (6 - 1.3) = 6.7 ms for twice the images, about 0.6x", "the same: communication and compute overlap "
         "completely"), 1,
        "Speedup = 2 x (one-GPU step) / (two-GPU step). The two-GPU step is the compute plus the part of the "
        "all-reduce nothing hides: 2 + 4.7 = 6.7 ms, so 2 x 2 / 6.7 = 0.6x. When the step is shorter than "
        "the all-reduce of its gradients, the second GPU costs more than it brings.",
        {0: "Each GPU keeps its own batch (weak scaling); the all-reduce is what the second GPU adds.",
         2: "Only the backward pass can hide the all-reduce; the rest of it is exposed."}),
    Question(
        "Over NVLink a tiny model's gradients all-reduce in microseconds, yet its 2-GPU step is still clearly "
        "slower than its 1-GPU step. What does the step model add to explain it?",
        ("the data-parallel wrapper's own fixed cost per step (hooks, bucket bookkeeping, launching and "
         "waiting for the collective)", "NVLink's bandwidth", "the optimizer's learning rate"), 0,
        "A fixed cost per step does not shrink with the model: for a step of a few milliseconds it is a large "
        "share, for a long step a small one. That is why small models scale badly even on the fastest link.",
        {1: "The link's bandwidth is what makes the all-reduce itself cheap here.",
         2: "The learning rate changes what a step does, not how long it takes."}),
    Question(
        "In a p2p bandwidth matrix one GPU is slow with every partner; all other pairs are fast. What do you "
        "check first?",
        ("its PCIe link under load: current vs maximum generation and width (ddlab doctor, nvidia-smi -q -d PCI), "
         "and which NUMA node it sits on", "NCCL_P2P_LEVEL", "the learning rate of the job"), 0,
        "A GPU slow with everyone points at what only that GPU has: its own link (trained at x8 or Gen3), its "
        "place on the other NUMA node, or ACS/IOMMU sending its peer traffic through the root complex.",
        {1: "NCCL_P2P_LEVEL changes how NCCL routes, not what the copy test measures between two GPUs.",
         2: "The p2p test runs no training at all."}),
    Question(
        "Gradient accumulation over 4 micro-batches, with DDP's no_sync on the first 3. What changes?",
        ("one all-reduce per 4 micro-batches: the communication per image falls 4x, and the optimizer sees a "
         "4x larger global batch (revisit the learning rate)", "nothing: DDP all-reduces every backward pass "
         "anyway", "each step all-reduces 4x more bytes"), 0,
        "no_sync skips the all-reduce while gradients accumulate locally; the fourth backward pass all-reduces "
        "the sum once. The bytes per all-reduce stay the same, there are 4x fewer of them per image, and the "
        "update now averages 4x more images: convergence has to be checked on held-out data.",
        {1: "Inside no_sync, DDP's hooks do not launch the all-reduce.",
         2: "The gradient has the model's size whatever the number of micro-batches."}),
)

# Each notebook's quiz, in the order it asks them.
QUIZZES = {
    1: DATA_PARALLEL_QUIZ,
    2: (QUIZ[0], QUIZ[3], ALPHA_OF_A_CALL),
    3: (QUIZ[2], NODE_LABEL, RING_BOTTLENECK),
    4: (QUIZ[1], LEVEL_UNSET, QUIZ[4], QUIZ[5], SUPERLINEAR),
    5: (QUIZ[6], HOST_STAGED_BOUND, BIDIRECTIONAL),
    6: HANDSON_QUIZ,
    7: CONVERGENCE_QUIZ,
    8: CASE_STUDIES_QUIZ,
}


def _choice_index(q: Question, choice) -> int:
    if isinstance(choice, bool):
        raise ValueError("answer with a letter (a, b, c) or a choice number starting at 0")
    if isinstance(choice, int):
        idx = choice
    elif isinstance(choice, str) and len(choice.strip()) == 1 and choice.strip().isalpha():
        idx = ord(choice.strip().lower()) - ord("a")
    else:
        raise ValueError(f"answer with a letter (a, b, c) or a choice number starting at 0; got {choice!r}")
    if not 0 <= idx < len(q.choices):
        raise ValueError(f"this question has choices a to {chr(ord('a') + len(q.choices) - 1)}; got {choice!r}")
    return idx


def questions_of(questions) -> tuple:
    """A quiz's questions: a tuple of :class:`Question` as it is, or a notebook's number
    (:data:`QUIZZES`)."""
    if isinstance(questions, bool):
        raise ValueError(f"a quiz is a notebook number ({', '.join(map(str, QUIZZES))}) or a tuple of questions")
    if isinstance(questions, int):
        if questions not in QUIZZES:
            raise ValueError(f"there is a quiz for notebooks {', '.join(map(str, QUIZZES))}; got {questions!r}")
        return QUIZZES[questions]
    return tuple(questions)


def check_quiz_answer(question: int, choice, questions=QUIZ) -> CheckResult:
    """Check the answer to quiz question ``question`` (1-based) given as a letter or an index;
    ``questions``: the notebook's quiz, as a tuple or the notebook's number (default :data:`QUIZ`).
    A question or a choice that does not exist gets a result saying which ones do."""
    questions = questions_of(questions)
    if isinstance(question, bool) or not isinstance(question, int) or not 1 <= question <= len(questions):
        return CheckResult(False, f"The quiz has questions 1 to {len(questions)}; got {question!r}.")
    q = questions[question - 1]
    try:
        idx = _choice_index(q, choice)
    except ValueError as exc:
        letters = ", ".join(f"{chr(ord('a') + i)}) {c}" for i, c in enumerate(q.choices))
        return CheckResult(False, f"Question {question}: {exc}. The choices are {letters}.")
    if idx == q.answer:
        return CheckResult(True, f"Right. {q.explanation}")
    right = f"{chr(ord('a') + q.answer)}) {q.choices[q.answer]}"
    return CheckResult(False, f"Not quite. {q.why_not.get(idx, '')} The answer is {right}. {q.explanation}".replace("  ", " "))


def quiz_text(questions=QUIZ) -> str:
    questions = questions_of(questions)
    out = []
    for n, q in enumerate(questions, 1):
        out.append(f"{n}. {q.prompt}")
        out += [f"   {chr(ord('a') + i)}) {c}" for i, c in enumerate(q.choices)]
    return "\n".join(out)


def quiz(questions=QUIZ):
    """The quiz as widgets: one set of radio buttons and a Check button per question;
    ``questions``: the notebook's quiz, as a tuple or the notebook's number (default :data:`QUIZ`).

    Without ipywidgets, prints the questions and how to check answers with
    :func:`check_quiz_answer`, and returns None."""
    which = questions if isinstance(questions, int) and not isinstance(questions, bool) else None
    questions = questions_of(questions)
    try:
        import ipywidgets as w
    except ImportError:
        extra = f", {which}" if which is not None else ""
        print(f"ipywidgets is not installed; answer with ddlab.course.checks.check_quiz_answer(question, 'a'{extra}):\n")
        print(quiz_text(questions))
        return None
    boxes = []
    for n, q in enumerate(questions, 1):
        radio = w.RadioButtons(options=[(f"{chr(ord('a') + i)}) {c}", i) for i, c in enumerate(q.choices)],
                               value=None, layout=w.Layout(width="auto"))
        button = w.Button(description="Check")
        out = w.HTML()

        def on_click(_, n=n, radio=radio, out=out):
            if radio.value is None:
                out.value = "<i>pick an answer first</i>"
                return
            r = check_quiz_answer(n, radio.value, questions)
            out.value = verdict_html(r.correct, r.message)

        button.on_click(on_click)
        # ipywidgets.HTML shows HTML, not Markdown: the prompt's `code` is converted here.
        boxes.append(w.VBox([w.HTML(f"<b>{n}.</b> {inline_html(q.prompt)}"), radio, button, out]))
    return w.VBox(boxes)


# --------------------------------------------------------------------------- diagnosing a p2p matrix
def _gpu_answer(answer, valid: list):
    """A GPU label from 3, "3", "GPU3" or "gpu 3"; "none" -> "none"; None when unreadable."""
    if isinstance(answer, str):
        text = answer.strip().lower()
        if text in ("none", "no", "-", ""):
            return "none"
        m = re.fullmatch(r"(?:gpu)?\s*(\d+)", text)
        if not m:
            return None
        answer = int(m.group(1))
    if isinstance(answer, bool) or not isinstance(answer, int):
        return None
    return answer if answer in valid else None


def check_p2p_diagnosis(matrix, outlier, pair, labels=None) -> CheckResult:
    """The learner names the slow (outlier) GPU and the asymmetric pair of a p2p bandwidth
    matrix (:func:`ddlab.measure.p2p.diagnose` has the answer). ``outlier``: a GPU (3, "GPU3") or
    "none"; ``pair``: two GPUs ((0, 1), "GPU0-GPU1", either order) or "none". Partly right
    answers say which half is right; an answer that names no GPU of the matrix gets the
    valid choices; nothing raises for a learner's typo."""
    from ddlab.measure import p2p
    d = p2p.diagnose(matrix, labels)
    valid = [g for g in d.labels if isinstance(g, int)]
    if len(valid) != len(d.labels):
        raise ValueError("this check needs GPU numbers as labels")
    if outlier is None or pair is None:
        return CheckResult(False, "No answer yet: set my_outlier to a GPU (or 'none') and my_pair to two GPUs "
                                  "(or 'none'), for example 3 and (0, 1), and run the cell again.")
    choices = ", ".join(f"GPU{g}" for g in valid)
    msgs, ok = [], True

    got = _gpu_answer(outlier, valid)
    right = d.outlier_labels
    if got is None:
        return CheckResult(False, f"The slow GPU must be one of {choices}, or 'none'; got {outlier!r}.")
    if (got == "none" and not right) or got in right:
        if right:
            _, mine, others = d.outliers[right.index(got)]
            msgs.append(f"Slow GPU: right. GPU{got}'s pairs average {mine:.1f} GB/s against {others:.1f} GB/s "
                        "for the others.")
        else:
            msgs.append("Slow GPU: right. No GPU stands out.")
    else:
        ok = False
        if right:
            which = f", and it is not GPU{got}" if got != "none" else ""
            msgs.append("Slow GPU: not quite. Compare each GPU's row and column with the others': one GPU is "
                        f"clearly slower with every partner{which}.")
        else:
            msgs.append(f"Slow GPU: not quite. No GPU is slower with all its partners here; GPU{got}'s pairs are "
                        "as fast as the others'.")

    if isinstance(pair, str) and pair.strip().lower() in ("none", "no", "-"):
        got_pair = "none"
    else:
        try:
            got_pair = parse_pair(pair)
        except ValueError:
            return CheckResult(False, f"The asymmetric pair is two GPUs of {choices}, like (0, 1) or 'GPU0-GPU1', "
                                      f"or 'none'; got {pair!r}. " + " ".join(msgs))
        bad = [g for g in got_pair if g not in valid]
        if bad:
            return CheckResult(False, f"GPU{bad[0]} is not in this matrix: choose two of {choices}. " + " ".join(msgs))
    pairs = [tuple(sorted(p)) for p in d.asymmetric_labels]
    if (got_pair == "none" and not pairs) or got_pair in pairs:
        if pairs:
            a, b, x, y = d.asymmetric[pairs.index(got_pair)]
            msgs.append(f"Asymmetric pair: right. GPU{a} -> GPU{b} runs at {x:.1f} GB/s but GPU{b} -> GPU{a} at "
                        f"{y:.1f} GB/s.")
        else:
            msgs.append("Asymmetric pair: right, every pair is within 10% in both directions.")
    else:
        ok = False
        if pairs:
            which = f", and it is not GPU{got_pair[0]}–GPU{got_pair[1]}" if got_pair != "none" else ""
            msgs.append("Asymmetric pair: not quite. Compare each cell i -> j with its mirror j -> i: "
                        f"one pair differs by much more than 10%{which}.")
        else:
            msgs.append("Asymmetric pair: not quite. Every pair here is within 10% in both directions.")
    if ok and d.causes:
        msgs.append("Now the causes: " + "; ".join(d.causes[:2]) + ".")
    return CheckResult(ok, " ".join(msgs))
