"""A progress bar for long work: one bar, the work's own lines in a log file, one line at the end.

Long work (a sweep of training launches, say) shows a bar that advances once per unit of work
and ends with a one-line summary. The lines each unit prints (a launch's start and end) go to a
log file the caller names, never to the screen::

    with progress.Bar(12, "convergence sweep", log="scratch/convergence-sweep.log") as bar:
        run_sweep(points, progress=bar.log, done=bar.advance)

tqdm draws the bar: in Jupyter its widget (``tqdm.notebook``, with ipywidgets), in a terminal or
without ipywidgets its text bar on one line. Leaving the ``with`` block prints the summary:
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

TEXT_FORMAT = "{desc}: {n_fmt}/{total_fmt} |{bar:30}| {elapsed}"     # tqdm's bar_format for the text bar


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


def _tqdm(total: int, title: str, widget: bool, stream):
    """A tqdm bar: the notebook widget when ``widget`` and ipywidgets can draw it, else text on ``stream``."""
    if widget:
        try:
            from tqdm.notebook import tqdm as notebook_bar
            return notebook_bar(total=total, desc=title, mininterval=0)
        except ImportError:         # no ipywidgets: the text bar
            pass
    from tqdm import tqdm as text_bar
    return text_bar(total=total, desc=title, file=stream, bar_format=TEXT_FORMAT, ascii=True,
                    mininterval=0, leave=True)


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
        if self.log_path:
            files.write_text(self.log_path, "")      # a fresh log: an old one is replaced, not appended to
        self._bar = _tqdm(total, title, mode == "widget" or (mode == "auto" and in_notebook()), self.stream)

    @property
    def widget(self):
        """The ``IntProgress``-like widget shown in Jupyter (tqdm's), or None for the text bar."""
        container = getattr(self._bar, "container", None)
        return container.children[1] if container is not None else None

    def log(self, line: str) -> None:
        """One line of the work's own output: into the log file, not onto the screen."""
        self.lines.append(str(line).rstrip("\n"))
        if self.log_path:
            files.write_text(self.log_path, "\n".join(self.lines) + "\n")

    def advance(self, *_args) -> None:
        """One unit done (arguments, such as a finished run's description, are ignored)."""
        if self.done < self.total:
            self.done += 1
            self._bar.update(1)

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
        self._bar.close()
        if failed and self.widget is not None:
            self.widget.bar_style = "danger"         # tqdm marks only a bar left short as failed
        print(self.summary, file=self.stream, flush=True)
        return self.summary

    def __enter__(self) -> "Bar":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.finish(failed=exc_type is not None)
        return False
