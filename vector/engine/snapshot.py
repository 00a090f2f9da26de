"""Collection snapshots: a consistent copy of checkpoint + sealed WAL, and restoring one."""

import json
import os
import shutil

from plumbing.atomic import fsync_dir, write_json_atomic

from .checkpoint import FILENAME as CHECKPOINT_FILE
from .errors import CollectionExists, CollectionNotFound
from .spec import validate_name
from .wal import list_segments, segment_path

SPEC_FILE = "collection.json"
WAL_DIR = "wal"


def _copy_durable(src, dst):
    shutil.copyfile(src, dst)
    with open(dst, "rb+") as f:
        os.fsync(f.fileno())


def snapshot_collection(coll, dest):
    """Copy ``coll`` into new directory ``dest`` as of now; returns ``dest``.

    Under the checkpoint mutex (no checkpoint deletes WAL segments meanwhile) the current
    WAL segment is sealed with writers excluded; the checkpoint file is immutable (replaced
    by rename, never rewritten) and sealed segments never change, so copying them after the
    lock is released still yields exactly the state at the seal.
    """
    dest = os.path.abspath(dest)
    if os.path.exists(dest) and os.listdir(dest):
        raise CollectionExists(f"snapshot destination {dest} is not empty")
    tmp = dest + f".tmp-{os.getpid()}"
    with coll._ck_mutex:
        with coll._lock.read():
            coll._check_open()
            sealed = coll._wal.rotate()
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(os.path.join(tmp, WAL_DIR))
        names = [SPEC_FILE]
        if os.path.exists(os.path.join(coll.path, CHECKPOINT_FILE)):
            names.append(CHECKPOINT_FILE)
        wal_dir = os.path.join(coll.path, WAL_DIR)
        names += [os.path.join(WAL_DIR, os.path.basename(segment_path(wal_dir, s)))
                  for s in list_segments(wal_dir) if s < sealed]
        for name in names:
            _copy_durable(os.path.join(coll.path, name), os.path.join(tmp, name))
    fsync_dir(os.path.join(tmp, WAL_DIR))
    fsync_dir(tmp)
    if os.path.exists(dest):
        os.rmdir(dest)
    os.replace(tmp, dest)
    fsync_dir(os.path.dirname(dest))
    return dest


def copy_snapshot(snapshot_dir, path, name=None):
    """Copy a snapshot into new directory ``path``, renaming the collection to ``name``."""
    if os.path.exists(os.path.join(path, SPEC_FILE)):
        raise CollectionExists(f"a collection already exists in {path}")
    if not os.path.exists(os.path.join(snapshot_dir, SPEC_FILE)):
        raise CollectionNotFound(f"{snapshot_dir} is not a collection snapshot")
    shutil.copytree(snapshot_dir, path, dirs_exist_ok=True, ignore=shutil.ignore_patterns("LOCK"))
    if name is not None:
        spec_path = os.path.join(path, SPEC_FILE)
        with open(spec_path) as f:
            data = json.load(f)
        data["name"] = validate_name(name)
        write_json_atomic(spec_path, data, indent=1)
