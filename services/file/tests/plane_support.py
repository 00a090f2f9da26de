"""Support for the file service's plane tests: the daemons `strata up` would start (from
``services.file.up``) on free ports, stopped by PID in teardown, and small REST helpers."""
from __future__ import annotations

import contextlib
import os
import secrets

from plumbing.process import Child
from services.file.runtime.smb_users import delete_unix_user, unix_user_exists
from tests.kit import free_port


class PlaneDaemons:
    """ganesha.nfsd and smbd started from ``up.daemons()`` exactly as `strata up` does."""

    def __init__(self, data_dir, options: dict):
        self.data_dir, self.options = data_dir, options
        self.running: list[Child] = []

    def start(self) -> PlaneDaemons:
        from services.file import up

        (self.data_dir / "log").mkdir(exist_ok=True)
        for spec in up.daemons(self.data_dir, self.options):
            child = Child(spec.name, spec.argv, self.data_dir / "log" / f"{spec.name}.log",
                          env={**os.environ, **spec.env}, cwd=self.data_dir, stop=spec.stop)
            self.running.append(child.start())
            child.wait_ready(spec.ready, 30)
        return self

    def log(self, name: str) -> str:
        path = self.data_dir / "log" / f"{name}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def stop(self) -> None:
        """Stop what we started (by PID), newest first; the NFS stop also drops btrfs binds."""
        for child in reversed(self.running):
            child.stop(timeout=15)
        self.running = []


def django_configured() -> bool:
    """True when pytest-django set Django up (the plane tests need its database fixtures)."""
    from django.conf import settings

    return settings.configured


def file_options() -> dict:
    return {"nfs_port": free_port(), "smb_port": free_port(), "host": "127.0.0.1"}


@contextlib.contextmanager
def plane_daemons(data_dir, settings):
    """Start the daemons for ``data_dir`` (readable by SMB users) and point the plane at them."""
    os.chmod(data_dir, 0o755)
    options = file_options()
    settings.SERVICE_OPTIONS = options
    daemons = PlaneDaemons(data_dir, options)
    try:
        yield daemons.start()
    finally:
        daemons.stop()


def make_filesystem(api, name: str, pool: str = "p1", driver: str = "directory") -> dict:
    """A pool (once) and a file system in it, its root writable by anyone (test users)."""
    if api.get(f"/api/v1/pools/{pool}/").status_code == 404:
        body = {"name": pool, "driver": driver}
        if driver == "local":
            body["devices"] = ["image:512M"]
        made = api.post("/api/v1/pools/", body, format="json")
        assert made.status_code == 201, made.content
        os.chmod(made.json()["mountpoint"], 0o755)
    made = api.post("/api/v1/filesystems/", {"name": name, "pool": pool}, format="json")
    assert made.status_code == 201, made.content
    fs = made.json()
    os.chmod(fs["path"], 0o777)
    return fs


def new_user_name() -> str:
    return "stratatest" + secrets.token_hex(3)


def drop_unix_user(name: str) -> None:
    """Teardown safety net: the Unix account of a test SMB user is gone after the test."""
    if unix_user_exists(name):
        delete_unix_user(name)
