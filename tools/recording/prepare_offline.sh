#!/usr/bin/env bash
# Gather what a GPU machine without internet needs beside the repository: the wheels, Horovod's
# source and the Fashion-MNIST data, in git-ignored folders (run where PyPI can be reached; from
# any folder):
#
#   bash tools/recording/prepare_offline.sh [PYTHON_VERSION]     (default 3.12, the GPU machine's;
#                                                               within pyproject.toml's requires-python)
#
# writes
#   .offline/horovod-VERSION.tar.gz  Horovod's source distribution, VERSION from
#                                  source_code/patches/HOROVOD_VERSION (gpu_setup.sh builds it there)
#   .whl/                          cffi and pycparser (the Horovod build needs cffi), nbval,
#                                  ipykernel, ipywidgets and their dependencies (gpu_nbval.sh), as
#                                  binary wheels for that Python on x86-64 Linux, minus the packages
#                                  every PyTorch machine already has (see KEEP_OFF below)
#   .cache/fashion-mnist/          the four Fashion-MNIST files, verified (gpu_train.sh, the
#                                  recording scripts, the notebooks)
# and prints their size. Run it again at any time: what is there is kept.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYV=${1:-3.12}
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] && PY=${PYTHON:-.venv/bin/python}
"$PY" - "$PYV" <<'PYCHECK' || exit 1
import sys
sys.path.insert(0, "tools")
from check_python import supported_range
spec, low, high = supported_range()
v = tuple(int(x) for x in sys.argv[1].split(".")[:2])
if not low <= v < high:
    sys.exit(f"[prepare_offline] Python {sys.argv[1]} is outside the course's range {spec} (pyproject.toml)")
PYCHECK
HOROVOD_VERSION=$(cat source_code/patches/HOROVOD_VERSION)
mkdir -p .offline .whl .cache/fashion-mnist

if [ ! -f ".offline/horovod-$HOROVOD_VERSION.tar.gz" ]; then
  "$PY" -m pip download --quiet --no-deps --no-binary :all: "horovod==$HOROVOD_VERSION" -d .offline
fi

# Wheels with their dependencies, resolved for the GPU machine's Python, not this one's.
PLATFORMS=""
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
         manylinux1_x86_64 manylinux_2_34_x86_64 manylinux_2_31_x86_64 manylinux_2_24_x86_64; do
  PLATFORMS="$PLATFORMS --platform $p"
done
# shellcheck disable=SC2086
"$PY" -m pip download --quiet --only-binary :all: --python-version "$PYV" --implementation cp \
  $PLATFORMS -d .whl cffi pycparser nbval ipykernel ipywidgets jsonschema tqdm
# A wheel from .whl/ is installed ahead of the machine's own packages (gpu_setup.sh puts /tmp/site
# on PYTHONPATH), so a second numpy or pytest would shadow the one PyTorch was tested with.
KEEP_OFF="numpy torch packaging typing_extensions setuptools pyyaml jinja2 markupsafe pygments psutil
six python_dateutil pytest pluggy iniconfig coverage attrs filelock"
for name in $KEEP_OFF; do
  rm -f .whl/"$name"-*.whl .whl/"${name//_/-}"-*.whl
done
# One version of each package: pip installs nothing if two wheels of one name are there.
# A folder kept from an earlier run can hold an older wheel beside a newer download: keep
# the newest version of each name.
for name in $(ls .whl/*.whl | xargs -n1 basename | cut -d- -f1 | tr 'A-Z-' 'a-z_' | sort | uniq -d); do
  older=$(ls .whl/"$name"-*.whl | sort -V | head -n -1)
  echo "[prepare_offline] two versions of $name: removing $(echo $older | xargs -n1 basename | tr '\n' ' ')" >&2
  rm -f $older
done
dups=$(ls .whl/*.whl | xargs -n1 basename | cut -d- -f1 | tr 'A-Z-' 'a-z_' | sort | uniq -d)
[ -z "$dups" ] || { echo "[prepare_offline] two versions of: $dups (remove the older from .whl/)" >&2; exit 1; }

# Fashion-MNIST where `make data` finds or puts it (Debian's package, else a download), then
# copied into the course cache, .cache/fashion-mnist/.
export PYTHONPATH=$PWD/source_code${PYTHONPATH:+:$PYTHONPATH}
bash tools/get_data.sh "$PY" >/dev/null
dir=$("$PY" -c 'from ddlab.training import data; print(data.find_dataset())')
if [ "$(realpath "$dir")" != "$(realpath .cache/fashion-mnist)" ]; then
  cp -n "$dir"/*-ubyte* .cache/fashion-mnist/
fi
DDLAB_DATA_DIR=$PWD/.cache/fashion-mnist "$PY" -m ddlab data --no-download

echo "[prepare_offline] ready: $(du -sh .offline | cut -f1) .offline, $(ls .whl/*.whl | wc -l) wheels ($(du -sh .whl | cut -f1)) in .whl," \
     "$(du -sh .cache/fashion-mnist | cut -f1) .cache/fashion-mnist"
echo "[prepare_offline] copy .whl, .offline and .cache/fashion-mnist to the GPU machine with the repository"
