#!/usr/bin/env bash
# Build the wheelhouse Ansible installs Strata from, offline (hosts need no route to PyPI):
# wheels of every dependency in pyproject.toml, cached per dependency list, plus the wheel of
# this checkout, cached per hash of its sources. Both go into one uncompressed tar (one file
# for Ansible to compare and copy, instead of ~70),
#   $STRATA_WHEEL_CACHE/strata-<source hash>.tar
# printed on the last line: the `strata_wheelhouse` variable of ansible/. The hosts run
# Debian 12's Python 3.11; the dependencies are resolved by that Python (HOST_PYTHON), since
# markers can differ between patch releases (redis needs async-timeout below 3.11.3). First build: a minute or two (pip's
# cache); afterwards a second or two.
#
# Environment: STRATA_WHEEL_CACHE (default /var/cache/strata/wheelhouse), PYTHON (builds the
# project's wheel; default .venv/bin/python), HOST_PYTHON (the hosts' Python, with pip;
# default /usr/bin/python3).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
HOST_PY=${HOST_PYTHON:-/usr/bin/python3}
cache=${STRATA_WHEEL_CACHE:-/var/cache/strata/wheelhouse}
mkdir -p "$cache"

deps=$("$PY" -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))')
deps_dir=$cache/deps-$(printf '%s %s' "$("$HOST_PY" --version)" "$deps" | sha256sum | cut -c1-12)
# The package's files as they are in this checkout (committed or not), plus the CSI stubs
# scripts/setup.sh generates (ignored by git, needed at run time).
files=$( { git ls-files -co --exclude-standard -- console plane plumbing services dataplane \
             vector pyproject.toml; ls services/csi/proto/csi_pb2*.py* 2>/dev/null || true; } | sort -u)
src_key=$( { echo "$deps_dir"; printf '%s\n' "$files" | tr '\n' '\0' | xargs -0 sha256sum; } \
          | sha256sum | cut -c1-12)
out=$cache/strata-$src_key.tar

exec 9>"$cache/.lock"
flock 9
if [ -f "$out" ]; then
  echo "$out"
  exit 0
fi
if [ ! -f "$deps_dir/.complete" ]; then
  rm -rf "$deps_dir.tmp"
  printf '%s\n' "$deps" > "$cache/requirements.$$"
  "$HOST_PY" -m pip wheel -q --wheel-dir "$deps_dir.tmp" -r "$cache/requirements.$$" >&2
  rm -f "$cache/requirements.$$"
  touch "$deps_dir.tmp/.complete"
  rm -rf "$deps_dir"
  mv "$deps_dir.tmp" "$deps_dir"
fi
# Built from a clean copy: an in-tree build/ keeps modules deleted since and ships them.
src=$(mktemp -d)
wheels=$(mktemp -d)
trap 'rm -rf "$src" "$wheels" "$out.tmp"' EXIT
printf '%s\n' "$files" | tar -cf - -T - | tar -xf - -C "$src"
"$PY" -m pip wheel -q --no-deps --wheel-dir "$wheels" "$src" >&2
ln -s "$deps_dir"/*.whl "$wheels"/
tar -chf "$out.tmp" -C "$wheels" --sort=name --mtime=@0 --owner=0 --group=0 .
mv "$out.tmp" "$out"
# Keep the newest few source builds.
ls -t "$cache"/strata-*.tar | tail -n +4 | xargs -r rm -f
echo "$out"
