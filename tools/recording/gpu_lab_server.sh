#!/usr/bin/env bash
# Measure a machine of 4 or 8 GPUs in one call (gpu_lab_server.py says what, in which order, and how long):
#
#   OUT=/some/dir bash tools/recording/gpu_lab_server.sh [--allow-nvls] [--only STEP,...] [--skip STEP,...]
#   bash tools/recording/gpu_lab_server.sh --dry-run      (each step's command and estimate; runs nothing)
#
# Sources gpu_setup.sh first (the wheels in .whl/, Horovod from a wheel in .offline/ or built from its
# sdist there; NVLink multicast off), then names the machine (machine_name.sh) and runs every step. Writes
# $OUT/lab_server.tgz, $OUT/steps.json and $OUT/lab_server.txt (and the Horovod wheel in parts, when
# gpu_setup.sh built it). NVLS stays off (NCCL_NVLS_ENABLE=0) unless --allow-nvls is given.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/lab_out}
export OUT
if [[ " $* " == *" --dry-run "* || " $* " == *" -h "* || " $* " == *" --help "* ]]; then
  exec "${PYTHON:-python3}" tools/recording/gpu_lab_server.py "$@"
fi
mkdir -p "$OUT"
source tools/recording/gpu_setup.sh
PY=python3
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
source tools/recording/machine_name.sh || exit 2
exec python3 tools/recording/gpu_lab_server.py --python python3 "$@"
