"""``ddlab allreduce`` (ddlab.measure.collectives_cli): what runs per machine, and one real run on a
machine treated as GPU-less (gloo, 2 CPU processes): its sweep, table and JSON file."""
import contextlib
import io
import json
import os

import pytest

from _sweep_checks import QUICK, check_rows
from ddlab.measure import collectives, collectives_cli
from ddlab.system import frameworks


def test_cli_plan_per_machine():
    backend, paths, notes = collectives_cli.cli_plan(0, "auto", ["default", "shm", "socket"])
    assert backend == "gloo" and paths == ["default"]
    assert "No GPU" in notes[0] and "gloo ignores them" in notes[1]
    backend, paths, notes = collectives_cli.cli_plan(1, "auto", None)
    assert backend == "gloo" and paths == ["default"] and "needs at least 2 GPUs" in notes[0]
    backend, paths, notes = collectives_cli.cli_plan(2, "auto", None)
    assert backend == "nccl" and paths == ["default", "shm", "socket"] and notes == []
    assert collectives_cli.cli_plan(8, "auto", ["socket"])[1] == ["socket"]
    with pytest.raises(ValueError, match="at least 2 GPUs"):
        collectives_cli.cli_plan(1, "nccl", None)
    assert collectives_cli.cli_plan(2, "auto", ["p2p", "tcp"])[1] == ["default", "socket"]   # nccl aliases
    with pytest.raises(ValueError, match="unknown NCCL path"):
        collectives_cli.cli_plan(2, "auto", ["p2q"])


def test_cli_rejects_bad_size(capsys):
    assert collectives_cli.cli(["--max-bytes", "1GB"]) == 2
    assert "ambiguous" in capsys.readouterr().err


# ----------------------------------------------------------------------------- a real gloo run
@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    """One real run of ``ddlab allreduce`` on a machine treated as GPU-less: gloo, 2 CPU processes.
    (Most tests below read this one sweep: every launch costs seconds on a 2-core machine.)"""
    out = tmp_path_factory.mktemp("cli") / "sweep.json"
    argv = ["--paths", "default,shm", "--max-bytes", "64K", "--iters", str(QUICK["iters"]), "--warmup", "1",
            "--json", "--out", str(out)]
    so, se = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(so), contextlib.redirect_stderr(se):
        mp.setattr(frameworks, "gpu_count", lambda framework="torch": 0)
        rc = collectives_cli.cli(argv)
    return {"rc": rc, "stdout": so.getvalue(), "stderr": se.getvalue(), "out": str(out)}


@pytest.fixture(scope="module")
def ar(cli_run):
    assert cli_run["rc"] == 0, cli_run["stderr"]
    [res] = collectives.read_json(cli_run["out"])
    return res


@pytest.mark.slow
def test_gloo_all_reduce_sweep(ar):
    assert (ar.op, ar.backend, ar.path, ar.nproc, ar.source) == ("all_reduce", "gloo", "default", 2, "live")
    assert [r["bytes"] for r in ar.rows] == collectives.message_sizes("all_reduce", 8, 65536, 2)
    check_rows(ar, "all_reduce", 2)
    assert ar.peak_busbw() == max(r["busbw_gbps"] for r in ar.rows)
    assert ar.row_at(60000)["bytes"] == 65536
    assert ar.meta["devices"] == ["cpu", "cpu"] and ar.meta["torch"]
    prov = ar.provenance
    assert prov["command"].startswith("ddlab allreduce")
    # the record holds the NCCL variables the workers saw: here only what the shell had
    assert prov["nccl_env"] == {k: v for k, v in os.environ.items() if k.startswith("NCCL_")
                                or k == "TORCH_SYMM_MEM_DISABLE_MULTICAST"}
    assert ar.nccl_log_text is None and ar.transport_counts() is None


@pytest.mark.slow
def test_table_looks_like_nccl_tests(ar):
    lines = ar.table().splitlines()
    assert lines[0].startswith("# ddlab all_reduce: gloo, 2 ranks")
    head = lines[2].split()
    assert head[1:] == ["size", "count", "type", "redop", "time", "algbw", "busbw", "#wrong"]
    data = [ln for ln in lines if not ln.startswith("#")]
    assert len(data) == len(ar.rows)
    for ln, r in zip(data, ar.rows):
        f = ln.split()
        assert int(f[0]) == r["bytes"] and int(f[1]) == r["count"] and f[2] == "float" and f[3] == "sum"
        assert float(f[6]) == pytest.approx(r["busbw_gbps"], abs=0.006)
        assert f[7] == "0"
    assert lines[-1].startswith("# Peak bus bandwidth")


@pytest.mark.slow
def test_json_round_trip(ar, tmp_path):
    again = collectives.SweepResult.from_dict(json.loads(json.dumps(ar.to_dict())))
    assert again.to_dict() == ar.to_dict()
    path = collectives.write_json([ar], str(tmp_path / "r.json"))
    [back] = collectives.read_json(path)
    assert back.rows == ar.rows and back.provenance == ar.provenance
    with pytest.raises(ValueError, match="not an all-reduce sweep result file"):
        collectives.results_from_json({"rows": []})
    with pytest.raises(ValueError, match="missing"):
        collectives.SweepResult.from_dict({"op": "all_reduce"})
    cut = tmp_path / "cut.json"
    cut.write_text(open(path).read()[:200])
    with pytest.raises(ValueError, match="all-reduce sweep file .*cut.json is truncated or corrupt"):
        collectives.read_json(str(cut))


def test_cli_isolated_asks_the_sweep_to_time_each_call_alone(monkeypatch, capsys):
    seen = []

    def sweep(**kw):
        seen.append(kw["isolated"])
        raise ValueError("stop here")            # reported as a failed path: nothing is launched
    monkeypatch.setattr(frameworks, "gpu_count", lambda framework="torch": 0)
    monkeypatch.setattr(collectives_cli.collectives_run, "sweep", sweep)
    collectives_cli.cli(["--max-bytes", "64K", "--isolated"])
    collectives_cli.cli(["--max-bytes", "64K"])
    assert seen == [True, False]
