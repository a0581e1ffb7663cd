"""Files of results, written whole or not at all, and read with one clear message.

:func:`write_text` and :func:`write_json` write to a temporary file in the target's folder,
flush and fsync it, then rename it over the target (``os.replace``, atomic on POSIX): a run
killed or out of disk mid-write leaves the old file or the new one, never half of either.
:func:`read_json` turns a missing, truncated or corrupt file into one :class:`ResultFileError`
that names the file and what to do.
"""
from __future__ import annotations

import json
import os
import tempfile

from ddlab.base.errors import CourseError


class ResultFileError(CourseError, ValueError):
    """A result file that cannot be read: the message names it and says what to do."""


def write_text(path: str, text: str) -> str:
    """Write ``text`` to ``path`` atomically (temporary file, fsync, rename); returns ``path``."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def write_json(path: str, obj, indent: int = 1) -> str:
    """``obj`` as JSON, written atomically. NaN and infinity are refused (they are not JSON)."""
    return write_text(path, json.dumps(obj, indent=indent, allow_nan=False) + "\n")


def read_json(path: str, what: str = "result"):
    """The JSON in ``path``; a missing or unreadable file raises :class:`ResultFileError`
    naming the file, what is wrong, and how to get it back."""
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise ResultFileError(f"no {what} at {path}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ResultFileError(f"the {what} {path} is truncated or corrupt ({exc}); record it again, or restore "
                              f"it from git (git checkout -- {os.path.relpath(path)})") from None
