"""Several gateway processes on one port (``--workers N``, N > 1).

The parent binds the socket once and starts N workers, each
``python -m services.object.gateway --config ... --worker-fd FD --worker-slot I``, all
accepting on that one socket (the kernel gives each new connection to one of them; a
connection stays with its worker). The parent serves nothing: it does what a start does once
for the data root (empties ``tmp/``, marks every worker's sequence floor idle), starts the
workers, starts one again when it dies (after :class:`plumbing.process.RestartPolicy`'s
back-off; the others keep serving meanwhile, and connections waiting in the socket's queue
go to them), and on SIGTERM or SIGINT stops them all. Worker 0 runs the background jobs
(compaction, lifecycle, orphan collection); every worker is killed with the parent
(``PR_SET_PDEATHSIG``, SIGKILL), so a ``kill -9`` of the parent is a crash of the whole
gateway, and leaves no worker holding the port.

What the workers share, and how it stays consistent, is in :mod:`.shared` and the README
(services/object/README.md, "Worker processes").

The parent keeps a record of its workers next to the config (``workers.json``, rewritten
atomically whenever a worker starts or exits; the plane's health shows it)::

    {"workers": 2, "restarts": 1,
     "last_restart": {"worker": 1, "pid": 4242, "reason": "SIGKILL", "at": "2026-..."},
     "slots": {"0": {"pid": 4240, "state": "running", "restarts": 0, "started_at": "..."}, ...}}
"""
from __future__ import annotations

import ctypes
import errno
import logging
import os
import signal
import socket
import json
import subprocess
import sys
import time
from datetime import datetime, timezone

from plumbing.atomic import write_atomic
from plumbing.process import RestartPolicy, describe_exit

from .config import ConfigWatcher
from .shared import IDLE, Generation, SeqFloors
from .storage import reset_tmp

log = logging.getLogger("strata.s3.workers")
POLL_SECONDS = 0.1
STOP_SECONDS = 10.0
RECORD_FILE = "workers.json"  # next to the config (services.object.gatewayconf.workers_path)
ROOT_CHECK_SECONDS = 2.0
REMOUNTED = 75   # exit status (EX_TEMPFAIL) when the data root was mounted again under us


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def exit_reason(returncode: int) -> str:
    """``SIGKILL`` or ``code 1``."""
    how = describe_exit(returncode)
    return how["signal"] or f"code {how['code']}"


def bind(host: str, port: int, patience: float = 3.0) -> socket.socket:
    """The one socket every worker accepts on (inherited by them), bound but not listening:
    the first worker that serves makes it listen, so a client is refused (and tries again)
    until a worker answers, rather than waiting in the queue of a socket nobody serves yet.
    The workers of a gateway that was just killed may hold the port for a moment more: the
    bind is retried for ``patience`` seconds."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    deadline = time.monotonic() + patience
    while True:
        try:
            sock.bind((host, port))
            break
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE or time.monotonic() > deadline:
                sock.close()
                raise
            time.sleep(0.1)
    sock.set_inheritable(True)
    return sock


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this worker when the parent dies (Linux); if the parent is
    already gone, exit."""
    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent or parent == 1:
        sys.exit(0)


class Supervisor:
    """The parent: N workers on one socket, restarted when they die."""

    def __init__(self, config_path: str, host: str, port: int, workers: int, worker_args: list[str]):
        self.config_path, self.workers, self.worker_args = config_path, workers, worker_args
        self.sock = bind(host, port)
        self.procs: list[subprocess.Popen | None] = [None] * workers
        self.started_at = [0.0] * workers
        self.due: list[float | None] = [0.0] * workers
        self.policies = [RestartPolicy() for _ in range(workers)]
        self.stopping = False
        self.status = 0
        self.record_path = os.path.join(os.path.dirname(os.path.abspath(config_path)), RECORD_FILE)
        self.record = {"workers": workers, "restarts": 0, "last_restart": None,
                       "slots": {str(slot): {"pid": None, "state": "starting", "restarts": 0}
                                 for slot in range(workers)}}

    def _write_record(self) -> None:
        try:
            write_atomic(self.record_path, json.dumps(self.record, indent=1, sort_keys=True) + "\n")
        except OSError as exc:  # the record is for the health page: serving goes on without it
            log.warning("cannot write %s: %s", self.record_path, exc)

    def _spawn(self, slot: int, started: float) -> None:
        argv = [sys.executable, "-m", "services.object.gateway", "--config", self.config_path,
                *self.worker_args, "--worker-fd", str(self.sock.fileno()), "--worker-slot", str(slot),
                "--started", repr(started)]
        self.procs[slot] = subprocess.Popen(argv, pass_fds=(self.sock.fileno(),))
        self.started_at[slot] = time.monotonic()
        self.due[slot] = None
        log.info("worker %d started (pid %d)", slot, self.procs[slot].pid)
        self.record["slots"][str(slot)].update(pid=self.procs[slot].pid, state="running", started_at=_now())
        self._write_record()

    def _stop(self, signum, _frame) -> None:
        self.stopping = True

    def run(self) -> int:
        """Serve until SIGTERM/SIGINT (or a worker that keeps dying at once); the exit status."""
        root = ConfigWatcher(self.config_path).config["data_root"]
        os.makedirs(root, exist_ok=True)
        reset_tmp(root)  # partial bodies of a previous run: no worker is writing yet
        Generation.restart(root)
        floors = SeqFloors(root, None)
        floors.reset(self.workers)
        started = time.time()  # files older than this belong to no PUT in flight
        root_dev, next_check = os.stat(root).st_dev, 0.0
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        try:
            while not self.stopping:
                now = time.monotonic()
                if now >= next_check:
                    next_check = now + ROOT_CHECK_SECONDS
                    if _remounted(root, root_dev):
                        # its pool was attached again (a ceph-fuse that died, mounted anew):
                        # every open index and file of this gateway is on the dead mount.
                        # `strata up` starts the gateway again, afresh on the new mount
                        log.warning("the data root %s was mounted again; stopping so as to "
                                    "start afresh on it", root)
                        self.stopping, self.status = True, REMOUNTED
                        break
                for slot, proc in enumerate(self.procs):
                    if proc is not None and proc.poll() is not None:
                        self.procs[slot] = None
                        floors.set(IDLE, slot)  # its writes in flight died with it
                        delay = self.policies[slot].exited(now - self.started_at[slot])
                        log.warning("worker %d (pid %d) exited %s; %s", slot, proc.pid,
                                    describe_exit(proc.returncode),
                                    "giving up" if delay is None else f"starting it again in {delay:.1f}s")
                        self._exited(slot, proc, delay is not None)
                        if delay is None:
                            self.stopping, self.status = True, 1
                            break
                        self.due[slot] = now + delay
                    if self.procs[slot] is None and self.due[slot] is not None and now >= self.due[slot]:
                        self._spawn(slot, started)
                time.sleep(POLL_SECONDS)
        finally:
            self._stop_all()
        return self.status

    def _exited(self, slot: int, proc: subprocess.Popen, restarting: bool) -> None:
        """Record a worker's exit (a restart, unless the parent gives up)."""
        exited = {"worker": slot, "pid": proc.pid, "reason": exit_reason(proc.returncode), "at": _now()}
        entry = self.record["slots"][str(slot)]
        entry.update(state="restarting" if restarting else "failed", last_exit=exited)
        if restarting:
            entry["restarts"] += 1
            self.record["restarts"] += 1
            self.record["last_restart"] = exited
        self._write_record()

    def _stop_all(self) -> None:
        live = [p for p in self.procs if p is not None and p.poll() is None]
        for proc in live:
            proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_SECONDS
        for proc in live:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.sock.close()
        for entry in self.record["slots"].values():
            if entry["state"] in ("running", "restarting", "starting"):
                entry["state"] = "stopped"
        self._write_record()


def _remounted(root: str, dev: int) -> bool:
    """Whether ``root`` is now on another mount than the one it was on (``dev``); a dead
    mount (ENOTCONN) is not yet: the gateway waits for the pool to be mounted again."""
    try:
        return os.stat(root).st_dev != dev
    except OSError:
        return False
