"""Collective sweeps: formulas, validation, table, JSON, CLI; real 2-process gloo runs on CPU."""
import contextlib
import io
import json
import os

import matplotlib
import pytest

matplotlib.use("Agg")

from ddlab.measure import collectives as coll  # noqa: E402

# Small and quick: the real runs below use sizes up to 64 KiB and a few iterations.
QUICK = dict(backend="gloo", nproc=2, iters=3, warmup=1, timeout=120)


# ----------------------------------------------------------------------------- pure functions
# parse_size and format_size are ddlab.base.units' (tests/test_units.py tests them).
def test_sizes_are_read_and_written_by_units():
    from ddlab.base import units
    assert coll.parse_size is units.parse_size and coll.format_size is units.format_bytes


def test_bus_factor_matches_nccl_tests():
    assert coll.bus_factor("all_reduce", 2) == 1.0
    assert coll.bus_factor("all_reduce", 8) == 1.75
    assert coll.bus_factor("all_gather", 4) == 0.75
    assert coll.bus_factor("reduce_scatter", 2) == 0.5
    alg, bus = coll.bandwidths("all_reduce", 1 << 30, 1e-2, 4)
    assert alg == pytest.approx((1 << 30) / 1e-2 / 1e9)
    assert bus == pytest.approx(alg * 1.5)
    with pytest.raises(ValueError, match="unknown collective"):
        coll.bus_factor("broadcast_all", 2)


def test_message_sizes():
    assert coll.message_sizes("all_reduce", 8, 64, 2) == [8, 16, 32, 64]
    assert coll.message_sizes("all_reduce", 8, 1 << 30, 2)[-1] == 1 << 30
    # all-gather on 4 ranks: whole float32 elements on every rank -> multiples of 16 B
    assert coll.message_sizes("all_gather", 8, 64, 4) == [16, 32, 64]
    assert coll.message_sizes("reduce_scatter", 8, 100, 2, factor=4) == [8, 32]
    with pytest.raises(ValueError, match="factor"):
        coll.message_sizes("all_reduce", 8, 64, 2, factor=1)
    with pytest.raises(ValueError, match="min_bytes"):
        coll.message_sizes("all_reduce", 64, 8, 2)


@pytest.mark.parametrize("kwargs, match", [
    (dict(backend="gloo", path="shm"), "only path='default'"),
    (dict(backend="gloo", nproc=1), "nproc >= 2"),
    (dict(backend="gloo", op="all_to_all"), "unknown collective"),
    (dict(backend="gloo", dtype="int8"), "unknown dtype"),
    (dict(backend="gloo", sizes=[6]), "multiples of 4"),
    (dict(backend="gloo", op="all_gather", sizes=[4]), "multiples of 8"),
    (dict(backend="gloo", iters=0), "iters"),
    (dict(backend="mpi"), "backend"),
])
def test_sweep_rejects_bad_arguments_before_launching(kwargs, match):
    with pytest.raises(ValueError, match=match):
        coll.sweep(**kwargs)


def test_nccl_needs_two_gpus(monkeypatch):
    monkeypatch.setattr(coll, "_gpu_count", lambda: 1)
    with pytest.raises(ValueError, match="at least 2 GPUs"):
        coll.sweep(backend="nccl")


def test_cli_plan_per_machine():
    backend, paths, notes = coll.cli_plan(0, "auto", ["default", "shm", "socket"])
    assert backend == "gloo" and paths == ["default"]
    assert "No GPU" in notes[0] and "gloo ignores them" in notes[1]
    backend, paths, notes = coll.cli_plan(1, "auto", None)
    assert backend == "gloo" and paths == ["default"] and "needs at least 2 GPUs" in notes[0]
    backend, paths, notes = coll.cli_plan(2, "auto", None)
    assert backend == "nccl" and paths == ["default", "shm", "socket"] and notes == []
    assert coll.cli_plan(8, "auto", ["socket"])[1] == ["socket"]
    with pytest.raises(ValueError, match="at least 2 GPUs"):
        coll.cli_plan(1, "nccl", None)
    assert coll.cli_plan(2, "auto", ["p2p", "tcp"])[1] == ["default", "socket"]     # aliases of ddlab.system.nccl
    with pytest.raises(ValueError, match="unknown NCCL path"):
        coll.cli_plan(2, "auto", ["p2q"])


# ----------------------------------------------------------------------------- real gloo runs
@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    """One real run of ``ddlab allreduce`` on a machine treated as GPU-less: gloo, 2 CPU processes.
    (Most tests below read this one sweep: every launch costs seconds on a 2-core machine.)"""
    out = tmp_path_factory.mktemp("cli") / "sweep.json"
    argv = ["--paths", "default,shm", "--max-bytes", "64K", "--iters", str(QUICK["iters"]), "--warmup", "1",
            "--json", "--out", str(out)]
    so, se = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(so), contextlib.redirect_stderr(se):
        mp.setattr(coll, "_gpu_count", lambda: 0)
        rc = coll.cli(argv)
    return {"rc": rc, "stdout": so.getvalue(), "stderr": se.getvalue(), "out": str(out)}


@pytest.fixture(scope="module")
def ar(cli_run):
    assert cli_run["rc"] == 0, cli_run["stderr"]
    [res] = coll.read_json(cli_run["out"])
    return res


def _check_rows(res, op, n):
    assert res.rows, "no rows"
    esize = 4
    for r in res.rows:
        assert r["time_us"] > 0 and r["time_us_max"] >= r["time_us"] * (1 - 1e-12)
        # algbw = bytes / time, in 10^9 B/s; busbw = algbw * nccl-tests' factor.
        assert r["algbw_gbps"] == pytest.approx(r["bytes"] / (r["time_us"] * 1e-6) / 1e9, rel=1e-9)
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * coll.bus_factor(op, n), rel=1e-12)
        per_call = r["bytes"] // esize if op == "all_reduce" else r["bytes"] // (esize * n)
        assert r["count"] == per_call
        assert r["iters"] == QUICK["iters"]


@pytest.mark.slow
def test_gloo_all_reduce_sweep(ar):
    assert (ar.op, ar.backend, ar.path, ar.nproc, ar.source) == ("all_reduce", "gloo", "default", 2, "live")
    assert [r["bytes"] for r in ar.rows] == coll.message_sizes("all_reduce", 8, 65536, 2)
    _check_rows(ar, "all_reduce", 2)
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
def test_json_round_trip(ar, tmp_path, monkeypatch):
    again = coll.SweepResult.from_dict(json.loads(json.dumps(ar.to_dict())))
    assert again.to_dict() == ar.to_dict()
    path = coll.write_json([ar], str(tmp_path / "r.json"))
    [back] = coll.read_json(path)
    assert back.rows == ar.rows and back.provenance == ar.provenance
    # As a recorded reference: saved with provenance, loaded as "recorded".
    from ddlab.base import reference
    monkeypatch.setattr(reference, "REFERENCE_DIR", str(tmp_path / "reference"))
    coll.save_recorded("cpu_test", [ar])
    rec = coll.load_recorded("cpu_test")
    assert list(rec) == ["default"] and rec["default"].source == "recorded"
    assert rec["default"].rows == ar.rows
    assert "[recorded]" in rec["default"].table().splitlines()[0]
    with pytest.raises(ValueError, match="no all_gather"):
        coll.load_recorded("cpu_test", op="all_gather")
    with pytest.raises(ValueError, match="not an all-reduce sweep result file"):
        coll.results_from_json({"rows": []})
    with pytest.raises(ValueError, match="missing"):
        coll.SweepResult.from_dict({"op": "all_reduce"})


@pytest.mark.slow
def test_plot_sweep(ar):
    import matplotlib.pyplot as plt
    ax = coll.plot_sweep({"CPU": ar, "again": ar}, metric="busbw")
    assert [ln.get_label() for ln in ax.get_lines()] == ["CPU", "again"]
    assert list(ax.get_lines()[0].get_xdata()) == [r["bytes"] for r in ar.rows]
    assert ax.get_xscale() == "log"
    plt.close(ax.figure)
    ax = coll.plot_sweep(ar, metric="time")
    assert ax.get_yscale() == "log"
    assert list(ax.get_lines()[0].get_ydata()) == [r["time_us"] for r in ar.rows]
    plt.close(ax.figure)
    with pytest.raises(ValueError, match="metric"):
        coll.plot_sweep(ar, metric="latency")


@pytest.mark.slow
def test_gloo_all_gather_sweep():
    res = coll.sweep(op="all_gather", sizes=[8, 1024, 16384], **QUICK)
    assert [r["bytes"] for r in res.rows] == [8, 1024, 16384]
    _check_rows(res, "all_gather", 2)
    assert res.provenance["command"].startswith("ddlab.measure.collectives.sweep(op='all_gather', backend='gloo'")
    assert res.table().splitlines()[0].endswith("out-of-place")


@pytest.mark.slow
def test_wrong_result_is_caught():
    # reduce-scatter, 64 bytes on 2 ranks: 8 floats per rank; the last rank's element 4 is
    # corrupted after the call. The message names the rank, the size and the first wrong index,
    # and "1 of 8" shows that every other element (and rank 0's whole result) checked out.
    with pytest.raises(coll.CollectiveValidationError) as info:
        coll.sweep(op="reduce_scatter", sizes=[64], _inject_error=True, **QUICK)
    msg = str(info.value)
    assert msg.startswith("reduce_scatter returned wrong values, so no bandwidth is reported")
    assert "rank 1 of 2, 64 bytes (8 float per call): first wrong element at index 4" in msg
    # rank 1 receives global elements 8..15, summed over ranks: ((8 + 4) % 4093 + 1) * (1 + 2) = 39
    assert "got 40.0, expected 39.0 (1 of 8 elements wrong)" in msg
    assert "rank 0" not in msg


def test_nccl_log_is_parsed_when_kept():
    import os
    log = open(os.path.join(os.path.dirname(__file__), "fixtures", "nccl", "h200x2_shm.log")).read()
    res = coll.SweepResult(op="all_reduce", backend="nccl", path="shm", env={"NCCL_P2P_LEVEL": "LOC"}, nproc=2,
                           rows=[], provenance={}, nccl_log_text=log)
    counts = res.transport_counts()
    assert counts and set(counts) == {k for k in counts if "SHM" in k.upper()}
    assert coll.SweepResult.from_dict(res.to_dict()).nccl_log_text == log


def test_cli_rejects_bad_size(capsys):
    assert coll.cli(["--max-bytes", "1GB"]) == 2
    assert "ambiguous" in capsys.readouterr().err


def test_summary_is_a_table_of_busbw_per_sweep():
    sweeps = coll.load_recorded("h200x2")
    t = coll.summary(sweeps.values())
    assert [c.heading for c in t.columns][:4] == ["op", "path", "ranks", "busbw at 512 MiB"]
    assert t.column("path") == list(sweeps)
    for row, res in zip(t.rows, sweeps.values()):
        assert row["busbw_at"] == res.row_at(512 << 20)["busbw_gbps"] and row["peak"] == res.peak_busbw()
    lines = str(t).splitlines()
    assert len(lines) == 2 + len(sweeps) and max(len(x) for x in lines) == len(lines[1])
    assert len({x.index("GB/s") for x in lines[2:]}) == 1           # numbers right-aligned
    # a sweep that stops below the asked size says which size its figure is from
    small = coll.summary(sweeps.values(), at_bytes=4 << 30)
    assert "(nearest size)" in str(small)


# ----------------------------------------------------------------------------- level sweep
def test_level_sweep_needs_gpus_and_known_levels(monkeypatch):
    monkeypatch.setattr(coll, "_gpu_count", lambda: 0)
    with pytest.raises(ValueError, match="NCCL_P2P_LEVEL acts only on the P2P transport between GPUs"):
        coll.compare_levels()
    with pytest.raises(ValueError, match="unknown NCCL_P2P_LEVEL 'NODE'"):
        coll.compare_levels(["LOC", "NODE"])


def test_level_sweep_runs_each_level_with_only_that_variable(monkeypatch):
    monkeypatch.setattr(coll, "_gpu_count", lambda: 2)
    seen = []
    monkeypatch.setattr(coll, "sweep", lambda **kw: seen.append(kw) or kw["path"])
    out = coll.compare_levels("loc, nvl,SYS")
    assert out == {"LOC": "LOC", "NVL": "NVL", "SYS": "SYS"}
    assert all(kw["backend"] == "nccl" and kw["nccl_debug"] for kw in seen)
    from ddlab.system import nccl
    assert [nccl.get(kw["path"]).environment()["NCCL_P2P_LEVEL"] for kw in seen] == ["LOC", "NVL", "SYS"]


def test_level_table_names_transport_and_bandwidth():
    import os
    fixtures = os.path.join(os.path.dirname(__file__), "fixtures", "nccl")
    row = {"bytes": 256 << 20, "count": 1, "time_us": 1.0, "algbw_gbps": 12.5, "busbw_gbps": 12.5, "iters": 5}
    make = lambda name: coll.SweepResult(op="all_reduce", backend="nccl", path="default", env={}, nproc=2,  # noqa: E731
                                         rows=[row], provenance={},
                                         nccl_log_text=open(os.path.join(fixtures, name)).read())
    text = str(coll.level_table({"LOC": make("h200x2_shm.log"), "NVL": make("h200x2_default.log")}))
    loc, nvl = text.splitlines()[2:]
    assert loc.startswith("LOC") and "SHM" in loc and "P2P" not in loc and "12.5 GB/s" in loc and "256 MiB" in loc
    assert nvl.startswith("NVL") and "P2P" in nvl
    with pytest.raises(ValueError, match="no level sweep"):
        coll.level_table({})


def test_recorded_level_sweep_round_trip(tmp_path, monkeypatch):
    from ddlab.base import reference
    monkeypatch.setattr(reference, "REFERENCE_DIR", str(tmp_path))
    row = {"bytes": 1024, "count": 256, "time_us": 1.0, "algbw_gbps": 1.0, "busbw_gbps": 1.0, "iters": 3}
    sweeps = [coll.SweepResult(op="all_reduce", backend="nccl", path="default", env={"NCCL_P2P_LEVEL": lv},
                               nproc=2, rows=[row], provenance={"machine": "test"}) for lv in ("SYS", "LOC")]
    coll.save_recorded("levels-test", sweeps)
    loaded = coll.load_recorded_levels("levels-test")
    assert list(loaded) == ["LOC", "SYS"] and all(r.source == "recorded" for r in loaded.values())
    coll.save_recorded("paths-test", [coll.SweepResult(op="all_reduce", backend="nccl", path="default", env={},
                                                       nproc=2, rows=[row], provenance={})])
    with pytest.raises(ValueError, match="not a level sweep"):
        coll.load_recorded_levels("paths-test")
