"""keepalived's configuration for the cluster's floating addresses, built as a dict and only
printed (plumbing/keepalived.py): who is MASTER, the backups' order, unicast peers, router ids."""
from plumbing import keepalived

MEMBERS = [{"name": "node1", "data_address": "10.77.0.11", "floating_address": "10.77.0.111/24"},
           {"name": "node2", "data_address": "10.77.0.12", "floating_address": "10.77.0.112/24"},
           {"name": "node3", "data_address": "10.77.0.13", "floating_address": "10.77.0.113/24"},
           {"name": "node4", "data_address": "10.77.0.14", "floating_address": ""}]


def _instances(own):
    conf = keepalived.config(own, MEMBERS, "eth0", "s3cr3t00")
    return {i["name"]: i for i in conf["vrrp_instance"]}


def test_one_instance_per_floating_address_owner_master_with_the_highest_priority():
    mine = _instances("node2")
    assert sorted(mine) == ["strata_node1", "strata_node2", "strata_node3"]
    assert mine["strata_node2"]["state"] == "MASTER"
    assert mine["strata_node2"]["virtual_ipaddress"] == ["10.77.0.112/24 dev eth0"]
    for owner in ("node1", "node3"):
        assert mine[f"strata_{owner}"]["state"] == "BACKUP"
    priorities = {own: _instances(own)["strata_node3"]["priority"] for own in
                  ("node1", "node2", "node3", "node4")}
    # the owner first, then the nodes after it by name, wrapping round: node4, node1, node2
    # the backups spread from 190 to 10, so that the second does not take the address
    # within the same few milliseconds as the first (their skews differ by 0.7 s, not 4 ms)
    assert priorities == {"node3": 200, "node4": 190, "node1": 100, "node2": 10}
    # every node agrees on each instance's router id, and no two instances share one
    ids = {own: {n: i["virtual_router_id"] for n, i in _instances(own).items()}
           for own in ("node1", "node4")}
    assert ids["node1"] == ids["node4"] == {"strata_node1": 111, "strata_node2": 112,
                                            "strata_node3": 113}


def test_adverts_go_unicast_to_the_other_nodes_with_the_cluster_password():
    instance = _instances("node1")["strata_node1"]
    assert instance["unicast_src_ip"] == "10.77.0.11"
    assert instance["unicast_peer"] == ["10.77.0.12", "10.77.0.13", "10.77.0.14"]
    assert instance["authentication"] == {"auth_type": "PASS", "auth_pass": "s3cr3t00"}
    assert "nopreempt" not in instance      # the owner takes its address back


def test_no_floating_address_no_keepalived():
    plain = [{**m, "floating_address": ""} for m in MEMBERS]
    assert keepalived.config("node1", plain, "eth0", "x") == {}
    assert keepalived.config("node9", MEMBERS, "eth0", "x") == {}    # not a member (removed)


def test_router_ids_are_stable_and_distinct_on_a_clash():
    ids = keepalived.router_ids(["10.1.0.5/16", "10.2.0.5/16", "10.3.0.0/16"])
    assert ids == {"10.1.0.5/16": 5, "10.2.0.5/16": 6, "10.3.0.0/16": 1}
    assert keepalived.router_ids(["10.3.0.0/16", "10.2.0.5/16", "10.1.0.5/16"]) == ids


def test_the_password_is_derived_from_the_cluster_secret():
    assert keepalived.auth_pass("key-a") == keepalived.auth_pass("key-a")
    assert keepalived.auth_pass("key-a") != keepalived.auth_pass("key-b")
    assert len(keepalived.auth_pass("key-a")) == 8        # VRRPv2's limit


def test_rendered_text():
    text = keepalived.render(keepalived.config("node3", MEMBERS[:2] + MEMBERS[2:3], "eth0",
                                               "pw"))
    assert "vrrp_instance strata_node3 {\n    state MASTER\n    interface eth0\n" in text
    assert "    unicast_peer {\n        10.77.0.11\n        10.77.0.12\n    }\n" in text
    assert "    authentication {\n        auth_type PASS\n        auth_pass pw\n    }\n" in text
    assert "    virtual_ipaddress {\n        10.77.0.113/24 dev eth0\n    }\n" in text
    assert "global_defs {\n    router_id node3\n    enable_script_security\n" in text
    assert text.count("{") == text.count("}")


def test_interface_of_finds_loopback():
    assert keepalived.interface_of("127.0.0.1") == "lo"
    assert keepalived.interface_of("192.0.2.77") == ""


def test_a_drained_node_holds_no_address_while_another_node_lives():
    members = [{**m, "drained": m["name"] == "node1"} for m in MEMBERS]

    def instances(own):
        return {i["name"]: i for i in
                keepalived.config(own, members, "eth0", "s3cr3t00")["vrrp_instance"]}
    own = instances("node1")["strata_node1"]
    assert (own["state"], own["priority"]) == ("BACKUP", keepalived.DRAINED_PRIORITY)
    # its first backup now has the highest priority for its address, and it is the last
    # resort for every other address
    assert instances("node2")["strata_node1"]["priority"] == 190
    assert {n: i["priority"] for n, i in instances("node1").items()} == {
        "strata_node1": 1, "strata_node2": 1, "strata_node3": 1}
    assert instances("node2")["strata_node2"]["state"] == "MASTER"


def test_taking_another_nodes_address_over_runs_the_notify_command_with_its_owner():
    notify = "/opt/strata/venv/bin/python -m services.file.takeover /var/lib/strata"
    conf = keepalived.config("node2", MEMBERS, "eth0", "pw", notify=notify)
    mine = {i["name"]: i for i in conf["vrrp_instance"]}
    assert mine["strata_node1"]["notify_master"] == f'"{notify} node1 master"'
    assert mine["strata_node3"]["notify_master"] == f'"{notify} node3 master"'
    # the address left this node (its owner back, or this node's interface down): the
    # takeover's record goes, so that the survivor does not end the owner's own grace
    assert mine["strata_node3"]["notify_backup"] == f'"{notify} node3 backup"'
    assert mine["strata_node3"]["notify_fault"] == f'"{notify} node3 backup"'
    assert not {"notify_master", "notify_backup"} & set(mine["strata_node2"])  # its own
    assert conf["global_defs"]["script_user"] == "root"
    assert all("notify_master" not in i for i in _instances("node2").values())  # none asked
    text = keepalived.render(conf)
    assert f'    notify_master "{notify} node3 master"\n' in text
