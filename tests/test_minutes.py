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


# ----------------------------------------------------------------------------- word limits
def test_output_words_read_streams_errors_html_text_and_plain_text_but_no_widget_repr():
    outputs = [{"output_type": "stream", "name": "stdout", "text": ["one two\n", "| --- | three |\n"]},
               {"output_type": "display_data", "data": {"text/html": "<style>td {color: red}</style><table>"
                                                                     "<tr><td>four</td><td>5&nbsp;GB/s</td></tr></table>",
                                                        "text/plain": "not read: the HTML is"}},
               {"output_type": "execute_result", "data": {"text/plain": "six seven"}, "execution_count": 1},
               {"output_type": "display_data", "data": {"text/plain": "IntSlider(value=3)",
                                                        "application/vnd.jupyter.widget-view+json": {}}},
               {"output_type": "display_data", "data": {"image/png": "iVBORw0KGgo="}},
               {"output_type": "display_data", "data": {"text/markdown": "**ten** `x`",
                                                        "text/plain": "<IPython.core.display.Markdown object>"}},
               {"output_type": "error", "ename": "ValueError", "evalue": "eight", "traceback": ["\x1b[0;31mnine\x1b[0m"]}]
    # one two three | four 5 GB/s | six seven | - | - | ten (the Markdown's text) | ValueError eight nine
    assert minutes.output_words(outputs) == 3 + 3 + 2 + 1 + 3
    nb = {"cells": [md("not printed"), {**code("x"), "outputs": outputs[:1]}, {**code("y"), "outputs": outputs[2:3]}]}
    assert minutes.printed_words(nb) == 5


def test_doc_words_keep_code_and_leave_out_link_targets_tags_and_table_rules():
    text = "| notebook | minutes |\n|---|---|\n| [1. Data](notebooks/1.X.ipynb) | 25 |\n\n`make lab` <br> starts"
    # notebook, minutes, 1., Data, 25, `make, lab`, starts
    assert minutes.doc_words(text) == 8


def test_printed_words_are_read_like_the_markdown_and_flagged_over_their_limit(tmp_path):
    p = write(tmp_path, [md("**Time.** About 15 minutes.\n" + " ".join(["word"] * 1000))])
    quiet, loud = minutes.estimate(p), minutes.estimate(p, printed=2000)
    assert quiet["printed_words"] is None and loud["printed_words"] == 2000
    assert loud["reading_min"] == pytest.approx(quiet["reading_min"] + 2000 / minutes.READING_WPM)
    assert "states 15, needs 16" in loud["fits"] and quiet["fits"] == "yes"
    start = dict(loud, notebook="Start_Here.ipynb", words=1200)
    rows = minutes.word_table([loud, start, quiet], [("README.md", 1501), ("tools/recording/README.md", 800)]).rows
    over = {(r["what"], r["kind"]): r["over"] for r in rows}
    assert over == {("x.ipynb", "Markdown"): "no", ("x.ipynb", "printed"): "-",
                    ("Start_Here.ipynb", "Markdown"): "yes", ("Start_Here.ipynb", "printed"): "yes",
                    ("README.md", "document"): "yes", ("tools/recording/README.md", "document"): "no"}


def test_tool_reads_printed_words_of_an_nbval_run_and_fails_over_a_limit(tmp_path):
    nb2, nb3 = "2.Latency-and-Bandwidth.ipynb", "3.System-Topology.ipynb"
    counted = tmp_path / "printed.json"
    n2 = sum(c["cell_type"] == "code" for c in json.load(open(os.path.join(ROOT, "notebooks", nb2)))["cells"])
    counted.write_text(json.dumps({nb2: {"words": 99999, "cells_counted": n2, "code_cells": n2},
                                   nb3: {"words": 10, "cells_counted": 1, "code_cells": 40}}))
    out = tmp_path / "m.json"
    done = _tool("--words", "--printed", str(counted), "--out", str(out),
                 "--notebooks", f"notebooks/{nb2}", f"notebooks/{nb3}")
    rows = {r["notebook"]: r for r in json.loads(out.read_text())["rows"]}
    assert rows[nb2]["printed_words"] == 99999 and rows[nb3]["printed_words"] is None
    assert f"{nb3}: only 1 of its 40 cells were counted" in done.stderr
    assert f"{nb2}: 99,999 printed words, over its 1,500" in done.stderr and done.returncode == 1
    assert "Word limits" in done.stdout and "instructor/GUIDE.md" in done.stdout


def _notebook(path, prints):
    cells = [md("# T\n\n**Time.** About 15 minutes.")] + [code(f"print({p!r})") for p in prints]
    for i, c in enumerate(cells):
        c["id"] = f"c{i}"
    path.write_text(json.dumps({"cells": cells, "metadata": {"kernelspec": {"name": "python3", "display_name": "p",
                                                                            "language": "python"}},
                                "nbformat": 4, "nbformat_minor": 5}))


@pytest.mark.slow
def test_the_nbval_hook_fails_the_notebook_that_prints_more_than_its_limit(tmp_path):
    """conftest.py under nbval: with --printed-words a check item follows each notebook's cells and
    fails (naming the notebook, its count and its wordiest cells) when the cells printed more than the
    limit; the counts are written with --printed-words-json; each notebook runs once."""
    import shutil
    shutil.copy(os.path.join(ROOT, "conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    _notebook(tmp_path / "loud.ipynb", ["a " * 1000, "b " * 600])
    _notebook(tmp_path / "quiet.ipynb", ["three short words"])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "source_code"), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--nbval-lax", "--nbval-current-env",
                           "--printed-words", "--printed-words-json", "w.json", "loud.ipynb", "quiet.ipynb"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert "FAILED loud.ipynb::printed words" in done.stdout, done.stdout[-3000:]
    assert "loud.ipynb prints 1,600 words on this machine, over its limit of 1,500" in done.stdout
    assert "Cell 0 (1,000), Cell 1 (600)" in done.stdout
    assert "1 failed, 4 passed" in done.stdout          # 3 cells and quiet.ipynb's check pass
    assert json.loads((tmp_path / "w.json").read_text()) == {
        "loud.ipynb": {"words": 1600, "cells_counted": 2, "code_cells": 2},
        "quiet.ipynb": {"words": 3, "cells_counted": 1, "code_cells": 1}}


@pytest.mark.slow
def test_tool_runs_each_notebook_on_cpu_and_counts_what_it_prints(tmp_path):
    """--words without --printed: each notebook executed here with CUDA hidden; its printed words go into
    the estimate; a notebook that fails is named with its error, left uncounted, and the exit status is 1."""
    ok, bad = tmp_path / "ok.ipynb", tmp_path / "bad.ipynb"
    for path, extra in ((ok, "import os; print('cuda', repr(os.environ.get('CUDA_VISIBLE_DEVICES')))"), (bad, "1/0")):
        _notebook(path, ["one two three"])
        nb = json.loads(path.read_text())
        nb["cells"].append({**code(extra), "id": "extra"})
        path.write_text(json.dumps(nb))
    out = tmp_path / "m.json"
    done = _tool("--words", "--timeout", "60", "--out", str(out), "--notebooks", str(ok), str(bad))
    rows = {r["notebook"]: r for r in json.loads(out.read_text())["rows"]}
    assert rows["ok.ipynb"]["printed_words"] == 3 + 1          # one two three; cuda '' (no GPU visible)
    assert rows["bad.ipynb"]["printed_words"] is None
    assert "bad.ipynb failed when run on CPU, its printed words not counted: ZeroDivisionError" in done.stderr
    assert done.returncode == 1


def test_code_listings_are_left_out_of_the_printed_words_and_their_prose_is_kept():
    from ddlab.course import handson
    script = handson.show("single_device")
    step = handson.diff("single_device", "ddp_1_init", reason="each rank joins the process group")

    def words(obj):
        return minutes.output_words([{"output_type": "display_data",
                                      "data": {"text/html": obj._repr_html_(), "text/plain": str(obj)}}])
    assert len(script.text.split()) > 100 and words(script) == len(script.name.split())
    assert step.added > 0 and words(step) == len("Why: each rank joins the process group".split()) + 5


def test_a_printed_command_line_counts_only_its_label():
    table = ("<table><tr><td>shm</td></tr></table><p>note: a note here</p>"
             "<p>command (shm): NCCL_P2P_LEVEL=LOC torchrun --standalone --nproc-per-node=2 train.py --model cnn</p>")
    stream = ("what ran:\n  python source_code/train/fmnist_torch.py --launcher none\n"
              "python                 3.11.7\nthe data is missing: run `make data` here\n")
    outputs = [{"output_type": "display_data", "data": {"text/html": table, "text/plain": "x"}},
               {"output_type": "stream", "name": "stdout", "text": stream}]
    # shm | note: a note here | command (shm): || what ran: | python 3.11.7 | the data is missing: run `make data` here
    assert minutes.output_words(outputs) == 1 + 4 + 2 + 2 + 2 + 8
