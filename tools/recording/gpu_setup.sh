#!/usr/bin/env bash
# Source this from the repository root on a GPU machine without a package registry, before
# the other scripts in tools/recording/:
#
#   source tools/recording/gpu_setup.sh
#
# installs the wheels in .whl/ and Horovod (a wheel in .offline/, else a build from the sdist
# there), and keeps NVLink multicast off. What it needs beside the repository (all git-ignored;
# prepare_offline.sh gathers them on a machine with internet):
#   .offline/horovod-VERSION.tar.gz  (VERSION: source_code/patches/HOROVOD_VERSION; prepare_offline.sh
#                                   downloads it with pip download --no-deps --no-binary :all:)
#   .whl/   cffi and pycparser for Python 3.12 (the build needs cffi), jsonschema (ddlab checks
#           every recording with it), plus nbval and its Jupyter dependencies to run the notebooks there (tools/recording/README.md lists them)
#   .cache/fashion-mnist/          (the four .gz files) for the training experiments
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PIP_BREAK_SYSTEM_PACKAGES=1 PIP_DISABLE_PIP_VERSION_CHECK=1
export PYTHONPATH=$PWD/source_code${PYTHONPATH:+:$PYTHONPATH}
# The machine's Python against the course's one range (pyproject.toml's requires-python).
python3 tools/check_python.py | sed 's/^/[gpu_setup] /'
# Horovod's version, named once; the recording scripts build from this sdist.
export DDLAB_HOROVOD_SDIST=.offline/horovod-$(cat source_code/patches/HOROVOD_VERSION).tar.gz
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
# ddlab checks every recording against its schema when it saves it: without jsonschema the
# recording scripts stop before measuring anything.
python3 -c 'import jsonschema' 2>/dev/null || echo "[gpu_setup] jsonschema is missing, so the record_*.py" \
  "scripts will refuse to start: copy .whl/ (prepare_offline.sh gathers it) beside the repository"
HVD_OK=0
if python3 -c 'import horovod.torch' 2>/dev/null; then HVD_OK=1
elif ls .offline/horovod-*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-deps --no-index .offline/horovod-*.whl && HVD_OK=1
elif ls .offline/horovod-*.whl.part* >/dev/null 2>&1; then
  w=$(ls .offline/horovod-*.whl.part* | head -1); w=${w%.part*}
  cat "$w".part* > "/tmp/$(basename "$w")" && python3 -m pip install -q --no-deps --no-index "/tmp/$(basename "$w")" && HVD_OK=1
elif [ -f "$DDLAB_HOROVOD_SDIST" ]; then
  # No wheel in .offline/: build one from the sdist (about 90 s on 2x NVIDIA H200, NV18).
  echo "[gpu_setup] building Horovod from $DDLAB_HOROVOD_SDIST"
  PYTHON=python3 HOROVOD_SDIST=$DDLAB_HOROVOD_SDIST HOROVOD_CACHE=/tmp/hvdcache \
    bash tools/build_horovod.sh > /tmp/hvd_build.txt 2>&1 && HVD_OK=1 || tail -20 /tmp/hvd_build.txt
else
  echo "[gpu_setup] Horovod is not installed and .offline/ holds neither its wheel nor $DDLAB_HOROVOD_SDIST:" \
    "Horovod's JOBs will be skipped (copy .offline/ beside the repository on every fresh machine)"
fi
export HVD_OK
echo "[gpu_setup] HVD_OK=$HVD_OK python=$(python3 -V 2>&1) torch=$(python3 -c 'import torch;print(torch.__version__, torch.cuda.device_count(), "GPUs")' 2>&1)"
