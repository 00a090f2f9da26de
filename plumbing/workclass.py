"""Classes of work and their shares, and the cgroups that enforce them (no Django).

Three classes: ``samples`` (foreground sample reads), ``checkpoints`` (foreground saves and
restores) and ``background`` (tier moves, replication, scrub, compaction). Each has a share
from 1 to 10000, the range of cgroup v2's ``cpu.weight`` and ``io.weight``; what a class gets
under contention is its share over the sum of the shares of the classes that contend.

Where the kernel enforces them (:class:`ClassGroups`): one cgroup per class in the cgroup v1
``cpu`` hierarchy, ``<cpu>/strata/<data dir's name>-<hash>/<class>``, with ``cpu.shares``
= share x 1024 / 100 (systemd's mapping of a v2 weight to v1 shares: the default weight 100
is the default 1024 shares). A daemon joins its class's group before it runs (``preexec``),
so everything it forks is in it too. Why v1: on this host's cgroup2 tree
(``/sys/fs/cgroup/unified``) only ``hugetlb`` is available (``cgroup.controllers``), so
neither ``cpu.weight`` nor ``io.weight`` can be set there; the v1 ``blkio`` hierarchy has no
``blkio.weight`` either (no BFQ scheduler: the disks use mq-deadline/none), so disk time is
not weighted by the kernel here: the S3 gateway's admission queue and the background I/O
budget do that part in the processes themselves. Joining a v1 group leaves the process in
its run's cgroup2 group (the hierarchies are independent), so `strata up`'s reaper still
finds every process of the run.

The shares in force are also kept in ``<data dir>/run/workclasses.json`` (written by the plane
on each change), so that `strata up` places its daemons with them before the database is up.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

from plumbing.atomic import write_atomic

SAMPLES, CHECKPOINTS, BACKGROUND = "samples", "checkpoints", "background"
CLASSES = (SAMPLES, CHECKPOINTS, BACKGROUND)
FOREGROUND = (SAMPLES, CHECKPOINTS)
# Sample reads first, then saves and restores, background last: a reader of samples keeps
# 1000/(1000+400) of a contended resource against a checkpoint burst, background work a
# twentieth of what samples get.
DEFAULT_SHARES = {SAMPLES: 1000, CHECKPOINTS: 400, BACKGROUND: 50}
MIN_SHARE, MAX_SHARE = 1, 10000
SHARES_FILE = "workclasses.json"
CPU_V1 = Path("/sys/fs/cgroup/cpu")
# The appliance's groups weigh, against the host's other processes, what three unclassed
# processes do, whatever the shares: the shares split that among the classes, so a change
# of share moves CPU between Strata's classes, not between Strata and the rest of the host.
APPLIANCE_CPU_SHARES = 1024 * len(CLASSES)


class ShareError(ValueError):
    """A class or share that is not valid; the message names it."""


def check_share(name: str, share) -> int:
    """``share`` as an int, or :class:`ShareError` naming what is wrong."""
    if name not in CLASSES:
        raise ShareError(f"class: {name!r} is not a class of work (one of {', '.join(CLASSES)})")
    if isinstance(share, bool) or not isinstance(share, int) or not MIN_SHARE <= share <= MAX_SHARE:
        raise ShareError(f"share: must be a whole number from {MIN_SHARE} to {MAX_SHARE}, "
                         f"not {share!r}")
    return share


def cpu_shares(share: int) -> int:
    """The cgroup v1 ``cpu.shares`` of a share (a v2 weight): 100 -> 1024."""
    return max(2, share * 1024 // 100)


def background_fraction(shares: dict) -> float:
    """The fraction of its rate background work keeps while foreground work is busy (the I/O
    budget's ``foreground_share``): its share over its own plus the larger foreground one."""
    bg = shares[BACKGROUND]
    return bg / (bg + max(shares[SAMPLES], shares[CHECKPOINTS]))


def shares_path(data_dir: str | os.PathLike) -> Path:
    return Path(data_dir) / "run" / SHARES_FILE


def read_shares(data_dir: str | os.PathLike) -> dict:
    """The shares last written for ``data_dir`` (the defaults for any class not there)."""
    try:
        saved = json.loads(shares_path(data_dir).read_text())
    except (OSError, ValueError):
        saved = {}
    shares = dict(DEFAULT_SHARES)
    for name in CLASSES:
        try:
            shares[name] = check_share(name, saved.get(name))
        except ShareError:
            pass
    return shares


def write_shares(data_dir: str | os.PathLike, shares: dict) -> None:
    path = shares_path(data_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps({k: shares[k] for k in CLASSES}, sort_keys=True) + "\n")


class ClassGroups:
    """The cgroups of one data directory's classes of work (see the module's docstring).

    ``available`` is False where the v1 ``cpu`` hierarchy is missing or not writable (not
    root): then nothing is placed, and :meth:`status` says so."""

    def __init__(self, data_dir: str | os.PathLike, cpu_root: Path = CPU_V1):
        data_dir = Path(data_dir).resolve()
        tag = re.sub(r"[^A-Za-z0-9_.-]", "_", data_dir.name)[:40]
        digest = hashlib.sha256(str(data_dir).encode()).hexdigest()[:12]
        self.cpu_root = cpu_root
        self.base = cpu_root / "strata" / f"{tag}-{digest}"
        self.available = (cpu_root / "cpu.shares").exists() and os.access(cpu_root, os.W_OK)

    def group(self, name: str) -> Path:
        return self.base / name

    def apply(self, shares: dict) -> bool:
        """Make each class's group (if missing) with its share; False where unavailable."""
        if not self.available:
            return False
        self.base.mkdir(parents=True, exist_ok=True)
        for parent in (self.base.parent, self.base):
            (parent / "cpu.shares").write_text(f"{APPLIANCE_CPU_SHARES}\n")
        for name in CLASSES:
            group = self.group(name)
            group.mkdir(parents=True, exist_ok=True)
            (group / "cpu.shares").write_text(f"{cpu_shares(shares[name])}\n")
        return True

    def procs_file(self, name: str) -> Path | None:
        """The file a process writes ``0`` to so as to join class ``name`` (None: no groups)."""
        return self.group(name) / "cgroup.procs" if self.available else None

    def pids(self, name: str) -> list[int]:
        try:
            return [int(p) for p in (self.group(name) / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def status(self) -> dict:
        """Per class: its group, its ``cpu.shares`` and the PIDs in it, as the kernel says."""
        out = {}
        for name in CLASSES:
            group = self.group(name)
            try:
                shares = int((group / "cpu.shares").read_text())
            except (OSError, ValueError):
                shares = None
            out[name] = {"cgroup": str(group) if shares is not None else None,
                         "cpu_shares": shares, "pids": self.pids(name)}
        return out

    def remove(self) -> None:
        """Remove the (empty) groups after the run; a group still in use stays."""
        for name in CLASSES:
            try:
                self.group(name).rmdir()
            except OSError:
                pass
        for path in (self.base, self.base.parent):
            try:
                path.rmdir()
            except OSError:
                return


def own_cpu_group(proc_cgroup: str = "/proc/self/cgroup", cpu_root: Path = CPU_V1) -> Path | None:
    """The v1 ``cpu`` group this process is in (None where there is no such hierarchy)."""
    try:
        lines = Path(proc_cgroup).read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            return cpu_root / path.lstrip("/")
    return None


def thread_joiner(name: str, group: Path | None = None):
    """For a daemon in one class's group: a function that moves the calling *thread* into
    the group of class ``name`` (a sibling of the daemon's; cgroup v1 places threads one by
    one), so that work done for that class on the thread is weighed with its share. None
    where the daemon is not in a class's group, or already in ``name``'s."""
    group = own_cpu_group() if group is None else group
    if group is None or group.name not in CLASSES or group.name == name:
        return None
    tasks = group.parent / name / "tasks"
    if not tasks.exists():
        return None

    def join() -> None:
        try:
            with open(tasks, "w") as f:
                f.write("0\n")         # 0: the writing thread
        except OSError:
            pass                        # the thread stays in the daemon's group
    return join


def join_preexec(procs_file: Path | None, then=None):
    """A ``preexec_fn`` that puts the new process in a class's group (``procs_file``: from
    :meth:`ClassGroups.procs_file`), then runs ``then`` (another preexec) if given."""
    def preexec():
        if procs_file is not None:
            try:
                with open(procs_file, "w") as f:
                    f.write("0\n")
            except OSError:
                pass        # the daemon runs unweighted rather than not at all
        if then is not None:
            then()
    return preexec
