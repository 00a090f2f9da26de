"""Fixtures for the file service runtime tests: scratch dirs, a btrfs loop image, daemons, users.

Everything a test starts is stopped (by PID) and everything it attaches is detached in the
fixture teardown, even when the test fails.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile

import pytest

from services.file.runtime import (
    NfsServer,
    NfsSettings,
    SmbServer,
    SmbSettings,
    delete_smb_user,
    ensure_unix_user,
    set_smb_password,
)
from services.file.runtime.btrfs_mounts import bind_mount_self
from tests.kit import free_port


def need(*binaries: str) -> None:
    """Skip the calling test when one of ``binaries`` is not installed."""
    for name in binaries:
        if not (shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")):
            pytest.skip(f"{name} is not installed")


def run(*argv: str, **kw) -> subprocess.CompletedProcess:
    """Run a command, raising with its stderr on failure."""
    done = subprocess.run(argv, check=False, capture_output=True, text=True, **kw)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return done


@pytest.fixture
def scratch():
    """A temporary directory that smbd's unprivileged users can traverse."""
    path = tempfile.mkdtemp(prefix="strata-test-")
    os.chmod(path, 0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def make_share_dir(parent: str, name: str) -> str:
    """A world-writable directory (test users of any uid may write), with a .snapshots dir."""
    path = os.path.join(parent, name)
    os.makedirs(os.path.join(path, ".snapshots"), exist_ok=True)
    os.chmod(path, 0o777)
    return path


@pytest.fixture(scope="session")
def btrfs_pool():
    """A btrfs file system with quotas on one loop device (1 GiB sparse image).

    Yields its mount point; unmounts and detaches in teardown.
    """
    if os.geteuid() != 0:
        pytest.skip("needs root for losetup and mount")
    need("losetup", "mkfs.btrfs", "btrfs")
    base = tempfile.mkdtemp(prefix="strata-test-")
    os.chmod(base, 0o755)
    image, mnt = os.path.join(base, "pool.img"), os.path.join(base, "mnt")
    os.makedirs(mnt)
    loop = mounted = None
    try:
        with open(image, "wb") as f:
            f.truncate(1 << 30)
        loop = run("losetup", "-f", "--show", image).stdout.strip()
        run("mkfs.btrfs", "-f", "-q", loop)
        run("mount", loop, mnt)
        mounted = True
        run("btrfs", "quota", "enable", mnt)
        os.chmod(mnt, 0o755)
        yield mnt
    finally:
        if mounted:   # -R: also the bind mounts of subvolumes and snapshots
            subprocess.run(["umount", "-R", mnt], check=False, capture_output=True)
        if loop:
            subprocess.run(["losetup", "-d", loop], check=False, capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def make_subvolume(pool: str, name: str) -> str:
    """A btrfs subvolume (a Strata file system) with an empty ``.snapshots`` directory,
    bind-mounted onto itself so Ganesha can export it."""
    path = os.path.join(pool, name)
    run("btrfs", "subvolume", "create", path)
    os.makedirs(os.path.join(path, ".snapshots"))
    os.chmod(path, 0o777)
    bind_mount_self(path)
    return path


def make_snapshot(fs: str, name: str) -> str:
    """A read-only btrfs snapshot of ``fs`` at ``fs/.snapshots/name``, bind-mounted read-only."""
    path = os.path.join(fs, ".snapshots", name)
    run("btrfs", "subvolume", "snapshot", "-r", fs, path)
    bind_mount_self(path, read_only=True)
    return path


@pytest.fixture
def nfs_factory(scratch):
    """Start NfsServers on 127.0.0.1 (or a given address) at free ports; stops them all after."""
    need("ganesha.nfsd")
    servers = []

    def start(exports=(), bind_address="127.0.0.1", **settings):
        state = tempfile.mkdtemp(prefix="nfs-", dir=scratch)
        server = NfsServer(NfsSettings(state_dir=state, port=free_port(bind_address),
                                       bind_address=bind_address, **settings))
        servers.append(server)
        server.start(exports)
        return server

    try:
        yield start
    finally:
        for server in servers:
            server.stop()


@pytest.fixture
def smb_factory(scratch):
    """Start SmbServers on 127.0.0.1 at free ports; stops them all after."""
    need("smbd", "testparm", "smbcontrol", "smbpasswd", "smbclient")
    servers = []

    def start(shares=(), **settings):
        state = tempfile.mkdtemp(prefix="smb-", dir=scratch)
        server = SmbServer(SmbSettings(state_dir=state, port=free_port(),
                                       interfaces=["127.0.0.1"], **settings))
        servers.append(server)
        server.start(shares)
        return server

    try:
        yield start
    finally:
        for server in servers:
            server.stop()


@pytest.fixture
def smb_users():
    """Create SMB users named ``stratatest<random>`` in a server's passdb; removed after."""
    if os.geteuid() != 0:
        pytest.skip("needs root for useradd")
    need("useradd", "userdel", "pdbedit")
    created = []

    def add(server: SmbServer, password: str = "Strata-pw-1") -> tuple[str, str]:
        name = "stratatest" + secrets.token_hex(3)
        ensure_unix_user(name)
        created.append((server.conf_path, name))
        set_smb_password(server.conf_path, name, password)
        return name, password

    try:
        yield add
    finally:
        for conf, name in created:
            delete_smb_user(conf, name)
