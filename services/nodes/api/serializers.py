from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from services.nodes import cluster, placement
from plumbing.errors import Invalid
from services.nodes.models import Node


class NodeSerializer(serializers.ModelSerializer):
    """A node: ``state`` joining/up/down (down once no heartbeat came for 15 s, also before
    the periodic check wrote it), ``schedule`` active/cordoned/drained, the services the plane
    assigned it, its daemons as it reported them (all ``unknown`` while it is down)."""

    state = serializers.SerializerMethodField()
    daemons = serializers.SerializerMethodField()
    heartbeat_age_s = serializers.SerializerMethodField()
    serves = serializers.SerializerMethodField()

    class Meta:
        model = Node
        fields = ["name", "state", "schedule", "management_address", "data_address",
                  "floating_address", "services", "options", "daemons", "serves", "version", "local",
                  "last_heartbeat", "heartbeat_age_s", "joined_at"]
        read_only_fields = [f for f in fields
                            if f not in ("services", "options", "floating_address")]
        # uniqueness is checked by validate_floating_address (a 400 naming the holder)
        validators = []
        extra_kwargs = {"floating_address": {
            "validators": [], "help_text": "an IPv4 address with its prefix (10.0.0.101/24) that keepalived "
                         "keeps on this node and moves to a survivor when it dies; '' for "
                         "none; unique in the cluster"}}

    @extend_schema_field(serializers.ChoiceField(choices=Node.State.choices))
    def get_state(self, node):
        return cluster.state_of(node)

    @extend_schema_field(serializers.DictField())
    def get_daemons(self, node):
        return cluster.daemons_of(node)

    @extend_schema_field(serializers.FloatField(allow_null=True))
    def get_heartbeat_age_s(self, node):
        from django.utils import timezone  # noqa: PLC0415  (only here)
        if node.last_heartbeat is None:
            return None
        return round((timezone.now() - node.last_heartbeat).total_seconds(), 1)

    @extend_schema_field(serializers.DictField(child=serializers.ListField(
        child=serializers.CharField())))
    def get_serves(self, node):
        """The file systems and volumes its daemons serve (services.nodes.placement)."""
        return placement.serves(node)

    def validate_services(self, value):
        value = cluster.validate_services(value)
        if self.instance is not None:   # a Conflict (409), not a field error
            cluster.refuse_services(self.instance, value)
        return value

    def validate_floating_address(self, value):
        try:
            return cluster.validate_floating_address(value, self.instance)
        except Invalid as exc:
            raise serializers.ValidationError(exc.message.split(": ", 1)[1]) from None

    def update(self, node, validated_data):
        floating = validated_data.pop("floating_address", None)
        node = super().update(node, validated_data)
        if floating is not None:    # after the save: its bump must not be written over
            cluster.set_floating_address(node, floating)
        return node

    def validate_options(self, value):
        if not isinstance(value, dict):
            raise serializers.ValidationError("an object of `strata up` options")
        return value


class JoinTokenRequestSerializer(serializers.Serializer):
    ttl = serializers.IntegerField(required=False, min_value=1, max_value=cluster.MAX_TOKEN_TTL,
                                   help_text="seconds the token is good for (default 3600)")


class JoinTokenSerializer(serializers.Serializer):
    token = serializers.CharField(help_text="shown once; the plane keeps its digest only")
    expires_at = serializers.DateTimeField()


class JoinRequestSerializer(serializers.Serializer):
    token = serializers.CharField()
    name = serializers.CharField(max_length=63)
    management_address = serializers.CharField(max_length=255)
    data_address = serializers.CharField(max_length=255)
    version = serializers.CharField(required=False, default="", allow_blank=True,
                                    max_length=64)


class JoinSerializer(serializers.Serializer):
    name = serializers.CharField()
    credential = serializers.CharField(help_text="the node's own API token, shown once")
    database_url = serializers.CharField()
    redis_url = serializers.CharField()
    secret_key = serializers.CharField(help_text="the plane's sealing key (sealed secrets)")


class HeartbeatRequestSerializer(serializers.Serializer):
    daemons = serializers.DictField(required=False, default=dict)
    version = serializers.CharField(required=False, default="", allow_blank=True,
                                    max_length=64)


class AssignmentSerializer(serializers.Serializer):
    name = serializers.CharField()
    services = serializers.ListField(child=serializers.CharField())
    options = serializers.DictField()
    schedule = serializers.CharField()
    heartbeat_every = serializers.FloatField()
    revision = serializers.IntegerField(help_text="moves when what the services serve "
                                                  "changes: the node reconciles again")


class VrrpMemberSerializer(serializers.Serializer):
    name = serializers.CharField()
    data_address = serializers.CharField()
    floating_address = serializers.CharField(help_text="'' when the node has none")


class VrrpSerializer(serializers.Serializer):
    members = VrrpMemberSerializer(many=True, help_text="every node of the cluster, by name")


class CephPoolFilesSerializer(serializers.Serializer):
    client = serializers.CharField()
    conf = serializers.CharField(help_text="the cluster's ceph.conf (text)")
    keyring = serializers.CharField(help_text="the client's key (text)")
    filesystem = serializers.CharField(help_text="the CephFS of its file systems ('' while "
                                                 "it has none)")
    root = serializers.CharField(help_text="the pool's directory in that CephFS")


class CephFilesSerializer(serializers.Serializer):
    pools = serializers.DictField(child=CephPoolFilesSerializer())
    errors = serializers.DictField(child=serializers.CharField())


class S3ConfigSerializer(serializers.Serializer):
    config = serializers.DictField(help_text="the node's S3 gateway config (its access keys "
                                   "and sealing keys; the agent fills in its Ceph files' "
                                   "paths and writes it 0600)")


class EntrySerializer(serializers.Serializer):
    name = serializers.CharField()
    pool = serializers.CharField()
    driver = serializers.CharField()
    nodes = serializers.ListField(child=serializers.CharField())


class PoolPlacementSerializer(serializers.Serializer):
    name = serializers.CharField()
    driver = serializers.CharField()
    file = serializers.ListField(child=serializers.CharField(),
                                 help_text="nodes that would serve a file system on it")
    block = serializers.ListField(child=serializers.CharField(),
                                  help_text="nodes that would serve a volume on it")


class PlacementSerializer(serializers.Serializer):
    filesystems = EntrySerializer(many=True)
    volumes = EntrySerializer(many=True)
    pools = PoolPlacementSerializer(many=True)
