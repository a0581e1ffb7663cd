"""Exercise checks for the notebooks: each answers right or wrong *and says why*.

* :func:`check_best_worst_pair` - notebook 3: name the best and the worst GPU pair of a
  machine from its ``nvidia-smi topo -m`` matrix.
* :func:`check_path_ordering` - notebook 5: predict the order of the three NCCL paths
  (default, shm, socket) before running the experiment.
* :func:`check_p2p_diagnosis` - notebook 10: name the slow GPU and the asymmetric pair of a p2p
  bandwidth matrix (answers that name no GPU of the matrix get the valid choices, not an error).
* :func:`check_input_pipeline` - notebook 6: predict the order of the three ways to feed a GPU
  its batches from host memory (pageable, pinned, pinned + non_blocking) before measuring them.
* :func:`check_quiz_answer` and :func:`quiz` - the self-check quiz at the end of every
  notebook: ``quiz(3)`` shows notebook 3's questions, ``quiz(questions)`` a tuple of
  :class:`ddlab.course.quiz_questions.Question`. The questions themselves, with their answers
  and explanations, are in :mod:`ddlab.course.quiz_questions`.

Every check returns a :class:`CheckResult`; it is truthy when the answer is right and
prints as a sentence (in Jupyter: a coloured box that starts "Right" or "Not yet"). A
learner's typo (a GPU that is not on the machine, an unknown path name) is an answer too: the
result says what was wrong and lists the valid choices, and never raises. The parsers below
(:func:`parse_pair`, :func:`parse_ordering`) still raise ``ValueError`` for library callers.
"""
from __future__ import annotations

import html
import re
from dataclasses import dataclass
from typing import Optional

from ddlab.base.units import format_count
from ddlab.course.quiz_questions import QUIZ, QUIZZES, Question
from ddlab.system import nccl


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


# --------------------------------------------------------------------------- input pipeline
FEEDS = ("pinned + non_blocking", "pinned", "pageable")      # fastest first, by how the copy is made
FEED_WHY = {
    "pageable": "CUDA first copies the batch with the CPU into a pinned staging buffer of its own, then across "
                "the link, and the step waits for both",
    "pinned": "the copy engine reads the page-locked batch directly at the link's rate, but `.to(device)` "
              "still waits for the copy before the step starts",
    "pinned + non_blocking": "the copy is queued and the host goes on launching the step's kernels at once, so "
                             "the CPU's work and the copy overlap",
}


def _feed(word: str) -> Optional[str]:
    w = re.sub(r"[\s_+-]+", " ", word.strip().lower())
    if "non" in w or "async" in w or "prefetch" in w:
        return "pinned + non_blocking"
    return {"pinned": "pinned", "pageable": "pageable", "paged": "pageable"}.get(w)


def check_input_pipeline(prediction, measured=None, noise: float = 0.03) -> CheckResult:
    """Check a prediction of the order (fastest first) of the three ways to feed a GPU its
    batches from host memory, e.g. ``"pinned + non_blocking > pinned > pageable"``, and set it
    beside a measurement: an input-pipeline result
    (:func:`ddlab.training.input_pipeline.measure`) or None when nothing was measured here.
    Differences below ``noise`` are called a tie (a small model's batch may cost too little to
    order them)."""
    if prediction is None:
        return CheckResult(False, "No prediction yet: write the three ways fastest first in my_prediction (for "
                                  "example 'pageable > pinned > pinned + non_blocking'), run that cell, then this one.")
    parts = [p for p in re.split(r"\s*(?:>|,)\s*", str(prediction)) if p.strip()]
    order = tuple(_feed(p) for p in parts)
    if None in order or sorted(order) != sorted(FEEDS):
        return CheckResult(False, f"my_prediction = {prediction!r} is not an ordering of the three ways: name "
                                  f"pageable, pinned and pinned + non_blocking once each, fastest first, separated "
                                  f"by '>'.")
    right = order == FEEDS
    msg = ["Right: pinned + non_blocking > pinned > pageable." if right else
           f"Not quite: you predicted {' > '.join(order)}; by how the copy is made the order is "
           f"{' > '.join(FEEDS)}."]
    msg.append("Why: " + "; ".join(f"{f}: {FEED_WHY[f]}" for f in FEEDS) + ".")
    rates = {r["variant"]: r["images_per_s"] for r in getattr(measured, "rows", []) if r.get("variant") in FEEDS}
    if len(rates) < len(FEEDS):
        msg.append("Nothing measured here to set beside it (pinned memory needs a GPU, and no run is recorded "
                   "yet): on a GPU, `ddlab.training.input_pipeline.measure()` times the three.")
    else:
        seen = sorted(rates, key=rates.get, reverse=True)
        listing = ", ".join(f"{f} {format_count(rates[f])}" for f in seen)
        spread = (rates[seen[0]] - rates[seen[-1]]) / rates[seen[0]]
        if spread < noise:
            msg.append(f"Measured (images/s): {listing}: within {noise:.0%} of each other. This model's step is "
                       f"long beside the copy of its batch, so how the batch crosses the link hardly shows.")
        else:
            # a pair within the noise is a tie: it agrees whichever way round it was predicted
            agrees = all(rates[a] >= rates[b] * (1 - noise) for i, a in enumerate(order) for b in order[i + 1:])
            ties = [f"{a} and {b}" for i, a in enumerate(seen) for b in seen[i + 1:]
                    if abs(rates[a] - rates[b]) < noise * rates[a]]
            msg.append(f"Measured (images/s): {listing} (fastest first), which "
                       + ("matches your prediction" if agrees else "differs from your prediction")
                       + (f" ({'; '.join(ties)} within {noise:.0%}: a tie, this step's kernel launches and not "
                          f"the copy set its pace)" if ties else "") + ".")
    return CheckResult(right, " ".join(msg))


# --------------------------------------------------------------------------- quiz
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
    (:data:`ddlab.course.quiz_questions.QUIZZES`)."""
    if isinstance(questions, bool):
        raise ValueError(f"a quiz is a notebook number ({', '.join(map(str, QUIZZES))}) or a tuple of questions")
    if isinstance(questions, int):
        if questions not in QUIZZES:
            raise ValueError(f"there is a quiz for notebooks {', '.join(map(str, QUIZZES))}; got {questions!r}")
        return QUIZZES[questions]
    return tuple(questions)


def check_quiz_answer(question: int, choice, questions=QUIZ) -> CheckResult:
    """Check the answer to quiz question ``question`` (1-based) given as a letter or an index;
    ``questions``: the notebook's quiz, as a tuple or the notebook's number (default
    :data:`ddlab.course.quiz_questions.QUIZ`).
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
    ``questions``: the notebook's quiz, as a tuple or the notebook's number (default
    :data:`ddlab.course.quiz_questions.QUIZ`).

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
    matrix (:func:`ddlab.measure.p2p_diagnosis.diagnose` has the answer). ``outlier``: a GPU (3, "GPU3") or
    "none"; ``pair``: two GPUs ((0, 1), "GPU0-GPU1", either order) or "none". Partly right
    answers say which half is right; an answer that names no GPU of the matrix gets the
    valid choices; nothing raises for a learner's typo."""
    from ddlab.measure import p2p_diagnosis
    d = p2p_diagnosis.diagnose(matrix, labels)
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
