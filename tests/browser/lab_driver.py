"""Drive JupyterLab in a real browser (Debian's Chromium through Playwright), as a learner would.

`LabServer` starts the very command `make lab` runs (read from `make lab-command`) on a free
loopback port with a token, in a settings sandbox of its own; `NotebookRun` opens one notebook
in a fresh page, checks that it opens unmodified, runs every cell from the Run menu, waits for
the kernel, collects errors (from the kernel's messages, the source of truth) and what the page
shows, moves every ipywidgets slider and checks that its widget's output changes, and takes
screenshots. Nothing here passes or fails a test: it reports, and the tests decide.
"""
from __future__ import annotations

import atexit
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
# Headless Chromium as root in a container: no sandbox (root needs it off), no GPU, and no
# traffic of its own (updates, sync, QUIC probes): the only server it talks to is ours.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
VIEWPORT = {"width": 1400, "height": 900}
# Resolves after the browser has drawn two more frames (the second one follows a layout of what changed).
_TWO_FRAMES_JS = "() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(() => done(true))))"
# A learner's fresh settings, plus one change: autosave off, so that running a notebook
# in the browser never writes its outputs into the committed file.
USER_SETTINGS = {"@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def lab_command(port: int) -> list:
    """The command line `make lab` runs on a machine without a desktop, with another port
    (``make lab-command`` prints it)."""
    out = subprocess.run(["make", "-s", "--no-print-directory", "lab-command", f"LAB_PORT={port}",
                          "LAB_BROWSER_FLAG=--no-browser"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60, check=True).stdout
    return shlex.split(out.strip())


def _kill_group(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    if proc.poll() is not None:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(grace_s)
            return
        except subprocess.TimeoutExpired:
            continue


class LabServer:
    """`make lab`'s JupyterLab on a free port, its own token, a sandbox for settings and workspaces.

    The kernel imports ddlab from this checkout (PYTHONPATH), whatever the venv's editable
    install points at. Stop it with :meth:`stop` (kills the whole process group)."""

    def __init__(self, log_path: str, start_timeout_s: float = 180.0):
        self.port = free_port()
        self.token = secrets.token_hex(24)
        self.sandbox = tempfile.mkdtemp(prefix="ddlab-browser-")
        self.command = lab_command(self.port)
        settings = os.path.join(self.sandbox, "user-settings")
        for rel, value in USER_SETTINGS.items():
            path = os.path.join(settings, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                json.dump(value, f)
        env = dict(os.environ, JUPYTER_TOKEN=self.token, JUPYTERLAB_SETTINGS_DIR=settings,
                   JUPYTERLAB_WORKSPACES_DIR=os.path.join(self.sandbox, "workspaces"),
                   JUPYTER_RUNTIME_DIR=os.path.join(self.sandbox, "runtime"),
                   PYTHONPATH=os.pathsep.join(p for p in (os.path.join(ROOT, "source_code"),
                                                          os.environ.get("PYTHONPATH")) if p))
        self.log_path = log_path
        self._log = open(log_path, "w")
        self.proc = subprocess.Popen(self.command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                                     stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        atexit.register(self.stop)
        deadline = time.monotonic() + start_timeout_s
        while True:
            if self.proc.poll() is not None:
                self.stop()
                raise RuntimeError(f"JupyterLab exited with code {self.proc.returncode} while starting: "
                                   f"{' '.join(self.command)}\n{self.log_tail()}")
            try:
                self.api("GET", "/api/status")
                break
            except (OSError, urllib.error.URLError):
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"JupyterLab did not answer within {start_timeout_s:.0f} s\n{self.log_tail()}")
                time.sleep(0.5)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, notebook: str) -> str:
        # ?reset: a clean workspace, so only this notebook opens.
        return f"{self.base_url}/lab/tree/{notebook}?reset&token={self.token}"

    def api(self, method: str, path: str):
        req = urllib.request.Request(self.base_url + path, method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=10) as r:
            body = r.read()
        return json.loads(body) if body else None

    def shutdown_kernels(self) -> None:
        for session in self.api("GET", "/api/sessions") or []:
            self.api("DELETE", f"/api/sessions/{session['id']}")

    def log_tail(self, chars: int = 3000) -> str:
        self._log.flush()
        with open(self.log_path, errors="replace") as f:
            return f.read()[-chars:]

    def stop(self) -> None:
        _kill_group(self.proc)
        if not self._log.closed:
            self._log.close()
        shutil.rmtree(self.sandbox, ignore_errors=True)


def launch_browser(playwright):
    return playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS, timeout=120_000)


# ------------------------------------------------------------------ the kernel's messages
def parse_ws_frame(payload):
    """A JupyterLab kernel websocket frame -> (channel, header, parent_header, content), or None.

    Binary frames use Jupyter's v1 protocol: a count N (uint64, little-endian), N offsets, then
    the parts (channel, header, parent_header, metadata, content, buffers); text frames are one
    JSON message (the legacy protocol)."""
    try:
        if isinstance(payload, str):
            msg = json.loads(payload)
            return msg.get("channel"), msg.get("header", {}), msg.get("parent_header", {}), msg.get("content", {})
        n = int.from_bytes(payload[:8], "little")
        offsets = [int.from_bytes(payload[8 + 8 * i:16 + 8 * i], "little") for i in range(n)]
        parts = [payload[offsets[i]:offsets[i + 1]] for i in range(min(n - 1, 5))]
        channel = parts[0].decode()
        header, parent, content = (json.loads(parts[i]) if parts[i] else {} for i in (1, 2, 4))
        return channel, header, parent, content
    except (ValueError, IndexError, UnicodeDecodeError):
        return None


@dataclass
class KernelMessages:
    """What the kernel said on the page's websockets: errors, executions, kernel_info replies."""
    errors: list = field(default_factory=list)            # (execution_count or None, ename, evalue)
    kernel_info_replies: int = 0
    executed: dict = field(default_factory=dict)           # execute request id -> execution_count

    def on_frame(self, payload) -> None:
        parsed = parse_ws_frame(payload)
        if parsed is None:
            return
        _, header, parent, content = parsed
        kind = header.get("msg_type")
        if kind == "kernel_info_reply":
            self.kernel_info_replies += 1
        elif kind == "execute_input":
            self.executed[parent.get("msg_id")] = content.get("execution_count")
        elif kind == "error":
            self.errors.append((self.executed.get(parent.get("msg_id")), content.get("ename"),
                                content.get("evalue")))


# ------------------------------------------------------------------ page helpers (JS run in the page)
_STATE_JS = """() => {
  const nb = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook');
  if (!nb) return null;
  const prompts = [...nb.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')].map(p => p.textContent.trim());
  const ind = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook-ExecutionIndicator');
  return {prompts, indicator: ind ? ind.getAttribute('data-status') : null};
}"""

_OUTPUTS_JS = """() => {
  const cells = [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell')];
  const found = {stderr: [], plainResults: [], brokenWidgets: [], cutTables: []};
  cells.forEach((cell, i) => {
    const prompt = cell.querySelector('.jp-InputArea-prompt');
    const label = `cell ${i + 1}` + (prompt ? ' ' + prompt.textContent.trim() : '');
    cell.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')
      .forEach(o => found.stderr.push([label, o.textContent.slice(0, 2000)]));
    cell.querySelectorAll('.jp-OutputArea-executeResult').forEach(r => {
      const o = r.querySelector('.jp-OutputArea-output');
      if (o && o.getAttribute('data-mime-type') === 'text/plain')
        found.plainResults.push([label, o.textContent.slice(0, 300)]);
    });
    // a table wider than its output area: JupyterLab cuts it at the right edge (a scroll bar the reader may miss)
    cell.querySelectorAll('.jp-OutputArea-output[data-mime-type="text/html"]').forEach(o => {
      const t = o.querySelector('table');
      if (t && o.scrollWidth > o.clientWidth + 2) {
        const cap = t.querySelector('caption');
        found.cutTables.push([label, (cap ? cap.textContent : t.textContent).trim().slice(0, 120),
                              o.scrollWidth - o.clientWidth]);
      }
    });
    cell.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.widget-view+json"]')
      .forEach(o => { if (!o.querySelector('.jupyter-widgets')) found.brokenWidgets.push([label, o.textContent.slice(0, 300)]); });
  });
  return found;
}"""

# What a widget shows, without the slider's own readout (which moves with the slider itself).
_FINGERPRINT_JS = """(handle) => {
  const out = handle.closest('.jp-OutputArea-output');
  const clone = out.cloneNode(true);
  clone.querySelectorAll('.widget-slider, .noUi-target, .widget-readout').forEach(e => e.remove());
  let h = 0;
  for (const img of out.querySelectorAll('img')) for (const ch of img.src) h = (h * 31 + ch.charCodeAt(0)) | 0;
  return clone.textContent + ' |img:' + h;
}"""

_HANDLE_JS = """(handle) => ({
  now: handle.getAttribute('aria-valuenow'), max: handle.getAttribute('aria-valuemax'),
  text: (handle.closest('.widget-slider') || handle).textContent.trim(),
  label: ((handle.closest('.widget-slider') || handle).querySelector('.widget-label') || {textContent: ''}).textContent.trim()})"""


@dataclass
class SliderCheck:
    cell_label: str
    slider: str
    before: str
    after: str
    moved: bool
    output_changed: bool
    screenshot: str


@dataclass
class NotebookReport:
    notebook: str
    code_cells: int
    dirty_on_open: bool = False
    kernel_name: str = ""
    news_toast: str = ""
    dialogs: list = field(default_factory=list)
    open_s: float = 0.0
    run_all_s: float = 0.0
    finished: bool = False
    unexecuted: list = field(default_factory=list)
    errors: list = field(default_factory=list)
    stderr: list = field(default_factory=list)
    plain_results: list = field(default_factory=list)
    cut_tables: list = field(default_factory=list)          # (cell label, caption, pixels cut)
    broken_widgets: list = field(default_factory=list)
    sliders: list = field(default_factory=list)
    screenshots: list = field(default_factory=list)


def code_cell_count(path: str) -> int:
    with open(path) as f:
        return sum(c["cell_type"] == "code" for c in json.load(f)["cells"])


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", s)


class NotebookRun:
    """One notebook in a fresh page: open, check, run all, check outputs, move sliders."""

    def __init__(self, browser, server: LabServer, notebook: str, shots_dir: str):
        self.server, self.notebook = server, notebook
        self.shots_dir = shots_dir
        self.stem = _slug(os.path.splitext(notebook)[0])
        self.report = NotebookReport(notebook, code_cell_count(os.path.join(ROOT, notebook)))
        self.messages = KernelMessages()
        self.context = browser.new_context(viewport=VIEWPORT)
        self.page = self.context.new_page()
        self.page.on("websocket", lambda ws: ws.on("framereceived", self.messages.on_frame))

    def close(self) -> None:
        try:
            self.context.close()
        finally:
            self.server.shutdown_kernels()

    def shot(self, name: str, element=None) -> str:
        path = os.path.join(self.shots_dir, f"{self.stem}__{name}.png")
        (element or self.page).screenshot(path=path)
        self.report.screenshots.append(path)
        return path

    def _wait(self, predicate, timeout_s: float, what: str, poll_s: float = 0.25):
        deadline = time.monotonic() + timeout_s
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.notebook}: {what} (waited {timeout_s:.0f} s)")
            self.page.wait_for_timeout(poll_s * 1000)

    def open(self, timeout_s: float = 180.0, settle_s: float = 3.0) -> None:
        """Open the notebook; wait until its kernel has answered kernel_info (that is when
        JupyterLab copies the kernel's metadata into the notebook), then watch the tab for
        ``settle_s`` more seconds: a notebook that changes on opening is marked dirty then."""
        t0 = time.monotonic()
        self.page.goto(self.server.url(self.notebook), timeout=timeout_s * 1000)
        self.page.wait_for_selector(".jp-NotebookPanel .jp-Notebook .jp-Cell", timeout=timeout_s * 1000)
        self._wait(lambda: self.messages.kernel_info_replies > 0 or self._dialogs(), timeout_s,
                   "the kernel never answered (no kernel_info_reply)")
        self._wait(lambda: (self.page.evaluate(_STATE_JS) or {}).get("indicator") == "idle" or self._dialogs(),
                   timeout_s, "the kernel never became idle after opening")
        deadline = time.monotonic() + settle_s
        while time.monotonic() < deadline and not self.report.dirty_on_open:
            self.report.dirty_on_open = self.page.locator("li.lm-TabBar-tab.jp-mod-dirty").count() > 0
            self.page.wait_for_timeout(200)
        self.report.open_s = time.monotonic() - t0
        self.report.dialogs = self._dialogs()
        kernel = self.page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-KernelName")
        self.report.kernel_name = kernel.first.inner_text().strip() if kernel.count() else ""
        self.report.news_toast = self.news_toast()
        self.shot("01-opened")

    def _dialogs(self) -> list:
        return [t.strip() for t in self.page.locator(".jp-Dialog").all_inner_texts()]

    def news_toast(self) -> str:
        toasts = self.page.locator(".Toastify__toast").all_inner_texts()
        return " | ".join(t.strip() for t in toasts if "news" in t.lower())

    def run_all(self, timeout_s: float) -> None:
        """Run menu -> Run All Cells; wait until no cell is queued or running and the kernel is idle."""
        self.page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
        self.page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
        t0 = time.monotonic()

        def done():
            state = self.page.evaluate(_STATE_JS) or {}
            prompts = state.get("prompts", [])
            busy = any("*" in p for p in prompts) or state.get("indicator") != "idle"
            if busy:
                return False
            # Either every code cell ran, or the kernel stopped at an error (the rest stay unrun).
            return all(re.search(r"\d", p) for p in prompts) or self.messages.errors

        try:
            self._wait(done, timeout_s, "Run All did not finish", poll_s=0.5)
            self.page.wait_for_timeout(1000)          # let the last outputs render
            self._wait(done, 60, "Run All did not settle")
            self.report.finished = True
        finally:
            self.report.run_all_s = time.monotonic() - t0
            self.collect()
            self.shot_pages("02-run-all")

    def collect(self) -> None:
        state = self.page.evaluate(_STATE_JS) or {}
        self.report.unexecuted = [i + 1 for i, p in enumerate(state.get("prompts", [])) if not re.search(r"\d", p)]
        self.report.errors = list(self.messages.errors)
        found = self.page.evaluate(_OUTPUTS_JS)
        self.report.stderr = found["stderr"]
        self.report.plain_results = found["plainResults"]
        self.report.cut_tables = found["cutTables"]
        self.report.broken_widgets = found["brokenWidgets"]
        self.report.dialogs = self.report.dialogs or self._dialogs()

    def shot_pages(self, name: str, max_pages: int = 150) -> None:
        """The whole notebook, one viewport-high screenshot per page of scrolling (pages overlap a
        little). Cells off screen have only estimated heights until shown, so the end is found by
        scrolling: the last page is the one showing the bottom of the last cell."""
        outer = "document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-WindowedPanel-outer')"
        where = f"""() => {{
          const outer = {outer}, box = outer.getBoundingClientRect();
          const cells = outer.querySelectorAll('.jp-Cell');
          return {{top: outer.scrollTop, view: outer.clientHeight,
                   lastBottom: cells[cells.length - 1].getBoundingClientRect().bottom - box.top}};
        }}"""
        self.page.evaluate(f"() => {{ {outer}.scrollTop = 0; }}")
        for i in range(max_pages):
            self.page.evaluate(_TWO_FRAMES_JS)     # the cells scrolled into view are laid out and painted
            self.page.wait_for_timeout(100)
            self.shot(f"{name}-p{i + 1:02d}")
            at = self.page.evaluate(where)
            if at["lastBottom"] <= at["view"]:
                break
            self.page.evaluate(f"() => {{ {outer}.scrollTop = {at['top'] + max(at['view'] - 60, 100)}; }}")
            if self.page.evaluate(where)["top"] == at["top"]:
                break
        self.page.evaluate(f"() => {{ {outer}.scrollTop = 0; }}")

    def move_sliders(self, timeout_s: float = 30.0) -> None:
        """Every ipywidgets slider: one step (ArrowRight, or ArrowLeft at the end of its range);
        record whether the slider moved and whether the rest of its widget's output changed."""
        handles = self.page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea-output .noUi-handle")
        for i in range(handles.count()):
            handle = handles.nth(i)
            handle.scroll_into_view_if_needed()
            cell = self.page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell").filter(has=handle)
            prompt = cell.locator(".jp-InputArea-prompt").first.inner_text().strip() if cell.count() else "?"
            before_handle = handle.evaluate(_HANDLE_JS)
            before = handle.evaluate(_FINGERPRINT_JS)
            handle.focus()
            self.page.keyboard.press("ArrowLeft" if before_handle["now"] == before_handle["max"] else "ArrowRight")
            deadline = time.monotonic() + timeout_s
            after_handle, after = before_handle, before
            while time.monotonic() < deadline:
                self.page.wait_for_timeout(250)
                after_handle, after = handle.evaluate(_HANDLE_JS), handle.evaluate(_FINGERPRINT_JS)
                if after != before:
                    self.page.wait_for_timeout(500)      # let it finish redrawing
                    after = handle.evaluate(_FINGERPRINT_JS)
                    break
            out = handle.locator("xpath=ancestor::div[contains(@class,'jp-OutputArea-output')][1]")
            path = self.shot(f"03-slider{i + 1}", element=out)
            self.report.sliders.append(SliderCheck(
                f"{prompt}", before_handle["label"] or f"slider {i + 1}", before_handle["text"], after_handle["text"],
                moved=after_handle["now"] != before_handle["now"], output_changed=after != before, screenshot=path))
