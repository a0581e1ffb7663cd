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
# Horovod: already importable, else a wheel from .offline/ (whole or in parts) that imports here, else a
# build from the sdist. A wheel built on another machine image (another PyTorch or Python) installs but does
# not import: then the sdist is built. After a build, the wheel is written
# to $OUT in 15 MB parts (when OUT is a folder), so the next fresh machine can be given it in .offline/ and
# skip the build.
HVD_OK=0
_hvd_tmp=${DDLAB_SETUP_TMP:-/tmp}
_hvd_imports() { python3 -c 'import horovod.torch' 2>/dev/null; }
if _hvd_imports; then HVD_OK=1
else
  _hvd_wheel=""
  if ls .offline/horovod-*.whl >/dev/null 2>&1; then
    _hvd_wheel=$(ls .offline/horovod-*.whl | head -1)
  elif ls .offline/horovod-*.whl.part* >/dev/null 2>&1; then
    w=$(ls .offline/horovod-*.whl.part* | head -1); w=${w%.part*}
    _hvd_wheel=$_hvd_tmp/$(basename "$w")
    cat "$w".part* > "$_hvd_wheel" || _hvd_wheel=""
  fi
  if [ -n "$_hvd_wheel" ]; then
    if python3 -m pip install -q --no-deps --no-index --force-reinstall "$_hvd_wheel" && _hvd_imports; then
      HVD_OK=1; echo "[gpu_setup] Horovod from $(basename "$_hvd_wheel")"
    else
      echo "[gpu_setup] $(basename "$_hvd_wheel") does not import here (built for another PyTorch or Python?)"
    fi
  fi
  if [ "$HVD_OK" = 0 ] && [ -f "$DDLAB_HOROVOD_SDIST" ]; then
    # Build a wheel from the sdist (a minute or two).
    echo "[gpu_setup] building Horovod from $DDLAB_HOROVOD_SDIST"
    if PYTHON=python3 HOROVOD_SDIST=$DDLAB_HOROVOD_SDIST HOROVOD_CACHE=$_hvd_tmp/hvdcache \
        bash tools/build_horovod.sh > "$_hvd_tmp/hvd_build.txt" 2>&1; then
      HVD_OK=1
      if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then
        for w in "$_hvd_tmp"/hvdcache/wheels/horovod-*.whl; do
          [ -f "$w" ] || continue
          split -b 15M "$w" "$OUT/$(basename "$w").part" \
            && echo "[gpu_setup] the built wheel is in \$OUT as $(basename "$w").part*: put the parts in .offline/ next time"
        done
      fi
    else
      tail -20 "$_hvd_tmp/hvd_build.txt"
    fi
  elif [ "$HVD_OK" = 0 ]; then
    echo "[gpu_setup] Horovod is not installed and .offline/ holds neither a wheel that imports here nor" \
      "$DDLAB_HOROVOD_SDIST: Horovod's JOBs will be skipped (copy .offline/ beside the repository on every fresh machine)"
  fi
  unset _hvd_wheel
fi
export HVD_OK
echo "[gpu_setup] HVD_OK=$HVD_OK python=$(python3 -V 2>&1) torch=$(python3 -c 'import torch;print(torch.__version__, torch.cuda.device_count(), "GPUs")' 2>&1)"
