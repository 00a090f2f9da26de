from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import AllowAny
from rest_framework.response import Response

from plane.roles import ADMIN, role_of
from plumbing.errors import Forbidden
from services.nodes import cluster, placement
from services.nodes.api import serializers as s
from services.nodes.api.auth import IsNode, NodeCredentialAuthentication
from services.nodes.models import Node


class NodeViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.UpdateModelMixin,
                  mixins.DestroyModelMixin, viewsets.GenericViewSet):
    """The cluster's nodes. Every role reads; admins make join tokens, assign services,
    cordon, drain and remove. A node joins with a join token and heartbeats with its own
    credential (``join/``, ``heartbeat/``, ``self/``)."""

    queryset = Node.objects.all()
    serializer_class = s.NodeSerializer
    lookup_field = "name"
    lookup_value_regex = "[^/]+"
    filterset_fields = ["state", "schedule"]

    def check_permissions(self, request):
        super().check_permissions(request)
        # an undeclared method has no action: DRF answers it 405 after this check
        if request.method not in ("GET", "HEAD", "OPTIONS") and self.action is not None \
                and self.action not in ("join", "heartbeat", "me", "ceph", "vrrp", "s3") \
                and role_of(request.user) != ADMIN:
            raise Forbidden("Only admins manage the cluster's nodes.")

    def perform_destroy(self, node):
        cluster.remove(node.name)

    @extend_schema(request=None, responses=s.NodeSerializer)
    @action(detail=True, methods=["post"])
    def cordon(self, request, name=None):
        """Take no new assignments; what it serves stays."""
        node = cluster.set_schedule(self.get_object().name, Node.Schedule.CORDONED)
        return Response(self.get_serializer(node).data)

    @extend_schema(request=None, responses=s.NodeSerializer)
    @action(detail=True, methods=["post"])
    def uncordon(self, request, name=None):
        """Take assignments again (also after a drain)."""
        node = cluster.set_schedule(self.get_object().name, Node.Schedule.ACTIVE)
        return Response(self.get_serializer(node).data)

    @extend_schema(request=None, responses=dict)
    @action(detail=True, methods=["post"])
    def drain(self, request, name=None):
        """Move what can move to other up nodes; 409 ``holds_local_resources`` naming what
        lives on its local disks, 409 ``no_node_to_take_over``."""
        return Response(cluster.drain(self.get_object().name))

    @extend_schema(request=s.JoinTokenRequestSerializer, responses={201: s.JoinTokenSerializer})
    @action(detail=False, methods=["post"])
    def tokens(self, request):
        """A one-use join token (admins), good for ``ttl`` seconds (default an hour)."""
        body = s.JoinTokenRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        key, row = cluster.create_join_token(body.validated_data.get("ttl"))
        return Response({"token": key, "expires_at": row.expires_at}, status=201)

    @extend_schema(request=s.JoinRequestSerializer, responses={
        201: s.JoinSerializer,
        403: OpenApiResponse(description="join_token_used, join_token_expired or "
                                         "join_token_invalid: the token cannot join a node.")})
    @action(detail=False, methods=["post"], authentication_classes=[],
            permission_classes=[AllowAny])
    def join(self, request):
        """A host joins with a join token (its only credential): 403 ``join_token_used``,
        ``join_token_expired`` or ``join_token_invalid``; 409 ``node_exists`` for a name
        another node holds. The answer (the node's credential, database and Redis URLs) is
        shown once."""
        body = s.JoinRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        v = body.validated_data
        _node, answer = cluster.join(v["token"], v["name"], v["management_address"],
                                     v["data_address"], v["version"])
        return Response(answer, status=201)

    @extend_schema(request=s.HeartbeatRequestSerializer, responses=s.AssignmentSerializer)
    @action(detail=False, methods=["post"], authentication_classes=[
        NodeCredentialAuthentication], permission_classes=[IsNode])
    def heartbeat(self, request):
        """The node's heartbeat (its credential): its daemons' states in; what it should
        run out. 401 ``node_credential_revoked`` once it was removed."""
        body = s.HeartbeatRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        answer = cluster.heartbeat(request.auth, body.validated_data["daemons"],
                                   body.validated_data["version"])
        response = Response(answer)
        response.audited = False   # a heartbeat every 5 s per node is not an operator's act
        return response

    @extend_schema(responses=s.NodeSerializer)
    @action(detail=False, methods=["get"], url_path="self", authentication_classes=[
        NodeCredentialAuthentication], permission_classes=[IsNode])
    def me(self, request):
        """The node the credential belongs to (``strata node join`` checks it is still
        valid)."""
        return Response(self.get_serializer(request.auth).data)

    @extend_schema(responses=s.CephFilesSerializer)
    @action(detail=False, methods=["get"], url_path="self/ceph", authentication_classes=[
        NodeCredentialAuthentication], permission_classes=[IsNode])
    def ceph(self, request):
        """What the node's daemons need to open each Ceph pool: the cluster's ceph.conf, the
        pool's client and its key (node credentials only; the agent writes them 0600 under
        its data directory)."""
        response = Response(cluster.ceph_files(request.auth))
        response.audited = False
        return response

    @extend_schema(responses={200: s.S3ConfigSerializer, 409: OpenApiResponse(
        description="s3_store_not_shared (the buckets are in the file store) or "
                    "not_assigned")})
    @action(detail=False, methods=["get"], url_path="self/s3", authentication_classes=[
        NodeCredentialAuthentication], permission_classes=[IsNode])
    def s3(self, request):
        """The node's S3 gateway config (node credentials only; RADOS store, node assigned
        ``object``): the cluster's access keys, its own cephx client of the S3 pool. The
        agent fetches it again whenever the revision moves (keys change)."""
        response = Response(cluster.s3_gateway_config(request.auth))
        response.audited = False
        return response

    @extend_schema(responses=s.VrrpSerializer)
    @action(detail=False, methods=["get"], url_path="self/vrrp", authentication_classes=[
        NodeCredentialAuthentication], permission_classes=[IsNode])
    def vrrp(self, request):
        """The cluster's nodes with their data and floating addresses (node credentials
        only): the node's keepalived configuration is made from them
        (``plumbing.keepalived``), fetched again whenever the revision moves."""
        response = Response({"members": cluster.vrrp_members()})
        response.audited = False
        return response

    @extend_schema(responses=s.PlacementSerializer)
    @action(detail=False, methods=["get"])
    def placement(self, request):
        """Per file system and volume, the nodes that serve it (its entries): on a local
        pool the node holding the pool, on a Ceph pool every node assigned its service."""
        return Response(placement.entries())
