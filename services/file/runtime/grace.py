"""The grace database of NFS-Ganesha servers that serve the same CephFS exports together
(``rados_cluster`` recovery, see :class:`~.specs.NfsCluster`), kept with ``ganesha-rados-grace``
(Debian ``nfs-ganesha-rados-grace``) in a RADOS object.

The database holds two epochs and a flag pair per server. ``cur`` is the current epoch;
``rec`` is non-zero while the cluster is in grace (clients of epoch ``rec`` may reclaim). A
server flagged ``N`` still needs the grace period (its clients have not all reclaimed); one
flagged ``E`` enforces it (refuses new state: opens and locks that are not reclaims get
NFS4ERR_GRACE). Grace ends when no server needs it.

- Every server is a member before it starts (:meth:`GraceDb.add`).
- A server that starts (or starts again) puts the cluster in grace itself, and lifts its own
  need once its grace period is over.
- When a server dies and does not come back at once, the cluster must enforce grace for its
  clients: :meth:`GraceDb.start` of its node id (what whoever noticed the death runs: the
  plane, when it marks the node down). The survivors then refuse new state until the dead
  server starts again under the same node id and lifts its need, or :meth:`GraceDb.lift`
  gives up its clients' state (when the node is removed for good).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

from .errors import CommandError
from .process import require_binary
from .specs import NfsCluster

TOOL = "ganesha-rados-grace"
_UNBUFFERED = ["stdbuf", "-o0", "-e0"] if shutil.which("stdbuf") else []
_HEAD = re.compile(r"cur=(\d+)\s+rec=(\d+)")
_MEMBER = re.compile(r"^(\S+)(?:\s+([NE]*))?$")     # a member without flags: its name


@dataclass
class GraceState:
    """What :meth:`GraceDb.dump` read: the epochs and each member's flags."""

    cur: int
    rec: int
    members: dict[str, str]

    @property
    def in_grace(self) -> bool:
        return self.rec != 0

    def needs(self, nodeid: str) -> bool:
        return "N" in self.members.get(nodeid, "")

    def enforcing(self, nodeid: str) -> bool:
        return "E" in self.members.get(nodeid, "")


class GraceDb:
    """The grace database of the servers of one :class:`NfsCluster` setting (its ``conf``,
    ``client``, ``pool`` and ``namespace``; the node id is given per call)."""

    def __init__(self, cluster: NfsCluster, timeout: float = 30.0) -> None:
        self.cluster, self.timeout = cluster, timeout

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        c = self.cluster
        # unbuffered: the tool may crash as it exits (below), which would lose a buffered dump
        argv = [*_UNBUFFERED, require_binary(TOOL), "--cephconf", c.conf, "--userid", c.client,
                "--pool", c.pool, "--ns", c.namespace, *args]
        # 4.3's tool sometimes aborts as its librados client connects (boost::bad_get thrown,
        # nothing done, nothing printed), or dies printing nothing at all; asked again, it
        # answers. Every command is idempotent.
        for _ in range(5):
            try:
                done = subprocess.run(argv, capture_output=True, text=True,
                                      timeout=self.timeout)
            except subprocess.TimeoutExpired:
                raise CommandError(f"{TOOL} {' '.join(args)}: no answer from the Ceph cluster "
                                   f"in {self.timeout:.0f} s") from None
            silent = done.returncode != 0 and not (done.stdout + done.stderr).strip()
            if "terminate called" not in done.stderr and not silent:
                break
        if done.returncode != 0 and check:
            raise CommandError(f"{TOOL} {' '.join(args)} failed: "
                               f"{(done.stderr or done.stdout).strip()}")
        return done

    def dump(self) -> GraceState:
        """The epochs and every member's flags (none before the first :meth:`add`)."""
        # its exit status is not a verdict: it was seen non-zero after a full, good dump
        done = self._run("dump", check=False)
        text = done.stdout
        if "Failure: -2" in text + done.stderr:   # ENOENT: no database yet
            return GraceState(0, 0, {})
        head = _HEAD.search(text)
        if head is None:
            raise CommandError(f"{TOOL} dump printed no epochs: "
                               f"{(text + done.stderr).strip()!r}")
        members = {}
        for line in text[head.end():].splitlines():
            m = _MEMBER.match(line.strip())
            if m and not set(m.group(1)) <= {"="}:
                members[m.group(1)] = m.group(2) or ""
        return GraceState(int(head.group(1)), int(head.group(2)), members)

    def add(self, *nodeids: str) -> None:
        """Make these servers members (those already members are left as they are)."""
        new = [n for n in nodeids if n not in self.dump().members]
        if new:
            self._run("add", *new)

    def start(self, *nodeids: str) -> None:
        """Put the cluster in grace for the clients of these (dead) servers."""
        self._run("start", *nodeids)

    def lift(self, *nodeids: str) -> None:
        """Give up the need of these servers (their clients' state is not reclaimed)."""
        self._run("lift", *nodeids)

    def remove(self, *nodeids: str) -> None:
        """These servers are members no more."""
        self._run("remove", *nodeids)
