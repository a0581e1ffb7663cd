"""ddlab.cost.predict: the step model as a function and as ``ddlab predict``, checked against
cases computed by hand (alpha-beta, the ring factor 2(n-1)/n, overlap with the backward pass),
its JSON, and one message with exit status 2 for each kind of bad input."""
import json

import pytest

from ddlab.cost import predict as pr
from ddlab.cost.alpha_beta import AlphaBeta
from ddlab.cost.step_model import Overheads


def _sweep_file(tmp_path, alpha, beta, paths=("default",), nproc=2):
    """A sweep file of `ddlab allreduce --out` whose times follow alpha + S/beta exactly."""
    from ddlab.measure import collectives
    sizes = [2 ** k for k in range(10, 27)]
    results = [collectives.SweepResult(op="all_reduce", backend="nccl", path=p, env={}, nproc=nproc,
                                       rows=[{"bytes": s, "count": s // 4, "time_us": 1e6 * (alpha + s / beta),
                                              "time_us_max": 1e6 * (alpha + s / beta), "algbw_gbps": 0.0,
                                              "busbw_gbps": 0.0, "iters": 1} for s in sizes],
                                       provenance={"machine": "a test"}) for p in paths]
    return collectives.write_json(results, str(tmp_path / "sweep.json"))


# ----------------------------------------------------------------------------- hand-computed cases
def test_one_bucket_weak_scaling_by_hand():
    # mlp 100-100-10: 100*100+100 + 100*10+10 = 11,110 parameters, 44,440 fp32 bytes, one bucket ready at
    # the end of the backward pass (nothing to hide behind). On 4 GPUs the ring carries 2(n-1)/n = 1.5 of it:
    # 10 us + 44,440 * 1.5 / 1e9 s = 76.66 us; step 1 ms + 76.66 us + 100 us wrapper; speedup 4 x 1 / that.
    p = pr.predict(mlp=[100, 100, 10], step_ms=1.0, batch=64, gpus=4, fits={"default": AlphaBeta(10e-6, 1e9)},
                   wrapper=Overheads(100e-6, 0.0))
    assert p.parameters == 11_110 and p.gradient_bytes == 44_440 and len(p.step.buckets) == 1
    assert p.exposed_comm_s == pytest.approx(10e-6 + 44_440 * 1.5 / 1e9)
    assert p.step_s == pytest.approx(1e-3 + 76.66e-6 + 100e-6)
    assert p.speedup == pytest.approx(4 * 1e-3 / 1.17666e-3)
    assert p.bound == "compute" and p.scaling == "weak" and p.global_batch == 256


def test_two_buckets_overlap_by_hand():
    # mlp 512-1024-512: dense2 (524,800 params, 2,099,200 B) fills DDP's first 1 MiB bucket and is ready
    # half-way through the backward pass (equal FLOPs); dense1 (525,312 params, 2,101,248 B) is ready at its
    # end. Step 3 ms, backward 2/3 of it = 2 ms. 2 GPUs: factor 1, alpha 0.1 ms, beta 2.0992e9 B/s.
    # bucket 1: ready at 1 ms, takes 0.1 + 1.0 ms -> done at 2.1 ms (1 ms of it hidden);
    # bucket 2: ready at 2 ms, starts at 2.1 ms, takes 0.1 + 1.000976 ms -> done at 3.200976 ms.
    # Exposed: 3.200976 - 2 = 1.200976 ms; step 4.200976 ms; speedup 2 x 3 / 4.200976.
    p = pr.predict(mlp=[512, 1024, 512], step_ms=3.0, batch=32, gpus=2,
                   fits={"default": AlphaBeta(1e-4, 2.0992e9)}, wrapper=Overheads())
    assert [b.nbytes for b in p.step.buckets] == [2_099_200, 2_101_248]
    assert p.step.buckets[0].ready == pytest.approx(0.5)
    assert p.step.comm_s == pytest.approx(2.200976e-3)
    assert p.exposed_comm_s == pytest.approx(1.200976e-3)
    assert p.step.hidden_comm_s == pytest.approx(1.0e-3)
    assert p.speedup == pytest.approx(6.0 / 4.200976)
    # the wrapper's cost per step and per bucket adds on top: 50 us + 2 x 5 us
    q = pr.predict(mlp=[512, 1024, 512], step_ms=3.0, batch=32, gpus=2,
                   fits={"default": AlphaBeta(1e-4, 2.0992e9)}, wrapper=Overheads(50e-6, 5e-6))
    assert q.wrapper_s == pytest.approx(60e-6) and q.step_s == pytest.approx(p.step_s + 60e-6)
    # bf16 gradients: half the bytes
    h = pr.predict(mlp=[512, 1024, 512], step_ms=3.0, batch=32, dtype="bf16",
                   fits={"default": AlphaBeta(1e-4, 2.0992e9)}, wrapper=Overheads())
    assert h.gradient_bytes == (2_099_200 + 2_101_248) // 2


def test_strong_scaling_by_hand():
    # one-GPU step 2 ms at the global batch 64, 0.5 ms of it fixed: per GPU (32 images) 0.5 + 1.5 x 32/64
    # = 1.25 ms; all-reduce 10 us + 44,440 B / 1e9 B/s = 54.44 us; speedup = 2 ms / 1.30444 ms.
    p = pr.predict(mlp=[100, 100, 10], step_ms=2.0, global_batch=64, fixed_ms=0.5,
                   fits={"default": AlphaBeta(10e-6, 1e9)}, wrapper=Overheads())
    assert p.scaling == "strong" and p.batch_per_gpu == 32 and p.global_batch == 64
    assert p.compute_s == pytest.approx(1.25e-3)
    assert p.step_s == pytest.approx(1.30444e-3)
    assert p.speedup == pytest.approx(2.0 / 1.30444)
    # by default none of the step shrinks (a small-batch step on a GPU): the second GPU only adds cost
    d = pr.predict(mlp=[100, 100, 10], step_ms=2.0, global_batch=64, fits={"default": AlphaBeta(10e-6, 1e9)},
                   wrapper=Overheads())
    assert d.compute_s == pytest.approx(2e-3) and d.speedup < 1


def test_a_parameter_count_is_split_into_equal_layers():
    p = pr.predict(params=1_000_001, layers=4, step_ms=1.0, batch=8, fits={"default": AlphaBeta(1e-5, 1e10)},
                   wrapper=Overheads())
    assert p.parameters == 1_000_001 and p.gradient_bytes == 4_000_004


def test_a_sweep_file_is_fitted_and_carried_by_its_ranks(tmp_path):
    f = _sweep_file(tmp_path, 20e-6, 5e9, paths=("default", "shm"))
    p = pr.predict(mlp=[100, 100, 10], step_ms=1.0, batch=8, gpus=2, path="shm", fits=f, wrapper=Overheads())
    assert p.exposed_comm_s == pytest.approx(20e-6 + 44_440 / 5e9, rel=1e-6)
    assert "sweep.json" in p.fits and "path shm" in p.sources["exposed communication"]


def test_recorded_fits_and_the_measured_wrapper_cost():
    from ddlab.cost import wrapper_cost
    p = pr.predict("wide", step_ms=2.857, batch=512, path="shm")
    over = wrapper_cost.measured("ddp")
    assert p.wrapper_s == pytest.approx(over.total_s(len(p.step.buckets))) and over.basis == "measured"
    assert p.bound == "exposed communication" and p.speedup < 1
    assert "recorded step profile of wide" in p.sources["exposed communication"]
    assert "measured: DDP with world size 1 over the plain step" in p.sources["wrapper"]
    assert p.step.term("wrapper").basis == "measured"
    # Horovod: its host cost measured on one worker with the hooks on, at the default cycle, so the
    # cycle's wait is inside it and none is added
    h = pr.predict("cnn", step_ms=2.0, batch=512, framework="horovod")
    hooks = wrapper_cost.measured("horovod")
    assert hooks.basis == "measured" and hooks.cycle_s == pytest.approx(1e-3)
    assert h.wrapper_s > 0 and h.wrapper_s == pytest.approx(hooks.total_s(len(h.step.buckets)))
    assert "gradient hooks on" in h.sources["wrapper"]
    assert h.step.term("cycle wait").seconds == 0


def test_horovod_fusion_and_cycle_by_hand():
    # mlp 512-1024-512 (2,099,200 + 2,101,248 B) fits one 128 MiB fusion buffer: one all-reduce of
    # 4,200,448 B at alpha 0.1 ms, beta 2.0992e9 B/s = 0.1 + 2.000976 ms, after half a 1 ms cycle: step 3 ms +
    # 0.5 ms + 2.100976 ms = 5.600976 ms, nothing hidden; speedup 2 x 3 / 5.600976.
    p = pr.predict(mlp=[512, 1024, 512], step_ms=3.0, batch=32, gpus=2, framework="horovod",
                   fits={"default": AlphaBeta(1e-4, 2.0992e9)}, wrapper=Overheads())
    assert [b.nbytes for b in p.step.buckets] == [4_200_448]
    assert p.step.comm_s == pytest.approx(0.1e-3 + 4_200_448 / 2.0992e9)
    assert p.exposed_comm_s == pytest.approx(0.5e-3 + p.step.comm_s) and p.step.hidden_comm_s == 0
    assert p.speedup == pytest.approx(6.0 / (3.0 + 0.5 + 2.100976))
    d = p.to_dict()
    assert d["cycle_wait_ms"] == pytest.approx(0.5)
    assert {t["name"] for t in d["terms"]} >= {"one-GPU step", "wrapper", "all-reduce", "cycle wait",
                                               "exposed communication", "grows with the batch"}


def test_measure_times_the_step_on_this_machine():
    pytest.importorskip("torch")
    p = pr.predict(mlp=[64, 32, 10], measure=True, global_batch=16, fits={"default": AlphaBeta(1e-5, 1e9)},
                   wrapper=Overheads())
    assert p.one_gpu_step_s > 0 and p.compute_s > 0
    assert p.sources["one GPU"].startswith("measured now") and "batch 8" in p.sources["compute"]


# ----------------------------------------------------------------------------- the command
def test_the_command_prints_the_terms_and_the_speedup(tmp_path, capsys):
    f = _sweep_file(tmp_path, 10e-6, 1e9)
    assert pr.cli(["--mlp", "100,100,10", "--step-ms", "1", "--batch", "64", "--gpus", "4", "--fits", f]) == 0
    out = capsys.readouterr().out
    for word in ("compute", "exposed communication", "wrapper", "speedup", "bound by"):
        assert word in out


def test_the_command_json_has_speedup_step_and_terms(tmp_path, capsys):
    f = _sweep_file(tmp_path, 10e-6, 1e9)
    assert pr.cli(["--mlp", "100,100,10", "--step-ms", "1", "--batch", "64", "--gpus", "4", "--fits", f,
                   "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    for key in ("speedup", "step_ms", "compute_ms", "exposed_comm_ms", "wrapper_ms", "bound", "sources", "terms"):
        assert key in obj
    assert all(t["source"] and t["basis"] for t in obj["terms"])
    assert next(t for t in obj["terms"] if t["name"] == "grows with the batch")["basis"] == "assumed"
    assert obj["step_ms"] == pytest.approx(obj["compute_ms"] + obj["exposed_comm_ms"] + obj["wrapper_ms"])
    assert obj["exposed_comm_ms"] == pytest.approx((10e-6 + 44_440 * 1.5 / 1e9) * 1e3, rel=1e-6)
    assert obj["speedup"] == pytest.approx(4 * 1.0 / obj["step_ms"])


def test_the_wait_for_the_slower_rank_is_a_term_of_its_own_when_given(tmp_path, capsys):
    f = _sweep_file(tmp_path, 10e-6, 1e9)
    argv = ["--mlp", "100,100,10", "--step-ms", "1", "--batch", "64", "--fits", f, "--json"]
    assert pr.cli(argv) == 0
    plain = json.loads(capsys.readouterr().out)
    assert plain["wait_ms"] == 0 and "not included" in plain["sources"]["slower rank"]
    assert pr.cli(argv + ["--wait-ms", "0.25"]) == 0
    obj = json.loads(capsys.readouterr().out)
    # a serial step: the wait adds to it, beside the wrapper, which stays as it was
    assert obj["wait_ms"] == pytest.approx(0.25) and obj["step_ms"] == pytest.approx(plain["step_ms"] + 0.25)
    assert obj["wrapper_ms"] == pytest.approx(plain["wrapper_ms"])
    assert obj["step_ms"] == pytest.approx(obj["compute_ms"] + obj["exposed_comm_ms"] + obj["wrapper_ms"]
                                           + obj["wait_ms"])
    t = next(t for t in obj["terms"] if t["name"] == "slower rank")
    assert (t["ms"], t["basis"], t["source"]) == (pytest.approx(0.25), "given", "--wait-ms")
    p = pr.predict(mlp=(100, 100, 10), step_ms=1, batch=64, fits=f, wait_ms=0.25, wait_source="from step times")
    assert p.step.term("slower rank").basis == "measured" and p.sources["slower rank"] == "from step times"


def test_ddlab_dispatches_predict(capsys):
    from ddlab import cli
    assert "predict" in cli.COMMANDS
    assert cli.main(["predict", "--model", "cnn", "--step-ms", "2", "--batch", "512", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["gpus"] == 2


@pytest.mark.parametrize("argv,message", [
    (["--model", "resnet", "--step-ms", "1", "--batch", "4"], "unknown model 'resnet'"),
    (["--model", "cnn", "--step-ms", "1", "--batch", "4", "--path", "nvlink"], "unknown path 'nvlink'"),
    (["--mlp", "847,2x6,1", "--step-ms", "1", "--batch", "4"], "layer widths are whole numbers"),
    (["--mlp", "847,256.5,1", "--step-ms", "1", "--batch", "4"], "layer widths are whole numbers"),
    (["--model", "cnn", "--step-ms", "1", "--batch", "4", "--gpus", "1"], "--gpus must be 2 or more"),
    (["--model", "cnn", "--step-ms", "1", "--batch", "4", "--fits", "OTHER"], "not a sweep file"),
    (["--model", "cnn", "--step-ms", "1", "--batch", "4", "--fits", "nosuch"], "no recorded all-reduce sweeps"),
    (["--model", "cnn", "--batch", "4"], "--step-ms"),
    (["--model", "cnn", "--step-ms", "1", "--global-batch", "5"], "does not split evenly"),
    (["--model", "cnn", "--step-ms", "-1", "--batch", "4"], "positive number of milliseconds"),
    (["--params", "6.9M", "--step-ms", "1", "--batch", "4"], "--layers"),
    (["--params", "6.9M", "--layers", "3", "--measure", "--batch", "4"], "--measure needs --model or --mlp"),
    (["--model", "cnn", "--step-ms", "1", "--batch", "4", "--wait-ms", "-0.1"], "--wait-ms must be a number"),
])
def test_bad_input_gets_one_message_and_status_2(argv, message, tmp_path, capsys):
    other = tmp_path / "p2p.json"
    other.write_text(json.dumps({"kind": "ddlab.p2p", "matrix": []}))
    argv = [str(other) if a == "OTHER" else a for a in argv]
    assert pr.cli(argv) == 2
    cap = capsys.readouterr()
    err = cap.err.strip()
    assert cap.out == "" and len(err.splitlines()) == 1 and err.startswith("ddlab predict: ")
    assert message in err and "Traceback" not in err


def test_the_function_raises_a_value_error_naming_the_input():
    with pytest.raises(ValueError, match="give the model one way"):
        pr.predict("cnn", mlp=[1, 2], step_ms=1, batch=4)
    with pytest.raises(ValueError, match="unknown framework"):
        pr.predict("cnn", step_ms=1, batch=4, framework="deepspeed")
    with pytest.raises(ValueError, match="unknown dtype"):
        pr.predict("cnn", step_ms=1, batch=4, dtype="fp8")
    with pytest.raises(ValueError, match="no fit for path 'shm'"):
        pr.predict("cnn", step_ms=1, batch=4, path="shm", fits={"default": AlphaBeta(1e-5, 1e9)})


@pytest.mark.parametrize("framework,added", [("ddp", False), ("horovod", True)])
def test_step_has_wrapper_adds_nothing_for_ddp_and_horovods_cost_for_horovod(tmp_path, capsys, framework, added):
    """A one-GPU step that ran DDP with world size 1 holds DDP's cost; Horovod has no hooks at size 1."""
    f = _sweep_file(tmp_path, 10e-6, 1e9)
    args = ["--mlp", "100,100,10", "--step-ms", "1", "--batch", "64", "--fits", f, "--framework", framework, "--json"]
    assert pr.cli(args) == 0
    plain = json.loads(capsys.readouterr().out)
    assert pr.cli(args + ["--step-has-wrapper"]) == 0
    inside = json.loads(capsys.readouterr().out)
    if added:     # Horovod: whatever its prediction holds for the wrapper, the flag leaves it as it is
        assert inside["wrapper_ms"] == pytest.approx(plain["wrapper_ms"]) and inside["step_ms"] == plain["step_ms"]
    else:         # DDP: the measured per-step cost is in the given step, so none is added
        assert plain["wrapper_ms"] > 0 and inside["wrapper_ms"] == 0
        assert inside["step_ms"] == pytest.approx(plain["step_ms"] - plain["wrapper_ms"])
    # the speedup divides by the plain one-GPU step either way: the given step less DDP's one-worker cost
    # (the cost the plain prediction added on two GPUs), or for Horovod the given step itself
    plain_step = inside["one_gpu_step_ms"] - (0 if added else plain["wrapper_ms"])
    assert inside["plain_step_ms"] == pytest.approx(plain_step) and plain["plain_step_ms"] == plain["one_gpu_step_ms"]
    assert inside["speedup"] == pytest.approx(2 * inside["plain_step_ms"] / inside["step_ms"])
