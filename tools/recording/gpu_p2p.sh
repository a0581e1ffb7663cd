#!/usr/bin/env bash
# Build and run the course's p2p bandwidth/latency test on a GPU machine; collect every
# output under $OUT (default ./p2p_out). Run from the repository root:
#
#   OUT=/some/dir LINK_PEAK=478.08 bash tools/gpu_p2p.sh
#
# LINK_PEAK is the raw rate per direction in GB/s (NV18 = 18 x 26.56 = 478.08); PYTHON the
# interpreter for the ddlab steps (needs numpy). Takes about a minute on 2 GPUs.
# Exit status: 0 when every step did what it should (including the deliberately corrupted
# run failing validation), 1 otherwise.
set -u
OUT=${OUT:-$PWD/p2p_out}
LINK_PEAK=${LINK_PEAK:-478.08}
PYTHON=${PYTHON:-python3}
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

step "default: copy engine and SM copies, P2P writes, 1 GiB x 10 (h200x2_ours.txt/.json for the fixtures)"
"$BIN" --link-peak "$LINK_PEAK" --json "$OUT/h200x2_ours.json" > "$OUT/h200x2_ours.txt" 2> "$OUT/h200x2_ours.err"
rc=$?; expect default 0 $rc
grep -A6 "Share of the raw link rate" "$OUT/h200x2_ours.txt"; cat "$OUT/h200x2_ours.err"

step "SM copies, P2P writes and reads"
"$BIN" --copy sm --direction both --link-peak "$LINK_PEAK" --json "$OUT/sm_write_read.json" \
    > "$OUT/sm_write_read.txt" 2> "$OUT/sm_write_read.err"
rc=$?; expect sm 0 $rc
grep -A6 "Share of the raw link rate" "$OUT/sm_write_read.txt"; cat "$OUT/sm_write_read.err"

step "copy engine, P2P reads"
"$BIN" --copy ce --direction read --link-peak "$LINK_PEAK" > "$OUT/ce_read.txt" 2>&1
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
PYTHONPATH=source_code "$PYTHON" -m ddlab p2p --json --link-peak "$LINK_PEAK" --record "$OUT/h200x2_record.json" \
    > "$OUT/ddlab_p2p.json" 2> "$OUT/ddlab_p2p.err"
rc=$?; expect "ddlab p2p --json" 0 $rc; cat "$OUT/ddlab_p2p.err"
[ $rc -eq 0 ] && "$PYTHON" -c 'import json,sys; print("   summary:", json.load(open(sys.argv[1]))["summary"])' \
    "$OUT/ddlab_p2p.json"

step "ddlab p2p --file on the default run's text (the parser on a real capture)"
PYTHONPATH=source_code "$PYTHON" -m ddlab p2p --file "$OUT/h200x2_ours.txt" --link-peak "$LINK_PEAK" \
    > "$OUT/parsed_default.txt" 2>&1
rc=$?; expect "ddlab p2p --file" 0 $rc; tail -1 "$OUT/parsed_default.txt"

step "done in $(( $(date +%s) - T0 )) s; outputs:"
ls -l "$OUT"
exit $FAILED
