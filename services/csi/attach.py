"""The node's kernel clients: NFSv4.1 and CephFS mounts, iSCSI sessions (open-iscsi's iscsiadm, with
iscsid running) and NVMe/TCP controllers (nvme-cli), and the block devices they bring.

Nothing is remembered between calls: a device's transport is found again from sysfs (its
iSCSI session or NVMe subsystem), so unstaging works after a restart of the plugin. Failures
are AttachError with the client's own message."""
import ctypes
import errno
import glob
import os
import re
import subprocess
import time


class AttachError(OSError):
    """A client refused (export or target gone, access denied, unreachable)."""


def run(*args: str, timeout: float = 60) -> str:
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AttachError(f"{' '.join(args)}: no answer in {timeout:.0f} s") from None
    if done.returncode != 0:
        raise AttachError(f"{' '.join(args)}: "
                          f"{(done.stderr or done.stdout).strip() or done.returncode}")
    return done.stdout


def _read(path: str) -> str:
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return ""


def _wait_for(find, timeout: float, what: str) -> str:
    deadline = time.monotonic() + timeout
    while True:
        found = find()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AttachError(f"{what} did not appear within {timeout:.0f} s")
        time.sleep(0.1)


# -- NFS ------------------------------------------------------------------------------------

def nfs_mount(server: str, port: str, export: str, target: str, read_only: bool) -> None:
    opts = ["vers=4.1"] + ([f"port={port}"] if port else []) + (["ro"] if read_only else [])
    run("mount", "-t", "nfs4", "-o", ",".join(opts), f"{server}:{export}", target,
        timeout=90)


# -- CephFS ---------------------------------------------------------------------------------

MS_RDONLY = 1
_libc = None


class CephMountError(AttachError):
    """The kernel refused a CephFS mount; ``errno`` says why (EACCES/EPERM: the key)."""


def ceph_mount(monitors: str, path: str, target: str, *, user: str, key: str, fs_name: str,
               ms_mode: str = "", read_only: bool = False, timeout: int = 30) -> None:
    """Mount CephFS directory ``path`` of file system ``fs_name`` with the kernel client,
    authenticated as cephx ``user`` with ``key``. mount(2) is called directly: the secret goes
    to the kernel and nowhere else (not in a process's arguments, not in a file; the kernel
    shows it as ``secret=<hidden>``), and no mount.ceph helper (ceph-common) is needed.
    ``ms_mode``: ``prefer-crc`` for monitors that speak msgr2 only (Linux 5.11+)."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    options = [f"name={user}", f"secret={key}", f"mds_namespace={fs_name}",
               f"mount_timeout={timeout}"] + ([f"ms_mode={ms_mode}"] if ms_mode else [])
    source = f"{monitors}:{path}"
    done = _libc.mount(source.encode(), target.encode(), b"ceph",
                       MS_RDONLY if read_only else 0, ",".join(options).encode())
    if done != 0:
        code = ctypes.get_errno()
        raise CephMountError(code, f"mount -t ceph {source} {target}: {os.strerror(code)}"
                             + (" (the key is refused for this path or file system)"
                                if code in (errno.EACCES, errno.EPERM) else ""))


# -- iSCSI ----------------------------------------------------------------------------------

def _iscsi_sessions(iqn: str, portal: str) -> list[str]:
    """sysfs directories of the iSCSI sessions to ``iqn`` at ``portal`` (host:port)."""
    host, _, port = portal.rpartition(":")
    found = []
    for session in glob.glob("/sys/class/iscsi_session/session*"):
        if _read(f"{session}/targetname") != iqn:
            continue
        name = os.path.basename(session).removeprefix("session")
        conn = glob.glob(f"/sys/class/iscsi_connection/connection{name}:*")
        if not conn or (_read(f"{conn[0]}/persistent_address") == host
                        and _read(f"{conn[0]}/persistent_port") == port):
            found.append(os.path.realpath(f"{session}/device"))  # .../hostN/sessionN
    return found


def _session_disks(session: str, lun: str | None = None) -> list[str]:
    """Block devices (``sdX``) of a session's LUNs (only ``lun`` when given)."""
    pattern = f"{session}/target*/*:*:*:{lun if lun is not None else '*'}/block/*"
    return sorted(os.path.basename(p) for p in glob.glob(pattern))


def iscsi_attach(portal: str, iqn: str, lun: str, timeout: float = 20) -> str:
    """Log in (once per target) and return the LUN's device path."""
    if not _iscsi_sessions(iqn, portal):
        run("iscsiadm", "-m", "node", "-T", iqn, "-p", portal, "-o", "new")
        # a target that is gone or refuses: fail within ~20 s (the defaults retry 2 minutes)
        for name, value in (("node.session.initial_login_retry_max", "1"),
                            ("node.conn[0].timeo.login_timeout", "10")):
            run("iscsiadm", "-m", "node", "-T", iqn, "-p", portal, "-o", "update",
                "-n", name, "-v", value)
        try:
            run("iscsiadm", "-m", "node", "-T", iqn, "-p", portal, "--login", timeout=90)
        except AttachError:
            _iscsi_forget(iqn, portal)
            raise
    else:  # a LUN added to a target this node is logged in to already
        run("iscsiadm", "-m", "node", "-T", iqn, "-p", portal, "-R")

    def find():
        for session in _iscsi_sessions(iqn, portal):
            disks = _session_disks(session, lun)
            if disks and os.path.exists(f"/dev/{disks[0]}"):
                return f"/dev/{disks[0]}"
        return ""
    try:
        return _wait_for(find, timeout, f"LUN {lun} of {iqn}")
    except AttachError:
        iscsi_detach_session(iqn, portal)
        raise


def iscsi_detach_session(iqn: str, portal: str) -> None:
    """Log out of the target when none of its LUNs is left in use."""
    for session in _iscsi_sessions(iqn, portal):
        if not _session_disks(session):
            _iscsi_forget(iqn, portal)
            return


def _iscsi_forget(iqn: str, portal: str) -> None:
    """Log out (a half-made session included) and drop the node record."""
    for op in (["--logout"], ["-o", "delete"]):
        subprocess.run(["iscsiadm", "-m", "node", "-T", iqn, "-p", portal, *op],
                       capture_output=True, timeout=90)


def _iscsi_detach(disk: str) -> None:
    """Remove the SCSI disk; the session goes with its last disk."""
    real = os.path.realpath(f"/sys/block/{disk}/device")
    match = re.search(r"/(session\d+)/", real)
    if not match:  # not an iSCSI disk: a local one is never let go of
        return
    run("sync")
    with open(f"{real}/delete", "w") as fh:
        fh.write("1")
    session = f"/sys/class/iscsi_session/{match.group(1)}"
    iqn = _read(f"{session}/targetname")
    conn = glob.glob(f"/sys/class/iscsi_connection/connection{match.group(1)[7:]}:*")
    if iqn and conn:
        portal = (f"{_read(conn[0] + '/persistent_address')}:"
                  f"{_read(conn[0] + '/persistent_port')}")
        iscsi_detach_session(iqn, portal)


# -- NVMe/TCP -------------------------------------------------------------------------------

def _nvme_namespaces(nqn: str) -> list[str]:
    """Block devices (``nvmeXnY``) of subsystem ``nqn``: the multipath heads when the kernel
    has native multipath, else the controllers' namespaces."""
    found = []
    for parent in glob.glob("/sys/class/nvme-subsystem/*") + glob.glob("/sys/class/nvme/*"):
        if _read(f"{parent}/subsysnqn") == nqn:
            found += [os.path.basename(p) for p in glob.glob(f"{parent}/nvme*n*")
                      if re.fullmatch(r"nvme\d+n\d+", os.path.basename(p))]
    return sorted(set(found))


def nvme_attach(traddr: str, trsvcid: str, nqn: str, timeout: float = 20) -> str:
    if not _nvme_namespaces(nqn):
        run("nvme", "connect", "-t", "tcp", "-a", traddr, "-s", trsvcid, "-n", nqn, timeout=90)

    def find():
        names = _nvme_namespaces(nqn)
        return f"/dev/{names[0]}" if names and os.path.exists(f"/dev/{names[0]}") else ""
    try:
        return _wait_for(find, timeout, f"a namespace of {nqn}")
    except AttachError:
        run("nvme", "disconnect", "-n", nqn)
        raise


def _nvme_detach(disk: str) -> None:
    path = os.path.realpath(f"/sys/block/{disk}")
    while path != "/":
        nqn = _read(f"{path}/subsysnqn")
        if nqn:
            if not any(_read(t) in ("tcp", "rdma", "fc") for t in
                       glob.glob(f"{path}/nvme*/transport") + [f"{path}/transport"]):
                return  # a local NVMe drive is never let go of
            run("sync")
            run("nvme", "disconnect", "-n", nqn)
            return
        path = os.path.dirname(path)


# -- devices --------------------------------------------------------------------------------

def detach(device: str) -> None:
    """Let go of a block device this node attached (``/dev/sdX`` or ``/dev/nvmeXnY``); a
    device that is gone already is fine."""
    disk = os.path.basename(device)
    if not os.path.exists(f"/sys/block/{disk}"):
        return
    if disk.startswith("nvme"):
        _nvme_detach(disk)
    elif disk.startswith("sd"):
        _iscsi_detach(disk)


def fs_type(device: str) -> str:
    """The file system blkid finds on ``device`` ("" for none)."""
    done = subprocess.run(["blkid", "-p", "-o", "value", "-s", "TYPE", device],
                          capture_output=True, text=True, timeout=60)
    return done.stdout.strip() if done.returncode == 0 else ""


def make_fs(device: str, kind: str) -> None:
    run(f"mkfs.{kind}", *(["-F", "-q"] if kind.startswith("ext") else ["-q"]), device,
        timeout=300)


def size_of(device: str) -> int:
    return int(run("blockdev", "--getsize64", device))


def rescan(device: str) -> None:
    """Have the kernel read the device's size again (after the volume grew)."""
    disk = os.path.basename(device)
    if os.path.exists(f"/sys/block/{disk}/device/rescan"):
        with open(f"/sys/block/{disk}/device/rescan", "w") as fh:
            fh.write("1")
    elif disk.startswith("nvme"):
        ctrl = re.sub(r"n\d+$", "", disk)
        subprocess.run(["nvme", "ns-rescan", f"/dev/{ctrl}"], capture_output=True, timeout=60)


def grow_fs(device: str, mount_point: str, kind: str) -> None:
    if kind == "xfs":
        run("xfs_growfs", mount_point, timeout=300)
    else:
        run("resize2fs", device, timeout=300)
