"""The lab engineer's HTML report (`ddlab report`), opened from disk in Chromium as they would:
it must load nothing from outside the file and show every plot (no broken image).

The report is made on this machine by the CPU path of `ddlab report --quick` (no GPU: the
topology comes from a recorded `nvidia-smi topo -m` paste, and the recorded 2x H200 is put
beside it with --compare), so the test covers the command end to end, not a stored page.
"""
import os
import shutil
import subprocess
import sys

import pytest

import lab_driver

ROOT = lab_driver.ROOT
TOPO = os.path.join(ROOT, "tests", "fixtures", "topo", "p100x8_dgx1_mlx5_soc.txt")


@pytest.fixture(scope="module")
def report_dir(shots_dir):
    out = os.path.join(shots_dir, "report")
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="",
               PYTHONPATH=os.path.join(ROOT, "source_code") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "ddlab", "report", "--quick", "--topo-file", TOPO, "--compare", "h200x2",
           "--out", out]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"ddlab report failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert os.path.exists(os.path.join(out, "report.html")), os.listdir(out)
    return out


@pytest.mark.timeout(1200)
def test_the_report_opens_from_disk_with_every_image_and_nothing_from_outside(browser, report_dir):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    outside = []
    page.on("request", lambda req: outside.append(req.url) if not req.url.startswith(("file://", "data:")) else None)
    try:
        page.goto("file://" + os.path.join(report_dir, "report.html"), wait_until="load", timeout=60_000)
        images = page.evaluate("Array.from(document.images).length")
        broken = page.evaluate("Array.from(document.images).filter(i => !i.complete || i.naturalWidth === 0)"
                               ".map(i => i.alt || i.src.slice(0, 40))")
        text = page.inner_text("body")
        page.screenshot(path=os.path.join(os.path.dirname(report_dir), "report.png"), full_page=True)
    finally:
        page.close()
    assert images >= 1, "the report shows no plot at all"
    assert not broken, f"broken images in the report: {broken}"
    assert not outside, f"the report asked for files outside itself: {outside[:5]}"
    assert "Summary" in text or "summary" in text
    assert "skipped" in text                # no GPU here: the report says what it skipped and why
