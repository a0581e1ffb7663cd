#!/usr/bin/env bash
# Record the collective sweeps on a machine with 2 or more GPUs.
#
#   OUT=/some/dir [NAME=...] tools/recording/gpu_allreduce.sh   (run from anywhere; OUT defaults to ./out)
#
# NAME (the machine in file names) and DDLAB_MACHINE (its label in the provenance) default to
# the hardware's own name, e.g. 2xh200-nv18 and "2x NVIDIA H200, NV18" (machine_name.sh).
# Writes to $OUT:
#   allreduce_$NAME.json        all-reduce under the NCCL paths default, shm, socket (up to 1 GiB)
#   all_gather_$NAME.json       all-gather, default path
#   reduce_scatter_$NAME.json   reduce-scatter, default path
#   reference_allreduce_$NAME.json  all of the above in one file, ready to commit as
#                               source_code/reference/allreduce/$NAME.json
#   levels_$NAME.json           a 256 MiB all-reduce under each NCCL_P2P_LEVEL, for
#                               source_code/reference/allreduce/$NAME-levels.json (notebook 4)
#   nccl_{default,shm,socket}.log  the NCCL_DEBUG=INFO output of each all-reduce path (parser fixtures)
#   nccl_all_gather_default.log, nccl_reduce_scatter_default.log
#   allreduce.txt, all_gather.txt, reduce_scatter.txt, levels.txt  the printed tables; summary.txt; topo.txt
#
# Time: a minute or two on a two-GPU NVLink machine, and about a minute more for the level sweep. The socket path stays short because the
# sweep picks its iterations per size (at least 5 timed calls, about 0.2 s of work per size);
# every launch also has its own timeout.
set -euo pipefail

cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/source_code${PYTHONPATH:+:$PYTHONPATH}"
# NVLink multicast stays off (ddlab.measure.launch sets it too; this covers anything else started here).
export NCCL_NVLS_ENABLE=0
source tools/recording/machine_name.sh
start=$SECONDS

"$PY" - <<'EOF'
import sys
try:
    import numpy, psutil, torch
except ImportError as exc:
    sys.exit(f"gpu_allreduce.sh: missing Python package: {exc.name} (needs torch, numpy, psutil)")
n = torch.cuda.device_count()
if n < 2:
    sys.exit(f"gpu_allreduce.sh: needs at least 2 GPUs, torch sees {n}")
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, "
      f"{n} x {torch.cuda.get_device_name(0)}")
EOF
nvidia-smi topo -m > "$OUT/topo.txt" 2>&1 || echo "nvidia-smi topo -m failed" >> "$OUT/topo.txt"

# A failed step is reported and the next one still runs; the script's exit code says if any failed.
failed=0

# 1. all-reduce under the three NCCL paths, with NCCL's log kept for each.
timeout 420 "$PY" -m ddlab allreduce --op all_reduce --paths default,shm,socket --max-bytes 1G \
    --timeout 200 --log-dir "$OUT" --out "$OUT/allreduce_$NAME.json" | tee "$OUT/allreduce.txt" \
    || { echo "gpu_allreduce.sh: all_reduce sweep failed (exit $?)"; failed=1; }

# 2. all-gather and reduce-scatter, default path.
for op in all_gather reduce_scatter; do
    timeout 150 "$PY" -m ddlab allreduce --op "$op" --paths default --max-bytes 1G \
        --timeout 120 --log-dir "$OUT" --out "$OUT/${op}_$NAME.json" | tee "$OUT/$op.txt" \
        || { echo "gpu_allreduce.sh: $op sweep failed (exit $?)"; failed=1; }
done

# 3. The NCCL_P2P_LEVEL sweep of notebook 4: one 256 MiB all-reduce under each level, with NCCL's log
#    (the transport it chose).
#    On more than two GPUs it runs on one pair (each level acts per pair): the farthest pair, where the
#    levels differ, else GPUs 0 and 1 (ddlab.system.gpu_pairs says which, and why, in one line).
PAIR_ENV=()
if [ "$("$PY" -c 'import torch; print(torch.cuda.device_count())' || echo 0)" -gt 2 ]; then
  read -r PAIR PAIR_WHY < <("$PY" -m ddlab.system.gpu_pairs | "$PY" -c 'import json,sys; d=json.load(sys.stdin)
p=d.get("level_pair") or [0, 1]; print(f"{p[0]},{p[1]}", d.get("level_pair_why", ""))') || true
  echo "level sweep on GPUs ${PAIR:-0,1}: $PAIR_WHY" | tee "$OUT/levels_pair.txt"
  PAIR_ENV=(env "CUDA_VISIBLE_DEVICES=${PAIR:-0,1}")
fi
timeout 200 ${PAIR_ENV[@]+"${PAIR_ENV[@]}"} "$PY" -m ddlab allreduce --nproc 2 --paths LOC,NVL,PIX,PXB,PHB,SYS \
    --min-bytes 256M --max-bytes 256M --nccl-debug --timeout 60 --out "$OUT/levels_$NAME.json" | tee "$OUT/levels.txt" \
    || { echo "gpu_allreduce.sh: NCCL_P2P_LEVEL sweep failed (exit $?)"; failed=1; }

# 4. One file for source_code/reference/allreduce/, and the summary.
OUT="$OUT" NAME="$NAME" "$PY" - <<'EOF' | tee "$OUT/summary.txt"
import os
from ddlab.measure import collectives as c
out, name = os.environ["OUT"], os.environ["NAME"]
results = []
for f in (f"allreduce_{name}.json", f"all_gather_{name}.json", f"reduce_scatter_{name}.json"):
    path = os.path.join(out, f)
    if os.path.exists(path):
        results += c.read_json(path)
    else:
        print(f"missing {f} (that sweep failed)")
if not results:
    raise SystemExit("no sweep finished: nothing to summarise")
c.write_json(results, os.path.join(out, f"reference_allreduce_{name}.json"))
print()
print("busbw at 512 MiB (for comparison, nccl-tests measured on 2x NVIDIA H200, NV18: 316 default, "
      "27.2 shm, 3.5 socket GB/s)")
print(c.summary(results, at_bytes=512 << 20))
for r in results:
    counts = r.transport_counts()
    if counts is not None:
        print(f"{r.op} {r.path}: transports {counts}")
EOF
echo "gpu_allreduce.sh: done in $((SECONDS - start)) s; results in $OUT"
exit $failed
