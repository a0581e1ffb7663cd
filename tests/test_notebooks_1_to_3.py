"""Start_Here and notebooks 1-3 as a learner meets them on a machine without a GPU: their cells run
(the notebook's own code, executed here), their exercises accept the right answer and explain a wrong
one, every run they launch prints a command line that parses and names files that exist, and their
text stays within the course's length. Nothing here pins the notebooks' wording."""
import ast
import contextlib
import io
import json
import os
import shlex
import subprocess

import matplotlib
import nbformat
import pytest

matplotlib.use("Agg")

from _experiment_fakes import script_result  # noqa: E402
from ddlab.base.paths import REPO_ROOT  # noqa: E402
from ddlab.measure import launch  # noqa: E402
from ddlab.system import hardware, policy  # noqa: E402
from ddlab.training import data  # noqa: E402

NOTEBOOKS = {0: "Start_Here.ipynb", 1: "notebooks/1.Data-Parallel-Training.ipynb",
             2: "notebooks/2.Latency-and-Bandwidth.ipynb", 3: "notebooks/3.System-Topology.ipynb"}
MARKDOWN_WORDS = {0: 1000, 1: 2000, 2: 2000, 3: 2000}     # the course's limits (Start_Here, a notebook)
NO_GPU = policy.Machine(gpus=0, software=lambda framework, launcher: (True, ""))


def _cells(n):
    return nbformat.read(os.path.join(REPO_ROOT, NOTEBOOKS[n]), as_version=4).cells


def _source(n, cell_id):
    (cell,) = [c for c in _cells(n) if c.get("id") == cell_id]
    return cell.source


def run(n, cell_ids, ns):
    """Executes the notebook's code cells in ``ns`` (IPython's % lines left out), as a kernel would;
    returns what they printed and the value of the last cell's last expression."""
    out, value = io.StringIO(), None
    with contextlib.redirect_stdout(out):
        for cid in cell_ids:
            src = "\n".join(ln for ln in _source(n, cid).splitlines() if not ln.lstrip().startswith("%"))
            tree = ast.parse(src)
            last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
            exec(compile(tree, f"{NOTEBOOKS[n]}:{cid}", "exec"), ns)
            value = eval(compile(ast.Expression(last.value), cid, "eval"), ns) if last else None
    return out.getvalue(), value


@pytest.fixture
def no_gpu(monkeypatch):
    """A machine without a GPU whatever this one has: the policy and NVML's inventory say so."""
    monkeypatch.setattr(hardware, "inventory", lambda *a, **k: hardware.Inventory())
    monkeypatch.setattr(policy.Machine, "detect", classmethod(lambda cls: NO_GPU))


def command_lines(printed):
    """The lines a cell printed under "what ran:" (indented) or after "command:"."""
    lines, under = [], False
    for line in printed.splitlines():
        if line.startswith("what ran:"):
            under = True
        elif under and line.startswith("  ") and not line.strip().startswith("..."):
            lines.append(line.strip())
        else:
            under = False
        if line.startswith("command: "):
            lines.append(line[len("command: "):])
    return lines


def assert_runnable(line):
    """A command line: it parses as a shell would split it, its programme exists, and every file it
    names (a script) exists, relative to the repository root or absolute."""
    words = shlex.split(line)
    while words and "=" in words[0] and not words[0].startswith("-"):
        words.pop(0)                                    # VAR=value before the programme
    exe = words[0]
    assert os.path.exists(exe) or exe in ("python3", "python", "torchrun", "horovodrun"), line
    scripts = [w for w in words if w.endswith(".py")]
    for s in scripts:
        assert os.path.isfile(s if os.path.isabs(s) else os.path.join(REPO_ROOT, s)), f"{s} does not exist: {line}"
    return words


# ----------------------------------------------------------------------------- length
@pytest.mark.parametrize("n", sorted(NOTEBOOKS))
def test_markdown_stays_within_the_course_length(n):
    words = sum(len(c.source.split()) for c in _cells(n) if c.cell_type == "markdown")
    assert words <= MARKDOWN_WORDS[n], f"{NOTEBOOKS[n]}: {words} words of Markdown, at most {MARKDOWN_WORDS[n]}"


# ----------------------------------------------------------------------------- Start_Here
def test_start_here_says_what_each_notebook_runs_on_this_machine(no_gpu):
    from ddlab.course import sequence
    printed, _ = run(0, ["7f073c03", "start-live-here"], {})
    assert "'cpu' mode" in printed
    for n, (title, what) in sequence.NOTEBOOKS.items():
        assert f"{n}. {title}" in printed and what["cpu"] in printed


# ----------------------------------------------------------------------------- notebook 1
def test_notebook_1_simulations_run_and_the_ring_exercise_checks_an_answer(no_gpu):
    ns = {}
    run(1, ["nb1-001", "nb1-004", "nb1-006", "nb1-008", "nb1-ex-predict", "nb1-010", "nb1-012", "nb1-014"], ns)
    _, unanswered = run(1, ["nb1-ex-check"], ns)
    assert not unanswered.correct
    ring = ns["ring"]
    n, size = ring.n, ring.buffer_bytes
    ns["my_prediction"] = 2 * (n - 1) * size // n
    _, right = run(1, ["nb1-ex-check"], ns)
    assert right.correct
    ns["my_prediction"] = size                          # one buffer's worth: a slip the check names
    _, wrong = run(1, ["nb1-ex-check"], ns)
    assert not wrong.correct and wrong.message != right.message and "buffer" in wrong.message


def test_notebook_1_live_cpu_scaling_prints_the_command_of_each_launch(no_gpu, monkeypatch):
    """The training launches are stood in for at the launcher (so no data or cores are needed): the
    rest, from the notebook's call to the command lines it prints, is the course's own code."""
    launched = []

    def fake_run(argv, launcher, nproc, env, timeout, echo, python):
        launched.append(nproc)
        result = script_result(images_per_s=10.0 * nproc, workers=nproc, device="cpu", backend="gloo",
                               provenance={"command": env["DDLAB_COMMAND"]})
        with open(argv[argv.index("--json") + 1], "w") as f:
            json.dump(result, f)
        return launch.LaunchResult(command=list(argv), returncode=0, output="", duration_s=1.0)

    monkeypatch.setattr(launch, "run", fake_run)
    monkeypatch.setattr(data, "require", lambda *a, **k: None)
    ns = {}
    run(1, ["nb1-001"], ns)
    printed, _ = run(1, ["nb1-017"], ns)
    lines = command_lines(printed)
    assert sorted(launched) == [1, 1, 2, 4] and len(lines) == 4     # the plain baseline, then DDP on 1, 2, 4
    plain, *ddp = (assert_runnable(line) for line in lines)
    assert plain[0] in ("python", "python3") and plain[plain.index("--launcher") + 1] == "none"
    for words, workers in zip(ddp, (1, 2, 4)):
        assert words[0] == "torchrun" and f"--nproc-per-node={workers}" in words and "--device" in words
    for words in (plain, *ddp):
        assert any(w.endswith(os.path.join("train", "fmnist_torch.py")) for w in words)


def test_notebook_1_gpu_parts_show_recordings_with_the_commands_that_made_them(no_gpu):
    ns = {}
    run(1, ["nb1-001"], ns)
    printed, _ = run(1, ["nb1-019", "69ae4cb8", "nb1-wrapper-code"], ns)
    lines = command_lines(printed)
    assert len(lines) >= 4, printed
    for line in lines:
        if not line.startswith("ddlab."):                # the wrapper's cost is timed in one process: its call
            assert_runnable(line)
    assert "DDP's largest share of a step" in printed


# ----------------------------------------------------------------------------- notebook 2
def _notebook_2(tmp_path):
    ns = {}
    run(2, ["720ee1c2"], ns)
    ns["SCRATCH"] = str(tmp_path)
    script = _source(2, "nb2-loop-script").splitlines()
    assert script[0].startswith("%%writefile {SCRATCH}/")
    (tmp_path / script[0].split("/")[-1]).write_text("\n".join(script[1:]) + "\n")
    return ns


def _loop_rows(output):
    rows = []
    for line in output.splitlines():
        parts = line.split()
        if "algbw" in parts and "busbw" in parts:
            rows.append({"bytes": int(parts[0]), "us": float(parts[2]),
                         "algbw": float(parts[parts.index("algbw") + 1]),
                         "busbw": float(parts[parts.index("busbw") + 1])})
    return rows


def test_notebook_2_timed_all_reduce_runs_and_prints_its_command(no_gpu, tmp_path):
    ns = _notebook_2(tmp_path)
    printed, _ = run(2, ["nb2-loop-run"], ns)
    (line,) = command_lines(printed)
    words = assert_runnable(line)
    assert words[1:3] == ["-m", "torch.distributed.run"] and "--nproc-per-node=2" in words
    rows = _loop_rows(printed)
    assert [r["bytes"] for r in rows] == [int(w) for w in words if w.isdigit()]
    for r in rows:                                  # two ranks: busbw = algbw x 2(n-1)/n = algbw
        assert r["busbw"] == pytest.approx(r["algbw"], abs=1e-3)
        assert r["algbw"] == pytest.approx(r["bytes"] / (r["us"] * 1e-6) / 1e9, rel=0.05, abs=2e-3)


def test_notebook_2_loop_on_three_ranks_reports_busbw_as_four_thirds_of_algbw(tmp_path):
    _notebook_2(tmp_path)
    res = launch.run([str(tmp_path / "allreduce_loop.py"), "1048576"], launcher="torchrun", nproc=3,
                     env={"OMP_NUM_THREADS": "1"}, timeout=240)
    (row,) = _loop_rows(res.output)
    assert row["busbw"] == pytest.approx(row["algbw"] * 4 / 3, rel=0.01, abs=2e-3)


def test_notebook_2_sweep_fits_checks_the_prediction_and_prints_a_command_that_runs(no_gpu, tmp_path,
                                                                                    monkeypatch):
    from ddlab.measure import collectives_run
    real = collectives_run.sweep
    # smaller than the notebook's own sweep, yet large enough that the biggest sizes' transfer outlasts the
    # scheduling delay that sets every small size's time when the test workers share a few busy cores;
    # below that no slope can be fitted
    monkeypatch.setattr(collectives_run, "sweep", lambda **kw: real(**dict(kw, max_bytes="16M")))
    ns = _notebook_2(tmp_path)
    printed, _ = run(2, ["a75c02b7"], ns)
    line = printed.strip().splitlines()[-1].strip()        # the sweep's command, last
    run(2, ["1e009709", "nb2-ex-predict"], ns)
    words = assert_runnable(line)
    assert words[1:4] == ["-m", "ddlab", "allreduce"]
    _, unanswered = run(2, ["6da8b3ea"], ns)
    assert not unanswered.correct
    fit, mine = ns["fit"], ns["mine"]
    size = mine.row_at(1 << 20)["bytes"]
    ns["my_prediction_us"] = fit.predict(size) * 1e6
    _, right = run(2, ["6da8b3ea"], ns)
    assert right.correct
    ns["my_prediction_us"] = fit.predict(size)          # in seconds: the check names the unit
    _, wrong = run(2, ["6da8b3ea"], ns)
    assert not wrong.correct and "seconds" in wrong.message
    # the printed command runs the same sweep from a terminal (here over small sizes)
    argv = shlex.split(line)
    env = dict(os.environ, **dict(w.split("=", 1) for w in argv if "=" in w and not w.startswith("-")))
    argv = [w for w in argv if not ("=" in w and not w.startswith("-"))]
    argv[argv.index("--max-bytes") + 1] = "64"
    done = subprocess.run(argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "all_reduce" in done.stdout, done.stdout + done.stderr


# ----------------------------------------------------------------------------- notebook 3
def test_notebook_3_cells_run_on_recordings_and_the_pair_exercise_checks_an_answer(no_gpu, monkeypatch):
    from ddlab.course import checks
    from ddlab.system import topology, topology_ranking
    monkeypatch.setattr(topology.Topology, "from_system", classmethod(lambda cls, timeout=30.0: pytest.fail("read")))
    ns = {"display": print}
    printed, unanswered = run(3, ["ddce47e6", "e95c5e66", "8155f434", "62caa541", "1278e49e"], ns)
    assert not unanswered.correct
    dgx1 = ns["dgx1"]
    groups = topology_ranking.ranked_pairs(dgx1)
    best, worst = groups[0].pairs[0], groups[-1].pairs[0]
    assert checks.check_best_worst_pair(dgx1, best, worst).correct
    wrong = checks.check_best_worst_pair(dgx1, worst, best)
    assert not wrong.correct and wrong.message
    more, _ = run(3, ["66cdc2d2", "245beeae", "6b16a27b", "6470f158"], ns)
    assert ns["PAIR_LIVE"] is False and "skipped" in more


def test_notebook_3_shows_the_matrix_of_each_recorded_machine_whose_pairs_differ(no_gpu):
    from ddlab.system import topology, topology_ranking
    ns = {"display": print}
    printed, _ = run(3, ["ddce47e6", "8155f434"], ns)
    for name in topology.recorded_names():
        t = topology.recorded(name)
        assert f"=== {name}:" in printed
        shown = str(t.matrix_table()) in printed
        assert shown == (len(topology_ranking.ranked_pairs(t)) > 1), name


def test_every_launch_in_notebooks_1_to_3_prints_its_command():
    """Each code cell that launches processes (training, a timed loop, a sweep) prints what ran."""
    launches = ("throughput_scaling(", "launch.run(", "collectives_run.sweep(", 'live_or_recorded("one-gpu")',
                'live_or_recorded("wrapper-cost")', 'live_or_recorded("host-link")', 'live_or_recorded("scaling"')
    for n in (1, 2, 3):
        for c in _cells(n):
            if c.cell_type == "code" and any(k in c.source for k in launches):
                assert "what_ran(" in c.source or "shlex.join(" in c.source, f"{NOTEBOOKS[n]} cell {c.get('id')}"


# ----------------------------------------------------------------------------- what a cell prints as "what ran"
def test_what_ran_lists_each_launch_once_then_says_how_many_more():
    from types import SimpleNamespace

    from ddlab.course import mode
    runs = [{"provenance": {"command": c}} for c in ("python3 a.py --x 1", "python3 a.py --x 1", "python3 a.py --x 2",
                                                      "python3 a.py --x 3")]
    value = SimpleNamespace(runs=runs, provenance={"command": "ddlab.f()"})
    assert mode.commands(value) == ["python3 a.py --x 1", "python3 a.py --x 2", "python3 a.py --x 3"]
    text = mode.what_ran(value, most=2, env={"CUDA_VISIBLE_DEVICES": "0,3"})
    assert text.splitlines()[1:3] == ["  CUDA_VISIBLE_DEVICES=0,3 python3 a.py --x 1",
                                      "  CUDA_VISIBLE_DEVICES=0,3 python3 a.py --x 2"]
    assert "1 more" in text.splitlines()[3]
    in_process = SimpleNamespace(runs=[], provenance={"command": "ddlab.f()"})   # no launch: the call itself
    assert mode.commands(in_process) == ["ddlab.f()"]
    assert mode.what_ran(SimpleNamespace()) == "what ran: no command recorded"
