"""Block transports (Cinder calls them targets): how a volume is reached, separate from
where its bytes live. No Django here.

- :class:`TgtdTarget` -- iSCSI through tgtd: one target per host group, LUNs, ACLs, CHAP.
- :class:`QemuStorageDaemon` -- NBD and vhost-user-blk through qemu-storage-daemon (QMP),
  with live per-export QoS.
- :class:`NvmfTarget` -- NVMe-oF/TCP through spdk_tgt, for volumes of the spdk driver.
- :class:`BlockRuntime` -- all of them behind one object; the management plane's entry point.

See services/block/README.md for the contract the plane wires onto.
"""

from .base import (
                   DaemonError,
                   ExportExists,
                   ExportInUse,
                   ExportNotFound,
                   Host,
                   HostGroup,
                   InvalidExport,
                   QosLimits,
                   Transport,
                   TransportError,
)
from .iscsi import Plan, TgtdTarget
from .nvmf import NvmfTarget
from .qmp import QMPClient, QMPError
from .qsd import QemuStorageDaemon
from .runtime import PROTOCOLS, BlockRuntime

__all__ = [
    "BlockRuntime", "DaemonError", "ExportExists", "ExportInUse", "ExportNotFound", "Host",
    "HostGroup", "InvalidExport", "NvmfTarget", "PROTOCOLS", "Plan", "QMPClient", "QMPError",
    "QemuStorageDaemon", "QosLimits", "TgtdTarget", "Transport", "TransportError",
]
