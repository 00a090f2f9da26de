"""Fixtures for the block transport tests: real daemons on 127.0.0.1, state in a temp dir."""

import os
import shutil
import tempfile

import pytest

from tests.kit import free_port


def need(*binaries):
    """Skip the test unless every binary is on PATH (the lead's `make test` installs them)."""
    missing = [b for b in binaries if shutil.which(b) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (Debian tgt / libiscsi-bin / qemu / libnbd-bin)")


@pytest.fixture
def workdir():
    d = tempfile.mkdtemp(prefix="strata-test-")
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def qsd(workdir):
    """A running qemu-storage-daemon transport, stopped (by PID) after the test."""
    need("qemu-storage-daemon", "nbdcopy", "nbdinfo")
    from services.block.transports.qsd import QemuStorageDaemon
    daemon = QemuStorageDaemon(os.path.join(workdir, "qsd"), nbd_port=free_port())
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.stop()


@pytest.fixture
def tgtd(workdir):
    """A running tgtd transport on a free portal and control socket, stopped after the test."""
    need("tgtd", "tgtadm", "iscsi-inq", "iscsi-readcapacity16", "iscsi-ls", "qemu-img")
    from services.block.transports.iscsi import TgtdTarget
    target = TgtdTarget(os.path.join(workdir, "tgtd"), portal_host="127.0.0.1",
                        portal_port=free_port(), control_port=None)
    target.start()
    try:
        yield target
    finally:
        target.stop()


def make_volume(directory, name, size):
    """A sparse raw volume file, as the dataplane would hand one to a transport."""
    path = os.path.join(directory, name)
    with open(path, "wb") as f:
        f.truncate(size)
    return path


def random_file(directory, name, size, seed=b""):
    """A file of ``size`` random bytes; returns (path, sha256 hex)."""
    import hashlib
    path = os.path.join(directory, name)
    h = hashlib.sha256()
    with open(path, "wb") as f:
        left = size
        while left:
            chunk = os.urandom(min(left, 4 << 20))
            f.write(chunk)
            h.update(chunk)
            left -= len(chunk)
    return path, h.hexdigest()


def sha256_file(path, limit=None):
    import hashlib
    h = hashlib.sha256()
    with open(path, "rb") as f:
        left = limit
        while True:
            n = 4 << 20 if left is None else min(4 << 20, left)
            if n == 0:
                break
            chunk = f.read(n)
            if not chunk:
                break
            h.update(chunk)
            if left is not None:
                left -= len(chunk)
    return h.hexdigest()
