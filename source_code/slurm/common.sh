# Shared by ddp.sbatch and horovod.sbatch (sourced; not a job by itself).
# Every setting below is a variable: set it in the environment you submit from
# (`NCCL_DEBUG=INFO sbatch ...`; sbatch passes your environment on) or edit the default here.

# --- where the course is and which Python runs it ------------------------------------------
# sbatch runs a copy of the batch script, so the course folder comes from the submit folder.
# (The batch script has checked COURSE_DIR: submit from the course folder or set it.)
TRAIN=$COURSE_DIR/source_code/train/fmnist_torch.py
if [ -z "${PYTHON:-}" ]; then
  PYTHON=$COURSE_DIR/.venv/bin/python
  [ -x "$PYTHON" ] || PYTHON=python3
fi
export PYTHONPATH=$COURSE_DIR/source_code${PYTHONPATH:+:$PYTHONPATH}

# --- CPU mode (testing a cluster's Slurm set-up without GPUs) -------------------------------
# `sbatch ddp.sbatch --cpu ...`: workers on CPU cores, Gloo instead of NCCL.
DEVICE=cuda
if [ "${1:-}" = --cpu ]; then
  DEVICE=cpu
  shift
fi
TRAIN_ARGS=("$@")   # the rest goes to fmnist_torch.py (--steps, --batch-size, --json ...)

# --- workers per node ----------------------------------------------------------------------
# One worker per GPU: by default the GPUs Slurm gave this node; in CPU mode two.
if [ "$DEVICE" = cpu ]; then
  PROCS_PER_NODE=${PROCS_PER_NODE:-2}
else
  PROCS_PER_NODE=${PROCS_PER_NODE:-${SLURM_GPUS_ON_NODE:-1}}
fi

# --- the NCCL knobs the course teaches -----------------------------------------------------
# NCCL_DEBUG: WARN stays quiet; INFO prints the transport of every channel (P2P, SHM, NET/IB,
# NET/Socket): read it with `ddlab nccl-log JOB.out`.
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
# NCCL_SOCKET_IFNAME: the network interface for NCCL's bootstrap and its socket transport.
# On nodes with several interfaces (docker0, a management network...) name the fast one,
# e.g. ib0 or eth0, or exclude with a caret: "^docker,lo".
# export NCCL_SOCKET_IFNAME=ib0
# NCCL_IB_HCA: which InfiniBand/RoCE adapters (and ports) NCCL uses between nodes,
# e.g. "mlx5_0:1,mlx5_1:1"; unset, NCCL uses all it finds.
# export NCCL_IB_HCA=mlx5_0
# Gloo (CPU mode, and Horovod's controller) picks its interface by GLOO_SOCKET_IFNAME /
# HOROVOD_GLOO_IFACE; unset, it uses the one that reaches the first node.
# export GLOO_SOCKET_IFNAME=eth0
# NVLink multicast (NVLS) stays off, as everywhere in the course.
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}

# --- timeouts ------------------------------------------------------------------------------
# The job's own limit is #SBATCH --time. TRAIN_TIMEOUT (seconds) bounds each srun below it:
# on expiry every worker gets SIGTERM and prints where it was (a hung collective shows up as
# a stack), then SIGKILL 30 s later.
TRAIN_TIMEOUT=${TRAIN_TIMEOUT:-1500}
# Run the distributed smoke check (one all-reduce, printed per rank) before training: 0 skips it.
PREFLIGHT=${PREFLIGHT:-1}

HEAD=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
echo "ddlab-slurm: job $SLURM_JOB_ID on $SLURM_JOB_NUM_NODES node(s) ($SLURM_JOB_NODELIST), first node $HEAD," \
     "device $DEVICE, python $PYTHON"
