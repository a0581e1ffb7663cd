"""What notebook 1 (data-parallel training) must hold, and its self-check quiz."""
import os
import re

import nbformat
import pytest

from ddlab.cost import allreduce_algorithms as ar
from ddlab.course import checks, quiz_questions
from ddlab.training import throughput

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK = os.path.join(REPO, "notebooks", "1.Data-Parallel-Training.ipynb")


def _nb():
    return nbformat.read(NOTEBOOK, as_version=4)


def _text(kind):
    return "\n".join(c.source for c in _nb().cells if c.cell_type == kind)


def test_opens_with_objectives_time_and_the_live_mode_line():
    cells = _nb().cells
    assert cells[0].cell_type == "markdown"
    assert "**Objectives.**" in cells[0].source and "**Time.**" in cells[0].source
    assert re.search(r"\*\*Time\.\*\* About \d+ minutes", cells[0].source)
    first_code = next(c.source for c in cells if c.cell_type == "code")
    assert "hardware.inventory" in first_code and "inv.mode" in first_code
    assert all(mode in first_code for mode in ('"cpu"', '"single-gpu"', '"multi-gpu"'))


def test_teaches_averaging_naive_and_ring_with_the_derivation():
    md = _text("markdown")
    for n in range(1, 9):
        assert f"\n## {n}. " in "\n" + md, f"section {n} missing"
    assert "Reduce-scatter" in md and "All-gather" in md
    assert r"2(n-1)\,S/n" in md and r"\frac{2(n-1)}{n}" in md
    assert "![Ring all-reduce" in md and "../images/ring_allreduce.png" in md
    assert os.path.exists(os.path.join(REPO, "images", "ring_allreduce.png"))
    assert "oversubscribe" in md
    code = _text("code")
    assert "ar.gradient_averaging(" in code and "ar.naive_allreduce(" in code and "ar.ring_allreduce(" in code
    assert "assert ring.traffic_factor() == float(factor)" in code


def test_live_cpu_run_and_the_gpu_result_beside_it():
    code = _text("code")
    assert 'experiments.throughput_scaling(workers=(1, 2, 4), device="cpu", framework="torch"' in code
    assert 'launcher="ddp"' in code
    assert 'experiments.live_or_recorded("scaling", "torch", "ddp", "cnn"' in code
    assert "missing_ok=True" in code
    assert "os.cpu_count()" in code


def test_one_gpu_trains_live_where_there_is_one_and_the_policy_says_what_ran_live():
    code = _text("code")
    assert 'mode.live_or_recorded("one-gpu")' in code and "one_gpu.beside_recorded(" in code
    first_code = next(c.source for c in _nb().cells if c.cell_type == "code")
    assert "policy.decide(" in first_code and "policy.Machine.detect()" in first_code
    assert "## 7. One GPU, live" in _text("markdown")


def test_ends_with_summary_quiz_and_links():
    cells = _nb().cells
    md = _text("markdown")
    assert "## 8. Summary" in md and "## Self-check quiz" in md
    assert "checks.quiz(1)" in _text("code")
    last = cells[-1].source
    assert "[Start Here](../Start_Here.ipynb)" in last
    assert "(2.Latency-and-Bandwidth.ipynb)" in last


def test_committed_without_outputs_and_with_the_course_kernel():
    nb = _nb()
    assert nb.metadata.kernelspec.name == "ddlab" and nb.metadata.language_info.name == "python"
    for c in nb.cells:
        if c.cell_type == "code":
            assert c.outputs == [] and c.execution_count is None


def test_no_measured_throughput_typed_into_the_text():
    md = _text("markdown")
    assert not re.search(r"\d[\d,.]*\s*(k\s*)?(images/s|img/s)", md)
    assert not re.search(r"\d[\d,.]*\s*x\s+(faster|slower|speedup)", md)
    assert not re.search(r"\d[\d,.]*\s*%\s*(efficien|scaling)", md)
    assert not re.search(r"\d[\d,.]*\s*(GB/s|MB/s|ms|us|µs)\b", md)


# ---- the quiz
QUIZ = quiz_questions.DATA_PARALLEL_QUIZ


@pytest.mark.parametrize("n", range(1, len(QUIZ) + 1))
def test_every_question_has_a_right_and_explained_wrong_answers(n):
    q = QUIZ[n - 1]
    right = checks.check_quiz_answer(n, q.answer, QUIZ)
    assert right.correct and right.message.startswith("Right.")
    assert checks.check_quiz_answer(n, chr(ord("a") + q.answer), QUIZ).correct
    for i in range(len(q.choices)):
        if i != q.answer:
            wrong = checks.check_quiz_answer(n, i, QUIZ)
            assert not wrong.correct and q.why_not[i] in wrong.message


def test_quiz_covers_averaging_and_the_ring_factor_and_agrees_with_the_code():
    averaging = next(q for q in QUIZ if "average" in q.prompt)
    assert "whole batch" in averaging.choices[averaging.answer]
    ring = next(q for q in QUIZ if "ring all-reduce" in q.prompt.lower())
    assert ring.choices[ring.answer] == "2(n-1)/n x S"
    for n, words in ((4, "1.5"), (8, "1.75")):
        assert f"{float(ar.ring_traffic_factor(n)):g}" == words and words in ring.explanation
    root = next(q for q in QUIZ if "rank 0's link" in q.prompt)
    run = ar.naive_allreduce(ar.random_buffers(8, 10))
    assert root.choices[root.answer] == f"{run.traffic_factor():g}"
    honest = next(q for q in QUIZ if "honest throughput" in q.prompt)
    assert honest.choices[honest.answer].endswith(f"{throughput.images_per_second(15, 64, 4, 3.0):,.0f} images/s")


def test_quiz_of_notebook_1_is_separate_from_notebook_2s():
    assert not {q.prompt for q in QUIZ} & {q.prompt for q in quiz_questions.QUIZ}
    beyond = checks.check_quiz_answer(len(QUIZ) + 1, "a", QUIZ)      # a typo gets a message, not a traceback
    assert not beyond and f"questions 1 to {len(QUIZ)}" in beyond.message
    assert checks.quiz_text(QUIZ).startswith("1. " + QUIZ[0].prompt)


def test_quiz_widget_shows_notebook_1s_questions():
    ipywidgets = pytest.importorskip("ipywidgets")
    box = checks.quiz(QUIZ)
    assert isinstance(box, ipywidgets.VBox) and len(box.children) == len(QUIZ)
    _, radio, button, out = box.children[1].children
    radio.value = QUIZ[1].answer
    button.click()
    assert "Right:" in out.value
