"""Issue 34 on a real `strata up` (embedded SQLite), checked as an outside tester would: with
the roles' API tokens and a real local unprivileged account (``nobody``).

- the data directory's database (and its -wal/-shm) and secrets are readable by root alone,
  and the database holds no usable secret (API tokens as digests, CHAP secrets and the S3
  gateway's admin token sealed);
- the S3 gateway's file system refuses a quota (admin) or a new owner (operator) with a 409
  naming its keeper, and its data stays root's;
- a quota and owner that an earlier version let through do not keep the next start from
  serving S3 again.
"""
import json
import os
import sqlite3
import subprocess
import tempfile
from pathlib import Path

import pytest
import requests

from services.object.tests.planefixture import s3_client
from tests.appliance import Appliance

pytestmark = pytest.mark.root
CHAP = "chap-secret-7xq"


def as_nobody(*argv) -> subprocess.CompletedProcess:
    return subprocess.run(["runuser", "-u", "nobody", "--", *argv], capture_output=True,
                          text=True, timeout=30)


@pytest.fixture
def appliance():
    data_dir = Path(tempfile.mkdtemp(prefix="strata-test-"))
    data_dir.chmod(0o755)  # as `make run` makes ./var: mkdir with the usual umask
    app = Appliance(data_dir=data_dir)
    try:
        yield app.start(timeout=240)
    finally:
        for log in sorted((app.data_dir / "log").glob("*.log")):  # shown only on failure
            print(f"==> {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-15:]))
        app.destroy()


def api_session(token: str) -> requests.Session:
    s = requests.Session()
    s.headers["Authorization"] = f"Token {token}"
    return s


def operator_token(app: Appliance, admin: requests.Session) -> str:
    """An operator made by the admin signs in to the console and makes its API token."""
    api = app.credentials["api_url"]
    r = admin.post(f"{api}users/", json={"username": "op", "password": "op-password-1",
                                         "role": "operator"})
    assert r.status_code == 201, r.text
    browser = requests.Session()
    browser.get(f"{app.url}/login/")
    r = browser.post(f"{app.url}/login/", data={
        "username": "op", "password": "op-password-1",
        "csrfmiddlewaretoken": browser.cookies["csrftoken"]}, allow_redirects=False)
    assert r.status_code == 302, r.text
    r = browser.post(f"{api}tokens/", headers={"X-CSRFToken": browser.cookies["csrftoken"]})
    assert r.status_code == 201, r.text
    return r.json()["key"]


def database_text(data_dir: Path) -> str:
    """Every row of the plane's database, as SQL (what a copy of the file would give)."""
    with sqlite3.connect(data_dir / "strata.sqlite3") as db:
        return "\n".join(db.iterdump())


def test_a_local_account_reads_nothing_and_no_api_call_breaks_s3(appliance):
    data, creds = appliance.data_dir, appliance.credentials
    admin = api_session(creds["token"])
    api = creds["api_url"]
    r = admin.post(f"{api}hosts/", json={"name": "h1", "iqn": "iqn.2026-01.io.test:h1",
                                         "chap_user": "h1", "chap_secret": CHAP})
    assert r.status_code == 201, r.text
    s3 = s3_client(creds["s3_endpoint"], creds["s3_access_key"], creds["s3_secret_key"])
    s3.create_bucket(Bucket="private")
    s3.put_object(Bucket="private", Key="k", Body=b"object bytes only S3 gives")

    # high 3: root's alone, and no secret in the database
    private = [data / "strata.sqlite3", data / "strata.sqlite3-wal", data / "strata.sqlite3-shm",
               data / "secret_key", data / "credentials.json"]
    for path in private:
        assert path.stat().st_mode & 0o077 == 0, (path, oct(path.stat().st_mode))
        assert as_nobody("cat", str(path)).returncode != 0, path
    assert data.stat().st_mode & 0o066 == 0 and as_nobody("ls", str(data)).returncode != 0
    # the daemons' sockets, configs and logs: root's alone (every daemon runs as root)
    for sub in ("run", "log"):
        assert (data / sub).stat().st_mode & 0o777 == 0o700, sub
        assert as_nobody("ls", str(data / sub)).returncode != 0, sub
    gateway_token = json.loads((data / "run" / "s3" / "gateway.json").read_text())["admin_token"]
    dump = database_text(data)
    for secret in (creds["token"], CHAP, gateway_token, creds["s3_secret_key"],
                   creds["password"]):
        assert secret not in dump

    # high 1 and 2: the gateway's file system refuses what would break it or expose its data
    r = admin.patch(f"{api}filesystems/s3/", json={"quota_bytes": 1})
    assert r.status_code == 409 and r.json()["kept_by"] == "object", r.text
    operator = api_session(operator_token(appliance, admin))
    r = operator.patch(f"{api}filesystems/s3/", json={"owner": "nobody"})
    assert r.status_code == 409 and r.json()["error"] == "kept_by_service", r.text
    r = operator.delete(f"{api}filesystems/s3/")
    assert r.status_code == 409 and r.json()["kept_by"] == "object", r.text
    fs = admin.get(f"{api}filesystems/s3/").json()
    st = os.stat(fs["path"])
    assert (st.st_uid, st.st_mode & 0o777) == (0, 0o700)
    # and the gateway's own directory too, should its file system's root ever be opened
    assert (Path(fs["path"]) / "gateway").stat().st_mode & 0o777 == 0o700
    assert as_nobody("find", fs["path"]).returncode != 0
    assert s3.get_object(Bucket="private", Key="k")["Body"].read().startswith(b"object")

    # what an earlier version let through (a 1-byte quota, nobody's 0755) is undone at start
    appliance.stop()
    pool = data / "pools" / "default"
    subprocess.run(["mount", "-o", "loop", str(data / "devices" / "default.0.img"), str(pool)],
                   check=True)
    try:
        os.chown(fs["path"], 65534, 65534)
        os.chmod(fs["path"], 0o755)
        subprocess.run(["btrfs", "qgroup", "limit", "1", fs["path"]], check=True)
    finally:
        subprocess.run(["umount", str(pool)], check=True)
    with sqlite3.connect(data / "strata.sqlite3") as db:
        db.execute("UPDATE storage_filesystem SET quota_bytes = 1, owner = 'nobody', "
                   "mode = '0755' WHERE name = 's3'")
    appliance.start(timeout=240)
    said = (data / "log" / "bootstrap.log").read_text()
    assert "file system s3 is kept by the object service: quota 1 bytes removed" in said, said
    assert s3.get_object(Bucket="private", Key="k")["Body"].read().startswith(b"object")
    s3.put_object(Bucket="private", Key="after", Body=b"written after the start")
    fs = admin.get(f"{api}filesystems/s3/").json()
    assert fs["quota_bytes"] is None and fs["mode"] == "0700"
    assert as_nobody("find", fs["path"]).returncode != 0
