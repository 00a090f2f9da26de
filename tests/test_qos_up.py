"""Classes of work on a real `strata up`: each daemon runs in its class's cgroup with the
class's weight, a share set through the CLI is in the kernel at once and after a restart,
the S3 gateway gets the shares and the buckets' classes, and bad input is refused naming the
field (plumbing/workclass.py, services/qos/)."""
import json
import os
import subprocess
import time

import pytest
import requests

from plumbing.workclass import ClassGroups, cpu_shares
from tests.appliance import Appliance

pytestmark = pytest.mark.root

# the class each of `strata up`'s children runs in
CLASS_OF = {"ganesha": "samples", "smbd": "samples", "s3": "samples", "web": "checkpoints",
            "worker": "background", "beat": "background"}


@pytest.fixture
def appliance():
    app = Appliance()
    yield app
    app.destroy()


def descendants(pid: int) -> set[int]:
    out = subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True, text=True).stdout
    kids: dict[int, list[int]] = {}
    for line in out.splitlines():
        p, pp = map(int, line.split())
        kids.setdefault(pp, []).append(p)
    found, todo = set(), [pid]
    while todo:
        for child in kids.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def daemon_pids(app) -> dict:
    states = json.loads((app.data_dir / "run" / "daemons.json").read_text())
    return {name: states[name]["pid"] for name in CLASS_OF if states.get(name, {}).get("pid")}


def kernel_shares(groups: ClassGroups) -> dict:
    return {name: int((groups.group(name) / "cpu.shares").read_text())
            for name in ("samples", "checkpoints", "background")}


def classes(app) -> dict:
    r = app.cli("--json", "qos", "classes", "show")
    assert r.returncode == 0, r.stderr
    return {c["name"]: c for c in json.loads(r.stdout)}


def test_daemons_run_in_their_class_with_its_share(appliance):
    app = appliance.start()
    groups = ClassGroups(app.data_dir)
    assert groups.available, "this test needs the cgroup v1 cpu hierarchy (run as root)"

    shown = classes(app)
    assert {n: c["share"] for n, c in shown.items()} == \
        {"samples": 1000, "checkpoints": 400, "background": 50}
    assert kernel_shares(groups) == {n: cpu_shares(c["share"]) for n, c in shown.items()}
    assert {n: c["cpu_shares"] for n, c in shown.items()} == kernel_shares(groups)

    # every daemon, and what it forked (the gateway's workers, smbd's children), is in the
    # group of its class
    pids = daemon_pids(app)
    assert set(pids) == set(CLASS_OF), pids
    for name, pid in pids.items():
        members = set(groups.pids(CLASS_OF[name]))
        assert {pid} | descendants(pid) <= members, (name, pid, CLASS_OF[name], members)

    # a change of share is in the kernel at once, in the gateway's config and in the file
    # `strata up` reads at its next start
    r = app.cli("--json", "qos", "classes", "set", "samples", "--share", "2500")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["share"] == 2500
    assert kernel_shares(groups)["samples"] == cpu_shares(2500) == 25600
    gateway_conf = json.loads((app.data_dir / "run" / "s3" / "gateway.json").read_text())
    assert gateway_conf["qos"]["shares"]["samples"] == 2500
    assert json.loads((app.data_dir / "run" / "workclasses.json").read_text())["samples"] == 2500

    # bad input: one line from the CLI, 400 naming the field from the API
    r = app.cli("qos", "classes", "set", "samples", "--share", "0")
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and "share" in r.stderr
    api = requests.Session()
    api.headers["Authorization"] = f"Token {app.credentials['token']}"
    base = f"{app.url}/api/v1"
    for bad in (10001, "lots", None):
        r = api.patch(f"{base}/qos/classes/checkpoints/", json={"share": bad}, timeout=30)
        assert r.status_code == 400 and "share" in r.json()["fields"], (bad, r.status_code, r.text)
    assert api.patch(f"{base}/qos/classes/urgent/", json={"share": 5}, timeout=30).status_code == 404
    assert classes(app)["checkpoints"]["share"] == 400

    # a bucket's class reaches the gateway's admission queue
    r = api.post(f"{base}/buckets/", json={"name": "ckpt", "workload_class": "checkpoints"},
                 timeout=60)
    assert r.status_code == 201 and r.json()["workload_class"] == "checkpoints", r.text
    r = api.post(f"{base}/buckets/", json={"name": "other", "workload_class": "urgent"}, timeout=60)
    assert r.status_code == 400 and "workload_class" in r.json()["fields"], r.text
    gateway_conf = json.loads((app.data_dir / "run" / "s3" / "gateway.json").read_text())
    assert gateway_conf["qos"]["buckets"] == {"ckpt": "checkpoints"}
    # ... and a bucket a checkpoint job saves into is classed as checkpoints
    assert api.post(f"{base}/buckets/", json={"name": "shards"}, timeout=60).status_code == 201
    r = api.post(f"{base}/checkpoint-jobs/", json={"name": "llm", "bucket": "shards"}, timeout=60)
    assert r.status_code == 201, r.text
    assert api.get(f"{base}/buckets/shards/", timeout=60).json()["workload_class"] == "checkpoints"
    gateway_conf = json.loads((app.data_dir / "run" / "s3" / "gateway.json").read_text())
    assert gateway_conf["qos"]["buckets"] == {"ckpt": "checkpoints", "shards": "checkpoints"}

    # after a restart the daemons start in their groups with the share set before
    app.stop()
    app.start()
    assert classes(app)["samples"]["share"] == 2500
    assert kernel_shares(groups)["samples"] == 25600
    pids = daemon_pids(app)
    for name, pid in pids.items():
        assert pid in groups.pids(CLASS_OF[name]), (name, pid)


def class_threads(groups: ClassGroups, name: str, pids: set[int]) -> dict[int, str]:
    """The threads of processes ``pids`` in class ``name``'s group: {tid: its comm}."""
    out = {}
    for tid in (groups.group(name) / "tasks").read_text().split():
        for pid in pids:
            try:
                out[int(tid)] = open(f"/proc/{pid}/task/{tid}/comm").read().strip()
                break
            except OSError:
                pass
    return out


def test_a_checkpoint_upload_is_hashed_and_written_with_the_checkpoints_share(appliance):
    """The gateway runs in the samples group; the body of a PUT to a bucket tagged
    checkpoints is hashed and written on threads moved into the checkpoints group, so that
    the kernel weighs that work with the checkpoints share while the event loop serving
    sample reads keeps the samples share (services/object/gateway/admission.py)."""
    import boto3
    from botocore.config import Config

    app = appliance.start()
    groups = ClassGroups(app.data_dir)
    assert groups.available, "this test needs the cgroup v1 cpu hierarchy (run as root)"
    creds = app.credentials
    api = requests.Session()
    api.headers["Authorization"] = f"Token {creds['token']}"
    base = f"{app.url}/api/v1"
    for name, body in (("ckpt", {"workload_class": "checkpoints"}), ("train", {})):
        r = api.post(f"{base}/buckets/", json={"name": name, **body}, timeout=60)
        assert r.status_code == 201, r.text
    time.sleep(1.5)          # the gateway re-reads its config at most every second
    s3 = boto3.client("s3", endpoint_url=creds["s3_endpoint"],
                      aws_access_key_id=creds["s3_access_key"],
                      aws_secret_access_key=creds["s3_secret_key"], region_name="us-east-1",
                      config=Config(s3={"addressing_style": "path"}))
    gateway = daemon_pids(app)["s3"]
    workers = {gateway} | descendants(gateway)
    body = os.urandom(24 << 20)

    s3.put_object(Bucket="train", Key="sample0", Body=body)     # samples: the gateway's own
    assert class_threads(groups, "checkpoints", workers) == {}
    for rank in range(4):          # whichever worker takes them
        s3.put_object(Bucket="ckpt", Key=f"step1/rank{rank}", Body=body)
    moved = class_threads(groups, "checkpoints", workers)
    assert moved and not set(moved) & workers, moved     # threads, not whole workers
    # the workers' main threads (their event loops) stay in the samples group
    samples = set((groups.group("samples") / "tasks").read_text().split())
    assert {str(p) for p in workers} <= samples
    assert s3.get_object(Bucket="ckpt", Key="step1/rank3")["Body"].read() == body
    assert s3.get_object(Bucket="train", Key="sample0")["Body"].read() == body
