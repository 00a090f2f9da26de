"""All logic of the vector service: rows, file systems on pools, and the engine.

The process that calls these functions serves the collections (see `vector.registry`): in
`strata up` that is the web server. Index builds run in a thread of that process (the engine
keeps searching and writing on the old index meanwhile); a Celery job started through
`plane.jobs` watches the build's `IndexBuild` row, mirrors its progress onto the Job and
passes cancellation back (see `vector.tasks`).
"""
import logging
import os
import shutil
import threading
import time
from datetime import timedelta

from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.utils import timezone

from plumbing.errors import Conflict
from plane.jobs import start_job
from plane.models import Job
from services.storage import service as storage
from services.storage.drivers import driver_for
from services.storage.models import FileSystem
from vector.engine import (
    BuildCancelled,
    BuildInProgress,
    CollectionExists,
    CollectionSpec,
    DimensionMismatch,
    InvalidInput,
    VectorError,
    VectorNotFound,
)
from vector import tasks
from vector.models import IndexBuild, VectorCollection, VectorSnapshot
from vector.registry import registry

log = logging.getLogger(__name__)

FS_PREFIX = "vector-"
KEEPER = "vector"   # FileSystem.kept_by of a collection's file system
FIGURES_INTERVAL = 1.0          # seconds between row updates of count and memory
_figures_at: dict[int, float] = {}


def get_registry():
    """The process-wide registry, its memory budget taken from `strata up --vector-memory`."""
    if registry._budget is None:
        limit = settings.SERVICE_OPTIONS.get("vector_memory_bytes")
        if limit:
            registry._budget_bytes = int(limit)
    return registry


def engine(row: VectorCollection):
    """The open engine collection of ``row`` (opened on first use in this process)."""
    return get_registry().get(row.data_path)


def record_figures(row: VectorCollection, coll=None, force: bool = False) -> None:
    """Write the collection's count, memory and index state on its row (throttled)."""
    now = time.monotonic()
    if not force and now - _figures_at.get(row.pk, 0.0) < FIGURES_INTERVAL:
        return
    _figures_at[row.pk] = now
    coll = coll or engine(row)
    row.vector_count, row.memory_bytes = len(coll), coll.memory_bytes()
    row.index_state = coll.index_state
    VectorCollection.objects.filter(pk=row.pk).update(
        vector_count=row.vector_count, memory_bytes=row.memory_bytes,
        index_state=row.index_state, updated_at=timezone.now())


# -- collections ---------------------------------------------------------------------------

def _new_filesystem(name, pool):
    fs_name = FS_PREFIX + name
    if VectorCollection.objects.filter(name=name).exists():
        raise CollectionExists(f"vector collection {name!r} already exists")
    if FileSystem.objects.filter(name=fs_name).exists():
        raise Conflict(f"File system {fs_name} (where collection {name} would live) already "
                       "exists; delete it or choose another collection name.")
    # kept by the vector service: no quota, owner or mode changes, no exports, and no
    # delete while the collection is there (409 kept_by_service)
    return storage.create_filesystem(name=fs_name, pool=pool, kept_by=KEEPER)


def _drop_filesystem(fs) -> None:
    try:
        driver_for(fs.pool.driver).delete_filesystem(fs.pool.name, fs.name)
    except Exception:
        log.exception("could not remove file system %s after a failed create", fs.name)


def create_collection(*, name, dimension, metric="l2", index_type="flat", params=None,
                      pool, expected_count=0) -> VectorCollection:
    """Create a collection on ``pool``: a file system for it, the engine's files, the row.

    The definition and the memory estimate for ``expected_count`` vectors are checked before
    anything is created; a failure later removes what was made.
    """
    spec = CollectionSpec.make(name, dimension, metric, index_type, params or {})
    with transaction.atomic():
        fs = _new_filesystem(name, pool)
        try:
            row = VectorCollection.objects.create(
                name=name, dimension=dimension, metric=spec.metric, index_type=spec.index_type,
                params=params or {}, pool=pool, filesystem=fs)
            os.makedirs(row.snapshots_path, exist_ok=True)
            coll = get_registry().create(row.data_path, name, dimension, spec.metric,
                                         spec.index_type, params or {}, expected_count)
        except BaseException:
            get_registry().close(f"{fs.path}/data", checkpoint=False)
            _drop_filesystem(fs)
            raise
    record_figures(row, coll, force=True)
    return row


def delete_collection(row: VectorCollection) -> None:
    """Close the collection here, then delete its row, snapshots and file system."""
    coll = get_registry().peek(row.data_path)
    if coll is not None and coll.stats()["building"]:
        raise Conflict(f"An index build is running on collection {row.name}; cancel its job "
                       "or wait for it before deleting the collection.")
    get_registry().close(row.data_path, checkpoint=False)
    fs = row.filesystem
    with transaction.atomic():
        row.delete()
        storage.delete_filesystem(fs)
    _figures_at.pop(row.pk, None)


def stats(row: VectorCollection) -> dict:
    """The engine's report on the collection (opening it here if needed)."""
    coll = engine(row)
    record_figures(row, coll, force=True)
    return coll.stats()


def refresh_if_open(row: VectorCollection) -> None:
    """Record fresh figures for a collection this process serves (lists stay cheap)."""
    coll = get_registry().peek(row.data_path)
    if coll is not None:
        record_figures(row, coll, force=True)


# -- vectors -------------------------------------------------------------------------------

def decode_b64(text, dimension: int, what: str = "vectors_b64"):
    """Rows of little-endian float32 sent as base64 (compact bulk form) as an (n, d) array."""
    import base64
    import binascii

    import numpy as np

    if not isinstance(text, str) or not text:
        raise InvalidInput(f"{what} must be a non-empty base64 string of float32 values")
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInput(f"{what} is not valid base64") from None
    if len(raw) % (4 * dimension):
        raise DimensionMismatch(
            f"{what} holds {len(raw) // 4} float32 values, not a whole number of vectors of "
            f"the collection's dimension {dimension}")
    return np.frombuffer(raw, dtype="<f4").reshape(-1, dimension)


def upsert(row, items) -> int:
    """Insert or replace a batch; returns once the batch is in the WAL on disk (fsync)."""
    coll = engine(row)
    count = coll.upsert(items)
    record_figures(row, coll)
    return count


def upsert_arrays(row, body) -> int:
    """The compact form: {ids: [...], vectors_b64: "...", metadata: [...]?}."""
    if not isinstance(body.get("ids"), list):
        raise InvalidInput("ids must be a list of vector ids (one per row of vectors_b64)")
    extra = set(body) - {"ids", "vectors_b64", "metadata"}
    if extra:
        raise InvalidInput(f"unknown field(s) {', '.join(sorted(extra))} next to vectors_b64")
    coll = engine(row)
    count = coll.upsert_arrays(body["ids"], decode_b64(body["vectors_b64"], row.dimension),
                               body.get("metadata"))
    record_figures(row, coll)
    return count


def _id_candidates(vid: str) -> list:
    """A URL id is the string id, or else the integer id it spells ("12" -> "12", 12)."""
    out = [vid]
    try:
        out.append(int(vid))
    except ValueError:
        pass
    return out


def get_vector(row, vid: str) -> dict:
    """The vector ``vid`` (a string id, or an integer id written in the URL)."""
    coll = engine(row)
    for candidate in _id_candidates(vid):
        try:
            return coll.get(candidate)
        except VectorNotFound:
            continue
    raise VectorNotFound(f"no vector with id {vid!r} in collection {row.name!r}")


def delete_vectors(row, ids) -> int:
    """Delete by ids (unknown ids are ignored); returns once the delete is in the WAL."""
    if not isinstance(ids, list):
        raise InvalidInput("ids must be a list of vector ids")
    coll = engine(row)
    count = coll.delete(ids)
    record_figures(row, coll)
    return count


def delete_vector(row, vid: str) -> int:
    """Delete one vector named in a URL; raises VectorNotFound if there is none."""
    coll = engine(row)
    for candidate in _id_candidates(vid):
        if coll.delete([candidate]):
            record_figures(row, coll)
            return 1
    raise VectorNotFound(f"no vector with id {vid!r} in collection {row.name!r}")


SEARCH_FIELDS = {"vector", "vectors", "vectors_b64", "k", "filter", "nprobe", "ef_search",
                 "efSearch", "include_metadata"}


def search(row, body) -> dict:
    """Run a search request body; `vector` answers {results: [...]}, `vectors` a list of lists."""
    if not isinstance(body, dict):
        raise InvalidInput("the search body must be a JSON object")
    extra = set(body) - SEARCH_FIELDS
    if extra:
        raise InvalidInput(f"unknown search field(s): {', '.join(sorted(extra))}; "
                           f"expected {', '.join(sorted(SEARCH_FIELDS))}")
    given = [f for f in ("vector", "vectors", "vectors_b64") if f in body]
    if len(given) != 1:
        raise InvalidInput("give one of 'vector' (one query), 'vectors' (a batch) or "
                           "'vectors_b64' (a batch of base64 float32 rows)")
    ef = body.get("ef_search", body.get("efSearch"))
    kwargs = {"k": body.get("k", 10), "filter": body.get("filter"),
              "nprobe": body.get("nprobe"), "ef_search": ef,
              "include_metadata": bool(body.get("include_metadata", True))}
    coll = engine(row)
    if "vector" in body:
        return {"results": coll.search(body["vector"], **kwargs)}
    if "vectors_b64" in body:
        queries = decode_b64(body["vectors_b64"], row.dimension)
        return {"results": coll.search_batch(queries, **kwargs)}
    queries = body["vectors"]
    if not isinstance(queries, list) or not queries:
        raise InvalidInput("'vectors' must be a non-empty list of query vectors")
    if not all(isinstance(q, list) for q in queries):
        raise InvalidInput("'vectors' must be a list of lists of numbers")
    return {"results": coll.search_batch(queries, **kwargs)}


# -- snapshots -----------------------------------------------------------------------------

def create_snapshot(row, name) -> VectorSnapshot:
    """A consistent copy of the collection (checkpoint + sealed WAL) on its file system."""
    if VectorSnapshot.objects.filter(collection=row, name=name).exists():
        raise CollectionExists(f"collection {row.name} already has a snapshot named {name!r}")
    coll = engine(row)
    path = os.path.join(row.snapshots_path, name)
    os.makedirs(row.snapshots_path, exist_ok=True)
    count = len(coll)
    coll.snapshot(path)
    try:
        return VectorSnapshot.objects.create(collection=row, name=name, path=path,
                                             vector_count=count)
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise


def delete_snapshot(snap: VectorSnapshot) -> None:
    with transaction.atomic():
        snap.delete()
        shutil.rmtree(snap.path, ignore_errors=True)


def restore_snapshot(snap: VectorSnapshot, *, name, pool=None) -> VectorCollection:
    """A new collection ``name`` (on ``pool``, default the source's) from a snapshot."""
    src = snap.collection
    pool = pool or src.pool
    CollectionSpec.make(name, src.dimension, src.metric, src.index_type, src.params)
    with transaction.atomic():
        fs = _new_filesystem(name, pool)
        try:
            row = VectorCollection.objects.create(
                name=name, dimension=src.dimension, metric=src.metric,
                index_type=src.index_type, params=src.params, pool=pool, filesystem=fs)
            os.makedirs(row.snapshots_path, exist_ok=True)
            coll = get_registry().restore(snap.path, row.data_path, name)
        except BaseException:
            get_registry().close(f"{fs.path}/data", checkpoint=False)
            _drop_filesystem(fs)
            raise
    record_figures(row, coll, force=True)
    return row


def import_collection(*, name, path, pool) -> VectorCollection:
    """A new collection ``name`` on ``pool`` copied from an engine snapshot directory on this
    machine (``Collection.snapshot`` output, or a closed collection's directory)."""
    import json

    spec_file = os.path.join(path, "collection.json")
    if not os.path.isabs(path) or not os.path.isfile(spec_file):
        raise InvalidInput(f"{path} is not a vector collection snapshot on the server (it needs"
                           " an absolute path to a directory holding collection.json)")
    with open(spec_file) as f:
        src = CollectionSpec.from_json(json.load(f))
    params = {k: v for k, v in src.params.items() if v is not None}
    CollectionSpec.make(name, src.dimension, src.metric, src.index_type, params)
    with transaction.atomic():
        fs = _new_filesystem(name, pool)
        try:
            row = VectorCollection.objects.create(
                name=name, dimension=src.dimension, metric=src.metric,
                index_type=src.index_type, params=params, pool=pool, filesystem=fs)
            os.makedirs(row.snapshots_path, exist_ok=True)
            coll = get_registry().restore(path, row.data_path, name)
        except BaseException:
            get_registry().close(f"{fs.path}/data", checkpoint=False)
            _drop_filesystem(fs)
            raise
    record_figures(row, coll, force=True)
    return row


# -- index builds --------------------------------------------------------------------------

def start_build(row, *, user=None, kind="build"):
    """Start training/rebuilding the index in this process; returns the watching Job."""
    coll = engine(row)
    if coll.stats()["building"]:
        raise BuildInProgress(f"an index build is already running on {row.name!r}")
    with transaction.atomic():
        # Unfinished rows left by a web server that stopped mid-build: no build runs now.
        stale = timezone.now() - timedelta(seconds=60)
        IndexBuild.objects.filter(
            collection=row, state__in=[IndexBuild.State.PENDING, IndexBuild.State.RUNNING],
            created_at__lt=stale,
        ).exclude(heartbeat__gte=stale).update(state=IndexBuild.State.FAILED, message="failed",
                 error="the web server serving the collection stopped during the build")
        build = IndexBuild.objects.create(collection=row, message="queued")
        job = start_job(f"vector-{kind}", tasks.build_index, user=user,
                        target=("vector-collection", row.name),
                        params={"build": build.pk, "collection": row.name})
        IndexBuild.objects.filter(pk=build.pk).update(job_id=job.pk)
        transaction.on_commit(lambda: _spawn_build(build.pk, row.pk, row.data_path))
    return job


def _spawn_build(build_id, row_id, path) -> None:
    threading.Thread(target=_run_build, args=(build_id, row_id, path), daemon=True,
                     name=f"vector-build-{build_id}").start()


class _Reporter:
    """Progress and cancel callbacks for `Collection.build_index`, writing the build row."""

    interval = 0.5

    def __init__(self, build_id):
        self.build_id = build_id
        self._last = 0.0
        self._cancel = False

    def _beat(self, **fields):
        IndexBuild.objects.filter(pk=self.build_id).update(heartbeat=timezone.now(), **fields)

    def progress(self, pct, message=""):
        now = time.monotonic()
        if now - self._last < self.interval and pct < 100:
            return
        self._last = now
        self._beat(progress=max(0.0, min(99.0, float(pct))), message=str(message)[:500])

    def cancel(self) -> bool:
        """True once the build or its Job was cancelled (a pending Job never reaches the
        watcher, so the Job row is checked too)."""
        if not self._cancel:
            build = IndexBuild.objects.filter(pk=self.build_id).values(
                "cancel_requested", "job_id").first()
            self._cancel = build is None or build["cancel_requested"] or Job.objects.filter(
                pk=build["job_id"], cancel_requested=True).exists()
        return self._cancel


def _heartbeat(build_id, stop: threading.Event) -> None:
    try:
        while not stop.wait(2.0):
            IndexBuild.objects.filter(pk=build_id).update(heartbeat=timezone.now())
    finally:
        connection.close()


def _run_build(build_id, row_id, path) -> None:
    """The build itself, in a thread of the serving process."""
    close_old_connections()
    stop = threading.Event()
    beat = threading.Thread(target=_heartbeat, args=(build_id, stop), daemon=True)
    rep = _Reporter(build_id)
    try:
        rep._beat(state=IndexBuild.State.RUNNING, message="building")
        beat.start()
        coll = get_registry().get(path)
        params = coll.build_index(progress=rep.progress, cancel=rep.cancel)
    except BuildCancelled as exc:
        rep._beat(state=IndexBuild.State.CANCELLED, message=str(exc)[:500])
    except VectorError as exc:
        rep._beat(state=IndexBuild.State.FAILED, error=str(exc), message="failed")
    except Exception as exc:
        log.exception("vector index build %s failed", build_id)
        rep._beat(state=IndexBuild.State.FAILED, error=f"{type(exc).__name__}: {exc}",
                  message="failed")
    else:
        result = {"params": params, "count": len(coll), "index_state": coll.index_state}
        rep._beat(state=IndexBuild.State.SUCCEEDED, progress=100.0, result=result,
                  message=f"index built over {len(coll)} vectors")
        row = VectorCollection.objects.filter(pk=row_id).first()
        if row is not None:
            record_figures(row, coll, force=True)
    finally:
        stop.set()
        connection.close()
