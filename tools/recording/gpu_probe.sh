#!/usr/bin/env bash
# A first look at a GPU machine: facts, topology, Horovod GPU build, Horovod and NCCL smoke
# tests under the three NCCL paths. Writes everything under $OUT (default /tmp/out):
# $OUT/probe.tgz, and the Horovod wheel in 15 MB parts ($OUT/horovod-*.whl.part*, written by
# gpu_setup.sh when it builds Horovod: not when a wheel from .offline/ already imports).
#
#   OUT=/some/dir bash tools/recording/gpu_probe.sh
set -u
OUT=$(realpath -m "${OUT:-/tmp/out}"); mkdir -p "$OUT/probe"
P=$OUT/probe
cd "$(dirname "$0")/../.."
source tools/recording/gpu_setup.sh
{ nvidia-smi; nvidia-smi -q | head -60; gcc --version | head -1; nvcc --version | tail -2; python3 -V;
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())';
  cmake --version | head -1; python3 -m pip list 2>/dev/null; } > "$P/facts.txt" 2>&1
nvidia-smi topo -m > "$P/topo.txt" 2>&1
nvidia-smi topo -m | cat -A | head -5 > "$P/topo_cat_A.txt"
nvidia-smi nvlink --status > "$P/nvlink_status.txt" 2>&1
python3 -m ddlab doctor > "$P/doctor.txt" 2>&1; python3 -m ddlab doctor --json > "$P/.doctor.json.tmp" 2>&1; mv -f "$P/.doctor.json.tmp" "$P/doctor.json"
# Horovod GPU build from the sdist in .offline/
t0=$(date +%s)
PYTHON=python3 HOROVOD_SDIST=$DDLAB_HOROVOD_SDIST HOROVOD_CACHE=/tmp/hvdcache bash tools/build_horovod.sh > "$P/hvd_build.txt" 2>&1
echo "build rc=$? seconds=$(( $(date +%s) - t0 ))" >> "$P/hvd_build.txt"
cp /tmp/hvdcache/build.log "$P/hvd_build_full.log" 2>/dev/null
# Horovod smoke: 2 GPUs, default and SHM
for path in default shm; do
  env_extra=$(python3 -m ddlab.system.nccl env $path)
  env $env_extra NCCL_DEBUG=INFO timeout 120 horovodrun -np 2 -H localhost:2 --gloo python3 -m ddlab.measure.smoke hvd-torch > "$P/hvd_smoke_$path.log" 2>&1; echo "rc=$?" >> "$P/hvd_smoke_$path.log"
done
# torch.distributed NCCL all-reduce logs under the three paths
for path in default shm socket; do
  e=$(python3 -m ddlab.system.nccl env $path)
  env $e NCCL_DEBUG=INFO timeout 120 python3 -m torch.distributed.run --standalone --nproc-per-node=2 -m ddlab.measure.smoke nccl-allreduce > "$P/nccl_$path.log" 2>&1; echo "rc=$?" >> "$P/nccl_$path.log"
done
tar -czf "$OUT/probe.tgz" -C "$OUT" probe && rm -rf "$P"
tar -xzOf "$OUT/probe.tgz" probe/hvd_build.txt | tail -25
tar -xzOf "$OUT/probe.tgz" probe/topo.txt
