#!/usr/bin/env bash
# Make Fashion-MNIST available: verify it where it already is; else install Debian/Ubuntu's
# dataset-fashion-mnist package when apt can (root or passwordless sudo); else download it
# from the canonical source into the course cache. Usage: tools/get_data.sh PYTHON [FROM]
# With FROM (a wheelhouse's fashion-mnist/ folder) the files are copied from there into the
# course cache and verified: nothing is installed or downloaded.
set -uo pipefail
PY=${1:-python3}
FROM=${2:-}
if [ -n "$FROM" ]; then
  CACHE=$("$PY" -c 'from ddlab.training import data; print(data.cache_dir())') || exit 1
  mkdir -p "$CACHE" && cp "$FROM"/*-ubyte* "$CACHE"/ || { echo "[data] cannot copy Fashion-MNIST from $FROM" >&2; exit 1; }
  exec "$PY" -m ddlab data --no-download
fi
if "$PY" -m ddlab data --no-download >/dev/null 2>&1; then
  "$PY" -m ddlab data --no-download
  exit 0
fi
if command -v apt-get >/dev/null 2>&1; then
  SUDO=""
  [ "$(id -u)" != 0 ] && sudo -n true 2>/dev/null && SUDO="sudo -n"
  if [ "$(id -u)" = 0 ] || [ -n "$SUDO" ]; then
    echo "[data] installing the Debian/Ubuntu package dataset-fashion-mnist"
    $SUDO apt-get install -y -qq dataset-fashion-mnist >/dev/null 2>&1 || \
      { $SUDO apt-get update -qq >/dev/null 2>&1 && $SUDO apt-get install -y -qq dataset-fashion-mnist >/dev/null 2>&1; } || \
      echo "[data] apt could not install dataset-fashion-mnist; trying a download"
  fi
fi
exec "$PY" -m ddlab data
