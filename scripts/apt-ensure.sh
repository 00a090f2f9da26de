#!/usr/bin/env bash
# Install those of the given Debian packages that are missing (as root); nothing when all are
# present. Used by setup.sh and the build-*.sh scripts.
#   scripts/apt-ensure.sh [--who NAME] PKG...
# A user without root gets a one-line error naming the missing packages (exit 1).
set -euo pipefail
who=apt-ensure
if [ "${1:-}" = --who ]; then who=$2; shift 2; fi
missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "$who: missing Debian packages (${missing[*]}); run as root or install them" >&2
  exit 1
fi
echo "$who: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
