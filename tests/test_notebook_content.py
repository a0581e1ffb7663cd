"""What notebooks 2-10 must teach and must not claim (each notebook is the source: it is edited as a notebook)."""
import glob
import os
import re

import nbformat
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = {n: os.path.join(REPO, "notebooks", f) for n, f in {
    2: "2.Latency-and-Bandwidth.ipynb",
    3: "3.System-Topology.ipynb",
    4: "4.NCCL-Transports-and-P2P-Level.ipynb",
    5: "5.NCCL-Paths-with-Horovod-and-DDP.ipynb",
    6: "6.P2P-Bandwidth-Latency-Test.ipynb",
    7: "7.Hands-On-DDP.ipynb",
    8: "8.Hands-On-Horovod.ipynb",
    10: "10.Case-Studies.ipynb",
}.items()}


def _cells(n, kind):
    return [c.source for c in nbformat.read(NOTEBOOKS[n], as_version=4).cells if c.cell_type == kind]


def text(n):
    return "\n".join(_cells(n, "markdown"))


def code(n):
    return "\n".join(_cells(n, "code"))


def test_the_split_notebooks_exist_and_the_old_one_is_gone():
    for path in NOTEBOOKS.values():
        assert os.path.exists(path), path
    assert not os.path.exists(os.path.join(REPO, "notebooks", "2.System-Topology.ipynb"))


@pytest.mark.parametrize("n", sorted(NOTEBOOKS))
def test_notebook_has_objectives_time_sections_summary_and_quiz(n):
    md = text(n)
    assert md.startswith(f"# {n}. ")
    assert "**Objectives.**" in md and re.search(r"\*\*Time\.\*\* About \d+ minutes\.", md)
    assert "\n## 1. " in md and "Summary" in md
    assert "Self-check quiz" in md and "Start_Here.ipynb" in md
    assert f"sequence.live_here({n}, inv)" in code(n)             # what runs live here, computed
    assert f"checks.quiz({n})" in code(n)


def _level_table_rows(md):
    """{level: legacy integer or None} from the markdown table whose rows start with a backquoted level."""
    rows = {}
    for m in re.finditer(r"^\| `(LOC|NVL|PIX|PXB|PHB|SYS)` \|[^\n]*\| ([^|\n]*) \|$", md, re.M):
        found = re.match(r"\s*(\d+)", m.group(2))
        rows[m.group(1)] = int(found.group(1)) if found else None
    return rows


def test_notebook_4_level_table_agrees_with_ddlab():
    # the table the learner reads is the one ddlab.system.nccl applies: every level, in order, its legacy integer
    rows = _level_table_rows(text(4))
    from ddlab.system import nccl
    assert list(rows) == list(nccl.P2P_LEVELS)
    legacy = {name: n for n, name in sorted(nccl.LEGACY_LEVELS.items(), reverse=True)}
    assert rows == {lvl: legacy.get(lvl) for lvl in nccl.P2P_LEVELS}


def test_notebook_4_runs_what_it_shows():
    src = code(4)
    # NCCL's logs, the level sweep, the level predictions and each path's all-reduce, live or recorded by the policy
    assert 'mode.live_or_recorded("nccl-logs")' in src and "collectives_run.compare_levels(" in src
    assert 'mode.live_or_recorded("allreduce")' in src and "tests/fixtures" not in src
    assert "nccl.pair_levels(t)" in src and "nccl.pair_levels(pair, measured=chose)" in src
    assert "predictions.check_lowest_levels(my_levels, TOPOS)" in src and "socket_interfaces" in src
    assert 'mode.decision("nccl-logs")' in src
    # the bootcamp's experiment: its command printed, the run through ddlab's launcher, the recorded NCCL lines
    assert "runs.command_line(" in src and "runs.train(" in src and "mode.recorded_nccl_logs()" in src


def test_notebook_4_bootcamp_cell_runs_a_short_cpu_job():
    # the CPU run is a few steps (nbval on a laptop): its spec's steps, taken from the cell, stay small
    cell = next(c for c in _cells(4, "code") if "runs.train(" in c)
    cpu = cell[cell.index('runs.spec_for("cpu"'):]
    steps = int(re.search(r"steps=(\d+)", cpu).group(1))
    assert steps <= 10 and "test_samples=" in cpu


def test_exercises_start_unanswered_and_are_checked():
    assert "my_prediction = None" in code(5) and "checks.check_path_ordering(my_prediction" in code(5)


def test_notebook_6_compiles_runs_and_compares():
    md, src = text(6), code(6)
    assert "make --no-print-directory -n -B" in src and "p2p_run.build(force=True)" in src
    assert "No nvcc on this machine" in src
    assert 'mode.live_or_recorded("p2p")' in src              # p2p_run.run() with 2 GPUs and nvcc, else the recording
    assert "p2p_run.run_nvidia_sample()" in src
    assert "collectives_run.compare_paths(" in src and "alpha_beta.fit_sweep(" in src
    assert "link_peak_gbps=peak" in src                    # the course's one peak, from ddlab.system.links


@pytest.mark.parametrize("n", sorted(NOTEBOOKS))
def test_no_measured_number_typed_into_the_text(n):
    md = text(n)
    # measured results are printed by code; the text may quote only cited link figures
    assert not re.search(r"\d[\d,.]*\s*(k\s*)?(images/s|img/s)", md)
    assert not re.search(r"\d[\d,.]*\s*x\s+(faster|slower|speedup)", md)
    cited = {"15.75", "16", "1.6", "16.4", "8.0", "25", "50", "600", "300", "8.16", "4.16", "4"}
    for number in re.findall(r"(\d+(?:\.\d+)?)\s*GB/s", md):
        assert number in cited, f"{number} GB/s in the text of notebook {n}: print figures from code instead"
    # claims that described one recording, or were never established
    for phrase in ("63 times", "factor of about seven", "83%", "headers, CRCs"):
        assert phrase not in md, f"notebook {n} says {phrase!r}"


def test_notebook_5_predicts_like_with_like():
    src = code(5)
    assert 'reference.load("horovod", "h200x2")' in src            # the Horovod GPU record is shown
    assert src.count("missing_ok=True") >= 3
    # the prediction takes each run's own one-worker step, never the speed-options runs
    assert "widgets.StepCase.of_result(label, res)" in src and "perf-options" not in src
    assert 'cuda_graph=graph, source="recorded"' in src
    assert 'r["share"]' in src                                      # the wide model's share is printed
    assert "res.socket_interface()" in src


def test_no_notebook_refers_to_sections_of_the_old_single_notebook():
    for n in NOTEBOOKS:
        assert not re.search(r"\bsection [5-8]\b", text(n)), n
    assert sorted(glob.glob(os.path.join(REPO, "notebooks", "*.ipynb"))) == sorted(
        p for p in glob.glob(os.path.join(REPO, "notebooks", "*.ipynb")) if re.match(r"\d+\.", os.path.basename(p)))


ALL_NOTEBOOKS = [os.path.join(REPO, "Start_Here.ipynb")] + sorted(glob.glob(os.path.join(REPO, "notebooks", "*.ipynb")))


@pytest.mark.parametrize("path", ALL_NOTEBOOKS, ids=os.path.basename)
def test_live_or_recorded_is_decided_by_the_one_policy(path):
    """No notebook decides what runs live from NVML's GPU count (``inv.gpu_count``, ``inv.mode``,
    ``hardware.inventory(...).gpu_count``): that count ignores CUDA_VISIBLE_DEVICES and a CPU-only
    PyTorch. Decisions go through ddlab.system.policy (or a function that asks it)."""
    for c in nbformat.read(path, as_version=4).cells:
        if c.cell_type != "code":
            continue
        for line in c.source.splitlines():
            decides = re.match(r"\s*(if|elif|while)\b", line) or re.search(r"\bif\b.*\belse\b", line)
            assert not (decides and re.search(r"\bgpu_count\b|\binv\.mode\b|\binv\.gpus\b", line)), \
                f"{os.path.basename(path)} decides from NVML's count: {line.strip()}"


@pytest.mark.parametrize("path", ALL_NOTEBOOKS[1:], ids=os.path.basename)
def test_each_notebook_opens_with_what_runs_here_and_asks_the_parts_not_the_policy(path):
    """The first code cell prints sequence.live_here; the live-or-recorded choice goes through
    ddlab.course.mode (live_or_recorded, decision: a part's needs are named once, there), never a
    notebook's own policy.Needs. No notebook imports the recording layer (ddlab.recording)."""
    cells = [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    assert "sequence.live_here(" in cells[0]
    for src in cells:
        assert not re.search(r"\bpolicy\.|import policy|ddlab\.system\.policy", src), src.splitlines()[0]
        assert not re.search(r"ddlab\.recording\b|from ddlab import recording", src), src.splitlines()[0]
        assert not re.search(r"(experiments|cs|convergence_sweep)\.(live_or_recorded|run_or_load)\(", src), \
            src.splitlines()[0]


def test_the_two_hands_on_notebooks_each_stand_on_their_own():
    """Notebook 7 converts to DDP and holds the repair exercise; notebook 8 the Horovod conversions, with
    its own set-up and its own run of the finished DDP script to compare with."""
    src7, md8, src8 = code(7), text(8), code(8)
    assert all(f'handson.step("ddp", {i})' in src7 for i in range(1, 8)) and "repair.start_exercise(" in src7
    assert 'handson.step("horovod"' not in src7 and 'handson.step("keras"' not in src7
    assert all(f'handson.step("{conv}", {i})' in src8 for conv in ("horovod", "keras") for i in range(1, 9))
    assert "PLAN = handson.plan()" in src8 and "ddp_runs" not in src8
    assert 'ddp_run = handson.run("ddp_7_rank0", PLAN)' in src8
    assert "](7.Hands-On-DDP.ipynb)" in md8.split("**Time.**")[1]            # the intro names where it continues
