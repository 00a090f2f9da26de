#!/usr/bin/env bash
# Build, once per machine, the Debian root that test hosts boot from: the cluster's
# systemd-nspawn nodes (an overlay per node) and the TCG guests that need a whole system
# (the CSI node plugin). debootstrap from the mirror in the host's apt sources; the result goes
# to a versioned folder outside the checkout,
#   $STRATA_ROOT_CACHE/debian-root-bookworm-<hash of this script's package list>
# which every later run and every worktree reuses (read-only: users put an overlay on top).
# Prints the folder on its last line. Takes 1-4 minutes, about 600 MB.
#
# Environment: STRATA_ROOT_CACHE (default /var/cache/strata).
set -euo pipefail
cd "$(dirname "$0")/.."

SUITE=bookworm
# systemd as PID 1 and ssh (nspawn nodes, reached by Ansible), Python for Ansible and for
# Strata's venv, the clients a node or a guest runs (NFS, iSCSI, NVMe-oF, Ceph), and what
# the Ansible roles install (Ganesha with its Ceph FSAL, PostgreSQL and Redis for the plane,
# keepalived for the nodes' floating addresses, Samba, tgt with its RBD backing store,
# qemu-storage-daemon with its RBD driver),
# so that a role's apt task finds them present instead of fetching them per node.
PACKAGES=(systemd systemd-sysv dbus openssh-server python3 python3-venv python3-apt
          iproute2 iputils-ping ca-certificates kmod udev procps less
          e2fsprogs xfsprogs util-linux mount
          nfs-common open-iscsi nvme-cli ceph-common ceph-fuse
          nfs-ganesha nfs-ganesha-ceph nfs-ganesha-rados-grace postgresql redis-server
          keepalived samba tgt tgt-rbd qemu-system-common qemu-block-extra)
key=$( { echo "$SUITE ${PACKAGES[*]}"; } | sha256sum | cut -c1-12)
cache=${STRATA_ROOT_CACHE:-/var/cache/strata}
root=$cache/debian-root-$SUITE-$key

if [ -f "$root/.strata-root-complete" ]; then
  echo "$root"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "build-debian-root: debootstrap needs root" >&2
  exit 1
fi
scripts/apt-ensure.sh --who build-debian-root debootstrap systemd-container
mirror=$(grep -h -m1 -oE 'https?://[^ ]+/debian/?$' /etc/apt/sources.list.d/*.sources \
         /etc/apt/sources.list 2>/dev/null | head -1 || true)
mirror=${mirror:-http://deb.debian.org/debian}

mkdir -p "$cache"
exec 9>"$cache/.debian-root.lock"
flock 9                                   # one build at a time; the others reuse it
if [ -f "$root/.strata-root-complete" ]; then
  echo "$root"
  exit 0
fi
tmp=$root.tmp.$$
rm -rf "$root" "$root".tmp.*
include=$(IFS=,; echo "${PACKAGES[*]}")
echo "build-debian-root: debootstrap $SUITE from $mirror into $root" >&2
debootstrap --variant=minbase --include="$include" "$SUITE" "$tmp" "$mirror" >"$cache/.debian-root.log" 2>&1 || {
  echo "build-debian-root: debootstrap failed; see $cache/.debian-root.log" >&2
  tail -5 "$cache/.debian-root.log" >&2
  exit 1
}
# The same sources as the host (nodes reach the mirror through a proxy on their bridge).
cp /etc/apt/sources.list.d/debian.sources "$tmp/etc/apt/sources.list.d/" 2>/dev/null || true
# No timers taking the dpkg lock during a playbook; no host keys shared by every clone (each
# node makes its own at first boot: ssh-keygen -A runs from sshd's unit), no machine-id.
chroot "$tmp" systemctl mask apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer \
  fstrim.timer systemd-timesyncd.service >/dev/null 2>&1 || true
rm -f "$tmp"/etc/ssh/ssh_host_*
mkdir -p "$tmp/etc/systemd/system/ssh.service.d"
printf '[Service]\nExecStartPre=\nExecStartPre=/usr/bin/ssh-keygen -A\nExecStartPre=/usr/sbin/sshd -t\n' \
  > "$tmp/etc/systemd/system/ssh.service.d/keys.conf"
: > "$tmp/etc/machine-id"
rm -rf "$tmp"/var/cache/apt/archives/*.deb "$tmp"/var/lib/apt/lists/*_Packages
touch "$tmp/.strata-root-complete"
mv "$tmp" "$root"
echo "$root"
