"""ddlab.training.results: tables, plots, JSON, repeats (median and spread), the above-linear flag and the
note a recording carries when its run description is not today's live default."""
import json

import matplotlib
import pytest

matplotlib.use("Agg")

from _experiment_fakes import fake_paths_result, script_result  # noqa: E402
from ddlab.training import results  # noqa: E402
from ddlab.training.results import ExperimentResult  # noqa: E402


def test_result_table_plot_and_json_round_trip(tmp_path):
    res = fake_paths_result()
    text = res.table()
    assert "NCCL paths: torch ddp, model wide" in text and "measured now on 2x NVIDIA H200, 2026-11-22" in text
    assert "185" in text and "1.85x" in text and "failed: timed out after 300 s" in text and "note: a note" in text
    ax = res.plot()
    assert len(ax.patches) == 3   # the failed path has no bar
    back = ExperimentResult.from_dict(json.loads(json.dumps(res.to_dict())))
    assert back.rows == res.rows and back.config == res.config and back.provenance == res.provenance
    with pytest.raises(ValueError, match="no 'rows'"):
        ExperimentResult.from_dict({"experiment": "x", "provenance": {}})


def test_repeats_give_the_median_each_value_and_the_spread():
    runs = [script_result(90.0), script_result(110.0, step_time_ms={"median": 2.0, "p10": 1, "p90": 3}),
            script_result(100.0, step_time_ms={"median": 5.0, "p10": 4, "p90": 6})]
    row = results.row_of_repeats(runs)
    assert row["images_per_s"] == 100.0 and row["images_per_s_runs"] == [90.0, 110.0, 100.0]
    assert (row["images_per_s_min"], row["images_per_s_max"], row["repeats"]) == (90.0, 110.0, 3)
    assert row["step_ms_median"] == 5.0            # the other columns come from the median run
    assert results.median_run(runs) == 2
    results.add_speedup(row, 50.0)
    assert (row["speedup"], row["speedup_min"], row["speedup_max"]) == (2.0, 1.8, 2.2)
    assert results.add_speedup(dict(row), None)["speedup"] is None
    res = ExperimentResult("scaling", [dict(row, workers=1, speedup=1.0)], config={"repeats": 3})
    text = res.table()
    assert "images/s median (min-max)" in text and "100 (90-110)" in text and ", 3 repeats" in text
    assert len(res.plot().lines) > 0 or res.plot().collections     # error bars drawn
    with pytest.raises(ValueError, match="no runs"):
        results.row_of_repeats([])


def test_two_workers_faster_than_twice_one_are_flagged_not_hidden():
    res = fake_paths_result()
    res.rows[1]["speedup"] = 2.13
    res = ExperimentResult.from_dict(res.to_dict())
    assert res.rows[1]["above_linear"] is True and res.rows[2]["above_linear"] is False
    assert res.rows[0]["above_linear"] is False               # the baseline itself
    text = res.table()
    assert "2.13x (!)" in text
    assert "note: above linear: default, 2 workers ran 2.13x as fast as 1, more than the 2.0x" in text
    assert "above linear" not in fake_paths_result().table()
    perf = ExperimentResult("perf-options", [{"option": "compile", "workers": 1, "images_per_s": 3.0,
                                              "speedup": 2.3}])
    assert "above_linear" not in perf.rows[0]                 # a speed option is not a worker count


def test_a_recording_says_when_its_run_is_not_the_live_default():
    old = fake_paths_result()
    old.config.update(steps=80, warmup_steps=20, precision="bf16", workers=2)
    rec = ExperimentResult.from_dict(old.to_dict(), source="recorded")
    assert rec.spec.steps == 80 and rec.live_default_differences() != {}
    assert rec.live_default_differences() == {"steps": (80, 150), "warmup_steps": (20, 30)}
    assert ("note: recorded with steps 80 (live default 150), warmup steps 20 (live default 30): not the same run "
            "description as a live run today") in rec.table()
    same = fake_paths_result()
    same.config.update(steps=150, warmup_steps=30, precision="bf16")
    same = ExperimentResult.from_dict(same.to_dict(), source="recorded")
    assert same.live_default_differences() == {} and "live default" not in same.table()
    assert ExperimentResult("nccl-paths", [], source="missing").live_default_differences() == {}


def test_compare_speedups_lines_up_paths_and_marks_gaps():
    a = fake_paths_result()
    b = fake_paths_result()
    b.rows = [r for r in b.rows if r["path"] != "shm"]
    text = results.compare_speedups({"eager": a, "graph": b})
    lines = text.splitlines()
    assert lines[0].split() == ["path", "eager", "graph"]
    shm = next(ln for ln in lines if ln.startswith("shm"))
    assert shm.split() == ["shm", "86", "0.86x", "-"]
    socket = next(ln for ln in lines if ln.startswith("socket"))
    assert socket.split() == ["socket", "-", "-"]          # the failed run shows as a gap, not a number
    default = next(ln for ln in lines if ln.startswith("default"))
    assert default.split() == ["default", "185", "1.85x", "185", "1.85x"]
    assert "eager: recorded on 2x NVIDIA H200" in text or "eager: measured now on 2x NVIDIA H200" in text
    assert "above linear" not in text
    b.rows[1]["speedup"] = 2.1
    b = ExperimentResult.from_dict(b.to_dict())
    text = results.compare_speedups({"eager": a, "graph": b})
    default = next(ln for ln in text.splitlines() if ln.startswith("default"))
    assert default.split() == ["default", "185", "1.85x", "185", "2.10x!"] and "!: above linear" in text
    with pytest.raises(ValueError):
        results.compare_speedups({})
