"""The capacity tier: lifecycle transitions, RestoreObject, and what GET does with cold objects.

Storage classes (the set this gateway accepts; any other S3 class is ``InvalidStorageClass``):

==============  ======  ==============================================================
STANDARD        hot     every PUT, multipart upload and copy lands here
STANDARD_IA     cold    instant retrieval: GET reads the cold copy (transparent to GET)
ONEZONE_IA      cold    instant retrieval, as STANDARD_IA
GLACIER_IR      cold    instant retrieval, as STANDARD_IA
GLACIER         cold    archive: GET answers 403 ``InvalidObjectState`` until RestoreObject
DEEP_ARCHIVE    cold    archive, as GLACIER
==============  ======  ==============================================================

"Cold" bytes live under the config's ``cold_root`` (a directory on the appliance's capacity
pool), one file per version: ``<cold_root>/buckets/<bucket>/<xx>/<id>``. Without a
``cold_root`` a lifecycle ``Transition`` is refused with ``InvalidStorageClass`` saying so.

A transition (:func:`transition`) copies the version's bytes to a temporary file under
``<cold_root>/tmp/`` (drawing from the appliance I/O budget, class ``migration``, when the
config has ``io_budget_redis`` and a non-zero rate in ``io_budget``), fsyncs it, renames it into place, fsyncs the directory,
then reads it back from disk (page cache dropped) and checks size and MD5 against what was
read from the hot copy and, where the ETag is an MD5 (single PUT) or an MD5 of part MD5s
(multipart), against the ETag itself. Only then does one index op (``retier``: tier, location
and storage class, compare-and-set on the old location) make the cold copy the version's
bytes, and only after that commit are the hot bytes released (a large object's files are
deleted; a segment object's bytes become dead bytes for compaction). A crash before the
commit leaves the object hot and whole, plus an unreferenced cold file that the next
lifecycle pass removes; a crash after it leaves the object cold and whole, plus hot files
that the orphan collector removes.

RestoreObject of an archive-class version copies its cold bytes back to
``buckets/<bucket>/restored/`` in the background, drawing from the I/O budget as a recall
(class ``prewarm``, as checkpoint pre-warms) (202; HEAD shows ``x-amz-restore:
ongoing-request="true"`` meanwhile, and another request gets ``RestoreAlreadyInProgress``),
checks them against the MD5 recorded at transition, and records the copy with its expiry
(``Days`` lifecycle days from completion) in the version's location. GET then reads the
restored copy; a second RestoreObject extends the expiry (200). The lifecycle pass drops
expired copies. A restore interrupted by a crash is simply not there after the restart (the
cold copy is untouched): ask again. Restoring a hot or instant-class object is
``InvalidObjectState``, as in S3.

``STRATA_S3_FAULT`` (tests only) names a point where the gateway process exits at once, as
``kill -9`` would: ``transition-after-copy`` (cold copy durable and verified, index not yet
updated) or ``transition-after-commit`` (index updated, hot bytes not yet released).
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import shutil
import time
import uuid
from email.utils import formatdate

from plumbing.atomic import fsync_dir
from plumbing.iobudget import BudgetConfig, IOBudget
from plumbing.redisurl import redis_from_url

from .errors import S3Error, child_text
from .index import Op, Record
from .sse import physical_ranges, physical_size
from .storage import LargeFileWriter, file_ranges, remove_location

log = logging.getLogger("strata.s3.tiers")

STANDARD = "STANDARD"
INSTANT = ("STANDARD_IA", "ONEZONE_IA", "GLACIER_IR")
ARCHIVE = ("GLACIER", "DEEP_ARCHIVE")
COLD_CLASSES = INSTANT + ARCHIVE
# a transition only ever goes colder: STANDARD_IA -> GLACIER, never back (copy to STANDARD does)
RANK = {STANDARD: 0, "STANDARD_IA": 1, "ONEZONE_IA": 1, "GLACIER_IR": 2, "GLACIER": 3, "DEEP_ARCHIVE": 4}
OTHER_S3_CLASSES = ("REDUCED_REDUNDANCY", "INTELLIGENT_TIERING", "OUTPOSTS", "SNOW", "EXPRESS_ONEZONE")
COPY_BLOCK = 1024 * 1024
RESTORE_ORPHAN_AGE = 600.0  # a restore copies back and commits well within this
FAULT_ENV = "STRATA_S3_FAULT"


def fault_point(name: str) -> None:
    """Exit the process here, unflushed, if the test asked for it (see the module doc)."""
    if os.environ.get(FAULT_ENV) == name:
        os._exit(137)


def storage_class(rec: Record) -> str:
    """The version's S3 storage class."""
    return rec.meta.get("sc") or STANDARD


def check_transition_class(value: str | None, cold_root: str | None, no_tier: str | None = None) -> str:
    """The storage class a lifecycle transition names, or ``InvalidStorageClass`` saying why
    (``no_tier``: why this store has no capacity tier at all)."""
    if value not in COLD_CLASSES:
        raise S3Error("InvalidStorageClass", f"Transitions may name {', '.join(COLD_CLASSES)}; "
                      f"{value!r} is not one of them", StorageClassRequested=str(value))
    if no_tier:
        raise S3Error("InvalidStorageClass", no_tier, StorageClassRequested=value)
    if not cold_root:
        raise S3Error("InvalidStorageClass", "This appliance has no capacity tier for the S3 gateway "
                      "(no cold_root in its config): create a pool with media 'capacity' (or bring it "
                      "online), then put the Transition rule again", StorageClassRequested=value)
    return value


def check_write_class(headers: dict[str, str]) -> None:
    """PUT, copy and multipart uploads write STANDARD only; other classes come by lifecycle."""
    value = headers.get("x-amz-storage-class")
    if value is None or value == STANDARD:
        return
    if value in COLD_CLASSES or value in OTHER_S3_CLASSES:
        raise S3Error("InvalidStorageClass", f"Objects are written to STANDARD (the hot tier); move them "
                      f"to {value} with a lifecycle Transition rule", StorageClassRequested=value)
    raise S3Error("InvalidStorageClass", StorageClassRequested=value)


def valid_restore(rec: Record, now: float | None = None) -> dict | None:
    """The version's restored hot copy, if it has one that has not expired."""
    restored = rec.loc.get("restore")
    if restored and restored["expiry"] > (time.time() if now is None else now):
        return restored
    return None


def read_loc(rec: Record) -> dict:
    """Where to read the version's bytes: a valid restored copy, else its location (any tier)."""
    if rec.tier != "hot":
        restored = valid_restore(rec)
        if restored is not None:
            return restored
    return rec.loc


def part_sizes(loc: dict) -> list[int] | None:
    """Part sizes of a multipart object (kept in ``psizes`` when its parts were joined in cold)."""
    if "parts" in loc:
        return [s for _, s in loc["parts"]]
    return loc.get("psizes")


def check_readable(rec: Record) -> None:
    """GET and copy of an archive-class version need a restored copy (S3's InvalidObjectState)."""
    cls = storage_class(rec)
    if rec.tier != "hot" and cls in ARCHIVE and valid_restore(rec) is None:
        raise S3Error("InvalidObjectState", f"The object is in {cls}: restore it with RestoreObject "
                      "before reading it", StorageClass=cls)


def expiry_date(ts: float) -> str:
    return formatdate(ts, usegmt=True)


class ColdTier:
    """The gateway's tier state: restores in flight (in this process), the I/O budget."""

    def __init__(self, gw):
        self.gw = gw
        self.restoring: dict[tuple[str, str, int], asyncio.Task] = {}
        self._budget = None
        self._budget_key = None
        self._budget_warned = False

    # -- configuration ----------------------------------------------------------------------

    @property
    def root(self) -> str | None:
        """The configured cold data root (None: no capacity tier)."""
        return self.gw.config.get("cold_root") or None

    def usable_root(self) -> str:
        """The cold root, which must exist (the plane creates it on the mounted capacity pool:
        never write into an empty mount point)."""
        root = self.root
        if not root:
            raise S3Error("InvalidStorageClass", "no cold_root configured")
        if not os.path.isdir(root):
            raise S3Error("ServiceUnavailable", f"the capacity tier directory {root} is not available")
        return root

    def budget(self):
        """An IOBudget on the config's ``io_budget_redis`` with the ``io_budget`` rates (None:
        unthrottled, also when every rate is 0 = unlimited)."""
        cfg = self.gw.config.get("io_budget") or {}
        url = self.gw.config.get("io_budget_redis")
        if not url or not (cfg.get("rate") or any((cfg.get("classes") or {}).values())):
            return None
        key = json.dumps([url, cfg], sort_keys=True)
        if key != self._budget_key:
            client = redis_from_url(url, timeout=5.0)
            config = BudgetConfig(rate=int(cfg.get("rate") or 0), burst=int(cfg.get("burst") or 0),
                                  classes={k: int(v) for k, v in (cfg.get("classes") or {}).items()},
                                  foreground_share=float(cfg.get("foreground_share", 0.1)))
            self._budget, self._budget_key = IOBudget(client, config), key
        return self._budget

    def take(self, budget, nbytes: int, job_class: str) -> None:
        """Draw ``nbytes`` of ``job_class`` from ``budget`` (None: unthrottled); blocking, so
        call it from a worker thread."""
        if budget is None:
            return
        try:
            budget.take(nbytes, job_class)
        except Exception as exc:  # noqa: BLE001 - a budget we cannot reach must not stop tiering
            if not self._budget_warned:
                log.warning("I/O budget unavailable (%s); tier copies run unthrottled", exc)
                self._budget_warned = True

    # -- transitions ------------------------------------------------------------------------

    def _source_pieces(self, rec: Record) -> list[tuple[str, int, int]]:
        loc = rec.loc
        if "sse" in rec.meta:  # ciphertext is moved as it is, packages and tags
            return physical_ranges(rec, loc, self.gw.segments.dir)
        if "seg" in loc:
            return [(os.path.join(self.gw.segments.dir, f"{loc['seg']:08d}.seg"), loc["off"], rec.size)]
        return file_ranges(loc, rec.size, 0, rec.size)

    def _copy_verified(self, root: str, bucket_name: str, rec: Record, budget) -> dict:
        """Copy the version's bytes into the cold root durably and verify them; the new location."""
        pieces = self._source_pieces(rec)
        tmp_dir = os.path.join(root, "tmp")
        os.makedirs(tmp_dir, exist_ok=True)
        tmp = os.path.join(tmp_dir, uuid.uuid4().hex)
        md5, piece_md5s, size = hashlib.md5(), [], 0
        try:
            with open(tmp, "wb", buffering=0) as out:
                for path, offset, length in pieces:
                    part_md5 = hashlib.md5()
                    with open(path, "rb", buffering=0) as src:
                        while length > 0:
                            block = os.pread(src.fileno(), min(COPY_BLOCK, length), offset)
                            if not block:
                                raise IOError(f"{path} is shorter than the index says")
                            self.take(budget, len(block), "migration")
                            view = memoryview(block)
                            while view:  # an unbuffered write may take only part of it
                                view = view[out.write(view):]
                            md5.update(block)
                            part_md5.update(block)
                            offset += len(block)
                            length -= len(block)
                            size += len(block)
                    piece_md5s.append(part_md5.digest())
                os.fsync(out.fileno())
            digest = md5.hexdigest()
            if size != physical_size(rec):
                raise IOError(f"read {size} bytes of {rec.key}, the index says {physical_size(rec)}")
            encrypted = "sse" in rec.meta  # the ETag is a digest of the plaintext
            if "-" not in rec.etag and digest != rec.etag and not encrypted:
                raise IOError(f"the hot copy of {rec.key} does not match its ETag")
            if "parts" in rec.loc and rec.etag.endswith(f"-{len(piece_md5s)}") and not encrypted:
                composite = hashlib.md5(b"".join(piece_md5s)).hexdigest() + f"-{len(piece_md5s)}"
                if composite != rec.etag:
                    raise IOError(f"the hot parts of {rec.key} do not match its ETag")
            name = uuid.uuid4().hex
            final_dir = os.path.join(root, "buckets", bucket_name, name[:2])
            os.makedirs(final_dir, exist_ok=True)
            final = os.path.join(final_dir, name)
            os.replace(tmp, final)
            fsync_dir(final_dir)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
        try:
            if file_md5(final, drop_cache=True) != digest:
                raise IOError(f"the cold copy of {rec.key} at {final} does not read back as written")
        except BaseException:
            os.unlink(final)
            raise
        loc = {"file": final, "md5": digest}
        sizes = part_sizes(rec.loc)
        if sizes is not None:
            loc["psizes"] = sizes
        return loc

    async def transition(self, bucket, rec: Record, cls: str) -> str:
        """Move one version to ``cls`` (see the module doc); 'moved', 'reclassed' or 'raced'."""
        gw = self.gw
        if rec.tier != "hot":
            # already cold: only the class changes (bytes and any restored copy stay)
            res = await gw.commit(bucket, Op("retier", key=rec.key, seq=rec.seq, old_loc=rec.loc,
                                             new_loc=rec.loc, tier="cold", storage_class=cls))
            return "reclassed" if res.found else "raced"
        root = self.usable_root()
        new_loc = await gw.run(self._copy_verified, root, bucket.name, rec, self.budget())
        fault_point("transition-after-copy")
        res = await gw.commit(bucket, Op("retier", key=rec.key, seq=rec.seq, old_loc=rec.loc,
                                         new_loc=new_loc, tier="cold", storage_class=cls))
        if not res.found:
            # overwritten, deleted or compacted meanwhile: this cold copy is nobody's
            await gw.run(remove_location, new_loc)
            return "raced"
        fault_point("transition-after-commit")
        if "seg" not in rec.loc:
            await gw.run(remove_location, rec.loc)
        return "moved"

    def collect_cold_orphans(self, buckets) -> dict:
        """Remove cold files no index entry refers to (a crash between copy and commit) and
        partial copies in ``tmp/``. Call only with :attr:`.core.Gateway.lifecycle_lock` held: transitions happen
        only under it, so no copy is in flight. Restored copies nothing refers to (a crash
        between copy-back and commit) go too, once older than ``RESTORE_ORPHAN_AGE``."""
        stats = {"cold_orphans_removed": 0}
        cutoff = time.time() - RESTORE_ORPHAN_AGE
        for bucket in buckets:
            restored_dir = os.path.join(bucket.dir, "restored")
            if not os.path.isdir(restored_dir):
                continue
            held = {rec.loc["restore"]["file"] for rec in bucket.index.cold_versions() if "restore" in rec.loc}
            for sub in os.scandir(restored_dir):
                for f in os.scandir(sub.path):
                    if f.path not in held and f.stat().st_mtime < cutoff:
                        os.unlink(f.path)
                        stats["cold_orphans_removed"] += 1
        root = self.root
        if not root or not os.path.isdir(root):
            return stats
        shutil.rmtree(os.path.join(root, "tmp"), ignore_errors=True)
        base = os.path.join(root, "buckets")
        if not os.path.isdir(base):
            return stats
        referenced = set()
        for bucket in buckets:
            for rec in bucket.index.cold_versions():
                referenced.add(rec.loc.get("file"))
        for name in os.listdir(base):
            for sub in os.scandir(os.path.join(base, name)):
                for f in os.scandir(sub.path):
                    if f.path not in referenced:
                        os.unlink(f.path)
                        stats["cold_orphans_removed"] += 1
        return stats

    # -- restores ---------------------------------------------------------------------------

    def restore_header(self, bucket, rec: Record) -> str | None:
        """The ``x-amz-restore`` value of an archive-class version, if a restore was asked."""
        if (bucket.name, rec.key, rec.seq) in self.restoring:
            return 'ongoing-request="true"'
        restored = valid_restore(rec)
        if restored is not None:
            return f'ongoing-request="false", expiry-date="{expiry_date(restored["expiry"])}"'
        return None

    async def restore(self, bucket, rec: Record, days: int) -> int:
        """Start (202) or extend (200) the restore of an archive-class version."""
        cls = storage_class(rec)
        if rec.tier == "hot" or cls not in ARCHIVE:
            raise S3Error("InvalidObjectState", "Restore is not allowed for the object's current storage class "
                          f"({cls}: it reads without one)", StorageClass=cls)
        ident = (bucket.name, rec.key, rec.seq)
        if ident in self.restoring:
            raise S3Error("RestoreAlreadyInProgress")
        day = float(self.gw.config.get("lifecycle_day_seconds") or 86400)
        restored = valid_restore(rec)
        if restored is not None:
            new_loc = dict(rec.loc, restore=dict(restored, expiry=max(restored["expiry"], time.time() + days * day)))
            res = await self.gw.commit(bucket, Op("relocate", key=rec.key, seq=rec.seq, old_loc=rec.loc,
                                                  new_loc=new_loc))
            if not res.found:
                raise S3Error("InternalError", "The object changed during the request; try again")
            return 200
        task = asyncio.get_running_loop().create_task(self._restore(bucket, rec, days * day))
        self.restoring[ident] = task
        task.add_done_callback(lambda _t: self.restoring.pop(ident, None))
        return 202

    def _copy_back(self, bucket, rec: Record, budget) -> str:
        writer = LargeFileWriter(self.gw.root, os.path.join(bucket.dir, "restored"))
        md5 = hashlib.md5()
        try:
            with open(rec.loc["file"], "rb", buffering=0) as src:
                while True:
                    block = src.read(COPY_BLOCK)
                    if not block:
                        break
                    self.take(budget, len(block), "prewarm")
                    md5.update(block)
                    writer.write(block)
            if writer.size != physical_size(rec) or md5.hexdigest() != rec.loc.get("md5", md5.hexdigest()):
                raise IOError(f"the cold copy of {rec.key} at {rec.loc['file']} does not match its checksum")
            return writer.finish()
        except BaseException:
            writer.abort()
            raise

    async def _restore(self, bucket, rec: Record, seconds: float) -> None:
        gw = self.gw
        try:
            path = await gw.run(self._copy_back, bucket, rec, self.budget())
            new_loc = dict(rec.loc, restore={"file": path, "expiry": time.time() + seconds})
            res = await gw.commit(bucket, Op("relocate", key=rec.key, seq=rec.seq, old_loc=rec.loc,
                                             new_loc=new_loc))
            if not res.found:
                await gw.run(remove_location, {"file": path})
            elif "restore" in rec.loc:  # an expired copy this one replaces
                await gw.run(remove_location, rec.loc["restore"])
        except Exception:  # noqa: BLE001 - the client sees no restore on HEAD and may ask again
            log.exception("restore of %s/%s failed", bucket.name, rec.key)

    async def expire_restores(self, bucket, now: float) -> int:
        """Drop restored copies whose expiry has passed; returns how many."""
        count = 0
        for rec in await self.gw.run(bucket.index.cold_versions):
            restored = rec.loc.get("restore")
            if not restored or restored["expiry"] > now:
                continue
            new_loc = {k: v for k, v in rec.loc.items() if k != "restore"}
            res = await self.gw.commit(bucket, Op("relocate", key=rec.key, seq=rec.seq, old_loc=rec.loc,
                                                  new_loc=new_loc))
            if res.found:
                await self.gw.run(remove_location, restored)
                count += 1
        return count


def file_md5(path: str, drop_cache: bool = False) -> str:
    """MD5 of a whole file; ``drop_cache`` reads it from the device rather than the page cache."""
    md5 = hashlib.md5()
    with open(path, "rb", buffering=0) as fh:
        if drop_cache and hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        while True:
            block = fh.read(COPY_BLOCK)
            if not block:
                return md5.hexdigest()
            md5.update(block)


def parse_restore_days(root) -> int:
    """``Days`` of a RestoreRequest (1 when absent, as a simple default)."""
    raw = child_text(root, "Days")
    if raw is None:
        return 1
    try:
        days = int(raw)
    except ValueError:
        raise S3Error("MalformedXML", "RestoreRequest Days must be an integer") from None
    if days < 1:
        raise S3Error("InvalidArgument", "RestoreRequest Days must be at least 1", ArgumentName="Days")
    return days

