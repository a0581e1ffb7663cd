"""Files of results, written whole or not at all, and read with one clear message.

:func:`write_text`, :func:`write_bytes`, :func:`write_json` and :func:`write_figure` write to a
temporary file in the target's folder, flush and fsync it, then rename it over the target
(``os.replace``, atomic on POSIX): a run killed or out of disk mid-write leaves the old file or
the new one, never half of either. :func:`open_atomic` is the same for a writer that streams
(a download). Every result, recording, log and report of the course is written through here.

:func:`read_json` turns a missing, truncated or corrupt file into one :class:`ResultFileError`
that names the file and what to do. With ``schema=`` (a name in :mod:`ddlab.base.schemas`)
both directions check the recording against its JSON Schema: a file that breaks it gets the
same one message, naming the first bad field. NaN and infinity are refused on writing (they
are not JSON); :func:`nan_to_null` is for a result that keeps a diverged value on purpose.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import stat
import tempfile
import time
from typing import Optional

from ddlab.base import schemas
from ddlab.base.errors import CourseError
from ddlab.base.paths import REPO_ROOT


class ResultFileError(CourseError, ValueError):
    """A result file that cannot be read or written: the message names it and says what to do."""


@contextlib.contextmanager
def open_atomic(path: str, mode: str = "w", encoding: Optional[str] = "utf-8"):
    """``with open_atomic(path, "wb") as f: ...``: ``f`` is a temporary file beside ``path``,
    renamed over it when the block ends without an exception (removed when it raises)."""
    if mode not in ("w", "wb"):
        raise ValueError(f"open_atomic writes a whole file: mode 'w' or 'wb', not {mode!r}")
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        os.fchmod(fd, _mode_for(path))       # mkstemp makes it owner-only; a result is as readable as any file
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": encoding})) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _remove_orphans(folder, "." + os.path.basename(path) + ".")


def set_aside(path: str, prefix: str) -> str:
    """Renames the file ``path`` to ``<prefix><name>`` beside it (``<prefix><stem>-2<ext>`` and on where
    that is taken), so a file about to be written at ``path`` does not replace it; returns the new path.
    A rename moves the whole file at once: nothing is written, and no reader sees half of it."""
    folder, name = os.path.split(os.path.abspath(path))
    stem, ext = os.path.splitext(name)
    dst, n = os.path.join(folder, prefix + name), 1
    while os.path.exists(dst):
        n += 1
        dst = os.path.join(folder, f"{prefix}{stem}-{n}{ext}")
    os.replace(path, dst)
    return dst


ORPHAN_AGE_S = 3600     # a temporary file this old was left by a writer that was killed


def _remove_orphans(folder: str, prefix: str) -> None:
    """Removes the temporary files of earlier writers of the same file that were killed before
    they could rename or remove theirs (a fresh one may be another writer's, still at work)."""
    now = time.time()
    for name in os.listdir(folder):
        if name.startswith(prefix) and name.endswith(".tmp"):
            full = os.path.join(folder, name)
            try:
                if now - os.stat(full).st_mtime > ORPHAN_AGE_S:
                    os.unlink(full)
            except OSError:
                pass


def _mode_for(path: str) -> int:
    """The permissions the file keeps (an existing file's own), or a new file's under the umask."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write_text(path: str, text: str) -> str:
    """Write ``text`` to ``path`` atomically (temporary file, fsync, rename); returns ``path``."""
    with open_atomic(path, "w") as f:
        f.write(text)
    return path


def write_bytes(path: str, data: bytes) -> str:
    """Write ``data`` to ``path`` atomically; returns ``path``."""
    with open_atomic(path, "wb") as f:
        f.write(data)
    return path


def write_figure(path: str, fig, **savefig_kwargs) -> str:
    """A matplotlib figure saved atomically (the format from the file's extension); returns ``path``."""
    fmt = savefig_kwargs.pop("format", None) or os.path.splitext(path)[1].lstrip(".") or "png"
    with open_atomic(path, "wb") as f:
        fig.savefig(f, format=fmt, **savefig_kwargs)
    return path


def write_json(path: str, obj, indent: int = 1, *, schema: Optional[str] = None, what: str = "result",
               default=None, allow_nan: bool = False) -> str:
    """``obj`` as JSON, written atomically; returns ``path``. NaN and infinity are refused (they
    are not JSON) with a :class:`ResultFileError` naming the field; ``allow_nan=True`` only for a
    file that Python alone reads back (a worker's result to its parent), never a recording.
    ``schema``: the recording's schema (:data:`ddlab.base.schemas.SCHEMAS`), checked on what
    would be written; a mismatch leaves the old file as it was. ``default``: as for ``json.dumps``."""
    try:
        text = json.dumps(obj, indent=indent, allow_nan=allow_nan, default=default) + "\n"
    except ValueError as exc:
        where = non_finite_field(obj)
        if where is None:
            raise
        raise ResultFileError(f"not writing the {what} {path}: {where} is NaN or infinite, which JSON cannot "
                              f"hold (the file is left as it was)") from None
    except TypeError as exc:     # a value json cannot encode (an object, a set, bytes)
        raise ResultFileError(f"not writing the {what} {path}: {exc}; this is a bug in what made it; the file "
                              f"is left as it was") from None
    if schema is not None:
        _check(json.loads(text), schema, f"not writing the {what} {path}: it",
               "this is a bug in what made it; the file is left as it was")
    return write_text(path, text)


def read_json(path: str, what: str = "result", schema: Optional[str] = None):
    """The JSON in ``path``; a missing, unreadable or (with ``schema``) malformed file raises
    :class:`ResultFileError` naming the file, what is wrong, and how to get it back."""
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
    except FileNotFoundError:
        raise ResultFileError(f"no {what} at {path}") from None
    except OSError as exc:               # a folder, no permission, an I/O error
        raise ResultFileError(f"cannot read the {what} {path} ({exc.strerror or exc})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ResultFileError(f"the {what} {path} is truncated or corrupt ({exc}); {_way_back(path)}") from None
    if schema is not None:
        _check(obj, schema, f"the {what} {path}", _way_back(path))
    return obj


def nan_to_null(obj):
    """A copy of ``obj`` with every NaN or infinite float replaced by None (JSON's null): for a
    result that records a diverged value on purpose; its reader takes null back."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: nan_to_null(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [nan_to_null(v) for v in obj]
    return obj


def non_finite_field(obj, at: tuple = ()) -> Optional[str]:
    """The first field of ``obj`` holding NaN or infinity, as a path (``rows[0].loss``), else None."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return schemas.field_path(at)
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, (list, tuple)) else ()
    for k, v in items:
        found = non_finite_field(v, at + (k,))
        if found:
            return found
    return None


def _check(obj, schema: str, subject: str, what_to_do: str) -> None:
    bad = schemas.first_error(obj, schema)
    if bad:
        field, why = bad
        raise ResultFileError(f"{subject} does not match the {schema} recording format at {field} ({why}); "
                              f"{what_to_do}")


def _way_back(path: str) -> str:
    """What to do: record it again, or take the committed file back (a path inside the
    repository is given relative to here, as git takes it; one outside as it is)."""
    inside = os.path.abspath(path).startswith(os.path.join(REPO_ROOT, ""))
    return f"record it again, or restore it from git (git checkout -- {os.path.relpath(path) if inside else path})"
