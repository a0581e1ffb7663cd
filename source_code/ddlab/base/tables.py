"""Tables: one result, shown as an HTML table in Jupyter and as aligned text in a terminal.

A :class:`Table` holds the raw values (numbers stay numbers, so ``to_dict()`` and tests read
them back) and formats them only when shown, through :mod:`ddlab.base.units`, by the kind its
column states::

    t = Table([("path", "text"), ("busbw_gbps", "rate:GB/s", "peak busbw"), ("speedup", "ratio")],
              [{"path": "default", "busbw_gbps": 362.1, "speedup": 1.93}],
              title="All-reduce on 2 GPUs", notes="GB/s = 10^9 B/s, as nccl-tests reports.")
    show(t)        # Jupyter: an HTML table; a terminal: the aligned text of str(t)
    show(t.select(["path", "speedup"]))    # some of its columns: a wide table split for a narrow screen

Column kinds: ``"text"``; ``"bytes"`` (binary sizes); ``"rate"`` (SI, bytes per second);
``"time"`` (seconds); ``"count"`` (thousands separators); ``"ratio"`` (``1.85x``);
``"percent"`` (a fraction, ``0.42 -> 42%``); ``"number"`` (three significant digits);
``"int"`` (as is); ``None`` (the default: numbers as ``"number"``, anything else as text). A
kind may name the unit the values are stored in after a colon: ``"rate:GB/s"``,
``"time:us"``, ``"bytes:MiB"``. A kind may also be a function of one value returning the text.
Numbers are right-aligned, text left-aligned, unless ``align`` says otherwise. A missing value
(``None``, NaN, or a key a row lacks) shows as ``missing`` (``n/a`` unless given).

A long text cell, such as a failed run's error, is shown shortened where its value is a
:class:`Shortened` (:func:`shorten`: about :data:`SHORT_CHARS` characters and an ellipsis); the
value itself stays whole (``to_dict()``, ``column()``), and in HTML the cell's title (shown on
hover) holds all of it. Shortening is for display only, never for what is stored.
"""
from __future__ import annotations

import html
import numbers
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Union

from ddlab.base import units

_KINDS = {
    "text": None, "int": None, "number": units.format_number, "bytes": units.format_bytes,
    "rate": units.format_rate, "time": units.format_time, "count": units.format_count,
    "ratio": units.format_ratio, "percent": units.format_percent,
}
_SCALES = {"bytes": units.SIZE_SCALE, "rate": units.RATE_SCALE, "time": units.TIME_SCALE}
_NUMERIC_KINDS = {"int", "number", "bytes", "rate", "time", "count", "ratio", "percent"}

Kind = Union[None, str, Callable[[object], str]]
_SAME = object()       # Table.select: keep this table's title or notes
SHORT_CHARS = 80        # how much of a long text cell (an error) a table shows
ELLIPSIS = "\u2026"


def shorten(text, limit: int = SHORT_CHARS) -> str:
    """``text`` on one line, at most ``limit`` characters: cut, with an ellipsis at the end,
    where it is longer. For display only."""
    if limit < 2:
        raise ValueError(f"limit must be at least 2 characters, got {limit}")
    one = " ".join(str(text).split("\n"))
    return one if len(one) <= limit else one[:limit - 1].rstrip() + ELLIPSIS


class Shortened(str):
    """A text value a table shows shortened (:func:`shorten` to ``limit``) and keeps whole: it
    is the whole text itself, and an HTML cell's title holds it."""

    def __new__(cls, text, limit: int = SHORT_CHARS):
        obj = super().__new__(cls, str(text))
        obj.limit = limit
        return obj

    def short(self) -> str:
        return shorten(self, self.limit)


@dataclass(frozen=True)
class Column:
    """One column: ``key`` reads the value from a row (a dict key, or the position in a list
    row), ``label`` heads it, ``kind`` says how its values are written (see the module's text),
    ``align`` is ``"left"``, ``"right"`` or ``None`` (numbers right, text left)."""
    key: str
    label: Optional[str] = None
    kind: Kind = None
    align: Optional[str] = None

    def __post_init__(self):
        if not isinstance(self.key, str) or not self.key:
            raise ValueError(f"a column key must be a non-empty string, got {self.key!r}")
        _formatter(self.kind)          # an unknown kind fails here, when the table is built
        if self.align not in (None, "left", "right"):
            raise ValueError(f"align must be 'left', 'right' or None, got {self.align!r}")

    @property
    def heading(self) -> str:
        return self.key if self.label is None else self.label


def _formatter(kind: Kind) -> Optional[Callable[[object], str]]:
    """The function that writes one value of ``kind`` (None: write it as it is)."""
    if kind is None or callable(kind):
        return kind
    if not isinstance(kind, str):
        raise ValueError(f"a column kind is a name or a function, got {kind!r}")
    name, _, unit = kind.partition(":")
    if name not in _KINDS:
        raise ValueError(f"unknown column kind {kind!r}; known: {', '.join(sorted(_KINDS))} "
                         f"(bytes, rate and time may name a unit, e.g. 'rate:GB/s')")
    fmt = _KINDS[name]
    if not unit:
        return fmt
    scales = _SCALES.get(name)
    if scales is None or unit not in scales:
        known = ", ".join(scales) if scales else "none"
        raise ValueError(f"column kind {kind!r}: {name} values can be stored in: {known}")
    scale = scales[unit]
    return lambda v: fmt(v * scale)


def _column(spec) -> Column:
    if isinstance(spec, Column):
        return spec
    if isinstance(spec, str):
        return Column(spec)
    if isinstance(spec, (tuple, list)) and 1 <= len(spec) <= 3:
        key, kind, label = (list(spec) + [None, None])[:3]
        return Column(key, label=label, kind=kind)
    raise ValueError(f"a column is a key, a (key, kind) or (key, kind, label) tuple, or a Column; got {spec!r}")


def _is_number(v) -> bool:
    return not isinstance(v, bool) and isinstance(v, numbers.Real)


class Table:
    """Rows under named columns; ``str()`` is aligned text, Jupyter shows ``_repr_html_()``.

    ``columns``: keys, ``(key, kind)`` or ``(key, kind, label)`` tuples, or :class:`Column`.
    ``rows``: dicts (read by key; missing keys are missing values) or sequences (by position).
    ``title`` goes above the table (the HTML caption), ``notes`` (a string or a list of
    them) below it. ``align``: a dict key -> ``"left"``/``"right"`` overriding the columns'.
    ``header=False`` leaves out the column headings (a list of names and values). ``wrap``: keys
    of prose columns whose HTML cells may wrap within a readable width (every other cell stays on
    one line, and a heading may break between its words; the text form never wraps). ``compact``:
    tighter HTML cell padding, for a dense matrix of short labels.
    """

    def __init__(self, columns: Sequence, rows: Sequence = (), title: Optional[str] = None,
                 notes: Union[None, str, Sequence[str]] = None, align: Optional[dict] = None,
                 missing: str = units.NA, header: bool = True, wrap: Sequence[str] = (), compact: bool = False):
        cols = [_column(c) for c in columns]
        if not cols:
            raise ValueError("a table needs at least one column")
        keys = [c.key for c in cols]
        dupes = sorted({k for k in keys if keys.count(k) > 1})
        if dupes:
            raise ValueError(f"column keys must differ; repeated: {', '.join(dupes)}")
        for key, where in (align or {}).items():
            if key not in keys:
                raise ValueError(f"align names {key!r}, which is not a column ({', '.join(keys)})")
            cols[keys.index(key)] = Column(key, cols[keys.index(key)].label, cols[keys.index(key)].kind, where)
        unknown = [k for k in wrap if k not in keys]
        if unknown:
            raise ValueError(f"wrap names {unknown[0]!r}, which is not a column ({', '.join(keys)})")
        self.wrap = tuple(wrap)
        self.columns = cols
        self.rows = [self._row(r, i) for i, r in enumerate(rows)]
        self.title = title
        self.notes = [notes] if isinstance(notes, str) else list(notes or [])
        self.missing = missing
        self.header = header
        self.compact = compact

    def _row(self, row, i: int) -> dict:
        if isinstance(row, dict):
            return dict(row)
        if isinstance(row, (str, bytes)) or not isinstance(row, Sequence):
            raise ValueError(f"row {i} must be a dict or a list of values, got {type(row).__name__}")
        if len(row) != len(self.columns):
            raise ValueError(f"row {i} has {len(row)} values for {len(self.columns)} columns")
        return {c.key: v for c, v in zip(self.columns, row)}

    # ------------------------------------------------------------------------- reading
    def __len__(self) -> int:
        return len(self.rows)

    def column(self, key: str) -> list:
        """The raw values of one column (``None`` where a row lacks it)."""
        if key not in [c.key for c in self.columns]:
            raise KeyError(f"no column {key!r}; columns: {', '.join(c.key for c in self.columns)}")
        return [r.get(key) for r in self.rows]

    def select(self, keys: Sequence[str], title=_SAME, notes=_SAME) -> "Table":
        """A table of the same rows with only the columns ``keys``, in that order: a table too
        wide for a narrow screen shown as two or more narrower ones, each repeating the column
        that names the row. ``title`` and ``notes``: this table's unless given (``None`` or
        ``[]`` leaves them out)."""
        known = [c.key for c in self.columns]
        unknown = [k for k in keys if k not in known]
        if unknown:
            raise ValueError(f"no column {unknown[0]!r} to select; columns: {', '.join(known)}")
        if not keys:
            raise ValueError("select at least one column")
        cols = [self.columns[known.index(k)] for k in keys]
        return Table(cols, self.rows, title=self.title if title is _SAME else title,
                     notes=self.notes if notes is _SAME else notes,
                     missing=self.missing, header=self.header, wrap=[k for k in self.wrap if k in keys],
                     compact=self.compact)

    def where(self, keep, whole: str = "", title=_SAME) -> "Table":
        """The rows for which ``keep(row)`` is true (a long table cut to the rows a lesson
        needs), with this table's notes and one more saying how many rows it shows and, when
        ``whole`` is given, the call that shows them all."""
        rows = [r for r in self.rows if keep(r)]
        shown = f"{len(rows)} of {len(self.rows)} rows shown" + (f"; all of them: `{whole}`" if whole else "") + "."
        return Table(self.columns, rows, title=self.title if title is _SAME else title, notes=self.notes + [shown],
                     missing=self.missing, header=self.header, wrap=self.wrap, compact=self.compact)

    def to_dict(self) -> dict:
        """Plain data: title, columns (key, label, kind), raw rows (dicts), notes."""
        return {"title": self.title,
                "columns": [{"key": c.key, "label": c.heading,
                             "kind": c.kind if c.kind is None or isinstance(c.kind, str) else "custom"}
                            for c in self.columns],
                "rows": [{c.key: r.get(c.key) for c in self.columns} for r in self.rows],
                "notes": list(self.notes)}

    # ------------------------------------------------------------------------- formatting
    def cell(self, row: dict, col: Column) -> str:
        """The text of one cell."""
        v = row.get(col.key)
        if units.is_missing(v):
            return self.missing
        if isinstance(v, Shortened):
            return v.short()
        fmt = _formatter(col.kind)
        if fmt is None:
            fmt = units.format_number if (col.kind is None and _is_number(v)) else str
        text = fmt(v)
        return " ".join(str(text).split("\n"))

    def _right(self, col: Column) -> bool:
        if col.align is not None:
            return col.align == "right"
        if col.kind in _NUMERIC_KINDS or (isinstance(col.kind, str) and col.kind.split(":")[0] in _NUMERIC_KINDS):
            return True
        if col.kind is None:
            values = [r.get(col.key) for r in self.rows if not units.is_missing(r.get(col.key))]
            return bool(values) and all(_is_number(v) for v in values)
        return False

    def cells(self) -> list:
        """Every row's cell texts, in column order."""
        return [[self.cell(r, c) for c in self.columns] for r in self.rows]

    def text(self) -> str:
        """Title, header, a rule, the rows, the notes; columns two spaces apart, each as wide as
        its widest cell, so every column starts at the same place on every line. The rule spans
        the whole width; no line ends in spaces."""
        body = self.cells()
        heads = [c.heading if self.header else "" for c in self.columns]
        widths = [max([len(h)] + [len(row[i]) for row in body]) for i, h in enumerate(heads)]
        right = [self._right(c) for c in self.columns]

        def line(cells):
            return "  ".join(x.rjust(w) if r else x.ljust(w) for x, w, r in zip(cells, widths, right)).rstrip()

        out = [self.title] if self.title else []
        if self.header:
            out += [line(heads), "  ".join("-" * w for w in widths)]
        out += [line(row) for row in body]
        out += self.notes
        return "\n".join(out)

    def __str__(self) -> str:
        return self.text()

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        esc = html.escape
        right = [self._right(c) for c in self.columns]
        wraps = [c.key in self.wrap for c in self.columns]

        def td(tag, text, r, w=False, whole=None):
            style = "text-align: right; font-variant-numeric: tabular-nums" if r else "text-align: left"
            if tag == "th":       # a heading may break between its words, so it is never what widens a column
                room = "white-space: normal; vertical-align: bottom"
            elif w:
                room = "white-space: normal; overflow-wrap: anywhere; min-width: 14em; max-width: 34em"
            else:
                room = "white-space: nowrap"
            if self.compact:
                room += "; padding: 0.2em 0.35em"
            title = f" title=\"{esc(whole)}\"" if whole is not None else ""
            return f"<{tag}{title} style=\"{room}; {style}\">{esc(text)}</{tag}>"

        def whole(row, col, text):
            """The whole text of a cell shown shortened (its title), else None."""
            v = row.get(col.key)
            return str(v) if isinstance(v, Shortened) and text != str(v) else None

        parts = ["<table class=\"ddlab-table\">"]
        if self.title:
            parts.append(f"<caption style=\"text-align: left; font-weight: bold\">{esc(self.title)}</caption>")
        if self.header:
            parts.append("<thead><tr>" + "".join(td("th", c.heading, r) for c, r in zip(self.columns, right))
                         + "</tr></thead>")
        parts.append("<tbody>")
        for raw, row in zip(self.rows, self.cells()):
            parts.append("<tr>" + "".join(td("td", x, r, w, whole(raw, c, x))
                                          for x, r, w, c in zip(row, right, wraps, self.columns)) + "</tr>")
        parts.append("</tbody></table>")
        parts += [f"<p style=\"margin-top: 0.3em; font-size: smaller\">{esc(n)}</p>" for n in self.notes]
        return "<div class=\"ddlab-table\">" + "".join(parts) + "</div>"


def formatted(columns: Sequence, key: str, fmt) -> list:
    """``columns`` (Table column specs) with column ``key`` shown through ``fmt`` (a format name
    or a function of the value), its header kept; the rows keep their values."""
    out = []
    for c in columns:
        c = tuple(c)
        out.append((c[0], fmt, c[2] if len(c) > 2 else c[0]) if c[0] == key else c)
    return out


CODE_CLASS = "ddlab-code"


def code_listing(html_text: str) -> str:
    """``html_text`` of a code listing (a script or a diff), marked as code: the course's word counts
    (ddlab.course.minutes) leave it out, as they leave out the code in Markdown."""
    return f'<figure class="{CODE_CLASS}" style="margin:0">{html_text}</figure>'


def in_notebook() -> bool:
    """Whether this runs in a Jupyter kernel (where ``display`` renders HTML)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and hasattr(shell, "kernel")


def show(obj) -> None:
    """Show ``obj``: in a Jupyter kernel through IPython's ``display`` (a :class:`Table` as
    HTML), elsewhere ``print(obj)`` (a Table as aligned text)."""
    if in_notebook():
        from IPython.display import display
        display(obj)
    else:
        print(obj)
