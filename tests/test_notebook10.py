"""Notebook 10 (case studies) as a learner meets it: its calls exist, its exercises accept the right answer and
explain a wrong one, its tables fit the notebook, and every count it prints comes from the recordings."""
import ast
import os

import nbformat
import pytest

from ddlab.base import reference
from ddlab.course import case_studies as cs
from ddlab.course import checks, field_reports as fr, predictions, quiz_questions

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK = os.path.join(REPO, "notebooks", "10.Case-Studies.ipynb")


def _cells(kind):
    return [c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.cell_type == kind]


def test_notebook_10_keeps_to_its_markdown_budget():
    assert sum(len(s.split()) for s in _cells("markdown")) <= 2000


def test_every_call_the_notebook_makes_on_a_ddlab_module_exists():
    import importlib
    modules = {}
    for src in _cells("code"):
        tree = ast.parse("\n".join(line for line in src.splitlines() if not line.startswith("%")))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ddlab"):
                for alias in node.names:
                    modules[alias.asname or alias.name] = importlib.import_module(f"{node.module}.{alias.name}")
    assert {"case_studies", "field_reports", "predictions", "checks", "validation"} <= set(modules)
    called = []
    for src in _cells("code"):
        tree = ast.parse("\n".join(line for line in src.splitlines() if not line.startswith("%")))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in modules):
                called.append((node.value.id, node.attr))
    missing = [f"{m}.{a}" for m, a in called if not hasattr(modules[m], a)]
    assert called and not missing, missing


def test_the_split_exercise_accepts_the_recorded_answer_and_explains_a_wrong_one():
    split = fr.recording("mlp-small", "ddp", "shm")
    assert split is not None
    two = next(r for r in split.rows if r["global_batch"] == 32 and r["workers"] == 2)
    assert not predictions.check_split_speedup(None, split, 32).correct
    right = predictions.check_split_speedup(two["speedup"], split, 32)
    assert right.correct and f"{two['speedup']:.2f}" in right.message
    inside = predictions.check_split_speedup((two["speedup_min"] + two["speedup_max"]) / 2, split, 32)
    assert inside.correct
    linear = predictions.check_split_speedup(2, split, 32)
    assert not linear.correct and "Hint" in linear.message and "ms per step" in linear.message
    assert not predictions.check_split_speedup("fast", split, 32).correct      # a typo: a message, no traceback
    with pytest.raises(ValueError, match="global batch 5"):
        predictions.check_split_speedup(1.0, split, 5)
    # the commands printed beside it are the recorded runs' own
    lines = fr.split_commands(split, 32).splitlines()
    runs = [r for r in split.runs if r["global_batch"] == 32]
    assert lines[0].endswith(next(r for r in runs if r["workers"] == 1)["provenance"]["command"])
    assert lines[1].endswith(next(r for r in runs if r["workers"] == 2)["provenance"]["command"])
    assert "NCCL_P2P_LEVEL=LOC" in lines[1] and "NCCL_VERSION" not in lines[1]


def test_the_diagnosis_exercise_reads_the_reports_figures():
    m, labels, about = cs.report_matrix()
    rows = reference.load("cited", cs.V100_REPORT)["rows"]
    for r in rows:
        assert {m[r["a"], r["b"]], m[r["b"], r["a"]]} == {r["low_gbps"], r["high_gbps"]}
    slow = min(labels, key=lambda g: sum(r["high_gbps"] for r in rows if g in (r["a"], r["b"])))
    lopsided = next((r["a"], r["b"]) for r in rows if r["low_gbps"] != r["high_gbps"])
    assert checks.check_p2p_diagnosis(m, slow, lopsided[::-1]).correct
    wrong = checks.check_p2p_diagnosis(m, (slow + 1) % len(labels), lopsided)
    assert not wrong.correct and "Asymmetric pair: right" in wrong.message
    assert "does not say which direction" in about


def test_the_source_criticism_question_is_answered_by_the_quiz():
    from ddlab.system import links
    table = cs.report_table()
    fastest = max(r["high_gbps"] for r in reference.load("cited", cs.V100_REPORT)["rows"])
    assert fastest > links.pcie_x16_gbs(3) and any(f"{links.pcie_x16_gbs(3):.2f} GB/s" in n for n in table.notes)
    quiz = quiz_questions.QUIZZES[10]
    for n, q in enumerate(quiz, 1):      # every question accepts its answer and explains each wrong choice
        assert checks.check_quiz_answer(n, q.answer, 10).correct
        for i in range(len(q.choices)):
            if i != q.answer:
                assert not checks.check_quiz_answer(n, i, 10).correct


SHOWN = {
    "cited": lambda: fr.cited(),
    "ag news": lambda: fr.cited("ag-news-ddp"),
    "samples per step": fr.samples_per_step,
    "sizes": fr.model_sizes,
    "grid": fr.recorded_grid,
    "beside": fr.beside_cited,
    "v100": cs.report_table,
    "tunings": cs.tuning_effects,
}


@pytest.mark.parametrize("name", sorted(SHOWN))
def test_each_recorded_or_cited_table_fits_the_notebook(name):
    t = SHOWN[name]()
    lines = t.text().splitlines()[(1 if t.title else 0):]
    body = lines[:2 + len(t.rows)]                 # header, rule, rows (the notes wrap in the notebook)
    assert t.rows and max(map(len, body)) <= cs.TABLE_WIDTH, (name, max(map(len, body)))


def test_the_printed_counts_come_from_the_recordings():
    from ddlab.cost import recorded_runs, validation
    held = validation.held_out()
    line = cs.held_out_line(held)
    k, m = validation.hits(held.rows, "model_err")
    assert f"{k} of {m} recorded 2-GPU runs" in line and "python -m ddlab.cost.validation" in line
    k0, m0 = validation.hits(held.rows, "without_two_workers_err")     # before the term measured on the probe
    assert f"({k0} of {m0} without the two-worker term" in line
    wrong = [r for r in held.rows if r["model_pred"] is not None and r["measured"] is not None
             and (r["model_pred"] > 1) != (r["measured"] > 1)]
    assert f"pays on {len(wrong)}" in line
    rec = recorded_runs.recorded_points()
    slow = [p for p in rec.points if "strong" not in p.launcher and p.measured_plain is not None
            and p.measured_plain < 1]
    assert f" {len(slow)} of " in cs.below_one_line(rec)
    for p in slow:
        assert f"{p.launcher} {p.path}" in cs.below_one_line(rec).split(f"{p.model}: ")[1]
