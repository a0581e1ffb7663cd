"""The container recipe (Dockerfile), checked without a container engine: every file it
copies or runs exists, its base image is pinned, and it keeps the course's packages."""
import re
from pathlib import Path

from ddlab.base.paths import REPO_ROOT

REPO = Path(REPO_ROOT)
DOCKERFILE = (REPO / "Dockerfile").read_text()


def _instructions():
    """(instruction, arguments) of the Dockerfile, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", "\n".join(line for line in DOCKERFILE.splitlines() if not line.lstrip().startswith("#")))
    return [(m.group(1).upper(), m.group(2).strip()) for m in re.finditer(r"^\s*(\w+)\s+(.*)$", text, re.M)]


def test_copied_files_exist():
    copies = [args.split() for ins, args in _instructions() if ins == "COPY"]
    assert copies
    for parts in copies:
        for src in parts[:-1]:
            if src != ".":
                assert (REPO / src).exists(), f"COPY {src}: no such file in the repository"


def test_scripts_it_runs_exist_and_are_copied_first():
    order = _instructions()
    copied = set()
    for ins, args in order:
        if ins == "COPY":
            parts = args.split()
            copied.update("*" if p == "." else p for p in parts[:-1])
        if ins == "RUN":
            for script in re.findall(r"bash\s+(\S+\.sh)", args):
                assert (REPO / script).is_file(), script
                assert "*" in copied or script in copied or str(Path(script).parent) in copied, \
                    f"RUN bash {script} before it is copied"


def test_base_image_is_pinned():
    m = re.search(r"^ARG BASE_IMAGE=(\S+)$", DOCKERFILE, re.M)
    assert m and re.fullmatch(r"nvcr\.io/nvidia/pytorch:\d\d\.\d\d-py3", m.group(1)), m and m.group(1)
    assert "FROM ${BASE_IMAGE}" in DOCKERFILE


def test_the_image_keeps_every_requirement_but_torch():
    pattern = re.search(r"grep -v -E '([^']+)' requirements\.txt", DOCKERFILE).group(1)
    reqs = [line for line in (REPO / "requirements.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    kept = [line for line in reqs if not re.search(pattern, line)]
    dropped = sorted(set(reqs) - set(kept))
    assert [r.split("==")[0] for r in dropped] == ["torch"], dropped
    assert any(r.startswith("nvidia-ml-py") for r in kept)


def test_build_context_leaves_out_the_host_environment():
    ignored = (REPO / ".dockerignore").read_text().split()
    assert {".venv/", ".cache/", "wheelhouse/"} <= set(ignored)


def test_readme_documents_the_container():
    readme = (REPO / "README.md").read_text()
    assert "docker build" in readme and "--ipc=host" in readme and "--shm-size" in readme
    assert "not built in CI" in readme
