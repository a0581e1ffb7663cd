"""Views over several :class:`~ddlab.training.results.ExperimentResult`: the NCCL-path comparisons of
several launchers in one result (:func:`combine_launchers`), their speedups side by side
(:func:`compare_speedups`, every speedup over the plain one-GPU run of :mod:`ddlab.training.baseline`),
their absolute images/s side by side (:func:`images_side_by_side`: DDP against Horovod on the same
model, batch and path, read off the throughput itself), and the one-line-per-row summary a recording
session prints (:func:`summary_table`).
"""
from __future__ import annotations

from typing import Mapping, Optional

from ddlab.base import tables, units
from ddlab.training import baseline
from ddlab.training.results import ExperimentResult, path_name, row_label, speedup_text, take_runs


# ----------------------------------------------------------------------------- several results
def paths_in_order(results: Mapping[str, ExperimentResult]) -> list:
    """Every path named in the results' rows, once each, in the order they first appear."""
    paths: list = []
    for res in results.values():
        paths += [r["path"] for r in res.rows if r.get("path") and r["path"] not in paths]
    return paths


def combine_launchers(results: Mapping[str, ExperimentResult]) -> ExperimentResult:
    """{launcher: nccl-paths result} -> one result whose rows pair the launchers path by path."""
    if not results:
        raise ValueError("no results to combine")
    paths = paths_in_order(results)
    picked = [(la, res, r) for path in paths for la, res in results.items() for r in res.rows if r.get("path") == path]
    rows, runs = [], []
    for la, res, r in picked:
        row = dict(r, launcher="none" if baseline.is_plain(r) else la, recorded_with=la)
        take_runs(row, res.runs, runs)       # each row's run indices point into the joined runs
        rows.append(row)
    first = next(iter(results.values()))
    cfg = dict(first.config, launcher="+".join(results))
    cfg.pop("spec", None)
    notes = [f"{la}: {res.notes[0]}" for la, res in results.items() if res.notes]
    return ExperimentResult("launchers", rows, first.source, first.provenance, notes, cfg, runs)


def compare_speedups(results: Mapping[str, ExperimentResult]) -> str:
    """{label: nccl-paths result} -> a text table, one row per path and one column per result:
    images/s and the speedup over the plain one-GPU run of the same model, batch and precision
    (:mod:`ddlab.training.baseline`), the same run for every column where they share it. The
    wrapper's own one-worker run is a row of its own ("1 worker"). A missing or failed run, or a
    speedup whose plain run is missing, shows as "-"; the lines below say where each result and
    its plain run come from."""
    if not results:
        raise ValueError("no results to compare")
    shown = {label: res.shown_rows() for label, res in results.items()}
    paths: list = []
    for rows in shown.values():
        paths += [r["path"] for r in rows if r.get("path") and r["path"] not in paths]
    cells, names = {}, {}
    for label, res in results.items():
        for r in shown[label]:
            if r.get("error") or r.get("images_per_s") is None:
                continue
            sp = r.get("speedup")
            mark = "!" if r.get("above_linear") else " "
            plain = baseline.plain_label(r.get("device") or res.config.get("device"))
            names.setdefault(r.get("path"), plain if baseline.is_plain(r) else
                             "1 worker (the wrapper's)" if r.get("path") == baseline.WRAPPER_PATH else
                             path_name(r, res.provenance))
            cells[(r.get("path"), label)] = (f"{units.format_count(r['images_per_s']):>9} "
                                             f"{(speedup_text(sp) if sp is not None else '-'):>6}{mark}")
    width = max(18, *(len(label) for label in results))
    first = max(10, *(len(names.get(p, p)) for p in paths)) if paths else 10
    lines = [f"{'path':<{first}}" + "".join(f"  {label:>{width}}" for label in results),
             f"{'':<{first}}" + "".join(f"  {'images/s speedup ':>{width}}" for _ in results)]
    for path in paths:
        lines.append(f"{names.get(path, path):<{first}}"
                     + "".join(f"  {cells.get((path, label), '-'):>{width}}" for label in results))
    lines.append("")
    if any(r.get("above_linear") for res in results.values() for r in res.rows):
        lines.append("!: above linear (more than N times the plain one-GPU run's images/s on N GPUs): flagged, "
                     "not hidden")
    lines += [f"{label}: {res.where()}" for label, res in results.items()]
    lines += sorted({n for res in results.values() for n in baseline.notes(res.plain)})
    return "\n".join(lines)


def images_side_by_side(results: Mapping[str, ExperimentResult], key: str = "path",
                        title: Optional[str] = None, explain: bool = True) -> tables.Table:
    """{label: result} (e.g. {"DDP": ..., "Horovod": ...}, the same model, batch and paths) -> a
    :class:`ddlab.base.tables.Table` of absolute images/s, one row per ``key`` value (each path, or each
    tuning) and one column per result, with the ratio of each column to the first: which framework
    trains faster on the same GPUs, read off the throughput itself, not off two speedups over
    different runs. The plain one-GPU run is a row of its own where a result has it; its ratio
    measures the machine between the results, not the frameworks, and a note says so. ``explain=False``
    leaves out the notes that explain the columns (for a second table of the same kind); the notes
    saying where each result was measured stay."""
    if not results:
        raise ValueError("no results to compare")
    labels = list(results)
    order, values, names = [], {}, {}
    for label, res in results.items():
        for r in res.shown_rows():
            if r.get("error") or r.get("images_per_s") is None:
                continue
            if baseline.is_plain(r):
                k, name = baseline.PLAIN_PATH, baseline.plain_label(r.get("device") or res.config.get("device"))
            elif r.get("workers") == 1:
                k, name = baseline.WRAPPER_PATH, "1 worker (each wrapper's own)"
            else:
                k = r.get(key)
                name = path_name(r, res.provenance) if key == "path" else str(k)
            if k not in order:
                order.append(k)
            names.setdefault(k, name)
            values[(k, label)] = r["images_per_s"]
    rows = []
    for k in order:
        row = {"what": names[k]}
        first = values.get((k, labels[0]))
        for i, label in enumerate(labels):
            row[f"v{i}"] = values.get((k, label))
            if i:
                v = values.get((k, label))
                row[f"r{i}"] = v / first if v and first else None
        rows.append(row)
    cols = [tables.Column("what", key, "text")]
    for i, label in enumerate(labels):
        cols.append(tables.Column(f"v{i}", f"{label} images/s", "count"))
    for i, label in enumerate(labels[1:], 1):
        cols.append(tables.Column(f"r{i}", f"{label} / {labels[0]}", "ratio"))
    wheres = {res.where() for res in results.values()}
    notes = ([f"{' and '.join(labels)}: {wheres.pop()}"] if len(wheres) == 1
             else [f"{label}: {res.where()}" for label, res in results.items()])
    if explain:
        notes.append("median images/s of all GPUs together; each ratio compares the frameworks on the same GPUs, "
                     "model, batch and path")
    if explain and sum((baseline.PLAIN_PATH, label) in values for label in labels) > 1:
        notes.append(f"{names[baseline.PLAIN_PATH]}: the same program in each column; its ratio is the machine's "
                     "difference between the two results, which every other ratio carries too")
    return tables.Table(cols, rows, title=title or "Images/s side by side: " + " and ".join(labels), notes=notes)


def summary_table(done: Mapping) -> str:
    """{name: ExperimentResult or error text} -> one line per row (what a recording session printed)."""
    lines = ["", "summary", f"{'result':<34} {'row':<30} {'images/s':>12} {'speedup':>8}  transport / note"]
    for name, res in done.items():
        if not isinstance(res, ExperimentResult):
            lines.append(f"{name:<34} {tables.shorten((str(res).strip().splitlines() or [''])[0], 120)}")
            continue
        for r in res.rows:
            label = row_label(res.name, r, res.provenance)
            if r.get("error"):
                lines.append(f"{name:<34} {label:<30} {'failed':>12}           {tables.shorten(r['error'])}")
                # a timed-out run: where its workers were stuck (innermost frames first)
                lines += ["    " + ln for ln in (r.get("hang_traceback") or "").splitlines()[:24]]
                continue
            sp = r.get("speedup")
            lines.append(f"{name:<34} {label:<30} {units.format_count(r['images_per_s']):>12} "
                         f"{(speedup_text(sp) if sp is not None else '-'):>8}  {r.get('transport', '')}")
    return "\n".join(lines)
