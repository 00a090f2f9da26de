"""The processes of one run of `strata up` on one data directory, kept together (no Django).

`strata up` holds the data directory's lock for its whole life (a second one is refused),
ends what an earlier run of the same data directory left running, and keeps every process it
starts, however deep, in a cgroup of the run (cgroup v2: ``<cgroup2>/strata/<data dir's
name>-<hash>/run-<pid>``)::

    run = RunGroup(data_dir)
    run.lock()                          # AlreadyRunning: another strata up serves it
    for line in run.end_leftovers():    # an earlier run's processes and dead FUSE mounts
        print(line)
    run.start_reaper()                  # ends the whole run if this process dies, however
    run.join()                          # this process, and so every child, in the cgroup
    ...
    killed = run.sweep()                # after the stop: what was still running, killed
    run.close()                         # the reaper exits without touching anything

Where there is no writable cgroup2 tree (not root), each direct child still dies with
`strata up` (:func:`plumbing.process.die_with_parent`), and an earlier run's children are found by the PIDs
and start times recorded in ``run/daemons.json`` and by the pid files under ``run/``.
A process counts as the run's only if it is in the run's cgroup, or its PID and start time
are the ones recorded, or a pid file of the run names it and its command line names the data
directory: nothing else on the machine is ever signalled.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from plumbing.workclass import ClassGroups

LOCK_FILE = "strata-up.lock"
GRACE = 10.0            # SIGTERM, then SIGKILL after this many seconds


class AlreadyRunning(Exception):
    """Another `strata up` holds the data directory's lock."""


@dataclass(frozen=True)
class Proc:
    """A process as found: its PID, the start time that makes it this process and not a
    later one with the same PID, and its command's name."""

    pid: int
    start: int
    name: str

    def alive(self) -> bool:
        return start_ticks(self.pid) == self.start


def start_ticks(pid: int) -> int | None:
    """When the process started (clock ticks since boot), None if there is none. A zombie
    counts as gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return None if fields[0] == "Z" else int(fields[19])


def command_line(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def proc_of(pid: int) -> Proc | None:
    start = start_ticks(pid)
    if start is None:
        return None
    try:
        name = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None
    return Proc(pid, start, name)


def cgroup2_root() -> Path | None:
    """Where the cgroup v2 tree is mounted (``/sys/fs/cgroup`` or, on a host that also runs
    cgroup v1, e.g. ``/sys/fs/cgroup/unified``), if we may make groups in it."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        left, _, right = line.partition(" - ")
        if right.split()[:1] == ["cgroup2"]:
            root = Path(left.split()[4])
            if os.access(root, os.W_OK):
                return root
    return None


def signal_all(procs, signum: int) -> None:
    for p in procs:
        if p.alive():
            try:
                os.kill(p.pid, signum)
            except OSError:
                pass


def fuse_mounts_under(path: Path) -> list[str]:
    """Mountpoints of FUSE file systems (ceph-fuse) at or under ``path``, deepest first."""
    inside, found = str(path).rstrip("/") + "/", []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        left, _, right = line.partition(" - ")
        where = left.split()[4].replace("\\040", " ")
        if right.split()[0].startswith("fuse") and (where + "/").startswith(inside):
            found.append(where)
    return sorted(found, key=lambda m: -m.count("/"))


def mount_is_dead(where: str) -> bool:
    """A FUSE mount whose daemon is gone answers ENOTCONN (ECONNABORTED on some kernels)."""
    try:
        os.stat(where)
        return False
    except OSError as exc:
        return exc.errno in (errno.ENOTCONN, errno.ECONNABORTED)


def unmount_dead_fuse(path: Path) -> list[str]:
    """Lazily unmount every dead FUSE mount under ``path``; the mountpoints unmounted."""
    done = []
    for where in fuse_mounts_under(path):
        if mount_is_dead(where):
            subprocess.run(["umount", "-l", where], capture_output=True, timeout=30)
            done.append(where)
    return done


class RunGroup:
    """One data directory's run of `strata up`: its lock, its cgroup, its reaper."""

    def __init__(self, data_dir: str | os.PathLike, cgroup: str | os.PathLike | None = None):
        self.data_dir = Path(data_dir).resolve()
        self.run_dir = self.data_dir / "run"
        self.root = cgroup2_root()
        tag = re.sub(r"[^A-Za-z0-9_.-]", "_", self.data_dir.name)[:40]
        digest = hashlib.sha256(str(self.data_dir).encode()).hexdigest()[:12]
        # the data directory's group, and in it one group per run: an earlier run's reaper
        # that is still at work kills its own run's group, never this one's
        self.base = self.root / "strata" / f"{tag}-{digest}" if self.root else None
        self.cgroup = Path(cgroup) if cgroup else \
            (self.base / f"run-{os.getpid()}" if self.base else None)
        self._home: Path | None = None     # the cgroup this process came from
        self._lock_fd: int | None = None
        self._reaper: subprocess.Popen | None = None
        self._reaper_pipe: int | None = None

    # -- the lock --------------------------------------------------------------------------
    def lock(self) -> None:
        """Hold the data directory's lock until this process ends; :class:`AlreadyRunning`
        (naming the holder) if another process holds it."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise AlreadyRunning(f"{self.data_dir} is already served by strata up "
                                 f"(pid {holder}); stop that one first") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    # -- an earlier run's leftovers --------------------------------------------------------
    def cgroup_procs(self, group: Path | None = None) -> list[Proc]:
        """The processes in the run's cgroup (or ``group``), this one left out."""
        group = group or self.cgroup
        if group is None:
            return []
        try:
            pids = (group / "cgroup.procs").read_text().split()
        except OSError:
            return []
        return [p for p in map(proc_of, map(int, pids)) if p and p.pid != os.getpid()]

    def earlier_groups(self) -> list[Path]:
        """The cgroups of earlier runs of this data directory (and the data directory's own
        group, where runs of older versions put their processes)."""
        if self.base is None or not self.base.is_dir():
            return []
        return [g for g in self.base.glob("run-*") if g != self.cgroup] + [self.base]

    def recorded_procs(self) -> list[Proc]:
        """Processes named by ``run/daemons.json`` (PID and start time both matching) and by
        pid files under ``run/`` (the command line naming the data directory)."""
        found = []
        try:
            states = json.loads((self.run_dir / "daemons.json").read_text())
        except (OSError, ValueError):
            states = {}
        for state in states.values():
            pid, start = state.get("pid"), state.get("start_ticks")
            if pid and start and start_ticks(pid) == start:
                found.append(proc_of(pid))
        inside = str(self.data_dir) + "/"
        for pidfile in self.run_dir.rglob("*.pid"):
            try:
                pid = int(pidfile.read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
            if pid != os.getpid() and any(inside in arg for arg in command_line(pid)):
                found.append(proc_of(pid))
        return [p for p in found if p]

    def leftovers(self) -> list[Proc]:
        """What an earlier run of this data directory left running."""
        found = {p.pid: p for g in self.earlier_groups() for p in self.cgroup_procs(g)}
        found.update({p.pid: p for p in self.recorded_procs()})
        return sorted(found.values(), key=lambda p: p.pid)

    def end_leftovers(self, grace: float = GRACE) -> list[str]:
        """End an earlier run's processes, unmount its dead FUSE mounts, remove its pid
        files; what was done, one line each (nothing: [])."""
        said = []
        procs = self.leftovers()
        if procs:
            names = ", ".join(f"{p.name} ({p.pid})" for p in procs)
            said.append(f"an earlier run of {self.data_dir} left {len(procs)} process(es) "
                        f"running: {names}; ending them")
            killed = self.end_all(procs, grace, self.earlier_groups())
            if killed:
                said.append("killed after ignoring SIGTERM for "
                            f"{grace:.0f} s: " + ", ".join(f"{p.name} ({p.pid})" for p in killed))
        for group in self.earlier_groups():
            if group != self.base:
                _remove_group(group)
        for where in unmount_dead_fuse(self.data_dir):
            said.append(f"unmounted the dead FUSE mount at {where} (its daemon was gone)")
        for pidfile in self.run_dir.rglob("*.pid"):
            try:
                pid = int(pidfile.read_text().split()[0])
            except (OSError, ValueError, IndexError):
                pid = None
            if pid is None or start_ticks(pid) is None:
                pidfile.unlink(missing_ok=True)
        return said

    # -- this run ------------------------------------------------------------------------
    def join(self) -> bool:
        """Move this process into the run's (new, empty) cgroup, so that everything it
        starts from now on is in it too; False without a cgroup2 tree we may use."""
        if self.cgroup is None:
            return False
        try:
            self._home = self.root / _own_cgroup().lstrip("/")
            self.cgroup.mkdir(parents=True, exist_ok=True)
            (self.cgroup / "cgroup.procs").write_text(f"{os.getpid()}\n")
        except OSError as exc:
            print(f"strata up: no cgroup for this run ({exc}); children are tied to "
                  "strata up one by one", file=sys.stderr, flush=True)
            self.cgroup = None
            return False
        return True

    def start_reaper(self) -> None:
        """A small process outside the run, in a session of its own, that ends the whole run
        (every process of the cgroup, then dead FUSE mounts) once this process is gone
        without :meth:`close`: its pipe from us reads end-of-file with nothing said."""
        if self.cgroup is None:
            return
        read, write = os.pipe()
        log = self.data_dir / "log" / "reaper.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            self._reaper = subprocess.Popen(
                [sys.executable, "-m", "plumbing.rungroup", str(self.data_dir), str(read),
                 str(os.getpid()), str(self.cgroup)],
                pass_fds=(read,), stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                start_new_session=True,
                env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
        os.close(read)
        self._reaper_pipe = write

    def sweep(self, grace: float = 5.0) -> list[Proc]:
        """After the stop: leave the run's cgroup and end whatever of the run still runs (a
        daemon's own children, a FUSE daemon): SIGTERM, then the whole cgroup killed after
        ``grace`` seconds. What was found still running."""
        if self.cgroup is None:
            return []
        self._leave()
        left = self.cgroup_procs()
        if left:
            self.end_all(left, grace, [self.cgroup])
        return left

    def end_all(self, procs: list[Proc], grace: float, groups: list[Path]) -> list[Proc]:
        """SIGTERM ``procs``, then after ``grace`` seconds SIGKILL every process of
        ``groups`` (a run's group at once, ``cgroup.kill``: also what they forked meanwhile);
        the ones of ``procs`` that had to be killed. Call it from outside those groups."""
        signal_all(procs, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(p.alive() for p in procs):
            time.sleep(0.1)
        killed = [p for p in procs if p.alive()]
        signal_all(killed, signal.SIGKILL)
        for group in groups:
            if not self.cgroup_procs(group):
                continue
            try:
                if group == self.base:      # it holds the runs' groups: never kill it whole
                    raise OSError
                (group / "cgroup.kill").write_text("1\n")
            except OSError:                 # or a kernel before 5.14: one by one
                signal_all(self.cgroup_procs(group), signal.SIGKILL)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and (any(self.cgroup_procs(g) for g in groups)
                                               or any(p.alive() for p in killed)):
            time.sleep(0.05)
        return killed

    def _leave(self) -> None:
        """Back to the cgroup this process came from."""
        home = self._home if self._home and self._home.is_dir() else self.root
        try:
            (home / "cgroup.procs").write_text(f"{os.getpid()}\n")
        except OSError:
            pass

    def close(self) -> None:
        """The run ended cleanly: tell the reaper (it exits touching nothing), leave and
        remove the cgroup."""
        if self._reaper_pipe is not None:
            os.write(self._reaper_pipe, b"stopped")
            os.close(self._reaper_pipe)
            self._reaper_pipe = None
            try:
                self._reaper.wait(10)
            except subprocess.TimeoutExpired:
                pass
        if self.cgroup is not None:
            self._leave()
            _remove_group(self.cgroup)


def _own_cgroup() -> str:
    """This process's path in the cgroup v2 tree (``0::/path``)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        if line.startswith("0::"):
            return line[3:]
    return "/"


def _remove_group(group: Path) -> None:
    """Remove a run's (empty) group, and the data directory's once no run is left in it."""
    for path in (group, group.parent):
        try:
            path.rmdir()
        except OSError:
            return


def reap(data_dir: str, fd: int, supervisor: int, cgroup: str) -> int:
    """The reaper (see :meth:`RunGroup.start_reaper`)."""
    said = b""
    while True:
        chunk = os.read(fd, 64)
        if not chunk:
            break
        said += chunk
    if said:
        return 0
    run = RunGroup(data_dir, cgroup)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    # the supervisor may still be exiting: give it a moment to leave the cgroup
    procs = [p for p in run.cgroup_procs() if p.pid != supervisor]
    print(f"{stamp} strata up (pid {supervisor}) ended without stopping its run; ending "
          + (", ".join(f"{p.name} ({p.pid})" for p in procs) or "nothing"), flush=True)
    killed = run.end_all(procs, GRACE, [run.cgroup])
    if killed:
        print(f"  killed after ignoring SIGTERM for {GRACE:.0f} s: " + ", ".join(f"{p.name} ({p.pid})" for p in killed),
              flush=True)
    for where in unmount_dead_fuse(run.data_dir):
        print(f"  unmounted the dead FUSE mount at {where}", flush=True)
    _remove_group(run.cgroup)
    ClassGroups(run.data_dir).remove()      # the classes of work's (now empty) cpu groups
    return 0


if __name__ == "__main__":
    sys.exit(reap(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]))
