"""Child-process supervision (no Django): start a daemon in its own session with its log
file, wait until it answers (a TCP port, a unix socket, any check) or dies, read the last
lines of its log for the error message, stop it with SIGTERM and then SIGKILL.

    child = Child("smbd", argv, "/run/smb/smbd.log").start()
    try:
        child.wait_ready(lambda: port_open("127.0.0.1", 445), timeout=20, what="the SMB port")
    except ChildFailed as exc:          # exited, or not ready in time; exc.tail = its log
        child.stop()
        raise
    ...
    child.stop(timeout=10)              # ``stop=`` callable first (e.g. tgtd: tgtadm)

:class:`DaemonSpec` is what a service's ``up.py`` tells `strata up` about its daemons.
"""
from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from plumbing.workclass import join_preexec


@dataclass
class DaemonSpec:
    """One long-running child of `strata up`.

    A service that runs daemons provides ``services/<name>/up.py`` with
    ``add_arguments(parser)`` and ``daemons(data_dir, options) -> list[DaemonSpec]``;
    `strata up` starts them while the database is migrated (they must not need it) and
    before the plane's bootstrap, supervises them (one that dies is started again, see
    :class:`RestartPolicy`; then ``reconcile`` names the service whose
    ``bootstrap.reconcile()`` puts back what the daemon held in memory: targets, LUNs,
    exports) and stops them together, after the plane's processes.
    """

    name: str
    argv: list
    ready: Optional[Callable[[], bool]] = None      # polled until True (start timeout 60 s)
    stop: Optional[Callable[[subprocess.Popen], None]] = None  # before SIGTERM (default: none)
    env: dict = field(default_factory=dict)          # added to the environment
    prepare: Optional[Callable[[], None]] = None    # before each restart (stale sockets, config)
    reconcile: Optional[str] = None                  # service whose state is re-applied after
    #                                                  a restart (its bootstrap.reconcile())
    work_class: Optional[str] = None                 # the class of work whose cgroup it runs in
    #                                                  (plumbing.workclass; None: the run's own)


class RestartPolicy:
    """When to start a daemon again after it exited, and when to give up.

    A daemon that ran at least ``stable_after`` seconds is started again after ``backoff``
    seconds; each further exit within ``stable_after`` of its start doubles the wait (at most
    ``max_backoff``), and the ``give_up_after``-th such quick exit in a row gives up::

        policy = RestartPolicy()
        delay = policy.exited(ran_for=3600.0)   # 0.5: start it again in half a second
        ...                                     # None: it keeps failing at once; give up
    """

    def __init__(self, backoff: float = 0.5, max_backoff: float = 30.0,
                 stable_after: float = 30.0, give_up_after: int = 5):
        self.backoff, self.max_backoff = backoff, max_backoff
        self.stable_after, self.give_up_after = stable_after, give_up_after
        self.quick_exits = 0

    def exited(self, ran_for: float) -> float | None:
        """Seconds to wait before the next start, or None to give up."""
        self.quick_exits = self.quick_exits + 1 if ran_for < self.stable_after else 0
        if self.quick_exits >= self.give_up_after:
            return None
        return min(self.backoff * 2 ** self.quick_exits, self.max_backoff)


def describe_exit(returncode: int) -> dict:
    """``{"code": N, "signal": None}`` or, for a child killed by a signal (a negative
    returncode), ``{"code": None, "signal": "SIGKILL"}``."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return {"code": None, "signal": name}
    return {"code": returncode, "signal": None}


class ChildFailed(Exception):
    """A child exited, or was not ready in time, while being started.

    ``exited`` says which; ``returncode`` is its exit status (None while it runs); ``tail``
    holds the last lines of its log, where the daemon's own error message usually is.
    """

    def __init__(self, message: str, *, exited: bool, returncode: int | None, tail: str):
        super().__init__(message)
        self.exited, self.returncode, self.tail = exited, returncode, tail


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (for tests and defaults)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


WILDCARDS = ("", "0.0.0.0", "::", "*")  # "every interface"


def data_address(options: dict, own_key: str) -> str:
    """The address a data service (S3, NFS/SMB, block) listens on, from `strata up`'s
    options: its own option (``own_key``, e.g. ``block_host``), else ``--data-host`` (every
    data service), else ``--host`` (the web server's too), else 127.0.0.1."""
    return options.get(own_key) or options.get("data_host") or options.get("host") \
        or "127.0.0.1"


def probe_address(bind_address: str) -> str:
    """The address to reach a server bound to ``bind_address`` on this machine (a wildcard:
    loopback)."""
    return "127.0.0.1" if bind_address in WILDCARDS else bind_address


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    """True if a TCP connection to ``host:port`` succeeds."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def socket_answers(path: str | os.PathLike, timeout: float = 0.5) -> bool:
    """True if a connection to the unix socket ``path`` succeeds."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(os.fspath(path))
            return True
    except OSError:
        return False


def wait_until(check: Callable[[], bool], timeout: float, poll: float = 0.05,
               alive: Callable[[], bool] | None = None) -> bool:
    """Poll ``check`` until it is True (True) or ``timeout`` passes or ``alive()`` turns
    False (False). A check that raises counts as not yet."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return True
        except Exception:
            pass
        if (alive is not None and not alive()) or time.monotonic() >= deadline:
            return False
        time.sleep(poll)


def wait_for_port(host: str, port: int, timeout: float = 10.0, child: Child | None = None) -> bool:
    """True once something accepts TCP connections on host:port; False after ``timeout`` or
    once ``child`` has died."""
    return wait_until(lambda: port_open(host, port), timeout,
                      alive=child.running if child else None)


def wait_for_socket(path: str | os.PathLike, timeout: float = 10.0,
                    child: Child | None = None) -> bool:
    """True once the unix socket ``path`` accepts connections; False after ``timeout`` or once
    ``child`` has died."""
    return wait_until(lambda: socket_answers(path), timeout,
                      alive=child.running if child else None)


def log_tail(path: str | os.PathLike, lines: int = 15, max_bytes: int = 8192) -> str:
    """The last ``lines`` lines of a log file ('' if it cannot be read)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - max_bytes))
            return b"\n".join(f.read().splitlines()[-lines:]).decode("utf-8", "replace")
    except OSError:
        return ""


def terminate(proc: subprocess.Popen, timeout: float = 10.0, kill_wait: float = 5.0) -> bool:
    """SIGTERM ``proc`` (this PID only) and wait; SIGKILL it after ``timeout`` seconds.
    True if it had to be killed."""
    if proc.poll() is not None:
        return False
    try:
        proc.send_signal(signal.SIGTERM)
    except ProcessLookupError:
        return False
    try:
        proc.wait(timeout)
        return False
    except subprocess.TimeoutExpired:
        proc.kill()
        try:
            proc.wait(kill_wait)
        except subprocess.TimeoutExpired:
            pass
        return True


PR_SET_PDEATHSIG = 1


def die_with_parent(signum: int = signal.SIGTERM):
    """A ``preexec_fn`` tying a child to the process that starts it: the kernel sends it
    ``signum`` once the thread that started it is gone, however the process ended (kill -9
    too). Only for children started from a thread that lives as long as the process (the
    main thread of `strata up`)."""
    parent = os.getpid()
    libc = ctypes.CDLL(None, use_errno=True)

    def preexec() -> None:
        libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
        if os.getppid() != parent:        # the parent died before prctl: do it ourselves
            os.kill(os.getpid(), signum)
    return preexec


class Child:
    """One daemon we start as a foreground child, in its own session (so that signals sent
    to our terminal or process group never reach it, and its own group signals stay its
    own), stdout and stderr appended to ``log``.

    ``stop``, if given, is called with the Popen before SIGTERM (for daemons that ignore it).
    ``tied``: the child gets SIGTERM from the kernel once the thread that started it ends
    (:func:`die_with_parent`), so it never outlives a supervisor that was killed.
    """

    def __init__(self, name: str, argv: list, log: str | os.PathLike, *,
                 env: dict | None = None, cwd: str | os.PathLike | None = None,
                 stop: Callable[[subprocess.Popen], None] | None = None, tied: bool = False,
                 cgroup_procs: str | os.PathLike | None = None):
        self.name, self.argv, self.log = name, list(argv), Path(log)
        self.env, self.cwd, self.custom_stop, self.tied = env, cwd, stop, tied
        self.cgroup_procs = cgroup_procs   # joined before exec (a class of work's group)
        self.proc: subprocess.Popen | None = None

    def start(self) -> Child:
        """Spawn the child; FileNotFoundError if its program is not installed."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, env=self.env, cwd=self.cwd,
                                         close_fds=True, start_new_session=True,
                                         preexec_fn=self._preexec())
        return self

    def _preexec(self):
        tie = die_with_parent() if self.tied else None
        if self.cgroup_procs is None:
            return tie
        return join_preexec(Path(self.cgroup_procs), tie)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def returncode(self) -> int | None:
        """Exit status once it has exited, else None."""
        return self.proc.poll() if self.proc else None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, lines: int = 15) -> str:
        """The last lines of its log."""
        return log_tail(self.log, lines)

    def wait_ready(self, ready: Callable[[], bool], timeout: float, what: str = "starting",
                   poll: float = 0.05) -> None:
        """Return once ``ready()`` is True; raise :class:`ChildFailed` if the child exits first
        or ``timeout`` passes (the child is left as it is)."""
        if wait_until(ready, timeout, poll, alive=self.running):
            return
        exited = not self.running()
        state = (f"exited with status {self.returncode}" if exited
                 else f"not ready after {timeout:.0f}s")
        raise ChildFailed(f"{self.name} {state} ({what})", exited=exited,
                          returncode=self.returncode, tail=self.tail())

    def wait_exit(self, timeout: float) -> bool:
        """True once the child has exited (or was never started)."""
        if self.proc is None:
            return True
        try:
            self.proc.wait(timeout)
            return True
        except subprocess.TimeoutExpired:
            return False

    def send_signal(self, signum: int) -> None:
        """Signal our child (never anything else)."""
        if self.running():
            self.proc.send_signal(signum)

    def stop(self, timeout: float = 10.0,
             on_error: Callable[[Exception], None] | None = None) -> bool:
        """The custom stop (if any, given at most ``timeout`` seconds), then SIGTERM, then
        SIGKILL after ``timeout`` seconds. True if it had to be killed. An error of the
        custom stop goes to ``on_error``, or is raised once the child is stopped anyway; one
        that hangs (a daemon that no longer answers its control socket) is an error too."""
        if not self.running():
            return False
        error = None
        if self.custom_stop is not None:
            error = self._custom_stop(timeout)
        killed = terminate(self.proc, timeout)
        if error is not None:
            if on_error is None:
                raise error
            on_error(error)
        return killed

    def _custom_stop(self, timeout: float) -> Exception | None:
        """Run the custom stop in a thread, waiting at most ``timeout`` seconds (or until
        the child exited); its error, or a TimeoutError if it did not end in time."""
        errors: list[Exception] = []

        def run() -> None:
            try:
                self.custom_stop(self.proc)
            except Exception as exc:
                errors.append(exc)

        thread = threading.Thread(target=run, daemon=True, name=f"stop {self.name}")
        thread.start()
        thread.join(timeout)
        if thread.is_alive():
            return TimeoutError(f"its own stop did not end in {timeout:.0f} s")
        return errors[0] if errors else None
