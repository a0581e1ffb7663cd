"""ddlab.training.convergence and ddlab.course.convergence_sweep: the learning-rate rules and warm-up, the
gradient noise scale on synthetic gradients of known covariance, time to accuracy, the sweep's
bookkeeping over seeds (with a stand-in for the training script), and one real 2-process run."""
import json
import math
import statistics
import os

import numpy as np
import pytest

from ddlab.training import convergence, data
from ddlab.course import convergence_sweep as cs
from ddlab.course import convergence_readings as readings
from ddlab.system import policy
from ddlab.course.convergence_sweep import Point
from ddlab.training.runspec import RunSpec, RunSpecError


# ----------------------------------------------------------------------------- learning rate
def test_lr_factor_per_rule():
    assert convergence.lr_factor("none", 512, 32) == 1.0
    assert convergence.lr_factor("linear", 512, 32) == 16.0
    assert convergence.lr_factor("sqrt", 512, 32) == 4.0
    assert convergence.peak_lr(0.05, "linear", 64, 32) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="unknown learning-rate scaling"):
        convergence.lr_factor("cubic", 64, 32)
    with pytest.raises(ValueError):
        convergence.lr_factor("linear", 0, 32)


def test_warmup_schedule_ramps_from_the_reference_rate_to_the_peak():
    base, peak, warm = 0.05, 0.8, 10
    rates = [convergence.lr_at(s, base, peak, warm) for s in range(13)]
    assert rates[0] == base and rates[10] == rates[12] == peak
    assert rates[5] == pytest.approx(base + (peak - base) / 2)
    assert all(a < b for a, b in zip(rates[:10], rates[1:11]))      # strictly rising during the warm-up
    assert [convergence.lr_at(s, base, peak, 0) for s in (0, 7)] == [peak, peak]
    # a peak below the base (rule "none" with a reference batch above the global one) starts at the peak
    assert convergence.lr_at(0, 0.05, 0.01, 5) == 0.01
    assert convergence.warmup_steps(1.5, 20) == 30 and convergence.warmup_steps(0, 20) == 0
    with pytest.raises(ValueError):
        convergence.warmup_steps(-1, 20)


# ----------------------------------------------------------------------------- noise scale
def test_estimator_is_exact_on_expected_norms():
    g2, tr = 2.5, 400.0
    small = g2 + tr / 32
    big = g2 + tr / 256
    est = convergence.noise_scale(32, 256, small, big)
    assert est.grad_sq == pytest.approx(g2) and est.trace == pytest.approx(tr)
    assert est.b_simple == pytest.approx(tr / g2)


def test_estimator_recovers_a_known_covariance_from_sampled_gradients():
    """Per-example gradients g_i = G + noise with covariance Sigma (diagonal, known): the mean of
    B of them has E|g_B|^2 = |G|^2 + tr(Sigma)/B, and the estimator recovers |G|^2, tr(Sigma)
    and B_simple = tr(Sigma)/|G|^2 from two batch sizes, as in a 2-worker run (each rank's
    batch and the all-reduced one)."""
    rng = np.random.default_rng(0)
    d, b_small, workers, trials = 50, 16, 4, 4000
    G = rng.normal(size=d) * 0.5
    sd = rng.uniform(0.5, 3.0, size=d)
    small = big = 0.0
    for _ in range(trials):
        per_rank = [G + (rng.normal(size=(b_small, d)) * sd).mean(axis=0) for _ in range(workers)]
        small += np.mean([np.sum(g ** 2) for g in per_rank])
        big += np.sum(np.mean(per_rank, axis=0) ** 2)
    est = convergence.noise_scale(b_small, b_small * workers, small / trials, big / trials, trials)
    true_g2, true_tr = float(np.sum(G ** 2)), float(np.sum(sd ** 2))
    assert est.grad_sq == pytest.approx(true_g2, rel=0.05)
    assert est.trace == pytest.approx(true_tr, rel=0.05)
    assert est.b_simple == pytest.approx(true_tr / true_g2, rel=0.1)
    # a naive ratio of the measured norms is far off: the small-batch norm is mostly noise
    assert small / trials > 2 * true_g2


def test_estimator_refuses_one_batch_size_and_reports_no_ratio_without_signal():
    with pytest.raises(ValueError, match="at least 2 workers"):
        convergence.noise_scale(32, 32, 1.0, 1.0)
    est = convergence.noise_scale(32, 64, 1.0, 1.2)   # the bigger batch noisier: |G|^2 estimate > 0 but tr < 0
    assert est.trace < 0
    assert convergence.noise_scale(32, 64, 2.0, 0.5).b_simple is None   # |G|^2 estimate negative


def run_with_noise(epochs_noise, b=32, world=2):
    return {"batch_per_worker": b, "global_batch": b * world, "epochs": len(epochs_noise),
            "evaluations": [{"epoch": e + 1, "noise": n} for e, n in enumerate(epochs_noise)]}


def test_noise_scales_per_interval_and_pooled_by_steps():
    a = run_with_noise([{"steps": 10, "small_sq": 3.0, "big_sq": 2.0}, {"steps": 30, "small_sq": 2.0, "big_sq": 1.0}])
    per = convergence.noise_scales(a)
    assert [n.steps for n in per] == [10, 30] and per[1].small_sq == 2.0
    pooled = convergence.pooled_noise_scale([a, a])
    assert pooled.steps == 80 and pooled.small_sq == pytest.approx((3 * 10 + 2 * 30) / 40)
    late = convergence.pooled_noise_scale([a], from_epoch=1)
    assert late.steps == 30 and late.small_sq == 2.0
    assert convergence.pooled_noise_scale([{"evaluations": []}]) is None
    with pytest.raises(ValueError, match="cannot be pooled"):
        convergence.pooled_noise_scale([a, run_with_noise([{"steps": 5, "small_sq": 1, "big_sq": 1}], b=64)])


def test_time_to_accuracy():
    evs = [{"test_accuracy": 0.6, "train_s": 1.0, "wall_s": 5.0}, {"test_accuracy": 0.8, "train_s": 2.0, "wall_s": 6.5},
           {"test_accuracy": 0.79, "train_s": 3.0, "wall_s": 8.0}]
    assert convergence.time_to_accuracy(evs, 0.8) == 2.0
    assert convergence.time_to_accuracy(evs, 0.8, clock="wall_s") == 6.5
    assert convergence.time_to_accuracy(evs, 0.9) is None
    with pytest.raises(ValueError):
        convergence.time_to_accuracy(evs, 80)


# ----------------------------------------------------------------------------- data subset
def test_train_subset_is_fixed_sorted_and_distinct():
    a = data.train_subset(60000, 1000)
    assert np.array_equal(a, data.train_subset(60000, 1000)) and len(np.unique(a)) == 1000
    assert np.all(np.diff(a) > 0) and a.max() < 60000
    with pytest.raises(ValueError):
        data.train_subset(10, 11)


# ----------------------------------------------------------------------------- sweep
def test_points_and_their_run_descriptions():
    p = Point(2, 64, "linear", 1.0)
    assert p.label == "2w B=64 lr linear + 1 ep warm-up"
    with pytest.raises(RunSpecError):
        Point(2, 63)
    with pytest.raises(ValueError):
        Point(1, 64, "cubic")
    sizes = cs.SIZES["cpu"]
    spec = cs.spec_of(p, sizes, "cpu", seed=7)
    assert isinstance(spec, RunSpec) and spec.launcher == "ddp" and spec.workers == 2 and spec.batch == 32
    assert spec.seed == 7 and spec.steps == sizes["epochs"] * (sizes["train_samples"] // 2 // 32)
    args = spec.script_args()
    for flag, value in (("--lr-scaling", "linear"), ("--lr-warmup-epochs", "1.0"), ("--optimizer", "sgd"),
                        ("--train-samples", str(sizes["train_samples"])), ("--seed", "7")):
        assert args[args.index(flag) + 1] == value
    assert "--noise-scale" in args and "--noise-scale" not in cs.spec_of(Point(1, 64), sizes, "cpu", 1).script_args()
    assert cs.spec_of(Point(1, 64), sizes, "cpu", 1).launcher == "none"
    live = cs.points_for("cuda", live=True)
    assert live and all(pt in cs.points_for("cuda") for pt in live)   # every live GPU point is recorded too
    assert cs.points_for("cpu", "workers") == cs.POINTS["cpu"]["workers"]
    with pytest.raises(RunSpecError):
        cs.points_for("cpu", "nope")


def fake_train(accuracy_of):
    """A stand-in for ddlab.training.runs.train: a result with evaluations whose accuracy depends on the
    seed through ``accuracy_of(spec)``."""
    def train(spec, progress=None):
        final = accuracy_of(spec)
        evs = [{"epoch": e, "step": 10 * e, "train_s": 1.0 * e, "wall_s": 3.0 + e, "lr": 0.1,
                "test_accuracy": final * e / 4, "test_loss": 2.0 / e, "train_loss": 2.0 / e,
                **({"noise": {"steps": 10, "small_sq": 3.0, "big_sq": 2.0}} if spec.workers > 1 else {})}
               for e in (1, 2, 3, 4)]
        return {"seed": spec.seed, "batch_per_worker": spec.batch, "global_batch": spec.batch * spec.workers,
                "workers": spec.workers, "lr": 0.1, "steps": spec.steps, "epochs": 4.0, "test_accuracy": final,
                "evaluations": evs, "log": "x", "step_times_ms": [1.0]}
    return train


def test_sweep_keeps_every_seed_and_summarises_median_and_spread():
    calls = []

    def acc(spec):
        calls.append((spec.workers, spec.batch, spec.seed))
        return {1: 0.80, 2: 0.84, 3: 0.82}[spec.seed]

    finished = []
    res = cs.run_sweep([Point(1, 64), Point(2, 64)], "cpu", seeds=[1, 2, 3], sizes={"target": 0.6},
                       train=fake_train(acc), done=finished.append)
    assert calls == [(1, 64, 1), (1, 64, 2), (1, 64, 3), (2, 32, 1), (2, 32, 2), (2, 32, 3)]
    assert finished == [f"{w}w B=64 lr linear, seed {s}" for w in (1, 2) for s in (1, 2, 3)]   # one per run
    assert len(res.runs) == 6 and all("log" not in r and "step_times_ms" not in r for r in res.runs)
    row = res.row("2w B=64 lr linear")
    assert row["repeats"] == 3 and row["seeds"] == [1, 2, 3]
    assert (row["test_accuracy"], row["test_accuracy_min"], row["test_accuracy_max"]) == (0.82, 0.80, 0.84)
    assert row["test_accuracy_runs"] == [0.80, 0.84, 0.82]
    # time to 60%: epoch 3 (0.6..0.63) for all seeds -> 3 s; seed 1 reaches 0.60 exactly at epoch 3
    assert row["time_to_target_runs"] == [3.0, 3.0, 3.0] and row["reached"] == 3
    assert row["b_simple"] == pytest.approx(convergence.noise_scale(32, 64, 3.0, 2.0).b_simple)
    assert "b_simple" not in res.row("1w B=64 lr linear")
    higher = res.with_target(0.83)
    assert higher.row("1w B=64 lr linear")["reached"] == 1 and higher.row("1w B=64 lr linear")["time_to_target"] is None
    text = str(res.table())
    assert "0.8200 (0.8000-0.8400)" in text and "(3/3)" in text and "chance level" not in text
    narrow = res.table(columns=("label", "acc", "train"))
    assert [c.key for c in narrow.columns] == ["label", "acc", "train"] and narrow.rows == res.table().rows
    assert any(n.startswith("training s:") for n in narrow.notes)
    assert not any(n.startswith(("B_simple:", "s to ")) for n in narrow.notes)
    assert sum(n.startswith(("training s:", "B_simple:")) for n in res.table().notes) == 2
    with pytest.raises(ValueError, match="no column 'accuracy'"):
        res.table(columns=("label", "accuracy"))
    stuck = cs.run_sweep([Point(1, 64)], "cpu", seeds=[1, 2, 3], train=fake_train(lambda s: 0.1))
    assert "at chance level (10 classes" in str(stuck.table())
    back = cs.ConvergenceResult.from_dict(res.to_dict(), source="recorded")
    assert back.rows == res.rows and back.where().startswith("recorded on")
    with pytest.raises(RunSpecError, match="at least 3"):
        cs.run_sweep([Point(1, 64)], "cpu", seeds=[1, 1, 2], train=fake_train(lambda s: 0.5))
    with pytest.raises(KeyError, match="no point"):
        res.row("nope")


def test_plots_draw_a_line_per_point(monkeypatch):
    import matplotlib
    matplotlib.use("Agg")
    res = cs.run_sweep([Point(1, 32), Point(1, 512, "none")], "cpu", seeds=[1, 2, 3],
                       train=fake_train(lambda s: 0.7 + 0.01 * s.seed))
    ax = res.plot_curves(x="epoch")
    assert len(ax.get_lines()) == 2
    assert len(res.plot_batch().get_lines()) >= 1
    assert res.plot_curves(metric="test_loss", x="step").get_yscale() == "log"


def test_a_diverged_point_plots_without_warnings_under_a_short_title(monkeypatch):
    """Every seed's loss NaN at one evaluation (the recorded B=16384 linear runs): the curve leaves
    that point out, with no warning printed under the figure, and the axes title leaves the versions
    to the table so that two plots side by side keep their titles apart."""
    import warnings
    import matplotlib
    matplotlib.use("Agg")
    res = cs.run_sweep([Point(2, 64)], "cpu", seeds=[1, 2, 3], train=fake_train(lambda s: 0.1))
    for run in res.runs:
        run["evaluations"][1]["test_loss"] = float("nan")
    res.source, res.provenance = "recorded", {"gpu_model": "NVIDIA H200", "gpu_count": 2, "date": "2026-11-28",
                                              "driver": "580.159.04", "nccl": "2.28.9", "torch": "2.11.0"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ax = res.plot_curves(metric="test_loss")
    ys = ax.get_lines()[0].get_ydata()
    assert math.isnan(ys[1]) and not math.isnan(ys[0])
    assert ax.get_title() == "recorded on 2x NVIDIA H200, 2026-11-28" and "driver" in res.where()


def test_cpu_target_every_median_reaches():
    rows = [{"test_accuracy": 0.8123}, {"test_accuracy": 0.79}]
    assert cs.cpu_target(rows) == math.floor(100 * 0.98 * 0.79) / 100


def test_gpu_sweep_is_not_recorded_yet_on_a_cpu_machine(monkeypatch):
    from ddlab.base import reference
    monkeypatch.setattr(reference, "path", lambda kind, name: "/nonexistent/" + name + ".json")
    m = policy.Machine(gpus=0, software=lambda f, la: (True, ""))
    res = cs.run_or_load(machine=m)
    assert res.source == "missing" and res.where() == "not recorded yet" and "2 GPU" in res.notes[0]
    with pytest.raises(RuntimeError, match="cannot run"):
        cs.run_or_load(source="live", machine=m)


def test_the_committed_gpu_sweep_is_shown_on_a_cpu_machine_and_says_why():
    """The recording in reference/experiments holds every GPU point with three seeds, each run on CUDA."""
    m = policy.Machine(gpus=0, software=lambda f, la: (True, ""))
    res = cs.run_or_load(machine=m)
    assert res.source == "recorded" and res.where().startswith("recorded on 2x NVIDIA H200")
    assert res.notes[0] == "recorded: this machine cannot run it live"
    assert [r["label"] for r in res.rows] == list(dict.fromkeys(p.label for p in cs.points_for("cuda")))
    assert all(r["repeats"] == 3 for r in res.rows) and all(run["device"] == "cuda" for run in res.runs)
    asked = cs.run_or_load("recorded", machine=m)
    assert asked.notes[0] == "the recorded full sweep, shown whatever this machine runs live"


def test_live_sweep_runs_the_live_points_under_one_bar_and_logs_each_launch(monkeypatch, tmp_path):
    """Live, the GPU sweep runs the LIVE_GPU points on CUDA; sweep() gives run_sweep one progress bar
    over its runs (points x seeds) and sends each launch's lines to its log file."""
    seen = {}

    def fake(points, device, progress=None, done=None, **kw):
        seen.update(points=points, device=device, **kw)
        for p in points:
            for seed in cs.SIZES[device]["seeds"]:
                progress(f"{p.label} seed {seed}: a line")
                done(f"{p.label}, seed {seed}")
        return "result"
    monkeypatch.setattr(cs, "run_sweep", fake)
    m = policy.Machine(gpus=2, software=lambda f, la: (True, ""))
    log = tmp_path / "sweep.log"
    assert cs.run_or_load("live", machine=m, log=str(log)) == "result"
    points = cs.points_for("cuda", live=True)
    assert seen == {"points": points, "device": "cuda"}
    assert len(log.read_text().splitlines()) == len(points) * len(cs.SIZES["cuda"]["seeds"])
    seen.clear()
    monkeypatch.setattr(cs, "run_sweep", lambda points, device, **kw: seen.update(kw) or "plain")
    assert cs.sweep(points, "cpu", log=None, seeds=[1, 2, 3]) == "plain" and seen == {"seeds": [1, 2, 3]}


# ----------------------------------------------------------------------------- a real run
@pytest.mark.slow
def test_two_process_run_scores_the_test_set_each_half_epoch_with_scaled_warmed_up_lr():
    from ddlab.training import runs
    spec = RunSpec(launcher="ddp", workers=2, model="mlp-small", batch=16, steps=40, warmup_steps=1, device="cpu",
                   seed=5, timeout=300,
                   extra_args=("--optimizer", "sgd", "--lr", "0.02", "--lr-scaling", "linear", "--lr-warmup-epochs",
                               "1", "--train-samples", "640", "--eval-every", "0.5", "--noise-scale",
                               "--test-samples", "2000"))
    r = runs.train(spec)
    assert r["ranks_agree"] is True and r["lr"] == pytest.approx(0.04)   # 0.02 x 2 workers (reference: 16/worker)
    assert (r["train_samples"], r["steps_per_epoch"], r["lr_warmup_steps"]) == (640, 20, 20)
    evs = r["evaluations"]
    assert [e["step"] for e in evs] == [10, 20, 30, 40] and [e["epoch"] for e in evs] == [0.5, 1.0, 1.5, 2.0]
    # the last step before the first evaluation (step index 9) ran at the warm-up's rate
    assert evs[0]["lr"] == pytest.approx(convergence.lr_at(9, 0.02, 0.04, 20)) and evs[-1]["lr"] == pytest.approx(0.04)
    assert all(0 < e["test_accuracy"] <= 1 and e["test_loss"] > 0 for e in evs)
    assert r["test_accuracy"] == evs[-1]["test_accuracy"] and r["test_samples"] == 2000
    assert all(a["train_s"] < b["train_s"] for a, b in zip(evs, evs[1:]))
    assert evs[-1]["test_loss"] < evs[0]["test_loss"] * 1.5   # it trained, not diverged
    for e in evs:
        n = e["noise"]
        assert n["steps"] == 10 and n["small_sq"] > n["big_sq"] > 0   # one rank's gradient is noisier
    assert convergence.pooled_noise_scale([r]).steps == 40


# ----------------------------------------------------------------------------- the recording script
def load_recorder():
    import importlib.util
    import os
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools", "recording",
                        "record_convergence.py")
    spec = importlib.util.spec_from_file_location("record_convergence", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_recorder_parts_cover_the_gpu_points_and_merge_into_one_result(tmp_path, capsys):
    rec = load_recorder()
    by_rule = [pt for r in ("none", "linear", "warmup") for pt in rec.points_of(f"batch:{r}")]
    assert sorted(by_rule, key=str) == sorted(rec.points_of("batch"), key=str)
    for part, seed_acc in (("batch-none", 0.7), ("workers", 0.8)):
        pts = rec.points_of(part.replace("-", ":") if part != "workers" else part)
        res = cs.run_sweep(pts, "cuda", seeds=[1, 2, 3], train=fake_train(lambda s, a=seed_acc: a))
        cs.save(res, str(tmp_path / f"convergence-part-{part}.json"))
    path = rec.merge(str(tmp_path))
    merged = cs.ConvergenceResult.from_dict(__import__("json").load(open(path)), source="recorded")
    labels = [r["label"] for r in merged.rows]
    assert labels == [p.label for p in rec.points_of("batch:none")] + [p.label for p in rec.points_of("workers")]
    assert len(merged.runs) == 3 * len(labels) and "joined from 2 parts, each recorded on its own" in merged.notes[0]
    assert merged.config["target"] == cs.SIZES["cuda"]["target"]
    with pytest.raises(SystemExit):
        rec.main([str(tmp_path), "batch:fast"])
    assert "unknown part(s) batch:fast" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        rec.main([str(tmp_path), "--seeds", "1", "2"])
    assert "at least 3 different seeds" in capsys.readouterr().err


def test_a_joined_sweep_is_dated_by_its_latest_run_and_names_each_day(tmp_path):
    """Points kept from an earlier day and points run today: the joined result's caption carries the
    latest date, a note names each day with its count of points, and the command is the join's."""
    rec = load_recorder()
    points = rec.points_of("workers")
    parts = []
    for pts, day in ((points[:1], "2026-11-24T06:50:06+00:00"), (points[1:], "2026-11-28T09:02:15+00:00")):
        res = cs.run_sweep(pts, "cuda", seeds=[1, 2, 3], train=fake_train(lambda spec: 0.8))
        res.provenance = {"gpu_model": "NVIDIA H200", "gpu_count": 2, "date": day, "command": "run_sweep(...)"}
        for run in res.runs:
            run["provenance"] = dict(res.provenance)
        parts.append(res)
    joined = rec.join(parts, ["first note"], command="record_convergence.py OUT_DIR workers")
    assert joined.provenance["date"] == "2026-11-28T09:02:15+00:00"
    assert joined.provenance["command"] == "record_convergence.py OUT_DIR workers"
    assert joined.notes[0] == "first note"
    assert f"2026-11-24 (1 point); 2026-11-28 ({len(points) - 1} points)" in joined.notes[1]
    assert parts[0].provenance["date"].startswith("2026-11-24")          # the inputs are left as they were
    one_day = rec.join(parts[1:], [])
    assert one_day.notes == [] and one_day.provenance["command"] == "run_sweep(...)"


def test_recorder_keeps_finished_points_of_a_cut_call_and_goes_on_from_them(tmp_path):
    rec = load_recorder()
    points = rec.points_of("workers")
    at = cs.fixed_steps(points, cs.SIZES["cuda"])
    calls, scored_at = [], set()

    def acc(spec):
        calls.append((spec.workers, spec.batch * spec.workers, spec.seed))
        scored_at.add(spec.extra_args[spec.extra_args.index("--eval-steps") + 1])
        if len(calls) > 7:                      # the call is cut short during the third point
            raise TimeoutError("cut short")
        return 0.8 + 0.01 * spec.seed

    with pytest.raises(TimeoutError):
        rec.run_part(str(tmp_path), "workers", [1, 2, 3], train=fake_train(acc))
    kept = sorted(p.name for p in tmp_path.iterdir())
    assert kept == sorted(os.path.basename(rec.point_file(str(tmp_path), p)) for p in points[:2])
    first = cs.ConvergenceResult.from_dict(json.load(open(rec.point_file(str(tmp_path), points[0]))))
    assert first.config["fixed_steps"] == at and [r["label"] for r in first.rows] == [points[0].label]
    assert scored_at == {str(at)}     # every run scored at the whole part's fixed step, not its own point's
    calls.clear()

    def acc2(spec):
        calls.append((spec.workers, spec.batch * spec.workers, spec.seed))
        return 0.8
    path, returned = rec.run_part(str(tmp_path), "workers", [1, 2, 3], train=fake_train(acc2))
    assert calls == [(p.workers, p.global_batch, s) for p in points[2:] for s in (1, 2, 3)]   # only the rest ran
    part = cs.ConvergenceResult.from_dict(json.load(open(path)))
    assert [r["label"] for r in part.rows] == [p.label for p in points]
    assert len(part.runs) == 3 * len(points) and part.config["fixed_steps"] == at
    assert returned.to_dict() == part.to_dict()
    # other seeds than the kept file's: the point runs again
    calls.clear()
    rec.run_part(str(tmp_path), "workers", [4, 5, 6], train=fake_train(acc2))
    assert len(calls) == 3 * len(points)


def test_recorder_never_joins_points_of_another_machine(tmp_path, monkeypatch, capsys):
    """A kept point recorded on the H200 pair is neither run again nor joined on the H100 pair: the
    recorder stops before measuring and names the point and what differs; join refuses such a mix."""
    from ddlab.system import frameworks
    rec = load_recorder()
    points = rec.points_of("workers")
    h200 = {"machine": "2x NVIDIA H200, NV18", "gpu_model": "NVIDIA H200", "gpu_count": 2, "driver": "580.95.05",
            "cuda_runtime": "13.0", "nccl": "2.28.9", "torch": "2.11.0"}
    h100 = dict(h200, machine="2x NVIDIA H100 80GB HBM3, NV18", gpu_model="NVIDIA H100 80GB HBM3", driver="580.159.04")
    kept = cs.run_sweep(points[:1], "cuda", seeds=[1, 2, 3], train=fake_train(lambda spec: 0.8))
    kept.provenance = h200
    cs.save(kept, rec.point_file(str(tmp_path), points[0]))
    assert rec.kept_elsewhere(str(tmp_path), ["workers"], h200) == []
    (line,) = rec.kept_elsewhere(str(tmp_path), ["workers"], h100)
    assert os.path.basename(rec.point_file(str(tmp_path), points[0])) in line and "2x NVIDIA H200, NV18" in line
    assert "gpu_model 'NVIDIA H200' there, 'NVIDIA H100 80GB HBM3' here" in line
    other = cs.run_sweep(points[1:2], "cuda", seeds=[1, 2, 3], train=fake_train(lambda spec: 0.8))
    other.provenance = h100
    monkeypatch.setattr(rec, "here_provenance", lambda: h100)
    monkeypatch.setattr(frameworks, "gpu_count", lambda framework: 2)
    monkeypatch.setattr(rec.recording, "use_hardware_label", lambda: h100["machine"])
    monkeypatch.setattr(rec.recording, "cannot_save", lambda: None)
    monkeypatch.setattr(cs, "run_sweep", lambda *a, **kw: pytest.fail("measured before the check"))
    assert rec.main([str(tmp_path), "workers"]) == 2
    out = capsys.readouterr().out
    assert "a sweep is joined from one machine only" in out and "move those files out of" in out
    with pytest.raises(rec.OtherMachine, match="recorded on 2x NVIDIA H100 80GB HBM3, NV18"):
        rec.join([kept, other], [])


def test_convergence_quiz_checks_answers():
    from ddlab.course import checks, quiz_questions
    qs = quiz_questions.QUIZZES[9]
    assert qs is quiz_questions.CONVERGENCE_QUIZ and all(0 <= q.answer < len(q.choices) for q in qs)
    assert all(set(q.why_not) == set(range(len(q.choices))) - {q.answer} for q in qs)   # every wrong choice explained
    assert checks.check_quiz_answer(1, "b", 9).correct
    wrong = checks.check_quiz_answer(1, "c", 9)
    assert not wrong.correct and qs[0].why_not[2] in wrong.message       # the chosen answer's own explanation
    assert checks.quiz_text(9).startswith(f"1. {qs[0].prompt}")


def test_fixed_steps_accuracy_falls_and_noise_table():
    sizes = dict(cs.SIZES["cpu"], train_samples=1024, epochs=2)
    pts = [Point(2, 32), Point(2, 256, "none"), Point(2, 256, "linear"), Point(2, 512, "linear")]
    assert [cs.steps_of(p, sizes) for p in pts] == [64, 8, 8, 4] and cs.fixed_steps(pts, sizes) == 4
    args = cs.spec_of(pts[0], sizes, "cpu", 1, eval_steps=[4]).script_args()
    assert args[args.index("--eval-steps") + 1] == "4"
    final = {32: 0.85, 256: 0.80, 512: 0.70}

    def train(spec, progress=None):
        at = int(spec.extra_args[spec.extra_args.index("--eval-steps") + 1])
        acc = final[spec.batch * spec.workers] - (0.1 if "none" in spec.extra_args else 0) + 0.001 * spec.seed
        evs = [{"epoch": s / spec.steps * 2, "step": s, "train_s": s / 10, "wall_s": s, "lr": 0.1,
                "test_accuracy": acc * s / spec.steps, "test_loss": 1.0, "train_loss": 1.0,
                "noise": {"steps": 4, "small_sq": 2.0 + spec.seed, "big_sq": 1.0 + spec.seed}}
               for s in sorted({at, spec.steps})]
        return {"seed": spec.seed, "batch_per_worker": spec.batch, "global_batch": spec.batch * spec.workers,
                "workers": spec.workers, "lr": 0.1, "steps": spec.steps, "epochs": 2.0, "test_accuracy": acc,
                "evaluations": evs}

    res = cs.run_sweep(pts, "cpu", seeds=[1, 2, 3], sizes=sizes, train=train)
    assert res.config["fixed_steps"] == 4
    falls = res.accuracy_falls(tolerance=0.01)
    assert falls["kept"] == 32 and falls["falls"] == 256 and falls["best_by_batch"][256] == pytest.approx(0.802)
    assert res.accuracy_falls(tolerance=0.06)["kept"] == 256
    assert res.accuracy_falls(tolerance=0.5)["falls"] is None
    fixed = str(res.fixed_steps_table())
    assert "after 4 steps" in fixed and f"{0.852 * 4 / 64:.4f}" in fixed   # B=32 seed 2 (median) at step 4 of 64
    noise = res.noise_table()
    est = convergence.noise_scale(16, 32, 4.0, 3.0)   # seed 2 is the median
    assert noise.rows[0]["b_simple"] == pytest.approx(est.b_simple)
    assert len(noise.rows) == 2 + 2 + 2 + 1   # the largest batch ends at the fixed step: one interval
    best, limit = res.batch_limit(tolerance=0.01)[:2]
    assert best == "best median final test accuracy per global batch: 32: 0.8520, 256: 0.8020, 512: 0.7020"
    assert limit.endswith("of the best: 32; the next one, where accuracy falls: 256")
    assert "where accuracy falls: none in this sweep" in res.batch_limit(tolerance=0.5)[1]
    b_lines = [line for line in res.batch_limit() if line.startswith("B_simple")]
    b = statistics.median(r["b_simple"] for r in res.rows if r.get("b_simple") is not None)
    assert len(b_lines) == 1 and b_lines[0].startswith(f"B_simple (median of the 2-worker points): {b:,.0f} images, ")


def test_batch_limit_places_the_noise_scale_between_the_batches():
    rows = [{"label": f"2w B={b}", "workers": 2, "global_batch": b, "test_accuracy": a, "b_simple": n}
            for b, a, n in ((64, 0.92, 2000.0), (1024, 0.915, 3000.0), (4096, 0.85, 2800.0))]
    res = cs.ConvergenceResult(rows, [], "recorded")
    assert res.batch_limit()[2] == "B_simple (median of the 2-worker points): 2,800 images, between those two batches"
    for r in rows:
        r["b_simple"] = 500.0
    assert res.batch_limit()[2].endswith("500 images, at or below the batch that kept its accuracy")
    for r in rows:
        r["b_simple"] = 9000.0
    assert res.batch_limit()[2].endswith("at or above the batch where accuracy falls")
    res.rows = rows[:2]
    assert res.batch_limit()[2].endswith("above every batch of this sweep")
    for r in rows:
        r["b_simple"] = None
    assert len(res.batch_limit()) == 2


def test_a_point_of_two_parts_is_recorded_once_and_scored_at_both_fixed_steps(tmp_path):
    """The workers part's 2-GPU points are in the batch part too, whose fixed step differs:
    recorded by one part, each run is scored at both steps, and the other part takes the file
    without running it again, reading it at its own fixed step."""
    rec = load_recorder()
    shared = [p for p in rec.points_of("workers") if p in rec.points_of("batch")]
    assert shared and all(p.workers == 2 for p in shared)
    at_workers, at_batch = rec.fixed_step_of("workers"), rec.fixed_step_of("batch")
    assert at_workers != at_batch
    assert rec.fixed_step_of("batch:linear") == rec.fixed_step_of("batch:warmup") == at_batch
    calls, scored = [], {}

    def train(spec, progress=None):
        """Evaluations only at the steps asked for (and the last), so a step not asked for reads '-'."""
        calls.append((spec.workers, spec.batch * spec.workers, spec.seed))
        args = list(spec.extra_args)
        steps = []
        for a in args[args.index("--eval-steps") + 1:]:
            if a.startswith("--"):
                break
            steps.append(int(a))
        scored[(spec.workers, spec.batch * spec.workers)] = steps
        res = fake_train(lambda s: 0.8)(spec)
        res["evaluations"] = [dict(res["evaluations"][-1], step=st, epoch=st / 100.0)
                              for st in sorted(set(steps) | {spec.steps})]
        return res
    rec.run_part(str(tmp_path), "workers", [1, 2, 3], train=train)
    for p in rec.points_of("workers"):
        want = sorted({at_workers, at_batch}) if p in shared else [at_workers]
        assert sorted(scored[(p.workers, p.global_batch)]) == want, p.label
        assert scored[(p.workers, p.global_batch)][0] == at_workers       # its own part's step first
    first_file = cs.ConvergenceResult.from_dict(json.load(open(rec.point_file(str(tmp_path), shared[0]))))
    assert first_file.config["scored_steps"] == sorted({at_workers, at_batch})
    for part in ("batch:linear", "batch:warmup"):
        mine = [p for p in shared if p in rec.points_of(part)]
        calls.clear()
        path, joined = rec.run_part(str(tmp_path), part, [1, 2, 3], train=train)
        ran = {(w, b) for w, b, _ in calls}
        assert not ran & {(p.workers, p.global_batch) for p in mine}, f"{part} ran a shared point again"
        assert len(calls) == 3 * (len(rec.points_of(part)) - len(mine))
        assert joined.config["fixed_steps"] == at_batch and "scored_steps" not in joined.config
        table = joined.fixed_steps_table([p.label for p in mine]).to_dict()["rows"]
        assert table and all(r["acc"] != "-" for r in table)                # read at the batch part's step


# ----------------------------------------------------------------------------- readings printed from the rows
def test_the_printed_commands_are_the_launches_the_sweep_starts(monkeypatch):
    """cs.commands prints, per point, the shell line of the launch run_sweep starts with the first seed."""
    from ddlab.measure import launch
    started = []
    monkeypatch.setattr(launch, "shell_line", lambda la, n, argv, env=None, python=None: (la, n, tuple(argv)))

    def train(spec, progress=None):
        started.append((spec.process_launcher, spec.workers, tuple(spec.script_args())))
        return fake_train(lambda s: 0.5)(spec)
    points = cs.points_for("cpu")
    cs.run_sweep(points, "cpu", seeds=[1, 2, 3], train=train)
    assert cs.commands(points, "cpu") == [s for s in started if "--seed" in s[2] and
                                          s[2][s[2].index("--seed") + 1] == "1"]
    assert len(cs.commands(points, "cpu")) == len(points)


def test_a_shell_line_names_the_environment_launcher_script_and_flags():
    from ddlab.measure import launch
    line = launch.shell_line("torchrun", 2, ["/x/my script.py", "--lr", "0.1"], {"OMP_NUM_THREADS": "1", "NCCL_X": None},
                             python="/py")
    assert line == ("env -u NCCL_X OMP_NUM_THREADS=1 /py -m torch.distributed.run --standalone --nproc-per-node=2 "
                    "'/x/my script.py' --lr 0.1")


def recorded_like():
    """Rows shaped like the GPU sweep's: a stable and two diverged rules at one batch, one configuration
    under three names at the reference batch, and 1 vs 2 workers at two batches."""
    def row(w, b, rule, warm, lr, acc, diverged=0, ttt=None):
        r = {"label": Point(w, b, rule, warm).label, "workers": w, "global_batch": b, "rule": rule,
             "warmup_epochs": warm, "lr": lr, "test_accuracy": acc, "diverged": diverged, "repeats": 3}
        if ttt:
            r.update(time_to_target=ttt[1], time_to_target_min=ttt[0], time_to_target_max=ttt[2],
                     time_to_target_runs=list(ttt), reached=3)
        return r
    rows = [row(2, 64, "none", 0.0, 0.02, 0.92, ttt=(4.0, 4.1, 6.8)),
            row(2, 64, "linear", 0.0, 0.02, 0.92, ttt=(7.7, 8.5, 10.1)),
            row(2, 64, "linear", 2.0, 0.02, 0.92, ttt=(4.1, 8.3, 8.5)),
            row(2, 4096, "none", 0.0, 0.02, 0.85),
            row(2, 4096, "linear", 0.0, 1.28, 0.10, diverged=2),
            row(2, 4096, "linear", 2.0, 1.28, 0.10, diverged=3),
            row(1, 256, "linear", 0.0, 0.08, 0.92, ttt=(1.3, 1.3, 3.4)),
            row(2, 256, "linear", 0.0, 0.08, 0.92, ttt=(2.3, 2.6, 2.7)),
            row(1, 1024, "linear", 2.0, 0.32, 0.92, ttt=(1.1, 1.18, 1.3)),
            row(2, 1024, "linear", 2.0, 0.32, 0.92, ttt=(1.1, 1.17, 1.25))]
    return cs.ConvergenceResult(rows, [], "recorded", config={"base_lr": 0.02, "ref_batch": 64, "target": 0.88})


def test_a_diverged_rule_is_printed_with_its_rate_and_the_unscaled_accuracy_beside_it():
    lines = readings.unstable_rates(recorded_like())
    assert len(lines) == 2                                   # only the points at chance level
    assert all("lr 1.28" in ln and "0.8500" in ln for ln in lines)
    assert "2 of 3 seeds diverged" in lines[0] and "3 of 3 seeds diverged" in lines[1]


def test_one_and_two_workers_are_compared_at_the_same_global_batch():
    later, tie = readings.worker_times(recorded_like())
    assert later.startswith("global batch 256:") and "2 workers reach it later" in later
    assert f"median ratio {2.6 / 1.3:.2f}" in later
    assert tie.startswith("global batch 1,024:") and "about a tie" in tie


def test_rules_that_give_the_same_rate_at_every_step_are_one_configuration():
    res = recorded_like()
    (line,) = readings.same_configurations(res)
    assert line.startswith("global batch 64 on 2 worker(s)") and "lr 0.02 at every step" in line
    assert "4.00-10.10 s" in line                            # the single seeds' range over the three names
    res.config["base_lr"] = 0.01                             # the warm-up now ramps: no longer the same schedule
    assert "warm-up" not in readings.same_configurations(res)[0]


def test_notebook_9_prints_its_launches_and_the_recorded_readings_from_the_rows(monkeypatch, capsys):
    """Notebook 9's cells on a machine without GPUs: one launch line per point before the sweep, and the
    recorded section's readings (the diverged rates, 1 vs 2 GPUs, the one configuration under several
    names) printed from the recording's rows; its tables stay narrow (no column wider than a page)."""
    import matplotlib
    import nbformat
    from ddlab.base import tables
    from ddlab.base.paths import REPO_ROOT
    matplotlib.use("Agg")
    nb = nbformat.read(os.path.join(REPO_ROOT, "notebooks", "9.Convergence-at-Scale.ipynb"), as_version=4)
    src = {c.get("id"): c.source.replace("%matplotlib inline", "") for c in nb.cells if c.cell_type == "code"}
    shown = []
    monkeypatch.setattr(tables, "show", shown.append)
    monkeypatch.setattr(policy.Machine, "detect", classmethod(lambda cls: policy.Machine(gpus=0)))
    ns: dict = {}
    for cid in ("nb7-001", "nb7-003"):
        exec(compile(src[cid], cid, "exec"), ns)
    capsys.readouterr()
    exec(compile(src["nb7-005"], "nb7-005", "exec"), ns)
    assert capsys.readouterr().out.splitlines() == cs.commands(ns["POINTS"], "cpu")
    ns["recorded"] = rec = cs.run_or_load("recorded")
    shown.clear()
    exec(compile(src["nb7-017"], "nb7-017", "exec"), ns)
    out = capsys.readouterr().out
    timed = rec.with_target(cs.SIZES["cuda"]["target"])
    for line in readings.unstable_rates(rec) + readings.worker_times(timed) + readings.same_configurations(timed):
        assert line in out
    assert readings.unstable_rates(rec) and readings.worker_times(timed) and readings.same_configurations(timed)
    def width(t):      # of the header and rows, two spaces between columns
        body = t.cells()
        return sum(max([len(c.heading)] + [len(r[i]) for r in body]) for i, c in enumerate(t.columns)) \
            + 2 * (len(t.columns) - 1)
    assert shown and all(width(t) <= 120 for t in shown), [width(t) for t in shown]
