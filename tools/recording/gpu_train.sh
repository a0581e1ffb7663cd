#!/usr/bin/env bash
# Record the Fashion-MNIST training experiments (scaling, NCCL paths, single-GPU speed options)
# on a 2-GPU machine:
#
#   OUT=/some/dir [TIMEOUT=90] tools/recording/gpu_train.sh [ddp] [horovod] [perf]   (default: all three, in this order)
#
#   ddp      PyTorch DDP (torchrun), models cnn and wide: 1 GPU, then 2 GPUs under the NCCL
#            paths default / shm / socket (NCCL_DEBUG=INFO, transport read from the log).
#            Eager steps: DDP's CUDA-graph capture is opt-in (record it with
#            `python tools/recording/record_experiments.py OUT ddp:cnn:graph`, then `ddp:wide:graph`)
#   horovod  the same with Horovod (horovodrun --gloo; gradients over NCCL); skipped unless
#            HVD_OK=1 (tools/recording/gpu_setup.sh sets it when `import horovod.torch` works)
#   perf     one GPU, model cnn, batch 512: plain fp32, bf16, CUDA graph (fp32, bf16,
#            bf16 + channels-last), torch.compile, compile + CUDA graph  -> which reaches 400k img/s.
#            Last by default: the slowest section (two runs compile with torch.compile)
#
# Sections run in the order given. Every launch is killed after TIMEOUT seconds (default 90);
# a killed run's row shows where each worker was stuck (the workers print their Python
# tracebacks on SIGTERM). Each run prints a start and an end line with its seconds and the
# worker's phase times (imports, distributed init, data, model, warm-up, timed loop, test).
#
# Writes $OUT/experiments/<experiment>-torch-<launcher>-<model>.json (ready to commit to
# source_code/reference/experiments/), and $OUT/experiments/train.txt (everything printed,
# ending with a summary table). Needs Fashion-MNIST on the machine: copy .cache/fashion-mnist
# (a copy of /usr/share/datasets/fashion-mnist) or set DDLAB_DATA_DIR.
#
# The provenance's machine label (DDLAB_MACHINE) defaults to the hardware's own name
# (machine_name.sh), e.g. "2x NVIDIA H200, NV18".
#
# Time: a launch costs tens of seconds (its phase lines say where), so the 23 launches take longer
# than 10 minutes: run one section at a time (`ddp`, then `horovod`, then `perf`).
# A failed run is reported in its row and the rest goes on.
set -uo pipefail

cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT/experiments"
# Horovod and the wheels in .whl/ come from gpu_setup.sh unless the caller sourced it already.
[ -n "${HVD_OK:-}" ] || source tools/recording/gpu_setup.sh
export PYTHONPATH="$PWD/source_code${PYTHONPATH:+:$PYTHONPATH}"
source tools/recording/machine_name.sh || exit 2
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
start=$SECONDS

sections=${*:-ddp horovod perf}
TIMEOUT=${TIMEOUT:-90}
if [ "${HVD_OK:-0}" != 1 ] && [[ " $sections " == *" horovod "* ]]; then
  echo "gpu_train.sh: HVD_OK is not 1 (Horovod for PyTorch not importable): skipping the horovod section"
  sections=${sections//horovod/}
fi

"$PY" -m ddlab data --no-download || {
  echo "gpu_train.sh: Fashion-MNIST is not on this machine: copy .cache/fashion-mnist (prepare_offline.sh gathers it) or set DDLAB_DATA_DIR"
  exit 2; }
"$PY" - <<'EOF' || exit 2
import sys, torch
n = torch.cuda.device_count()
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, NCCL "
      f"{'.'.join(map(str, torch.cuda.nccl.version())) if n else '-'}, {n} x "
      f"{torch.cuda.get_device_name(0) if n else 'no GPU'}")
if n < 1:
    sys.exit("gpu_train.sh: no GPU visible to torch")
EOF

OUT="$OUT" SECTIONS="$sections" TIMEOUT="$TIMEOUT" "$PY" - <<'EOF' 2>&1 | tee -a "$OUT/experiments/train.txt"
import os
from ddlab.training import experiments, recording
sections = os.environ["SECTIONS"].split()
timeout = float(os.environ["TIMEOUT"])
print(f"gpu_train.sh: sections {sections}, timeout {timeout:.0f} s per launch", flush=True)
done = recording.record_gpu_set(os.path.join(os.environ["OUT"], "experiments"), sections=sections,
                                  timeout=timeout, progress=lambda line: print(line, flush=True))
failed = [k for k, v in done.items() if not isinstance(v, experiments.ExperimentResult)
          or any(r.get("error") for r in v.rows)]
print("gpu_train.sh: " + ("all measurements done" if not failed else "with failures or skips: " + ", ".join(failed)))
EOF
echo "gpu_train.sh: done in $((SECONDS - start)) s; results in $OUT/experiments"
