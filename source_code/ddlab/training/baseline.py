"""The one baseline every speedup divides by: the plain one-GPU run (one process, no wrapper:
``launcher="none"``) of the same model, batch per GPU, precision and CUDA-graph setting, on the
same GPU model.

A data-parallel wrapper with one worker is not that run: DDP with world size 1 keeps its hooks
and buckets, so its one-worker step is longer than the plain step, and a speedup over it credits
DDP's two-GPU run with DDP's own cost. Horovod with one worker registers no hooks, so its
one-worker step is the plain one. Dividing each framework by its own one-worker run therefore
ranks them by their wrappers' cost on one GPU, not by what two GPUs deliver. The wrapper's
one-worker run stays in the tables as a row of its own, with its ratio to the plain run.

Where the plain run comes from (:func:`find`), in order:

1. the result's own plain row (``path`` :data:`PLAIN_PATH`; every experiment records one beside
   the wrapper's one-worker run);
2. the plain one-GPU runs recorded apart (:data:`RECORDINGS`): ``plain-baselines-torch`` (the
   ``plain-baselines`` JOB of tools/recording/record_experiments.py), then the plain rows of
   ``wrapper-cost-torch`` and the rows of ``one-gpu-torch-none``, each only on the same GPU model;
3. none: the speedup is ``None`` ("-" in the tables) and :attr:`Plain.missing` says which plain run
   is missing. There is no fall-back to the wrapper's one-worker run.

:func:`rebase` sets every row's ``speedup`` (and its min-max) over that run; the result's caption
notes name where each plain run came from (:func:`notes`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Optional, Sequence

from ddlab.base import reference

PLAIN_PATH = "plain"                  # the ``path`` of a plain row in an experiment's rows
PLAIN_LABEL = "1 GPU, no wrapper"     # how tables name it
PLAIN_LABEL_CPU = "1 CPU process, no wrapper"    # the same run where the workers are CPU processes
SPEEDUP_HEAD = "speedup vs plain 1 GPU"
SPEEDUP_HEAD_CPU = "speedup vs plain 1 process"
WRAPPER_PATH = "1 worker"             # the ``path`` of the wrapper's one-worker row
PLAIN_RECORDING = "plain-baselines-torch"
# The recordings of plain one-GPU runs, in the order they are looked in: (name, what its rows are).
RECORDINGS = ((PLAIN_RECORDING, "the plain-baselines recording"),
              ("wrapper-cost-torch", "the wrapper-cost recording's plain rows, timed in one process"),
              ("one-gpu-torch-none", "the one-GPU recording"))
# The experiments whose rows are divided by the plain run.
REBASED = ("scaling", "nccl-paths", "launchers", "tuning", "strong-scaling")
_FRAMEWORK_NAMES = {"ddp": "DDP", "horovod": "Horovod", "none": "plain"}


@dataclass(frozen=True)
class Key:
    """What a plain run must share with the runs it is the baseline of."""
    model: Optional[str]
    batch: Optional[int]               # images per step on the one GPU
    precision: Optional[str]
    cuda_graph: bool
    gpu_model: Optional[str]
    # In a side-by-side view of several recordings, the launcher whose recording the row comes from:
    # each recording's rows divide by that recording's own plain run, timed beside them.
    beside: Optional[str] = None

    def text(self) -> str:
        return (f"{self.model} at batch {self.batch}, {self.precision}"
                + (", CUDA graph" if self.cuda_graph else "") + f", on {self.gpu_model or 'this device'}")


@dataclass(frozen=True)
class Plain:
    """The plain one-GPU run of ``key``: its images/s (median, min, max over its repeats), and
    where it came from (``where``: a caption's words; ``own``: a row of the result itself), or,
    with ``images_per_s`` None, which run is missing (``missing``)."""
    key: Key
    images_per_s: Optional[float] = None
    images_per_s_min: Optional[float] = None
    images_per_s_max: Optional[float] = None
    step_ms_median: Optional[float] = None
    repeats: Optional[int] = None
    where: str = ""
    own: bool = False

    @property
    def found(self) -> bool:
        return bool(self.images_per_s)

    @property
    def missing(self) -> str:
        return "" if self.found else f"no plain one-GPU run recorded for {self.key.text()}"

    def row(self) -> dict:
        """The plain run as a display row (for a table whose result does not hold it)."""
        return {"path": PLAIN_PATH, "workers": 1, "images_per_s": self.images_per_s,
                "images_per_s_min": self.images_per_s_min, "images_per_s_max": self.images_per_s_max,
                "step_ms_median": self.step_ms_median, "repeats": self.repeats, "global_batch": self.key.batch,
                "speedup": 1.0 if self.found else None, "plain": True, "recorded_apart": True,
                "env_text": "(recorded apart: see the note)"}


def is_plain(row: dict) -> bool:
    """Whether ``row`` is a plain one-GPU run (no wrapper)."""
    return row.get("path") == PLAIN_PATH or row.get("plain") is True or row.get("launcher") == "none"


def is_wrapper_one(row: dict) -> bool:
    """Whether ``row`` is the wrapper's own one-worker run (DDP or Horovod with one worker)."""
    return not is_plain(row) and row.get("workers") == 1


def framework_name(launcher: Optional[str]) -> str:
    return _FRAMEWORK_NAMES.get(launcher or "", str(launcher))


def plain_label(device: Optional[str] = None) -> str:
    """The plain run as tables name it: "1 GPU, no wrapper", or on a CPU run (``device`` "cpu")
    "1 CPU process, no wrapper"."""
    return PLAIN_LABEL_CPU if device == "cpu" else PLAIN_LABEL


def speedup_head(device: Optional[str] = None) -> str:
    """A speedup column's heading: over the plain one-GPU run, or on a CPU run over the plain process."""
    return SPEEDUP_HEAD_CPU if device == "cpu" else SPEEDUP_HEAD


def wrapper_label(launcher: Optional[str]) -> str:
    """The wrapper's one-worker row as tables name it: "DDP, 1 worker"."""
    return f"{framework_name(launcher)}, 1 worker" if launcher and launcher != "none" else WRAPPER_PATH


# ----------------------------------------------------------------------------- the key of a row
def _spec(config: dict) -> dict:
    return config.get("spec") or {}


def key_of(config: dict, provenance: dict, row: dict, experiment: str) -> Key:
    """The plain run ``row`` of a result (``config``, ``provenance``, ``experiment``) divides by:
    the same model, precision and CUDA-graph setting on the same GPU model, at the row's batch per
    GPU (for strong scaling, the whole global batch: the one GPU takes all of it)."""
    spec = _spec(config)
    if experiment == "strong-scaling":
        batch = row.get("global_batch")
    else:
        batch = row.get("batch_per_worker") or config.get("batch_size") or spec.get("batch")
        if batch is None and row.get("global_batch") and row.get("workers"):
            batch = row["global_batch"] // row["workers"]
    graph = spec.get("cuda_graph") == "on" if spec else bool(row.get("cuda_graph"))
    gpu = (provenance or {}).get("gpu_model") or (config.get("device_name") if config.get("device") == "cuda" else None)
    return Key(row.get("model") or config.get("model"), int(batch) if batch else None,
               spec.get("precision") or config.get("precision") or row.get("precision"), bool(graph),
               gpu if config.get("device", "cuda") == "cuda" else None, row.get("recorded_with"))


# ----------------------------------------------------------------------------- where plain runs are
_LOADED: dict = {}


def _load(name: str) -> Optional[dict]:
    """A recording of plain runs as a dict (read once per file version), or None when absent."""
    path = reference.path("experiments", name)
    try:
        stamp = os.stat(path).st_mtime_ns
    except OSError:
        return None
    hit = _LOADED.get(path)
    if hit is None or hit[0] != stamp:
        try:
            hit = (stamp, reference.load("experiments", name))
        except (reference.ReferenceMissing, ValueError, OSError):
            hit = (stamp, None)
        _LOADED[path] = hit
    return hit[1]


def _row_key(doc: dict, row: dict) -> Key:
    c, prov = doc.get("config") or {}, doc.get("provenance") or {}
    graph = row.get("cuda_graph")
    if graph is None:
        graph = _spec(c).get("cuda_graph") == "on"
    return Key(row.get("model") or c.get("model"), row.get("batch") or row.get("global_batch") or c.get("batch_size"),
               row.get("precision") or c.get("precision"), bool(graph), prov.get("gpu_model"))


def _plain_rows(name: str, doc: dict):
    for r in doc.get("rows") or []:
        if r.get("error") or not r.get("images_per_s"):
            continue
        if name == "wrapper-cost-torch" and r.get("wrapper") != "plain":
            continue
        yield r


def recorded_apart(key: Key) -> Plain:
    """The plain run of ``key`` recorded in its own file (:data:`RECORDINGS`, in order); one whose
    images/s is None when none holds it."""
    from ddlab.system.provenance import label
    for name, _ in RECORDINGS:
        doc = _load(name)
        if not doc:
            continue
        for r in _plain_rows(name, doc):
            if _row_key(doc, r) == key:
                c = doc.get("config") or {}
                steps = c.get("steps")
                return Plain(key, r["images_per_s"], r.get("images_per_s_min"), r.get("images_per_s_max"),
                             r.get("step_ms_median"), r.get("repeats"),
                             f"{label(_one_gpu(doc.get('provenance') or {}))} ({name}"
                             + (f", {steps} timed steps" if steps else "") + ")")
    return Plain(key)


def _one_gpu(prov: dict) -> dict:
    """A provenance as one GPU of its model (a plain run uses one, whatever the machine had)."""
    return dict(prov, gpu_count=1, machine=None)


def own_plain(rows, key_fn) -> dict:
    """{Key: Plain} of a result's own plain rows (``key_fn(row)`` gives a row's key)."""
    out = {}
    for r in rows:
        if is_plain(r) and not r.get("error") and r.get("images_per_s") and not r.get("recorded_apart"):
            k = key_fn(r)
            out[k] = Plain(k, r["images_per_s"], r.get("images_per_s_min"), r.get("images_per_s_max"),
                           r.get("step_ms_median"), r.get("repeats"), "this result's own plain run", own=True)
    return out


def find(key: Key, own: Optional[dict] = None) -> Plain:
    """The plain run of ``key``: the result's own (``own``: {Key: Plain}), else one recorded apart,
    else a :class:`Plain` that says it is missing."""
    if own and key in own:
        return own[key]
    if key.gpu_model is None or key.model is None or key.batch is None:
        return Plain(key)
    apart = recorded_apart(replace(key, beside=None))
    return replace(apart, key=key)


# ----------------------------------------------------------------------------- rebasing a result
def _ratio(v, base):
    return v / base if v is not None and base else None


def rebase(name: str, rows: list, config: dict, provenance: dict) -> dict:
    """Sets every measured row's ``speedup`` (and ``speedup_min``/``speedup_max``) of an experiment of
    :data:`REBASED` to its images/s over the plain one-GPU run of its key (:func:`find`): None where
    that run is missing. The wrapper's one-worker row gets its own ratio to the plain run. Returns
    {Key: Plain} for the keys the rows used (:func:`notes` says where each came from)."""
    if name not in REBASED:
        return {}

    def key_fn(r):
        return key_of(config, provenance, r, name)
    own = own_plain(rows, key_fn)
    used: dict = {}
    for r in rows:
        if r.get("error") or r.get("images_per_s") is None:
            continue
        k = key_fn(r)
        plain = used.get(k) or find(k, own)
        used[k] = plain
        base = plain.images_per_s
        r["speedup"] = _ratio(r["images_per_s"], base)
        for end in ("min", "max"):
            if base and r.get(f"images_per_s_{end}") is not None:
                r[f"speedup_{end}"] = r[f"images_per_s_{end}"] / base
            else:
                r.pop(f"speedup_{end}", None)
        if "efficiency" in r:
            r["efficiency"] = r["speedup"] / r["workers"] if r["speedup"] is not None and r.get("workers") else None
    return used


def notes(used: dict, apart_for: Sequence[str] = ()) -> list:
    """The caption lines for the plain runs a result's speedups divide by (``used``: :func:`rebase`'s).
    ``apart_for``: the results a plain run recorded apart is the baseline of, named at the end of its line
    (for a table whose other results hold their own)."""
    if not used:
        return []
    found = [p for p in used.values() if p.found]
    missing = [p for p in used.values() if not p.found]
    out = []
    apart = sorted({p.where for p in found if not p.own})
    if apart:               # a result's own plain run is its first row, named so: no caption needed
        out.append("speedup: over the plain one-GPU run of the same model, batch and precision, recorded apart on "
                   + "; ".join(apart) + (f"; for {', '.join(apart_for)}" if apart_for else ""))
    if missing:
        out.append("speedup '-': " + "; ".join(sorted({p.missing for p in missing}))
                   + " (the wrapper's one-worker run is not a plain run, so nothing stands in for it)")
    return out


def wrapper_faster_than_plain(rows, used: dict) -> list:
    """A note where a wrapper's one-worker row runs faster than a plain run recorded apart: the wrapper
    only adds work, so the two runs differ by more than the wrapper (another machine, day or clock),
    and that difference is in every speedup of the table."""
    apart = [p for p in used.values() if p.found and not p.own]
    fast = [r for r in rows if r.get("workers") == 1 and not is_plain(r) and not r.get("error")
            and (r.get("speedup_min") or r.get("speedup") or 0) > 1]
    if not (apart and fast):
        return []
    return ["the wrapper's one-worker run beats the plain run recorded apart: the two differ by more than the "
            "wrapper (machine, day, clocks), and so does every speedup above"]

