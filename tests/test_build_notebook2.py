"""Notebook 2 is written by tools/build_notebook2.py: the committed .ipynb must match it."""
import importlib.util
import os

import nbformat

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK = os.path.join(REPO, "notebooks", "2.System-Topology.ipynb")


def _builder():
    spec = importlib.util.spec_from_file_location("build_notebook2", os.path.join(REPO, "tools", "build_notebook2.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_committed_notebook_matches_its_builder_and_has_no_outputs():
    built = _builder().build()
    committed = nbformat.read(NOTEBOOK, as_version=4)
    assert [c.source for c in committed.cells] == [c.source for c in built.cells], \
        "run `python tools/build_notebook2.py` and commit the notebook"
    assert committed.metadata["kernelspec"]["name"] == "ddlab"
    for c in committed.cells:
        if c.cell_type == "code":
            assert c.outputs == [] and c.execution_count is None, "commit the notebook without outputs"


def test_notebook_has_objectives_sections_summary_and_quiz():
    text = "\n".join(c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.cell_type == "markdown")
    assert "**Objectives.**" in text and "**Time.**" in text
    for n in range(1, 9):
        assert f"\n## {n}. " in "\n" + text, f"section {n} missing"
    assert "Self-check quiz" in text and "Start_Here.ipynb" in text
    # the corrected facts older material got wrong
    assert "16 GB/s" in text and "not 1.6 GB/s" in text
    assert "`NCCL_P2P_LEVEL=PIX` does not mean \"use PCIe\"" in text
