from rest_framework import serializers

from services.storage.models import FileSystem, Pool, Volume
from plane.models import IOBudgetSetting
from services.tiering.models import TierMove


class IOBudgetSerializer(serializers.ModelSerializer):
    class_rates_mbps = serializers.DictField(child=serializers.IntegerField(min_value=0),
                                             required=False)

    class Meta:
        model = IOBudgetSetting
        fields = ["id", "rate_mbps", "burst_mb", "class_rates_mbps", "foreground_share",
                  "updated_at"]
        read_only_fields = ["id", "updated_at"]


class TierMoveSerializer(serializers.ModelSerializer):
    job = serializers.PrimaryKeyRelatedField(read_only=True, allow_null=True)

    class Meta:
        model = TierMove
        fields = ["id", "kind", "name", "from_pool", "to_pool", "state", "error",
                  "bytes_moved", "rounds", "tree_sha256", "job", "created_at", "finished_at"]
        read_only_fields = fields


class TierMoveRequestSerializer(serializers.Serializer):
    filesystem = serializers.SlugRelatedField(slug_field="name",
                                              queryset=FileSystem.objects.all(), required=False)
    volume = serializers.SlugRelatedField(slug_field="name", queryset=Volume.objects.all(),
                                          required=False)
    pool = serializers.SlugRelatedField(slug_field="name", queryset=Pool.objects.all())

    def validate(self, attrs):
        if bool(attrs.get("filesystem")) == bool(attrs.get("volume")):
            raise serializers.ValidationError("Give exactly one of 'filesystem' or 'volume'.")
        return attrs
