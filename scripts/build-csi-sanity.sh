#!/usr/bin/env bash
# Build csi-sanity (kubernetes-csi/csi-test v5.3.1, the CSI driver's conformance suite) once per
# machine, into a cache outside the checkout; print its path. The source is the pinned tarball in
# ../shared/vendor/ (sha256 checked), or the upstream tag's archive where that folder is absent.
# v5.3.1 is the last release that Debian 12's Go (1.19) builds; it builds offline from the
# modules vendored in the release. Takes about 2 minutes; nothing to do when the binary exists.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=5.3.1
SHA256=7415853d728faee29aee686832dc405332805bc1d0b177c4067d02c06526e62e
URL=https://github.com/kubernetes-csi/csi-test/archive/refs/tags/v$VERSION.tar.gz
CACHE=${STRATA_CACHE_DIR:-/var/cache/strata}/csi-sanity-$VERSION
BIN=$CACHE/csi-sanity

if [ -x "$BIN" ]; then echo "$BIN"; exit 0; fi
command -v go >/dev/null || { echo "build-csi-sanity: no go; apt-get install golang-go" >&2; exit 1; }

work=$(mktemp -d /tmp/csi-sanity-build-XXXX)
trap 'rm -rf "$work"' EXIT
# shared/ lies beside the checkout; a git worktree finds it beside its main checkout
vendor=${STRATA_VENDOR_DIR:-../shared/vendor}
common=$(git rev-parse --path-format=absolute --git-common-dir 2>/dev/null || true)
if [ ! -d "$vendor" ] && [ -n "$common" ] && [ -d "$common/../../shared/vendor" ]; then
  vendor=$common/../../shared/vendor
fi
# a clone away from shared/ on a development machine (as CI's is)
[ -d "$vendor" ] || [ ! -d /work/shared/vendor ] || vendor=/work/shared/vendor
tarball=$vendor/csi-test-$VERSION.tar.gz
if [ ! -f "$tarball" ]; then
  # Upstream's own archive of the tag; its sha256 differs from the vendored git-archive one,
  # so it is trusted through TLS only.
  echo "build-csi-sanity: $tarball absent; fetching $URL" >&2
  curl -fsSL -o "$work/src.tar.gz" "$URL"
else
  echo "$SHA256  $tarball" | sha256sum -c --quiet -
  cp "$tarball" "$work/src.tar.gz"
fi
mkdir "$work/src"
tar -xzf "$work/src.tar.gz" -C "$work/src" --strip-components=1
mkdir -p "$CACHE"
(cd "$work/src" && GOPROXY=off GOFLAGS=-mod=vendor GOCACHE="$work/gocache" \
   go build -o "$CACHE/csi-sanity.tmp" ./cmd/csi-sanity) >&2
mv "$CACHE/csi-sanity.tmp" "$BIN"
echo "$BIN"
