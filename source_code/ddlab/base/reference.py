"""Recorded and cited results kept under ``source_code/reference/`` as JSON.

Layout: ``reference/<kind>/<name>.json``, e.g. ``reference/p2p/h200x2.json``. Each kind has
its JSON Schema (:data:`ddlab.base.schemas.SCHEMAS`, named like the folder), checked by
:func:`save` and :func:`load`. Every file holds a ``provenance`` object: for a measurement, what :func:`ddlab.system.provenance.collect`
returned on the machine that ran it; for cited data, ``{"cited": true, "source": ...}``.
"""
from __future__ import annotations

import os

from ddlab.base import files
from ddlab.base.paths import REFERENCE_DIR
from ddlab.base.errors import CourseError


class ReferenceMissing(CourseError, FileNotFoundError):
    pass


def path(kind: str, name: str) -> str:
    return os.path.join(REFERENCE_DIR, kind, name + ".json")


def names(kind: str) -> list:
    d = os.path.join(REFERENCE_DIR, kind)
    if not os.path.isdir(d):
        return []
    return sorted(f[:-5] for f in os.listdir(d) if f.endswith(".json"))


def load(kind: str, name: str) -> dict:
    p = path(kind, name)
    if not os.path.exists(p):
        raise ReferenceMissing(f"no recorded result {kind}/{name} (looked for {p}); "
                               f"available: {', '.join(names(kind)) or 'none'}")
    obj = files.read_json(p, "recorded result", schema=kind)
    if not isinstance(obj, dict) or "provenance" not in obj:
        raise files.ResultFileError(f"{p} has no provenance: recorded results must say where they came from; "
                                    f"record it again, or restore it from git (git checkout -- {os.path.relpath(p)})")
    return obj


def save(kind: str, name: str, obj: dict) -> str:
    """Write ``obj`` as ``reference/<kind>/<name>.json``, whole, after checking it against its schema."""
    if "provenance" not in obj:
        raise ValueError("a recorded result needs a provenance object")
    return files.write_json(path(kind, name), obj, schema=kind, what="recorded result")
