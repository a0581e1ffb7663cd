"""Repository hygiene that the course's promises depend on."""
import glob
import json
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def notebooks():
    return [os.path.join(ROOT, "Start_Here.ipynb")] + sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))


def test_notebooks_are_committed_without_outputs():
    for nb in notebooks():
        cells = json.load(open(nb))["cells"]
        dirty = [i for i, c in enumerate(cells) if c["cell_type"] == "code" and (c.get("outputs") or c.get("execution_count"))]
        assert not dirty, f"{nb}: code cells {dirty} carry outputs; strip them before committing"


def test_notebooks_use_the_course_kernel():
    for nb in notebooks():
        assert json.load(open(nb))["metadata"]["kernelspec"]["name"] == "ddlab", nb


def test_start_here_links_to_every_notebook():
    start = open(os.path.join(ROOT, "Start_Here.ipynb")).read()
    for nb in notebooks()[1:]:
        assert "notebooks/" + os.path.basename(nb) in start, nb


def test_ci_runs_the_readme_test_command():
    readme = open(os.path.join(ROOT, "README.md")).read()
    first_block = re.search(r"```\n(.*?)```", readme, re.S).group(1)
    assert re.search(r"^make lab\b", first_block, re.M) and re.search(r"^make test\b", first_block, re.M)
    ci = open(os.path.join(ROOT, ".ci", "run")).read()
    assert re.search(r"^make test$", ci, re.M)


def test_lab_binds_to_loopback_with_a_token():
    mk = open(os.path.join(ROOT, "Makefile")).read()
    assert "LAB_IP ?= 127.0.0.1" in mk
    assert "token=''" not in mk and "NotebookApp.token" not in mk and "ServerApp.token" not in mk


def test_recorded_results_carry_provenance():
    for p in glob.glob(os.path.join(ROOT, "source_code", "reference", "**", "*.json"), recursive=True):
        obj = json.load(open(p))
        prov = obj.get("provenance")
        assert isinstance(prov, dict), p
        if not prov.get("cited") and not prov.get("illustrative"):
            for key in ("machine", "gpu_model", "gpu_count", "driver", "command", "date"):
                assert key in prov, (p, key)
