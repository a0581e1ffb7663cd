"""Every notebook asks at least one prediction that code checks: an unanswered placeholder cell, then a check
call (ddlab.course.predictions or ddlab.course.checks) that reads it. Notebooks are found by title."""
import glob
import json
import os
import re

import pytest

from ddlab.base.paths import REPO_ROOT

# title -> (the placeholder assignment, the check that reads it)
EXERCISES = {
    "Data-Parallel-Training": ("my_prediction = None", "predictions.check_ring_bytes(my_prediction, ring)"),
    "Latency-and-Bandwidth": ("my_prediction_us = None", "predictions.check_allreduce_time(my_prediction_us"),
    "System-Topology": ("my_best = None", "checks.check_best_worst_pair(dgx1, my_best, my_worst)"),
    "NCCL-Transports-and-P2P-Level": ('"pcie-4gpu GPU0-GPU1": None', "predictions.check_lowest_levels(my_levels, TOPOS)"),
    "NCCL-Paths-with-Horovod-and-DDP": ("my_prediction = None", "checks.check_path_ordering(my_prediction"),
    "P2P-Bandwidth-Latency-Test": ("my_ratio = None", "predictions.check_p2p_speedup(my_ratio, p2p_result"),
    "Hands-On-DDP": ('"ddp_3_shard": (None, None)', "predictions.check_ddp_runs(my_prediction, single, ddp_runs)"),
    "Hands-On-Horovod": ('"horovod vs ddp": None',
                         "predictions.check_finished_scripts(my_prediction, ddp_run, hvd_run, keras_run)"),
    "Convergence-at-Scale": ("my_prediction = None", "predictions.check_batch_rule(my_prediction, live, BATCH_POINTS)"),
    "Case-Studies": ("my_outlier = None", "checks.check_p2p_diagnosis(matrix, my_outlier, my_pair)"),
}


def _code_cells(title):
    found = glob.glob(os.path.join(REPO_ROOT, "notebooks", f"*{title}*.ipynb"))
    assert len(found) == 1, (title, found)
    with open(found[0], encoding="utf-8") as f:
        nb = json.load(f)
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


@pytest.mark.parametrize("title", sorted(EXERCISES))
def test_the_prediction_comes_before_its_check(title):
    placeholder, check = EXERCISES[title]
    cells = _code_cells(title)
    asked = [i for i, c in enumerate(cells) if placeholder in c]
    checked = [i for i, c in enumerate(cells) if check in c]
    assert asked and checked, title
    assert asked[0] <= checked[0], f"{title}: the check comes before the prediction"
    # no answer typed into the check cell: it reads the learner's variable
    assert not re.search(r"check_\w+\(\s*[\d'\"]", cells[checked[0]])


def test_every_notebook_has_a_checked_prediction():
    notebooks = sorted(os.path.basename(p) for p in glob.glob(os.path.join(REPO_ROOT, "notebooks", "*.ipynb")))
    missing = [nb for nb in notebooks if not any(title in nb for title in EXERCISES)]
    assert not missing, f"no checked prediction listed for {missing}"
