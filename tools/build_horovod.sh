#!/usr/bin/env bash
# Build and install Horovod from its source distribution, with the course's patch, against
# the torch (and TensorFlow, if present) of $PYTHON. The version is named once, in
# source_code/patches/HOROVOD_VERSION (Horovod's last release); the patch is named after it.
#
#   tools/build_horovod.sh                      # uses $PYTHON (default: python3)
#   PYTHON=/opt/conda/bin/python tools/build_horovod.sh
#   HOROVOD_SDIST=/path/horovod-VERSION.tar.gz  # offline: a copy of the sdist
#
# Gloo is always built. NCCL GPU operations are built when a CUDA compiler and a GPU are
# present (HOROVOD_FORCE_CPU=1 skips them). Why each patch hunk exists: see
# source_code/patches/README.md.
set -euo pipefail

PYTHON=${PYTHON:-python3}
HERE=$(cd "$(dirname "$0")/.." && pwd)
VERSION=$(cat "$HERE/source_code/patches/HOROVOD_VERSION")
PATCH=$HERE/source_code/patches/horovod-$VERSION-ddlab.patch
CACHE=${HOROVOD_CACHE:-$HERE/.cache/horovod}
# The SHA-256 of the published horovod-$VERSION.tar.gz (a new version needs its own).
SDIST_SHA256=92a43f5a94c43907a56805bad15f19700c62ffc83b7ca483f9e104e229f67ef0
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}

say() { echo "[build_horovod] $*"; }
die() { echo "[build_horovod] ERROR: $*" >&2; exit 1; }

"$PYTHON" -c 'import torch' 2>/dev/null || die "$PYTHON has no torch; install the course's requirements first (make deps)"
"$PYTHON" -c 'import cffi' 2>/dev/null || die "$PYTHON has no cffi (Horovod needs it at build time): $PYTHON -m pip install cffi"
mkdir -p "$CACHE/wheels"

# 1. The source distribution, verified.
SDIST=${HOROVOD_SDIST:-$CACHE/horovod-$VERSION.tar.gz}
if [ ! -f "$SDIST" ]; then
  say "downloading the horovod $VERSION source distribution"
  "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: "horovod==$VERSION" -d "$CACHE" \
    || die "could not download horovod==$VERSION; offline, pass HOROVOD_SDIST=/path/to/horovod-$VERSION.tar.gz"
fi
echo "$SDIST_SHA256  $SDIST" | sha256sum -c --quiet - || die "$SDIST is not the published horovod $VERSION sdist (SHA-256 mismatch)"

# 2. Unpack and patch in a scratch folder.
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
tar -xzf "$SDIST" -C "$WORK"
SRC=$WORK/horovod-$VERSION
patch -p1 --quiet -d "$SRC" < "$PATCH" || die "the patch did not apply"

# 3. What to build.
export HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MXNET=1
export HOROVOD_CPU_OPERATIONS=GLOO
if [ "${HOROVOD_WITH_MPI:-0}" != 1 ]; then export HOROVOD_WITHOUT_MPI=1; fi
# Found without importing it (seconds); CMake's FindTensorflow then imports it and fails loudly
# where it is installed but broken.
if "$PYTHON" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("tensorflow") is None)' 2>/dev/null; then
  export HOROVOD_WITH_TENSORFLOW=1
  say "TensorFlow found: building the TensorFlow and Keras bindings"
else
  export HOROVOD_WITHOUT_TENSORFLOW=1
  say "no TensorFlow in $PYTHON: building without it"
fi
# CMake 4 refuses the old cmake_minimum_required of bundled gloo/flatbuffers.
export CMAKE_POLICY_VERSION_MINIMUM=3.5
export MAKEFLAGS=-j$JOBS CMAKE_BUILD_PARALLEL_LEVEL=$JOBS

NVCC=$(command -v nvcc || true)
[ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc
# HOROVOD_BUILD_CUDA_CC_LIST (e.g. 80,90) builds NCCL operations for those GPUs without one
# present (a container image build); otherwise the GPUs nvidia-smi lists decide.
GPU_CCS=${HOROVOD_BUILD_CUDA_CC_LIST:-}
if [ -z "$GPU_CCS" ] && command -v nvidia-smi >/dev/null 2>&1; then
  GPU_CCS=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | tr -d ' .' | sort -u | paste -sd, || true)
fi
if [ "${HOROVOD_FORCE_CPU:-0}" != 1 ] && [ -n "$NVCC" ] && [ -n "$GPU_CCS" ]; then
  say "CUDA compiler $NVCC and GPUs of compute capability $GPU_CCS: building NCCL operations"
  export HOROVOD_GPU_OPERATIONS=NCCL HOROVOD_NCCL_LINK=SHARED
  export HOROVOD_CUDA_HOME=${HOROVOD_CUDA_HOME:-$(dirname "$(dirname "$(readlink -f "$NVCC")")")}
  export HOROVOD_BUILD_CUDA_CC_LIST=${HOROVOD_BUILD_CUDA_CC_LIST:-$GPU_CCS}
  export PATH=$(dirname "$NVCC"):$PATH
  if [ -z "${HOROVOD_NCCL_HOME:-}${HOROVOD_NCCL_INCLUDE:-}" ]; then
    # Prefer the NCCL that torch itself loads (the nvidia-nccl wheel): it ships nccl.h and
    # only libnccl.so.2, so give the linker an unversioned name in a scratch folder.
    NCCL_PKG=$("$PYTHON" - <<'EOF' 2>/dev/null || true
import os
try:
    import nvidia.nccl as m
    d = list(m.__path__)[0]
    if os.path.exists(os.path.join(d, "include", "nccl.h")):
        print(d)
except Exception:
    pass
EOF
)
    if [ -n "$NCCL_PKG" ]; then
      mkdir -p "$WORK/nccl/lib"
      ln -s "$NCCL_PKG/include" "$WORK/nccl/include"
      ln -s "$NCCL_PKG/lib/libnccl.so.2" "$WORK/nccl/lib/libnccl.so"
      export HOROVOD_NCCL_INCLUDE=$WORK/nccl/include HOROVOD_NCCL_LIB=$WORK/nccl/lib
      say "using NCCL from the nvidia-nccl wheel: $NCCL_PKG"
    elif [ -f "$HOROVOD_CUDA_HOME/include/nccl.h" ] || [ -f /usr/include/nccl.h ]; then
      say "using the system NCCL"
    else
      die "no NCCL headers found; set HOROVOD_NCCL_HOME (or HOROVOD_FORCE_CPU=1 for a CPU-only build)"
    fi
  fi
else
  say "no CUDA compiler or no GPU: CPU build (Gloo only)"
fi

# 4. Build a wheel and install it. The wheel stays in $CACHE/wheels: a reinstall needs no
# rebuild, and `make wheelhouse` copies it from there.
say "building (this takes a few minutes)"
rm -f "$CACHE"/wheels/horovod-*.whl
"$PYTHON" -m pip wheel --no-build-isolation --no-deps --no-cache-dir -w "$CACHE/wheels" "$SRC" \
  > "$CACHE/build.log" 2>&1 || { tail -n 60 "$CACHE/build.log"; die "Horovod build failed; full log: $CACHE/build.log"; }
WHEEL=$(ls "$CACHE"/wheels/horovod-*.whl)
"$PYTHON" -m pip install --quiet --no-deps --force-reinstall "$WHEEL"
say "installed $(basename "$WHEEL")"

# 5. Prove it: load each binding built and print what it was built with (`horovodrun
# --check-build` says the same, loading the frameworks once per line).
"$PYTHON" "$HERE/tools/check_horovod.py"
