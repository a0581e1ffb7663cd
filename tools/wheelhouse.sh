#!/usr/bin/env bash
# The offline install: one folder with every wheel the course needs, Horovod's wheel built
# here and the Fashion-MNIST files; `make setup WHEELHOUSE=DIR` installs from it alone.
#
#   tools/wheelhouse.sh build DIR PYTHON   # fill DIR (make wheelhouse [WHEELHOUSE=DIR])
#   tools/wheelhouse.sh test DIR           # a fresh venv from DIR alone, then a smoke test
#                                          # (make wheelhouse-test)
#
# DIR holds: the wheels of requirements.txt under requirements-lock.txt, pip's own wheel,
# horovod-VERSION-*.whl (VERSION: source_code/patches/HOROVOD_VERSION; from tools/build_horovod.sh,
# which keeps it in .cache/horovod/wheels),
# the Horovod source distribution (to rebuild it offline on another kind of machine),
# fashion-mnist/ (the four IDX files) and SHA256SUMS.
# Horovod's wheel fits the Python, torch and TensorFlow it was built against, and has NCCL
# operations only when built on a machine with a CUDA compiler and a GPU: build the
# wheelhouse on a machine like the seats it is for.
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
HOROVOD_VERSION=$(cat "$HERE/source_code/patches/HOROVOD_VERSION")
say() { echo "[wheelhouse] $*"; }
die() { echo "[wheelhouse] ERROR: $*" >&2; exit 1; }

build() {
  local dir=$1 py=$2 start=$SECONDS
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  say "wheels of requirements.txt (constraints: requirements-lock.txt) into $dir"
  # pip wheel takes published wheels as they are (from pip's cache when it has them) and
  # builds a wheel for any package published only as source, so nothing is built offline.
  "$py" -m pip wheel --quiet -w "$dir" -r "$HERE/requirements.txt" -c "$HERE/requirements-lock.txt"
  "$py" -m pip download --quiet --no-deps -d "$dir" "pip==$("$py" -m pip --version | awk '{print $2}')"
  local hvd
  hvd=$(ls "$HERE"/.cache/horovod/wheels/horovod-"$HOROVOD_VERSION"-*.whl 2>/dev/null | head -n 1 || true)
  [ -n "$hvd" ] || die "no Horovod $HOROVOD_VERSION wheel in .cache/horovod/wheels: run make horovod first"
  rm -f "$dir"/horovod-*.whl
  cp "$hvd" "$dir"/
  local sdist=$HERE/.cache/horovod/horovod-$HOROVOD_VERSION.tar.gz
  if [ -f "$sdist" ]; then cp "$sdist" "$dir"/; fi
  local data
  data=$("$py" -c 'from ddlab.training import data; d = data.find_dataset(); data.load_fashion_mnist(d); print(d)') \
    || die "Fashion-MNIST is not here or not valid: run make data first"
  mkdir -p "$dir/fashion-mnist"
  for stem in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
    if [ -f "$data/$stem.gz" ]; then cp "$data/$stem.gz" "$dir/fashion-mnist/"; else cp "$data/$stem" "$dir/fashion-mnist/"; fi
  done
  (cd "$dir" && find . -type f ! -name SHA256SUMS | sort | xargs sha256sum > SHA256SUMS)
  say "$(ls "$dir"/*.whl | wc -l) wheels, $(du -sh "$dir" | cut -f1) in $dir ($((SECONDS - start)) s)"
}

test_install() {
  local dir start=$SECONDS
  dir=$(cd "$1" && pwd)
  [ -f "$dir/SHA256SUMS" ] || die "$dir is not a wheelhouse (no SHA256SUMS): make wheelhouse WHEELHOUSE=$1"
  (cd "$dir" && sha256sum --quiet -c SHA256SUMS) || die "$dir: files differ from SHA256SUMS"
  local tmp
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  # Nothing but the wheelhouse: no pip configuration (index URLs, find-links), no pip cache,
  # and, where this user may (root), no network at all. The venv is thrown away after the smoke
  # test, so its modules are not all compiled to bytecode (BYTECODE=0, the Horovod wheel's
  # PIP_COMPILE=0); Python compiles what the test imports, once, and keeps it
  # (PYTHONDONTWRITEBYTECODE unset).
  local -a iso=(env -u PIP_FIND_LINKS -u PIP_INDEX_URL -u PIP_EXTRA_INDEX_URL -u PYTHONDONTWRITEBYTECODE
                PIP_CONFIG_FILE=/dev/null PIP_NO_CACHE_DIR=1 PIP_COMPILE=0)
  if [ "$(id -u)" = 0 ] && unshare -n true 2>/dev/null; then
    iso=(unshare -n "${iso[@]}")
    say "installing with no network (unshare -n) and no pip configuration"
  else
    say "installing with pip --no-index and no pip configuration (unshare -n needs root)"
  fi
  # The data goes to a scratch cache (DDLAB_CACHE_DIR), so the course's own copy stays as it is.
  "${iso[@]}" DDLAB_CACHE_DIR="$tmp/cache" make -C "$HERE" --no-print-directory setup VENV="$tmp/venv" WHEELHOUSE="$dir" BYTECODE=0
  local py=$tmp/venv/bin/python
  say "smoke test"
  "${iso[@]}" "$py" - "$dir" <<'PY'
import subprocess, sys, os
import ddlab, torch, tensorflow, horovod.torch  # noqa: F401  (each must import)
from ddlab.training import data
d = os.path.join(sys.argv[1], "fashion-mnist")
x, y, xt, yt = data.load_fashion_mnist(d)
assert x.shape == (60000, 28, 28) and xt.shape == (10000, 28, 28), (x.shape, xt.shape)
out = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ddlab"), "doctor"],
                     capture_output=True, text=True, timeout=300)
print(out.stdout)
assert out.returncode == 0 and "horovod built for" in out.stdout, out.stderr
print(f"[wheelhouse] ok: ddlab {ddlab.__file__}, torch {torch.__version__}, tensorflow {tensorflow.__version__}, "
      f"horovod {horovod.__version__}, Fashion-MNIST from {d}")
PY
  say "fresh venv from the wheelhouse and smoke test: $((SECONDS - start)) s"
}

case "${1:-}" in
  build) [ $# = 3 ] || die "usage: $0 build DIR PYTHON"; build "$2" "$3" ;;
  test) [ $# = 2 ] || die "usage: $0 test DIR"; test_install "$2" ;;
  *) die "usage: $0 build DIR PYTHON | test DIR" ;;
esac
