"""Recorded p2p runs: :func:`record` saves a live :class:`ddlab.measure.p2p.P2PResult` with this
machine's provenance, :func:`load_recorded` returns a run recorded on one of the course's
machines (``source_code/reference/p2p/<name>.json``) and :func:`load` one saved at a path; each
is checked against the ``p2p`` schema (:mod:`ddlab.base.schemas`) on saving and on loading.
"""
from __future__ import annotations

from typing import Optional

from ddlab.base import files
from ddlab.measure.p2p import P2PResult
from ddlab.measure.p2p_diagnosis import summary


def record(result: P2PResult, *, name: Optional[str] = None, path: Optional[str] = None,
           command=None) -> str:
    """Save a live result with this machine's provenance: under reference/p2p/<name>.json,
    or at ``path``. Returns the path written."""
    from ddlab.system import provenance
    from ddlab.base import reference
    if result.synthetic:
        raise ValueError("a format-demo result is not a measurement and cannot be recorded")
    obj = {"provenance": provenance.collect(command), "kind": "p2p", "result": result.to_dict(),
           "summary": summary(result), "text": result.text}
    if name:
        return reference.save("p2p", name, obj)
    if not path:
        raise ValueError("record() needs a name or a path")
    return files.write_json(path, obj, schema="p2p", what="p2p recording")


def load_recorded(name: str = "h200x2") -> P2PResult:
    """A run recorded on one of the course's machines (source_code/reference/p2p/<name>.json)."""
    from ddlab.base import reference
    return _result_of(reference.load("p2p", name))


def load(path: str) -> P2PResult:
    """A run saved by :func:`record` at ``path`` (one clear message when it is missing, corrupt
    or breaks the schema)."""
    return _result_of(files.read_json(path, "p2p recording", schema="p2p"))


def _result_of(obj: dict) -> P2PResult:
    result = P2PResult.from_dict(obj["result"])
    result.provenance = obj["provenance"]
    result.text = obj.get("text")
    return result

