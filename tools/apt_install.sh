#!/usr/bin/env bash
# Install the Debian/Ubuntu packages named that are missing: apt-get update, then apt-get install.
#   tools/apt_install.sh PACKAGE...
# `make chromium` (the browser test) and the Slurm test install through this script. It holds one lock
# (APT_LOCK_FILE, default /var/lock/ddlab-apt.lock) from the check to the install, so two of them started
# side by side take turns instead of one failing on dpkg's lock. It also waits for another apt (e.g.
# unattended upgrades): for dpkg's lock through apt's DPkg::Lock::Timeout, for the package lists' lock by
# retrying the update while apt says that lock is held. APT_LOCK_WAIT (seconds, default 900) bounds each
# wait. Runs apt as root, through sudo when not root.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 PACKAGE..." >&2; exit 2; }
command -v apt-get >/dev/null || { echo "apt_install: no apt-get here: install $* by hand" >&2; exit 1; }
WAIT=${APT_LOCK_WAIT:-900}
LOCK=${APT_LOCK_FILE:-/var/lock/ddlab-apt.lock}
case "$WAIT" in ''|*[!0-9]*) echo "apt_install: APT_LOCK_WAIT must be a whole number of seconds, got '$WAIT'" >&2; exit 2;; esac

if [ "${DDLAB_APT_LOCKED:-}" != 1 ]; then
  sudo=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "apt_install: not root and no sudo here: as root, apt-get install $*" >&2; exit 1; }
    sudo=sudo
  fi
  exec $sudo env DDLAB_APT_LOCKED=1 APT_LOCK_WAIT="$WAIT" DEBIAN_FRONTEND=noninteractive \
    flock -w "$WAIT" "$LOCK" bash "$0" "$@"
fi

missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -gt 0 ] || exit 0
echo "apt_install: installing ${missing[*]}"
deadline=$(( $(date +%s) + WAIT ))
until out=$(apt-get -o DPkg::Lock::Timeout="$WAIT" update -qq 2>&1); do
  if ! grep -q "Could not get lock" <<<"$out" || [ "$(date +%s)" -ge "$deadline" ]; then
    echo "$out" >&2
    echo "apt_install: apt-get update failed (its message is above)" >&2
    exit 1
  fi
  sleep 5
done
[ -z "$out" ] || echo "$out"
apt-get -o DPkg::Lock::Timeout="$WAIT" install -y -qq --no-install-recommends "${missing[@]}"
