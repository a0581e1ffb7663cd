"""ddlab.system.software: torch, CUDA and NCCL versions read from files, Horovod's build."""
import json
import os

import pytest

from ddlab.system import frameworks, software


def test_parse_check_build():
    text = """Horovod v0.28.1:

Available Frameworks:
    [X] TensorFlow
    [X] PyTorch
    [ ] MXNet

Available Controllers:
    [ ] MPI
    [X] Gloo

Available Tensor Operations:
    [X] NCCL
    [ ] DDL
    [ ] CCL
    [ ] MPI
    [X] Gloo
"""
    assert software.parse_check_build(text) == {
        "frameworks": ["TensorFlow", "PyTorch"], "controllers": ["Gloo"], "tensor_operations": ["NCCL", "Gloo"]}


def test_torch_facts_from_files_match_torch():
    import subprocess
    import sys
    notes = []
    facts = software.torch_facts(notes)
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__, torch.version.cuda)"],
                         capture_output=True, text=True, timeout=300)
    version, cuda = out.stdout.split()
    assert facts["torch"] == version and str(facts["cuda_runtime"]) == cuda and not notes


def test_torch_cuda_version_is_read_from_version_py(tmp_path, monkeypatch):
    (tmp_path / "version.py").write_text("from typing import Optional\n__version__ = '2.11.0+cu130'\n"
                                         "cuda: Optional[str] = '13.0'\nhip: Optional[str] = None\n")
    monkeypatch.setattr(software, "_torch_dir", lambda: str(tmp_path))
    assert software.torch_cuda_from_file() == "13.0"
    (tmp_path / "version.py").write_text("__version__ = '2.13.0+cpu'\ncuda: Optional[str] = None\n")
    assert software.torch_cuda_from_file() is None


@pytest.mark.parametrize("code,version", [(22809, "2.28.9"), (21803, "2.18.3"), (2708, "2.7.8")])
def test_nccl_version_code(code, version):
    assert software.nccl_version_from_code(code) == version


def test_nccl_library_version_of_a_missing_or_foreign_library(tmp_path):
    assert software.nccl_library_version(str(tmp_path / "libnccl.so.2")) is None
    import ctypes.util
    libm = ctypes.util.find_library("m")
    assert libm and software.nccl_library_version(libm) is None   # loads, but has no ncclGetVersion


def _horovod_package(root, libraries: dict, inits: dict = None, version: str = ""):
    """A horovod package under ``root``: {module: bytes of its compiled library}, and for the modules
    in ``inits`` {module: source of its __init__}; ``version`` its __version__."""
    pkg = root / "horovod"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(f"__version__ = {version!r}\n" if version else "")
    for module, body in libraries.items():
        (pkg / module).mkdir()
        (pkg / module / "mpi_lib.cpython-311-x86_64-linux-gnu.so").write_bytes(body)
        if module in (inits or {}):
            (pkg / module / "__init__.py").write_text(inits[module])
    return root


def _fake_horovod(tmp_path, monkeypatch, libs):
    _horovod_package(tmp_path, libs)
    monkeypatch.syspath_prepend(str(tmp_path))
    import sys
    for m in [m for m in sys.modules if m == "horovod" or m.startswith("horovod.")]:
        monkeypatch.delitem(sys.modules, m)


def test_horovod_build_from_files_reads_frameworks_and_rtti_names(tmp_path, monkeypatch):
    body = b"\0junk N7horovod6common14GlooControllerE\0N7horovod6common13GlooAllreduceE\0" \
           b"N7horovod6common13NCCLAllreduceE\0N7horovod6common25NCCLHierarchicalAllreduceE\0"
    _fake_horovod(tmp_path, monkeypatch, {"torch": body, "tensorflow": body})
    assert software.horovod_build_from_files([]) == {
        "frameworks": ["TensorFlow", "PyTorch"], "controllers": ["Gloo"], "tensor_operations": ["NCCL", "Gloo"]}


def test_horovod_build_from_files_without_horovod(tmp_path, monkeypatch):
    _fake_horovod(tmp_path, monkeypatch, {})
    assert software.horovod_build_from_files([]) == {} and software.horovod_extensions() == {}


@pytest.mark.slow
def test_horovod_build_from_files_matches_check_build():
    # The files say what `horovodrun --check-build` says (which imports every framework: seconds).
    notes = []
    checked = software.horovod_build(notes, timeout=900)
    assert checked, f"horovodrun --check-build gave nothing: {notes}"
    assert software.horovod_build_from_files([]) == checked


def test_a_console_script_beside_the_interpreter_wins_over_one_on_path(tmp_path, monkeypatch):
    """A horovodrun on PATH may be another Python's (a base install whose script names an interpreter
    that is gone); the one beside this interpreter is the one its packages installed."""
    env_bin, other_bin = tmp_path / "venv" / "bin", tmp_path / "base" / "bin"
    for folder in (env_bin, other_bin):
        folder.mkdir(parents=True)
        (folder / "horovodrun").write_text("#!/bin/sh\n")
        (folder / "horovodrun").chmod(0o755)
    monkeypatch.setenv("PATH", str(other_bin))
    python = str(env_bin / "python")
    assert software.executable("horovodrun", python) == str(env_bin / "horovodrun")
    (env_bin / "horovodrun").unlink()                      # none beside it: PATH's, then the bare name
    assert software.executable("horovodrun", python) == str(other_bin / "horovodrun")
    assert software.executable("no-such-script", python) == "no-such-script"


def test_horovod_build_runs_the_horovodrun_beside_the_interpreter(tmp_path, monkeypatch):
    env_bin, other_bin = tmp_path / "venv" / "bin", tmp_path / "base" / "bin"
    for folder, text in ((env_bin, "available frameworks:\n    [X] PyTorch\n"), (other_bin, "")):
        folder.mkdir(parents=True)
        (folder / "horovodrun").write_text(f"#!/bin/sh\nprintf '{text}'\n" if text else "#!/nonexistent/python\n")
        (folder / "horovodrun").chmod(0o755)
    monkeypatch.setenv("PATH", str(other_bin))
    monkeypatch.setattr(software.sys, "executable", str(env_bin / "python"))
    monkeypatch.setattr(software, "package_version", lambda name: "0.28.1")
    notes = []
    assert software.horovod_build(notes)["frameworks"] == ["PyTorch"] and notes == []


def _bindings(root, inits: dict):
    """A horovod package under ``root`` whose bindings ({module: source of its __init__}) each have a library."""
    return _horovod_package(root, dict.fromkeys(inits, b""), inits, version="9.9.9")


def _check_horovod(path):
    import subprocess
    import sys
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools", "check_horovod.py")
    return subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTHONPATH=str(path)))


BUILT = "".join(f"def {k}_built():\n    return {v}\n" for k, v in
                dict(gloo=True, mpi=False, nccl=2, ddl=False, ccl=False).items())


def test_check_horovod_loads_each_built_binding_and_says_what_it_has(tmp_path):
    out = _check_horovod(_bindings(tmp_path, {"torch": BUILT}))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "v9.9.9" in lines[0]
    assert lines[1:] == ["    [X] PyTorch: controllers Gloo; tensor operations NCCL, Gloo",
                         "    [ ] TensorFlow: not built"]


def test_check_horovod_fails_when_a_built_binding_does_not_load(tmp_path):
    out = _check_horovod(_bindings(tmp_path, {"torch": BUILT,
                                            "tensorflow": "raise ImportError('undefined symbol: _ZN10tensorflow')\n"}))
    assert out.returncode == 1
    assert "[X] PyTorch" in out.stdout and "TensorFlow: built, but does not load" in out.stderr
    assert "undefined symbol" in out.stderr
    empty = tmp_path / "none"
    empty.mkdir()
    out = _check_horovod(_bindings(empty, {}))
    assert out.returncode == 1 and "no binding was built" in out.stderr


def test_horovodrun_learns_that_gloo_was_built_without_loading_a_framework():
    """The patched build writes gloo_built and mpi_built to horovod/metadata.json; horovodrun's
    checks before a launch read them there instead of importing a framework's binding in a
    new process (seconds before every launch)."""
    ok, why = frameworks.availability("torch", "horovod")
    if not ok:
        pytest.skip(why)
    import subprocess
    import sys
    code = ("import json, os, sys\n"
            "import horovod\n"
            "from horovod.common import util\n"
            "def refuse(*args):\n"
            "    raise AssertionError('a binding was loaded in a new process to answer')\n"
            "util._check_extension_lambda = refuse\n"
            "meta = json.load(open(os.path.join(os.path.dirname(horovod.__file__), 'metadata.json')))\n"
            "print(json.dumps([meta['gloo_built'], meta['mpi_built'], util.gloo_built(), util.mpi_built(),\n"
            "                  'torch' in sys.modules or 'tensorflow' in sys.modules]))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [True, False, True, False, False]
