"""Check the plain-baselines JOB's method: the same plain one-GPU run, once as its own process (as every
experiment launches it) and once through the training script's main() inside one process (as
ddlab.training.plain_runs records the plain-baselines file), interleaved round by round.

    python tools/recording/plain_methods.py OUT_DIR [--models cnn,wide] [--repeats 3] [--dry-run]

Each model runs at the live GPU defaults (ddlab.training.recording.gpu_spec), launcher none, eager.
Prints a table (images/s median and min-max for each way, and their ratio) and writes
OUT_DIR/plain-methods.json. A ratio far from 1 means the plain-baselines file is not the same
measurement as a recording's own plain row. --dry-run runs the same code on the CPU, tiny.
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "source_code"))

from ddlab.base.files import write_json  # noqa: E402
from ddlab.system.provenance import run_provenance  # noqa: E402
from ddlab.training import experiments, plain_runs, recording, runs  # noqa: E402
from ddlab.training.runspec import RunSpec  # noqa: E402

WAYS = ("launched", "in-process")


def plain_spec(model: str, dry_run: bool) -> RunSpec:
    """The plain one-GPU run (ddlab.training.experiments.plain_spec) of ``model`` at the live GPU defaults
    (tiny, on the CPU, with ``dry_run``)."""
    if dry_run:
        return experiments.plain_spec(RunSpec.for_device("cpu", model)).with_(steps=4, warmup_steps=1,
                                                                              test_samples=200, timeout=120)
    return experiments.plain_spec(recording.gpu_spec(model)).with_(timeout=240)


def measure(models, repeats: int, dry_run: bool) -> dict:
    """Each model's plain run both ways, ``repeats`` rounds; the JSON document main() writes."""
    specs = {m: plain_spec(m, dry_run) for m in models}
    got = {(m, w): [] for m in models for w in WAYS}
    for rnd in range(repeats):
        for m, spec in specs.items():
            got[(m, "launched")].append(runs.train(spec))
            got[(m, "in-process")].append(plain_runs.run_once(spec))
            print(f"round {rnd + 1} {m}: launched {got[(m, 'launched')][-1]['images_per_s']:,.0f}, in-process "
                  f"{got[(m, 'in-process')][-1]['images_per_s']:,.0f} images/s", flush=True)
    rows = []
    for m, spec in specs.items():
        ips = {w: [r["images_per_s"] for r in got[(m, w)]] for w in WAYS}
        row = {"model": m, "spec": spec.to_dict(), "images_per_s_each": ips}
        for w in WAYS:
            row.update({f"{w}_images_per_s": statistics.median(ips[w]), f"{w}_min": min(ips[w]),
                        f"{w}_max": max(ips[w])})
        row["in_process_over_launched"] = row["in-process_images_per_s"] / row["launched_images_per_s"]
        rows.append(row)
    return {"experiment": "plain-methods", "repeats": repeats, "order": "interleaved", "rows": rows,
            "provenance": run_provenance(f"tools/recording/plain_methods.py --models {','.join(models)} "
                                         f"--repeats {repeats}")}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out_dir")
    p.add_argument("--models", default="cnn,wide")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--dry-run", action="store_true")
    a = p.parse_args(argv)
    res = measure(a.models.split(","), a.repeats, a.dry_run)
    print(f"{'model':<10} {'launched':>12} {'in-process':>12} {'ratio':>7}")
    for r in res["rows"]:
        print(f"{r['model']:<10} {r['launched_images_per_s']:>12,.0f} {r['in-process_images_per_s']:>12,.0f} "
              f"{r['in_process_over_launched']:>7.2f}")
    os.makedirs(a.out_dir, exist_ok=True)
    write_json(os.path.join(a.out_dir, "plain-methods.json"), res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
