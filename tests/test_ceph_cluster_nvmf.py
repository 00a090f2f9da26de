"""One NVMe-oF export of a Ceph volume served by two nodes of a cluster, and failed over by
the plane: a plane (`strata plane`) and two node agents (`strata node run`, 127.0.0.2 and
127.0.0.3) as real processes, each node running the block service with its own nvmf_tgt, on
the session's Ceph cluster.

- the export gets a path on each node, one ANA optimized and one non-optimized, shown by the
  API and the attach recipe (an `nvme connect` line per path); SPDK's user-space initiator
  reads both states;
- bytes written through the optimized path; that node's agent and every daemon of it are
  killed -9; once the plane writes the node down, it has blocklisted the dead node's librbd
  client and made the other path optimized: a write and read-back through it succeed without
  waiting for the dead client's watch to expire, and librbd reads the bytes back by hash;
- alpha's agent started again: its path comes back non-optimized with a new librbd client,
  and reads the same bytes;
- alpha drained: with no third node to take its path, the path is removed (the export's
  `removed` says why) and beta serves on.

In the ceph group (tests/parallel.py) for the session's Ceph cluster; the cluster's processes
are its own (tests/cluster_support.py, no session fixture). Its Redis database is
tests/test_ceph_cluster.py's (``STRATA_CLUSTER_CEPH_TEST_REDIS_DB``): the modules of one group
run one after the other on one worker, while test_cluster.py's may run at the same time on
the other.
"""
import hashlib
import os
import re
import subprocess
import time

import pytest

from tests.ceph import ceph_pool_body
from tests.cluster_support import Cluster
from tests.kit import free_port, wait_for
from tests.spdk_support import attach_config, spdk_dd
from tests.test_ceph_nvmf_multipath import ANA_STATE, HOST_NQN, identify, read_image

pytestmark = pytest.mark.root
MiB = 1 << 20
NODES = (("alpha", "127.0.0.2"), ("beta", "127.0.0.3"))


@pytest.fixture(scope="module")
def cluster(ceph_cluster):
    """A plane with a Ceph pool, and two nodes running the block service with nvmf_tgt."""
    from dataplane.spdk.target import spdk_unavailable

    why = spdk_unavailable()
    if why:
        pytest.skip(why)
    c = Cluster(redis_db=os.environ.get("STRATA_CLUSTER_CEPH_TEST_REDIS_DB", "4")).create()
    try:
        c.start_plane()
        made = c.api("POST", "pools/", json=ceph_pool_body(ceph_cluster, "shared"))
        assert made.status_code == 201, made.text
        for name, address in NODES:
            assert c.join(name, address).returncode == 0
            c.run_agent(name)
        for name, _ in NODES:
            c.wait_state(name, "up", timeout=30)
            done = c.cli("node", "assign", name, "--services", "block",
                         "--option", f"iscsi_port={free_port()}",
                         "--option", f"nbd_port={free_port()}",
                         "--option", f"nvmf_port={free_port()}", "--option", "spdk=on")
            assert done.returncode == 0, done.stderr
        for name, _ in NODES:
            c.wait_daemon(name, "nvmf_tgt", timeout=120)
        yield c
    finally:
        try:
            for export in c.api("GET", "block-exports/").json().get("results", []):
                c.api("DELETE", f"block-exports/{export['id']}/")
            c.api("DELETE", "volumes/vm/")
            c.api("DELETE", "pools/shared/")
        except Exception as exc:      # the plane may be gone: its cluster is deleted anyway
            print(f"clean-up through the API: {exc}")
        c.destroy()


def export_of(cluster, export_id) -> dict:
    return cluster.api("GET", f"block-exports/{export_id}/").json()


def ana_states(paths, nqn) -> list:
    return [[ANA_STATE[s] for s in re.findall(r"^\s*ANA State\s*:\s*(\d+)", identify(p, nqn),
                                               re.M)] for p in paths]


def test_two_nodes_serve_one_export_and_the_plane_fails_it_over(cluster, ceph_cluster,
                                                                   tmp_path):
    from dataplane.ceph.rbd import image_watchers

    made = cluster.api("POST", "volumes/", json={"name": "vm", "pool": "shared",
                                                 "size_bytes": 16 * MiB})
    assert made.status_code == 201, made.text
    # bad QoS is refused naming the field; nothing made
    refused = cluster.api("POST", "block-exports/", json={
        "volume": "vm", "protocol": "nvmf", "allow_any": True, "iops_total": 1000,
        "iops_read": 500})
    assert refused.status_code == 400, refused.text
    assert list(refused.json()["fields"]) == ["iops_total"]
    assert cluster.api("GET", "block-exports/").json()["count"] == 0
    # any host: spdk_nvme_identify connects with a random host NQN; QoS on every path
    made = cluster.api("POST", "block-exports/", json={"volume": "vm", "protocol": "nvmf",
                                                       "allow_any": True, "iops_total": 1000})
    assert made.status_code == 201, made.text
    eid, nqn = made.json()["id"], made.json()["subsystem_nqn"]
    paths = made.json()["paths"]
    assert [(p["node"], p["ana_state"]) for p in paths] == [
        ("alpha", "optimized"), ("beta", "non_optimized")]
    assert [p["traddr"] for p in paths] == ["127.0.0.2", "127.0.0.3"]

    # each node's agent serves its path at its next heartbeat, and names its librbd client
    exp = wait_for(lambda: export_of(cluster, eid), 90, "both paths served", interval=0.5,
                   until=lambda e: all(p["serving"] and p["client"] for p in e["paths"]))
    paths = exp["paths"]
    assert (exp["traddr"], exp["trsvcid"]) == (paths[0]["traddr"], paths[0]["trsvcid"])
    assert len({p["client"] for p in paths}) == 2
    states = ana_states(paths, nqn)
    assert states == [["optimized"], ["non_optimized"]]
    recipe = cluster.api("GET", f"block-exports/{eid}/attach/").json()
    connects = [line for line in recipe["setup"] if line.startswith("nvme connect")]
    assert connects == [f"nvme connect -t tcp -a {p['traddr']} -s {p['trsvcid']} -n {nqn}"
                        for p in paths]

    first = os.urandom(4 * MiB)
    (tmp_path / "first").write_bytes(first)
    a, b = paths
    done = spdk_dd([f"--if={tmp_path / 'first'}", "--ob=remoten1", f"--bs={MiB}"],
                   attach_config(a["traddr"], a["trsvcid"], nqn, HOST_NQN), tmp_path / "dd")
    assert done.returncode == 0, done.stdout[-800:]

    # alpha dies: its agent and every daemon it ran, kill -9 (alpha's client holds the
    # image's exclusive lock: it wrote last)
    cluster.kill_node("alpha")
    killed = time.monotonic()
    volume_path = cluster.api("GET", "volumes/vm/").json()["path"]
    cluster.wait_state("alpha", "down", timeout=30)
    exp = wait_for(lambda: export_of(cluster, eid), 60, "beta's path optimized and served",
                   interval=0.5, until=lambda e: [p["ana_state"] for p in e["paths"]] == [
                       "inaccessible", "optimized"] and e["paths"][1]["serving"] == "optimized")
    print(f"kill -9 to the failed-over path: {time.monotonic() - killed:.1f} s")
    assert (exp["traddr"], exp["trsvcid"]) == (b["traddr"], b["trsvcid"])
    assert exp["paths"][0]["fenced"] is True
    # the dead node's client is blocklisted, so its watch is gone at once
    listed = subprocess.run(["ceph", "-c", str(ceph_cluster.conf), "osd", "blocklist", "ls"],
                            capture_output=True, text=True, timeout=30)
    blocked = {line.split()[0] for line in listed.stdout.splitlines() if line.strip()}
    assert a["client"] in blocked, listed
    assert a["client"] not in image_watchers(volume_path)
    assert ana_states([b], nqn) == [["optimized"]]

    second = os.urandom(4 * MiB)
    (tmp_path / "second").write_bytes(second)
    began = time.monotonic()
    done = spdk_dd([f"--if={tmp_path / 'second'}", "--ob=remoten1", f"--bs={MiB}",
                    "--seek=4"], attach_config(b["traddr"], b["trsvcid"], nqn, HOST_NQN),
                   tmp_path / "dd")
    took = time.monotonic() - began
    assert done.returncode == 0, done.stdout[-800:]
    print(f"4 MiB written through the survivor after the failover in {took:.1f} s "
          "(without fencing it waits for the dead client's watch to expire, ~30 s)")
    back = tmp_path / "back"
    done = spdk_dd(["--ib=remoten1", f"--of={back}", f"--bs={MiB}", "--count=8"],
                   attach_config(b["traddr"], b["trsvcid"], nqn, HOST_NQN), tmp_path / "dd")
    assert done.returncode == 0, done.stdout[-800:]
    assert back.read_bytes() == first + second
    assert hashlib.sha256(read_image(volume_path, 8 * MiB)).hexdigest() == \
        hashlib.sha256(first + second).hexdigest()

    # alpha comes back: its path is non-optimized, served by its new nvmf_tgt's new client
    cluster.run_agent("alpha")
    exp = wait_for(lambda: export_of(cluster, eid), 120, "alpha's path back", interval=0.5,
                   until=lambda e: e["paths"][0]["serving"] == "non_optimized"
                   and e["paths"][0]["client"])
    assert [p["ana_state"] for p in exp["paths"]] == ["non_optimized", "optimized"]
    assert exp["paths"][0]["client"] not in (a["client"], b["client"])
    assert ana_states(exp["paths"], nqn) == [["non_optimized"], ["optimized"]]
    done = spdk_dd(["--ib=remoten1", f"--of={back}", f"--bs={MiB}", "--count=8"],
                   attach_config(a["traddr"], a["trsvcid"], nqn, HOST_NQN), tmp_path / "dd")
    assert done.returncode == 0, done.stdout[-800:]
    assert back.read_bytes() == first + second

    # alpha drained: no third node to take its path, so the path goes, the reason shown;
    # beta serves on
    done = cluster.cli("node", "drain", "alpha")
    assert done.returncode == 0, done.stderr
    exp = export_of(cluster, eid)
    assert [(p["node"], p["ana_state"]) for p in exp["paths"]] == [("beta", "optimized")]
    assert [r["node"] for r in exp["removed"]] == ["alpha"], exp
    assert "no other node runs the block service" in exp["removed"][0]["reason"]
    done = spdk_dd(["--ib=remoten1", f"--of={back}", f"--bs={MiB}", "--count=8"],
                   attach_config(b["traddr"], b["trsvcid"], nqn, HOST_NQN), tmp_path / "dd")
    assert done.returncode == 0 and back.read_bytes() == first + second, done.stdout[-800:]
