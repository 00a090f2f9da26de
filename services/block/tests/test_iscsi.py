"""iSCSI exports through tgtd, checked with libiscsi's tools and qemu-img's iSCSI client."""

import os
import subprocess

import pytest

from services.block.tests.conftest import make_volume, random_file, sha256_file
from services.block.transports.base import (
    ExportExists,
    Host,
    HostGroup,
    InvalidExport,
    QosLimits,
)

MiB = 1 << 20
CLIENT = "iqn.2026-01.io.strata.test:client1"
OTHER = "iqn.2026-01.io.strata.test:intruder"
SECRET = "s3cret-chap-01"


def group(**kw):
    host = Host("client1", iqn=CLIENT, chap_user="client1", chap_secret=SECRET)
    return HostGroup("hg1", hosts=[host], **kw)


def url(info, user="client1", secret=SECRET):
    auth = f"{user}%{secret}@" if user else ""
    return f"iscsi://{auth}{info['portal']}/{info['target_iqn']}/{info['lun']}"


def tool(name, info, initiator=CLIENT, **kw):
    return subprocess.run([name, "-i", initiator, url(info, **kw)], capture_output=True,
                          text=True, timeout=60)


def image_opts(info, initiator=CLIENT):
    return (f"driver=iscsi,transport=tcp,portal={info['portal']},target={info['target_iqn']},"
            f"lun={info['lun']},initiator-name={initiator},user=client1,password={SECRET}")


def capacity(info):
    cp = tool("iscsi-readcapacity16", info)
    assert cp.returncode == 0, cp.stderr
    return int(cp.stdout.split("Total size:")[1].split()[0])


def test_inquiry_capacity_and_discovery(tgtd, workdir):
    vol = make_volume(workdir, "vol.raw", 64 * MiB)
    info = tgtd.export("vol1", vol, host_group=group())
    assert info["target_iqn"] == "iqn.2026-01.io.strata:hg1" and info["lun"] == 1
    inq = tool("iscsi-inq", info)
    assert inq.returncode == 0 and "DIRECT_ACCESS" in inq.stdout, inq.stderr
    assert capacity(info) == 64 * MiB
    ls = subprocess.run(["iscsi-ls", "-i", CLIENT, "-s",
                         f"iscsi://client1%{SECRET}@{info['portal']}"],
                        capture_output=True, text=True, timeout=60)
    assert info["target_iqn"] in ls.stdout and "Lun:1" in ls.stdout, ls.stderr
    assert tgtd.health()["running"] and tgtd.plan().empty()


def test_256_mib_written_and_read_back_by_hash(tgtd, workdir):
    vol = make_volume(workdir, "vol.raw", 256 * MiB)
    info = tgtd.export("big", vol, host_group=group())
    src, digest = random_file(workdir, "src.bin", 256 * MiB)
    cp = subprocess.run(["qemu-img", "convert", "-n", "-f", "raw", "-t", "none", src,
                         "--target-image-opts", image_opts(info)],
                        capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stderr
    assert sha256_file(vol) == digest
    out = os.path.join(workdir, "out.bin")
    cp = subprocess.run(["qemu-img", "convert", "-O", "raw", "--image-opts", image_opts(info),
                         out], capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stderr
    assert sha256_file(out) == digest


def test_wrong_chap_secret_is_refused(tgtd, workdir):
    info = tgtd.export("vol1", make_volume(workdir, "vol.raw", 8 * MiB), host_group=group())
    bad = tool("iscsi-inq", info, secret="wrong-secret-99")
    assert bad.returncode != 0
    assert "Authentication failure" in bad.stderr
    none = tool("iscsi-inq", info, user=None)
    assert none.returncode != 0


def test_initiator_not_in_acl_is_refused(tgtd, workdir):
    info = tgtd.export("vol1", make_volume(workdir, "vol.raw", 8 * MiB), host_group=group())
    cp = tool("iscsi-inq", info, initiator=OTHER)
    assert cp.returncode != 0
    assert "Failed to log in" in cp.stderr
    # adding the host to the group lets it in, without touching the export
    g = group()
    g.hosts.append(Host("client2", iqn=OTHER, chap_user="client1", chap_secret=SECRET))
    plan = tgtd.set_host_group(g)
    assert plan.add == [f"{info['target_iqn']} acl {OTHER}"] and not plan.remove
    assert tool("iscsi-inq", info, initiator=OTHER).returncode == 0


def test_mutual_chap_target_proves_itself(tgtd, workdir):
    g = group(mutual_chap_user="strata-target", mutual_chap_secret="target-secret1")
    info = tgtd.export("vol1", make_volume(workdir, "vol.raw", 8 * MiB), host_group=g)
    live = tgtd.tgtadm.show_targets()[info["target_iqn"]]
    assert live.outgoing == {"strata-target"} and live.incoming == {"client1"}

    def inq(target_secret):
        env = dict(os.environ, LIBISCSI_CHAP_TARGET_USERNAME="strata-target",
                   LIBISCSI_CHAP_TARGET_PASSWORD=target_secret)
        return subprocess.run(["iscsi-inq", "-i", CLIENT, url(info)], capture_output=True,
                              text=True, timeout=60, env=env)
    assert inq("target-secret1").returncode == 0        # the initiator checks the target
    assert inq("not-the-target").returncode != 0        # an impostor target is refused
    with pytest.raises(InvalidExport):
        tgtd.set_host_group(group(mutual_chap_user="client1", mutual_chap_secret="other-secret-1"))


def test_resize_is_seen_by_the_initiator(tgtd, workdir):
    vol = make_volume(workdir, "vol.raw", 32 * MiB)
    info = tgtd.export("grow", vol, host_group=group())
    assert capacity(info) == 32 * MiB
    os.truncate(vol, 96 * MiB)               # the dataplane grew the volume
    assert tgtd.resize("grow") == 96 * MiB
    assert capacity(info) == 96 * MiB
    assert tgtd.connection_info("grow") == info
    # reconcile alone also notices a grown file
    os.truncate(vol, 128 * MiB)
    assert tgtd.reconcile().update == [f"{info['target_iqn']} lun 1 size"]
    assert capacity(info) == 128 * MiB


def test_reconcile_add_update_remove_sets(tgtd, workdir):
    a = tgtd.export("a", make_volume(workdir, "a.raw", 4 * MiB), host_group=group())
    b = tgtd.export("b", make_volume(workdir, "b.raw", 4 * MiB), read_only=True,
                    host_group=group())
    assert (a["lun"], b["lun"]) == (1, 2) and a["target_iqn"] == b["target_iqn"]
    live = tgtd.tgtadm.show_targets()[a["target_iqn"]]
    assert live.luns[2].read_only and not live.luns[1].read_only
    with pytest.raises(ExportExists):
        tgtd.export("a", make_volume(workdir, "c.raw", MiB), host_group=group())
    # somebody removed a LUN behind our back: reconcile puts it back
    tgtd.tgtadm.run("--op", "delete", "--mode", "logicalunit", "--tid", str(live.tid),
                    "--lun", "1")
    plan = tgtd.reconcile()
    assert plan.add == [f"{a['target_iqn']} lun 1 {os.path.realpath(workdir)}/a.raw"]
    tgtd.unexport("a")
    tgtd.unexport("b")
    assert tgtd.tgtadm.show_targets() == {}
    assert tgtd.tgtadm.show_accounts() == set()


def test_open_export_and_restart_reapplies(tgtd, workdir):
    info = tgtd.export("open", make_volume(workdir, "vol.raw", 4 * MiB))
    assert info["target_iqn"].endswith(":any")
    assert tool("iscsi-inq", info, initiator=OTHER, user=None).returncode == 0
    tgtd.stop()
    tgtd.start()
    assert tool("iscsi-inq", info, initiator=OTHER, user=None).returncode == 0
    with pytest.raises(InvalidExport):
        tgtd.export("q", make_volume(workdir, "q.raw", MiB), qos=QosLimits(bps_read=1))


def test_a_restarted_plane_adopts_its_running_tgtd(tgtd, workdir):
    from services.block.transports.iscsi import TgtdTarget
    info = tgtd.export("vol1", make_volume(workdir, "vol.raw", 8 * MiB), host_group=group())
    again = TgtdTarget(tgtd.state_dir, portal_host=tgtd.portal_host,
                       portal_port=tgtd.portal_port)
    assert again.control_port == tgtd.control_port       # found in the record
    again.start()                                          # adopts, does not start a second
    assert again.health()["running"] and again.connection_info("vol1") == info
    assert again.plan().empty()
    assert tool("iscsi-inq", info).returncode == 0


@pytest.mark.parametrize("address", ["ALL", "127.0.0.0/8", "0.0.0.0/0", "*", "0.0.0.0"])
def test_a_wildcard_host_address_never_opens_a_group_target(tgtd, workdir, address):
    # issue 34: a host whose address was ALL bound tgtd's ACL ALL to its group's target
    members = HostGroup("hg1", hosts=[Host("client1", iqn=CLIENT)])
    info = tgtd.export("vol1", make_volume(workdir, "vol.raw", 8 * MiB), host_group=members)
    assert tool("iscsi-inq", info, user=None).returncode == 0              # a member
    assert tool("iscsi-inq", info, initiator=OTHER, user=None).returncode != 0  # outside
    wide = HostGroup("hg1", hosts=[*members.hosts, Host("anyone", address=address)])
    with pytest.raises(InvalidExport, match="allow_any"):
        tgtd.set_host_group(wide)
    with pytest.raises(InvalidExport, match="allow_any"):
        tgtd.export("vol2", make_volume(workdir, "vol2.raw", MiB), host_group=wide)
    live = tgtd.tgtadm.show_targets()[info["target_iqn"]]
    assert live.acl_addresses == set() and live.acl_names == {CLIENT}
    cp = tool("iscsi-inq", info, initiator=OTHER, user=None)
    assert cp.returncode != 0 and "Failed to log in" in cp.stderr


@pytest.mark.parametrize("name", ["ALL", "iqn.2026-01.io.strata.test:*", "iqn.a iqn.b"])
def test_a_wildcard_initiator_name_is_refused(tgtd, workdir, name):
    with pytest.raises(InvalidExport, match="allow_any"):
        tgtd.set_host_group(HostGroup("hg1", hosts=[Host("anyone", iqn=name)]))


def test_an_address_outside_the_group_is_refused(tgtd, workdir):
    # the initiator connects from 127.0.0.1; the group admits 127.0.0.2 only
    elsewhere = HostGroup("hg1", hosts=[Host("elsewhere", address="127.0.0.2")])
    info = tgtd.export("vol1", make_volume(workdir, "vol.raw", 8 * MiB), host_group=elsewhere)
    cp = tool("iscsi-inq", info, initiator=OTHER, user=None)
    assert cp.returncode != 0 and "Failed to log in" in cp.stderr
    tgtd.set_host_group(HostGroup("hg1", hosts=[Host("here", address="127.0.0.1")]))
    assert tool("iscsi-inq", info, initiator=OTHER, user=None).returncode == 0


def test_a_wildcard_left_in_an_old_record_stays_closed(tgtd, workdir):
    # a record written before hosts were checked: the wildcard is left out of the ACL
    info = tgtd.export("vol1", make_volume(workdir, "vol.raw", 8 * MiB),
                       host_group=HostGroup("hg1", hosts=[Host("client1", iqn=CLIENT)]))
    tgtd._groups["hg1"]["hosts"].append({"name": "anyone", "iqn": None, "nqn": None,
                                         "address": "ALL", "chap_user": None,
                                         "chap_secret": None})
    tgtd.reconcile()
    assert tool("iscsi-inq", info, user=None).returncode == 0
    assert tool("iscsi-inq", info, initiator=OTHER, user=None).returncode != 0


def test_stop_removes_the_control_socket(workdir):
    # issue 34: tgtd left /var/run/tgtd/socket.N (and .lock) behind after every stop
    from services.block.tests.conftest import need
    from services.block.transports.iscsi import TgtdTarget
    from tests.kit import free_port
    need("tgtd", "tgtadm")
    target = TgtdTarget(os.path.join(workdir, "tgtd"), portal_port=free_port())
    target.start()
    files = target.tgtadm.control_files()
    assert files[0].exists()
    target.stop()
    assert not any(f.exists() for f in files), files
