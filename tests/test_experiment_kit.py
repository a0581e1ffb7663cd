"""ddlab.training.experiment_kit: repeats run in interleaved rounds (launches stood in for by
FakeLaunches: no GPU needed)."""
from _experiment_fakes import FakeLaunches, script_result
from ddlab.training import experiment_kit as kit, runs
from ddlab.training.runspec import RunSpec


def _configs():
    spec = RunSpec.for_device("cuda", "mlp-small", launcher="ddp", workers=2, repeats=3)
    return [("one", spec.with_(workers=1), {}), ("two", spec, {}), ("three", spec.with_(batch=128), {})]


def test_each_round_runs_every_configuration_once_in_order(monkeypatch):
    fake = FakeLaunches(*[script_result(float(10 * r + c), workers=1 if c == 0 else 2)
                          for r in range(3) for c in range(3)])
    monkeypatch.setattr(runs.launch, "run", fake)
    rounds = []
    got, failed = kit.interleaved(_configs(), 3, after_round=rounds.append)
    assert failed == {} and rounds == [1, 2]           # after each round but the last
    assert [r["images_per_s"] for r in got["one"]] == [0.0, 10.0, 20.0]
    assert [r["images_per_s"] for r in got["three"]] == [2.0, 12.0, 22.0]
    sizes = [a[a.index("--batch-size") + 1] for a in fake.argvs]
    assert sizes == [str(c[1].batch) for c in _configs()] * 3 and sizes[2] == "128"


def test_a_failed_configuration_is_dropped_and_the_others_go_on(monkeypatch):
    fake = FakeLaunches(script_result(1.0), "a worker crashed", script_result(3.0, workers=2),
                        script_result(4.0), script_result(6.0, workers=2))
    monkeypatch.setattr(runs.launch, "run", fake)
    got, failed = kit.interleaved(_configs(), 2)
    assert list(failed) == ["two"] and "launch failed" in str(failed["two"]) and got["two"] == []
    assert [r["images_per_s"] for r in got["one"]] == [1.0, 4.0] and len(fake.argvs) == 5


def test_it_stops_at_the_first_failure_when_asked_and_resumes_from_earlier_rounds(monkeypatch):
    monkeypatch.setattr(runs.launch, "run", FakeLaunches(script_result(1.0), "a worker crashed"))
    got, failed = kit.interleaved(_configs(), 3, stop_at_failure=True)
    assert list(failed) == ["two"] and [r["images_per_s"] for r in got["one"]] == [1.0] and got["three"] == []
    # a resumed experiment: rounds 1 and 2 are given, round 3 alone runs
    fake = FakeLaunches(script_result(30.0), script_result(31.0, workers=2), script_result(32.0, workers=2))
    monkeypatch.setattr(runs.launch, "run", fake)
    earlier = {"one": [{"images_per_s": 1.0}, {"images_per_s": 2.0}], "two": [{}, {}], "three": [{}, {}]}
    got, failed = kit.interleaved(_configs(), 3, start=2, got=earlier)
    assert len(fake.argvs) == 3 and [r["images_per_s"] for r in got["one"]] == [1.0, 2.0, 30.0]


def test_the_note_names_the_rounds_and_what_each_ran():
    note = kit.interleaved_note(3, "every path")
    assert note.startswith("the repeats were interleaved in 3 round(s), each running every path once")
