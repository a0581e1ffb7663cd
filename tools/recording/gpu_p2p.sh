#!/usr/bin/env bash
# Build and run the course's p2p bandwidth/latency test on a GPU machine; collect every
# output under $OUT (default ./p2p_out):
#
#   OUT=/some/dir [LINK_PEAK=GBPS] [NAME=...] bash tools/recording/gpu_p2p.sh
#
# LINK_PEAK is the raw rate per direction in GB/s; by default the sum of GPU 0's NVLink rates
# as `nvidia-smi nvlink --status` prints them (NV18 of 26.56 GB/s links: about 478) where every GPU
# pair has the same NVLink, and left out (no share-of-peak lines) elsewhere: without NVLink, or where
# the pairs differ (a mesh of 4 or 8 GPUs), as no one figure is every pair's peak there. NAME (file names) and DDLAB_MACHINE
# default to the hardware's own name (machine_name.sh). PYTHON is the interpreter for the ddlab
# steps (needs numpy). Takes about a minute on 2 GPUs.
# Exit status: 0 when every step did what it should (including the deliberately corrupted
# run failing validation), 1 otherwise.
set -u
OUT=$(realpath -m "${OUT:-$PWD/p2p_out}")
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}
PY=$PYTHON
export PYTHONPATH="$PWD/source_code${PYTHONPATH:+:$PYTHONPATH}"
source tools/recording/machine_name.sh || exit 1
# The sum of GPU 0's NVLinks is one pair's peak only where every pair has the same NVLink (two GPUs, or
# GPUs behind an NVSwitch); on a mesh (NV1/NV2 pairs) or a PCIe machine no one figure holds for every pair.
UNIFORM=$("$PYTHON" -m ddlab.system.gpu_pairs 2>/dev/null | "$PYTHON" -c 'import json,sys; print(int(json.load(sys.stdin).get("uniform_nvlink", False)))' 2>/dev/null)
LINK_PEAK=${LINK_PEAK:-}
if [ -z "$LINK_PEAK" ] && [ "${UNIFORM:-0}" != 1 ]; then
  echo "link peak: left out (the GPU pairs are not all the same NVLink; set LINK_PEAK to give one)"
elif [ -z "$LINK_PEAK" ]; then
  # "Link 0: 26.562 GB/s" per active link of GPU 0; the sum is the raw rate per direction.
  LINK_PEAK=$(nvidia-smi nvlink --status -i 0 2>/dev/null | awk '/Link [0-9]+:/ {
      for (i = 1; i < NF; i++) if ($(i + 1) == "GB/s" && $i ~ /^[0-9.]+$/) s += $i }
      END { if (s > 0) printf "%.2f", s }')
fi
PEAK=()
[ -n "$LINK_PEAK" ] && PEAK=(--link-peak "$LINK_PEAK")
echo "link peak: ${LINK_PEAK:-unknown (no NVLink reported)} GB/s per direction"
DIR=source_code/p2p_bandwidth_latency
BIN=$DIR/p2p_bandwidth_latency
mkdir -p "$OUT"
T0=$(date +%s)
FAILED=0

step() { echo "== [$(( $(date +%s) - T0 )) s] $*"; }
expect() {  # expect NAME WANTED_RC GOT_RC
    if [ "$3" -eq "$2" ]; then echo "   ok: $1 exited $3"; else echo "   UNEXPECTED: $1 exited $3 (wanted $2)"; FAILED=1; fi
}

step "machine"
{ nvidia-smi; nvidia-smi topo -m; nvidia-smi nvlink -s; } > "$OUT/nvidia-smi.txt" 2>&1
nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,compute_cap --format=csv | tee "$OUT/gpus.csv"

step "build (make -B in $DIR)"
make -C "$DIR" -B > "$OUT/build.txt" 2>&1
rc=$?; tail -3 "$OUT/build.txt"; expect build 0 $rc
[ $rc -eq 0 ] || { echo "build failed; see $OUT/build.txt"; exit 1; }
make -C "$DIR" print-arch >> "$OUT/build.txt" 2>&1

step "default: copy engine and SM copies, P2P writes, 1 GiB x 10 (${NAME}_ours.txt/.json for the fixtures)"
"$BIN" ${PEAK[@]+"${PEAK[@]}"} --json "$OUT/${NAME}_ours.json" > "$OUT/${NAME}_ours.txt" 2> "$OUT/${NAME}_ours.err"
rc=$?; expect default 0 $rc
grep -A6 "Share of the raw link rate" "$OUT/${NAME}_ours.txt"; cat "$OUT/${NAME}_ours.err"

step "SM copies, P2P writes and reads"
"$BIN" --copy sm --direction both ${PEAK[@]+"${PEAK[@]}"} --json "$OUT/sm_write_read.json" \
    > "$OUT/sm_write_read.txt" 2> "$OUT/sm_write_read.err"
rc=$?; expect sm 0 $rc
grep -A6 "Share of the raw link rate" "$OUT/sm_write_read.txt"; cat "$OUT/sm_write_read.err"

step "copy engine, P2P reads"
"$BIN" --copy ce --direction read ${PEAK[@]+"${PEAK[@]}"} > "$OUT/ce_read.txt" 2>&1
rc=$?; expect ce-read 0 $rc

step "--test-corrupt: validation must catch a corrupted destination (exit 3)"
"$BIN" --test-corrupt --size 64M --reps 2 > "$OUT/test_corrupt.txt" 2>&1
rc=$?; expect test-corrupt 3 $rc
grep -E "test-corrupt|VALIDATION" "$OUT/test_corrupt.txt"

step "one GPU visible (CUDA_VISIBLE_DEVICES=0): local copies only, exit 0"
CUDA_VISIBLE_DEVICES=0 "$BIN" --size 256M > "$OUT/one_gpu.txt" 2>&1
rc=$?; expect one-gpu 0 $rc

step "no GPU visible (CUDA_VISIBLE_DEVICES=''): one message, exit 2"
CUDA_VISIBLE_DEVICES= "$BIN" > "$OUT/no_gpu.txt" 2>&1
rc=$?; expect no-gpu 2 $rc; cat "$OUT/no_gpu.txt"

step "ddlab p2p --json (build if needed, run, parse, record with provenance)"
"$PYTHON" -m ddlab p2p --json ${PEAK[@]+"${PEAK[@]}"} --record "$OUT/${NAME}_record.json" \
    > "$OUT/.ddlab_p2p.json.tmp" 2> "$OUT/ddlab_p2p.err"
rc=$?; expect "ddlab p2p --json" 0 $rc; cat "$OUT/ddlab_p2p.err"
mv -f "$OUT/.ddlab_p2p.json.tmp" "$OUT/ddlab_p2p.json"     # whole, or the command's partial output named as such
[ $rc -eq 0 ] && "$PYTHON" -c 'import json,sys; print("   summary:", json.load(open(sys.argv[1]))["summary"])' \
    "$OUT/ddlab_p2p.json"

step "ddlab p2p --file on the default run's text (the parser on a real capture)"
"$PYTHON" -m ddlab p2p --file "$OUT/${NAME}_ours.txt" ${PEAK[@]+"${PEAK[@]}"} \
    > "$OUT/parsed_default.txt" 2>&1
rc=$?; expect "ddlab p2p --file" 0 $rc; tail -1 "$OUT/parsed_default.txt"

step "done in $(( $(date +%s) - T0 )) s; outputs:"
ls -l "$OUT"
exit $FAILED
