"""The JSON Schemas of the recordings the course saves and loads: one per kind of file.

A recording is checked against its schema when it is written and when it is read
(:func:`ddlab.base.files.write_json` and :func:`ddlab.base.files.read_json` with ``schema=``,
and :mod:`ddlab.base.reference` for everything under ``source_code/reference/<kind>/``).
The schemas require the fields the course reads and the type of each; they are permissive
elsewhere, since recordings made at different times carry different extra fields. A failed
row (a run that did not finish) may carry ``error`` and ``error_detail`` instead of numbers.

The names are the folders under ``source_code/reference/`` (``experiments``, ``allreduce``,
``p2p``, ``hostlink``, ...) plus ``report-step`` (one step's JSON of ``ddlab report``).
:func:`first_error` says where an object first breaks its schema; the message a learner sees
is made by :mod:`ddlab.base.files`.
"""
from __future__ import annotations

import sys
from typing import Optional

_NUM = {"type": ["number", "null"]}          # a measurement: a number, or null where none was made
_INT = {"type": "integer"}
_STR = {"type": "string"}
_OBJ = {"type": "object"}
_ARR = {"type": "array"}


def _obj(required: dict, optional: Optional[dict] = None, **extra) -> dict:
    """An object that must hold ``required`` (name: schema) and may hold ``optional``."""
    return {"type": "object", "required": sorted(required), "properties": {**(optional or {}), **required}, **extra}


def _rows_of(item: dict) -> dict:
    return {"type": "array", "items": item}


# A failed row: what went wrong, instead of the figures.
_FAILURE = {"error": _STR, "error_detail": _STR}

# ---------------------------------------------------------------- training (training.results, recording)
_EXPERIMENT_ROW = _obj({}, {"workers": {"type": ["integer", "null"]}, "images_per_s": _NUM, "speedup": _NUM,
                            "step_ms_median": _NUM, "test_accuracy": _NUM, **_FAILURE})
_CONVERGENCE_ROW = _obj({"label": _STR, "workers": _INT, "global_batch": _INT, "rule": _STR,
                         "warmup_epochs": {"type": "number"}},
                        {"test_accuracy": _NUM, "final_test_loss": _NUM, "b_simple": _NUM, **_FAILURE})
_EVALUATION = _obj({"step": _INT, "test_accuracy": _NUM}, {"epoch": _NUM, "test_loss": _NUM, "train_s": _NUM})
_CONVERGENCE_RUN = _obj({"point": _STR}, {"evaluations": _rows_of(_EVALUATION), **_FAILURE})

EXPERIMENT = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    **_obj({"experiment": _STR, "rows": _rows_of(_EXPERIMENT_ROW), "provenance": _OBJ},
           {"source": _STR, "config": _OBJ, "notes": _rows_of(_STR), "runs": _rows_of(_OBJ), "companion": {"$ref": "#"}}),
    # a convergence sweep (course.convergence_sweep) keeps every run's evaluations: what its tables redo
    "if": {"properties": {"experiment": {"const": "convergence"}}, "required": ["experiment"]},
    "then": {"properties": {"rows": _rows_of(_CONVERGENCE_ROW), "runs": _rows_of(_CONVERGENCE_RUN)}},
}

STEP_PROFILE = _obj({"model": _STR, "batch": _INT, "device": _STR, "precision": _STR,
                     "forward_s": {"type": "number"}, "backward_s": {"type": "number"},
                     "optimizer_s": {"type": "number"},
                     "ready": {"type": "object", "additionalProperties": {"type": "number", "minimum": 0, "maximum": 1}},
                     "repeats": _INT, "provenance": _OBJ}, {"sm_count": {"type": ["integer", "null"]}})

# ---------------------------------------------------------------- measurements (measure.*)
_SWEEP_ROW = _obj({"bytes": _INT, "time_us": {"type": "number"}, "algbw_gbps": {"type": "number"},
                   "busbw_gbps": {"type": "number"}}, {"count": _INT, "time_us_max": _NUM, "iters": _INT,
                                                      "isolated": {"type": "boolean"}, "graph": {"type": "boolean"}})
_SWEEP = _obj({"op": _STR, "backend": _STR, "path": _STR, "nproc": _INT, "rows": _rows_of(_SWEEP_ROW),
               "provenance": _OBJ},
              {"env": {"type": "object", "additionalProperties": _STR}, "dtype": _STR, "meta": _OBJ,
               "nccl_log_text": {"type": ["string", "null"]}})
ALLREDUCE = _obj({"kind": {"const": "ddlab.collectives"}, "format": _INT, "sweeps": {**_rows_of(_SWEEP), "minItems": 1}},
                 {"provenance": _OBJ})

_MATRIX = {"type": "array", "items": {"type": "array", "items": _NUM}}
_P2P_RESULT = _obj({"n": _INT}, {"format": _STR, "labels": _rows_of(_INT), "devices": _ARR,
                                 "matrices": {"type": "object", "additionalProperties": _MATRIX},
                                 "variants": {"type": "object", "additionalProperties": _MATRIX},
                                 "connectivity": {"type": ["array", "null"]}, "synthetic": {"type": "boolean"}},
                   anyOf=[{"required": ["variants"]}, {"required": ["matrices"]}])
P2P = _obj({"kind": {"const": "p2p"}, "result": _P2P_RESULT, "provenance": _OBJ},
           {"summary": _STR, "text": {"type": ["string", "null"]}})

_LINK_ROW = {"numa_node": _INT, "memory": _STR, "direction": _STR, "bytes": _INT}
HOSTLINK = _obj({"format": {"const": "ddlab-hostlink/1"}, "method": _STR, "device": _OBJ,
                 "rows": _rows_of(_obj({**_LINK_ROW, "gbps": {"type": "number"}})),
                 "latency": _rows_of(_obj({**_LINK_ROW, "us_median": {"type": "number"}})), "provenance": _OBJ},
                {"source": _STR, "numa": _OBJ, "link": {"type": ["object", "null"]}, "skipped": _ARR,
                 "notes": _rows_of(_STR)})

HOROVOD = _obj({"provenance": _OBJ, "check_build": _OBJ, "build_rc": _INT,
                "smoke": {"type": "object", "additionalProperties": _obj({}, {"lines": _ARR, "transport_counts": _OBJ})}})

# ---------------------------------------------------------------- the machine (system.*) and cited figures
TOPOLOGY = _obj({"text": _STR, "provenance": _OBJ},
                {"name": _STR, "description": {"type": ["string", "null"]}, "gpu_names": _OBJ,
                 "links": {"type": "object", "additionalProperties": _STR}})
NCCL_LOGS = _obj({"logs": {"type": "object", "additionalProperties": _STR, "minProperties": 1}, "provenance": _OBJ},
                 {"what": _STR})
# (that it is cited and names its source: course.field_reports.cited says so in its own words)
CITED = _obj({"columns": _rows_of(_ARR), "rows": _rows_of(_OBJ), "provenance": _OBJ},
             {"title": _STR, "notes": _rows_of(_STR), "wrap": _rows_of(_STR)})

# ---------------------------------------------------------------- ddlab report
REPORT_STEP = _obj({"status": {"enum": ["done", "skipped", "failed"]}},
                   {"format": _INT, "step": _STR, "title": _STR, "why": _STR, "data": _OBJ, "seconds": _NUM,
                    "estimate_s": _NUM, "provenance": _OBJ},
                   **{"if": {"properties": {"status": {"const": "done"}}},
                      "then": {"required": ["data"]}, "else": {"required": ["why"]}})

SCHEMAS = {
    "experiments": EXPERIMENT, "profiles": STEP_PROFILE, "allreduce": ALLREDUCE, "p2p": P2P, "hostlink": HOSTLINK,
    "horovod": HOROVOD, "topologies": TOPOLOGY, "nccl_logs": NCCL_LOGS, "cited": CITED, "report-step": REPORT_STEP,
}


def _jsonschema():
    """jsonschema, imported without its optional checker of the "iri" formats when that would be
    rfc3987-syntax, which builds about 35 parsers when imported (1-2 s in every process that
    loads a recording: each notebook's kernel, each ``python -m ddlab`` command). No schema here
    has a format; a process that imported rfc3987-syntax or jsonschema before keeps what it has."""
    if "jsonschema" not in sys.modules and "rfc3987_syntax" not in sys.modules:
        sys.modules["rfc3987_syntax"] = None       # makes jsonschema's optional import of it fail, at once
        try:
            import jsonschema
        finally:
            del sys.modules["rfc3987_syntax"]      # anything later may still import it
    import jsonschema
    return jsonschema


def validator_missing() -> Optional[str]:
    """None when recordings can be checked on save and load (jsonschema imports); otherwise one
    message saying what is missing and how to install it. A recording script asks first, before
    it spends any time measuring what it could not then save."""
    try:
        _jsonschema()
    except ImportError:
        return ("jsonschema is not installed, and every recording is checked against its schema when it is "
                "saved: install it (pip install jsonschema; it is one of ddlab's dependencies in pyproject.toml)")
    return None


def first_error(obj, name: str) -> Optional[tuple]:
    """Where ``obj`` first breaks the schema ``name``: ``(field, what is wrong)`` with the field
    as a path (``rows[2].images_per_s``; ``(top)`` for the object itself), or None when it fits.
    "First" is the error nearest the top of the file (then the first in the file's order)."""
    jsonschema = _jsonschema()
    if name not in SCHEMAS:
        raise KeyError(f"no schema {name!r}; the schemas are: {', '.join(sorted(SCHEMAS))}")
    validator = jsonschema.Draft202012Validator(SCHEMAS[name])
    errors = list(validator.iter_errors(obj))
    if not errors:
        return None
    err = min(errors, key=_place)
    # an anyOf failure: its most specific reason names the field
    while err.context:
        err = max(err.context, key=lambda e: len(e.absolute_path))
    return field_path(_parts(err)), err.message[:200]


def _parts(err) -> list:
    """The path of the field ``err`` is about; for a missing field, the field's own path."""
    parts = list(err.absolute_path)
    if err.validator == "required" and isinstance(err.instance, dict):
        parts.append(next(p for p in err.validator_value if p not in err.instance))
    return parts


def _place(err) -> tuple:
    """The order in which errors are told: a field's own error before what a condition on
    another field asks (if/then/else), nearest the top first, then in the file's order."""
    conditional = bool({"then", "else"} & set(err.relative_schema_path))
    parts = _parts(err)
    return conditional, len(parts), [(0, p) if isinstance(p, int) else (1, str(p)) for p in parts]


def field_path(parts) -> str:
    """``['rows', 2, 'gbps']`` -> ``rows[2].gbps``; empty -> ``(top)``."""
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top)"
