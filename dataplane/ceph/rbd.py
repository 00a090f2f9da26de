"""Volumes of the ``ceph`` driver: RBD images (thin), snapshots, clones, send streams.

- Volume = RBD image ``<name>`` in the pool's RADOS pool (bytes in the EC data pool for
  ``ec:K+M``), features layering, exclusive-lock, object-map, fast-diff, deep-flatten.
  ``VolumeInfo.path`` is qemu's rbd filename ``rbd:POOL/IMAGE:id=CLIENT:conf=PATH`` (what
  qemu-img, qemu-io and qemu-storage-daemon open); :func:`parse_rbd_path` splits it.
- Snapshot = RBD snapshot ``IMAGE@SNAP``; clone = an RBD clone of a protected snapshot.
  Deleting a snapshot (or its volume) that a clone depends on is refused (InUse) naming the
  clone: flatten or delete the clone first.
- Send stream = librbd's diff between two snapshots (the extents ``rbd export-diff``
  writes), framed with a running CRC32 so that a truncated or corrupt stream is refused
  before it changes anything that stays. Each snapshot carries an identity (image metadata
  ``strata.snapid.<snap>``) that a received copy keeps: an incremental stream applies on
  any target holding a snapshot with its parent's identity, whatever its name.
"""

from __future__ import annotations

import json
import struct
import time
import uuid
import zlib
from typing import Iterable, Iterator, Optional

from ..driver import SnapshotInfo, VolumeInfo, validate_bytes, validate_kind, validate_name
from ..errors import AlreadyExists, InUse, InvalidArgument, NotFound, Unreachable

MAGIC = b"STRATA-RBD-DIFF1\n"
CHUNK = 4 << 20
SNAPID_KEY = "strata.snapid."
_REC = struct.Struct("<cQQ")
_CRC = struct.Struct("<I")


def parse_rbd_path(path: str) -> dict:
    """``rbd:POOL/IMAGE[@SNAP]:id=C:conf=P[:keyring=K]`` -> {pool, image, snap, id, conf, keyring}."""
    path = str(path)
    if not path.startswith("rbd:"):
        raise InvalidArgument(f"{path!r} is not an rbd path")
    spec, *opts = path[4:].split(":")
    pool, _, image = spec.partition("/")
    image, _, snap = image.partition("@")
    out = {"pool": pool, "image": image, "snap": snap or None, "id": "admin", "conf": None,
           "keyring": None}
    for opt in opts:
        key, _, value = opt.partition("=")
        out[key] = value
    return out


def _connect(spec: dict):
    """A connected librados handle for the cluster and client of a parsed ``rbd:`` path."""
    import rados     # optional: installations without Ceph never load it

    conf = {"keyring": spec["keyring"]} if spec["keyring"] else {}
    cluster = rados.Rados(conffile=spec["conf"], name=f"client.{spec['id']}", conf=conf)
    try:
        cluster.connect(timeout=10)
    except (rados.Error, OSError) as exc:
        raise Unreachable(f"the Ceph cluster of {spec['conf']} does not answer: {exc}") from exc
    return cluster


def image_watchers(path: str) -> list:
    """The client addresses (``IP:PORT/NONCE``) watching the RBD image an ``rbd:`` path
    names: every librbd client that has it open (each nvmf_tgt serving it, qemu, rbd-nbd)."""
    import rados     # optional: installations without Ceph never load it
    import rbd

    spec = parse_rbd_path(path)
    cluster = _connect(spec)
    try:
        with cluster.open_ioctx(spec["pool"]) as ioctx, \
                rbd.Image(ioctx, spec["image"], read_only=True) as img:
            return sorted(w["addr"] for w in img.watchers_list())
    except (rados.ObjectNotFound, rbd.ImageNotFound):
        raise NotFound(f"RBD image {spec['pool']}/{spec['image']} does not exist") from None
    finally:
        cluster.shutdown()


def blocklist(path: str, addresses: list, expire: Optional[float] = None) -> list:
    """Fence Ceph clients: ``ceph osd blocklist add`` of each address (``IP:PORT/NONCE``, one
    client instance) on the cluster of an ``rbd:`` path, for ``expire`` seconds (Ceph's
    default, an hour, when None). The OSDs then refuse that client's I/O and drop its watches,
    so another client breaks its exclusive lock at once instead of waiting for the watch to
    time out. Only for a client whose process is known dead: a live one is cut off its
    images. Returns the addresses blocklisted."""
    spec = parse_rbd_path(path)
    cluster = _connect(spec)
    done = []
    try:
        for address in addresses:
            cmd = {"prefix": "osd blocklist", "blocklistop": "add", "addr": address}
            if expire is not None:
                cmd["expire"] = float(expire)
            ret, _, err = cluster.mon_command(json.dumps(cmd), b"", timeout=30)
            if ret != 0:
                raise InvalidArgument(f"ceph osd blocklist add {address}: {err or ret}")
            done.append(address)
    finally:
        cluster.shutdown()
    return done


def image_size(path: str) -> int:
    """Size in bytes of the RBD image an ``rbd:`` path names (opens its cluster briefly)."""
    import rados     # optional: installations without Ceph never load it
    import rbd

    spec = parse_rbd_path(path)
    cluster = _connect(spec)
    try:
        with cluster.open_ioctx(spec["pool"]) as ioctx, \
                rbd.Image(ioctx, spec["image"], snapshot=spec["snap"], read_only=True) as img:
            return img.size()
    except (rados.ObjectNotFound, rbd.ImageNotFound):
        raise NotFound(f"RBD image {spec['pool']}/{spec['image']} does not exist") from None
    finally:
        cluster.shutdown()


class CephRbdMixin:
    """Volume, snapshot, clone and stream methods of :class:`dataplane.ceph.driver.CephDriver`."""

    FEATURES = None     # set on first use (needs the rbd module)

    # -- helpers -----------------------------------------------------------------------
    def _rbd(self):
        import rbd     # optional: installations without Ceph never load it
        return rbd

    def _features(self):
        rbd = self._rbd()
        return (rbd.RBD_FEATURE_LAYERING | rbd.RBD_FEATURE_EXCLUSIVE_LOCK
                | rbd.RBD_FEATURE_OBJECT_MAP | rbd.RBD_FEATURE_FAST_DIFF
                | rbd.RBD_FEATURE_DEEP_FLATTEN)

    def _path(self, rec, image, snap=None) -> str:
        path = f"rbd:{rec['rados_pool']}/{image}{'@' + snap if snap else ''}" \
               f":id={rec['client']}:conf={rec['ceph_conf']}"
        return path + (f":keyring={rec['keyring']}" if rec.get("keyring") else "")

    def _image(self, ioctx, pool, name, snapshot=None, read_only=False):
        rbd = self._rbd()
        try:
            return rbd.Image(ioctx, name, snapshot=snapshot, read_only=read_only)
        except rbd.ImageNotFound:
            if snapshot:
                raise NotFound(f"snapshot {snapshot!r} of volume {name!r} does not exist in "
                               f"pool {pool!r}") from None
            raise NotFound(f"volume {name!r} does not exist in pool {pool!r}") from None

    def _snaps(self, image) -> list:
        """The image's snapshots, oldest first (dicts of librbd: id, name, size)."""
        return sorted(image.list_snaps(), key=lambda s: s["id"])

    def _snap_id(self, image, snap) -> str:
        try:
            return image.metadata_get(SNAPID_KEY + snap["name"])
        except KeyError:
            return f"ceph:{image.id()}:{snap['id']}"

    def _snapshot_info(self, rec, pool, image, name, snap) -> SnapshotInfo:
        try:
            created = image.get_snap_timestamp(snap["id"]).timestamp()
        except Exception:
            created = 0.0
        return SnapshotInfo(pool=pool, kind="volume", source=name, name=snap["name"],
                            path=self._path(rec, name, snap["name"]), created=created)

    def _find_snap(self, image, pool, name, snapshot):
        for snap in self._snaps(image):
            if snap["name"] == snapshot:
                return snap
        raise NotFound(f"snapshot {snapshot!r} of volume {name!r} does not exist in pool "
                       f"{pool!r}")

    def _used(self, image, snapshot=None) -> int:
        total = 0

        def count(offset, length, exists):
            nonlocal total
            if exists:
                total += length
        image.diff_iterate(0, image.size(), None, count, include_parent=False,
                           whole_object=True)
        return total

    def _dependents(self, image, snap_name) -> list:
        image.set_snap(snap_name)
        try:
            return [c["image"] for c in image.list_children2()]
        finally:
            image.set_snap(None)

    # -- file-system snapshots: none here (CephFS is another module) ---------------------
    def _no_filesystem(self, pool, name):
        validate_name(name, "file system name")
        self._load(pool)
        raise NotFound(f"file system {name!r} does not exist in pool {pool!r}")

    # -- volumes -----------------------------------------------------------------------
    def create_volume(self, pool, name, size_bytes) -> VolumeInfo:
        """A thin RBD image of ``size_bytes``."""
        rec = self._load(pool)
        validate_name(name, "volume name")
        validate_bytes(size_bytes, "volume size")
        rbd = self._rbd()
        with self._ioctx(rec) as ioctx:
            try:
                rbd.RBD().create(ioctx, name, size_bytes, old_format=False,
                                 features=self._features(), data_pool=rec.get("data_pool"))
            except rbd.ImageExists:
                raise AlreadyExists(f"volume {name!r} already exists in pool {pool!r}") from None
        return self.volume_info(pool, name)

    def resize_volume(self, pool, name, size_bytes) -> VolumeInfo:
        """Grow the image; shrinking is refused."""
        rec = self._load(pool)
        validate_name(name, "volume name")
        validate_bytes(size_bytes, "volume size")
        with self._ioctx(rec) as ioctx, self._image(ioctx, pool, name) as image:
            current = image.size()
            if size_bytes < current:
                raise InvalidArgument(f"volume {name!r} is {current} bytes: shrinking to "
                                      f"{size_bytes} would destroy data and is refused")
            if size_bytes > current:
                image.resize(size_bytes)
        return self.volume_info(pool, name)

    def volume_info(self, pool, name) -> VolumeInfo:
        """The image's rbd path, size and allocated bytes (object granularity)."""
        rec = self._load(pool)
        validate_name(name, "volume name")
        with self._ioctx(rec) as ioctx, self._image(ioctx, pool, name, read_only=True) as img:
            return VolumeInfo(pool=pool, name=name, path=self._path(rec, name),
                              size_bytes=img.size(), used_bytes=self._used(img))

    def list_volumes(self, pool) -> list:
        """Names of the pool's images (staging images excluded)."""
        rec = self._load(pool)
        with self._ioctx(rec) as ioctx:
            return sorted(n for n in self._rbd().RBD().list(ioctx) if not n.startswith("."))

    def delete_volume(self, pool, name) -> None:
        """Delete the image and its snapshots; refused while a clone depends on one."""
        rec = self._load(pool)
        validate_name(name, "volume name")
        rbd = self._rbd()
        with self._ioctx(rec) as ioctx:
            with self._image(ioctx, pool, name) as image:
                for snap in self._snaps(image):
                    children = self._dependents(image, snap["name"])
                    if children:
                        raise InUse(f"volume {name!r} cannot be deleted: clone(s) "
                                    f"{', '.join(children)} depend on its snapshot "
                                    f"{snap['name']!r}; delete them first")
                for snap in self._snaps(image):
                    if image.is_protected_snap(snap["name"]):
                        image.unprotect_snap(snap["name"])
                    image.remove_snap(snap["name"])
            try:
                rbd.RBD().remove(ioctx, name)
            except rbd.ImageBusy:
                raise InUse(f"volume {name!r} is open (exported or attached): remove its "
                            "exports first") from None

    # -- snapshots ---------------------------------------------------------------------
    def create_snapshot(self, pool, kind, source, name) -> SnapshotInfo:
        """An RBD snapshot (instant, read-only) with a fresh identity."""
        if validate_kind(kind) == "filesystem":
            return self.fs_create_snapshot(pool, source, name)
        rec = self._load(pool)
        validate_name(name, "snapshot name")
        with self._ioctx(rec) as ioctx, self._image(ioctx, pool, source) as image:
            return self._snapshot_with_id(rec, pool, image, source, name, str(uuid.uuid4()))

    def _snapshot_with_id(self, rec, pool, image, source, name, snap_id) -> SnapshotInfo:
        rbd = self._rbd()
        try:
            image.create_snap(name)
        except rbd.ImageExists:
            raise AlreadyExists(f"snapshot {name!r} of volume {source!r} already exists") from None
        image.metadata_set(SNAPID_KEY + name, snap_id)
        return self._snapshot_info(rec, pool, image, source,
                                   self._find_snap(image, pool, source, name))

    def delete_snapshot(self, pool, kind, source, name) -> None:
        """Remove a snapshot; refused (InUse) while a clone depends on it."""
        if validate_kind(kind) == "filesystem":
            return self.fs_delete_snapshot(pool, source, name)
        rec = self._load(pool)
        validate_name(name, "snapshot name")
        with self._ioctx(rec) as ioctx, self._image(ioctx, pool, source) as image:
            self._find_snap(image, pool, source, name)
            children = self._dependents(image, name)
            if children:
                raise InUse(f"snapshot {name!r} of volume {source!r} has clone(s) "
                            f"{', '.join(children)} that depend on it; delete them first")
            if image.is_protected_snap(name):
                image.unprotect_snap(name)
            image.remove_snap(name)
            try:
                image.metadata_remove(SNAPID_KEY + name)
            except KeyError:
                pass

    def list_snapshots(self, pool, kind, source) -> list:
        """The volume's snapshots, oldest first."""
        if validate_kind(kind) == "filesystem":
            return self.fs_list_snapshots(pool, source)
        rec = self._load(pool)
        with self._ioctx(rec) as ioctx, self._image(ioctx, pool, source, read_only=True) as img:
            return [self._snapshot_info(rec, pool, img, source, s) for s in self._snaps(img)]

    def clone_snapshot(self, pool, kind, source, snapshot, new_name) -> VolumeInfo:
        """A writable RBD clone of the (then protected) snapshot."""
        if validate_kind(kind) == "filesystem":
            return self.fs_clone_snapshot(pool, source, snapshot, new_name)
        rec = self._load(pool)
        validate_name(new_name, "volume name")
        rbd = self._rbd()
        with self._ioctx(rec) as ioctx:
            with self._image(ioctx, pool, source) as image:
                self._find_snap(image, pool, source, snapshot)
                if not image.is_protected_snap(snapshot):
                    image.protect_snap(snapshot)
            try:
                rbd.RBD().clone(ioctx, source, snapshot, ioctx, new_name,
                                features=self._features(), data_pool=rec.get("data_pool"))
            except rbd.ImageExists:
                raise AlreadyExists(f"volume {new_name!r} already exists in pool "
                                    f"{pool!r}") from None
        return self.volume_info(pool, new_name)

    def rollback(self, pool, kind, name, snapshot) -> VolumeInfo:
        """Roll the image back to its snapshot in place (same image, snapshots kept)."""
        if validate_kind(kind) == "filesystem":
            return self.fs_rollback(pool, name, snapshot)
        rec = self._load(pool)
        validate_name(snapshot, "snapshot name")
        with self._ioctx(rec) as ioctx, self._image(ioctx, pool, name) as image:
            self._find_snap(image, pool, name, snapshot)
            image.rollback_to_snap(snapshot)
        return self.volume_info(pool, name)

    def changed_since(self, pool, kind, name, snapshot) -> list:
        """``[name]`` when the volume was written since its snapshot, else ``[]``."""
        if validate_kind(kind) == "filesystem":
            return self.fs_changed_since(pool, name, snapshot)
        rec = self._load(pool)
        with self._ioctx(rec) as ioctx, self._image(ioctx, pool, name, read_only=True) as img:
            self._find_snap(img, pool, name, snapshot)
            changed = []
            img.diff_iterate(0, img.size(), snapshot,
                             lambda off, length, exists: changed.append(off) and 0,
                             include_parent=False, whole_object=False)
            return [name] if changed else []

    def copy_snapshot(self, pool, kind, source, snapshot, target, name) -> SnapshotInfo:
        """Snapshot ``name`` of ``target`` with the content and identity of ``source``'s
        snapshot: the target's head is set aside in a temporary snapshot, overwritten with
        the snapshot's content, snapshotted, then rolled back to what it was."""
        if validate_kind(kind) == "filesystem":
            return self.fs_copy_snapshot(pool, source, snapshot, target, name)
        rec = self._load(pool)
        validate_name(name, "snapshot name")
        with self._ioctx(rec) as ioctx:
            with self._image(ioctx, pool, source, snapshot=snapshot, read_only=True) as src, \
                    self._image(ioctx, pool, target) as dst:
                if any(s["name"] == name for s in self._snaps(dst)):
                    raise AlreadyExists(f"snapshot {name!r} of volume {target!r} already "
                                        "exists")
                with self._image(ioctx, pool, source, read_only=True) as src_head:
                    snap_id = self._snap_id(src_head, self._find_snap(src_head, pool, source,
                                                                      snapshot))
                keep = f".copy-{uuid.uuid4().hex[:8]}"
                dst.create_snap(keep)
                try:
                    dst.resize(src.size())
                    dst.write_zeroes(0, dst.size())
                    _copy_extents(src, dst, None)
                    info = self._snapshot_with_id(rec, pool, dst, target, name, snap_id)
                    dst.rollback_to_snap(keep)
                finally:
                    dst.remove_snap(keep)
        return info

    # -- send / receive ----------------------------------------------------------------
    def send_snapshot(self, pool, kind, source, snapshot, parent=None,
                      parent_source=None) -> Iterator[bytes]:
        """A framed diff of ``source@snapshot`` (against ``parent``, a snapshot of ``source``,
        or of ``parent_source`` when ``source`` is a clone of ``parent_source@parent``)."""
        if validate_kind(kind) == "filesystem":
            return self.fs_send_snapshot(pool, source, snapshot, parent, parent_source)
        rec = self._load(pool)
        validate_name(snapshot, "snapshot name")
        with self._ioctx(rec) as ioctx, self._image(ioctx, pool, source,
                                                    read_only=True) as head:
            snap = self._find_snap(head, pool, source, snapshot)
            header = {"size": snap["size"], "snap_id": self._snap_id(head, snap),
                      "parent_id": None}
            from_snap, own_only = None, False
            if parent and parent_source and parent_source != source:
                with self._image(ioctx, pool, parent_source, read_only=True) as p_img:
                    psnap = self._find_snap(p_img, pool, parent_source, parent)
                    header["parent_id"] = self._snap_id(p_img, psnap)
                try:
                    pinfo = head.parent_info()
                except self._rbd().ImageNotFound:
                    pinfo = None
                if not pinfo or pinfo[1:] != (parent_source, parent):
                    raise InvalidArgument(f"volume {source!r} is not a clone of "
                                          f"{parent_source}@{parent}: send it without that "
                                          "parent")
                own_only = True
            elif parent:
                header["parent_id"] = self._snap_id(
                    head, self._find_snap(head, pool, source, parent))
                from_snap = parent
        base = (parent_source, parent) if own_only else (source, from_snap)
        return self._stream(rec, pool, source, snapshot, header, from_snap, own_only,
                            base if parent else None)

    def _stream(self, rec, pool, source, snapshot, header, from_snap, own_only, base):
        """The stream's bytes. An incremental one sends only the blocks that differ from
        ``base`` (image, snapshot): RADOS marks whole objects changed (a rollback rewrites
        them all), the bytes say what really did."""
        with self._ioctx(rec) as ioctx, self._image(ioctx, pool, source, snapshot=snapshot,
                                                    read_only=True) as image, \
                (self._image(ioctx, pool, base[0], snapshot=base[1], read_only=True)
                 if base else _Nothing()) as base_image:
            crc = zlib.crc32(MAGIC)
            head = json.dumps(header).encode()
            first = MAGIC + struct.pack("<I", len(head)) + head
            crc = zlib.crc32(first[len(MAGIC):], crc)
            yield first + _CRC.pack(crc)
            extents = []
            image.diff_iterate(0, header["size"], from_snap,
                               lambda off, length, exists: extents.append((off, length, exists))
                               and 0, include_parent=not own_only and from_snap is None,
                               whole_object=False)
            count = 0
            full = from_snap is None and not own_only
            for off, length, exists in extents:
                for pos in range(off, off + length, CHUNK):
                    n = min(CHUNK, off + length - pos)
                    data = image.read(pos, n) if exists else b""
                    old = None
                    if base_image is not None and pos < base_image.size():
                        old = base_image.read(pos, min(n, base_image.size() - pos))
                    for kind, at, size, body in _runs(pos, n, data, old):
                        if kind == b"z" and full:
                            continue       # a new image reads as zeros already
                        rec_bytes = _REC.pack(kind, at, size) + body
                        crc = zlib.crc32(rec_bytes, crc)
                        count += 1
                        yield rec_bytes + _CRC.pack(crc)
            end = _REC.pack(b"e", count, 0)
            yield end + _CRC.pack(zlib.crc32(end, crc))

    def receive_snapshot(self, pool, kind, target, stream: Iterable[bytes],
                         name) -> SnapshotInfo:
        """Apply a stream as snapshot ``name`` of ``target``. A full stream makes a new
        volume (in a staging image renamed at the end); an incremental one applies on the
        target's snapshot standing for its parent (NotFound if none), and is undone on
        failure by rolling back to that snapshot."""
        if validate_kind(kind) == "filesystem":
            return self.fs_receive_snapshot(pool, target, stream, name)
        rec = self._load(pool)
        validate_name(target, "volume name")
        validate_name(name, "snapshot name")
        rbd = self._rbd()
        reader = _Reader(stream)
        header = reader.header()
        with self._ioctx(rec) as ioctx:
            exists = target in rbd.RBD().list(ioctx)
            if header["parent_id"] is None:
                if exists:
                    raise InvalidArgument(f"volume {target!r} exists: a full stream makes a "
                                          "new volume; send incrementally, or to a new name")
                staging = f".incoming-{uuid.uuid4().hex[:12]}"
                rbd.RBD().create(ioctx, staging, header["size"], old_format=False,
                                 features=self._features(), data_pool=rec.get("data_pool"))
                try:
                    with self._image(ioctx, pool, staging) as image:
                        reader.apply(image)
                        self._snapshot_with_id(rec, pool, image, target, name,
                                               header["snap_id"])
                    rbd.RBD().rename(ioctx, staging, target)
                except BaseException:
                    _remove_image(rbd, ioctx, staging)
                    raise
            else:
                if not exists:
                    raise NotFound(f"volume {target!r} does not exist in pool {pool!r}: the "
                                   "incremental stream needs the snapshot it was based on")
                with self._image(ioctx, pool, target) as image:
                    base = [s for s in self._snaps(image)
                            if self._snap_id(image, s) == header["parent_id"]]
                    if not base:
                        raise NotFound(f"volume {target!r} has no snapshot standing for the "
                                       "stream's parent: send a full stream")
                    if any(s["name"] == name for s in self._snaps(image)):
                        raise AlreadyExists(f"snapshot {name!r} of volume {target!r} already "
                                            "exists")
                    self._apply_on(rec, pool, image, target, base[-1]["name"], reader,
                                   header, name)
        return self._snapshot_info_of(rec, pool, target, name)

    def _apply_on(self, rec, pool, image, target, base, reader, header, name) -> None:
        """Apply an incremental stream on ``base`` and snapshot it as ``name``. A head equal
        to ``base`` (a replica) then holds the new snapshot's content; a head written since
        ``base`` is set aside in a temporary snapshot and put back. A failed stream leaves
        the head as it was."""
        changed = []       # per object, not from the object map: a rollback keeps the map
        image.diff_iterate(0, image.size(), base,
                           lambda off, length, exists: changed.append(off) and 0,
                           include_parent=False, whole_object=False)
        keep = f".recv-{uuid.uuid4().hex[:8]}" if changed else None
        if keep:
            image.create_snap(keep)
            image.rollback_to_snap(base)
        try:
            image.resize(header["size"])
            reader.apply(image)
            self._snapshot_with_id(rec, pool, image, target, name, header["snap_id"])
            if keep:
                image.rollback_to_snap(keep)
        except BaseException:
            image.rollback_to_snap(keep or base)
            raise
        finally:
            if keep:
                image.remove_snap(keep)

    def _snapshot_info_of(self, rec, pool, volume, snap_name) -> SnapshotInfo:
        with self._ioctx(rec) as ioctx, self._image(ioctx, pool, volume, read_only=True) as img:
            return self._snapshot_info(rec, pool, img, volume,
                                       self._find_snap(img, pool, volume, snap_name))


class _Reader:
    """Reads a framed stream from an iterable of chunks, checking the running CRC."""

    def __init__(self, chunks: Iterable[bytes]):
        self.chunks = iter(chunks)
        self.buf = bytearray()
        self.total = 0
        self.crc = 0

    def _take(self, n: int) -> bytes:
        while len(self.buf) < n:
            try:
                chunk = next(self.chunks)
            except StopIteration:
                raise InvalidArgument(f"send stream is truncated after {self.total + len(self.buf)}"
                                      " bytes: nothing was received; send it again") from None
            self.buf += chunk
        out = bytes(self.buf[:n])
        del self.buf[:n]
        self.total += n
        return out

    def _check(self, data: bytes) -> None:
        self.crc = zlib.crc32(data, self.crc)
        (want,) = _CRC.unpack(self._take(4))
        if want != self.crc:
            raise InvalidArgument(f"send stream is corrupt near byte {self.total}: checksum "
                                  "mismatch; nothing was kept")

    def header(self) -> dict:
        magic = self._take(len(MAGIC))
        if magic != MAGIC:
            raise InvalidArgument("not an RBD send stream of Strata's ceph driver (bad magic)")
        self.crc = zlib.crc32(magic)
        raw_len = self._take(4)
        (length,) = struct.unpack("<I", raw_len)
        if length > 65536:
            raise InvalidArgument("send stream is corrupt (header too long)")
        raw = self._take(length)
        self._check(raw_len + raw)
        return json.loads(raw)

    def apply(self, image) -> None:
        """Write every record into ``image``; raise before the end record is seen whole."""
        count = 0
        while True:
            rec = self._take(_REC.size)
            kind, off, length = _REC.unpack(rec)
            if kind == b"e":
                self._check(rec)
                if off != count or self.buf or next(self.chunks, b""):
                    raise InvalidArgument("send stream is corrupt (record count or trailing "
                                          "bytes)")
                return
            if kind not in (b"w", b"z") or length > CHUNK:
                raise InvalidArgument(f"send stream is corrupt near byte {self.total}")
            data = self._take(length) if kind == b"w" else b""
            self._check(rec + data)
            if kind == b"w":
                image.write(data, off)
            else:
                image.write_zeroes(off, length)
            count += 1


BLOCK = 64 << 10
_ZEROS = bytes(BLOCK)


def _runs(pos: int, n: int, data: bytes, old: bytes | None = None):
    """Split an extent into runs of data ('w') and of zeros ('z', no body), leaving out the
    blocks equal to ``old`` (the parent's bytes there); ``data`` empty means the whole
    extent is gone (zeros)."""
    if not data:
        data = bytes(n)
    start, kind = 0, None
    for i in range(0, n, BLOCK):
        block = data[i:i + BLOCK]
        if old is not None and block == old[i:i + BLOCK]:
            k = None
        else:
            k = b"z" if block == _ZEROS[:len(block)] else b"w"
        if k != kind:
            if kind is not None:
                yield kind, pos + start, i - start, data[start:i] if kind == b"w" else b""
            start, kind = i, k
    if kind is not None:
        yield kind, pos + start, n - start, data[start:n] if kind == b"w" else b""


class _Nothing:
    """A context manager standing for no image."""

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _copy_extents(src, dst, from_snap) -> None:
    extents = []
    src.diff_iterate(0, src.size(), from_snap,
                     lambda off, length, exists: extents.append((off, length, exists)) and 0,
                     include_parent=True, whole_object=False)
    for off, length, exists in extents:
        if not exists:
            continue
        for pos in range(off, off + length, CHUNK):
            n = min(CHUNK, off + length - pos)
            dst.write(src.read(pos, n), pos)


def _remove_image(rbd, ioctx, name) -> None:
    for _ in range(3):
        try:
            rbd.RBD().remove(ioctx, name)
            return
        except rbd.ImageNotFound:
            return
        except rbd.ImageBusy:
            time.sleep(0.5)
