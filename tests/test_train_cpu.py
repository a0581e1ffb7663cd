"""The training scripts for real, on CPU processes: sharding, one process, and a 2-process
run per launcher (torch DDP via torchrun, torch Horovod and Keras Horovod via horovodrun
--gloo) that must end with identical weights on both ranks."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from ddlab.system import frameworks
from ddlab.training import data, runs, runspec
from ddlab.measure import launch
from ddlab.training.runspec import RunSpec

TINY = dict(model="mlp-small", batch=16, steps=6, warmup_steps=2, device="cpu", timeout=240)


# ----------------------------------------------------------------------------- sharding
@pytest.mark.parametrize("n,world", [(60000, 2), (60000, 7), (10, 3)])
def test_shards_are_disjoint_equal_and_cover_the_data(n, world):
    shards = [data.shard_indices(n, r, world, seed=3, epoch=0) for r in range(world)]
    assert all(len(s) == n // world for s in shards)
    union = np.concatenate(shards)
    assert len(np.unique(union)) == len(union) == (n // world) * world   # disjoint, n % world dropped
    assert union.min() >= 0 and union.max() < n


def test_shards_reshuffle_per_epoch_and_are_reproducible():
    a0 = data.shard_indices(60000, 0, 2, seed=1, epoch=0)
    assert np.array_equal(a0, data.shard_indices(60000, 0, 2, seed=1, epoch=0))
    a1 = data.shard_indices(60000, 0, 2, seed=1, epoch=1)
    assert not np.array_equal(np.sort(a0), np.sort(a1))   # a new epoch deals other images to rank 0
    assert not np.array_equal(a0, data.shard_indices(60000, 0, 2, seed=2, epoch=0))
    with pytest.raises(ValueError):
        data.shard_indices(100, 2, 2, seed=0)


# ----------------------------------------------------------------------------- checks of a result
def check_result(r, framework, launcher, workers):
    assert (r["framework"], r["launcher"], r["workers"]) == (framework, launcher, workers)
    assert r["params"] == 242_762 and r["gradient_bytes_per_step"] == 4 * 242_762
    assert r["global_batch"] == workers * r["batch_per_worker"] == workers * 16
    assert (r["steps"], r["warmup_steps"], r["timed_steps"]) == (6, 2, 4)
    # honest throughput: what ran after the warm-up, over the synchronised interval
    assert r["images_timed"] == 4 * 16 * workers
    assert r["images_per_s"] == pytest.approx(r["images_timed"] / r["elapsed_s"])
    st = r["step_time_ms"]
    assert st["n"] == 4 and len(r["step_times_ms"]) == 4 and 0 < st["p10"] <= st["median"] <= st["p90"]
    assert sum(r["step_times_ms"]) <= 1e3 * r["elapsed_s"] * 1.001
    assert 0.0 <= r["test_accuracy"] <= 1.0 and r["test_samples"] == 10000
    assert r["final_loss"] > 0 and np.isfinite(r["final_loss"])
    # every rank reported, all hold the same weights, and training changed them
    assert len(r["rank_checksums"]) == workers and r["ranks_agree"] is True
    assert all(c == r["rank_checksums"][0] for c in r["rank_checksums"])
    assert r["checksum"] != r["start_checksum"]
    # NVLink multicast is not forced: the run records what its workers inherited
    assert r["nccl_env"].get("NCCL_NVLS_ENABLE") == os.environ.get("NCCL_NVLS_ENABLE")
    check_phases(r)
    prov = r["provenance"]
    assert prov["command"] and prov["date"] and "machine" in prov


PHASES = {"torch": ["imports", "device and distributed init", "data to device", "model build and broadcast",
                    "warm-up", "timed loop", "rank agreement check", "test evaluation", "result and provenance"],
          "keras": ["imports", "device and distributed init", "data pipeline", "model build", "warm-up",
                    "timed loop", "rank agreement check", "test evaluation", "result and provenance"]}


def check_phases(r):
    """Rank 0's phase times: every phase, in order, each non-negative, together no more than
    the process's life so far; the timed loop holds the timed interval."""
    ph = r["phase_s"]
    assert list(ph) == PHASES[r["framework"]]
    assert all(v >= 0 for v in ph.values())
    assert sum(ph.values()) <= r["wall_s"] + 0.01
    assert ph["timed loop"] >= r["elapsed_s"] * 0.99 - 0.005
    assert ph["imports"] > 0.1   # the clock starts at the process start, so the imports count


@pytest.mark.slow
def test_one_process_cnn_run():
    lines = []
    r = runs.train(RunSpec(model="cnn", batch=8, steps=4, warmup_steps=1, device="cpu", test_samples=500,
                           timeout=240), progress=lines.append)
    assert r["params"] == 1_199_882 and r["timed_steps"] == 3 and r["images_timed"] == 24
    check_phases(r)
    assert len(lines) == 2 and "start: torch none, 1 worker(s), model cnn, cpu (timeout 240 s)" in lines[0]
    assert "done in" in lines[1] and "img/s" in lines[1] and "test evaluation" in lines[1]
    assert r["launch_s"] >= r["wall_s"] - 1.0   # the launch contains the worker's life
    assert r["backend"] == "none" and r["cuda_graph"] is False and "need a GPU" in r["cuda_graph_reason"]
    assert r["rank_checksums"] == [r["checksum"]] and r["test_samples"] == 500


@pytest.mark.slow
def test_ddp_two_processes_agree():
    r = runs.train(RunSpec(framework="torch", launcher="ddp", workers=2, **TINY))
    check_result(r, "torch", "ddp", 2)
    assert r["backend"] == "gloo" and r["provenance"]["command"].startswith("torchrun --standalone --nproc-per-node=2 ")



@pytest.mark.slow
def test_ddp_training_closes_its_group_before_python_exits():
    """main() shuts down after train() returned (its DDP model, which holds the process group,
    is gone) and torch.distributed.nn is imported before init: no Gloo thread is left when the
    script is done. See test_handson's teardown tests for why that matters and for the control."""
    from _teardown import gloo_threads, threads_left
    left = gloo_threads(threads_left(runspec.SCRIPTS["torch"], "--launcher", "ddp", "--device", "cpu",
                                     "--model", "mlp-small", "--batch-size", "16", "--steps", "6",
                                     "--warmup-steps", "2", "--test-samples", "200"))
    assert left == {0: [], 1: []}, left

def _need_horovod(framework):
    ok, why = frameworks.availability(framework, "horovod")
    if not ok:
        pytest.skip(why)


@pytest.mark.slow
def test_horovod_torch_two_processes_agree():
    _need_horovod("torch")
    r = runs.train(RunSpec(framework="torch", launcher="horovod", workers=2, **TINY))
    check_result(r, "torch", "horovod", 2)
    assert r["backend"] == "horovod-gloo" and "horovodrun" in r["provenance"]["command"]


@pytest.mark.slow
def test_horovod_keras_two_processes_agree():
    _need_horovod("keras")
    r = runs.train(RunSpec(framework="keras", launcher="horovod", workers=2, **TINY))
    check_result(r, "keras", "horovod", 2)
    assert r["backend"] == "horovod-gloo"


def load_script(name):
    """The training script as a module, to call its main() in this process (fast: torch is loaded)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(f"_{name}_under_test", runspec.SCRIPTS[name])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_graph_capture_is_opt_in_for_ddp():
    """--cuda-graph auto captures one process on a GPU, never DDP (opt-in: the course compares
    the eager loop across NCCL paths); --cuda-graph on captures DDP; Horovod cannot be captured.
    The script's flags, decided as the script decides (ddlab.training.cuda_graph_torch)."""
    from ddlab.course import tuning
    from ddlab.training import cuda_graph_torch
    mod = load_script("torch")

    def graph_decision(args, cuda):
        return cuda_graph_torch.decide(args, cuda, tuning.graph_problems(args), mod.Failure)

    def decide(launcher, graph="auto", compile_mode="none", cuda=True):
        args = mod.parse_args(["--launcher", launcher, "--cuda-graph", graph, "--compile", compile_mode])
        return graph_decision(args, cuda)

    assert decide("none") == (True, "on (auto: one process on a GPU)")
    use, why = decide("ddp")
    assert use is False and "opt-in" in why and "--cuda-graph on" in why
    assert decide("ddp", "on") == (True, "on (--cuda-graph on)")
    assert decide("horovod")[0] is False and decide("none", cuda=False)[0] is False
    assert decide("none", compile_mode="default")[0] is False
    with pytest.raises(SystemExit, match="background thread"):
        decide("horovod", "on")
    # a learning-rate warm-up or the noise-scale hook cannot live in a captured step
    use, why = graph_decision(mod.parse_args(["--lr-warmup-epochs", "1"]), True)
    assert use is False and "warm-up" in why
    with pytest.raises(SystemExit, match="fmnist_torch.py: error: --cuda-graph on is impossible: .*warm-up"):
        graph_decision(mod.parse_args(["--lr-warmup-epochs", "1", "--cuda-graph", "on"]), True)


@pytest.mark.parametrize("args,message", [
    (["--launcher", "ddp"], "must be started by torchrun"),
    (["--steps", "3", "--warmup-steps", "3", "--device", "cpu"], "no timed step"),
    (["--device", "cpu", "--cuda-graph", "on"], "CUDA graphs need a GPU"),
    (["--device", "cpu", "--launcher", "horovod", "--cuda-graph", "on"], "background thread"),
    (["--batch-size", "0"], "--batch-size must be at least 1"),
    (["--device", "cpu", "--noise-scale", "--eval-every", "1"], "use --launcher ddp with 2 or more workers"),
    (["--device", "cpu", "--launcher", "horovod", "--noise-scale", "--eval-every", "1"], "DDP communication hook"),
    # the communication tuning flags (ddlab.course.tuning): each belongs to its launcher, bad values, bad pairs
    (["--device", "cpu", "--launcher", "horovod", "--static-graph"],
     "--static-graph is a DDP option (torch's DistributedDataParallel): use it with --launcher ddp, not --launcher "
     "horovod"),
    (["--device", "cpu", "--comm-hook", "fp16"], "use it with --launcher ddp, not --launcher none"),
    (["--device", "cpu", "--launcher", "ddp", "--hvd-fusion-mb", "64"],
     "--hvd-fusion-mb is a Horovod option: use it with --launcher horovod"),
    (["--device", "cpu", "--launcher", "ddp", "--hvd-compression", "fp16"], "--hvd-compression is a Horovod option"),
    (["--device", "cpu", "--accumulate", "0"], "--accumulate must be at least 1"),
    (["--device", "cpu", "--launcher", "ddp", "--bucket-cap-mb", "0"], "--bucket-cap-mb must be positive"),
    (["--device", "cpu", "--launcher", "horovod", "--hvd-fusion-mb", "-1"], "--hvd-fusion-mb cannot be negative"),
    (["--device", "cpu", "--launcher", "horovod", "--hvd-cycle-ms", "0"], "--hvd-cycle-ms must be positive"),
    (["--device", "cpu", "--launcher", "ddp", "--comm-hook", "fp16", "--noise-scale", "--eval-every", "1"],
     "DDP takes only one"),
    (["--device", "cpu", "--launcher", "ddp", "--accumulate", "2", "--noise-scale", "--eval-every", "1"],
     "cannot go with --accumulate"),
    (["--device", "cpu", "--launcher", "ddp", "--static-graph", "--accumulate", "2"], "PyTorch issue 143580"),
    (["--device", "cpu", "--accumulate", "2", "--cuda-graph", "on"], "--accumulate runs several forward"),
])
def test_torch_script_refuses_bad_setups_with_one_clear_line(args, message, monkeypatch):
    for var in ("LOCAL_RANK", "WORLD_SIZE", "HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    mod = load_script("torch")
    with pytest.raises(SystemExit) as ei:
        mod.main(args)
    assert message in str(ei.value.code) and str(ei.value.code).startswith("fmnist_torch.py: error:")


@pytest.mark.slow
def test_error_exit_shows_no_traceback():
    out = subprocess.run([sys.executable, runspec.SCRIPTS["keras"], "--steps", "1"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode != 0 and "--steps must be at least 2" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.slow
def test_failed_run_raises_launch_error_quoting_the_script():
    with pytest.raises(launch.LaunchError, match="unrecognized arguments: --no-such-flag"):
        runs.train(RunSpec(model="mlp-small", steps=4, warmup_steps=1, device="cpu",
                           extra_args=["--no-such-flag"], timeout=120))


# ----------------------------------------------------------------------------- communication tuning
def test_bf16_hook_runs_where_ddp_accepts_it_and_fails_clearly_where_not(monkeypatch):
    """DDP accepts PyTorch's bf16_compress_hook only in a CUDA build of PyTorch (even over gloo
    on CPU): a CPU-only build refuses it with one line before any process group exists; a CUDA
    build runs it over gloo, ranks agreeing."""
    import torch
    for var in ("LOCAL_RANK", "WORLD_SIZE", "HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    if torch.version.cuda is None and torch.version.hip is None:
        with pytest.raises(SystemExit) as ei:
            load_script("torch").main(["--device", "cpu", "--launcher", "ddp", "--comm-hook", "bf16"])
        msg = str(ei.value.code)
        assert msg.startswith("fmnist_torch.py: error: --comm-hook bf16:") and "built without CUDA" in msg
        assert "--comm-hook fp16" in msg and "\n" not in msg
    else:
        r = runs.train(RunSpec(framework="torch", launcher="ddp", workers=2, extra_args=("--comm-hook", "bf16"),
                               **dict(TINY, test_samples=200)))
        assert r["ranks_agree"] is True and r["tuning"]["comm_hook"] == "bf16"


def test_accumulation_is_the_larger_batch_in_smaller_pieces(tmp_path, monkeypatch):
    """One process, no dropout (mlp-small): 2 micro-batches of 8 per step train the same
    weights as batches of 16 (the loss is the mean over the micro-batches, the learning rate
    that of the batch the optimizer sees), and the images counted are the 16 per step."""
    import torch
    for var in ("LOCAL_RANK", "WORLD_SIZE", "HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    mod = load_script("torch")
    threads = torch.get_num_threads()
    out = {}
    try:
        for name, flags in (("micro", ["--batch-size", "8", "--accumulate", "2"]), ("whole", ["--batch-size", "16"])):
            path = str(tmp_path / f"{name}.json")
            assert mod.main(["--model", "mlp-small", "--device", "cpu", "--steps", "4", "--warmup-steps", "1",
                             "--test-samples", "100", "--lr-scaling", "linear", "--lr-ref-batch", "8",
                             "--json", path, *flags]) == 0
            out[name] = json.load(open(path))
    finally:
        torch.set_num_threads(threads)
    micro, whole = out["micro"], out["whole"]
    assert (micro["batch_per_worker"], micro["global_batch"], micro["tuning"]["accumulate"]) == (8, 16, 2)
    assert micro["images_timed"] == whole["images_timed"] == 3 * 16
    assert micro["steps_per_epoch"] == whole["steps_per_epoch"] == 60000 // 16
    assert micro["lr"] == whole["lr"] == pytest.approx(2e-3)   # linear scaling for the optimizer's batch of 16
    assert micro["final_loss"] == pytest.approx(whole["final_loss"], rel=1e-5)
    for key in ("sum", "sumsq"):
        assert micro["checksum"][key] == pytest.approx(whole["checksum"][key], rel=1e-6)
    assert micro["checksum"] != micro["start_checksum"]


def check_tuned(r, launcher, micro_batches, **tuned):
    """A 2-worker TINY run with tuning flags: honest image counts, every rank agreeing, the
    tuning recorded."""
    assert (r["launcher"], r["workers"], r["batch_per_worker"]) == (launcher, 2, 16)
    assert r["global_batch"] == 16 * micro_batches * 2 and r["timed_steps"] == 4
    assert r["images_timed"] == 4 * 16 * micro_batches * 2   # the images really processed, all micro-batches
    assert r["images_per_s"] == pytest.approx(r["images_timed"] / r["elapsed_s"])
    assert r["ranks_agree"] is True and len(r["rank_checksums"]) == 2 and r["checksum"] != r["start_checksum"]
    assert r["final_loss"] > 0 and np.isfinite(r["final_loss"])
    assert r["tuning"]["accumulate"] == micro_batches
    for key, value in tuned.items():
        assert r["tuning"][key] == value, key


TUNED = dict(TINY, test_samples=200)


@pytest.mark.slow
def test_ddp_accumulation_with_no_sync_and_the_fp16_hook_agree():
    r = runs.train(RunSpec(framework="torch", launcher="ddp", workers=2, **TUNED,
                           extra_args=("--accumulate", "2", "--comm-hook", "fp16")))
    check_tuned(r, "ddp", 2, no_sync=True, comm_hook="fp16")


@pytest.mark.slow
def test_ddp_bucket_options_and_static_graph_agree():
    r = runs.train(RunSpec(framework="torch", launcher="ddp", workers=2, **TUNED,
                           extra_args=("--bucket-cap-mb", "0.25", "--grad-as-bucket-view", "--static-graph")))
    check_tuned(r, "ddp", 1, bucket_cap_mb=0.25, gradient_as_bucket_view=True, static_graph=True, no_sync=False)


@pytest.mark.slow
def test_horovod_accumulation_compression_fusion_and_cycle_agree():
    _need_horovod("torch")
    r = runs.train(RunSpec(framework="torch", launcher="horovod", workers=2, **TUNED,
                           extra_args=("--accumulate", "2", "--hvd-compression", "fp16", "--hvd-fusion-mb", "1",
                                       "--hvd-cycle-ms", "2")))
    check_tuned(r, "horovod", 2, hvd_compression="fp16", hvd_fusion_mb=1, hvd_cycle_ms=2.0, no_sync=False)
    # set before hvd.init, so the workers ran with them (and the result's environment shows it)
    assert r["framework_env"]["HOROVOD_FUSION_THRESHOLD"] == str(1024 * 1024)
    assert r["framework_env"]["HOROVOD_CYCLE_TIME"] == "2"
