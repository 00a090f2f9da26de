"""What a CreateVolume costs: the controller's calls to the plane (counted on the REST
client's session), and CreateVolume to staged and published on this host (``local``
protocol), median of 5. The figures are printed; the call counts are asserted."""
import statistics
import time

import grpc
import pytest

from services.csi.controller import Controller
from services.csi.node import Node
from services.csi.plane import PlaneConfig
from services.csi.proto import csi_pb2
from services.csi.tests.test_controller_faults import mount_cap
from services.csi.tests.test_node_local import stage_and_publish, unpublish_and_unstage

pytestmark = pytest.mark.root


class CountingPlane(PlaneConfig):
    """The plugin's plane configuration, counting the HTTP requests of its clients."""

    calls: list

    def client(self, secrets=None):
        rest = super().client(secrets)
        send = rest.session.request

        def counted(method, url, **kw):
            self.calls.append((method, url.split("/api/v1/")[1]))
            return send(method, url, **kw)
        rest.session.request = counted
        return rest


class Context:
    """Enough of grpc.ServicerContext for a servicer called in-process."""

    def abort(self, code, details):
        raise grpc.RpcError(f"{code.name}: {details}")


class InProcess:
    """A servicer called like a gRPC stub (``stub.Method(request, timeout=...)``)."""

    def __init__(self, servicer, context):
        self.servicer, self.context = servicer, context

    def __getattr__(self, name):
        method = getattr(self.servicer, name)
        return lambda request, timeout=None: method(request, self.context)


def test_calls_per_create_volume_and_time_to_published(appliance, workdir):
    creds = appliance.credentials
    plane = CountingPlane(creds["api_url"], creds["token"])
    plane.calls = []
    ctx = Context()
    ctl, node = Controller(plane), InProcess(Node("measure", "127.0.0.1"), ctx)
    request = dict(capacity_range=csi_pb2.CapacityRange(required_bytes=16 << 20),
                   volume_capabilities=[mount_cap()], parameters={"protocol": "local"})

    vol = ctl.CreateVolume(csi_pb2.CreateVolumeRequest(name="pvc-m-0", **request), ctx).volume
    first = [m for m, _ in plane.calls]
    plane.calls.clear()
    ctl.CreateVolume(csi_pb2.CreateVolumeRequest(name="pvc-m-0", **request), ctx)
    retried = [m for m, _ in plane.calls]
    # the pools' placement (the volume's topology), not a file system, not a volume: create it
    assert first == ["GET", "GET", "GET", "POST"]
    assert retried == ["GET", "GET"]        # a retry: the placement, and it finds it
    ctl.DeleteVolume(csi_pb2.DeleteVolumeRequest(volume_id=vol.volume_id), ctx)

    seconds = []
    for i in range(5):
        staging, target = workdir / f"s{i}", workdir / f"t{i}"
        staging.mkdir()
        start = time.monotonic()
        vol = ctl.CreateVolume(csi_pb2.CreateVolumeRequest(name=f"pvc-m-{i + 1}", **request),
                               ctx).volume
        stage_and_publish(node, vol, staging, target)
        seconds.append(time.monotonic() - start)
        (target / "x").write_bytes(b"x")
        unpublish_and_unstage(node, vol, staging, target)
        ctl.DeleteVolume(csi_pb2.DeleteVolumeRequest(volume_id=vol.volume_id), ctx)
    print(f"CreateVolume: {len(first)} plane calls ({len(retried)} on a retry); "
          f"CreateVolume to staged and published (local): median "
          f"{statistics.median(seconds) * 1000:.0f} ms of {[round(s, 3) for s in seconds]}")
