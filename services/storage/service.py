"""Make the dataplane match the rows, and record what it reports back on them.

Every change goes through here: the row and the dataplane change inside one database
transaction, so a dataplane error rolls the row back and nothing changes; the periodic
reconcile brings pools back after a restart and records usage, health and drift.
"""
import contextlib
import fcntl
import grp
import logging
import os
import pwd
import subprocess
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from dataplane.driver import DeviceSpec
from dataplane.errors import DataplaneError, NotFound
from plumbing import nodeceph
from plumbing.errors import Conflict, NoSpace, is_disk_full
from services.storage import cephkeys
from services.storage.drivers import driver_for
from services.storage.models import FileSystem, Pool, Snapshot, State, Volume

log = logging.getLogger(__name__)


def _apply_pool_info(pool: Pool, info) -> None:
    pool.mountpoint = info.mountpoint
    pool.size_bytes, pool.used_bytes, pool.free_bytes = (
        info.size_bytes, info.used_bytes, info.free_bytes)
    pool.device_status = [
        {"path": d.path, "backing": d.backing, "fault_domain": d.fault_domain,
         "size_bytes": d.size_bytes, "state": d.state, "errors": d.errors}
        for d in info.devices
    ]
    pool.features_off = info.features_off
    pool.health_detail = info.health_detail
    pool.state = info.health if info.health in State.values else State.ERROR
    # a pool that is offline (its cluster does not answer, its mount is missing) says why
    pool.error = ("; ".join(info.health_detail.get("reasons", []))
                  if info.health_detail.get("status") == "unreachable" or info.health == "offline"
                  else "")


# -- pools ---------------------------------------------------------------------------------

def create_pool(*, name, driver, devices, redundancy="none", media="flash",
                ceph=None) -> Pool:
    """A pool row and its dataplane pool; ``ceph`` (ceph pools) names the cluster (conf,
    client, keyring), the failure domain and min_size."""
    specs = [DeviceSpec(path=d["path"], fault_domain=d.get("fault_domain", "default"))
             for d in devices]
    options = {}
    if driver == "ceph":
        ceph = ceph or {}
        options = {"ceph_conf": ceph.get("conf"), "client": ceph.get("client"),
                   "keyring": ceph.get("keyring"),
                   "failure_domain": ceph.get("failure_domain") or "host",
                   "min_size": ceph.get("min_size")}
    with transaction.atomic():
        pool = Pool.objects.create(name=name, driver=driver, devices=devices,
                                   redundancy=redundancy, media=media, ceph=ceph or {})
        info = driver_for(driver).create_pool(name, specs, redundancy=redundancy, media=media,
                                              **options)
        _apply_pool_info(pool, info)
        pool.save()
    return pool


def delete_pool(pool: Pool) -> None:
    held = [f"file system {n}" for n in pool.filesystems.values_list("name", flat=True)]
    held += [f"volume {n}" for n in pool.volumes.values_list("name", flat=True)]
    if held:
        raise Conflict(f"Pool {pool.name} still holds {', '.join(held)}; delete them first.")
    with transaction.atomic():
        pool.delete()
        try:
            driver_for(pool.driver).destroy_pool(pool.name)
        except NotFound:
            pass  # already gone from the dataplane: the row was all that was left


USABLE = (State.ONLINE, State.DEGRADED)
# seconds between two tries to attach a pool that could not be (its cluster is down, a device
# is missing): the n-th failed try waits the n-th, the last one from then on
ATTACH_BACKOFF = (10, 20, 40, 60)


def refresh_pool(pool: Pool, attach: bool | None = None) -> Pool:
    """Attach a pool that is not (mount it from its devices, its CephFS with ceph-fuse: after
    a restart, after its ceph-fuse died), then record usage and health. A pool that cannot be
    attached says why, how many tries failed and when the next is (``health_detail
    ["attach"]``, :func:`attach_pools`). ``attach``: True to try now (the start), False to
    only look; by default a pool is attached unless it waits out its back-off or another
    process is attaching it (a page view never waits for a mount)."""
    drv = driver_for(pool.driver)
    previous = pool.health_detail.get("attach")
    forced = attach is True
    if attach is None:
        attach = not _backing_off(pool)
    tried = False
    try:
        with _attaching(pool, wait=forced) as mine:
            try:
                info = drv.pool_info(pool.name)
                if info.health == "offline" and attach and mine:
                    tried = True
                    info = drv.activate_pool(pool.name)
            except NotFound:
                if not (attach and mine):
                    raise
                tried = True
                info = drv.activate_pool(pool.name)
        _apply_pool_info(pool, info)
    except DataplaneError as exc:
        pool.state, pool.error = State.ERROR, str(exc)
    _record_attach(pool, previous, tried)
    pool.save()
    return pool


def _backing_off(pool: Pool) -> bool:
    attach = pool.health_detail.get("attach")
    return bool(attach) and datetime.fromisoformat(attach["next_try"]) > timezone.now()


@contextlib.contextmanager
def _attaching(pool: Pool, wait: bool = True):
    """One process at a time looks at a pool and attaches it (the bootstrap, the worker's
    periodic tasks and the web server may all try at once): two mounts at one mountpoint
    would stack. Yields whether this process holds the pool (without ``wait``: not while
    another one does)."""
    path = settings.DATA_DIR / "run" / f"attach-{pool.name}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True


def _record_attach(pool: Pool, previous: dict | None, tried: bool) -> None:
    """The attach record: gone once the pool is usable; one more failed try, or the one
    before kept as it was (nothing was tried)."""
    if pool.state in USABLE:
        pool.health_detail.pop("attach", None)
        return
    if not tried:
        if previous:
            pool.health_detail = {**pool.health_detail, "attach": previous}
            pool.error = (f"{pool.error} (attach try {previous['tries']} failed; next at "
                          f"{previous['next_try']})").strip()
        return
    tries = (previous or {}).get("tries", 0) + 1
    wait = ATTACH_BACKOFF[min(tries, len(ATTACH_BACKOFF)) - 1]
    pool.health_detail = {**pool.health_detail, "attach": {
        "tries": tries, "retry_in_s": wait,
        "next_try": (timezone.now() + timedelta(seconds=wait)).isoformat()}}
    pool.error = f"{pool.error} (attach try {tries} failed; next in {wait} s)".strip()


def attach_pools() -> dict:
    """Every pool not attached as it should be (not mounted, a dead ceph-fuse mount, never
    attached since the start) attached again, each on its back-off; its file systems' states
    follow. Cheap when all is well: the drivers' ``pool_attached`` looks at the mounts only."""
    done = {}
    for pool in Pool.objects.exclude(driver="spdk"):
        if _backing_off(pool):
            continue
        try:
            attached = pool.state in USABLE and driver_for(pool.driver).pool_attached(pool.name)
        except DataplaneError:
            attached = False
        if attached:
            continue
        before = pool.state
        refresh_pool(pool, attach=True)
        _refresh_contents(pool, {"missing": []})
        done[pool.name] = pool.state
        if pool.state != before:
            log.warning("pool %s: %s -> %s %s", pool.name, before, pool.state, pool.error)
    return done


# -- file systems --------------------------------------------------------------------------

def create_filesystem(*, name, pool: Pool, quota_bytes=None, origin: Snapshot | None = None,
                      kept_by: str = "", owner: str = "", group: str = "", mode: str = ""):
    """A file system; ``kept_by`` names the service that makes it for its own use; ``owner``,
    ``group`` and ``mode`` (octal) are set on its root when given."""
    drv = driver_for(pool.driver)
    with transaction.atomic():
        fs = FileSystem.objects.create(name=name, pool=pool, quota_bytes=quota_bytes,
                                       origin=origin, kept_by=kept_by, owner=owner,
                                       group=group, mode=mode)
        if origin is None:
            info = drv.create_filesystem(pool.name, name, quota_bytes)
        else:
            info = drv.clone_snapshot(pool.name, "filesystem", origin.filesystem.name,
                                      origin.name, name)
            if quota_bytes is not None:
                drv.set_filesystem_quota(pool.name, name, quota_bytes)
        fs.path, fs.used_bytes = info.path, info.used_bytes
        if kept_by:
            fs.owner, fs.group, fs.mode = KEPT_OWNER, KEPT_GROUP, KEPT_MODE
        if fs.owner or fs.group or fs.mode:
            _apply_access(fs)
        fs.save()
    return fs


def secure_kept_filesystem(fs: FileSystem) -> list[str]:
    """Put a kept file system back the way its service needs it: no quota (a quota at or
    below the service's data stops it for good: the S3 gateway cannot even start), root
    owned by root with mode 0700 (its service's data is no local account's to read). Undoes
    what an API call could set before such changes were refused; returns what it changed, in
    words, for the start-up log."""
    drv = driver_for(fs.pool.driver)
    changed = []
    info = drv.filesystem_info(fs.pool.name, fs.name)
    if fs.quota_bytes is not None or info.quota_bytes is not None:
        drv.set_filesystem_quota(fs.pool.name, fs.name, None)
        changed.append(f"quota {fs.quota_bytes or info.quota_bytes} bytes removed")
        fs.quota_bytes = None
    st = os.stat(info.path)
    if (st.st_uid, st.st_gid, st.st_mode & 0o7777) != (0, 0, int(KEPT_MODE, 8)):
        changed.append(f"root {st.st_uid}:{st.st_gid} {st.st_mode & 0o7777:04o} made "
                       f"0:0 {KEPT_MODE}")
    fs.owner, fs.group, fs.mode = KEPT_OWNER, KEPT_GROUP, KEPT_MODE
    _apply_access(fs)
    fs.save()
    return changed


# what the services that keep file systems do with them, for messages
KEEPERS = {"object": "the S3 gateway's objects", "checkpoints": "cold checkpoint versions",
           "vector": "a vector collection's vectors and index"}


class KeptByService(Conflict):
    """A change to a file system that a service keeps for its own data (``kept_by``): its
    quota, owner, group and mode are the service's, and only the service deletes it."""

    code = "kept_by_service"

    def __init__(self, fs: FileSystem, what: str):
        who = KEEPERS.get(fs.kept_by)
        super().__init__(
            f"File system {fs.name} is kept by the {fs.kept_by} service"
            f"{f' ({who})' if who else ''} for its own data; "
            f"{what} would break that service, so it is refused. Change the service's "
            "settings instead (an S3 bucket's quota, for example).")
        self.kept_by = fs.kept_by

    def to_dict(self) -> dict:
        return {**super().to_dict(), "kept_by": self.kept_by}


# a kept file system's root: root's alone, whatever was asked before Strata refused it
KEPT_OWNER, KEPT_GROUP, KEPT_MODE = "0", "0", "0700"


def refuse_if_kept(fs: FileSystem, what: str, keeper: str = "") -> None:
    """Raise :class:`KeptByService` when ``fs`` is kept by a service other than ``keeper``."""
    if fs.kept_by and fs.kept_by != keeper:
        raise KeptByService(fs, what)


def uid_of(owner: str) -> int:
    return int(owner) if owner.isdigit() else pwd.getpwnam(owner).pw_uid


def gid_of(group: str) -> int:
    return int(group) if group.isdigit() else grp.getgrnam(group).gr_gid


def _apply_access(fs: FileSystem) -> None:
    driver_for(fs.pool.driver).set_filesystem_access(
        fs.pool.name, fs.name, uid=uid_of(fs.owner) if fs.owner else None,
        gid=gid_of(fs.group) if fs.group else None,
        mode=int(fs.mode, 8) if fs.mode else None)


def set_filesystem_access(fs: FileSystem, **access) -> FileSystem:
    """Change the root's ``owner``, ``group`` and/or ``mode`` (the keys given)."""
    refuse_if_kept(fs, "changing the owner, group or mode of its root")
    with transaction.atomic():
        for key, value in access.items():
            setattr(fs, key, value)
        fs.save()
        _apply_access(fs)
    return fs


def set_filesystem_quota(fs: FileSystem, quota_bytes) -> FileSystem:
    """Set (or, with None, lift) the quota. A quota at or below what the file system holds
    is refused (409): on btrfs it would leave the file system full at once, refusing every
    write and even a snapshot; raising or lifting a quota always works."""
    refuse_if_kept(fs, "a quota on it")
    if quota_bytes is not None:
        used = driver_for(fs.pool.driver).filesystem_info(fs.pool.name, fs.name).used_bytes
        if quota_bytes <= used:
            raise Conflict(
                f"File system {fs.name} holds {used} bytes; a quota of {quota_bytes} bytes "
                "at or below that would leave it full at once (no writes, no snapshots). "
                f"Give a quota above {used} bytes, or free space first.", code="quota_below_usage")
    with transaction.atomic():
        fs.quota_bytes = quota_bytes
        fs.save()
        driver_for(fs.pool.driver).set_filesystem_quota(fs.pool.name, fs.name, quota_bytes)
    return fs


def _refuse_if_cloned(snapshots) -> None:
    cloned = [f"{s.name} (cloned to {', '.join(c.name for c in s.clones())})"
              for s in snapshots if s.clones()]
    if cloned:
        raise Conflict("Snapshot " + "; ".join(cloned)
                       + " has clones that depend on it; delete or promote the clones first.")


def delete_filesystem(fs: FileSystem) -> None:
    """Delete a file system. One that a service keeps goes only when that service lets it:
    its rows that depend on it refuse (the S3 gateway's always, a cold tier while it holds
    data), so an emptied cold tier can still be dropped with its capacity pool."""
    _refuse_if_cloned(fs.snapshots.all())
    with transaction.atomic():
        cephkeys.revoke_all(fs)   # native clients lose it first
        fs.delete()
        try:
            driver_for(fs.pool.driver).delete_filesystem(fs.pool.name, fs.name)
        except NotFound:
            pass


# -- volumes -------------------------------------------------------------------------------

def create_volume(*, name, pool: Pool, size_bytes, origin: Snapshot | None = None) -> Volume:
    drv = driver_for(pool.driver)
    with transaction.atomic():
        vol = Volume.objects.create(name=name, pool=pool, size_bytes=size_bytes or 0,
                                    origin=origin)
        if origin is None:
            info = drv.create_volume(pool.name, name, size_bytes)
        else:
            info = drv.clone_snapshot(pool.name, "volume", origin.volume.name, origin.name, name)
            if size_bytes and size_bytes > info.size_bytes:
                info = drv.resize_volume(pool.name, name, size_bytes) or drv.volume_info(
                    pool.name, name)
        vol.path, vol.size_bytes, vol.used_bytes = info.path, info.size_bytes, info.used_bytes
        vol.save()
    return vol


def resize_volume(vol: Volume, size_bytes: int) -> Volume:
    drv = driver_for(vol.pool.driver)
    with transaction.atomic():
        drv.resize_volume(vol.pool.name, vol.name, size_bytes)
        info = drv.volume_info(vol.pool.name, vol.name)
        vol.size_bytes, vol.used_bytes = info.size_bytes, info.used_bytes
        vol.save()
    return vol


def delete_volume(vol: Volume) -> None:
    _refuse_if_cloned(vol.snapshots.all())
    with transaction.atomic():
        vol.delete()
        try:
            driver_for(vol.pool.driver).delete_volume(vol.pool.name, vol.name)
        except NotFound:
            pass


# -- snapshots -----------------------------------------------------------------------------

def create_snapshot(*, name, filesystem=None, volume=None) -> Snapshot:
    source = filesystem or volume
    kind = "filesystem" if filesystem else "volume"
    with transaction.atomic():
        snap = Snapshot.objects.create(name=name, filesystem=filesystem, volume=volume)
        try:
            info = driver_for(source.pool.driver).create_snapshot(
                source.pool.name, kind, source.name, name)
        except DataplaneError as exc:
            if filesystem is not None and _quota_full(exc):
                raise NoSpace(
                    f"File system {source.name} is full to its quota "
                    f"({filesystem.quota_bytes} bytes) and btrfs needs room in it to record "
                    "a snapshot: raise the quota or free space, then retry.") from exc
            raise
        snap.path = info.path
        snap.save()
    return snap


def _quota_full(exc: Exception) -> bool:
    """True when a dataplane command failed because a quota or the pool is full."""
    return is_disk_full(exc) or any(
        words in str(exc) for words in ("Disk quota exceeded", "No space left on device"))


def delete_snapshot(snap: Snapshot) -> None:
    _refuse_if_cloned([snap])
    source = snap.source
    with transaction.atomic():
        snap.delete()
        try:
            driver_for(source.pool.driver).delete_snapshot(
                source.pool.name, snap.kind, source.name, snap.name)
        except NotFound:
            pass


def clone_snapshot(snap: Snapshot, *, name, size_bytes=None, quota_bytes=None):
    if snap.filesystem_id:
        return create_filesystem(name=name, pool=snap.pool, quota_bytes=quota_bytes, origin=snap)
    return create_volume(name=name, pool=snap.pool, size_bytes=size_bytes, origin=snap)


# -- periodic reconcile --------------------------------------------------------------------

def reconcile_all() -> dict:
    """Activate pools, record usage and health, mark what went missing from the dataplane."""
    summary = {"pools": {}, "missing": []}
    for pool in Pool.objects.all():
        refresh_pool(pool)
        summary["pools"][pool.name] = pool.state
        _refresh_contents(pool, summary)
    return summary


def _refresh_contents(pool: Pool, summary: dict) -> None:
    """The states of a pool's file systems and volumes; while the pool is not attached its
    file systems are offline with the pool's reason (their paths lead nowhere)."""
    if pool.state not in USABLE:
        pool.filesystems.update(state=State.OFFLINE,
                                error=f"pool {pool.name} is {pool.state}: {pool.error}"[:2000])
        return
    drv = driver_for(pool.driver)
    for fs in pool.filesystems.all():
        _refresh(fs, lambda: drv.filesystem_info(pool.name, fs.name), summary)
    for vol in pool.volumes.all():
        _refresh(vol, lambda: drv.volume_info(pool.name, vol.name), summary)


def _refresh(obj, info_fn, summary) -> None:
    try:
        info = info_fn()
    except NotFound:
        obj.state, obj.error = State.ERROR, "missing from the dataplane"
        summary["missing"].append(obj.name)
    except DataplaneError as exc:
        obj.state, obj.error = State.ERROR, str(exc)
    else:
        obj.state, obj.error, obj.used_bytes = State.ONLINE, "", info.used_bytes
    obj.save(update_fields=["state", "error", "used_bytes", "updated_at"])


# -- file systems on ceph pools ------------------------------------------------------------


def filesystem_source(fs: FileSystem) -> dict | None:
    """Where a file system of a ceph pool lives in its cluster (``{conf, client, filesystem,
    path}``) for daemons that reach CephFS themselves (Ganesha's FSAL_CEPH); None on other
    pools. On a cluster node (``STRATA_NODE_AGENT``) the conf and key are the node's own
    copies, which its agent fetched from the plane (:mod:`plumbing.nodeceph`)."""
    if settings.STRATA_NODE_AGENT and fs.pool.driver == "ceph":
        files = nodeceph.read_pool(settings.DATA_DIR, fs.pool.name)
        if files is None or not files.get("filesystem"):
            raise DataplaneError(f"this node has no Ceph client files for pool {fs.pool.name} "
                                 "yet (its agent fetches them from the plane)")
        return {"conf": files["conf"], "client": files["client"],
                "filesystem": files["filesystem"], "path": f"{files['root']}/fs/{fs.name}"}
    drv = driver_for(fs.pool.driver)
    if not hasattr(drv, "filesystem_source"):
        return None
    return drv.filesystem_source(fs.pool.name, fs.name)


def volume_path(volume: Volume) -> str:
    """Where a daemon on this host opens ``volume``: its path, except on a cluster node,
    where an RBD image is opened with the node's copy of the pool's ceph.conf and key
    (:mod:`plumbing.nodeceph`) rather than the files the pool names on the plane's host."""
    path = volume.path
    if not (settings.STRATA_NODE_AGENT and path.startswith("rbd:")):
        return path
    files = nodeceph.read_pool(settings.DATA_DIR, volume.pool.name)
    if files is None:
        raise DataplaneError(f"this node has no Ceph client files for pool "
                             f"{volume.pool.name} yet (its agent fetches them from the plane)")
    parts = path.split(":")          # rbd, POOL/IMAGE, id=C, conf=P[, keyring=K]
    kept = [o for o in parts[2:] if not o.startswith(("id=", "conf=", "keyring="))]
    return ":".join(parts[:2] + kept + [f"id={files['client']}", f"conf={files['conf']}"])


def node_entity(node: str, pool: Pool) -> str:
    """The cephx entity of node ``node``'s daemons on ``pool``."""
    return f"client.strata-node.{node}.{pool.name}"


def ceph_client_files(pool: Pool, node: str) -> dict:
    """What cluster node ``node`` needs to open Ceph pool ``pool``: ``{"client", "conf"
    (the cluster's ceph.conf, text), "keyring" (the client's key, text), "filesystem" (its
    CephFS, once it has file systems), "root" (the pool's directory in it)}``. The key is the
    node's own (:func:`node_entity`, made once, caps of an RBD and CephFS client of this pool
    only, removed with the node); when the pool's client may not make keys, the pool's own
    key (said in the log)."""
    conf_path = pool.ceph.get("conf") or ""
    try:
        conf = open(conf_path, encoding="utf-8").read()
    except OSError as exc:
        raise DataplaneError(f"pool {pool.name}: cannot read its ceph.conf {conf_path!r}: "
                             f"{exc}") from None
    entity = node_entity(node, pool)
    try:
        keyring, client = driver_for(pool.driver).node_key(pool.name, entity), entity[7:]
    except DataplaneError as exc:
        client = pool.ceph.get("client") or "admin"
        log.warning("pool %s: no key of its own for node %s (%s); it gets client.%s's",
                    pool.name, node, exc, client)
        keyring = _keyring_of(pool.name, conf_path, client, pool.ceph.get("keyring") or "")
    out = {"client": client, "conf": conf, "keyring": keyring, "filesystem": "", "root": ""}
    fs = FileSystem.objects.filter(pool=pool).first()
    if fs is not None:
        source = driver_for(pool.driver).filesystem_source(pool.name, fs.name)
        out["filesystem"] = source["filesystem"]
        out["root"] = source["path"].rsplit("/fs/", 1)[0]
    return out


def rados_pool(pool: Pool) -> str:
    """The RADOS pool of Ceph pool ``pool`` (see the ceph driver's ``rados_pool``)."""
    return driver_for(pool.driver).rados_pool(pool.name)


def revoke_node_keys(node: str) -> list[str]:
    """Remove node ``node``'s cephx keys from the clusters of the Ceph pools (it left the
    cluster); the entities removed or failed, for the log."""
    done = []
    for pool in Pool.objects.filter(driver="ceph"):
        entity = node_entity(node, pool)
        try:
            driver_for(pool.driver).revoke_node_key(pool.name, entity)
            done.append(entity)
        except DataplaneError as exc:
            log.error("node %s: its key %s could not be removed: %s", node, entity, exc)
    return done


def evict_node_clients(node: str) -> list[str]:
    """Fence node ``node``'s CephFS clients (it is down): their MDS sessions on the file
    systems of the Ceph pools are evicted, so that the capabilities its NFS server held stop
    holding back the other nodes' clients (until the MDS's own ``session_autoclose``
    otherwise). The entities evicted, for the log."""
    done = []
    for pool in Pool.objects.filter(driver="ceph", filesystems__isnull=False).distinct():
        entity = node_entity(node, pool)
        try:
            if driver_for(pool.driver).evict_fs_clients(pool.name, entity):
                done.append(entity)
        except DataplaneError as exc:
            log.error("node %s: the CephFS sessions of %s could not be evicted: %s", node,
                      entity, exc)
    return done


def _keyring_of(pool: str, conf_path: str, client: str, keyring_path: str) -> str:
    """The ``[client.<client>]`` entry of the pool's keyring (its path as the pool names
    it, else as its ceph.conf says)."""
    if not keyring_path:
        done = subprocess.run(["ceph-conf", "-c", conf_path, "-n", f"client.{client}",
                               "--lookup", "keyring"], capture_output=True, text=True,
                              timeout=30, check=False)
        candidates = [p.strip() for p in done.stdout.strip().split(",") if p.strip()]
        keyring_path = next((p for p in candidates if os.path.exists(p)), "")
    try:
        text = open(keyring_path, encoding="utf-8").read()
    except OSError as exc:
        raise DataplaneError(f"pool {pool}: cannot read the keyring of client.{client} "
                             f"({keyring_path or 'none named'}): {exc}") from None
    entry, keep = [], False
    for line in text.splitlines():
        if line.strip().startswith("["):
            keep = line.strip() == f"[client.{client}]"
        if keep:
            entry.append(line)
    if not entry:
        raise DataplaneError(f"pool {pool}: {keyring_path} holds no key for client.{client}")
    return "\n".join(entry) + "\n"


def spread_directory(fs: FileSystem, relpath: str, index: int) -> int | None:
    """Pin directory ``relpath`` of ``fs`` to an active metadata server (MDS rank),
    round-robin by ``index``, on pools whose driver can (ceph: several active MDS); the
    rank, or None where there is nothing to spread."""
    drv = driver_for(fs.pool.driver)
    if not drv.capabilities().get("dir_pinning"):
        return None
    ranks = drv.mds_ranks(fs.pool.name)
    if len(ranks) < 2:
        return None
    rank = ranks[index % len(ranks)]
    drv.pin_directory(fs.pool.name, f"fs/{fs.name}/{relpath}", rank)
    return rank

