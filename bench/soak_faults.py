"""The soak's faults and its view of the appliance's daemons (no Django, standard library).

- `Daemons`: what `strata up` records of its children (run/daemons.json), the resident memory
  (RSS and PSS) and open file descriptors of each daemon with its descendants, kill -9 of one
  and the wait until its supervisor has started it again.
- `CephFaults` (`--ceph`): the development Ceph cluster the checkpoint burst and S3 run on,
  an OSD killed with SIGKILL and started again, an MDS failover (`ceph mds fail` of the
  active MDS: the standby takes rank 0), and its daemons' memory.
- `FaultWindows`: which client errors a fault explains. An error counts as an expected
  refusal only while a fault that touches the operation's class is open (from the fault to
  `GRACE` seconds after the daemon is back, or the pool has space again) and only if it is
  of a kind that fault explains: connection refused/reset/closed, 503 SlowDown or
  ServiceUnavailable, a job cut off by its killed worker, EIO of a block client whose
  server died mid-request, ENOSPC while the pool is full. Anything else is unexpected.
"""
from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

GRACE = 15.0               # seconds after recovery during which a fault still explains errors
# ... longer where what the fault left behind outlives it: a run lock of a job the killed
# worker held expires 60 s after its last renewal (services/protection/locks.py)
GRACE_OF = {"kill:worker": 75.0}
RESTART_TIMEOUT = 300.0    # a bound, not a measure: a loaded machine restarts slowly

CONNECTION = ("refused", "reset by peer", "connection reset", "connectionreset",
              "connection aborted", "connectionaborted", "broken pipe", "remotedisconnected",
              "remote end closed", "connection closed", "connection was closed",
              "connection to the server was closed", "server disconnected", "eof occurred",
              "unexpected eof", "incompleteread", "econnrefused", "econnreset", "epipe",
              "could not connect", "failed to connect", "endpointconnectionerror",
              "connection broken", "timed out", "timeout", "not connected",
              "session was disconnected", "smbconnection", "connection closed by peer",
              "connection is not ready", "rebind failed")
UNAVAILABLE = ("503", "slowdown", "serviceunavailable", "service unavailable",
               "502 bad gateway")
INTERRUPTED = ("interrupted", "worker lost", "workerlost", "is already running")
# a daemon started again serves what the plane puts back a moment later (exports, targets)
RESTORING = ("not present", "export not available", "target not found", "login failed")
BLOCK_IO = ("input/output error", "eio")
NOSPACE = ("nospc", "no space left", "disk_full", "disk full", "insufficientstorage", "507",
           "enospc", "is full")

# which operation classes each daemon serves (a kill of it may refuse them)
REST = ("ckpt_save", "ckpt_restore", "vector_upsert", "vector_search", "snapshot", "backup",
        "tier_move")
S3 = ("s3_put", "s3_get", "s3_multipart", "s3_list")
JOBS = ("snapshot", "backup", "tier_move")
SERVES = {
    "s3": S3 + ("backup",),
    "ganesha": ("nfs_write", "sample_read"),
    "smbd": ("smb_write",),
    "tgtd": ("iscsi_write",),
    "qemu-storage-daemon": ("nbd_write",),
    "web": REST,
    "worker": JOBS,
    # the broker: jobs are queued through it, and the web server and gateway talk to it
    "redis": REST + S3,
}
KILLED = ("tgtd", "qemu-storage-daemon", "ganesha", "smbd", "s3", "redis", "web", "worker")
# with --ceph the checkpoint file system, its snapshots and the S3 gateway's data are on the
# Ceph pool: its faults stall them (an OSD not yet marked down, rank 0 without an MDS)
CEPH_FAULTS = ("ceph:osd", "ceph:mds_failover")
for _kind in CEPH_FAULTS:
    SERVES[_kind] = ("ckpt_save", "ckpt_restore", "snapshot", "backup") + S3


def explains(kind: str, cls: str, text: str) -> bool:
    """Whether a fault of ``kind`` ("kill:NAME" or "full_pool") explains this error of an
    operation of class ``cls`` (``text``: the error, lower case); a read-back
    ("CLASS:readback") is explained as its class is."""
    cls = cls.split(":")[0]
    if kind == "full_pool":
        return cls in ("nfs_write",) and any(p in text for p in NOSPACE)
    name = kind.removeprefix("kill:")
    if cls not in SERVES.get(name, ()):
        return False
    kinds = CONNECTION + UNAVAILABLE
    if cls in JOBS:
        kinds += INTERRUPTED
    if cls in ("nbd_write", "iscsi_write"):
        kinds += BLOCK_IO + RESTORING
    if cls == "smb_write":   # smbprotocol closes the socket the dead smbd reset, then uses it
        kinds += ("bad file descriptor",)
    return any(p in text for p in kinds)


def error_text(exc: BaseException) -> str:
    """The whole cause chain of ``exc``, one line, for classification and the report."""
    parts, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        parts.append(f"{type(exc).__name__}: {exc}")
        code = getattr(exc, "code_name", "")
        if code:
            parts.append(str(code))
        children = getattr(exc, "errors", None)   # nfs-rs: a close's own failures
        for child in children if isinstance(children, tuple) else ():
            parts.append(f"[{error_text(child)}]")
        exc = exc.__cause__ or exc.__context__
    return " <- ".join(parts).replace("\n", " ")


@dataclass
class Window:
    kind: str
    opened: float
    closed: float | None = None


@dataclass
class FaultWindows:
    """Open and closed fault windows; thread-safe."""
    windows: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def open(self, kind: str) -> Window:
        w = Window(kind, time.monotonic())
        with self.lock:
            self.windows.append(w)
        return w

    def close(self, w: Window) -> None:
        w.closed = time.monotonic()

    def expected(self, cls: str, exc: BaseException) -> bool:
        text = error_text(exc).lower()
        now = time.monotonic()
        with self.lock:
            live = [w for w in self.windows
                    if w.closed is None or now - w.closed < GRACE_OF.get(w.kind, GRACE)]
        return any(explains(w.kind, cls, text) for w in live)


def _descendants(pid: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        kids.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, ()))
    return out


def usage(pid: int) -> dict:
    """RSS and PSS (MiB) and open file descriptors of ``pid`` and all its descendants."""
    rss = pss = 0
    fds = procs = 0
    for p in _descendants(pid):
        try:
            text = Path(f"/proc/{p}/smaps_rollup").read_text()
            fds += len(os.listdir(f"/proc/{p}/fd"))
        except OSError:
            continue
        procs += 1
        rss += int(re.search(r"^Rss:\s+(\d+)", text, re.M).group(1))
        pss += int(re.search(r"^Pss:\s+(\d+)", text, re.M).group(1))
    return {"pid": pid, "processes": procs, "rss_mib": round(rss / 1024, 1),
            "pss_mib": round(pss / 1024, 1), "fds": fds}


class Daemons:
    """The children of one `strata up`, as its run/daemons.json records them."""

    def __init__(self, data_dir: Path):
        self.path = Path(data_dir) / "run" / "daemons.json"

    def recorded(self) -> dict:
        for _ in range(50):  # written atomically, but may be missing for a moment at start
            try:
                return json.loads(self.path.read_text())
            except (OSError, ValueError):
                time.sleep(0.1)
        raise RuntimeError(f"cannot read {self.path}")

    def sample(self) -> dict:
        """{daemon: usage} of every running daemon."""
        return {name: usage(d["pid"]) for name, d in sorted(self.recorded().items())
                if d.get("pid") and d.get("state") == "running"}

    def kill9(self, name: str) -> dict:
        """kill -9 the daemon and wait until it runs again; returns what was recorded."""
        before = self.recorded()[name]
        if before.get("state") != "running":
            raise RuntimeError(f"{name} is not running: {before}")
        os.kill(before["pid"], signal.SIGKILL)
        deadline = time.monotonic() + RESTART_TIMEOUT
        while time.monotonic() < deadline:
            now = self.recorded()[name]
            if now.get("restarts", 0) > before.get("restarts", 0) and \
                    now.get("state") == "running" and now.get("pid") != before["pid"]:
                return now
            time.sleep(0.2)
        raise RuntimeError(f"{name} was not started again within {RESTART_TIMEOUT} s: "
                           f"{self.recorded()[name]}")


def growth(start: dict, before_kills: dict, end: dict, hours: float, series: list,
           warm_s: float, allowance_mib: float, mib_per_hour: float, fd_allowance: int) -> dict:
    """Per daemon: memory and fds after the warm-up (``start``) and at the end, growth per
    hour, and whether it leaks.

    Memory is judged per life of the daemon (one pid; a kill starts a new life) on the samples
    of the second half of that life, none before ``warm_s`` into the run: the first half is
    its warm-up (modules imported and clients made on a task's first run, caches filling,
    pages a forked child shares with its parent copied as it writes them), a leak keeps
    growing through the second. The least-squares line through those samples gives the
    rise; more than ``allowance_mib`` plus ``mib_per_hour`` per hour of that span is a leak.
    A life with fewer than 3 such samples is not judged on memory. ``series``: [t, {daemon:
    usage}] taken through the run (just before each kill and at the end too). Descriptors:
    more than ``fd_allowance`` above ``start`` at the end or just before a kill is a leak."""
    out = {}
    for name, s in sorted(start.items()):
        e = end.get(name)
        seen = [u for u in [e, *before_kills.get(name, ())] if u]
        if not seen:
            out[name] = {"start": s, "end": None, "leak": True, "note": "not running at the end"}
            continue
        grew = max(u["pss_mib"] for u in seen) - s["pss_mib"]
        fds = max(u["fds"] for u in seen) - s["fds"]
        lives = [life_growth(pid, points, warm_s, allowance_mib, mib_per_hour)
                 for pid, points in lives_of(name, series).items()]
        lives = [x for x in lives if x]
        out[name] = {"start": s, "end": e, "before_kills": before_kills.get(name, []),
                     "pss_growth_mib": round(grew, 1),
                     "pss_growth_mib_per_hour": round(grew / hours, 1),
                     "end_growth_mib_per_hour": round(
                         ((e or s)["pss_mib"] - s["pss_mib"]) / hours, 1),
                     "fd_growth": fds, "lives": lives,
                     "judged_rise_mib": max((x["rise_mib"] for x in lives), default=None),
                     "leak": any(x["leak"] for x in lives) or fds > fd_allowance}
    return out


def lives_of(name: str, series: list) -> dict:
    """{pid: [(t, PSS MiB)]} of one daemon from the samples of the run."""
    out: dict = {}
    for t, sample in series:
        u = sample.get(name)
        if u and u["processes"]:
            out.setdefault(u["pid"], []).append((t, u["pss_mib"]))
    return out


def life_growth(pid: int, points: list, warm_s: float, allowance_mib: float,
                mib_per_hour: float) -> dict | None:
    """The rise of one life's PSS over the second half of it (see growth), or None when
    fewer than 3 samples fall there."""
    points = sorted(points)
    since = max(warm_s, (points[0][0] + points[-1][0]) / 2)
    judged = [(t, m) for t, m in points if t >= since]
    if len(judged) < 3 or judged[-1][0] - judged[0][0] <= 0:
        return None
    n = len(judged)
    mt, mm = sum(t for t, _ in judged) / n, sum(m for _, m in judged) / n
    slope = sum((t - mt) * (m - mm) for t, m in judged) / sum((t - mt) ** 2 for t, _ in judged)
    span = judged[-1][0] - judged[0][0]
    rise, limit = slope * span, allowance_mib + mib_per_hour * span / 3600
    return {"pid": pid, "from_s": round(judged[0][0], 1), "to_s": round(judged[-1][0], 1),
            "samples": n, "pss_from": judged[0][1], "pss_to": judged[-1][1],
            "rise_mib": round(rise, 1), "mib_per_hour": round(slope * 3600, 1),
            "limit_mib": round(limit, 1), "leak": rise > limit}


class CephFaults:
    """A development Ceph cluster (dataplane/ceph/devcluster.py) in ``root`` and its faults.
    The plane's CephFS gets one active MDS and one standby, so that a failover moves rank 0
    to the other daemon."""

    OSD_DOWN_S = 20.0     # an OSD stays dead this long (marked down after osd_heartbeat_grace 8 s)

    def __init__(self, root: Path):
        from dataplane.ceph.devcluster import DevCluster
        self.cluster = DevCluster(root)
        self.next_osd = 0

    def up(self) -> "CephFaults":
        self.cluster.up(timeout=300)
        return self

    def _fs(self) -> dict:
        return ((self.cluster.command("fs dump") or {}).get("filesystems") or [{}])[0]

    def _rank0(self) -> str | None:
        infos = self._fs().get("mdsmap", {}).get("info", {}).values()
        return next((i["name"] for i in infos
                     if i.get("rank") == 0 and i.get("state") == "up:active"), None)

    def _standbys(self) -> list[str]:
        return [i["name"] for i in (self.cluster.command("fs dump") or {}).get("standbys", [])]

    def one_active_mds(self) -> None:
        """max_mds 1 on the plane's CephFS (made with the ceph pool): one MDS active, the
        other standby."""
        name = _until(lambda: self._fs().get("mdsmap", {}).get("fs_name"), RESTART_TIMEOUT,
                      "the plane's CephFS")
        self.cluster.command("fs set", fs_name=name, var="max_mds", val="1")
        _until(lambda: self._rank0() and len(self._standbys()) == 1, RESTART_TIMEOUT,
               "one active MDS and one standby")

    def kill_osd(self) -> dict:
        osd = self.next_osd
        self.next_osd = (osd + 1) % 3
        self.cluster.kill_osd(osd)
        time.sleep(self.OSD_DOWN_S)
        self.cluster.start_osd(osd)
        self.cluster.wait_healthy(RESTART_TIMEOUT)
        return {"osd": osd, "down_s": self.OSD_DOWN_S}

    def mds_failover(self) -> dict:
        was = self._rank0()
        if was is None:
            raise RuntimeError("rank 0 has no active MDS to fail")
        from dataplane.errors import CommandFailed
        try:
            self.cluster.command("mds fail", role_or_gid=was)
            how = "ceph mds fail"
        except CommandFailed:   # the mon refused the command: fail it the hard way
            self.cluster._stop(f"mds.{was}", sig=signal.SIGKILL)
            self.cluster._start("mds", was)
            how = "kill -9"
        now = _until(lambda: (lambda n: n if n and n != was else None)(self._rank0()),
                     RESTART_TIMEOUT, "the standby MDS to take rank 0")
        # the failed daemon starts again and waits as the standby
        _until(lambda: was in self._standbys(), RESTART_TIMEOUT, f"mds.{was} back as standby")
        self.cluster.wait_healthy(RESTART_TIMEOUT)
        return {"failed": was, "active": now, "how": how}

    def sample(self) -> dict:
        """{"ceph-NAME": usage} of every running daemon of the cluster."""
        return {f"ceph-{n}": usage(p) for n, p in sorted(self.cluster.pids().items())}

    def destroy(self) -> None:
        self.cluster.destroy()


def _until(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.5)
    raise RuntimeError(f"no {what} after {timeout:.0f} s")
