"""Honest throughput arithmetic, shared by the training scripts and the experiments.

The rule (computing dataset size / epoch time while fewer samples ran overstates throughput,
and a run that trained no step at all can then still report a rate):

    images/s = (images actually processed by all workers in the timed steps)
               / (wall time between two device synchronisations around those steps)

* the timed steps start after the warm-up steps (first-step costs: cuDNN autotuning, NCCL
  connection set-up, CUDA-graph capture, compilation);
* the clock starts and stops only after the device has finished its queued work
  (``torch.cuda.synchronize()``) and all workers have met at a barrier, so neither queued
  GPU work nor a straggling worker is left out;
* the image count is steps x batch per worker x workers: what really ran, never "dataset
  size / epoch time" (an epoch that ran fewer samples than the data set overcounts).

Per-step times (CUDA events on a GPU, a wall clock on CPU) give the median and the spread;
the mean step time and images/s are not the same statistic, so both are reported.
"""
from __future__ import annotations

import math
import time
from typing import Optional, Sequence


def _positive_int(name: str, v) -> int:
    if isinstance(v, bool) or int(v) != v or v < 1:
        raise ValueError(f"{name} must be a positive whole number, got {v!r}")
    return int(v)


def images_processed(timed_steps: int, batch_per_worker: int, workers: int) -> int:
    """Images all workers processed in ``timed_steps`` synchronous steps."""
    return (_positive_int("timed_steps", timed_steps) * _positive_int("batch_per_worker", batch_per_worker)
            * _positive_int("workers", workers))


def images_per_second(timed_steps: int, batch_per_worker: int, workers: int, elapsed_s: float) -> float:
    """Throughput of all workers together over the synchronised, timed interval."""
    if not elapsed_s > 0 or math.isinf(elapsed_s):
        raise ValueError(f"elapsed time must be a positive number of seconds, got {elapsed_s!r}")
    return images_processed(timed_steps, batch_per_worker, workers) / elapsed_s


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear interpolation between order statistics
    (numpy's default), without needing numpy."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    xs = sorted(float(v) for v in values)
    if not xs:
        raise ValueError("no values")
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def step_time_summary(step_times_ms: Sequence[float]) -> dict:
    """Median, 10th and 90th percentile, mean, min, max and count of per-step times (ms)."""
    xs = [float(v) for v in step_times_ms]
    if not xs:
        raise ValueError("no step times to summarise (were there any timed steps?)")
    if any(not (v >= 0) or math.isinf(v) for v in xs):
        raise ValueError("step times must be finite and non-negative")
    return {"median": percentile(xs, 50), "p10": percentile(xs, 10), "p90": percentile(xs, 90),
            "mean": sum(xs) / len(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def summarize(timed_steps: int, batch_per_worker: int, workers: int, elapsed_s: float,
              step_times_ms: Optional[Sequence[float]] = None) -> dict:
    """Everything a result reports about speed, from the raw measurements."""
    out = {
        "timed_steps": int(timed_steps),
        "images_timed": images_processed(timed_steps, batch_per_worker, workers),
        "elapsed_s": float(elapsed_s),
        "images_per_s": images_per_second(timed_steps, batch_per_worker, workers, elapsed_s),
    }
    out["images_per_s_per_worker"] = out["images_per_s"] / workers
    if step_times_ms is not None:
        if len(step_times_ms) != timed_steps:
            raise ValueError(f"{len(step_times_ms)} step times for {timed_steps} timed steps")
        out["step_time_ms"] = step_time_summary(step_times_ms)
    return out


def speedup(images_per_s: float, baseline_images_per_s: float) -> float:
    """How many times the baseline's (usually one worker's) throughput."""
    if not baseline_images_per_s > 0:
        raise ValueError("baseline throughput must be positive")
    return images_per_s / baseline_images_per_s


def scaling_efficiency(speedup_value: float, workers: int) -> float:
    """Speedup divided by the number of workers: 1.0 is perfect linear scaling."""
    return speedup_value / _positive_int("workers", workers)


def naive_epoch_throughput(dataset_size: int, epoch_time_s: float) -> float:
    """The WRONG figure older material reported: data set size / epoch time. Kept only so
    the course can show how far it is from :func:`images_per_second`."""
    if not epoch_time_s > 0:
        raise ValueError("epoch time must be positive")
    return dataset_size / epoch_time_s


def overcount_percent(claimed: float, honest: float) -> float:
    """By how many percent ``claimed`` exceeds ``honest``."""
    if not honest > 0:
        raise ValueError("honest throughput must be positive")
    return 100.0 * (claimed - honest) / honest


class StepClock:
    """Timing of the steps after a warm-up: the synchronised interval (host wall clock) and
    every timed step's time. ``sync`` is called where the clock starts and stops (and only
    there): pass the device synchronisation plus a barrier.

    Step times come from the host clock (CPU runs, the Keras callback), or, given
    ``device_event`` (a factory of timing events with ``record()`` and ``elapsed_time(other)``
    in ms, e.g. ``lambda: torch.cuda.Event(enable_timing=True)``), from device events: one
    per step boundary, made up front (``timed_steps`` of them and one more), recorded after
    every step and read only in :meth:`finish`, so timing adds no host synchronisation.
    :meth:`exclude` leaves a pause (an evaluation between two timed steps) out of the
    interval and out of the next step's time.

    >>> clock = StepClock(warmup_steps=2, sync=lambda: None)
    >>> for step in range(5):
    ...     clock.begin_step(step); clock.end_step(step)
    >>> clock.finish(); clock.timed_steps
    3
    """

    def __init__(self, warmup_steps: int, sync=None, now=time.perf_counter, device_event=None,
                 timed_steps: Optional[int] = None):
        if warmup_steps < 0:
            raise ValueError("warm-up steps cannot be negative")
        if device_event is not None and timed_steps is None:
            raise ValueError("device events are made up front: give timed_steps too")
        self.warmup_steps = int(warmup_steps)
        self.sync = sync or (lambda: None)
        self.now = now
        self.t_start: Optional[float] = None
        self.t_stop: Optional[float] = None
        self.excluded_s = 0.0
        self.step_times_ms: list = []
        self._last: Optional[float] = None
        self._steps = 0
        self._device_event = device_event
        self._events = [device_event() for _ in range(timed_steps + 1)] if device_event is not None else []
        self._resumed: dict = {}   # step boundary -> the event recorded after a pause there

    def start(self, synced: bool = False) -> None:
        """Starts the clock (after ``sync``, unless the caller has just synchronised)."""
        if not synced:
            self.sync()
        self.t_start = self._last = self.now()
        if self._events:
            self._events[0].record()

    def begin_step(self, step: int) -> None:
        if step == self.warmup_steps:
            self.start()

    def end_step(self, step: int) -> None:
        if self.t_start is not None and step >= self.warmup_steps and self.t_stop is None:
            self._steps += 1
            if self._events:
                self._events[self._steps].record()
            else:
                t = self.now()
                self.step_times_ms.append((t - self._last) * 1e3)
                self._last = t

    def exclude(self, seconds: float) -> None:
        """Leaves the ``seconds`` just spent between timed steps (not training) out of the
        interval; the next step's time starts now."""
        self.excluded_s += seconds
        if self._events:
            self._resumed[self._steps] = self._device_event()
            self._resumed[self._steps].record()
        self._last = self.now()

    def finish(self) -> None:
        if self.t_start is None:
            raise RuntimeError(f"no timed steps: training ended before warm-up step {self.warmup_steps}")
        self.sync()
        self.t_stop = self.now()
        if self._events:   # the device has finished: every event can be read
            self.step_times_ms = [self._resumed.get(i, self._events[i]).elapsed_time(self._events[i + 1])
                                  for i in range(self._steps)]

    @property
    def timed_steps(self) -> int:
        return self._steps

    @property
    def elapsed_s(self) -> float:
        """Seconds between the synchronised start and stop, pauses left out."""
        if self.t_stop is None:
            raise RuntimeError("call finish() first")
        return self.t_stop - self.t_start - self.excluded_s
