"""The hands-on conversion: the step files and their diffs, the plan per GPU count, the
result reports and the table (fast); each version that changes what a run does, run for real
on CPU (slow)."""
import os

import pytest

from ddlab.base import worker_report
from ddlab.course import handson
from ddlab.base.tables import Table

CPU = handson.plan(gpu_count=0)
ALL_STEPS = [(key, i) for key, conv in handson.CONVERSIONS.items() for i in range(len(conv.steps))]


def _launched_steps():
    """The versions launched for real (slow): the ones whose run differs in what the test sees
    (one process; two processes on all images; sharded; gradients averaged)
    and each conversion's last version, which holds every change before it (each version is the
    one before plus its step, test_each_step_is_a_small_visible_change). A script shared by two
    conversions is launched once. Every version compiles (test_every_script_compiles)."""
    picked, seen = [], set()
    for key, conv in handson.CONVERSIONS.items():
        behaviour = {0, 1, 3, 4, len(conv.steps) - 1}
        for i in sorted(behaviour):
            if conv.steps[i].script not in seen:
                seen.add(conv.steps[i].script)
                picked.append((key, i))
    return picked


LAUNCHED_STEPS = _launched_steps()
# DDP scripts whose teardown is checked: that test's launch also checks what the version does,
# so the behaviour test leaves them out.
TEARDOWN_CHECKED = ("ddp_4_wrap", "ddp_7_rank0", "solution_ddp")


def _step_of(script: str):
    """(conversion, step number) of a launched version."""
    return next((key, i) for key, i in LAUNCHED_STEPS if handson.CONVERSIONS[key].steps[i].script == script)


def test_every_step_is_a_file_and_every_conversion_starts_on_one_device():
    for conv in handson.CONVERSIONS.values():
        assert "single_device" in conv.steps[0].script
        for s in conv.steps:
            assert os.path.isfile(handson.path(s.script)) and s.reason.strip()
    names = {n[:-3] for n in os.listdir(handson.HANDSON_DIR) if n.endswith(".py")}
    listed = {s.script for c in handson.CONVERSIONS.values() for s in c.steps}
    assert names - listed == {"broken_ddp", "solution_ddp"}      # no stray version outside a conversion


def test_every_script_compiles():
    for name in sorted(os.listdir(handson.HANDSON_DIR)):
        if name.endswith(".py"):
            compile(handson.source(name[:-3]), name, "exec")     # a SyntaxError fails the test


@pytest.mark.parametrize("key,number", [(k, i) for k, i in ALL_STEPS if i > 0])
def test_each_step_is_a_small_visible_change(key, number):
    d = handson.step(key, number)
    assert d.added > 0 and d.added + d.removed <= 24, str(d)
    assert d.reason.startswith(f"Step {number}.")
    html = d._repr_html_()
    assert "background:#e6ffec" in html and "Why:" in html


def test_the_single_device_script_stays_short_and_prints_its_result_line():
    text = handson.source("single_device")
    assert len(text.splitlines()) <= 75
    assert 'worker_report.emit("result", rank=0,' in text and "import torch.distributed" not in text


def test_steps_and_names_refuse_bad_input_with_a_message():
    with pytest.raises(ValueError, match="steps 1 to 7"):
        handson.step("ddp", 8)
    with pytest.raises(ValueError, match="choose one of"):
        handson.step("deepspeed", 1)
    with pytest.raises(ValueError, match="the scripts are"):
        handson.show("single_devise")


def test_show_highlights_the_code():
    code = handson.show("ddp_4_wrap")
    assert "DistributedDataParallel" in str(code) and "<span" in code._repr_html_()


@pytest.mark.parametrize("gpus,device,nproc,hidden", [(0, "cpu", 2, False), (1, "cpu", 2, True),
                                                        (2, "cuda", 2, False), (8, "cuda", 2, False)])
def test_the_plan_follows_the_gpu_count(gpus, device, nproc, hidden):
    p = handson.plan(gpu_count=gpus)
    assert (p.device, p.nproc, p.backend) == (device, nproc, "nccl" if device == "cuda" else "gloo")
    assert (p.env.get("CUDA_VISIBLE_DEVICES") == "") is hidden
    assert ("over NCCL" in p.describe()) is (device == "cuda")
    if device == "cpu":
        assert p.env["OMP_NUM_THREADS"] == "1" and "--train-samples" in p.args
    with pytest.raises(ValueError):
        handson.plan(gpu_count=-1)


def test_launchers_per_script():
    assert handson.launcher_for("single_device") == ("torch", "none")
    assert handson.launcher_for("ddp_3_shard") == ("torch", "ddp")
    assert handson.launcher_for("hvd_5_broadcast") == ("torch", "horovod")
    assert handson.launcher_for("keras_single_device") == ("keras", "none")
    assert handson.launcher_for("keras_hvd_2_device") == ("keras", "horovod")


def _result(rank, **kw):
    return worker_report.encode("result", rank=rank, **kw)


def test_results_are_read_through_launcher_prefixes_and_tabled():
    out = ("epoch 0: loss 1.0\n"
           "[1]<stdout>:" + _result(1, samples=2000, checksum=3.5, test_acc=0.7, img_s=100.0) + "\n"
           + _result(0, samples=2000, checksum=3.5, test_acc=0.7, img_s=120.0) + "\n"
           + worker_report.encode("smoke", rank=0, check="other kind") + "\n")
    ranks = handson.parse_results(out)
    assert [r["rank"] for r in ranks] == [0, 1] and [r["img_s"] for r in ranks] == [120.0, 100.0]
    glued = ("test accuracy 0.3" + _result(1, samples=5) + "\n"       # another rank's print without its newline
             + _result(0, samples=5) + "\n")
    assert [r["rank"] for r in handson.parse_results(glued)] == [0, 1]
    with pytest.raises(worker_report.WorkerReportError, match="line 3 "):
        handson.parse_results(out.replace('"img_s": 120.0}', '"img_s": 120.'))   # a result cut short
    run = handson.Run("ddp_7_rank0.py", "torchrun", 2, "cpu", ranks, out, 5.0)
    assert run.same_weights() and run.row()["img_s"] == 220.0 and run.row()["samples"] == "2,000 / 2,000"
    apart = handson.Run("ddp_3_shard.py", "torchrun", 2, "cpu",
                        [dict(ranks[0], checksum=1.0), dict(ranks[1], checksum=4.0)], out, 5.0)
    assert not apart.same_weights() and apart.weight_spread() == 3.0
    t = handson.table([run, apart])
    assert isinstance(t, Table) and "ddp_3_shard.py" in str(t) and "no" in str(t)


# ----------------------------------------------------------------------------- every version, for real
TINY = ("--train-samples", "512", "--test-samples", "200", "--epochs", "2")


def _expect(key, number, run):
    """What a version must do with 2 processes: before sharding each rank trains on all
    images; after, on half; once gradients are averaged (and started alike) the weights agree."""
    conv = handson.CONVERSIONS[key]
    name = conv.steps[number].script
    if number == 0:
        assert run.nproc == 1 and run.samples() == [1024]
        return
    sharded = number >= 3
    assert run.samples() == ([512, 512] if sharded else [1024, 1024]), name
    if number >= 4:
        assert run.same_weights(), f"{name}: ranks ended with different weights"
    elif number == 3:
        assert not run.same_weights(), f"{name}: separate shards without averaging should give different weights"
    assert 0.1 < run.ranks[0]["test_acc"] <= 1.0


@pytest.mark.slow
@pytest.mark.parametrize("key,number", [(key, i) for key, i in LAUNCHED_STEPS
                                        if handson.CONVERSIONS[key].steps[i].script not in TEARDOWN_CHECKED])
def test_each_behaviour_changing_version_runs_with_two_processes(key, number):
    from ddlab.training import experiments
    conv = handson.CONVERSIONS[key]
    ok, why = experiments.availability(conv.framework, conv.launcher)
    if not ok:
        pytest.skip(why)
    plan = handson.Plan(0, env=dict(CPU.env), args=TINY, timeout=300)
    run = handson.run(conv.steps[number].script, plan)
    _expect(key, number, run)


class _FakeLaunch:
    """Stands in for ddlab.measure.launch.run: records the call, answers with result reports."""

    def __init__(self):
        self.calls = []

    def __call__(self, argv, launcher, nproc, env, timeout, check, python):
        self.calls.append(dict(argv=argv, launcher=launcher, nproc=nproc, env=env, timeout=timeout))
        out = "".join(_result(r, samples=10, checksum=1.0, test_acc=0.5, img_s=1.0) + "\n" for r in range(nproc))
        from ddlab.measure.launch import LaunchResult
        return LaunchResult(command=[launcher], returncode=0, output=out, duration_s=1.0)


@pytest.mark.parametrize("gpus", [0, 1, 2, 4])
def test_run_launches_what_the_plan_says(monkeypatch, gpus):
    from ddlab.training import experiments
    from ddlab.measure import launch
    fake = _FakeLaunch()
    monkeypatch.setattr(launch, "run", fake)
    monkeypatch.setattr(experiments, "availability", lambda framework, launcher: (True, ""))
    p = handson.plan(gpu_count=gpus)
    one = handson.run("single_device", p)
    ddp = handson.run("ddp_7_rank0", p)
    hvd = handson.run("hvd_8_rank0", p)
    c1, c2, c3 = fake.calls
    assert (c1["launcher"], c1["nproc"]) == ("python", 1) and one.device == ("cuda" if gpus else "cpu")
    assert (c2["launcher"], c2["nproc"], c3["launcher"]) == ("torchrun", 2, "horovodrun")
    assert ddp.device == hvd.device == ("cuda" if gpus >= 2 else "cpu")
    assert "CUDA_VISIBLE_DEVICES" not in c1["env"]                  # one process may use the one GPU
    assert c2["env"].get("CUDA_VISIBLE_DEVICES") == ("" if gpus == 1 else None)   # two never share it
    assert all(a in c2["argv"] for a in p.args) and c2["env"]["PYTHONPATH"].startswith(handson.SOURCE_DIR)


def test_each_run_prints_its_launch_first_as_one_shell_line(monkeypatch, capsys):
    """The printed line is the launch that runs: its environment, launcher, script and flags."""
    import shlex
    import sys
    from ddlab.training import experiments
    from ddlab.measure import launch
    fake = _FakeLaunch()
    monkeypatch.setattr(launch, "run", fake)
    monkeypatch.setattr(experiments, "availability", lambda framework, launcher: (True, ""))
    for name, launcher in (("ddp_7_rank0", "torchrun"), ("hvd_8_rank0", "horovodrun")):
        run = handson.run(name, CPU)
        printed = capsys.readouterr().out.splitlines()
        call = fake.calls[-1]
        assert printed == [run.command]                                   # one line, before the run's own output
        words = shlex.split(run.command)
        assert words == [f"{k}={v}" for k, v in call["env"].items()] + launch.command_for(
            launcher, call["nproc"], call["argv"], python=sys.executable)
    handson.run("ddp_7_rank0", CPU, show_command=False)
    assert capsys.readouterr().out == ""


def test_a_failed_launch_is_one_clear_error(monkeypatch):
    from ddlab.training import experiments
    from ddlab.measure import launch

    def failing(*a, **k):
        raise launch.LaunchError("torchrun launch of 2 process(es) failed with exit code 1.\nlast output:\nboom")
    monkeypatch.setattr(launch, "run", failing)
    monkeypatch.setattr(experiments, "availability", lambda framework, launcher: (True, ""))
    with pytest.raises(handson.HandsOnError, match="(?s)ddp_7_rank0.py did not finish.*boom"):
        handson.run("ddp_7_rank0", CPU)
    monkeypatch.setattr(experiments, "availability", lambda framework, launcher: (False, "Horovod is not built"))
    with pytest.raises(handson.HandsOnError, match="cannot run here: Horovod is not built"):
        handson.run("hvd_8_rank0", CPU)


def test_the_notebook_7_and_8_quizzes_check_their_answers():
    from ddlab.course import checks, quiz_questions
    assert quiz_questions.QUIZZES[7] is quiz_questions.HANDSON_QUIZ and quiz_questions.QUIZZES[8] is quiz_questions.HOROVOD_QUIZ
    for quiz in (quiz_questions.HANDSON_QUIZ, quiz_questions.HOROVOD_QUIZ):
        assert len(quiz) >= 3
        for n, q in enumerate(quiz, 1):
            assert checks.check_quiz_answer(n, q.answer, quiz).correct
            wrong = next(i for i in range(len(q.choices)) if i != q.answer)
            assert not checks.check_quiz_answer(n, wrong, quiz).correct
            assert set(q.why_not) == set(range(len(q.choices))) - {q.answer}   # every wrong choice explained
    # notebook 7 is about DDP; the Horovod and tf.keras questions are notebook 8's
    assert not any("hvd" in q.prompt or "Horovod" in q.prompt for q in quiz_questions.HANDSON_QUIZ)


# ----------------------------------------------------------------------------- teardown
@pytest.mark.slow
def test_the_teardown_check_sees_a_group_left_open(tmp_path):
    """The control for the test below: a script that never closes its group still has Gloo's
    threads when it ends, and the check reports them. (Its only collective is a barrier: an
    all-reduce of a Python tensor could make this very script abort at exit, now and then.)"""
    from _teardown import gloo_threads, threads_left
    script = tmp_path / "left_open.py"
    script.write_text("import torch.distributed as dist\n"
                      "dist.init_process_group('gloo')\n"
                      "dist.barrier()\n")
    left = gloo_threads(threads_left(str(script)))
    assert all(any("runloop" in t for t in names) for names in left.values()), left


@pytest.mark.slow
@pytest.mark.parametrize("name", TEARDOWN_CHECKED)
def test_ddp_scripts_close_their_group_before_python_exits(name):
    """With DDP (which holds the process group) still alive, or torch.distributed.nn first
    imported after init_process_group, destroy_process_group leaves Gloo's threads running
    into Python's exit, where they aborted 2-process runs under load ('terminate called
    without an active exception'). Each script drops both, so no Gloo thread is left.
    A hands-on version must also do what the behaviour test above expects of it."""
    from _teardown import gloo_threads, launch_and_read_threads
    found, output = launch_and_read_threads(handson.path(name), *TINY)
    assert gloo_threads(found) == {0: [], 1: []}, found
    if name != "solution_ddp":
        key, number = _step_of(name)
        _expect(key, number, handson.Run(name + ".py", "torchrun", 2, "cpu", handson.parse_results(output),
                                         output, 0.0))
