"""Turn the Horovod part of tools/gpu_record_benchmarks.sh's output (its work folder) into
source_code/reference/horovod/<name>.json: what Horovod was built with on that machine and the
2-GPU all-reduce smoke results, with the transport NCCL chose, plus the machine's provenance
(read from the `ddlab doctor --json` taken in the same call; the date is the smoke log's).

Usage: python tools/record_horovod_smoke.py WORK_DIR [NAME]"""
import datetime as dt
import json
import os
import re
import sys

from ddlab import hardware, nccl_log, reference

work = sys.argv[1]
name = sys.argv[2] if len(sys.argv) > 2 else "h200x2"
doc = json.load(open(os.path.join(work, "doctor.json")))
build_txt = open(os.path.join(work, "hvd_build.txt")).read()
smoke = {}
for path in ("default", "shm"):
    p = os.path.join(work, f"hvd_smoke_{path}.log")
    text = open(p).read()
    log = nccl_log.parse(text)
    smoke[path] = {
        "env": {"default": {}, "shm": {"NCCL_P2P_LEVEL": "LOC"}}[path],
        "lines": [l[l.index("SMOKE"):] for l in text.splitlines() if "SMOKE hvd-torch" in l],
        "transport_counts": log.transport_counts(),
        "nccl_version": log.version,
        "date": dt.datetime.fromtimestamp(os.path.getmtime(p), dt.timezone.utc).isoformat(timespec="seconds"),
    }
names = sorted({g["name"] for g in doc["gpus"]})
prov = {
    "machine": os.environ.get("DDLAB_MACHINE", "lent nvidia-h200-x2"), "gpu_model": ", ".join(names),
    "gpu_count": doc["gpu_count"], "driver": doc["driver"], "cuda_driver": doc["cuda_driver"],
    "cuda_runtime": doc["cuda_runtime"], "nccl": doc["nccl"], "torch": doc["torch"],
    "tensorflow": doc["tensorflow"], "horovod": "0.28.1", "python": doc["python"], "hostname": doc["hostname"],
    "command": "PYTHON=python3 tools/build_horovod.sh; NCCL_DEBUG=INFO horovodrun -np 2 -H localhost:2 --gloo "
               "python3 -m ddlab.smoke hvd-torch (default, and with NCCL_P2P_LEVEL=LOC)",
    "date": smoke["default"]["date"], "source_files": "tools/gpu_record_benchmarks.sh work folder",
}
build_seconds = re.search(r"seconds=(\d+)", build_txt)
obj = {"provenance": prov, "check_build": hardware.parse_check_build(build_txt),
       "build_rc": int(re.search(r"build rc=(\d+)", build_txt).group(1)), "smoke": smoke}
print(reference.save("horovod", name, obj))
print(json.dumps({k: obj[k] for k in ("check_build", "build_rc")}, indent=1))
for k, v in smoke.items():
    print(k, v["transport_counts"], v["lines"])
