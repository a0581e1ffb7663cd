"""Fixtures of the real-browser test: one JupyterLab server and one Chromium for the session
(for each process, when pytest-xdist runs the notebooks side by side), both stopped on every exit
path (normal end, failure, timeout, SIGTERM)."""
import os
import signal
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lab_driver  # noqa: E402

SHOTS = os.path.abspath(os.environ.get("BROWSER_SCREENSHOTS") or os.path.join(lab_driver.ROOT, "results", "browser"))
TIMINGS = []   # (notebook, code cells, open s, run-all s, sliders) in the order they finished
TIMING = "browser_timing"     # the user property a test reports its row of TIMINGS in
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")     # "gw0", "gw1", ... under pytest-xdist, else ""


def _sigterm(signum, frame):
    # A CI timeout sends SIGTERM: turn it into an exception so every fixture's finally runs.
    raise KeyboardInterrupt(f"signal {signum}")


signal.signal(signal.SIGTERM, _sigterm)


def pytest_configure(config):
    # The last run's screenshots go once, before any test: in the main process, not in each worker
    # (a worker starting late would delete what the other has taken), and not for --collect-only.
    if not hasattr(config, "workerinput") and not config.option.collectonly:
        os.makedirs(SHOTS, exist_ok=True)
        for name in os.listdir(SHOTS):
            if name.endswith(".png"):
                os.remove(os.path.join(SHOTS, name))


@pytest.fixture(scope="session")
def shots_dir():
    os.makedirs(SHOTS, exist_ok=True)
    return SHOTS


@pytest.fixture(scope="session")
def lab(shots_dir):
    server = lab_driver.LabServer(log_path=os.path.join(shots_dir, f"jupyterlab{'-' + WORKER if WORKER else ''}.log"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def browser():
    if not os.access(lab_driver.CHROMIUM, os.X_OK):
        pytest.fail(f"no Chromium at {lab_driver.CHROMIUM}: run `make chromium` (Debian/Ubuntu) or set CHROMIUM=/path")
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = lab_driver.launch_browser(p)
        try:
            yield b
        finally:
            b.close()


# The notebooks whose Run All takes longest (their live multi-process runs): when several processes
# share the notebooks (pytest-xdist), these start first, so that no process is left with a long one
# at the end. One process keeps the course's order.
LONGEST_FIRST = ("notebooks/10.Case-Studies.ipynb", "notebooks/9.Convergence-at-Scale.ipynb")


def pytest_collection_modifyitems(config, items):
    # Under pytest-xdist the workers collect (each the same order), and the main process hands out
    # tests in that order.
    if hasattr(config, "workerinput") or getattr(config.option, "numprocesses", None):
        first = {nb: i for i, nb in enumerate(LONGEST_FIRST)}
        items.sort(key=lambda item: first.get(item.callspec.params.get("notebook") if hasattr(item, "callspec")
                                              else None, len(first)))


def pytest_runtest_logreport(report):
    # Runs where the summary is printed (the main process): each test's timing row comes with its report.
    if report.when == "call":
        TIMINGS.extend(tuple(value) for name, value in report.user_properties if name == TIMING)


def pytest_terminal_summary(terminalreporter):
    if TIMINGS:
        terminalreporter.write_sep("-", "notebooks in the browser (seconds)")
        terminalreporter.write_line(f"{'notebook':<44} {'code cells':>10} {'open':>6} {'run all':>8} {'sliders':>8}")
        for name, cells, open_s, run_s, sliders in TIMINGS:
            terminalreporter.write_line(f"{name:<44} {cells:>10} {open_s:>6.1f} {run_s:>8.1f} {sliders:>8}")
    terminalreporter.write_line(f"browser screenshots: {SHOTS}")
