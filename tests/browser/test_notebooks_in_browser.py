"""Start_Here and every notebook, as a learner meets them: JupyterLab (the server `make lab`
starts) in Chromium. Each notebook must open unmodified on the course kernel, with no news
pop-up; Run All must finish with no error, no bare text result (a stray ``Out[1]: 0``) and no
table wider than the notebook (cut at its right edge); every widget must render, and every
slider must change its widget's output when moved.

Run with `make browser-test` (kept out of `make test`); screenshots go to results/browser/
(or $BROWSER_SCREENSHOTS), and the summary prints the time each notebook took.
"""
import glob
import hashlib
import os

import pytest

import conftest
import lab_driver

ROOT = lab_driver.ROOT
COURSE = ["Start_Here.ipynb"] + sorted((os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb"))),
                                      key=lambda p: (int(os.path.basename(p).split(".")[0]), p))     # 9 before 10
SELF_CHECK = os.path.relpath(os.path.join(os.path.dirname(__file__), "fixtures", "misbehaving.ipynb"), ROOT)
# Run All may take this long per code cell (plus a fixed allowance) before the test gives up.
CELL_S = float(os.environ.get("BROWSER_CELL_S", "30"))
# How long a moved slider may take to change its widget's output. The self-check's dead slider waits
# all of it, and its live one redraws one line of HTML, so it gets a short wait.
SLIDER_S, SELF_CHECK_SLIDER_S = 30.0, 5.0


def run_all_timeout_s(notebook: str) -> float:
    return 120 + CELL_S * lab_driver.code_cell_count(os.path.join(ROOT, notebook))


def params(notebooks):
    # pytest-timeout's limit per notebook: Run All's own limit plus opening, sliders and screenshots.
    return [pytest.param(nb, id=nb, marks=pytest.mark.timeout(run_all_timeout_s(nb) + 300)) for nb in notebooks]


def sha(path):
    with open(os.path.join(ROOT, path), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def run_notebook(browser, lab, shots_dir, notebook, request, slider_s: float = SLIDER_S) -> lab_driver.NotebookReport:
    digest = sha(notebook)
    run = lab_driver.NotebookRun(browser, lab, notebook, shots_dir)
    try:
        run.open()
        if not run.report.dialogs:
            run.run_all(run_all_timeout_s(notebook))
            if run.report.finished:      # after an error too: the sliders above it ran
                run.move_sliders(timeout_s=slider_s)
    finally:
        run.close()
        r = run.report
        request.node.user_properties.append((conftest.TIMING, (notebook, r.code_cells, r.open_s, r.run_all_s,
                                                               len(r.sliders))))
    assert sha(notebook) == digest, f"{notebook} was written to while the test ran it (autosave?)"
    return run.report


def problems(r: lab_driver.NotebookReport) -> list:
    found = []
    if r.dialogs:
        found.append(f"a dialog is open: {r.dialogs}")
    if r.kernel_name != "Python (ddlab)":
        found.append(f"the notebook runs on kernel {r.kernel_name!r}, not 'Python (ddlab)'")
    if r.dirty_on_open:
        found.append("it opens marked as modified (its metadata differs from what JupyterLab writes; "
                     "see ddlab.course.kernel.NOTEBOOK_METADATA)")
    if r.news_toast:
        found.append(f"JupyterLab's news pop-up shows: {r.news_toast!r}")
    for count, ename, evalue in r.errors:
        found.append(f"error in cell In[{count}]: {ename}: {evalue}")
    if not r.finished:
        found.append("Run All did not finish")
    elif r.unexecuted and not r.errors:
        found.append(f"code cells left unrun: {r.unexecuted}")
    for label, text in r.plain_results:
        found.append(f"{label} leaves a bare result {text!r} (print it, display it, or end the line with ';')")
    for label, caption, pixels in r.cut_tables:
        found.append(f"{label}: a table is {pixels} px wider than the notebook and is cut at the right: {caption!r}")
    for label, text in r.broken_widgets:
        found.append(f"{label}: a widget did not render: {text!r}")
    for s in r.sliders:
        if not s.moved:
            found.append(f"{s.cell_label} slider {s.slider!r} did not move ({s.before!r})")
        elif not s.output_changed:
            found.append(f"{s.cell_label} slider {s.slider!r} moved ({s.before!r} -> {s.after!r}) "
                         f"but its output did not change (see {s.screenshot})")
    return found


@pytest.mark.parametrize("notebook", params(COURSE))
def test_notebook_in_browser(browser, lab, shots_dir, notebook, request):
    r = run_notebook(browser, lab, shots_dir, notebook, request)
    for label, text in r.stderr:   # warnings are not failures, but a reader of the log should see them
        print(f"{notebook} {label} wrote to stderr: {text[:300]!r}")
    found = problems(r)
    assert not found, f"{notebook} in the browser:\n  " + "\n  ".join(found) + f"\nscreenshots: {shots_dir}"


@pytest.mark.parametrize("notebook", params([SELF_CHECK]))
def test_the_checks_catch_a_misbehaving_notebook(browser, lab, shots_dir, notebook, request):
    """A notebook that does each wrong thing once: the checks above must report every one of them,
    and must not count a warning on stderr as an error."""
    r = run_notebook(browser, lab, shots_dir, notebook, request, slider_s=SELF_CHECK_SLIDER_S)
    assert r.dirty_on_open, "old-style metadata (language_info without the kernel's fields) must show as modified"
    assert [e[1:] for e in r.errors] == [("ZeroDivisionError", "division by zero")], r.errors
    assert any("UserWarning: a warning, not an error" in text for _, text in r.stderr), r.stderr
    assert [text for _, text in r.plain_results] == ["0"], r.plain_results
    assert len(r.sliders) == 2, r.sliders
    live, dead = r.sliders
    assert live.moved and live.output_changed, live
    assert dead.moved and not dead.output_changed, dead
    assert [(c[1], c[2] > 0) for c in r.cut_tables] == [("too wide", True)], r.cut_tables
    assert r.unexecuted == [7], r.unexecuted          # Run All stops at the error
    assert len(problems(r)) == 5, problems(r)
