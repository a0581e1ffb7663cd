"""`ddlab report`: the CPU path end to end, resume, Ctrl-C, --compare, and the time budget by design."""
import base64
import html
import json
import os
import re
import subprocess
import sys

import pytest

from ddlab.base.paths import SOURCE_DIR
from ddlab import cli
from ddlab.system import links, topology
from ddlab.system import policy
from ddlab.report import runner as report, html_page as report_html, plan as report_plan, steps as report_steps

import _one_gpu_fakes

PNG = b"\x89PNG\r\n\x1a\n"
OK = lambda framework, launcher: (True, "")  # noqa: E731


def machine(gpus=0, nvcc=False):
    return policy.Machine(gpus=gpus, label="test machine", nvcc=nvcc, software=OK)


def _assert_self_contained(page: str):
    # No script, stylesheet or image is fetched from anywhere: the page opens from disk, offline.
    assert not re.search(r"""<(script|link|img|iframe)[^>]+(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.I)
    assert "<link" not in page.lower() and "<script" not in page.lower()
    assert "<style>" in page
    imgs = re.findall(r"<img\b[^>]*>", page)
    for tag in imgs:
        m = re.search(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', tag)
        assert m, f"an image that is not an embedded PNG: {tag[:120]}"
        assert base64.b64decode(m.group(1), validate=True).startswith(PNG)
    return imgs


# ----------------------------------------------------------------------------- end to end on CPU
@pytest.mark.slow
def test_cpu_quick_report_end_to_end(tmp_path):
    out = tmp_path / "rep"
    env = dict(os.environ, PYTHONPATH=SOURCE_DIR, CUDA_VISIBLE_DEVICES="", MPLBACKEND="Agg")
    proc = subprocess.run([sys.executable, "-m", "ddlab", "report", "--quick", "--out", str(out)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    recs = {}
    for step in report_html.STEP_ORDER:
        with open(out / f"{step}.json") as f:
            recs[step] = json.load(f)
        assert recs[step]["provenance"]["date"] and "seconds" in recs[step]
    status = {k: r["status"] for k, r in recs.items()}
    assert status == {"doctor": "done", "topology": "skipped", "host-link": "skipped", "pcie-load": "skipped",
                      "p2p": "skipped", "allreduce": "done", "training": "skipped", "one-gpu-training": "skipped",
                      "wrapper-cost": "skipped"}
    for step in ("host-link", "pcie-load", "one-gpu-training", "wrapper-cost"):   # one line each, with the reason
        assert recs[step]["why"] and "\n" not in recs[step]["why"]
    assert "needs 2 GPU" in recs["p2p"]["why"] and "--quick" in recs["training"]["why"]
    sweeps = recs["allreduce"]["data"]["sweeps"]
    assert recs["allreduce"]["data"]["backend"] == "gloo"
    assert all(r["busbw_gbps"] > 0 for s in sweeps["sweeps"] for r in s["rows"])
    with open(out / "allreduce.png", "rb") as f:
        assert f.read(8) == PNG
    page = (out / "report.html").read_text()
    assert len(_assert_self_contained(page)) == 1        # the all-reduce plot
    summary = page.split('<section id="summary">', 1)[1].split("</section>", 1)[0]
    assert "Skipped: Our p2p test" in summary and "needs 2 GPU" in summary and "Skipped: Topology" in summary
    assert "== Summary" in proc.stdout and "report.html" in proc.stdout


def test_topology_from_a_file_without_gpus(tmp_path):
    topo_file = tmp_path / "topo.txt"
    topo_file.write_text(topology.recorded("dgx1-v100").text)
    steps = [s for s in report_steps.STEPS if s.name == "topology"]
    rc = report.main(out=str(tmp_path / "rep"), machine=machine(0), steps=steps, topo_file=str(topo_file))
    assert rc == 0
    rec = json.loads((tmp_path / "rep" / "topology.json").read_text())
    assert rec["status"] == "done" and set(rec["data"]["best_subsets"]) == {str(k) for k in range(2, 9)}
    page = (tmp_path / "rep" / "report.html").read_text()
    assert len(_assert_self_contained(page)) == 1
    assert "Best subset per k" in page and "k=4: GPUs" in page


# ----------------------------------------------------------------------------- resume and Ctrl-C
def _recording_steps(calls, interrupt_at=None, fail_at=None):
    def make(name):
        def run(ctx):
            calls.append(name)
            if name == interrupt_at:
                raise KeyboardInterrupt
            if name == fail_at:
                raise RuntimeError("it broke")
            return {"value": name}
        return report_steps.Step(name, f"step {name}", run)
    return [make(n) for n in ("one", "two", "three")]


def test_ctrl_c_keeps_finished_steps_and_resume_skips_them(tmp_path, capsys):
    out = str(tmp_path / "rep")
    calls = []
    rc = report.main(out=out, machine=machine(), steps=_recording_steps(calls, interrupt_at="two"))
    assert rc == 130 and calls == ["one", "two"]
    err = capsys.readouterr().err
    assert "interrupted during step two" in err and "--resume" in err
    assert json.loads(open(os.path.join(out, "one.json")).read())["data"] == {"value": "one"}
    assert not os.path.exists(os.path.join(out, "two.json"))
    assert not os.path.exists(os.path.join(out, "two.json.part"))

    # Without --resume an existing report is not overwritten.
    assert report.main(out=out, machine=machine(), steps=_recording_steps([])) == 2
    assert "--resume" in capsys.readouterr().err

    calls.clear()
    assert report.main(out=out, machine=machine(), steps=_recording_steps(calls), resume=True) == 0
    assert calls == ["two", "three"]
    assert "kept from the earlier run" in capsys.readouterr().err
    assert os.path.exists(os.path.join(out, "report.html"))


def test_a_failed_step_is_recorded_and_rerun_on_resume(tmp_path):
    out = str(tmp_path / "rep")
    calls = []
    assert report.main(out=out, machine=machine(), steps=_recording_steps(calls, fail_at="two")) == 1
    assert calls == ["one", "two", "three"]
    rec = json.loads(open(os.path.join(out, "two.json")).read())
    assert rec["status"] == "failed" and "it broke" in rec["why"]
    calls.clear()
    assert report.main(out=out, machine=machine(), steps=_recording_steps(calls), resume=True) == 0
    assert calls == ["two"]


def test_progress_line_counts_down():
    import io
    p = report.Progress({"a": 10.0, "b": 20.0}, stream=io.StringIO())
    p.start("a", 1, 2, "first")
    assert 29.0 < p.remaining() <= 30.0
    assert p.remaining(now=p.started + 4.0) == pytest.approx(26.0)
    assert p.remaining(now=p.started + 15.0) == pytest.approx(20.0)     # an overrun step counts as done
    p.end("a", "done")
    assert p.remaining() == pytest.approx(20.0)
    assert "[1/2] first" in p.stream.getvalue() and "left" in p.stream.getvalue()
    # elapsed counts from the report's start, not the step's: a log (no terminal) prints the line only
    # when a step starts, where the step's own time is always 0:00
    p.begun = p.started - 100.0            # the report began 100 s before step a
    p.start("b", 2, 2, "second")
    assert p.line(2, 2, "second", now=p.started + 4.0).startswith("[2/2] second  1:44 elapsed, about 0:16 left")


# ----------------------------------------------------------------------------- compare
def test_compare_with_the_recorded_h200_pair():
    other = report_html.load_other("h200x2")
    assert set(other["steps"]) == {"topology", "p2p", "allreduce", "training"}
    assert other["label"].startswith("2x NVIDIA H200")
    t = report_html.compare_table(other["steps"], other)
    heads = [c.heading for c in t.columns]
    assert heads == ["figure", "unit", "this machine", other["label"], "ratio (this / other)"]
    figures = t.column("figure")
    for path in ("default", "shm", "socket"):
        assert f"all-reduce peak busbw, {path}" in figures
        assert f"training speedup over the plain one-GPU run, {path} (GPU)" in figures
    assert "p2p unidirectional, worst pair" in figures
    # the machine beside itself; a speedup whose plain one-GPU run is not recorded has no ratio
    assert all(r is None or r == pytest.approx(1.0) for r in t.column("ratio"))
    assert any(r is not None for r in t.column("ratio"))


def test_compare_a_cpu_report_with_h200_leaves_what_cpu_lacks_empty(tmp_path, capsys):
    steps = [report_steps.Step("one", "step one", lambda ctx: {})]
    rc = report.main(out=str(tmp_path / "rep"), machine=machine(), steps=steps, compare="h200x2")
    assert rc == 0
    page = (tmp_path / "rep" / "report.html").read_text()
    assert '<section id="compare">' in page and "ratio (this / other)" in page
    text = capsys.readouterr().out
    assert "== Compared" in text and "p2p unidirectional, best pair" in text



def test_compare_with_a_report_folder(tmp_path):
    recorded = report_html.load_other("h200x2")
    folder = tmp_path / "other"
    folder.mkdir()
    for name, rec in recorded["steps"].items():
        (folder / f"{name}.json").write_text(json.dumps(rec, default=str))
    other = report_html.load_other(str(folder))
    assert other["source"] == str(folder) and other["label"].startswith("2x NVIDIA H200")
    t = report_html.compare_table(recorded["steps"], other)
    assert len(t) == len(report_html.key_figures(recorded["steps"]))
    assert all(r is None or r == pytest.approx(1.0) for r in t.column("ratio"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="no report steps"):
        report_html.load_other(str(empty))


def test_compare_unknown_name_says_what_exists(tmp_path, capsys):
    rc = report.main(out=str(tmp_path / "rep"), machine=machine(), steps=[], compare="no-such-machine")
    assert rc == 2
    assert "h200x2" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "rep")


# ----------------------------------------------------------------------------- budget by design
def test_full_report_on_8_gpus_fits_ten_minutes_by_design():
    pl = report_plan.plan(machine(8, nvcc=True), quick=False, p2p_built=False)
    assert pl.p2p["pairs"] == 56
    # The program's default, 10 copies of 1 GiB with both copy kinds, would take the whole budget alone.
    assert 56 * report_plan.p2p_pair_seconds(1 << 30, 10, 2) > report_plan.FULL_BUDGET_S
    assert pl.p2p["size"] * pl.p2p["reps"] < 10 * (1 << 30)
    assert pl.p2p["seconds"] <= report_plan.P2P_BUDGET_S["full"]
    assert set(pl.estimates) == {s.name for s in report_steps.STEPS}
    assert all(v > 0 for v in pl.estimates.values())
    assert pl.total_s() <= report_plan.FULL_BUDGET_S
    assert pl.paths == ["default", "shm", "socket"] and pl.train_device == "cuda"


def test_quick_on_2_gpus_fits_two_minutes_and_keeps_the_default_p2p_size_when_it_fits():
    quick = report_plan.plan(machine(2, nvcc=True), quick=True, p2p_built=False)
    assert quick.total_s() <= report_plan.QUICK_BUDGET_S and quick.train_device is None
    assert quick.p2p["size"] * quick.p2p["reps"] < 10 * (1 << 30) and quick.p2p["copy"] == "ce"
    assert quick.sweep_sizes == [1 << 10, 1 << 20, 64 << 20]
    full2 = report_plan.plan(machine(2, nvcc=True), quick=False)
    assert (full2.p2p["size"], full2.p2p["reps"], full2.p2p["copy"]) == (1 << 30, 10, "both")


def test_every_sweep_holds_the_size_two_machines_are_compared_at():
    """compare_table's "all-reduce busbw at 1 MiB" reads the row of exactly that size: a full sweep
    by x4 (GPUs) or x8 (CPU) from 8 B steps over it, so the plan adds it to every sweep."""
    assert report_plan.COMPARED_BYTES == 1 << 20
    for backend in ("nccl", "gloo"):
        for quick in (True, False):
            sizes = report_plan.sweep_sizes(backend, quick)
            assert report_plan.COMPARED_BYTES in sizes and sizes == sorted(set(sizes)), (backend, quick)
    full = report_plan.sweep_sizes("nccl", False)
    assert full[0] == 8 and full[-1] == 512 << 20 and len(full) == 15


def test_plan_without_gpus_is_gloo_on_cpu():
    pl = report_plan.plan(machine(0), quick=False)
    assert (pl.sweep_backend, pl.paths, pl.train_device) == ("gloo", ["default"], "cpu")
    assert pl.estimates["p2p"] == 0
    no_torch = policy.Machine(gpus=0, software=lambda f, la: (False, "PyTorch is not installed"))
    assert report_plan.plan(no_torch).estimates["allreduce"] == 0


def test_link_peaks_come_from_the_catalogue():
    assert report_steps.nvlink_generation(["NVIDIA H200"]) == 4
    assert report_steps.nvlink_generation(["Tesla V100-SXM2-16GB"]) == 2
    assert report_steps.nvlink_generation(["NVIDIA GeForce RTX 4090"]) is None
    t = topology.recorded("h200x2")
    peaks = report_steps.link_peaks(t.to_dict(), ["NVIDIA H200"])
    assert peaks[0][0] is None and peaks[0][1] == links.nvlink(4, 18).bandwidth_gbs
    assert report_steps.slowest_peak(peaks) == links.nvlink(4, 18).bandwidth_gbs
    assert report_steps.link_peaks(t.to_dict(), ["unknown"]) is None     # NVLink of unknown generation


def test_cli_is_registered_and_rejects_a_missing_topo_file(capsys):
    assert cli.COMMANDS["report"][0] == "ddlab.report.runner"
    assert report.cli(["--topo-file", "/no/such/file"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_default_folder_names_the_machine():
    assert report.default_out(machine(0)).startswith(os.path.join("results", "report-cpu-"))


# ----------------------------------------------------------------------------- the GPU path, with recorded results
def test_gpu_path_renders_with_the_recorded_h200_results(tmp_path, monkeypatch):
    """The GPU steps' own code (sizing, link peaks, records, plots, summary) on a pretend 2-GPU
    machine whose measurements are the recorded ones: the measuring functions are GPU-tested
    elsewhere, so here they return what the 2x H200 recorded."""
    from ddlab.measure import collectives, collectives_run, p2p_diagnosis, p2p_run
    from ddlab.training import experiments, recording
    from ddlab.system import hardware
    calls = {"p2p": [], "sweep": []}
    monkeypatch.setattr(hardware, "inventory", lambda **kw: hardware.Inventory(
        gpus=[hardware.GPU(0, "NVIDIA H200"), hardware.GPU(1, "NVIDIA H200")], torch="2", nvcc="13"))
    monkeypatch.setattr(topology.Topology, "from_system", classmethod(lambda cls, timeout=30: topology.recorded("h200x2")))

    def fake_p2p_run(**kw):
        calls["p2p"].append(kw)
        return p2p_diagnosis.load_recorded("h200x2")
    monkeypatch.setattr(p2p_run, "run", fake_p2p_run)
    recorded = collectives.load_recorded("h200x2")

    def fake_sweep(**kw):
        calls["sweep"].append(kw)
        return recorded[kw["path"]]
    monkeypatch.setattr(collectives_run, "sweep", fake_sweep)
    monkeypatch.setattr(experiments, "nccl_path_comparison",
                        lambda **kw: recording.load_recorded("nccl-paths", "torch", "ddp", "wide"))
    one = _one_gpu_fakes.patch(monkeypatch, slow_gpu=1)
    m = policy.Machine(gpus=2, label="2x NVIDIA H200, NV18", nvcc=True, software=OK)
    assert report.main(out=str(tmp_path / "rep"), machine=m) == 0
    assert [(c["size"], c["reps"], c["copy"]) for c in calls["p2p"]] == [(1 << 30, 10, "both")]
    assert [(c["path"], c["backend"]) for c in calls["sweep"]] == [("default", "nccl"), ("shm", "nccl"),
                                                                   ("socket", "nccl")]
    recs = report_html.read_folder(str(tmp_path / "rep"))
    assert {k: r["status"] for k, r in recs.items()} == dict.fromkeys(report_html.STEP_ORDER, "done")
    assert recs["allreduce"]["data"]["link_peak_gbps"] == links.nvlink(4, 18).bandwidth_gbs
    page = (tmp_path / "rep" / "report.html").read_text()
    # topology, a host link per GPU, p2p, all-reduce, training, one GPU's training
    assert len(_assert_self_contained(page)) == 7
    summary = html.unescape(page.split('<section id="summary">', 1)[1].split("</section>", 1)[0])
    for topic in ("Slowest link", "Asymmetric pairs", "Best subset per k", "All-reduce", "Training speedup",
                  "Host link, GPU 0", "PCIe under load", "One GPU, images/s", "Wrapper's cost on one worker"):
        assert topic in summary
    assert "needs 3 GPUs or more" in summary and "Skipped" not in summary
    # every GPU's host link measured, and the one behind a slower link stands out
    assert [i for i, _ in one["host"]] == [0, 1] and "slower: 50% of the fastest GPU" in summary


def test_the_summary_shows_a_failed_training_path_shortened():
    from ddlab.base import tables
    first = ("rank 1 on host gpu-node-7.cluster.example.org died first: killed by SIGKILL (signal 9; the kernel's "
             "out-of-memory killer, or a job scheduler)")
    rows = [{"path": "1 worker", "images_per_s": 100.0}, {"path": "default", "speedup": 1.9},
            {"path": "shm", "error": first}]
    items = report_html.summary_items({"training": {"status": "done", "data": {"result": {"rows": rows},
                                                                               "device": "cuda"}}})
    [text] = [t for topic, t, _ in items if topic == "Training speedup over the plain one-GPU run"]
    assert text.startswith("default: 1.90x; shm: failed (" + tables.shorten(first, 60) + ")")
    assert tables.shorten(first, 60).endswith("\u2026") and first not in text


def test_compare_names_machines_not_their_companion_sweeps(tmp_path, capsys):
    """reference/allreduce/ also holds each machine's level sweep and its repeated sweeps: they are not
    machines to compare with."""
    report.main(out=str(tmp_path / "rep"), machine=machine(), steps=[], compare="no-such-machine")
    err = capsys.readouterr().err
    assert "h200x2" in err and "h200x2-levels" not in err and "h200x2-repeats" not in err
