"""ddlab.measure.collectives_run: a sweep's arguments checked before launching; real 2-process gloo
runs on CPU (ddlab.measure.collectives_worker), validation; the level sweep."""
import pytest

from _sweep_checks import QUICK, check_rows
from ddlab.base import worker_report
from ddlab.measure import collectives, collectives_run
from ddlab.system import frameworks


@pytest.mark.parametrize("kwargs, match", [
    (dict(backend="gloo", path="shm"), "only path='default'"),
    (dict(backend="gloo", nproc=1), "nproc >= 2"),
    (dict(backend="gloo", op="all_to_all"), "unknown collective"),
    (dict(backend="gloo", dtype="int8"), "unknown dtype"),
    (dict(backend="gloo", sizes=[6]), "multiples of 4"),
    (dict(backend="gloo", op="all_gather", sizes=[4]), "multiples of 8"),
    (dict(backend="gloo", iters=0), "iters"),
    (dict(backend="mpi"), "backend"),
    (dict(backend="gloo", graph=True), "nccl backend"),
])
def test_sweep_rejects_bad_arguments_before_launching(kwargs, match):
    with pytest.raises(ValueError, match=match):
        collectives_run.sweep(**kwargs)


def test_nccl_needs_two_gpus(monkeypatch):
    monkeypatch.setattr(frameworks, "gpu_count", lambda framework="torch": 1)
    with pytest.raises(ValueError, match="at least 2 GPUs"):
        collectives_run.sweep(backend="nccl")


@pytest.mark.slow
def test_gloo_all_gather_sweep():
    res = collectives_run.sweep(op="all_gather", sizes=[8, 1024, 16384], **QUICK)
    assert [r["bytes"] for r in res.rows] == [8, 1024, 16384]
    check_rows(res, "all_gather", 2)
    assert res.provenance["command"].startswith("ddlab.measure.collectives_run.sweep(op='all_gather', backend='gloo'")
    assert res.table().splitlines()[0].endswith("out-of-place")


@pytest.mark.slow
def test_an_isolated_sweep_times_each_call_alone():
    """isolated=True: each call after a barrier, timed alone; the row is the median over the calls of
    the shortest rank's time, beside the median of the longest."""
    res = collectives_run.sweep(sizes=[1024, 65536], isolated=True, **QUICK)
    check_rows(res, "all_reduce", 2)
    assert all(r["isolated"] for r in res.rows)
    assert res.meta["timing"].endswith(", each call alone")
    assert res.provenance["command"].endswith("isolated=True)")
    plain = collectives_run.sweep(sizes=[1024], **QUICK)
    assert "isolated" not in plain.rows[0] and "isolated" not in plain.provenance["command"]


@pytest.mark.slow
def test_wrong_result_is_caught():
    # reduce-scatter, 64 bytes on 2 ranks: 8 floats per rank; the last rank's element 4 is
    # corrupted after the call. The message names the rank, the size and the first wrong index,
    # and "1 of 8" shows that every other element (and rank 0's whole result) checked out.
    with pytest.raises(collectives.CollectiveValidationError) as info:
        collectives_run.sweep(op="reduce_scatter", sizes=[64], _inject_error=True, **QUICK)
    msg = str(info.value)
    assert msg.startswith("reduce_scatter returned wrong values, so no bandwidth is reported")
    assert "rank 1 of 2, 64 bytes (8 float per call): first wrong element at index 4" in msg
    # rank 1 receives global elements 8..15, summed over ranks: ((8 + 4) % 4093 + 1) * (1 + 2) = 39
    assert "got 40.0, expected 39.0 (1 of 8 elements wrong)" in msg
    assert "rank 0" not in msg


def test_validation_failures_are_read_from_the_workers_reports_by_rank():
    bad = [worker_report.encode(collectives.VALIDATION_KIND, rank=r, op="all_reduce", bytes=64,
                                message=f"all_reduce rank {r} of 2: wrong") for r in (1, 0)]
    output = "\n".join(["# all_reduce on 2 ranks (gloo), float32", "[rank1]:" + bad[0],
                        worker_report.encode("smoke", rank=0, check="x", ok=True), bad[1],
                        bad[1][:40],                          # a line cut short by the failure: passed over
                        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError"])
    assert collectives_run.validation_failures(output) == ["all_reduce rank 0 of 2: wrong",
                                                            "all_reduce rank 1 of 2: wrong"]
    assert collectives_run.validation_failures("a crash, no report\n") == []


# ----------------------------------------------------------------------------- level sweep
def test_level_sweep_needs_gpus_and_known_levels(monkeypatch):
    monkeypatch.setattr(frameworks, "gpu_count", lambda framework="torch": 0)
    with pytest.raises(ValueError, match="NCCL_P2P_LEVEL acts only on the P2P transport between GPUs"):
        collectives_run.compare_levels()
    with pytest.raises(ValueError, match="unknown NCCL_P2P_LEVEL 'NODE'"):
        collectives_run.compare_levels(["LOC", "NODE"])


def test_level_sweep_runs_each_level_with_only_that_variable(monkeypatch):
    monkeypatch.setattr(frameworks, "gpu_count", lambda framework="torch": 2)
    seen = []
    monkeypatch.setattr(collectives_run, "sweep", lambda **kw: seen.append(kw) or kw["path"])
    out = collectives_run.compare_levels("loc, nvl,SYS")
    assert out == {"LOC": "LOC", "NVL": "NVL", "SYS": "SYS"}
    assert all(kw["backend"] == "nccl" and kw["nccl_debug"] for kw in seen)
    from ddlab.system import nccl
    assert [nccl.get(kw["path"]).environment()["NCCL_P2P_LEVEL"] for kw in seen] == ["LOC", "NVL", "SYS"]
