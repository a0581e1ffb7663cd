"""ddlab.training.train_common: the flags, checks, step plan, seeds, printed lines and result that
fmnist_torch.py and fmnist_keras.py share."""
import argparse
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from ddlab.training import throughput, train_common
from ddlab.training.train_common import Failure

MODELS = ["cnn", "mlp-small"]


class ScriptFailure(Failure):
    script = "some_script.py"


def parse(argv, launchers=("none", "horovod"), **kw):
    p = argparse.ArgumentParser()
    train_common.add_common_arguments(p, launchers=launchers, models=MODELS, **kw)
    return train_common.validate_common(p.parse_args(argv), ScriptFailure)


# ----------------------------------------------------------------------------- flags
def test_defaults_of_the_common_flags():
    a = parse([])
    assert (a.launcher, a.model, a.batch_size, a.steps, a.epochs, a.warmup_steps) == ("none", "cnn", 128, None,
                                                                                         None, None)
    assert (a.lr, a.scale_lr, a.optimizer, a.seed, a.precision, a.device) == (1e-3, False, "adam", 42, "fp32",
                                                                               "auto")
    assert (a.cpu_threads, a.data_dir, a.test_samples, a.log_interval, a.json) == (1, None, 10000, None, None)


def test_launcher_choices_come_from_the_script(capsys):
    assert parse(["--launcher", "ddp"], launchers=("none", "ddp")).launcher == "ddp"
    with pytest.raises(SystemExit):
        parse(["--launcher", "ddp"], launchers=("none", "horovod"))
    assert "invalid choice: 'ddp'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="unknown launcher"):
        parse([], launchers=("none", "slurm"))


def test_framework_arguments_come_right_after_device():
    p = argparse.ArgumentParser()
    train_common.add_common_arguments(
        p, launchers=["none"], models=MODELS,
        framework_arguments=lambda q: q.add_argument("--compile", default="none"))
    flags = [a.option_strings[0] for a in p._actions if a.option_strings and a.option_strings[0] != "-h"]
    assert flags[flags.index("--device") + 1] == "--compile"
    assert flags[-1] == "--json"
    assert p.parse_args(["--compile", "default"]).compile == "default"


def test_steps_and_epochs_exclude_each_other(capsys):
    with pytest.raises(SystemExit):
        parse(["--steps", "4", "--epochs", "1"])
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.parametrize("argv,message", [
    (["--batch-size", "0"], "--batch-size must be at least 1, got 0"),
    (["--steps", "1"], "--steps must be at least 2"),
    (["--epochs", "0"], "--epochs must be positive, got 0.0"),
    (["--warmup-steps", "-1"], "--warmup-steps cannot be negative"),
    (["--lr", "0"], "--lr must be positive"),
    (["--test-samples", "10001"], "--test-samples must be within 1..10000"),
    (["--test-samples", "0"], "--test-samples must be within 1..10000"),
    (["--cpu-threads", "0"], "--cpu-threads must be at least 1"),
    (["--scale-lr", "--lr-scaling", "sqrt"], "--scale-lr is --lr-scaling linear"),
    (["--lr-ref-batch", "0"], "--lr-ref-batch must be at least 1"),
])
def test_bad_values_give_one_line_naming_the_script(argv, message):
    with pytest.raises(ScriptFailure) as ei:
        parse(argv)
    assert str(ei.value.code).startswith(f"some_script.py: error: {message}")
    assert "\n" not in str(ei.value.code)


def test_good_edge_values_pass():
    a = parse(["--steps", "2", "--warmup-steps", "0", "--test-samples", "1", "--batch-size", "1"])
    assert (a.steps, a.warmup_steps, a.test_samples, a.batch_size) == (2, 0, 1, 1)


def test_learning_rate_scaling_flags():
    a = parse([])
    assert (a.lr_scaling, a.lr_ref_batch) == ("none", None)
    assert train_common.learning_rate(a, 4) == pytest.approx(1e-3)
    # --scale-lr keeps its meaning: x workers (the reference batch defaults to the batch per worker)
    a = parse(["--scale-lr", "--lr", "0.01", "--batch-size", "32"])
    assert a.lr_scaling == "linear" and train_common.learning_rate(a, 4) == pytest.approx(0.04)
    a = parse(["--lr-scaling", "linear", "--lr", "0.05", "--batch-size", "256", "--lr-ref-batch", "32"])
    assert train_common.learning_rate(a, 2) == pytest.approx(0.05 * 512 / 32)
    a = parse(["--lr-scaling", "sqrt", "--lr", "0.01", "--batch-size", "64", "--lr-ref-batch", "16"])
    assert train_common.learning_rate(a, 1) == pytest.approx(0.02)


def parse_convergence(argv):
    p = argparse.ArgumentParser()
    train_common.add_common_arguments(p, launchers=("none", "ddp"), models=MODELS,
                                      framework_arguments=train_common.add_convergence_arguments)
    return train_common.validate_common(p.parse_args(argv), ScriptFailure)


def test_convergence_flags_parse_and_refuse_bad_values():
    a = parse_convergence([])
    assert (a.lr_warmup_epochs, a.train_samples, a.eval_every, a.noise_scale) == (0.0, None, 0.0, False)
    a = parse_convergence(["--lr-warmup-epochs", "2", "--train-samples", "6000", "--eval-every", "0.5",
                           "--noise-scale"])
    assert (a.lr_warmup_epochs, a.train_samples, a.eval_every, a.noise_scale) == (2.0, 6000, 0.5, True)
    assert parse_convergence(["--eval-every", "1", "--eval-steps", "7", "30"]).eval_steps == [7, 30]
    for argv, message in ((["--lr-warmup-epochs", "-1"], "--lr-warmup-epochs cannot be negative"),
                          (["--train-samples", "60001"], "--train-samples must be within 1..60000"),
                          (["--eval-every", "-0.5"], "--eval-every cannot be negative"),
                          (["--noise-scale"], "--noise-scale reports the gradient noise per evaluation interval"),
                          (["--eval-every", "1", "--eval-steps", "0"], "--eval-steps must be at least 1"),
                          (["--eval-steps", "5"], "--eval-steps adds evaluations to those of --eval-every")):
        with pytest.raises(ScriptFailure) as ei:
            parse_convergence(argv)
        assert str(ei.value.code).startswith(f"some_script.py: error: {message}")


# ----------------------------------------------------------------------------- step plan
def test_plan_defaults_to_one_epoch_with_a_fifth_warm_up():
    plan = train_common.plan_steps(parse(["--batch-size", "100"]), 60000, 2)
    assert (plan.per_rank, plan.steps_per_epoch, plan.total, plan.warmup) == (30000, 300, 300, 50)   # min(50, 60)
    assert plan.timed == 250 and plan.epochs_needed == 1 and plan.notes == []
    plan = train_common.plan_steps(parse(["--batch-size", "100", "--epochs", "2.5"]), 60000, 2)
    assert (plan.total, plan.warmup, plan.epochs_needed) == (750, 50, 3)
    plan = train_common.plan_steps(parse(["--steps", "10"]), 60000, 1)
    assert (plan.total, plan.warmup, plan.timed) == (10, 2, 8)


def test_plan_raises_the_warm_up_and_says_why():
    plan = train_common.plan_steps(parse(["--steps", "30", "--warmup-steps", "2"]), 60000, 1,
                                   min_warmup=20, min_warmup_why="the capture needs 20 eager steps first")
    assert plan.warmup == 20 and plan.timed == 10
    assert plan.notes == ["warm-up raised from 2 to 20 steps: the capture needs 20 eager steps first"]


def test_plan_refuses_runs_without_a_timed_step_or_a_full_batch():
    with pytest.raises(ScriptFailure, match="3 steps leave no timed step after 3 warm-up steps"):
        train_common.plan_steps(parse(["--steps", "3", "--warmup-steps", "3"]), 60000, 1, ScriptFailure)
    with pytest.raises(ScriptFailure, match="no timed step after 20 warm-up"):
        train_common.plan_steps(parse(["--steps", "20"]), 60000, 1, ScriptFailure, min_warmup=20)
    with pytest.raises(ScriptFailure, match=r"a shard of 7 images \(60 / 8 workers\) holds no full batch of 8"):
        train_common.plan_steps(parse(["--batch-size", "8"]), 60, 8, ScriptFailure)


def test_accumulation_makes_a_step_take_all_its_micro_batches():
    """--accumulate N (ddlab.course.tuning's flag): a step takes batch x N images of each shard, the
    optimizer sees batch x N x workers, and the learning rate is scaled for that batch."""
    a = parse(["--batch-size", "100", "--lr-scaling", "linear"])
    a.accumulate = 3
    plan = train_common.plan_steps(a, 60000, 2)
    assert (plan.per_rank, plan.steps_per_epoch, plan.total) == (30000, 100, 100)
    assert train_common.micro_batches(a) == 3 and train_common.global_batch(a, 2) == 600
    assert train_common.learning_rate(a, 2) == pytest.approx(1e-3 * 600 / 100)
    a.accumulate = 2
    with pytest.raises(ScriptFailure, match="holds no full batch of 100 x 2 micro-batches"):
        train_common.plan_steps(a, 300, 2, ScriptFailure)
    b = parse(["--batch-size", "100"])   # a script without the flag (fmnist_keras.py): one micro-batch
    assert train_common.micro_batches(b) == 1 and train_common.global_batch(b, 2) == 200


# ----------------------------------------------------------------------------- seeds
def test_rank_seeds_are_reproducible_distinct_and_in_range():
    seeds = [train_common.rank_seed(42, r) for r in range(64)]
    assert seeds == [train_common.rank_seed(42, r) for r in range(64)]
    assert len(set(seeds)) == 64 and all(0 <= s < 2 ** 32 for s in seeds)
    assert train_common.rank_seed(43, 0) != seeds[0]
    # the value numpy's SeedSequence gives for (seed, rank): the seeds torch runs always used
    assert seeds[3] == int(np.random.SeedSequence([42, 3]).generate_state(1)[0])
    # the Keras script's 31-bit seeds are the same numbers cut below 2**31
    assert [train_common.rank_seed(42, r, bits=31) for r in range(64)] == [s % 2 ** 31 for s in seeds]
    with pytest.raises(ValueError):
        train_common.rank_seed(42, 0, bits=33)


# ----------------------------------------------------------------------------- printed lines
def test_step_line():
    line = train_common.step_line(20, 100, 0.51234, 0.5, 10, 256, warmup=20)
    assert line == "step     20/100 | loss 0.5123 |    50.00 ms/step |       5,120 img/s (all workers, warm-up)"
    assert train_common.step_line(21, 100, 0.5, 0.5, 1, 256, warmup=20).endswith("(all workers, timed)")
    assert "nan img/s" in train_common.step_line(5, 10, 1.0, 0.0, 1, 8, warmup=2)


def test_progress_log_prints_one_line_per_interval_over_the_steps_since_the_last():
    ticks = iter([0.0, 1.0, 3.0, 10.0, 10.5])
    lines = []
    log = train_common.ProgressLog(total=10, warmup=4, global_batch=32, say=lambda s, **k: lines.append(s),
                                   now=lambda: next(ticks))
    assert log.every == 1 and math.isnan(log.last_loss)   # ten steps: a line each (about ten lines a run)
    log = train_common.ProgressLog(total=10, warmup=4, global_batch=32, log_every=4,
                                   say=lambda s, **k: lines.append(s), now=lambda: next(ticks))
    assert [s for s in range(1, 11) if log.due(s)] == [4, 8, 10]   # every 4 steps and the last
    log.line(4, loss_sum=2.0)   # 4 steps since the start, 2 s
    assert lines[-1] == train_common.step_line(4, 10, 0.5, 2.0, 4, 32, 4) and log.last_loss == 0.5
    log.restart(6)              # e.g. after a CUDA-graph capture: the next line counts from step 6, from now
    log.line(8, loss_sum=1.0)   # 2 steps, 0.5 s
    assert lines[-1] == train_common.step_line(8, 10, 0.5, 0.5, 2, 32, 4) and "timed" in lines[-1]


def fake_run(world=2, total=10, warmup=2, batch=16):
    args = parse(["--steps", str(total), "--warmup-steps", str(warmup), "--batch-size", str(batch),
                  "--launcher", "horovod"])
    plan = train_common.plan_steps(args, 60000, world)
    step_ms = [10.0 + i for i in range(plan.timed)]
    speed = throughput.summarize(plan.timed, batch, world, 0.1, step_ms)
    ck = {"sum": 1.5, "sumsq": 2.5}
    gathered = [{"rank": r, "checksum": dict(ck), "elapsed_s": 0.1 + r / 100} for r in range(world)]
    return args, plan, speed, step_ms, ck, gathered


def make_result(monkeypatch, **over):
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    monkeypatch.setenv("HOROVOD_CYCLE_TIME", "1")
    args, plan, speed, step_ms, ck, gathered = fake_run()
    kw = dict(framework="keras", params=100, gradient_bytes=400, backend="horovod-gloo", world=2, plan=plan,
              speed=speed, step_times_ms=step_ms, accuracy=np.float64(0.8), test_samples=np.int64(500),
              final_loss=0.3, device_fields={"device": "cpu", "channels_last": True}, lr=2e-3, on_gpu=False,
              checksum=ck, start_checksum={"sum": 0.0, "sumsq": 0.0}, gathered=gathered,
              framework_env_prefixes=("HOROVOD_",), versions={"tensorflow": "9.9"}, notes=["a note"],
              phase_s={"imports": 1.0}, wall_s=3.0, provenance={"command": "x"})
    kw.update(over)
    return train_common.build_result(args, **kw)


def test_result_fields_and_their_order(monkeypatch):
    r = make_result(monkeypatch)
    keys = list(r)
    assert keys[:6] == ["model", "params", "gradient_bytes_per_step", "framework", "launcher", "backend"]
    # the script's device fields sit after "precision", its versions after "framework_env"
    assert keys[keys.index("precision") + 1:keys.index("optimizer")] == ["device", "channels_last"]
    assert keys[keys.index("framework_env") + 1:keys.index("notes")] == ["tensorflow"]
    assert keys[-4:] == ["notes", "phase_s", "wall_s", "provenance"]
    assert (r["workers"], r["batch_per_worker"], r["global_batch"]) == (2, 16, 32)
    assert (r["steps"], r["warmup_steps"], r["timed_steps"], r["steps_per_epoch"]) == (10, 2, 8, 1875)
    assert r["epochs"] == round(10 / 1875, 4)
    assert r["images_timed"] == 8 * 32 and r["images_per_s"] == pytest.approx(256 / 0.1)
    assert r["step_times_ms"] == [10.0 + i for i in range(8)] and r["step_time_ms"]["n"] == 8
    assert (r["lr"], r["lr_base"], r["cpu_threads"]) == (2e-3, 1e-3, 1)
    assert r["nccl_env"]["NCCL_DEBUG"] == "INFO" and all(k.startswith("NCCL_") for k in r["nccl_env"])
    assert r["framework_env"]["HOROVOD_CYCLE_TIME"] == "1" and all(k.startswith("HOROVOD_") for k in r["framework_env"])
    assert r["ranks_agree"] is True and r["rank_checksum_spread"] == 0 and r["rank_elapsed_s"] == [0.1, 0.11]
    assert r["final_loss_note"] == train_common.FINAL_LOSS_NOTE
    json.dumps(r)   # numpy scalars were turned into plain numbers: the result is valid JSON
    assert type(r["test_accuracy"]) is float and type(r["test_samples"]) is int
    assert make_result(monkeypatch, on_gpu=True)["cpu_threads"] is None
    assert "tuning" not in r   # only a script that gives it (fmnist_torch.py) records it


def test_result_records_the_tuning_after_the_setup(monkeypatch):
    r = make_result(monkeypatch, tuning={"accumulate": 1, "comm_hook": "fp16"})
    keys = list(r)
    assert keys[keys.index("cpu_threads") + 1] == "tuning" and r["tuning"] == {"accumulate": 1, "comm_hook": "fp16"}


def test_result_refuses_speed_of_another_step_count(monkeypatch):
    args, plan, speed, *_ = fake_run()
    other = throughput.summarize(plan.timed - 1, 16, 2, 0.1)
    with pytest.raises(ValueError, match="speed covers 7 steps"):
        make_result(monkeypatch, speed={**other, "step_time_ms": speed["step_time_ms"]})


def test_rank_agreement_sees_a_drifting_rank():
    gathered = [{"checksum": {"sum": 1.0, "sumsq": 2.0}, "elapsed_s": 1.0},
                {"checksum": {"sum": 1.25, "sumsq": 2.0}, "elapsed_s": 1.5}]
    out = train_common.rank_agreement(gathered)
    assert out["ranks_agree"] is False and out["rank_checksum_spread"] == 0.25
    assert out["rank_checksums"] == [g["checksum"] for g in gathered] and out["rank_elapsed_s"] == [1.0, 1.5]
    with pytest.raises(ValueError):
        train_common.rank_agreement([])


def test_summary_line(monkeypatch):
    r = make_result(monkeypatch)
    sm = r["step_time_ms"]
    line = train_common.summary_line(r)
    assert line.startswith("timed 8 steps after 2 warm-up: 2,560 img/s (2 worker(s)); step median ")
    assert f"{sm['median']:.3f} ms" in line and "test accuracy 0.8000 on 500 images" in line
    assert "ranks agree on weights: yes | 3.0 s since process start" in line
    r["ranks_agree"] = False
    assert "ranks agree on weights: NO" in train_common.summary_line(r)


def test_env_with_and_run_command(monkeypatch):
    env = {"NCCL_B": "2", "NCCL_A": "1", "TF_X": "3", "PATH": "/bin"}
    assert list(train_common.env_with(["NCCL_"], env).items()) == [("NCCL_A", "1"), ("NCCL_B", "2")]
    assert train_common.env_with(("TF_", "PATH"), env) == {"TF_X": "3", "PATH": "/bin"}
    monkeypatch.setenv("DDLAB_COMMAND", "torchrun --nproc-per-node=2 fmnist_torch.py")
    assert train_common.run_command() == "torchrun --nproc-per-node=2 fmnist_torch.py"
    monkeypatch.delenv("DDLAB_COMMAND")
    assert train_common.run_command().startswith(sys.executable)


def test_write_json_replaces_the_file_whole(tmp_path):
    path = tmp_path / "r.json"
    path.write_text("old")
    train_common.write_json(str(path), {"a": 1, "b": [1.5]})
    assert json.loads(path.read_text()) == {"a": 1, "b": [1.5]} and path.read_text().endswith("\n")
    assert not (tmp_path / "r.json.part").exists()


def test_no_framework_is_imported():
    """Each script imports only its own framework: this shared module must import neither."""
    code = ("import sys; import ddlab.training.train_common; "
            "print(sorted(m for m in ('torch', 'tensorflow', 'keras') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(train_common.__file__))})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
