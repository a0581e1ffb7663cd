"""pytest hooks for the notebooks run under nbval: the words each notebook prints.

Each nbval cell's outputs are counted as they come back (``ddlab.course.minutes.output_words``), and
the sum per notebook is printed at the end of the run, beside the course's limit
(``ddlab.course.minutes.WORD_LIMITS["printed"]``). The counting adds no run: the cells are the ones
nbval executes anyway (``make test`` runs them on the machine in front of it; CI has no GPU).

    --printed-words             after each notebook's last cell, one more item, "<notebook>::printed words",
                                that fails when the notebook printed more than its limit and names its
                                wordiest cells (with pytest-xdist --dist loadscope it runs on the worker
                                that ran the notebook's cells, after them)
    --printed-words-json PATH   write each notebook's count to PATH, for tools/notebook_minutes.py --printed
"""
import json
import os

import pytest

_KEY = "printed_words"


def pytest_addoption(parser):
    group = parser.getgroup("printed words")
    group.addoption("--printed-words", action="store_true",
                    help="fail a check item after each notebook under nbval that prints more words than its limit")
    group.addoption("--printed-words-json", metavar="PATH",
                    help="write the words each notebook printed under nbval to PATH (JSON)")


class _Counts:
    """notebook node id -> {cell name: words}, from the reports this process sees (on pytest-xdist's
    controller: every worker's; on a worker: its own)."""
    name = "ddlab-printed-words"

    def __init__(self):
        self.by_notebook = {}

    def pytest_runtest_logreport(self, report):
        for key, words in getattr(report, "user_properties", ()):
            if key == _KEY:
                notebook, _, cell = report.nodeid.rpartition("::")
                self.by_notebook.setdefault(notebook, {})[cell] = words


def pytest_configure(config):
    config.pluginmanager.register(_Counts(), _Counts.name)


def _counts(config) -> dict:
    return config.pluginmanager.get_plugin(_Counts.name).by_notebook


def _cell_class():
    try:
        from nbval.plugin import IPyNbCell
    except ImportError:        # nbval not installed: no notebooks are collected
        return None
    return IPyNbCell


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    cell = _cell_class()
    if call.when == "call" and cell is not None and isinstance(item, cell):
        from ddlab.course.minutes import output_words
        outcome.get_result().user_properties.append((_KEY, output_words(item.test_outputs or [])))


class PrintedWords(pytest.Item):
    """Fails when the notebook's cells, run under nbval before it, printed more words than its limit."""

    def runtest(self):
        from ddlab.course.minutes import word_limit
        cells = [i.name for i in self.session.items if i.parent is self.parent and i is not self]
        counted = _counts(self.config).get(self.parent.nodeid, {})
        if not cells or set(cells) - set(counted):
            pytest.skip(f"{len(set(cells) & set(counted))} of the notebook's {len(cells)} cells ran in this "
                        "process: its printed words are counted only when all of them run before this item")
        total, limit = sum(counted[c] for c in cells), word_limit("printed")
        if total > limit:
            top = sorted(cells, key=lambda c: -counted[c])[:3]
            raise PrintedWordsOver(f"{self.parent.name} prints {total:,} words on this machine, over its limit of "
                                   f"{limit:,}; the wordiest cells: "
                                   + ", ".join(f"{c} ({counted[c]:,})" for c in top))

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, PrintedWordsOver):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, f"{self.parent.name}::{self.name}"


class PrintedWordsOver(AssertionError):
    """A notebook printed more words than its limit."""


def pytest_collection_modifyitems(session, config, items):
    cell = _cell_class()
    if not config.getoption("printed_words") or cell is None:
        return
    last = {}
    for i, item in enumerate(items):
        if isinstance(item, cell):
            last[item.parent] = i
    for parent, i in sorted(last.items(), key=lambda kv: -kv[1]):
        items.insert(i + 1, PrintedWords.from_parent(parent, name="printed words"))


def _code_cells(root, notebook: str) -> int:
    with open(os.path.join(root, notebook), encoding="utf-8") as f:
        return sum(c.get("cell_type") == "code" for c in json.load(f)["cells"])


def pytest_terminal_summary(terminalreporter, config):
    counted = _counts(config)
    if not counted or hasattr(config, "workerinput"):
        return
    from ddlab.course.minutes import word_limit
    limit = word_limit("printed")
    terminalreporter.section(f"words printed per notebook under nbval (limit {limit:,})")
    for notebook, cells in sorted(counted.items()):
        total, of = sum(cells.values()), _code_cells(config.rootpath, notebook)
        part = "" if len(cells) == of else f" (only {len(cells)} of its {of} cells counted)"
        terminalreporter.write_line(f"{notebook}: {total:,}{part}" + (" OVER" if total > limit else ""))
    path = config.getoption("printed_words_json")
    if path:
        out = {os.path.basename(nb): {"words": sum(c.values()), "cells_counted": len(c),
                                      "code_cells": _code_cells(config.rootpath, nb)} for nb, c in counted.items()}
        with open(path, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1, sort_keys=True)
