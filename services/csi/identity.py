"""The CSI Identity service: who the plugin is, what it offers, whether it is ready."""
import grpc

from services.csi.errors import CsiError, rpc
from services.csi.proto import csi_pb2, csi_pb2_grpc

NAME = "csi.strata.io"
VERSION = "0.1.0"


class Identity(csi_pb2_grpc.IdentityServicer):
    """``controller``: this process serves the Controller service too (the plugin's
    capabilities say so only then); ``plane``: checked by Probe when given."""

    def __init__(self, plane=None, controller: bool = True):
        self.plane, self.controller = plane, controller

    @rpc
    def GetPluginInfo(self, request, context):
        return csi_pb2.GetPluginInfoResponse(name=NAME, vendor_version=VERSION)

    @rpc
    def GetPluginCapabilities(self, request, context):
        cap = csi_pb2.PluginCapability
        caps = []
        if self.controller:
            caps.append(cap(service=cap.Service(type=cap.Service.CONTROLLER_SERVICE)))
            caps.append(cap(service=cap.Service(
                type=cap.Service.VOLUME_ACCESSIBILITY_CONSTRAINTS)))
            caps.append(cap(volume_expansion=cap.VolumeExpansion(
                type=cap.VolumeExpansion.ONLINE)))
        return csi_pb2.GetPluginCapabilitiesResponse(capabilities=caps)

    @rpc
    def Probe(self, request, context):
        if self.plane is not None and not self.plane.reachable():
            raise CsiError(grpc.StatusCode.FAILED_PRECONDITION,
                           f"the Strata plane at {self.plane.url} does not answer")
        return csi_pb2.ProbeResponse(ready={"value": True})
