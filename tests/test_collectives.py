"""ddlab.measure.collectives: nccl-tests' formulas, the sizes a sweep visits, SweepResult (its NCCL
log), the summary and level tables."""
import pytest

from ddlab.measure import collectives


# ----------------------------------------------------------------------------- formulas and sizes
def test_bus_factor_matches_nccl_tests():
    assert collectives.bus_factor("all_reduce", 2) == 1.0
    assert collectives.bus_factor("all_reduce", 8) == 1.75
    assert collectives.bus_factor("all_gather", 4) == 0.75
    assert collectives.bus_factor("reduce_scatter", 2) == 0.5
    alg, bus = collectives.bandwidths("all_reduce", 1 << 30, 1e-2, 4)
    assert alg == pytest.approx((1 << 30) / 1e-2 / 1e9)
    assert bus == pytest.approx(alg * 1.5)
    with pytest.raises(ValueError, match="unknown collective"):
        collectives.bus_factor("broadcast_all", 2)


def test_message_sizes():
    assert collectives.message_sizes("all_reduce", 8, 64, 2) == [8, 16, 32, 64]
    assert collectives.message_sizes("all_reduce", 8, 1 << 30, 2)[-1] == 1 << 30
    # all-gather on 4 ranks: whole float32 elements on every rank -> multiples of 16 B
    assert collectives.message_sizes("all_gather", 8, 64, 4) == [16, 32, 64]
    assert collectives.message_sizes("reduce_scatter", 8, 100, 2, factor=4) == [8, 32]
    with pytest.raises(ValueError, match="factor"):
        collectives.message_sizes("all_reduce", 8, 64, 2, factor=1)
    with pytest.raises(ValueError, match="min_bytes"):
        collectives.message_sizes("all_reduce", 64, 8, 2)


# ----------------------------------------------------------------------------- results and tables
def test_nccl_log_is_parsed_when_kept():
    import os
    log = open(os.path.join(os.path.dirname(__file__), "fixtures", "nccl", "h200x2_shm.log")).read()
    res = collectives.SweepResult(op="all_reduce", backend="nccl", path="shm", env={"NCCL_P2P_LEVEL": "LOC"},
                                  nproc=2, rows=[], provenance={}, nccl_log_text=log)
    counts = res.transport_counts()
    assert counts and set(counts) == {k for k in counts if "SHM" in k.upper()}
    assert collectives.SweepResult.from_dict(res.to_dict()).nccl_log_text == log


def test_summary_is_a_table_of_busbw_per_sweep():
    sweeps = collectives.load_recorded("h200x2")
    t = collectives.summary(sweeps.values())
    assert [c.key for c in t.columns][:5] == ["op", "path", "settings", "ranks", "busbw_at"]
    # the recording ran with NCCL_NVLS_ENABLE=0: its default path is named for that, and a short note says so
    assert list(sweeps) == ["default", "shm", "socket"]
    assert t.column("path") == ["NCCL default, NVLS off", "shm", "socket"]
    # each row shows the variables its sweep recorded (not what the path would set today)
    assert t.column("settings") == [res.settings_text() for res in sweeps.values()]
    assert all(k in t.column("settings")[1] for k, v in sweeps["shm"].env.items() if k != "NCCL_DEBUG")
    assert "NCCL_DEBUG" not in " ".join(t.column("settings"))
    assert "NCCL_NVLS_ENABLE=0" in t.notes[0] and len(t.notes[0].split()) <= 15
    # and the command that produced the sweeps, once, with the shell's NCCL settings in front
    commands = [n for n in t.notes if n.startswith("command: ")]
    assert commands == [f"command: {c}" for c in collectives.sweep_commands(sweeps.values())] and len(commands) == 1
    assert commands[0].endswith(sweeps["default"].provenance["command"]) and "NCCL_VERSION" not in commands[0]
    assert "NCCL_NVLS_ENABLE=0" in commands[0] and "NCCL_P2P_LEVEL" not in commands[0]    # the shell's, not a path's
    for row, res in zip(t.rows, sweeps.values()):
        assert row["busbw_at"] == res.row_at(512 << 20)["busbw_gbps"] and row["peak"] == res.peak_busbw()
    lines = str(t).splitlines()[:2 + len(sweeps)]
    assert max(len(x) for x in lines) == len(lines[1])
    assert len({x.index("GB/s") for x in lines[2:]}) == 1           # numbers right-aligned
    assert sweeps["default"].label.startswith("NCCL default, NVLS off")
    plain = collectives.SweepResult(op="all_reduce", backend="nccl", path="default", env={}, nproc=2, rows=[],
                                    provenance={})
    assert plain.path_name == "NCCL default" and not plain.multicast_off
    # a sweep that stops below the asked size says which size its figure is from
    small = collectives.summary(sweeps.values(), at_bytes=4 << 30)
    assert "(nearest size)" in str(small)


def test_level_table_names_transport_and_bandwidth():
    import os
    fixtures = os.path.join(os.path.dirname(__file__), "fixtures", "nccl")
    row = {"bytes": 256 << 20, "count": 1, "time_us": 1.0, "algbw_gbps": 12.5, "busbw_gbps": 12.5, "iters": 5}
    make = lambda name: collectives.SweepResult(op="all_reduce", backend="nccl", path="default", env={},  # noqa: E731
                                                nproc=2, rows=[row], provenance={},
                                                nccl_log_text=open(os.path.join(fixtures, name)).read())
    text = str(collectives.level_table({"LOC": make("h200x2_shm.log"), "NVL": make("h200x2_default.log")}))
    loc, nvl = text.splitlines()[2:]
    assert loc.startswith("LOC") and "SHM" in loc and "P2P" not in loc and "12.5 GB/s" in loc and "256 MiB" in loc
    assert nvl.startswith("NVL") and "P2P" in nvl
    with pytest.raises(ValueError, match="no level sweep"):
        collectives.level_table({})
