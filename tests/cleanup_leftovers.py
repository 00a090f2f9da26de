#!/usr/bin/env python3
"""Clear what a crashed test run left behind: mounts and loop devices of /tmp/strata-test-*,
the daemons of development Ceph clusters and SPDK targets there (by the PIDs each
recorded), and the cluster tests' nspawn hosts (by the hosts.json of their folder: each
host's processes, overlay and network namespace, and the bridge).

Unmounts every mount whose mountpoint lies under a ``/tmp/strata-test-*`` directory or whose
source is a loop device backed by a file there, then detaches those loop devices. Nothing
else is touched. Prints what it cleared. Run as root: ``python tests/cleanup_leftovers.py``
(``--dry-run`` only prints).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

DEFAULT_PREFIX = "/tmp/strata-test-"


def _clean(path: str) -> str:
    return path[: -len(" (deleted)")] if path.endswith(" (deleted)") else path


def leftover_loops(prefix: str) -> dict:
    """Loop device -> backing file, for backing files under ``prefix``."""
    if not shutil.which("losetup"):
        return {}
    proc = subprocess.run(["losetup", "--list", "--json", "-O", "NAME,BACK-FILE"],
                          capture_output=True, text=True)
    if proc.returncode != 0 or not proc.stdout.strip():
        return {}
    found = {}
    for dev in json.loads(proc.stdout).get("loopdevices", []):
        back = _clean(dev.get("back-file") or "")
        if back.startswith(prefix):
            found[dev["name"]] = back
    return found


def leftover_mounts(prefix: str, loops: dict) -> list:
    """Mountpoints to unmount, deepest first."""
    loop_paths = {os.path.realpath(d) for d in loops}
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            mnt = left.split()[4].replace("\\040", " ")
            fields = right.split()
            source = fields[1] if len(fields) > 1 else ""
            if mnt.startswith(prefix) or (source.startswith("/dev/")
                                          and os.path.realpath(source) in loop_paths):
                found.append(mnt)
    return sorted(set(found), key=lambda m: (-m.count("/"), m))


def leftover_ceph_daemons(prefix: str) -> list:
    """(pid, name) of running daemons of Ceph dev clusters under ``prefix``: the PIDs their
    ``pids.json`` recorded whose command line still names that cluster's ceph.conf."""
    import glob

    found = []
    for pids_file in glob.glob(prefix + "*/pids.json") + glob.glob(prefix + "*/*/pids.json"):
        conf = os.path.join(os.path.dirname(pids_file), "ceph.conf").encode()
        try:
            with open(pids_file) as f:
                pids = json.load(f)
        except (OSError, ValueError):
            continue
        for name, pid in pids.items():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if conf in f.read().split(b"\0"):
                        found.append((pid, name))
            except OSError:
                continue
    return found


def leftover_spdk_targets(prefix: str) -> list:
    """(pid, socket) of running nvmf_tgt processes under ``prefix``: the PIDs their
    ``nvmf_tgt.pid`` recorded whose command line still names that directory's socket."""
    import glob

    found = []
    for pid_file in (glob.glob(prefix + "*/nvmf_tgt.pid") + glob.glob(prefix + "*/*/nvmf_tgt.pid")
                     + glob.glob(prefix + "*/*/*/nvmf_tgt.pid")):
        sock = os.path.join(os.path.dirname(pid_file), "spdk.sock")
        try:
            with open(pid_file) as f:
                pid = int(f.read().strip())
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if sock.encode() in f.read().split(b"\0"):
                    found.append((pid, sock))
        except (OSError, ValueError):
            continue
    return found


def leftover_cluster_hosts(prefix: str) -> list:
    """Folders of the cluster tests' host sessions (tests/nodes.py) under ``prefix``."""
    import glob

    return sorted(os.path.dirname(p) for p in glob.glob(prefix + "*/hosts.json"))


def clear(prefix: str, dry_run: bool = False) -> int:
    """Tear down the cluster tests' hosts, kill the Ceph daemons and SPDK targets, unmount the
    mounts and detach the loops under ``prefix`` (printing each); 1 if one could not be
    cleared."""
    sessions = leftover_cluster_hosts(prefix)
    for folder in sessions:
        print(f"tear down cluster hosts of {folder}")
        if not dry_run:
            from pathlib import Path

            sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
            from tests.nodes import teardown_recorded

            for what in teardown_recorded(Path(folder)):
                print(f"  {what}")
    loops = leftover_loops(prefix)
    mounts = leftover_mounts(prefix, loops)
    failed = 0
    daemons = [(pid, f"ceph {name}") for pid, name in leftover_ceph_daemons(prefix)]
    targets = [(pid, f"nvmf_tgt of {sock}") for pid, sock in leftover_spdk_targets(prefix)]
    for pid, what in daemons + targets:
        print(f"kill {what} (pid {pid})")
        if not dry_run:
            try:
                os.kill(pid, 9)
            except OSError:
                pass
    for pid, _ in targets if not dry_run else ():
        shutil.rmtree(f"/var/run/dpdk/spdk_pid{pid}", ignore_errors=True)   # DPDK's run dir
    for mnt in mounts:
        print(f"unmount {mnt}")
        if dry_run:
            continue
        if subprocess.run(["umount", mnt], capture_output=True).returncode != 0:
            proc = subprocess.run(["umount", "-l", mnt], capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"  failed: {proc.stderr.strip()}", file=sys.stderr)
                failed += 1
    for dev, back in sorted(loops.items()):
        print(f"detach {dev} ({back})")
        if dry_run:
            continue
        if shutil.which("btrfs"):
            subprocess.run(["btrfs", "device", "scan", "--forget", dev], capture_output=True)
        proc = subprocess.run(["losetup", "--detach", dev], capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"  failed: {proc.stderr.strip()}", file=sys.stderr)
            failed += 1
    if not mounts and not loops and not daemons and not targets and not sessions:
        print("cleanup_leftovers: nothing to clear")
    return 1 if failed else 0


def release_data_dir(path) -> None:
    """Tear down a test's Strata data directory: deactivate its pools (unmount, detach
    their loops), clear what deactivation left (a busy mount, its loop: rmtree must not
    delete an image under an attached loop), then remove it (directory-pool snapshots are
    immutable: chattr -i first)."""
    import dataplane   # the project's, on use: this file also runs as a script

    for kind in ("local", "directory"):
        try:
            drv = dataplane.open_driver(kind, path)
            names = drv.list_pools()
        except Exception:  # noqa: BLE001 - nothing of this kind there
            continue
        for name in names:
            try:
                drv.deactivate_pool(name)
            except Exception:  # noqa: BLE001 - cleared below
                pass
    if os.geteuid() == 0:
        clear(str(path) + "/")
    subprocess.run(["chattr", "-R", "-i", str(path)], capture_output=True)
    shutil.rmtree(path, ignore_errors=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefix", default=DEFAULT_PREFIX,
                        help="only touch things under this path prefix (must start with "
                             f"{DEFAULT_PREFIX})")
    parser.add_argument("--dry-run", action="store_true", help="print, change nothing")
    args = parser.parse_args(argv)
    if not args.prefix.startswith(DEFAULT_PREFIX):
        parser.error(f"--prefix must start with {DEFAULT_PREFIX}")
    if os.geteuid() != 0:
        print("cleanup_leftovers: not root, nothing to clear (tests without root make no "
              "mounts or loops)")
        return 0
    return clear(args.prefix, args.dry_run)

if __name__ == "__main__":
    sys.exit(main())
