"""Console pages of the file service, and the reconcile job run by a real Celery worker."""
from __future__ import annotations

import os

import pytest

from services.file.tests.nfs_client import connect, read_hash, sha, write_file
from services.file.tests.plane_support import (
    django_configured,
    drop_unix_user,
    make_filesystem,
    new_user_name,
    plane_daemons,
)
from tests.kit import wait_job

if not django_configured():
    pytest.skip("the file plane tests need pytest-django (run without -p no:django)",
                allow_module_level=True)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (useradd, ports)")
RW = ["127.0.0.1 rw no_root_squash"]


def test_console_pages_show_rows_and_forms_without_daemons(api, viewer_api, client, settings,
                                                           data_dir):
    """Without running daemons a change is written to the config and is ``pending``."""
    settings.SERVICE_OPTIONS = {"nfs_port": 1, "smb_port": 1}
    os.chmod(data_dir, 0o755)       # SMB users must be able to reach the shared directory
    make_filesystem(api, "fs1")
    user = new_user_name()
    try:
        r = api.post("/api/v1/nfs-exports/", {"filesystem": "fs1", "clients": RW},
                     format="json")
        assert r.status_code == 201 and r.json()["state"] == "pending", r.content
        exported = r.json()
        r = api.post("/api/v1/smb-users/", {"username": user, "password": "Pw-123456"},
                     format="json")
        assert r.status_code == 201, r.content
        r = api.post("/api/v1/smb-shares/", {"name": "team", "filesystem": "fs1",
                                              "valid_users": [user]}, format="json")
        assert r.status_code == 201 and r.json()["state"] == "pending", r.content
        client.force_login(api.user)
        for slug, shown in (("nfs-exports", b"/fs1"), ("smb-shares", b"team"),
                            ("smb-users", user.encode())):
            page = client.get(f"/console/{slug}/")
            assert page.status_code == 200, slug
            assert shown in page.content and b'details class="create"' in page.content
        assert b"Pw-123456" not in client.get("/console/smb-users/").content
        # the export's page: its one entry (this host) and the mount command through it
        page = client.get(f"/console/nfs-exports/{exported['id']}/")
        assert page.status_code == 200
        assert exported["mount"]["linux"].encode() in page.content
        assert b"vers=4.1,nconnect=4,port=1 127.0.0.1:/fs1 /mnt/fs1" in page.content
        from plane.models import AuditEvent
        assert "Pw-123456" not in str(list(AuditEvent.objects.values()))
        # viewers read, they do not change
        assert viewer_api.get("/api/v1/smb-shares/").status_code == 200
        r = viewer_api.post("/api/v1/nfs-exports/", {"filesystem": "fs1", "clients": RW},
                            format="json")
        assert r.status_code == 403, r.content
        assert api.delete("/api/v1/smb-shares/team/").status_code == 204
        assert api.delete(f"/api/v1/smb-users/{user}/").status_code == 204
    finally:
        drop_unix_user(user)


def test_reconcile_job_in_the_worker_reapplies_everything(api, worker, data_dir, settings):
    with plane_daemons(data_dir, settings):
        make_filesystem(api, "fs1")
        r = api.post("/api/v1/nfs-exports/", {"filesystem": "fs1", "clients": RW},
                     format="json")
        assert r.status_code == 201 and r.json()["state"] == "online", r.content
        # the config on disk lost the export behind the plane's back (an operator's edit)
        conf = data_dir / "run" / "nfs" / "ganesha.conf"
        conf.write_text(conf.read_text().split("EXPORT {")[0])
        accepted = api.post("/api/v1/nfs-exports/reconcile/")
        assert accepted.status_code == 202, accepted.content
        url = accepted.json()["url"] if "url" in accepted.json() else \
            f"/api/v1/jobs/{accepted.json()['id']}/"
        job = wait_job(api, url, 60)
        assert job["state"] == "succeeded", job
        assert "EXPORT {" in conf.read_text()
        with connect(settings.SERVICE_OPTIONS["nfs_port"], "/fs1") as client:
            write_file(client, "x", b"reconciled")
            assert read_hash(client, "x") == (10, sha(b"reconciled"))
