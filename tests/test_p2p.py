"""The CUDA p2p test's Makefile and program (where nvcc exists) and ddlab.measure.p2p: parsing our
output and NVIDIA's p2pBandwidthLatencyTest output, summary, heatmaps, build/run errors, CLI."""
import json
import os
import shutil
import subprocess

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from ddlab.system import hardware  # noqa: E402
from ddlab.measure import p2p
from ddlab.base import reference

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "fixtures", "p2p")
NVCC = p2p._nvcc()
NO_NVCC = "nvcc (CUDA toolkit) is not installed here, so the CUDA program cannot be compiled"


def fixture(name):
    with open(os.path.join(FIX, name)) as f:
        return f.read()


def program_copy(tmp_path):
    d = tmp_path / "p2p_bandwidth_latency"
    d.mkdir()
    for f in os.listdir(p2p.PROGRAM_DIR):       # the Makefile and every program it builds
        if f == "Makefile" or f.endswith(".cu"):
            shutil.copy(os.path.join(p2p.PROGRAM_DIR, f), d / f)
    return d


def path_without_nvcc(tmp_path):
    """PATH with nvcc hidden. A directory holding nvcc (e.g. /usr/bin with Debian's CUDA
    package) is replaced by a copy of its links minus nvcc, so make, sh and grep stay."""
    dirs = []
    for k, d in enumerate(os.environ.get("PATH", "").split(os.pathsep)):
        if not d or not os.path.exists(os.path.join(d, "nvcc")):
            dirs.append(d)
            continue
        shadow = tmp_path / f"path{k}"
        shadow.mkdir()
        for name in os.listdir(d):
            if name != "nvcc":
                (shadow / name).symlink_to(os.path.join(d, name))
        dirs.append(str(shadow))
    return os.pathsep.join(dirs)


def fake_tools(tmp_path, smi_output, archs="compute_75 compute_80 compute_86 compute_89 compute_90"):
    """A bin/ with a fake nvidia-smi (prints smi_output) and a fake nvcc (lists archs)."""
    b = tmp_path / "bin"
    b.mkdir()
    (b / "nvidia-smi").write_text(f"#!/bin/sh\nprintf '{smi_output}'\n")
    (b / "nvcc").write_text(f"#!/bin/sh\n[ \"$1\" = --list-gpu-arch ] && printf '%s\\n' {archs}\nexit 0\n")
    for f in b.iterdir():
        f.chmod(0o755)
    return b


def make(directory, *args, path=None, env_extra=None):
    env = dict(os.environ, CUDA_HOME="/nonexistent-cuda")
    env.pop("NVCC", None)
    env.pop("GENCODE", None)
    # Under `make test` these are inherited and make a nested make print "Entering directory".
    for k in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS"):
        env.pop(k, None)
    if path is not None:
        env["PATH"] = path
    env.update(env_extra or {})
    return subprocess.run(["make", *args], cwd=directory, env=env, capture_output=True, text=True, timeout=600)


# ============================================================================ Makefile
def test_make_without_nvcc_prints_one_line(tmp_path):
    d = program_copy(tmp_path)
    out = make(d, path=path_without_nvcc(tmp_path))
    lines = [ln for ln in (out.stdout + out.stderr).splitlines() if ln.strip()]
    assert out.returncode != 0
    assert len(lines) == 1, lines
    assert "nvcc" in lines[0] and "not found" in lines[0]
    assert not (d / "p2p_bandwidth_latency").exists()


def test_make_picks_the_installed_gpu_architecture(tmp_path):
    d = program_copy(tmp_path)
    b = fake_tools(tmp_path, "9.0\\n9.0\\n")
    out = make(d, "print-arch", path=f"{b}{os.pathsep}{path_without_nvcc(tmp_path)}")
    assert out.returncode == 0, out.stderr
    assert "GENCODE=-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90" in out.stdout
    assert "sm_80" not in out.stdout and "installed GPU compute capability 90" in out.stdout


def test_make_defaults_without_gpu_and_never_old_architectures(tmp_path):
    d = program_copy(tmp_path)
    # nvidia-smi without a driver prints an error message on stdout: it must not become an arch.
    b = fake_tools(tmp_path, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\\n")
    out = make(d, "print-arch", path=f"{b}{os.pathsep}{path_without_nvcc(tmp_path)}")
    assert out.returncode == 0, out.stderr
    assert "sm_80" in out.stdout and "sm_90" in out.stdout and "code=compute_90" in out.stdout
    assert "no GPU found" in out.stdout
    for old in ("sm_35", "sm_37", "sm_50", "sm_52", "sm_60", "sm_61", "sm_70"):
        assert old not in out.stdout


def test_make_falls_back_when_nvcc_cannot_build_for_the_gpu(tmp_path):
    d = program_copy(tmp_path)
    b = fake_tools(tmp_path, "7.0\\n")  # a V100 with an nvcc that starts at compute_75
    out = make(d, "print-arch", path=f"{b}{os.pathsep}{path_without_nvcc(tmp_path)}")
    assert out.returncode == 0
    assert "sm_70" not in out.stdout and "sm_90" in out.stdout and "cannot build for" in out.stdout


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The real program, compiled once with the real Makefile (defaults: no GPU here)."""
    if not NVCC:
        pytest.skip(NO_NVCC)
    d = program_copy(tmp_path_factory.mktemp("build"))
    out = make(d)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "warning" not in (out.stdout + out.stderr).lower(), out.stdout + out.stderr
    return d / "p2p_bandwidth_latency"


@pytest.mark.slow
def test_makefile_compiles_the_program(built):
    assert os.access(built, os.X_OK)
    out = subprocess.run([built, "--help"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and "--copy ce|sm|both" in out.stdout and "--test-corrupt" in out.stdout


@pytest.mark.slow
def test_program_reports_no_gpu_with_exit_2(built):
    # no GPU visible on any machine: CUDA_VISIBLE_DEVICES hides the GPUs a GPU machine has
    out = subprocess.run([built], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    assert out.returncode == 2
    assert "no CUDA GPU" in out.stderr and out.stdout == ""


@pytest.mark.slow
@pytest.mark.parametrize("args, message", [
    (["--size", "17"], "multiple of 16"),
    (["--copy", "dma"], "--copy must be"),
    (["--test-corrupt", "--no-validate"], "needs validation"),
    (["--gpus", "0,0"], "twice"),
    (["--bogus"], "unknown option"),
    (["--ce-api", "dma"], "--ce-api must be peer or uva"),
    (["--latency-batch", "0"], "--latency-batch must be an integer in [1, 1024]"),
])
def test_program_rejects_bad_options(built, args, message):
    out = subprocess.run([built, *args], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and message in out.stderr


@pytest.mark.slow
def test_format_demo_fixture_matches_the_program(built, tmp_path):
    """The committed 'ours' fixtures are the program's own printer output; keep them in sync."""
    j = tmp_path / "demo.json"
    out = subprocess.run([built, "--format-demo", "3", "--direction", "both", "--link-peak", "478.08",
                          "--json", str(j)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0
    assert out.stdout == fixture("ours_format_demo_3gpu.txt")
    assert json.loads(j.read_text()) == json.loads(fixture("ours_format_demo_3gpu.json"))
    # --json - puts JSON alone on stdout and the tables on stderr.
    out = subprocess.run([built, "--format-demo", "2", "--json", "-"], capture_output=True, text=True, timeout=30)
    assert json.loads(out.stdout)["n"] == 2 and "Unidirectional P2P=Disabled" in out.stderr


@pytest.mark.slow
def test_build_reports_compiler_errors(tmp_path):
    if not NVCC:
        pytest.skip(NO_NVCC)
    d = program_copy(tmp_path)
    with open(d / "p2p_bandwidth_latency.cu", "a") as f:
        f.write("\n#error deliberately broken for the test\n")
    with pytest.raises(p2p.P2PBuildError, match="deliberately broken"):
        p2p.build(directory=str(d), timeout=300)


def test_build_without_nvcc_raises_clear_error(tmp_path, monkeypatch):
    d = program_copy(tmp_path)
    monkeypatch.setenv("PATH", path_without_nvcc(tmp_path))
    monkeypatch.setenv("CUDA_HOME", "/nonexistent-cuda")
    with pytest.raises(p2p.P2PBuildError, match="nvcc .*not found"):
        p2p.build(directory=str(d))


# ============================================================================ parsing: NVIDIA's sample
def test_parse_nvidia_sample_current_format():
    r = p2p.parse(fixture("nvidia_sample_2gpu.txt"))
    assert r.source == "nvidia-sample" and not r.synthetic
    assert r.n == 2 and r.labels == [0, 1]
    assert set(r.matrices) == set(p2p.STANDARD_KEYS)
    assert r.matrices["uni_p2p_on"][0, 1] == 300.0 and r.matrices["uni_p2p_on"][1, 0] == 360.0
    assert r.matrices["bi_p2p_on"][1, 0] == 610.0
    assert r.matrices["lat_gpu_p2p_off"][0, 1] == 15.0 and r.matrices["lat_cpu_p2p_off"][1, 0] == 9.0
    assert r.matrices["lat_gpu_p2p_on"][1, 0] == 2.6 and r.matrices["lat_cpu_p2p_on"][0, 1] == 2.8
    assert r.chosen["uni_p2p_on"] == "uni_p2p_on:ce:write"
    assert r.connectivity.dtype == bool and r.connectivity.all()
    assert [d["name"] for d in r.devices] == ["Example GPU-SXM 80GB"] * 2
    assert r.devices[1]["pci_bus_id"] == "00000000:2A:00.0"


def test_parse_nvidia_sample_with_reads():
    r = p2p.parse(fixture("nvidia_sample_4gpu_reads.txt"))
    assert r.n == 4
    assert {"uni_p2p_on:ce:write", "uni_p2p_on:ce:read", "lat_gpu_p2p_on:ce:read",
            "lat_cpu_p2p_on:ce:read"} <= set(r.variants)
    assert r.chosen["uni_p2p_on"] == "uni_p2p_on:ce:write"  # writes stand for the standard key
    assert r.matrices["uni_p2p_on"][1, 2] == 50.0 and r.variants["uni_p2p_on:ce:read"][1, 2] == 48.0
    assert not r.connectivity[0, 3] and not r.connectivity[3, 0] and r.connectivity[1, 3]


def test_parse_nvidia_sample_old_format():
    text = fixture("nvidia_sample_old_4gpu.txt")
    r = p2p.parse(text)
    # Old samples: one latency table per state (taken as GPU-timed), no CPU rows.
    assert set(r.matrices) == {"uni_p2p_off", "uni_p2p_on", "bi_p2p_off", "bi_p2p_on",
                               "lat_gpu_p2p_off", "lat_gpu_p2p_on"}
    assert r.matrices["uni_p2p_on"][0, 1] == 12.0 and r.matrices["lat_gpu_p2p_on"][2, 3] == 8.0
    expected = np.array([[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1], [0, 0, 1, 1]], dtype=bool)
    assert (r.connectivity == expected).all()
    # Without the CAN/CANNOT lines the cliques alone give the same connectivity.
    r2 = p2p.parse("\n".join(ln for ln in text.splitlines() if not ln.startswith("Device=")))
    assert (r2.connectivity == expected).all()


def test_parse_tolerates_crlf_and_ansi_codes():
    text = fixture("nvidia_sample_2gpu.txt").replace("\n", "\r\n").replace("Unidirectional", "\x1b[1mUnidirectional")
    r = p2p.parse(text)
    assert r.matrices["uni_p2p_on"][1, 0] == 360.0


# ============================================================================ parsing: ours
def test_parse_our_format_demo_output():
    r = p2p.parse(fixture("ours_format_demo_3gpu.txt"))
    assert r.source == "ddlab" and r.synthetic
    assert set(r.matrices) == set(p2p.STANDARD_KEYS)
    assert {"uni_p2p_on:sm:write", "uni_p2p_on:sm:read", "bi_p2p_on:ce:read", "lat_gpu_p2p_on:sm:write"} <= set(r.variants)
    assert np.isnan(r.variants["lat_gpu_p2p_on:sm:write"][1, 1])  # "n/a" in the text
    assert r.parameters["link_peak_gbps"] == 478.08 and r.parameters["size"] == 1073741824
    assert r.versions == {"cuda_driver": "13.0", "cuda_runtime": "13.0"}
    assert r.devices[2]["pci_bus_id"] == "00000000:38:00.0" and r.devices[0]["sm_count"] == 132
    assert not r.connectivity[0, 2]
    # The program's JSON and its text say the same.
    j = p2p.P2PResult.from_dict(json.loads(fixture("ours_format_demo_3gpu.json")))
    assert set(j.variants) == set(r.variants)
    for k in r.variants:
        np.testing.assert_allclose(j.variants[k], r.variants[k], atol=0.006)
    assert (j.connectivity == r.connectivity).all() and j.synthetic


def test_parse_one_gpu_output():
    r = p2p.parse(fixture("ours_format_demo_1gpu.txt"))
    assert r.n == 1 and r.matrices["uni_p2p_on"].shape == (1, 1)
    assert "two GPUs" in r.summary()


def test_parse_real_capture_from_h200():
    r = p2p.parse(fixture("h200x2_ours.txt"))
    assert r.source == "ddlab" and not r.synthetic and r.n == 2
    assert set(r.matrices) == set(p2p.STANDARD_KEYS)
    assert all("H200" in d["name"] for d in r.devices)
    assert r.validation and r.validation.startswith("PASSED")
    on, off = r.matrices["uni_p2p_on"], r.matrices["uni_p2p_off"]
    assert on[0, 1] > 3 * off[0, 1] and on[1, 0] > 3 * off[1, 0]  # NVLink beats host staging
    assert r.matrices["lat_gpu_p2p_on"][0, 1] < r.matrices["lat_gpu_p2p_off"][0, 1]
    # The program's own --json of the same run agrees with its printed tables.
    j = p2p.P2PResult.from_dict(json.loads(fixture("h200x2_ours.json")))
    assert set(j.variants) == set(r.variants)
    for k in r.variants:
        np.testing.assert_allclose(j.variants[k], r.variants[k], atol=0.006, rtol=1e-5)


# ============================================================================ parsing: missing and malformed
def test_missing_blocks_are_absent():
    text = fixture("nvidia_sample_2gpu.txt")
    cut = text.split("Bidirectional P2P=Disabled")[0]
    r = p2p.parse(cut)
    assert set(r.matrices) == {"uni_p2p_off", "uni_p2p_on"}
    r = p2p.parse(text.split("P2P=Enabled Latency")[0])
    assert "lat_gpu_p2p_off" in r.matrices and "lat_gpu_p2p_on" not in r.matrices


@pytest.mark.parametrize("text, message", [
    ("hello world\nnothing here\n", "no p2p tables found"),
    ("Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)\nsomething else\n", "column header"),
    ("Unidirectional P2P=Enabled Bandwidth Matrix (GB/s)\n   D\\D     0      1\n     0 1.00 2.00\n", "1 row"),
    ("Unidirectional P2P=Enabled Bandwidth Matrix (GB/s)\n   D\\D     0      1\n     0 1.00 2.00\n     1 3.00 abc\n",
     "'abc' is not a number"),
    ("Unidirectional P2P=Enabled Bandwidth Matrix (GB/s)\n   D\\D     0      1\n     0 1.00\n     1 3.00 4.00\n",
     "followed by 2 values"),
    ("P2P=Enabled Latency (P2P Writes) Matrix (us)\n\nNOTE: nothing\n", "column header"),
])
def test_malformed_text_raises_clear_error(text, message):
    with pytest.raises(p2p.P2PParseError, match=message):
        p2p.parse(text)


def test_two_runs_pasted_together_are_refused():
    text = fixture("nvidia_sample_2gpu.txt")
    with pytest.raises(p2p.P2PParseError, match="appears twice"):
        p2p.parse(text + text)


def test_tables_for_different_gpus_are_refused():
    a = "Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)\n   D\\D     0      1\n     0 1.00 2.00\n     1 3.00 4.00\n"
    b = "Unidirectional P2P=Enabled Bandwidth Matrix (GB/s)\n   D\\D     0      2\n     0 1.00 2.00\n     2 3.00 4.00\n"
    with pytest.raises(p2p.P2PParseError, match="for GPUs"):
        p2p.parse(a + b)


def test_parse_rejects_bytes():
    with pytest.raises(TypeError):
        p2p.parse(b"Unidirectional")


# ============================================================================ conversion and rendering
@pytest.mark.parametrize("name", ["nvidia_sample_2gpu.txt", "nvidia_sample_4gpu_reads.txt",
                                  "nvidia_sample_old_4gpu.txt", "ours_format_demo_3gpu.txt"])
def test_format_tables_and_dict_round_trip(name):
    r = p2p.parse(fixture(name))
    again = p2p.parse(p2p.format_tables(r))
    assert set(again.variants) == set(r.variants)
    for k in r.variants:
        np.testing.assert_allclose(again.variants[k], r.variants[k], atol=0.006)
    assert (again.connectivity == r.connectivity).all()
    assert again.devices == r.devices and again.synthetic == r.synthetic
    d = json.loads(json.dumps(r.to_dict()))  # NaN must have become null
    back = p2p.P2PResult.from_dict(d)
    for k in r.matrices:
        np.testing.assert_array_equal(back.matrices[k], r.matrices[k])
    assert back.chosen == r.chosen and back.devices == r.devices


def test_from_dict_rejects_wrong_shapes():
    with pytest.raises(ValueError, match="expected \\(2, 2\\)"):
        p2p.P2PResult.from_dict({"n": 2, "labels": [0, 1], "variants": {"uni_p2p_on": [[1.0, 2.0]]}})
    with pytest.raises(ValueError, match="not a p2p result"):
        p2p.P2PResult.from_dict({"labels": [0]})


def test_matrix_table_shows_one_matrix():
    r = p2p.parse(fixture("nvidia_sample_2gpu.txt"))
    t = r.matrix_table("uni_p2p_on")
    assert t.title == p2p.TITLES["uni_p2p_on"]
    assert [c.heading for c in t.columns] == ["src \\ dst", "0", "1"]
    m = r.matrices["uni_p2p_on"]
    assert t.rows[0]["gpu1"] == m[0][1] and t.rows[1]["gpu0"] == m[1][0]
    assert t.cells()[0][2] == f"{m[0][1]:.2f}"
    with pytest.raises(KeyError, match="no matrix 'uni_p2p_on:sm'"):
        r.matrix_table("uni_p2p_on:sm")


# ============================================================================ summary
def test_summary_two_gpus_with_link_peak():
    r = p2p.parse(fixture("nvidia_sample_2gpu.txt"))
    s = r.summary(link_peak_gbps=450.0)
    assert "best 360.0 GB/s (GPU 1 -> 0)" in s and "worst 300.0 GB/s (GPU 0 -> 1)" in s
    assert "80% of the link's peak, 450 GB/s per direction, as measured" in s
    assert "headers" not in s and "CRC" not in s         # what takes the rest was never measured
    assert "Peer access is 10.8x faster" in s  # (300+360)/2 / ((30+31)/2)
    assert "0 <-> 1 (300.0 vs 360.0 GB/s)" in s  # 17% apart: asymmetric
    assert "Outlier" not in s


def test_summary_finds_outlier_gpu_and_missing_peers():
    r = p2p.parse(fixture("nvidia_sample_4gpu_reads.txt"))
    s = p2p.summary(r)
    assert "GPU 3's pairs average" in s
    assert "0 <-> 1 (35.0 vs 50.0 GB/s)" in s
    assert "No peer access for: 0 -> 3, 3 -> 0" in s
    assert "GPU-timed latency: 1.50 us with peer access against 12.00 us host-staged" in s


def test_summary_says_when_p2p_does_not_help():
    text = fixture("nvidia_sample_2gpu.txt").replace(" 300.00 ", "  30.50 ").replace(" 360.00 ", "  31.50 ")
    s = p2p.summary(p2p.parse(text))
    assert "Peer access barely helps" in s


def test_summary_marks_synthetic_results():
    assert p2p.summary(p2p.parse(fixture("ours_format_demo_3gpu.txt"))).startswith("SYNTHETIC")


def test_outlier_and_asymmetry_helpers():
    m = np.array([[0, 10, 5], [10, 0, 5], [5, 5, 0]], dtype=float)
    assert [g for g, _, _ in p2p.outlier_gpus(m, [0, 1, 2])] == [2]
    assert p2p.outlier_gpus(np.full((3, 3), 7.0), [0, 1, 2]) == []
    assert p2p.outlier_gpus(m[:2, :2], [0, 1]) == []  # two GPUs: nobody to compare with
    m[0, 2] = 9.0
    assert [(a, b) for a, b, _, _ in p2p.asymmetric_pairs(m, [0, 1, 2])] == [(0, 2)]


# ============================================================================ heatmaps
def test_heatmaps_one_axes_per_matrix():
    import matplotlib.pyplot as plt
    r = p2p.parse(fixture("nvidia_sample_2gpu.txt"))
    fig = p2p.plot_heatmaps(r, link_peak_gbps=450.0)
    assert len(fig.axes) == 8
    texts = [t.get_text() for t in fig.axes[1].texts]  # uni_p2p_on
    assert "360\n80% pk" in texts and "300\n67% pk" in texts
    assert "link peak 450 GB/s" in fig.axes[1].get_title()
    plt.close(fig)
    old = p2p.parse(fixture("nvidia_sample_old_4gpu.txt"))
    fig = p2p.plot_heatmaps(old)
    assert len(fig.axes) == 6 and not any("% pk" in t.get_text() for ax in fig.axes for t in ax.texts)
    plt.close(fig)


def test_heatmaps_peak_matrix_and_variant_keys():
    import matplotlib.pyplot as plt
    r = p2p.parse(fixture("ours_format_demo_3gpu.txt"))
    peak = np.full((3, 3), 100.0)
    fig = p2p.plot_heatmaps(r, link_peak_gbps=peak, keys=["uni_p2p_on:sm:read", "bi_p2p_on"])
    assert len(fig.axes) == 2
    assert "SYNTHETIC" in fig._suptitle.get_text()
    assert any("% pk" in t.get_text() for t in fig.axes[0].texts)
    plt.close(fig)
    with pytest.raises(KeyError, match="no matrix"):
        p2p.plot_heatmaps(r, keys=["uni_p2p_sideways"])
    with pytest.raises(ValueError, match="expected a number or \\(3, 3\\)"):
        p2p.plot_heatmaps(r, link_peak_gbps=np.ones((2, 2)))


def test_link_peaks_from_topology_labels():
    from ddlab.system import links
    peaks = p2p.link_peaks([["X", "NV18"], ["NV18", "X"]], nvlink_generation=4)
    assert np.isnan(peaks[0, 0]) and peaks[0, 1] == links.for_label("NV18", nvlink_generation=4).bandwidth_gbs
    with pytest.raises(ValueError, match="square"):
        p2p.link_peaks([["X", "NV18"]])
    r = p2p.parse(fixture("nvidia_sample_2gpu.txt"))
    fig = p2p.plot_heatmaps(r, link_peak_gbps=peaks, keys=["uni_p2p_on"])
    assert any("% pk" in t.get_text() for t in fig.axes[0].texts)
    import matplotlib.pyplot as plt
    plt.close(fig)


# ============================================================================ run, recorded, CLI
def test_run_without_gpu_gives_clear_error(monkeypatch):
    monkeypatch.setattr(p2p, "gpu_visible", lambda: False)      # no GPU, on any machine
    with pytest.raises(p2p.P2PNoGPU, match="no NVIDIA GPU is visible.*load_recorded"):
        p2p.run(timeout=60)


def test_cli_without_gpu_prints_one_line_no_traceback(capsys, monkeypatch):
    monkeypatch.setattr(p2p, "gpu_visible", lambda: False)      # no GPU, on any machine
    assert p2p.cli(["--size", "64M"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ddlab p2p: no NVIDIA GPU") and "Traceback" not in err


def test_program_args():
    assert p2p.program_args(copy="ce", size="256M", gpus=[0, 1], link_peak_gbps=478.08) == \
        ["--copy", "ce", "--size", "256M", "--link-peak", "478.08", "--gpus", "0,1"]
    assert p2p.program_args(latency_batch=128, ce_api="uva") == ["--latency-batch", "128", "--ce-api", "uva"]


def test_cli_parses_a_file(capsys):
    assert p2p.cli(["--file", os.path.join(FIX, "nvidia_sample_2gpu.txt")]) == 0
    out = capsys.readouterr().out
    assert "Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)" in out
    assert "Reading: 2 GPUs (Example GPU-SXM 80GB)" in out


def test_cli_json(capsys):
    assert p2p.cli(["--file", os.path.join(FIX, "nvidia_sample_old_4gpu.txt"), "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["result"]["n"] == 4 and "lat_cpu_p2p_on" not in obj["result"]["matrices"]
    assert obj["summary"].startswith("4 GPUs")


def test_cli_bad_file(capsys, tmp_path):
    assert p2p.cli(["--file", str(tmp_path / "missing.txt")]) == 1
    assert "No such file" in capsys.readouterr().err
    bad = tmp_path / "bad.txt"
    bad.write_text("just some log\n")
    assert p2p.cli(["--file", str(bad)]) == 1
    assert "no p2p tables found" in capsys.readouterr().err


def test_record_and_load_recorded(tmp_path, monkeypatch):
    monkeypatch.setattr(reference, "REFERENCE_DIR", str(tmp_path))
    # Provenance would import torch and TensorFlow to report their versions: not needed here.
    monkeypatch.setattr(hardware, "inventory", lambda **kw: hardware.Inventory())
    with pytest.raises(reference.ReferenceMissing, match="p2p/nowhere"):
        p2p.load_recorded("nowhere")
    r = p2p.parse(fixture("nvidia_sample_2gpu.txt"))
    with pytest.raises(ValueError, match="format-demo"):
        p2p.record(p2p.parse(fixture("ours_format_demo_1gpu.txt")), name="demo")
    path = p2p.record(r, name="example", command="p2p_bandwidth_latency")
    assert path == str(tmp_path / "p2p" / "example.json")
    back = p2p.load_recorded("example")
    assert back.provenance["command"] == "p2p_bandwidth_latency"
    np.testing.assert_array_equal(back.matrices["uni_p2p_on"], r.matrices["uni_p2p_on"])
    assert back.text == r.text
    assert p2p.cli(["--recorded", "example"]) == 0


# ============================================================================ diagnosis
def _four_gpus():
    """4 GPUs at 24 GB/s; GPU 3 at a third of that with everyone; 0 -> 1 only 14 GB/s."""
    m = np.full((4, 4), 24.0)
    m[3, :] = m[:, 3] = 8.0
    m[0, 1] = 14.0
    np.fill_diagonal(m, 400.0)
    return m


def test_diagnose_finds_the_slow_gpu_the_asymmetric_pair_and_the_best_ring():
    d = p2p.diagnose(_four_gpus())
    assert d.outlier_labels == [3]
    assert d.asymmetric_labels == [(0, 1)]
    assert d.k == 3 and set(d.best_ring) == {0, 1, 2}
    # the ring must run 1 -> 0 (24 GB/s), never 0 -> 1 (14 GB/s): 0 -> 2 -> 1 -> 0
    assert d.best_ring == (0, 2, 1) and d.ring_bottleneck == pytest.approx(24.0)
    text = str(d)
    assert "Slow GPU: 3" in text and "Asymmetric pair: 0 -> 1 14.0 GB/s but 1 -> 0 24.0 GB/s" in text
    assert "width or generation" in text and "NUMA" in text and "ACS" in text
    # all four: the slow GPU is in every ring, so it sets the slowest hop
    assert p2p.diagnose(_four_gpus(), k=4).ring_bottleneck == pytest.approx(8.0)
    assert p2p.best_ring_subset(_four_gpus(), 2) == ((0, 2), 24.0)


def test_diagnose_of_a_healthy_matrix_and_labels():
    m = np.full((3, 3), 20.0)
    d = p2p.diagnose(m, labels=["a", "b", "c"])
    assert d.outliers == [] and d.asymmetric == [] and d.causes == []
    assert "No GPU stands out" in str(d) and "No asymmetric pair" in str(d)
    assert d.best_ring == ("a", "b", "c")


def test_diagnose_reads_a_p2p_result_and_skips_unmeasured_cells():
    m = _four_gpus()
    m[2, 0] = np.nan
    res = p2p.P2PResult(n=4, labels=[0, 1, 2, 3], variants={"uni_p2p_on": m})
    d = p2p.diagnose(res)
    assert d.outlier_labels == [3] and d.asymmetric_labels == [(0, 1)]


@pytest.mark.parametrize("bad,match", [
    (np.ones((2, 3)), "square"),
    ([[0, "x"], [1, 0]], "numbers"),
    (np.array([[0, -1.0], [1, 0]]), ">= 0"),
    (np.array([[0, np.inf], [1, 0]]), "finite"),
    (np.ones((1, 1)), "two GPUs"),
])
def test_diagnose_rejects_bad_matrices(bad, match):
    with pytest.raises(ValueError, match=match):
        p2p.diagnose(bad)


def test_helpers_check_their_arguments():
    with pytest.raises(ValueError, match="labels"):
        p2p.outlier_gpus(np.ones((3, 3)), [0, 1])
    with pytest.raises(ValueError, match="threshold"):
        p2p.asymmetric_pairs(np.ones((3, 3)), threshold=1.5)
    with pytest.raises(ValueError, match="k must be"):
        p2p.best_ring_subset(np.ones((3, 3)), 4)
    with pytest.raises(ValueError, match="too many"):
        p2p.best_ring_subset(np.ones((16, 16)), 10)


def test_nvidia_sample_missing_is_one_clear_message(monkeypatch):
    monkeypatch.setattr(p2p.shutil, "which", lambda name: None)
    assert p2p.nvidia_sample() is None
    with pytest.raises(p2p.P2PError, match="not on PATH"):
        p2p.run_nvidia_sample()


def test_nvidia_sample_output_is_parsed(monkeypatch, tmp_path):
    import os
    sample = os.path.join(os.path.dirname(__file__), "fixtures", "p2p", "nvidia_sample_2gpu.txt")
    exe = tmp_path / "p2pBandwidthLatencyTest"
    exe.write_text(f"#!/bin/sh\ncat '{sample}'\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    res = p2p.run_nvidia_sample()
    assert res.n == 2 and "uni_p2p_on" in res.matrices and res.text
    exe.write_text("#!/bin/sh\necho broken >&2\nexit 1\n")
    with pytest.raises(p2p.P2PRunError, match="failed \\(exit 1\\)"):
        p2p.run_nvidia_sample()
