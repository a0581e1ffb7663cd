"""What an experiment found, and how it is shown: :class:`ExperimentResult` (``.table()``,
``.plot()``, ``.to_dict()``), rows built from repeated runs (median and min-max), and the
views over several results, which live in :mod:`ddlab.training.result_views`.

Under its table a result prints the command line of every row (:meth:`ExperimentResult.command_lines`,
built by :func:`ddlab.training.runs.command_line`). Two things a result says about itself, never hidden: a speedup above linear (2 workers more
than 2.0x faster than one; field ``above_linear`` on the row and a note under the table),
and, for a recording, whether its run description is today's live default
(:meth:`ExperimentResult.live_default_differences` and a note).

About 500 lines, on purpose: the result, its table and plot all read the same rows; split, each
half would need the other's helpers.
"""
from __future__ import annotations

import re
import statistics
import textwrap
from dataclasses import dataclass, field
from typing import Optional, Sequence

from ddlab.system import nccl
from ddlab.base import tables, units
from ddlab.training import baseline
from ddlab.training import result_notes as explain
from ddlab.training import throughput
from ddlab.training.runspec import RunSpec, RunSpecError

TITLES = {"scaling": "throughput scaling", "nccl-paths": "NCCL paths", "launchers": "NCCL paths by launcher",
          "perf-options": "single-GPU speed options", "tuning": "communication tuning",
          "strong-scaling": "strong scaling", "one-gpu": "one GPU", "wrapper-cost": "the wrapper's cost on one worker",
          "input-pipeline": "the input pipeline over the host link",
          "plain-baselines": "plain one-GPU runs (no wrapper), the speedups' baseline"}
# Experiments whose rows' speedup is over the fewest workers (the above-linear check applies).
_SCALING_ROWS = ("scaling", "nccl-paths", "launchers", "tuning", "strong-scaling")
# Experiments whose rows differ only in workers, launcher and NCCL path: each row's command is rebuilt from the spec.
_COMMAND_ROWS = ("nccl-paths", "launchers", "scaling")
_BASELINE_COLOUR = "#8c8c8c"   # the one-worker row; each NCCL path's colour is ddlab.system.nccl's


@dataclass
class NarrowView:
    """An :class:`ExperimentResult` shown as its narrow tables, then its companion's: HTML in Jupyter,
    text in a terminal."""
    result: "ExperimentResult"
    settings: bool = True

    def tables(self) -> list:
        r = self.result
        return r.narrow_tables(self.settings) + (r.companion.narrow_tables() if r.companion is not None else [])

    def _repr_html_(self) -> str:
        return "".join(t._repr_html_() for t in self.tables())

    def __str__(self) -> str:
        return "\n\n".join(t.text() for t in self.tables())

    __repr__ = __str__


# ----------------------------------------------------------------------------- rows
def row_of(run: dict) -> dict:
    """The columns every experiment shows, from one run's result."""
    st = run["step_time_ms"]
    return {"workers": run["workers"], "images_per_s": run["images_per_s"], "global_batch": run["global_batch"],
            "step_ms_median": st["median"], "step_ms_p10": st["p10"], "step_ms_p90": st["p90"],
            "step_ms_spread": f"{st['p10']:.3f}-{st['p90']:.3f}", "test_accuracy": run["test_accuracy"],
            "device": run["device"], "backend": run["backend"], "cuda_graph": run.get("cuda_graph"),
            "ranks_agree": run.get("ranks_agree"), "precision": run.get("precision")}


def median_run(runs: Sequence[dict]) -> int:
    """The index of the run whose images/s is the median (the lower one of an even count)."""
    order = sorted(range(len(runs)), key=lambda i: runs[i]["images_per_s"])
    return order[(len(order) - 1) // 2]


def row_of_repeats(runs: Sequence[dict]) -> dict:
    """One row from the repeats of one configuration: the median run's columns, with
    ``images_per_s`` the median over the repeats, each repeat's value
    (``images_per_s_runs``), their min and max, and ``repeats``."""
    if not runs:
        raise ValueError("no runs to summarise")
    ips = [r["images_per_s"] for r in runs]
    row = row_of(runs[median_run(runs)])
    row.update(images_per_s=statistics.median(ips), images_per_s_runs=ips, images_per_s_min=min(ips),
               images_per_s_max=max(ips), repeats=len(runs))
    return row


def add_speedup(row: dict, base: Optional[float]) -> dict:
    """``speedup`` (median over the baseline's median) and its min-max, or None without a baseline."""
    row["speedup"] = throughput.speedup(row["images_per_s"], base) if base else None
    if base and "images_per_s_min" in row:
        row["speedup_min"] = row["images_per_s_min"] / base
        row["speedup_max"] = row["images_per_s_max"] / base
    return row


def _mark_above_linear(name: str, rows: list) -> None:
    """Sets ``above_linear`` on each measured row of a scaling-like result: True when its
    speedup over the fewest workers is more than the ratio of workers (2 workers > 2.0x)."""
    if name not in _SCALING_ROWS:
        return
    ok = [r for r in rows if not r.get("error") and r.get("workers")]
    if not ok:
        return
    base_workers = min(r["workers"] for r in ok)
    for r in ok:
        sp = r.get("speedup")
        r["above_linear"] = bool(r["workers"] > base_workers and sp is not None
                                 and sp > r["workers"] / base_workers + 1e-9)


def row_env(r: dict, provenance: Optional[dict] = None) -> dict:
    """The NCCL environment a row ran with, as recorded: the shell's (provenance), the path's, NCCL's own report."""
    env = dict((provenance or {}).get("nccl_env") or {})
    env.update(r.get("env") or {})
    env.update(r.get("nccl_env_reported") or {})
    return env


def path_name(r: dict, provenance: Optional[dict] = None) -> str:
    """The row's path as tables and legends show it (ddlab.system.nccl.display_name: "NCCL default, NVLS
    off" where the run had NCCL_NVLS_ENABLE=0); the stored key stays ``path``."""
    return nccl.display_name(r.get("path", "?"), row_env(r, provenance))


def _wrapped(label: str, width: int = 11) -> str:
    """A bar's label broken into lines of about ``width`` characters (its own line breaks kept)."""
    return "\n".join(textwrap.fill(part, width, break_long_words=False) for part in label.split("\n"))


def run_label(r: dict, launcher: Optional[str] = None) -> str:
    """Which run a row is: "1 GPU, no wrapper" (the plain run every speedup divides by; "1 CPU process, no
    wrapper" on CPU), "DDP, 1 worker"
    (the wrapper's own one-worker run), else the launcher's name."""
    if baseline.is_plain(r):
        beside = r.get("recorded_with")           # a side-by-side view: each recording has its own plain run
        return baseline.plain_label(r.get("device")) + (f" (beside {baseline.framework_name(beside)})" if beside else "")
    launcher = r.get("launcher") or launcher
    if r.get("workers") == 1:
        return baseline.wrapper_label(launcher)
    return baseline.framework_name(launcher)


def row_label(name: str, r: dict, provenance: Optional[dict] = None, launcher: Optional[str] = None) -> str:
    if baseline.is_plain(r) or (r.get("workers") == 1 and r.get("path") in (None, baseline.WRAPPER_PATH)
                                and name != "strong-scaling" and name in baseline.REBASED):
        return run_label(r, launcher)
    if name == "nccl-paths":
        return path_name(r, provenance)
    if name == "perf-options":
        return r.get("option", "?")
    if name == "tuning":
        return r.get("tuning", "?")
    if name == "launchers":
        return f"{r.get('launcher')}\n{path_name(r, provenance)}"
    if name == "strong-scaling":
        if r.get("workers") == 1:
            return f"{r.get('global_batch')} on {run_label(r, launcher)}"
        return f"{r.get('global_batch')} on {r.get('workers')}"
    if name == "one-gpu":
        return f"{r.get('model')}\n{r.get('precision')}"
    if name == "wrapper-cost":
        return f"{r.get('model')} {r.get('batch')}\n{r.get('wrapper')}"
    if name == "input-pipeline":
        return r.get("variant", "?").replace(" + ", "\n+ ")
    return f"{r.get('workers')} worker" + ("s" if r.get("workers") != 1 else "")


# ----------------------------------------------------------------------------- the result
@dataclass
class ExperimentResult:
    """What an experiment found. ``rows``: one dict per configuration; ``source``: "live"
    (run just now, here), "recorded" (loaded from source_code/reference/experiments/) or
    "missing"; ``companion``: a second result shown beside this one (the small CPU run next
    to a recorded GPU result)."""
    name: str
    rows: list
    source: str = "live"
    provenance: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    config: dict = field(default_factory=dict)
    runs: list = field(default_factory=list)
    companion: Optional["ExperimentResult"] = None

    plain: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self):
        # every speedup over the plain one-GPU run of the same model, batch and precision (ddlab.training.baseline)
        self.plain = baseline.rebase(self.name, self.rows, self.config, self.provenance)
        _mark_above_linear(self.name, self.rows)

    def plain_run(self, row: dict) -> Optional["baseline.Plain"]:
        """The plain one-GPU run ``row``'s speedup divides by (None for an experiment without one)."""
        if self.name not in baseline.REBASED:
            return None

        def key_fn(r):
            return baseline.key_of(self.config, self.provenance, r, self.name)
        key = key_fn(row)      # read from the rows as they are now (a caller may have changed them)
        return baseline.own_plain(self.rows, key_fn).get(key) or self.plain.get(key) or baseline.find(key)

    # ---- what it was
    @property
    def spec(self) -> Optional[RunSpec]:
        """The run description (the base run; what varies is in the rows): the one the
        experiment stored, or for older recordings derived from their ``config``. None when
        the config says too little (e.g. a result that is "missing")."""
        stored = self.config.get("spec")
        try:
            if stored:
                return RunSpec.from_dict(stored)
            if self.config.get("steps") is None:
                return None
            return RunSpec.from_config(self.config)
        except (RunSpecError, TypeError):
            return None

    def live_default_differences(self) -> dict:
        """{field: (this result's, today's live default)} where the run descriptions differ."""
        spec = self.spec
        if spec is None:
            return {}
        diff = spec.differences(RunSpec.for_device(spec.device, spec.model))
        if self.name == "perf-options":     # the options set the precision row by row
            diff.pop("precision", None)
        return diff

    def live_default_note(self) -> Optional[str]:
        diff = self.live_default_differences()
        if not diff:
            return None
        what = ", ".join(f"{k.replace('_', ' ')} {a} (live default {b})" for k, (a, b) in diff.items())
        return f"recorded with {what}: not the same run description as a live run today"

    # ---- the command of each row
    def row_command(self, r: dict) -> Optional[str]:
        """The command line that ran row ``r``, as one line for a shell
        (:func:`ddlab.training.runs.command_line`): the row's own ``command`` where it keeps one;
        else, for results whose rows differ only in workers, launcher and NCCL path
        (:data:`_COMMAND_ROWS`), rebuilt from the result's spec with the row's workers, launcher
        and path and the environment recorded (the shell's NCCL settings, the path's variables,
        ``NCCL_DEBUG`` where the run had it). None where neither is known (a failed row's run)."""
        from ddlab.training import runs as launching
        if r.get("command"):
            return r["command"]
        spec = self.spec
        if spec is None or self.name not in _COMMAND_ROWS or not isinstance(r.get("workers"), int):
            return None
        run = self.runs[r["run"]] if isinstance(r.get("run"), int) and 0 <= r["run"] < len(self.runs) else {}
        launcher = run.get("launcher") or r.get("launcher") or spec.launcher
        path = r.get("path") if r.get("path") in nccl.PATHS else "default"
        try:
            row_spec = spec.with_(workers=r["workers"], path=path, launcher=launcher)
        except RunSpecError:
            return None
        env = dict(r.get("env") or {})
        debug = (run.get("nccl_env") or {}).get("NCCL_DEBUG")
        if debug:
            env["NCCL_DEBUG"] = debug
        return launching.command_line(row_spec, launching.command_env(env, self.provenance.get("nccl_env")))

    def command_lines(self) -> list:
        """The lines a table prints under its notes: each row's command (:meth:`row_command`), compactly.
        Rows launched alike (the same launcher, workers, script and flags) whose commands differ only
        by the row's own NCCL settings (its ``env``, the table's settings column) share one line: the
        first such row's command in full, ``"command (<row>): <command>"``, then ``"commands of <rows>:
        the same with each row's NCCL settings added"``. Any other row gets its own full line. A
        result whose rows have no command shows ``"command: <what produced it>"`` from its provenance."""
        rows = [(r, self.row_command(r)) for r in self.rows]
        rows = [(r, cmd) for r, cmd in rows if cmd]
        if not rows:
            return [f"command: {self.provenance['command']}"] if self.provenance.get("command") else []
        out, done = [], set()
        for i, (ref, ref_cmd) in enumerate(rows):
            if i in done:
                continue
            ref_env, ref_rest = split_command(ref_cmd)
            out.append(f"command ({self._label(ref)}): {ref_cmd}")
            alike = [j for j, (r, cmd) in enumerate(rows) if j > i and j not in done
                     and split_command(cmd) == (ref_env | _env_words(r.get("env")), ref_rest)]
            if alike:
                done.update(alike)
                out.append(f"commands of {', '.join(self._label(rows[j][0]) for j in alike)}: the same with "
                           f"each row's NCCL settings added")
        return out

    def _label(self, r: dict) -> str:
        return row_label(self.name, r, self.provenance).replace(chr(10), " ")

    # ---- text
    def title(self) -> str:
        c = self.config
        what = TITLES.get(self.name, self.name)
        ran, reps = self.repeats_run()
        models = f"models {', '.join(c['models'])}" if c.get("models") else f"model {c.get('model')}"
        return (f"{what}: {c.get('framework')} {c.get('launcher')}, {models}, "
                + (f"global batch {', '.join(map(str, c['global_batches']))}" if c.get("global_batches") else
                   f"batch {', '.join(map(str, c['batches']))}/worker" if c.get("batches") else
                   f"batch {c.get('batch_size')}/worker") + f", {c.get('device')}"
                + (f", NCCL path {nccl.display_name(c['path'], self.provenance.get('nccl_env'))}"
                   if c.get("path") else "")
                + (f", {ran} of {reps} repeats (partial)" if reps and ran and ran < reps else
                   f", {reps} repeats" if reps and reps > 1 else ""))

    def repeats_run(self) -> tuple:
        """(repeats run, repeats planned): a run cut short between rounds has fewer in its rows
        than its configuration planned (the most any row has; planned when no row counts them)."""
        planned = self.config.get("repeats")
        ran = max((r["repeats"] for r in self.rows if isinstance(r.get("repeats"), int)), default=planned)
        return ran, planned

    def where(self) -> str:
        from ddlab.system import provenance as prov
        return prov.caption(self.provenance, source=self.source)

    def empty_line(self, label: str) -> str:
        """For a result with no rows (not live here and not recorded): ``label``, where it would come
        from, and its notes, which say why it is not here."""
        return "\n".join([f"{label}: {self.where()}"] + [f"  {n}" for n in self.notes])

    def table_notes(self) -> list:
        """The notes under the table: the result's own, then what it says about itself."""
        lines = ([_current(n) for n in self.notes] + baseline.notes(self.plain)
                 + baseline.wrapper_faster_than_plain(self.rows, self.plain))
        launcher = self.config.get("launcher")
        for r in self.rows:
            if r.get("above_linear"):
                plain = self.plain_run(r)
                lines.append(explain.above_linear(self.name, self.rows, r, row_label(self.name, r, self.provenance,
                                                                                     launcher),
                                                  base=plain.row() if plain is not None and plain.found
                                                  and not plain.own else None))
        if self.name == "perf-options":
            lines += explain.speed_options(self.rows, self.config)
        if self.name == "input-pipeline":
            lines += explain.faster_than_on_gpu(self.rows)
        if self.source == "recorded":
            note = self.live_default_note()
            if note:
                lines.append(note)
        return lines

    def shown_rows(self) -> list:
        """The rows a table shows: the result's own, with the plain one-GPU run each speedup divides by
        put first (before its global batch's rows, for strong scaling) where it was recorded apart."""
        if self.name not in baseline.REBASED:
            return list(self.rows)
        out, placed = [], set()
        for r in self.rows:
            plain = None if r.get("error") or baseline.is_plain(r) else self.plain_run(r)
            if plain is not None and plain.found and not plain.own and plain.key not in placed:
                placed.add(plain.key)
                extra = {"global_batch": r.get("global_batch")} if self.name == "strong-scaling" else {}
                out.append(dict(plain.row(), **extra, batch_per_worker=plain.key.batch))
            out.append(r)
        return out

    def as_table(self) -> tables.Table:
        """The rows as a :class:`ddlab.base.tables.Table` (title: what and where; notes below)."""
        cols = _COLUMNS.get(self.name, _COLUMNS["scaling"])
        if not any(r.get("cuda_graph") for r in self.rows):      # no row captured a CUDA graph: no column for it
            cols = [c for c in cols if c[1] != "cuda_graph"]
        spread = any((r.get("repeats") or 1) > 1 for r in self.rows)
        speedup = baseline.speedup_head(self.config.get("device"))
        columns = [tables.Column(key, "images/s median (min-max)" if spread and key == "images_per_s"
                                 else speedup if key == "speedup" and head == baseline.SPEEDUP_HEAD else head,
                                 "text", "right" if key in _NUMERIC else "left") for head, key in cols]
        launcher = self.config.get("launcher")
        rows = []
        for row in self.shown_rows():
            row = dict(row, device=row.get("device") or self.config.get("device"))
            row["run_label"] = run_label(row, launcher)
            if self.name == "tuning" and baseline.is_plain(row):
                row["tuning"] = row["run_label"]
            if row.get("error"):
                what = "not run" if row.get("not_run") else "failed"   # not_run: refused before any launch
                # shown shortened, whole in the data and in the HTML cell's title (ddlab.base.tables)
                failed = tables.Shortened(f"{what}: {row['error']}")
                cells = [_fmt(row.get(cols[0][1])), failed] + [""] * (len(cols) - 2)
            else:
                cells = [(row["run_label"] if row.get("workers") == 1 and self.name in baseline.REBASED
                          else path_name(row, self.provenance)) if key == "path" and row.get("path")
                         else _fmt_cell(row, key, spread) for _, key in cols]
            rows.append(cells)
        return tables.Table(columns, rows, title=f"{self.title()} ({self.where()})",
                            notes=[f"note: {n}" for n in self.table_notes()] + self.command_lines(),
                            wrap=[k for k in ("env_text", "flags") if k in {c.key for c in columns}])

    def narrow_tables(self, settings: bool = True) -> list:
        """:meth:`as_table` as two narrower tables that fit a 1280-pixel screen, each starting with
        the column that names the row: what ran (the NCCL settings, the transport NCCL chose) and
        what it measured (the rest); the title above the first, the notes below the second. A table
        without a settings column stays whole. Without ``settings`` (a table whose paths' settings were
        shown above it), and for CPU processes (no NCCL to set), one table without the settings."""
        t = self.as_table()
        keys = [c.key for c in t.columns]
        if not {"env_text", "flags"} & set(keys):
            return [t]
        if not settings or self.config.get("device") == "cpu":
            return [t.select([k for k in keys if k not in ("env_text", "flags")])]
        ran = [k for k in ("env_text", "flags", "transport") if k in keys]
        first = keys[0]
        return [t.select([first] + ran, notes=[]),
                t.select([first] + [k for k in keys[1:] if k not in ran], title=None)]

    def narrow(self, settings: bool = True) -> "NarrowView":
        """The result (and its companion below it) as :meth:`narrow_tables`, for ``display``; ``settings``
        False leaves out the NCCL settings of each path (shown by a table above)."""
        return NarrowView(self, settings)

    def socket_interface(self) -> Optional[str]:
        """The network interface the socket path's runs told NCCL to use (``NCCL_SOCKET_IFNAME``
        as NCCL reported it; horovodrun sets it on one host), or None where no socket run set one
        (NCCL then picks an interface itself and its log names it)."""
        for r in self.rows:
            if r.get("path") == "socket" and not r.get("error"):
                return (r.get("nccl_env_reported") or {}).get("NCCL_SOCKET_IFNAME")
        return None

    def table(self) -> str:
        """The result as aligned text (with its companion's below)."""
        lines = [self.as_table().text()]
        if self.companion is not None:
            lines += ["", self.companion.table()]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        out = self.as_table()._repr_html_()
        return out + (self.companion._repr_html_() if self.companion is not None else "")

    def __str__(self) -> str:
        return self.table()

    # ---- plot
    def plot(self, ax=None):
        """Bar chart of images/s per configuration (min-max of the repeats as error bars),
        speedups written on the bars. With a companion and no ``ax``, both are drawn side by
        side. Returns the axes."""
        import matplotlib.pyplot as plt
        if ax is None:
            n = 2 if self.companion is not None else 1
            bars = max(len(res.shown_rows()) for res in (self, self.companion) if res is not None)
            fig, axes = plt.subplots(1, n, figsize=(max(6.4, 1.05 * bars) * n, 4.2), squeeze=False)
            self._plot_one(axes[0][0])
            if self.companion is not None:
                self.companion._plot_one(axes[0][1])
            fig.tight_layout()
            return axes[0][0] if n == 1 else axes[0]
        self._plot_one(ax)
        return ax

    def _plot_one(self, ax):
        ok = [r for r in self.rows if not r.get("error")]
        if not ok:  # nothing measured (e.g. not recorded yet): say so instead of an empty chart
            ax.text(0.5, 0.5, "\n".join([self.where()] + self.notes[:1]), ha="center", va="center",
                    fontsize=8, wrap=True, transform=ax.transAxes)
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(self.title(), fontsize=9)
            return
        ok = [r for r in self.shown_rows() if not r.get("error") and r.get("images_per_s")]
        launcher = self.config.get("launcher")
        labels = [row_label(self.name, r, self.provenance, launcher) for r in ok]
        values = [r["images_per_s"] for r in ok]
        colours = [_BASELINE_COLOUR if r.get("workers") == 1 else nccl.colour(r.get("path")) for r in ok]
        bars = ax.bar(range(len(ok)), values, color=colours)
        if any("images_per_s_min" in r for r in ok):
            low = [r["images_per_s"] - r.get("images_per_s_min", r["images_per_s"]) for r in ok]
            high = [r.get("images_per_s_max", r["images_per_s"]) - r["images_per_s"] for r in ok]
            ax.errorbar(range(len(ok)), values, yerr=[low, high], fmt="none", ecolor="black", capsize=3)
        for bar, r in zip(bars, ok):
            ratio = r.get("speedup")
            text = units.format_count(r["images_per_s"]) + (f"\n{speedup_text(ratio)}" if ratio is not None else "")
            text += " (!)" if r.get("above_linear") else ""
            top = max(bar.get_height(), r.get("images_per_s_max") or 0)          # above the error bar
            ax.annotate(text, (bar.get_x() + bar.get_width() / 2, top), ha="center", va="bottom",
                        fontsize=8, xytext=(0, 2), textcoords="offset points")
        plains = [p for p in self.plain.values() if p.found]
        base = plains[0].images_per_s if len(plains) == 1 else None
        if base and self.name in ("nccl-paths", "tuning"):
            ax.axhline(base, color="grey", linestyle="--", linewidth=1)
            ax.annotate(baseline.plain_label(self.config.get("device")), (len(ok) - 0.5, base), ha="right",
                        va="bottom", fontsize=8,
                        color="grey")
        ax.set_xticks(range(len(ok)))
        ax.set_xticklabels([_wrapped(label) for label in labels], fontsize=8)
        ax.set_ylabel("images/s (all workers)")
        top = max([r.get("images_per_s_max", r["images_per_s"]) for r in ok] + [base or 0])
        ax.set_ylim(0, top * 1.25 if values else 1)
        ax.set_title(f"{self.title()}\n{self.where()}", fontsize=9)
        return ax

    # ---- persistence
    def to_dict(self) -> dict:
        d = {"experiment": self.name, "source": self.source, "config": self.config, "rows": self.rows,
             "notes": self.notes, "runs": self.runs, "provenance": self.provenance}
        if self.companion is not None:
            d["companion"] = self.companion.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict, source: Optional[str] = None) -> "ExperimentResult":
        for key in ("experiment", "rows", "provenance"):
            if key not in d:
                raise ValueError(f"not an experiment result: no {key!r} field")
        comp = cls.from_dict(d["companion"]) if d.get("companion") else None
        return cls(name=d["experiment"], rows=list(d["rows"]), source=source or d.get("source", "live"),
                   provenance=d["provenance"], notes=list(d.get("notes", [])), config=dict(d.get("config", {})),
                   runs=list(d.get("runs", [])), companion=comp)


def _env_words(env: Optional[Mapping]) -> frozenset:
    return frozenset(f"{k}={v}" for k, v in (env or {}).items() if v is not None)


def split_command(line: str) -> tuple:
    """(the set of ``K=V`` words in front, the rest of the line) of a command line."""
    words = line.split(" ")
    n = next((i for i, w in enumerate(words) if not ("=" in w and w.split("=", 1)[0].isupper())), len(words))
    return frozenset(words[:n]), " ".join(words[n:])
# What older recordings' notes said the speedup was over, and what it is now (ddlab.training.baseline).
_STALE_BASE = "; speedup over 1 worker at the same global batch"


# An interleaving note as stored (ddlab.training.experiment_kit.interleaved_note, and an older wording): the
# table shows it without the list of what each round ran, which is every row of the table.
_INTERLEAVED = (re.compile(r"^the repeats were interleaved: each of (\d+) round\(s\) ran .* once, in the "
                           r"table's order, so a drift .*$"),
                re.compile(r"^the repeats were interleaved in (\d+) round\(s\), each running .* once in order: "
                           r"a drift .*$"))


def _current(note: str) -> str:
    """A recorded note as the table says it: without a claim about the speedup's baseline that no longer
    holds, and an interleaving note in its short form (:data:`_INTERLEAVED`)."""
    from ddlab.training.experiment_kit import interleaved_note
    for pattern in _INTERLEAVED:
        m = pattern.match(note)
        if m:
            return interleaved_note(int(m.group(1)), "every row")
    return note.replace(_STALE_BASE, "") if note.startswith("strong scaling: ") else note


def _base_workers(rows) -> int:
    return min((r["workers"] for r in rows if not r.get("error") and r.get("workers")), default=1)


_COLUMNS = {
    "scaling": [("workers", "workers"), ("run", "run_label"), ("images/s", "images_per_s"),
                (baseline.SPEEDUP_HEAD, "speedup"), ("efficiency", "efficiency"), ("step ms median", "step_ms_median"),
                ("p10-p90", "step_ms_spread"), ("global batch", "global_batch"), ("test acc", "test_accuracy")],
    "nccl-paths": [("path", "path"), ("NCCL settings", "env_text"), ("workers", "workers"),
                   ("images/s", "images_per_s"), (baseline.SPEEDUP_HEAD, "speedup"),
                   ("step ms median", "step_ms_median"), ("p10-p90", "step_ms_spread"), ("transport", "transport"), ("graph", "cuda_graph"),
                   ("test acc", "test_accuracy")],
    "launchers": [("path", "path"), ("launcher", "launcher"), ("images/s", "images_per_s"),
                  (baseline.SPEEDUP_HEAD, "speedup"), ("step ms median", "step_ms_median"), ("transport", "transport"),
                  ("graph", "cuda_graph")],
    "tuning": [("tuning", "tuning"), ("flags", "flags"), ("workers", "workers"), ("global batch", "global_batch"),
               ("images/s", "images_per_s"), (baseline.SPEEDUP_HEAD, "speedup"),
               ("step ms median", "step_ms_median"), ("test acc", "test_accuracy"), ("ranks agree", "ranks_agree")],
    "strong-scaling": [("global batch", "global_batch"), ("run", "run_label"), ("workers", "workers"),
                       ("batch/worker", "batch_per_worker"), ("images/s", "images_per_s"),
                       (baseline.SPEEDUP_HEAD, "speedup"),
                       ("step ms median", "step_ms_median"), ("p10-p90", "step_ms_spread"), ("test acc", "test_accuracy")],
    "one-gpu": [("model", "model"), ("precision", "precision"), ("images/s", "images_per_s"),
                ("step ms median", "step_ms_median"), ("p10-p90", "step_ms_spread"), ("params", "params"),
                ("test acc", "test_accuracy")],
    "wrapper-cost": [("model", "model"), ("batch", "batch"), ("wrapper", "wrapper"),
                     ("step ms median", "step_ms_median"), ("cost ms/step", "cost_ms"), ("cost share", "cost_share"),
                     ("buckets", "buckets"), ("ms/bucket", "cost_per_bucket_ms"), ("images/s", "images_per_s")],
    "plain-baselines": [("model", "model"), ("batch", "batch"), ("precision", "precision"), ("graph", "cuda_graph"),
                        ("steps", "steps"), ("images/s", "images_per_s"), ("step ms median", "step_ms_median"),
                        ("p10-p90", "step_ms_spread"), ("test acc", "test_accuracy")],
    "input-pipeline": [("batches fed", "variant"), ("images/s", "images_per_s"), ("vs on the GPU", "speedup"),
                       ("step ms", "step_ms_median")],
    "perf-options": [("option", "option"), ("images/s", "images_per_s"), ("vs plain", "speedup"),
                     ("step ms median", "step_ms_median"), ("p10-p90", "step_ms_spread"),
                     ("cuda graph", "cuda_graph"), ("test acc", "test_accuracy")],
}


def speedup_text(v) -> str:
    """A speedup with two decimals ("0.43x", "2.06x"), as the course's tables always showed."""
    return f"{v:.2f}x"


_NUMERIC = {"workers", "images_per_s", "speedup", "efficiency", "step_ms_median", "global_batch", "test_accuracy",
            "batch", "params", "cost_ms", "cost_share", "buckets", "cost_per_bucket_ms"}


def _fmt(v, key: str = "") -> str:
    if v is None:
        return "-"
    if key == "images_per_s":
        return units.format_count(v)
    if key == "speedup":
        return speedup_text(v)
    if key == "efficiency":
        return units.format_percent(v, decimals=1)
    if key == "test_accuracy":
        return f"{v:.4f}"
    if key in ("step_ms_median", "cost_ms", "cost_per_bucket_ms"):
        return f"{v:.3f}"
    if key == "cost_share":
        return units.format_percent(v, decimals=1)
    if key == "params":
        return units.format_count(v)
    if isinstance(v, bool):
        return "yes" if v else "no"
    return str(v)


def _fmt_cell(row: dict, key: str, spread: bool) -> str:
    text = _fmt(row.get(key), key)
    if key == "speedup" and row.get("above_linear"):
        text += " (!)"
    if spread and key == "images_per_s" and (row.get("repeats") or 1) > 1:
        text += f" ({units.format_count(row['images_per_s_min'])}-{units.format_count(row['images_per_s_max'])})"
    return text


def take_runs(row: dict, source: list, runs: list) -> None:
    """Append the runs ``row`` names (its median ``run`` and every repeat in ``runs``, as indices
    into ``source``) to ``runs``, and point the row's indices at their new places."""
    wanted = [i for i in (row.get("runs") or [row.get("run")]) if isinstance(i, int) and 0 <= i < len(source)]
    moved = {}
    for i in wanted:
        moved[i] = len(runs)
        runs.append(source[i])
    if row.get("run") in moved:
        row["run"] = moved[row["run"]]
    else:
        row.pop("run", None)
    if "runs" in row:
        row["runs"] = [moved[i] for i in wanted]
