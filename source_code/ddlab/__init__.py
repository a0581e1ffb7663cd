"""ddlab: the code behind the course "Distributed Deep Learning: GPU System Topology".

One module per concept of the notebooks: hardware (what this machine has), topology
(nvidia-smi topo -m), nccl_log (NCCL's transport choice), p2p (our CUDA p2p test),
nccl (the NCCL paths: environments, why, colours, P2P levels),
collectives (all-reduce sweeps), cost_model (alpha-beta), launch (multi-process runs with
timeouts), experiments (named experiments, live or recorded), models_torch / models_keras,
train_common (what the training scripts share), throughput (honest images/s), data
(Fashion-MNIST), links (link technologies and their sources), widgets, checks (exercises),
diagrams, provenance and reference (recorded results), smoke (tiny distributed checks), cli,
kernel (the course's Jupyter kernel).
"""
__version__ = "0.1.0"

import os as _os

# Importing ddlab changes no environment variable: NCCL settings (NVLink multicast included)
# are chosen per run through ddlab.nccl and recorded with it; the TensorFlow settings are made
# where TensorFlow is imported (ddlab.models_keras, the Keras training script, ddlab.smoke).
REPO_ROOT = _os.path.dirname(_os.path.dirname(_os.path.dirname(_os.path.abspath(__file__))))
SOURCE_DIR = _os.path.join(REPO_ROOT, "source_code")
REFERENCE_DIR = _os.path.join(SOURCE_DIR, "reference")
