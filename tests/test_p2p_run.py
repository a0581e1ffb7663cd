"""Building and running the CUDA p2p test (ddlab.measure.p2p_run): its Makefile and program (where
nvcc exists), the build and run errors, NVIDIA's sample."""
import json
import os
import shutil
import subprocess

import pytest

from _p2p_fixtures import fixture
from ddlab.measure import p2p_run
from ddlab.system import frameworks

NVCC = frameworks.nvcc_path()
NO_NVCC = "nvcc (CUDA toolkit) is not installed here, so the CUDA program cannot be compiled"


def program_copy(tmp_path):
    d = tmp_path / "p2p_bandwidth_latency"
    d.mkdir()
    for f in os.listdir(p2p_run.PROGRAM_DIR):       # the Makefile and every program it builds
        if f == "Makefile" or f.endswith(".cu"):
            shutil.copy(os.path.join(p2p_run.PROGRAM_DIR, f), d / f)
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
    with pytest.raises(p2p_run.P2PBuildError, match="deliberately broken"):
        p2p_run.build(directory=str(d), timeout=300)


def test_build_without_nvcc_raises_clear_error(tmp_path, monkeypatch):
    d = program_copy(tmp_path)
    monkeypatch.setenv("PATH", path_without_nvcc(tmp_path))
    monkeypatch.setenv("CUDA_HOME", "/nonexistent-cuda")
    with pytest.raises(p2p_run.P2PBuildError, match="nvcc .*not found"):
        p2p_run.build(directory=str(d))


# ============================================================================ run
def test_run_without_gpu_gives_clear_error(monkeypatch):
    monkeypatch.setattr(p2p_run, "gpu_visible", lambda: False)      # no GPU, on any machine
    with pytest.raises(p2p_run.P2PNoGPU, match="no NVIDIA GPU is visible.*load_recorded"):
        p2p_run.run(timeout=60)


def test_program_args():
    assert p2p_run.program_args(copy="ce", size="256M", gpus=[0, 1], link_peak_gbps=478.08) == \
        ["--copy", "ce", "--size", "256M", "--link-peak", "478.08", "--gpus", "0,1"]
    assert p2p_run.program_args(latency_batch=128, ce_api="uva") == ["--latency-batch", "128", "--ce-api", "uva"]


# ============================================================================ NVIDIA's sample
def test_nvidia_sample_missing_is_one_clear_message(monkeypatch):
    monkeypatch.setattr(p2p_run.shutil, "which", lambda name: None)
    assert p2p_run.nvidia_sample() is None
    with pytest.raises(p2p_run.P2PError, match="not on PATH"):
        p2p_run.run_nvidia_sample()


def test_nvidia_sample_output_is_parsed(monkeypatch, tmp_path):
    import os
    sample = os.path.join(os.path.dirname(__file__), "fixtures", "p2p", "nvidia_sample_2gpu.txt")
    exe = tmp_path / "p2pBandwidthLatencyTest"
    exe.write_text(f"#!/bin/sh\ncat '{sample}'\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    res = p2p_run.run_nvidia_sample()
    assert res.n == 2 and "uni_p2p_on" in res.matrices and res.text
    exe.write_text("#!/bin/sh\necho broken >&2\nexit 1\n")
    with pytest.raises(p2p_run.P2PRunError, match="failed \\(exit 1\\)"):
        p2p_run.run_nvidia_sample()
