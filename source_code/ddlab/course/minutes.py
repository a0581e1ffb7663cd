"""How long a notebook takes a learner: reading, exercises and running its cells.

Each notebook states its time once ("**Time.** About N minutes."), and Start_Here, the README and
the instructor guide repeat it. This module estimates that time from the notebook itself, so a
stated figure can be checked instead of guessed:

* reading: the words of its Markdown cells, and (when counted) the words its cells print, at
  :data:`READING_WPM` words a minute;
* exercises: the minutes :data:`EXERCISES` gives each kind of code cell a learner works in (a checked
  answer or prediction, each quiz question, each step of the hands-on refactor, the repair exercise);
* running: the seconds a Run All took, measured (``tools/notebook_minutes.py --run`` times each
  notebook under nbval on this machine; ``--timings`` reads the JSON of
  ``tools/recording/gpu_nbval.sh``).

Word limits (:data:`WORD_LIMITS`): a notebook's Markdown, the words it prints when run on a machine
without a GPU (:func:`output_words` counts a cell's outputs as nbval or nbclient return them), and
the course's documents (:func:`doc_words`).

A section whose heading says "(optional" (up to the next heading of its level or above) is
estimated apart: the stated time leaves it out, and the notebook says so.

The estimate is a floor: discussion and re-running cells come on top.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
from typing import Optional

from ddlab.base.tables import CODE_CLASS, Table

READING_WPM = 200     # words a minute for technical prose read with care
CODE_WPM = 100        # words a minute for a diff of code, read line by line
# (pattern in a code cell, minutes per match, what it is); a quiz counts per question
EXERCISES = [
    (re.compile(r"\b(?:checks\.check_\w+|predictions\.check_\w+)\s*\("), 2.0, "a checked answer or prediction"),
    (re.compile(r"\bchecks\.quiz\s*\(\s*(\d+)\s*\)"), 1.0, "a quiz question"),
    (re.compile(r"\bhandson\.step\s*\(\s*[\"'](\w+)[\"']\s*,\s*(\d+)\s*\)"), None,
     f"a step of the hands-on refactor: its reason and changed lines at {CODE_WPM} words a minute"),
    (re.compile(r"\brepair\.start_exercise\s*\("), 5.0, "the repair exercise"),
]
NOTEBOOK_RANGE = (15, 30)
# words: the Markdown of a notebook (Start_Here's apart), what a notebook prints, each document
WORD_LIMITS = {"markdown": 2000, "markdown:Start_Here.ipynb": 1000, "printed": 1500,
               "README.md": 1500, "instructor/GUIDE.md": 4500, "tools/recording/README.md": 800}
DOCUMENTS = tuple(k for k in WORD_LIMITS if k.endswith(".md"))      # paths from the repository's root

_TIME_LINE = re.compile(r"\*\*Time\.\*\*\s+About (\d+) minutes")
_MARKUP = re.compile(r"\$[^$]*\$|`[^`]*`|<[^>]+>|\]\([^)]*\)")


class NotebookError(ValueError):
    """A notebook file that cannot be read as a notebook."""


def load(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            nb = json.load(f)
    except (OSError, ValueError) as exc:
        raise NotebookError(f"{path}: cannot read it as a notebook ({exc})") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise NotebookError(f"{path}: not a notebook (no list of cells)")
    return nb


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


_HEADING = re.compile(r"^(#{1,6})\s+(.*)$", re.M)


def split_optional(nb: dict) -> tuple:
    """(core cells, optional cells): a heading with "(optional" starts an optional part, which ends
    at the next heading of the same level or above."""
    core, optional, level = [], [], None
    for c in nb["cells"]:
        if c.get("cell_type") == "markdown":
            for hashes, title in _HEADING.findall(_source(c)):
                if "(optional" in title.lower():
                    level = len(hashes)
                elif level is not None and len(hashes) <= level:
                    level = None
        (optional if level is not None else core).append(c)
    return {"cells": core}, {"cells": optional}


def markdown_words(nb: dict) -> int:
    """Words a learner reads: the Markdown cells, without formulas, inline code, tags and link targets."""
    text = " ".join(_MARKUP.sub(" ", _source(c)) for c in nb["cells"] if c.get("cell_type") == "markdown")
    return len(re.findall(r"[A-Za-z0-9][\w'.,%/-]*", text))


_WORD = re.compile(r"\S*[A-Za-z0-9]\S*")
_HTML_SKIP = re.compile(r"<(style|script)\b.*?</\1\s*>", re.S | re.I)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_WIDGET = "application/vnd.jupyter.widget-view+json"
_CODE_LISTING = re.compile(r'<figure class="%s"[^>]*>.*?</figure>' % CODE_CLASS, re.S)


# A printed command line: at the start of a line or after a label ending in ": ", any K=V words, then a
# launcher or programme and at least two more words.
_COMMAND = re.compile(r"^(?P<label>\s*|.*?:\s+)(?:[A-Z][A-Z0-9_]*=\S*\s+)*"
                      r"(?:torchrun|horovodrun|mpirun|srun|sbatch|python3?|nvcc|make|bash|timeout|env)(?:\s+\S+){2,}\s*$")
_BLOCK_END = re.compile(r"</(p|div|tr|li|pre|h\d)\s*>|<br\s*/?>", re.I)


def text_words(text: str) -> int:
    """Words in plain text: each run of non-space characters that holds a letter or digit (a table's
    rules and bars are not words). A printed command line counts only its label: it is code to copy, as
    the code in Markdown and code listings are, not words to read."""
    return len(_WORD.findall("\n".join(_COMMAND.sub(r"\g<label>", line) for line in text.splitlines())))


def html_text(html: str) -> str:
    """The text a browser shows of ``html``: styles and scripts dropped, a block's end read as a line
    break, other tags as spaces."""
    import html as _html
    return _html.unescape(re.sub(r"<[^>]+>", " ", _BLOCK_END.sub("\n", _HTML_SKIP.sub(" ", html))))


def output_words(outputs: list) -> int:
    """Words a learner reads in a code cell's outputs: stream text, an error's name, value and
    traceback, and of each display the text of its HTML (code listings left out: :func:`ddlab.base.tables.code_listing`),
    else of its Markdown, else its plain text (a widget's plain text is only its repr, and is not counted)."""
    n = 0
    for out in outputs or []:
        kind = out.get("output_type")
        if kind == "stream":
            n += text_words(_source({"source": out.get("text", "")}))
        elif kind == "error":
            tb = "\n".join(out.get("traceback") or [])
            n += text_words(_ANSI.sub("", f"{out.get('ename', '')} {out.get('evalue', '')}\n{tb}"))
        elif kind in ("display_data", "execute_result", "update_display_data"):
            data = out.get("data") or {}
            if "text/html" in data:
                n += text_words(html_text(_CODE_LISTING.sub(" ", _source({"source": data["text/html"]}))))
            elif "text/markdown" in data:
                n += text_words(_MARKUP.sub(" ", _source({"source": data["text/markdown"]})))
            elif "text/plain" in data and _WIDGET not in data:
                n += text_words(_source({"source": data["text/plain"]}))
    return n


def printed_words(nb: dict) -> int:
    """Words the code cells of an executed notebook print (:func:`output_words` of each)."""
    return sum(output_words(c.get("outputs")) for c in nb["cells"] if c.get("cell_type") == "code")


def doc_words(text: str) -> int:
    """Words of a Markdown document as read: link targets and HTML tags left out, code kept."""
    return text_words(re.sub(r"\]\([^)]*\)", "]", re.sub(r"<[^>]+>", " ", text)))


def word_limit(kind: str, name: str = "") -> int:
    """The limit of :data:`WORD_LIMITS` for ``kind`` ("markdown", "printed" or a document's path) of
    the notebook or document ``name``."""
    return WORD_LIMITS.get(f"{kind}:{name}", WORD_LIMITS[kind])


def diff_words(conversion: str, number: int) -> int:
    """Words a learner reads in a hands-on step: its reason and the lines it adds or removes (the
    unchanged context was read in the step before)."""
    from ddlab.course import handson
    lines = str(handson.step(conversion, number)).splitlines()
    changed = [ln[1:] for ln in lines[1:] if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    return len(lines[0].split()) + sum(len(ln.split()) for ln in changed)


def exercise_minutes(nb: dict) -> tuple:
    """(count, minutes) of what the learner works through in code cells, by :data:`EXERCISES`."""
    from ddlab.course.checks import questions_of
    count, minutes = 0, 0.0
    for c in nb["cells"]:
        if c.get("cell_type") != "code":
            continue
        for pattern, each, _ in EXERCISES:
            for m in pattern.finditer(_source(c)):
                if each is None:      # a hands-on step: the words of its reason and changed lines
                    count += 1
                    minutes += diff_words(m.group(1), int(m.group(2))) / CODE_WPM
                    continue
                n = len(questions_of(int(m.group(1)))) if m.groups() else 1
                count, minutes = count + n, minutes + n * each
    return count, minutes


def stated_minutes(nb: dict) -> Optional[int]:
    """The minutes the notebook states in its "**Time.** About N minutes." line (None without one)."""
    found = [int(m) for c in nb["cells"] if c.get("cell_type") == "markdown" for m in _TIME_LINE.findall(_source(c))]
    return found[0] if len(found) == 1 else None


def file_sha256(path: str) -> str:
    """The SHA-256 of a notebook file as stored (``gpu_nbval.sh`` keeps it beside each time)."""
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def timing_is_current(path: str, timing: dict) -> Optional[bool]:
    """Whether ``timing`` (one notebook's entry in ``gpu_nbval.sh``'s nbval.json) timed the notebook
    file at ``path`` as it is now: True or False by the SHA-256 kept with the time, None when the
    entry keeps none (it was written before the script kept one, so which version ran is unknown)."""
    kept = timing.get("sha256")
    return None if not kept else kept == file_sha256(path)


def estimate(path: str, run_s: Optional[float] = None, printed: Optional[int] = None) -> dict:
    """One notebook's estimate: words, reading, exercises and (when measured) running, in minutes.
    ``printed``: the words its cells print (:func:`printed_words` of an executed copy), read at the
    same rate as its Markdown; None when not counted."""
    whole = load(path)
    nb, extra = split_optional(whole)
    words, (ex, ex_min) = markdown_words(nb), exercise_minutes(nb)
    row = {"notebook": os.path.basename(path), "words": words, "printed_words": printed,
           "reading_min": (words + (printed or 0)) / READING_WPM,
           "exercises": ex, "exercise_min": ex_min,
           "run_min": None if run_s is None else run_s / 60.0, "stated_min": stated_minutes(whole),
           "optional_min": markdown_words(extra) / READING_WPM + exercise_minutes(extra)[1]}
    row["estimate_min"] = row["reading_min"] + row["exercise_min"] + (row["run_min"] or 0.0)
    row["fits"] = fits(row)
    return row


def fits(row: dict) -> str:
    """'yes' when the stated minutes cover the estimate and lie in the course's range, else why not."""
    stated, lo, hi = row["stated_min"], *NOTEBOOK_RANGE
    if stated is None:
        return "no Time line"
    if stated < math.ceil(row["estimate_min"]):
        return f"states {stated}, needs {math.ceil(row['estimate_min'])}"
    if not lo <= stated <= hi and row["notebook"] != "Start_Here.ipynb":
        return f"outside {lo}-{hi}"
    return "yes"


def table(rows: list, machine: str = "") -> Table:
    cols = [("notebook", "text"), ("words", "int"),
            ("printed_words", lambda v: "-" if v is None else f"{v:,}", "printed words"), ("reading_min", lambda v: f"{v:.1f}", "reading min"),
            ("exercises", "int"), ("exercise_min", lambda v: f"{v:.0f}", "exercise min"),
            ("run_min", lambda v: "-" if v is None else f"{v:.1f}", "Run All min"),
            ("estimate_min", lambda v: f"{v:.1f}", "estimate min"), ("stated_min", "text", "stated min"),
            ("optional_min", lambda v: f"{v:.1f}" if v else "-", "optional min"),
            ("fits", "text")]
    each = "; ".join(what if m is None else f"{what} {m:g} min" for _, m, what in EXERCISES)
    notes = [f"Reading (Markdown and, where counted, printed words) at {READING_WPM} words a minute; exercises: {each}; Run All as measured"
             + (f" on {machine}" if machine else "") + "; discussion comes on top."]
    return Table(cols, rows, title="Notebook minutes: estimated from the notebook vs stated", notes=notes)


def over_limit(words: Optional[int], limit: int) -> str:
    """'yes', 'no', or '-' when the words were not counted."""
    return "-" if words is None else ("yes" if words > limit else "no")


def word_table(rows: list, docs: list) -> Table:
    """The word limits: ``rows`` of notebooks (notebook, words, printed_words) and ``docs`` of
    (path, words), each beside its limit and flagged when over."""
    out = []
    for r in rows:
        name = r["notebook"]
        out.append({"what": name, "kind": "Markdown", "words": r["words"], "limit": word_limit("markdown", name)})
        out.append({"what": name, "kind": "printed", "words": r.get("printed_words"), "limit": word_limit("printed")})
    out += [{"what": path, "kind": "document", "words": n, "limit": word_limit(path)} for path, n in docs]
    for r in out:
        r["over"] = over_limit(r["words"], r["limit"])
    cols = [("what", "text"), ("kind", "text"), ("words", lambda v: "-" if v is None else f"{v:,}"),
            ("limit", lambda v: f"{v:,}"), ("over", "text")]
    notes = ["Printed: the words a notebook's cells print when run without a GPU (stream text, errors, "
             "each display's HTML, Markdown or plain text); n/a where not counted."]
    return Table(cols, out, title="Word limits: notebooks and documents", notes=notes)
