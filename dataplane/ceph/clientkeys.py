"""Native CephFS access: cephx client keys scoped to one file system's directory.

A GPU host running the Ceph kernel client (or ceph-fuse, or libcephfs) talks to the MDS and
the OSDs itself. The key the plane gives it carries the caps OpenStack Manila's CephFS
driver grants for a share::

    mds  allow rw path=/strata/<pool>/fs/<name>        (``allow r`` for read-only)
    osd  allow rw pool=<data pool> namespace=<ns>       (``allow r``)
    mon  allow r

The MDS cap confines the client's namespace operations to the file system's tree: it
cannot look up, open or list anything outside it. The OSD cap is what stops a client that
skips the MDS and reads RADOS objects directly (object names are guessable: inode number
and block index): every file system's directory has its own RADOS namespace in the pool's
data pool (``ceph.dir.layout.pool_namespace``, set when the file system is made, or when
its first key is issued if it predates this), so a key reaches only the objects of its own
file system. Files written before a file system got its namespace stay in the pool's
default namespace, out of reach of native clients (they read EPERM; copy them to make
them readable).

The secret is Ceph's (``auth get-or-create``): this module hands it back once and keeps
nothing; ``auth rm`` revokes the key, and the MDS sessions of clients using it are evicted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from . import bindings
from ..errors import AlreadyExists, CommandFailed, InvalidArgument
from .cephfs import CephFileSystems

ENTITY_PREFIX = "strata"
NAMESPACE_PREFIX = "strata-fs-"
LAYOUT_POOL = "ceph.dir.layout.pool"
LAYOUT_NAMESPACE = "ceph.dir.layout.pool_namespace"


@dataclass
class ClientKey:
    """A cephx key for one file system: ``entity`` (``client.<id>``), ``secret`` (base64;
    only in the answer that makes it), ``caps`` and where to mount."""

    entity: str
    caps: dict
    path: str
    filesystem: str            # the CephFS (mds_namespace / client_fs)
    monitors: list             # ["127.0.0.1:3300", ...]
    msgr2_only: bool
    secret: str = field(default="", repr=False)

    @property
    def client_id(self) -> str:
        """The id without ``client.`` (the kernel's ``name=``, ceph-fuse's ``--id``)."""
        return self.entity.split(".", 1)[1]


def entity_for(fs_name: str, key_name: str) -> str:
    """The cephx entity of key ``key_name`` of file system ``fs_name``."""
    return f"client.{ENTITY_PREFIX}.{fs_name}.{key_name}"


def namespace_for(fs_name: str) -> str:
    """The RADOS namespace holding the objects of file system ``fs_name``."""
    return f"{NAMESPACE_PREFIX}{fs_name}"


def scoped_caps(path: str, data_pool: str, namespace: str, read_only: bool) -> dict:
    """The caps of a key limited to ``path`` and to ``namespace`` of ``data_pool``."""
    mode = "r" if read_only else "rw"
    return {"mds": f"allow {mode} path={path}",
            "osd": f"allow {mode} pool={data_pool} namespace={namespace}",
            "mon": "allow r"}


def _xattr(files: CephFileSystems, path: str, key: str) -> str:
    cephfs = bindings.load("cephfs")
    try:
        return files.fs.getxattr(path.encode(), key).decode()
    except cephfs.NoData:
        return ""


def ensure_namespace(files: CephFileSystems, path: str, namespace: str) -> str:
    """Put new files of the directory ``path`` into RADOS namespace ``namespace`` (of the
    data pool its layout already uses); returns the data pool."""
    pool = _xattr(files, path, LAYOUT_POOL) or _inherited_pool(files, path)
    if _xattr(files, path, LAYOUT_NAMESPACE) != namespace:
        # pool first: a directory without a layout of its own would otherwise take the
        # CephFS's default layout (its default data pool) with the namespace
        files.fs.setxattr(path.encode(), LAYOUT_POOL, pool.encode(), 0)
        files.fs.setxattr(path.encode(), LAYOUT_NAMESPACE, namespace.encode(), 0)
    return pool


def _inherited_pool(files: CephFileSystems, path: str) -> str:
    parent = path.rsplit("/", 1)[0] or "/"
    if parent == path:
        raise InvalidArgument(f"no data pool layout above {path}")
    return _xattr(files, parent, LAYOUT_POOL) or _inherited_pool(files, parent)


def _monitors(files: CephFileSystems) -> tuple:
    """(["host:port", ...] preferring msgr1 addresses, whether only msgr2 ones exist)."""
    dump = files.mon_command("mon dump")
    found, v1 = [], False
    for mon in dump.get("mons", []):
        addrs = mon.get("public_addrs", {}).get("addrvec", [])
        legacy = [a["addr"] for a in addrs if a.get("type") == "v1"]
        chosen = legacy or [a["addr"] for a in addrs if a.get("type") == "v2"]
        v1 = v1 or bool(legacy)
        found.extend(chosen[:1])
    return found, not v1


def issue_key(files: CephFileSystems, path: str, entity: str, namespace: str,
              read_only: bool) -> ClientKey:
    """A new cephx key for the CephFS directory ``path`` (a file system's root), its
    objects in ``namespace``. AlreadyExists when Ceph has ``entity`` already (a key this
    plane does not know: revoke it with ``ceph auth rm`` or choose another name)."""
    try:
        files.mon_command("auth get", entity=entity)
    except CommandFailed:
        pass   # ENOENT: the name is free
    else:
        raise AlreadyExists(f"the Ceph cluster already has a key {entity}: it was not made "
                            "by this plane's records; choose another name or remove it "
                            f"with 'ceph auth rm {entity}'")
    data_pool = ensure_namespace(files, path, namespace)
    caps = scoped_caps(path, data_pool, namespace, read_only)
    flat = [item for kind in ("mds", "osd", "mon") for item in (kind, caps[kind])]
    answer = files.mon_command("auth get-or-create", entity=entity, caps=flat)
    secret = answer[0]["key"]
    monitors, msgr2_only = _monitors(files)
    return ClientKey(entity=entity, caps=caps, path=path, filesystem=files.filesystem_name(),
                     monitors=monitors, msgr2_only=msgr2_only, secret=secret)


def revoke_key(files: CephFileSystems, entity: str) -> None:
    """Remove the key from Ceph (nothing when it is gone already) and evict the MDS
    sessions that authenticated with it, so that mounted clients lose access now rather
    than at their next reconnect."""
    try:
        files.mon_command("auth rm", entity=entity)
    except CommandFailed:
        pass
    client_id = entity.split(".", 1)[1]
    for rank in files.active_ranks():
        rc, out, _err = files.fs.mds_command(str(rank), json.dumps(
            {"prefix": "session ls", "format": "json"}), b"")
        if rc != 0:
            continue
        for session in json.loads(out):
            if session.get("client_metadata", {}).get("entity_id") == client_id:
                files.fs.mds_command(str(rank), json.dumps(
                    {"prefix": "session evict", "filters": [f"id={session['id']}"]}), b"")


def mount_commands(key: dict) -> dict:
    """How a host mounts the file system with the key: ``kernel`` (``mount -t ceph``),
    ``fuse`` (ceph-fuse) and the files they read (``secretfile``, ``keyring``) with the
    secret left as ``<SECRET>``. ``key`` holds ClientKey's fields (a row's, without its
    secret)."""
    client_id = key["entity"].split(".", 1)[1]
    mountpoint = f"/mnt/{key['entity'].rsplit('.', 1)[1]}"
    secretfile = f"/etc/ceph/{key['entity']}.secret"
    keyring = f"/etc/ceph/ceph.{key['entity']}.keyring"
    options = [f"name={client_id}", f"secretfile={secretfile}",
               f"mds_namespace={key['filesystem']}"]
    if key.get("read_only"):
        options.append("ro")
    if key.get("msgr2_only"):
        options.append("ms_mode=prefer-crc")   # the monitors speak msgr2 only
    monitors = ",".join(key["monitors"])
    fuse = (f"ceph-fuse --id {client_id} -k {keyring} -m {monitors} "
            f"--client_fs={key['filesystem']} --client_mountpoint={key['path']} "
            f"{mountpoint}")
    return {
        "kernel": f"mount -t ceph {monitors}:{key['path']} {mountpoint} -o {','.join(options)}",
        "fuse": fuse,
        "secretfile": {"path": secretfile, "content": "<SECRET>"},
        "keyring": {"path": keyring,
                    "content": f"[{key['entity']}]\n\tkey = <SECRET>\n"},
    }
