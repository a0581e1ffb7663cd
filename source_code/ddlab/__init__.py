"""ddlab: the code behind the course "Distributed Deep Learning: GPU System Topology".

One module per concept, named for what it holds. Grouped by who uses it:

Every notebook: hardware (what this machine has; its mode), course (the notebooks and what each
runs live per mode), mode (live or recorded, one policy), checks (exercises and quizzes), tables
(HTML or text tables), units (how sizes, rates and times are written), kernel (the course's
Jupyter kernel).

Notebook 1 (data-parallel training): allreduce_algorithms (naive and ring all-reduce, simulated),
experiments (named training experiments, live or recorded), runspec (one run's description), runs
(start training runs), results (what an experiment found: median and min-max, tables, plots),
throughput (honest images/s).
Notebook 2 (latency and bandwidth): links (link technologies, cited figures), cost_model (alpha-beta,
predicted training steps), widgets (what-if calculators), diagrams (drawings of the data path).
Notebook 3 (topology): topology (nvidia-smi topo -m parsed, ranked pairs, best rings and subsets).
Notebook 4 (NCCL paths): nccl (the NCCL paths: environments, why, colours, P2P levels), nccl_log
(NCCL's transport choice from its debug log), collectives (all-reduce sweeps).
Notebook 5 (p2p test): p2p (build, run and read our CUDA p2p test; diagnose a matrix).
Notebook 6 (hands-on): handson (the step-by-step conversions, run and tabled), repair (the broken
script exercise and its behaviour check).
Notebook 7 (convergence): convergence (learning-rate rules, warm-up, noise scale, time to accuracy),
convergence_sweep (the seeded sweep over global batches and workers).
Notebook 8 (case studies): case_studies (when a second GPU pays, the diagnosis exercise, cited
figures), tuning (communication tuning of DDP and Horovod, measured).

Underneath: launch (multi-process runs with a timeout and clean-up), models (the models' names and
widths), models_torch / models_keras (the models per framework), data (Fashion-MNIST, offline
first), train_common (what the training scripts share), provenance, recording and reference
(recorded results and where they came from), smoke (tiny distributed checks), slurm (Horovod
under srun).
Command line: cli (the ddlab command), training_cli (ddlab train and experiment), report,
report_plan and report_html (ddlab report: steps, time budget, HTML page).
"""
__version__ = "0.1.0"

import os as _os

# Importing ddlab changes no environment variable: NCCL settings (NVLink multicast included)
# are chosen per run through ddlab.nccl and recorded with it; the TensorFlow settings are made
# where TensorFlow is imported (ddlab.models_keras, the Keras training script, ddlab.smoke).
REPO_ROOT = _os.path.dirname(_os.path.dirname(_os.path.dirname(_os.path.abspath(__file__))))
SOURCE_DIR = _os.path.join(REPO_ROOT, "source_code")
REFERENCE_DIR = _os.path.join(SOURCE_DIR, "reference")
