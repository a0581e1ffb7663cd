"""ddlab: the code behind the course "Distributed Deep Learning: GPU System Topology".

One module per concept of the notebooks: hardware (what this machine has), topology
(nvidia-smi topo -m), nccl_log (NCCL's transport choice), p2p (our CUDA p2p test),
collectives (all-reduce sweeps), cost_model (alpha-beta), launch (multi-process runs with
timeouts), experiments (named experiments, live or recorded), models_torch / models_keras,
train_common (what the training scripts share), throughput (honest images/s), data
(Fashion-MNIST), links (link technologies and their sources), widgets, checks (exercises),
diagrams, provenance and reference (recorded results), smoke (tiny distributed checks), cli.
"""
__version__ = "0.1.0"

import os as _os

# NVLink multicast (NVLS) stays off everywhere the course launches NCCL: on shared
# machines a program that uses it can take the host's GPUs out of service.
_os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
_os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
# Horovod's Keras API must use tf.keras (tf-keras), never Keras 3.
_os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
# TensorFlow's start-up INFO lines (oneDNN, CPU features) drown the course's own output.
_os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO_ROOT = _os.path.dirname(_os.path.dirname(_os.path.dirname(_os.path.abspath(__file__))))
SOURCE_DIR = _os.path.join(REPO_ROOT, "source_code")
REFERENCE_DIR = _os.path.join(SOURCE_DIR, "reference")
