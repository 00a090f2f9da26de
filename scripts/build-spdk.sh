#!/usr/bin/env bash
# Build SPDK once per machine from the pinned release, for the spdk driver and its tests.
#
# Source: ../shared/vendor/spdk-$VERSION.tar.gz beside the project when it is there, else the
# upstream release; either way its sha256 must match SPDK_SHA256. Strata's own patch
# (scripts/spdk/*.patch: building against Debian 12's DPDK 22.11) is applied, and the
# result goes to a versioned prefix outside the checkout,
#   $STRATA_SPDK_CACHE/spdk-v$VERSION-<hash of patch and configure flags>/bin
# which every later run (and every worktree) reuses: a rebuild happens only when the
# version, the patch or the flags change. Prints the prefix on its last line.
#
# Environment: STRATA_SPDK_CACHE (default /var/cache/strata), STRATA_SPDK_JOBS (make -j,
# default 2), STRATA_SPDK_TARBALL (a source tarball to use instead).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

SPDK_VERSION=26.01
SPDK_SHA256=a81e487825eb2ad2badb088814cc78b9d70899ebc7908141288f01d95c9a8dcc
SPDK_URL=https://github.com/spdk/spdk/archive/refs/tags/v$SPDK_VERSION.tar.gz
APT_PACKAGES=(libdpdk-dev libaio-dev libnuma-dev libkeyutils-dev libfuse3-dev uuid-dev
              libssl-dev libncurses-dev pkg-config make gcc python3 librbd-dev librados-dev)
# No ISA-L (no submodule in a release tarball, no nasm on Debian's minimal images), no
# crypto/vhost/virtio/cuse/fsdev: Strata uses nvmf_tgt, the AIO/lvol/rbd bdevs and the
# user-space initiators (spdk_dd, spdk_nvme_perf, spdk_nvme_identify). The rbd bdev links
# Debian's librbd/librados (Ceph 16.2, the version the ceph driver's cluster runs).
CONFIGURE_FLAGS=(--with-dpdk --with-rbd --disable-tests --disable-unit-tests --disable-examples
                 --without-crypto --without-vhost --without-virtio --without-nvme-cuse
                 --without-fsdev --without-aio-fsdev)
APPS=(nvmf_tgt spdk_dd spdk_nvme_perf spdk_nvme_identify spdk_nvme_discover)

patches=(scripts/spdk/*.patch)
key=$( { echo "$SPDK_VERSION $SPDK_SHA256 ${CONFIGURE_FLAGS[*]} ${APPS[*]}"; cat "${patches[@]}"; } \
       | sha256sum | cut -c1-12)
if [ -z "${STRATA_SPDK_CACHE:-}" ] && [ "$(id -u)" != 0 ] && [ ! -w /var/cache/strata ]; then
  STRATA_SPDK_CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/strata     # a user without root
fi
cache=${STRATA_SPDK_CACHE:-/var/cache/strata}
prefix=$cache/spdk-v$SPDK_VERSION-$key

if [ -x "$prefix/bin/nvmf_tgt" ]; then
  echo "$prefix"
  exit 0
fi

scripts/apt-ensure.sh --who build-spdk "${APT_PACKAGES[@]}"

mkdir -p "$cache"
# One build at a time per machine: a second set-up (another worktree, CI) waits for the
# first and then finds the prefix made.
exec 9>"$cache/.spdk-build.lock"
flock 9
if [ -x "$prefix/bin/nvmf_tgt" ]; then
  echo "$prefix"
  exit 0
fi

# The build tree is kept when a build fails, so that the next run resumes it (make is
# incremental); it is removed once the prefix is made.
work=$cache/.build-$(basename "$prefix")
mkdir -p "$work"
tarball=${STRATA_SPDK_TARBALL:-$root/../shared/vendor/spdk-$SPDK_VERSION.tar.gz}
[ -f "$tarball" ] || tarball=/work/shared/vendor/spdk-$SPDK_VERSION.tar.gz
if [ ! -f "$tarball" ]; then
  echo "build-spdk: no vendored tarball; downloading $SPDK_URL" >&2
  tarball=$work/spdk-$SPDK_VERSION.tar.gz
  curl -fsSL -o "$tarball" "$SPDK_URL"
fi
echo "$SPDK_SHA256  $tarball" | sha256sum -c --quiet - || {
  echo "build-spdk: $tarball does not match the pinned sha256 $SPDK_SHA256" >&2
  exit 1
}

echo "build-spdk: building SPDK v$SPDK_VERSION into $prefix (about 5 minutes on 2 cores)" >&2
start=$(date +%s)
src=$work/src
if [ ! -f "$work/configured" ]; then
  rm -rf "$src" && mkdir -p "$src"
  tar -xzf "$tarball" -C "$src" --strip-components=1
  for p in "${patches[@]}"; do
    patch -d "$src" -p1 --quiet --forward < "$p"
  done
  (cd "$src" && ./configure "${CONFIGURE_FLAGS[@]}") >"$work/configure.log" 2>&1 || {
    cat "$work/configure.log" >&2
    echo "build-spdk: SPDK's configure failed" >&2
    exit 1
  }
  touch "$work/configured"
fi
log=$work/build.log
# SPDK links its programs against its own shared libraries (as it does with a shared DPDK)
# and gives them no rpath: point them at the prefix's lib/ (DT_RPATH, so that it also serves
# the libraries' own dependencies).
LDFLAGS="-Wl,--disable-new-dtags,-rpath,$prefix/lib" \
  make -C "$src" -j"${STRATA_SPDK_JOBS:-2}" >"$log" 2>&1 || {
  cp "$log" "$cache/spdk-build-failed.log"
  grep -E -B2 -A3 '(error|Error|\*\*\*)' "$log" | tail -40 >&2
  echo "build-spdk: the build failed; its whole log is $cache/spdk-build-failed.log" >&2
  exit 1
}

stage=$work/stage
rm -rf "$stage"
mkdir -p "$stage/bin" "$stage/lib"
for app in "${APPS[@]}"; do
  install -m 755 "$src/build/bin/$app" "$stage/bin/"
done
cp -a "$src"/build/lib/*.so* "$stage/lib/"
cp "${patches[@]}" "$stage/"
echo "$SPDK_VERSION" > "$stage/VERSION"
mv "$stage" "$prefix"
rm -rf "$work" "$cache/spdk-build-failed.log"
echo "build-spdk: built in $(( $(date +%s) - start )) s" >&2
echo "$prefix"
