"""Recorded training results: where they live, how they are loaded and written.

A recording is an :class:`~ddlab.training.results.ExperimentResult` saved as
``source_code/reference/experiments/<experiment>-<framework>-<launcher>-<model>[-<variant>].json``
with its provenance (which names the machine by its hardware, :func:`ddlab.system.machine_name.machine_label`).
Results are plain data: this module is the one that writes them (:func:`save`, atomically) and
reads them back (:func:`load`, :func:`load_recorded`), both checked against the recording's
JSON Schema (``experiments`` in :mod:`ddlab.base.schemas`). What the course records, and how, is
:mod:`ddlab.recording.sets`.
"""
from __future__ import annotations

import os
import re
from typing import Optional

from ddlab.base import files, reference, schemas
from ddlab.training.results import ExperimentResult
from ddlab.training.runspec import RunSpec

REFERENCE_KIND = "experiments"
MIN_REPEATS = 3


def reference_name(experiment: str, framework: str, launcher: str, model: str) -> str:
    return f"{experiment}-{framework}-{launcher}-{model}"


def load_recorded(experiment: str, framework: str = "torch", launcher: str = "ddp",
                  model: str = "cnn", variant: Optional[str] = None) -> ExperimentResult:
    """The recorded result (raises ddlab.base.reference.ReferenceMissing when there is none).
    ``variant`` picks a recording made with a non-default option, saved as
    ``<name>-<variant>.json`` (e.g. "graph": DDP with cuda_graph="on"). The result's
    ``spec`` is its run description (derived from its config for older recordings) and
    ``live_default_differences()`` says where it differs from a live run today (empty: the same experiment)."""
    name = reference_name(experiment, framework, launcher, model) + (f"-{variant}" if variant else "")
    return ExperimentResult.from_dict(reference.load(REFERENCE_KIND, name), source="recorded")


def batch_variants(experiment: str, framework: str = "torch", launcher: str = "ddp", model: str = "cnn") -> list:
    """[(batch per GPU, variant)] of the recordings of an experiment made at another batch than the
    live default (``<name>-b<N>.json``, e.g. (128, "b128"), and ``<name>-b<N>-<machine>.json``, one kept
    under its machine's name beside another machine's, e.g. (128, "b128-2xh100-80gb-hbm3-nv18")), in batch
    order; load each with :func:`load_recorded`'s ``variant``."""
    name = reference_name(experiment, framework, launcher, model)
    found = (re.fullmatch(r"b(\d+)(-\d+x[a-z0-9-]+)?", n[len(name) + 1:]) for n in reference.names(REFERENCE_KIND)
             if n.startswith(name + "-b"))
    return sorted((int(m.group(1)), m.group(0)) for m in found if m)


def recorded_with_prefix(prefix: str) -> list:
    """[(name, ExperimentResult)] of every committed recording whose name starts with ``prefix``
    (e.g. "strong-scaling-torch-", "tuning-torch-"), in name order; empty when there is none."""
    return [(n, ExperimentResult.from_dict(reference.load(REFERENCE_KIND, n), source="recorded"))
            for n in sorted(reference.names(REFERENCE_KIND)) if n.startswith(prefix)]


def save(result: ExperimentResult, path: str) -> str:
    """Write ``result`` to ``path`` as JSON, whole or not at all; returns ``path``. A result that
    breaks its schema, or holds NaN, is refused with one message and the old file is kept."""
    return files.write_json(path, result.to_dict(), schema=REFERENCE_KIND, what="experiment result")


def load(path: str, source: Optional[str] = None) -> ExperimentResult:
    """The result saved at ``path`` (one clear message when it is missing, corrupt or breaks its schema)."""
    return ExperimentResult.from_dict(files.read_json(path, "experiment result", schema=REFERENCE_KIND),
                                      source=source)


def save_reference(result: ExperimentResult, name: Optional[str] = None) -> str:
    """Record a live result under source_code/reference/experiments/<name>.json."""
    from ddlab.training.runs import ExperimentError
    if result.source != "live":
        raise ExperimentError("only a live result can be recorded as a reference")
    c = result.config
    return reference.save(REFERENCE_KIND, name or reference_name(result.name, c.get("framework"),
                                                                 c.get("launcher"), c.get("model")),
                          result.to_dict())


def cannot_save() -> Optional[str]:
    """None when a recording can be saved here; otherwise why not and how to mend it. A recording
    script asks first, before it spends any time measuring what it could not then save."""
    missing = schemas.validator_missing()
    return missing and (missing + "; on a machine without a package registry, tools/recording/prepare_offline.sh "
                        "gathers the wheels in .whl/ and `source tools/recording/gpu_setup.sh` installs them")


def use_hardware_label() -> str:
    """Names this machine by its hardware in every provenance written from now on (the
    training workers inherit it): sets and returns ``DDLAB_MACHINE``."""
    from ddlab.system.machine_name import this_machine
    os.environ["DDLAB_MACHINE"] = this_machine()[0]
    return os.environ["DDLAB_MACHINE"]


def gpu_spec(model: str, repeats: int = MIN_REPEATS, **fields) -> RunSpec:
    """The run description a recording uses: today's live GPU default for ``model``, repeated."""
    return RunSpec.for_device("cuda", model, repeats=repeats, **fields)
