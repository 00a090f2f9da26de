#!/usr/bin/env bash
# Set up everything Strata needs on Debian 12 (run as root): the Debian packages that are
# missing, a venv in .venv and the Python packages of pyproject.toml. Idempotent and quick
# when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  python3 python3-venv python3-dev build-essential pkg-config
  btrfs-progs xfsprogs util-linux e2fsprogs iproute2 fio
  redis-server postgresql
  nfs-ganesha nfs-ganesha-vfs samba samba-vfs-modules smbclient dbus
  tgt libiscsi-bin qemu-system-common qemu-utils qemu-block-extra libnbd-bin
  qemu-system-x86 busybox-static linux-image-cloud-amd64 cpio
  libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients
  ceph-mon ceph-mgr ceph-osd ceph-mds ceph-common python3-rados python3-rbd python3-cephfs
  tgt-rbd ceph-fuse nfs-ganesha-ceph nfs-ganesha-rados-grace radosgw
  chromium
  golang-go
  # the cluster tests' hosts (tests/nodes.py: nspawn, ssh) and relays; checked before the
  # Debian root is built, so they must be here (else those tests skip on a fresh machine)
  debootstrap systemd-container socat openssh-client
)

installed=$(dpkg-query -W -f='${Status}\n' "${APT_PACKAGES[@]}" 2>/dev/null | grep -c "install ok installed" || true)
if [ "$installed" != ${#APT_PACKAGES[@]} ]; then
  ./scripts/apt-ensure.sh --who setup "${APT_PACKAGES[@]}"
  # Debian starts some daemons on install; Strata runs its own copies on its own ports.
  for svc in nfs-ganesha smbd nmbd tgt ceph.target ceph-crash ceph-radosgw.target; do
    command -v systemctl >/dev/null && systemctl disable --now "$svc" >/dev/null 2>&1 || true
  done
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.strata-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e '.[test]'
  touch "$stamp"
fi

# Ceph's Python bindings (rados, rbd, cephfs) come from Debian, built for /usr/bin/python3:
# link their extension modules into the venv (same CPython ABI) so the ceph driver imports them.
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
suffix=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
for mod in rados rbd cephfs; do
  so=/usr/lib/python3/dist-packages/$mod$suffix
  if [ -e "$so" ]; then ln -sfn "$so" "$site/$mod$suffix"; fi
done

# SPDK (the spdk driver's nvmf_tgt and the spdk_dd/spdk_nvme_perf initiators): built once per
# machine into /var/cache/strata (about 5 minutes the first time, nothing afterwards) and
# linked as .venv/spdk. A failed build leaves the rest of Strata working; the spdk tests then
# skip, naming the build log.
if prefix=$(./scripts/build-spdk.sh | tail -1) && [ -x "$prefix/bin/nvmf_tgt" ]; then
  ln -sfn "$prefix" .venv/spdk
else
  echo "setup: SPDK was not built; the spdk driver and its tests are unavailable" >&2
fi

# The CSI driver's gRPC stubs, generated from the pinned CSI spec by the pinned grpcio-tools
# (not in git: stubs must match the runtime beside them), and csi-sanity, its conformance
# suite, built once per machine into /var/cache/strata (about 2 minutes the first time).
# A failed csi-sanity build leaves the rest working; its test then fails naming the error.
.venv/bin/python scripts/gen_csi_stubs.py
./scripts/build-csi-sanity.sh >/dev/null || echo "setup: csi-sanity was not built" >&2
