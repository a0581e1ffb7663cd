"""ddlab.base.progress: a bar per unit of work, the work's lines in a log file, one summary line."""
import io

import pytest

from ddlab.base import progress


def test_text_bar_draws_fill_and_count():
    out = io.StringIO()
    with progress.Bar(4, "sweep", mode="text", stream=out) as bar:
        bar.advance()
        bar.advance()
        assert out.getvalue().split("\r")[-1].startswith("sweep: 2/4 |" + "#" * 15 + " " * 15 + "|")
    assert "sweep: 2/4" in out.getvalue().split("\r")[-1]      # the bar stays where it stopped


def test_lines_go_to_the_log_not_the_screen(tmp_path):
    out, log = io.StringIO(), tmp_path / "logs" / "sweep.log"
    with progress.Bar(3, "sweep", log=str(log), mode="text", stream=out) as bar:
        for i in range(3):
            bar.log(f"start: run {i}")
            bar.log(f"done: run {i}\n")
            bar.advance(f"run {i}")
            assert log.read_text().splitlines()[-1] == f"done: run {i}"     # readable while the work runs
    screen = out.getvalue()
    assert "start: run" not in screen and "done: run" not in screen
    assert "sweep: 3/3 |" + "#" * 30 + "|" in screen
    last = screen.strip().splitlines()[-1]
    assert last.startswith("sweep: 3 of 3 done in ") and last.endswith(f"each step's lines are in {log}")
    assert last == bar.summary
    assert log.read_text().splitlines() == [f"{w}: run {i}" for i in range(3) for w in ("start", "done")]


def test_a_new_bar_replaces_an_old_log(tmp_path):
    log = tmp_path / "sweep.log"
    log.write_text("old run\n")
    progress.Bar(1, "sweep", log=str(log), mode="text", stream=io.StringIO())
    assert log.read_text() == ""


def test_failure_says_how_far_it_got_and_raises(tmp_path):
    out, log = io.StringIO(), tmp_path / "sweep.log"
    with pytest.raises(RuntimeError, match="launch failed"):
        with progress.Bar(4, "sweep", log=str(log), mode="text", stream=out) as bar:
            bar.advance()
            bar.log("failed after 2 s: run 2")
            raise RuntimeError("launch failed")
    assert out.getvalue().strip().splitlines()[-1].startswith("sweep: stopped after 1 of 4 (")
    assert "failed after 2 s" in log.read_text()


def test_without_a_log_the_summary_names_none():
    out = io.StringIO()
    with progress.Bar(2, "work", mode="text", stream=out) as bar:
        bar.log("dropped")
        bar.advance()
        bar.advance()
        bar.advance()            # more than total: stays at total
    assert bar.done == 2
    assert "lines are in" not in bar.summary and "dropped" not in out.getvalue()


def test_widget_in_jupyter_counts_and_ends_green(tmp_path):
    pytest.importorskip("ipywidgets")
    out = io.StringIO()
    with progress.Bar(2, "sweep", mode="widget", stream=out) as bar:
        assert bar.widget is not None and bar.widget.max == 2 and bar.widget.value == 0
        bar.advance()
        assert bar.widget.value == 1
        bar.advance()
    assert bar.widget.value == 2 and bar.widget.bar_style == "success"
    assert "[" not in out.getvalue()                   # no text bar beside the widget
    assert out.getvalue().strip() == bar.summary


def test_outside_jupyter_auto_is_text():
    assert progress.in_notebook() is False
    bar = progress.Bar(1, "x", stream=io.StringIO())
    assert bar.widget is None


@pytest.mark.parametrize("total", [0, -1, 1.5, True, "3"])
def test_bad_total_is_one_message(total):
    with pytest.raises(ValueError, match="whole number of steps"):
        progress.Bar(total, "x", mode="text", stream=io.StringIO())


def test_a_counter_logs_every_line_and_advances_on_each_end_line(tmp_path):
    out = io.StringIO()
    bar = progress.Bar(2, "launches", log=str(tmp_path / "l.log"), mode="text", stream=out)
    take = bar.counter(" done in ")
    for line in ["[ddlab 1] start: a", "[ddlab 1] done in 3.0 s: a", "[ddlab 2] start: b"]:
        take(line)
    assert bar.done == 1 and "start: a" not in out.getvalue()
    assert (tmp_path / "l.log").read_text().splitlines()[1] == "[ddlab 1] done in 3.0 s: a"
