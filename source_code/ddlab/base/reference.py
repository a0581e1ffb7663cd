"""Recorded and cited results kept under ``source_code/reference/`` as JSON.

Layout: ``reference/<kind>/<name>.json``, e.g. ``reference/p2p/h200x2.json``. Every file
holds a ``provenance`` object: for a measurement, what :func:`ddlab.system.provenance.collect`
returned on the machine that ran it; for cited data, ``{"cited": true, "source": ...}``.
"""
from __future__ import annotations

import json
import os

from ddlab.base.paths import REFERENCE_DIR


class ReferenceMissing(FileNotFoundError):
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
    with open(p) as f:
        obj = json.load(f)
    if "provenance" not in obj:
        raise ValueError(f"{p} has no provenance: recorded results must say where they came from")
    return obj


def save(kind: str, name: str, obj: dict) -> str:
    if "provenance" not in obj:
        raise ValueError("a recorded result needs a provenance object")
    p = path(kind, name)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=False)
        f.write("\n")
    return p
