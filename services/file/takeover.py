"""A node took another node's floating address over: NFS grace for the owner's clients at once
(no Django here).

keepalived runs ``python -m services.file.takeover DATA_DIR OWNER`` (through the script
``DATA_DIR/run/vrrp/takeover`` the agent writes) as ``notify_master`` of the instance of
OWNER's address (:mod:`plumbing.keepalived`), about 3.5 s after OWNER's last VRRP advert. Until then the plane started the grace only once it wrote OWNER down, 15 s after its
last heartbeat: a client that followed the address in between met a survivor not in grace
(its reclaims refused, its locks open to others). Now the survivor runs ``ganesha-rados-grace
start OWNER`` itself, within a second of the move, when OWNER is a member of the grace
database; its Ganesha and the others then enforce grace (they watch the database).

A plane that cannot end it: the plane gives up OWNER's need once it has fenced OWNER's CephFS
clients; while the plane is down (its host is the one that died, or is being serviced) that
grace would last until the plane is back, and no node of the cluster would take a new open
or lock. So the survivor records the takeover (``run/vrrp/took/OWNER``) and its agent gives
OWNER's need up itself (:func:`lift_due`) :data:`LIFT_AFTER` seconds later, if OWNER still
needs it then: by that time the MDS has closed the dead Ganesha's CephFS session on its own
(``session_autoclose``, 45 s on the file systems Strata makes), which is what the plane's
fence does sooner. On a file system with a longer ``session_autoclose`` (Ceph's default is
300 s) new opens of the files the dead server held still wait for it; every other open goes
on. keepalived's ``notify_backup`` (this node gave the address back: OWNER came back, and
its own restart puts the cluster in grace for its clients) removes the record first.

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
# seconds from a takeover to the survivor giving the owner's need up itself: the MDS's
# session_autoclose on the file systems Strata makes (dataplane/ceph/cephfs.py), 45 s, and a
# margin for the MDS's own tick
LIFT_AFTER = 75.0


def state_path(data_dir) -> Path:
    return Path(data_dir) / "run" / "vrrp" / STATE_NAME


def took_dir(data_dir) -> Path:
    """Where this node records its takeovers, a file per owner."""
    return Path(data_dir) / "run" / "vrrp" / "took"


def took_path(data_dir, owner: str) -> Path:
    """The record of this node's takeover of ``owner``'s address: the time, as text."""
    return took_dir(data_dir) / owner


def _grace_db(data_dir) -> GraceDb | None:
    try:
        grace = json.loads(state_path(data_dir).read_text())
    except (OSError, ValueError):
        return None
    return GraceDb(nfs_cluster(data_dir, grace), timeout=10)


def start_for(data_dir, owner: str) -> str:
    """Put the NFS cluster in grace for ``owner``'s clients if it is a member, and record the
    takeover; what was done, in words. Raises CommandError when Ceph does not answer."""
    db = _grace_db(data_dir)
    if db is None:
        return f"took {owner}'s address over; this node serves no NFS cluster: nothing to do"
    if owner not in db.dump().members:
        return f"took {owner}'s address over; {owner} is no NFS grace member: nothing to do"
    db.start(owner)
    record = took_path(data_dir, owner)
    record.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    record.write_text(f"{time.time():.3f}\n")
    return f"took {owner}'s address over; NFS grace started for its clients"


def gave_back(data_dir, owner: str) -> str:
    """This node no longer holds ``owner``'s address (keepalived's ``notify_backup``)."""
    record = took_path(data_dir, owner)
    if not record.exists():
        return ""
    record.unlink()
    return f"gave {owner}'s address back; its NFS grace is its own again"


def lift_due(data_dir, now: float | None = None) -> list[str]:
    """Give up the need of grace of every owner whose address this node took over
    :data:`LIFT_AFTER` seconds ago or more and that needs it still (the plane did not: see the
    module's docstring); their names. Each due record is removed. Asks Ceph nothing while no
    record is due. Raises CommandError when Ceph does not answer (the records stay)."""
    now = time.time() if now is None else now
    folder = took_dir(data_dir)
    due = []
    for record in sorted(folder.iterdir()) if folder.is_dir() else []:
        try:
            if now - float(record.read_text()) >= LIFT_AFTER:
                due.append(record)
        except (OSError, ValueError):
            record.unlink(missing_ok=True)
    if not due:
        return []
    db = _grace_db(data_dir)
    state = db.dump() if db is not None else None
    lifted = [r.name for r in due if state is not None and state.needs(r.name)]
    if lifted:
        db.lift(*lifted)
        _log(data_dir, f"NFS grace of {', '.join(lifted)} given up {LIFT_AFTER:.0f} s after "
                       "taking the address over (the plane did not)")
    for record in due:
        record.unlink(missing_ok=True)
    return lifted


def _log(data_dir, said: str) -> str:
    line = f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')} {said}\n"
    log = Path(data_dir) / "log"
    log.mkdir(parents=True, exist_ok=True)
    with open(log / "takeover.log", "a") as f:
        f.write(line)
    return line


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3) or argv[2:] not in ([], ["master"], ["backup"]):
        print("usage: python -m services.file.takeover DATA_DIR OWNER [master|backup]",
              file=sys.stderr)
        return 2
    data_dir, owner = argv[:2]
    if argv[2:] == ["backup"]:
        said = gave_back(data_dir, owner)
        if said:
            print(_log(data_dir, said), end="")
        return 0
    # keepalived runs scripts with a bare environment
    os.environ["PATH"] = os.environ.get("PATH") or "/usr/sbin:/usr/bin:/sbin:/bin"
    began = time.monotonic()
    try:
        said, code = start_for(data_dir, owner), 0
    except (CommandError, ValueError) as exc:     # Ceph did not answer; a bad state file
        said, code = f"took {owner}'s address over; NFS grace NOT started: {exc}", 1
    print(_log(data_dir, f"{said} ({time.monotonic() - began:.1f} s)"), end="")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
