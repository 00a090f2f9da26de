"""Ansible deploys Strata for real: a plane host and three node hosts (systemd-nspawn
containers with systemd as PID 1, reached over ssh; tests/nodes.py) from the cached Debian
root, then grows the cluster by a fourth host with --limit.

The tests run in order and build on each other (one deployment per session, as a user would).
The join and agent steps need the cluster commands (`strata plane`, `strata node`); while this
checkout's CLI lacks them, the playbook runs with ``--skip-tags strata-cluster`` and the tests
that need a running plane skip, saying so.
"""
from __future__ import annotations

import json

import pytest

from tests.ansible_support import cluster_commands, playbook, wheelhouse, write_inventory
from tests.nodes import cluster_hosts  # noqa: F401  (the session fixture)

NODES = ["node1", "node2", "node3"]
needs_cluster = pytest.mark.skipif(not cluster_commands(),
                                   reason="the CLI has no `strata plane`/`strata node` yet")


@pytest.fixture(scope="module")
def deployed(cluster_hosts):  # noqa: F811
    """plane1 + node1..3 booted from the bare cached root and deployed by site.yml."""
    for name in ["plane1", *NODES]:
        cluster_hosts.add(name)
    inventory = write_inventory(cluster_hosts, ["plane1"], NODES, wheelhouse())
    first = playbook(inventory)
    return cluster_hosts, inventory, first


def _credential(inventory, name: str) -> str:
    return (inventory.parent / "credentials" / name).read_text().split()[0]


def test_site_deploys_plane_and_three_nodes(deployed):
    hosts, inventory, first = deployed
    assert {"plane1", *NODES} <= set(first.recap)
    assert all(c["failed"] == 0 and c["unreachable"] == 0 for c in first.recap.values())
    print(f"deploy plane + 3 nodes: {first.seconds:.0f} s")
    for name in ["plane1", *NODES]:
        # Strata installed offline from the wheelhouse, units in place
        out = hosts.ssh(name, "/opt/strata/venv/bin/strata --help").stdout
        assert "usage" in out.lower()
    assert "strata plane --host 10.77.0.10" in hosts.ssh(
        "plane1", "systemctl cat strata-plane").stdout
    assert "node run --config /etc/strata/node.json" in hosts.ssh(
        "node1", "systemctl cat strata-node").stdout
    assert hosts.ssh("plane1", "stat -c %a /etc/strata/plane.env").stdout.strip() == "600"


def test_plane_database_and_redis_reachable_from_nodes_only_with_passwords(deployed):
    hosts, inventory, _ = deployed
    db, redis = _credential(inventory, "db_password"), _credential(inventory, "redis_password")
    plane = hosts.hosts["plane1"].address
    listening = hosts.ssh("plane1", "ss -ltnH").stdout
    assert f"{plane}:5432" in listening and f"{plane}:6379" in listening
    # the node reaches them over the bridge, with the passwords (real clients: psql, redis-cli)
    ok = hosts.ssh("node1", f"PGPASSWORD={db} psql -h {plane} -U strata -d strata -tAc "
                            "'select current_user'")
    assert ok.stdout.strip() == "strata"
    bad = hosts.ssh("node1", f"PGPASSWORD=wrong psql -h {plane} -U strata -d strata -tAc 'select 1'",
                    check=False)
    assert bad.returncode != 0 and "password authentication failed" in bad.stderr
    other = hosts.ssh("node1", f"PGPASSWORD={db} psql -h {plane} -U postgres -d strata -tAc "
                               "'select 1'", check=False)
    assert other.returncode != 0            # no other role comes in from the network
    assert hosts.ssh("node1", f"redis-cli -h {plane} --no-auth-warning -a {redis} ping"
                     ).stdout.strip() == "PONG"
    anonymous = hosts.ssh("node1", f"redis-cli -h {plane} set x 1", check=False)
    assert "NOAUTH" in anonymous.stdout + anonymous.stderr


@needs_cluster
def test_three_nodes_up(deployed):
    hosts, _, _ = deployed
    out = hosts.ssh("plane1", "/opt/strata/venv/bin/strata --data-dir /var/lib/strata "
                              "node list --json").stdout
    nodes = {n["name"]: n for n in json.loads(out)}
    assert {n: nodes[n]["state"] for n in NODES} == {n: "up" for n in NODES}


def test_second_run_changes_nothing(deployed):
    _, inventory, _ = deployed
    again = playbook(inventory)
    assert again.changed() == {name: 0 for name in again.recap}, again.output[-4000:]
    print(f"second run: {again.seconds:.0f} s, changed=0")


def test_fourth_host_added_with_limit_leaves_the_others_alone(deployed):
    hosts, inventory, _ = deployed
    hosts.add("node4")
    inventory = write_inventory(hosts, ["plane1"], [*NODES, "node4"],
                                inventory.read_text().split("strata_wheelhouse=")[1].split()[0])
    grow = playbook(inventory, "site.yml", "--limit", "plane,node4")
    print(f"add a node: {grow.seconds:.0f} s")
    assert grow.recap["plane1"]["changed"] == 0
    assert grow.recap["node4"]["changed"] > 0 and grow.recap["node4"]["failed"] == 0
    assert not set(NODES) & set(grow.recap)           # not even contacted
    assert "strata" in hosts.ssh("node4", "/opt/strata/venv/bin/pip list").stdout
