"""Shared by the experiment tests: results and launches shaped like real ones (no GPU needed)."""
import json

from ddlab.measure import launch
from ddlab.training.results import ExperimentResult


def fake_paths_result():
    """An nccl-paths result shaped like a recorded GPU one (for the formatting and loading logic)."""
    def row(path, workers, ips, speedup, transport, run):
        return {"path": path, "workers": workers, "images_per_s": ips, "speedup": speedup, "env": {},
                "env_text": path, "step_ms_median": 1.0, "step_ms_p10": 0.9, "step_ms_p90": 1.1,
                "step_ms_spread": "0.900-1.100", "global_batch": 512 * workers, "test_accuracy": 0.8,
                "transport": transport, "run": run}
    # the plain one-GPU run (launcher none) every speedup divides by, then DDP's own one-worker run
    rows = [dict(row("plain", 1, 100.0, 1.0, "-", 3), launcher="none", plain=True),
            row("1 worker", 1, 80.0, 0.8, "-", 0), row("default", 2, 185.0, 1.85, "P2P", 1),
            row("shm", 2, 86.0, 0.86, "SHM", 2),
            {"path": "socket", "workers": 2, "env": {}, "env_text": "socket", "error": "timed out after 300 s"}]
    prov = {"machine": "h200x2", "gpu_model": "NVIDIA H200", "gpu_count": 2, "date": "2026-11-22T00:00:00+00:00"}
    cfg = {"framework": "torch", "launcher": "ddp", "model": "wide", "batch_size": 512, "device": "cuda",
           "baseline_images_per_s": 100.0}
    runs = [{"workers": 1, "launcher": "ddp"}, {"workers": 2, "path": "default"}, {"workers": 2, "path": "shm"},
            {"workers": 1, "launcher": "none"}]
    return ExperimentResult("nccl-paths", rows, "live", prov, ["a note"], cfg, runs)


STUCK_IN_CAPTURE = ('{"ddlab": "report/1", "rank": 0, "kind": "cuda_graph_capture", "state": "start", '
                    '"eager_steps": 3}\n'
                    "Current thread 0x00007f00 (most recent call first):\n"
                    '  File "fmnist_torch.py", line 460 in main\n')


def script_result(images_per_s=100.0, workers=1, **more):
    """What the training script writes (the fields the experiments read)."""
    return dict({"workers": workers, "images_per_s": images_per_s, "global_batch": 512 * workers,
                 "test_accuracy": 0.8, "device": "cuda", "backend": "nccl",
                 "step_time_ms": {"median": 1.0, "p10": 0.9, "p90": 1.1}, "params": 1, "batch_per_worker": 512,
                 "steps": 300, "warmup_steps": 50, "precision": "bf16"}, **more)


class FakeLaunches:
    """Stands in for ddlab.measure.launch.run: each call pops the next outcome (an output text to fail
    with, "timeout" prefixed for a LaunchTimeout, or a result dict to write as the JSON)."""

    def __init__(self, *outcomes):
        self.outcomes, self.argvs, self.envs = list(outcomes), [], []

    def __call__(self, argv, launcher, nproc, env, timeout, echo, python):
        self.argvs.append(list(argv))
        self.envs.append(dict(env))
        outcome = self.outcomes.pop(0)
        res = launch.LaunchResult(command=list(argv), returncode=0, output="", duration_s=1.5)
        if isinstance(outcome, dict):
            with open(argv[argv.index("--json") + 1], "w") as f:
                json.dump(outcome, f)
            return res
        timed_out = outcome.startswith("timeout")
        res.output, res.returncode, res.timed_out = outcome, None if timed_out else -11, timed_out
        raise (launch.LaunchTimeout if timed_out else launch.LaunchError)("launch failed", res)
