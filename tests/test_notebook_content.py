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


def test_notebook_4_states_the_nccl_facts_right():
    md, src = text(4), code(4)
    assert "`NCCL_P2P_LEVEL=PIX` does not mean \"use PCIe\"" in md
    for level, integer in (("LOC", 0), ("PIX", 1), ("PXB", 2), ("PHB", 3)):
        assert re.search(rf"\| `{level}` \|[^|\n]*\| {integer} \|", md), level
    assert "| `SYS` |" in md and "larger integers count as `SYS`" in md
    assert "attempts to select a value optimally based on the\narchitecture" in md        # unset, as NCCL's docs say
    assert "NCCL counts it like `PHB`" in md
    assert "NET/IB" in md and "NCCL_IB_DISABLE=1" in md
    # the default path as recorded: NVLS off from the environment, and what a learner's shell gives
    assert "NVLS" in md and "**Every recorded run of the course had NVLS off**" in md and "NCCL default, NVLS off" in md
    assert "collectives_run.compare_levels(" in src
    assert "NCCL_NET_DISABLE_INTRA=1" in md and "mode.live_or_recorded(\"nccl-logs\")" in src   # recorded logs, not test fixtures
    assert "tests/fixtures" not in src
    assert "NCCL levels act only between GPUs" in md
    assert 'mode.live_or_recorded("allreduce")' in src                 # each path's all-reduce bandwidth


def test_notebook_4_shows_the_levels_on_a_pcie_machine_and_says_the_recorded_pair_differs_only_at_loc():
    md, src = text(4), code(4)
    assert 'for name in ("pcie-4gpu", "dgx1-v100")' in src and "nccl.pair_levels(t)" in src
    assert "predictions.check_lowest_levels(my_levels, TOPOS)" in src
    assert "nccl.pair_levels(pair, measured=chose)" in src          # the pair's predicted path beside NCCL's report
    assert "on the recorded pair only `LOC` differs" in md and "not measured" in md
    # the socket path is loopback TCP on one host, and the log's interface is printed
    assert "`NET/Socket` inside one machine is loopback TCP" in md and "socket_interfaces" in src
    # which parts run live, per the course's policy, not "all live"
    assert "policy.decide(policy.Needs(gpus=2" in src and "all live" not in md


def test_notebook_5_runs_horovod_and_ddp_live_and_flags_superlinear_speedups():
    md, src = text(5), code(5)
    assert '"torch", "horovod", model, cpu_run=(model == "cnn")' in src
    # on two GPUs Horovod's wide model runs live and its CNN comparison is the recording
    assert "hvd_live = policy.decide(policy.Needs(gpus=2, framework=\"torch\", launcher=\"horovod\")).live" in src
    assert 'source="recorded" if model == "cnn" and hvd_live else "auto"' in src
    assert '"keras", "horovod", "cnn"' in src
    assert '"torch", "ddp", model, cpu_run=(model == "cnn")' in src
    assert "red flag" in md.lower() and 'r["speedup"] > r["workers"]' in src
    assert "launchers_side_by_side(" in src and "cuda_graph=graph" in src
    assert "res.narrow()" in src and "keras.narrow()" in src            # settings and numbers in two narrow tables


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


def test_notebook_5_is_honest_about_what_is_recorded_and_predicts_like_with_like():
    md, src = text(5), code(5)
    assert "not recorded yet" in md and "if the course has recorded one" in md
    assert 'reference.load("horovod", "h200x2")' in src            # the Horovod GPU record is shown
    assert src.count("missing_ok=True") >= 3
    # the prediction takes each run's own one-worker step, never the speed-options runs
    assert "widgets.StepCase.of_result(label, res)" in src and "perf-options" not in src
    assert 'cuda_graph=graph, source="recorded"' in src
    assert "dwarfs" not in md and 'r["share"]' in src                # the wide model's share is printed
    # the socket rows: loopback TCP, and the interface each launcher's runs used
    assert "loopback TCP" in md and "res.socket_interface()" in src and "NCCL_SOCKET_IFNAME" in md
    assert "all live" not in md and "experiments.where_it_runs(" in src     # each part says what its cell will show


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
