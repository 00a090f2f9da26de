"""The S3 gateway's configuration file as the plane writes it (no Django).

The plane builds the document as a plain dict (:func:`render_config`) and installs it with
:func:`write_config`: under an exclusive ``flock`` (the web server and the Celery worker are
separate processes and both rewrite it), only when the content (or mode) changed, through
``plumbing.atomic`` (a temporary file in the same directory, mode 0600 as it holds secret
keys, fsynced, renamed over the old one, directory fsynced). The gateway re-reads the file
when its mtime moves (see ``services/object/README.md``), so a new or revoked key takes
effect on the next request.

Files under ``<data_dir>/run/s3/``:

- ``gateway.json``: the config (``config_path``).
- ``start``: written by the plane's bootstrap once the data root is mounted; the launcher
  (:mod:`services.object.serve`) waits for it before starting the gateway.
- ``waiting``: written by the launcher while it waits (the ready check of ``strata up``).
"""
from __future__ import annotations

import fcntl
import json
import os
from contextlib import contextmanager
from pathlib import Path

from plumbing.atomic import write_if_changed

DEFAULT_REGION = "us-east-1"


def run_dir(data_dir: Path) -> Path:
    """``<data_dir>/run/s3``: where the plane and the launcher meet."""
    return Path(data_dir) / "run" / "s3"


def config_path(data_dir: Path) -> Path:
    return run_dir(data_dir) / "gateway.json"


def rados_data_root(data_dir: Path) -> Path:
    """The data root of a gateway with the RADOS store: local, its run and temporary files."""
    return run_dir(data_dir) / "rados"


def gate_path(data_dir: Path) -> Path:
    return run_dir(data_dir) / "start"


def waiting_path(data_dir: Path) -> Path:
    return run_dir(data_dir) / "waiting"


def workers_path(data_dir: Path) -> Path:
    """The gateway's record of its worker processes (restarts, last exit), which its parent
    writes next to the config (``gateway/workers.py``, ``RECORD_FILE``)."""
    return run_dir(data_dir) / "workers.json"


def render_config(*, data_root: str, admin_token: str, users: dict, region: str = DEFAULT_REGION,
                  domains: list | None = None, io_budget_redis: str = "", cold_root: str | None = None,
                  io_budget: dict | None = None, sse_master_key: str = "",
                  kms_keys: dict | None = None, qos: dict | None = None, store: dict | None = None) -> dict:
    """The gateway's config document.

    ``users`` maps access key -> ``{"secret_key", "user", "admin"}``; ``io_budget_redis`` is
    the Redis URL of the shared I/O budget (object PUTs and GETs mark foreground traffic
    there, see ``services.object.gateway.foreground``) and ``io_budget`` its rates
    (``{"rate", "burst", "classes", "foreground_share"}``, bytes), which lifecycle transitions
    draw from; ``cold_root`` is the directory on the capacity pool where transitions put
    cold bytes (None: the gateway has no capacity tier and refuses Transition rules). The
    gateway runs no lifecycle pass of its own (``lifecycle_interval`` 0): the plane runs
    them, each a Job (``services.object.tasks``). ``sse_master_key`` (base64 of 32 bytes)
    wraps the data keys of SSE-S3 and SSE-KMS objects (``services.object.gateway.sse``);
    ``kms_keys`` maps the appliance's KMS key ids to ``{"material" (base64 of 32 bytes),
    "enabled", "aliases", "arn"}``. ``qos``: ``{"shares": {class: share}, "buckets": {bucket:
    class}}`` for the admission queue (``services.object.gateway.admission``). ``store``:
    ``{"kind": "rados", "ceph_conf", "client", "keyring", "pool"[, "index_shards"]}`` keeps
    the buckets in that RADOS pool, shared by every gateway given the same (None: in
    ``data_root``; see "Buckets on Ceph pools" in services/object/README.md).
    """
    config = {"data_root": str(data_root), "region": region, "admin_token": admin_token,
              "domains": list(domains or ["localhost"]), "lifecycle_interval": 0,
              "users": {k: {"secret_key": u["secret_key"], "user": u["user"], "admin": bool(u["admin"])}
                        for k, u in sorted(users.items())}}
    if io_budget_redis:
        config["io_budget_redis"] = io_budget_redis
    if io_budget:
        config["io_budget"] = dict(io_budget)
    if cold_root:
        config["cold_root"] = str(cold_root)
    if sse_master_key:
        config["sse_master_key"] = sse_master_key
    if qos:
        config["qos"] = {"shares": dict(qos["shares"]), "buckets": dict(sorted(qos["buckets"].items()))}
    if store:
        config["store"] = dict(store)
    if kms_keys:
        config["kms_keys"] = {kid: dict(spec) for kid, spec in sorted(kms_keys.items())}
    return config


def placeholder_config(data_dir: Path) -> dict:
    """A valid config with no users, for the very first start before the plane's bootstrap
    (the launcher does not start the gateway until the plane has written the real one)."""
    return render_config(data_root=str(run_dir(data_dir) / "unassigned"), admin_token="", users={})


@contextmanager
def locked(path: Path):
    """Hold an exclusive lock on ``<path>.lock`` (render + write must not interleave)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(str(path) + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def read_config(path: Path) -> dict | None:
    """The installed document, or None if there is none (or it does not parse)."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def write_config(path: Path, config: dict) -> bool:
    """Install ``config`` atomically (0600) unless identical; True if the file changed.

    Call it inside :func:`locked` when several processes may write.
    """
    return write_if_changed(path, json.dumps(config, indent=2, sort_keys=True) + "\n", mode=0o600)
