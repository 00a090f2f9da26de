"""The common interface of block transports, their errors, and small shared helpers.

A *transport* makes a volume reachable by a client (Cinder calls it a target): the
volume itself (a file, or an SPDK bdev) is owned by the dataplane driver, the transport
only exports it. The management plane picks one transport per export by protocol:

    transport = transports[protocol]          # e.g. {"iscsi": TgtdTarget, "nbd": qsd, ...}
    info = transport.export("exp-7", "/pools/p/vols/v.raw", read_only=False, host_group=hg)
    # info is a JSON-friendly dict that tells the client how to connect
    transport.resize("exp-7")                 # after the dataplane grew the volume
    transport.unexport("exp-7")

No Django here: this runs (and is tested) on its own.
"""

from __future__ import annotations

import abc
import ipaddress
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from dataplane.ceph.rbd import image_size as rbd_image_size
from dataplane.ceph.rbd import parse_rbd_path
from plumbing import errors
from plumbing.packages import not_installed
from plumbing.process import Child

EXPORT_ID_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
# the most a QoS limit may be: QEMU's THROTTLE_VALUE_MAX (qemu-storage-daemon refuses more;
# SPDK takes more, but a pebibyte or 10^15 IOPS a second is no limit anyway)
QOS_LIMIT_MAX = 10**15
# characters that make a pattern of a name in some target's ACL syntax, and list separators
_WILDCARD_CHARS = set("*?[]{}!,;/ \t\n")


class TransportError(errors.StrataError):
    """Base of every transport error; ``code`` is the machine-readable kind. Each is also the
    domain error it is (`plumbing.errors`), which is how the plane picks the status."""

    code = "transport_error"


class InvalidExport(TransportError, errors.Invalid):
    """The request cannot be satisfied as given (bad name, missing file, conflicting CHAP user)."""

    code = "invalid"


class ExportNotFound(TransportError, errors.NotFound):
    """No export (or target, or node) with that name exists."""

    code = "not_found"


class ExportExists(TransportError, errors.Conflict):
    """An export with that id already exists with different settings."""

    code = "exists"


class ExportInUse(TransportError, errors.Conflict):
    """The volume is exported; unexport it before deleting it."""

    code = "in_use"


class DaemonError(TransportError, errors.Unavailable):
    """The daemon is not running, did not start, or refused a command (message says which)."""

    code = "command_failed"


@dataclass
class Host:
    """A client machine: its iSCSI initiator name and/or NVMe host NQN, address, CHAP secret
    and DH-HMAC-CHAP key (NVMe-oF)."""

    name: str
    iqn: str | None = None
    nqn: str | None = None
    address: str | None = None
    chap_user: str | None = None
    chap_secret: str | None = None
    dhchap_key: str | None = None


@dataclass
class HostGroup:
    """Hosts that see the same set of LUNs/namespaces; one iSCSI target per group.

    ``mutual_chap_user``/``mutual_chap_secret`` make the target authenticate itself to the
    initiators too (mutual CHAP).
    """

    name: str
    hosts: list[Host] = field(default_factory=list)
    mutual_chap_user: str | None = None
    mutual_chap_secret: str | None = None


@dataclass
class QosLimits:
    """Per-export limits; 0 or None means unlimited. bps = bytes per second."""

    iops_read: int | None = None
    iops_write: int | None = None
    iops_total: int | None = None
    bps_read: int | None = None
    bps_write: int | None = None
    bps_total: int | None = None


class Transport(abc.ABC):
    """What the management plane needs from every block transport.

    ``protocols`` names the protocols the transport serves ("iscsi", "nbd",
    "vhost-user-blk", "nvmf"). Every method raises a :class:`TransportError` subclass.
    """

    protocols: tuple[str, ...] = ()

    @abc.abstractmethod
    def start(self) -> None:
        """Start (or attach to) the daemon and re-apply the recorded exports."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Stop the daemon this object started (by PID); exports are kept in the record."""

    def detach(self) -> None:
        """Drop this object's connections to the daemon, leaving it running."""

    @abc.abstractmethod
    def export(self, export_id: str, volume_path: str, *, protocol: str | None = None,
               read_only: bool = False, host_group: HostGroup | None = None,
               qos: QosLimits | None = None) -> dict:
        """Export ``volume_path`` under ``export_id``; return how to connect (a plain dict)."""

    @abc.abstractmethod
    def unexport(self, export_id: str) -> None:
        """Remove the export; the volume's bytes are untouched."""

    @abc.abstractmethod
    def resize(self, export_id: str) -> int:
        """Make clients see the volume's current (grown) size without re-export; return it."""

    @abc.abstractmethod
    def health(self) -> dict:
        """Return {"running": bool, "pid": int|None, "exports": int, "detail": str}."""

    @abc.abstractmethod
    def connection_info(self, export_id: str) -> dict:
        """Return the same dict ``export`` returned for an existing export."""

    @abc.abstractmethod
    def list_exports(self) -> list[str]:
        """Ids of the exports this transport serves."""

    @abc.abstractmethod
    def volume_of(self, export_id: str) -> str:
        """The volume path an export serves (to refuse deleting an exported volume)."""


def check_host_address(address: str) -> str:
    """One host's IP address, normalised; InvalidExport for anything that names more than one
    machine: tgtd's ``ALL``, a network (``10.0.0.0/8``), ``*``, the unspecified address or a
    name. A host in a group must never widen the group's target to every initiator: that is
    what an export's ``allow_any`` is for (explicit, and warned about)."""
    try:
        ip = ipaddress.ip_address(address.strip())
    except ValueError:
        raise InvalidExport(
            f"host address {address!r} is not one IP address (e.g. 192.0.2.10 or 2001:db8::10); "
            "wildcards, networks and names are refused: to open an export to every "
            "initiator, set allow_any on the export") from None
    if ip.is_unspecified or ip.is_multicast:
        raise InvalidExport(f"host address {address!r} is not the address of one host; to "
                            "open an export to every initiator, set allow_any on the export")
    return str(ip)


def check_initiator_name(name: str, kind: str = "iqn") -> str:
    """An iSCSI initiator name or NVMe host NQN with no wildcard or separator in it (``ALL``,
    ``*``, ``iqn.*``): targets match these names exactly, and a name that reads as a
    pattern would be a promise of filtering that nothing keeps."""
    if name.strip().upper() in ("ALL", "ANY") or _WILDCARD_CHARS & set(name):
        raise InvalidExport(
            f"{kind} {name!r} is not one initiator's name: wildcards, lists and spaces are "
            "refused; to open an export to every initiator, set allow_any on the export")
    return name


def check_export_id(export_id: str) -> None:
    """Raise InvalidExport unless ``export_id`` is a safe name."""
    if not isinstance(export_id, str) or not EXPORT_ID_RE.match(export_id):
        raise InvalidExport(
            f"export id {export_id!r} must match [a-z0-9][a-z0-9._-]{{0,62}}")


def is_rbd(volume_path) -> bool:
    """True for a Ceph RBD image path (``rbd:POOL/IMAGE:id=CLIENT:conf=PATH``)."""
    return str(volume_path).startswith("rbd:")


def check_volume_file(volume_path: str) -> Path | str:
    """Return the volume file as a Path (an RBD image path as it is, once its ceph.conf is
    found), or raise InvalidExport if it is neither."""
    if is_rbd(volume_path):
        spec = parse_rbd_path(volume_path)
        if not spec["image"] or not spec["conf"] or not os.path.isfile(spec["conf"]):
            raise InvalidExport(f"volume {volume_path} names no RBD image with a ceph.conf")
        return str(volume_path)
    path = Path(volume_path)
    if not path.is_file() and not path.is_block_device():
        raise InvalidExport(f"volume {volume_path} is not a file or block device")
    return path.resolve()


def require_installed(*programs: str) -> None:
    """Raise DaemonError naming the package to install when one of ``programs`` is not on
    PATH."""
    why = not_installed(*programs)
    if why:
        raise DaemonError(why)


def start_child(name: str, argv: list[str], log_path: Path) -> Child:
    """Start a transport's daemon in its own session, logging to ``log_path``."""
    try:
        return Child(name, argv, log_path).start()
    except FileNotFoundError as exc:
        raise DaemonError(f"{name}: {argv[0]} is not installed") from exc


def run_tool(argv: list[str], *, input: bytes | None = None, timeout: float = 60.0,
             what: str = "") -> subprocess.CompletedProcess:
    """Run a control tool; raise DaemonError with its stderr if it fails."""
    try:
        cp = subprocess.run(argv, input=input, capture_output=True, timeout=timeout)
    except FileNotFoundError as exc:
        raise DaemonError(f"{argv[0]} is not installed") from exc
    except subprocess.TimeoutExpired as exc:
        raise DaemonError(f"{' '.join(argv)} timed out after {timeout}s") from exc
    if cp.returncode != 0:
        err = (cp.stderr or cp.stdout).decode(errors="replace").strip()
        raise DaemonError(f"{what or argv[0]} failed (exit {cp.returncode}): {err}")
    return cp


def volume_size(path: str | Path) -> int:
    """Size in bytes of a volume file, block device or RBD image."""
    if is_rbd(path):
        return rbd_image_size(str(path))
    with open(path, "rb") as f:
        return f.seek(0, os.SEEK_END)
