"""ddlab.measure.host_link: the host-link test's JSON read, its figures against the link's raw
rate, host staging from them, the compiled program run (a stand-in binary here) and the choice
between compiled, torch and "no GPU"."""
import json
import os
import stat

import pytest

from ddlab.measure import host_link, p2p_run

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "fixtures", "hostlink", "synthetic_h100_2node.json")


def text():
    with open(FIXTURE) as f:
        return f.read()


@pytest.fixture
def result():
    r = host_link.parse_output(text())
    r.link = {"gen": 5, "width": 16}
    return r


def test_the_programs_json_is_read(result):
    assert result.source == "compiled" and result.method.startswith("copy engine")
    assert result.nodes == [0, 1] and result.gpu_node == 0
    assert result.gbps("pinned", "h2d", 1 << 30) == 55.0 and result.gbps("pinned", "d2h", 1 << 30, node=1) == 42.1
    assert result.best("pinned", "bidir")["gbps"] == 96.0
    assert result.latency_us("pinned", "h2d") == pytest.approx(3.1)
    assert result.skipped == [{"numa_node": 1, "bytes": 1 << 30, "memory": "pageable", "why": "out of host memory"}]
    again = host_link.HostLinkResult.from_json(json.loads(json.dumps(result.to_dict())))
    assert again.to_dict() == result.to_dict()


def test_text_before_the_json_is_skipped():
    assert host_link.parse_output("building host_bandwidth_latency\n" + text()).nodes == [0, 1]


@pytest.mark.parametrize("bad,match", [
    ("", "no JSON object"),
    ('{"format": "ddlab-hostlink/1", "rows": [', "not whole JSON"),
    ('{"format": "ddlab-p2p/1"}', "expected \"format\": \"ddlab-hostlink/1\""),
    ('{"format": "ddlab-hostlink/1", "latency": [], "device": {}, "method": "m"}', "no 'rows'"),
    ('{"format": "ddlab-hostlink/1", "rows": [{"numa_node": 0}], "latency": [], "device": {}, "method": "m"}',
     r"rows\[0\] has no valid 'memory'"),
    ('[1, 2]', "no JSON object"),
])
def test_anything_else_is_one_clear_error(bad, match):
    with pytest.raises(host_link.HostLinkParseError, match=match) as e:
        host_link.parse_output(bad)
    assert "\n" not in str(e.value)


def test_the_links_raw_rate_per_direction():
    assert host_link.link_peak_gbps(5, 16) == pytest.approx(63.015, abs=1e-3)
    assert host_link.link_peak_gbps(4, 8) == pytest.approx(15.754, abs=1e-3)
    assert host_link.link_peak_gbps(1, 16) == pytest.approx(4.0)                 # 8b/10b
    assert host_link.link_peak_gbps(6, 16) == pytest.approx(121.0)               # FLIT mode, 242/256
    assert host_link.link_peak_gbps(None, 16) is None and host_link.link_peak_gbps(5, None) is None
    assert host_link.share(90.0, 63.0, "bidir") == pytest.approx(90 / 126)


def test_table_shows_each_row_against_the_raw_rate(result):
    t = host_link.table(result)
    row = next(r for r in t.rows if r["node"] == "0 (GPU's)" and r["memory"] == "pinned" and r["bytes"] == 1 << 30)
    assert row["h2d"] == 55.0 and row["h2d_pct"] == pytest.approx(55.0 / 63.015, rel=1e-4)
    assert row["bidir_pct"] == pytest.approx(96.0 / (2 * 63.015), rel=1e-4)
    assert "87%" in t.text() and "PCIe Gen5 x16, 63.0 GB/s per direction" in t.text()
    # unknown link: no % columns, and the page says so
    result.link = None
    assert "h2d_pct" not in [c.key for c in host_link.table(result).columns]
    assert "us" in host_link.latency_table(result).text()


def test_summary_names_the_rates_the_other_node_and_the_skipped_size(result):
    lines = host_link.summary(result)
    assert lines[0].startswith("pinned, NUMA node 0 (the GPU's), from 256 MiB up: h2d 55.0 GB/s (87%), d2h 55.2")
    assert any(ln.startswith("pageable, NUMA node 0") for ln in lines)
    assert any("one 4 KiB copy: pinned h2d 3.1 us" in ln for ln in lines)
    other = next(ln for ln in lines if "from NUMA node 1" in ln)
    assert "0.75x node 0's" in other and "slower" in other
    assert "skipped: node 1, pageable, 1 GiB: out of host memory" in lines


def test_host_staging_is_one_d2h_plus_one_h2d_copy(result):
    s = host_link.staging(result, 1 << 30)
    assert s["at_bytes"] == 1 << 30
    assert s["total_s"] == pytest.approx((1 << 30) / 55.2e9 + (1 << 30) / 55.0e9)
    assert s["gbps"] == pytest.approx(1 / (1 / 55.2 + 1 / 55.0))
    assert host_link.staging(result, 300 << 20)["at_bytes"] == 256 << 20    # the nearest size measured
    with pytest.raises(ValueError, match="no pinned rows measured from NUMA node 7"):
        host_link.staging(result, 1 << 20, node=7)


def fake_binary(tmp_path, body: str) -> str:
    exe = tmp_path / "host_bandwidth_latency"
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return str(exe)


def test_run_compiled_reads_the_programs_json_and_adds_provenance(tmp_path):
    out = tmp_path / "out.json"
    out.write_text(text())
    exe = fake_binary(tmp_path, f'echo "$@" > {tmp_path}/args\necho "table on stderr" >&2\ncat {out}\n')
    r = host_link.run_compiled(device=1, sizes=[4096, 1 << 20], numa=[0], seconds_per_row=0.05, binary=exe)
    assert r.source == "compiled" and r.nodes == [0, 1]
    assert (tmp_path / "args").read_text().split() == ["--device", "1", "--sizes", "4096,1048576", "--numa", "0",
                                                       "--seconds", "0.05", "--json", "-"]
    assert r.provenance["command"].startswith("host_bandwidth_latency --device 1")


@pytest.mark.parametrize("code,stderr,error,match", [
    (2, "host_bandwidth_latency: no CUDA GPU is visible (no driver).", host_link.HostLinkNoGPU,
     "skipped: no CUDA GPU is visible"),
    (3, "validation failed on node 0", host_link.HostLinkError, "validation caught wrong data"),
    (1, "CUDA error at x.cu:1", host_link.HostLinkError, "failed \\(exit 1\\)"),
])
def test_run_compiled_failures(tmp_path, code, stderr, error, match):
    exe = fake_binary(tmp_path, f'echo "{stderr}" >&2\nexit {code}\n')
    with pytest.raises(error, match=match):
        host_link.run_compiled(binary=exe)


def test_the_real_program_is_built_by_its_own_make_target_and_says_no_gpu_in_one_line(tmp_path, monkeypatch):
    from test_p2p_run import NO_NVCC, NVCC, program_copy
    if not NVCC:
        pytest.skip(NO_NVCC)
    d = program_copy(tmp_path)
    exe = p2p_run.build(directory=str(d), program=host_link.PROGRAM_NAME, timeout=600)
    assert exe == str(d / host_link.PROGRAM_NAME) and not (d / "p2p_bandwidth_latency").exists()
    assert p2p_run.build(directory=str(d), program=host_link.PROGRAM_NAME) == exe      # up to date: reused
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")         # no GPU, on any machine
    with pytest.raises(host_link.HostLinkNoGPU, match="^skipped: no CUDA GPU is visible") as e:
        host_link.run_compiled(binary=exe)
    assert "\n" not in str(e.value)


def test_measure_without_a_gpu_is_one_line(monkeypatch):
    monkeypatch.setattr(p2p_run, "gpu_visible", lambda: False)
    with pytest.raises(host_link.HostLinkNoGPU, match="^skipped: no NVIDIA GPU is visible"):
        host_link.measure(prefer="compiled")
    import ddlab.measure.host_link_torch as hlt

    def no_gpu():
        raise hlt.NoGPU("skipped: no GPU visible to PyTorch")
    monkeypatch.setattr(hlt, "_torch", no_gpu)
    with pytest.raises(host_link.HostLinkNoGPU, match="^skipped: no GPU visible to PyTorch$"):
        host_link.measure(prefer="torch")


def test_measure_picks_compiled_with_nvcc_and_torch_without(monkeypatch):
    calls = []
    r = host_link.parse_output(text())
    monkeypatch.setattr(host_link, "run_compiled", lambda *a, **k: calls.append("compiled") or r)
    monkeypatch.setattr(host_link, "measure_torch", lambda *a, **k: calls.append("torch") or r)
    monkeypatch.setattr(host_link.frameworks, "nvcc_path", lambda: "/usr/bin/nvcc")
    host_link.measure()
    monkeypatch.setattr(host_link.frameworks, "nvcc_path", lambda: None)
    monkeypatch.setattr(host_link.os.path, "exists", lambda p: False)      # no binary built either
    host_link.measure()
    assert calls == ["compiled", "torch"]


def test_a_compiled_build_that_fails_falls_back_to_torch_with_a_note(monkeypatch):
    r = host_link.parse_output(text(), source="torch")

    def broken(*a, **k):
        raise host_link.HostLinkError("building the host-link test failed (make exited 2)")
    monkeypatch.setattr(host_link, "run_compiled", broken)
    monkeypatch.setattr(host_link, "measure_torch", lambda *a, **k: r)
    monkeypatch.setattr(host_link.frameworks, "nvcc_path", lambda: "/usr/bin/nvcc")
    got = host_link.measure()
    assert got.source == "torch" and got.notes[0].startswith("the compiled test could not run (building")


def test_nothing_is_recorded_yet_says_so(monkeypatch, tmp_path):
    from ddlab.base import reference
    from ddlab.base.reference import ReferenceMissing
    monkeypatch.setattr(reference, "REFERENCE_DIR", str(tmp_path))
    assert host_link.recorded_names() == []
    with pytest.raises(ReferenceMissing, match="no recorded result hostlink/h100"):
        host_link.load_recorded("h100")


def test_several_gpus_side_by_side_mark_the_slower_one(result):
    slow = host_link.HostLinkResult.from_json(result.to_dict())
    slow.device = dict(slow.device, index=1, numa_node=None)
    slow.numa = dict(slow.numa, gpu_node=None)
    for r in slow.rows:
        r["gbps"] = r["gbps"] * 0.5
    t = host_link.gpus_table([result, slow])
    fast_row, slow_row = t.rows
    assert fast_row["flag"] == "-" and fast_row["other"] == 41.5 and fast_row["h2d"] == 55.0
    assert "slower: 50% of the fastest GPU" in slow_row["flag"] and "NUMA node not reported" in slow_row["flag"]


def test_the_staging_line_names_both_copies_and_the_peer_path(result):
    line = host_link.staging_line(result, 25 << 20, peer_gbps=450.0)
    assert line.startswith("host staging of 25 MiB: GPU->host ") and "+ host->GPU" in line
    assert "measured at 16 MiB" not in line and "one peer-to-peer copy at 450 GB/s" in line and "x less" in line


def test_the_committed_recording_is_a_real_run_with_provenance():
    names = host_link.recorded_names()
    assert names, "source_code/reference/hostlink/ holds the recorded host links"
    r = host_link.load_recorded(names[0])
    assert r.source == "recorded" and r.provenance.get("gpu_model") and r.provenance.get("driver")
    assert {row["direction"] for row in r.rows} == {"h2d", "d2h", "bidir"}
    assert {row["memory"] for row in r.rows} == {"pinned", "pageable"}


def test_a_table_of_every_other_size_keeps_the_smallest_and_the_largest(result):
    whole = [r["bytes"] for r in host_link.table(result).rows if r["memory"] == "pinned" and r["node"] == "0 (GPU's)"]
    some = [r["bytes"] for r in host_link.table(result, every=2).rows
            if r["memory"] == "pinned" and r["node"] == "0 (GPU's)"]
    assert some == sorted(set(whole[::2] + whole[-1:])) and len(some) < len(whole)
    with pytest.raises(ValueError, match="every"):
        host_link.table(result, every=0)
