"""Turn the Horovod part of tools/recording/gpu_record_benchmarks.sh's output (its work folder)
into source_code/reference/horovod/<NAME>.json: what Horovod was built with on that machine and
the 2-GPU all-reduce smoke results, with the transport NCCL chose, plus the machine's provenance
(read from the `ddlab doctor --json` taken in the same run; the date is the smoke log's).

Runs anywhere (no GPU needed): it only reads the work folder. The machine is named from the
recorded hardware (doctor.json, and topo.txt when the work folder has it), e.g.
"2x NVIDIA H200, NV18" and the file name 2xh200-nv18 (--name gives another file name; $DDLAB_MACHINE
is kept only where it names the same GPUs). The provenance names no host.
"""
import argparse
import datetime as dt
import json
import os
import re
import sys

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(REPO, "source_code"))

from ddlab.system import nccl, nccl_log, software, topology  # noqa: E402
from ddlab.system.machine_name import machine_label, machine_slug  # noqa: E402
from ddlab.system.provenance import hardware_label  # noqa: E402
from ddlab.base import reference, worker_report  # noqa: E402


def smoke_lines(text: str) -> list:
    """The hvd-torch smoke reports of a log (ddlab.base.worker_report lines), each as its JSON text."""
    return [worker_report.encode(r.pop("kind"), rank=r.pop("rank"), **{k: v for k, v in r.items() if k != "ddlab"})
            for r in worker_report.parse(text, kind="smoke") if r.get("check") == "hvd-torch"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    p.add_argument("work", help="the work folder of gpu_record_benchmarks.sh (doctor.json, hvd_build.txt, "
                                "hvd_smoke_default.log, hvd_smoke_shm.log, optionally topo.txt)")
    p.add_argument("--name", help="file name under source_code/reference/horovod/ (default: the machine's "
                                  "hardware as a file name, e.g. 2xh200-nv18)")
    a = p.parse_args(argv)
    work = a.work
    try:
        doc = json.load(open(os.path.join(work, "doctor.json")))
        build_txt = open(os.path.join(work, "hvd_build.txt")).read()
    except (OSError, ValueError) as exc:
        p.error(f"{work} is not a gpu_record_benchmarks.sh work folder: {exc}")
    topo = None
    topo_txt = os.path.join(work, "topo.txt")
    if os.path.exists(topo_txt):
        try:
            topo = topology.Topology.from_file(topo_txt)
        except topology.TopologyParseError as exc:
            print(f"record_horovod_smoke: {topo_txt} not read, the machine's name has no link part: {exc}")
    smoke = {}
    for path in ("default", "shm"):
        log_path = os.path.join(work, f"hvd_smoke_{path}.log")
        text = open(log_path).read()
        log = nccl_log.parse(text)
        smoke[path] = {
            "env": dict(nccl.get(path).env),
            "lines": smoke_lines(text),
            "transport_counts": log.transport_counts(),
            "nccl_version": log.version,
            "date": dt.datetime.fromtimestamp(os.path.getmtime(log_path), dt.timezone.utc).isoformat(timespec="seconds"),
        }
    names = sorted({g["name"] for g in doc["gpus"]})
    # The version horovodrun --check-build reported ("Horovod vX.Y.Z:"), else the one the course builds.
    built = re.search(r"Horovod v(\S+):", build_txt)
    with open(os.path.join(REPO, "source_code", "patches", "HOROVOD_VERSION")) as f:
        horovod_version = built.group(1) if built else f.read().strip()
    machine, given = machine_label(doc, topo), os.environ.get("DDLAB_MACHINE")
    if given and hardware_label(doc, given) == given:     # the same GPUs, e.g. with their links
        machine = given
    prov = {
        "machine": machine,
        "gpu_model": ", ".join(names), "gpu_count": doc["gpu_count"], "driver": doc["driver"],
        "cuda_driver": doc["cuda_driver"], "cuda_runtime": doc["cuda_runtime"], "nccl": doc["nccl"],
        "torch": doc["torch"], "tensorflow": doc["tensorflow"], "horovod": horovod_version, "python": doc["python"],
        "command": "PYTHON=python3 tools/build_horovod.sh; NCCL_DEBUG=INFO horovodrun -np 2 -H localhost:2 --gloo "
                   "python3 -m ddlab.measure.smoke hvd-torch (default, and with " + nccl.get("shm").env_text() + ")",
        "date": smoke["default"]["date"], "source_files": "tools/recording/gpu_record_benchmarks.sh work folder",
    }
    obj = {"provenance": prov, "check_build": software.parse_check_build(build_txt),
           "build_rc": int(re.search(r"build rc=(\d+)", build_txt).group(1)), "smoke": smoke}
    print(reference.save("horovod", a.name or machine_slug(doc, topo), obj))
    print(json.dumps({k: obj[k] for k in ("check_build", "build_rc")}, indent=1))
    for k, v in smoke.items():
        print(k, v["transport_counts"], v["lines"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
