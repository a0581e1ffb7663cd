"""A progress bar for long work: one bar, the work's own lines in a log file, one line at the end.

Long work (a sweep of training launches, say) shows a bar that advances once per unit of work
and ends with a one-line summary. The lines each unit prints (a launch's start and end) go to a
log file the caller names, never to the screen::

    with progress.Bar(12, "convergence sweep", log="scratch/convergence-sweep.log") as bar:
        run_sweep(points, progress=bar.log, done=bar.advance)

In Jupyter the bar is an ``ipywidgets.IntProgress`` with a label; in a terminal, or without
ipywidgets, a text bar redrawn on one line. Leaving the ``with`` block prints the summary:
"convergence sweep: 12 of 12 done in 3 min 5 s; each step's lines are in ...", or, when the
work raised, how far it got and where its lines are (the exception goes on).
"""
from __future__ import annotations

import os
import sys
import time
from typing import Optional

from ddlab.base import files
from ddlab.base.units import format_duration

WIDTH = 30          # characters of the text bar


def in_notebook() -> bool:
    """True in a Jupyter kernel (where a widget can show), False in a terminal or a script."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def notebook_log(name: str) -> Optional[str]:
    """Where a notebook's live launches write their lines (``scratch/<name>.log`` in the
    repository) when this runs in Jupyter, so that a :class:`Bar` can stand in for them there;
    None elsewhere (a terminal shows the launches' own lines)."""
    if not in_notebook():
        return None
    from ddlab.base import paths
    return os.path.join(paths.REPO_ROOT, "scratch", f"{name}.log")


def text_bar(done: int, total: int, title: str, width: int = WIDTH) -> str:
    """'[##########--------------------] 4/12 title'."""
    filled = int(width * done / total) if total else width
    return f"[{'#' * filled}{'-' * (width - filled)}] {done}/{total} {title}"


class Bar:
    """``total`` units of work titled ``title``; ``log``: the file that receives :meth:`log`'s
    lines (written whole after each line, so it is readable while the work runs), or None to
    drop them. ``mode``: "auto" (a widget in Jupyter when ipywidgets is installed, else text),
    "widget" or "text". ``stream``: where the text bar and the summary go (stdout)."""

    def __init__(self, total: int, title: str, log: Optional[str] = None, mode: str = "auto", stream=None):
        if isinstance(total, bool) or not isinstance(total, int) or total < 1:
            raise ValueError(f"a progress bar needs a whole number of steps >= 1, got {total!r}")
        if mode not in ("auto", "widget", "text"):
            raise ValueError(f"mode must be auto, widget or text, got {mode!r}")
        self.total, self.title, self.log_path = total, title, log
        self.stream = stream or sys.stdout
        self.done = 0
        self.lines: list = []
        self.started = time.monotonic()
        self.summary = ""
        self._widget = self._label = None
        if mode == "widget" or (mode == "auto" and in_notebook()):
            self._make_widget()
        if self.log_path:
            files.write_text(self.log_path, "")      # a fresh log: an old one is replaced, not appended to
        self._draw()

    def _make_widget(self) -> None:
        try:
            import ipywidgets as w
            from IPython.display import display
        except ImportError:
            return          # no widgets: the text bar
        self._widget = w.IntProgress(value=0, min=0, max=self.total, description="")
        self._label = w.Label(value=f"0/{self.total} {self.title}")
        display(w.HBox([self._widget, self._label]))

    @property
    def widget(self):
        """The ``IntProgress`` shown in Jupyter, or None for the text bar."""
        return self._widget

    def _draw(self) -> None:
        if self._widget is not None:
            self._widget.value = self.done
            took = format_duration(time.monotonic() - self.started)
            self._label.value = f"{self.done}/{self.total} {self.title}, {took}"
            return
        self.stream.write("\r" + text_bar(self.done, self.total, self.title))
        self.stream.flush()

    def log(self, line: str) -> None:
        """One line of the work's own output: into the log file, not onto the screen."""
        self.lines.append(str(line).rstrip("\n"))
        if self.log_path:
            files.write_text(self.log_path, "\n".join(self.lines) + "\n")

    def advance(self, *_args) -> None:
        """One unit done (arguments, such as a finished run's description, are ignored)."""
        self.done = min(self.total, self.done + 1)
        self._draw()

    def counter(self, mark: str):
        """A ``progress`` callback for work that only prints lines: each line goes to the log, and
        a line holding ``mark`` (a unit's end line, e.g. ddlab.training.runs.DONE_MARK) advances the bar."""
        def take(line: str) -> None:
            self.log(line)
            if mark in str(line):
                self.advance()
        return take

    def finish(self, failed: bool = False) -> str:
        """Print and return the one-line summary."""
        took = format_duration(time.monotonic() - self.started)
        where = f"; each step's lines are in {self.log_path}" if self.log_path else ""
        if failed:
            self.summary = f"{self.title}: stopped after {self.done} of {self.total} ({took}){where}"
        else:
            self.summary = f"{self.title}: {self.done} of {self.total} done in {took}{where}"
        if self._widget is not None:
            self._widget.bar_style = "danger" if failed else "success"
            self._label.value = f"{self.done}/{self.total} {self.title}"
        else:
            self.stream.write("\n")
        print(self.summary, file=self.stream, flush=True)
        return self.summary

    def __enter__(self) -> "Bar":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.finish(failed=exc_type is not None)
        return False
