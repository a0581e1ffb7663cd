"""ddlab.course.tuning: the tuning flags' arguments and records, the named tunings, and the tuning
comparison (its launches stood in for by FakeLaunches: no GPU needed)."""
import argparse
import importlib.util
import json

import matplotlib
import pytest

matplotlib.use("Agg")

from _experiment_fakes import FakeLaunches, script_result  # noqa: E402
from ddlab.system import nccl  # noqa: E402
from ddlab.base import reference
from ddlab.training import recording, results, runs, runspec
from ddlab.course import tuning
from ddlab.recording import resume
from ddlab.training.runspec import RunSpec, RunSpecError  # noqa: E402


def load_torch_script():
    spec = importlib.util.spec_from_file_location("_fmnist_torch_for_tuning", runspec.SCRIPTS["torch"])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def script():
    return load_torch_script()


def parse(launcher, *flags):
    p = argparse.ArgumentParser()
    p.add_argument("--launcher", default=launcher)
    tuning.add_arguments(p)
    return p.parse_args(list(flags))


# ----------------------------------------------------------------------------- what the flags become
def test_flags_become_ddp_and_horovod_arguments():
    a = parse("ddp", "--bucket-cap-mb", "100", "--grad-as-bucket-view", "--static-graph")
    assert tuning.ddp_kwargs(a) == {"bucket_cap_mb": 100.0, "gradient_as_bucket_view": True, "static_graph": True}
    assert tuning.ddp_kwargs(parse("ddp")) == {}   # nothing given: DDP's own defaults
    h = parse("horovod", "--hvd-fusion-mb", "256", "--hvd-cycle-ms", "0.5", "--accumulate", "3",
              "--hvd-compression", "fp16")
    # bytes as horovodrun's --fusion-threshold-mb writes them (MiB), the cycle in ms
    assert tuning.horovod_env(h) == {"HOROVOD_FUSION_THRESHOLD": str(256 * 1024 * 1024), "HOROVOD_CYCLE_TIME": "0.5"}
    env = {"HOROVOD_CYCLE_TIME": "5"}
    assert tuning.apply_horovod_env(h, env) == tuning.horovod_env(h) and env["HOROVOD_CYCLE_TIME"] == "0.5"

    class FakeHvd:
        class Compression:
            none, fp16 = "none-compressor", "fp16-compressor"
    assert tuning.horovod_optimizer_kwargs(h, FakeHvd) == {"backward_passes_per_step": 3,
                                                           "compression": "fp16-compressor"}
    assert tuning.horovod_optimizer_kwargs(parse("horovod"), FakeHvd)["compression"] == "none-compressor"


def test_config_records_every_option_and_describe_names_the_given_ones():
    a = parse("ddp", "--accumulate", "2", "--comm-hook", "fp16", "--bucket-cap-mb", "50")
    c = tuning.config(a)
    assert set(c) == {"accumulate", "no_sync", "bucket_cap_mb", "gradient_as_bucket_view", "static_graph",
                      "comm_hook", "hvd_compression", "hvd_fusion_mb", "hvd_cycle_ms", "horovod_env"}
    assert (c["accumulate"], c["no_sync"], c["comm_hook"], c["bucket_cap_mb"]) == (2, True, "fp16", 50.0)
    assert c["hvd_compression"] == "none" and c["horovod_env"] == {}
    json.dumps(c)
    assert tuning.describe(a) == "accumulate 2 (no_sync), bucket 50 MB, fp16 comm hook"
    assert tuning.describe(parse("ddp")) == ""
    h = parse("horovod", "--accumulate", "2", "--hvd-cycle-ms", "2")
    assert tuning.config(h)["no_sync"] is False
    assert tuning.describe(h) == "accumulate 2 (backward_passes_per_step), HOROVOD_CYCLE_TIME=2"


def test_graph_problems_name_what_a_captured_step_cannot_hold():
    assert tuning.graph_problems(parse("ddp", "--bucket-cap-mb", "10", "--static-graph")) == []
    problems = tuning.graph_problems(parse("ddp", "--accumulate", "2", "--comm-hook", "fp16"))
    assert len(problems) == 2 and "--accumulate" in problems[0] and "--comm-hook" in problems[1]


def test_bf16_hook_problem_follows_the_torch_build():
    import torch
    problem = tuning.bf16_hook_problem()
    if torch.version.cuda is None and torch.version.hip is None:
        assert "built without CUDA" in problem and "--comm-hook fp16" in problem
    elif torch.distributed.is_nccl_available() and torch.cuda.nccl.version() >= (2, 10):
        assert problem is None


# ----------------------------------------------------------------------------- the named tunings
def test_every_named_tuning_is_a_valid_run_of_its_own_launcher_only(script, monkeypatch):
    """Each tuning's flags pass the script's own checks under its launcher; the flags that
    belong to one launcher are refused by the other (accumulation belongs to both)."""
    monkeypatch.setattr(tuning, "bf16_hook_problem", lambda: None)   # the bf16 hook is a GPU build's
    for launcher, table in tuning.TUNINGS.items():
        assert list(table)[0] == "untuned" and tuning.names(launcher) == list(table)
        other = "horovod" if launcher == "ddp" else "ddp"
        for name, t in table.items():
            assert t.name == name and t.launcher == launcher and t.why
            args = script.parse_args(["--launcher", launcher, "--device", "cpu", *t.flags])
            assert tuning.config(args)["accumulate"] == (2 if "--accumulate" in t.flags else 1)
            own = [f for f in t.flags if f.startswith("--") and f != "--accumulate"]
            if own:
                with pytest.raises(SystemExit, match=f"use it with --launcher {launcher}"):
                    script.parse_args(["--launcher", other, "--device", "cpu", *t.flags])
    assert "--static-graph" not in tuning.TUNINGS["ddp"]["combined + accumulate 2"].flags


def test_a_tuning_changes_the_base_run_as_its_flags_say():
    base = RunSpec.for_device("cuda", "wide", launcher="ddp", workers=2, extra_args=("--lr", "0.002"))
    big = tuning.TUNINGS["ddp"]["batch x2"]
    assert big.spec(base).batch == 1024 and big.flags_text(base) == "--batch-size 1024"
    acc = tuning.TUNINGS["ddp"]["accumulate 2"].spec(base)
    assert acc.batch == 512 and acc.extra_args == ("--lr", "0.002", "--accumulate", "2")
    assert tuning.TUNINGS["ddp"]["untuned"].flags_text(base) == "(none)"
    assert tuning.TUNINGS["horovod"]["fusion 256 MB"].flags_text(base) == "--hvd-fusion-mb 256"
    with pytest.raises(RunSpecError, match="unknown launcher"):
        tuning.names("none")
    table = tuning.tunings_table("horovod")
    assert [r["tuning"] for r in table.rows][:3] == ["untuned", "batch x2", "accumulate 2"]
    assert table.rows[1]["flags"] == "--batch-size 1024" and "Horovod" in table.rows[0]["why"]
    assert "--batch-size 256" in str(tuning.tunings_table("ddp", batch=128))


# ----------------------------------------------------------------------------- the comparison
def _fake(monkeypatch, *outcomes):
    """FakeLaunches that also keeps each launch's number of processes."""
    fake = FakeLaunches(*outcomes)
    fake.nprocs = []

    def run(argv, launcher, nproc, env, timeout, echo, python):
        fake.nprocs.append(nproc)
        return fake(argv, launcher, nproc, env, timeout, echo, python)
    monkeypatch.setattr(runs.launch, "run", run)
    return fake


@pytest.mark.parametrize("nvls, named", [("0", "NCCL default, NVLS off"), (None, "NCCL default")])
def test_the_comparison_names_the_default_path_as_its_runs_had_it(monkeypatch, nvls, named):
    if nvls is None:
        monkeypatch.delenv("NCCL_NVLS_ENABLE", raising=False)
    else:
        monkeypatch.setenv("NCCL_NVLS_ENABLE", nvls)
    _fake(monkeypatch, script_result(100.0), script_result(100.0), script_result(150.0, workers=2,
                                                                                 tuning={"accumulate": 1}))
    base = RunSpec.for_device("cuda", "wide", launcher="ddp", workers=2, repeats=1)
    res = tuning.tuning_comparison(base=base, path="default", tunings=["untuned"])
    assert any(n.startswith(f"two-worker runs on the path {named} (no NCCL variable set by the path)")
               for n in res.notes), res.notes


def test_comparison_runs_the_one_gpu_baseline_and_each_tuning_on_two_workers_interleaved(monkeypatch):
    chosen = ["untuned", "batch x2", "accumulate 2"]
    outcomes = []
    for base, untuned_, big_, acc_ in ((100.0, 150.0, 210.0, 185.0), (100.0, 160.0, 190.0, 175.0)):   # two rounds
        outcomes += [script_result(base), script_result(0.9 * base),     # the plain run, then DDP's one worker
                     script_result(untuned_, workers=2, tuning={"accumulate": 1}),
                     script_result(big_, workers=2, global_batch=2048), script_result(acc_, workers=2, global_batch=2048)]
    fake = _fake(monkeypatch, *outcomes)
    base = RunSpec.for_device("cuda", "wide", launcher="ddp", workers=2, repeats=2)
    res = tuning.tuning_comparison(base=base, path="shm", tunings=chosen)
    assert len(fake.argvs) == 10 and len(res.runs) == 10   # every configuration spec.repeats (2) times
    assert [r["tuning"] for r in res.rows] == [tuning.PLAIN, tuning.BASELINE] + chosen
    plain, baseline, untuned, big, acc = res.rows
    assert plain["workers"] == 1 and plain["path"] == "plain" and plain["speedup"] == 1.0
    assert baseline["workers"] == 1 and baseline["path"] == "1 worker" and baseline["speedup"] == pytest.approx(0.9)
    assert untuned["images_per_s"] == 155.0 and untuned["speedup"] == pytest.approx(1.55)
    assert (untuned["speedup_min"], untuned["speedup_max"]) == (1.5, 1.6)
    assert big["flags"] == "--batch-size 1024" and big["speedup"] == pytest.approx(2.0) and big["global_batch"] == 2048
    assert big["above_linear"] is False and acc["flags"] == "--accumulate 2"
    assert untuned["tuning_config"] == {"accumulate": 1} and untuned["why"]
    # the argv of each launch, round by round: the plain run (no wrapper) and the wrapper's one worker, then
    # the tunings with their flags on 2 workers
    argvs = fake.argvs
    assert fake.nprocs == [1, 1, 2, 2, 2] * 2
    assert [argvs[i][argvs[i].index("--launcher") + 1] for i in (0, 1, 5, 6)] == ["none", "ddp"] * 2
    assert all("--accumulate" not in argvs[i] and argvs[i][argvs[i].index("--batch-size") + 1] == "512"
               for i in (0, 1, 2, 5, 6, 7))
    assert [argvs[i][argvs[i].index("--batch-size") + 1] for i in (3, 8)] == ["1024", "1024"]
    assert all(argvs[i][-4:-2] == ["--accumulate", "2"] for i in (4, 9))
    # the NCCL path's environment for the two-worker runs only
    shm = {k: v for k, v in nccl.get("shm").environment().items() if v is not None}
    assert shm and all(fake.envs[i].get(k) == v for i in (2, 3, 4, 7, 8, 9) for k, v in shm.items())
    assert not any(fake.envs[i].get(k) == v for i in (0, 1, 5, 6) for k, v in shm.items())
    assert res.config["order"] == "interleaved" and res.config["rounds"] == 2
    assert any(n.startswith("the repeats were interleaved in 2 round(s)") for n in res.notes)
    assert res.config["path"] == "shm" and res.config["tunings"] == chosen and res.config["repeats"] == 2
    assert res.config["baseline_images_per_s"] == 100.0
    assert res.spec == base.with_(path="shm") and res.live_default_differences() == {}
    assert any(n.startswith("two-worker runs on the path shm (NCCL_P2P_LEVEL=LOC") for n in res.notes), res.notes
    assert any(n.startswith("'batch x2', 'accumulate 2' process more images") for n in res.notes)
    text = res.table()
    assert "communication tuning: torch ddp, model wide" in text and "NCCL path shm" in text
    assert "155 (150-160)" in text and "1.55x" in text and "--batch-size 1024" in text
    assert "ranks agree" in text.splitlines()[1]
    assert len(res.plot().patches) == 5
    back = results.ExperimentResult.from_dict(json.loads(json.dumps(res.to_dict())))
    assert back.rows == res.rows and back.table() == text


def test_the_result_so_far_is_handed_out_after_each_round_but_the_last(monkeypatch):
    rounds = [[script_result(100.0), script_result(100.0), script_result(150.0, workers=2),
               script_result(160.0, workers=2)]] * 2
    _fake(monkeypatch, *rounds[0], *rounds[1], script_result(100.0), script_result(100.0),
          script_result(150.0, workers=2), "a worker crashed")
    monkeypatch.setattr(tuning, "bf16_hook_problem", lambda: "this PyTorch has no bf16 hook")
    seen = []
    base = RunSpec.for_device("cuda", "wide", launcher="ddp", workers=2, repeats=3)
    res = tuning.tuning_comparison(base=base, tunings=["untuned", "bf16 hook", "bucket 100 MB"], partial=seen.append)
    assert [len(p.runs) for p in seen] == [4, 8]          # after rounds 1 and 2, not after the last
    for done, p in enumerate(seen, 1):
        assert [r["tuning"] for r in p.rows] == [tuning.PLAIN, tuning.BASELINE, "untuned", "bf16 hook",
                                                 "bucket 100 MB"]
        assert p.rows[3].get("not_run") and p.config["rounds"] == done
        assert f"partial: {done} of 3 rounds run, so each row has {done} repeat(s)" in p.notes
        assert p.title().endswith(f", {done} of 3 repeats (partial)")   # the title counts what ran
    assert seen[1].rows[4]["images_per_s"] == 160.0 and seen[1].rows[4]["repeats"] == 2
    # bucket 100 MB failed in the last round: the whole result has its failure row and no partial note
    assert "launch failed" in res.rows[-1]["error"] and not any(n.startswith("partial:") for n in res.notes)
    assert res.rows[2]["repeats"] == 3 and len(res.runs) == 9 and res.title().endswith(", 3 repeats")
    back = results.ExperimentResult.from_dict(json.loads(json.dumps(seen[0].to_dict())))
    assert back.rows == seen[0].rows


def _cut_after_one_round(monkeypatch, base):
    """The result a comparison of ``base`` (3 repeats, untuned and bucket 100 MB) hands out after
    its first round, as a recording of it reads back."""
    _fake(monkeypatch, *[script_result(100.0 + i, workers=w) for i in range(3) for w in (1, 1, 2, 2)])
    seen = []
    tuning.tuning_comparison(base=base, path="shm", tunings=["untuned", "bucket 100 MB"], partial=seen.append)
    assert seen[0].config["rounds"] == 1
    return results.ExperimentResult.from_dict(json.loads(json.dumps(seen[0].to_dict())), source="recorded")


def test_a_partial_comparison_is_resumed_with_the_rounds_left(monkeypatch):
    base = RunSpec.for_device("cuda", "wide", launcher="ddp", workers=2, repeats=3)
    cut = _cut_after_one_round(monkeypatch, base)
    kept = {r["tuning"]: r["images_per_s"] for r in cut.rows}
    fake = _fake(monkeypatch, script_result(95.0), script_result(90.0), script_result(140.0, workers=2),
                 script_result(130.0, workers=2), script_result(105.0), script_result(110.0),
                 script_result(160.0, workers=2), script_result(170.0, workers=2))
    seen = []
    res = tuning.tuning_comparison(base=base, path="shm", tunings=["untuned", "bucket 100 MB"],
                                   resume=resume.from_partial(cut),
                                   partial=seen.append)
    assert fake.nprocs == [1, 1, 2, 2] * 2                    # rounds 2 and 3 only
    assert [p.config["rounds"] for p in seen] == [2] and res.config["rounds"] == 3
    assert all(r["repeats"] == 3 for r in res.rows) and len(res.runs) == 12
    plain, baseline, untuned, bucket = res.rows
    assert plain["images_per_s_runs"] == [kept[tuning.PLAIN], 95.0, 105.0]
    assert baseline["images_per_s_runs"] == [kept[tuning.BASELINE], 90.0, 110.0]   # round 1's run kept, first
    assert untuned["images_per_s_runs"] == [kept["untuned"], 140.0, 160.0] and bucket["images_per_s"] == 130.0
    assert not any(n.startswith("partial:") for n in res.notes)
    assert any(n.startswith("round 1 was resumed from a partial recording of this comparison made "
                            + cut.provenance["date"]) for n in res.notes)


def test_a_comparison_is_resumed_only_from_a_partial_one_of_the_same_run_and_machine(monkeypatch):
    base = RunSpec.for_device("cuda", "wide", launcher="ddp", workers=2, repeats=3)
    cut = _cut_after_one_round(monkeypatch, base)
    spec, chosen = base.with_(path="shm"), ["untuned", "bucket 100 MB"]
    assert resume.problem(cut, spec, chosen) is None
    assert "other tunings" in resume.problem(cut, spec, ["untuned"])
    assert "another run" in resume.problem(cut, base.with_(path="socket"), chosen)
    assert "another run" in resume.problem(cut, spec.with_(batch=256), chosen)
    done = results.ExperimentResult.from_dict(dict(cut.to_dict(), config=dict(cut.config, rounds=3)))
    assert resume.problem(done, spec, chosen) == "it is not partial: 3 of 3 rounds ran"
    other = results.ExperimentResult.from_dict(dict(cut.to_dict(), provenance=dict(cut.provenance, torch="0.1")))
    assert resume.problem(other, spec, chosen).startswith("it was recorded on another machine or software: "
                                                                 "torch '0.1' there")
    with pytest.raises(RunSpecError, match="cannot resume the tuning comparison: it compares other tunings"):
        tuning.tuning_comparison(base=base, path="shm", tunings=["untuned"], resume=resume.from_partial(cut))


def test_a_failed_tuning_gets_its_row_and_the_others_still_run(monkeypatch):
    fake = _fake(monkeypatch, script_result(100.0), script_result(100.0), "a worker crashed",
                 script_result(120.0, workers=2))
    base = RunSpec.for_device("cuda", "wide", launcher="horovod", workers=2)
    res = tuning.tuning_comparison(base=base, tunings=["fp16 compression", "cycle 0.5 ms"])
    assert len(fake.argvs) == 4
    failed, ok = res.rows[2], res.rows[3]
    assert failed["tuning"] == "fp16 compression" and "launch failed" in failed["error"]
    assert failed["flags"] == "--hvd-compression fp16"
    assert ok["speedup"] == pytest.approx(1.2) and "--hvd-cycle-ms" in fake.argvs[3]
    assert any("'fp16 compression' failed" in n for n in res.notes)
    assert "failed:" in res.table()


def test_a_failed_baseline_costs_the_speedups_only(monkeypatch):
    # the plain run fails: nothing stands in for it (not the wrapper's one-worker run)
    _fake(monkeypatch, "timeout\nstuck", script_result(100.0), script_result(150.0, workers=2))
    res = tuning.tuning_comparison(base=RunSpec.for_device("cuda", "wide", launcher="ddp", workers=2),
                                   tunings=["untuned"])
    assert "error" in res.rows[0] and res.rows[1]["speedup"] is None and res.rows[2]["speedup"] is None
    assert res.config["baseline_images_per_s"] is None and any("no speedups" in n for n in res.notes)
    _fake(monkeypatch, "crash", "crash", "crash")
    with pytest.raises(runs.ExperimentError, match="every run of the tuning comparison failed"):
        tuning.tuning_comparison(base=RunSpec.for_device("cuda", "wide", launcher="ddp", workers=2),
                                 tunings=["untuned"])


def test_on_cpu_the_path_is_default_and_an_impossible_hook_is_not_launched(monkeypatch):
    monkeypatch.setattr(tuning, "bf16_hook_problem", lambda: "no bf16 hook in this build")
    fake = _fake(monkeypatch, script_result(10.0, device="cpu"), script_result(10.0, device="cpu"),
                 script_result(15.0, workers=2, device="cpu"))
    res = tuning.tuning_comparison(model="mlp-small", launcher="ddp", path="shm", device="cpu", repeats=1,
                                   tunings=["bf16 hook", "static graph"])
    assert len(fake.argvs) == 3 and "--static-graph" in fake.argvs[2]
    assert fake.argvs[2][fake.argvs[2].index("--device") + 1] == "cpu"
    assert res.config["path"] is None and any("'shm' does not apply" in n for n in res.notes)
    assert "NCCL path" not in res.title()            # gloo on CPU: the title names no NCCL path
    hook = res.rows[2]
    assert hook["tuning"] == "bf16 hook" and hook["error"] == "no bf16 hook in this build" and hook["not_run"]
    assert "not run here ('bf16 hook'): no bf16 hook in this build" in res.notes
    assert "not run: no bf16 hook" in res.table() and "failed" not in res.table()
    assert res.rows[3]["speedup"] == pytest.approx(1.5)
    # CPU sizes: what RunSpec.for_device("cpu", model) gives
    assert res.spec.sizes() == RunSpec.for_device("cpu", "mlp-small").sizes()


def test_bad_requests_are_refused_before_any_launch(monkeypatch):
    fake = _fake(monkeypatch)
    with pytest.raises(RunSpecError, match="unknown ddp tuning 'fp16 compression'"):
        tuning.tuning_comparison(device="cpu", tunings=["fp16 compression"])
    with pytest.raises(RunSpecError, match="unknown launcher 'none'"):
        tuning.tuning_comparison(device="cpu", launcher="none")
    with pytest.raises(RunSpecError, match="unknown NCCL path"):
        tuning.tuning_comparison(device="cpu", path="carrier pigeon")
    assert fake.argvs == []


def test_the_recording_is_found_by_launcher_model_and_path(tmp_path, monkeypatch):
    monkeypatch.setattr(reference, "REFERENCE_DIR", str(tmp_path))
    _fake(monkeypatch, script_result(100.0), script_result(100.0), script_result(150.0, workers=2))
    res = tuning.tuning_comparison(base=RunSpec.for_device("cuda", "wide", launcher="ddp", workers=2),
                                   path="shm", tunings=["untuned"])
    name = tuning.reference_name("ddp", "wide", "shm")
    assert name == "tuning-torch-ddp-wide-shm"
    recording.save_reference(res, name)
    back = tuning.recorded("ddp", "wide", "shm")
    assert back.source == "recorded" and back.rows == res.rows
    with pytest.raises(reference.ReferenceMissing):
        tuning.recorded("horovod", "wide", "shm")
