"""Exercise checks: right and wrong answers, each with its reason."""
import pytest

from ddlab.course import checks, quiz_questions
from ddlab.system.topology import parse_topo_matrix

# A DGX-1 with V100 (hybrid cube-mesh), as `nvidia-smi topo -m` prints it (written for the test).
DGX1 = """\
\tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7\tCPU Affinity
GPU0\t X \tNV1\tNV1\tNV2\tNV2\tSYS\tSYS\tSYS\t0-19,40-59
GPU1\tNV1\t X \tNV2\tNV1\tSYS\tNV2\tSYS\tSYS\t0-19,40-59
GPU2\tNV1\tNV2\t X \tNV2\tSYS\tSYS\tNV1\tSYS\t0-19,40-59
GPU3\tNV2\tNV1\tNV2\t X \tSYS\tSYS\tSYS\tNV1\t0-19,40-59
GPU4\tNV2\tSYS\tSYS\tSYS\t X \tNV1\tNV1\tNV2\t20-39,60-79
GPU5\tSYS\tNV2\tSYS\tSYS\tNV1\t X \tNV2\tNV1\t20-39,60-79
GPU6\tSYS\tSYS\tNV1\tSYS\tNV1\tNV2\t X \tNV2\t20-39,60-79
GPU7\tSYS\tSYS\tSYS\tNV1\tNV2\tNV1\tNV2\t X \t20-39,60-79
"""
PCIE_BOX = """\
\tGPU0\tGPU1\tGPU2\tGPU3
GPU0\t X \tPIX\tPXB\tSYS
GPU1\tPIX\t X \tPXB\tSYS
GPU2\tPXB\tPXB\t X \tSYS
GPU3\tSYS\tSYS\tSYS\t X
"""
H200X2 = """\
\tGPU0\tGPU1
GPU0\t X \tNV18
GPU1\tNV18\t X
"""


@pytest.fixture(scope="module")
def dgx1():
    return parse_topo_matrix(DGX1)


def test_best_and_worst_right(dgx1):
    r = checks.check_best_worst_pair(dgx1, (0, 3), "GPU0-GPU5")
    assert r and r.correct
    assert "Best: right" in r.message and "NV2" in r.message and "two bonded NVLinks" in r.message
    assert "Worst: right" in r.message and "SYS" in r.message and "NUMA nodes" in r.message
    # other equally good answers are named
    assert "GPU0–GPU4" in r.message


def test_best_wrong_gives_the_reason(dgx1):
    r = checks.check_best_worst_pair(dgx1, "GPU0-GPU1", "GPU0-GPU5")
    assert not r
    assert "Best: not quite. GPU0–GPU1 is NV1 (one NVLink" in r.message
    assert "GPU0–GPU3 is NV2" in r.message and "better" in r.message
    assert "Worst: right" in r.message


def test_worst_wrong_gives_the_reason(dgx1):
    r = checks.check_best_worst_pair(dgx1, (1, 2), (0, 1))
    assert not r.correct
    assert "Best: right" in r.message
    assert "Worst: not quite. GPU0–GPU1 is NV1" in r.message and "SYS" in r.message and "slower" in r.message


def test_pcie_box_orders_pix_pxb_sys():
    topo = parse_topo_matrix(PCIE_BOX)
    assert checks.check_best_worst_pair(topo, (0, 1), (2, 3)).correct
    wrong = checks.check_best_worst_pair(topo, (0, 2), (0, 1))
    assert not wrong.correct
    assert "PXB" in wrong.message and "PIX" in wrong.message and "one PCIe switch" in wrong.message


def test_all_pairs_equal_says_so():
    topo = parse_topo_matrix(H200X2)
    r = checks.check_best_worst_pair(topo, (0, 1), (1, 0))
    assert r.correct and "same link" in r.message and "NV18" in r.message


def test_pair_parsing_and_errors(dgx1):
    assert checks.parse_pair("GPU3-GPU0") == (0, 3)
    assert checks.parse_pair([5, 2]) == (2, 5)
    assert checks.parse_pair("1, 6") == (1, 6)
    for bad in ("GPU0", "0-1-2", "best", (1,), (2, 2), None):
        with pytest.raises(ValueError):
            checks.parse_pair(bad)


def test_a_typo_in_a_pair_gets_a_message_listing_the_gpus_not_an_exception(dgx1):
    r = checks.check_best_worst_pair(dgx1, (0, 9), (0, 5))
    assert not r and "GPU9, which is not on this machine" in r.message and "my_best" in r.message
    assert "GPU0, GPU1, GPU2, GPU3, GPU4, GPU5, GPU6, GPU7" in r.message
    r = checks.check_best_worst_pair(dgx1, (0, 3), "GPU0-GUP5")
    assert not r and "my_worst = 'GPU0-GUP5' is not a GPU pair" in r.message and "GPU7" in r.message
    r = checks.check_best_worst_pair(dgx1, (2, 2), None)
    assert not r and "two different GPUs" in r.message


def test_a_partial_answer_gets_feedback_on_the_part_given(dgx1):
    r = checks.check_best_worst_pair(dgx1, (0, 3), None)
    assert not r.correct
    assert r.message.startswith("Best: right. GPU0–GPU3 is NV2")
    assert "Still missing: my_worst" in r.message and "SYS" not in r.message   # nothing about the worst
    r = checks.check_best_worst_pair(dgx1, None, (0, 1))
    assert not r.correct and "Worst: not quite" in r.message and "Still missing: my_best" in r.message
    assert "NV2" not in r.message                                             # nothing about the best


def test_path_ordering_right_and_wrong():
    right = checks.check_path_ordering("default > shm > socket")
    assert right.correct and right.message.startswith("Right")
    assert "NVLink" in right.message and "host memory" in right.message and "TCP" in right.message
    wrong = checks.check_path_ordering(["shm", "default", "socket"])
    assert not wrong.correct and "you predicted shm > default > socket" in wrong.message
    assert checks.check_path_ordering(["P2P", "SHM", "tcp"]).correct      # aliases
    for bad in ("default > shm", "default > shm > shm", "fast > slow > slower", 42):
        r = checks.check_path_ordering(bad)       # a typo is an answer: a message, not an exception
        assert not r.correct and "not an ordering of the three paths" in r.message
        assert "default, shm and socket" in r.message
        with pytest.raises(ValueError):
            checks.parse_ordering(bad)


def test_path_ordering_with_a_measurement():
    wide = checks.check_path_ordering("default > shm > socket",
                                      measured={"default": 122e3, "shm": 56e3, "socket": 10e3})
    assert "matches your prediction" in wide.message
    wrong = checks.check_path_ordering("shm > default > socket",
                                       measured={"default": 122e3, "shm": 56e3, "socket": 10e3})
    assert not wrong.correct and "differs from your prediction" in wrong.message
    cnn = checks.check_path_ordering("default > shm > socket",
                                     measured={"default": 340e3, "shm": 338e3, "socket": 333e3})
    assert "within 5%" in cnn.message and "cannot order them" in cnn.message
    with pytest.raises(ValueError, match="unknown paths"):
        checks.check_path_ordering("default > shm > socket", measured={"nvlink2": 1.0, "ib": 2.0})


def test_path_ordering_reads_an_experiment_result():
    class Result:  # the shape of ddlab.training.experiments.ExperimentResult for nccl-paths
        rows = [{"path": "1 worker", "images_per_s": 66e3},
                {"path": "default", "images_per_s": 122e3},
                {"path": "shm", "images_per_s": 56e3},
                {"path": "socket", "error": "timed out"}]
    assert checks.measured_rates(Result()) == {"default": 122e3, "shm": 56e3}
    r = checks.check_path_ordering("default > shm > socket", measured=Result())
    assert r.correct and "default 122,000, shm 56,000" in r.message and "matches your prediction" in r.message

    class CpuResult:
        rows = [{"path": "1 worker", "images_per_s": 400.0}, {"path": "default", "images_per_s": 420.0}]
    r = checks.check_path_ordering("default > shm > socket", measured=CpuResult())
    assert "default only" in r.message and "gloo" in r.message
    with pytest.raises(ValueError, match="map path"):
        checks.check_path_ordering("default > shm > socket", measured=[1, 2, 3])


@pytest.mark.parametrize("n", range(1, len(quiz_questions.QUIZ) + 1))
def test_every_quiz_question_has_a_right_and_wrong_answer(n):
    q = quiz_questions.QUIZ[n - 1]
    right = checks.check_quiz_answer(n, q.answer)
    assert right.correct and right.message.startswith("Right")
    letter = "abc"[q.answer]
    assert checks.check_quiz_answer(n, letter.upper()).correct
    for i in range(len(q.choices)):
        if i != q.answer:
            wrong = checks.check_quiz_answer(n, i)
            assert not wrong.correct
            assert f"The answer is {letter})" in wrong.message


def test_quiz_content_is_consistent_with_the_model():
    from ddlab.course import widgets
    # question 1: 64 KiB over alpha=4 us, beta=16 GB/s: the bandwidth term is the larger, by a
    # few percent, and the explanation says so with the right numbers
    r = widgets.message_time(64 * 1024, "pcie3_x16", latency_us=4, bandwidth_gbs=16)
    assert r.bandwidth_s > r.latency_s and r.dominant == "bandwidth"
    share = (r.bandwidth_s - r.latency_s) / r.latency_s
    assert 0.01 < share < 0.05
    q1 = quiz_questions.QUIZ[0]
    assert q1.choices[q1.answer] == "they are within a few percent of each other"
    assert f"{share:.1%} more than alpha" in q1.explanation and "the bandwidth term is the larger" in q1.explanation
    assert f"{r.bandwidth_s * 1e6:.1f} us" in q1.explanation
    # question 4: host staging crosses PCIe twice (once per copy); the text never says once
    q4 = quiz_questions.QUIZ[3]
    assert q4.choices[q4.answer] == "twice" and q4.explanation.startswith("Twice")
    assert "crosses once" not in q4.explanation and "two copies, each across PCIe" in q4.why_not[0]
    # question 2: PIX still allows NVLink
    assert quiz_questions.QUIZ[1].choices[quiz_questions.QUIZ[1].answer] == "still NVLink"


def test_quiz_bad_answers_get_a_message_with_the_choices():
    r = checks.check_quiz_answer(0, "a")
    assert not r and "questions 1 to 7" in r.message
    r = checks.check_quiz_answer(1, "z")
    assert not r and "choices a to c" in r.message and "c) they are within a few percent" in r.message
    r = checks.check_quiz_answer(1, "ab")
    assert not r and "letter" in r.message


def test_results_render_without_emoji_and_with_markdown_as_html():
    right = checks.CheckResult(True, "Right. Run `ddlab topo` and read **SYS** as *slow* <here>.")
    page = right._repr_html_()
    assert "<b style='color:#1b7837'>Right:</b>" in page
    assert "<code>ddlab topo</code>" in page and "<b>SYS</b>" in page and "<i>slow</i>" in page
    assert "&lt;here&gt;" in page and "`" not in page and "Right. Run" not in page
    assert "Not yet:" in checks.CheckResult(False, "Not quite. x")._repr_html_()
    assert not hasattr(checks.CheckResult, "_repr_markdown_")
    for obj in (page, checks.CheckResult(False, "x")._repr_html_()):
        assert all(ord(ch) < 0x2000 for ch in obj)     # no emoji, no pictographs
    assert checks.inline_html("a_b * c and 2*3") == "a_b * c and 2*3"


def test_quiz_text_renders_its_markdown_and_choices_are_plain():
    for q in quiz_questions.QUIZ + quiz_questions.DATA_PARALLEL_QUIZ:   # radio labels cannot render markup: choices have none
        for c in q.choices:
            assert "`" not in c and "*" not in c


def test_quiz_widget_checks_answers():
    ipywidgets = pytest.importorskip("ipywidgets")
    box = checks.quiz()
    assert isinstance(box, ipywidgets.VBox) and len(box.children) == len(quiz_questions.QUIZ)
    _, radio, button, out = box.children[1].children
    button.click()
    assert "pick an answer" in out.value
    radio.value = quiz_questions.QUIZ[1].answer
    button.click()
    assert "Right" in out.value
    radio.value = 0
    button.click()
    assert "Not yet:" in out.value
    # question 3's prompt quotes `nvidia-smi topo -m`: shown as code, not with backticks
    prompt = box.children[2].children[0].value
    assert "<code>nvidia-smi topo -m</code>" in prompt and "`" not in prompt
    assert "1." in checks.quiz_text() and "c)" in checks.quiz_text()


def test_unanswered_exercises_give_nothing_away(dgx1):
    # the notebook's exercise cells start with None so that running them does not reveal the answer
    r = checks.check_best_worst_pair(dgx1, None, None)
    assert not r.correct and r.message.startswith("No answer yet")
    assert "NV2" not in r.message and "SYS" not in r.message and "GPU0–GPU3" not in r.message
    r = checks.check_path_ordering(None, measured={"default": 300.0, "shm": 27.0, "socket": 3.5})
    assert not r.correct and r.message.startswith("No prediction yet")
    assert "default > shm > socket" not in r.message and "300" not in r.message


def test_path_ordering_names_the_unit_of_a_bandwidth_measurement():
    busbw = {"default": 313.6, "shm": 27.2, "socket": 3.45}
    right = checks.check_path_ordering("default > shm > socket", measured=busbw, unit="GB/s all-reduce busbw")
    assert right.correct and "Measured (GB/s all-reduce busbw): default 314, shm 27.2, socket 3.45" in right.message
    assert "matches your prediction" in right.message
    wrong = checks.check_path_ordering("socket > shm > default", measured=busbw, unit="GB/s all-reduce busbw")
    assert not wrong.correct and "differs from your prediction" in wrong.message
    assert "you predicted socket > shm > default" in wrong.message


def test_quiz_model_sizes_and_busbw_match_the_code():
    from ddlab.measure import collectives
    from ddlab.training import models_torch
    cnn = models_torch.count_parameters(models_torch.build("cnn"))
    wide = models_torch.count_parameters(models_torch.build("wide"))
    sizes = next(q for q in quiz_questions.QUIZ if "small CNN" in q.prompt)
    assert "about 1.2M" in sizes.prompt and abs(cnn - 1.2e6) / 1.2e6 < 0.05
    assert "about 76M" in sizes.prompt and abs(wide - 76e6) / 76e6 < 0.05
    assert "about 4.8 MB" in sizes.explanation and abs(4 * cnn - 4.8e6) / 4.8e6 < 0.05
    assert "tens of times larger" in sizes.explanation and 10 <= wide / cnn < 100
    busbw = next(q for q in quiz_questions.QUIZ if "busbw" in q.prompt)
    assert busbw.choices[busbw.answer] == "the same as algbw"
    assert collectives.bus_factor("all_reduce", 2) == 1.0
    assert collectives.bus_factor("all_reduce", 8) == 1.75 and "1.75" in busbw.explanation
    assert collectives.bus_factor("all_gather", 2) == 0.5 and "(n-1)/n" in busbw.why_not[2]


# ----------------------------------------------------------------------------- p2p diagnosis
def _p2p_matrix():
    import numpy as np
    m = np.full((4, 4), 24.0)
    m[3, :] = m[:, 3] = 8.0     # GPU 3 at a third of the speed
    m[0, 1] = 14.0              # 0 -> 1 slower than 1 -> 0
    np.fill_diagonal(m, 400.0)
    return m


def test_p2p_diagnosis_right_answers_in_any_spelling():
    for outlier, pair in ((3, (0, 1)), ("GPU3", "GPU1-GPU0"), ("3", [1, 0])):
        r = checks.check_p2p_diagnosis(_p2p_matrix(), outlier, pair)
        assert r, r.message
        assert "Slow GPU: right" in r.message and "Asymmetric pair: right" in r.message
        assert "14.0 GB/s" in r.message and "causes" in r.message


def test_p2p_diagnosis_partial_answers_say_which_half_is_wrong():
    r = checks.check_p2p_diagnosis(_p2p_matrix(), 2, (0, 1))
    assert not r and "Slow GPU: not quite" in r.message and "not GPU2" in r.message
    assert "Asymmetric pair: right" in r.message
    r = checks.check_p2p_diagnosis(_p2p_matrix(), 3, (0, 2))
    assert not r and "Slow GPU: right" in r.message and "Asymmetric pair: not quite" in r.message
    r = checks.check_p2p_diagnosis(_p2p_matrix(), "none", "none")
    assert not r and "Slow GPU: not quite" in r.message and "Asymmetric pair: not quite" in r.message


def test_p2p_diagnosis_of_a_healthy_matrix_wants_none():
    import numpy as np
    m = np.full((3, 3), 20.0)
    assert checks.check_p2p_diagnosis(m, "none", "none")
    r = checks.check_p2p_diagnosis(m, 1, (0, 1))
    assert not r and "No GPU is slower" in r.message and "within 10%" in r.message


@pytest.mark.parametrize("outlier,pair,expect", [
    ("GPU7", (0, 1), "one of GPU0, GPU1, GPU2, GPU3"),
    ("the third", (0, 1), "one of GPU0, GPU1, GPU2, GPU3"),
    (3, "zero and one", "two GPUs of GPU0, GPU1, GPU2, GPU3"),
    (3, (0, 9), "GPU9 is not in this matrix"),
    (3, (1, 1), "two GPUs of"),
    (None, (0, 1), "No answer yet"),
])
def test_p2p_diagnosis_typos_get_the_valid_choices_not_a_traceback(outlier, pair, expect):
    r = checks.check_p2p_diagnosis(_p2p_matrix(), outlier, pair)
    assert not r and expect in r.message


@pytest.mark.parametrize("notebook", sorted(quiz_questions.QUIZZES))
def test_each_notebook_quiz_numbers_its_own_questions(notebook):
    qs = quiz_questions.QUIZZES[notebook]
    assert 3 <= len(qs) <= 6 and checks.questions_of(notebook) == qs
    for n, q in enumerate(qs, 1):
        assert checks.check_quiz_answer(n, q.answer, notebook).correct
        wrong = next(i for i in range(len(q.choices)) if i != q.answer)
        assert not checks.check_quiz_answer(n, wrong, notebook).correct
    beyond = checks.check_quiz_answer(len(qs) + 1, "a", notebook)     # a learner's typo: no traceback
    assert not beyond.correct and f"questions 1 to {len(qs)}" in beyond.message
    assert checks.quiz_text(notebook).count("\n1. ") + checks.quiz_text(notebook).startswith("1. ") == 1


def test_every_quiz_question_is_asked_by_some_notebook():
    asked = {id(q) for qs in quiz_questions.QUIZZES.values() for q in qs}
    assert all(id(q) in asked for q in quiz_questions.QUIZ)
    with pytest.raises(ValueError, match="there is a quiz for notebooks"):
        checks.quiz(11)


def test_notebook_quiz_widget_checks_with_the_notebooks_numbering():
    ipywidgets = pytest.importorskip("ipywidgets")
    box = checks.quiz(3)
    assert isinstance(box, ipywidgets.VBox) and len(box.children) == len(quiz_questions.QUIZZES[3])
    _, radio, button, out = box.children[0].children
    radio.value = quiz_questions.QUIZZES[3][0].answer
    button.click()
    assert "Right:" in out.value and "NUMA" in out.value


# --------------------------------------------------------------------------- input pipeline
def _pipeline(rates):
    from ddlab.training.results import ExperimentResult
    return ExperimentResult("input-pipeline", [{"variant": v, "images_per_s": x} for v, x in rates.items()])


def test_input_pipeline_prediction_right_with_a_measurement_that_agrees():
    m = _pipeline({"on the GPU": 900e3, "pageable": 500e3, "pinned": 700e3, "pinned + non_blocking": 850e3})
    r = checks.check_input_pipeline("pinned+non_blocking > pinned > pageable", m)
    assert r and "staging buffer" in r.message and "matches your prediction" in r.message
    assert "pinned + non_blocking 850,000" in r.message


def test_input_pipeline_prediction_wrong_ties_and_nothing_measured():
    r = checks.check_input_pipeline("pageable, pinned, async", None)
    assert not r and r.message.startswith("Not quite: you predicted pageable > pinned > pinned + non_blocking")
    assert "Nothing measured here" in r.message
    tie = _pipeline({"pageable": 100.0, "pinned": 101.0, "pinned + non_blocking": 102.0})
    assert "within 3% of each other" in checks.check_input_pipeline("prefetch > pinned > pageable", tie).message


@pytest.mark.parametrize("prediction", [None, "pinned > pinned > pageable", "fast > slow", 42])
def test_input_pipeline_answers_that_are_not_an_ordering_are_said_so(prediction):
    r = checks.check_input_pipeline(prediction)
    assert not r and ("No prediction yet" in r.message or "is not an ordering" in r.message)


def test_input_pipeline_a_tie_between_the_pinned_ways_still_agrees():
    m = _pipeline({"pageable": 180e3, "pinned": 244e3, "pinned + non_blocking": 240e3})
    r = checks.check_input_pipeline("pinned + non_blocking > pinned > pageable", m)
    assert r and "matches your prediction" in r.message and "pinned and pinned + non_blocking within 3%" in r.message
