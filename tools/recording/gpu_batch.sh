#!/usr/bin/env bash
# Run several GPU recording tasks one after another, while time is left, keeping what each
# one finished:
#
#   DEADLINE=570 OUT=/some/dir bash tools/recording/gpu_batch.sh TASK [TASK ...]
#
# TASK is one quoted word list, optionally prefixed by "N@" (skip the task when fewer than N
# seconds are left; the next, shorter task may still fit):
#   "nb NOTEBOOK ..."          the notebooks live under nbval (gpu_nbval.sh; results in nbval/)
#   "exp JOB ... [--batch N]"  record_experiments.py JOB ... (e.g. "230@exp ddp:wide:graph")
#   "conv PART ..."            record_convergence.py PART ... (each finished point is kept)
#   "merge"                    record_convergence.py --merge (joins the parts in the results)
#   "sh COMMAND"               any other command, e.g. "sh python3 -m ddlab report --quick"
# Every task runs under `timeout` with the seconds left before DEADLINE (default 570, counted
# from this script's start). Results go to $RESULTS (default /tmp/ddlab-results): convergence
# points committed in tools/recording/pending/ ($PENDING) are copied there first, so a cut sweep goes on. After
# each task, and once more at the end, the whole folder is packed into $OUT/results.tgz (written
# aside, then moved, so a run cut short still leaves the last complete pack), with tasks.txt: one
# line per task (exit status and seconds, or why it was skipped). Source tools/recording/gpu_setup.sh first.
set -u
cd "$(dirname "$0")/../.."
T0=$(date +%s)
DEADLINE=${DEADLINE:-570}
OUT=${OUT:?set OUT to the folder for results.tgz}
RESULTS=${RESULTS:-/tmp/ddlab-results}
PY=${PYTHON:-python3}
mkdir -p "$RESULTS" "$OUT"
PENDING=${PENDING:-tools/recording/pending}
cp -n "$PENDING"/*.json "$RESULTS"/ 2>/dev/null
left() { echo $((DEADLINE - ($(date +%s) - T0))); }
pack() {
  tar czf "$OUT/results-tmp.tgz" -C "$(dirname "$RESULTS")" "$(basename "$RESULTS")" \
    && mv "$OUT/results-tmp.tgz" "$OUT/results.tgz"
}
n=0
for task in "$@"; do
  n=$((n + 1))
  need=0
  if [[ $task =~ ^([0-9]+)@(.*)$ ]]; then need=${BASH_REMATCH[1]}; task=${BASH_REMATCH[2]}; fi
  read -r kind args <<<"$task"
  if [ "$(left)" -le "$need" ] || [ "$(left)" -le 5 ]; then
    echo "[gpu_batch] skip '$task': $(left) s left, needs $need" | tee -a "$RESULTS/tasks.txt"
    continue
  fi
  log="$RESULTS/task$n-$kind.txt"
  t=$(date +%s)
  echo "[gpu_batch] start '$task' with $(left) s left"
  case $kind in
    nb)    OUT=$RESULTS/nbval timeout "$(left)" bash tools/recording/gpu_nbval.sh $args > "$log" 2>&1 ;;
    exp)   timeout "$(left)" "$PY" tools/recording/record_experiments.py "$RESULTS" $args > "$log" 2>&1 ;;
    conv)  timeout "$(left)" "$PY" tools/recording/record_convergence.py "$RESULTS" $args > "$log" 2>&1 ;;
    merge) timeout "$(left)" "$PY" tools/recording/record_convergence.py "$RESULTS" --merge > "$log" 2>&1 ;;
    sh)    timeout "$(left)" bash -c "$args" > "$log" 2>&1 ;;
    *)     echo "unknown task kind '$kind' (nb, exp, conv, merge, sh)" > "$log"; false ;;
  esac
  rc=$?
  line="task $n '$task': exit $rc in $(( $(date +%s) - t )) s"
  echo "[gpu_batch] $line"; tail -4 "$log"
  echo "$line" >> "$RESULTS/tasks.txt"
  pack
done
pack
echo "[gpu_batch] done in $(( $(date +%s) - T0 )) s"
