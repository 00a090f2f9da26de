"""The Ceph client files a cluster node keeps for each Ceph pool (no Django here).

The plane hands a node, through its node-only API (``GET /api/v1/nodes/self/ceph/``), what
its daemons need to open each Ceph pool: the cluster's ceph.conf, the pool's client key, the
client's name and the CephFS the pool's file systems live in. The agent writes them under
``<data dir>/ceph/<pool>/`` (directory 0700, files 0600): ``ceph.conf`` (the cluster's, its
``keyring`` settings replaced by this file's keyring), ``keyring`` and ``pool.json``
(``{"client", "filesystem", "root"}``). The node's reconcile reads them back
(:func:`read_pool`) to point Ganesha's FSAL_CEPH at them.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from plumbing.atomic import write_atomic

KEYRING_LINE = re.compile(r"^\s*keyring\s*=", re.IGNORECASE)


def pool_dir(data_dir, pool: str) -> Path:
    return Path(data_dir) / "ceph" / pool


def node_conf(conf_text: str, client: str, keyring_path: str) -> str:
    """The cluster's ceph.conf with its keyring settings (paths on the plane's host)
    replaced by the node's keyring for ``client``."""
    lines = [line for line in conf_text.splitlines() if not KEYRING_LINE.match(line)]
    return ("\n".join(lines).rstrip("\n") + "\n\n# added by the Strata node agent\n"
            f"[client.{client}]\nkeyring = {keyring_path}\n")


def write_pool(data_dir, pool: str, files: dict) -> bool:
    """Write pool ``pool``'s files from the plane's answer ``{"conf", "keyring", "client",
    "filesystem", "root"}``; True when something changed."""
    where = pool_dir(data_dir, pool)
    where.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(where, 0o700)
    keyring = where / "keyring"
    wanted = {
        "ceph.conf": node_conf(files["conf"], files["client"], str(keyring)),
        "keyring": files["keyring"],
        "pool.json": json.dumps({k: files.get(k) or "" for k in ("client", "filesystem",
                                                                 "root")}, sort_keys=True),
    }
    changed = False
    for name, text in wanted.items():
        path = where / name
        try:
            if path.read_text() == text:
                continue
        except OSError:
            pass
        write_atomic(path, text, mode=0o600)
        changed = True
    return changed


def forget_others(data_dir, pools) -> list[str]:
    """Remove the files of Ceph pools the plane no longer lists; their names."""
    base = Path(data_dir) / "ceph"
    gone = [p.name for p in base.iterdir() if p.is_dir() and p.name not in set(pools)] \
        if base.is_dir() else []
    for name in gone:
        shutil.rmtree(base / name, ignore_errors=True)
    return gone


def read_pool(data_dir, pool: str) -> dict | None:
    """``{"conf", "keyring", "client", "filesystem", "root"}`` (paths for the first two) of
    a pool the agent wrote, or None."""
    where = pool_dir(data_dir, pool)
    try:
        meta = json.loads((where / "pool.json").read_text())
    except (OSError, ValueError):
        return None
    return {**meta, "conf": str(where / "ceph.conf"), "keyring": str(where / "keyring")}
