"""Plain data the management plane hands to the runtime: exports, shares and daemon settings.

These are dataclasses, not Django models: the plane converts its rows into them (see
``from_dict``) and passes them to the builders and supervisors.
"""

from __future__ import annotations

import ipaddress
import os
import re
import zlib
from dataclasses import dataclass, field

from .errors import InvalidShareSpec

ACCESS_LEVELS = ("rw", "ro")
SQUASH_MODES = ("root_squash", "all_squash", "no_root_squash")
# Strata's GMT-style snapshot name, the one Windows' Previous Versions expects by default.
DEFAULT_SNAPSHOT_FORMAT = "@GMT-%Y.%m.%d-%H.%M.%S"
# Ids above MAX_EXPORT_ID are the read-only snapshot exports (export id + SNAPSHOT_EXPORT_OFFSET)
MAX_EXPORT_ID = 32767
SNAPSHOT_EXPORT_OFFSET = 32768
SNAPSHOT_DIR = ".snapshots"
_SHARE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,79}$")
_USER_NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
_UNSAFE = re.compile(r'["\n\r\0]')


def check_text(what: str, value: str) -> str:
    """Refuse characters that would break out of a config line (quotes, newlines, NUL)."""
    if not isinstance(value, str) or _UNSAFE.search(value):
        raise InvalidShareSpec(f"{what} {value!r} contains a quote, newline or NUL")
    return value


def check_user_name(name: str) -> str:
    """Return ``name`` if it is a valid Unix/SMB user name, else raise InvalidShareSpec."""
    if not isinstance(name, str) or not _USER_NAME.match(name):
        raise InvalidShareSpec(
            f"user name {name!r} is invalid: use 1-32 lowercase letters, digits, '_' or '-', "
            "starting with a letter or '_'")
    return name


@dataclass
class NfsClientRule:
    """Who may mount an export and how: ``address`` is an IP, a CIDR or ``*``."""

    address: str
    access: str = "rw"
    squash: str = "root_squash"
    anonymous_uid: int = 65534
    anonymous_gid: int = 65534

    def __post_init__(self) -> None:
        self.access = str(self.access).lower()
        self.squash = str(self.squash).lower().replace("none", "no_root_squash")
        if self.access not in ACCESS_LEVELS:
            raise InvalidShareSpec(f"client access {self.access!r} must be one of {ACCESS_LEVELS}")
        if self.squash not in SQUASH_MODES:
            raise InvalidShareSpec(f"client squash {self.squash!r} must be one of {SQUASH_MODES}")
        if self.address != "*":
            try:
                ipaddress.ip_network(self.address, strict=False)
            except ValueError:
                raise InvalidShareSpec(f"client address {self.address!r} is not an IP "
                                       "address, a CIDR or '*'") from None


@dataclass
class CephExportSource:
    """Where an export on a ceph pool lives: Ganesha reaches it through FSAL_CEPH
    (libcephfs) rather than a local mount. ``path`` is the directory in the CephFS
    ``filesystem`` of the cluster of ``conf``, reached as cephx user ``client``."""

    conf: str
    client: str
    filesystem: str
    path: str

    def __post_init__(self) -> None:
        for what in ("conf", "client", "filesystem", "path"):
            check_text(f"ceph {what}", getattr(self, what))
        if not os.path.isabs(self.path) or not os.path.isabs(self.conf):
            raise InvalidShareSpec("ceph path and conf must be absolute")


@dataclass
class NfsExport:
    """One NFSv4 export: a directory (``path``) shown at ``pseudo`` to the listed clients.

    With ``snapshots`` (the default) ``<path>/.snapshots`` is also exported read-only at
    ``<pseudo>/.snapshots`` (export id ``export_id + 32768``), so clients walk from the file
    system into its snapshots; see ``NfsServer.refresh_snapshots``.
    """

    export_id: int
    path: str
    pseudo: str
    clients: list[NfsClientRule] = field(default_factory=list)
    snapshots: bool = True
    ceph: CephExportSource | None = None

    def __post_init__(self) -> None:
        self.clients = [c if isinstance(c, NfsClientRule) else NfsClientRule(**c)
                        for c in self.clients]
        if isinstance(self.ceph, dict):
            self.ceph = CephExportSource(**self.ceph)
        if not isinstance(self.export_id, int) or not 1 <= self.export_id <= MAX_EXPORT_ID:
            raise InvalidShareSpec(
                f"export id {self.export_id!r} must be an integer in 1..{MAX_EXPORT_ID}")
        check_text("export path", self.path)
        check_text("pseudo path", self.pseudo)
        if not os.path.isabs(self.path):
            raise InvalidShareSpec(f"export path {self.path!r} must be absolute")
        if not self.pseudo.startswith("/") or self.pseudo == "/" or "//" in self.pseudo \
                or "/../" in self.pseudo + "/" or "/./" in self.pseudo + "/":
            raise InvalidShareSpec(
                f"pseudo path {self.pseudo!r} must be absolute, not '/', without '.', '..' or '//'")

    @classmethod
    def from_dict(cls, data: dict) -> NfsExport:
        """Build from the REST shape
        ``{export_id, path, pseudo, clients: [{address, access, squash}], snapshots?, ceph?}``
        (``ceph``: the fields of :class:`CephExportSource`)."""
        return cls(export_id=data["export_id"], path=data["path"], pseudo=data["pseudo"],
                   clients=list(data.get("clients", [])), snapshots=data.get("snapshots", True),
                   ceph=data.get("ceph"))


@dataclass
class NfsCluster:
    """Ganesha as one of several servers of the same CephFS exports (active-active): the
    ``rados_cluster`` recovery backend, its grace database and client records in RADOS
    ``pool`` (namespace ``namespace``) of the cluster of ``conf``, reached as cephx user
    ``client``; ``nodeid`` names this server in it (one per node, kept across restarts);
    ``serial`` is the node's number in the cluster (the plane's), for :attr:`epoch_tag`."""

    conf: str
    client: str
    pool: str
    namespace: str
    nodeid: str
    serial: int | None = None

    @property
    def epoch_tag(self) -> int:
        """1 to 255: this server's byte of its Ganesha epoch (``nfs_server.ganesha_argv``),
        from the node's serial number (distinct for up to 255 nodes), else from its nodeid."""
        number = self.serial if self.serial is not None else zlib.crc32(self.nodeid.encode())
        return number % 255 + 1

    def __post_init__(self) -> None:
        for what in ("conf", "client", "pool", "namespace", "nodeid"):
            check_text(f"cluster {what}", getattr(self, what))
        if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$", self.nodeid):
            raise InvalidShareSpec(f"cluster nodeid {self.nodeid!r}: letters, digits, '_', "
                                   "'.', '-', at most 63")
        if not os.path.isabs(self.conf):
            raise InvalidShareSpec("cluster conf must be an absolute path")


@dataclass
class NfsSettings:
    """Server-wide Ganesha settings.

    ``worker_threads`` sizes ntirpc's I/O thread pool (RPC_Ioq_ThrdMax): many ranks writing
    checkpoint shards at once need more than a handful. ``max_io_bytes`` is the largest
    READ/WRITE payload offered to clients (rsize/wsize). With ``cluster`` the server is one
    of several serving the same CephFS exports (see :class:`NfsCluster`) and honours a grace
    period of ``grace_seconds`` when it or a peer starts over; without it, it starts graceless.
    """

    state_dir: str
    port: int = 2049
    bind_address: str = "0.0.0.0"
    worker_threads: int = 256
    max_io_bytes: int = 4 * 1024 * 1024
    lease_seconds: int = 60
    max_connections: int = 1024
    cluster: NfsCluster | None = None
    grace_seconds: int = 90


@dataclass
class SmbShare:
    """One SMB3 share of a directory.

    ``encrypt`` sets ``smb encrypt = required`` on the share. ``signing`` asks for mandatory
    signing; Samba only has a server-wide switch, so any share asking for it makes signing
    mandatory for the whole server. ``quota_bytes`` is reported to clients as the share size.
    """

    name: str
    path: str
    read_only: bool = False
    valid_users: list[str] = field(default_factory=list)
    encrypt: bool = False
    signing: bool = False
    quota_bytes: int | None = None
    snapshots: bool = True
    comment: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _SHARE_NAME.match(self.name) \
                or self.name.lower() in ("global", "homes", "printers", "ipc$"):
            raise InvalidShareSpec(
                f"share name {self.name!r} is invalid: 1-80 letters, digits, '_', '.', '-', "
                "not global/homes/printers")
        check_text("share path", self.path)
        check_text("share comment", self.comment)
        if not os.path.isabs(self.path):
            raise InvalidShareSpec(f"share path {self.path!r} must be absolute")
        self.valid_users = [check_user_name(u) for u in self.valid_users]
        if self.quota_bytes is not None and (not isinstance(self.quota_bytes, int)
                                             or self.quota_bytes <= 0):
            raise InvalidShareSpec(f"quota {self.quota_bytes!r} must be a positive byte count")

    @classmethod
    def from_dict(cls, data: dict) -> SmbShare:
        """Build from the REST shape ``{name, path, read_only, valid_users, encrypt, ...}``."""
        keys = ("name", "path", "read_only", "valid_users", "encrypt", "signing",
                "quota_bytes", "snapshots", "comment")
        return cls(**{k: data[k] for k in keys if k in data})


@dataclass
class SmbSettings:
    """Server-wide Samba settings.

    ``interfaces`` are interface names or addresses smbd binds to (``bind interfaces only``).
    Snapshots live at ``<share path>/<snapshot_dir>/<name>``; only names that match
    ``snapshot_format`` (strftime, GMT unless ``snapshot_localtime``) appear as Windows
    Previous Versions, so Strata names scheduled snapshots with that format
    (default ``@GMT-%Y.%m.%d-%H.%M.%S``, e.g. ``@GMT-2026.11.30-04.50.00``).
    """

    state_dir: str
    port: int = 445
    interfaces: list[str] = field(default_factory=lambda: ["lo"])
    workgroup: str = "WORKGROUP"
    netbios_name: str = "STRATA"
    snapshot_dir: str = ".snapshots"
    snapshot_format: str = DEFAULT_SNAPSHOT_FORMAT
    snapshot_localtime: bool = False
    server_encrypt: str = "desired"
    dfree_cache_seconds: int = 5
