#!/usr/bin/env bash
# Copy-engine peer latency under several ways of measuring it, to see how much of the figure
# is the method: the copy-engine call (cudaMemcpyPeerAsync or UVA cudaMemcpyAsync), the batch
# of copies queued between two events, writes vs reads, and run-to-run spread (each variant
# twice). Run from the repository root on a machine with 2 GPUs:
#
#   OUT=/some/dir bash tools/recording/gpu_latency.sh
#
# Writes $OUT/latency/<variant>-<try>.json (our program's --json) and prints one line per run
# with the GPU-timed P2P=Enabled latency of 0->1 and 1->0 (microseconds).
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/latency_out}
BIN=source_code/p2p_bandwidth_latency/p2p_bandwidth_latency
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD/source_code${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT/latency"
make -C source_code/p2p_bandwidth_latency -B > "$OUT/latency/build.txt" 2>&1 || { tail "$OUT/latency/build.txt"; exit 1; }
for v in "peer-b64:--ce-api peer --latency-batch 64" "uva-b64:--ce-api uva --latency-batch 64" \
         "peer-b256:--ce-api peer --latency-batch 256" "uva-b256:--ce-api uva --latency-batch 256" \
         "peer-read-b64:--ce-api peer --latency-batch 64 --direction read"; do
  name=${v%%:*}; args=${v#*:}
  for try in 1 2; do
    f="$OUT/latency/$name-$try.json"
    # shellcheck disable=SC2086
    timeout 120 "$BIN" --copy ce --size 64M --reps 4 --latency-reps 4096 $args --json "$f" > /dev/null 2> "$f.err"
    rc=$?
    "$PY" - "$f" "$name" "$try" "$rc" <<'PYEOF'
import json, sys
f, name, tr, rc = sys.argv[1:]
try:
    d = json.load(open(f))
except Exception as exc:
    print(f"{name:<14} try {tr}: exit {rc}, no JSON ({exc})"); sys.exit()
from ddlab.measure import p2p
lat = p2p.P2PResult.from_dict(d).matrices.get("lat_gpu_p2p_on")
if lat is None:
    print(f"{name:<14} try {tr}: exit {rc}; no GPU-timed P2P=Enabled latency in the JSON"); sys.exit()
print(f"{name:<14} try {tr}: exit {rc}; GPU-timed latency, P2P on: 0->1 {lat[0][1]:.3f} us, 1->0 {lat[1][0]:.3f} us")
PYEOF
  done
done
