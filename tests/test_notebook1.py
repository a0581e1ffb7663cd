"""Notebook 1 (data-parallel training): committed clean, no measured number typed into its text, and its
self-check quiz (tests/test_notebooks_1_to_3.py runs its cells and its exercise)."""
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
