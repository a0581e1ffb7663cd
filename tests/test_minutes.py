"""ddlab.course.minutes and tools/notebook_minutes.py: a notebook's minutes estimated from itself."""
import json
import os
import subprocess
import sys

import pytest

from ddlab.course import checks, minutes

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
TOOL = os.path.join(ROOT, "tools", "notebook_minutes.py")


def md(text):
    return {"cell_type": "markdown", "metadata": {}, "source": text}


def code(text):
    return {"cell_type": "code", "metadata": {}, "source": text, "outputs": [], "execution_count": None}


def write(tmp_path, cells, name="x.ipynb"):
    p = tmp_path / name
    p.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return str(p)


def test_words_leave_out_formulas_inline_code_tags_and_link_targets():
    nb = {"cells": [md("Two words $t = \\alpha + S/\\beta$ `torch.cuda` <b>bold</b> [link](http://a.b/c d e)"),
                    code("not counted at all here")]}
    # Two, words, bold, link: formula, inline code, the tag and the link target are not read as words
    assert minutes.markdown_words(nb) == 4


def test_exercises_count_checks_predictions_each_quiz_question_and_the_repair():
    nb = {"cells": [code("checks.check_best_worst_pair(a, b)"), code("predictions.check_ring_bytes(x)"),
                    code("checks.quiz(3)"), code("my = repair.start_exercise()"), code("print(1)")]}
    n_quiz = len(checks.questions_of(3))
    count, mins = minutes.exercise_minutes(nb)
    assert count == 2 + n_quiz + 1
    assert mins == pytest.approx(2 * 2.0 + n_quiz * 1.0 + 5.0)


def test_a_hands_on_step_counts_the_words_of_its_reason_and_changed_lines():
    words = minutes.diff_words("ddp", 1)
    assert words > 10
    count, mins = minutes.exercise_minutes({"cells": [code('handson.step("ddp", 1)')]})
    assert count == 1 and mins == pytest.approx(words / minutes.CODE_WPM)


def test_optional_section_is_left_out_of_the_estimate_and_shown_apart(tmp_path):
    words = " ".join(["word"] * 400)
    p = write(tmp_path, [md("# T\n\n**Time.** About 15 minutes.\n\n" + words),
                         md("## 4. Keras (optional)\n\n" + words), code("checks.check_x(1)"),
                         md("## 5. Back to the core\n\nsix more words in the core")])
    row = minutes.estimate(p)
    assert row["stated_min"] == 15 and row["exercises"] == 0
    # the core: "T Time About 15 minutes", the 400 words, "5. Back to the core", "six more words in the core"
    assert row["words"] == 5 + 400 + 5 + 6
    # the optional part: "4. Keras (optional)" and its 400 words, and its checked answer
    assert row["optional_min"] == pytest.approx((3 + 400) / minutes.READING_WPM + 2.0)


def test_fits_says_why_a_stated_time_does_not_fit(tmp_path):
    long = " ".join(["word"] * 4000)              # 20 minutes of reading
    assert "states 15, needs 21" in minutes.estimate(write(tmp_path, [md("**Time.** About 15 minutes.\n" + long)]))["fits"]
    assert minutes.estimate(write(tmp_path, [md("**Time.** About 25 minutes.\n" + long)]))["fits"] == "yes"
    assert minutes.estimate(write(tmp_path, [md("**Time.** About 40 minutes.\n" + long)]))["fits"] == "outside 15-30"
    assert minutes.estimate(write(tmp_path, [md(long)]))["fits"] == "no Time line"
    row = minutes.estimate(write(tmp_path, [md("**Time.** About 25 minutes.\n" + long)]), run_s=360)
    assert row["run_min"] == 6 and "states 25, needs 27" in row["fits"]


def test_a_file_that_is_not_a_notebook_gets_one_message(tmp_path):
    bad = tmp_path / "bad.ipynb"
    bad.write_text("{not json")
    with pytest.raises(minutes.NotebookError, match="bad.ipynb: cannot read it as a notebook"):
        minutes.estimate(str(bad))
    bad.write_text("[]")
    with pytest.raises(minutes.NotebookError, match="not a notebook"):
        minutes.estimate(str(bad))


def _tool(*args):
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_tool_reads_run_all_times_from_a_junit_report_and_writes_json(tmp_path):
    xml = tmp_path / "r.xml"
    xml.write_text('<testsuites><testsuite>'
                   '<testcase classname="notebooks.2.Latency-and-Bandwidth.ipynb" name="Cell 0" time="30.0"/>'
                   '<testcase classname="notebooks.2.Latency-and-Bandwidth.ipynb" name="Cell 1" time="90.0"/>'
                   '<testcase classname="tests.test_x" name="test_y" time="500"/>'
                   '</testsuite></testsuites>')
    out = tmp_path / "m.json"
    done = _tool("--junit", str(xml), "--out", str(out), "--machine", "a 2-core test")
    assert "Notebook minutes" in done.stdout and "a 2-core test" in done.stdout
    rows = {r["notebook"]: r for r in json.loads(out.read_text())["rows"]}
    assert rows["2.Latency-and-Bandwidth.ipynb"]["run_min"] == pytest.approx(2.0)
    assert rows["3.System-Topology.ipynb"]["run_min"] is None
    # exit status: 1 exactly when a notebook does not fit
    assert done.returncode == (1 if any(r["fits"] != "yes" for n, r in rows.items() if n != "Start_Here.ipynb") else 0)


def test_tool_gives_one_line_for_a_corrupt_report(tmp_path):
    bad = tmp_path / "r.xml"
    bad.write_text("<testsuites>")
    done = _tool("--junit", str(bad))
    assert done.returncode != 0 and "cannot read" in done.stderr and "Traceback" not in done.stderr


def test_tool_leaves_out_a_time_taken_of_an_earlier_version_of_the_notebook(tmp_path):
    """nbval.json keeps the SHA-256 of the notebook that ran: a time of the notebook as it is here counts,
    one of another version is named and left out, and one kept without a SHA-256 (older runs) counts."""
    nb2, nb3 = "notebooks/2.Latency-and-Bandwidth.ipynb", "notebooks/3.System-Topology.ipynb"
    timings = {nb2: {"seconds": 120.0, "exit": 0, "sha256": minutes.file_sha256(os.path.join(ROOT, nb2))},
               nb3: {"seconds": 60.0, "exit": 0, "sha256": "0" * 64},
               "Start_Here.ipynb": {"seconds": 30.0, "exit": 0}}
    path = tmp_path / "nbval.json"
    path.write_text(json.dumps(timings))
    out = tmp_path / "m.json"
    done = _tool("--timings", str(path), "--out", str(out))
    rows = {r["notebook"]: r for r in json.loads(out.read_text())["rows"]}
    assert rows["2.Latency-and-Bandwidth.ipynb"]["run_min"] == pytest.approx(2.0)
    assert rows["3.System-Topology.ipynb"]["run_min"] is None
    assert rows["Start_Here.ipynb"]["run_min"] == pytest.approx(0.5)
    assert f"{nb3}: its 60.0 s were timed on an earlier version of the notebook; left out" in done.stderr
    assert minutes.timing_is_current(os.path.join(ROOT, nb2), {"seconds": 1.0}) is None
