#!/usr/bin/env bash
# Run notebooks under nbval on a GPU machine (their live paths) and time each one:
#
#   OUT=/some/dir bash tools/recording/gpu_nbval.sh [NOTEBOOK ...]   (default: Start_Here and every notebook)
#
# Needs nbval, ipykernel and ipywidgets importable (on a machine without a package registry:
# source tools/recording/gpu_setup.sh first, with the wheels in .whl/). Writes $OUT/nbval-<name>.txt (pytest's output,
# each line stamped with the seconds since the notebook started)
# and $OUT/nbval.json (per notebook, kept across runs: seconds, exit status, date, GPUs (every GPU of the
# machine; cuda_visible_devices says which the notebook saw where it was set), and the SHA-256
# of the notebook file that ran, so a time is never held against a later version of the notebook:
# ddlab.course.minutes.timing_is_current). Exit status: 0 when every notebook passed.
#
# Each notebook that passes also updates $TIMINGS (default tools/recording/nbval_timings.json, the
# course's stated-minutes check reads it): {machine: {notebook: {"seconds", "sha256", "date"}}}, the
# machine named by its hardware (ddlab.system.machine_name.this_machine, e.g. "2x NVIDIA H200, NV18"),
# the notebook by its path from the repository root. Its entry replaces the one timed before on that
# machine; a failed notebook leaves the file as it was. A copy of the updated file goes to
# $OUT/nbval_timings.json, so a run on another machine brings it back (copy it over $TIMINGS).
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/nbval_out}
PY=${PYTHON:-python3}
TIMINGS=${TIMINGS:-$PWD/tools/recording/nbval_timings.json}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/source_code${PYTHONPATH:+:$PYTHONPATH}" NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
MACHINE=$("$PY" -c "from ddlab.system.machine_name import this_machine; print(this_machine()[0])")
nbs=${*:-Start_Here.ipynb $(ls notebooks/*.ipynb | sort -t/ -k2 -n)}   # 1, 2, ..., 10 in course order
rc_all=0
# After each notebook its entry is merged into nbval.json, and when it passed into $TIMINGS (each
# read, updated, written to a temporary file, then renamed), so a run cut short, or several runs
# into one $OUT, keep every time measured.
record() {  # notebook seconds exit
  NB="$1" SECS="$2" RC="$3" GPUS="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | paste -sd, -)" \
  MACHINE="$MACHINE" "$PY" - "$OUT/nbval.json" "$TIMINGS" "$OUT/nbval_timings.json" <<'PYEOF'
import json, os, shutil, sys, time
from ddlab.course import minutes     # the notebook's SHA-256, as minutes.timing_is_current compares it


def update(path, change):
    """Read the JSON table at path ({} when absent or unreadable), change it, write it atomically."""
    try:
        with open(path) as f:
            table = json.load(f)
    except (OSError, ValueError):
        table = {}
    change(table)
    with open(path + ".tmp", "w") as f:
        json.dump(table, f, indent=1)
        f.write("\n")
    os.replace(path + ".tmp", path)


run_log, timings, copy = sys.argv[1:4]
nb, secs, rc = os.environ["NB"], float(os.environ["SECS"]), int(os.environ["RC"])
date, sha = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), minutes.file_sha256(nb)
update(run_log, lambda t: t.update({nb: {"seconds": secs, "exit": rc, "date": date, "gpus": os.environ["GPUS"],
                                         "sha256": sha, "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}}))
if rc == 0:
    rel = os.path.relpath(os.path.abspath(nb))
    key = nb if rel.startswith("..") else rel       # a notebook of the repository by its path from the root
    update(timings, lambda t: t.setdefault(os.environ["MACHINE"], {}).update(
        {key: {"seconds": secs, "sha256": sha, "date": date}}))
    shutil.copyfile(timings, copy)
PYEOF
}
for nb in $nbs; do
  name=$(basename "$nb" .ipynb | tr -c 'A-Za-z0-9._\n-' '_')
  t0=$(date +%s.%N)
  # each line of pytest's output stamped with the seconds since the notebook started: a cell's
  # PASSED line says when it finished, so a run stopped part-way still shows each cell's time
  start=$SECONDS
  "$PY" -m pytest --nbval-lax --nbval-current-env -p no:cacheprovider --timeout=600 -v --durations=0 --durations-min=1 "$nb" 2>&1 \
      | while IFS= read -r line; do printf '[%4ss] %s\n' "$((SECONDS - start))" "$line"; done > "$OUT/nbval-$name.txt"
  rc=${PIPESTATUS[0]}
  t1=$(date +%s.%N)
  secs=$("$PY" -c "print(round($t1 - $t0, 1))")
  echo "$nb: exit $rc in $secs s"; tail -3 "$OUT/nbval-$name.txt"
  record "$nb" "$secs" "$rc"
  [ $rc -eq 0 ] || rc_all=1
done
exit $rc_all
