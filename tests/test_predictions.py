"""ddlab.course.predictions: predict-then-check exercises, answered from the data they are given."""
import numpy as np
import pytest

from ddlab.course import predictions as pr
from ddlab.course.checks import CheckResult
from ddlab.course.convergence_sweep import ConvergenceResult
from ddlab.course.handson import Run, Skipped
from ddlab.cost import allreduce_algorithms as ar
from ddlab.cost.alpha_beta import AlphaBeta
from ddlab.measure import p2p_diagnosis


def _says(result, *words):
    assert isinstance(result, CheckResult)
    for w in words:
        assert w in result.message, (w, result.message)


# ----------------------------------------------------------------- the core
@pytest.mark.parametrize("answer, number", [(3, 3.0), (2.5, 2.5), ("6,000", 6000.0), (" 1_000 ", 1000.0),
                                            (np.int64(7), 7.0), (True, None), ("six", None), (float("nan"), None), ([1], None)])
def test_as_number(answer, number):
    assert pr.as_number(answer) == number


def test_estimate_placeholder_typo_right_slip_and_wrong():
    kw = dict(name="my_x", what="a count", example="12", slips=[pr.Slip(50, "you halved it")], why="Because.")
    r = pr.check_estimate(None, 100, **kw)
    assert not r and r.message.startswith("Not answered yet") and "`my_x = 12`" in r.message
    _says(pr.check_estimate("ten", 100, **kw), "is not a number", "my_x = 12")
    assert not pr.check_estimate("ten", 100, **kw)
    right = pr.check_estimate(105, 100, **kw)
    assert right and "within 10%" in right.message and "Because." in right.message
    slip = pr.check_estimate(52, 100, **kw)
    assert not slip and "Hint: you halved it" in slip.message
    wrong = pr.check_estimate(300, 100, **kw)
    assert not wrong and "too high" in wrong.message and "3 times the answer" in wrong.message
    assert "too low" in pr.check_estimate(10, 100, **kw).message


def test_estimate_within_a_factor():
    assert pr.check_estimate(7, 10, name="r", what="a ratio", example="2", factor=1.6)
    assert not pr.check_estimate(6, 10, name="r", what="a ratio", example="2", factor=1.6)
    assert pr.check_estimate(15, 10, name="r", what="a ratio", example="2", factor=1.6)


# ----------------------------------------------------------------- notebook 1: the ring
def test_ring_bytes_from_the_simulator():
    ring = ar.ring_allreduce(ar.random_buffers(4, 1000))       # 4 ranks of 4,000 bytes
    truth = max(ring.bytes_sent())
    assert pr.check_ring_bytes(truth, ring)
    assert pr.check_ring_bytes(f"{truth:,}", ring)
    _says(pr.check_ring_bytes(truth / 2, ring), "Hint: that is one phase")
    _says(pr.check_ring_bytes(3 * 4000, ring), "naive root")
    _says(pr.check_ring_bytes(8000, ring), "never reaches")
    _says(pr.check_ring_bytes(1000, ring), "one chunk, one step")
    _says(pr.check_ring_bytes(None, ring), "Not answered yet")
    _says(pr.check_ring_bytes("6000 bytes", ring), "is not a number")


def test_ring_bytes_follow_the_simulation_not_a_formula_typed_in():
    ring = ar.ring_allreduce(ar.random_buffers(3, 10))         # uneven chunks: 4, 3, 3 elements
    truth = max(ring.bytes_sent())
    assert pr.check_ring_bytes(truth, ring)
    assert not pr.check_ring_bytes(truth * 1.5, ring)


# ----------------------------------------------------------------- notebook 2: an all-reduce's time
class _Sweep:
    def __init__(self, rows):
        self.rows = rows

    def row_at(self, nbytes):
        return min(self.rows, key=lambda r: abs(r["bytes"] - nbytes))


def test_allreduce_time_from_the_fit_with_the_measurement_beside_it():
    fit = AlphaBeta(alpha=300e-6, beta=2e9)                    # 300 us, 2 GB/s: both terms count at 1 MiB
    sweep = _Sweep([{"bytes": 1 << 20, "time_us": 700.0}, {"bytes": 1 << 10, "time_us": 51.0}])
    model_us = (300e-6 + (1 << 20) / 2e9) * 1e6
    r = pr.check_allreduce_time(model_us, fit, sweep, where="here")
    assert r and "700 us" in r.message and "(here)" in r.message and "0.85 times the fit's" in r.message
    _says(pr.check_allreduce_time(model_us * 1e-6, fit, sweep), "in seconds")
    _says(pr.check_allreduce_time(model_us * 1e-3, fit, sweep), "in milliseconds")
    _says(pr.check_allreduce_time(300, fit, sweep), "alpha alone")
    _says(pr.check_allreduce_time((1 << 20) / 2e9 * 1e6, fit, sweep), "n / beta alone")
    _says(pr.check_allreduce_time(None, fit, sweep), "Not answered yet", "my_prediction_us")


# ----------------------------------------------------------------- the p2p test
def test_p2p_speedup_from_the_recorded_matrix():
    rec = p2p_diagnosis.load_recorded("h200x2")
    on, off = rec.matrices["uni_p2p_on"], rec.matrices["uni_p2p_off"]
    truth = (on[0, 1] + on[1, 0]) / (off[0, 1] + off[1, 0])
    assert pr.check_p2p_speedup(truth, rec)
    assert pr.check_p2p_speedup(truth / 1.5, rec)             # from the peaks: within a factor of 1.6
    assert not pr.check_p2p_speedup(truth / 2, rec)
    _says(pr.check_p2p_speedup(1, rec), "staged through host memory")
    _says(pr.check_p2p_speedup(1 / truth, rec), "upside down")
    _says(pr.check_p2p_speedup(None, rec), "Not answered yet")


def test_p2p_speedup_reads_the_pair_it_is_given():
    class Fake:
        labels = [0, 1, 2]
        matrices = {"uni_p2p_on": np.array([[0, 100, 40], [100, 0, 40], [40, 40, 0.]]),
                    "uni_p2p_off": np.full((3, 3), 10.0)}
    assert pr.check_p2p_speedup(4, Fake(), pair=(0, 2))
    assert not pr.check_p2p_speedup(4, Fake())                 # GPU0-GPU1: 10x
    with pytest.raises(ValueError, match="choose two GPUs"):
        pr.check_p2p_speedup(4, Fake(), pair=(0, 7))


# ----------------------------------------------------------------- the hands-on: three DDP versions
def _run(script, samples, sums):
    ranks = [{"rank": i, "samples": s, "checksum": c} for i, (s, c) in enumerate(zip(samples, sums))]
    return Run(script + ".py", "torchrun", len(ranks), "cpu", ranks, "", 1.0)


SINGLE = _run("single_device", [8000], [1.0])
RUNS = [_run("ddp_2_device", [8000, 8000], [1.0, 1.0]), _run("ddp_3_shard", [4000, 4000], [1.0, 1.3]),
        _run("ddp_7_rank0", [4000, 4000], [2.0, 2.0])]


def test_ddp_runs_right_partial_and_wrong():
    right = {"ddp_2_device": (1, True), "ddp_3_shard": (0.5, False), "ddp_7_rank0": (0.5, True)}
    assert pr.check_ddp_runs(right, SINGLE, RUNS)
    placeholder = {k: (None, None) for k in right}
    _says(pr.check_ddp_runs(placeholder, SINGLE, RUNS), "Not answered yet")
    half = dict(placeholder, ddp_3_shard=(0.5, None))
    r = pr.check_ddp_runs(half, SINGLE, RUNS)
    assert not r and "images per rank right" in r.message and "Still to predict" in r.message
    wrong = dict(right, ddp_2_device=(0.5, False))
    r = pr.check_ddp_runs(wrong, SINGLE, RUNS)
    assert not r and "nothing splits the data yet" in r.message and "they agree without it" in r.message
    _says(pr.check_ddp_runs(dict(right, ddp_3_shard=(1, True)), SINGLE, RUNS), "own part", "nothing joins them")


@pytest.mark.parametrize("bad, words", [
    ({"ddp_9": (1, True)}, "not one of the runs"), ({"ddp_3_shard": "half"}, "give a pair"),
    ({"ddp_3_shard": ("half", True)}, "is a number"), ({"ddp_3_shard": (0.5, "yes")}, "True or False"),
    ("0.5", "is a dict"),
])
def test_ddp_runs_typos_get_one_message(bad, words):
    r = pr.check_ddp_runs(bad, SINGLE, RUNS)
    assert not r and words in r.message


# ----------------------------------------------------------------- the hands-on: the finished scripts compared
DDP_DONE = _run("ddp_7_rank0", [4000, 4000], [-180.25, -180.25])
HVD_DONE = _run("hvd_8_rank0", [4000, 4000], [-180.25, -180.25])
KERAS_DONE = _run("keras_hvd_8_rank0", [4000, 4000], [-730.5, -730.5])
RIGHT_PAIRS = {"horovod vs ddp": "same", "keras vs horovod": "different"}


def test_finished_scripts_right_answers_are_set_beside_the_checksums():
    r = pr.check_finished_scripts(RIGHT_PAIRS, DDP_DONE, HVD_DONE, KERAS_DONE)
    assert r and r.message.startswith("Right. horovod vs ddp: right, same")
    _says(r, "Measured: the same weights (checksums 0.0e+00 apart", "Measured: different weights (checksums 0.75")
    # the same training summed in another order: a small gap still counts as the same training
    nearly = _run("hvd_8_rank0", [4000, 4000], [-180.26, -180.26])
    _says(pr.check_finished_scripts(RIGHT_PAIRS, DDP_DONE, nearly, KERAS_DONE), "summed in another order")
    # the answer is what the scripts do; a run that diverged is shown as it is, not hidden
    _says(pr.check_finished_scripts(RIGHT_PAIRS, DDP_DONE, KERAS_DONE, KERAS_DONE), "Measured: different weights")


def test_finished_scripts_wrong_half_and_missing_runs():
    r = pr.check_finished_scripts({"horovod vs ddp": "different", "keras vs horovod": "different"},
                                  DDP_DONE, HVD_DONE, KERAS_DONE)
    assert not r and "horovod vs ddp: not quite, same: same seed" in r.message
    assert "keras vs horovod: right" in r.message
    r = pr.check_finished_scripts({"horovod vs ddp": "same", "keras vs horovod": None}, DDP_DONE, HVD_DONE, KERAS_DONE)
    assert not r and "Still to predict: keras vs horovod." in r.message
    skipped = Skipped("keras_hvd_8_rank0.py", "TensorFlow is not installed")
    r = pr.check_finished_scripts(RIGHT_PAIRS, DDP_DONE, HVD_DONE, skipped)
    assert r and "not measured here (keras_hvd_8_rank0.py is not run here: TensorFlow is not installed" in r.message


@pytest.mark.parametrize("bad, words", [
    (None, "Not answered yet"), ({"horovod vs ddp": None, "keras vs horovod": None}, "Not answered yet"),
    ({"hvd vs ddp": "same"}, "not asked"), ({"horovod vs ddp": "maybe"}, 'write "same" or "different"'),
    ("same", "is a dict"),
])
def test_finished_scripts_typos_get_one_message(bad, words):
    r = pr.check_finished_scripts(bad, DDP_DONE, HVD_DONE, KERAS_DONE)
    assert not r and words in r.message


# ----------------------------------------------------------------- convergence: which rule keeps a large batch
def _sweep(accs):
    rows = [{"label": "1w B=64 lr linear", "global_batch": 64, "test_accuracy": 0.85,
             "test_accuracy_min": 0.84, "test_accuracy_max": 0.86}]
    for label, (med, lo, hi) in accs.items():
        rows.append({"label": label, "global_batch": 512, "test_accuracy": med, "test_accuracy_min": lo,
                     "test_accuracy_max": hi})
    return ConvergenceResult(rows, []), [r["label"] for r in rows]


def test_batch_rule_measured_best_and_ties():
    sweep, labels = _sweep({"1w B=512 lr none": (0.70, 0.69, 0.71), "1w B=512 lr linear": (0.80, 0.70, 0.82),
                            "1w B=512 lr linear + 1 ep warm-up": (0.83, 0.81, 0.84)})
    assert pr.check_batch_rule("linear + warm-up", sweep, labels)
    tie = pr.check_batch_rule("linear", sweep, labels)         # its max 0.82 reaches the best's min 0.81
    assert tie and "cannot order them" in tie.message
    r = pr.check_batch_rule("none", sweep, labels)
    assert not r and "under-trained" in r.message and "0.8300" in r.message
    _says(pr.check_batch_rule(None, sweep, labels), "Not answered yet", "'none' or 'linear' or 'linear + warm-up'")
    _says(pr.check_batch_rule("sqrt", sweep, labels), "not one of the rules")
    assert pr.check_batch_rule("Linear_Warmup", sweep, labels)


def test_batch_rule_follows_the_data_when_theory_loses():
    sweep, labels = _sweep({"1w B=512 lr none": (0.86, 0.855, 0.87), "1w B=512 lr linear": (0.10, 0.10, 0.10)})
    assert pr.check_batch_rule("none", sweep, labels)
    _says(pr.check_batch_rule("warm-up", sweep, labels), "not one of the rules")


# ----------------------------------------------------------------- NCCL levels: the lowest that allows P2P
def _level_topologies():
    from ddlab.system import topology
    return {name: topology.recorded(name) for name in ("pcie-4gpu", "dgx1-v100")}


RIGHT_LEVELS = {"pcie-4gpu GPU0-GPU1": "PIX", "pcie-4gpu GPU1-GPU2": "SYS", "dgx1-v100 GPU0-GPU3": "NVL",
                "dgx1-v100 GPU0-GPU5": "sys"}


def test_lowest_levels_come_from_the_path_kind():
    from ddlab.system import nccl
    topos = _level_topologies()
    assert pr.lowest_level(topos["pcie-4gpu"], 0, 1) == ("PIX", "PIX")
    # SYS in topo -m: in a job on all eight GPUs NCCL routes it through GPU1 (NVB); a 2-GPU job has no relay
    assert pr.lowest_level(topos["dgx1-v100"], 0, 5) == ("PIX", "NVB")
    assert pr.lowest_level(topos["dgx1-v100"], 0, 5, job=(0, 5)) == ("SYS", "SYS")
    r = pr.check_lowest_levels(RIGHT_LEVELS, topos)
    assert r and r.message.startswith("Right. pcie-4gpu GPU0-GPU1: right, PIX")
    _says(r, "dgx1-v100 GPU0-GPU5: right, SYS", "GPU1 is NVLinked to both")
    # every level at or above the answer allows the pair, none below: the answer is the lowest
    for (name, a, b) in pr.LEVEL_PAIRS:
        truth, kind = pr.lowest_level(topos[name], a, b, job=(a, b))
        allowed = [lvl for lvl in nccl.P2P_LEVELS if nccl.level_allows(lvl, kind)]
        assert allowed and allowed[0] == truth and allowed == list(nccl.P2P_LEVELS[nccl.P2P_LEVELS.index(truth):])


@pytest.mark.parametrize("pair, given, words", [
    ("pcie-4gpu GPU0-GPU1", "SYS", "so does the lower PIX"),
    ("pcie-4gpu GPU1-GPU2", "PHB", "under PHB NCCL refuses P2P here"),
    ("dgx1-v100 GPU0-GPU3", "LOC", "LOC never allows P2P"),
    ("dgx1-v100 GPU0-GPU5", "PIX", "a 2-GPU job has none"),
    ("dgx1-v100 GPU0-GPU5", "NVL", "under NVL NCCL refuses P2P here"),
])
def test_a_wrong_level_gets_the_hint_for_that_slip(pair, given, words):
    r = pr.check_lowest_levels(dict(RIGHT_LEVELS, **{pair: given}), _level_topologies())
    assert not r and f"{pair}: not quite" in r.message and words in r.message
    assert r.message.count("not quite") == 1          # the other three stay right


@pytest.mark.parametrize("bad, words", [
    (None, "Not answered yet"), ({k: None for k in RIGHT_LEVELS}, "Not answered yet"),
    ({"pcie-4gpu GPU0-GPU1": "PIX"}, "Still to predict: pcie-4gpu GPU1-GPU2"),
    ({"pcie-4gpu GPU0-GPU1": 1}, "the names, not the legacy integers"),
    ({"pcie-4gpu GPU0-GPU1": "PCIE"}, "write one of LOC, NVL"),
    ({"GPU0-GPU1": "PIX"}, "not asked"), ("PIX", "is a dict"),
])
def test_level_typos_and_half_answers_get_one_message(bad, words):
    r = pr.check_lowest_levels(bad, _level_topologies())
    assert not r and words in r.message
