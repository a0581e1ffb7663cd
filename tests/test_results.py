"""ddlab.training.results: tables, plots, JSON, repeats (median and spread), the above-linear flag and the
note a recording carries when its run description is not today's live default."""
import json

import matplotlib
import pytest

matplotlib.use("Agg")

from _experiment_fakes import fake_paths_result, script_result  # noqa: E402
from ddlab.system import nccl  # noqa: E402
from ddlab.training import result_views, results  # noqa: E402
from ddlab.training.results import ExperimentResult  # noqa: E402


def test_result_table_plot_and_json_round_trip(tmp_path):
    res = fake_paths_result()
    text = res.table()
    assert "NCCL paths: torch ddp, model wide" in text and "measured now on 2x NVIDIA H200, 2026-11-22" in text
    assert "185" in text and "1.85x" in text and "failed: timed out after 300 s" in text and "note: a note" in text
    ax = res.plot()
    assert len(ax.patches) == 4   # the plain run, DDP's one worker and two paths: the failed path has no bar
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
    res.rows[2]["images_per_s"] = 213.0                      # over the plain run's 100 images/s
    res = ExperimentResult.from_dict(res.to_dict())
    assert res.rows[2]["above_linear"] is True and res.rows[3]["above_linear"] is False
    assert res.rows[0]["above_linear"] is False               # the baseline itself
    text = res.table()
    assert "2.13x (!)" in text
    assert "note: above linear: NCCL default, 2 workers ran 2.13x as fast as 1, more than the 2.0x" in text
    # the baseline here has no repeats: the note says the comparison is a single run, not conclusive
    assert "The baseline is a single run" in text and "not conclusive" in text
    assert "median step took" not in text                    # one run each: no step times read into it
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
    text = result_views.compare_speedups({"eager": a, "graph": b})
    lines = text.splitlines()
    assert lines[0].split() == ["path", "eager", "graph"]
    shm = next(ln for ln in lines if ln.startswith("shm"))
    assert shm.split() == ["shm", "86", "0.86x", "-"]
    socket = next(ln for ln in lines if ln.startswith("socket"))
    assert socket.split() == ["socket", "-", "-"]          # the failed run shows as a gap, not a number
    default = next(ln for ln in lines if ln.startswith("NCCL default"))
    assert default.split() == ["NCCL", "default", "185", "1.85x", "185", "1.85x"]   # no recorded environment: not "NVLS off"
    assert "eager: recorded on 2x NVIDIA H200" in text or "eager: measured now on 2x NVIDIA H200" in text
    assert "above linear" not in text
    b.rows[2]["images_per_s"] = 210.0
    b = ExperimentResult.from_dict(b.to_dict())
    text = result_views.compare_speedups({"eager": a, "graph": b})
    default = next(ln for ln in text.splitlines() if ln.startswith("NCCL default"))
    assert default.split() == ["NCCL", "default", "185", "1.85x", "210", "2.10x!"] and "!: above linear" in text
    with pytest.raises(ValueError):
        result_views.compare_speedups({})


def _with_repeats(base_runs, two_worker_ips):
    res = fake_paths_result()
    base = res.rows[0]
    base.update(images_per_s=sorted(base_runs)[1], images_per_s_runs=list(base_runs), repeats=len(base_runs),
                images_per_s_min=min(base_runs), images_per_s_max=max(base_runs), step_ms_median=2.5)
    res.rows[2].update(images_per_s=two_worker_ips, step_ms_median=2.4)
    return ExperimentResult.from_dict(res.to_dict())


def test_above_linear_is_explained_from_the_baselines_repeats():
    # 203 against a baseline whose repeats reach 110: 1.85x of the fastest repeat, within perfect scaling
    text = _with_repeats([95.0, 100.0, 110.0], 203.0).table()
    assert "2.03x (!)" in text and "repeats spread from 95 to 110 images/s (15% of their median)" in text
    assert "against the fastest of them the speedup is 1.85x, within perfect scaling" in text
    assert "median step took 2.400 ms against 2.500 ms for the baseline, on the same images per worker" in text
    # 230 is above 2 x 110: beyond the spread, and the note says to find what differs
    text = _with_repeats([95.0, 100.0, 110.0], 230.0).table()
    assert "against the fastest of them the speedup is 2.09x, still above perfect scaling" in text


def test_default_is_named_for_what_it_ran_with_and_why():
    res = fake_paths_result()
    res.provenance["nccl_env"] = {"NCCL_NVLS_ENABLE": "0"}
    text = res.table()
    assert "NCCL default, NVLS off" in text and "\ndefault " not in text
    assert nccl.MULTICAST_OFF_WHY not in text                  # the row's name says it; notebook 4 says why, once
    assert res.rows[2]["path"] == "default"                   # the stored key is unchanged
    assert results.row_label("nccl-paths", res.rows[2], res.provenance) == "NCCL default, NVLS off"
    assert [t.get_text().replace("\n", " ") for t in res.plot().get_xticklabels()][2] == "NCCL default, NVLS off"
    plain = fake_paths_result().table()
    assert "NCCL default" in plain and "NVLS off" not in plain and nccl.MULTICAST_OFF_WHY not in plain
    lines = result_views.compare_speedups({"rec": res}).splitlines()
    assert lines[2].startswith("1 GPU, no wrapper") and lines[3].startswith("1 worker")
    assert lines[4].startswith("NCCL default, NVLS off")


def _option(option, ips, step, precision="fp32", graph=False, compile="none", spread="1.0-1.1"):
    return {"option": option, "workers": 1, "images_per_s": ips, "step_ms_median": step, "step_ms_spread": spread,
            "precision": precision, "cuda_graph": graph, "compile": compile, "channels_last": False,
            "speedup": ips / 100.0}


def test_slower_speed_options_are_explained_and_single_runs_said():
    rows = [_option("plain fp32", 100.0, 2.0), _option("bf16", 80.0, 2.5, "bf16"),
            _option("cuda-graph fp32", 105.0, 1.9, graph=True), _option("cuda-graph bf16", 150.0, 1.3, "bf16", True),
            _option("compile bf16", 70.0, 2.8, "bf16", compile="default"),
            _option("compile + cuda-graph bf16", 230.0, 0.9, "bf16", True, "default")]
    text = ExperimentResult("perf-options", rows, "recorded", {}, [], {}).table()
    assert "each option ran once (no repeats)" in text and "not conclusive" in text
    assert "bf16 ran at 0.80x of plain fp32: median step 2.500 ms" in text and "autocast" in text
    assert "Captured as a CUDA graph (the whole step launched at once) it took 1.300 ms, against 1.900 ms" in text
    assert "compile bf16 ran at 0.70x" in text and "reduce-overhead" in text and "eager took 2.500 ms" in text
    assert "it took 0.900 ms" in text
    assert "cuda-graph fp32 ran at" not in text             # only the slower options get a note
    # repeated options do not get the single-run note; options that are all faster get no explanation
    fast = [dict(r, repeats=3, images_per_s_min=r["images_per_s"], images_per_s_max=r["images_per_s"])
            for r in rows if r["speedup"] >= 1]
    assert "note:" not in ExperimentResult("perf-options", fast, "recorded", {}, [], {}).table()


def test_narrow_tables_split_what_ran_from_what_it_measured():
    res = fake_paths_result()
    ran, measured = res.narrow_tables()
    whole = [c.key for c in res.as_table().columns]
    assert [c.key for c in ran.columns] == ["path", "env_text", "transport"]
    assert [c.key for c in measured.columns] == [k for k in whole if k not in ("env_text", "transport")]
    assert ran.title == res.as_table().title and ran.notes == [] and measured.title is None
    assert measured.notes[0] == "note: a note" and len(ran.rows) == len(measured.rows) == len(res.rows)
    first = measured.text().splitlines()[2].split()                   # title-less: headings, rule, then rows
    assert " ".join(first[:4]) == "1 GPU, no wrapper" and "1.00x" in first      # the baseline, named, first
    assert "p10-p90" in measured.text() and "P2P" in ran.text() and "P2P" not in measured.text()
    scaling = ExperimentResult("scaling", [dict(res.rows[0])], "live", res.provenance, [], res.config, [])
    assert [t.text() for t in scaling.narrow_tables()] == [scaling.as_table().text()]    # nothing to split
    res.companion = scaling
    view = res.narrow()
    assert len(view.tables()) == 3 and str(view).count("NCCL settings") == 1 and "efficiency" in str(view)
    assert view._repr_html_().count("<table") == 3


def test_socket_interface_is_what_the_socket_runs_reported():
    res = fake_paths_result()
    assert res.socket_interface() is None                       # the socket run failed
    res.rows[-1] = {"path": "socket", "workers": 2, "nccl_env_reported": {"NCCL_SOCKET_IFNAME": "lo"}}
    assert res.socket_interface() == "lo"
    res.rows[-1]["nccl_env_reported"] = {"NCCL_IB_DISABLE": "1"}
    assert res.socket_interface() is None                       # not set: NCCL picked one itself


def test_a_failed_row_shows_its_error_shortened_and_keeps_it_whole():
    import html
    from ddlab.base import tables
    first = ("rank 1 on host gpu-node-7.cluster.example.org died first: killed by SIGKILL (signal 9; the kernel's "
             "out-of-memory killer, or a job scheduler)")
    res = fake_paths_result()
    res.rows[-1] = dict(res.rows[-1], error=first, error_detail="rank 0: stopped\nlast output:\nKilled")
    text = res.table()
    assert tables.shorten("failed: " + first) in text and first not in text      # the screen: shortened
    assert html.escape("failed: " + first) in res._repr_html_()                  # the cell's title: whole
    back = ExperimentResult.from_dict(json.loads(json.dumps(res.to_dict())))     # the data: whole
    assert back.rows[-1]["error"] == first and back.rows[-1]["error_detail"].endswith("Killed")
    summary = result_views.summary_table({"nccl-paths": res, "scaling": f"LaunchError: {first}\nmore lines"})
    assert summary.count(tables.shorten(first)) == 1 and first not in summary
    assert tables.shorten(f"LaunchError: {first}", 120) in summary and "more lines" not in summary


def test_a_result_with_no_rows_says_where_and_why_in_its_empty_line():
    res = ExperimentResult("nccl-paths", [], "recorded", {}, ["not live here: Horovod is not installed "
                                                              "(`make horovod` builds it)"], {})
    line = res.empty_line("Horovod with Keras")
    first, why = line.splitlines()
    assert first.startswith("Horovod with Keras: ") and why == "  not live here: Horovod is not installed " \
                                                              "(`make horovod` builds it)"


def test_frameworks_are_compared_by_their_images_per_second_on_the_same_runs():
    """DDP and Horovod side by side by absolute images/s: the ratio is read off the throughput, not off two
    speedups over different one-worker runs; the plain run and each wrapper's one worker are rows of their own."""
    ddp = fake_paths_result()
    hvd = fake_paths_result()
    hvd.config["launcher"] = "horovod"
    for r in hvd.rows:
        if r.get("images_per_s") and r.get("path") != "plain":
            r["images_per_s"] *= 1.1
    hvd = ExperimentResult.from_dict(hvd.to_dict())
    t = result_views.images_side_by_side({"DDP": ddp, "Horovod": hvd})
    rows = {r["what"]: r for r in t.rows}
    assert list(rows)[:2] == ["1 GPU, no wrapper", "1 worker (each wrapper's own)"]
    assert rows["1 GPU, no wrapper"]["r1"] == pytest.approx(1.0)
    for r in ddp.rows:
        if r.get("workers") == 2 and not r.get("error"):
            shown = rows[results.path_name(r, ddp.provenance)]
            assert shown["v0"] == r["images_per_s"] and shown["r1"] == pytest.approx(1.1)
    assert "socket" not in rows                          # failed in both: no row of numbers
    assert "DDP images/s" in t.text() and "Horovod / DDP" in t.text()
    # the plain row runs the same program in both columns: a note says its ratio is the machines'
    assert sum(n.startswith("1 GPU, no wrapper: the same program") for n in t.notes) == 1
    only_ddp_plain = ExperimentResult.from_dict(hvd.to_dict())
    only_ddp_plain.rows[:] = [r for r in only_ddp_plain.rows if r.get("path") != "plain"]
    t = result_views.images_side_by_side({"DDP": ddp, "Horovod": only_ddp_plain})
    assert not any(n.startswith("1 GPU, no wrapper") for n in t.notes)
    # a second table of the same kind: the notes on where each result ran stay, the explanations go
    brief = result_views.images_side_by_side({"DDP": ddp, "Horovod": hvd}, explain=False)
    full = result_views.images_side_by_side({"DDP": ddp, "Horovod": hvd})
    assert brief.rows == full.rows and brief.notes == full.notes[:1] and len(full.notes) == 3


def test_a_table_says_its_interleaving_note_without_the_list_of_what_each_round_ran():
    from ddlab.training.experiment_kit import interleaved_note
    stored = [interleaved_note(3, "the plain one-GPU run, the one-worker run and every path"),
              "the repeats were interleaved: each of 2 round(s) ran every path once, in the table's order, so a "
              "drift of the machine widens every row's min-max alike"]
    for note, rounds in zip(stored, (3, 2)):
        res = fake_paths_result()
        res.notes = [note]
        text = res.table()
        assert f"interleaved in {rounds} round(s), each running every row once in order" in text
        assert "one-worker run and every path" not in text and "table's order" not in text
        assert res.notes == [note]                                # what is stored is kept as it was


def _on_cpu(res):
    """The same result as its workers had been CPU processes (Gloo), as the notebooks' CPU mode records it."""
    res = ExperimentResult.from_dict(res.to_dict())
    res.config["device"] = "cpu"
    for r in res.rows:
        r["device"] = "cpu"
    return res


def test_a_cpu_run_is_not_called_a_gpu_in_its_tables():
    """On CPU the plain run is one CPU process: the row, the speedup heading, the plot's line and the
    side-by-side tables name it so; a GPU result keeps "1 GPU"."""
    gpu, cpu = fake_paths_result(), _on_cpu(fake_paths_result())
    heads = [c.label for c in cpu.as_table().columns]
    assert "speedup vs plain 1 process" in heads and not any("GPU" in h for h in heads if h)
    assert "speedup vs plain 1 GPU" in [c.label for c in gpu.as_table().columns]
    assert "\n1 CPU process, no wrapper " in cpu.table() and "1 GPU" not in cpu.table()
    assert "\n1 GPU, no wrapper " in gpu.table()
    assert "1 CPU process, no wrapper" in [t.get_text() for t in cpu.plot().texts]
    assert result_views.compare_speedups({"cpu": cpu}).splitlines()[2].startswith("1 CPU process, no wrapper")
    side = result_views.images_side_by_side({"DDP": cpu, "Horovod": _on_cpu(fake_paths_result())})
    assert side.rows[0]["what"] == "1 CPU process, no wrapper"
    assert sum(n.startswith("1 CPU process, no wrapper: the same program") for n in side.notes) == 1
    tuned = ExperimentResult("tuning", [dict(r, tuning="1 GPU, no wrapper") if r.get("path") == "plain" else r
                                        for r in cpu.rows], "live", cpu.provenance, [], cpu.config, [])
    assert "1 CPU process, no wrapper" in tuned.table() and "1 GPU, no wrapper" not in tuned.table()
