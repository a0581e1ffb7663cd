"""Predict-then-check exercises whose answer the notebook measures (or its recording holds).

The learner writes a prediction in a cell (``my_prediction = ...``), the notebook measures or
loads the thing predicted, and a check compares the two. Every check here computes its answer
from the data it is given, never from a typed number, and answers like the checks of
:mod:`ddlab.course.checks` (it returns their :class:`~ddlab.course.checks.CheckResult`):

* ``None``, the cell's placeholder, is "not answered yet", with an example of an answer, so the
  notebook runs from top to bottom before anyone has answered;
* a typo (text where a number goes, an unknown name) gets one clear message, never a traceback;
* a typical slip (one phase of two, seconds for microseconds, both directions for one) gets a
  hint that names the slip; a half-filled answer gets feedback on the half given;
* a right answer, within a stated tolerance, says why it is right and sets the measurement beside it.

:func:`check_estimate` is the numeric core; one check per notebook builds on it:
:func:`check_ring_bytes` (notebook 1: the bytes one rank sends in a ring all-reduce),
:func:`check_allreduce_time` (notebook 2: an all-reduce's time from the alpha-beta fit),
:func:`check_lowest_levels` (NCCL levels: the lowest NCCL_P2P_LEVEL that allows P2P for a pair),
:func:`check_p2p_speedup` (the p2p test: peer-to-peer against host staging),
:func:`check_ddp_runs` (the hands-on: images per rank and equal weights of three DDP versions),
:func:`check_finished_scripts` (the hands-on with Horovod: which finished scripts end with the same weights),
:func:`check_batch_rule` (convergence: which learning-rate rule keeps a large batch's accuracy) and
:func:`check_split_speedup` (case studies: two GPUs over one when one global batch is split over them).
"""
from __future__ import annotations

import math
import numbers
import re
import statistics
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Sequence

from ddlab.base.units import format_number, format_time
from ddlab.course.checks import CheckResult


# --------------------------------------------------------------------------- the numeric core
@dataclass(frozen=True)
class Slip:
    """A typical wrong answer, ``value``, and the hint it deserves."""
    value: float
    hint: str


def as_number(answer) -> Optional[float]:
    """A finite number from an int, a float or text such as ``"6,000"``; None otherwise."""
    if isinstance(answer, bool):
        return None
    if isinstance(answer, str):
        text = re.sub(r"[,_\s]", "", answer)
        try:
            answer = float(text)
        except ValueError:
            return None
    if not isinstance(answer, numbers.Real) or not math.isfinite(answer):     # numpy's numbers count too
        return None
    return float(answer)


def _close(a: float, b: float, rel_tol: float, factor: Optional[float]) -> bool:
    if factor is not None:
        return a > 0 and b > 0 and 1 / factor <= a / b <= factor
    return abs(a - b) <= rel_tol * abs(b)


def _verdict(ok: bool, msgs: Sequence[str], missing: Sequence[str]) -> CheckResult:
    """A check of several parts: right only when every part answered is right and none is missing;
    the parts' messages, then what is still to predict."""
    msgs = list(msgs) + (["Still to predict: " + ", ".join(missing) + "."] if missing else [])
    ok = ok and not missing
    return CheckResult(ok, ("Right. " if ok else "") + " ".join(msgs))


def not_answered(name: str, what: str, example: str) -> CheckResult:
    """The placeholder's answer: what to write, where, with an example."""
    return CheckResult(False, f"Not answered yet: set `{name}` to {what}, for example `{name} = {example}`, run "
                              f"that cell, then this one.")


def check_estimate(answer, truth: float, *, name: str, what: str, example: str,
                   fmt: Callable[[float], str] = format_number, rel_tol: float = 0.1,
                   factor: Optional[float] = None, slips: Sequence[Slip] = (), why: str = "",
                   measured: str = "measured") -> CheckResult:
    """A numeric prediction ``answer`` against ``truth``, computed from data by the caller.

    Right within ``rel_tol`` (relative) or, when ``factor`` is given, within that factor either
    way. A wrong answer close to one of ``slips`` gets its hint; any other gets "too high/low".
    ``why`` explains the answer (shown with every verdict); ``measured`` names where ``truth``
    comes from ("measured", "in the simulation", "recorded on ...")."""
    if answer is None:
        return not_answered(name, what, example)
    a = as_number(answer)
    if a is None:
        return CheckResult(False, f"`{name} = {answer!r}` is not a number: write {what} as a number, for example "
                                  f"`{name} = {example}`.")
    tail = f" {why}" if why else ""
    if _close(a, truth, rel_tol, factor):
        within = f"within a factor of {factor:g}" if factor is not None else f"within {rel_tol:.0%}"
        return CheckResult(True, f"Right: you predicted {fmt(a)}; {measured}: {fmt(truth)} ({within}).{tail}")
    near = [s for s in slips if s.value and a / s.value > 0 and _close(a, s.value, rel_tol, factor)]
    for slip in sorted(near, key=lambda s: abs(math.log(a / s.value)))[:1]:      # the nearest slip's hint
        return CheckResult(False, f"Not quite: you predicted {fmt(a)}; {measured}: {fmt(truth)}. Hint: "
                                      f"{slip.hint}{tail}")
    side = "high" if a > truth else "low"
    ratio = f" ({a / truth:.3g} times the answer)" if truth and a / truth > 0 else ""
    return CheckResult(False, f"Not quite: you predicted {fmt(a)}; {measured}: {fmt(truth)}, so yours is too "
                              f"{side}{ratio}.{tail}")


def _bytes(x: float) -> str:
    return f"{x:,.0f} bytes"


# --------------------------------------------------------------------------- the ring's traffic
def check_ring_bytes(prediction, ring, name: str = "my_prediction") -> CheckResult:
    """How many bytes does the busiest rank send in ``ring`` (a simulated ring all-reduce,
    :func:`ddlab.cost.allreduce_algorithms.ring_allreduce`)? Counted by the simulator."""
    n, size = ring.n, ring.buffer_bytes
    truth = float(max(ring.bytes_sent()))
    chunk = size / n
    slips = (
        Slip(truth / 2, "that is one phase. The reduce-scatter leaves each rank with one summed chunk; the "
                        "all-gather then sends the summed chunks round the ring once more."),
        Slip((n - 1) * size, "(n-1)S is what the naive root sends; in the ring each step moves one chunk of S/n."),
        Slip(2 * size, "2S is the limit the ring approaches for many ranks, never reaches: each phase is n-1 "
                       "steps, not n."),
        Slip(2 * n * chunk * (n - 1), "each step sends one chunk of S/n bytes, not the whole buffer."),
        Slip(chunk, "that is one chunk, one step: count the steps of both phases."),
        Slip(size, "one buffer's worth: the ring sends 2(n-1) chunks of S/n."),
    )
    why = (f"Each rank sends one chunk of S/n = {_bytes(chunk)} in each of the 2(n-1) = {2 * (n - 1)} steps "
           f"(reduce-scatter, then all-gather): 2(n-1)/n x S.")
    return check_estimate(prediction, truth, name=name, what=f"the bytes one rank sends on {n} ranks of "
                          f"{size:,} bytes each", example="4000", fmt=_bytes, rel_tol=0.01,
                          slips=[s for s in slips if not _close(s.value, truth, 0.01, None)], why=why,
                          measured="the simulator counted")


# --------------------------------------------------------------------------- an all-reduce's time
def check_allreduce_time(prediction_us, fit, sweep, nbytes: int = 1 << 20, where: str = "",
                         name: str = "my_prediction_us") -> CheckResult:
    """The time of one all-reduce of ``nbytes`` in microseconds, predicted from ``fit`` (an
    :class:`ddlab.cost.alpha_beta.AlphaBeta`): right when it is the fit's value within 10%. The
    measured row of ``sweep`` nearest that size is set beside it."""
    row = sweep.row_at(nbytes)
    size = row["bytes"]
    model_us = fit.predict(size) * 1e6
    alpha_us, rate_us = fit.alpha * 1e6, size / fit.beta * 1e6
    slips = (
        Slip(model_us * 1e-6, "that is in seconds; the cell asks for microseconds (x 10^6)."),
        Slip(model_us * 1e-3, "that is in milliseconds; the cell asks for microseconds (x 1000)."),
        Slip(model_us * 1e3, "that is in nanoseconds, or a factor of 1000 slipped: fit.alpha is in seconds, "
                             "fit.beta in bytes per second."),
        Slip(alpha_us, "that is alpha alone: a message of this size also pays n / beta."),
        Slip(rate_us, "that is n / beta alone: every call also pays alpha."),
        Slip(alpha_us + rate_us * 1e9, "check the bandwidth's unit: fit.beta is already in bytes per second; "
                                       "dividing it by 10^9 made n / beta 10^9 times too long."),
    )
    measured_us = float(row["time_us"])
    model_off = measured_us / model_us if model_us else float("nan")
    why = (f"T = alpha + n/beta = {format_time(fit.alpha)} + {size:,} B / {fit.beta / 1e9:.3g} GB/s = "
           f"{format_time(model_us * 1e-6)}. The sweep measured {format_time(measured_us * 1e-6)} at "
           f"{size:,} B{f' ({where})' if where else ''}, {model_off:.2g} times the fit's value: the model "
           f"is a straight line through every size, so it misses single sizes.")
    return check_estimate(prediction_us, model_us, name=name, what=f"the time of one all-reduce of {size:,} B in "
                          "microseconds", example="fit.alpha * 1e6 + ...", fmt=lambda v: f"{v:,.4g} us",
                          slips=[s for s in slips if not _close(s.value, model_us, 0.1, None)], why=why,
                          measured="the fit gives")


# --------------------------------------------------------------------------- peer-to-peer vs host staging
def check_p2p_speedup(prediction, result, pair: Optional[tuple] = None, name: str = "my_prediction") -> CheckResult:
    """How many times faster is a pair's one-direction copy with peer access on than host-staged
    (off)? From the p2p ``result`` (:class:`ddlab.measure.p2p.P2PResult`), both directions of
    ``pair`` (default: the first two GPUs) averaged. Right within a factor of 1.6: a prediction
    from the links' peaks lands there, and the feedback says why the measurement differs."""
    labels = list(result.labels)
    a, b = pair if pair is not None else labels[:2]
    if a not in labels or b not in labels or a == b:
        raise ValueError(f"choose two GPUs of {labels}; got {pair!r}")
    i, j = labels.index(a), labels.index(b)
    on, off = result.matrices["uni_p2p_on"], result.matrices["uni_p2p_off"]
    on_gbs, off_gbs = (float(on[i, j]) + float(on[j, i])) / 2, (float(off[i, j]) + float(off[j, i])) / 2
    truth = on_gbs / off_gbs
    both = result.matrices.get("bi_p2p_on")
    slips = [Slip(1.0, "with peer access off, the copy is staged through host memory: it crosses PCIe twice "
                       "and leaves the NVLink (or the direct PCIe path) idle, so the two are far apart."),
             Slip(1 / truth, "upside down: peer access on is the fast one (ratio = on / off, above 1).")]
    if both is not None:
        bi = (float(both[i, j]) + float(both[j, i])) / 2
        slips.append(Slip(bi / off_gbs, "that compares both directions at once with one direction: take the "
                                        "per-direction rate of each."))
    why = (f"Measured GPU{a} <-> GPU{b}, one direction: {on_gbs:.4g} GB/s with peer access, {off_gbs:.4g} GB/s "
           f"host-staged. From the links' peaks the ratio is the NVLink's rate over one PCIe link's; the "
           f"host-staged copy pays two copies and a stop in host memory, so it lands below one PCIe link's "
           f"peak, and the measured ratio can exceed the peaks'.")
    return check_estimate(prediction, truth, name=name, what="peer-to-peer bandwidth / host-staged bandwidth "
                          "(a ratio)", example="5", fmt=lambda v: f"{v:.3g}x", factor=1.6,
                          slips=[s for s in slips if not _close(s.value, truth, 0, 1.6)], why=why)


# --------------------------------------------------------------------------- three DDP versions
def _share(run, single) -> float:
    per_rank = statistics.mean(run.samples())
    return per_rank / single.samples()[0]


def _ddp_truth(run, single) -> tuple:
    return _share(run, single), bool(run.same_weights())


DDP_EXAMPLE = '{"ddp_2_device": (1, True), "ddp_3_shard": (0.5, False), "ddp_7_rank0": (0.5, True)}'


def check_ddp_runs(prediction: Mapping, single, runs: Sequence, name: str = "my_prediction") -> CheckResult:
    """For each DDP version run (``runs``, :class:`ddlab.course.handson.Run`), the learner's
    ``(images per rank as a share of the one-process run, same weights on every rank?)``,
    e.g. ``{"ddp_3_shard": (0.5, False)}``. Compared with what each run reported: its ranks'
    RESULT lines (images trained on, weight checksums) against ``single``'s. A ``None``
    anywhere is "not answered" for that version; the others are still checked."""
    by_name = {r.script[:-3] if r.script.endswith(".py") else r.script: r for r in runs}
    names = ", ".join(by_name)
    if not isinstance(prediction, Mapping):
        return CheckResult(False, f"`{name}` is a dict from script to (share of images, same weights?), for "
                                  f"example `{name} = {DDP_EXAMPLE}`; got {prediction!r}.")
    unknown = [k for k in prediction if k not in by_name]
    if unknown:
        return CheckResult(False, f"`{name}` names {unknown[0]!r}, which is not one of the runs: {names}.")
    msgs, ok, missing = [], True, []
    for script, run in by_name.items():
        given = prediction.get(script)
        if given is None or (isinstance(given, (tuple, list)) and all(x is None for x in given)):
            missing += [f"{script} (share)", f"{script} (same weights)"]
            continue
        if not (isinstance(given, (tuple, list)) and len(given) == 2):
            return CheckResult(False, f"`{name}[{script!r}]` = {given!r}: give a pair (share of images, same "
                                      f"weights?), for example (0.5, True).")
        share, same = given
        share_n = as_number(share) if share is not None else None
        if share is not None and share_n is None:
            return CheckResult(False, f"`{name}[{script!r}]`: the share of images is a number (1 = as many as "
                                      f"one process, 0.5 = half); got {share!r}.")
        if same is not None and not isinstance(same, bool):
            return CheckResult(False, f"`{name}[{script!r}]`: same weights is True or False; got {same!r}.")
        true_share, true_same = _ddp_truth(run, single)
        parts = []
        if share_n is not None:
            right = abs(share_n - true_share) <= 0.05 * true_share
            ok &= right
            parts.append(f"images per rank {'right' if right else 'not quite'}: each rank trained on "
                         f"{true_share:.2g} of the one-process run's images"
                         + ("" if right else (" (the sampler gives each rank its own part)" if true_share < 0.75
                                              else " (nothing splits the data yet: each rank reads all of it)")))
        else:
            missing.append(f"{script} (share)")
        if same is not None:
            right = same == true_same
            ok &= right
            parts.append(f"same weights {'right' if right else 'not quite'}: the ranks' checksums "
                         + ("agree" if true_same else "differ")
                         + ("" if right else (" (DDP averages the gradients, so every rank takes the same step)"
                                              if true_same and true_share < 0.75 else
                                              " (same seed, same data, no communication: they agree without it)"
                                              if true_same else
                                              " (two models on two shards, nothing joins them)")))
        else:
            missing.append(f"{script} (same weights)")
        msgs.append(f"{script}: " + "; ".join(parts) + ".")
    if not msgs:
        return not_answered(name, "a (share of images, same weights?) pair per script", DDP_EXAMPLE)
    return _verdict(ok, msgs, missing)


# --------------------------------------------------------------------------- the lowest NCCL_P2P_LEVEL
LEVEL_PAIRS = (("pcie-4gpu", 0, 1), ("pcie-4gpu", 1, 2), ("dgx1-v100", 0, 3), ("dgx1-v100", 0, 5))
LEVELS_EXAMPLE = '{"pcie-4gpu GPU0-GPU1": "PXB", ...}'
PATH_WORDS = {
    "NVL": "their own NVLink",
    "NVB": "NVLink through a third GPU (NVB: no NVLink of their own, but both have one to GPU{via})",
    "PIX": "one PCIe switch",
    "PXB": "several PCIe switches, not the CPU",
    "PHB": "the CPU's PCIe host bridge, within one NUMA node",
    "SYS": "the link between the CPUs (QPI/UPI): the GPUs hang off different NUMA nodes",
}


def pair_key(name: str, a: int, b: int) -> str:
    """How the level exercise names a pair: "pcie-4gpu GPU0-GPU1"."""
    return f"{name} GPU{a}-GPU{b}"


def lowest_level(topology, a: int, b: int, job=None) -> tuple:
    """(the lowest NCCL_P2P_LEVEL under which NCCL may use P2P between GPUs ``a`` and ``b`` in a job on
    the GPUs ``job`` (None: every GPU of ``topology``), NCCL's path kind between them), from
    :func:`ddlab.system.nccl.path_kind` and :func:`~ddlab.system.nccl.level_allows`."""
    from ddlab.system import nccl
    kind = nccl.path_kind(topology, a, b, job=job)
    return next(lvl for lvl in nccl.P2P_LEVELS if nccl.level_allows(lvl, kind)), kind


def _level_feedback(given: str, truth: str, kind: str, via, levels: Sequence[str], relay=None) -> str:
    path = PATH_WORDS[kind].format(via=via)
    if relay is not None and kind != "NVB":
        path += (f" (GPU{relay} is NVLinked to both, but NCCL routes through a third GPU only when it is a rank "
                 "of the same job, and a 2-GPU job has none)")
    if given == truth:
        return f"right, {truth}: the path is {path}"
    if given == "LOC":
        return f"not quite: LOC never allows P2P; the lowest that does is {truth} (the path is {path})"
    if levels.index(given) < levels.index(truth):
        extra = " NVB ranks after NVL, so NVL refuses it." if kind == "NVB" else ""
        return f"not quite: under {given} NCCL refuses P2P here, since the path is {path}.{extra} Lowest: {truth}"
    extra = " (NCCL does not go across the CPUs here: it routes over NVLink through the third GPU)" \
        if kind == "NVB" else ""
    return f"not quite: {given} allows it, but so does the lower {truth}: the path is {path}{extra}"


def _keyed_answer_problem(prediction, keys: Sequence[str], name: str, what: str, value: str,
                          example: str) -> Optional[CheckResult]:
    """The one message for a dict answer keyed by ``keys`` that cannot be checked yet: not answered
    (``None``, or every value None), not a dict, or a key not asked. None when it can be checked."""
    if prediction is None or (isinstance(prediction, Mapping) and all(v is None for v in prediction.values())):
        return not_answered(name, what, example)
    if not isinstance(prediction, Mapping):
        return CheckResult(False, f"`{name}` is a dict from pair to {value}, for example `{name} = {example}`; "
                                  f"got {prediction!r}.")
    unknown = [k for k in prediction if k not in keys]
    if unknown:
        return CheckResult(False, f"`{name}` names {unknown[0]!r}, which is not asked: the pairs are "
                                  f"{', '.join(map(repr, keys))}.")
    return None


def check_lowest_levels(prediction, topologies: Mapping, name: str = "my_levels") -> CheckResult:
    """For each pair of :data:`LEVEL_PAIRS`, run as a 2-GPU job of its own (``CUDA_VISIBLE_DEVICES=a,b``),
    the learner's lowest ``NCCL_P2P_LEVEL`` under which NCCL may use P2P, e.g.
    ``{"pcie-4gpu GPU0-GPU1": "PIX"}``; ``topologies`` maps each name to its
    :class:`ddlab.system.topology.Topology`. The answer comes from the pair's NCCL path kind in that
    job (its own NVLink, else the `nvidia-smi topo -m` link: a 2-GPU job has no third GPU to route
    through); a level too low, too high or ``LOC`` gets a hint that says why. A pair left at None is
    "still to predict"."""
    from ddlab.system import nccl
    keys = [pair_key(*p) for p in LEVEL_PAIRS]
    problem = _keyed_answer_problem(prediction, keys, name, "the lowest level (a name: " + ", ".join(nccl.P2P_LEVELS)
                                    + ") for each pair", "level name", LEVELS_EXAMPLE)
    if problem is not None:
        return problem
    msgs, ok, missing = [], True, []
    for (topo_name, a, b), key in zip(LEVEL_PAIRS, keys):
        given = prediction.get(key)
        if given is None:
            missing.append(key)
            continue
        level = str(given).strip().upper()
        if level not in nccl.P2P_LEVELS:
            legacy = " (the names, not the legacy integers)" if level.isdigit() else ""
            return CheckResult(False, f"`{name}[{key!r}]` = {given!r}: write one of "
                                      f"{', '.join(nccl.P2P_LEVELS)}{legacy}.")
        topo = topologies[topo_name]
        truth, kind = lowest_level(topo, a, b, job=(a, b))        # each pair is a 2-GPU job of its own
        ok &= level == truth
        msgs.append(f"{key}: " + _level_feedback(level, truth, kind, nccl.nvb_via(topo, a, b, job=(a, b)),
                                                 nccl.P2P_LEVELS, relay=nccl.nvb_via(topo, a, b)) + ".")
    return _verdict(ok, msgs, missing)


# --------------------------------------------------------------------------- the finished scripts compared
SCRIPTS_EXAMPLE = '{"horovod vs ddp": "same", "keras vs horovod": "different"}'
SAME_WEIGHTS_REL = 1e-6       # checksums closer than this, relative: the same weights (float64 sums of float32)
CLOSE_WEIGHTS_REL = 1e-2      # closer than this: the same training, summed in another order

SCRIPT_PAIRS = {
    "horovod vs ddp": ("same", "same seed, the same DistributedSampler shards, the gradients averaged over the "
                               "ranks and the rate scaled by the same factor: the same training; only the order in "
                               "which each library sums the gradients may differ"),
    "keras vs horovod": ("different", "Keras builds its own model with its own initialisers and slices its own "
                                      "shards (every n-th image, reshuffled by shuffle()): another training, whose "
                                      "checksum is not comparable; only its ranks' agreement with each other is"),
}


def _same_or_different(answer) -> Optional[str]:
    word = str(answer).strip().lower()
    return {"same": "same", "equal": "same", "yes": "same", "different": "different", "differ": "different",
            "no": "different"}.get(word)


def _checksum_gap(a, b) -> Optional[float]:
    """Relative difference of two runs' rank-0 weight checksums; None when either did not run."""
    ra, rb = getattr(a, "ranks", None), getattr(b, "ranks", None)
    if not ra or not rb:
        return None
    x, y = ra[0]["checksum"], rb[0]["checksum"]
    return abs(x - y) / max(1.0, abs(x), abs(y))


def _gap_words(gap: Optional[float], runs) -> str:
    if gap is None:
        why = "; ".join(str(r) for r in runs if not getattr(r, "ranks", None)) or "a run is missing"
        return f"not measured here ({why})"
    if gap <= SAME_WEIGHTS_REL:
        return f"the same weights (checksums {gap:.1e} apart, relative)"
    if gap <= CLOSE_WEIGHTS_REL:
        return (f"checksums {gap:.1e} apart (relative): the same training, summed in another order or with "
                "non-deterministic GPU kernels")
    return f"different weights (checksums {gap:.2g} apart, relative)"


def check_finished_scripts(prediction, ddp_run, hvd_run, keras_run, name: str = "my_prediction") -> CheckResult:
    """Two predictions about the finished scripts of the hands-on, each ``"same"`` or
    ``"different"``: does the Horovod (PyTorch) script end with the DDP script's weights, and the
    Keras script with the Horovod (PyTorch) script's? The answer comes from what the scripts do
    (:data:`SCRIPT_PAIRS`); the runs' weight checksums are set beside it. A run that could not be
    made here (a :class:`ddlab.course.handson.Skipped`) is named instead of a measurement."""
    problem = _keyed_answer_problem(prediction, list(SCRIPT_PAIRS), name, '"same" or "different" for each pair',
                                    '"same" or "different"', SCRIPTS_EXAMPLE)
    if problem is not None:
        return problem
    gaps = {"horovod vs ddp": (_checksum_gap(hvd_run, ddp_run), (hvd_run, ddp_run)),
            "keras vs horovod": (_checksum_gap(keras_run, hvd_run), (keras_run, hvd_run))}
    msgs, ok, missing = [], True, []
    for pair, (truth, why) in SCRIPT_PAIRS.items():
        given = prediction.get(pair)
        if given is None:
            missing.append(pair)
            continue
        word = _same_or_different(given)
        if word is None:
            return CheckResult(False, f"`{name}[{pair!r}]` = {given!r}: write \"same\" or \"different\".")
        right = word == truth
        ok &= right
        gap, runs = gaps[pair]
        msgs.append(f"{pair}: {'right' if right else 'not quite'}, {truth}: {why}. Measured: {_gap_words(gap, runs)}.")
    return _verdict(ok, msgs, missing)


# --------------------------------------------------------------------------- which rule keeps a large batch
RULE_WORDS = {
    "none": "the base rate: the large batch takes fewer steps of the same size, so it moves the weights less "
            "per epoch and is under-trained when the epochs run out",
    "linear": "the rate times the batch's growth from the first step: the same distance per epoch, but the "
              "first steps, where the gradient changes fast, can overshoot",
    "linear + warm-up": "the same scaled rate, reached gradually: the first steps stay small while the "
                        "gradient changes fast, then each step moves as far as the small batch's k steps",
}


def _rule_of(label: str) -> str:
    return "linear + warm-up" if "warm-up" in label else label.split(" lr ")[-1].strip()


def _read_rule(answer) -> Optional[str]:
    if not isinstance(answer, str):
        return None
    w = re.sub(r"[\s_+-]+", " ", answer.strip().lower())
    if "warm" in w:
        return "linear + warm-up"
    return {"none": "none", "no scaling": "none", "no": "none", "linear": "linear"}.get(w)


def check_batch_rule(prediction, sweep, labels: Sequence[str], name: str = "my_prediction") -> CheckResult:
    """Which learning-rate rule gives the largest global batch of ``labels`` (points of a
    convergence ``sweep``, :class:`ddlab.course.convergence_sweep.ConvergenceResult`) the best
    median final test accuracy? Rules whose min-max range over the seeds overlaps the best's are
    a tie: three seeds cannot order them, and any of them counts."""
    rows = [sweep.row(label) for label in labels]
    top = max(r["global_batch"] for r in rows)
    large = [r for r in rows if r["global_batch"] == top]
    rules = {_rule_of(r["label"]): r for r in large}
    choices = " or ".join(f"'{r}'" for r in rules)
    if prediction is None:
        return not_answered(name, f"the rule that keeps batch {top:,} closest to the small batch ({choices})",
                            f"'{next(iter(rules))}'")
    rule = _read_rule(prediction)
    if rule is None or rule not in rules:
        return CheckResult(False, f"`{name} = {prediction!r}` is not one of the rules this sweep ran at batch "
                                  f"{top:,}: {choices}.")
    acc = {k: r["test_accuracy"] for k, r in rules.items()}
    best = max(acc, key=acc.get)
    lo = rules[best].get("test_accuracy_min", acc[best])
    tied = [k for k, r in rules.items() if r.get("test_accuracy_max", acc[k]) >= lo]
    listing = ", ".join(f"{k} {acc[k]:.4f}" for k in sorted(acc, key=acc.get, reverse=True))
    small = min(rows, key=lambda r: r["global_batch"])
    measured = (f"Median final test accuracy at batch {top:,}: {listing} (batch {small['global_batch']:,}: "
                f"{small['test_accuracy']:.4f}).")
    tie = (f" {' and '.join(tied)} overlap within their seeds' min-max, so the sweep cannot order them."
           if len(tied) > 1 else "")
    if rule in tied:
        return CheckResult(True, f"Right: {rule} — {RULE_WORDS[rule]}. {measured}{tie}")
    return CheckResult(False, f"Not quite: with {rule}, {RULE_WORDS[rule]}. In this sweep {best} did best: "
                              f"{RULE_WORDS[best]}. {measured}{tie}")


# --------------------------------------------------------------------------- one global batch split over two GPUs
SPLIT_TOLERANCE = 0.15      # a prediction within 15% of the recorded median (or inside its min-max) is right


def check_split_speedup(prediction, result, global_batch: int = 32, name: str = "my_speedup") -> CheckResult:
    """The speedup of two GPUs over one when ``global_batch`` images per step are split over the two
    (strong scaling), against ``result``, a recorded strong-scaling experiment
    (:class:`ddlab.training.results.ExperimentResult`): its two-worker row's median speedup; right within
    :data:`SPLIT_TOLERANCE` or inside the repeats' min-max. The explanation compares the two recorded
    step times: what splitting the batch did to the step."""
    two = next((r for r in result.rows if r.get("global_batch") == global_batch and r.get("workers", 1) >= 2), None)
    one = next((r for r in result.rows if r.get("global_batch") == global_batch and r.get("workers") == 1), None)
    if two is None or one is None or two.get("speedup") is None:
        raise ValueError(f"the recording holds no one- and two-GPU runs at global batch {global_batch}")
    truth = two["speedup"]
    lo, hi = two.get("speedup_min", truth), two.get("speedup_max", truth)
    c = result.config or {}
    where = f"{c.get('model')}, {c.get('launcher')}, path {c.get('path') or 'default'}"
    t1, t2 = one.get("step_ms_median"), two.get("step_ms_median")
    why = ""
    if t1 and t2:
        shrink = ("did not shorten the step" if t2 >= t1 else "barely shortened the step" if t2 > 0.75 * t1
                  else "shortened the step")
        why = (f"One GPU: {t1:.3f} ms per step for {global_batch} images; two GPUs: {t2:.3f} ms for "
               f"{two.get('batch_per_worker', global_batch // 2)} images each ({t2 / t1:.0%} of the one-GPU step). "
               f"Halving the batch per GPU {shrink}, and each step adds an all-reduce of the whole gradient: a "
               "speedup of 2 needs the step to halve with no cost added.")
    measured = f"recorded ({where}, median; min-max {lo:.2f}-{hi:.2f})"
    a = as_number(prediction)
    if a is not None and lo <= a <= hi:
        return CheckResult(True, f"Right: you predicted {a:.2f}; {measured}: {truth:.2f}, inside the repeats' "
                                 f"min-max. {why}")
    return check_estimate(prediction, truth, name=name, fmt=lambda v: f"{v:.2f}",
                          what=f"the speedup of two GPUs over one at global batch {global_batch}", example="1.5",
                          rel_tol=SPLIT_TOLERANCE, measured=measured, why=why,
                          slips=[Slip(2.0, "2 is linear scaling: each GPU would have to finish its half of the batch "
                                           "in half the one-GPU step, with nothing added for the all-reduce.")])
