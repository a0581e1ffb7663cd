"""Record the one-GPU measurements on a GPU machine: the host link (the compiled test
and the torch measurement, every GPU, from each NUMA node), the PCIe links under load, single-GPU
training throughput (the CNN and the seed MLPs, fp32 and bf16) and the data-parallel wrapper's
own cost (plain vs DDP world size 1 vs Horovod size 1, batches 32, 128 and 512).

    python tools/recording/record_host_link.py OUT [--parts compiled,torch,pcie,training,wrapper]
        [--devices 0,1] [--models cnn,mlp-small,mlp-large] [--batches 32,128,512] [--repeats 3]

Writes, each as soon as it is done, with its provenance (ddlab.system.provenance.run_provenance):

    OUT/hostlink-compiled-gpu<i>.json   the compiled test (for source_code/reference/hostlink/<NAME>.json)
    OUT/hostlink-torch-gpu<i>.json      the torch measurement of the same link
    OUT/pcie-load.json                  each GPU's PCIe link read while a copy ran
    OUT/one-gpu-torch-none.json         single-GPU images/s per model and precision (an ExperimentResult)
    OUT/wrapper-cost-torch.json         the wrapper's cost per step and per DDP bucket (an ExperimentResult)
    OUT/input-pipeline-torch-none.json  one step fed from the GPU, pageable, pinned, pinned + non_blocking
    OUT/record_host_link.json           what each part did: done (seconds, file) or skipped (why)

It runs to completion on a machine without a GPU too (the dry run): each GPU part is then
skipped with its reason in one line, and the exit status is 0. A part that fails is reported
and the others still run (exit status 1). Time: seconds per NUMA node for each host-link part,
6 training launches of seconds each and, for the wrapper's cost, models x batches x wrappers
launches (27 with the defaults and Horovod); split the parts over several
runs (--parts) to keep each within 10 minutes.
"""
import argparse
import json
import os
import sys
import time

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(REPO, "source_code"))

from ddlab.base import files  # noqa: E402
from ddlab.cost import step_model  # noqa: E402
from ddlab.measure import host_link, host_link_torch  # noqa: E402
from ddlab.system import policy  # noqa: E402
from ddlab.system.provenance import run_provenance  # noqa: E402
from ddlab.training import one_gpu, recording  # noqa: E402

PARTS = ("compiled", "torch", "pcie", "training", "wrapper", "pipeline")


def say(line: str) -> None:
    print(line, flush=True)


def _ints(text: str) -> list:
    return [int(x) for x in text.split(",") if x.strip()]


def host_part(method: str, devices, a) -> dict:
    written = []
    for i in devices:
        try:
            if method == "compiled":
                r = host_link.run_compiled(i, timeout=a.timeout)
            else:
                r = host_link.measure_torch(i)
        except host_link.HostLinkNoGPU as exc:
            return {"status": "skipped", "why": str(exc)}
        path = host_link.save(r, os.path.join(a.out, f"hostlink-{method}-gpu{i}.json"))    # checked by its schema
        written.append(path)
        for line in host_link.summary(r):
            say(f"  GPU {i}: {line}")
    return {"status": "done", "files": written}


def pcie_part(devices, a) -> dict:
    try:
        check = host_link_torch.pcie_under_load(seconds=2.0)
    except host_link_torch.NoGPU as exc:
        return {"status": "skipped", "why": str(exc)}
    except RuntimeError as exc:
        return {"status": "skipped", "why": f"skipped: {str(exc).splitlines()[0]}"}
    d = dict(check.to_dict(), provenance=run_provenance("tools/recording/record_host_link.py --parts pcie"))
    say(str(check.table()))
    for line in check.flagged():
        say(f"  FLAGGED: {line}")
    return {"status": "done", "files": [files.write_json(os.path.join(a.out, "pcie-load.json"), d)]}


def training_part(which: str, a) -> dict:
    launcher = "none" if which == "training" else "ddp"
    decision = policy.decide(policy.Needs(gpus=1, framework="torch", launcher=launcher))
    if not decision.live:
        return {"status": "skipped", "why": f"skipped: {decision.why}"}
    if which == "training":
        res = one_gpu.single_gpu_throughput(models=a.models, device="cuda", repeats=a.repeats, progress=say)
        name = "one-gpu-torch-none.json"
    elif which == "pipeline":
        from ddlab.training import input_pipeline
        res = input_pipeline.measure(device="cuda")
        name = "input-pipeline-torch-none.json"
    else:
        res = one_gpu.wrapper_cost(models=a.models, batches=a.batches, device="cuda", buckets=step_model.bucket_count,
                                   repeats=max(a.repeats, 5))
        name = "wrapper-cost-torch.json"
    say(res.table())
    return {"status": "done", "files": [recording.save(res, os.path.join(a.out, name))]}


def default_devices() -> list:
    """Every GPU CUDA numbers here: NVML's GPUs under CUDA_VISIBLE_DEVICES (on a machine of 8 GPUs with two
    named, CUDA devices 0 and 1, not 0 to 7); [0] without any, so the parts say why they are skipped."""
    from ddlab.system import hardware
    inv = hardware.inventory(software=False)
    seen = hardware.visible_gpus(os.environ.get("CUDA_VISIBLE_DEVICES"), inv.gpus, os.environ.get("CUDA_DEVICE_ORDER"))
    return list(range(max(1, len(seen.gpus))))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    p.add_argument("out", help="folder for the results (made if missing)")
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)} (default all)")
    p.add_argument("--devices", help="CUDA devices for the host-link parts (default: every GPU PyTorch or "
                                     "NVML sees)")
    p.add_argument("--models", default=",".join(one_gpu.ONE_GPU_MODELS), help="models of the training parts")
    p.add_argument("--batches", default=",".join(map(str, one_gpu.WRAPPER_BATCHES)), help="the wrapper cost's batches")
    p.add_argument("--repeats", type=int, default=3, help="runs of each training configuration (median kept)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds the compiled test may run per GPU")
    a = p.parse_args(argv)
    why = recording.cannot_save()      # asked before any measurement: nothing measured is then lost
    if why:
        p.error(why)
    parts = [x.strip() for x in a.parts.split(",") if x.strip()]
    unknown = [x for x in parts if x not in PARTS]
    if unknown:
        p.error(f"unknown part(s) {', '.join(unknown)}; choose from {', '.join(PARTS)}")
    a.models = [m.strip() for m in a.models.split(",") if m.strip()]
    a.batches = _ints(a.batches)
    os.makedirs(a.out, exist_ok=True)
    say(f"machine: {recording.use_hardware_label()}")
    if a.devices:
        devices = _ints(a.devices)
    else:
        devices = default_devices()
    done, failed = {}, False
    for part in parts:
        t0 = time.monotonic()
        say(f"== {part}")
        try:
            if part in ("compiled", "torch"):
                rec = host_part(part, devices, a)
            elif part == "pcie":
                rec = pcie_part(devices, a)
            else:
                rec = training_part(part, a)
        except Exception as exc:  # noqa: BLE001 - one part's failure is reported, the others still run
            rec = {"status": "failed", "why": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
            failed = True
        rec["seconds"] = round(time.monotonic() - t0, 1)
        done[part] = rec
        say(f"{part}: " + (rec["why"] if rec["status"] == "skipped" else rec["status"] + (f" ({rec['why']})" if
                                                                                          rec.get("why") else ""))
            + f", {rec['seconds']} s")
    files.write_json(os.path.join(a.out, "record_host_link.json"),
                     {"parts": done, "provenance": run_provenance("tools/recording/record_host_link.py "
                                                                  + " ".join(argv if argv is not None else sys.argv[1:]))})
    say(json.dumps({k: v["status"] for k, v in done.items()}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
