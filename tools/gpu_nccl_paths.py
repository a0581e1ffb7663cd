"""Record the NCCL path comparison (DDP and Horovod, cnn and wide) on a 2-GPU machine, writing
each result to OUT_DIR as soon as it exists (so a run cut short keeps what finished).
Usage: python tools/gpu_nccl_paths.py OUT_DIR [launcher:model ...]"""
import os
import sys
import time

from ddlab import experiments

out = sys.argv[1]
jobs = sys.argv[2:] or ["ddp:cnn", "ddp:wide", "horovod:wide", "horovod:cnn"]
os.makedirs(out, exist_ok=True)
for job in jobs:
    launcher, model = job.split(":")
    steps, warm = (200, 30) if model == "cnn" else (80, 20)
    t0 = time.time()
    try:
        res = experiments.nccl_path_comparison("torch", launcher, model, device="cuda", steps=steps,
                                               warmup_steps=warm, timeout=120)
    except Exception as exc:
        print(f"{job}: FAILED {type(exc).__name__}: {exc}", flush=True)
        continue
    res.save(os.path.join(out, experiments.reference_name("nccl-paths", "torch", launcher, model) + ".json"))
    print(f"\n{job} ({time.time() - t0:.0f} s)\n{res.table()}\n", flush=True)
