"""The honest throughput arithmetic (ddlab.training.throughput)."""
import numpy as np
import pytest

from ddlab.training import throughput as tp


def test_images_per_second_counts_what_ran():
    # 40 timed steps x 512 images x 2 workers in 0.5 s
    assert tp.images_processed(40, 512, 2) == 40960
    assert tp.images_per_second(40, 512, 2, 0.5) == pytest.approx(81920.0)


@pytest.mark.parametrize("args", [(0, 512, 2, 1.0), (10, 0, 2, 1.0), (10, 512, 0, 1.0), (10, 512, 2, 0.0),
                                  (10, 512, 2, -1.0), (2.5, 512, 2, 1.0), (10, 512, 2, float("inf"))])
def test_bad_measurements_are_refused(args):
    with pytest.raises(ValueError):
        tp.images_per_second(*args)


def test_naive_epoch_figure_overcounts_when_fewer_samples_ran():
    # The old mistake: an "epoch" of 60,000 images of which only 234 steps x 256 = 59,904 ran,
    # on 8 workers that each saw a 7,500-image shard: 8 x 29 x 256 = 59,392 images in 10 s.
    honest = tp.images_per_second(29, 256, 8, 10.0)
    naive = tp.naive_epoch_throughput(60000, 10.0)
    assert honest == pytest.approx(5939.2)
    assert tp.overcount_percent(naive, honest) == pytest.approx(100 * (6000 - 5939.2) / 5939.2)


def test_percentiles_match_numpy():
    rng = np.random.default_rng(0)
    xs = rng.exponential(2.0, size=257)
    for q in (0, 10, 50, 90, 100):
        assert tp.percentile(xs, q) == pytest.approx(np.percentile(xs, q))
    with pytest.raises(ValueError):
        tp.percentile([], 50)
    with pytest.raises(ValueError):
        tp.percentile([1.0], 101)


def test_step_time_summary_and_summarize():
    times = [2.0, 2.1, 2.0, 9.0, 2.2]   # one slow step: the median ignores it, the mean does not
    s = tp.step_time_summary(times)
    assert s["median"] == 2.1 and s["n"] == 5 and s["max"] == 9.0 and s["mean"] == pytest.approx(3.46)
    assert s["p10"] <= s["median"] <= s["p90"]
    out = tp.summarize(5, 64, 2, 0.0173, times)
    assert out["images_timed"] == 640 and out["images_per_s"] == pytest.approx(640 / 0.0173)
    assert out["images_per_s_per_worker"] == pytest.approx(320 / 0.0173)
    with pytest.raises(ValueError, match="4 step times for 5 timed steps"):
        tp.summarize(5, 64, 2, 1.0, times[:4])
    with pytest.raises(ValueError):
        tp.step_time_summary([1.0, float("nan")])


def test_speedup_and_efficiency():
    assert tp.speedup(370.0, 200.0) == pytest.approx(1.85)
    assert tp.scaling_efficiency(1.85, 2) == pytest.approx(0.925)
    with pytest.raises(ValueError):
        tp.speedup(1.0, 0.0)


def test_step_clock_times_only_steps_after_warmup():
    ticks = iter([10.0, 10.5, 11.5, 13.0, 13.25])
    syncs = []
    clock = tp.StepClock(warmup_steps=2, sync=lambda: syncs.append(1), now=lambda: next(ticks))
    for step in range(5):   # steps 0, 1 are warm-up: no clock reads
        clock.begin_step(step)
        clock.end_step(step)
    clock.finish()
    assert clock.timed_steps == 3
    assert clock.step_times_ms == pytest.approx([500.0, 1000.0, 1500.0])
    assert clock.elapsed_s == pytest.approx(3.25) and len(syncs) == 2


def test_step_clock_without_timed_steps_says_so():
    clock = tp.StepClock(warmup_steps=5)
    for step in range(3):
        clock.begin_step(step)
        clock.end_step(step)
    with pytest.raises(RuntimeError, match="warm-up step 5"):
        clock.finish()


class FakeEvent:
    """A device timing event on a fake device clock: record() reads the clock, elapsed_time
    gives ms to another event (as torch.cuda.Event does)."""
    clock = [0.0]
    made = []

    def __init__(self):
        self.t = None
        FakeEvent.made.append(self)

    def record(self):
        self.t = FakeEvent.clock[0]

    def elapsed_time(self, other):
        return (other.t - self.t) * 1e3


def test_step_clock_with_device_events_reads_them_at_the_end_and_leaves_pauses_out():
    FakeEvent.made.clear()
    ticks = iter([100.0, 104.0, 110.0])   # host: start, after the pause, stop
    clock = tp.StepClock(warmup_steps=1, now=lambda: next(ticks), device_event=FakeEvent, timed_steps=3)
    assert len(FakeEvent.made) == 4      # one per step boundary, made up front
    FakeEvent.clock[0] = 1.0
    clock.start()
    for step, device_s in ((1, 1.5), (2, 2.5)):
        FakeEvent.clock[0] = device_s
        clock.end_step(step)
    assert clock.step_times_ms == [] and clock.timed_steps == 2   # nothing read yet
    FakeEvent.clock[0] = 4.0
    clock.exclude(3.0)                   # an evaluation of 3 s between steps 2 and 3
    assert len(FakeEvent.made) == 5
    FakeEvent.clock[0] = 4.25
    clock.end_step(3)
    clock.finish()
    assert clock.step_times_ms == pytest.approx([500.0, 1000.0, 250.0])   # the pause is in no step
    assert clock.elapsed_s == pytest.approx(10.0 - 3.0)


def test_step_clock_on_the_host_leaves_pauses_out_too():
    ticks = iter([0.0, 1.0, 5.0, 5.5, 6.0])
    syncs = []
    clock = tp.StepClock(warmup_steps=0, sync=lambda: syncs.append(1), now=lambda: next(ticks))
    clock.start(synced=True)             # the caller has just synchronised: no second sync
    clock.end_step(0)                    # 1 s
    clock.exclude(4.0)                   # 1 .. 5: an evaluation
    clock.end_step(1)                    # 0.5 s
    clock.finish()
    assert clock.step_times_ms == pytest.approx([1000.0, 500.0])
    assert clock.elapsed_s == pytest.approx(2.0) and len(syncs) == 1
    with pytest.raises(ValueError, match="timed_steps"):
        tp.StepClock(warmup_steps=0, device_event=FakeEvent)
