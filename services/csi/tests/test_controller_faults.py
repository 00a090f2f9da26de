"""The controller's answers when the plane says no: a wrong token, a role that may not
provision, a pool too small, the plane down; topology (the nodes that serve a volume's pool)
and StorageClass QoS parameters it refuses."""
import re

import grpc
import pytest
import requests

from services.csi.proto import csi_pb2
from services.csi.volumes import object_name
from services.csi.tests.plugin import Plugin, local_node
from tests.kit import free_port

pytestmark = pytest.mark.root

Mode = csi_pb2.VolumeCapability.AccessMode.Mode
GiB = 1 << 30


def mount_cap(mode=Mode.MULTI_NODE_MULTI_WRITER):
    return csi_pb2.VolumeCapability(mount=csi_pb2.VolumeCapability.MountVolume(),
                                    access_mode=csi_pb2.VolumeCapability.AccessMode(mode=mode))


def create(stub, name, size=64 << 20, token=None, **params):
    return stub.CreateVolume(csi_pb2.CreateVolumeRequest(
        name=name, capacity_range=csi_pb2.CapacityRange(required_bytes=size),
        volume_capabilities=[mount_cap()], parameters={"protocol": "nfs", **params},
        secrets={"token": token} if token else {}), timeout=60)


def code_of(call) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as err:
        call()
    return err.value.code()


def viewer_token(app) -> str:
    """A token of a new viewer (signs in to the console as it, then asks for a token)."""
    creds = app.credentials
    admin = {"Authorization": f"Token {creds['token']}"}
    r = requests.post(f"{app.url}/api/v1/users/", headers=admin, timeout=30,
                      json={"username": "kube", "password": "Kube-viewer-2026", "role": "viewer"})
    assert r.status_code == 201, r.text
    with requests.Session() as web:
        page = web.get(f"{app.url}/login/", timeout=10)
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        web.post(f"{app.url}/login/", headers={"Referer": f"{app.url}/login/"}, timeout=10,
                 data={"csrfmiddlewaretoken": csrf, "username": "kube",
                       "password": "Kube-viewer-2026", "next": "/"})
        r = web.post(f"{app.url}/api/v1/tokens/", timeout=10,
                     headers={"X-CSRFToken": web.cookies["csrftoken"],
                              "Referer": f"{app.url}/api/v1/"})
    assert r.status_code == 201, r.text
    return r.json()["key"]


def test_a_wrong_token_is_unauthenticated_and_a_viewer_may_not_provision(appliance, plugin):
    with plugin.channel() as ch:
        stub = plugin.controller(ch)
        assert code_of(lambda: create(stub, "pvc-bad-token", token="not-a-token")) \
            == grpc.StatusCode.UNAUTHENTICATED
        assert code_of(lambda: create(stub, "pvc-viewer", token=viewer_token(appliance))) \
            == grpc.StatusCode.PERMISSION_DENIED
        # the plugin's own token (the admin's) still provisions, and the volume is there
        vol = create(stub, "pvc-fine").volume
        assert requests.get(f"{appliance.url}/api/v1/filesystems/{vol.volume_id.split('/')[1]}/",
                            headers={"Authorization": f"Token {appliance.credentials['token']}"},
                            timeout=30).json()["quota_bytes"] == 64 << 20
        stub.DeleteVolume(csi_pb2.DeleteVolumeRequest(volume_id=vol.volume_id), timeout=60)


def test_a_capacity_the_pool_cannot_hold_is_resource_exhausted(appliance, plugin):
    with plugin.channel() as ch:
        stub = plugin.controller(ch)
        # the test appliance's pool has 1 GiB
        assert code_of(lambda: create(stub, "pvc-huge", size=100 * GiB)) \
            == grpc.StatusCode.RESOURCE_EXHAUSTED
        free = stub.GetCapacity(csi_pb2.GetCapacityRequest(parameters={"pool": "default"}),
                                timeout=30).available_capacity
        assert 0 < free <= GiB
        assert code_of(lambda: create(stub, "pvc-nowhere", pool="no-such-pool")) \
            == grpc.StatusCode.INVALID_ARGUMENT


def test_topology_is_the_nodes_serving_the_pool(appliance, workdir):
    """A single-host appliance: its one node serves every pool. A volume asked for that node
    is made and accessible from it; one asked for another node cannot be made."""
    creds = appliance.credentials
    here = local_node(creds["api_url"], creds["token"])
    plug = Plugin(workdir, creds["api_url"], creds["token"], node_id=here).start()
    key = "topology.strata.io/node"
    try:
        with plug.channel() as ch:
            stub, node = plug.controller(ch), plug.node(ch)
            caps = plug.identity(ch).GetPluginCapabilities(
                csi_pb2.GetPluginCapabilitiesRequest(), timeout=30).capabilities
            assert any(c.service.type == c.service.VOLUME_ACCESSIBILITY_CONSTRAINTS
                       for c in caps)
            mine = node.NodeGetInfo(csi_pb2.NodeGetInfoRequest(), timeout=30).accessible_topology
            assert dict(mine.segments) == {key: here}

            def ask(name, requisite, preferred=(), **params):
                return stub.CreateVolume(csi_pb2.CreateVolumeRequest(
                    name=name, capacity_range=csi_pb2.CapacityRange(required_bytes=16 << 20),
                    volume_capabilities=[mount_cap()], parameters={"protocol": "local", **params},
                    accessibility_requirements=csi_pb2.TopologyRequirement(
                        requisite=[csi_pb2.Topology(segments=s) for s in requisite],
                        preferred=[csi_pb2.Topology(segments=s) for s in preferred])),
                    timeout=60).volume

            vol = ask("pvc-topo", [{key: "elsewhere"}, {key: here}], [{key: here}])
            assert [dict(t.segments) for t in vol.accessible_topology] == [{key: here}]
            assert vol.volume_context["pool"] == "default"
            stub.DeleteVolume(csi_pb2.DeleteVolumeRequest(volume_id=vol.volume_id), timeout=60)
            assert code_of(lambda: ask("pvc-far", [{key: "elsewhere"}])) \
                == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert code_of(lambda: ask("pvc-gone", [{key: here}], pool="no-such-pool")) \
                == grpc.StatusCode.INVALID_ARGUMENT
            assert code_of(lambda: ask("pvc-zone", [{"topology.kubernetes.io/zone": "a"}])) \
                == grpc.StatusCode.INVALID_ARGUMENT

            def capacity(node_name):
                return stub.GetCapacity(csi_pb2.GetCapacityRequest(
                    parameters={"pool": "default"},
                    accessible_topology=csi_pb2.Topology(segments={key: node_name})),
                    timeout=30).available_capacity
            assert capacity(here) > 0 and capacity("elsewhere") == 0
    finally:
        plug.stop()
    names = [f["name"] for f in requests.get(
        f"{appliance.url}/api/v1/filesystems/", timeout=30,
        headers={"Authorization": f"Token {creds['token']}"}).json()["results"]]
    assert object_name("pvc-far") not in names  # nothing half-made


@pytest.mark.parametrize("params, named", [
    ({"protocol": "nvmeof", "qos_iops_total": "fast"}, "qos_iops_total"),
    ({"protocol": "nvmeof", "qos_bps_read": "-5"}, "qos_bps_read"),
    ({"protocol": "nvmeof", "qos_iops_total": "100", "qos_iops_read": "50"}, "qos_iops_total"),
    ({"protocol": "iscsi", "qos_bps_total": "1048576"}, "qos_bps_total"),
])
def test_bad_qos_parameters_are_invalid_argument_naming_them(plugin, params, named):
    with plugin.channel() as ch:
        with pytest.raises(grpc.RpcError) as err:
            plugin.controller(ch).CreateVolume(csi_pb2.CreateVolumeRequest(
                name="pvc-qos-bad", capacity_range=csi_pb2.CapacityRange(required_bytes=16 << 20),
                volume_capabilities=[csi_pb2.VolumeCapability(
                    block=csi_pb2.VolumeCapability.BlockVolume(),
                    access_mode=csi_pb2.VolumeCapability.AccessMode(
                        mode=Mode.SINGLE_NODE_WRITER))],
                parameters=params), timeout=60)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert named in err.value.details()


def test_the_plane_down_is_unavailable(workdir):
    plug = Plugin(workdir, f"http://127.0.0.1:{free_port()}", "some-token").start()
    try:
        with plug.channel() as ch:
            assert code_of(lambda: create(plug.controller(ch), "pvc-down")) \
                == grpc.StatusCode.UNAVAILABLE
            assert code_of(lambda: plug.identity(ch).Probe(csi_pb2.ProbeRequest(), timeout=30)) \
                == grpc.StatusCode.FAILED_PRECONDITION
    finally:
        plug.stop()
