"""ddlab.training.runs: one training run from a RunSpec (launch, timeout, the CUDA-graph rerun) and `ddlab train`."""
import json

import pytest

from _experiment_fakes import STUCK_IN_CAPTURE, FakeLaunches
from ddlab import cli
from ddlab.system import frameworks
from ddlab.training import experiments, runs
from ddlab.training.runspec import RunSpec


def test_train_rejects_bad_requests():
    with pytest.raises(ValueError, match="launcher 'none' runs one process"):
        runs.train(RunSpec(launcher="none", workers=2))
    with pytest.raises(ValueError, match="unknown model"):
        runs.train(RunSpec(launcher="ddp", workers=2, model="resnet"))
    with pytest.raises(ValueError, match="unknown launcher"):
        runs.train(RunSpec(framework="keras", launcher="ddp", workers=2))
    with pytest.raises(ValueError, match="unknown NCCL path"):
        experiments.nccl_path_comparison(paths=["nvlnk"])
    with pytest.raises(TypeError, match="takes a RunSpec"):
        runs.train("torch")


def test_the_workers_get_the_spec_path_environment(monkeypatch):
    fake = FakeLaunches({"images_per_s": 5.0}, {"images_per_s": 5.0})
    monkeypatch.setattr(runs.launch, "run", fake)
    runs.train(RunSpec.for_device("cuda", "cnn", launcher="ddp", workers=2, path="shm"), env={"NCCL_DEBUG": "INFO"})
    env = fake.envs[0]
    assert env["NCCL_P2P_LEVEL"] == "LOC" and env["NCCL_DEBUG"] == "INFO" and env["NCCL_P2P_DISABLE"] is None
    # the run records the one line a shell can run: the path's variables, torchrun, the script and its flags
    assert env["DDLAB_COMMAND"].startswith("NCCL_P2P_LEVEL=LOC ") or " NCCL_P2P_LEVEL=LOC " in env["DDLAB_COMMAND"]
    assert " torchrun --standalone --nproc-per-node=2 source_code/train/fmnist_torch.py " in env["DDLAB_COMMAND"]
    assert "NCCL_DEBUG=INFO" in env["DDLAB_COMMAND"] and "--batch-size 512" in env["DDLAB_COMMAND"]
    runs.train(RunSpec.for_device("cuda", "cnn", launcher="ddp", workers=2))       # default: NCCL's own
    assert all(fake.envs[1][k] is None for k in ("NCCL_P2P_LEVEL", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE"))


def test_a_run_stuck_in_its_default_capture_is_rerun_once_without_it_and_says_so(monkeypatch):
    fake = FakeLaunches("timeout\n" + STUCK_IN_CAPTURE, {"images_per_s": 5.0, "notes": [], "phase_s": {"imports": 1.0}})
    monkeypatch.setattr(runs.launch, "run", fake)
    lines = []
    r = runs.train(RunSpec.for_device("cuda", "cnn"), progress=lines.append)
    assert len(fake.argvs) == 2 and "--cuda-graph" not in fake.argvs[0]
    assert fake.argvs[1][fake.argvs[1].index("--cuda-graph") + 1] == "off"
    assert "rerun with --cuda-graph off" in r["notes"][-1] and "timed out" in r["notes"][-1]
    assert "in main" in r["cuda_graph_failure_log"]   # where it hung travels with the result
    assert any("running it once more with --cuda-graph off" in ln for ln in lines)   # said at once
    assert "done in 1.5 s" in lines[-1] and "imports 1.0" in lines[-1]


@pytest.mark.parametrize("launcher,extra,output", [
    ("none", {}, "timeout\nphase data to device: 1.0 s\n"),   # died before any capture: no rerun
    ("none", {"cuda_graph": "on"}, "timeout\n" + STUCK_IN_CAPTURE),   # asked for explicitly
    ("ddp", {"cuda_graph": "on"}, "timeout\n" + STUCK_IN_CAPTURE),    # DDP capture is never rerun
])
def test_other_failures_are_not_rerun(monkeypatch, launcher, extra, output):
    fake = FakeLaunches(output)
    monkeypatch.setattr(runs.launch, "run", fake)
    with pytest.raises(runs.launch.LaunchTimeout):
        runs.train(RunSpec.for_device("cuda", "cnn", launcher=launcher, workers=2 if launcher == "ddp" else 1,
                                      **extra))
    assert len(fake.argvs) == 1


@pytest.mark.slow
def test_cli_train_json(capsys):
    rc = cli.main(["train", "--launcher", "none", "--model", "mlp-small", "--batch-size", "16", "--steps", "4",
                   "--warmup-steps", "1", "--device", "cpu", "--test-samples", "200", "--json", "--lr", "0.002"])
    assert rc == 0
    r = json.loads(capsys.readouterr().out)
    assert r["launcher"] == "none" and r["timed_steps"] == 3 and r["lr"] == 0.002 and r["test_samples"] == 200


def test_cli_train_failure_is_one_message(capsys):
    assert cli.main(["train", "--launcher", "none", "--workers", "2"]) == 1
    assert "launcher 'none' runs one process" in capsys.readouterr().err
    assert cli.main(["train", "--steps", "3", "--warmup-steps", "3", "--device", "cpu"]) == 1
    assert "must be fewer than steps" in capsys.readouterr().err


@pytest.mark.gpu
def test_gpu_graph_run_single():
    """On a GPU machine: one process captures its step by default (run with `pytest -m gpu`). CPU
    twins: the decision (test_cuda_graph_torch.py::test_auto_captures_one_process_on_a_gpu_only), the
    capture's logic (::test_captured_step_warm_up_capture_replay_release_on_cpu) and the rerun
    without it (test_a_run_stuck_in_its_default_capture_is_rerun_once_without_it_and_says_so)."""
    if frameworks.gpu_count("torch") < 1:
        pytest.skip("no GPU")
    r = runs.train(RunSpec.for_device("cuda", "cnn", steps=60, warmup_steps=10, timeout=90), graph_fallback=False)
    assert r["cuda_graph"] is True and r["ranks_agree"] and r["test_accuracy"] > 0.5


@pytest.mark.gpu
def test_gpu_ddp_is_eager_by_default_and_captures_when_asked():
    """On 2 GPUs: DDP runs eagerly unless cuda_graph="on"; the opt-in capture must finish well
    within its timeout, shutdown included (NCCL's destroy hangs while a graph that captured its
    all-reduce is alive, PyTorch issue 115388), or the LaunchTimeout message shows where each
    rank was stuck. CPU twins: test_cuda_graph_torch.py::test_ddp_capture_is_opt_in_and_horovod_cannot_be_captured
    and test_other_failures_are_not_rerun (a DDP capture is never rerun)."""
    if frameworks.gpu_count("torch") < 2:
        pytest.skip("needs 2 GPUs")
    spec = RunSpec.for_device("cuda", "cnn", launcher="ddp", workers=2, steps=60, warmup_steps=25, timeout=90)
    r = runs.train(spec)
    assert r["cuda_graph"] is False and "opt-in" in r["cuda_graph_reason"] and r["ranks_agree"] is True
    r = runs.train(spec.with_(cuda_graph="on"))
    assert r["cuda_graph"] is True and r["ranks_agree"] is True


# ----------------------------------------------------------------------------- failed runs' rows
RANK_LINE = ("rank 1 on host gpu-node-7.cluster.example.org died first: killed by SIGKILL (signal 9; the kernel's "
             "out-of-memory killer, or a job scheduler)")


def _launch_error(n_output_lines=100, timeout=False):
    out = "\n".join(f"output line {i}" for i in range(n_output_lines))
    res = runs.launch.LaunchResult(command=["torchrun"], returncode=None if timeout else 1, output=out,
                                   duration_s=3.0, timed_out=timeout)
    msg = (f"{RANK_LINE}\nrank 0 on host gpu-node-7.cluster.example.org: stopped (its peer went away)\n"
           f"torchrun launch of 2 process(es) failed with exit code 1.\ncommand: torchrun x.py\nlast output:\n"
           + res.tail(n_output_lines))
    return (runs.launch.LaunchTimeout if timeout else runs.launch.LaunchError)(msg, res, failure=object())


def test_a_failure_row_keeps_the_rank_line_whole_and_a_bounded_detail():
    row = runs.failure_row(_launch_error(100), path="shm", workers=2)
    assert row["error"] == RANK_LINE and len(RANK_LINE) > 120          # not cut: rank, host and signal
    detail = row["error_detail"].splitlines()
    assert len(detail) == runs.ERROR_DETAIL_LINES
    assert detail[:5] == ["rank 0 on host gpu-node-7.cluster.example.org: stopped (its peer went away)",
                          "torchrun launch of 2 process(es) failed with exit code 1.", "command: torchrun x.py",
                          "last output:", "... (65 lines left out)"]        # the summary, then the end of the output
    assert detail[-1] == "output line 99" and detail[5] == "output line 65"
    assert (row["path"], row["workers"]) == ("shm", 2) and "hang_traceback" not in row
    short = runs.failure_row(_launch_error(3))
    assert short["error_detail"].splitlines()[-3:] == ["output line 0", "output line 1", "output line 2"]
    assert runs.failure_row(_launch_error(3, timeout=True))["hang_traceback"] == ""
    assert runs.failure_row(RuntimeError("")) == {"error": "RuntimeError"}
    assert runs.failure_row(RuntimeError("  one line  ")) == {"error": "one line"}


def test_error_detail_without_a_launch_summary_keeps_the_end():
    text = "\n".join(f"l{i}" for i in range(50))
    assert runs.error_detail(text, 10).splitlines() == ["... (41 lines left out)"] + [f"l{i}" for i in range(41, 50)]
    assert runs.error_detail("a\nb\n", 10) == "a\nb"
    with pytest.raises(ValueError):
        runs.error_detail(text, 2)


def test_the_graph_rerun_note_names_the_rank_that_failed_first(monkeypatch):
    calls = []

    def fake_run(argv, launcher, nproc, env, timeout, echo, python):
        calls.append(list(argv))
        if len(calls) == 1:
            exc = _launch_error(3)
            exc.result.output += "\n" + STUCK_IN_CAPTURE + "RuntimeError: a later error line\n"
            raise exc
        with open(argv[argv.index("--json") + 1], "w") as f:
            json.dump({"images_per_s": 5.0, "notes": [], "phase_s": {}}, f)
        return runs.launch.LaunchResult(command=list(argv), returncode=0, output="", duration_s=1.0)

    monkeypatch.setattr(runs.launch, "run", fake_run)
    r = runs.train(RunSpec.for_device("cuda", "cnn"))
    assert len(calls) == 2 and r["notes"][-1] == (f"the run with a CUDA graph failed: {RANK_LINE}; this is the rerun "
                                                  "with --cuda-graph off")


def test_launch_bar_counts_the_launches_that_finished_and_logs_their_lines(tmp_path, capsys):
    log = tmp_path / "launches.log"
    with runs.launch_bar(3, "three launches", str(log)) as progress:
        for i in range(2):
            progress(f"[t] start {i}")
            progress(f"[t]{runs.DONE_MARK}1.0 s: launch {i}")
    out = capsys.readouterr().out
    assert "three launches: 2 of 3 done" in out and "start 0" not in out
    assert log.read_text().count(runs.DONE_MARK) == 2 and "[t] start 1" in log.read_text()
    with runs.launch_bar(3, "no log", None) as progress:
        assert progress is None
    assert capsys.readouterr().out == ""


def test_launch_bar_auto_logs_to_scratch_in_jupyter_and_shows_the_lines_elsewhere(tmp_path, monkeypatch, capsys):
    from ddlab.base import paths, progress
    with runs.launch_bar(2, "terminal", "auto", name="t-auto") as callback:
        assert callback is None                                   # a terminal shows the launches' own lines
    monkeypatch.setattr(progress, "in_notebook", lambda: True)
    monkeypatch.setattr(paths, "REPO_ROOT", str(tmp_path))
    with runs.launch_bar(2, "in Jupyter", "auto", name="t-auto") as callback:
        callback(f"[t]{runs.DONE_MARK}1.0 s: launch 0")
    assert (tmp_path / "scratch" / "t-auto.log").read_text().count(runs.DONE_MARK) == 1
    assert "in Jupyter: 1 of 2 done" in capsys.readouterr().out
