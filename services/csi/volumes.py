"""How CSI names and ids map onto the plane's objects, and what a StorageClass may ask.

A CSI volume is a Strata file system (mount access, shared: NFS, CephFS, or the appliance's
own host for a hyperconverged node) or a Strata volume (block access: iSCSI, NVMe-oF). CSI
names are free text chosen by the CO; Strata names match ``[a-z0-9][a-z0-9._-]{0,62}``, so a
CSI name becomes ``csi-`` and 24 hex digits of its SHA-256: the same name always lands on the
same object, which makes CreateVolume and CreateSnapshot idempotent without a lookup table.
Ids carry the kind: ``filesystem/csi-…``, ``volume/csi-…``, ``snapshot/<plane id>``."""
import hashlib
import re
from dataclasses import dataclass

from plumbing.errors import Invalid

KINDS = ("filesystem", "volume")
FILE_PROTOCOLS = ("nfs", "cephfs", "local")
BLOCK_PROTOCOLS = ("iscsi", "nvmeof")
PROTOCOLS = FILE_PROTOCOLS + BLOCK_PROTOCOLS
MIB = 1 << 20
DEFAULT_VOLUME_BYTES = 1 << 30  # a CreateVolume without a capacity range
# StorageClass parameters the driver reads; the CO's own (csi.storage.k8s.io/...) are ignored.
# QoS of a block volume's export (the plane's block export fields, without the prefix):
# I/O per second and bytes per second, read, write, or both together (total)
QOS_PARAMETERS = ("qos_iops_read", "qos_iops_write", "qos_iops_total",
                  "qos_bps_read", "qos_bps_write", "qos_bps_total")
PARAMETERS = ("pool", "protocol", "quota") + QOS_PARAMETERS
CO_PREFIX = "csi.storage.k8s.io/"
_CSI_NAME = re.compile(r"^csi-[0-9a-f]{24}$")
_CLONE_SOURCE = "csi-clone-"  # prefix of the snapshots made to clone a volume from a volume


class OutOfRange(Invalid):
    """A capacity range the driver cannot honour (gRPC OUT_OF_RANGE)."""


def object_name(csi_name: str) -> str:
    """The Strata name of the object (file system, volume or snapshot) a CSI name stands for."""
    return "csi-" + hashlib.sha256(csi_name.encode()).hexdigest()[:24]


def clone_source_name(csi_name: str) -> str:
    """Name of the snapshot taken of a source volume to make the CSI volume ``csi_name``."""
    return _CLONE_SOURCE + hashlib.sha256(csi_name.encode()).hexdigest()[:24]


def is_clone_source(snapshot_name: str) -> bool:
    return snapshot_name.startswith(_CLONE_SOURCE)


def is_csi_object(name: str) -> bool:
    """True for a file system, volume or snapshot this driver made (never a user's own)."""
    return bool(_CSI_NAME.match(name))


@dataclass(frozen=True)
class VolumeId:
    kind: str  # "filesystem" or "volume"
    name: str

    def __str__(self):
        return f"{self.kind}/{self.name}"

    @property
    def collection(self) -> str:
        """The plane's API collection: filesystems/ or volumes/."""
        return f"{self.kind}s/"

    @classmethod
    def parse(cls, text: str) -> "VolumeId | None":
        """The id, or None when ``text`` is not one this driver hands out."""
        kind, _, name = text.partition("/")
        return cls(kind, name) if kind in KINDS and is_csi_object(name) else None


def parse_snapshot_id(text: str) -> int | None:
    kind, _, number = text.partition("/")
    return int(number) if kind == "snapshot" and number.isdigit() else None


@dataclass(frozen=True)
class StorageClass:
    """What a StorageClass's parameters ask for: pool (default: the plane's ``default``),
    protocol, and for file systems whether the capacity is enforced as a quota."""
    pool: str | None
    protocol: str
    quota: bool
    qos: tuple = ()  # ((export field, limit), ...): the non-zero QoS limits

    @property
    def qos_context(self) -> dict:
        """The QoS limits as the volume context carries them to ControllerPublishVolume."""
        return {f"qos_{field}": str(value) for field, value in self.qos}

    @property
    def kind(self) -> str:
        return "filesystem" if self.protocol in FILE_PROTOCOLS else "volume"

    @classmethod
    def from_parameters(cls, parameters: dict, block_access: bool) -> "StorageClass":
        unknown = sorted(k for k in parameters if k not in PARAMETERS
                         and not k.startswith(CO_PREFIX))
        if unknown:
            raise Invalid(f"unknown StorageClass parameter(s) {', '.join(unknown)}; "
                          f"the driver reads {', '.join(PARAMETERS)}")
        protocol = parameters.get("protocol") or ("iscsi" if block_access else "nfs")
        if protocol not in PROTOCOLS:
            raise Invalid(f"protocol {protocol!r} is not one of {', '.join(PROTOCOLS)}")
        quota = parameters.get("quota", "true").lower()
        if quota not in ("true", "false"):
            raise Invalid(f"quota must be true or false, not {quota!r}")
        if block_access and protocol in FILE_PROTOCOLS:
            raise Invalid(f"block access needs a block protocol ({', '.join(BLOCK_PROTOCOLS)}), "
                          f"not {protocol}")
        return cls(parameters.get("pool") or None, protocol, quota == "true",
                   qos_of(parameters, protocol))


def qos_of(parameters: dict, protocol: str) -> tuple:
    """The non-zero QoS limits of ``parameters`` as ((export field, limit), ...); Invalid
    naming the parameter for a value that is not a whole number >= 0, a total given with a
    read or write limit, or a protocol without QoS."""
    limits = {}
    for name in QOS_PARAMETERS:
        text = str(parameters.get(name, "0")).strip()
        if not text.isdigit():
            raise Invalid(f"{name} must be a whole number >= 0, not {parameters[name]!r}")
        if int(text):
            limits[name.removeprefix("qos_")] = int(text)
    for kind in ("iops", "bps"):
        if f"{kind}_total" in limits and ({f"{kind}_read", f"{kind}_write"} & set(limits)):
            raise Invalid(f"qos_{kind}_total limits reads and writes together; it cannot be "
                          f"combined with qos_{kind}_read or qos_{kind}_write")
    if limits and protocol != "nvmeof":
        name = "qos_" + next(iter(limits))
        raise Invalid(f"{name}: protocol {protocol} has no QoS (tgtd has no per-LUN limits, "
                      "file systems none); use protocol nvmeof on an spdk pool")
    return tuple(limits.items())


def qos_from_context(context) -> dict:
    """The export's QoS fields from a volume context (services.csi.volumes.StorageClass)."""
    return {name.removeprefix("qos_"): int(context[name]) for name in QOS_PARAMETERS
            if str(context.get(name, "")).isdigit()}


def size_in_range(required: int, limit: int, *, granularity: int = 1,
                  default: int = 0) -> int:
    """The size to provision for a CSI capacity range: ``required`` (or ``default``) rounded
    up to ``granularity``; Invalid when that exceeds ``limit`` (0: none)."""
    if required < 0 or limit < 0:
        raise Invalid("capacity_range bytes cannot be negative")
    if limit and required > limit:
        raise Invalid(f"required_bytes {required} is above limit_bytes {limit}")
    size = required or (min(default, limit) if limit else default)
    size = -(-size // granularity) * granularity
    if limit and size > limit:
        raise OutOfRange(f"no size in [{required}, {limit}] is a multiple of {granularity}")
    return size


def fits(size: int | None, required: int, limit: int) -> bool:
    """True when an existing object's size honours a CSI capacity range."""
    if size is None:  # a file system without a quota has no size
        return not required and not limit
    return size >= required and (not limit or size <= limit)
