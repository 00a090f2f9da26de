"""ControllerPublish/Unpublish: a node is given access to a volume by putting the node's
Strata host (its address, iSCSI initiator name, NVMe host NQN) into the volume's host group.

Each CSI volume has two host groups, ``<volume>-rw`` and ``<volume>-ro``: membership is the
record of which node has it published and how, so the plugin keeps no state of its own. A
block volume is exported (iSCSI or NVMe-oF, per its StorageClass) to its ``-rw`` group on its
first publish; publishing it read-only is not offered (the export, not the host, is read-only
in Strata). A node id carries the node's identity: ``NAME;address=A;iqn=I;nqn=N`` (what
NodeGetInfo answers), so the controller can register the node without reaching it.

A ``cephfs`` file system is reached by the node's own kernel client: each publish gets a
cephx key of the plane's ceph-keys API scoped to that file system (read-only for a read-only
publish), named ``csi-<node digest>-<random>``, and the publish context hands it to the node
(see ``cephfs_grant``); unpublish revokes the node's keys, DeleteVolume all of them."""
import hashlib
import re
import secrets
from dataclasses import dataclass

import grpc

from plumbing.restclient import ApiError
from services.csi.errors import CsiError
from services.csi.plane import get_or_none, list_all

_NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_KEYS = ("address", "iqn", "nqn")
EXPORT_PROTOCOLS = {"iscsi": "iscsi", "nvmeof": "nvmf"}


@dataclass(frozen=True)
class NodeIdentity:
    name: str
    address: str = ""
    iqn: str = ""
    nqn: str = ""

    def __str__(self):
        return ";".join([self.name] + [f"{k}={getattr(self, k)}" for k in _KEYS
                                       if getattr(self, k)])

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.name.encode()).hexdigest()[:16]

    def host(self, kind: str) -> tuple[str, dict]:
        """(name, fields) of the Strata host that stands for this node. Block access is
        granted by initiator name only: tgtd would let any initiator from an allowed address
        in, and on a shared address (NAT, one host's containers) that is every one. File
        systems are granted by address, as NFS client rules are."""
        digest = self.digest
        if kind == "volume":
            if not (self.iqn or self.nqn):
                raise CsiError(grpc.StatusCode.FAILED_PRECONDITION,
                               f"node {self.name} has no iSCSI initiator name or NVMe host NQN "
                               "(/etc/iscsi/initiatorname.iscsi, /etc/nvme/hostnqn)")
            return f"csi-node-{digest}", {"iqn": self.iqn, "nqn": self.nqn, "address": ""}
        if not self.address:
            raise CsiError(grpc.StatusCode.FAILED_PRECONDITION,
                           f"node {self.name} has no address (--node-address)")
        return f"csi-addr-{digest}", {"address": self.address, "iqn": "", "nqn": ""}

    @classmethod
    def parse(cls, text: str) -> "NodeIdentity | None":
        """The identity, or None when ``text`` is not a node id this driver hands out."""
        name, *pairs = text.split(";")
        fields = dict(p.partition("=")[::2] for p in pairs)
        if not _NODE_NAME.match(name) or set(fields) - set(_KEYS) or not any(fields.values()):
            return None
        return cls(name, **fields)


def groups_of(volume_name: str) -> dict[bool, str]:
    """{read_only: host group name} of a CSI volume."""
    return {False: f"{volume_name}-rw", True: f"{volume_name}-ro"}


def _register(client, name: str, fields: dict) -> None:
    """Create or update the node's Strata host."""
    host = get_or_none(client, f"hosts/{name}/")
    if host is None:
        client.post("hosts/", {"name": name, **fields})
    elif any((host.get(k) or "") != v for k, v in fields.items()):
        client.patch(f"hosts/{name}/", fields)


def _join(client, group: str, host: str) -> None:
    row = get_or_none(client, f"host-groups/{group}/")
    if row is None:
        client.post("host-groups/", {"name": group, "hosts": [host]})
    elif host not in row["hosts"]:
        client.patch(f"host-groups/{group}/", {"hosts": row["hosts"] + [host]})


def _leave(client, group: str, host: str) -> None:
    row = get_or_none(client, f"host-groups/{group}/")
    if row is not None and host in row["hosts"]:
        client.patch(f"host-groups/{group}/", {"hosts": [h for h in row["hosts"] if h != host]})


def block_exports(client, volume_name: str) -> list[dict]:
    return [e for e in list_all(client, "block-exports/") if e["volume"] == volume_name]


def publish(client, kind: str, volume_name: str, node: NodeIdentity, read_only: bool,
            protocol: str, qos: dict | None = None) -> dict:
    """Give ``node`` access; returns the publish context (connection details of a block
    export, made with the QoS limits ``qos``: block export fields). ALREADY_EXISTS when the
    node has it the other way (read-only vs read-write)."""
    groups = groups_of(volume_name)
    host, fields = node.host(kind)
    other = get_or_none(client, f"host-groups/{groups[not read_only]}/")
    if other is not None and host in other["hosts"]:
        raise CsiError(grpc.StatusCode.ALREADY_EXISTS,
                       f"the volume is published to node {node.name} "
                       f"{'read-write' if read_only else 'read-only'}")
    if kind == "volume" and read_only:
        raise CsiError(grpc.StatusCode.INVALID_ARGUMENT,
                       "a block volume is published read-write only")
    _register(client, host, fields)
    _join(client, groups[read_only], host)
    if kind != "volume":
        if protocol == "cephfs":
            return cephfs_grant(client, volume_name, node, read_only)
        return nfs_grant(client, volume_name, node.address, read_only) if protocol == "nfs" \
            else {}
    exports = block_exports(client, volume_name)
    if not exports:
        exports = [client.post("block-exports/", {
            "volume": volume_name, "protocol": EXPORT_PROTOCOLS.get(protocol, "iscsi"),
            "host_group": groups[False], **(qos or {})})]
    return {k: str(v) for k, v in (exports[0].get("connection") or {}).items()}


def unpublish(client, kind: str, volume_name: str, node: NodeIdentity) -> None:
    try:
        host, _ = node.host(kind)
    except CsiError:  # a node that could never have been given the volume
        return
    for group in groups_of(volume_name).values():
        _leave(client, group, host)
    if kind != "volume":
        nfs_revoke(client, volume_name, node.address)
        cephfs_revoke(client, volume_name, node)


def nfs_export(client, fs_name: str) -> dict | None:
    """The NFS export the driver made for a file system (pseudo path ``/<name>``), or None."""
    return next((e for e in list_all(client, "nfs-exports/")
                 if e["filesystem"] == fs_name and e["pseudo"] == f"/{fs_name}"), None)


def nfs_server(client) -> tuple[str, str]:
    """(address, port) of the appliance's NFS server, from its health report."""
    found = (client.get("health").get("services", {}).get("file", {}).get("nfs") or {})
    host, _, port = (found.get("address") or "").rpartition(":")
    if not host:
        raise CsiError(grpc.StatusCode.FAILED_PRECONDITION,
                       "the appliance runs no NFS server (strata up --nfs-port)")
    return host, port


def nfs_grant(client, fs_name: str, address: str, read_only: bool) -> dict:
    """A client rule for the node's address on the file system's export (made at the first
    publish); the publish context tells the node where to mount it from."""
    rule = {"address": address, "access": "ro" if read_only else "rw",
            "squash": "no_root_squash"}
    export = nfs_export(client, fs_name)
    if export is None:
        export = client.post("nfs-exports/", {"filesystem": fs_name, "pseudo": f"/{fs_name}",
                                               "clients": [rule]})
    else:
        clients = [c for c in export["clients"] if c["address"] != address]
        if rule not in export["clients"]:
            export = client.patch(f"nfs-exports/{export['id']}/",
                                  {"clients": clients + [rule]})
    host, port = nfs_server(client)
    return {"server": host, "port": port, "export": export["pseudo"]}


def nfs_revoke(client, fs_name: str, address: str) -> None:
    """The node's rule goes; the export goes with its last rule."""
    export = nfs_export(client, fs_name)
    if export is None:
        return
    clients = [c for c in export["clients"] if c["address"] != address]
    if not clients:
        client.request("DELETE", f"nfs-exports/{export['id']}/", ok=(204, 404))
    elif clients != export["clients"]:
        client.patch(f"nfs-exports/{export['id']}/", {"clients": clients})


def _key_prefix(node: NodeIdentity) -> str:
    return f"csi-{node.digest[:12]}-"


def cephfs_grant(client, fs_name: str, node: NodeIdentity, read_only: bool) -> dict:
    """A new cephx key for the node, scoped to the file system (read-only when asked), and
    where to mount: the publish context of a ``cephfs`` volume. The plane shows a secret
    only in the answer that makes it, so a retried publish makes another key rather than
    replacing one a staged mount may be using; unpublish revokes them all."""
    key = client.post(f"filesystems/{fs_name}/ceph-keys/",
                      {"name": _key_prefix(node) + secrets.token_hex(4),
                       "read_only": read_only})
    return {"monitors": ",".join(key["monitors"]), "path": key["path"],
            "fs_name": key["ceph_filesystem"], "user": key["entity"].split(".", 1)[1],
            "key": key["secret"], "ms_mode": "prefer-crc" if key.get("msgr2_only") else ""}


def cephfs_revoke(client, fs_name: str, node: NodeIdentity | None = None) -> None:
    """Revoke the keys the driver made for ``node`` (every node's: None) on the file system;
    Ceph evicts the mounts that use them."""
    prefix = _key_prefix(node) if node is not None else "csi-"
    for key in get_or_none(client, f"filesystems/{fs_name}/ceph-keys/") or []:
        if key["name"].startswith(prefix):
            client.request("DELETE", f"filesystems/{fs_name}/ceph-keys/{key['name']}/",
                           ok=(204, 404))


def forget(client, volume_name: str) -> None:
    """Before a volume is deleted: its exports and host groups go."""
    for export in block_exports(client, volume_name):
        client.request("DELETE", f"block-exports/{export['id']}/", ok=(204, 404))
    export = nfs_export(client, volume_name)
    if export is not None:
        client.request("DELETE", f"nfs-exports/{export['id']}/", ok=(204, 404))
    for group in groups_of(volume_name).values():
        try:
            client.request("DELETE", f"host-groups/{group}/", ok=(204, 404))
        except ApiError as exc:
            raise CsiError(grpc.StatusCode.FAILED_PRECONDITION,
                           f"host group {group} is still in use: {exc}") from exc
