"""The recorded runs the step model is checked against, and the measured inputs it takes from
the recordings.

:func:`recorded_points` reads the recorded NCCL-path comparisons of every model
(:mod:`ddlab.training.recording`), the recorded all-reduce sweeps fitted per path
(:mod:`ddlab.measure.collectives`, :func:`ddlab.cost.alpha_beta.fit_sweep`), the one-GPU
CUDA-graph runs that give the GPU's busy time per step, and the step profiles
(:mod:`ddlab.training.step_profile`) measured on the same GPU, into a :class:`RecordedSet`.
:func:`measured_inputs` turns a profile and a path's NCCL channels into arguments of
:func:`ddlab.cost.step_model.predict_step`, and :func:`predict_point` predicts one recorded run.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Optional, Sequence

from ddlab.cost.alpha_beta import fit_sweep
from ddlab.cost.step_model import Overheads, StepPrediction, predict_step, slower_rank_wait
from ddlab.cost.wrapper_cost import measured as measured_wrapper
from ddlab.measure import collectives
from ddlab.training.baseline import is_wrapper_one


# The recorded NCCL-path comparisons the model is checked against: (launcher label,
# launcher, variant). "-graph" runs capture the whole DDP step in a CUDA graph, so the host
# does no per-step work and their one-GPU step is the GPU's busy time.
RECORDED_RUNS = (("ddp", "ddp", None), ("ddp-graph", "ddp", "graph"), ("horovod", "horovod", None))


@dataclass(frozen=True)
class RecordedPoint:
    """One recorded 2-GPU run and what the model needs to predict it: the one-GPU step of
    the same recording's one-worker run (``global batch / images/s``), the GPU's busy time when a
    CUDA-graph recording of the model has it, and the measured ratio of its images/s to that
    one-worker run's (``measured``: the recording's median over its repeats, with its min-max when
    recorded). The model predicts the 2-GPU step from the one-worker step, so it is checked on that
    ratio; the speedup the course shows is over the plain one-GPU run (:mod:`ddlab.training.baseline`):
    ``plain_ratio`` (the one-worker run's images/s over the plain run's) turns one into the other
    (:meth:`over_plain`), None where no plain run is recorded (the tables then show "-")."""
    launcher: str
    model: str
    path: str
    n_gpus: int
    batch: int
    compute_s: float
    device_s: Optional[float]
    host_work: bool          # False for a CUDA-graph run: no wrapper work on the host per step
    measured: float
    repeats: int = 1
    measured_min: Optional[float] = None     # the spread of the measured speedup over the repeats
    measured_max: Optional[float] = None
    # the one-GPU step ran under the same wrapper: DDP with world size 1 keeps its hooks; Horovod
    # registers none at size 1, so its one-GPU step is a plain step
    wrapper_in_step: bool = False
    device_source: str = ""
    path_label: str = ""     # the path as tables show it ("NCCL default, NVLS off" where the run had multicast off)
    # strong scaling (the field reports' experiment): one global batch on one GPU, then split over
    # n_gpus; ``batch`` is the per-GPU share and ``compute_s`` the one-GPU step at the whole batch,
    # taken as the step at the share (a step this small is the host's, not the GPU's)
    strong: bool = False
    # the wait for the slower rank, from the one-GPU run's own step times (step_model.slower_rank_wait):
    # a candidate term, added to a prediction only when asked for (predict_point(..., rank_wait=True))
    rank_wait_s: float = 0.0
    rank_wait_source: str = ""
    plain_ratio: Optional[float] = None
    plain_source: str = ""          # where the plain run came from, or which one is missing
    # strong scaling: the GPU's busy time at the share (the step JOB's one-GPU CUDA-graph run at that batch), a
    # candidate input used only when asked for (predict_point(..., share_device=True)): with it a DDP step may
    # overlap its all-reduce with the host's work instead of adding it
    share_device_s: Optional[float] = None
    share_device_source: str = ""

    @property
    def framework(self) -> str:
        return "horovod" if self.launcher.split()[0] == "horovod" else "ddp"

    @property
    def images_factor(self) -> int:
        """How many one-GPU steps' images a step on ``n_gpus`` processes: ``n_gpus`` when each GPU
        keeps its batch (weak scaling), 1 when the one-GPU batch is split (strong)."""
        return 1 if self.strong else self.n_gpus

    def speedup(self, pred: StepPrediction) -> float:
        """What ``pred`` means for this run beside :attr:`measured`: images/s on ``n_gpus`` over the
        one-worker run's images/s (the ratio the model is checked on)."""
        return pred.speedup * self.images_factor / self.n_gpus

    def over_plain(self, ratio: Optional[float]) -> Optional[float]:
        """A ratio over the one-worker run (:attr:`measured`, :meth:`speedup`) as the speedup over the
        plain one-GPU run; None where no plain run is recorded."""
        return ratio * self.plain_ratio if ratio is not None and self.plain_ratio else None

    @property
    def measured_plain(self) -> Optional[float]:
        """The measured speedup over the plain one-GPU run (None: no plain run recorded)."""
        return self.over_plain(self.measured)


@dataclass
class RecordedSet:
    """Recorded points, the alpha-beta fit of each path's recorded all-reduce sweep, the
    (launcher, model) pairs with no recording, and the machine they came from.
    ``device_elsewhere``: {model: machine} for models whose GPU busy time per step came from
    a one-GPU CUDA-graph recording on another machine with the same GPU (the two-GPU
    machine's own graph run of that model is not recorded); ``device_check``: {model:
    ratio} of that machine's graph step to the two-GPU machine's, for the models recorded
    on both, which shows how well the substitution holds."""
    points: list
    fits: dict
    missing: list = field(default_factory=list)
    machine: str = ""
    device_elsewhere: dict = field(default_factory=dict)
    device_check: dict = field(default_factory=dict)
    profiles: dict = field(default_factory=dict)     # {model: StepProfile} recorded on a GPU
    channels: dict = field(default_factory=dict)     # {path: NCCL channels of its recorded sweep}
    sweeps: str = ""                                 # the name of the recorded sweeps the fits came from
    elsewhere: list = field(default_factory=list)    # [(recording, machine)] of other machines: not predicted
    # {(framework, path): (seconds, source)}: what two workers cost beyond the model's other terms, from the
    # probe recorded on this set's machine (two_worker_terms); predict_point adds it to eager steps
    two_workers: dict = field(default_factory=dict)
    probe_points: list = field(default_factory=list)   # the probe's 2-GPU runs on this machine, the term's source
    # {path: [fit of each sweep of the path on this machine]}: the recorded sweep's, then its repeats' (path_fits)
    path_fits: dict = field(default_factory=dict)

    def made_here(self, provenance: Optional[dict]) -> bool:
        """Whether a recording with ``provenance`` was made on this set's machine (the machine of its
        fits); True when the set names no machine."""
        return _made_on(provenance, self.machine)

    def path_label(self, path: str) -> str:
        """``path`` as this set's tables show it (its runs' own name for it, e.g. "NCCL default, NVLS off")."""
        return next((p.path_label for p in self.points if p.path == path and p.path_label), path)

    def wrappers(self, exclude_models=(), exclude_batches=()) -> dict:
        """{framework: Overheads}: the wrapper's cost measured on one worker
        (:func:`ddlab.cost.wrapper_cost.measured`), leaving out the rows of some models or batches."""
        return {f: measured_wrapper(f, exclude_models, exclude_batches) for f in ("ddp", "horovod")}


def path_labels(rec: "RecordedSet"):
    """A table column's formatter: each path as ``rec``'s runs name it."""
    return lambda path: rec.path_label(path) if isinstance(path, str) else str(path)


COURSE_SWEEPS = "h200x2"       # the all-reduce sweeps of the course's own 2-GPU machine


def recorded_sets(models: Sequence[str] = None, others_only: bool = False) -> list:
    """A :class:`RecordedSet` for every machine whose all-reduce sweeps under the NCCL paths are
    recorded (``reference/allreduce/<name>.json``; a level sweep, ``<name>-levels``, and repeats,
    ``<name>-repeats``, are not one) and
    that has runs of its own recorded: the course's machine (:data:`COURSE_SWEEPS`) first, or with
    ``others_only`` left out (not built)."""
    names = sorted((n for n in collectives.recorded_machines() if not (others_only and n == COURSE_SWEEPS)),
                   key=lambda n: (n != COURSE_SWEEPS, n))
    sets = [recorded_points(models, sweeps=n) for n in names]
    return [rec for rec in sets if rec.points]


def recorded_points(models: Sequence[str] = None, sweeps: str = COURSE_SWEEPS) -> RecordedSet:
    """The recorded NCCL-path comparisons of every model (``ddlab.training.recording``), at the live
    default batch and at every other batch per GPU recorded (``-b<N>``), and the recorded all-reduce
    sweeps ``reference/allreduce/<sweeps>.json``, fitted per path. Only runs recorded on the sweeps'
    machine become points; the others are named in ``elsewhere`` (each with its machine)."""
    from ddlab.training import models as _models
    names = tuple(models) if models is not None else _models.MODELS
    for m in names:
        _models.check(m)
    sweeps_ = collectives.load_recorded(sweeps)
    fits = {p: fit_sweep(s) for p, s in sweeps_.items()}
    channels = {p: c for p, c in ((p, nccl_channels(s)) for p, s in sweeps_.items()) if c}
    # the set's machine is the sweeps' own: runs recorded elsewhere are listed, not predicted
    machine = next((_machine_text(s.provenance) for s in sweeps_.values() if s.provenance), "")
    recs = _Recordings(machine)
    points, missing, gpu_model = _nccl_path_points(names, fits, recs)
    elsewhere = recs.elsewhere + _strong_points(points, names, fits, recs)
    rec = RecordedSet(points, fits, missing, recs.machine, recs.device_elsewhere, recs.device_check,
                      _gpu_profiles(names, gpu_model), channels, sweeps, elsewhere)
    rec.probe_points = _probe_points(rec, recs)
    rec.two_workers = two_worker_terms(rec)
    rec.path_fits = path_fits(sweeps, fits, machine)
    return rec


def path_fits(sweeps: str, fits: dict, machine: str) -> dict:
    """{path: [alpha-beta fit of each sweep of the path on ``machine``]}: the recorded sweep's (``fits``),
    then those of ``reference/allreduce/<sweeps>-repeats.json`` (the same sweep measured again, on
    another day or another machine of the same kind) made on ``machine``. How far they differ is how far
    the path's own all-reduce varies. Paths with no repeat are left out; {} without the file."""
    from ddlab.base import reference
    name = sweeps + collectives.REPEATS_SUFFIX
    if name not in reference.names("allreduce"):
        return {}
    out: dict = {}
    for s in collectives.results_from_json(reference.load("allreduce", name), source="recorded"):
        if s.op == "all_reduce" and s.path in fits and _made_on(s.provenance, machine):
            out.setdefault(s.path, [fits[s.path]]).append(fit_sweep(s))
    return out


PROBE_TERM_NOTE = ("the probe's two-worker step (one 784x10 layer at batch 4: compute and all-reduce close to "
                   "nothing) minus the model's prediction of it from its one-worker step")


def _probe_points(rec: RecordedSet, recs: "_Recordings") -> list:
    """The probe's 2-GPU runs (``nccl-paths-torch-<launcher>-probe``) recorded on ``rec``'s machine."""
    from ddlab.training.models import PROBE
    out = []
    for label, launcher, variant in RECORDED_RUNS:
        res = recs.load(launcher, PROBE, variant) if variant is None else None
        base = _one_worker_row(res)
        if base is not None:
            out += [p for p in _recording_points(label, launcher, variant, PROBE, res, base, rec.fits, recs)
                    if p.n_gpus == 2]
    return out


def two_worker_terms(rec: RecordedSet, wrappers: Optional[dict] = None) -> dict:
    """{(framework, path): (seconds, source)}: what a step on two workers costs beyond the model's
    other terms, per launcher and NCCL path, from the probe alone (``rec.probe_points``): the probe's
    measured two-worker step minus :func:`predict_point`'s prediction of it without this term, with the
    wrapper's cost ``wrappers`` ({framework: Overheads}, default ``rec.wrappers()``: a held-out check
    passes the one it predicts with); at least 0. Empty where no probe is recorded."""
    wrappers = rec.wrappers() if wrappers is None else wrappers
    out = {}
    for p in rec.probe_points:
        measured = p.compute_s * p.images_factor / p.measured
        extra = measured - predict_point(p, rec.fits, wrappers.get(p.framework), two_worker=False).total_s
        out[(p.framework, p.path)] = (max(0.0, extra), f"{PROBE_TERM_NOTE}: {p.launcher}, {p.path}, {rec.machine}")
    return out


class _Recordings:
    """The NCCL-path recordings of one :class:`RecordedSet`, each read once (the CUDA-graph ones serve
    every launcher). Only those made on ``machine`` are given back; the others are named in
    ``elsewhere`` [(recording, machine)] and their keys kept in ``away``. Also the GPU's busy time per
    step of each model (:meth:`device_step`), with ``device_elsewhere`` and ``device_check`` as in
    :class:`RecordedSet`. ``machine`` may be empty (sweeps without provenance): the first recording
    used then sets it (:func:`_nccl_path_points`), and later recordings are checked against it."""

    def __init__(self, machine: str):
        self.machine = machine
        self.elsewhere = []
        self.away = set()
        self.device_elsewhere, self.device_check = {}, {}
        self._loaded = {}
        self._graph = {}      # {(model, variant): recording or None}: the one-GPU graph recordings, each read once
        self._graph_at = {}   # {(model, batch, GPU): (GPU busy time, source)}: the step JOB's graph recordings

    def load(self, launcher, model, variant):
        """The recording, when it was made on the set's machine (else None, and named in ``elsewhere``)."""
        from ddlab.base.reference import ReferenceMissing
        from ddlab.system.provenance import machine_of
        from ddlab.training import recording
        key = (launcher, model, variant)
        if key not in self._loaded:
            try:
                res = recording.load_recorded("nccl-paths", "torch", launcher, model, variant)
            except ReferenceMissing:
                res = None
            if res is not None and not _made_on(res.provenance, self.machine):
                name = recording.reference_name("nccl-paths", "torch", launcher, model)
                self.elsewhere.append((name + (f"-{variant}" if variant else ""), machine_of(res.provenance)))
                self.away.add(key)
                res = None
            self._loaded[key] = res
        return self._loaded[key]

    def _graph_recording(self, model, variant):
        """The one-GPU CUDA-graph recording ``scaling-torch-ddp-<model>-<variant>`` (None where none is)."""
        from ddlab.base.reference import ReferenceMissing
        from ddlab.training import recording
        key = (model, variant)
        if key not in self._graph:
            try:
                self._graph[key] = recording.load_recorded("scaling", "torch", "ddp", model, variant)
            except ReferenceMissing:
                self._graph[key] = None
        return self._graph[key]

    def one_gpu_graph(self, model):
        """(one-GPU row, machine) of the one-GPU CUDA-graph recording of ``model`` (scaling, "graph")."""
        res = self._graph_recording(model, "graph")
        return (None, "") if res is None else (_one_worker_row(res), _machine_text(res.provenance))

    def device_step_at(self, model, batch, gpu_model):
        """(the GPU's busy time per step of ``model`` at ``batch`` per GPU, where it came from): the one-worker
        row of the one-GPU CUDA-graph recording at that batch (``scaling-torch-ddp-<model>-graph[-b<N>]``,
        the step JOB's) made on ``gpu_model``; (None, "") where none is recorded."""
        key = (model, batch, gpu_model)
        if key not in self._graph_at:
            self._graph_at[key] = (None, "")
            for variant in (f"graph-b{batch}", "graph"):     # the live default batch's has no -b<N>
                res = self._graph_recording(model, variant)
                row = None if res is None else _one_worker_row(res)
                if row is not None and row.get("global_batch") == batch and \
                        (res.provenance or {}).get("gpu_model") == gpu_model:
                    self._graph_at[key] = (_step_of(row), f"the one-GPU CUDA-graph run of {model} at batch "
                                                          f"{batch} ({_machine_text(res.provenance)})")
                    break
        return self._graph_at[key]

    def device_step(self, model, batch):
        """The GPU's busy time per step of ``model`` at ``batch``: the two-GPU machine's own
        one-GPU graph run, else a one-GPU graph recording of the same batch (same GPU model)."""
        own = _one_worker_row(self.load("ddp", model, "graph"))
        other, where = self.one_gpu_graph(model)
        if own is not None:
            if other is not None and where:
                self.device_check[model] = _step_of(other) / _step_of(own)
            return _step_of(own)
        if other is None or other.get("global_batch") != batch:
            return None
        self.device_elsewhere[model] = where
        return _step_of(other)

    def batches(self, launcher, variant, model):
        """The recordings of one launcher and model: the live default batch, and for the eager runs
        each other batch per GPU recorded (``-b<N>``) on the set's machine."""
        from ddlab.training import recording
        out = [(variant, self.load(launcher, model, variant))]
        if variant is None:
            out += [(v, self.load(launcher, model, v)) for _, v in recording.batch_variants("nccl-paths", "torch",
                                                                                           launcher, model)]
        return out


def _one_worker_row(res):
    """The wrapper's one-worker run (not the plain run: the model starts from the wrapper's step)."""
    base = [r for r in (res.rows if res else []) if is_wrapper_one(r) and not r.get("error")]
    return base[0] if base else None


def _step_of(row):
    """A row's step time: its global batch over its images per second (None for no row)."""
    return row["global_batch"] / row["images_per_s"] if row else None


def _nccl_path_points(names, fits: dict, recs: _Recordings) -> tuple:
    """(points, missing, gpu_model): the points of every recorded NCCL-path comparison
    (:data:`RECORDED_RUNS`) of the models ``names`` read through ``recs``, in that order; the
    (launcher label, model) pairs with no recording at the live default batch; and the GPU model of
    the first recording used. Sets ``recs.machine`` from that recording when it was empty."""
    points, missing, gpu_model = [], [], ""
    for label, launcher, variant in RECORDED_RUNS:
        for model in names:
            for variant_, res in recs.batches(launcher, variant, model):
                base = _one_worker_row(res)
                if base is None:
                    if variant_ == variant and (launcher, model, variant_) not in recs.away:
                        missing.append((label, model))
                    continue
                recs.machine = recs.machine or _machine_text(res.provenance)
                gpu_model = gpu_model or (res.provenance or {}).get("gpu_model", "")
                points += _recording_points(label, launcher, variant, model, res, base, fits, recs)
    return points, missing, gpu_model


def _recording_points(label, launcher, variant, model, res, base: dict, fits: dict, recs: _Recordings) -> list:
    """The points of one NCCL-path recording ``res`` whose one-worker row is ``base``: one per run
    on two or more workers, without error, with images/s and on a path of ``fits``. Its GPU busy
    time is the recording's own one-worker step for a CUDA-graph run, else :meth:`_Recordings.device_step`."""
    from ddlab.training.results import path_name
    machine = recs.machine
    one = _step_of(base)
    device = one if variant == "graph" else recs.device_step(model, base["global_batch"])
    where = (f"this recording's own one-worker run ({machine})" if variant == "graph" else
             f"the one-worker CUDA-graph run of {model} on {recs.device_elsewhere[model]}"
             if model in recs.device_elsewhere else f"the one-worker CUDA-graph run of {model} ({machine})")
    points = []
    for r in res.rows:
        if (r.get("workers", 1) < 2 or r.get("error") or not r.get("images_per_s")
                or r.get("path") not in fits):
            continue
        points.append(RecordedPoint(label, model, r["path"], r["workers"], base["global_batch"], one,
                                    device, variant != "graph", *ratios_to_one(r, base),
                                    launcher == "ddp", where if device is not None else "",
                                    path_name(r, res.provenance),
                                    **rank_wait(res, base, r["workers"]), **plain_fields(res, base)))
    return points


def _gpu_profiles(names, gpu_model: str) -> dict:
    """{model: StepProfile}: the recorded step profile of each of ``names`` that was measured on a GPU,
    on ``gpu_model`` when that is known (the GPU of the set's runs)."""
    from ddlab.base.reference import ReferenceMissing
    from ddlab.training import step_profile
    profiles = {}
    for model in names:
        try:
            prof = step_profile.load_recorded(model)
        except ReferenceMissing:
            continue
        if prof.device != "cpu" and (not gpu_model or prof.device == gpu_model):   # profiled on that GPU
            profiles[model] = prof
    return profiles


STRONG_PREFIX = "strong-scaling-torch-"


def _strong_points(points: list, names, fits: dict, recs: _Recordings) -> list:
    """Adds to ``points`` the recorded strong-scaling runs (``strong-scaling-torch-<launcher>-<model>-<path>``)
    made on the machine of the sweeps' fits (``recs.machine``), each 2-GPU row with the one-GPU row of the
    same global batch and, where the step JOB recorded it on the same GPU, the GPU's busy time at the
    per-GPU share (:meth:`_Recordings.device_step_at`, a candidate input: :attr:`RecordedPoint.share_device_s`).
    Returns [(recording, machine)] of those made elsewhere, not predicted."""
    from ddlab.system.provenance import machine_of
    from ddlab.training import recording
    from ddlab.training.results import path_name
    machine, elsewhere = recs.machine, []
    for name, res in recording.recorded_with_prefix(STRONG_PREFIX):
        c = res.config
        path = c.get("path") or "default"
        if c.get("model") not in names or path not in fits:
            continue
        if not _made_on(res.provenance, machine):
            elsewhere.append((name, machine_of(res.provenance)))
            continue
        for r in res.rows:
            one = next((o for o in res.rows if is_wrapper_one(o) and o.get("global_batch") == r.get("global_batch")
                        and not o.get("error")), None)
            if r.get("workers", 1) < 2 or r.get("error") or not r.get("images_per_s") or one is None:
                continue
            share = r["global_batch"] // r["workers"]
            device, where = recs.device_step_at(c["model"], share, (res.provenance or {}).get("gpu_model"))
            points.append(RecordedPoint(f"{c.get('launcher')} strong", c["model"], path, r["workers"],
                                        share, one["global_batch"] / one["images_per_s"],
                                        None, True, *ratios_to_one(r, one), c.get("launcher") == "ddp", "",
                                        path_name(dict(r, path=path), res.provenance), strong=True,
                                        share_device_s=device, share_device_source=where,
                                        **rank_wait(res, one, r["workers"]), **plain_fields(res, one)))
    return elsewhere


def ratios_to_one(row: dict, one: dict) -> tuple:
    """(measured, repeats, min, max): ``row``'s images/s over the one-worker run ``one``'s median, the
    ratio the model is checked on (:class:`RecordedPoint`)."""
    base = one["images_per_s"]
    lo, hi = row.get("images_per_s_min"), row.get("images_per_s_max")
    return (row["images_per_s"] / base, int(row.get("repeats", 1)), lo / base if lo is not None else None,
            hi / base if hi is not None else None)


def plain_fields(res, one: dict) -> dict:
    """{"plain_ratio", "plain_source"}: the one-worker run's images/s over the plain one-GPU run's
    (:meth:`ddlab.training.results.ExperimentResult.plain_run`), or None and which plain run is missing."""
    plain = res.plain_run(one)
    if plain is None or not plain.found:
        return {"plain_ratio": None, "plain_source": plain.missing if plain is not None else ""}
    return {"plain_ratio": one["images_per_s"] / plain.images_per_s, "plain_source": plain.where}


def rank_wait(res, one_gpu_row: dict, n_ranks: int) -> dict:
    """{"rank_wait_s", "rank_wait_source"} for a run on ``n_ranks`` GPUs whose one-GPU run is
    ``one_gpu_row`` of the recording ``res``: :func:`ddlab.cost.step_model.slower_rank_wait` of
    each of that row's timed runs' per-step times (the median over its runs); nothing when the
    recording kept no step times.

    A candidate term, not part of the model's predictions: it was built after the held-out table
    had shown host-bound misses on the course's machine, so it has to hold on runs it was not built
    on as well; :func:`ddlab.cost.validation.held_out` prints, under each machine's table, how many
    rows it would bring within the band and how many without it."""
    waits, steps = [], []
    for i in one_gpu_row.get("runs") or []:
        run = res.runs[i] if isinstance(i, int) and 0 <= i < len(res.runs) else {}
        times = run.get("step_times_ms") if isinstance(run, dict) else None
        if times:
            waits.append(slower_rank_wait(times, n_ranks) * 1e-3)
            steps.append(len(times))
    if not waits:
        return {}
    return {"rank_wait_s": statistics.median(waits),
            "rank_wait_source": (f"recorded: the one-worker run's own step times (CUDA events between steps; "
                                 f"{len(waits)} run(s) of {'/'.join(map(str, sorted(set(steps))))} steps, the median "
                                 f"over the runs): the expected longest of {n_ranks} independent draws minus their "
                                 "mean, each rank taken to vary as the one GPU did")}


def nccl_channels(sweep) -> Optional[int]:
    """The channels NCCL ran a sweep's collective on (its INFO log says so at start-up), or
    None when the sweep kept no log or the log does not say."""
    log = sweep.nccl_log()
    return log.coll_channels if log is not None else None


def _made_on(provenance: Optional[dict], machine: str) -> bool:
    """Whether a recording's ``provenance`` names ``machine`` (as :func:`_machine_text` writes it; any
    machine when ``machine`` is empty)."""
    return not machine or _machine_text(provenance) == machine


def _machine_text(prov: dict) -> str:
    if not prov:
        return ""
    bits = [f"{prov.get('gpu_count', '?')}x {prov.get('gpu_model', '?')}"]
    if prov.get("driver"):
        bits.append(f"driver {prov['driver']}")
    if prov.get("nccl"):
        bits.append(f"NCCL {prov['nccl']}")
    return ", ".join(bits)


def predict_point(p: RecordedPoint, fits: dict, overheads: Optional[Overheads] = None, profiles=None,
                  channels=None, sweeps: str = "", two_worker=None, two_workers: Optional[dict] = None,
                  **kwargs) -> StepPrediction:
    """:func:`predict_step` for one recorded run, with the fit of its path, its launcher's
    framework, the wrapper's cost ``overheads`` (left out where the one-GPU step ran under the
    same wrapper) and, when ``profiles`` ({model: StepProfile}) has one for its model, that
    measured profile (with ``channels``, {path: NCCL channels}, the all-reduce's share of the GPU).
    ``rank_wait=True`` adds the candidate wait for the slower rank from the run's one-worker step
    times (:func:`rank_wait`), which the model leaves out by default; ``share_device=True`` gives a strong run
    the candidate GPU busy time at its share (:attr:`RecordedPoint.share_device_s`). ``two_worker``: the cost of two
    workers measured on the probe (``two_workers``, {(framework, path): (seconds, source)}, a
    :class:`RecordedSet`'s), added to an eager step on two or more GPUs; ``False`` leaves it out
    (a CUDA-graph step replays its all-reduce without the host, so it never gets it)."""
    if p.path not in fits:
        raise ValueError(f"no all-reduce fit for path {p.path!r}; have {', '.join(fits) or 'none'}")
    kwargs = dict(measured_inputs(p.model, p.batch, profiles or {}, (channels or {}).get(p.path)), **kwargs)
    fit = fits[p.path]
    sources = {"one-GPU step": ("measured", f"recorded: the one-worker run of the same {p.launcher} recording "
                                            f"(its global batch over its images per second)"),
               "GPU busy time": ("measured", f"recorded: {p.device_source or 'a one-worker CUDA-graph run'}"),
               "all-reduce": (f"the alpha-beta fit of the recorded {p.path} sweep"
                              + (f" allreduce/{sweeps}" if sweeps else "")
                              + (f" ({fit.describe()})" if hasattr(fit, "describe") else ""))}
    if kwargs.pop("rank_wait", False) and p.rank_wait_source:     # the candidate term (see rank_wait)
        sources["slower rank"] = ("measured", p.rank_wait_source)
        kwargs["slower_rank_s"] = p.rank_wait_s
    device_s = p.device_s
    if kwargs.pop("share_device", False) and p.share_device_s:     # the candidate input (RecordedPoint)
        device_s, sources["GPU busy time"] = p.share_device_s, ("measured", f"recorded: {p.share_device_source}")
    term = (two_workers or {}).get((p.framework, p.path)) if two_worker is not False else None
    if term and p.host_work and p.n_gpus >= 2:
        kwargs["two_worker_s"], sources["two workers"] = term[0], ("measured", term[1])
    kwargs.setdefault("sources", sources)
    return predict_step(p.model, p.compute_s, fit, p.n_gpus, batch=p.batch, device_s=device_s,
                        overheads=overheads if p.host_work else None, framework=p.framework,
                        wrapper_in_step=p.wrapper_in_step, **kwargs)


def measured_inputs(model: str, batch: int, profiles: dict, channels: Optional[int] = None,
                    device: Optional[str] = None) -> dict:
    """The :func:`predict_step` arguments that a recorded step profile of ``model``
    (``profiles``: {model: StepProfile}) supplies: the profile itself when it was measured at
    ``batch``, and with the number of NCCL ``channels`` of the path (one thread block each)
    the share of the GPU's SMs the all-reduce holds. ``device``: what the predicted run runs
    on ("cpu" or a GPU's name, None: the profile's own); a profile of another device gives
    nothing."""
    prof = profiles.get(model)
    if prof is None or (device is not None and prof.device != device):
        return {}
    out = {"profile": prof} if prof.batch == batch else {}
    if channels and prof.sm_count:
        out["comm_sm_share"] = min(channels / prof.sm_count, 0.9)
    return out
