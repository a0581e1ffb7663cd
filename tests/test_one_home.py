"""One home per concept: the NCCL paths live in ddlab/system/nccl.py and nowhere else.

Every file under source_code/, tools/ and notebooks/ (the code cells of notebooks; Markdown
prose may name variables freely) is searched for a second table of NCCL paths: a path name
mapped to NCCL variables, reasons, aliases or colours, the six NCCL_P2P_LEVEL names spelled
out, a link kind mapped to a level, a shell branch per path, or a module quietly setting a path or
multicast variable (``setdefault``). Each pattern matched one of the twins this module replaced.
"""
import json
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOME = os.path.join("source_code", "ddlab", "system", "nccl.py")
SCANNED = ("source_code", "tools", "notebooks")
SUFFIXES = (".py", ".sh", ".ipynb", "Makefile")

_Q = r"[\"']"
_PATH = r"(?:default|shm|socket|p2p-off)"
PATTERNS = {
    # {"shm": {"NCCL_P2P_LEVEL": "LOC"}, ...}: a path's environment spelled out
    "path -> environment dict": re.compile(_Q + _PATH + _Q + r"\s*:\s*(?:dict\(|\{)[^}]*NCCL_"),
    # {"shm": ("shm (NCCL_P2P_LEVEL=LOC ...): ..."}: a path's reason naming its variables
    "path -> reason": re.compile(_Q + _PATH + _Q + r"\s*:\s*\(?\s*" + _Q + r"[^\"']*NCCL_"),
    # {"tcp": "socket", "p2p off": "shm"}: an alias table
    "alias -> path": re.compile(_Q + r"[\w /-]+" + _Q + r"\s*:\s*" + _Q + r"(?:shm|socket)" + _Q),
    # {"shm": "#e9c46a"}: a path's colour
    "path -> colour": re.compile(_Q + _PATH + _Q + r"\s*:\s*" + _Q + r"#[0-9a-fA-F]{6}"),
    # ("LOC", "NVL", "PIX", ...): the level scale
    "level names": re.compile(_Q + r"LOC" + _Q + r"\s*,\s*" + _Q + r"NVL" + _Q + r"\s*,\s*" + _Q + r"PIX" + _Q),
    # {"NODE": "PHB"} or "nccl_p2p_level": "PHB": a link kind's NCCL distance
    "kind -> level": re.compile(_Q + r"(?:NODE" + _Q + r"\s*:\s*" + _Q + r"PHB|nccl_p2p_level" + _Q
                                + r"\s*:\s*" + _Q + r"[A-Z]{3})"),
    # ("NCCL_P2P_LEVEL", "NCCL_P2P_DISABLE", ...): the variables the paths control
    "path variables": re.compile(_Q + r"NCCL_P2P_LEVEL" + _Q + r"\s*,\s*" + _Q + r"NCCL_(?:P2P|SHM)_DISABLE" + _Q),
    # environ.setdefault("NCCL_NVLS_ENABLE", "0") and friends: a path or multicast setting made
    # behind the caller's back (other NCCL settings a worker needs for itself are not paths)
    "setdefault of a path variable": re.compile(r"setdefault\(\s*" + _Q + r"(?:NCCL_NVLS_ENABLE|NCCL_P2P_|"
                                                r"NCCL_SHM_DISABLE|NCCL_IB_DISABLE|NCCL_NET_DISABLE_INTRA|"
                                                r"TORCH_SYMM_MEM_DISABLE_MULTICAST)"),
    # shell: `case $path in shm) e="NCCL_P2P_LEVEL=LOC";;` or `[ $path = shm ] && e="NCCL_..."`
    "shell branch per path": re.compile(r"\b(?:shm|socket)\s*(?:\)|\])\s*(?:&&\s*)?\w+=[\"']?NCCL_"),
}


def _files():
    for top in SCANNED:
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, top)):
            dirnames[:] = [d for d in dirnames if not d.startswith(".") and d not in ("__pycache__", "reference")]
            for name in filenames:
                if name.endswith(SUFFIXES):
                    yield os.path.relpath(os.path.join(dirpath, name), ROOT)


def _code(rel: str) -> str:
    path = os.path.join(ROOT, rel)
    if rel.endswith(".ipynb"):
        with open(path) as f:
            nb = json.load(f)
        return "\n".join("".join(c.get("source", "")) for c in nb.get("cells", []) if c.get("cell_type") == "code")
    with open(path, errors="replace") as f:
        return f.read()


def find_twins(text: str) -> list:
    """(pattern name, matched text) for every second table of NCCL paths in ``text``."""
    return [(name, m.group(0)) for name, rx in PATTERNS.items() for m in rx.finditer(text)]


# What the tables this module replaced looked like: each must be caught.
TWINS = [
    '"shm": {"NCCL_P2P_LEVEL": "LOC"},',
    '"env": {"default": {}, "shm": {"NCCL_P2P_LEVEL": "LOC"}}[path],',
    '"socket": {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_IB_DISABLE": "1"},',
    '"shm": ("shm (NCCL_P2P_LEVEL=LOC or NCCL_P2P_DISABLE=1): no peer access"',
    '"shm": "shm", "shared memory": "shm", "p2p off": "shm", "host": "shm",',
    '_PATH_COLOURS = {"1 worker": "#8c8c8c", "default": "#2a9d8f", "shm": "#e9c46a"}',
    'NCCL_P2P_LEVELS = ("LOC", "NVL", "PIX", "PXB", "PHB", "SYS")',
    '_KIND_DISTANCE = {"NVLINK": "NVL", "PIX": "PIX", "NODE": "PHB", "SYS": "SYS"}',
    '        "nccl_p2p_level": "PHB",',
    'PATH_VARIABLES = ("NCCL_P2P_LEVEL", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE")',
    '_os.environ.setdefault("NCCL_NVLS_ENABLE", "0")',
    '    full.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")',
    'case $path in default) e="";; shm) e="NCCL_P2P_LEVEL=LOC";; socket) e="NCCL_P2P_DISABLE=1";; esac',
    '  e=""; [ $path = shm ] && e="NCCL_P2P_LEVEL=LOC"',
]
# Prose and calls that name paths or variables without being a table.
NOT_TWINS = [
    'env = nccl.get("shm").environment({"NCCL_DEBUG": "INFO"})',
    '"Two GPUs are joined by NVLink. You set NCCL_P2P_LEVEL=PIX. What does NCCL use between them?"',
    '"NCCL_P2P_DISABLE=1, NCCL_SHM_DISABLE=1 and NCCL_IB_DISABLE=1"), 2,',
    'argv = ["--paths", "default,shm", "--max-bytes", "64K"]',
    'rows.append(dict(path="1 worker", env={}, env_text=base_text))',
    'export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1',
    'env.setdefault("NCCL_ASYNC_ERROR_HANDLING", "0")',
]


@pytest.mark.parametrize("text", TWINS)
def test_the_patterns_catch_each_replaced_twin(text):
    assert find_twins(text), text


@pytest.mark.parametrize("text", NOT_TWINS)
def test_the_patterns_leave_prose_and_calls_alone(text):
    assert not find_twins(text), find_twins(text)


def test_markdown_cells_are_not_searched(tmp_path, monkeypatch):
    nb = {"cells": [{"cell_type": "markdown", "source": ['| `shm` | {"shm": {"NCCL_P2P_LEVEL": "LOC"}} |']},
                    {"cell_type": "code", "source": ["print(1)"]}], "metadata": {}, "nbformat": 4,
          "nbformat_minor": 5}
    (tmp_path / "x.ipynb").write_text(json.dumps(nb))
    monkeypatch.setattr(__import__(__name__), "ROOT", str(tmp_path))
    assert not find_twins(_code("x.ipynb"))


def test_no_second_table_of_nccl_paths_outside_ddlab_nccl():
    found = [f"{rel}: {name}: {text.strip()}" for rel in _files() if rel != HOME
             for name, text in find_twins(_code(rel))]
    assert not found, ("a second table of NCCL paths; ask ddlab.system.nccl instead (nccl.PATHS, nccl.get(name)"
                       ".environment(), .why, .colour, nccl.P2P_LEVELS, nccl.KIND_LEVEL):\n  " + "\n  ".join(found))


def test_the_home_itself_is_found_by_the_patterns():
    # guards against patterns that match nothing at all
    assert find_twins(_code(HOME))
