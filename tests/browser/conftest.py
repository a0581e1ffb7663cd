"""Fixtures of the real-browser test: one JupyterLab server and one Chromium for the session,
both stopped on every exit path (normal end, failure, timeout, SIGTERM)."""
import os
import signal
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lab_driver  # noqa: E402

SHOTS = os.path.abspath(os.environ.get("BROWSER_SCREENSHOTS") or os.path.join(lab_driver.ROOT, "results", "browser"))
TIMINGS = []   # (notebook, code cells, open s, run-all s, sliders) in the order they ran


def _sigterm(signum, frame):
    # A CI timeout sends SIGTERM: turn it into an exception so every fixture's finally runs.
    raise KeyboardInterrupt(f"signal {signum}")


signal.signal(signal.SIGTERM, _sigterm)


@pytest.fixture(scope="session")
def shots_dir():
    os.makedirs(SHOTS, exist_ok=True)
    for name in os.listdir(SHOTS):
        if name.endswith(".png"):
            os.remove(os.path.join(SHOTS, name))
    return SHOTS


@pytest.fixture(scope="session")
def lab(shots_dir):
    server = lab_driver.LabServer(log_path=os.path.join(shots_dir, "jupyterlab.log"))
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


def pytest_terminal_summary(terminalreporter):
    if TIMINGS:
        terminalreporter.write_sep("-", "notebooks in the browser (seconds)")
        terminalreporter.write_line(f"{'notebook':<44} {'code cells':>10} {'open':>6} {'run all':>8} {'sliders':>8}")
        for name, cells, open_s, run_s, sliders in TIMINGS:
            terminalreporter.write_line(f"{name:<44} {cells:>10} {open_s:>6.1f} {run_s:>8.1f} {sliders:>8}")
    terminalreporter.write_line(f"browser screenshots: {SHOTS}")
