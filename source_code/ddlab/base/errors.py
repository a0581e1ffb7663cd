"""Errors a learner may meet, shown in a notebook as the one message they carry.

An error class of the course mixes in :class:`CourseError`. Its message already says what is
wrong and what to do ("no Fashion-MNIST under ...: run `make data`"), so in Jupyter (IPython's
``_render_traceback_`` hook, any kernel) the cell ends with that message and one line saying how
to see the traceback, not with a screen of library frames. The error is still raised: the cell
is marked failed, ``%tb`` prints the full traceback, and a script outside IPython shows the usual
traceback.
"""
from __future__ import annotations

TRACEBACK_HINT = "(the full traceback: run %tb in the next cell)"


class CourseError(Exception):
    """Mixed into the course's error classes: rendered in IPython as its message alone."""

    def _render_traceback_(self) -> list:
        # \x1b[31m...\x1b[0m: the error's name in red, as IPython shows an exception's name
        return [f"\x1b[31m{type(self).__name__}\x1b[0m: {self}", TRACEBACK_HINT]
