"""ddlab.measure.collectives: the sweeps kept under reference/allreduce/, per path and per level."""
import pytest

from ddlab.measure import collectives

ROW = {"bytes": 1024, "count": 256, "time_us": 1.0, "algbw_gbps": 1.0, "busbw_gbps": 1.0, "iters": 3}


def test_recorded_sweeps_load_as_recorded(tmp_path, monkeypatch):
    """A sweep file kept under reference/allreduce/ loads with source "recorded", one sweep per path."""
    from ddlab.base import reference
    monkeypatch.setattr(reference, "REFERENCE_DIR", str(tmp_path / "reference"))
    sweep = collectives.SweepResult(op="all_reduce", backend="gloo", path="default", env={}, nproc=2, rows=[ROW],
                                    provenance={"machine": "test"})
    reference.save("allreduce", "cpu_test", collectives.results_to_json([sweep]))
    rec = collectives.load_recorded("cpu_test")
    assert list(rec) == ["default"] and rec["default"].source == "recorded"
    assert rec["default"].rows == sweep.rows
    assert "[recorded]" in rec["default"].table().splitlines()[0]
    with pytest.raises(ValueError, match="no all_gather"):
        collectives.load_recorded("cpu_test", op="all_gather")


def test_recorded_level_sweep_round_trip(tmp_path, monkeypatch):
    from ddlab.base import reference
    monkeypatch.setattr(reference, "REFERENCE_DIR", str(tmp_path))
    sweeps = [collectives.SweepResult(op="all_reduce", backend="nccl", path="default", env={"NCCL_P2P_LEVEL": lv},
                                      nproc=2, rows=[ROW], provenance={"machine": "test"}) for lv in ("SYS", "LOC")]
    reference.save("allreduce", "levels-test", collectives.results_to_json(sweeps))
    loaded = collectives.load_recorded_levels("levels-test")
    assert list(loaded) == ["LOC", "SYS"] and all(r.source == "recorded" for r in loaded.values())
    paths = collectives.SweepResult(op="all_reduce", backend="nccl", path="default", env={}, nproc=2, rows=[ROW],
                                    provenance={})
    reference.save("allreduce", "paths-test", collectives.results_to_json([paths]))
    with pytest.raises(ValueError, match="not a level sweep"):
        collectives.load_recorded_levels("paths-test")
