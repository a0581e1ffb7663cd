# Sourced by the recording scripts (after they cd to the repository root and set PY and
# PYTHONPATH): names the machine from its hardware unless the caller already did.
#   DDLAB_MACHINE  the label every result's provenance carries, e.g. "2x NVIDIA H200, NV18"
#   NAME           the same as a file name, e.g. "2xh200-nv18"
# Both come from `ddlab doctor --label --slug` (GPU count and model, and the GPU links that
# `nvidia-smi topo -m` reports); set them yourself to override (a provenance keeps a
# DDLAB_MACHINE only when it names this machine's GPUs: ddlab.system.provenance.hardware_label).
if [ -z "${DDLAB_MACHINE:-}" ] || [ -z "${NAME:-}" ]; then
  _ddlab_names=$("${PY:-python3}" -m ddlab doctor --label --slug) \
    || { echo "machine_name.sh: \`ddlab doctor --label --slug\` failed" >&2; return 1; }
  DDLAB_MACHINE=${DDLAB_MACHINE:-$(sed -n 1p <<<"$_ddlab_names")}
  NAME=${NAME:-$(sed -n 2p <<<"$_ddlab_names")}
  unset _ddlab_names
fi
export DDLAB_MACHINE NAME
echo "machine: $DDLAB_MACHINE (file names: $NAME)"
