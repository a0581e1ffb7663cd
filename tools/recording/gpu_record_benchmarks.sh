#!/usr/bin/env bash
# One run on a GPU machine: Horovod GPU build + smoke tests, topology, our p2p test and the
# collective sweeps. Everything lands in $OUT/results.tgz (plus the Horovod wheel in parts, written by
# gpu_setup.sh when it builds Horovod).
#
#   OUT=/some/dir [NAME=...] bash tools/recording/gpu_record_benchmarks.sh
#
# NAME (file names) and DDLAB_MACHINE (the provenance's label) default to the hardware's own
# name (machine_name.sh); the topology is saved as source_code/reference/topologies/$NAME.json.
set -u
OUT=$(realpath -m "${OUT:-/tmp/out}"); W=$OUT/work; mkdir -p "$W"
cd "$(dirname "$0")/../.."
source tools/recording/gpu_setup.sh
PY=python3
source tools/recording/machine_name.sh || exit 1
T0=$(date +%s); step() { echo "== [$(( $(date +%s) - T0 )) s] $*"; }

step "Horovod GPU build"
PYTHON=python3 HOROVOD_SDIST=$DDLAB_HOROVOD_SDIST HOROVOD_CACHE=/tmp/hvdcache \
  timeout 400 bash tools/build_horovod.sh > "$W/hvd_build.txt" 2>&1; echo "build rc=$?" | tee -a "$W/hvd_build.txt"
timeout 300 horovodrun --check-build >> "$W/hvd_build.txt" 2>&1    # record_horovod_smoke.py reads its report
tail -18 "$W/hvd_build.txt"; cp /tmp/hvdcache/build.log "$W/hvd_build_full.log" 2>/dev/null
for path in default shm; do
  e=$(python3 -m ddlab.system.nccl env $path)
  env $e NCCL_DEBUG=INFO timeout 120 horovodrun -np 2 -H localhost:2 --gloo python3 -m ddlab.measure.smoke hvd-torch > "$W/hvd_smoke_$path.log" 2>&1
  echo "hvd smoke $path rc=$?"; grep -h '"kind": "smoke"' "$W/hvd_smoke_$path.log"; grep -h " via " "$W/hvd_smoke_$path.log" | head -2
done
step "doctor and topology"
python3 -m ddlab doctor > "$W/doctor.txt" 2>&1; python3 -m ddlab doctor --json > "$W/.doctor.json.tmp" 2>&1; mv -f "$W/.doctor.json.tmp" "$W/doctor.json"
python3 -m ddlab topo > "$W/topo_report.txt" 2>&1; head -20 "$W/topo_report.txt"
nvidia-smi topo -m > "$W/topo.txt" 2>&1
python3 -m ddlab topo --save "$NAME" > "$W/topo_save.txt" 2>&1; tail -2 "$W/topo_save.txt"
step "p2p"
OUT=$W/p2p timeout 300 bash tools/recording/gpu_p2p.sh 2>&1 | tail -40
step "collectives"
OUT=$W/allreduce timeout 420 bash tools/recording/gpu_allreduce.sh 2>&1 | tail -30
step "pack"
cp -r source_code/reference "$W/reference"
echo "turn the Horovod part into source_code/reference/horovod/$NAME.json with:" \
     "python tools/recording/record_horovod_smoke.py WORK_DIR (the work/ folder of results.tgz)"
tar -czf "$OUT/results.tgz" -C "$OUT" work && rm -rf "$W"
ls -la "$OUT"; step done
