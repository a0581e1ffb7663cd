#!/usr/bin/env bash
# Run notebooks under nbval on a GPU machine (their live paths) and time each one:
#
#   OUT=/some/dir bash tools/recording/gpu_nbval.sh [NOTEBOOK ...]   (default: Start_Here and every notebook)
#
# Needs nbval, ipykernel and ipywidgets importable (on a machine without a package registry:
# source tools/recording/gpu_setup.sh first, with the wheels in .whl/). Writes $OUT/nbval-<name>.txt (pytest's output)
# and $OUT/nbval.json (seconds and exit status per notebook). Exit status: 0 when every
# notebook passed.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/nbval_out}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/source_code${PYTHONPATH:+:$PYTHONPATH}" NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
nbs=${*:-Start_Here.ipynb $(ls notebooks/*.ipynb | sort -t/ -k2 -n)}   # 1, 2, ..., 10 in course order
rc_all=0
# nbval.json is written whole at the end (a temporary file, then renamed)
TMP_JSON="$OUT/.nbval.json.tmp"
echo "{" > "$TMP_JSON"
sep=""
for nb in $nbs; do
  name=$(basename "$nb" .ipynb | tr -c 'A-Za-z0-9._\n-' '_')
  t0=$(date +%s.%N)
  "$PY" -m pytest --nbval-lax --nbval-current-env -p no:cacheprovider --timeout=600 -v --durations=0 --durations-min=1 "$nb" \
      > "$OUT/nbval-$name.txt" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  secs=$("$PY" -c "print(round($t1 - $t0, 1))")
  echo "$nb: exit $rc in $secs s"; tail -3 "$OUT/nbval-$name.txt"
  printf '%s  "%s": {"seconds": %s, "exit": %d, "date": "%s", "gpus": "%s"}\n' "$sep" "$nb" "$secs" "$rc" \
      "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | paste -sd, -)" \
      >> "$TMP_JSON"
  sep=","
  [ $rc -eq 0 ] || rc_all=1
done
echo "}" >> "$TMP_JSON" && mv -f "$TMP_JSON" "$OUT/nbval.json"
exit $rc_all
