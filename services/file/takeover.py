"""A node took another node's floating address over: NFS grace for the owner's clients at once
(no Django here).

keepalived runs ``python -m services.file.takeover DATA_DIR OWNER`` (through the script
``DATA_DIR/run/vrrp/takeover`` the agent writes) as ``notify_master`` of the instance of
OWNER's address (:mod:`plumbing.keepalived`), about 3.5 s after OWNER's last VRRP advert. Until then the plane started the grace only once it wrote OWNER down, 15 s after its
last heartbeat: a client that followed the address in between met a survivor not in grace
(its reclaims refused, its locks open to others). Now the survivor runs ``ganesha-rados-grace
start OWNER`` itself, within a second of the move, when OWNER is a member of the grace
database; its Ganesha and the others then enforce grace (they watch the database).

Straight into the grace database with this node's own cephx key, not through the plane's API:
the key is the one this node's Ganesha already writes that database with (no new right), the
start does not wait on the plane (which may be the host that died, or busy) nor on a Celery
queue, and no new API is needed. Idempotent with the plane's own start
(:func:`services.file.grace.start_grace`): a member already in need stays as it is, and a
cluster already in grace keeps its epoch. Who ends the grace does not change: the plane gives
up OWNER's need once it wrote it down and fenced its CephFS clients
(:func:`services.file.grace.release`);
an OWNER that was alive after all (adverts lost for 3 s) lifts its own need when its Ganesha's
grace period ends, as after any grace.

Where the database is: ``DATA_DIR/run/vrrp/nfs-cluster.json``, the plane's ``nfs_cluster``
option (``{"pool", "rados_pool", "namespace", "nodeid"}``) that the agent writes on every
heartbeat answer, absent while this node serves no file system of a Ceph pool (nothing to do
then). What was done goes to ``DATA_DIR/log/takeover.log`` (keepalived drops a script's
output).
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from services.file.daemons import nfs_cluster
from services.file.runtime.errors import CommandError
from services.file.runtime.grace import GraceDb

STATE_NAME = "nfs-cluster.json"


def state_path(data_dir) -> Path:
    return Path(data_dir) / "run" / "vrrp" / STATE_NAME


def start_for(data_dir, owner: str) -> str:
    """Put the NFS cluster in grace for ``owner``'s clients if it is a member; what was done,
    in words. Raises CommandError when Ceph does not answer."""
    try:
        grace = json.loads(state_path(data_dir).read_text())
    except (OSError, ValueError):
        return f"took {owner}'s address over; this node serves no NFS cluster: nothing to do"
    db = GraceDb(nfs_cluster(data_dir, grace), timeout=10)
    if owner not in db.dump().members:
        return f"took {owner}'s address over; {owner} is no NFS grace member: nothing to do"
    db.start(owner)
    return f"took {owner}'s address over; NFS grace started for its clients"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m services.file.takeover DATA_DIR OWNER", file=sys.stderr)
        return 2
    data_dir, owner = argv
    # keepalived runs scripts with a bare environment
    os.environ["PATH"] = os.environ.get("PATH") or "/usr/sbin:/usr/bin:/sbin:/bin"
    began = time.monotonic()
    try:
        said, code = start_for(data_dir, owner), 0
    except (CommandError, ValueError) as exc:     # Ceph did not answer; a bad state file
        said, code = f"took {owner}'s address over; NFS grace NOT started: {exc}", 1
    line = (f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')} {said} "
            f"({time.monotonic() - began:.1f} s)\n")
    log = Path(data_dir) / "log"
    log.mkdir(parents=True, exist_ok=True)
    with open(log / "takeover.log", "a") as f:
        f.write(line)
    print(line, end="")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
