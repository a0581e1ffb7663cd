"""Record the convergence sweep on a 2-GPU machine: global batch vs held-out test accuracy,
the linear learning-rate rule with and without warm-up, 1 vs 2 GPUs, 3 seeds per point.

    python tools/recording/record_convergence.py OUT_DIR [PART ...] [--seeds 1 2 3] [--merge]

PART is "batch" (2 GPUs, global batch 64 ... 16384, learning rate unscaled, linear, linear
with 2 warm-up epochs) or "workers" (global batch 256, and 1024 with 2 warm-up epochs, on 1 and 2 GPUs), or one rule
of the batch part ("batch:none", "batch:linear", "batch:warmup") to keep a run within 10 minutes.
Default: every part. Each point (all its seeds) is written to OUT_DIR/convergence-point-<POINT>.json
as soon as it is done, and a point whose file is already in OUT_DIR is not run again: a run cut
short keeps its finished points, and the next run (with those files copied into its OUT_DIR)
goes on from there (only from points of this machine: kept points recorded on another GPU model or
count, driver, CUDA, NCCL or PyTorch stop the run before it measures anything, and it says which).
When every point of a part is there, they are joined into
OUT_DIR/convergence-part-<PART>.json; --merge (no runs) joins every part found in OUT_DIR into
OUT_DIR/convergence-torch-ddp-cnn.json, ready for source_code/reference/experiments/.

Every run is ddlab.course.convergence_sweep.spec_of(point, SIZES["cuda"], "cuda", seed): the course's
CNN on all 60,000 training images for 10 epochs, SGD (momentum 0.9) at 0.02 for batch 64,
the test set scored after every epoch with the training seconds so far; the 2-GPU runs also
log the gradient norms for the noise scale. The live GPU notebook runs a subset of these
points (ddlab.course.convergence_sweep.LIVE_GPU), each the same run description.

Time: one run at global batch 256 is tens of seconds, most of it start-up (imports, CUDA and NCCL
set-up, the model), so a point with three seeds is about a minute; the smallest batches take
longest (9,375 steps at global batch 64). Plan
one PART per run of about 10 minutes; a part cut short goes on from its saved points in the next run.
"""
import argparse
import glob
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "source_code"))

from ddlab.course import convergence_sweep as cs  # noqa: E402
from ddlab.system import frameworks, provenance  # noqa: E402
from ddlab.training import recording  # noqa: E402

RULES = {"none": ("none", 0.0), "linear": ("linear", 0.0), "warmup": ("linear", 2.0)}
PARTS = ["batch", "workers"] + [f"batch:{r}" for r in RULES]


def points_of(part: str) -> list:
    if part.startswith("batch:"):
        rule, warm = RULES[part.split(":")[1]]
        return [p for p in cs.points_for("cuda", "batch") if (p.rule, p.warmup_epochs) == (rule, warm)]
    return cs.points_for("cuda", part)


def point_file(out: str, point) -> str:
    """Where one point's runs (all seeds) are kept, e.g. convergence-point-2w-b64-linear-warm2.json."""
    warm = f"-warm{point.warmup_epochs:g}" if point.warmup_epochs else ""
    return os.path.join(out, f"convergence-point-{point.workers}w-b{point.global_batch}-{point.rule}{warm}.json")


class OtherMachine(SystemExit):
    """Kept points or parts recorded on another machine or software than the rest: a sweep is joined
    from one machine's runs only (its times to accuracy compare only there)."""


def _elsewhere(what: str, there: dict, here: dict, here_name: str) -> str:
    return (f"record_convergence: error: {what} was recorded on {provenance.machine_of(there)} "
            f"({'; '.join(provenance.differences(there, here))}), not on {here_name}, and a sweep is joined "
            "from one machine only")


def join(results: list, notes: list, command: str = "") -> "cs.ConvergenceResult":
    """One result from several (each point once, in the order given), with the first one's
    provenance and sizes, and ``notes`` first. The joined provenance is dated by its latest run and
    names ``command``; when the runs span several days, a note gives each day and its points (each run
    keeps its own provenance). Raises :class:`OtherMachine` when a result was
    recorded on another machine or software than the first (:data:`ddlab.system.provenance.SAME_MACHINE`)."""
    first = results[0]
    for res in results[1:]:
        if provenance.differences(res.provenance, first.provenance):
            label = ", ".join(r["label"] for r in res.rows)
            raise OtherMachine(_elsewhere(label, res.provenance, first.provenance, provenance.machine_of(first.provenance)))
    rows, runs_, seen = [], [], set()
    for res in results:
        for row in res.rows:
            if row["label"] not in seen:
                seen.add(row["label"])
                rows.append(row)
                runs_ += res.runs_of(row["label"])
    config = dict(first.config, points=[{k: r[k] for k in ("workers", "global_batch", "rule", "warmup_epochs")}
                                        for r in rows])
    prov, notes = dict(first.provenance), list(notes)
    stamps = [r["provenance"]["date"] for r in runs_ if (r.get("provenance") or {}).get("date")]
    if stamps:
        prov["date"] = max(stamps)
    days = {}
    for r in runs_:
        day = str((r.get("provenance") or {}).get("date", "?"))[:10]
        days.setdefault(day, set()).add(r.get("point"))
    if len(days) > 1:
        notes.append("points recorded on " + "; ".join(f"{d} ({len(p)} point{'s' * (len(p) != 1)})"
                                                        for d, p in sorted(days.items()))
                     + "; every run's own provenance names its date and commit")
    if command:
        prov["command"] = command
    return cs.ConvergenceResult(rows, runs_, "live", prov, config, notes)


def merge(out: str) -> str:
    parts = sorted(glob.glob(os.path.join(out, "convergence-part-*.json")))
    if not parts:
        raise SystemExit(f"record_convergence: error: no convergence-part-*.json in {out}")
    results = [cs.load(p) for p in parts]
    names = [os.path.basename(p) for p in parts]
    merged = join(results, [f"joined from {len(parts)} parts, each recorded on its own: " + ", ".join(names)],
                  command=f"python tools/recording/record_convergence.py OUT_DIR --merge ({', '.join(names)})")
    path = cs.save(merged, os.path.join(out, cs.RECORDED_NAME + ".json"))
    print(merged.table(), flush=True)
    return path


def fixed_step_of(part: str) -> int:
    """The step every point of ``part`` is scored at: the steps of its largest global batch."""
    return cs.fixed_steps(points_of(part), cs.SIZES["cuda"])


def steps_to_score(point) -> list:
    """The fixed steps of every part that holds ``point`` (the workers part's 2-GPU points are
    in the batch part too): scored at all of them, a shared point is recorded once."""
    return sorted({fixed_step_of(part) for part in PARTS if point in points_of(part)})


def here_provenance() -> dict:
    """This machine's provenance, as a run made now would record it."""
    return provenance.run_provenance("record_convergence: where the kept points are checked")


def kept_elsewhere(out: str, parts: list, here: dict) -> list:
    """One line for each point file kept in ``out`` for ``parts`` that was recorded on another machine
    or software than ``here``: those points would not be run again, and joined with this machine's."""
    lines = []
    for point in {p for part in parts for p in points_of(part)}:
        path = point_file(out, point)
        if os.path.exists(path):
            there = cs.load(path).provenance
            if provenance.differences(there, here):
                lines.append(_elsewhere(os.path.basename(path), there, here, "this machine"))
    return sorted(lines)


def run_part(out: str, part: str, seeds: list, train=None) -> tuple:
    """Every point of ``part`` not yet in ``out`` (each saved as soon as its seeds are done),
    then the part's file joined from its points; returns (that file's path, the joined result)."""
    points = points_of(part)
    at = fixed_step_of(part)      # the whole part's fixed step, also for one point
    done = []
    for point in points:
        path = point_file(out, point)
        if os.path.exists(path):
            res = cs.load(path)
            scored = res.config.get("scored_steps") or [res.config.get("fixed_steps")]
            if sorted(res.config.get("seeds", [])) == sorted(seeds) and at in scored:
                print(f"record_convergence: {point.label}: already recorded in {path}", flush=True)
                done.append(res)
                continue
            print(f"record_convergence: {point.label}: {path} has other seeds or was not scored at step {at}; "
                  "running it again", flush=True)
        t0 = time.monotonic()
        res = cs.run_sweep([point], "cuda", seeds=seeds, progress=lambda s: print(s, flush=True), train=train,
                           fixed_at=at, score_at=steps_to_score(point))
        cs.save(res, path)
        print(f"record_convergence: {point.label}: {time.monotonic() - t0:.0f} s, wrote {path}", flush=True)
        done.append(res)
    joined = join(done, [f"part {part}: {len(done)} points, each recorded on its own"],
                  command=f"python tools/recording/record_convergence.py OUT_DIR {part}")
    joined.config["fixed_steps"] = at          # a shared point's own file may name another part's
    joined.config.pop("scored_steps", None)
    return cs.save(joined, os.path.join(out, f"convergence-part-{part.replace(':', '-')}.json")), joined


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", help="folder for the result JSON files")
    p.add_argument("parts", nargs="*", help=f"one or more of {', '.join(PARTS)} (default: batch workers)")
    p.add_argument("--seeds", type=int, nargs="+", default=list(cs.SIZES["cuda"]["seeds"]))
    p.add_argument("--merge", action="store_true", help="only join the parts recorded in OUT into one result")
    a = p.parse_args(argv)
    why = recording.cannot_save()      # asked before any measurement: nothing measured is then lost
    if why:
        p.error(why)
    bad = [x for x in a.parts if x not in PARTS]
    if bad:
        p.error(f"unknown part(s) {', '.join(bad)}; choose from {', '.join(PARTS)}")
    os.makedirs(a.out, exist_ok=True)
    if a.merge:
        print("wrote", merge(a.out))
        return 0
    if len(set(a.seeds)) < cs.MIN_SEEDS:
        p.error(f"give at least {cs.MIN_SEEDS} different seeds: a recording shows a median and a spread")
    machine = recording.use_hardware_label()
    gpus = frameworks.gpu_count("torch")
    parts = a.parts or ["batch", "workers"]
    print(f"record_convergence: parts {parts}, seeds {a.seeds}, on {machine}; torch sees {gpus} GPU(s)", flush=True)
    if gpus < 2:
        print("record_convergence: error: the sweep needs 2 GPUs visible to torch", flush=True)
        return 2
    elsewhere = kept_elsewhere(a.out, parts, here_provenance())
    if elsewhere:      # before any measurement: run it there, or move those files aside for a sweep of this machine
        print("\n".join(elsewhere), flush=True)
        print(f"record_convergence: run the sweep on that machine, or move those files out of {a.out} (and out of "
              "tools/recording/pending/, where gpu_batch.sh copies them from) to record this machine's own sweep",
              flush=True)
        return 2
    failed = 0
    for part in parts:
        t0 = time.monotonic()
        try:
            path, res = run_part(a.out, part, a.seeds)
        except Exception as exc:  # reported; the next part still runs
            print(f"record_convergence: part {part} failed: {type(exc).__name__}: {exc}", flush=True)
            failed += 1
            continue
        print(res.table(), f"\nwrote {path} in {time.monotonic() - t0:.0f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
