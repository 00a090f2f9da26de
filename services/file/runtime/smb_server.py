"""Supervisor for Samba's smbd: validate with testparm, install, reload, health-check, stop."""

from __future__ import annotations

import ipaddress
import os
import subprocess
import tempfile
import threading

from plumbing.atomic import write_if_changed
from plumbing.process import port_open

from .errors import (
    ConfigValidationError,
    DaemonStartError,
    FilesystemMissing,
    ReloadError,
)
from .process import ChildDaemon, require_binary
from .samba import (
    STATE_SUBDIRS,
    build_smb_config,
    dfree_scripts,
    render_smb_conf,
    smb_conf_path,
)
from .specs import SmbSettings, SmbShare

# testparm exits 0 on these, but they mean the config is not what we meant
_TESTPARM_FATAL = ("Unknown parameter encountered", "Ignoring unknown parameter", "ERROR:",
                   "Ignoring invalid value")


def validate_smb_conf(text: str, workdir: str) -> None:
    """Run ``testparm -s`` on ``text`` in a temporary file; raise ConfigValidationError."""
    testparm = require_binary("testparm")
    fd, path = tempfile.mkstemp(prefix=".smb.conf.check.", dir=workdir)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        done = subprocess.run([testparm, "-s", path], stdin=subprocess.DEVNULL,
                              check=False, capture_output=True, text=True, timeout=60)
    finally:
        os.unlink(path)
    problems = [line for line in done.stderr.splitlines()
                if any(marker in line for marker in _TESTPARM_FATAL)]
    if done.returncode != 0 or problems:
        detail = "\n".join(problems) or done.stderr.strip()
        raise ConfigValidationError(f"testparm refused the generated smb.conf "
                                    f"(exit {done.returncode}):\n{detail}")


class SmbServer(ChildDaemon):
    """One ``smbd`` we started, with every state directory under ``settings.state_dir``.

    Usage: ``server = SmbServer(settings); server.start(shares); server.apply(new_shares);
    server.stop()``. ``apply`` validates with testparm before installing and raises
    (keeping the previous config installed and serving) when anything fails.
    """

    name = "smbd"

    def __init__(self, settings: SmbSettings) -> None:
        super().__init__()
        self.settings = settings
        self.conf_path = smb_conf_path(settings)
        self.log_path = os.path.join(settings.state_dir, "smbd.log")
        self.shares: list[SmbShare] = []
        self._lock = threading.Lock()

    def start(self, shares: list[SmbShare] = (), timeout: float = 20.0) -> None:
        """Install the config for ``shares``, start smbd in the foreground, wait for its port."""
        binary = require_binary("smbd")
        # smbd runs the dfree scripts as the connected user: they must reach state_dir/dfree
        os.makedirs(self.settings.state_dir, exist_ok=True)
        os.chmod(self.settings.state_dir, 0o755)
        for sub in STATE_SUBDIRS:
            os.makedirs(os.path.join(self.settings.state_dir, sub), mode=0o755, exist_ok=True)
        os.chmod(os.path.join(self.settings.state_dir, "private"), 0o700)
        shares = list(shares)
        self._install(shares)
        self._spawn([binary, "--foreground", "--no-process-group", "--debug-stdout",
                     f"--configfile={self.conf_path}"], self.log_path)
        try:
            self._wait_until(self.healthy, timeout, "waiting for the SMB port", self.log_path)
        except DaemonStartError:
            self.stop()
            raise
        self.shares = shares

    def probe_host(self) -> str:
        """The address a health check connects to: the first IP in ``interfaces``, else loopback."""
        for iface in self.settings.interfaces:
            try:
                return str(ipaddress.ip_interface(iface).ip)
            except ValueError:
                continue
        return "127.0.0.1"

    def healthy(self) -> bool:
        """True if our smbd is alive and accepts TCP connections on its port."""
        return self.is_running() and port_open(self.probe_host(), self.settings.port)

    def apply(self, shares: list[SmbShare]) -> bool:
        """Make the running smbd serve exactly ``shares``; True if the config changed.

        Build -> render -> testparm on a temporary file -> install if changed ->
        ``smbcontrol smbd reload-config`` -> health-check. A refused config is never
        installed; a failed reload puts the previous config back before raising.
        """
        shares = list(shares)
        with self._lock:
            old = _read(self.conf_path)
            if not self._install(shares):
                self.shares = shares
                return False
            if self.is_running():
                try:
                    self.reload()
                except ReloadError as failure:
                    if old is not None:
                        write_if_changed(self.conf_path, old)
                        try:
                            self.reload()
                        except ReloadError as second:
                            raise ReloadError(f"{failure}\nRestoring the previous config "
                                              f"also failed: {second}") from failure
                    raise
            self.shares = shares
            return True

    def reload(self) -> None:
        """Ask our smbd to re-read smb.conf, then health-check; raise ReloadError on failure."""
        smbcontrol = require_binary("smbcontrol")
        done = subprocess.run([smbcontrol, f"--configfile={self.conf_path}", "smbd",
                               "reload-config"], stdin=subprocess.DEVNULL,
                              check=False, capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            raise ReloadError(f"smbcontrol smbd reload-config failed (exit {done.returncode}): "
                              f"{(done.stderr or done.stdout).strip()}")
        # reload-config only queues a message; smbd's parent handles its messages in order,
        # so once it answers a ping it has re-read the config and new sessions see the shares
        # (without this, a share added within the same second could be unknown to the next
        # client: NT_STATUS_BAD_NETWORK_NAME).
        subprocess.run([smbcontrol, f"--configfile={self.conf_path}", "--timeout=10", "smbd",
                        "ping"], stdin=subprocess.DEVNULL, check=False, capture_output=True,
                       timeout=30)
        if not self.healthy():
            raise ReloadError("smbd is not accepting connections after reload; "
                              f"see {self.log_path}")

    def close_share(self, name: str) -> None:
        """Disconnect every client of share ``name`` (``smbcontrol smbd close-share``): after
        its path changed, clients reconnect and get the new path. Raises ReloadError."""
        smbcontrol = require_binary("smbcontrol")
        done = subprocess.run([smbcontrol, f"--configfile={self.conf_path}", "smbd",
                               "close-share", name], stdin=subprocess.DEVNULL,
                              check=False, capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            raise ReloadError(f"smbcontrol smbd close-share {name} failed (exit "
                              f"{done.returncode}): {(done.stderr or done.stdout).strip()}")

    def _install(self, shares: list[SmbShare]) -> bool:
        for share in shares:
            if not os.path.isdir(share.path):
                raise FilesystemMissing(f"share {share.name!r}: path {share.path!r} does not "
                                        "exist (was its file system deleted?)")
        text = render_smb_conf(build_smb_config(self.settings, shares))
        validate_smb_conf(text, self.settings.state_dir)
        for path, script in dfree_scripts(self.settings, shares).items():
            write_if_changed(path, script, 0o755)
        return write_if_changed(self.conf_path, text)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return None
